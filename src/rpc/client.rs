//! The RPC-over-RDMA client library (draft-ietf-nfsv4-rpcrdma-01 §3, RFC 8166 §3.3, §4).
//!
//! - inline calls (RDMA_MSG, or RDMA_MSGP with the server's alignment when `padding_thresh` is
//!   set and the server advertised an `align`);
//! - bulk arguments ([`Body::put_bulk`] and [`Body::put_bulk_region`] items of at least
//!   `bulk_threshold` bytes) go in read chunks at their XDR position, registered where they
//!   are (a `put_bulk` Vec is taken over, a `put_bulk_region` window of registered memory is
//!   registered alone for the call: no copy either way); a call too long for the server's
//!   inline limit goes whole in a position-zero read chunk of an RDMA_NOMSG (long call);
//! - write chunks for bulk results and a reply chunk for long replies, per call ([`CallOpts`]);
//! - replies whose body comes as a read chunk are pulled and acknowledged with RDMA_DONE;
//! - credits: at most `min(grant, requested)` calls in flight, where the grant is the last one
//!   the server sent. An RDMA_DONE consumes the one extra receive buffer the server keeps for
//!   it; a second DONE waits until a reply to a later call shows the first was consumed (or, with
//!   no later call, the server frees the chunk at its timeout). Calls never wait for DONEs, so
//!   no grant, even 1, can deadlock.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::endpoint::RpcQp;
use super::program::{Body, Piece};
use super::{ConfigReply, ConfigReq, RpcError, CONFIG_RDMA_PROG, CONF_RDMA, DEFAULT_INLINE};
use crate::cm::{self, CmError, ConnParam, Net};
use crate::mpa::Negotiated;
use crate::transport::Transport;
use crate::verbs::{Device, Mr, MrBytes, Pd, Qp, WcStatus, WorkCompletion};
use crate::wire::oncrpc::{AcceptStat, Auth, CallRepr, ReplyRepr, ReplyStat};
use crate::wire::rpcrdma::{
    Body as RdmaBody, Chunks, HeaderError, HeaderRepr, ReadSegment, Segment, Segments, WriteList,
    RPCRDMA_VERSION,
};
use crate::wire::xdr::{Padding, XdrReader, XdrWriter};
use crate::wire::Error;

/// Initial buffer of a message encoder: a header and a small call fit without reallocating
/// (measured: growing from empty was the client's largest allocation cost on the NULL path).
const ENCODE_CAPACITY: usize = 256;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Credits requested (and receive buffers posted for replies).
    pub credits: u32,
    /// Largest inline call we send (send buffer size; also capped by the server's limit).
    pub inline_send: u32,
    /// Largest inline reply we accept (receive buffer size; our maxreply_sendsize).
    pub inline_recv: u32,
    /// Bulk arguments at least this long go in read chunks.
    pub bulk_threshold: usize,
    /// Send RDMA_MSGP with the server's `align` for opaques of at least this many bytes.
    pub padding_thresh: Option<u32>,
    /// Run CONFIG_RDMA (draft §6) right after connecting.
    pub configure: bool,
    /// MPA / IRD / ORD settings.
    pub conn: ConnParam,
    /// How long to wait for a reply.
    pub timeout: Duration,
    /// Send RDMA_DONE after pulling a reply's read chunk (default true; false only to test the
    /// server's DONE timeout).
    pub send_done: bool,
    /// Busy-poll the receive CQ this long before sleeping (0: never spin).
    pub poll_spin: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            credits: 32,
            inline_send: 4096,
            inline_recv: 4096,
            bulk_threshold: 1024,
            padding_thresh: None,
            configure: true,
            conn: ConnParam::default(),
            timeout: Duration::from_secs(10),
            send_done: true,
            poll_spin: Duration::from_micros(super::server::POLL_SPIN_US),
        }
    }
}

/// Per-call chunk requests.
#[derive(Debug, Clone, Default)]
pub struct CallOpts {
    /// One write chunk of this capacity per bulk result expected, in order.
    pub write_chunks: Vec<usize>,
    /// A reply chunk of this capacity for a long reply.
    pub reply_chunk: Option<usize>,
    /// Split every chunk this call advertises into this many RDMA segments (0 or 1: one);
    /// RFC 8166 §3.4.4 lets a requester divide a chunk at any boundaries.
    pub segments: u32,
}

/// `len` bytes of `mr` as `k` segments (the last takes the remainder).
fn split(mr: &Mr, len: usize, k: u32) -> Segments {
    let k = (k.max(1) as usize).min(len.max(1));
    let step = len / k;
    (0..k)
        .map(|i| {
            let start = i * step;
            let end = if i + 1 == k { len } else { start + step };
            Segment {
                handle: mr.stag(),
                length: (end - start) as u32,
                offset: mr.addr() + start as u64,
            }
        })
        .collect()
}

/// How a reply travelled (for tests and statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyPath {
    /// Inline in an RDMA_MSG (draft §3.1, RFC 8166 §3.5.1).
    Inline,
    /// Inline in an RDMA_MSGP with the server's padding (draft §3.5).
    InlinePadded,
    /// An RDMA_NOMSG whose reply the server wrote into our reply chunk (draft §5.2,
    /// RFC 8166 §3.5.3).
    ReplyChunk,
    /// An RDMA_NOMSG whose reply we pulled from a position-zero read chunk, then acknowledged
    /// with RDMA_DONE (draft §5.1, §3.8; not in RFC 8166).
    ReadChunk,
}

/// Write-chunk regions kept for reuse, shared by the client and its replies: a [`Reply`]
/// holds the write-chunk regions its bulk results are in and gives them back when dropped.
struct SinkCache {
    pd: Pd,
    free: Mutex<Vec<Mr>>,
}

/// Write-chunk regions kept at most.
const MAX_SINK_CACHE: usize = 64;

impl SinkCache {
    fn take(&self, len: usize) -> Option<Mr> {
        let mut f = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let i = f.iter().position(|m| m.len() >= len)?;
        Some(f.swap_remove(i))
    }

    fn put(&self, mr: Mr) {
        let mut f = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if f.len() < MAX_SINK_CACHE {
            f.push(mr);
        } else {
            self.pd.dereg_mr(&mr);
        }
    }
}

/// A completed call.
pub struct Reply {
    /// The RPC reply header (RFC 5531 §9).
    pub header: ReplyRepr,
    /// How the reply travelled.
    pub path: ReplyPath,
    msg: Vec<u8>,
    results_at: usize,
    bulk: ReplyBulk,
    pad: Option<(Padding, usize)>,
    /// The grant the reply carried.
    pub credits: u32,
}

impl core::fmt::Debug for Reply {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reply")
            .field("header", &self.header)
            .field("path", &self.path)
            .field("msg_len", &self.msg.len())
            .field("bulk", &self.bulk.items)
            .field("credits", &self.credits)
            .finish()
    }
}

/// Bulk results in write chunks: each write-chunk region with the length the server wrote
/// (handed out in place by [`ReplyReader::get_bulk`]), given back to the cache on drop.
#[derive(Default)]
struct ReplyBulk {
    items: Vec<(Mr, usize)>,
    sinks: Option<Arc<SinkCache>>,
}

impl Drop for ReplyBulk {
    fn drop(&mut self) {
        if let Some(c) = &self.sinks {
            for (mr, _) in self.items.drain(..) {
                c.put(mr);
            }
        }
    }
}

/// A bulk result as [`ReplyReader::get_bulk`] hands it back: a view of the bytes where they
/// arrived (the write-chunk region the server RDMA-Wrote, or the inline message), not a copy.
/// Derefs to `[u8]`. A write-chunk view holds the region's read lock: placement into that
/// region (only a misbehaving server writes a chunk after its reply) waits while it lives.
pub enum BulkView<'a> {
    /// Inline in the reply message.
    Inline(&'a [u8]),
    /// The first `len` bytes of a write-chunk region.
    Chunk(MrBytes<'a>, usize),
}

impl core::ops::Deref for BulkView<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BulkView::Inline(d) => d,
            BulkView::Chunk(b, n) => &b[..*n],
        }
    }
}

impl core::fmt::Debug for BulkView<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = match self {
            BulkView::Inline(_) => "Inline",
            BulkView::Chunk(..) => "Chunk",
        };
        f.debug_struct("BulkView")
            .field("kind", &kind)
            .field("len", &self.len())
            .finish()
    }
}

impl Reply {
    /// The results, if the call was accepted with SUCCESS.
    // The error is the reply status as it came, its verifier held inline (no allocation per
    // call): large, and returned only when the call failed.
    #[allow(clippy::result_large_err)]
    pub fn results(&self) -> Result<ReplyReader<'_>, ReplyStat> {
        match &self.header.stat {
            ReplyStat::Accepted {
                stat: AcceptStat::Success,
                ..
            } => {
                let mut x = XdrReader::new(&self.msg);
                x.set_padding(self.pad.map(|p| p.0), self.pad.map_or(0, |p| p.1));
                // Skip the header we already parsed.
                let _ = x.get_fixed(self.results_at);
                Ok(ReplyReader {
                    xdr: x,
                    bulk: &self.bulk.items,
                    next: 0,
                })
            }
            s => Err(s.clone()),
        }
    }
}

/// Results decoder: plain XDR plus bulk items that may have arrived in write chunks.
pub struct ReplyReader<'a> {
    /// The inline results, positioned after the reply header.
    pub xdr: XdrReader<'a>,
    bulk: &'a [(Mr, usize)],
    next: usize,
}

impl<'a> ReplyReader<'a> {
    /// A reader over results that came entirely inline (e.g. over TCP).
    pub fn inline(xdr: XdrReader<'a>) -> Self {
        ReplyReader {
            xdr,
            bulk: &[],
            next: 0,
        }
    }

    /// A DDP-eligible opaque: from the next write chunk if the call had one (its returned length
    /// must equal the inline length word), else inline. Either way a view of the bytes where
    /// they arrived ([`BulkView`]): a write chunk's data is not copied out of its region.
    pub fn get_bulk(&mut self, max: usize) -> crate::wire::Result<BulkView<'a>> {
        let len = self.xdr.get_len(max)?;
        let bulk: &'a [(Mr, usize)] = self.bulk;
        if let Some((mr, n)) = bulk.get(self.next) {
            self.next += 1;
            if *n != len {
                return Err(Error::Malformed(
                    "write chunk length differs from XDR length",
                ));
            }
            return Ok(BulkView::Chunk(mr.bytes(), len));
        }
        self.xdr.skip_msgp_pad(len)?;
        self.xdr.get_fixed(len).map(BulkView::Inline)
    }
}

struct Pending {
    seq: u64,
    exposed: Vec<Mr>,
    writes: Vec<Mr>,
    reply_chunk: Option<Mr>,
}

/// Counters a test or benchmark can check.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientStats {
    /// Calls sent.
    pub calls: u64,
    /// RDMA_DONE messages sent (draft §3.8).
    pub dones: u64,
    /// Largest number of calls in flight seen when sending.
    pub max_in_flight: u32,
    /// Times a message was sent with more in flight than the grant allowed (must stay 0).
    pub over_grant: u64,
    /// Calls sent as RDMA_NOMSG with the whole message in a position-zero read chunk (draft
    /// §5.1, RFC 8166 §3.5.3).
    pub long_calls: u64,
    /// Largest RPC-over-RDMA message received in a Send (header and inline reply), in octets:
    /// never above the `maxreply_sendsize` announced by CONFIG_RDMA (draft §6.2).
    pub largest_received: usize,
    /// Octets of registered memory ([`Body::put_bulk_region`]) the server RDMA-Read in place
    /// as read chunks, with no copy on this side.
    pub region_bytes_lent: u64,
}

/// An RPC-over-RDMA client connection.
pub struct RdmaClient {
    ep: RpcQp,
    cfg: ClientConfig,
    grant: u32,
    /// Keyed by XIDs this client chose (FxHash: a server cannot add keys).
    outstanding: FxHashMap<u32, Pending>,
    done: FxHashMap<u32, Result<Reply, RpcError>>,
    unconfirmed_dones: VecDeque<u64>,
    queued_dones: VecDeque<u32>,
    seq: u64,
    next_xid: u32,
    server: ConfigReply,
    ord: u32,
    sink_cache: Arc<SinkCache>,
    /// Reused copy of the reply being handled.
    rx_scratch: Vec<u8>,
    /// Reused buffers of the call being sent: its RPC message, and the Send (header and
    /// inline message).
    call_scratch: Vec<u8>,
    send_scratch: Vec<u8>,
    /// Counters since connecting.
    pub stats: ClientStats,
    /// Credentials put in every call (RFC 5531 §8.2; AUTH_NONE unless changed).
    pub cred: Auth,
    /// The ULP private data of the server's MPA Reply (e.g. RFC 8797 connection private data).
    pub server_private_data: Vec<u8>,
}

impl RdmaClient {
    /// Connect to the server at `addr` through `net` (kernel TCP or a DPDK dataplane
    /// endpoint, [`crate::cm::Net`]), then run CONFIG_RDMA if configured. Everything after the
    /// MPA exchange is the same on both.
    pub fn connect(net: &Net, addr: SocketAddr, cfg: ClientConfig) -> Result<Self, RpcError> {
        Self::connect_with(cfg, net.cq_driver(), net.qp_driver(), |qp, p| {
            net.connect(addr, qp, p)
        })
    }

    /// [`RdmaClient::connect`] on a driven dataplane worker, with `poll` as what waiting for a
    /// completion runs instead of a pass of the client's own worker: for one thread that
    /// drives both ends of a connection in one process (a pass of the client's worker, then
    /// the server's: benches/path_instructions counts an NFS call's instructions so).
    pub fn connect_polling(
        net: &Net,
        addr: SocketAddr,
        cfg: ClientConfig,
        poll: crate::verbs::CqDriver,
    ) -> Result<Self, RpcError> {
        Self::connect_with(cfg, Some(poll), net.qp_driver(), |qp, p| {
            net.connect(addr, qp, p)
        })
    }

    /// Connect over an already-open byte stream (e.g. the in-memory link), then run
    /// CONFIG_RDMA if configured.
    pub fn connect_transport(t: Box<dyn Transport>, cfg: ClientConfig) -> Result<Self, RpcError> {
        Self::connect_with(cfg, None, None, |qp, p| cm::connect(t, qp, p))
    }

    /// Post the reply buffers, connect with `connect`, then run CONFIG_RDMA if configured.
    /// With `driver` (a driven dataplane worker), waiting for completions runs the worker on
    /// the calling thread: the client moves its own bytes, no hand-off. With `doorbell` (the
    /// same worker's transmit, [`cm::Net::qp_driver`]) a call's Send goes straight into the
    /// connection and out when it is posted (`Qp::drive_with`), not at the next poll.
    fn connect_with(
        cfg: ClientConfig,
        driver: Option<crate::verbs::CqDriver>,
        doorbell: Option<crate::verbs::CqDriver>,
        connect: impl FnOnce(&Qp, &ConnParam) -> Result<Negotiated, CmError>,
    ) -> Result<Self, RpcError> {
        let dev = Device::open();
        let pd = dev.alloc_pd();
        let mut ep = RpcQp::create(
            pd,
            cfg.inline_recv as usize,
            cfg.inline_send as usize,
            driver,
        );
        let qp = ep.qp.clone();
        if let Some(d) = doorbell {
            qp.drive_with(d);
        }
        ep.timeout = cfg.timeout;
        ep.spin = cfg.poll_spin;
        for _ in 0..cfg.credits.max(1) {
            ep.add_recv()?;
        }
        let n = connect(&qp, &cfg.conn)?;
        let sink_cache = Arc::new(SinkCache {
            pd: ep.pd.clone(),
            free: Mutex::new(Vec::new()),
        });
        let mut c = RdmaClient {
            server_private_data: n.peer_private_data.clone(),
            ep,
            grant: 1,
            outstanding: FxHashMap::default(),
            done: FxHashMap::default(),
            unconfirmed_dones: VecDeque::new(),
            queued_dones: VecDeque::new(),
            seq: 0,
            next_xid: rand::random(),
            server: ConfigReply {
                maxcall_sendsize: DEFAULT_INLINE,
                align: 0,
                maxrdmaread: u32::from(n.peer_ird.unwrap_or(1)),
            },
            ord: u32::from(n.ord.max(1)),
            sink_cache,
            rx_scratch: Vec::new(),
            call_scratch: Vec::new(),
            send_scratch: Vec::new(),
            stats: ClientStats::default(),
            cred: Auth::None,
            cfg,
        };
        if c.cfg.configure {
            c.configure()?;
        }
        Ok(c)
    }

    /// CONFIG_RDMA (draft §6.2): tell the server our limits, learn its.
    pub fn configure(&mut self) -> Result<ConfigReply, RpcError> {
        let mut args = Body::new();
        ConfigReq {
            maxcall_sendsize: self.cfg.inline_send,
            maxreply_sendsize: self.cfg.inline_recv,
            maxrdmaread: u32::from(self.cfg.conn.responder_resources),
        }
        .emit(args.xdr());
        let rep = self.call(CONFIG_RDMA_PROG, 1, CONF_RDMA, args, &CallOpts::default())?;
        let mut r = rep
            .results()
            .map_err(|_| RpcError::Usage("server refused CONFIG_RDMA"))?;
        let c = ConfigReply::parse(&mut r.xdr)?;
        log::info!("rpc-client: server limits {c:?}");
        self.server = c;
        Ok(c)
    }

    /// The server's limits in force.
    pub fn server_limits(&self) -> ConfigReply {
        self.server
    }

    /// The next XID `submit` would use (tests craft raw messages with it).
    pub fn peek_xid(&self) -> u32 {
        self.next_xid.wrapping_add(1)
    }

    /// The credit value our calls carry.
    pub fn requested(&self) -> u32 {
        self.cfg.credits
    }

    /// The last grant received.
    pub fn grant(&self) -> u32 {
        self.grant
    }

    /// Calls sent and not yet answered.
    pub fn in_flight(&self) -> u32 {
        self.outstanding.len() as u32
    }

    fn limit(&self) -> u32 {
        self.grant.min(self.cfg.credits).max(1)
    }

    /// Calls use the grant; an RDMA_DONE uses the server's one DONE buffer, free again once a
    /// reply to a later call shows the DONE was consumed. Calls never wait for DONEs, so no
    /// credit state can block a call with nothing in flight.
    fn can_send_call(&self) -> bool {
        self.in_flight() < self.limit()
    }

    fn can_send_done(&self) -> bool {
        self.unconfirmed_dones.is_empty()
    }

    fn header(&self, xid: u32, body: RdmaBody) -> HeaderRepr {
        HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credits: self.cfg.credits,
            body,
        }
    }

    fn sink(&mut self, len: usize) -> Mr {
        if let Some(m) = self.sink_cache.take(len) {
            return m;
        }
        self.ep.sink(len)
    }

    /// Start a call; blocks (handling replies) until a credit is free. Returns the XID.
    pub fn submit(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: Body,
        opts: &CallOpts,
    ) -> Result<u32, RpcError> {
        while !self.can_send_call() {
            self.progress(true)?;
        }
        self.next_xid = self.next_xid.wrapping_add(1);
        let xid = self.next_xid;
        let call = CallRepr {
            xid,
            prog,
            vers,
            proc_,
            cred: self.cred.clone(),
            verf: Auth::None,
        };
        let mut pieces = args.into_pieces();
        let thr = self.cfg.bulk_threshold;
        // The length of a bulk item that goes in a read chunk: a `put_bulk` Vec or a
        // `put_bulk_region` window of at least the threshold (a shorter one goes inline).
        let chunked = |p: &Piece| match p {
            Piece::Bulk(d) if d.len() >= thr => Some(d.len()),
            Piece::Region { len, .. } if *len >= thr => Some(*len),
            _ => None,
        };
        // Encode with or without MSGP padding; bulk items in read chunks leave only their
        // length word inline and are recorded with their XDR position (RFC 8166 §3.5.3).
        let encode = |buf: Vec<u8>, pad: Option<(Padding, usize)>| {
            let mut w = XdrWriter::reusing(buf);
            w.reserve(ENCODE_CAPACITY);
            if let Some((p, off)) = pad {
                w.set_padding(Some(p), off);
            }
            call.emit(&mut w);
            let mut reads: Vec<(u32, usize)> = Vec::new();
            for (i, p) in pieces.iter().enumerate() {
                if let Some(n) = chunked(p) {
                    w.put_u32(n as u32);
                    reads.push((w.position() as u32, i));
                } else {
                    p.put_inline(&mut w);
                }
            }
            (w.into_vec(), reads)
        };
        let k = opts.segments;
        let nreads: usize = pieces
            .iter()
            .filter_map(|p| chunked(p).map(|n| (k.max(1) as usize).min(n.max(1))))
            .sum();
        let mut writes = Vec::new();
        let mut wsegs = WriteList::new();
        for &cap in &opts.write_chunks {
            let mr = self.sink(cap);
            wsegs.push(split(&mr, cap, k));
            writes.push(mr);
        }
        let reply_chunk = opts.reply_chunk.map(|cap| self.sink(cap));
        let rseg = reply_chunk
            .as_ref()
            .zip(opts.reply_chunk)
            .map(|(mr, cap)| split(mr, cap, k).into_vec());
        let dummy = ReadSegment {
            position: 0,
            target: Segment::default(),
        };
        let shape = Chunks {
            reads: vec![dummy; nreads],
            writes: wsegs,
            reply: rseg,
        };
        let padding = match (self.cfg.padding_thresh, self.server.align) {
            (Some(thresh), align) if align >= 4 && align.is_power_of_two() => {
                Some(Padding { align, thresh })
            }
            _ => None,
        };
        let inline_body = |c: Chunks| match padding {
            Some(p) => RdmaBody::MsgP {
                padding: p,
                chunks: c,
            },
            None => RdmaBody::Msg(c),
        };
        // The header's length with the read list as it will be (segments not yet known): the
        // write list and reply chunk go in to be measured and come back out.
        let sized = self.header(xid, inline_body(shape));
        let hlen = sized.buffer_len();
        let Chunks {
            writes: wsegs,
            reply: rseg,
            ..
        } = sized.body.into_chunks().unwrap_or_default();
        let inline_max = self.cfg.inline_send.min(self.server.maxcall_sendsize) as usize;
        let buf = std::mem::take(&mut self.call_scratch);
        let (mut msg, mut reads) = encode(buf, padding.map(|p| (p, hlen)));
        let long = hlen + msg.len() > inline_max;
        if long && padding.is_some() {
            (msg, reads) = encode(msg, None);
        }
        let mut exposed = Vec::new();
        let mut rlist = Vec::new();
        if long {
            // The encoded call itself becomes the region the server pulls (no copy).
            let n = msg.len();
            let mr = self.ep.expose_owned(std::mem::take(&mut msg));
            for target in split(&mr, n, k) {
                rlist.push(ReadSegment {
                    position: 0,
                    target,
                });
            }
            exposed.push(mr);
            self.stats.long_calls += 1;
        }
        for (pos, i) in reads {
            // The caller's bulk argument is registered as it is: the server RDMA-Reads it from
            // the buffer the caller filled, no staging copy. A window of registered memory is
            // registered alone, for this call only (RFC 8166 §3.5.3, and §8.2: the server's
            // rights end with the call), so the server reaches no byte beside it.
            let (mr, n) = match pieces.get_mut(i) {
                Some(Piece::Bulk(d)) => {
                    let n = d.len();
                    (self.ep.expose_owned(std::mem::take(d)), n)
                }
                Some(Piece::Region { mem, offset, len }) => {
                    self.stats.region_bytes_lent += *len as u64;
                    (self.ep.expose_window(mem, *offset, *len), *len)
                }
                _ => continue,
            };
            for target in split(&mr, n, k) {
                rlist.push(ReadSegment {
                    position: pos,
                    target,
                });
            }
            exposed.push(mr);
        }
        let chunks = Chunks {
            reads: rlist,
            writes: wsegs,
            reply: rseg,
        };
        let (h, inline_rpc) = if long {
            (self.header(xid, RdmaBody::NoMsg(chunks)), &[][..])
        } else {
            (self.header(xid, inline_body(chunks)), &msg[..])
        };
        let mut w = XdrWriter::reusing(std::mem::take(&mut self.send_scratch));
        w.reserve(ENCODE_CAPACITY + inline_rpc.len());
        h.emit(&mut w);
        debug_assert!(long || w.len() == hlen);
        w.put_raw(inline_rpc);
        self.seq += 1;
        let seq = self.seq;
        self.outstanding.insert(
            xid,
            Pending {
                seq,
                exposed,
                writes,
                reply_chunk,
            },
        );
        self.note_send();
        let sent = self.ep.send(w.as_slice(), vec![]);
        self.send_scratch = w.into_vec();
        if !long {
            self.call_scratch = msg;
        }
        if let Err(e) = sent {
            self.outstanding.remove(&xid);
            return Err(e);
        }
        self.stats.calls += 1;
        Ok(xid)
    }

    fn note_send(&mut self) {
        let f = self.in_flight();
        self.stats.max_in_flight = self.stats.max_in_flight.max(f);
        if f > self.limit() || self.unconfirmed_dones.len() > 1 {
            self.stats.over_grant += 1;
        }
    }

    /// Wait for the reply to `xid`.
    pub fn wait(&mut self, xid: u32) -> Result<Reply, RpcError> {
        loop {
            if let Some(r) = self.done.remove(&xid) {
                return r;
            }
            if !self.outstanding.contains_key(&xid) {
                return Err(RpcError::Usage("unknown xid"));
            }
            self.progress(true)?;
        }
    }

    /// Wait for any reply; returns its XID and result.
    pub fn wait_any(&mut self) -> Result<(u32, Result<Reply, RpcError>), RpcError> {
        loop {
            if let Some(&x) = self.done.keys().next() {
                let r = self.done.remove(&x).expect("present");
                return Ok((x, r));
            }
            if self.outstanding.is_empty() {
                return Err(RpcError::Usage("nothing in flight"));
            }
            self.progress(true)?;
        }
    }

    /// A reply that has arrived (after [`RdmaClient::progress`]), without waiting: its XID and
    /// result; `None` if none is there. For a caller that drives several connections from one
    /// thread.
    pub fn take_reply(&mut self) -> Option<(u32, Result<Reply, RpcError>)> {
        let &x = self.done.keys().next()?;
        self.done.remove(&x).map(|r| (x, r))
    }

    /// Submit and wait.
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: Body,
        opts: &CallOpts,
    ) -> Result<Reply, RpcError> {
        let x = self.submit(prog, vers, proc_, args, opts)?;
        self.wait(x)
    }

    /// Send a raw message (tests: malformed headers). With `Some(xid)` it counts as a call in
    /// flight awaiting a reply under `xid`.
    pub fn send_raw(&mut self, xid: Option<u32>, bytes: &[u8]) -> Result<(), RpcError> {
        self.seq += 1;
        let Some(xid) = xid else {
            return self.ep.send(bytes, vec![]);
        };
        self.outstanding.insert(
            xid,
            Pending {
                seq: self.seq,
                exposed: vec![],
                writes: vec![],
                reply_chunk: None,
            },
        );
        self.ep.send(bytes, vec![])
    }

    /// Handle what has already arrived, without waiting and without running the CQ's driver
    /// (a driven dataplane worker): for a caller that drives several connections on one
    /// worker, which runs the worker once for all of them (e.g. through one connection's
    /// [`RdmaClient::progress`]) rather than once per connection.
    pub fn progress_arrived(&mut self) -> Result<(), RpcError> {
        self.ep.reap_sends()?;
        while let Some(wc) = self.ep.rcq.try_poll_one() {
            self.on_recv_wc(&wc)?;
        }
        self.flush_dones()
    }

    /// Handle what has arrived; with `block`, wait up to the timeout for something.
    pub fn progress(&mut self, block: bool) -> Result<(), RpcError> {
        self.ep.reap_sends()?;
        let wc = if block {
            match self.ep.wait_recv(self.cfg.timeout) {
                Some(wc) => wc,
                None if self.ep.qp.is_closed() => return Err(RpcError::Closed),
                None => return Err(RpcError::Timeout),
            }
        } else {
            match self.ep.rcq.poll_one() {
                Some(wc) => wc,
                None => return Ok(()),
            }
        };
        self.on_recv_wc(&wc)?;
        // Every reply already there too (without running a driven worker again): the caller
        // then submits its next calls together, and the worker's next pass frames them into
        // one segment instead of one segment per call.
        while let Some(wc) = self.ep.rcq.try_poll_one() {
            self.on_recv_wc(&wc)?;
        }
        self.flush_dones()
    }

    fn on_recv_wc(&mut self, wc: &WorkCompletion) -> Result<(), RpcError> {
        if wc.status != WcStatus::Success {
            return Err(RpcError::Rdma(format!("receive: {:?}", wc.status)));
        }
        let mut msg = std::mem::take(&mut self.rx_scratch);
        self.ep.take_recv_into(wc, &mut msg);
        self.stats.largest_received = self.stats.largest_received.max(msg.len());
        self.ep.repost(wc)?;
        let r = self.on_reply(&msg);
        self.rx_scratch = msg;
        r
    }

    fn flush_dones(&mut self) -> Result<(), RpcError> {
        while !self.queued_dones.is_empty() && self.can_send_done() {
            let xid = self.queued_dones.pop_front().expect("non-empty");
            let mut w = XdrWriter::new();
            self.header(xid, RdmaBody::Done).emit(&mut w);
            self.seq += 1;
            self.unconfirmed_dones.push_back(self.seq);
            self.ep.send(w.as_slice(), vec![])?;
            self.stats.dones += 1;
        }
        Ok(())
    }

    fn finish(&mut self, xid: u32, r: Result<Reply, RpcError>) {
        if let Some(p) = self.outstanding.remove(&xid) {
            // Every DONE sent before this call reached the server before it (in order).
            while self.unconfirmed_dones.front().is_some_and(|&s| s < p.seq) {
                self.unconfirmed_dones.pop_front();
            }
            for m in p.exposed {
                self.ep.pd.dereg_mr(&m);
            }
            for m in p.writes.into_iter().chain(p.reply_chunk) {
                self.sink_cache.put(m);
            }
            self.done.insert(xid, r);
        } else {
            log::warn!("rpc-client: reply for unknown xid {xid:#x}");
        }
    }

    fn on_reply(&mut self, msg: &[u8]) -> Result<(), RpcError> {
        let (h, hlen) = match HeaderRepr::parse(msg) {
            Ok(x) => x,
            Err(HeaderError::Short) => {
                log::warn!("rpc-client: short message dropped");
                return Ok(());
            }
            Err(HeaderError::Version { xid, vers }) => {
                self.finish(xid, Err(RpcError::Wire(Error::Malformed("reply version"))));
                log::warn!("rpc-client: reply with version {vers}");
                return Ok(());
            }
            Err(HeaderError::Chunk { xid, err }) => {
                self.finish(xid, Err(RpcError::Wire(err)));
                return Ok(());
            }
        };
        if h.credits == 0 {
            log::warn!("rpc-client: server granted 0 credits; keeping 1");
        }
        let xid = h.xid;
        let (rpc, pad, path, writes) = match h.body {
            RdmaBody::ErrVers { low, high } => {
                self.grant = h.credits.max(1);
                self.finish(xid, Err(RpcError::ErrVers { low, high }));
                return Ok(());
            }
            RdmaBody::ErrChunk => {
                self.grant = h.credits.max(1);
                self.finish(xid, Err(RpcError::ErrChunk));
                return Ok(());
            }
            RdmaBody::Done => {
                log::warn!("rpc-client: server sent RDMA_DONE; ignored");
                return Ok(());
            }
            RdmaBody::Msg(c) => (msg[hlen..].to_vec(), None, ReplyPath::Inline, c),
            RdmaBody::MsgP { padding, chunks } => (
                msg[hlen..].to_vec(),
                Some((padding, hlen)),
                ReplyPath::InlinePadded,
                chunks,
            ),
            RdmaBody::NoMsg(c) => {
                if let Some(rc) = &c.reply {
                    let n: u64 = rc.iter().map(|s| u64::from(s.length)).sum();
                    let Some(p) = self.outstanding.get(&xid) else {
                        log::warn!("rpc-client: reply for unknown xid {xid:#x}");
                        return Ok(());
                    };
                    let Some(mr) = p.reply_chunk.as_ref().filter(|m| n <= m.len() as u64) else {
                        self.finish(xid, Err(RpcError::Wire(Error::Malformed("reply chunk"))));
                        return Ok(());
                    };
                    let mut v = vec![0u8; n as usize];
                    mr.read_at(0, &mut v);
                    (v, None, ReplyPath::ReplyChunk, c)
                } else if let Some(first) = c.reads.first().filter(|r| r.position == 0) {
                    let seg = first.target;
                    if u64::from(seg.length) > 64 << 20 {
                        self.finish(
                            xid,
                            Err(RpcError::Wire(Error::Malformed("huge read chunk"))),
                        );
                        return Ok(());
                    }
                    let segs: Vec<Segment> = c
                        .reads
                        .iter()
                        .filter(|r| r.position == 0)
                        .map(|r| r.target)
                        .collect();
                    let total: usize = segs.iter().map(|s| s.length as usize).sum();
                    let mr = self.ep.stage(total);
                    let window = self.ord.min(self.server.maxrdmaread).max(1) as usize;
                    let n = self.ep.rdma_read(&segs, &mr, window)?;
                    let mut v = vec![0u8; n];
                    mr.read_at(0, &mut v);
                    self.ep.unstage(mr);
                    if self.cfg.send_done {
                        self.queued_dones.push_back(xid);
                    }
                    (v, None, ReplyPath::ReadChunk, c)
                } else {
                    self.finish(
                        xid,
                        Err(RpcError::Wire(Error::Malformed("empty NOMSG reply"))),
                    );
                    return Ok(());
                }
            }
        };
        self.grant = h.credits.max(1);
        // Bulk results from the write chunks, with the lengths the server returned: the
        // reply takes the write-chunk regions themselves (a view, no copy; back to the cache
        // when the reply is dropped).
        let mut bulk = Vec::new();
        if let Some(p) = self.outstanding.get_mut(&xid) {
            let ok = writes.writes.len() <= p.writes.len()
                && writes.writes.iter().zip(&p.writes).all(|(segs, mr)| {
                    segs.iter().map(|s| u64::from(s.length)).sum::<u64>() <= mr.len() as u64
                });
            if !ok {
                self.finish(xid, Err(RpcError::Wire(Error::Malformed("write list"))));
                return Ok(());
            }
            let used: Vec<Mr> = p.writes.drain(..writes.writes.len()).collect();
            for (segs, mr) in writes.writes.iter().zip(used) {
                let n: u64 = segs.iter().map(|s| u64::from(s.length)).sum();
                bulk.push((mr, n as usize));
            }
        }
        let mut r = XdrReader::new(&rpc);
        let parsed = ReplyRepr::parse(&mut r).map(|h| (h, r.consumed()));
        let r = match parsed {
            Ok((header, results_at)) => Ok(Reply {
                header,
                path,
                msg: rpc,
                results_at,
                bulk: ReplyBulk {
                    items: bulk,
                    sinks: Some(self.sink_cache.clone()),
                },
                pad,
                credits: h.credits,
            }),
            Err(e) => {
                for (mr, _) in bulk {
                    self.sink_cache.put(mr);
                }
                Err(RpcError::Wire(e))
            }
        };
        self.finish(xid, r);
        Ok(())
    }

    /// Close the connection.
    pub fn disconnect(&self) {
        self.ep.qp.disconnect();
    }
}

impl Drop for RdmaClient {
    fn drop(&mut self) {
        self.ep.qp.disconnect();
    }
}
