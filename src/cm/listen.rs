//! The kernel-TCP listener's acceptor: one thread per kernel [`super::Listener`] that accepts TCP
//! connections and runs every MPA startup concurrently, so that a peer that connects and then
//! sends nothing, part of its Request, or its Request one byte at a time never holds up anyone
//! else's connection setup.
//!
//! Every accepted socket is non-blocking and gets its own [`MpaProbe`] (`cm::acceptor`: the
//! deadline, cap, bound, Rev 0 policy and log lines both listeners share). One poll(2) over the
//! listening socket, every probe's socket and a stop eventfd wakes the thread; it sleeps no
//! longer than the earliest deadline.
//!
//! A completed Request goes, as a [`ConnRequest`] the listener's `make` builds from the stream,
//! to a bounded channel that [`super::Listener::get_request`] reads: it returns the next
//! completed request and never waits on a peer that is not ready.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::acceptor::{self, MpaProbe, ProbeOutcome, READ_SLACK};
use super::ConnRequest;
use crate::mpa::PeerRequest;
use crate::wake::Wakeup;

/// Settings of a listener's MPA startups ([`super::Net::listen_with`], [`super::Listener::bind_with`]).
/// Without one ([`super::Net::listen`]) kernel TCP uses the defaults and the DPDK dataplane its
/// config's `[tcp]` table (`mpa_timeout_ms`, `max_startups`); `nodelay` applies to kernel TCP only.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// How long an accepted TCP connection may take to deliver its whole MPA Request before it
    /// is closed (RFC 5044 §7.1.2 item 10). Default 5 s.
    pub mpa_timeout: Duration,
    /// MPA startups in progress at most; a connection beyond it is closed at once (with a log
    /// line). Completed requests not yet taken by `get_request` are bounded by the same
    /// number. Default 256.
    pub max_startups: usize,
    /// TCP_NODELAY on accepted connections (default true; RFC 5044 App. A.2).
    pub nodelay: bool,
    /// TCP keep-alives on accepted kernel-TCP connections (RFC 9293 3.8.4): after this many
    /// ms idle and this many between them, the kernel asks the peer for an ACK, and resets
    /// the connection (its QP then closes) after `keepalive_probes` unanswered: a client that
    /// vanished while its connection was idle. 0 (the default): off, as the RFC asks. The
    /// DPDK dataplane's are its config's `[tcp] keepalive_ms` / `keepalive_probes`.
    pub keepalive_ms: u64,
    /// Unanswered keep-alives before the kernel gives up (TCP_KEEPCNT; default 3).
    pub keepalive_probes: u32,
    /// RFC 5044 App. C permissive mode (default false): also take MPA Rev 0 Requests from RDMA
    /// Consortium peers (M=1, C=1, S=0), which `ConnRequest::accept` answers with a Rev 0 Reply,
    /// then DDP/RDMAP version 0 with markers and CRC both ways. Off, a Rev 0 Request is closed
    /// without a reply (RFC 5044 §7.1.1). See [`crate::mpa::startup::MpaConfig::rev0_permissive`].
    pub mpa_rev0_permissive: bool,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            mpa_timeout: Duration::from_secs(5),
            max_startups: 256,
            nodelay: true,
            keepalive_ms: 0,
            keepalive_probes: 3,
            mpa_rev0_permissive: false,
        }
    }
}

/// How the acceptor's owner turns a stream whose MPA Request is complete into a request for
/// the application (the stream, the Request, every octet received, the peer's address).
pub(super) type MakeRequest =
    Box<dyn Fn(TcpStream, PeerRequest, Vec<u8>, SocketAddr) -> Result<ConnRequest, String> + Send>;

/// How long the acceptor backs off after `accept` failed for want of resources (EMFILE ...).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// One MPA startup in progress.
struct Probe {
    stream: TcpStream,
    peer: SocketAddr,
    probe: MpaProbe,
}

/// State shared by the listener handle and its acceptor thread.
pub(super) struct Shared {
    pub(super) stop: AtomicBool,
    pub(super) wake: Wakeup,
}

/// The acceptor thread's loop; returns when `shared.stop` is set or the listener's handle (the
/// receiving end of `ready`) is gone.
pub(super) fn run(
    listener: TcpListener,
    cfg: ListenConfig,
    shared: Arc<Shared>,
    ready: Sender<ConnRequest>,
    make: MakeRequest,
) {
    let name = acceptor::listener_name("cm: listener", listener.local_addr().ok());
    let mut probes: Vec<Probe> = Vec::new();
    let mut buf = vec![0u8; READ_SLACK];
    let mut backoff_until: Option<Instant> = None;
    let mut last_accept_error: Option<Instant> = None;
    while !shared.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        // New connections.
        if backoff_until.is_none_or(|t| now >= t) {
            backoff_until = None;
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        if let Err(why) = acceptor::admit(probes.len(), &cfg) {
                            acceptor::log_refusal(&name, peer, &why);
                            drop(stream);
                            continue;
                        }
                        if let Err(e) = stream.set_nonblocking(true) {
                            acceptor::log_refusal(&name, peer, &e.to_string());
                            continue;
                        }
                        log::debug!("{name}: accepted {peer}");
                        probes.push(Probe {
                            stream,
                            peer,
                            probe: MpaProbe::new(&cfg, now),
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                        ) => {}
                    Err(e) => {
                        // Out of descriptors or memory: try again shortly; say so once a second.
                        if last_accept_error
                            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(1))
                        {
                            log::warn!("{name}: accept: {e}");
                            last_accept_error = Some(now);
                        }
                        backoff_until = Some(now + ACCEPT_BACKOFF);
                        break;
                    }
                }
            }
        }
        // Every probe: read what it has, then check its deadline.
        let now = Instant::now();
        let mut i = 0;
        while i < probes.len() {
            match advance(&mut probes[i], &mut buf, now) {
                ProbeOutcome::Pending => i += 1,
                ProbeOutcome::Drop(why) => {
                    let p = probes.swap_remove(i);
                    acceptor::log_refusal(&name, p.peer, &why);
                }
                ProbeOutcome::Request { peer, raw } => {
                    let p = probes.swap_remove(i);
                    let req = match make(p.stream, peer, raw, p.peer) {
                        Ok(r) => r,
                        Err(why) => {
                            acceptor::log_refusal(&name, p.peer, &why);
                            continue;
                        }
                    };
                    match ready.try_send(req) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) => acceptor::log_refusal(
                            &name,
                            p.peer,
                            &format!(
                                "{} requests wait for get_request (max_startups)",
                                ready.len()
                            ),
                        ),
                        // The listener is gone.
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                }
            }
        }
        // Sleep until a socket or the stop eventfd is readable, or the next deadline.
        let now = Instant::now();
        let mut nap = Duration::from_secs(1);
        for p in &probes {
            nap = nap.min(p.probe.deadline().saturating_duration_since(now));
        }
        if let Some(t) = backoff_until {
            nap = nap.min(t.saturating_duration_since(now));
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(probes.len() + 2);
        fds.push(PollFd::from_borrowed_fd(shared.wake.fd(), PollFlags::IN));
        if backoff_until.is_none() {
            fds.push(PollFd::new(&listener, PollFlags::IN));
        }
        for p in &probes {
            fds.push(PollFd::new(&p.stream, PollFlags::IN));
        }
        // Round up so a deadline a few µs away does not spin.
        let t = nap + Duration::from_micros(500);
        let ts = Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                log::warn!("{name}: poll: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        drop(fds);
        shared.wake.drain();
    }
}

/// Read what `p`'s socket has into its probe (never more than the probe takes) and check its
/// deadline.
fn advance(p: &mut Probe, buf: &mut [u8], now: Instant) -> ProbeOutcome {
    loop {
        let room = p.probe.room().min(buf.len()).max(1);
        match p.stream.read(&mut buf[..room]) {
            Ok(0) => return p.probe.on_closed(),
            Ok(n) => match p.probe.on_bytes(&buf[..n], now) {
                ProbeOutcome::Pending => {}
                done => return done,
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return p.probe.on_time(now),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return ProbeOutcome::Drop(e.to_string()),
        }
    }
}
