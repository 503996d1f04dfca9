//! The baseline: the same programs over plain ONC RPC on kernel TCP with record marking
//! (RFC 5531 §11). One thread per connection, calls answered in order.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::client::ReplyReader;
use super::program::{ArgReader, Body, Registry};
use super::RpcError;
use crate::wire::oncrpc::{
    record_mark, AcceptStat, Auth, CallError, CallRepr, RecordDecoder, ReplyRepr, ReplyStat,
    RPC_VERSION,
};
use crate::wire::xdr::{XdrReader, XdrWriter};

/// Largest record accepted (a 16 MiB WRITE plus headers).
pub const MAX_RECORD: usize = (16 << 20) + 4096;

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

/// Serve `registry` on `addr` until stopped.
pub fn serve(addr: SocketAddr, registry: Registry) -> std::io::Result<TcpServerHandle> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let reg = Arc::new(registry);
    let join = thread::spawn(move || {
        while !st.load(Ordering::Acquire) {
            match l.accept() {
                Ok((s, _)) => {
                    let reg = reg.clone();
                    thread::spawn(move || {
                        if let Err(e) = serve_conn(s, &reg) {
                            log::debug!("rpc-tcp: connection ended: {e}");
                        }
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(20))
                }
                Err(e) => log::warn!("rpc-tcp: accept: {e}"),
            }
        }
    });
    Ok(TcpServerHandle {
        addr,
        stop,
        join: Some(join),
    })
}

fn serve_conn(mut s: TcpStream, reg: &Registry) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut dec = RecordDecoder::new(MAX_RECORD);
    let mut buf = vec![0u8; 256 * 1024];
    let mut out = Vec::new();
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        dec.push(&buf[..n]);
        loop {
            let rec = match dec.next_record() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    log::warn!("rpc-tcp: {e}; closing");
                    return Ok(());
                }
            };
            let Some(reply) = handle(reg, &rec) else {
                continue;
            };
            out.extend_from_slice(&record_mark(reply.len(), true));
            out.extend_from_slice(&reply);
        }
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
    }
}

/// Answer one record: the encoded reply, or None when it is not a call at all.
pub fn handle(reg: &Registry, rec: &[u8]) -> Option<Vec<u8>> {
    let mut r = XdrReader::new(rec);
    let (rep, body) = match CallRepr::parse(&mut r) {
        Ok(call) => {
            let mut a = ArgReader::new(r, &[]);
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
    let mut w = XdrWriter::new();
    rep.emit(&mut w);
    w.put_raw(&body.to_inline());
    Some(w.into_vec())
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

/// A pipelining TCP RPC client: up to `window` calls outstanding, replies in order.
pub struct TcpClient {
    s: TcpStream,
    dec: RecordDecoder,
    buf: Vec<u8>,
    next_xid: u32,
    inflight: VecDeque<u32>,
    /// Most calls outstanding at once.
    pub window: usize,
}

impl TcpClient {
    /// Connect to `addr` (TCP_NODELAY, 10 s read timeout) allowing `window` (at least 1) calls
    /// outstanding.
    pub fn connect(addr: SocketAddr, window: usize) -> Result<Self, RpcError> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(TcpClient {
            s,
            dec: RecordDecoder::new(MAX_RECORD),
            buf: vec![0u8; 256 * 1024],
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
        let mut w = XdrWriter::new();
        CallRepr {
            xid,
            prog,
            vers,
            proc_,
            cred: Auth::None,
            verf: Auth::None,
        }
        .emit(&mut w);
        w.put_raw(&args.to_inline());
        let mut rec = record_mark(w.len(), true).to_vec();
        rec.extend_from_slice(w.as_slice());
        self.s.write_all(&rec)?;
        self.inflight.push_back(xid);
        Ok((xid, earlier))
    }

    /// The next reply (in call order).
    pub fn wait_next(&mut self) -> Result<TcpReply, RpcError> {
        let want = self
            .inflight
            .pop_front()
            .ok_or(RpcError::Usage("nothing in flight"))?;
        loop {
            if let Some(rec) = self.dec.next_record()? {
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
            let n = self.s.read(&mut self.buf)?;
            if n == 0 {
                return Err(RpcError::Closed);
            }
            self.dec.push(&self.buf[..n]);
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
