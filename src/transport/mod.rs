//! Byte-stream transports under the iWARP engine (the LLP of RFC 5044): kernel TCP sockets and an
//! in-memory link with fault injection.

use std::io;
use std::time::Duration;

/// Re-exported: [`Transport::wait_readable_or_woken`] takes one.
pub use crate::wake::Wakeup;

pub mod kernel;
pub mod memlink;

/// A reliable, ordered, non-blocking byte stream.
pub trait Transport: Send {
    /// Read available bytes; `Ok(0)` is end of stream; `WouldBlock` when nothing is available.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Write some bytes; `WouldBlock` when the send buffer is full.
    fn send(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Close our sending direction (FIN).
    fn shutdown(&mut self) -> io::Result<()>;
    /// The effective maximum segment size (for MULPDU, RFC 5044 App. A); a stream without
    /// segments returns a sensible default (1448).
    fn emss(&self) -> usize {
        1448
    }
    /// Block up to `timeout` for readability (or until woken); may return early.
    fn wait_readable(&mut self, timeout: std::time::Duration) -> io::Result<()>;
    /// Block up to `timeout` until the stream is readable or `wake` is notified (the application
    /// posted work). The default cannot wait on `wake`, so it waits at most 200 µs.
    fn wait_readable_or_woken(&mut self, timeout: Duration, wake: &Wakeup) -> io::Result<()> {
        let _ = wake;
        self.wait_readable(timeout.min(Duration::from_micros(200)))
    }
}
