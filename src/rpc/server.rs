//! The RPC-over-RDMA server framework.
//!
//! Connections arrive through `cm`'s one connection API ([`RdmaServer::listen`] on a
//! [`Net`]: kernel TCP, whose driver thread moves the bytes, or the DPDK dataplane with the
//! `dpdk` feature, whose poll-mode worker moves them); after the MPA exchange both are served
//! alike, by one state machine per connection (`ConnServer`) that polls the connection's CQ
//! and never waits. It runs where the connection's bytes are moved: on the QP's driver thread
//! on kernel TCP and the in-memory link ([`crate::verbs::DriverHook`]), on the worker's
//! reactor on a driven dataplane, else on a thread of its own. Procedures registered as
//! blocking run on a handler pool instead. A received message is copied out of its buffer, the
//! buffer re-posted at once (its credit replenished), and the message handled to completion:
//!
//! 1. header errors: ERR_VERS with the supported range 1..=1, ERR_CHUNK for bad lists (draft
//!    §5.3); a message too short to carry an XID is dropped with a log line.
//! 2. read chunks are pulled by RDMA Read into registered memory (at most
//!    `min(our ORD, client maxrdmaread)` Reads outstanding); a position-zero chunk of an
//!    RDMA_NOMSG call is the whole RPC call (a long call, draft §5.1).
//! 3. CONFIG_RDMA (draft §6) is answered here; every other call goes to the [`Registry`].
//! 4. bulk results are RDMA Written into the call's write chunks (lengths rewritten in the reply);
//!    the reply goes inline (RDMA_MSG, or RDMA_MSGP when reply padding is configured) when it fits
//!    the client's `maxreply_sendsize`, else into the reply chunk (RDMA_NOMSG), else as a
//!    position-zero read chunk the client pulls and acknowledges with RDMA_DONE (freed on DONE or
//!    after `done_timeout`).

use crossbeam_queue::SegQueue;
use rustc_hash::FxHashMap;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::credits::{ConnCredits, CreditPool};
use super::endpoint::{Res, RpcQp};
use super::program::{
    ArgReader, Body, ChunkData, Piece, Placement, PooledBuf, PulledChunk, Registry, VecPool,
};
use super::{ConfigReply, ConfigReq, RpcError, CONFIG_RDMA_PROG, CONF_RDMA, DEFAULT_INLINE};
use crate::cm::{CmError, ConnParam, ConnRequest, ListenConfig, Listener, Net};
use crate::transport::Transport;
use crate::verbs::{
    Access, Device, DriverHook, HookPoll, Mr, QpWaker, WcOpcode, WcStatus, WorkCompletion,
};
use crate::wire::oncrpc::{AcceptStat, CallError, CallRepr, ReplyRepr, ReplyStat, RPC_VERSION};
use crate::wire::rpcrdma::{
    Body as RdmaBody, Chunks, HeaderError, HeaderRepr, ReadChunk, ReadSegment, Segment, WriteList,
    MAX_SEGMENTS, RPCRDMA_VERSION,
};
use crate::wire::rpcrdma_cpd::CpdRepr;
use crate::wire::xdr::{Padding, XdrReader, XdrWriter};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Receive buffer size = the largest inline call accepted (maxcall_sendsize we answer).
    pub inline_recv: u32,
    /// Send buffer size = the largest inline reply we send (further capped by the client's
    /// maxreply_sendsize).
    pub inline_send: u32,
    /// Alignment advertised in CONFIG_RDMA replies (0: none).
    pub align: u32,
    /// Send inline replies as RDMA_MSGP with this padding (draft §3.5).
    pub reply_padding: Option<Padding>,
    /// Largest read chunk (and largest long call) pulled for one call.
    pub max_chunk: usize,
    /// Free a reply's read chunks after this long without RDMA_DONE.
    pub done_timeout: Duration,
    /// Receive buffers shared by all connections.
    pub credit_pool: u32,
    /// Largest grant for one connection.
    pub max_credits: u32,
    /// IRD/ORD and MPA settings for accepted connections.
    pub conn: ConnParam,
    /// Busy-poll a connection's receive CQ this long before sleeping (0: never spin), where a
    /// connection has a thread of its own ([`Served::Thread`]); a QP's driver thread and a
    /// reactor have their own idle policies.
    pub poll_spin: Duration,
    /// Threads of the handler pool that runs procedures registered as blocking
    /// ([`Registry::register_blocking`]: file I/O) for connections served to completion on
    /// the thread that moves their bytes (a QP's kernel-transport driver thread, a driven
    /// dataplane worker's reactor), so that thread never waits on a disk. The pool is started
    /// with the first such connection and shared by all. A connection served on a thread of
    /// its own runs such handlers there.
    pub handler_threads: usize,
    /// CPUs the handler pool's threads run on; `None` (the default): those of the thread that
    /// starts the pool. On a server whose clients are elsewhere, give CPUs that no reactor
    /// runs on: a handler's file I/O then never takes time from a reactor that moves every
    /// connection's bytes (docs/nfs.md "Bulk data": NFS 1 MiB READs ran at 9-10 Gbit/s with
    /// the handlers pinned to the reactor's CPU, 14 on the other one, which the client shared).
    pub handler_cpus: Option<Vec<usize>>,
    /// The listener's MPA startups: deadline and cap ([`RdmaServer::listen`]). `None` (the
    /// default): the transport's own, [`ListenConfig::default`] on kernel TCP and the dataplane
    /// config's `[tcp]` keys on DPDK. When set, its `nodelay` is `conn.nodelay`.
    pub listen: Option<ListenConfig>,
    /// Which peers may connect ([`Admit`]); `None`: every peer. A refused peer's MPA Request
    /// is answered with an MPA Reject (RFC 5044 §7.1.4) and a log line.
    pub admit: Option<Admit>,
}

/// A connection admission policy: given the initiator's address (`None` when the transport
/// does not know it), whether to accept its connection. An NFS export's client list is one
/// ([`crate::nfs::exports`]).
#[derive(Clone)]
pub struct Admit(pub Arc<dyn Fn(Option<SocketAddr>) -> bool + Send + Sync>);

impl std::fmt::Debug for Admit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admit(..)")
    }
}

/// The private data of the MPA Reject sent to a peer an [`Admit`] policy refuses.
const NOT_ADMITTED: &[u8] = b"rpcrdma: client not allowed";

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            inline_recv: 4096,
            inline_send: 4096,
            align: 0,
            reply_padding: None,
            max_chunk: 16 << 20,
            done_timeout: Duration::from_secs(5),
            credit_pool: 1024,
            max_credits: 128,
            conn: ConnParam::default(),
            poll_spin: Duration::from_micros(POLL_SPIN_US),
            handler_threads: 2,
            handler_cpus: None,
            listen: None,
            admit: None,
        }
    }
}

/// Initial buffer of a message encoder: a header and a small reply fit without reallocating
/// (measured: growing from empty was the server's largest allocation cost on the NULL path).
const ENCODE_CAPACITY: usize = 256;

/// MPA reject private data when the credit pool cannot admit a connection.
const NO_CREDITS: &[u8] = b"rpcrdma: no credits";

/// How long a connection request waits for the credit pool to give it its first 2 buffers
/// (while the connections already in shrink towards a share that counts it) before it is
/// refused. Well inside an MPA peer's wait for the reply (siw waits 20 s).
const ADMIT_WAIT: Duration = Duration::from_secs(2);

/// Default busy-poll before sleeping on a CQ: none (docs/rpc.md "Over kernel TCP: spins that
/// yield").
pub const POLL_SPIN_US: u64 = 0;

/// Counters over all connections (what a test or an operator can check).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and served.
    pub connections: AtomicU64,
    /// Calls whose RPC header decoded (CONFIG_RDMA included).
    pub calls: AtomicU64,
    /// RDMA_DONE messages that freed a reply's read chunk (draft §3.8).
    pub dones: AtomicU64,
    /// Reply read chunks freed without RDMA_DONE (timeout or too many waiting).
    pub done_timeouts: AtomicU64,
    /// RDMA_ERROR / ERR_VERS answers sent (RFC 8166 §4.5.1).
    pub err_vers: AtomicU64,
    /// RDMA_ERROR / ERR_CHUNK answers sent (draft §5.3, RFC 8166 §4.5.2).
    pub err_chunk: AtomicU64,
    /// Messages too short for a header, dropped unanswered.
    pub dropped: AtomicU64,
    /// Read chunk pulls (each a series of RDMA Reads).
    pub reads_pulled: AtomicU64,
    /// Bulk result bytes RDMA Written into write chunks.
    pub bytes_written: AtomicU64,
    /// Bulk (DDP-eligible) bytes moved by RDMA through a buffer of their own instead of
    /// straight from or into a handler's registered memory: read chunks pulled into a region
    /// registered for the call, [`Body::put_bulk`] results written into write chunks. 0 on a
    /// zero-copy path (docs/rpc.md).
    pub bulk_staged_bytes: AtomicU64,
    /// Calls of procedures that may block answered on the connection's own thread by their
    /// attempt that never blocks ([`Registry::register_blocking_with_nowait`]), not handed to
    /// the handler pool.
    pub calls_nowait: AtomicU64,
    /// Read-chunk bytes RDMA Read straight into a procedure's registered memory
    /// ([`Registry::register_with_placement`]).
    pub bulk_placed_bytes: AtomicU64,
    /// Read-chunk bytes RDMA Read into a buffer of the server's pull pool and handed to the
    /// procedure there (`program::VecPool`: WRITEs to a file store or NFS), not into a
    /// region allocated for the call.
    pub bulk_pooled_pull_bytes: AtomicU64,
    /// Bulk result bytes RDMA Written into write chunks from one of the connection's own
    /// registered result buffers (`program::ResultBufs`: a small READ answered on the
    /// connection's thread), registered once and reused, neither allocated nor registered per
    /// call.
    pub bulk_result_buf_bytes: AtomicU64,
    /// Bulk result bytes RDMA Written into write chunks from a buffer a handler borrowed from
    /// a pool and filled ([`super::program::BulkPool`]: a file's bytes read straight into
    /// memory registered for the reply).
    pub bulk_lent_bytes: AtomicU64,
}

impl ServerStats {
    /// Read one counter (relaxed ordering).
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The server: programs, settings and the shared credit pool.
#[derive(Clone)]
pub struct RdmaServer {
    registry: Arc<Registry>,
    cfg: Arc<ServerConfig>,
    pool: CreditPool,
    dev: Device,
    stats: Arc<ServerStats>,
    /// The handler pool's queue, once started ([`RdmaServer::handler_pool`]); its threads end
    /// when the server and every connection using it are gone.
    handlers: Arc<Mutex<Option<crossbeam_channel::Sender<PoolJob>>>>,
    /// Buffers read chunks are pulled into (all connections).
    pull_pool: Arc<VecPool>,
}

/// Read chunks from this size up to [`PULL_POOL_BUF`] are pulled into a buffer of the
/// server's pull pool ([`VecPool`]); smaller and larger ones into a region of their own.
const PULL_POOL_MIN: usize = 32 * 1024;

/// The size of the pull pool's buffers: 1 MiB, the usual largest WRITE (NFS's wtmax).
const PULL_POOL_BUF: usize = 1 << 20;

/// Buffers the pull pool keeps idle at most (MiB).
const PULL_POOL_IDLE: usize = 64;

/// Where an accepted connection is served ([`RdmaServer::serve_request`]).
#[derive(Debug)]
pub enum Served {
    /// On its QP's driver thread (kernel TCP, in-memory link), to completion: a call goes from
    /// the received bytes to the reply on that one thread. Nothing to join: the connection's
    /// state is dropped there once it has closed.
    OnDriver,
    /// On a thread of its own (named `rpc-conn`), which ends when the connection does.
    Thread(JoinHandle<()>),
}

/// A running listener; dropping it does not stop it, [`ServerHandle::stop`] does.
pub struct ServerHandle {
    /// The address actually bound (the real port when 0 was asked for).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// Stop accepting and wait for the accept thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl RdmaServer {
    /// A server answering `registry`'s programs (and CONFIG_RDMA) with `cfg`; nothing is
    /// served until [`RdmaServer::listen`] or [`RdmaServer::serve_transport`].
    pub fn new(registry: Registry, cfg: ServerConfig) -> Self {
        let pool = CreditPool::new(cfg.credit_pool, cfg.max_credits);
        RdmaServer {
            registry: Arc::new(registry),
            cfg: Arc::new(cfg),
            pool,
            dev: Device::open(),
            stats: Arc::new(ServerStats::default()),
            handlers: Arc::new(Mutex::new(None)),
            pull_pool: VecPool::new(PULL_POOL_BUF, PULL_POOL_IDLE),
        }
    }

    /// Pull buffers waiting in the server's pool (read chunks of 32 KiB to 1 MiB are pulled
    /// into them and handed to the procedure, then taken back).
    pub fn pull_pool_idle(&self) -> usize {
        self.pull_pool.idle()
    }

    /// The queue of the handler pool for blocking procedures, starting the pool
    /// (`cfg.handler_threads` threads named `rpc-handler<i>`, on `cfg.handler_cpus` if set)
    /// on first use.
    fn handler_pool(&self) -> Result<crossbeam_channel::Sender<PoolJob>, RpcError> {
        let mut h = self.handlers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = h.as_ref() {
            return Ok(tx.clone());
        }
        let cpus = self.cfg.handler_cpus.clone().unwrap_or_default();
        let (tx, jobs) = crossbeam_channel::bounded(HANDLER_QUEUE);
        for i in 0..self.cfg.handler_threads.max(1) {
            let jobs = jobs.clone();
            let cpus = cpus.clone();
            thread::Builder::new()
                .name(format!("rpc-handler{i}"))
                .spawn(move || {
                    if !cpus.is_empty() {
                        if let Err(e) = crate::affinity::set_thread_cpus(&cpus) {
                            log::warn!("rpc-server: handler thread on CPUs {cpus:?}: {e}");
                        }
                    }
                    handler_thread(jobs)
                })?;
        }
        if !cpus.is_empty() {
            log::info!(
                "rpc-server: {} handler threads on CPUs {cpus:?}",
                self.cfg.handler_threads.max(1)
            );
        }
        *h = Some(tx.clone());
        Ok(tx)
    }

    /// Counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// The shared credit pool.
    pub fn pool(&self) -> &CreditPool {
        &self.pool
    }

    /// Listen on `addr` (port 0: any free port) on `net` (kernel TCP or a dataplane endpoint)
    /// and serve until stopped.
    ///
    /// The listener runs the MPA startups concurrently under `cfg.listen`'s deadline and cap
    /// (a slow or silent peer holds up no one); each completed request is accepted on its own
    /// thread. The accept loop polls a stop flag every 200 ms.
    ///
    /// On a driven dataplane ([`Net::is_driven`]) the server drives the workers itself: one
    /// `Reactor` thread per worker, pinned to its CPU, runs the worker's pass and then the
    /// request path of every connection on that worker, to completion (no hand-off between
    /// threads for a call). Credits are then per worker: each has a pool of
    /// `cfg.credit_pool`. Elsewhere each connection is served as [`RdmaServer::serve_request`]
    /// says (on kernel TCP: on its QP's driver thread).
    pub fn listen(&self, net: &Net, addr: SocketAddr) -> Result<ServerHandle, RpcError> {
        let listener = match &self.cfg.listen {
            Some(l) => net.listen_with(
                addr,
                &ListenConfig {
                    nodelay: self.cfg.conn.nodelay,
                    ..l.clone()
                },
            )?,
            None => net.listen(addr)?,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let reactors = if net.is_driven() {
            Some(Arc::new(Reactors::start(
                net,
                &self.cfg,
                self.handler_pool()?,
                &stop,
            )?))
        } else {
            None
        };
        Ok(self.serve_inner(listener, reactors, stop)?)
    }

    /// A reactor for worker `k` of the driven dataplane `net` that the caller runs pass by pass
    /// ([`SteppedReactor::pass`]) instead of a thread of its own ([`RdmaServer::listen`]): for
    /// one thread that drives both ends of a connection in one process, so that a call's work
    /// on both sides runs on that thread in a repeatable order (benches/path_instructions
    /// counts an NFS call's instructions so). Connections come in by its
    /// [`SteppedReactor::door`]; blocking procedures go to the server's handler pool as usual.
    pub fn stepped_reactor(&self, net: &Net, k: usize) -> Result<SteppedReactor, RpcError> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let reactors = Arc::new(Reactors {
            senders: vec![tx],
            pools: vec![CreditPool::new(self.cfg.credit_pool, self.cfg.max_credits)],
            handlers: self.handler_pool()?,
        });
        Ok(SteppedReactor {
            reactor: Reactor::new(net.clone(), k, rx, Arc::new(AtomicBool::new(false))),
            door: ReactorDoor {
                server: self.clone(),
                reactors,
            },
        })
    }

    /// Serve the requests of `listener` until stopped ([`RdmaServer::listen`]), each
    /// connection as [`RdmaServer::serve_request`] does.
    pub fn serve(&self, listener: Listener) -> std::io::Result<ServerHandle> {
        self.serve_inner(listener, None, Arc::new(AtomicBool::new(false)))
    }

    fn serve_inner(
        &self,
        listener: Listener,
        reactors: Option<Arc<Reactors>>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<ServerHandle> {
        let addr = listener.local_addr()?;
        let st = stop.clone();
        let me = self.clone();
        let join = thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    // With reactors the workers are driven by them: wait without polling.
                    let got = match reactors {
                        Some(_) => listener.get_request_undriven(Duration::from_millis(200)),
                        None => listener.get_request(Duration::from_millis(200)),
                    };
                    let req = match got {
                        Ok(r) => r,
                        Err(CmError::Timeout) => continue,
                        Err(e) => {
                            log::warn!("rpc-server: listener: {e}");
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    let srv = me.clone();
                    let reactors = reactors.clone();
                    thread::spawn(move || {
                        let r = match &reactors {
                            Some(rs) => srv.serve_on_reactor(req, rs),
                            None => srv.serve_request(req).map(drop),
                        };
                        if let Err(e) = r {
                            log::warn!("rpc-server: connection not served: {e}");
                        }
                    });
                }
            })?;
        Ok(ServerHandle {
            addr,
            stop,
            join: Some(join),
        })
    }

    /// Serve a connection arriving on an already-open byte stream (e.g. the in-memory link).
    pub fn serve_transport(&self, t: Box<dyn Transport>) -> Result<Served, RpcError> {
        let req = ConnRequest::read_with(
            t,
            self.cfg.conn.timeout,
            self.cfg
                .listen
                .as_ref()
                .is_some_and(|l| l.mpa_rev0_permissive),
        )?;
        self.serve_request(req)
    }

    /// Accept one connection request and serve it. Refused (MPA reject) when the credit pool
    /// cannot give it a grant of 1 plus its DONE slot.
    ///
    /// Where the transport gives the QP a driver thread of its own (kernel TCP, the in-memory
    /// link), the connection's state machine runs on that thread after each pass of the
    /// engine ([`Served::OnDriver`]): a call goes from the received bytes to the reply's FPDU
    /// without a hand-off between threads, and procedures registered as blocking go to the
    /// handler pool, which wakes the driver when a result is ready. Elsewhere (an undriven
    /// dataplane) the connection gets a thread of its own ([`Served::Thread`]).
    pub fn serve_request(&self, req: ConnRequest) -> Result<Served, RpcError> {
        let mut conn = self.accept_with(&self.pool, req)?;
        let qp = conn.ep.qp.clone();
        if qp.accepts_driver_hook() {
            conn.offload = Some(Offload::new(self.handler_pool()?, Some(qp.waker())));
        }
        match qp.attach_driver_hook(conn) {
            Ok(()) => Ok(Served::OnDriver),
            Err(mut conn) => {
                // Blocking handlers run on the connection's own thread.
                conn.offload = None;
                // Named so a profile (`perf report --sort comm`) tells the RPC threads from
                // the rest.
                Ok(Served::Thread(
                    thread::Builder::new()
                        .name("rpc-conn".into())
                        .spawn(move || conn.run())?,
                ))
            }
        }
    }

    /// Accept `req` and hand the connection to the reactor of its worker.
    fn serve_on_reactor(&self, req: ConnRequest, rs: &Reactors) -> Result<(), RpcError> {
        let k = req.worker() % rs.senders.len();
        let mut conn = self.accept_with(&rs.pools[k], req)?;
        // The reactor polls without sleeping long: nothing to wake.
        conn.offload = Some(Offload::new(rs.handlers.clone(), None));
        conn.poll_budget = REACTOR_POLL_BUDGET;
        rs.senders[k]
            .send(conn)
            .map_err(|_| RpcError::Usage("the worker's reactor has stopped"))
    }

    /// Join `pool` (or reject), post the receive buffers, accept `req`.
    /// A client that sends RFC 8797 connection private data in its MPA Request (the Linux
    /// NFS/RDMA client does) is an RFC 8166 requester and gets ours in the MPA Reply; its
    /// receive size is the inline reply limit from the start (RFC 8797 §4.2).
    fn accept_with(&self, pool: &CreditPool, req: ConnRequest) -> Result<ConnServer, RpcError> {
        let peer = req.remote_addr();
        if let Some(admit) = &self.cfg.admit {
            if !(admit.0)(peer) {
                log::warn!(
                    "rpc-server: connection from {} refused: not among the allowed clients",
                    peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string())
                );
                let _ = req.reject(NOT_ADMITTED);
                return Err(RpcError::Usage("peer not admitted"));
            }
        }
        let Some(credits) = pool.join_within(ADMIT_WAIT) else {
            log::warn!(
                "rpc-server: credit pool exhausted ({} of {} buffers held) for {ADMIT_WAIT:?}, rejecting a connection",
                pool.reserved(),
                pool.total()
            );
            let _ = req.reject(NO_CREDITS);
            return Err(RpcError::Usage("credit pool exhausted"));
        };
        let cpd = CpdRepr::find(req.private_data());
        let mut param = self.cfg.conn.clone();
        if let Some(c) = cpd {
            log::info!("rpc-server: client connection private data (RFC 8797): {c:?}");
            param.private_data = CpdRepr {
                remote_invalidate: false,
                send_size: self.cfg.inline_send,
                recv_size: self.cfg.inline_recv,
            }
            .emit()
            .to_vec();
        }
        let pd = self.dev.alloc_pd();
        let mut ep = RpcQp::create_shared(
            pd,
            self.cfg.inline_recv as usize,
            self.cfg.inline_send as usize,
        );
        let qp = ep.qp.clone();
        ep.spin = self.cfg.poll_spin;
        for _ in 0..credits.held() {
            ep.add_recv()?;
        }
        let n = req.accept(&qp, &param)?;
        let peer_ird = u32::from(n.peer_ird.unwrap_or(1));
        bump(&self.stats.connections, 1);
        let mut conn = ConnServer::new(
            self.stats.clone(),
            self.pull_pool.clone(),
            ep,
            self.registry.clone(),
            self.cfg.clone(),
            credits,
            cpd.map_or(DEFAULT_INLINE, |c| c.recv_size),
            cpd.is_some(),
            peer_ird,
            // 0 when the client gave us no RDMA Read credit (its IRD 0, RFC 6581 §9.1): calls
            // with read chunks are then answered ERR_CHUNK (`call`).
            u32::from(n.ord),
        );
        conn.peer = peer;
        Ok(conn)
    }
}

/// A reactor the caller runs pass by pass ([`RdmaServer::stepped_reactor`]).
pub struct SteppedReactor {
    reactor: Reactor,
    door: ReactorDoor,
}

/// Where connections are handed to a [`SteppedReactor`], from any thread.
#[derive(Clone)]
pub struct ReactorDoor {
    server: RdmaServer,
    reactors: Arc<Reactors>,
}

impl SteppedReactor {
    /// One pass of the reactor on the calling thread: the worker's pass, then every listed
    /// connection's calls, and their replies framed and handed to the PMD; true if anything
    /// happened. The thread must have the worker's lcore ([`Net::attach_worker`]).
    pub fn pass(&mut self) -> bool {
        self.reactor.pass()
    }

    /// The door connections come in by.
    pub fn door(&self) -> ReactorDoor {
        self.door.clone()
    }
}

impl ReactorDoor {
    /// Accept `req` (a blocking accept: it drives the worker on this thread meanwhile, as on
    /// a driven dataplane) and hand the connection to the reactor, which serves it from its
    /// next pass on.
    pub fn serve(&self, req: ConnRequest) -> Result<(), RpcError> {
        self.server.serve_on_reactor(req, &self.reactors)
    }
}

/// The reactors of a server on a driven dataplane: one per worker, and the handler pool they
/// share for blocking procedures.
struct Reactors {
    senders: Vec<crossbeam_channel::Sender<ConnServer>>,
    pools: Vec<CreditPool>,
    handlers: crossbeam_channel::Sender<PoolJob>,
}

/// Calls queued to the handler pool at most (beyond that a connection keeps them itself; they
/// are bounded by its receive credits).
const HANDLER_QUEUE: usize = 256;

/// A blocking call handed from a reactor to the handler pool: everything needed to decode and
/// run it, and where the results go.
struct PoolJob {
    seq: u64,
    /// The connection's peer ([`ArgReader::peer`]).
    peer: Option<SocketAddr>,
    xid: u32,
    chunks: Chunks,
    msg: Vec<u8>,
    hlen: usize,
    padding: Option<Padding>,
    pulled: Vec<PulledChunk>,
    reg: Arc<Registry>,
    reply_to: crossbeam_channel::Sender<PoolDone>,
    /// Wakes the thread that serves the connection once the result is sent (a QP's driver
    /// thread, which may be asleep; a reactor never sleeps long and needs none).
    wake: Option<QpWaker>,
    /// Names the connection to its reactor once the result is sent.
    ready: Option<ReadyToken>,
}

/// A connection's name on its reactor's ready queue: a reactor polls the connections named
/// there (and all of them now and then), not every connection on every pass.
#[derive(Clone)]
struct ReadyToken {
    queue: Arc<SegQueue<usize>>,
    token: usize,
}

impl ReadyToken {
    fn raise(&self) {
        self.queue.push(self.token);
    }
}

/// A blocking call's outcome, back to its connection.
struct PoolDone {
    seq: u64,
    xid: u32,
    chunks: Chunks,
    rep: ReplyRepr,
    body: Body,
}

/// The handler pool's side of a connection served on the thread that moves its bytes (a
/// reactor, a QP's driver thread).
struct Offload {
    jobs: crossbeam_channel::Sender<PoolJob>,
    done_tx: crossbeam_channel::Sender<PoolDone>,
    done: crossbeam_channel::Receiver<PoolDone>,
    /// Calls the full pool queue did not take yet.
    waiting: VecDeque<PoolJob>,
    /// Given to every job ([`PoolJob::wake`]).
    wake: Option<QpWaker>,
    /// Given to every job ([`PoolJob::ready`]): set by the reactor that serves the connection.
    ready: Option<ReadyToken>,
}

impl Offload {
    fn new(jobs: crossbeam_channel::Sender<PoolJob>, wake: Option<QpWaker>) -> Offload {
        let (done_tx, done) = crossbeam_channel::unbounded();
        Offload {
            jobs,
            done_tx,
            done,
            waiting: VecDeque::new(),
            wake,
            ready: None,
        }
    }
}

fn handler_thread(jobs: crossbeam_channel::Receiver<PoolJob>) {
    while let Ok(j) = jobs.recv() {
        let mut r = XdrReader::new(&j.msg);
        r.set_padding(j.padding, j.hlen);
        // The reactor decoded this header already; it decodes the same here.
        let Ok(call) = CallRepr::parse(&mut r) else {
            continue;
        };
        let mut args = ArgReader::new(r, &j.pulled).with_peer(j.peer);
        let (rep, body) = j.reg.dispatch(&call, &mut args);
        let _ = j.reply_to.send(PoolDone {
            seq: j.seq,
            xid: j.xid,
            chunks: j.chunks,
            rep: ReplyRepr { xid: j.xid, ..rep },
            body,
        });
        // After the send: the woken driver's hook finds the result.
        if let Some(w) = &j.wake {
            w.wake();
        }
        if let Some(r) = &j.ready {
            r.raise();
        }
    }
}

impl Reactors {
    fn start(
        net: &Net,
        cfg: &ServerConfig,
        handlers: crossbeam_channel::Sender<PoolJob>,
        stop: &Arc<AtomicBool>,
    ) -> Result<Reactors, RpcError> {
        let mut senders = Vec::new();
        let mut pools = Vec::new();
        for k in 0..net.workers() {
            let (tx, rx) = crossbeam_channel::unbounded();
            let r = Reactor::new(net.clone(), k, rx, stop.clone());
            thread::Builder::new()
                .name(format!("rpc-reactor{k}"))
                .spawn(move || r.run())?;
            senders.push(tx);
            pools.push(CreditPool::new(cfg.credit_pool, cfg.max_credits));
        }
        Ok(Reactors {
            senders,
            pools,
            handlers,
        })
    }
}

/// Idle passes a reactor spins before it starts sleeping between passes.
const REACTOR_SPIN: Duration = Duration::from_millis(2);
/// A sleeping reactor's pause between passes (it is the worker's only driver: this bounds the
/// added latency of the first message after a quiet spell).
const REACTOR_NAP: Duration = Duration::from_micros(50);

/// Run to completion on one driven dataplane worker: the worker's pass (rx, deliver, post,
/// transmit, completions), then every connection's completions on this thread, which is
/// pinned to the worker's CPU. A call goes from the received frame to the reply's FPDU
/// without leaving the thread.
struct Reactor {
    net: Net,
    k: usize,
    /// The connections, by token (a freed slot is reused).
    conns: Vec<Option<ConnServer>>,
    free: Vec<usize>,
    incoming: crossbeam_channel::Receiver<ConnServer>,
    stop: Arc<AtomicBool>,
    /// Tokens of connections with something to do: their CQ got a completion after they
    /// asked (`Cq::req_notify`), or the handler pool finished one of their calls.
    ready: Arc<SegQueue<usize>>,
    /// The connections the next pass polls, each once (`listed`).
    next: Vec<usize>,
    listed: Vec<bool>,
    /// The list a pass walks (kept for its allocation).
    walking: Vec<usize>,
    /// Passes in a row each connection found nothing to do.
    quiet: Vec<u32>,
    passes: u64,
    /// No full pass (every connection polled) before this: see [`REACTOR_FULL_SHARE`].
    full_at: Instant,
}

/// Every this many passes a reactor polls every connection, not only those named ready: for
/// the timers a connection keeps (`done_wait`) and for a completion another thread queued
/// while the connection was asking to be notified (`Cq::req_notify`).
const REACTOR_FULL_PASS: u64 = 512;

/// A full pass over thousands of connections takes longer than `REACTOR_FULL_PASS` ordinary
/// passes, and would then be most of what the reactor does: the next one comes no sooner than
/// this many times its own length after it ended, so full passes take at most about a tenth
/// of the reactor (as the worker's sweeps, docs/workers.md), and a quiet connection's timers
/// and missed notifications wait that much longer.
const REACTOR_FULL_SHARE: u32 = 10;

/// Passes a connection stays on a reactor's list after its last work before it waits for a
/// notification instead.
const REACTOR_QUIET: u32 = 64;

impl Reactor {
    fn new(
        net: Net,
        k: usize,
        incoming: crossbeam_channel::Receiver<ConnServer>,
        stop: Arc<AtomicBool>,
    ) -> Reactor {
        Reactor {
            net,
            k,
            conns: Vec::new(),
            free: Vec::new(),
            incoming,
            stop,
            ready: Arc::new(SegQueue::new()),
            next: Vec::new(),
            listed: Vec::new(),
            walking: Vec::new(),
            quiet: Vec::new(),
            passes: 0,
            full_at: Instant::now(),
        }
    }

    fn list(&mut self, token: usize) {
        if let Some(l) = self.listed.get_mut(token) {
            if !*l && self.conns[token].is_some() {
                *l = true;
                self.next.push(token);
            }
        }
    }

    fn add(&mut self, mut c: ConnServer) {
        let token = match self.free.pop() {
            Some(t) => t,
            None => {
                self.conns.push(None);
                self.listed.push(false);
                self.quiet.push(0);
                self.conns.len() - 1
            }
        };
        c.ep.rcq.set_notify(self.ready.clone(), token);
        if let Some(o) = c.offload.as_mut() {
            o.ready = Some(ReadyToken {
                queue: self.ready.clone(),
                token,
            });
        }
        self.conns[token] = Some(c);
        self.quiet[token] = 0;
        self.list(token);
    }

    /// Poll the connections listed; true if one of them did anything. A connection that did
    /// work is polled again on the next pass, and so is one quiet for fewer than
    /// `REACTOR_QUIET` passes (a busy connection's next call is a pass or two away: asking
    /// for a notification and taking it costs atomic operations a poll does not); then it
    /// asks its CQ to name it when a completion comes (and is polled again at once if one
    /// came meanwhile).
    fn serve(&mut self) -> bool {
        let mut served = false;
        let mut now = std::mem::replace(&mut self.next, std::mem::take(&mut self.walking));
        for &t in &now {
            self.listed[t] = false;
        }
        for &t in &now {
            let Some(c) = self.conns[t].as_mut() else {
                continue;
            };
            match c.poll() {
                Ok(w) => {
                    served |= w;
                    let q = &mut self.quiet[t];
                    *q = if w { 0 } else { q.saturating_add(1) };
                    let again = *q < REACTOR_QUIET
                        || c.offload.as_ref().is_some_and(|o| !o.waiting.is_empty())
                        || {
                            c.ep.rcq.req_notify();
                            !c.ep.rcq.is_empty()
                        };
                    if again {
                        self.list(t);
                    }
                }
                Err(e) => {
                    if let Some(c) = self.conns[t].take() {
                        c.end(Err(e));
                    }
                    self.free.push(t);
                }
            }
        }
        now.clear();
        self.walking = now;
        served
    }

    /// One pass: the worker's, the connections handed over since the last, then the
    /// connections listed (all of them now and then); true if anything happened.
    fn pass(&mut self) -> bool {
        let mut work = self.net.poll_worker(self.k);
        while let Ok(c) = self.incoming.try_recv() {
            self.add(c);
            work = true;
        }
        while let Some(t) = self.ready.pop() {
            self.list(t);
        }
        self.passes += 1;
        // The clock only on the passes that may be full ones.
        let full_from = self
            .passes
            .is_multiple_of(REACTOR_FULL_PASS)
            .then(Instant::now)
            .filter(|&t| t >= self.full_at);
        if full_from.is_some() {
            for t in 0..self.conns.len() {
                self.list(t);
            }
        }
        let served = self.serve();
        if let Some(t0) = full_from {
            let end = Instant::now();
            self.full_at = end + end.saturating_duration_since(t0) * REACTOR_FULL_SHARE;
        }
        if served {
            // What the connections just posted (replies, RDMA Reads) goes out now, all of
            // it in one send-side pass, not after the next pass's receive phase.
            self.net.poll_transmit_worker(self.k);
        }
        work | served
    }

    fn run(mut self) {
        self.net.attach_worker(self.k);
        let mut last_work = Instant::now();
        let mut idle_passes = 0u32;
        loop {
            if self.pass() {
                idle_passes = 0;
                continue;
            }
            if self.free.len() == self.conns.len() && self.stop.load(Ordering::Acquire) {
                return;
            }
            // Idle: spin a while (the next call is usually microseconds away), then nap so an
            // idle server leaves its CPU to others. The clock is read every 64 idle passes.
            idle_passes += 1;
            if idle_passes.is_multiple_of(64) {
                let now = Instant::now();
                if idle_passes == 64 {
                    last_work = now;
                } else if now.duration_since(last_work) > REACTOR_SPIN {
                    thread::sleep(REACTOR_NAP);
                }
            }
            std::hint::spin_loop();
        }
    }
}

/// One connection's request path as a state machine: fed with the completions of its one CQ
/// (received calls, finished RDMA Reads, finished Sends), it never waits. A call whose read
/// chunks must be pulled is parked ([`PullJob`]) while its RDMA Reads are in flight and resumes
/// when the last one completes; the connection serves other calls meanwhile. Driven by its
/// QP's kernel-transport driver thread (as a [`DriverHook`]), by a [`Reactor`] on a driven
/// dataplane worker's thread, or by its own thread elsewhere.
struct ConnServer {
    /// Where the connection came from, when the transport knows it.
    peer: Option<SocketAddr>,
    stats: Arc<ServerStats>,
    pull_pool: Arc<VecPool>,
    ep: RpcQp,
    reg: Arc<Registry>,
    cfg: Arc<ServerConfig>,
    credits: ConnCredits,
    /// Reply read chunks awaiting RDMA_DONE, by XID.
    done_wait: HashMap<u32, (Mr, Instant)>,
    /// Client's maxreply_sendsize (RFC 8166 default 1024 until CONFIG_RDMA says otherwise).
    maxreply: u32,
    /// The client announced RFC 8797 private data: an RFC 8166 requester, which has no
    /// RDMA_DONE (RFC 8166 §4.6.2), so a long reply never goes by a read chunk.
    rfc8166_peer: bool,
    /// Client's maxrdmaread (its IRD from MPA until CONFIG_RDMA says otherwise).
    peer_maxrdmaread: u32,
    ord: u32,
    /// Reused copy of the message being handled.
    rx_scratch: Vec<u8>,
    /// Reused buffers of the reply encoder: the RPC reply, and the whole Send (transport
    /// header + reply) before it is copied into the work request (inline) or a registered
    /// send buffer.
    reply_scratch: Vec<u8>,
    send_scratch: Vec<u8>,
    /// Calls waiting for their read chunks, in arrival order.
    pulls: VecDeque<PullJob>,
    /// RDMA Reads in flight (at most the ORD window): `wr_id` -> the job they fill.
    reads: FxHashMap<u64, u64>,
    next_job: u64,
    /// Bytes of read-chunk regions held by parked calls (bounded by [`PULL_BUDGET_CHUNKS`]
    /// times `max_chunk`, so a client cannot make the server register unbounded memory).
    pull_bytes: usize,
    last_sweep: Instant,
    /// Served on the thread that moves the bytes (reactor, QP driver): blocking procedures go
    /// to the handler pool.
    offload: Option<Offload>,
    /// Messages received so far (their arrival numbers, from 1).
    rx_seq: u64,
    /// The arrival number of the message being answered (for the credit accounting, which
    /// must know which call a reply answers: replies may leave out of order).
    answering: u64,
    /// Completions handled per [`ConnServer::poll`].
    poll_budget: usize,
}

/// Read-chunk bytes a connection holds for parked calls, in units of `max_chunk`: one call
/// always fits; beyond that, later calls wait their turn.
const PULL_BUDGET_CHUNKS: usize = 2;

/// Send WRs one completion may make the connection post at most (see `ConnServer::send_room`):
/// a header holds at most `MAX_SEGMENTS` segments in all its lists, each at most one RDMA Write
/// or Read, plus the reply's Send; twice that leaves room for the RDMA Reads of a read chunk
/// being pulled meanwhile (the ORD window).
const REPLY_WRS: usize = 2 * MAX_SEGMENTS + 1;

/// Completions handled per [`ConnServer::poll`] (so one busy connection does not starve the
/// others of its driver, nor the engine that moves their bytes).
const POLL_BUDGET: usize = 64;

/// [`POLL_BUDGET`] on a dataplane reactor, whose worker pass sends the replies of a poll. Calls
/// and replies move in batches, and a side that takes every message waiting before it sends
/// makes the two sides take turns on one batch, each idle while the other works (both about 30 %
/// idle at 32 credits). Answering at most this many calls before the worker's next pass keeps
/// several batches in flight, so client and server work at once: 32-credit NULL over net_ring
/// 450 k -> 720-770 k calls/s (docs/rpc.md "Measurements"). Over kernel TCP each pass of the
/// driver is a system call, and the smaller budget measured slower there.
const REACTOR_POLL_BUDGET: usize = 16;

/// A call parked while its read chunks are pulled (RFC 8166 §3.5.3): a continuation, resumed
/// by the completion of its last RDMA Read.
struct PullJob {
    id: u64,
    /// Arrival number of the call.
    seq: u64,
    xid: u32,
    chunks: Chunks,
    /// The inline part of the call (after the transport header); `None`: RDMA_NOMSG, the call
    /// itself is the position-zero chunk.
    inline: Option<Vec<u8>>,
    hlen: usize,
    padding: Option<Padding>,
    /// The read chunks, in list order.
    todo: Vec<ReadChunk>,
    /// Index in `todo` of the chunk being pulled.
    next: usize,
    cur: Option<Pulling>,
    /// Bytes reserved in the connection's pull budget (the job's total).
    reserved: usize,
    pulled: Vec<PulledChunk>,
    /// RDMA_NOMSG: the call pulled from the position-zero chunk.
    call: Option<Vec<u8>>,
    /// Zero-copy WRITE: the chunk (index in `todo`) RDMA-Read straight into a procedure's
    /// registered memory, and where ([`Registry::placement`]).
    place: Option<(usize, Placement)>,
}

impl PullJob {
    /// The chunk being pulled is the call itself (RDMA_NOMSG's position-zero chunk), not a bulk
    /// argument: its bytes become `call`.
    fn pulling_call(&self) -> bool {
        self.inline.is_none() && self.next == 0
    }
}

/// The chunk being pulled: its region, the next segment to read and how many are in flight.
struct Pulling {
    mr: Mr,
    seg: usize,
    /// Where the next segment lands in `mr` (from `start` on).
    off: usize,
    start: usize,
    outstanding: usize,
    /// A placed chunk: `mr` is the procedure's memory, held until the chunk is in (else `mr`
    /// is a region of the chunk's own).
    held: Option<Res>,
    /// `mr` is registered over a buffer of the server's pull pool.
    pooled: bool,
}

impl Pulling {
    /// Start pulling `chunk`: into the placement's memory at its offset, a buffer of `pool`
    /// (a chunk of [`PULL_POOL_MIN`] to [`PULL_POOL_BUF`] octets that is a bulk argument, when
    /// `poolable`), or a fresh region.
    fn start(
        ep: &mut RpcQp,
        chunk: &ReadChunk,
        place: Option<&Placement>,
        pool: &VecPool,
        poolable: bool,
    ) -> Pulling {
        let len = chunk.len() as usize;
        let pooled = place.is_none() && poolable && (PULL_POOL_MIN..=pool.buf_len()).contains(&len);
        let (mr, start, held) = match place {
            Some(p) => {
                let (mr, held) = ep.shared(&p.mem);
                (mr, p.offset, Some(held))
            }
            None if pooled => (ep.pd.reg_mr_from(pool.take(), Access::LOCAL_WRITE), 0, None),
            None => (ep.pd.reg_mr(len.max(1), Access::LOCAL_WRITE), 0, None),
        };
        Pulling {
            mr,
            seg: 0,
            off: start,
            start,
            outstanding: 0,
            held,
            pooled,
        }
    }

    /// Give the chunk's region back (the connection ended or the chunk is in).
    fn free(self, ep: &mut RpcQp) {
        match self.held {
            Some(h) => ep.release(h),
            None => {
                ep.pd.dereg_mr(&self.mr);
            }
        }
    }
}

/// Why a call could not be answered with an RPC reply.
enum Fail {
    /// Answer RDMA_ERROR / ERR_CHUNK.
    Chunk(&'static str),
    /// The connection is unusable.
    Fatal(RpcError),
}

impl From<RpcError> for Fail {
    fn from(e: RpcError) -> Self {
        Fail::Fatal(e)
    }
}

impl ConnServer {
    #[allow(clippy::too_many_arguments)]
    fn new(
        stats: Arc<ServerStats>,
        pull_pool: Arc<VecPool>,
        ep: RpcQp,
        reg: Arc<Registry>,
        cfg: Arc<ServerConfig>,
        credits: ConnCredits,
        maxreply: u32,
        rfc8166_peer: bool,
        peer_maxrdmaread: u32,
        ord: u32,
    ) -> Self {
        ConnServer {
            peer: None,
            stats,
            pull_pool,
            ep,
            reg,
            cfg,
            credits,
            done_wait: HashMap::new(),
            maxreply,
            rfc8166_peer,
            peer_maxrdmaread,
            ord,
            rx_scratch: Vec::new(),
            reply_scratch: Vec::with_capacity(ENCODE_CAPACITY),
            send_scratch: Vec::with_capacity(ENCODE_CAPACITY),
            pulls: VecDeque::new(),
            reads: FxHashMap::default(),
            next_job: 1,
            pull_bytes: 0,
            last_sweep: Instant::now(),
            offload: None,
            rx_seq: 0,
            answering: 0,
            poll_budget: POLL_BUDGET,
        }
    }

    /// Its own thread: handle completions as they come, sleeping on the CQ when there are none.
    fn run(mut self) {
        let r = self.serve_blocking();
        self.end(r);
    }

    /// Room in the send queue for everything one more completion may post (the reply to a
    /// call: a Send and an RDMA Write per write-chunk or reply-chunk segment; or the RDMA Reads
    /// of the next read chunk). A call is taken only then, so a client within its grant whose
    /// calls carry many segments is answered at the pace the send queue drains, never refused
    /// with `QueueFull` (which would end its connection).
    fn send_room(&self) -> bool {
        self.ep.qp.send_queue_room() >= REPLY_WRS
    }

    fn serve_blocking(&mut self) -> Result<(), RpcError> {
        loop {
            if self.poll()? {
                continue;
            }
            if !self.send_room() {
                // Paced (see `send_room`): the QP's driver thread empties the queue.
                thread::sleep(Duration::from_micros(20));
                continue;
            }
            match self.ep.wait_recv(Duration::from_millis(20)) {
                Some(wc) => self.on_wc(wc)?,
                None if self.ep.qp.is_closed() => return Err(RpcError::Closed),
                None => {}
            }
        }
    }

    /// The connection is over (`r`: why): disconnect and free what it holds.
    fn end(mut self, r: Result<(), RpcError>) {
        self.finish(r);
    }

    /// [`ConnServer::end`] in place (a [`DriverHook`] is dropped by its driver, later).
    fn finish(&mut self, r: Result<(), RpcError>) {
        match r {
            Ok(()) | Err(RpcError::Closed) => log::info!("rpc-server: connection closed"),
            Err(e) => log::warn!("rpc-server: connection ended: {e}"),
        }
        self.ep.qp.disconnect();
        for (_, (mr, _)) in self.done_wait.drain() {
            self.ep.pd.dereg_mr(&mr);
        }
        for job in self.pulls.drain(..) {
            if let Some(p) = job.cur {
                p.free(&mut self.ep);
            }
        }
    }

    /// Handle the completions already queued (at most `poll_budget`); true if there were
    /// any. `Err(Closed)` once the connection has closed.
    fn poll(&mut self) -> Result<bool, RpcError> {
        let mut work = false;
        for _ in 0..self.poll_budget {
            if !self.send_room() {
                // Paced: the worker or driver empties the send queue into the connection on its
                // next pass; a full connection means TCP is waiting for the peer, and the
                // driver's nap is then short (it has output pending).
                break;
            }
            let Some(wc) = self.ep.rcq.poll_one() else {
                break;
            };
            work = true;
            self.on_wc(wc)?;
        }
        if self.offload.is_some() {
            work |= self.poll_offload()?;
        }
        if !self.done_wait.is_empty() && self.last_sweep.elapsed() > Duration::from_millis(100) {
            self.last_sweep = Instant::now();
            self.sweep_done();
        }
        Ok(work)
    }

    /// Queue what the pool did not take yet; send the replies of the calls it finished.
    fn poll_offload(&mut self) -> Result<bool, RpcError> {
        let Some(off) = self.offload.as_mut() else {
            return Ok(false);
        };
        let mut work = false;
        while let Some(j) = off.waiting.pop_front() {
            match off.jobs.try_send(j) {
                Ok(()) => work = true,
                Err(crossbeam_channel::TrySendError::Full(j)) => {
                    off.waiting.push_front(j);
                    break;
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                    return Err(RpcError::Usage("the handler pool has stopped"));
                }
            }
        }
        // `is_empty` first: crossbeam's `try_recv` on an empty channel issues a full fence,
        // and a reactor polls its busy connections on every pass.
        if off.done.is_empty() {
            return Ok(work);
        }
        let done: Vec<PoolDone> = off.done.try_iter().collect();
        for d in done {
            work = true;
            self.answering = d.seq;
            let r = self.reply(d.xid, d.rep, d.body, &d.chunks);
            self.answer(d.xid, r)?;
        }
        Ok(work)
    }

    /// A failed completion that only says the connection is closing (flushed, or the QP
    /// already closed): `Closed`, the normal end. `None` for a real failure.
    fn failed(&self, wc: &WorkCompletion) -> Option<RpcError> {
        (self.ep.qp.is_closed() || wc.status == WcStatus::WrFlushErr).then_some(RpcError::Closed)
    }

    /// One completion of the connection's CQ (send and receive queues share it).
    fn on_wc(&mut self, wc: WorkCompletion) -> Result<(), RpcError> {
        if wc.opcode != WcOpcode::Recv {
            if let Some(job) = self.reads.remove(&wc.wr_id) {
                return self.on_read_done(job, &wc);
            }
            return self
                .ep
                .on_send_wc(&wc)
                .map_err(|e| self.failed(&wc).unwrap_or(e));
        }
        if wc.status != WcStatus::Success {
            return Err(self
                .failed(&wc)
                .unwrap_or_else(|| RpcError::Rdma(format!("receive failed: {:?}", wc.status))));
        }
        // Copied out into a buffer reused across messages, so the receive buffer can be
        // re-posted (its credit replenished) before the message is handled.
        let mut msg = std::mem::take(&mut self.rx_scratch);
        if !self.ep.take_recv_into(&wc, &mut msg) {
            self.rx_scratch = msg;
            return Ok(());
        }
        if self.credits.repost() {
            self.ep.repost(&wc)?;
        }
        self.rx_seq += 1;
        self.answering = self.rx_seq;
        let r = self.on_message(&msg);
        self.rx_scratch = msg;
        r
    }

    fn sweep_done(&mut self) {
        let now = Instant::now();
        let expired: Vec<u32> = self
            .done_wait
            .iter()
            .filter(|(_, (_, t))| now.duration_since(*t) > self.cfg.done_timeout)
            .map(|(x, _)| *x)
            .collect();
        for xid in expired {
            if let Some((mr, _)) = self.done_wait.remove(&xid) {
                log::warn!("rpc-server: no RDMA_DONE for xid {xid:#x}; freeing its read chunk");
                bump(&self.stats.done_timeouts, 1);
                self.ep.pd.dereg_mr(&mr);
            }
        }
    }

    /// Send one reply-type message (RPC reply or RDMA_ERROR) with the current grant.
    fn send_header(
        &mut self,
        xid: u32,
        body: RdmaBody,
        rpc: &[u8],
        hold: Vec<Res>,
    ) -> Result<(), RpcError> {
        let step = self.credits.next_reply(self.answering);
        for _ in 0..step.post {
            self.ep.add_recv()?;
        }
        let h = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credits: step.credits,
            body,
        };
        let mut w = XdrWriter::reusing(std::mem::take(&mut self.send_scratch));
        h.emit(&mut w);
        w.put_raw(rpc);
        let r = self.ep.send(w.as_slice(), hold);
        self.send_scratch = w.into_vec();
        r
    }

    /// What becomes of a call: answered, or ERR_CHUNK, or the connection ends.
    fn answer(&mut self, xid: u32, r: Result<(), Fail>) -> Result<(), RpcError> {
        match r {
            Ok(()) => Ok(()),
            Err(Fail::Chunk(why)) => {
                log::warn!("rpc-server: xid {xid:#x}: {why}; answering ERR_CHUNK");
                bump(&self.stats.err_chunk, 1);
                self.send_header(xid, RdmaBody::ErrChunk, &[], vec![])
            }
            Err(Fail::Fatal(e)) => Err(e),
        }
    }

    fn on_message(&mut self, msg: &[u8]) -> Result<(), RpcError> {
        let (h, hlen) = match HeaderRepr::parse(msg) {
            Ok(x) => x,
            Err(HeaderError::Short) => {
                log::warn!(
                    "rpc-server: {}-byte message too short for a header; dropped",
                    msg.len()
                );
                bump(&self.stats.dropped, 1);
                return Ok(());
            }
            Err(HeaderError::Version { xid, vers }) => {
                log::warn!("rpc-server: xid {xid:#x}: version {vers}; answering ERR_VERS 1..1");
                bump(&self.stats.err_vers, 1);
                return self.send_header(
                    xid,
                    RdmaBody::ErrVers {
                        low: RPCRDMA_VERSION,
                        high: RPCRDMA_VERSION,
                    },
                    &[],
                    vec![],
                );
            }
            Err(e @ HeaderError::Chunk { xid, .. }) => {
                log::warn!("rpc-server: {e}; answering ERR_CHUNK");
                bump(&self.stats.err_chunk, 1);
                return self.send_header(xid, RdmaBody::ErrChunk, &[], vec![]);
            }
        };
        self.credits.on_request(h.credits);
        let xid = h.xid;
        let r = match h.body {
            RdmaBody::Done => {
                match self.done_wait.remove(&xid) {
                    Some((mr, _)) => {
                        self.ep.pd.dereg_mr(&mr);
                        bump(&self.stats.dones, 1);
                    }
                    None => log::warn!("rpc-server: RDMA_DONE for unknown xid {xid:#x}"),
                }
                return Ok(());
            }
            RdmaBody::ErrVers { .. } | RdmaBody::ErrChunk => {
                log::warn!("rpc-server: client sent RDMA_ERROR (xid {xid:#x}); ignored");
                return Ok(());
            }
            RdmaBody::Msg(c) => self.call(xid, c, Some(&msg[hlen..]), hlen, None),
            RdmaBody::MsgP { padding, chunks } => {
                self.call(xid, chunks, Some(&msg[hlen..]), hlen, Some(padding))
            }
            RdmaBody::NoMsg(c) => {
                if hlen != msg.len() {
                    log::warn!("rpc-server: xid {xid:#x}: RDMA_NOMSG with trailing bytes");
                }
                self.call(xid, c, None, 0, None)
            }
        };
        self.answer(xid, r)
    }

    /// Check a call's chunk lists, then run it at once, or park it while its read chunks are
    /// pulled.
    fn call(
        &mut self,
        xid: u32,
        chunks: Chunks,
        inline: Option<&[u8]>,
        hlen: usize,
        padding: Option<Padding>,
    ) -> Result<(), Fail> {
        let rcs = chunks
            .read_chunks()
            .map_err(|_| Fail::Chunk("read list positions decrease"))?;
        let total: u64 = rcs.iter().map(|c| c.len()).sum();
        if total > self.cfg.max_chunk as u64 {
            return Err(Fail::Chunk("read chunks larger than the server's limit"));
        }
        if !rcs.is_empty() && self.ord == 0 {
            // The client's IRD is 0: we may not RDMA Read from it (RFC 5040 §6.3), so its read
            // chunks cannot be pulled.
            return Err(Fail::Chunk(
                "read chunks, but the connection's ORD is 0 (client IRD 0)",
            ));
        }
        let wtotal: u64 = chunks
            .writes
            .iter()
            .flatten()
            .chain(chunks.reply.iter().flatten())
            .map(|s| u64::from(s.length))
            .sum();
        if wtotal > (self.cfg.max_chunk as u64) * 2 {
            return Err(Fail::Chunk(
                "write/reply chunks larger than the server's limit",
            ));
        }
        match inline {
            Some(m) => {
                if rcs.first().is_some_and(|c| c.position == 0) {
                    return Err(Fail::Chunk("position-zero read chunk in an RDMA_MSG"));
                }
                if rcs.iter().any(|c| c.position as usize > m.len()) {
                    return Err(Fail::Chunk("read chunk position beyond the message"));
                }
                if rcs.is_empty() {
                    return self.execute(xid, &chunks, m, hlen, padding, Vec::new());
                }
            }
            None => {
                if rcs.first().is_none_or(|c| c.position != 0) {
                    return Err(Fail::Chunk(
                        "RDMA_NOMSG call without a position-zero read chunk",
                    ));
                }
            }
        }
        // Zero-copy WRITE: a read chunk its procedure places straight into registered memory.
        let place = inline.and_then(|m| self.reg.placement(m, padding, hlen, &rcs));
        let id = self.next_job;
        self.next_job += 1;
        self.pulls.push_back(PullJob {
            id,
            seq: self.answering,
            xid,
            chunks,
            inline: inline.map(<[u8]>::to_vec),
            hlen,
            padding,
            pulled: Vec::with_capacity(rcs.len()),
            todo: rcs,
            next: 0,
            cur: None,
            reserved: 0,
            call: None,
            place,
        });
        Ok(self.progress_pulls()?)
    }

    /// An RDMA Read of job `id` completed.
    fn on_read_done(&mut self, id: u64, wc: &WorkCompletion) -> Result<(), RpcError> {
        if wc.status != WcStatus::Success {
            return Err(self
                .failed(wc)
                .unwrap_or_else(|| RpcError::Rdma(format!("RDMA Read failed: {:?}", wc.status))));
        }
        if let Some(p) = self
            .pulls
            .iter_mut()
            .find(|j| j.id == id)
            .and_then(|j| j.cur.as_mut())
        {
            p.outstanding -= 1;
        }
        self.progress_pulls()
    }

    /// Post the RDMA Reads the window allows (jobs in arrival order), finish the chunks whose
    /// Reads all completed, and run the calls whose chunks are all in.
    fn progress_pulls(&mut self) -> Result<(), RpcError> {
        loop {
            self.post_reads()?;
            let mut ready = Vec::new();
            let mut changed = false;
            let mut i = 0;
            while i < self.pulls.len() {
                let job = &mut self.pulls[i];
                let done_chunk = job.cur.as_ref().is_some_and(|p| {
                    p.outstanding == 0 && p.seg >= job.todo[job.next].segments.len()
                });
                if done_chunk {
                    changed = true;
                    let p = job.cur.take().expect("checked");
                    let c = &job.todo[job.next];
                    bump(&self.stats.reads_pulled, 1);
                    let n = p.off - p.start;
                    if p.held.is_some() {
                        // Placed: the data is in the procedure's memory already.
                        p.free(&mut self.ep);
                        bump(&self.stats.bulk_placed_bytes, n as u64);
                        job.pulled.push(PulledChunk {
                            position: c.position,
                            data: ChunkData::Placed(n),
                        });
                    } else {
                        self.ep.pd.dereg_mr(&p.mr);
                        if job.pulling_call() {
                            job.call = Some(region_bytes(p.mr, n));
                        } else {
                            // A pull buffer goes to the procedure as it is and back to the pool
                            // when the call drops it; a region of its own (or a pull buffer
                            // still referenced, copied out) is staged.
                            let pulled = if p.pooled {
                                p.mr.into_bytes()
                            } else {
                                Err(p.mr)
                            };
                            let data = match pulled {
                                Ok(v) => {
                                    bump(&self.stats.bulk_pooled_pull_bytes, n as u64);
                                    ChunkData::Pooled(PooledBuf::new(v, n, &self.pull_pool))
                                }
                                Err(mr) => {
                                    bump(&self.stats.bulk_staged_bytes, n as u64);
                                    ChunkData::Bytes(region_bytes(mr, n))
                                }
                            };
                            job.pulled.push(PulledChunk {
                                position: c.position,
                                data,
                            });
                        }
                    }
                    job.next += 1;
                }
                if job.next == job.todo.len() {
                    let job = self.pulls.remove(i).expect("in range");
                    ready.push(job);
                    continue;
                }
                i += 1;
            }
            for job in ready {
                self.pull_bytes -= job.reserved;
                self.answering = job.seq;
                let xid = job.xid;
                let r = self.resume(job);
                self.answer(xid, r)?;
            }
            if !changed {
                return Ok(());
            }
        }
    }

    /// Post RDMA Reads while the window (our ORD and the client's maxrdmaread, RFC 5040 §6.3 /
    /// draft §6.2) and the pull budget allow.
    fn post_reads(&mut self) -> Result<(), RpcError> {
        let window = self.ord.min(self.peer_maxrdmaread).max(1) as usize;
        let budget = PULL_BUDGET_CHUNKS * self.cfg.max_chunk.max(1);
        for job in self.pulls.iter_mut() {
            if self.reads.len() >= window {
                break;
            }
            if job.reserved == 0 {
                let total: usize = job.todo.iter().map(|c| c.len() as usize).sum();
                let total = total.max(1);
                if self.pull_bytes > 0 && self.pull_bytes + total > budget {
                    break;
                }
                job.reserved = total;
                self.pull_bytes += total;
            }
            while self.reads.len() < window {
                let chunk = &job.todo[job.next];
                let place = job
                    .place
                    .as_ref()
                    .filter(|(i, _)| *i == job.next)
                    .map(|(_, p)| p);
                // A long call's first chunk is the call itself (a `Vec` of its own), not a
                // bulk argument.
                let poolable = !job.pulling_call();
                let pool = &self.pull_pool;
                let p = job.cur.get_or_insert_with(|| {
                    Pulling::start(&mut self.ep, chunk, place, pool, poolable)
                });
                let Some(s) = chunk.segments.get(p.seg).copied() else {
                    break;
                };
                p.seg += 1;
                if s.length == 0 {
                    continue;
                }
                let wr = self.ep.post_read(&s, &p.mr, p.off)?;
                p.off += s.length as usize;
                p.outstanding += 1;
                self.reads.insert(wr, job.id);
            }
        }
        Ok(())
    }

    /// A parked call whose chunks are all in: run it.
    fn resume(&mut self, job: PullJob) -> Result<(), Fail> {
        let PullJob {
            xid,
            chunks,
            inline,
            hlen,
            padding,
            pulled,
            call,
            ..
        } = job;
        match inline {
            Some(m) => self.execute(xid, &chunks, &m, hlen, padding, pulled),
            None => {
                let m = call.unwrap_or_default();
                if pulled.iter().any(|c| c.position as usize > m.len()) {
                    return Err(Fail::Chunk("read chunk position beyond the message"));
                }
                self.execute(xid, &chunks, &m, 0, None, pulled)
            }
        }
    }

    /// Decode the RPC call in `msg` (its read chunks in `pulled`), run it, send the reply.
    fn execute(
        &mut self,
        xid: u32,
        chunks: &Chunks,
        msg: &[u8],
        hlen: usize,
        padding: Option<Padding>,
        pulled: Vec<PulledChunk>,
    ) -> Result<(), Fail> {
        let mut r = XdrReader::new(msg);
        r.set_padding(padding, hlen);
        let call = match CallRepr::parse(&mut r) {
            Ok(c) => c,
            Err(CallError::RpcMismatch { .. }) => {
                let rep = ReplyRepr {
                    xid,
                    stat: ReplyStat::RpcMismatch {
                        low: RPC_VERSION,
                        high: RPC_VERSION,
                    },
                };
                return self.reply(xid, rep, Body::new(), chunks);
            }
            Err(CallError::Garbage(e)) => {
                log::warn!("rpc-server: xid {xid:#x}: RPC call header: {e}; GARBAGE_ARGS");
                let rep = ReplyRepr::accepted(xid, AcceptStat::GarbageArgs);
                return self.reply(xid, rep, Body::new(), chunks);
            }
        };
        if call.xid != xid {
            log::warn!(
                "rpc-server: RPC xid {:#x} differs from transport xid {xid:#x}; using the latter",
                call.xid
            );
        }
        bump(&self.stats.calls, 1);
        let to_pool =
            self.offload.is_some() && call.prog != CONFIG_RDMA_PROG && self.reg.is_blocking(&call);
        if to_pool {
            // First without blocking, here (a READ of cached bytes): no hand-off to the pool.
            let mut args = ArgReader::new(r.clone(), &pulled)
                .with_peer(self.peer)
                .with_result_bufs(&mut self.ep.result_bufs);
            let answered = self.reg.dispatch_nowait(&call, &mut args);
            if let Some((rep, body)) = answered {
                bump(&self.stats.calls_nowait, 1);
                let rep = ReplyRepr { xid, ..rep };
                let r = self.reply(xid, rep, body, chunks);
                self.ep.result_bufs.settle();
                return r;
            }
            // Not answered here: a buffer the attempt took is free again.
            self.ep.result_bufs.settle();
        }
        if let Some(off) = self.offload.as_mut() {
            if to_pool {
                off.waiting.push_back(PoolJob {
                    seq: self.answering,
                    peer: self.peer,
                    xid,
                    chunks: chunks.clone(),
                    msg: msg.to_vec(),
                    hlen,
                    padding,
                    pulled,
                    reg: self.reg.clone(),
                    reply_to: off.done_tx.clone(),
                    wake: off.wake.clone(),
                    ready: off.ready.clone(),
                });
                self.poll_offload()?;
                return Ok(());
            }
        }
        let (rep, body) = if call.prog == CONFIG_RDMA_PROG {
            self.config_rdma(&call, &mut r)
        } else {
            let mut args = ArgReader::new(r, &pulled).with_peer(self.peer);
            self.reg.dispatch(&call, &mut args)
        };
        let rep = ReplyRepr { xid, ..rep };
        self.reply(xid, rep, body, chunks)
    }

    /// CONFIG_RDMA (draft §6.2): record the client's limits, answer ours.
    fn config_rdma(&mut self, call: &CallRepr, r: &mut XdrReader<'_>) -> (ReplyRepr, Body) {
        if call.vers != 1 {
            return (
                ReplyRepr::accepted(call.xid, AcceptStat::ProgMismatch { low: 1, high: 1 }),
                Body::new(),
            );
        }
        if call.proc_ != CONF_RDMA {
            return (
                ReplyRepr::accepted(call.xid, AcceptStat::ProcUnavail),
                Body::new(),
            );
        }
        let req = match ConfigReq::parse(r) {
            Ok(q) => q,
            Err(e) => {
                log::warn!("rpc-server: CONFIG_RDMA arguments: {e}");
                return (
                    ReplyRepr::accepted(call.xid, AcceptStat::GarbageArgs),
                    Body::new(),
                );
            }
        };
        // Draft §6.2: maxreply_sendsize is the largest inline reply the client accepts, and
        // that is the limit from here on, also below the 1 KB every peer handles before
        // configuration (§6.1): a longer reply goes by the reply chunk, or by a position-zero
        // read chunk and RDMA_DONE. (The reply header itself always travels in a Send.)
        self.maxreply = req.maxreply_sendsize;
        self.peer_maxrdmaread = req.maxrdmaread;
        log::info!("rpc-server: CONFIG_RDMA from client: {req:?}");
        let mut body = Body::new();
        ConfigReply {
            maxcall_sendsize: self.cfg.inline_recv,
            align: self.cfg.align,
            maxrdmaread: u32::from(self.cfg.conn.responder_resources),
        }
        .emit(body.xdr());
        (ReplyRepr::success(call.xid), body)
    }

    /// Encode and send the reply, moving bulk results into write chunks and a long reply into
    /// the reply chunk or a read chunk.
    fn reply(&mut self, xid: u32, rep: ReplyRepr, body: Body, chunks: &Chunks) -> Result<(), Fail> {
        let mut pieces = body.into_pieces();
        // Which bulk item goes to which write chunk (in order, RFC 8166 §4.3.2).
        let mut staged: Vec<Res> = Vec::new();
        let mut returned: WriteList = chunks
            .writes
            .iter()
            .map(|c| c.iter().map(|s| Segment { length: 0, ..*s }).collect())
            .collect();
        let mut wi = 0usize;
        // Bulk items moved into write chunks: their length (the XDR keeps only that).
        let mut in_chunk: smallvec::SmallVec<[Option<usize>; 8]> =
            smallvec::smallvec![None; pieces.len()];
        for (i, p) in pieces.iter_mut().enumerate() {
            if let Some(n) = p.bulk_len() {
                if let Some(wc) = chunks.writes.get(wi) {
                    let cap: u64 = wc.iter().map(|s| u64::from(s.length)).sum();
                    if n as u64 > cap {
                        for r in staged {
                            self.ep.release(r);
                        }
                        return Err(Fail::Chunk("write chunk smaller than the result"));
                    }
                    let written = match p {
                        // Zero-copy READ: written straight from the handler's registered memory.
                        Piece::Region { mem, offset, .. } => {
                            if mem.is_lent() {
                                bump(&self.stats.bulk_lent_bytes, n as u64);
                            }
                            // One of the connection's own result buffers, registered once;
                            // else shared memory registered here (kept or for this reply).
                            let (mr, held) = match self.ep.result_bufs.lend(mem) {
                                Some((mr, slot)) => {
                                    bump(&self.stats.bulk_result_buf_bytes, n as u64);
                                    (mr, Res::Lent(slot))
                                }
                                None => self.ep.shared(mem),
                            };
                            staged.push(held);
                            self.ep.rdma_write(&mr, *offset, n, wc)
                        }
                        // The handler's bytes become the RDMA Write source as they are.
                        Piece::Bulk(d) => {
                            let mr = self.ep.adopt(std::mem::take(d));
                            bump(&self.stats.bulk_staged_bytes, n as u64);
                            let w = self.ep.rdma_write(&mr, 0, n, wc);
                            staged.push(Res::Adopted(mr));
                            w
                        }
                        Piece::Xdr(_) => continue,
                    };
                    returned[wi] = match written {
                        Ok(r) => r,
                        Err(e) => {
                            for r in staged {
                                self.ep.release(r);
                            }
                            return Err(e.into());
                        }
                    };
                    bump(&self.stats.bytes_written, n as u64);
                    in_chunk[i] = Some(n);
                    wi += 1;
                }
            }
        }
        let mut scratch = std::mem::take(&mut self.reply_scratch);
        let mut encode = |padding: Option<(Padding, usize)>| {
            let mut w = XdrWriter::reusing(std::mem::take(&mut scratch));
            if let Some((p, off)) = padding {
                w.set_padding(Some(p), off);
            }
            rep.emit(&mut w);
            for (i, p) in pieces.iter().enumerate() {
                match in_chunk[i] {
                    Some(n) => w.put_u32(n as u32),
                    None => p.put_inline(&mut w),
                }
            }
            w.into_vec()
        };
        let inline_max = self.maxreply.min(self.cfg.inline_send) as usize;
        // The write list moves into the inline reply's header, and back out of it when the
        // reply is not inline after all (no copy of the lists either way).
        let lists = Chunks {
            reads: vec![],
            writes: returned,
            reply: None,
        };
        let header = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credits: 0,
            body: match self.cfg.reply_padding {
                Some(padding) => RdmaBody::MsgP {
                    padding,
                    chunks: lists,
                },
                None => RdmaBody::Msg(lists),
            },
        };
        let hlen = header.buffer_len();
        let inline_body = header.body;
        let msg = encode(self.cfg.reply_padding.map(|p| (p, hlen)));
        if hlen + msg.len() <= inline_max {
            let r = self.send_header(xid, inline_body, &msg, staged);
            self.reply_scratch = msg;
            return Ok(r?);
        }
        let returned = inline_body.into_chunks().unwrap_or_default().writes;
        let msg = encode(None);
        if let Some(rc) = chunks.reply.as_ref() {
            let cap: u64 = rc.iter().map(|s| u64::from(s.length)).sum();
            if msg.len() as u64 <= cap {
                let mr = self.ep.stage(msg.len());
                mr.write_at(0, &msg);
                let rrc = self.ep.rdma_write(&mr, 0, msg.len(), rc)?;
                staged.push(Res::Stage(mr));
                let body = RdmaBody::NoMsg(Chunks {
                    reads: vec![],
                    writes: returned,
                    reply: Some(rrc.into_vec()),
                });
                return Ok(self.send_header(xid, body, &[], staged)?);
            }
        }
        // Otherwise the draft's read chunk in the reply, released by the client's RDMA_DONE
        // (§3.8), unless that is impossible too: an RFC 8166 requester has no RDMA_DONE to
        // release it with, and its one segment must fit the header beside the returned write
        // list (at most MAX_SEGMENTS in all; a client's parser bounded like ours refuses more).
        // Then no RPC-level reply is possible (RFC 8166 §4.5.3: ERR_CHUNK).
        let returned_segs: usize = returned.iter().map(|a| a.len()).sum();
        let no_read_chunk = if self.rfc8166_peer {
            Some("an RFC 8166 client cannot release a reply read chunk")
        } else if returned_segs + 1 > MAX_SEGMENTS {
            Some("a reply read chunk would put the header over its segment limit")
        } else {
            None
        };
        if let Some(why) = no_read_chunk {
            log::warn!(
                "rpc-server: xid {xid:#x}: reply of {} octets exceeds the client's inline \
                 threshold and no large enough reply chunk was offered; {why} \
                 ({returned_segs} write-list segments); answering ERR_CHUNK",
                msg.len()
            );
            bump(&self.stats.err_chunk, 1);
            // The write-chunk RDMA Writes already posted keep their sources until this Send
            // completes.
            return Ok(self.send_header(xid, RdmaBody::ErrChunk, &[], staged)?);
        }
        if msg.len() > self.cfg.max_chunk {
            return Err(Fail::Chunk("reply longer than the server's chunk limit"));
        }
        let len = msg.len() as u32;
        // The encoded reply itself is the region the client pulls (no copy).
        let mr = self.ep.expose_owned(msg);
        let seg = Segment {
            handle: mr.stag(),
            length: len,
            offset: mr.addr(),
        };
        if let Some((old, _)) = self.done_wait.insert(xid, (mr, Instant::now())) {
            self.ep.pd.dereg_mr(&old);
        }
        // Bound what a client that never sends RDMA_DONE can pin: beyond twice its largest
        // grant, the oldest exposed reply is freed early (as at its timeout).
        let cap = 2 * self.cfg.max_credits.max(1) as usize;
        while self.done_wait.len() > cap {
            let Some((&oldest, _)) = self.done_wait.iter().min_by_key(|(_, (_, t))| *t) else {
                break;
            };
            if let Some((m, _)) = self.done_wait.remove(&oldest) {
                log::warn!(
                    "rpc-server: too many replies awaiting RDMA_DONE; freeing xid {oldest:#x}"
                );
                bump(&self.stats.done_timeouts, 1);
                self.ep.pd.dereg_mr(&m);
            }
        }
        let body = RdmaBody::NoMsg(Chunks {
            reads: vec![ReadSegment {
                position: 0,
                target: seg,
            }],
            writes: returned,
            reply: None,
        });
        Ok(self.send_header(xid, body, &[], staged)?)
    }
}

/// On kernel TCP and the in-memory link the connection's state machine is a hook of its QP's
/// driver thread ([`RdmaServer::serve_request`]): polled after each pass of the engine, so the
/// completions that pass queued are handled, and the replies posted, on that thread.
impl DriverHook for ConnServer {
    fn poll(&mut self) -> HookPoll {
        match ConnServer::poll(self) {
            Ok(true) => HookPoll::Worked,
            Ok(false) => HookPoll::Idle,
            Err(e) => {
                // Disconnects: the driver closes the stream, then drops us.
                self.finish(Err(e));
                HookPoll::Finished
            }
        }
    }

    fn closed(mut self: Box<Self>) {
        self.finish(Err(RpcError::Closed));
    }
}

/// The bytes of a read-chunk region after its RDMA Reads completed, `n` of them: the region's
/// own buffer, handed on without a copy (the data lands once, in the buffer the handler
/// consumes: an NFS WRITE's data goes from there to the file).
fn region_bytes(mr: Mr, n: usize) -> Vec<u8> {
    let mut v = match mr.into_bytes() {
        Ok(v) => v,
        // Still referenced somewhere (not expected once the Reads completed): copy.
        Err(mr) => {
            let mut v = vec![0u8; n];
            mr.read_at(0, &mut v);
            v
        }
    };
    v.truncate(n);
    v
}
