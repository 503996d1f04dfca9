//! Connection manager, shaped like rdma_cm, one API for every transport: a [`Net`] (kernel TCP,
//! or a DPDK dataplane endpoint with the `dpdk` feature) makes connections with
//! [`Net::connect`] (`rdma_connect`) and listens with [`Net::listen`] (`rdma_listen`); a
//! [`Listener`] hands out [`ConnRequest`]s ([`Listener::get_request`], `rdma_get_request`),
//! answered with [`ConnRequest::accept`] / [`ConnRequest::reject`] (`rdma_accept` /
//! `rdma_reject`) with private data, IRD/ORD (`responder_resources` / `initiator_depth`),
//! peer-to-peer RTR choice (RFC 6581 §9.2), CRC and marker preferences (RFC 5044 §7.1).
//!
//! What does not depend on the transport is here, once: the initiator's and the responder's
//! startup sequence (`connect_with`, [`ConnRequest::accept`]), the wait for establishment,
//! the Reject frame, and the per-connection pump step both drivers run (`pump.rs`: completions
//! to the CQs, events to the waiter, the close decision, the final flush). A backend supplies
//! the byte stream and what moves it:
//!
//! - [`kernel`]: kernel TCP sockets (or any [`crate::transport::Transport`]), one driver thread
//!   per connected QP; its listener's acceptor (`listen.rs`) runs MPA startups concurrently.
//! - `crate::dataplane` (feature `dpdk`): smoltcp TCP on DPDK queues, each connection run to
//!   completion inside the poll-mode worker that owns its socket.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{ConnConfig, ConnEvent, Connection};
use crate::mpa::{MpaConfig, Negotiated, PeerRequest, RtrSet, StartupError};
use crate::verbs::{Qp, QpSlot};

pub(crate) mod acceptor;
pub mod kernel;
mod listen;
pub(crate) mod pump;

pub use kernel::{connect, connect_tcp, connect_tcp_with_fallback};
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

/// Where connections are made: kernel TCP ([`Net::kernel`]) or a DPDK dataplane endpoint
/// (`Net::from(endpoint)`, feature `dpdk`). Cheap to clone; every clone uses the same backend.
#[derive(Clone)]
pub struct Net(Arc<dyn NetBackend>);

/// What a transport implements to be a [`Net`].
pub(crate) trait NetBackend: Send + Sync {
    /// Listen on `addr` (`cfg`: the MPA startup settings; `None`: the transport's own).
    fn listen(&self, addr: SocketAddr, cfg: Option<&ListenConfig>) -> Result<Listener, CmError>;
    /// Connect `qp` to `addr` as the MPA initiator, through [`connect_with`].
    fn connect(&self, addr: SocketAddr, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError>;
    /// Drive the workers the calling thread is responsible for once (see [`Net::poll`]).
    fn poll(&self) -> bool {
        false
    }
    /// See [`Net::is_driven`].
    fn is_driven(&self) -> bool {
        false
    }
    /// See [`Net::poll_transmit`].
    fn poll_transmit(&self) -> bool {
        false
    }
    /// See [`Net::workers`].
    fn workers(&self) -> usize {
        1
    }
    /// See [`Net::poll_worker`].
    fn poll_worker(&self, _k: usize) -> bool {
        false
    }
    /// See [`Net::poll_transmit_worker`].
    fn poll_transmit_worker(&self, _k: usize) -> bool {
        false
    }
    /// See [`Net::attach_worker`].
    fn attach_worker(&self, _k: usize) {}
    /// See [`Net::worker_cpu`].
    fn worker_cpu(&self, _k: usize) -> Option<usize> {
        None
    }
    /// `kernel` or `dpdk`.
    fn name(&self) -> &'static str;
}

impl Net {
    /// Kernel TCP sockets, one driver thread per connected QP.
    pub fn kernel() -> Net {
        Net(Arc::new(kernel::KernelNet))
    }

    /// A [`Net`] over another backend (the DPDK dataplane's `From<Endpoint>`).
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn from_backend(b: Arc<dyn NetBackend>) -> Net {
        Net(b)
    }

    /// Listen on `addr` (`rdma_listen`; on kernel TCP port 0 picks a free port, on DPDK name
    /// the port) with the transport's MPA
    /// startup settings: [`ListenConfig::default`] on kernel TCP, the dataplane config's
    /// `[tcp]` `mpa_timeout_ms` / `max_startups` on DPDK. On DPDK the listener takes the port
    /// on every worker of the endpoint; the address's IP is the endpoint's own.
    pub fn listen(&self, addr: SocketAddr) -> Result<Listener, CmError> {
        self.0.listen(addr, None)
    }

    /// [`Net::listen`] with this listener's own MPA startup deadline and cap (`cfg`;
    /// `cfg.nodelay` applies to kernel TCP only: smoltcp sockets never use Nagle here).
    pub fn listen_with(&self, addr: SocketAddr, cfg: &ListenConfig) -> Result<Listener, CmError> {
        self.0.listen(addr, Some(cfg))
    }

    /// Connect `qp` to `addr` as the MPA initiator (`rdma_resolve_addr` + `rdma_connect`);
    /// returns what MPA negotiated once the connection is established. On DPDK only IPv4
    /// addresses are reachable.
    pub fn connect(
        &self,
        addr: SocketAddr,
        qp: &Qp,
        param: &ConnParam,
    ) -> Result<Negotiated, CmError> {
        self.0.connect(addr, qp, param)
    }

    /// Drive the dataplane workers this thread is responsible for once (driven mode); false
    /// when nothing happened or nothing is driven here (kernel TCP, background workers).
    pub fn poll(&self) -> bool {
        self.0.poll()
    }

    /// Only the send side of [`Net::poll`]: posted WRs into the connections, FPDUs framed and
    /// handed to the PMD (driven mode; false otherwise). What a QP's doorbell runs
    /// ([`Net::qp_driver`]).
    pub fn poll_transmit(&self) -> bool {
        self.0.poll_transmit()
    }

    /// Whether completions only come when some thread calls [`Net::poll`] (driven dataplane
    /// workers).
    pub fn is_driven(&self) -> bool {
        self.0.is_driven()
    }

    /// How many workers move this transport's connections (a dataplane port's queues; 1 on
    /// kernel TCP). A connection lives on one of them for its life ([`ConnRequest::worker`]).
    pub fn workers(&self) -> usize {
        self.0.workers()
    }

    /// Drive the `k`-th worker once (driven mode); false when it did nothing or is not driven.
    pub fn poll_worker(&self, k: usize) -> bool {
        self.0.poll_worker(k)
    }

    /// The send side of [`Net::poll_worker`] only: what has been posted to the `k`-th
    /// worker's connections framed and handed to the PMD now, before the next pass's receive
    /// phase (driven mode; false otherwise).
    pub fn poll_transmit_worker(&self, k: usize) -> bool {
        self.0.poll_transmit_worker(k)
    }

    /// Make the calling thread the one that drives worker `k`: pinned to its CPU, with a DPDK
    /// lcore id for the mempool cache (driven dataplane; nothing on kernel TCP).
    pub fn attach_worker(&self, k: usize) {
        self.0.attach_worker(k)
    }

    /// The CPU worker `k` is placed on (None on kernel TCP).
    pub fn worker_cpu(&self, k: usize) -> Option<usize> {
        self.0.worker_cpu(k)
    }

    /// For a CQ whose completions come from a driven worker: what the CQ runs when polled
    /// empty ([`crate::verbs::Cq::drive_with`]); `None` when completions arrive on their own.
    pub fn cq_driver(&self) -> Option<crate::verbs::CqDriver> {
        if !self.is_driven() {
            return None;
        }
        let net = self.clone();
        Some(Arc::new(move || net.poll()))
    }

    /// For a QP on a driven worker: what `post_send` runs after queuing
    /// ([`crate::verbs::Qp::drive_with`], [`Net::poll_transmit`]); `None` when a worker or
    /// driver thread picks posts up on its own.
    pub fn qp_driver(&self) -> Option<crate::verbs::CqDriver> {
        if !self.is_driven() {
            return None;
        }
        let net = self.clone();
        Some(Arc::new(move || net.poll_transmit()))
    }

    /// The transport's name: `kernel` or `dpdk`.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// Whether this is kernel TCP (whose byte streams can also be opened by hand and handed to
    /// [`connect`], e.g. from a bound source address).
    pub fn is_kernel(&self) -> bool {
        self.name() == "kernel"
    }
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Net({})", self.name())
    }
}

/// A listener for incoming iWARP connections on any transport (`rdma_listen`), made by
/// [`Net::listen`] (or [`Listener::bind`] for kernel TCP).
///
/// Every incoming connection's MPA startup progresses on its own under a deadline and a cap
/// ([`ListenConfig`]), so a peer that is slow or silent during setup never delays another;
/// [`Listener::get_request`] hands out the next completed MPA Request. Dropping the listener
/// stops listening and closes the connections still in startup or not yet taken.
pub struct Listener {
    inner: Box<dyn ListenerBackend>,
}

/// What a transport's listener implements.
pub(crate) trait ListenerBackend: Send + Sync {
    /// The bound address.
    fn local_addr(&self) -> SocketAddr;
    /// The next completed request, waiting up to `timeout`.
    fn get_request(&self, timeout: Duration) -> Result<ConnRequest, CmError>;
    /// [`ListenerBackend::get_request`] without driving any worker while waiting.
    fn get_request_undriven(&self, timeout: Duration) -> Result<ConnRequest, CmError> {
        self.get_request(timeout)
    }
}

impl Listener {
    pub(crate) fn new(inner: Box<dyn ListenerBackend>) -> Listener {
        Listener { inner }
    }

    /// Listen on `addr` over kernel TCP (port 0 picks a free port) with the default
    /// [`ListenConfig`]: `Net::kernel().listen(addr)`.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, ListenConfig::default())
    }

    /// Listen on `addr` over kernel TCP with `cfg` (MPA startup deadline, cap on startups in
    /// progress, TCP_NODELAY): `Net::kernel().listen_with(addr, &cfg)`.
    pub fn bind_with(addr: SocketAddr, cfg: ListenConfig) -> io::Result<Self> {
        Ok(Listener::new(Box::new(kernel::TcpListener::bind(
            addr, cfg,
        )?)))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local_addr())
    }

    /// The next connection whose MPA Request has fully arrived (`rdma_get_request`), waiting up
    /// to `timeout` for one; connections still in their startup never hold this up.
    /// [`CmError::Timeout`] when none came in that time.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnRequest, CmError> {
        self.inner.get_request(timeout)
    }

    /// [`Listener::get_request`] for a thread that leaves the driven dataplane workers to
    /// others (their drivers, e.g. a server's reactors): it sleeps instead of polling them.
    /// The same as `get_request` where nothing is driven.
    pub fn get_request_undriven(&self, timeout: Duration) -> Result<ConnRequest, CmError> {
        self.inner.get_request_undriven(timeout)
    }
}

/// How a backend's waiter receives the connection's events: `recv(time left)`, `None` when
/// none came in that time (the DPDK dataplane's driven mode polls its workers meanwhile).
pub(crate) type Events = Box<dyn FnMut(Duration) -> Option<ConnEvent>>;

/// What a transport keeps of an incoming connection until it is accepted or rejected.
pub(crate) trait Pending: Send {
    /// EMSS of the connection's TCP (MULPDU follows from it, RFC 5044 App. A).
    fn emss(&self) -> usize;
    /// Start moving the bytes of `qp`, whose responder connection is installed
    /// ([`install`]); returns how to wait for its events.
    fn start(self: Box<Self>, qp: &Qp) -> Result<Events, CmError>;
    /// Send `frame` (an MPA Reply with R=1) and close the stream.
    fn reject(self: Box<Self>, frame: Vec<u8>) -> Result<(), CmError>;
    /// The index of the worker that holds the connection ([`Net::workers`]).
    fn worker(&self) -> usize {
        0
    }
}

/// An incoming connection whose MPA Request has arrived (`RDMA_CM_EVENT_CONNECT_REQUEST`), on
/// any transport.
pub struct ConnRequest {
    /// What the initiator asked for.
    pub peer: PeerRequest,
    /// The Request frame's bytes, replayed into the real responder on accept/reject.
    raw: Vec<u8>,
    remote: Option<SocketAddr>,
    pending: Box<dyn Pending>,
}

impl ConnRequest {
    pub(crate) fn new(
        peer: PeerRequest,
        raw: Vec<u8>,
        remote: Option<SocketAddr>,
        pending: Box<dyn Pending>,
    ) -> ConnRequest {
        ConnRequest {
            peer,
            raw,
            remote,
            pending,
        }
    }

    /// Read an MPA Request from an open byte stream (the passive side, e.g. an in-memory
    /// link), waiting up to `timeout`; the connection then runs on a kernel driver thread.
    pub fn read(
        transport: Box<dyn crate::transport::Transport>,
        timeout: Duration,
    ) -> Result<Self, CmError> {
        kernel::read_request(transport, timeout, false)
    }

    /// [`ConnRequest::read`], also taking an RDMAC peer's MPA Rev 0 Request when
    /// `rev0_permissive` is set (RFC 5044 App. C, [`crate::mpa::MpaConfig::rev0_permissive`]).
    pub fn read_with(
        transport: Box<dyn crate::transport::Transport>,
        timeout: Duration,
        rev0_permissive: bool,
    ) -> Result<Self, CmError> {
        kernel::read_request(transport, timeout, rev0_permissive)
    }

    /// The initiator's address, when the transport knows it.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// The worker that moves this connection's bytes (an index below [`Net::workers`]): a
    /// server that drives its workers itself serves the connection on that worker's thread.
    pub fn worker(&self) -> usize {
        self.pending.worker()
    }

    /// The initiator's ULP private data from its MPA Request (RFC 5044 §7.1.1).
    pub fn private_data(&self) -> &[u8] {
        &self.peer.private_data
    }

    /// Accept (`rdma_accept`): reply with `param` (IRD/ORD, p2p support, private data) and start
    /// the QP. Returns once established (after the RTR in peer-to-peer mode).
    pub fn accept(self, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError> {
        if !qp.claim() {
            return Err(CmError::QpInUse);
        }
        let mut cfg = param.conn_config(qp, self.pending.emss());
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
        install(conn, qp);
        let mut events = self.pending.start(qp)?;
        wait_established_by(qp, &mut *events, param.timeout)
    }

    /// Reject (`rdma_reject`) with private data: an MPA Reply with R=1 goes out and the stream is
    /// closed (RFC 5044 §7.1.2).
    pub fn reject(self, private_data: &[u8]) -> Result<(), CmError> {
        let out = reject_frame(&self.raw, private_data);
        self.pending.reject(out)
    }
}

/// The initiator's startup sequence, whatever the transport: claim `qp`, install an MPA
/// initiator connection on it (replaying work posted in INIT), let `start` hand it to the
/// transport (which returns how to wait for its events), wait until established.
pub(crate) fn connect_with(
    qp: &Qp,
    param: &ConnParam,
    emss: usize,
    start: impl FnOnce(&Qp) -> Result<Events, CmError>,
) -> Result<Negotiated, CmError> {
    if !qp.claim() {
        return Err(CmError::QpInUse);
    }
    let cfg = param.conn_config(qp, emss);
    let conn = Connection::initiator(cfg, qp.shared.pd.memory().clone(), Instant::now());
    install(conn, qp);
    let mut events = start(qp)?;
    wait_established_by(qp, &mut *events, param.timeout)
}

/// The MPA Reply with R=1 (RFC 5044 §7.1.2) answering the Request in `raw`, carrying
/// `private_data`: a throw-away responder is fed the Request and told to reject it.
fn reject_frame(raw: &[u8], private_data: &[u8]) -> Vec<u8> {
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

/// Wait until the connection is established, taking its events by `recv(time left)`.
fn wait_established_by(
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

/// Make `conn` the QP's live connection, handing it the work posted in INIT; the transport's
/// driver (kernel thread or dataplane worker) drives it from then on.
fn install(mut conn: Connection, qp: &Qp) {
    let mut slot = qp.shared.lock();
    qp.shared.drain_posts(&mut conn);
    *slot = QpSlot::Live(Box::new(conn));
}
