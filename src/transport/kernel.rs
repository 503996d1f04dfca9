//! Kernel TCP sockets as the iWARP LLP (RFC 5044 §1: MPA runs over a TCP byte stream).
//!
//! The socket is non-blocking; the connection driver (src/cm) polls it with [`Transport::recv`] /
//! [`Transport::send`] and parks in [`Transport::wait_readable`] (poll(2)) when idle.
//!
//! **Nagle.** TCP_NODELAY is on by default. RFC 5044 Appendix A.2 explains why: an MPA sender
//! wants each FPDU to leave in its own segment, promptly, so the receiver can place it on arrival;
//! Nagle's algorithm holds back a short FPDU (a Send of a few bytes, a Read Request, a Terminate)
//! until earlier data is acknowledged, adding a delayed-ACK round trip (up to ~40 ms on Linux) to
//! small operations. `nodelay = false` keeps Nagle for bulk traffic where coalescing small FPDUs
//! into fewer segments matters more than latency; FPDU boundaries then no longer line up with
//! segment boundaries, which MPA tolerates (the deframer is a stream parser).
//!
//! **EMSS.** [`KernelTcp::emss`] reads TCP_MAXSEG from the connected socket, so the framer can size
//! MULPDU so an FPDU fits one segment (RFC 5044 §8 and App. A).
//!
//! Socket options go through `socket2` and readiness through `rustix::event::poll`, so this module
//! needs no `unsafe`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::SockRef;

use super::{Transport, Wakeup};

/// The EMSS assumed when the kernel does not report one (Ethernet MTU 1500 minus IPv4, TCP and the
/// 12-byte timestamp option), the same default as [`Transport::emss`].
const DEFAULT_EMSS: usize = 1448;

/// Block in poll(2) until `fd` shows any of `events` or `timeout` passes (EINTR returns early,
/// which the contract allows).
fn poll_fd(fd: impl AsFd, events: PollFlags, timeout: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, events)];
    // Clamp so the conversion cannot overflow; a day is far beyond any caller's timeout.
    let t = timeout.min(Duration::from_secs(86_400));
    let ts = Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    };
    match poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A connected, non-blocking kernel TCP stream carrying one iWARP connection.
#[derive(Debug)]
pub struct KernelTcp {
    stream: TcpStream,
    emss: usize,
}

impl KernelTcp {
    /// Connect to `addr` (blocking until the TCP handshake completes), then switch to
    /// non-blocking. `nodelay` sets TCP_NODELAY (see the module docs: RFC 5044 App. A.2).
    pub fn connect(addr: SocketAddr, nodelay: bool) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        Self::from_stream(stream, nodelay)
    }

    /// Wrap an already connected stream (e.g. from [`KernelListener::accept_timeout`]).
    pub fn from_stream(stream: TcpStream, nodelay: bool) -> io::Result<Self> {
        stream.set_nodelay(nodelay)?;
        stream.set_nonblocking(true)?;
        let emss = match SockRef::from(&stream).tcp_mss() {
            Ok(m) if m > 0 => m as usize,
            Ok(_) => DEFAULT_EMSS,
            Err(e) => {
                log::warn!("transport: TCP_MAXSEG unavailable ({e}); assuming EMSS {DEFAULT_EMSS}");
                DEFAULT_EMSS
            }
        };
        log::debug!(
            "transport: kernel TCP {:?} -> {:?}, nodelay={nodelay}, emss={emss}",
            stream.local_addr().ok(),
            stream.peer_addr().ok()
        );
        Ok(KernelTcp { stream, emss })
    }

    /// TCP keep-alives (SO_KEEPALIVE): the first after `interval` idle, then one every
    /// `interval`; the kernel resets the connection after `probes` unanswered (TCP_KEEPIDLE,
    /// TCP_KEEPINTVL, TCP_KEEPCNT; RFC 9293 3.8.4).
    pub fn set_keepalive(&self, interval: std::time::Duration, probes: u32) -> io::Result<()> {
        let ka = socket2::TcpKeepalive::new()
            .with_time(interval)
            .with_interval(interval)
            .with_retries(probes);
        SockRef::from(&self.stream).set_tcp_keepalive(&ka)
    }

    /// The underlying stream (addresses, extra socket options).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Whether TCP_NODELAY is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.stream.nodelay()
    }

    /// Block up to `timeout` until the socket can take more bytes (after `send` gave
    /// `WouldBlock`); may return early.
    pub fn wait_writable(&mut self, timeout: Duration) -> io::Result<()> {
        poll_fd(&self.stream, PollFlags::OUT, timeout).map(|_| ())
    }
}

impl Transport for KernelTcp {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn shutdown(&mut self) -> io::Result<()> {
        match self.stream.shutdown(Shutdown::Write) {
            // Already reset or closed by the peer: our direction is closed either way.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        }
    }

    fn emss(&self) -> usize {
        self.emss
    }

    fn wait_readable(&mut self, timeout: Duration) -> io::Result<()> {
        // IN covers data and FIN; ERR/HUP are always reported and make the next recv say why.
        poll_fd(&self.stream, PollFlags::IN, timeout).map(|_| ())
    }

    fn wait_readable_or_woken(&mut self, timeout: Duration, wake: &Wakeup) -> io::Result<()> {
        let mut fds = [
            PollFd::new(&self.stream, PollFlags::IN),
            PollFd::from_borrowed_fd(wake.fd(), PollFlags::IN),
        ];
        let t = timeout.min(Duration::from_secs(86_400));
        let ts = Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A listening kernel TCP socket (the passive side of `rdma_listen`).
#[derive(Debug)]
pub struct KernelListener {
    listener: TcpListener,
}

impl KernelListener {
    /// Listen on `addr`; port 0 picks a free port (see [`KernelListener::local_addr`]).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        // Non-blocking so accept_timeout can bound its wait with poll(2).
        listener.set_nonblocking(true)?;
        Ok(KernelListener { listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Wait up to `timeout` for one incoming connection; `Ok(None)` on timeout. The stream is
    /// returned in blocking mode, as `accept(2)` gives it; [`KernelTcp::from_stream`] sets it up.
    pub fn accept_timeout(&self, timeout: Duration) -> io::Result<Option<TcpStream>> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    log::debug!("transport: accepted TCP connection from {peer}");
                    stream.set_nonblocking(false)?;
                    return Ok(Some(stream));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The peer gave up between SYN and accept: not our listener's failure.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            poll_fd(&self.listener, PollFlags::IN, left)?;
        }
    }
}
