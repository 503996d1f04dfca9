//! Byte-stream transports under the iWARP engine (the LLP of RFC 5044): kernel TCP sockets and an
//! in-memory link with fault injection.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{eventfd, EventfdFlags};

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

/// Wakes a connection driver that sleeps in [`Transport::wait_readable_or_woken`]: an eventfd
/// the driver polls together with its socket, so work posted by the application goes out at
/// once instead of after the driver's idle timeout.
#[derive(Debug)]
pub struct Wakeup {
    fd: OwnedFd,
}

impl Wakeup {
    /// A fresh, non-blocking eventfd.
    pub fn new() -> io::Result<Wakeup> {
        let fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        Ok(Wakeup { fd })
    }

    /// Make the waiter's poll return (cheap; repeated notifications coalesce).
    pub fn notify(&self) {
        // EAGAIN only when the counter is saturated, which still leaves it readable.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Clear pending notifications (after waking).
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut b);
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
