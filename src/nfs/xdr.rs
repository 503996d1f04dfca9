//! NFSv3 XDR data types (RFC 1813 §2.5, §2.6), decoded with bounds from [`XdrReader`] and
//! encoded into an [`XdrWriter`]. Every variable-length item has a bound so a hostile length
//! word cannot drive an allocation.

use crate::wire::xdr::{XdrReader, XdrWriter};
use crate::wire::{Error, Result};

/// `NFS3_FHSIZE`: largest file handle (RFC 1813 §2.4).
pub const FHSIZE: usize = 64;
/// Largest `filename3` accepted (names longer are NFS3ERR_NAMETOOLONG at the file-system layer,
/// but the XDR bound keeps allocation small).
pub const MAX_NAME: usize = 1024;
/// Largest `nfspath3` accepted (symlink targets, MOUNT dirpath: `MNTPATHLEN` is 1024).
pub const MAX_PATH: usize = 4096;
/// `NFS3_WRITEVERFSIZE` / `NFS3_CREATEVERFSIZE` / `NFS3_COOKIEVERFSIZE` (RFC 1813 §2.4).
pub const VERFSIZE: usize = 8;

/// `ftype3` (RFC 1813 §2.6).
#[allow(missing_docs)]
pub mod ftype {
    pub const REG: u32 = 1;
    pub const DIR: u32 = 2;
    pub const BLK: u32 = 3;
    pub const CHR: u32 = 4;
    pub const LNK: u32 = 5;
    pub const SOCK: u32 = 6;
    pub const FIFO: u32 = 7;
}

/// ACCESS bits (RFC 1813 §3.3.4).
#[allow(missing_docs)]
pub mod access {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
}

/// `stable_how` (RFC 1813 §3.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StableHow {
    /// UNSTABLE = 0: the server may cache the data; COMMIT makes it stable.
    Unstable = 0,
    /// DATA_SYNC = 1: data (and the metadata to retrieve it) on stable storage before replying.
    DataSync = 1,
    /// FILE_SYNC = 2: data and all metadata on stable storage before replying.
    FileSync = 2,
}

impl StableHow {
    /// Decode (any other value is malformed).
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        match r.get_u32()? {
            0 => Ok(StableHow::Unstable),
            1 => Ok(StableHow::DataSync),
            2 => Ok(StableHow::FileSync),
            _ => Err(Error::Malformed("stable_how out of range")),
        }
    }
}

/// `nfstime3` (RFC 1813 §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NfsTime {
    /// Seconds since the epoch.
    pub seconds: u32,
    /// Nanoseconds.
    pub nseconds: u32,
}

impl NfsTime {
    /// Decode.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        Ok(NfsTime {
            seconds: r.get_u32()?,
            nseconds: r.get_u32()?,
        })
    }
    /// Encode.
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.seconds);
        w.put_u32(self.nseconds);
    }
    /// From a host timestamp (seconds are truncated to 32 bits, as nfstime3 is).
    pub fn from_host(sec: i64, nsec: u32) -> Self {
        NfsTime {
            seconds: sec as u32,
            nseconds: nsec,
        }
    }
}

/// `fattr3` (RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct Fattr3 {
    pub ftype: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: (u32, u32),
    pub fsid: u64,
    pub fileid: u64,
    pub atime: NfsTime,
    pub mtime: NfsTime,
    pub ctime: NfsTime,
}

/// Encoded size of a `fattr3`.
pub const FATTR3_LEN: usize = 84;

impl Fattr3 {
    /// Encode.
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.ftype);
        w.put_u32(self.mode);
        w.put_u32(self.nlink);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_u64(self.size);
        w.put_u64(self.used);
        w.put_u32(self.rdev.0);
        w.put_u32(self.rdev.1);
        w.put_u64(self.fsid);
        w.put_u64(self.fileid);
        self.atime.emit(w);
        self.mtime.emit(w);
        self.ctime.emit(w);
    }
    /// Decode.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        Ok(Fattr3 {
            ftype: r.get_u32()?,
            mode: r.get_u32()?,
            nlink: r.get_u32()?,
            uid: r.get_u32()?,
            gid: r.get_u32()?,
            size: r.get_u64()?,
            used: r.get_u64()?,
            rdev: (r.get_u32()?, r.get_u32()?),
            fsid: r.get_u64()?,
            fileid: r.get_u64()?,
            atime: NfsTime::parse(r)?,
            mtime: NfsTime::parse(r)?,
            ctime: NfsTime::parse(r)?,
        })
    }
    /// The `wcc_attr` subset (RFC 1813 §2.6).
    pub fn wcc(&self) -> WccAttr {
        WccAttr {
            size: self.size,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }
}

/// `post_op_attr` (RFC 1813 §2.6): optional attributes.
pub fn emit_post_op_attr(w: &mut XdrWriter, a: Option<&Fattr3>) {
    match a {
        Some(a) => {
            w.put_bool(true);
            a.emit(w);
        }
        None => w.put_bool(false),
    }
}

/// Decode a `post_op_attr`.
pub fn parse_post_op_attr(r: &mut XdrReader<'_>) -> Result<Option<Fattr3>> {
    Ok(if r.get_bool()? {
        Some(Fattr3::parse(r)?)
    } else {
        None
    })
}

/// `wcc_attr` (RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct WccAttr {
    pub size: u64,
    pub mtime: NfsTime,
    pub ctime: NfsTime,
}

/// `wcc_data` (RFC 1813 §2.6): attributes before and after an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wcc {
    /// `pre_op_attr`.
    pub before: Option<WccAttr>,
    /// `post_op_attr`.
    pub after: Option<Fattr3>,
}

impl Wcc {
    /// Encode.
    pub fn emit(&self, w: &mut XdrWriter) {
        match &self.before {
            Some(b) => {
                w.put_bool(true);
                w.put_u64(b.size);
                b.mtime.emit(w);
                b.ctime.emit(w);
            }
            None => w.put_bool(false),
        }
        emit_post_op_attr(w, self.after.as_ref());
    }
    /// Decode.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        let before = if r.get_bool()? {
            Some(WccAttr {
                size: r.get_u64()?,
                mtime: NfsTime::parse(r)?,
                ctime: NfsTime::parse(r)?,
            })
        } else {
            None
        };
        Ok(Wcc {
            before,
            after: parse_post_op_attr(r)?,
        })
    }
}

/// `time_how` + value in `set_atime` / `set_mtime` (RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// DONT_CHANGE.
    #[default]
    DontChange,
    /// SET_TO_SERVER_TIME.
    Server,
    /// SET_TO_CLIENT_TIME.
    Client(NfsTime),
}

impl SetTime {
    fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        match r.get_u32()? {
            0 => Ok(SetTime::DontChange),
            1 => Ok(SetTime::Server),
            2 => Ok(SetTime::Client(NfsTime::parse(r)?)),
            _ => Err(Error::Malformed("time_how out of range")),
        }
    }
    fn emit(&self, w: &mut XdrWriter) {
        match self {
            SetTime::DontChange => w.put_u32(0),
            SetTime::Server => w.put_u32(1),
            SetTime::Client(t) => {
                w.put_u32(2);
                t.emit(w);
            }
        }
    }
}

/// `sattr3` (RFC 1813 §2.6): attributes to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct Sattr3 {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

fn opt_u32(r: &mut XdrReader<'_>) -> Result<Option<u32>> {
    Ok(if r.get_bool()? {
        Some(r.get_u32()?)
    } else {
        None
    })
}

fn put_opt_u32(w: &mut XdrWriter, v: Option<u32>) {
    w.put_bool(v.is_some());
    if let Some(v) = v {
        w.put_u32(v);
    }
}

impl Sattr3 {
    /// Decode.
    pub fn parse(r: &mut XdrReader<'_>) -> Result<Self> {
        Ok(Sattr3 {
            mode: opt_u32(r)?,
            uid: opt_u32(r)?,
            gid: opt_u32(r)?,
            size: if r.get_bool()? {
                Some(r.get_u64()?)
            } else {
                None
            },
            atime: SetTime::parse(r)?,
            mtime: SetTime::parse(r)?,
        })
    }
    /// Encode.
    pub fn emit(&self, w: &mut XdrWriter) {
        put_opt_u32(w, self.mode);
        put_opt_u32(w, self.uid);
        put_opt_u32(w, self.gid);
        w.put_bool(self.size.is_some());
        if let Some(s) = self.size {
            w.put_u64(s);
        }
        self.atime.emit(w);
        self.mtime.emit(w);
    }
}

/// `nfs_fh3` (RFC 1813 §2.5): opaque<NFS3_FHSIZE>.
pub fn parse_fh<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8]> {
    r.get_opaque(FHSIZE)
}

/// `diropargs3` (RFC 1813 §2.6): directory handle and name.
pub fn parse_diropargs<'a>(r: &mut XdrReader<'a>) -> Result<(&'a [u8], &'a [u8])> {
    let fh = parse_fh(r)?;
    let name = r.get_string(MAX_NAME)?;
    Ok((fh, name))
}

/// `post_op_fh3` (RFC 1813 §2.6).
pub fn emit_post_op_fh(w: &mut XdrWriter, fh: Option<&[u8]>) {
    match fh {
        Some(f) => {
            w.put_bool(true);
            w.put_opaque(f);
        }
        None => w.put_bool(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fattr3_is_84_bytes_and_round_trips() {
        let a = Fattr3 {
            ftype: ftype::REG,
            mode: 0o644,
            nlink: 1,
            size: 1 << 40,
            fileid: 77,
            mtime: NfsTime {
                seconds: 5,
                nseconds: 6,
            },
            ..Default::default()
        };
        let mut w = XdrWriter::new();
        a.emit(&mut w);
        let v = w.into_vec();
        assert_eq!(v.len(), FATTR3_LEN);
        assert_eq!(Fattr3::parse(&mut XdrReader::new(&v)).unwrap(), a);
    }

    #[test]
    fn sattr3_round_trips_and_bad_time_how_is_malformed() {
        let s = Sattr3 {
            mode: Some(0o600),
            size: Some(3),
            mtime: SetTime::Client(NfsTime {
                seconds: 1,
                nseconds: 2,
            }),
            atime: SetTime::Server,
            ..Default::default()
        };
        let mut w = XdrWriter::new();
        s.emit(&mut w);
        let v = w.into_vec();
        assert_eq!(Sattr3::parse(&mut XdrReader::new(&v)).unwrap(), s);
        let mut bad = v.clone();
        let n = bad.len();
        // The last word is the mtime nseconds; the time_how of atime is at a known place:
        // mode(8) uid(4) gid(4) size(12) => atime how at 28.
        bad[28..32].copy_from_slice(&9u32.to_be_bytes());
        assert!(Sattr3::parse(&mut XdrReader::new(&bad[..n])).is_err());
    }
}
