//! An NFSv3 (RFC 1813) storage target: a program of the RPC-over-RDMA server
//! ([`crate::rpc::server`]) serving a directory of the host's file system, plus MOUNT v3
//! (RFC 1813 App. I) and rpcbind v2 (RFC 1833 §3) over record-marked ONC RPC on kernel TCP
//! ([`crate::rpc::tcp`]).
//!
//! - [`xdr`]: the RFC 1813 §2.5/§2.6 data types (`fattr3`, `sattr3`, `wcc_data`, ...) in the
//!   `parse`/`emit` style of [`crate::wire`].
//! - [`export`]: the exported directory: unforgeable file handles, resolution that never leaves
//!   the export, and the file-system operations behind each procedure.
//! - [`procs`]: the 22 NFSv3 procedures registered into a [`crate::rpc::program::Registry`].
//! - [`mount`]: MOUNT v3 and the rpcbind v2 port mapper.
//!
//! File I/O is synchronous: a handler runs on its connection's thread and calls the file system
//! directly (no handler waits on anything but the local file system; FIFOs, sockets and devices
//! in the export are never opened for I/O, so no open or read can block forever). See
//! `docs/nfs.md` for the design and what is not implemented.
//!
//! RFC 1813 is not among the project's spec copies; section numbers below are RFC 1813's.

pub mod export;
pub mod exports;
pub mod mount;
pub mod procs;
pub mod sys;
pub mod target;
pub mod xdr;

/// NFS program number (RFC 1813 §3: 100003).
pub const NFS_PROG: u32 = 100003;
/// NFS version 3.
pub const NFS_V3: u32 = 3;
/// MOUNT program number (RFC 1813 App. I §5.0: 100005).
pub const MOUNT_PROG: u32 = 100005;
/// MOUNT version 3.
pub const MOUNT_V3: u32 = 3;
/// rpcbind / port mapper program number (RFC 1833 §3: 100000).
pub const PMAP_PROG: u32 = 100000;
/// Port mapper version 2 (RFC 1833 §3).
pub const PMAP_V2: u32 = 2;

/// The port NFS over RPC-over-RDMA listens on (RFC 8267 §6.3 names 20049 for NFS/RDMA).
pub const NFS_RDMA_PORT: u16 = 20049;

/// Procedure numbers (RFC 1813 §3.3).
pub mod proc_ {
    #![allow(missing_docs)]
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
}

/// `nfsstat3` (RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum Stat {
    Ok = 0,
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    NxIo = 6,
    Acces = 13,
    Exist = 17,
    XDev = 18,
    NoDev = 19,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    RoFs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    Remote = 71,
    BadHandle = 10001,
    NotSync = 10002,
    BadCookie = 10003,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
    Jukebox = 10008,
}

impl Stat {
    /// The wire value.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Map a host errno to the nearest `nfsstat3` (RFC 1813 §2.6).
    pub fn from_errno(e: rustix::io::Errno) -> Stat {
        use rustix::io::Errno as E;
        match e {
            E::PERM => Stat::Perm,
            E::NOENT => Stat::NoEnt,
            E::NXIO => Stat::NxIo,
            E::ACCESS => Stat::Acces,
            E::EXIST => Stat::Exist,
            E::XDEV => Stat::XDev,
            E::NODEV => Stat::NoDev,
            E::NOTDIR => Stat::NotDir,
            E::ISDIR => Stat::IsDir,
            E::INVAL => Stat::Inval,
            E::FBIG => Stat::FBig,
            E::NOSPC => Stat::NoSpc,
            E::ROFS => Stat::RoFs,
            E::MLINK => Stat::MLink,
            E::NAMETOOLONG => Stat::NameTooLong,
            E::NOTEMPTY => Stat::NotEmpty,
            E::DQUOT => Stat::DQuot,
            E::STALE => Stat::Stale,
            // A symlink met during resolution (RESOLVE_NO_SYMLINKS) or a path leaving the export
            // (RESOLVE_BENEATH): the object is not reachable through this export.
            E::LOOP => Stat::Stale,
            E::OPNOTSUPP => Stat::NotSupp,
            _ => Stat::Io,
        }
    }
}

impl From<rustix::io::Errno> for Stat {
    fn from(e: rustix::io::Errno) -> Self {
        Stat::from_errno(e)
    }
}

impl From<std::io::Error> for Stat {
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(n) => Stat::from_errno(rustix::io::Errno::from_raw_os_error(n)),
            None => Stat::Io,
        }
    }
}
