//! The baseline: the same programs over plain ONC RPC on kernel TCP with record marking
//! (RFC 5531 §11). One thread per connection, calls answered in order.
//!
//! It is the kernel's side of `rpc-bench --compare`, so it does what a tuned TCP server would:
//! - **No copies of its own.** A message goes out with one vectored write: the record mark,
//!   header and plain XDR from one buffer, each bulk opaque (a READ's block, a WRITE's data)
//!   straight from where it lives; the kernel's copy into the socket is the only one. A
//!   received record fragment larger than [`DIRECT_READ_MIN`] is read by the kernel straight
//!   into the record, again its only copy.
//! - **Blocking or busy-polled** ([`TcpPoll`]): blocking reads, or a non-blocking socket the
//!   thread spins on, as the RDMA side busy-polls its completion queues.
//!
//! Writes never wait while holding a registered region's lock (a READ reply's block in the
//! store): each attempt is non-blocking (`MSG_DONTWAIT`), the lock is dropped before waiting
//! for room (poll(2), or a spin), so a client that stops reading stalls only its own
//! connection, never writers to the store.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{IoSlice, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::client::ReplyReader;
use super::program::{ArgReader, Body, Piece, Registry};
use super::RpcError;
use crate::rdma::memory::MrBytes;
use crate::wire::oncrpc::{
    record_mark, AcceptStat, Auth, CallError, CallRepr, RecordDecoder, ReplyRepr, ReplyStat,
    RPC_VERSION,
};
use crate::wire::xdr::{pad_len, XdrReader, XdrWriter};
use crate::wire::Error as WireError;

/// Largest record accepted (a 16 MiB WRITE plus headers).
pub const MAX_RECORD: usize = (16 << 20) + 4096;

/// A fragment remainder at least this long, with nothing else buffered, is read straight into
/// the record (the kernel's copy only); shorter ones go through the 64 KiB staging buffer,
/// where one read may bring several small records.
pub const DIRECT_READ_MIN: usize = 16 * 1024;

const STAGE_LEN: usize = 64 * 1024;

/// Most room made at once for a fragment read straight into its record beyond what has
/// arrived: a 1 MiB READ reply is read with no reallocation, a header claiming more costs at
/// most this until the octets come.
const DIRECT_RESERVE: usize = 1 << 20;

/// Most buffers handed to one `writev` (Linux's IOV_MAX is 1024).
const MAX_IOV: usize = 512;

/// How a connection's thread waits on its socket (`"blocking"` / `"busy"` in configs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TcpPoll {
    /// Blocking reads; waiting for room to write in poll(2). The thread sleeps in the kernel.
    #[default]
    Blocking,
    /// A non-blocking socket the thread spins on (`WouldBlock` retried at once): the kernel's
    /// busy-polled baseline, each end on its own core.
    Busy,
}

impl TcpPoll {
    /// `blocking` or `busy` (for reports).
    pub fn name(self) -> &'static str {
        match self {
            TcpPoll::Blocking => "blocking",
            TcpPoll::Busy => "busy",
        }
    }
}

/// A running TCP RPC server.
pub struct TcpServerHandle {
    /// The address actually bound (the real port when 0 was asked for).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl TcpServerHandle {
    /// Stop accepting and wait for the accept thread (open connections run on).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Serve `registry` on `addr` until stopped, connections blocking.
pub fn serve(addr: SocketAddr, registry: Registry) -> std::io::Result<TcpServerHandle> {
    serve_with(addr, registry, TcpPoll::Blocking)
}

/// Serve `registry` on `addr` until stopped, each connection's thread waiting as `poll` says.
/// Connection threads inherit the calling thread's CPU affinity.
pub fn serve_with(
    addr: SocketAddr,
    registry: Registry,
    poll: TcpPoll,
) -> std::io::Result<TcpServerHandle> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let reg = Arc::new(registry);
    // Named, so that /proc/PID/task/*/comm shows where the baseline's threads run.
    let join = thread::Builder::new()
        .name("rpc-tcp-accept".into())
        .spawn(move || {
            let mut last_error: Option<Instant> = None;
            while !st.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((s, _)) => {
                        let reg = reg.clone();
                        let conn =
                            thread::Builder::new()
                                .name("rpc-tcp-conn".into())
                                .spawn(move || {
                                    if let Err(e) = serve_conn(s, &reg, poll) {
                                        log::debug!("rpc-tcp: connection ended: {e}");
                                    }
                                });
                        if let Err(e) = conn {
                            log::warn!("rpc-tcp: no thread for a connection: {e}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(20))
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionAborted
                        ) => {}
                    Err(e) => {
                        // Out of descriptors (EMFILE/ENFILE) or memory: the connection waits
                        // in the backlog and the listener stays readable, so trying again at
                        // once would spin. Back off; say so once a second.
                        if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                            log::warn!("rpc-tcp: accept: {e}; trying again shortly");
                            last_error = Some(Instant::now());
                        }
                        thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        })?;
    Ok(TcpServerHandle {
        addr,
        stop,
        join: Some(join),
    })
}

fn serve_conn(s: TcpStream, reg: &Registry, poll: TcpPoll) -> std::io::Result<()> {
    s.set_nonblocking(poll == TcpPoll::Busy)?;
    s.set_nodelay(true)?;
    let peer = s.peer_addr().ok();
    let mut rd = RecordReader::new(MAX_RECORD);
    // Replies to every call one read brought, written together.
    let mut out: Vec<WireMsg<'static>> = Vec::new();
    loop {
        if rd.fill(&s, poll, None)? == 0 {
            return Ok(());
        }
        loop {
            match rd.next_buffered() {
                Ok(Some(rec)) => out.extend(reply(reg, &rec, peer)),
                Ok(None) => break,
                Err(e) => {
                    log::warn!("rpc-tcp: {e}; closing");
                    return Ok(());
                }
            }
        }
        if !out.is_empty() {
            write_msgs(&s, &out, poll, None)?;
            out.clear();
        }
    }
}

/// The reply to one record, or None when it is not a call at all.
fn reply(reg: &Registry, rec: &[u8], peer: Option<SocketAddr>) -> Option<WireMsg<'static>> {
    let mut r = XdrReader::new(rec);
    let (rep, body) = match CallRepr::parse(&mut r) {
        Ok(call) => {
            let mut a = ArgReader::new(r, &[]).with_peer(peer);
            reg.dispatch(&call, &mut a)
        }
        Err(CallError::RpcMismatch { xid }) => (
            ReplyRepr {
                xid,
                stat: ReplyStat::RpcMismatch {
                    low: RPC_VERSION,
                    high: RPC_VERSION,
                },
            },
            Body::new(),
        ),
        Err(CallError::Garbage(e)) => {
            log::warn!("rpc-tcp: not an RPC call: {e}");
            let xid = XdrReader::new(rec).get_u32().ok()?;
            (
                ReplyRepr::accepted(xid, AcceptStat::GarbageArgs),
                Body::new(),
            )
        }
    };
    Some(WireMsg::new(|w| rep.emit(w), body))
}

/// One record as it goes on the wire: the record mark, the RPC header and the plain XDR items
/// encoded in `head`; each bulk opaque's octets left where they are (RFC 4506 §4.10: its
/// length word and padding are in `head`).
struct WireMsg<'a> {
    head: Vec<u8>,
    /// In order: a range of `head`, or the octets of `pieces[i]` (a bulk item).
    parts: Vec<Part>,
    pieces: Cow<'a, [Piece]>,
}

enum Part {
    Head(usize, usize),
    Bulk(usize),
}

impl<'a> WireMsg<'a> {
    /// The record of `header` (emitted by the closure) followed by `body`, as one fragment.
    fn new(header: impl FnOnce(&mut XdrWriter), body: Body) -> WireMsg<'static> {
        WireMsg::encode(header, Cow::Owned(body.into_pieces().into_vec()), &[])
    }

    /// The same for a borrowed body: its bulk items are written from where they are.
    fn borrowing(header: impl FnOnce(&mut XdrWriter), body: &'a Body) -> WireMsg<'a> {
        let (pieces, tail) = body.pieces();
        WireMsg::encode(header, Cow::Borrowed(pieces), tail)
    }

    /// `pieces` then the plain XDR `tail`.
    fn encode(
        header: impl FnOnce(&mut XdrWriter),
        pieces: Cow<'a, [Piece]>,
        tail: &[u8],
    ) -> WireMsg<'a> {
        let mut w = XdrWriter::new();
        w.put_raw(&[0; 4]); // the record mark, once the length is known
        header(&mut w);
        let mut parts = Vec::with_capacity(2 * pieces.len() + 1);
        let mut from = 0;
        let mut bulk = 0;
        for (i, p) in pieces.iter().enumerate() {
            match (p, p.bulk_len()) {
                (Piece::Xdr(b), _) => w.put_raw(b),
                (_, Some(n)) => {
                    w.put_u32(n as u32);
                    parts.push(Part::Head(from, w.len()));
                    parts.push(Part::Bulk(i));
                    bulk += n;
                    from = w.len();
                    w.put_raw(&[0; 3][..pad_len(n)]);
                }
                (_, None) => unreachable!("only Piece::Xdr has no bulk length"),
            }
        }
        w.put_raw(tail);
        parts.push(Part::Head(from, w.len()));
        let mut head = w.into_vec();
        let mark = record_mark(head.len() - 4 + bulk, true);
        head[..4].copy_from_slice(&mark);
        WireMsg {
            head,
            parts,
            pieces,
        }
    }

    /// Octets on the wire, the record mark included.
    fn len(&self) -> usize {
        self.head.len()
            + self
                .pieces
                .iter()
                .filter_map(Piece::bulk_len)
                .sum::<usize>()
    }
}

/// Call `f` with the octets of `msgs` as slices (empty ones left out), holding the read locks
/// of the registered regions they name for as long as `f` runs.
fn with_msgs_slices<R>(msgs: &[WireMsg<'_>], f: impl FnOnce(&[&[u8]]) -> R) -> R {
    let guards: Vec<MrBytes<'_>> = msgs
        .iter()
        .flat_map(|m| m.pieces.iter())
        .filter_map(|p| match p {
            Piece::Region { mem, .. } => Some(mem.bytes()),
            _ => None,
        })
        .collect();
    // Every bulk piece has one `Part::Bulk`, in piece order, so the parts meet the region
    // pieces in the order their guards were taken.
    let mut guard = guards.iter();
    let mut slices: Vec<&[u8]> = Vec::new();
    for m in msgs {
        for part in &m.parts {
            let s: &[u8] = match *part {
                Part::Head(a, b) => &m.head[a..b],
                Part::Bulk(i) => match &m.pieces[i] {
                    Piece::Bulk(d) => d,
                    Piece::Region { offset, len, .. } => {
                        let g = guard.next().expect("one guard per region piece");
                        // Body::put_bulk_region checked the range.
                        &g[*offset..*offset + *len]
                    }
                    Piece::Xdr(_) => unreachable!("bulk parts name bulk pieces"),
                },
            };
            if !s.is_empty() {
                slices.push(s);
            }
        }
    }
    f(&slices)
}

/// Write `msgs` in order. Each attempt is a non-blocking vectored write holding the regions'
/// read locks; the locks are dropped before waiting for room (poll(2) when blocking, a spin
/// when busy), until `deadline` if one is given.
fn write_msgs(
    s: &TcpStream,
    msgs: &[WireMsg<'_>],
    poll: TcpPoll,
    deadline: Option<Instant>,
) -> std::io::Result<()> {
    let total: usize = msgs.iter().map(WireMsg::len).sum();
    let sock = socket2::SockRef::from(s);
    let mut done = 0usize;
    while done < total {
        let r = with_msgs_slices(msgs, |slices| {
            let mut skip = done;
            let mut iov = Vec::with_capacity(slices.len().min(MAX_IOV));
            for b in slices {
                if skip >= b.len() {
                    skip -= b.len();
                    continue;
                }
                iov.push(IoSlice::new(&b[skip..]));
                skip = 0;
                if iov.len() == MAX_IOV {
                    break;
                }
            }
            sock.send_vectored_with_flags(&iov, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        });
        match r {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_ready(s, rustix::event::PollFlags::OUT, poll, deadline)?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Wait until `s` is ready for `what`: in poll(2) when blocking, spinning when busy.
fn wait_ready(
    s: &TcpStream,
    what: rustix::event::PollFlags,
    poll: TcpPoll,
    deadline: Option<Instant>,
) -> std::io::Result<()> {
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    match poll {
        TcpPoll::Busy => {
            std::hint::spin_loop();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out());
            }
            Ok(())
        }
        TcpPoll::Blocking => {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(timed_out());
                    }
                    Some(rustix::event::Timespec {
                        tv_sec: left.as_secs() as i64,
                        tv_nsec: left.subsec_nanos() as i64,
                    })
                }
            };
            let mut fds = [rustix::event::PollFd::new(s, what)];
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(0) => Err(timed_out()),
                Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// Reads record-marked records (RFC 5531 §11) off a stream with no copy of its own for large
/// fragments: small reads land in a staging buffer and [`RecordDecoder`] copies them out; once
/// a fragment has [`DIRECT_READ_MIN`] or more octets to come and nothing is staged, the kernel
/// reads them straight into the record.
struct RecordReader {
    dec: RecordDecoder,
    stage: Box<[u8]>,
    lo: usize,
    hi: usize,
    /// A record completed by a direct read, for the next `next_buffered`.
    ready: Option<Vec<u8>>,
}

impl RecordReader {
    fn new(max_record: usize) -> Self {
        RecordReader {
            dec: RecordDecoder::new(max_record),
            stage: vec![0; STAGE_LEN].into_boxed_slice(),
            lo: 0,
            hi: 0,
            ready: None,
        }
    }

    /// The next complete record from the octets already read; `Ok(None)` if more are needed.
    /// A record longer than the limit is an error (the connection should be closed).
    fn next_buffered(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        if let Some(r) = self.ready.take() {
            return Ok(Some(r));
        }
        let (n, rec) = self.dec.consume(&self.stage[self.lo..self.hi])?;
        self.lo += n;
        Ok(rec)
    }

    /// Read once from `s` (waiting as `poll` says, until `deadline` if given): the octets
    /// read, 0 at the end of the stream.
    fn fill(
        &mut self,
        s: &TcpStream,
        poll: TcpPoll,
        deadline: Option<Instant>,
    ) -> std::io::Result<usize> {
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        }
        loop {
            let direct = match self.dec.fragment_room() {
                Some((rec, left)) if left >= DIRECT_READ_MIN && self.lo == self.hi => {
                    Some((rec, left))
                }
                _ => None,
            };
            let r = if let Some((record, left)) = direct {
                // Into the record's spare room, uninitialised memory not zeroed first (std's
                // `read_buf` for sockets). Room for the rest of the fragment, but never more
                // than what has arrived plus DIRECT_RESERVE: a peer's header alone does not
                // make us allocate the 16 MiB it may claim.
                record.reserve(left.min(record.len().max(DIRECT_RESERVE)));
                let before = record.len();
                let r = Read::take(s, left as u64).read_to_end(record);
                let n = record.len() - before;
                if n > 0 {
                    // n <= left: the read was limited to it.
                    self.ready = self.dec.appended(n).map_err(std::io::Error::other)?;
                }
                match r {
                    Err(_) if n > 0 => Ok(n),
                    Ok(_) => Ok(n),
                    Err(e) => Err(e),
                }
            } else {
                if self.hi == self.stage.len() {
                    // Full (only if read again before every record was taken): keep the
                    // unread octets, at the front.
                    self.stage.copy_within(self.lo..self.hi, 0);
                    self.hi -= self.lo;
                    self.lo = 0;
                }
                let mut s = s;
                let r = s.read(&mut self.stage[self.hi..]);
                if let Ok(n) = r {
                    self.hi += n;
                }
                r
            };
            match r {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && poll == TcpPoll::Busy => {
                    wait_ready(s, rustix::event::PollFlags::IN, poll, deadline)?
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A reply over TCP.
#[derive(Debug)]
pub struct TcpReply {
    /// The RPC reply header (RFC 5531 §9).
    pub header: ReplyRepr,
    msg: Vec<u8>,
    results_at: usize,
}

impl TcpReply {
    /// The results, if the call was accepted with SUCCESS; else the reply status.
    // The error is the reply status as it came, its verifier held inline (no allocation per
    // call): large, and returned only when the call failed.
    #[allow(clippy::result_large_err)]
    pub fn results(&self) -> Result<ReplyReader<'_>, ReplyStat> {
        match &self.header.stat {
            ReplyStat::Accepted {
                stat: AcceptStat::Success,
                ..
            } => Ok(ReplyReader::inline(XdrReader::new(
                &self.msg[self.results_at..],
            ))),
            s => Err(s.clone()),
        }
    }
}

/// How long a client waits for a reply (or for room to send a call) before giving up.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pipelining TCP RPC client: up to `window` calls outstanding, replies in order.
pub struct TcpClient {
    s: TcpStream,
    poll: TcpPoll,
    rd: RecordReader,
    next_xid: u32,
    inflight: VecDeque<u32>,
    /// Most calls outstanding at once.
    pub window: usize,
}

impl TcpClient {
    /// Connect to `addr` (TCP_NODELAY, blocking, [`CLIENT_TIMEOUT`]) allowing `window` (at
    /// least 1) calls outstanding.
    pub fn connect(addr: SocketAddr, window: usize) -> Result<Self, RpcError> {
        Self::connect_with(addr, window, TcpPoll::Blocking)
    }

    /// [`TcpClient::connect`], waiting on the socket as `poll` says.
    pub fn connect_with(addr: SocketAddr, window: usize, poll: TcpPoll) -> Result<Self, RpcError> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        s.set_nonblocking(poll == TcpPoll::Busy)?;
        Ok(TcpClient {
            s,
            poll,
            rd: RecordReader::new(MAX_RECORD),
            next_xid: rand::random(),
            inflight: VecDeque::new(),
            window: window.max(1),
        })
    }

    /// Calls sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Send a call (waits for the oldest reply first if the window is full: returned then).
    /// The arguments' bulk items are written from where they are, not copied.
    pub fn submit(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &Body,
    ) -> Result<(u32, Option<TcpReply>), RpcError> {
        let earlier = if self.inflight.len() >= self.window {
            Some(self.wait_next()?)
        } else {
            None
        };
        self.next_xid = self.next_xid.wrapping_add(1);
        let xid = self.next_xid;
        let call = CallRepr {
            xid,
            prog,
            vers,
            proc_,
            cred: Auth::None,
            verf: Auth::None,
        };
        let m = WireMsg::borrowing(|w| call.emit(w), args);
        write_msgs(
            &self.s,
            std::slice::from_ref(&m),
            self.poll,
            Some(Instant::now() + CLIENT_TIMEOUT),
        )?;
        self.inflight.push_back(xid);
        Ok((xid, earlier))
    }

    /// The next reply (in call order).
    pub fn wait_next(&mut self) -> Result<TcpReply, RpcError> {
        let want = self
            .inflight
            .pop_front()
            .ok_or(RpcError::Usage("nothing in flight"))?;
        let deadline = Instant::now() + CLIENT_TIMEOUT;
        loop {
            if let Some(rec) = self.rd.next_buffered()? {
                let mut r = XdrReader::new(&rec);
                let header = ReplyRepr::parse(&mut r)?;
                if header.xid != want {
                    return Err(RpcError::Usage("reply out of order"));
                }
                let results_at = r.consumed();
                return Ok(TcpReply {
                    header,
                    msg: rec,
                    results_at,
                });
            }
            if self.rd.fill(&self.s, self.poll, Some(deadline))? == 0 {
                return Err(RpcError::Closed);
            }
        }
    }

    /// Call and wait (nothing else in flight).
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &Body,
    ) -> Result<TcpReply, RpcError> {
        self.submit(prog, vers, proc_, args)?;
        while self.inflight.len() > 1 {
            self.wait_next()?;
        }
        self.wait_next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::memory::SharedMem;

    /// A body with plain XDR around a Vec bulk item and a region bulk item of odd lengths.
    fn mixed_body(mem: &SharedMem) -> Body {
        let mut b = Body::new();
        b.xdr().put_u32(7);
        b.put_bulk(vec![1, 2, 3, 4, 5]);
        b.xdr().put_u32(9);
        b.put_bulk_region(mem, 3, 6);
        b
    }

    #[test]
    fn wire_msg_is_the_record_mark_then_the_inline_encoding() {
        let mem = SharedMem::from_vec((0..32).collect());
        let body = mixed_body(&mem);
        let inline = body.to_inline();
        let m = WireMsg::new(|w| w.put_u32(0xabcd), body);
        let mut got = Vec::new();
        with_msgs_slices(std::slice::from_ref(&m), |s| {
            s.iter().for_each(|b| got.extend_from_slice(b))
        });
        let mut want = record_mark(4 + inline.len(), true).to_vec();
        want.extend_from_slice(&0xabcdu32.to_be_bytes());
        want.extend_from_slice(&inline);
        assert_eq!(got, want);
        assert_eq!(m.len(), want.len());
    }

    /// A header claiming a 16 MiB record, then 100 octets: the reader makes room for what may
    /// come soon (1 MiB), not for what the header claims. (Busy-polled, so that `fill` returns
    /// with what has arrived; blocking, it waits for the whole fragment.)
    #[test]
    fn record_reader_allocates_as_octets_arrive() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        rx.set_nonblocking(true).unwrap();
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let mut rd = RecordReader::new(MAX_RECORD);
        std::io::Write::write_all(&mut tx, &record_mark(16 << 20, true)).unwrap();
        assert_eq!(rd.fill(&rx, TcpPoll::Busy, deadline).unwrap(), 4);
        assert!(rd.next_buffered().unwrap().is_none());
        std::io::Write::write_all(&mut tx, &[7; 100]).unwrap();
        assert_eq!(rd.fill(&rx, TcpPoll::Busy, deadline).unwrap(), 100);
        let (record, left) = rd.dec.fragment_room().unwrap();
        assert_eq!((record.len(), left), (100, (16 << 20) - 100));
        assert!(
            record.capacity() <= 2 * DIRECT_RESERVE,
            "{} octets of room for 100 received",
            record.capacity()
        );
    }

    #[test]
    fn record_reader_joins_fragments_and_refuses_long_records() {
        let mut rd = RecordReader::new(10);
        let mut wire = record_mark(3, false).to_vec();
        wire.extend_from_slice(b"abc");
        wire.extend_from_slice(&record_mark(2, true));
        wire.extend_from_slice(b"de");
        wire.extend_from_slice(&record_mark(11, true));
        // Octets arrive one at a time.
        let mut got = Vec::new();
        for &b in &wire {
            rd.stage[rd.hi] = b;
            rd.hi += 1;
            match rd.next_buffered() {
                Ok(Some(r)) => got.push(r),
                Ok(None) => {}
                Err(_) => {
                    got.push(b"refused".to_vec());
                    break;
                }
            }
        }
        assert_eq!(got, vec![b"abcde".to_vec(), b"refused".to_vec()]);
    }
}
