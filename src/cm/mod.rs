//! Connection manager, shaped like rdma_cm: `connect` (`rdma_connect`), [`Listener`]
//! (`rdma_listen` + `rdma_get_request`), [`ConnRequest::accept`] / [`ConnRequest::reject`]
//! (`rdma_accept` / `rdma_reject`) with private data, IRD/ORD (`responder_resources` /
//! `initiator_depth`), peer-to-peer RTR choice (RFC 6581 §9.2), CRC and marker preferences
//! (RFC 5044 §7.1).
//!
//! Each connected QP gets a driver: a thread that owns the byte stream, feeds received bytes to
//! the sans-IO [`Connection`], writes what it produces and moves completions to the CQs. (The DPDK
//! dataplane replaces these threads with poll-mode workers running the same engine.)

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::conn::{ConnConfig, ConnEvent, Connection};
use crate::mpa::{MpaConfig, Negotiated, PeerRequest, RtrSet, Startup, StartupError, StartupEvent};
use crate::transport::kernel::KernelTcp;
use crate::transport::Transport;
use crate::verbs::{Pd, Qp, QpInitAttr, QpShared, QpSlot};

mod listen;
pub use listen::ListenConfig;

/// Connection parameters (`rdma_conn_param` plus the iWARP-specific MPA knobs).
#[derive(Debug, Clone)]
pub struct ConnParam {
    /// ULP private data carried in the MPA Request/Reply (<= 508 bytes when enhanced).
    pub private_data: Vec<u8>,
    /// IRD: RDMA Read Requests we serve at once (`responder_resources`), RFC 6581 §9.1.
    pub responder_resources: u16,
    /// ORD: RDMA Reads we may have outstanding (`initiator_depth`), RFC 6581 §9.1.
    pub initiator_depth: u16,
    /// Peer-to-peer mode with these RTR kinds (initiator: offered; responder: supported).
    pub p2p: Option<RtrSet>,
    /// Request CRC32c on FPDUs (default true; false = prefer no CRC, RFC 5044 §4.4).
    pub crc: bool,
    /// Require markers on FPDUs we receive (RFC 5044 §4.3, M bit).
    pub markers: bool,
    /// MPA revision the initiator sends (1 or 2).
    pub revision: u8,
    /// Send RFC 6581 enhanced data (rev 2).
    pub enhanced: bool,
    /// Initiator: retry with MPA rev 1 if the peer closes on an enhanced request (RFC 6581 §10).
    pub fallback_rev1: bool,
    /// Startup timeout.
    pub timeout: Duration,
    /// Kernel TCP: disable Nagle (default true; RFC 5044 App. A.2).
    pub nodelay: bool,
    /// RFC 5044 App. C permissive mode (default false): as initiator, accept an RDMA Consortium
    /// peer's MPA Rev 0 Reply (then DDP/RDMAP version 0, markers and CRC both ways); see
    /// [`MpaConfig::rev0_permissive`]. A listener takes Rev 0 Requests only when told so
    /// (`ListenConfig::mpa_rev0_permissive`); accepting such a request needs nothing here.
    pub mpa_rev0_permissive: bool,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            p2p: None,
            crc: true,
            markers: false,
            revision: 2,
            enhanced: true,
            fallback_rev1: false,
            timeout: Duration::from_secs(5),
            nodelay: true,
            mpa_rev0_permissive: false,
        }
    }
}

impl ConnParam {
    fn mpa(&self) -> MpaConfig {
        MpaConfig {
            revision: self.revision,
            enhanced: self.enhanced && self.revision >= 2,
            crc: self.crc,
            markers: self.markers,
            ird: self.responder_resources,
            ord: self.initiator_depth,
            p2p: self.p2p,
            private_data: self.private_data.clone(),
            fallback_rev1: self.fallback_rev1,
            timeout: self.timeout,
            rev0_permissive: self.mpa_rev0_permissive,
        }
    }

    pub(crate) fn conn_config(&self, qp: &Qp, emss: usize) -> ConnConfig {
        ConnConfig {
            mpa: self.mpa(),
            pd: qp.shared.pd.id(),
            sq_depth: qp.shared.cap.max_send_wr,
            rq_depth: qp.shared.cap.max_recv_wr,
            emss,
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// The byte stream failed (connect, bind, accept, send or receive on the transport).
    #[error("transport: {0}")]
    Io(#[from] io::Error),
    /// Initiator: the responder answered with an MPA Reply with R=1 (RFC 5044 §7.1.2); its private
    /// data and, if the Reject was enhanced, its IRD/ORD are passed up (RFC 6581 §9.1).
    #[error("rejected by peer ({} bytes of private data)", private_data.len())]
    Rejected {
        /// The responder's ULP private data from the Reject frame (RFC 5044 §7.1.4).
        private_data: Vec<u8>,
        /// The responder's IRD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ird: Option<u16>,
        /// The responder's ORD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ord: Option<u16>,
    },
    /// MPA startup failed (RFC 5044 §7.1, RFC 6581); see [`StartupError`].
    #[error("MPA startup: {0}")]
    Startup(StartupError),
    /// A TERMINATE was sent or received before the connection was established (e.g. RFC 6581
    /// §9.1 insufficient IRD, §9.2 no matching RTR); `Qp::terminate_cause` tells which.
    #[error("connection terminated during setup")]
    Terminated,
    /// A step did not finish in time (TCP accept, MPA Request, establishment, sending a Reject).
    #[error("timed out")]
    Timeout,
    /// The stream closed before the connection was established.
    #[error("stream closed")]
    Closed,
    /// The QP was already handed to `connect` / `accept` once; a QP is connected at most once,
    /// even if that attempt failed.
    #[error("the QP was already connected")]
    QpInUse,
}

/// Connect `qp` over an already-open byte stream (kernel TCP, in-memory link, ...), as the MPA
/// initiator. Returns what MPA negotiated once the connection is established.
pub fn connect(
    transport: Box<dyn Transport>,
    qp: &Qp,
    param: &ConnParam,
) -> Result<Negotiated, CmError> {
    if !qp.claim() {
        return Err(CmError::QpInUse);
    }
    let cfg = param.conn_config(qp, transport.emss());
    let conn = Connection::initiator(cfg, qp.shared.pd.memory().clone(), Instant::now());
    let events = spawn_driver(transport, conn, qp);
    wait_established(qp, &events, param.timeout)
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

/// A kernel-TCP listener for incoming iWARP connections (`rdma_listen`).
///
/// An acceptor thread (see [`ListenConfig`]) runs every MPA startup concurrently, each with a
/// deadline (RFC 5044 §7.1.2 item 10) and under a cap on startups in progress, so a peer that
/// is slow or silent during setup never delays another; [`Listener::get_request`] hands out
/// the next completed MPA Request. Dropping the listener stops the thread and closes the
/// connections still in startup or not yet taken.
pub struct Listener {
    addr: SocketAddr,
    shared: Arc<listen::Shared>,
    ready: Receiver<ConnRequest>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Listener {
    /// Listen on `addr` (port 0 picks a free port) with the default [`ListenConfig`].
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, ListenConfig::default())
    }

    /// Listen on `addr` with `cfg` (MPA startup deadline, cap on startups in progress).
    pub fn bind_with(addr: SocketAddr, cfg: ListenConfig) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(listen::Shared {
            stop: AtomicBool::new(false),
            wake: crate::wake::Wakeup::new()?,
        });
        let (tx, rx) = crossbeam_channel::bounded(cfg.max_startups.max(1));
        let sh = shared.clone();
        let thread = thread::Builder::new()
            .name("dpwarp-listen".into())
            .spawn(move || listen::run(listener, cfg, sh, tx))?;
        Ok(Listener {
            addr,
            shared,
            ready: rx,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }

    /// The next connection whose MPA Request has fully arrived (`rdma_get_request`), waiting up
    /// to `timeout` for one; connections still in their startup never hold this up.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnRequest, CmError> {
        match self.ready.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(CmError::Timeout),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(CmError::Closed),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An incoming connection whose MPA Request has arrived (`RDMA_CM_EVENT_CONNECT_REQUEST`).
pub struct ConnRequest {
    transport: Box<dyn Transport>,
    /// The Request frame's bytes, replayed into the real responder on accept/reject.
    raw: Vec<u8>,
    /// What the initiator asked for.
    pub peer: PeerRequest,
}

impl ConnRequest {
    /// Read an MPA Request from `transport` (the passive side of a stream).
    pub fn read(transport: Box<dyn Transport>, timeout: Duration) -> Result<Self, CmError> {
        Self::read_with(transport, timeout, false)
    }

    /// [`ConnRequest::read`], also taking an RDMAC peer's MPA Rev 0 Request when
    /// `rev0_permissive` is set (RFC 5044 App. C, [`MpaConfig::rev0_permissive`]).
    pub fn read_with(
        mut transport: Box<dyn Transport>,
        timeout: Duration,
        rev0_permissive: bool,
    ) -> Result<Self, CmError> {
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
                    StartupEvent::Request(peer) => Ok(ConnRequest {
                        transport,
                        raw,
                        peer,
                    }),
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

    /// Accept (`rdma_accept`): reply with `param` (IRD/ORD, p2p support, private data) and start
    /// the QP. Returns once established (after the RTR in peer-to-peer mode).
    pub fn accept(self, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError> {
        if !qp.claim() {
            return Err(CmError::QpInUse);
        }
        let mut cfg = param.conn_config(qp, self.transport.emss());
        // A Rev 0 Request got here only through a permissive listener (RFC 5044 App. C).
        cfg.mpa.rev0_permissive |= self.peer.revision == 0;
        let now = Instant::now();
        let mut conn = Connection::responder(cfg, qp.shared.pd.memory().clone(), now);
        conn.on_bytes(&self.raw, now);
        match conn.poll_event() {
            Some(ConnEvent::Request(_)) => conn.accept(None),
            Some(ConnEvent::Failed(e)) => return Err(CmError::Startup(e)),
            _ => return Err(CmError::Closed),
        }
        let events = spawn_driver(self.transport, conn, qp);
        wait_established(qp, &events, param.timeout)
    }

    /// Reject (`rdma_reject`) with private data: an MPA Reply with R=1 goes out and the stream is
    /// closed (RFC 5044 §7.1.2).
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        let out = reject_frame(&self.raw, private_data);
        write_all(&mut *self.transport, &out, Duration::from_secs(2))?;
        let _ = self.transport.shutdown();
        Ok(())
    }
}

/// The MPA Reply with R=1 (RFC 5044 §7.1.2) answering the Request in `raw`, carrying
/// `private_data`: a throw-away responder is fed the Request and told to reject it.
pub(crate) fn reject_frame(raw: &[u8], private_data: &[u8]) -> Vec<u8> {
    let now = Instant::now();
    let mut conn = Connection::responder(
        ConnConfig {
            // The Request was validated by the listener; a Rev 0 one only if it was permissive.
            mpa: MpaConfig {
                rev0_permissive: true,
                ..MpaConfig::default()
            },
            ..ConnConfig::default()
        },
        crate::rdma::MemoryTable::new(),
        now,
    );
    conn.on_bytes(raw, now);
    let _ = conn.poll_event();
    conn.reject(private_data.to_vec());
    let mut out = Vec::new();
    conn.poll_transmit(&mut out);
    out
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

pub(crate) fn wait_established(
    qp: &Qp,
    events: &Receiver<ConnEvent>,
    timeout: Duration,
) -> Result<Negotiated, CmError> {
    wait_established_by(qp, &mut |left| events.recv_timeout(left).ok(), timeout)
}

/// [`wait_established`] with the events taken by `recv(time left)` (None: none came in that
/// time); the DPDK dataplane's driven mode polls its worker while it waits.
pub(crate) fn wait_established_by(
    qp: &Qp,
    recv: &mut dyn FnMut(Duration) -> Option<ConnEvent>,
    timeout: Duration,
) -> Result<Negotiated, CmError> {
    let deadline = Instant::now() + timeout + Duration::from_millis(500);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = match recv(left) {
            Some(ev) => ev,
            None => {
                qp.disconnect();
                return Err(CmError::Timeout);
            }
        };
        match ev {
            ConnEvent::Established(negotiated) => return Ok(negotiated),
            ConnEvent::Rejected {
                private_data,
                peer_ird,
                peer_ord,
            } => {
                return Err(CmError::Rejected {
                    private_data,
                    peer_ird,
                    peer_ord,
                })
            }
            ConnEvent::Failed(e) => return Err(CmError::Startup(e)),
            ConnEvent::TerminateReceived(_) | ConnEvent::TerminateSent(_) => {
                return Err(CmError::Terminated)
            }
            ConnEvent::Closed => return Err(CmError::Closed),
            ConnEvent::Request(_) => {}
        }
    }
}

/// Make `conn` the QP's live connection (replaying work posted in INIT) and start the thread
/// that moves its bytes over `transport`.
fn spawn_driver(transport: Box<dyn Transport>, conn: Connection, qp: &Qp) -> Receiver<ConnEvent> {
    install(conn, qp);
    let (ev_tx, ev_rx) = crossbeam_channel::bounded(64);
    let sh = qp.shared.clone();
    thread::Builder::new()
        .name("dpwarp-qp".into())
        .spawn(move || drive(transport, sh, ev_tx))
        .expect("spawn QP driver thread");
    ev_rx
}

/// Make `conn` the QP's live connection, handing it the work posted in INIT (also used by the DPDK
/// dataplane, whose workers then drive the connection).
pub(crate) fn install(mut conn: Connection, qp: &Qp) {
    let mut slot = qp.shared.lock();
    qp.shared.drain_posts(&mut conn);
    *slot = QpSlot::Live(Box::new(conn));
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

/// The driver loop: rx -> engine -> completions/events -> tx, backing off when idle.
fn drive(mut t: Box<dyn Transport>, sh: Arc<QpShared>, events: Sender<ConnEvent>) {
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
                        with_conn(&sh, |c| c.on_eof());
                        break;
                    }
                    Ok(n) => {
                        progressed = true;
                        with_conn(&sh, |c| c.on_bytes(&rbuf[..n], now));
                        if n < rbuf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("transport: receive failed: {e}");
                        broken = true;
                        with_conn(&sh, |c| c.on_eof());
                        break;
                    }
                }
            }
        }
        let disconnect = sh.disconnect.load(Ordering::Acquire);
        let close;
        let conn_closing;
        {
            // Every application handle is gone: nobody can post or reap any more.
            let orphaned = Arc::strong_count(&sh) == 1;
            let should_close = with_conn(&sh, |c| {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
                if out_pos == out.len() {
                    out.clear();
                    out_pos = 0;
                    c.poll_transmit(&mut out);
                }
                sh.reap(c);
                while let Some(ev) = c.poll_event() {
                    sh.note_event(&ev);
                    let _ = events.try_send(ev);
                }
                c.should_close()
            })
            .unwrap_or(true);
            conn_closing = should_close;
            close = should_close || disconnect || orphaned;
        }
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
            with_conn(&sh, |c| c.poll_transmit(&mut out));
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
            with_conn(&sh, |c| {
                c.on_eof();
                sh.reap(c);
                while let Some(ev) = c.poll_event() {
                    sh.note_event(&ev);
                    let _ = events.try_send(ev);
                }
            });
            sh.set_closed();
            return;
        }
        if progressed {
            last_progress = Instant::now();
        } else if last_progress.elapsed() < Duration::from_micros(50) {
            std::hint::spin_loop();
        } else {
            // Sleep until the peer sends, the application posts (the QP's eventfd) or the
            // startup timer fires; with output still queued (send buffer full) only briefly,
            // as writability is not waited for.
            let mut nap = if out_pos < out.len() {
                Duration::from_micros(200)
            } else {
                Duration::from_millis(5)
            };
            if let Some(at) = with_conn(&sh, |c| c.poll_timeout()).flatten() {
                nap = nap.min(at.saturating_duration_since(Instant::now()));
            }
            sh.sleeping.store(true, Ordering::SeqCst);
            if sh.post_seq.load(Ordering::SeqCst) == seq_at_start {
                let r = match &sh.wake {
                    Some(w) => t.wait_readable_or_woken(nap, w),
                    None => t.wait_readable(nap.min(Duration::from_micros(200))),
                };
                if let Err(e) = r {
                    log::debug!("transport: wait failed: {e}");
                    thread::sleep(Duration::from_micros(200));
                }
            }
            sh.sleeping.store(false, Ordering::SeqCst);
            if let Some(w) = &sh.wake {
                w.drain();
            }
        }
    }
}

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
