//! Programs and handlers: what a server registers and how a handler sees its arguments and
//! builds its results, independent of the transport (RPC-over-RDMA or record-marked TCP).
//!
//! A handler decodes its XDR arguments from an [`ArgReader`] and returns a [`Body`] of results.
//! Bulk data (the DDP-eligible items of RFC 8166 §6.1, e.g. the data of a block READ or WRITE)
//! goes through [`ArgReader::get_bulk`] and [`Body::put_bulk`]: the transport then moves it in
//! read/write chunks when the peer offered them, or inline otherwise. The handler never sees the
//! difference.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::wire::oncrpc::{AcceptStat, Auth, CallRepr, ReplyRepr, ReplyStat, AUTH_BADCRED};
use crate::wire::xdr::{padded, XdrReader, XdrWriter};
use crate::wire::{Error, Result};

/// A read chunk's payload, already pulled into local memory, at its XDR position (the offset of
/// the data item in the RPC message, RFC 8166 §3.4.5).
#[derive(Debug, Clone)]
pub struct PulledChunk {
    /// XDR position of the chunk in the call.
    pub position: u32,
    /// The bytes read from the client's segments, in order.
    pub data: Vec<u8>,
}

/// Procedure arguments: the inline XDR stream plus the pulled read chunks.
pub struct ArgReader<'a> {
    /// The inline XDR (positioned after the call header).
    pub xdr: XdrReader<'a>,
    chunks: &'a [PulledChunk],
    next: usize,
}

impl<'a> ArgReader<'a> {
    /// Arguments from `xdr` (after the call header) and the call's pulled read chunks, sorted
    /// by position.
    pub fn new(xdr: XdrReader<'a>, chunks: &'a [PulledChunk]) -> Self {
        ArgReader {
            xdr,
            chunks,
            next: 0,
        }
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
                return Ok(&c.data[..len]);
            }
        }
        self.xdr.skip_msgp_pad(len)?;
        self.xdr.get_fixed(len)
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
}

/// An XDR body under construction, with bulk items kept apart for chunk placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    pieces: Vec<Piece>,
    cur: XdrWriter,
}

impl Body {
    /// An empty body (a `void` result or argument).
    pub fn new() -> Self {
        Self::default()
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

    fn flush(&mut self) {
        if !self.cur.is_empty() {
            let w = std::mem::take(&mut self.cur);
            self.pieces.push(Piece::Xdr(w.into_vec()));
        }
    }

    /// The pieces in order.
    pub fn into_pieces(mut self) -> Vec<Piece> {
        self.flush();
        self.pieces
    }

    /// Everything inline (plain XDR stream), as over TCP.
    pub fn to_inline(&self) -> Vec<u8> {
        let mut w = XdrWriter::new();
        for p in self.clone().into_pieces() {
            match p {
                Piece::Xdr(b) => w.put_raw(&b),
                Piece::Bulk(d) => w.put_opaque(&d),
            }
        }
        w.into_vec()
    }
}

/// A procedure: arguments in, results (or a non-SUCCESS accept status) out.
pub type ProcFn = Arc<
    dyn Fn(&CallRepr, &mut ArgReader<'_>) -> core::result::Result<Body, AcceptStat> + Send + Sync,
>;

/// Programs, versions and procedures a server answers (RFC 5531 §7: prog/vers/proc dispatch).
#[derive(Clone, Default)]
pub struct Registry {
    progs: BTreeMap<u32, BTreeMap<u32, BTreeMap<u32, ProcFn>>>,
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
        self.progs
            .entry(prog)
            .or_default()
            .entry(vers)
            .or_default()
            .insert(proc_, Arc::new(f));
    }

    /// Register `f` for `prog`/`vers`/`proc_` as a handler that may block (file I/O, fsync):
    /// a server that runs its connections to completion on a dataplane worker's thread hands
    /// such calls to its handler pool instead of running them there
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
        let xid = call.xid;
        let acc = |s| (ReplyRepr::accepted(xid, s), Body::new());
        if !matches!(call.cred, Auth::None | Auth::Sys(_)) {
            return (
                ReplyRepr {
                    xid,
                    stat: ReplyStat::AuthError(AUTH_BADCRED),
                },
                Body::new(),
            );
        }
        let Some(versions) = self.progs.get(&call.prog) else {
            return acc(AcceptStat::ProgUnavail);
        };
        let Some(procs) = versions.get(&call.vers) else {
            let low = versions.keys().next().copied().unwrap_or(0);
            let high = versions.keys().next_back().copied().unwrap_or(0);
            return acc(AcceptStat::ProgMismatch { low, high });
        };
        let Some(f) = procs.get(&call.proc_) else {
            return acc(AcceptStat::ProcUnavail);
        };
        match f(call, args) {
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

    #[test]
    fn bulk_from_chunk_with_or_without_roundup() {
        let mut w = XdrWriter::new();
        w.put_u32(5);
        w.put_u32(7);
        let inline = w.into_vec();
        for data in [vec![1u8; 5], vec![1u8, 1, 1, 1, 1, 0, 0, 0]] {
            let chunks = [PulledChunk { position: 4, data }];
            let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
            assert_eq!(a.get_bulk(100).unwrap(), &[1u8; 5]);
            assert_eq!(a.xdr.get_u32().unwrap(), 7);
            a.finish().unwrap();
        }
        let chunks = [PulledChunk {
            position: 4,
            data: vec![1u8; 6],
        }];
        let mut a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(
            a.get_bulk(100).is_err(),
            "neither the length nor the rounded length"
        );
        let chunks = [PulledChunk {
            position: 8,
            data: vec![1u8; 6],
        }];
        let a = ArgReader::new(XdrReader::new(&inline), &chunks);
        assert!(a.finish().is_err(), "an unconsumed chunk is refused");
    }
}
