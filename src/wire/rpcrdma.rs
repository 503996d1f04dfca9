//! The RPC-over-RDMA transport header (draft-ietf-nfsv4-rpcrdma-01 §4, wire-compatible with
//! RFC 8166 §4.1-§4.2 version 1 and §4.3 chunk encoding).
//!
//! ```text
//! rdma_xid | rdma_vers | rdma_credit | rdma_proc | body
//! RDMA_MSG / RDMA_NOMSG : read list, write list, reply chunk   (RPC message follows MSG)
//! RDMA_MSGP             : rdma_align, rdma_thresh, the same three lists, then the RPC message
//! RDMA_DONE             : nothing                              (draft §3.8)
//! RDMA_ERROR            : ERR_VERS low, high | ERR_CHUNK       (draft §5.3, RFC 8166 §4.5)
//! ```
//!
//! Lists are XDR optional-data chains (RFC 4506 §4.19): a 1 before every entry, a 0 at the end.
//! A read list is a flat list of (position, segment); consecutive entries with the same position
//! form one read chunk (RFC 8166 §3.4.5, §4.3.1). A write list is a list of segment arrays, one array per
//! write chunk; the reply chunk is one optional segment array.
//!
//! Parsing is bounded: at most [`MAX_SEGMENTS`] segments in all lists, so a hostile header cannot
//! make us allocate more than a few KiB.

use super::xdr::{Padding, XdrReader, XdrWriter};
use super::Error;

/// The only version defined (draft §4.1, RFC 8166 §4.2).
pub const RPCRDMA_VERSION: u32 = 1;
/// Bound on segments per header (all lists together).
pub const MAX_SEGMENTS: usize = 64;
/// Fixed header: xid, vers, credit, proc.
pub const FIXED_LEN: usize = 16;

/// `rdma_proc` RDMA_MSG: an RPC message follows the header inline (draft §4.2, RFC 8166 §4.2.4).
pub const RDMA_MSG: u32 = 0;
/// `rdma_proc` RDMA_NOMSG: header only, the RPC message travels in a chunk (draft §5,
/// RFC 8166 §4.2.4).
pub const RDMA_NOMSG: u32 = 1;
/// `rdma_proc` RDMA_MSGP: RDMA_MSG with padding parameters (draft §3.5; RFC 8166 §4.6.1 retires
/// it).
pub const RDMA_MSGP: u32 = 2;
/// `rdma_proc` RDMA_DONE: the client signals reply completion (draft §3.8; RFC 8166 §4.6.2
/// retires it).
pub const RDMA_DONE: u32 = 3;
/// `rdma_proc` RDMA_ERROR: the header could not be processed (draft §5.3, RFC 8166 §4.5).
pub const RDMA_ERROR: u32 = 4;
/// `rpc_rdma_errcode` ERR_VERS: unsupported version; the supported range follows (RFC 8166
/// §4.5.1).
pub const ERR_VERS: u32 = 1;
/// `rpc_rdma_errcode` ERR_CHUNK: bad chunk lists or header (RFC 8166 §4.5.2).
pub const ERR_CHUNK: u32 = 2;

/// An RDMA segment (`xdr_rdma_segment`): handle (STag), length, offset (Tagged Offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    /// The steering tag (STag) of the registered memory.
    pub handle: u32,
    /// Length of the segment in bytes.
    pub length: u32,
    /// Tagged Offset of the segment's first byte.
    pub offset: u64,
}

/// A read-list entry: a segment to be pulled with RDMA Read, at an XDR position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSegment {
    /// XDR position of the data in the RPC message (RFC 8166 §3.4.5).
    pub position: u32,
    /// Where the data is in the peer's memory.
    pub target: Segment,
}

/// A write chunk's segment array (RFC 8166 §4.3.2), held inline up to two segments: a READ's
/// write list is parsed from its call and built into its reply, and most chunks have one
/// segment.
pub type Segments = smallvec::SmallVec<[Segment; 2]>;

/// The write list, held inline up to one write chunk (a READ's). The read list and the reply
/// chunk are plain `Vec`s: empty on most calls (no allocation), and a header is moved
/// whole several times on every call, so it is kept small.
pub type WriteList = smallvec::SmallVec<[Segments; 1]>;

/// The three chunk lists of RDMA_MSG / RDMA_NOMSG / RDMA_MSGP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunks {
    /// The read list, flat (RFC 8166 §4.3.1); see [`Chunks::read_chunks`].
    pub reads: Vec<ReadSegment>,
    /// The write list: one segment array per write chunk (RFC 8166 §4.3.2).
    pub writes: WriteList,
    /// The reply chunk, if any (RFC 8166 §4.3.3).
    pub reply: Option<Vec<Segment>>,
}

/// One read chunk: the segments sharing a position, in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunk {
    /// XDR position shared by the segments.
    pub position: u32,
    /// The segments, in list order.
    pub segments: Vec<Segment>,
}

impl ReadChunk {
    /// Total bytes of the chunk (saturating: lengths come from the peer).
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.length)).sum()
    }

    /// The chunk carries no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Chunks {
    /// Group the read list into chunks (RFC 8166 §3.4.5: same position = same chunk; positions
    /// must not decrease).
    pub fn read_chunks(&self) -> Result<Vec<ReadChunk>, Error> {
        let mut out: Vec<ReadChunk> = Vec::new();
        for r in &self.reads {
            match out.last_mut() {
                Some(c) if c.position == r.position => c.segments.push(r.target),
                Some(c) if c.position > r.position => {
                    return Err(Error::Malformed("read list positions decrease"))
                }
                _ => out.push(ReadChunk {
                    position: r.position,
                    segments: vec![r.target],
                }),
            }
        }
        Ok(out)
    }

    fn segment_count(&self) -> usize {
        self.reads.len()
            + self.writes.iter().map(|a| a.len()).sum::<usize>()
            + self.reply.as_ref().map_or(0, |a| a.len())
    }

    fn parse(r: &mut XdrReader<'_>) -> Result<Chunks, Error> {
        let mut c = Chunks::default();
        let mut budget = MAX_SEGMENTS;
        let mut take = |n: usize| -> Result<(), Error> {
            budget = budget
                .checked_sub(n)
                .ok_or(Error::Malformed("too many RDMA segments"))?;
            Ok(())
        };
        while r.get_bool()? {
            take(1)?;
            let position = r.get_u32()?;
            let target = parse_segment(r)?;
            c.reads.push(ReadSegment { position, target });
        }
        while r.get_bool()? {
            let n = r.get_u32()? as usize;
            take(n)?;
            c.writes.push(parse_array(r, n)?);
        }
        if r.get_bool()? {
            let n = r.get_u32()? as usize;
            take(n)?;
            c.reply = Some(parse_array(r, n)?);
        }
        Ok(c)
    }

    /// Encoded length of the three lists (what `emit` writes): a read segment is a
    /// discriminator, a position and a 16-octet segment; a write chunk or the reply chunk a
    /// discriminator, a count and its segments; each list ends with a FALSE discriminator
    /// (the reply chunk's absence is one).
    fn buffer_len(&self) -> usize {
        const SEG: usize = 16;
        let reads = self.reads.len() * (8 + SEG) + 4;
        let writes: usize = self.writes.iter().map(|a| 8 + a.len() * SEG).sum::<usize>() + 4;
        let reply = self.reply.as_ref().map_or(4, |a| 8 + a.len() * SEG);
        reads + writes + reply
    }

    fn emit(&self, w: &mut XdrWriter) {
        for s in &self.reads {
            w.put_bool(true);
            w.put_u32(s.position);
            emit_segment(w, &s.target);
        }
        w.put_bool(false);
        for a in &self.writes {
            w.put_bool(true);
            emit_array(w, a);
        }
        w.put_bool(false);
        match &self.reply {
            Some(a) => {
                w.put_bool(true);
                emit_array(w, a);
            }
            None => w.put_bool(false),
        }
    }
}

fn parse_segment(r: &mut XdrReader<'_>) -> Result<Segment, Error> {
    Ok(Segment {
        handle: r.get_u32()?,
        length: r.get_u32()?,
        offset: r.get_u64()?,
    })
}

/// `n` segments into a write chunk's `Segments` or the reply chunk's `Vec`.
fn parse_array<C: FromIterator<Segment>>(r: &mut XdrReader<'_>, n: usize) -> Result<C, Error> {
    // `n` was checked against the segment budget, so the collection's room is bounded.
    (0..n).map(|_| parse_segment(r)).collect()
}

fn emit_segment(w: &mut XdrWriter, s: &Segment) {
    w.put_u32(s.handle);
    w.put_u32(s.length);
    w.put_u64(s.offset);
}

fn emit_array(w: &mut XdrWriter, a: &[Segment]) {
    w.put_u32(a.len() as u32);
    for s in a {
        emit_segment(w, s);
    }
}

/// The body selected by `rdma_proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// RDMA_MSG: chunk lists, then the RPC message inline.
    Msg(Chunks),
    /// RDMA_NOMSG: chunk lists only; the RPC message is in a position-zero read chunk (call) or
    /// the reply chunk (reply).
    NoMsg(Chunks),
    /// RDMA_MSGP: padding rule, chunk lists, then the padded RPC message (draft §3.5).
    MsgP {
        /// `rdma_align` and `rdma_thresh`, validated.
        padding: Padding,
        /// The chunk lists.
        chunks: Chunks,
    },
    /// RDMA_DONE: the client finished pulling the reply's read chunks (draft §3.8).
    Done,
    /// RDMA_ERROR with ERR_VERS and the supported range.
    ErrVers {
        /// `rdma_vers_low`: lowest version the sender supports.
        low: u32,
        /// `rdma_vers_high`: highest version the sender supports.
        high: u32,
    },
    /// RDMA_ERROR with ERR_CHUNK.
    ErrChunk,
}

impl Body {
    /// The chunk lists, for the message kinds that carry them.
    pub fn chunks(&self) -> Option<&Chunks> {
        match self {
            Body::Msg(c) | Body::NoMsg(c) | Body::MsgP { chunks: c, .. } => Some(c),
            _ => None,
        }
    }

    /// The chunk lists, moved out, for the message kinds that carry them.
    pub fn into_chunks(self) -> Option<Chunks> {
        match self {
            Body::Msg(c) | Body::NoMsg(c) | Body::MsgP { chunks: c, .. } => Some(c),
            _ => None,
        }
    }
}

/// A whole RPC-over-RDMA header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRepr {
    /// `rdma_xid`: mirrors the RPC message's XID (RFC 8166 §4.2.1).
    pub xid: u32,
    /// `rdma_vers`: [`RPCRDMA_VERSION`] (RFC 8166 §4.2.2).
    pub vers: u32,
    /// `rdma_credit`: credits requested (call) or granted (reply) (draft §3.3, RFC 8166 §4.2.3).
    pub credits: u32,
    /// The `rdma_proc`-selected body (RFC 8166 §4.2.4).
    pub body: Body,
}

/// Why a header was refused, with what a responder needs to answer it (draft §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Shorter than the four fixed words: nothing to answer to (drop and log).
    #[error("header shorter than 16 bytes")]
    Short,
    /// Unsupported `rdma_vers`: answer RDMA_ERROR / ERR_VERS.
    #[error("unsupported RPC-over-RDMA version {vers}")]
    Version {
        /// `rdma_xid`, to echo in the error reply.
        xid: u32,
        /// The version received.
        vers: u32,
    },
    /// Bad proc or chunk lists: answer RDMA_ERROR / ERR_CHUNK.
    #[error("bad header or chunk list (xid {xid:#x}): {err}")]
    Chunk {
        /// `rdma_xid`, to echo in the error reply.
        xid: u32,
        /// What was wrong.
        err: Error,
    },
}

impl HeaderRepr {
    /// Parse a header from the start of a received Send; returns it and its length (where the
    /// RPC message starts for RDMA_MSG / RDMA_MSGP).
    pub fn parse(buf: &[u8]) -> Result<(HeaderRepr, usize), HeaderError> {
        let mut r = XdrReader::new(buf);
        let (xid, vers, credits, proc_) = match (r.get_u32(), r.get_u32(), r.get_u32(), r.get_u32())
        {
            (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
            _ => return Err(HeaderError::Short),
        };
        if vers != RPCRDMA_VERSION {
            return Err(HeaderError::Version { xid, vers });
        }
        let chunk = |err| HeaderError::Chunk { xid, err };
        let body = match proc_ {
            RDMA_MSG => Body::Msg(Chunks::parse(&mut r).map_err(chunk)?),
            RDMA_NOMSG => Body::NoMsg(Chunks::parse(&mut r).map_err(chunk)?),
            RDMA_MSGP => {
                let padding = Padding {
                    align: r.get_u32().map_err(chunk)?,
                    thresh: r.get_u32().map_err(chunk)?,
                }
                .validate()
                .map_err(chunk)?;
                let chunks = Chunks::parse(&mut r).map_err(chunk)?;
                Body::MsgP { padding, chunks }
            }
            RDMA_DONE => Body::Done,
            RDMA_ERROR => match r.get_u32().map_err(chunk)? {
                ERR_VERS => Body::ErrVers {
                    low: r.get_u32().map_err(chunk)?,
                    high: r.get_u32().map_err(chunk)?,
                },
                // The draft appends rdma_extra[8]; RFC 8166 sends nothing. Accept both.
                ERR_CHUNK => Body::ErrChunk,
                _ => return Err(chunk(Error::Malformed("unknown rdma_err"))),
            },
            _ => return Err(chunk(Error::Malformed("unknown rdma_proc"))),
        };
        Ok((
            HeaderRepr {
                xid,
                vers,
                credits,
                body,
            },
            r.consumed(),
        ))
    }

    /// Encoded length (what [`HeaderRepr::emit`] writes), counted without encoding: the
    /// client and the server size every call and reply header with it.
    pub fn buffer_len(&self) -> usize {
        // xid, vers, credits, proc (RFC 8166 §4.2).
        16 + match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.buffer_len(),
            Body::MsgP { chunks, .. } => 8 + chunks.buffer_len(),
            Body::Done => 0,
            Body::ErrVers { .. } => 12,
            Body::ErrChunk => 4,
        }
    }

    /// Append the header.
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.xid);
        w.put_u32(self.vers);
        w.put_u32(self.credits);
        match &self.body {
            Body::Msg(c) => {
                w.put_u32(RDMA_MSG);
                c.emit(w);
            }
            Body::NoMsg(c) => {
                w.put_u32(RDMA_NOMSG);
                c.emit(w);
            }
            Body::MsgP { padding, chunks } => {
                w.put_u32(RDMA_MSGP);
                w.put_u32(padding.align);
                w.put_u32(padding.thresh);
                chunks.emit(w);
            }
            Body::Done => w.put_u32(RDMA_DONE),
            Body::ErrVers { low, high } => {
                w.put_u32(RDMA_ERROR);
                w.put_u32(ERR_VERS);
                w.put_u32(*low);
                w.put_u32(*high);
            }
            Body::ErrChunk => {
                w.put_u32(RDMA_ERROR);
                w.put_u32(ERR_CHUNK);
            }
        }
    }

    /// Total segments in the lists (for bounds checks by callers).
    pub fn segment_count(&self) -> usize {
        self.body.chunks().map_or(0, Chunks::segment_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(h: u32, l: u32, o: u64) -> Segment {
        Segment {
            handle: h,
            length: l,
            offset: o,
        }
    }

    #[test]
    fn round_trip_every_body() {
        let chunks = Chunks {
            reads: vec![
                ReadSegment {
                    position: 0,
                    target: seg(1, 100, 0x1000),
                },
                ReadSegment {
                    position: 0,
                    target: seg(2, 50, 0x2000),
                },
                ReadSegment {
                    position: 64,
                    target: seg(3, 8, 0x3000),
                },
            ],
            writes: smallvec::smallvec![
                smallvec::smallvec![seg(4, 4096, 0x4000), seg(5, 10, 0)],
                Segments::new()
            ],
            reply: Some(vec![seg(6, 1024, 0x6000)]),
        };
        let bodies = [
            Body::Msg(Chunks::default()),
            Body::Msg(chunks.clone()),
            Body::NoMsg(chunks.clone()),
            Body::MsgP {
                padding: Padding {
                    align: 4096,
                    thresh: 1024,
                },
                chunks: chunks.clone(),
            },
            Body::Done,
            Body::ErrVers { low: 1, high: 1 },
            Body::ErrChunk,
        ];
        for body in bodies {
            let h = HeaderRepr {
                xid: 0xdead_beef,
                vers: 1,
                credits: 32,
                body,
            };
            let mut w = XdrWriter::new();
            h.emit(&mut w);
            w.put_u32(0x1234_5678);
            let (p, n) = HeaderRepr::parse(w.as_slice()).unwrap();
            assert_eq!(p, h);
            assert_eq!(n, h.buffer_len());
            assert_eq!(n + 4, w.len());
        }
        let rc = chunks.read_chunks().unwrap();
        assert_eq!(rc.len(), 2);
        assert_eq!(rc[0].len(), 150);
        assert_eq!(rc[1].position, 64);
    }

    #[test]
    fn rfc8166_rdma_msg_bytes() {
        // An RDMA_MSG with empty lists is the 4 fixed words and three zero discriminators
        // (RFC 8166 §5.2: 28 bytes before the RPC message).
        let h = HeaderRepr {
            xid: 1,
            vers: 1,
            credits: 128,
            body: Body::Msg(Chunks::default()),
        };
        let mut w = XdrWriter::new();
        h.emit(&mut w);
        assert_eq!(
            w.as_slice(),
            [
                0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn errors_carry_what_the_answer_needs() {
        assert_eq!(HeaderRepr::parse(&[0; 15]), Err(HeaderError::Short));
        let mut b = vec![0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(
            HeaderRepr::parse(&b),
            Err(HeaderError::Version { xid: 9, vers: 2 })
        );
        b[7] = 1;
        b[15] = 7;
        assert!(matches!(
            HeaderRepr::parse(&b),
            Err(HeaderError::Chunk { xid: 9, .. })
        ));
        // Truncated list.
        b[15] = 0;
        b.extend_from_slice(&[0, 0, 0, 1]);
        assert!(matches!(
            HeaderRepr::parse(&b),
            Err(HeaderError::Chunk { .. })
        ));
        // A write chunk claiming 2^32-1 segments is refused without allocating.
        let mut b = vec![0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            HeaderRepr::parse(&b),
            Err(HeaderError::Chunk { .. })
        ));
        // Decreasing read positions are malformed.
        let c = Chunks {
            reads: vec![
                ReadSegment {
                    position: 8,
                    target: seg(1, 1, 0),
                },
                ReadSegment {
                    position: 4,
                    target: seg(1, 1, 0),
                },
            ],
            ..Chunks::default()
        };
        assert!(c.read_chunks().is_err());
    }
}
