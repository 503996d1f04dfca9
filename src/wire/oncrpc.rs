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
/// msg_type CALL / REPLY.
pub const CALL: u32 = 0;
pub const REPLY: u32 = 1;
/// Auth flavors (RFC 5531 §8.2, App. A).
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
/// Largest opaque_auth body (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;
/// AUTH_SYS machinename bound and gid count bound (RFC 5531 App. A).
pub const MAX_MACHINE_NAME: usize = 255;
pub const MAX_GIDS: usize = 16;

/// AUTH_SYS credentials (RFC 5531 App. A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSys {
    pub stamp: u32,
    pub machinename: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// An `opaque_auth` (RFC 5531 §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys(AuthSys),
    /// Another flavor, body kept verbatim.
    Other {
        flavor: u32,
        body: Vec<u8>,
    },
}

impl Auth {
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Auth> {
        let flavor = r.get_u32()?;
        let body = r.get_opaque(MAX_AUTH_BYTES)?;
        match flavor {
            AUTH_NONE => Ok(Auth::None),
            AUTH_SYS => {
                let mut b = XdrReader::new(body);
                let stamp = b.get_u32()?;
                let machinename = b.get_string(MAX_MACHINE_NAME)?.to_vec();
                let uid = b.get_u32()?;
                let gid = b.get_u32()?;
                let n = b.get_len(MAX_GIDS)?;
                let mut gids = Vec::with_capacity(n);
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

    pub fn emit(&self, w: &mut XdrWriter) {
        match self {
            Auth::None => {
                w.put_u32(AUTH_NONE);
                w.put_u32(0);
            }
            Auth::Sys(s) => {
                let mut b = XdrWriter::new();
                b.put_u32(s.stamp);
                b.put_opaque(&s.machinename);
                b.put_u32(s.uid);
                b.put_u32(s.gid);
                b.put_u32(s.gids.len() as u32);
                for g in &s.gids {
                    b.put_u32(*g);
                }
                w.put_u32(AUTH_SYS);
                w.put_opaque(b.as_slice());
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
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Auth,
    pub verf: Auth,
}

/// Why a call header could not be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// Bytes do not form a call header.
    Garbage(Error),
    /// `rpcvers` is not 2: reply MSG_DENIED / RPC_MISMATCH (RFC 5531 §9).
    RpcMismatch { xid: u32 },
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
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// `auth_stat` (RFC 5531 §9), kept as its number.
pub type AuthStat = u32;
pub const AUTH_BADCRED: AuthStat = 1;
pub const AUTH_TOOWEAK: AuthStat = 5;

/// The reply body (RFC 5531 §9 `reply_body`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyStat {
    /// MSG_ACCEPTED with its verifier and status; results follow SUCCESS.
    Accepted { verf: Auth, stat: AcceptStat },
    /// MSG_DENIED / RPC_MISMATCH.
    RpcMismatch { low: u32, high: u32 },
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
}

/// The header of an RPC reply; results follow an accepted SUCCESS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRepr {
    pub xid: u32,
    pub stat: ReplyStat,
}

impl ReplyRepr {
    /// A successful reply with AUTH_NONE verifier.
    pub fn success(xid: u32) -> Self {
        Self::accepted(xid, AcceptStat::Success)
    }

    pub fn accepted(xid: u32, stat: AcceptStat) -> Self {
        ReplyRepr {
            xid,
            stat: ReplyStat::Accepted {
                verf: Auth::None,
                stat,
            },
        }
    }

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

/// A streaming record-marking decoder: feed bytes, get whole records (fragments joined).
/// Records longer than `max_record` are refused (the connection should be closed).
#[derive(Debug)]
pub struct RecordDecoder {
    max_record: usize,
    buf: Vec<u8>,
    record: Vec<u8>,
}

impl RecordDecoder {
    pub fn new(max_record: usize) -> Self {
        RecordDecoder {
            max_record,
            buf: Vec::new(),
            record: Vec::new(),
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete record, `Ok(None)` if more bytes are needed.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            if self.buf.len() < 4 {
                return Ok(None);
            }
            let h = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            let len = (h & 0x7fff_ffff) as usize;
            let last = h & 0x8000_0000 != 0;
            if self.record.len().saturating_add(len) > self.max_record {
                return Err(Error::Malformed("RPC record longer than the limit"));
            }
            if self.buf.len() < 4 + len {
                return Ok(None);
            }
            self.record.extend_from_slice(&self.buf[4..4 + len]);
            self.buf.drain(..4 + len);
            if last {
                return Ok(Some(std::mem::take(&mut self.record)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_and_reply_round_trip() {
        let c = CallRepr {
            xid: 0x1234,
            prog: 100003,
            vers: 3,
            proc_: 6,
            cred: Auth::Sys(AuthSys {
                stamp: 9,
                machinename: b"host".to_vec(),
                uid: 1000,
                gid: 100,
                gids: vec![4, 24],
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
    }
}
