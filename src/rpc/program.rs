//! Programs and handlers: what a server registers and how a handler sees its arguments and
//! builds its results, independent of the transport (RPC-over-RDMA or record-marked TCP).
//!
//! A handler decodes its XDR arguments from an [`ArgReader`] and returns a [`Body`] of results.
//! Bulk data (the DDP-eligible items of RFC 8166 §6.1, e.g. the data of a block READ or WRITE)
//! goes through [`ArgReader::get_bulk`] and [`Body::put_bulk`]: the transport then moves it in
//! read/write chunks when the peer offered them, or inline otherwise. The handler never sees the
//! difference.
//!
//! Zero-copy bulk: a handler whose data lives in registered memory ([`SharedMem`], e.g. the
//! memory block store) returns it with [`Body::put_bulk_region`], and the server RDMA-Writes
//! the write chunk straight from that memory; a procedure registered with a placer
//! ([`Registry::register_with_placement`]) names where its bulk argument belongs, and the server
//! RDMA-Reads the read chunk straight there ([`ArgReader::get_bulk_placed`] then answers
//! [`Bulk::Placed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::verbs::{Access, Mr, Pd, SharedMem};
use crate::wire::oncrpc::{AcceptStat, Auth, CallRepr, ReplyRepr, ReplyStat, AUTH_BADCRED};
use crate::wire::rpcrdma::ReadChunk;
use crate::wire::xdr::{padded, Padding, XdrReader, XdrWriter};
use crate::wire::{Error, Result};

/// A read chunk's payload, already pulled into local memory, at its XDR position (the offset of
/// the data item in the RPC message, RFC 8166 §3.4.5).
#[derive(Debug, Clone)]
pub struct PulledChunk {
    /// XDR position of the chunk in the call.
    pub position: u32,
    /// Where the bytes read from the client's segments are.
    pub data: ChunkData,
}

/// Where a pulled read chunk's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkData {
    /// In a buffer of their own (a region registered for the call), in segment order.
    Bytes(Vec<u8>),
    /// In a buffer of the server's pool of pull buffers ([`VecPool`]), in segment order: given
    /// back to the pool when the call is done with it.
    Pooled(PooledBuf),
    /// RDMA-Read straight into the memory the procedure's placer named ([`Placement`]): this
    /// many bytes, already in place.
    Placed(usize),
}

/// Buffers of `buf_len` octets that read chunks are RDMA-Read into and handed to a procedure
/// as its bulk argument ([`ChunkData::Pooled`]), taken back when the call is done: a WRITE's
/// data lands in memory written before, with no zeroing pass over it, no fresh pages to fault
/// in and no allocation a call (as [`BulkPool`] does for READ results). At most `max_idle`
/// buffers wait in the pool; the ones in use are bounded by what the server lets calls hold
/// (its pull budget).
#[derive(Debug)]
pub struct VecPool {
    buf_len: usize,
    max_idle: usize,
    idle: Mutex<Vec<Vec<u8>>>,
}

impl VecPool {
    /// A pool of `buf_len`-octet buffers, at most `max_idle` kept idle (none made yet).
    pub fn new(buf_len: usize, max_idle: usize) -> Arc<VecPool> {
        Arc::new(VecPool {
            buf_len,
            max_idle,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The size of the pool's buffers.
    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// A buffer of `buf_len` octets: one given back earlier (holding what its last use left
    /// there), or a new zeroed one.
    pub fn take(&self) -> Vec<u8> {
        self.lock().pop().unwrap_or_else(|| vec![0u8; self.buf_len])
    }

    /// Buffers waiting in the pool.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn put(&self, v: Vec<u8>) {
        let mut idle = self.lock();
        if v.len() == self.buf_len && idle.len() < self.max_idle {
            idle.push(v);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The first `len` octets of a buffer of a [`VecPool`], given back to it when dropped.
pub struct PooledBuf {
    buf: Vec<u8>,
    len: usize,
    pool: Option<Arc<VecPool>>,
}

impl PooledBuf {
    /// The first `len` octets (at most all) of `buf`, which goes back to `pool` when dropped.
    pub fn new(buf: Vec<u8>, len: usize, pool: &Arc<VecPool>) -> PooledBuf {
        PooledBuf {
            len: len.min(buf.len()),
            buf,
            pool: Some(pool.clone()),
        }
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(p) = self.pool.take() {
            p.put(std::mem::take(&mut self.buf));
        }
    }
}

/// A copy of the octets in a buffer of its own (not the pool's).
impl Clone for PooledBuf {
    fn clone(&self) -> Self {
        PooledBuf {
            buf: self.to_vec(),
            len: self.len,
            pool: None,
        }
    }
}

impl core::fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PooledBuf").field("len", &self.len).finish()
    }
}

/// The same octets.
impl PartialEq for PooledBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for PooledBuf {}

/// A bulk argument as [`ArgReader::get_bulk_placed`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk<'a> {
    /// The bytes (inline, or a read chunk pulled into a buffer of its own).
    Bytes(&'a [u8]),
    /// A read chunk of this many bytes already RDMA-Read to where the placer said.
    Placed(usize),
}

/// Where a procedure wants the read chunk of its bulk argument: `len` bytes at `offset` of
/// `mem`, for the chunk at XDR `position` (the offset right after the item's length word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// XDR position of the bulk item in the call (RFC 8166 §3.4.5).
    pub position: u32,
    /// The registered memory the data belongs in.
    pub mem: SharedMem,
    /// Offset in `mem`.
    pub offset: usize,
    /// The XDR length of the item: the chunk must carry exactly this many bytes.
    pub len: usize,
}

/// Procedure arguments: the inline XDR stream plus the pulled read chunks.
pub struct ArgReader<'a> {
    /// The inline XDR (positioned after the call header).
    pub xdr: XdrReader<'a>,
    /// The address the call's connection came from, when the transport knows it (an
    /// export's client rules, [`crate::nfs::exports`], match on it).
    pub peer: Option<std::net::SocketAddr>,
    chunks: &'a [PulledChunk],
    next: usize,
    /// The connection's registered result buffers, for a handler run on the connection's own
    /// thread ([`ArgReader::result_buffer`]).
    bufs: Option<&'a mut ResultBufs>,
}

impl ChunkData {
    /// Number of bytes.
    pub fn len(&self) -> usize {
        match self {
            ChunkData::Bytes(d) => d.len(),
            ChunkData::Pooled(d) => d.len(),
            ChunkData::Placed(n) => *n,
        }
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> ArgReader<'a> {
    /// Arguments from `xdr` (after the call header) and the call's pulled read chunks, sorted
    /// by position.
    pub fn new(xdr: XdrReader<'a>, chunks: &'a [PulledChunk]) -> Self {
        ArgReader {
            xdr,
            peer: None,
            chunks,
            next: 0,
            bufs: None,
        }
    }

    /// The same, lending handlers the connection's result buffers.
    pub(crate) fn with_result_bufs(mut self, bufs: &'a mut ResultBufs) -> Self {
        self.bufs = Some(bufs);
        self
    }

    /// A registered buffer of at least `len` bytes for a bulk result (a READ's bytes), lent
    /// by the connection for this call's reply: fill it and name it with
    /// [`Body::put_bulk_region`]; the reply RDMA-Writes the result from it, with no
    /// allocation and no registration per call. `None` where the connection lends none (a
    /// handler on the pool, another transport), for a larger `len`, or while every one is in
    /// use: then use memory of your own.
    pub fn result_buffer(&mut self, len: usize) -> Option<SharedMem> {
        self.bufs.as_deref_mut()?.take(len)
    }

    /// The same, for a call that arrived on a connection from `peer`.
    pub fn with_peer(mut self, peer: Option<std::net::SocketAddr>) -> Self {
        self.peer = peer;
        self
    }

    /// Variable-length opaque data of at most `max` bytes that may have been moved in a read
    /// chunk. The length word is always inline; if the next read chunk sits at the position right
    /// after it, the data is that chunk and its byte count must equal the length word
    /// or that plus its XDR roundup (RFC 8166 §3.4.5.2); a mismatch is a malformed call,
    /// answered GARBAGE_ARGS.
    pub fn get_bulk(&mut self, max: usize) -> Result<&'a [u8]> {
        let len = self.xdr.get_len(max)?;
        let pos = self.xdr.position();
        let chunks: &'a [PulledChunk] = self.chunks;
        if let Some(c) = chunks.get(self.next) {
            if c.position as usize == pos {
                // RFC 8166 §3.4.5.2: the chunk may or may not carry the XDR roundup padding.
                if c.data.len() != len && c.data.len() != padded(len) {
                    log::warn!(
                        "rpc: read chunk at {pos} holds {} bytes, XDR length says {len}",
                        c.data.len()
                    );
                    return Err(Error::Malformed(
                        "read chunk length differs from XDR length",
                    ));
                }
                self.next += 1;
                return match &c.data {
                    ChunkData::Bytes(d) => Ok(&d[..len]),
                    ChunkData::Pooled(d) => Ok(&d[..len]),
                    ChunkData::Placed(_) => Err(Error::Malformed(
                        "bulk argument already placed (use get_bulk_placed)",
                    )),
                };
            }
        }
        self.xdr.skip_msgp_pad(len)?;
        self.xdr.get_fixed(len)
    }

    /// Like [`ArgReader::get_bulk`], for a procedure registered with a placer
    /// ([`Registry::register_with_placement`]): [`Bulk::Placed`] when the server RDMA-Read the
    /// read chunk straight to where the placer said (the data is there, nothing to copy),
    /// else the bytes as `get_bulk` finds them.
    pub fn get_bulk_placed(&mut self, max: usize) -> Result<Bulk<'a>> {
        let chunks: &'a [PulledChunk] = self.chunks;
        if let Some(c) = chunks.get(self.next) {
            if let ChunkData::Placed(n) = c.data {
                let mut x = self.xdr.clone();
                let len = x.get_len(max)?;
                if c.position as usize == x.position() {
                    if n != len {
                        return Err(Error::Malformed("placed chunk differs from XDR length"));
                    }
                    self.xdr = x;
                    self.next += 1;
                    return Ok(Bulk::Placed(n));
                }
            }
        }
        self.get_bulk(max).map(Bulk::Bytes)
    }

    /// After decoding: every read chunk must have been consumed by a bulk item.
    pub fn finish(&self) -> Result<()> {
        if self.next != self.chunks.len() {
            return Err(Error::Malformed(
                "read chunk at a position no bulk item uses",
            ));
        }
        Ok(())
    }
}

/// A piece of a results (or arguments) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Encoded XDR.
    Xdr(Vec<u8>),
    /// An opaque that may travel in a chunk (DDP-eligible).
    Bulk(Vec<u8>),
    /// A DDP-eligible opaque that is `len` bytes of registered memory at `offset`: RDMA-Written
    /// into a write chunk straight from `mem`, copied only when it goes inline.
    Region {
        /// The memory.
        mem: SharedMem,
        /// Offset of the first byte.
        offset: usize,
        /// Number of bytes.
        len: usize,
    },
}

impl Piece {
    /// Append the piece to `w` as plain XDR (bulk items as variable-length opaques).
    pub fn put_inline(&self, w: &mut XdrWriter) {
        match self {
            Piece::Xdr(b) => w.put_raw(b),
            Piece::Bulk(d) => w.put_opaque(d),
            Piece::Region { mem, offset, len } => {
                w.put_opaque(&mem.bytes()[*offset..*offset + *len])
            }
        }
    }

    /// The byte length of a bulk item (`None` for plain XDR).
    pub fn bulk_len(&self) -> Option<usize> {
        match self {
            Piece::Xdr(_) => None,
            Piece::Bulk(d) => Some(d.len()),
            Piece::Region { len, .. } => Some(*len),
        }
    }
}

/// Buffers of memory that handlers read bulk results into (a file's bytes for a READ) and
/// return with [`Body::put_bulk_region`], lent for one reply at a time
/// ([`SharedMem::is_lent`]).
///
/// Against a fresh `Vec` per call, the bytes land in memory that was written before: no
/// zeroing pass over it, no fresh pages to fault in, no allocation of a megabyte (issue 10's
/// "count passes over payload bytes"). The server registers a lent buffer for the one reply
/// and deregisters it when the reply's Send completes (`RpcQp::shared`); the buffer is free
/// again once nothing holds it ([`SharedMem::is_unique`]), which needs no hand-back and so
/// survives a connection that dies with the reply in flight.
///
/// At most `max` buffers of `buf_len` bytes are ever made, as they are first needed; when all
/// are in use [`BulkPool::take`] answers `None` and the handler uses a buffer of its own.
pub struct BulkPool {
    buf_len: usize,
    max: usize,
    bufs: Mutex<Vec<SharedMem>>,
}

impl BulkPool {
    /// A pool of at most `max` buffers of `buf_len` bytes (none made yet).
    pub fn new(buf_len: usize, max: usize) -> Self {
        BulkPool {
            buf_len,
            max,
            bufs: Mutex::new(Vec::new()),
        }
    }

    /// A buffer of at least `len` bytes that nothing else holds, or `None` if `len` is larger
    /// than the pool's buffers or all `max` of them are in use. The buffer's bytes are what
    /// its last use left there: fill what the result needs, and name only that.
    pub fn take(&self, len: usize) -> Option<SharedMem> {
        if len > self.buf_len {
            return None;
        }
        let mut bufs = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        // Unique under the lock: no other handle exists to clone it from meanwhile.
        if let Some(m) = bufs.iter().find(|m| m.is_unique()) {
            return Some(m.clone());
        }
        if bufs.len() >= self.max {
            return None;
        }
        let m = SharedMem::new_lent(self.buf_len);
        bufs.push(m.clone());
        Some(m)
    }

    /// Buffers made so far (at most `max`).
    pub fn buffers(&self) -> usize {
        self.bufs.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Registered buffers one connection lends the handlers that run on its own thread for small
/// bulk results ([`ArgReader::result_buffer`]), each registered once in the connection's PD
/// (local access only: an RDMA Write source) and reused, so a small READ allocates and
/// registers nothing per call. A buffer is taken by a handler, in flight from its reply's
/// RDMA Write until that Send completes ([`ResultBufs::lend`], [`ResultBufs::give_back`]), and
/// free again after; one taken for a reply that did not use it is free again once the call is
/// answered ([`ResultBufs::settle`]). Made as first needed, at most [`ResultBufs::MAX`].
pub(crate) struct ResultBufs {
    pd: Pd,
    bufs: Vec<ResultBuf>,
}

struct ResultBuf {
    mem: SharedMem,
    mr: Mr,
    state: BufState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufState {
    Free,
    Taken,
    InFlight,
}

impl ResultBufs {
    /// Bytes per buffer: results below this go through them (larger READs use the export's
    /// pool, on the handler pool).
    pub const LEN: usize = 32 * 1024;
    /// Buffers per connection at most (as many replies with a result in flight at once).
    pub const MAX: usize = 32;

    pub fn new(pd: Pd) -> Self {
        ResultBufs {
            pd,
            bufs: Vec::new(),
        }
    }

    fn take(&mut self, len: usize) -> Option<SharedMem> {
        if len > Self::LEN {
            return None;
        }
        let i = match self.bufs.iter().position(|b| b.state == BufState::Free) {
            Some(i) => i,
            None if self.bufs.len() < Self::MAX => {
                let mem = SharedMem::new(Self::LEN);
                let mr = self.pd.reg_mr_shared(&mem, Access::LOCAL_WRITE);
                self.bufs.push(ResultBuf {
                    mem,
                    mr,
                    state: BufState::Free,
                });
                self.bufs.len() - 1
            }
            None => return None,
        };
        let b = &mut self.bufs[i];
        b.state = BufState::Taken;
        Some(b.mem.clone())
    }

    /// If `mem` is one of these buffers, taken for the reply being sent: its registration, and
    /// the slot to [`ResultBufs::give_back`] once the reply's Send completed.
    pub fn lend(&mut self, mem: &SharedMem) -> Option<(Mr, usize)> {
        let i = self
            .bufs
            .iter()
            .position(|b| b.state == BufState::Taken && b.mem.same(mem))?;
        self.bufs[i].state = BufState::InFlight;
        Some((self.bufs[i].mr.clone(), i))
    }

    /// The Send of the reply that used buffer `slot` completed (or failed): it is free.
    pub fn give_back(&mut self, slot: usize) {
        if let Some(b) = self.bufs.get_mut(slot) {
            b.state = BufState::Free;
        }
    }

    /// The call is answered: buffers taken for it and not in flight are free again.
    pub fn settle(&mut self) {
        for b in self.bufs.iter_mut().filter(|b| b.state == BufState::Taken) {
            b.state = BufState::Free;
        }
    }

    /// Buffers made so far.
    #[cfg(test)]
    pub fn made(&self) -> usize {
        self.bufs.len()
    }

    /// Deregister every buffer (the connection ended).
    pub fn release_all(&mut self) {
        for b in self.bufs.drain(..) {
            self.pd.dereg_mr(&b.mr);
        }
    }
}

/// A body's pieces in order, held inline up to two (the plain XDR of most calls and replies,
/// or a bulk item and the XDR before it): every call and reply makes one.
pub type Pieces = smallvec::SmallVec<[Piece; 2]>;

/// An XDR body under construction, with bulk items kept apart for chunk placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    pieces: Pieces,
    cur: XdrWriter,
}

impl Body {
    /// An empty body (a `void` result or argument).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty body with room for `cap` octets of plain XDR before it reallocates: a handler
    /// that knows its reply's size writes it without growing the buffer step by step.
    pub fn with_capacity(cap: usize) -> Self {
        Body {
            pieces: Pieces::new(),
            cur: XdrWriter::with_capacity(cap),
        }
    }

    /// The writer for plain XDR items.
    pub fn xdr(&mut self) -> &mut XdrWriter {
        &mut self.cur
    }

    /// Append a DDP-eligible opaque.
    pub fn put_bulk(&mut self, data: Vec<u8>) {
        self.flush();
        self.pieces.push(Piece::Bulk(data));
    }

    /// Append a DDP-eligible opaque that is `len` bytes of registered memory at `offset`
    /// (zero-copy bulk: a server RDMA-Writes a write chunk straight from `mem`; a client's
    /// call lends the window to the server as a read chunk, which the server RDMA-Reads in
    /// place; over TCP or inline the bytes are copied into the message when it is encoded).
    /// The bytes are read when the reply (the call's read chunk) is sent, not now: leave them
    /// unchanged until then (for a call: until its reply has arrived).
    ///
    /// Panics if the range is not inside `mem` (a handler bug: check the range first).
    pub fn put_bulk_region(&mut self, mem: &SharedMem, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= mem.len()),
            "put_bulk_region: range beyond the memory"
        );
        self.flush();
        self.pieces.push(Piece::Region {
            mem: mem.clone(),
            offset,
            len,
        });
    }

    fn flush(&mut self) {
        if !self.cur.is_empty() {
            let w = std::mem::take(&mut self.cur);
            self.pieces.push(Piece::Xdr(w.into_vec()));
        }
    }

    /// The pieces in order, without the plain XDR written since the last bulk item: that is
    /// the second slice (what [`Body::into_pieces`] would make its last piece).
    pub fn pieces(&self) -> (&[Piece], &[u8]) {
        (&self.pieces, self.cur.as_slice())
    }

    /// The pieces in order.
    pub fn into_pieces(mut self) -> Pieces {
        self.flush();
        self.pieces
    }

    /// Everything inline (plain XDR stream), as over TCP.
    pub fn to_inline(&self) -> Vec<u8> {
        let mut w = XdrWriter::new();
        for p in &self.pieces {
            p.put_inline(&mut w);
        }
        if !self.cur.is_empty() {
            w.put_raw(self.cur.as_slice());
        }
        w.into_vec()
    }
}

/// A procedure: arguments in, results (or a non-SUCCESS accept status) out.
pub type ProcFn = Arc<
    dyn Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat> + Send + Sync,
>;

/// A placer: given the call and its arguments (the reader positioned after the call header),
/// where the read chunk of the procedure's bulk argument belongs, or `None` for a region of its
/// own. It must name a destination only where the handler would write the data anyway (the
/// data lands there before the handler runs, even if the handler then fails): the range
/// checked, the store writable.
pub type PlaceFn = Arc<dyn Fn(&CallRepr, &mut XdrReader<'_>) -> Option<Placement> + Send + Sync>;

/// What a procedure that may block does when it must not: the results if it can answer
/// without waiting (the bytes a READ asks for are in memory, the file already open), `None`
/// if it would wait, and then it must have changed nothing a call can observe (it may have
/// filled a cache, as NFS READ's kept descriptors): the call goes to the handler pool, which
/// runs the procedure itself ([`Registry::register_blocking_with_nowait`]).
pub type NowaitFn = Arc<
    dyn Fn(&CallRepr, &mut ArgReader<'_>) -> Option<core::result::Result<Body, AcceptStat>>
        + Send
        + Sync,
>;

struct Proc {
    f: ProcFn,
    place: Option<PlaceFn>,
    nowait: Option<NowaitFn>,
}

impl Clone for Proc {
    fn clone(&self) -> Self {
        Proc {
            f: self.f.clone(),
            place: self.place.clone(),
            nowait: self.nowait.clone(),
        }
    }
}

/// Programs, versions and procedures a server answers (RFC 5531 §7: prog/vers/proc dispatch).
#[derive(Clone, Default)]
pub struct Registry {
    progs: BTreeMap<u32, BTreeMap<u32, BTreeMap<u32, Proc>>>,
    /// Procedures that may block (file I/O): (prog, vers, proc).
    blocking: BTreeSet<(u32, u32, u32)>,
}

impl Registry {
    /// A registry with no programs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `f` for `prog`/`vers`/`proc_`.
    pub fn register<F>(&mut self, prog: u32, vers: u32, proc_: u32, f: F)
    where
        F: Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat>
            + Send
            + Sync
            + 'static,
    {
        self.insert(prog, vers, proc_, Arc::new(f), None);
    }

    /// Register `f` for `prog`/`vers`/`proc_` with a placer for its bulk argument's read chunk
    /// (zero-copy WRITE, see [`PlaceFn`]); `f` takes the argument with
    /// [`ArgReader::get_bulk_placed`].
    pub fn register_with_placement<F, P>(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        f: F,
        place: P,
    ) where
        F: Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat>
            + Send
            + Sync
            + 'static,
        P: Fn(&CallRepr, &mut XdrReader<'_>) -> Option<Placement> + Send + Sync + 'static,
    {
        self.insert(prog, vers, proc_, Arc::new(f), Some(Arc::new(place)));
    }

    fn insert(&mut self, prog: u32, vers: u32, proc_: u32, f: ProcFn, place: Option<PlaceFn>) {
        self.progs
            .entry(prog)
            .or_default()
            .entry(vers)
            .or_default()
            .insert(
                proc_,
                Proc {
                    f,
                    place,
                    nowait: None,
                },
            );
    }

    /// Before the read chunks of an RDMA_MSG/MSGP call (`msg`: the RPC message, read with the
    /// MSGP `padding` after a header of `hlen` octets) are pulled: which of `chunks` (by index)
    /// goes straight into registered memory, and where. `None` (pull into a region of its own)
    /// unless the procedure has a placer, the call would be dispatched to it (credentials as in
    /// [`Registry::dispatch`]), the placer names a range inside its memory, and the call's one
    /// read chunk sits exactly at the placement's position with exactly its length (a chunk that
    /// carries the XDR roundup would write the pad past the range; a second chunk would make the
    /// call malformed after the data landed). Every check that fails falls back to the ordinary
    /// path, which answers malformed calls as before (GARBAGE_ARGS, ERR_CHUNK).
    pub fn placement(
        &self,
        msg: &[u8],
        padding: Option<Padding>,
        hlen: usize,
        chunks: &[ReadChunk],
    ) -> Option<(usize, Placement)> {
        let [chunk] = chunks else {
            return None;
        };
        let mut r = XdrReader::new(msg);
        r.set_padding(padding, hlen);
        let call = CallRepr::parse(&mut r).ok()?;
        if !matches!(call.cred, Auth::None | Auth::Sys(_)) {
            return None;
        }
        let place = self
            .progs
            .get(&call.prog)?
            .get(&call.vers)?
            .get(&call.proc_)?
            .place
            .as_ref()?;
        let p = place(&call, &mut r)?;
        let inside = p
            .offset
            .checked_add(p.len)
            .is_some_and(|e| e <= p.mem.len());
        if p.len == 0 || !inside {
            return None;
        }
        (chunk.position == p.position && chunk.len() == p.len as u64).then_some((0, p))
    }

    /// Register `f` for `prog`/`vers`/`proc_` as a handler that may block (file I/O, fsync):
    /// a server that runs its connections to completion on the thread that moves their bytes
    /// (a dataplane worker's reactor, a kernel-TCP QP's driver thread) hands such calls to its
    /// handler pool instead of running them there
    /// ([`crate::rpc::server::ServerConfig::handler_threads`]).
    pub fn register_blocking<F>(&mut self, prog: u32, vers: u32, proc_: u32, f: F)
    where
        F: Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat>
            + Send
            + Sync
            + 'static,
    {
        self.register(prog, vers, proc_, f);
        self.mark_blocking(prog, vers, proc_);
    }

    /// [`Registry::register_blocking`] with an attempt that never blocks (`nowait`, a
    /// [`NowaitFn`]): a server with a handler pool runs `nowait` first on the connection's own
    /// thread and hands the call to the pool only when it returns `None`, so a call that can be
    /// answered at once (a READ of cached bytes) costs no hand-off between threads, which on a
    /// host with as many busy-polling threads as CPUs means a thread that must be scheduled in
    /// (docs/nfs.md "Calls answered at once").
    pub fn register_blocking_with_nowait<F, N>(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        f: F,
        nowait: N,
    ) where
        F: Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat>
            + Send
            + Sync
            + 'static,
        N: Fn(&CallRepr, &mut ArgReader<'_>) -> Option<core::result::Result<Body, AcceptStat>>
            + Send
            + Sync
            + 'static,
    {
        self.register_blocking(prog, vers, proc_, f);
        self.set_nowait(prog, vers, proc_, nowait);
    }

    /// Give an already registered procedure an attempt that never blocks
    /// ([`Registry::register_blocking_with_nowait`]); nothing if it is not registered.
    pub fn set_nowait<N>(&mut self, prog: u32, vers: u32, proc_: u32, nowait: N)
    where
        N: Fn(&CallRepr, &mut ArgReader<'_>) -> Option<core::result::Result<Body, AcceptStat>>
            + Send
            + Sync
            + 'static,
    {
        if let Some(p) = self
            .progs
            .get_mut(&prog)
            .and_then(|v| v.get_mut(&vers))
            .and_then(|v| v.get_mut(&proc_))
        {
            p.nowait = Some(Arc::new(nowait));
        }
    }

    /// Mark an already registered procedure as one that may block ([`Registry::register_blocking`]).
    pub fn mark_blocking(&mut self, prog: u32, vers: u32, proc_: u32) {
        self.blocking.insert((prog, vers, proc_));
    }

    /// Whether `call`'s handler was registered as one that may block.
    pub fn is_blocking(&self, call: &CallRepr) -> bool {
        !self.blocking.is_empty() && self.blocking.contains(&(call.prog, call.vers, call.proc_))
    }

    /// Run the call: the reply header and (for SUCCESS) the results.
    ///
    /// Credentials: AUTH_NONE and AUTH_SYS are accepted (AUTH_SYS is not verified, as RFC 5531
    /// App. A warns it cannot be); any other flavor is denied with AUTH_ERROR / AUTH_BADCRED.
    pub fn dispatch(&self, call: &CallRepr, args: &mut ArgReader<'_>) -> (ReplyRepr, Body) {
        match self.find(call) {
            Ok(p) => {
                let r = (p.f)(call, args);
                Self::answer(call, args, r)
            }
            Err(refusal) => (refusal, Body::new()),
        }
    }

    /// [`Registry::dispatch`] through the procedure's [`NowaitFn`]: `None` if it has none or
    /// it would block (nothing done; run the call with `dispatch` where blocking is fine).
    /// Calls that are refused (credentials, unknown procedure) are answered by `dispatch`.
    pub fn dispatch_nowait(
        &self,
        call: &CallRepr,
        args: &mut ArgReader<'_>,
    ) -> Option<(ReplyRepr, Body)> {
        let nowait = self.find(call).ok()?.nowait.as_ref()?;
        let r = nowait(call, args)?;
        Some(Self::answer(call, args, r))
    }

    /// The procedure `call` names, or the reply refusing it (with no results).
    // The error is a reply header, its verifier held inline (no allocation per call): large,
    // and returned only for a call no procedure takes.
    #[allow(clippy::result_large_err)]
    fn find(&self, call: &CallRepr) -> core::result::Result<&Proc, ReplyRepr> {
        let xid = call.xid;
        let acc = |s| ReplyRepr::accepted(xid, s);
        if !matches!(call.cred, Auth::None | Auth::Sys(_)) {
            return Err(ReplyRepr {
                xid,
                stat: ReplyStat::AuthError(AUTH_BADCRED),
            });
        }
        let Some(versions) = self.progs.get(&call.prog) else {
            return Err(acc(AcceptStat::ProgUnavail));
        };
        let Some(procs) = versions.get(&call.vers) else {
            let low = versions.keys().next().copied().unwrap_or(0);
            let high = versions.keys().next_back().copied().unwrap_or(0);
            return Err(acc(AcceptStat::ProgMismatch { low, high }));
        };
        procs
            .get(&call.proc_)
            .ok_or_else(|| acc(AcceptStat::ProcUnavail))
    }

    /// The reply to a procedure's result: SUCCESS only if every argument was consumed.
    fn answer(
        call: &CallRepr,
        args: &mut ArgReader<'_>,
        r: core::result::Result<Body, AcceptStat>,
    ) -> (ReplyRepr, Body) {
        let xid = call.xid;
        let acc = |s| (ReplyRepr::accepted(xid, s), Body::new());
        match r {
            Ok(body) => {
                if let Err(e) = args.finish() {
                    log::warn!("rpc: xid {xid:#x}: {e}");
                    return acc(AcceptStat::GarbageArgs);
                }
                (ReplyRepr::success(xid), body)
            }
            Err(s) => acc(s),
        }
    }
}

/// Map an argument-decoding error to GARBAGE_ARGS (RFC 5531 §9), logging why.
pub fn garbage(e: Error) -> AcceptStat {
    log::warn!("rpc: cannot decode arguments: {e}");
    AcceptStat::GarbageArgs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result buffer is registered once and reused: taken by a handler, in flight from its
    /// reply's RDMA Write until the Send completes, free after; one taken for a call that was
    /// not answered with it is free once the call is settled. Never more than MAX, never for a
    /// result larger than LEN.
    #[test]
    fn result_buffers_are_registered_once_and_lent_one_reply_at_a_time() {
        let dev = crate::verbs::Device::open();
        let mut bufs = ResultBufs::new(dev.alloc_pd());
        assert!(bufs.take(ResultBufs::LEN + 1).is_none());
        let a = bufs.take(4096).expect("a buffer");
        let (mr, slot) = bufs.lend(&a).expect("taken for this reply");
        assert!(bufs.lend(&a).is_none(), "lent once");
        // In flight: the next call gets another buffer.
        let b = bufs.take(4096).expect("a second buffer");
        assert!(!b.same(&a));
        bufs.settle();
        assert_eq!(bufs.made(), 2);
        // The second was not used by its reply: free again, and taken before a new one is made.
        let b2 = bufs.take(100).expect("b again");
        assert!(b2.same(&b));
        bufs.settle();
        bufs.give_back(slot);
        let a2 = bufs.take(100).expect("a again");
        assert!(a2.same(&a));
        let (mr2, _) = bufs.lend(&a2).expect("lent");
        assert_eq!(mr2.stag(), mr.stag(), "the same registration");
        assert_eq!(bufs.made(), 2);
        // Every one taken: none beyond MAX.
        let held: Vec<_> = (0..ResultBufs::MAX).map_while(|_| bufs.take(1)).collect();
        assert_eq!(bufs.made(), ResultBufs::MAX);
        assert_eq!(held.len(), ResultBufs::MAX - 1);
        assert!(bufs.take(1).is_none());
        bufs.release_all();
        assert_eq!(bufs.made(), 0);
    }

    /// A pull buffer goes back to its pool when the call drops it (a clone does not), with
    /// only its first `len` octets visible; at most `max_idle` wait there.
    #[test]
    fn pooled_buf_goes_back_when_dropped() {
        let pool = VecPool::new(8, 1);
        let mut v = pool.take();
        assert_eq!(v, vec![0u8; 8], "a new buffer is zeroed");
        v[..3].copy_from_slice(b"abc");
        let b = PooledBuf::new(v, 3, &pool);
        assert_eq!(&*b, b"abc");
        let c = b.clone();
        assert_eq!(b, c);
        drop(c);
        assert_eq!(pool.idle(), 0, "a clone is a buffer of its own");
        drop(b);
        assert_eq!(pool.idle(), 1);
        let again = pool.take();
        assert_eq!(&again[..3], b"abc", "the same buffer, not zeroed again");
        let other = pool.take();
        drop(PooledBuf::new(again, 8, &pool));
        drop(PooledBuf::new(other, 8, &pool));
        assert_eq!(pool.idle(), 1, "no more than max_idle kept");
        drop(PooledBuf::new(vec![0; 4], 4, &pool));
        assert_eq!(pool.idle(), 1, "a buffer of another size is not kept");
    }

    /// A pool lends a buffer again only once nothing holds it: not while a body (a reply in
    /// flight) or a registration of it does; it makes at most `max` and refuses larger asks.
    #[test]
    fn bulk_pool_lends_a_buffer_again_only_when_it_is_free() {
        let pool = BulkPool::new(4096, 2);
        assert_eq!(pool.buffers(), 0, "nothing made before it is needed");
        assert!(pool.take(4097).is_none(), "larger than the buffers");
        let a = pool.take(100).unwrap();
        assert!(a.is_lent() && a.len() == 4096);
        a.bytes_mut()[..3].copy_from_slice(b"abc");
        let mut body = Body::new();
        body.put_bulk_region(&a, 0, 3);
        drop(a);
        // The body holds the first buffer: a second is made, then the pool is exhausted.
        let b = pool.take(4096).unwrap();
        let table = crate::rdma::memory::MemoryTable::new();
        let mr = table.register_shared(
            crate::rdma::memory::PdId(1),
            &b,
            crate::rdma::memory::Access(0),
        );
        drop(b);
        assert!(pool.take(1).is_none(), "both in use");
        assert_eq!(pool.buffers(), 2);
        // The reply's body goes: its buffer is lent again, with what it held.
        assert_eq!(body.pieces.len(), 1);
        drop(body);
        let again = pool.take(1).unwrap();
        assert_eq!(
            &again.bytes()[..3],
            b"abc",
            "the same memory, not a new one"
        );
        assert!(pool.take(1).is_none(), "the registered one is still held");
        // Deregistered and its last handle dropped: free again.
        assert!(table.deregister(mr.stag()));
        drop(mr);
        assert!(pool.take(1).is_some());
        assert_eq!(pool.buffers(), 2, "never more than max");
    }

    #[test]
    fn bulk_from_chunk_with_or_without_roundup() {
        let mut w = XdrWriter::new();
        w.put_u32(5);
        w.put_u32(7);
        let inline = w.into_vec();
        for data in [vec![1u8; 5], vec![1u8, 1, 1, 1, 1, 0, 0, 0]] {
            let chunks = [PulledChunk {
                position: 4,
                data: ChunkData::Bytes(data),
            }];
            let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
            assert_eq!(a.get_bulk(100).unwrap(), &[1u8; 5]);
            assert_eq!(a.xdr.get_u32().unwrap(), 7);
            a.finish().unwrap();
        }
        let chunks = [PulledChunk {
            position: 4,
            data: ChunkData::Bytes(vec![1u8; 6]),
        }];
        let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(
            a.get_bulk(100).is_err(),
            "neither the length nor the rounded length"
        );
        let chunks = [PulledChunk {
            position: 8,
            data: ChunkData::Bytes(vec![1u8; 6]),
        }];
        let a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(a.finish().is_err(), "an unconsumed chunk is refused");
    }

    /// A block-WRITE-like call (offset u64, then an opaque of `len`) with `cred`; returns the
    /// message and the data's XDR position.
    fn write_call(cred: Auth, len: u32) -> (Vec<u8>, u32) {
        let mut w = XdrWriter::new();
        CallRepr {
            xid: 7,
            prog: 9,
            vers: 1,
            proc_: 2,
            cred,
            verf: Auth::None,
        }
        .emit(&mut w);
        w.put_u64(100);
        w.put_u32(len);
        let pos = w.position() as u32;
        (w.into_vec(), pos)
    }

    fn chunk(position: u32, lens: &[u32]) -> ReadChunk {
        ReadChunk {
            position,
            segments: lens
                .iter()
                .map(|&length| crate::wire::rpcrdma::Segment {
                    handle: 1,
                    length,
                    offset: 0,
                })
                .collect(),
        }
    }

    /// `Registry::placement` names a destination only for a well-formed call whose one read
    /// chunk is exactly the placer's range; anything else falls back to the ordinary path.
    #[test]
    fn placement_only_for_an_exact_single_chunk_inside_the_memory() {
        let mem = SharedMem::new(1000);
        let m = mem.clone();
        let mut reg = Registry::new();
        reg.register_with_placement(
            9,
            1,
            2,
            |_, _| Ok(Body::new()),
            move |_, x: &mut XdrReader<'_>| {
                let off = x.get_u64().ok()? as usize;
                let len = x.get_len(1 << 20).ok()?;
                Some(Placement {
                    position: x.position() as u32,
                    mem: m.clone(),
                    offset: off,
                    len,
                })
            },
        );
        reg.register(9, 1, 3, |_, _| Ok(Body::new()));
        let (msg, pos) = write_call(Auth::None, 50);
        let p = reg.placement(&msg, None, 0, &[chunk(pos, &[20, 30])]);
        let (i, p) = p.expect("placed");
        assert_eq!((i, p.offset, p.len, p.position), (0, 100, 50, pos));
        assert!(p.mem.same(&mem));
        // Length differs (also by the XDR roundup), position differs, a second chunk.
        assert!(reg.placement(&msg, None, 0, &[chunk(pos, &[51])]).is_none());
        assert!(reg.placement(&msg, None, 0, &[chunk(pos, &[52])]).is_none());
        assert!(reg
            .placement(&msg, None, 0, &[chunk(pos - 4, &[50])])
            .is_none());
        let two = [chunk(pos, &[50]), chunk(pos + 8, &[4])];
        assert!(reg.placement(&msg, None, 0, &two).is_none());
        assert!(reg.placement(&msg, None, 0, &[]).is_none());
        // Beyond the memory (100 + 901 > 1000), or empty.
        let (big, pos) = write_call(Auth::None, 901);
        assert!(reg
            .placement(&big, None, 0, &[chunk(pos, &[901])])
            .is_none());
        let (empty, pos) = write_call(Auth::None, 0);
        assert!(reg
            .placement(&empty, None, 0, &[chunk(pos, &[0])])
            .is_none());
        // A flavor dispatch denies, a procedure without a placer, a truncated call.
        let other = Auth::Other {
            flavor: 6,
            body: vec![],
        };
        let (denied, pos) = write_call(other, 50);
        assert!(reg
            .placement(&denied, None, 0, &[chunk(pos, &[50])])
            .is_none());
        let mut no_placer = msg.clone();
        no_placer[20..24].copy_from_slice(&3u32.to_be_bytes());
        assert!(reg
            .placement(&no_placer, None, 0, &[chunk(pos, &[50])])
            .is_none());
        assert!(reg
            .placement(&msg[..30], None, 0, &[chunk(pos, &[50])])
            .is_none());
    }

    #[test]
    fn placed_chunk_is_reported_not_copied() {
        let mut w = XdrWriter::new();
        w.put_u32(5);
        let inline = w.into_vec();
        let chunks = [PulledChunk {
            position: 4,
            data: ChunkData::Placed(5),
        }];
        let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert_eq!(a.get_bulk_placed(100).unwrap(), Bulk::Placed(5));
        a.finish().unwrap();
        // get_bulk cannot hand out bytes it does not have.
        let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(a.get_bulk(100).is_err());
        // A placed length that differs from the XDR length is malformed.
        let chunks = [PulledChunk {
            position: 4,
            data: ChunkData::Placed(6),
        }];
        let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(a.get_bulk_placed(100).is_err());
    }

    #[test]
    fn region_pieces_go_inline_as_opaques() {
        let mem = SharedMem::from_vec(b"0123456789".to_vec());
        let mut b = Body::new();
        b.xdr().put_u32(1);
        b.put_bulk_region(&mem, 2, 5);
        b.xdr().put_u32(2);
        let mut w = XdrWriter::new();
        w.put_u32(1);
        w.put_opaque(b"23456");
        w.put_u32(2);
        assert_eq!(b.to_inline(), w.into_vec());
    }
}
