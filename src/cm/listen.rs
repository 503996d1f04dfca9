//! The kernel-TCP listener's acceptor: one thread per kernel [`super::Listener`] that accepts TCP
//! connections and runs every MPA startup concurrently, so that a peer that connects and then
//! sends nothing, part of its Request, or its Request one byte at a time never holds up anyone
//! else's connection setup.
//!
//! Every accepted socket is non-blocking and gets its own probe (the sans-IO responder of
//! [`crate::mpa::Startup`], whose timer is the startup deadline) and its own buffer, bounded
//! by the largest MPA Request (20 + 512 octets, RFC 5044 §7.1) plus one read. One poll(2) over
//! the listening socket, every probe's socket and a stop eventfd wakes the thread; it sleeps no
//! longer than the earliest deadline.
//!
//! - **Deadline** ([`ListenConfig::mpa_timeout`], default 5 s as Linux siw): a connection whose
//!   whole MPA Request has not arrived by then is closed. RFC 5044 §7.1.2 item 10: "MPA
//!   implementations SHOULD implement a reasonable timeout while waiting for the entire set of
//!   startup frames; this prevents certain denial-of-service attacks."
//! - **Cap** ([`ListenConfig::max_startups`], default 256): with that many startups in progress
//!   a new connection is closed at once; so are requests beyond [`ListenConfig::max_startups`]
//!   waiting for `get_request`.
//! - Every connection dropped for one of these reasons, or for a malformed Request, gets one
//!   `warn` log line naming the peer and why.
//!
//! A completed Request goes to a bounded channel that [`super::Listener::get_request`] reads:
//! it returns the next completed request and never waits on a peer that is not ready.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::kernel::KernelPending;
use super::ConnRequest;
use crate::mpa::{MpaConfig, Startup, StartupEvent};
use crate::transport::kernel::KernelTcp;
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
    /// without a reply (RFC 5044 §7.1.1). See [`MpaConfig::rev0_permissive`].
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

/// The largest MPA Request frame: 20 octets of header and 512 of private data (RFC 5044 §7.1).
const MAX_REQUEST: usize = 20 + 512;
/// How long the acceptor backs off after `accept` failed for want of resources (EMFILE ...).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// One MPA startup in progress.
struct Probe {
    stream: TcpStream,
    peer: SocketAddr,
    startup: Startup,
    raw: Vec<u8>,
}

/// What became of a probe after its socket was read.
enum Outcome {
    Pending,
    Request(ConnRequest),
    Drop(String),
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
) {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut probes: Vec<Probe> = Vec::new();
    let mut buf = vec![0u8; MAX_REQUEST + 1024];
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
                        if probes.len() >= cfg.max_startups {
                            log::warn!(
                                "cm: listener {local}: closing {peer}: {} MPA startups in progress (max_startups)",
                                probes.len()
                            );
                            drop(stream);
                            continue;
                        }
                        if let Err(e) = stream.set_nonblocking(true) {
                            log::warn!("cm: listener {local}: {peer}: {e}; closing");
                            continue;
                        }
                        log::debug!("cm: listener {local}: accepted {peer}");
                        let mpa = MpaConfig {
                            timeout: cfg.mpa_timeout,
                            rev0_permissive: cfg.mpa_rev0_permissive,
                            ..MpaConfig::default()
                        };
                        probes.push(Probe {
                            stream,
                            peer,
                            startup: Startup::responder(mpa, now),
                            raw: Vec::new(),
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
                            log::warn!("cm: listener {local}: accept: {e}");
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
            let outcome = advance(&mut probes[i], &mut buf, now, &cfg);
            match outcome {
                Outcome::Pending => i += 1,
                Outcome::Drop(why) => {
                    let p = probes.swap_remove(i);
                    log::warn!(
                        "cm: listener {local}: closing {} during MPA startup: {why}",
                        p.peer
                    );
                }
                Outcome::Request(req) => {
                    let p = probes.swap_remove(i);
                    match ready.try_send(req) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) => log::warn!(
                            "cm: listener {local}: closing {}: {} requests wait for get_request (max_startups)",
                            p.peer,
                            ready.len()
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
            if let Some(t) = p.startup.poll_timeout() {
                nap = nap.min(t.saturating_duration_since(now));
            }
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
                log::warn!("cm: listener {local}: poll: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        drop(fds);
        shared.wake.drain();
    }
}

/// Read what `p`'s socket has into its startup engine (never more than one Request's worth
/// buffered) and check its deadline.
fn advance(p: &mut Probe, buf: &mut [u8], now: Instant, cfg: &ListenConfig) -> Outcome {
    loop {
        if let Some(ev) = p.startup.poll_event() {
            return match ev {
                StartupEvent::Request(peer) => {
                    let stream = match p.stream.try_clone() {
                        Ok(s) => s,
                        Err(e) => return Outcome::Drop(e.to_string()),
                    };
                    let t = KernelTcp::from_stream(stream, cfg.nodelay).and_then(|t| {
                        if cfg.keepalive_ms > 0 {
                            t.set_keepalive(
                                Duration::from_millis(cfg.keepalive_ms),
                                cfg.keepalive_probes,
                            )?;
                        }
                        Ok(t)
                    });
                    match t {
                        Ok(t) => Outcome::Request(ConnRequest::new(
                            peer,
                            std::mem::take(&mut p.raw),
                            Some(p.peer),
                            Box::new(KernelPending {
                                transport: Box::new(t),
                            }),
                        )),
                        Err(e) => Outcome::Drop(e.to_string()),
                    }
                }
                StartupEvent::Failed(e) => Outcome::Drop(format!("malformed MPA Request: {e}")),
                _ => Outcome::Drop("unexpected startup event".into()),
            };
        }
        if p.startup.poll_timeout().is_some_and(|t| t <= now) {
            return Outcome::Drop(format!(
                "no complete MPA Request within the deadline ({} octets received)",
                p.raw.len()
            ));
        }
        // Never more than a Request and one read buffer: a peer cannot make us hold more.
        let room = (MAX_REQUEST + buf.len())
            .saturating_sub(p.raw.len())
            .min(buf.len());
        if room == 0 {
            return Outcome::Drop("more octets than an MPA Request".into());
        }
        match p.stream.read(&mut buf[..room]) {
            Ok(0) => {
                return Outcome::Drop(format!(
                    "peer closed before its MPA Request was complete ({} octets received)",
                    p.raw.len()
                ))
            }
            Ok(n) => {
                // Bytes after the Request (forbidden before the Reply, RFC 5044 §7.1.2) are
                // kept: the real responder sees them at accept time and fails the startup.
                let _ = p.startup.on_bytes(&buf[..n], now);
                p.raw.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Nothing more now; the deadline is checked again on the next pass.
                if p.startup.poll_timeout().is_some_and(|t| t <= now) {
                    continue;
                }
                return Outcome::Pending;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Outcome::Drop(e.to_string()),
        }
    }
}
