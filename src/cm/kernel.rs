//! The kernel-TCP backend of [`super`]: connections over [`KernelTcp`] sockets (or any other
//! [`Transport`] byte stream, e.g. the in-memory link), each moved by a driver thread.
//!
//! - [`connect`] / [`connect_tcp`]: the initiator's byte stream, then `cm::connect_with`.
//! - `TcpListener`: a listening socket whose acceptor thread (`listen.rs`) runs the
//!   MPA startups concurrently and hands out completed requests.
//! - The driver thread (`drive`): receive -> engine -> the shared pump step (`pump.rs`) ->
//!   the QP's [`DriverHook`], if one is attached -> transmit, sleeping on the socket and the
//!   QP's [`crate::wake::Wakeup`] when idle. (The DPDK dataplane runs the same engine and pump
//!   in its poll-mode workers instead.)

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::{listen, pump, CmError, ConnParam, ConnRequest, Events, ListenConfig, Pending};
use crate::conn::{ConnEvent, Connection};
use crate::mpa::{MpaConfig, Negotiated, Startup, StartupError, StartupEvent};
use crate::transport::kernel::KernelTcp;
use crate::transport::Transport;
use crate::verbs::{DriverHook, HookPoll, Pd, Qp, QpInitAttr, QpShared, QpSlot};

/// Connect `qp` over an already-open byte stream (kernel TCP, in-memory link, ...), as the MPA
/// initiator. Returns what MPA negotiated once the connection is established.
pub fn connect(
    transport: Box<dyn Transport>,
    qp: &Qp,
    param: &ConnParam,
) -> Result<Negotiated, CmError> {
    let emss = transport.emss();
    super::connect_with(qp, param, emss, move |qp| Ok(spawn_driver(transport, qp)))
}

/// Connect `qp` to `addr` over kernel TCP (`rdma_resolve_addr` + `rdma_connect`).
pub fn connect_tcp(addr: SocketAddr, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError> {
    let t = KernelTcp::connect(addr, param.nodelay)?;
    connect(Box::new(t), qp, param)
}

/// [`connect_tcp`] with RFC 6581 §10 fallback: if the peer closes on our enhanced request and
/// `param.fallback_rev1` is set, connect again with MPA rev 1 on a new TCP connection and a new
/// QP made like `attr`. Returns the QP that ended up connected.
pub fn connect_tcp_with_fallback(
    addr: SocketAddr,
    pd: &Pd,
    attr: &QpInitAttr,
    param: &ConnParam,
) -> Result<(Qp, Negotiated), CmError> {
    let qp = Qp::new(pd, attr);
    match connect_tcp(addr, &qp, param) {
        Err(CmError::Startup(StartupError::EnhancedRefused)) if param.fallback_rev1 => {
            log::info!("cm: {addr} refused the enhanced MPA request; retrying with MPA rev 1");
            let p = ConnParam {
                revision: 1,
                enhanced: false,
                fallback_rev1: false,
                ..param.clone()
            };
            let qp = Qp::new(pd, attr);
            let n = connect_tcp(addr, &qp, &p)?;
            Ok((qp, n))
        }
        r => r.map(|n| (qp, n)),
    }
}

/// The kernel-TCP listener behind [`super::Listener::bind`] and [`super::Net::listen`]
/// (`rdma_listen`).
///
/// An acceptor thread (see [`ListenConfig`]) runs every MPA startup concurrently, each with a
/// deadline (RFC 5044 §7.1.2 item 10) and under a cap on startups in progress, so a peer that
/// is slow or silent during setup never delays another; `get_request` hands out the next
/// completed MPA Request. Dropping the listener stops the thread and closes the connections
/// still in startup or not yet taken.
pub(super) struct TcpListener {
    addr: SocketAddr,
    shared: Arc<listen::Shared>,
    ready: Receiver<ConnRequest>,
    thread: Option<thread::JoinHandle<()>>,
}

impl TcpListener {
    /// Listen on `addr` (port 0 picks a free port) with `cfg` (MPA startup deadline, cap on
    /// startups in progress, TCP_NODELAY).
    pub(super) fn bind(addr: SocketAddr, cfg: ListenConfig) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(listen::Shared {
            stop: AtomicBool::new(false),
            wake: crate::wake::Wakeup::new()?,
        });
        let (tx, rx) = crossbeam_channel::bounded(cfg.max_startups.max(1));
        let sh = shared.clone();
        let (nodelay, keepalive) = (cfg.nodelay, cfg.keepalive_ms);
        let probes = cfg.keepalive_probes;
        // A completed Request's stream becomes this listener's kind of pending connection.
        let make: listen::MakeRequest = Box::new(move |stream, peer, raw, remote| {
            let t = KernelTcp::from_stream(stream, nodelay).map_err(|e| e.to_string())?;
            if keepalive > 0 {
                t.set_keepalive(Duration::from_millis(keepalive), probes)
                    .map_err(|e| e.to_string())?;
            }
            Ok(ConnRequest::new(
                peer,
                raw,
                Some(remote),
                Box::new(KernelPending {
                    transport: Box::new(t),
                }),
            ))
        });
        let thread = thread::Builder::new()
            .name("dpwarp-listen".into())
            .spawn(move || listen::run(listener, cfg, sh, tx, make))?;
        Ok(TcpListener {
            addr,
            shared,
            ready: rx,
            thread: Some(thread),
        })
    }
}

impl super::ListenerBackend for TcpListener {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn get_request(&self, timeout: Duration) -> Result<ConnRequest, CmError> {
        match self.ready.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(CmError::Timeout),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(CmError::Closed),
        }
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The kernel-TCP backend of [`super::Net`].
pub(super) struct KernelNet;

impl super::NetBackend for KernelNet {
    fn listen(
        &self,
        addr: SocketAddr,
        cfg: Option<&ListenConfig>,
    ) -> Result<super::Listener, CmError> {
        let cfg = cfg.cloned().unwrap_or_default();
        Ok(super::Listener::new(Box::new(TcpListener::bind(
            addr, cfg,
        )?)))
    }

    fn connect(&self, addr: SocketAddr, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError> {
        connect_tcp(addr, qp, param)
    }

    fn name(&self) -> &'static str {
        "kernel"
    }
}

/// A kernel-TCP connection request's stream, waiting for accept or reject.
struct KernelPending {
    transport: Box<dyn Transport>,
}

impl Pending for KernelPending {
    fn emss(&self) -> usize {
        self.transport.emss()
    }

    fn start(self: Box<Self>, qp: &Qp) -> Result<Events, CmError> {
        Ok(spawn_driver(self.transport, qp))
    }

    fn reject(mut self: Box<Self>, frame: Vec<u8>) -> Result<(), CmError> {
        write_all(&mut *self.transport, &frame, Duration::from_secs(2))?;
        let _ = self.transport.shutdown();
        Ok(())
    }
}

/// Read an MPA Request from `transport` (the passive side of a stream that is already open,
/// e.g. the in-memory link): [`ConnRequest::read`].
pub(super) fn read_request(
    mut transport: Box<dyn Transport>,
    timeout: Duration,
    rev0_permissive: bool,
) -> Result<ConnRequest, CmError> {
    let now = Instant::now();
    let deadline = now + timeout;
    // A probe responder parses the Request; the real one is built at accept time with the
    // application's parameters and fed the same bytes.
    let probe_cfg = MpaConfig {
        rev0_permissive,
        ..MpaConfig::default()
    };
    let mut probe = Startup::responder(probe_cfg, now);
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(ev) = probe.poll_event() {
            return match ev {
                StartupEvent::Request(peer) => Ok(ConnRequest::new(
                    peer,
                    raw,
                    None,
                    Box::new(KernelPending { transport }),
                )),
                StartupEvent::Failed(e) => {
                    let _ = transport.shutdown();
                    Err(CmError::Startup(e))
                }
                _ => Err(CmError::Closed),
            };
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = transport.shutdown();
            return Err(CmError::Timeout);
        }
        match transport.recv(&mut buf) {
            Ok(0) => {
                probe.on_eof();
                if probe.poll_event().is_none() {
                    return Err(CmError::Closed);
                }
                return Err(CmError::Startup(StartupError::PeerClosed));
            }
            Ok(n) => {
                let used = probe.on_bytes(&buf[..n], now).min(n);
                raw.extend_from_slice(&buf[..used]);
                if used < n {
                    // Bytes after the Request before we replied: RFC 5044 §7.1.2 forbids
                    // them; the real responder sees them too and fails the startup.
                    raw.extend_from_slice(&buf[used..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                transport.wait_readable(Duration::from_millis(5))?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn write_all(t: &mut dyn Transport, mut buf: &[u8], timeout: Duration) -> Result<(), CmError> {
    let deadline = Instant::now() + timeout;
    while !buf.is_empty() {
        match t.send(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(CmError::Timeout);
                }
                thread::sleep(Duration::from_micros(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Start the thread that moves the QP's bytes over `transport` (its connection is installed
/// already, [`super::install`]); returns how to wait for its events.
fn spawn_driver(transport: Box<dyn Transport>, qp: &Qp) -> Events {
    let (ev_tx, ev_rx) = crossbeam_channel::bounded(64);
    let sh = qp.shared.clone();
    sh.make_wake();
    sh.sleepy_driver
        .store(true, std::sync::atomic::Ordering::SeqCst);
    sh.accept_hooks();
    thread::Builder::new()
        .name("dpwarp-qp".into())
        .spawn(move || drive(transport, sh, ev_tx))
        .expect("spawn QP driver thread");
    Box::new(move |left| ev_rx.recv_timeout(left).ok())
}

/// Run `f` on the live connection.
fn with_conn<R>(sh: &QpShared, f: impl FnOnce(&mut Connection) -> R) -> Option<R> {
    match &mut *sh.lock() {
        QpSlot::Live(c) => {
            // Posted work first, so that receive buffers are in place for what `f` brings in.
            sh.drain_posts(c);
            Some(f(c))
        }
        QpSlot::Init => None,
    }
}

/// The driver loop: rx -> engine -> completions/events -> hook -> tx, backing off when idle.
fn drive(t: Box<dyn Transport>, sh: Arc<QpShared>, events: Sender<ConnEvent>) {
    sh.mark_driver_thread();
    let mut hooks = Hooks::default();
    drive_loop(t, &sh, &events, &mut hooks);
    sh.set_closed();
    // After `set_closed`: a hook dropped here may own the last handle of the QP, whose drop
    // would otherwise wait for this very thread to close the connection.
    let late = sh.close_hooks();
    for h in hooks.active.into_iter().chain(late) {
        h.closed();
    }
    drop(hooks.retired);
}

/// The driver's [`DriverHook`]: the one it runs, and one that panicked (kept until the
/// connection has closed, see [`drive`]: its state may be half-updated, and its drop is not
/// run while the connection it served is still up).
#[derive(Default)]
struct Hooks {
    active: Option<Box<dyn DriverHook>>,
    retired: Option<Box<dyn DriverHook>>,
}

impl Hooks {
    /// One pass of the attached hook (taking it from the QP first if it just arrived); true if
    /// it did anything. A finished hook is dropped here and now, and the next pass takes the
    /// next one attached (a handle of this QP it owned does not wait here for the close:
    /// `QpShared::mark_driver_thread`). A hook that panics is retired and the connection
    /// closed, as a panicking application thread would leave it unserved.
    fn poll(&mut self, sh: &QpShared) -> bool {
        if self.active.is_none() && self.retired.is_none() {
            self.active = sh.take_hook();
        }
        let Some(h) = self.active.as_mut() else {
            return false;
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.poll()));
        match r {
            Ok(HookPoll::Idle) => false,
            Ok(HookPoll::Worked) => true,
            Ok(HookPoll::Finished) => {
                drop(self.active.take());
                true
            }
            Err(_) => {
                log::error!("transport: the QP's driver hook panicked; disconnecting");
                sh.disconnect.store(true, Ordering::Release);
                self.retired = self.active.take();
                true
            }
        }
    }
}

/// [`drive`]'s loop, until the stream is closed (the caller then marks the QP closed).
fn drive_loop(
    mut t: Box<dyn Transport>,
    sh: &Arc<QpShared>,
    events: &Sender<ConnEvent>,
    hooks: &mut Hooks,
) {
    let mut rbuf = vec![0u8; 256 * 1024];
    let mut out: Vec<u8> = Vec::with_capacity(256 * 1024);
    let mut out_pos = 0usize;
    let mut eof = false;
    let mut broken = false;
    let mut last_progress = Instant::now();
    let mut closing_since: Option<Instant> = None;
    loop {
        let mut progressed = false;
        // Posts after this point keep the driver from sleeping at the end of the iteration.
        let seq_at_start = sh.post_seq.load(Ordering::SeqCst);
        let now = Instant::now();
        // Receive whatever the stream has (bounded per iteration so tx is not starved).
        if !eof && !broken {
            for _ in 0..8 {
                match t.recv(&mut rbuf) {
                    Ok(0) => {
                        eof = true;
                        with_conn(sh, |c| c.on_eof());
                        break;
                    }
                    Ok(n) => {
                        progressed = true;
                        with_conn(sh, |c| c.on_bytes(&rbuf[..n], now));
                        if n < rbuf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("transport: receive failed: {e}");
                        broken = true;
                        with_conn(sh, |c| c.on_eof());
                        break;
                    }
                }
            }
        }
        // The pump step (timers, transmit, completions and events, close decision).
        let (close, conn_closing) = with_conn(sh, |c| {
            pump::timers(c, now);
            if out_pos == out.len() {
                out.clear();
                out_pos = 0;
                c.poll_transmit(&mut out);
            }
            pump::events(sh, c, |ev| {
                let _ = events.try_send(ev);
            });
            (pump::close_wanted(sh, c, 1), c.should_close())
        })
        .unwrap_or((true, true));
        // The hook handles the completions just queued, outside the connection's lock: what
        // it posts goes through the post rings (and `kick`, so this loop does not sleep before
        // its next pass takes them).
        progressed |= hooks.poll(sh);
        if !broken {
            while out_pos < out.len() {
                match t.send(&out[out_pos..]) {
                    Ok(n) => {
                        out_pos += n;
                        progressed = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("transport: send failed: {e}");
                        broken = true;
                        break;
                    }
                }
            }
        }
        let mut drained = out_pos == out.len();
        if close && drained && !broken && !eof {
            // What the connection queued while earlier bytes waited for the socket (a
            // TERMINATE, RFC 5040 §7.1; FPDUs posted before the disconnect) goes out before
            // the FIN, for at most CLOSE_FLUSH once closing began.
            out.clear();
            out_pos = 0;
            with_conn(sh, |c| c.poll_transmit(&mut out));
            if !out.is_empty() {
                let since = *closing_since.get_or_insert_with(Instant::now);
                if since.elapsed() < CLOSE_FLUSH {
                    drained = false;
                } else {
                    log::warn!(
                        "transport: closing with {} octets not sent (the peer did not take them within {CLOSE_FLUSH:?})",
                        out.len()
                    );
                }
            }
        }
        if broken || eof || (close && drained) {
            if !broken {
                let _ = t.shutdown();
                if !eof && conn_closing {
                    // A TERMINATE went out (or came in, or startup failed): everything we
                    // wrote is in the kernel's send queue, followed by our FIN. Closing the
                    // socket while the peer's bytes sit unread would make the kernel answer
                    // with a RST and drop that queue, TERMINATE included (RFC 5040 §7.1: it
                    // MUST reach the peer); so read and discard until the peer's FIN, for at
                    // most CLOSE_DRAIN.
                    drain_until_eof(&mut *t, &mut rbuf, CLOSE_DRAIN);
                }
            }
            with_conn(sh, |c| {
                pump::finish(sh, c, |ev| {
                    let _ = events.try_send(ev);
                })
            });
            return;
        }
        if progressed {
            last_progress = Instant::now();
        } else if last_progress.elapsed() < SPIN_ALONE {
            std::hint::spin_loop();
        } else if last_progress.elapsed() < SPIN_WINDOW {
            // Spin, but let a thread waiting for this CPU run: see `SPIN_ALONE`.
            thread::yield_now();
        } else {
            // Sleep until the peer sends, the application posts or wakes the hook (the QP's
            // eventfd) or the startup timer fires; with output still queued (send buffer full)
            // only briefly, as writability is not waited for.
            let mut nap = if out_pos < out.len() {
                Duration::from_micros(200)
            } else {
                Duration::from_millis(5)
            };
            if let Some(at) = with_conn(sh, |c| c.poll_timeout()).flatten() {
                nap = nap.min(at.saturating_duration_since(Instant::now()));
            }
            sh.sleeping.store(true, Ordering::SeqCst);
            if sh.post_seq.load(Ordering::SeqCst) == seq_at_start {
                let r = match sh.wake() {
                    Some(w) => t.wait_readable_or_woken(nap, w),
                    None => t.wait_readable(nap.min(Duration::from_micros(200))),
                };
                if let Err(e) = r {
                    log::debug!("transport: wait failed: {e}");
                    thread::sleep(Duration::from_micros(200));
                }
            }
            sh.sleeping.store(false, Ordering::SeqCst);
            if let Some(w) = sh.wake() {
                w.drain();
            }
        }
    }
}

/// How long a driver with nothing to do spins before it sleeps in poll(2): an answer within
/// this time is taken without a thread wake-up.
const SPIN_WINDOW: Duration = Duration::from_micros(50);

/// How long of [`SPIN_WINDOW`] a driver spins without yielding the CPU: the gaps of a stream
/// between two reads; after that it yields on every idle pass. Driver threads are not pinned
/// (one per QP, on a machine the transport shares), and the kernel often places the two
/// drivers of a loopback connection on one CPU, where a driver that never yielded would keep
/// its peer's driver off it for its whole window and turn a ping-pong into 50 us turns.
/// Yielding from the first idle pass would cost a stream on two CPUs its batching, so a
/// short stretch is spun first (docs/rpc.md "Over kernel TCP: spins that yield").
const SPIN_ALONE: Duration = Duration::from_micros(2);

/// How long a closing driver keeps sending what its connection still queues (see `drive`).
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// How long a driver closing after a TERMINATE waits for the peer's FIN (see [`drain_until_eof`]).
const CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// After our FIN: read and discard until the peer's FIN, an error or `limit`.
fn drain_until_eof(t: &mut dyn Transport, buf: &mut [u8], limit: Duration) {
    let end = Instant::now() + limit;
    loop {
        match t.recv(buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                if t.wait_readable(left.min(Duration::from_millis(50)))
                    .is_err()
                {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}
