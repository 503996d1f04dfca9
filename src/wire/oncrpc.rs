//! ONC RPC version 2 messages (RFC 5531 §9) and record marking for stream transports (§11).
//!
//! [`CallRepr`] and [`ReplyRepr`] cover the RPC header only; procedure arguments and results
//! follow in the same XDR stream and are decoded by the program. Authentication: AUTH_NONE and
//! AUTH_SYS (RFC 5531 App. A) are decoded; any other flavor is kept as opaque bytes (<= 400,
//! §8.2) so a server can answer AUTH_ERROR / AUTH_BADCRED.

use super::xdr::{XdrReader, XdrWriter};
use super::{Error, Result};

/// RPC protocol version (RFC 5531 §9).
pub const RPC_VERSION: u32 = 2;
/// `msg_type` CALL (RFC 5531 §9).
pub const CALL: u32 = 0;
/// `msg_type` REPLY (RFC 5531 §9).
pub const REPLY: u32 = 1;
/// Auth flavor AUTH_NONE: no credentials (RFC 5531 §8.2, §10.1).
pub const AUTH_NONE: u32 = 0;
/// Auth flavor AUTH_SYS, a.k.a. AUTH_UNIX (RFC 5531 §8.2, App. A).
pub const AUTH_SYS: u32 = 1;
/// Largest opaque_auth body (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;
/// Bound on the AUTH_SYS `machinename` string, in bytes (RFC 5531 App. A).
pub const MAX_MACHINE_NAME: usize = 255;
/// Bound on the number of AUTH_SYS supplementary `gids` (RFC 5531 App. A).
pub const MAX_GIDS: usize = 16;

/// An AUTH_SYS `machinename`, held inline up to 64 octets (Linux's `HOST_NAME_MAX`): decoding,
/// cloning and dropping a credential happen for every call, and then allocate nothing.
pub type MachineName = smallvec::SmallVec<[u8; 64]>;

/// AUTH_SYS supplementary gids, held inline up to [`MAX_GIDS`] (all a decoded credential can
/// carry).
pub type Gids = smallvec::SmallVec<[u32; MAX_GIDS]>;

/// AUTH_SYS credentials (RFC 5531 App. A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSys {
    /// Arbitrary ID chosen by the caller's machine.
    pub stamp: u32,
    /// The caller's host name (at most [`MAX_MACHINE_NAME`] bytes, not necessarily UTF-8).
    pub machinename: MachineName,
    /// The caller's effective user ID.
    pub uid: u32,
    /// The caller's effective group ID.
    pub gid: u32,
    /// Supplementary group IDs (at most [`MAX_GIDS`]).
    pub gids: Gids,
}

impl AuthSys {
    /// Octets of the encoded body ([`AuthSys::emit_body`]).
    pub fn body_len(&self) -> usize {
        let name_len = self.machinename.len();
        4 + 4 + name_len + super::xdr::pad_len(name_len) + 4 + 4 + 4 + 4 * self.gids.len()
    }

    /// Encode the `authsys_parms` body (RFC 5531 App. A), [`AuthSys::body_len`] octets; the
    /// machine name as the string it is, never RDMA_MSGP-padded (it is inside an
    /// `opaque_auth`, not a DDP-eligible item).
    pub fn emit_body(&self, w: &mut XdrWriter) {
        w.put_u32(self.stamp);
        w.put_u32(self.machinename.len() as u32);
        w.put_fixed(&self.machinename);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_u32(self.gids.len() as u32);
        for g in &self.gids {
            w.put_u32(*g);
        }
    }
}

/// An `opaque_auth` (RFC 5531 §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// AUTH_NONE with an empty body.
    None,
    /// AUTH_SYS with its decoded body.
    Sys(AuthSys),
    /// Another flavor, body kept verbatim.
    Other {
        /// The flavor number.
        flavor: u32,
        /// The undecoded body (at most [`MAX_AUTH_BYTES`]).
        body: Vec<u8>,
    },
}

impl Auth {
    /// Decode an `opaque_auth`; an AUTH_SYS body must decode exactly, with no trailing bytes.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Auth> {
        let flavor = r.get_u32()?;
        let body = r.get_opaque(MAX_AUTH_BYTES)?;
        match flavor {
            AUTH_NONE => Ok(Auth::None),
            AUTH_SYS => {
                let mut b = XdrReader::new(body);
                let stamp = b.get_u32()?;
                let machinename = MachineName::from_slice(b.get_string(MAX_MACHINE_NAME)?);
                let uid = b.get_u32()?;
                let gid = b.get_u32()?;
                let n = b.get_len(MAX_GIDS)?;
                let mut gids = Gids::new();
                for _ in 0..n {
                    gids.push(b.get_u32()?);
                }
                if b.remaining() != 0 {
                    return Err(Error::Malformed("AUTH_SYS body has trailing bytes"));
                }
                Ok(Auth::Sys(AuthSys {
                    stamp,
                    machinename,
                    uid,
                    gid,
                    gids,
                }))
            }
            flavor => Ok(Auth::Other {
                flavor,
                body: body.to_vec(),
            }),
        }
    }

    /// Encode as an `opaque_auth`: flavor, then the body as variable-length opaque.
    pub fn emit(&self, w: &mut XdrWriter) {
        match self {
            Auth::None => {
                w.put_u32(AUTH_NONE);
                w.put_u32(0);
            }
            Auth::Sys(s) => {
                // The body straight into `w` behind its length word, encoded as the
                // `opaque<MAX_AUTH_BYTES>` it is (RFC 5531 §8.2), without a staging buffer:
                // this runs for every call a client sends.
                let body_len = s.body_len();
                w.put_u32(AUTH_SYS);
                w.put_u32(body_len as u32);
                w.put_msgp_pad(body_len);
                s.emit_body(w);
            }
            Auth::Other { flavor, body } => {
                w.put_u32(*flavor);
                w.put_opaque(body);
            }
        }
    }
}

/// The header of an RPC call (RFC 5531 §9 `call_body`); arguments follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRepr {
    /// Transaction ID, echoed in the reply.
    pub xid: u32,
    /// Remote program number.
    pub prog: u32,
    /// Remote program version.
    pub vers: u32,
    /// Procedure number within the program.
    pub proc_: u32,
    /// Caller's credentials.
    pub cred: Auth,
    /// Caller's verifier.
    pub verf: Auth,
}

/// Why a call header could not be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// Bytes do not form a call header.
    Garbage(Error),
    /// `rpcvers` is not 2: reply MSG_DENIED / RPC_MISMATCH (RFC 5531 §9).
    RpcMismatch {
        /// The call's transaction ID, for the rejection reply.
        xid: u32,
    },
}

impl CallRepr {
    /// Parse a call header; the reader is left at the arguments.
    pub fn parse(r: &mut XdrReader<'_>) -> core::result::Result<CallRepr, CallError> {
        let g = CallError::Garbage;
        let xid = r.get_u32().map_err(g)?;
        if r.get_u32().map_err(g)? != CALL {
            return Err(g(Error::Malformed("RPC message is not a CALL")));
        }
        if r.get_u32().map_err(g)? != RPC_VERSION {
            return Err(CallError::RpcMismatch { xid });
        }
        let prog = r.get_u32().map_err(g)?;
        let vers = r.get_u32().map_err(g)?;
        let proc_ = r.get_u32().map_err(g)?;
        let cred = Auth::parse(r).map_err(g)?;
        let verf = Auth::parse(r).map_err(g)?;
        Ok(CallRepr {
            xid,
            prog,
            vers,
            proc_,
            cred,
            verf,
        })
    }

    /// Encode the call header (`rpcvers` is always [`RPC_VERSION`]); arguments go after it.
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.xid);
        w.put_u32(CALL);
        w.put_u32(RPC_VERSION);
        w.put_u32(self.prog);
        w.put_u32(self.vers);
        w.put_u32(self.proc_);
        self.cred.emit(w);
        self.verf.emit(w);
    }
}

/// `accept_stat` (RFC 5531 §9), with the mismatch range of PROG_MISMATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    /// SUCCESS (0): the procedure ran; results follow.
    Success,
    /// PROG_UNAVAIL (1): the program is not exported.
    ProgUnavail,
    /// PROG_MISMATCH (2): the program version is not supported.
    ProgMismatch {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// PROC_UNAVAIL (3): the program has no such procedure.
    ProcUnavail,
    /// GARBAGE_ARGS (4): the arguments could not be decoded.
    GarbageArgs,
    /// SYSTEM_ERR (5): e.g. a memory allocation failure.
    SystemErr,
}

/// `auth_stat` (RFC 5531 §9), kept as its number.
pub type AuthStat = u32;
/// `auth_stat` AUTH_BADCRED: bad credential (seal broken) (RFC 5531 §9).
pub const AUTH_BADCRED: AuthStat = 1;
/// `auth_stat` AUTH_TOOWEAK: rejected for security reasons (RFC 5531 §9).
pub const AUTH_TOOWEAK: AuthStat = 5;

/// The reply body (RFC 5531 §9 `reply_body`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyStat {
    /// MSG_ACCEPTED with its verifier and status; results follow SUCCESS.
    Accepted {
        /// The server's verifier.
        verf: Auth,
        /// Whether, and how, the call was carried out.
        stat: AcceptStat,
    },
    /// MSG_DENIED / RPC_MISMATCH.
    RpcMismatch {
        /// Lowest supported RPC version.
        low: u32,
        /// Highest supported RPC version.
        high: u32,
    },
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
}

/// The header of an RPC reply; results follow an accepted SUCCESS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRepr {
    /// Transaction ID of the call being answered.
    pub xid: u32,
    /// Accepted or denied, with details.
    pub stat: ReplyStat,
}

impl ReplyRepr {
    /// A successful reply with AUTH_NONE verifier.
    pub fn success(xid: u32) -> Self {
        Self::accepted(xid, AcceptStat::Success)
    }

    /// An accepted reply (MSG_ACCEPTED) with AUTH_NONE verifier and the given status.
    pub fn accepted(xid: u32, stat: AcceptStat) -> Self {
        ReplyRepr {
            xid,
            stat: ReplyStat::Accepted {
                verf: Auth::None,
                stat,
            },
        }
    }

    /// Parse a reply header; after an accepted SUCCESS the reader is left at the results.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<ReplyRepr> {
        let xid = r.get_u32()?;
        if r.get_u32()? != REPLY {
            return Err(Error::Malformed("RPC message is not a REPLY"));
        }
        let stat = match r.get_u32()? {
            0 => {
                let verf = Auth::parse(r)?;
                let stat = match r.get_u32()? {
                    0 => AcceptStat::Success,
                    1 => AcceptStat::ProgUnavail,
                    2 => AcceptStat::ProgMismatch {
                        low: r.get_u32()?,
                        high: r.get_u32()?,
                    },
                    3 => AcceptStat::ProcUnavail,
                    4 => AcceptStat::GarbageArgs,
                    5 => AcceptStat::SystemErr,
                    _ => return Err(Error::Malformed("unknown accept_stat")),
                };
                ReplyStat::Accepted { verf, stat }
            }
            1 => match r.get_u32()? {
                0 => ReplyStat::RpcMismatch {
                    low: r.get_u32()?,
                    high: r.get_u32()?,
                },
                1 => ReplyStat::AuthError(r.get_u32()?),
                _ => return Err(Error::Malformed("unknown reject_stat")),
            },
            _ => return Err(Error::Malformed("unknown reply_stat")),
        };
        Ok(ReplyRepr { xid, stat })
    }

    /// Encode the reply header; results of an accepted SUCCESS go after it.
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.xid);
        w.put_u32(REPLY);
        match &self.stat {
            ReplyStat::Accepted { verf, stat } => {
                w.put_u32(0);
                verf.emit(w);
                match stat {
                    AcceptStat::Success => w.put_u32(0),
                    AcceptStat::ProgUnavail => w.put_u32(1),
                    AcceptStat::ProgMismatch { low, high } => {
                        w.put_u32(2);
                        w.put_u32(*low);
                        w.put_u32(*high);
                    }
                    AcceptStat::ProcUnavail => w.put_u32(3),
                    AcceptStat::GarbageArgs => w.put_u32(4),
                    AcceptStat::SystemErr => w.put_u32(5),
                }
            }
            ReplyStat::RpcMismatch { low, high } => {
                w.put_u32(1);
                w.put_u32(0);
                w.put_u32(*low);
                w.put_u32(*high);
            }
            ReplyStat::AuthError(s) => {
                w.put_u32(1);
                w.put_u32(1);
                w.put_u32(*s);
            }
        }
    }
}

/// Record marking (RFC 5531 §11): the 4-byte fragment header; high bit = last fragment.
pub fn record_mark(len: usize, last: bool) -> [u8; 4] {
    let v = (len as u32 & 0x7fff_ffff) | if last { 0x8000_0000 } else { 0 };
    v.to_be_bytes()
}

/// A streaming record-marking decoder (RFC 5531 §11): feed octets, get whole records
/// (fragments joined). Records longer than `max_record` are refused (the connection should be
/// closed); room is made as octets arrive, never for what a fragment header claims.
///
/// Two ways to feed it: [`RecordDecoder::consume`] takes octets from a caller's buffer (or
/// [`RecordDecoder::push`] them into its own, then [`RecordDecoder::next_record`]); and while
/// a fragment's octets are still to come, a reader may append them to the record itself
/// ([`RecordDecoder::fragment_room`], then [`RecordDecoder::appended`]), e.g. straight from a
/// socket with no copy in between.
#[derive(Debug)]
pub struct RecordDecoder {
    max_record: usize,
    /// A fragment header in the making.
    header: [u8; 4],
    header_len: usize,
    record: Vec<u8>,
    /// Octets of the current fragment still to come (when `in_fragment`).
    left: usize,
    in_fragment: bool,
    last: bool,
    failed: bool,
    /// What [`RecordDecoder::push`] received and `next_record` has not consumed, from `lo`.
    buf: Vec<u8>,
    lo: usize,
}

impl RecordDecoder {
    /// A decoder that refuses records longer than `max_record` bytes.
    pub fn new(max_record: usize) -> Self {
        RecordDecoder {
            max_record,
            header: [0; 4],
            header_len: 0,
            record: Vec::new(),
            left: 0,
            in_fragment: false,
            last: false,
            failed: false,
            buf: Vec::new(),
            lo: 0,
        }
    }

    /// Take octets from `data` until a record is complete or `data` runs out: the number taken
    /// and the record, if one was completed (call again with the rest).
    pub fn consume(&mut self, data: &[u8]) -> Result<(usize, Option<Vec<u8>>)> {
        let mut at = 0;
        loop {
            if self.failed {
                return Err(Error::Malformed("RPC record longer than the limit"));
            }
            if !self.in_fragment {
                let n = (4 - self.header_len).min(data.len() - at);
                self.header[self.header_len..self.header_len + n]
                    .copy_from_slice(&data[at..at + n]);
                self.header_len += n;
                at += n;
                if self.header_len < 4 {
                    return Ok((at, None));
                }
                self.header_len = 0;
                let h = u32::from_be_bytes(self.header);
                let len = (h & 0x7fff_ffff) as usize;
                if self.record.len().saturating_add(len) > self.max_record {
                    self.failed = true;
                    continue;
                }
                self.left = len;
                self.last = h & 0x8000_0000 != 0;
                self.in_fragment = true;
            }
            let n = self.left.min(data.len() - at);
            self.record.extend_from_slice(&data[at..at + n]);
            at += n;
            if let Some(rec) = self.appended_unchecked(n) {
                return Ok((at, Some(rec)));
            }
            if self.in_fragment {
                return Ok((at, None));
            }
        }
    }

    /// While a fragment's octets are still to come: the record so far (append them to it)
    /// and how many there are; then call [`RecordDecoder::appended`].
    pub fn fragment_room(&mut self) -> Option<(&mut Vec<u8>, usize)> {
        (self.in_fragment && !self.failed).then_some((&mut self.record, self.left))
    }

    /// `n` octets of the current fragment were appended to the record
    /// ([`RecordDecoder::fragment_room`]): the record, if that completed it.
    pub fn appended(&mut self, n: usize) -> Result<Option<Vec<u8>>> {
        if !self.in_fragment || n > self.left {
            return Err(Error::Malformed(
                "more octets appended than the fragment holds",
            ));
        }
        Ok(self.appended_unchecked(n))
    }

    fn appended_unchecked(&mut self, n: usize) -> Option<Vec<u8>> {
        self.left -= n;
        if self.left > 0 {
            return None;
        }
        self.in_fragment = false;
        self.last.then(|| std::mem::take(&mut self.record))
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.lo == self.buf.len() {
            self.buf.clear();
            self.lo = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete record from what was pushed, `Ok(None)` if more bytes are needed.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.consume(&buf[self.lo..]);
        if let Ok((n, _)) = r {
            self.lo += n;
        }
        if self.lo == buf.len() {
            buf.clear();
            self.lo = 0;
        }
        self.buf = buf;
        r.map(|(_, rec)| rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AUTH_SYS is encoded in place, behind a length word computed up front: it must be the
    /// same octets as the body encoded alone and put as an opaque (RFC 5531 §8.2, App. A),
    /// for every machine-name length (each XDR pad) and group count.
    #[test]
    fn auth_sys_encodes_as_its_opaque_body() {
        for name_len in 0..=9 {
            for ngids in [0, 1, 2, 16] {
                let s = AuthSys {
                    stamp: 0x0102_0304,
                    machinename: (0..name_len).map(|i| b'a' + i as u8).collect(),
                    uid: 1000,
                    gid: 100,
                    gids: (0..ngids).map(|g| 5000 + g as u32).collect(),
                };
                let mut body = XdrWriter::new();
                s.emit_body(&mut body);
                assert_eq!(body.len(), s.body_len(), "name {name_len}, gids {ngids}");
                let mut want = XdrWriter::new();
                want.put_u32(AUTH_SYS);
                want.put_opaque(body.as_slice());
                let mut got = XdrWriter::new();
                Auth::Sys(s.clone()).emit(&mut got);
                assert_eq!(
                    got.as_slice(),
                    want.as_slice(),
                    "name {name_len}, gids {ngids}"
                );
                let back = Auth::parse(&mut XdrReader::new(got.as_slice())).unwrap();
                assert_eq!(back, Auth::Sys(s));
            }
        }
    }

    #[test]
    fn call_and_reply_round_trip() {
        let c = CallRepr {
            xid: 0x1234,
            prog: 100003,
            vers: 3,
            proc_: 6,
            cred: Auth::Sys(AuthSys {
                stamp: 9,
                machinename: MachineName::from_slice(b"host"),
                uid: 1000,
                gid: 100,
                gids: Gids::from_slice(&[4, 24]),
            }),
            verf: Auth::None,
        };
        let mut w = XdrWriter::new();
        c.emit(&mut w);
        w.put_u32(42);
        let b = w.into_vec();
        let mut r = XdrReader::new(&b);
        assert_eq!(CallRepr::parse(&mut r).unwrap(), c);
        assert_eq!(r.get_u32().unwrap(), 42);
        for stat in [
            ReplyStat::Accepted {
                verf: Auth::None,
                stat: AcceptStat::ProgMismatch { low: 1, high: 3 },
            },
            ReplyStat::Accepted {
                verf: Auth::None,
                stat: AcceptStat::GarbageArgs,
            },
            ReplyStat::RpcMismatch { low: 2, high: 2 },
            ReplyStat::AuthError(AUTH_BADCRED),
        ] {
            let rep = ReplyRepr { xid: 5, stat };
            let mut w = XdrWriter::new();
            rep.emit(&mut w);
            assert_eq!(
                ReplyRepr::parse(&mut XdrReader::new(w.as_slice())).unwrap(),
                rep
            );
        }
    }

    #[test]
    fn rpc_version_mismatch_is_reported() {
        let mut w = XdrWriter::new();
        for v in [7, CALL, 3] {
            w.put_u32(v);
        }
        let e = CallRepr::parse(&mut XdrReader::new(w.as_slice())).unwrap_err();
        assert_eq!(e, CallError::RpcMismatch { xid: 7 });
    }

    #[test]
    fn record_marking() {
        let mut d = RecordDecoder::new(100);
        let mut s = record_mark(3, false).to_vec();
        s.extend_from_slice(b"abc");
        s.extend_from_slice(&record_mark(2, true));
        s.extend_from_slice(b"de");
        for b in &s[..s.len() - 1] {
            d.push(&[*b]);
            assert_eq!(d.next_record().unwrap(), None);
        }
        d.push(&s[s.len() - 1..]);
        assert_eq!(d.next_record().unwrap().unwrap(), b"abcde");
        d.push(&record_mark(1000, true));
        assert!(d.next_record().is_err());
        assert!(d.next_record().is_err(), "refused for good");
    }

    /// Two records in one buffer, the second split: `consume` stops after the first; the
    /// second's fragment filled by the caller appending to the record itself.
    #[test]
    fn record_marking_consume_and_append() {
        let mut d = RecordDecoder::new(100);
        let mut s = record_mark(2, true).to_vec();
        s.extend_from_slice(b"ab");
        s.extend_from_slice(&record_mark(5, true));
        s.extend_from_slice(b"cd");
        let (n, rec) = d.consume(&s).unwrap();
        assert_eq!((n, rec.as_deref()), (6, Some(&b"ab"[..])));
        assert!(d.fragment_room().is_none());
        assert_eq!(d.consume(&s[6..]).unwrap(), (6, None));
        let (rec, left) = d.fragment_room().unwrap();
        assert_eq!(left, 3);
        rec.extend_from_slice(b"ef");
        assert_eq!(d.appended(2).unwrap(), None);
        assert!(d.appended(2).is_err(), "only one octet is left");
        d.fragment_room().unwrap().0.push(b'g');
        assert_eq!(d.appended(1).unwrap().unwrap(), b"cdefg");
        assert!(d.fragment_room().is_none());
    }
}
