//! [`Wakeup`]: the eventfd through which the verbs layer wakes the connection driver that moves a
//! QP's bytes. It lives below both: `verbs` owns one per QP (posting kicks it) and `transport`
//! waits on it together with the socket, so neither layer needs the other for it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{eventfd, EventfdFlags};

/// Wakes a connection driver that sleeps in [`crate::transport::Transport::wait_readable_or_woken`]: an eventfd
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
