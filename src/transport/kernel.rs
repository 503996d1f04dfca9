//! TEMP STUB
use std::io; use std::net::{SocketAddr, TcpStream}; use std::time::Duration;
pub struct KernelTcp;
impl KernelTcp { pub fn connect(_a: SocketAddr, _n: bool) -> io::Result<Self> { todo!() } pub fn from_stream(_s: TcpStream, _n: bool) -> io::Result<Self> { todo!() } }
impl super::Transport for KernelTcp { fn recv(&mut self, _b: &mut [u8]) -> io::Result<usize> { todo!() } fn send(&mut self, _b: &[u8]) -> io::Result<usize> { todo!() } fn shutdown(&mut self) -> io::Result<()> { todo!() } fn wait_readable(&mut self, _t: Duration) -> io::Result<()> { todo!() } }
pub struct KernelListener;
impl KernelListener { pub fn bind(_a: SocketAddr) -> io::Result<Self> { todo!() } pub fn local_addr(&self) -> io::Result<SocketAddr> { todo!() } pub fn accept_timeout(&self, _t: Duration) -> io::Result<Option<TcpStream>> { todo!() } }
