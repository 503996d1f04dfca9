//! TEMP STUB
use std::io; use std::time::Duration;
#[derive(Default)] pub struct FaultConfig;
pub struct MemEnd;
pub fn pair(_c: FaultConfig) -> (MemEnd, MemEnd) { todo!() }
impl super::Transport for MemEnd { fn recv(&mut self, _b: &mut [u8]) -> io::Result<usize> { todo!() } fn send(&mut self, _b: &[u8]) -> io::Result<usize> { todo!() } fn shutdown(&mut self) -> io::Result<()> { todo!() } fn wait_readable(&mut self, _t: Duration) -> io::Result<()> { todo!() } }
