//! The RPC-over-RDMA server framework.
//!
//! Connections arrive through `cm`'s one connection API ([`RdmaServer::listen`] on a
//! [`Net`]: kernel TCP, whose driver thread moves the bytes, or the DPDK dataplane with the
//! `dpdk` feature, whose poll-mode worker moves them); after the MPA exchange both are served
//! alike. Every accepted connection gets a thread that
//! polls its receive and send CQs. A received message is copied out of its buffer, the buffer
//! re-posted at once (its credit replenished), and the message handled to completion:
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::credits::{ConnCredits, CreditPool};
use super::endpoint::{Endpoint, Res};
use super::program::{ArgReader, Body, ChunkData, Piece, Placement, PulledChunk, Registry};
use super::{ConfigReply, ConfigReq, RpcError, CONFIG_RDMA_PROG, CONF_RDMA, DEFAULT_INLINE};
use crate::cm::{CmError, ConnParam, ConnRequest, ListenConfig, Listener, Net};
use crate::transport::Transport;
use crate::verbs::{Access, Device, Mr, WcStatus};
use crate::wire::oncrpc::{AcceptStat, CallError, CallRepr, ReplyRepr, ReplyStat, RPC_VERSION};
use crate::wire::rpcrdma::{
    Body as RdmaBody, Chunks, HeaderError, HeaderRepr, ReadSegment, Segment, RPCRDMA_VERSION,
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
    /// Busy-poll a connection's receive CQ this long before sleeping (0: never spin).
    pub poll_spin: Duration,
    /// The listener's MPA startups: deadline and cap ([`RdmaServer::listen`]). `None` (the
    /// default): the transport's own, [`ListenConfig::default`] on kernel TCP and the dataplane
    /// config's `[tcp]` keys on DPDK. When set, its `nodelay` is `conn.nodelay`.
    pub listen: Option<ListenConfig>,
}

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
            listen: None,
        }
    }
}

/// Initial buffer of a message encoder: a header and a small reply fit without reallocating
/// (measured: growing from empty was the server's largest allocation cost on the NULL path).
const ENCODE_CAPACITY: usize = 256;

/// MPA reject private data when the credit pool cannot admit a connection.
const NO_CREDITS: &[u8] = b"rpcrdma: no credits";

/// Default busy-poll before sleeping on a CQ (see docs/rpc.md, measured).
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
    /// Read-chunk bytes RDMA Read straight into a procedure's registered memory
    /// ([`Registry::register_with_placement`]).
    pub bulk_placed_bytes: AtomicU64,
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
        }
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
        Ok(self.serve(listener)?)
    }

    /// Serve the requests of `listener` until stopped ([`RdmaServer::listen`]).
    pub fn serve(&self, listener: Listener) -> std::io::Result<ServerHandle> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let me = self.clone();
        let join = thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    let req = match listener.get_request(Duration::from_millis(200)) {
                        Ok(r) => r,
                        Err(CmError::Timeout) => continue,
                        Err(e) => {
                            log::warn!("rpc-server: listener: {e}");
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    let srv = me.clone();
                    thread::spawn(move || {
                        if let Err(e) = srv.serve_request(req) {
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
    pub fn serve_transport(&self, t: Box<dyn Transport>) -> Result<JoinHandle<()>, RpcError> {
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

    /// Accept one connection request and start its thread. Refused (MPA reject) when the credit
    /// pool cannot give it a grant of 1 plus its DONE slot.
    pub fn serve_request(&self, req: ConnRequest) -> Result<JoinHandle<()>, RpcError> {
        let Some(credits) = self.pool.join() else {
            log::warn!("rpc-server: credit pool exhausted, rejecting a connection");
            let _ = req.reject(NO_CREDITS);
            return Err(RpcError::Usage("credit pool exhausted"));
        };
        self.serve_accepted(credits, req)
    }

    /// Post the connection's receive buffers, accept `req` and start the connection's thread.
    /// A client that sends RFC 8797 connection private data in its MPA Request (the Linux
    /// NFS/RDMA client does) is an RFC 8166 requester and gets ours in the MPA Reply; its
    /// receive size is the inline reply limit from the start (RFC 8797 §4.2).
    fn serve_accepted(
        &self,
        credits: ConnCredits,
        req: ConnRequest,
    ) -> Result<JoinHandle<()>, RpcError> {
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
        let mut ep = Endpoint::create(
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
        let conn = ConnServer {
            stats: self.stats.clone(),
            ep,
            reg: self.registry.clone(),
            cfg: self.cfg.clone(),
            credits,
            done_wait: HashMap::new(),
            maxreply: cpd.map_or(DEFAULT_INLINE, |c| c.recv_size),
            rfc8166_peer: cpd.is_some(),
            peer_maxrdmaread: peer_ird,
            ord: u32::from(n.ord.max(1)),
            rx_scratch: Vec::new(),
        };
        // Named so a profile (`perf report --sort comm`) tells the RPC threads from the rest.
        Ok(thread::Builder::new()
            .name("rpc-conn".into())
            .spawn(move || conn.run())?)
    }
}

struct ConnServer {
    stats: Arc<ServerStats>,
    ep: Endpoint,
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
    fn run(mut self) {
        let r = self.serve();
        match r {
            Ok(()) => log::info!("rpc-server: connection closed"),
            Err(e) => log::warn!("rpc-server: connection ended: {e}"),
        }
        self.ep.qp.disconnect();
        for (_, (mr, _)) in self.done_wait.drain() {
            self.ep.pd.dereg_mr(&mr);
        }
    }

    fn serve(&mut self) -> Result<(), RpcError> {
        let mut last_sweep = Instant::now();
        loop {
            self.ep.reap_sends()?;
            match self.ep.wait_recv(Duration::from_millis(20)) {
                Some(wc) => {
                    if wc.status != WcStatus::Success {
                        if self.ep.qp.is_closed() || wc.status == WcStatus::WrFlushErr {
                            return Ok(());
                        }
                        return Err(RpcError::Rdma(format!("receive failed: {:?}", wc.status)));
                    }
                    // Copied out into a buffer reused across messages, so the receive buffer
                    // can be re-posted (its credit replenished) before the message is handled.
                    let mut msg = std::mem::take(&mut self.rx_scratch);
                    if !self.ep.take_recv_into(&wc, &mut msg) {
                        self.rx_scratch = msg;
                        continue;
                    }
                    if self.credits.repost() {
                        self.ep.repost(&wc)?;
                    }
                    self.on_message(&msg)?;
                    self.rx_scratch = msg;
                }
                None if self.ep.qp.is_closed() => return Ok(()),
                None => {}
            }
            if last_sweep.elapsed() > Duration::from_millis(100) {
                last_sweep = Instant::now();
                self.sweep_done();
            }
        }
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
        let step = self.credits.next_reply();
        for _ in 0..step.post {
            self.ep.add_recv()?;
        }
        let h = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credits: step.credits,
            body,
        };
        let mut w = XdrWriter::with_capacity(ENCODE_CAPACITY + rpc.len());
        h.emit(&mut w);
        w.put_raw(rpc);
        self.ep.send(w.as_slice(), hold)
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

    /// RDMA-Read a read chunk (RFC 8166 §3.5.3) into a region registered for this call, then
    /// hand its bytes on as they are: the data lands once, in the buffer the handler consumes
    /// (an NFS WRITE's data goes from there to the file), with no staging copy in between.
    fn pull(&mut self, segs: &[Segment], len: usize) -> Result<Vec<u8>, Fail> {
        let window = self.ord.min(self.peer_maxrdmaread).max(1) as usize;
        let mr = self.ep.pd.reg_mr(len.max(1), Access::LOCAL_WRITE);
        let r = self.ep.rdma_read(segs, &mr, window);
        bump(&self.stats.reads_pulled, 1);
        self.ep.pd.dereg_mr(&mr);
        match r {
            Ok(n) => {
                let mut v = match mr.into_bytes() {
                    Ok(v) => v,
                    // Still referenced somewhere (not expected once the Read completed): copy.
                    Err(mr) => {
                        let mut v = vec![0u8; n];
                        mr.read_at(0, &mut v);
                        v
                    }
                };
                v.truncate(n);
                Ok(v)
            }
            Err(e) => Err(Fail::Fatal(e)),
        }
    }

    /// RDMA-Read a read chunk straight into the memory its procedure's placer named
    /// ([`Registry::placement`] checked the range and the length).
    fn pull_placed(&mut self, segs: &[Segment], p: &Placement) -> Result<usize, Fail> {
        let window = self.ord.min(self.peer_maxrdmaread).max(1) as usize;
        let (mr, held) = self.ep.shared(&p.mem);
        let r = self.ep.rdma_read_at(segs, &mr, p.offset, window);
        self.ep.release(held);
        bump(&self.stats.reads_pulled, 1);
        let n = r.map_err(Fail::Fatal)?;
        bump(&self.stats.bulk_placed_bytes, n as u64);
        Ok(n)
    }

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
        let mut total = 0u64;
        for c in &rcs {
            total += c.len();
        }
        if total > self.cfg.max_chunk as u64 {
            return Err(Fail::Chunk("read chunks larger than the server's limit"));
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
        let mut rest = &rcs[..];
        let owned;
        let msg: &[u8] = match inline {
            Some(m) => {
                if rcs.first().is_some_and(|c| c.position == 0) {
                    return Err(Fail::Chunk("position-zero read chunk in an RDMA_MSG"));
                }
                m
            }
            None => {
                let Some(first) = rcs.first().filter(|c| c.position == 0) else {
                    return Err(Fail::Chunk(
                        "RDMA_NOMSG call without a position-zero read chunk",
                    ));
                };
                owned = self.pull(&first.segments, first.len() as usize)?;
                rest = &rcs[1..];
                &owned
            }
        };
        // Zero-copy WRITE: the read chunk a procedure places straight into its memory.
        let place = self.reg.placement(msg, padding, hlen, rest);
        let mut pulled = Vec::with_capacity(rest.len());
        for (i, c) in rest.iter().enumerate() {
            if c.position as usize > msg.len() {
                return Err(Fail::Chunk("read chunk position beyond the message"));
            }
            let data = match place.as_ref().filter(|p| p.0 == i) {
                Some((_, p)) => ChunkData::Placed(self.pull_placed(&c.segments, p)?),
                None => {
                    let d = self.pull(&c.segments, c.len() as usize)?;
                    bump(&self.stats.bulk_staged_bytes, d.len() as u64);
                    ChunkData::Bytes(d)
                }
            };
            pulled.push(PulledChunk {
                position: c.position,
                data,
            });
        }
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
                return self.reply(xid, rep, Body::new(), &chunks);
            }
            Err(CallError::Garbage(e)) => {
                log::warn!("rpc-server: xid {xid:#x}: RPC call header: {e}; GARBAGE_ARGS");
                let rep = ReplyRepr::accepted(xid, AcceptStat::GarbageArgs);
                return self.reply(xid, rep, Body::new(), &chunks);
            }
        };
        if call.xid != xid {
            log::warn!(
                "rpc-server: RPC xid {:#x} differs from transport xid {xid:#x}; using the latter",
                call.xid
            );
        }
        bump(&self.stats.calls, 1);
        let (rep, body) = if call.prog == CONFIG_RDMA_PROG {
            self.config_rdma(&call, &mut r)
        } else {
            let mut args = ArgReader::new(r, &pulled);
            self.reg.dispatch(&call, &mut args)
        };
        let rep = ReplyRepr { xid, ..rep };
        self.reply(xid, rep, body, &chunks)
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
        let mut returned: Vec<Vec<Segment>> = chunks
            .writes
            .iter()
            .map(|c| c.iter().map(|s| Segment { length: 0, ..*s }).collect())
            .collect();
        let mut wi = 0usize;
        // Bulk items moved into write chunks: their length (the XDR keeps only that).
        let mut in_chunk: Vec<Option<usize>> = vec![None; pieces.len()];
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
                            let (mr, held) = self.ep.shared(mem);
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
        let encode = |padding: Option<(Padding, usize)>| {
            let mut w = XdrWriter::with_capacity(ENCODE_CAPACITY);
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
        let lists = Chunks {
            reads: vec![],
            writes: returned.clone(),
            reply: None,
        };
        let inline_body = match self.cfg.reply_padding {
            Some(padding) => RdmaBody::MsgP {
                padding,
                chunks: lists.clone(),
            },
            None => RdmaBody::Msg(lists.clone()),
        };
        let hlen = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credits: 0,
            body: inline_body.clone(),
        }
        .buffer_len();
        let msg = encode(self.cfg.reply_padding.map(|p| (p, hlen)));
        if hlen + msg.len() <= inline_max {
            return Ok(self.send_header(xid, inline_body, &msg, staged)?);
        }
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
                    reply: Some(rrc),
                });
                return Ok(self.send_header(xid, body, &[], staged)?);
            }
        }
        // An RFC 8166 requester cannot release a reply read chunk (no RDMA_DONE): no RPC-level
        // reply is possible (RFC 8166 §4.5.3: ERR_CHUNK).
        if self.rfc8166_peer {
            log::warn!(
                "rpc-server: xid {xid:#x}: reply of {} octets exceeds the client's inline \
                 threshold and no large enough reply chunk was offered; answering ERR_CHUNK",
                msg.len()
            );
            bump(&self.stats.err_chunk, 1);
            // The write-chunk RDMA Writes already posted keep their sources until this Send
            // completes.
            return Ok(self.send_header(xid, RdmaBody::ErrChunk, &[], staged)?);
        }
        // Long reply without (a large enough) reply chunk: the draft's read chunk in the reply,
        // released by the client's RDMA_DONE (§3.8).
        if msg.len() > self.cfg.max_chunk {
            return Err(Fail::Chunk("reply longer than the server's chunk limit"));
        }
        let mr = self.ep.expose(&msg);
        let seg = Segment {
            handle: mr.stag(),
            length: msg.len() as u32,
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
