//! The exported directory: file handles, resolution confined to the export, and the
//! file-system operations behind the NFSv3 procedures.
//!
//! **File handles** (RFC 1813 §2.4 `nfs_fh3`, at most 64 bytes) are 44 bytes:
//! `"DPW1" | dev u64 | ino u64 | generation u64 | MAC[16]`, where MAC is the first 16 bytes of
//! keyed BLAKE3 over the first 28 bytes with a 32-byte secret drawn at random when the server
//! starts. A handle with the wrong length, tag or MAC is NFS3ERR_BADHANDLE; a well-formed handle
//! whose object is no longer where the server last saw it (removed, renamed behind the server's
//! back, its inode reused — the generation is the inode's birth time from `statx`) is
//! NFS3ERR_STALE. Handles do not survive a server restart (a new secret): clients see
//! NFS3ERR_BADHANDLE and must mount again.
//!
//! **Resolution**: the server keeps, for every object a handle was given out for, its path
//! relative to the export root, and opens it with `openat2(2)` from the root directory's fd with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`: no `..`
//! escape, no symlink followed (a symlink is only ever opened as itself, `O_PATH|O_NOFOLLOW`,
//! for READLINK and its attributes), no crossing into another mount. Names in requests are
//! single components: empty names, names with `/` or NUL are refused (NFS3ERR_INVAL / ACCES);
//! `.` and `..` are answered by the server from its table (`..` of the root is the root). A small
//! READ, GETATTR or ACCESS answered on the connection's own thread ([`Export::read_nowait`],
//! [`Export::stat_nowait`]) goes through the descriptor a READ opened lately if there is one
//! (it reaches the file the handle names, wherever that moved), else through the same path
//! walk, made only if every component is in the kernel's lookup cache (`RESOLVE_CACHED`).
//!
//! **Credentials**: the server process does the I/O (normally as root); AUTH_SYS uid/gid/gids
//! are checked against the mode bits before READ, WRITE, directory changes, READDIR and LOOKUP
//! (the owner may always read and write its file, as knfsd allows, and uid 0 passes every check:
//! no root squashing). New objects are given the caller's uid/gid. AUTH_NONE is uid/gid 65534.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{
    self as rfs, AtFlags, Mode, OFlags, ResolveFlags, StatxFlags, Timespec, Timestamps,
};

use super::xdr::{ftype, Fattr3, NfsTime, Sattr3, SetTime, StableHow, Wcc};
use super::Stat;
use crate::rpc::program::BulkPool;
use crate::wire::oncrpc::Auth;

/// Encoded file-handle length.
pub const FH_LEN: usize = 44;
const FH_TAG: &[u8; 4] = b"DPW1";
/// Largest READ / WRITE count (FSINFO rtmax / wtmax): 1 MiB, one RDMA chunk.
pub const MAX_IO: u32 = 1 << 20;
/// Objects remembered (handles given out) at most; past it LOOKUP answers NFS3ERR_JUKEBOX.
pub const MAX_OBJECTS: usize = 1 << 20;

/// The caller, from the RPC credential (RFC 5531 App. A).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary gids.
    pub gids: Vec<u32>,
}

impl Cred {
    /// AUTH_SYS as sent; anything else (AUTH_NONE) is nobody (65534).
    pub fn from_auth(a: &Auth) -> Cred {
        match a {
            Auth::Sys(s) => Cred {
                uid: s.uid,
                gid: s.gid,
                gids: s.gids.clone(),
            },
            _ => Cred {
                uid: 65534,
                gid: 65534,
                gids: vec![],
            },
        }
    }
    fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.gids.contains(&g)
    }
}

/// An object of the export, resolved and open (`O_PATH`).
pub struct Obj {
    /// Path relative to the export root (empty: the root).
    pub path: PathBuf,
    /// An `O_PATH | O_NOFOLLOW` descriptor of it.
    pub fd: OwnedFd,
    /// Its attributes when opened.
    pub st: rfs::Stat,
    gen: u64,
    /// `fd` is open for reading (`Export::resolve_for_read`), not `O_PATH`.
    readable: bool,
}

impl Obj {
    /// NFS file type.
    pub fn ftype(&self) -> u32 {
        ftype_of(self.st.st_mode)
    }
    /// `(dev, ino)`.
    pub fn key(&self) -> (u64, u64) {
        (self.st.st_dev, self.st.st_ino)
    }
}

fn ftype_of(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        libc::S_IFREG => ftype::REG,
        libc::S_IFDIR => ftype::DIR,
        libc::S_IFLNK => ftype::LNK,
        libc::S_IFBLK => ftype::BLK,
        libc::S_IFCHR => ftype::CHR,
        libc::S_IFSOCK => ftype::SOCK,
        _ => ftype::FIFO,
    }
}

#[derive(Clone)]
struct Entry {
    path: PathBuf,
    gen: u64,
    /// A regular file when its handle was given out (the type of an inode never changes, and
    /// `gen` tells a reused inode apart): READ may open it for reading at once.
    regular: bool,
}

/// An exported directory.
pub struct Export {
    root: OwnedFd,
    root_path: PathBuf,
    secret: [u8; 32],
    verf: [u8; 8],
    table: Mutex<HashMap<(u64, u64), Entry>>,
    /// The buffers large READs are read into ([`Export::read_pool`]).
    read_pool: BulkPool,
    /// Regular files a READ opened lately, kept open for READs answered at once
    /// ([`Export::read_nowait`]).
    read_fds: Mutex<ReadFds>,
    /// Refuse every change with NFS3ERR_ROFS.
    pub read_only: bool,
}

/// READs asking this much or more are read into a buffer of [`Export::read_pool`]; smaller
/// ones into a `Vec` of their own (no pass worth sparing, and they mostly go inline).
pub const POOLED_READ_MIN: u32 = 32 * 1024;

/// Buffers of [`MAX_IO`] octets in the READ pool at most (this many MiB, made as needed):
/// READs in flight at once beyond it use buffers of their own.
const POOLED_READ_BUFFERS: usize = 64;

/// Descriptors [`Export::read_fds`] keeps open at most (the oldest closed first): few enough
/// beside the default limit of 1024 open files.
const READ_FDS: usize = 256;

/// Regular files opened for reading, by `(dev, ino)`, with the generation they were opened
/// at; oldest first in `order`.
#[derive(Default)]
struct ReadFds {
    fds: HashMap<(u64, u64), (u64, Arc<OwnedFd>)>,
    order: VecDeque<(u64, u64)>,
}

impl ReadFds {
    fn get(&self, key: (u64, u64), gen: u64) -> Option<Arc<OwnedFd>> {
        self.fds
            .get(&key)
            .filter(|(g, _)| *g == gen)
            .map(|(_, fd)| fd.clone())
    }

    fn insert(&mut self, key: (u64, u64), gen: u64, fd: Arc<OwnedFd>) {
        if self.fds.insert(key, (gen, fd)).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > READ_FDS {
            if let Some(k) = self.order.pop_front() {
                self.fds.remove(&k);
            }
        }
    }

    fn remove(&mut self, key: (u64, u64)) {
        if self.fds.remove(&key).is_some() {
            self.order.retain(|k| *k != key);
        }
    }
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

fn generation(fd: &OwnedFd) -> u64 {
    match rfs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BTIME) {
        Ok(x) if x.stx_mask & StatxFlags::BTIME.bits() != 0 => {
            (x.stx_btime.tv_sec as u64).wrapping_mul(1_000_000_000) ^ u64::from(x.stx_btime.tv_nsec)
        }
        _ => 0,
    }
}

/// A single path component from a request (RFC 1813 §2.5 `filename3`): refused if empty,
/// `/`-containing, NUL-containing, or longer than 255 bytes.
fn check_name(name: &[u8]) -> Result<&OsStr, Stat> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Stat::Acces);
    }
    if name.len() > 255 {
        return Err(Stat::NameTooLong);
    }
    Ok(OsStr::from_bytes(name))
}

/// A name that creates or removes an entry: also not `.` or `..`.
fn check_new_name(name: &[u8]) -> Result<&OsStr, Stat> {
    let n = check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Stat::Exist);
    }
    Ok(n)
}

fn now() -> Timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()) as _,
    }
}

/// `UTIME_OMIT` / `UTIME_NOW` (utimensat(2)).
const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

fn ts(t: SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT as _,
        },
        SetTime::Server => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW as _,
        },
        SetTime::Client(t) => Timespec {
            tv_sec: i64::from(t.seconds),
            tv_nsec: i64::from(t.nseconds.min(999_999_999)) as _,
        },
    }
}

/// Result of a directory-changing operation: the new object (if any) and the directory's wcc.
pub type DirOpResult = (Option<Obj>, Wcc);

impl Export {
    /// Export `dir` (must be a directory). Draws the handle secret and write verifier.
    pub fn new(dir: &Path) -> std::io::Result<Export> {
        let root = rfs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut secret = [0u8; 32];
        rand::fill(&mut secret);
        let mut verf = [0u8; 8];
        rand::fill(&mut verf);
        let e = Export {
            root,
            root_path: dir.to_path_buf(),
            secret,
            verf,
            table: Mutex::new(HashMap::new()),
            read_pool: BulkPool::new(MAX_IO as usize, POOLED_READ_BUFFERS),
            read_fds: Mutex::new(ReadFds::default()),
            read_only: false,
        };
        let st = rfs::fstat(&e.root)?;
        let gen = generation(&e.root);
        e.table().insert(
            (st.st_dev, st.st_ino),
            Entry {
                path: PathBuf::new(),
                gen,
                regular: false,
            },
        );
        Ok(e)
    }

    /// The exported host directory.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The write verifier (RFC 1813 §3.3.7 `writeverf3`): random per server instance, so a
    /// client detects a restart that may have lost UNSTABLE data.
    pub fn write_verf(&self) -> [u8; 8] {
        self.verf
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mac(&self, body: &[u8]) -> [u8; 16] {
        let h = blake3::keyed_hash(&self.secret, body);
        let mut m = [0u8; 16];
        m.copy_from_slice(&h.as_bytes()[..16]);
        m
    }

    /// The file handle of `o`.
    pub fn handle(&self, o: &Obj) -> Vec<u8> {
        let mut v = Vec::with_capacity(FH_LEN);
        v.extend_from_slice(FH_TAG);
        v.extend_from_slice(&o.st.st_dev.to_be_bytes());
        v.extend_from_slice(&o.st.st_ino.to_be_bytes());
        v.extend_from_slice(&o.gen.to_be_bytes());
        let m = self.mac(&v);
        v.extend_from_slice(&m);
        v
    }

    /// The root's handle (MOUNT MNT).
    pub fn root_handle(&self) -> Result<Vec<u8>, Stat> {
        let o = self.open_obj(Path::new(""))?;
        Ok(self.handle(&o))
    }

    fn open_rel(&self, rel: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Stat> {
        self.open_rel_with(rel, flags, mode, resolve_flags())
    }

    /// [`Export::open_rel`] with these `resolve` flags (`resolve_flags()`, and
    /// `RESOLVE_CACHED` for an open that must not wait).
    fn open_rel_with(
        &self,
        rel: &Path,
        flags: OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    ) -> Result<OwnedFd, Stat> {
        let p: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        // openat2(2) refuses O_PATH with any flag but O_DIRECTORY/O_NOFOLLOW/O_CLOEXEC; every
        // other open is non-blocking (a FIFO or device must never stall a handler).
        let nb = if flags.contains(OFlags::PATH) {
            OFlags::empty()
        } else {
            OFlags::NONBLOCK
        };
        rfs::openat2(
            &self.root,
            p,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | nb,
            mode,
            resolve,
        )
        .map_err(Stat::from)
    }

    fn open_obj(&self, rel: &Path) -> Result<Obj, Stat> {
        self.open_obj_as(rel, OFlags::PATH)
    }

    /// `rel` opened with `flags` (`O_PATH`, or `O_RDONLY` for a READ of a regular file).
    fn open_obj_as(&self, rel: &Path, flags: OFlags) -> Result<Obj, Stat> {
        self.open_obj_with(rel, flags, resolve_flags())
    }

    /// [`Export::open_obj_as`] with these `resolve` flags.
    fn open_obj_with(&self, rel: &Path, flags: OFlags, resolve: ResolveFlags) -> Result<Obj, Stat> {
        let fd = self.open_rel_with(rel, flags, Mode::empty(), resolve)?;
        let st = rfs::fstat(&fd)?;
        let gen = generation(&fd);
        Ok(Obj {
            path: rel.to_path_buf(),
            fd,
            st,
            gen,
            readable: !flags.contains(OFlags::PATH),
        })
    }

    fn remember(&self, o: &Obj) -> Result<(), Stat> {
        Self::remember_in(&mut self.table(), o)
    }

    /// [`Export::remember`] in the table `t` (this export's, locked).
    fn remember_in(t: &mut HashMap<(u64, u64), Entry>, o: &Obj) -> Result<(), Stat> {
        if t.len() >= MAX_OBJECTS && !t.contains_key(&o.key()) {
            return Err(Stat::Jukebox);
        }
        t.insert(
            o.key(),
            Entry {
                path: o.path.clone(),
                gen: o.gen,
                regular: o.ftype() == ftype::REG,
            },
        );
        Ok(())
    }

    fn forget_path(&self, rel: &Path) {
        self.retain_objects(&mut self.table(), |e| !e.path.starts_with(rel));
    }

    /// Keep the objects of the table `t` (this export's, locked) that `keep` says, and close
    /// the kept READ descriptors of the others: a removed file's descriptor would keep its
    /// blocks allocated.
    fn retain_objects(&self, t: &mut HashMap<(u64, u64), Entry>, keep: impl Fn(&Entry) -> bool) {
        let mut gone = Vec::new();
        t.retain(|k, e| {
            let kept = keep(e);
            if !kept {
                gone.push(*k);
            }
            kept
        });
        let mut fds = self.read_fds();
        for k in gone {
            fds.remove(k);
        }
    }

    fn read_fds(&self) -> std::sync::MutexGuard<'_, ReadFds> {
        self.read_fds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolve a file handle (RFC 1813 §2.4): NFS3ERR_BADHANDLE if it is not one of ours,
    /// NFS3ERR_STALE if its object is gone.
    pub fn resolve(&self, fh: &[u8]) -> Result<Obj, Stat> {
        self.resolve_as(fh, false)
    }

    /// [`Export::resolve`] for a READ: a handle given out for a regular file is opened for
    /// reading at once (non-blocking, as every open for I/O here), so that the READ needs no
    /// second walk of its path and no second descriptor (docs/nfs.md "Bulk data"). Whatever
    /// the path leads to now is checked to be that same file before anything is read.
    pub fn resolve_for_read(&self, fh: &[u8]) -> Result<Obj, Stat> {
        self.resolve_as(fh, true)
    }

    /// `(dev, ino, generation)` of one of our handles; NFS3ERR_BADHANDLE if it is not one.
    fn decode(&self, fh: &[u8]) -> Result<(u64, u64, u64), Stat> {
        if fh.len() != FH_LEN || &fh[..4] != FH_TAG {
            return Err(Stat::BadHandle);
        }
        let m = self.mac(&fh[..28]);
        // Constant-time comparison of the MAC.
        if m.iter().zip(&fh[28..]).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
            return Err(Stat::BadHandle);
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(fh[r].try_into().unwrap_or([0; 8]));
        Ok((u(4..12), u(12..20), u(20..28)))
    }

    fn resolve_as(&self, fh: &[u8], read: bool) -> Result<Obj, Stat> {
        let (dev, ino, gen) = self.decode(fh)?;
        let e = self.table().get(&(dev, ino)).cloned().ok_or(Stat::Stale)?;
        if e.gen != gen {
            return Err(Stat::Stale);
        }
        // RDONLY is the empty flag set: a READ's open is `O_RDONLY | O_NONBLOCK` (open_rel).
        let flags = if read && e.regular {
            OFlags::RDONLY
        } else {
            OFlags::PATH
        };
        let o = self.open_obj_as(&e.path, flags).map_err(|_| Stat::Stale)?;
        if o.key() != (dev, ino) || o.gen != gen {
            return Err(Stat::Stale);
        }
        if o.readable && self.read_fds().get((dev, ino), gen).is_none() {
            // Kept for the READs after this one (`read_nowait`); a copy of the descriptor,
            // once per file while it stays in the cache.
            if let Ok(fd) = o.fd.try_clone() {
                self.read_fds().insert((dev, ino), gen, Arc::new(fd));
            }
        }
        Ok(o)
    }

    /// `rel` opened for reading without waiting, if every component of its path is in the
    /// kernel's lookup cache (`openat2` with `RESOLVE_CACHED`, Linux 5.12: EAGAIN rather than
    /// a lookup that may read the disk) and it is still the object `(dev, ino)` of generation
    /// `gen`; kept in the cache for the READs after it.
    fn open_cached(&self, rel: &Path, key: (u64, u64), gen: u64) -> Option<Arc<OwnedFd>> {
        let o = self.open_nowait(rel, OFlags::RDONLY, key, gen)?;
        let fd = Arc::new(o.fd);
        self.read_fds().insert(key, gen, fd.clone());
        Some(fd)
    }

    /// `rel` opened with `flags` ([`Export::open_obj_as`]) if that needs no lookup beyond the
    /// kernel's cache (`RESOLVE_CACHED`) and it is the object `key` of generation `gen`.
    fn open_nowait(&self, rel: &Path, flags: OFlags, key: (u64, u64), gen: u64) -> Option<Obj> {
        let o = self
            .open_obj_with(rel, flags, resolve_flags() | ResolveFlags::CACHED)
            .ok()?;
        (o.key() == key && o.gen == gen).then_some(o)
    }

    /// The object a handle names, opened `O_PATH` without waiting (`RESOLVE_CACHED`) and
    /// checked as [`Export::resolve`] checks; `None` when that would wait or fails.
    fn resolve_nowait(&self, fh: &[u8]) -> Option<Obj> {
        let (key, e) = self.entry_nowait(fh)?;
        self.open_nowait(&e.path, OFlags::PATH, key, e.gen)
    }

    /// The table's entry for one of our handles, without waiting: `None` for a handle that is
    /// not ours or no longer in the table (what `resolve` looks at first: REMOVE and RENAME
    /// through NFS take objects out), or while a handler holds the table (REMOVE walks all of
    /// it).
    fn entry_nowait(&self, fh: &[u8]) -> Option<((u64, u64), Entry)> {
        let (dev, ino, gen) = self.decode(fh).ok()?;
        let e = self.table.try_lock().ok()?.get(&(dev, ino)).cloned()?;
        (e.gen == gen).then_some(((dev, ino), e))
    }

    /// LOOKUP (RFC 1813 §3.3.3) without waiting, for the connection's own thread: `name` in
    /// the directory `dir_fh` names, when the directory and the name resolve from the
    /// kernel's lookup cache alone (`RESOLVE_CACHED`), the caller may search the directory,
    /// and the object is remembered without waiting for the handle table; then the object
    /// and the directory. `None` otherwise (or on any error), with nothing changed:
    /// [`Export::lookup`] then answers on a thread that may wait.
    pub fn lookup_nowait(&self, c: &Cred, dir_fh: &[u8], name: &[u8]) -> Option<(Obj, Obj)> {
        let dir = self.resolve_nowait(dir_fh)?;
        if dir.ftype() != ftype::DIR || name == b"." || name == b".." {
            return None;
        }
        let n = check_name(name).ok()?;
        if !Self::permits(c, &dir.st, 1) {
            return None;
        }
        let o = self
            .open_obj_with(
                &dir.path.join(n),
                OFlags::PATH,
                resolve_flags() | ResolveFlags::CACHED,
            )
            .ok()?;
        Self::remember_in(&mut *self.table.try_lock().ok()?, &o).ok()?;
        Some((o, dir))
    }

    /// The attributes of the object a handle names, without waiting (GETATTR, ACCESS on the
    /// connection's own thread): through a READ's kept descriptor, or an `O_PATH` open whose
    /// whole path is in the kernel's lookup cache, checked against the handle as
    /// [`Export::resolve`] checks; `None` when that would wait or the handle does not resolve
    /// so (the caller then resolves it on a thread that may wait, with the same outcome or the
    /// error).
    pub fn stat_nowait(&self, fh: &[u8]) -> Option<rfs::Stat> {
        let ((dev, ino), Entry { path, gen, regular }) = self.entry_nowait(fh)?;
        if regular {
            if let Some(fd) = self.read_fds.try_lock().ok()?.get((dev, ino), gen) {
                return rfs::fstat(&fd).ok().filter(|st| st.st_nlink > 0);
            }
        }
        self.open_nowait(&path, OFlags::PATH, (dev, ino), gen)
            .map(|o| o.st)
    }

    /// A READ (RFC 1813 §3.3.6) that never waits, for the thread that moves the connection's
    /// bytes: only when the handle names a regular file that a READ opened lately (its
    /// descriptor kept) or that opens without waiting (its whole path in the kernel's lookup
    /// cache, [`Export::open_cached`]), the caller may read it, and every byte asked for (up to
    /// EOF) is in the page cache (`preadv2` with `RWF_NOWAIT`, which fails rather than wait
    /// for the disk). Then: the bytes read into the memory `buf_for` gives (as
    /// [`Export::read_with`]), whether they reached EOF, and the file's attributes. `None`
    /// otherwise, with nothing changed: [`Export::read_with`] then answers, on a thread that
    /// may wait, with the same result or the error.
    ///
    /// The descriptor reaches the file the handle names even if it was renamed outside NFS
    /// since (as the Linux server's handles do); a file removed (no link left) is dropped from
    /// the cache, and its handle then resolves as any other (NFS3ERR_STALE).
    pub fn read_nowait<'b>(
        &self,
        c: &Cred,
        fh: &[u8],
        offset: u64,
        count: u32,
        buf_for: impl FnOnce(usize) -> &'b mut [u8],
    ) -> Option<(usize, bool, rfs::Stat)> {
        let ((dev, ino), Entry { path, gen, regular }) = self.entry_nowait(fh)?;
        if !regular {
            return None;
        }
        let cached = self.read_fds.try_lock().ok()?.get((dev, ino), gen);
        let fd = match cached {
            Some(fd) => fd,
            None => self.open_cached(&path, (dev, ino), gen)?,
        };
        let st = rfs::fstat(&fd).ok()?;
        if st.st_nlink == 0 {
            self.read_fds().remove((dev, ino));
            return None;
        }
        if ftype_of(st.st_mode) != ftype::REG || (c.uid != st.st_uid && !Self::permits(c, &st, 4)) {
            return None;
        }
        let size = st.st_size as u64;
        let want = (count.min(MAX_IO) as u64).min(size.saturating_sub(offset)) as usize;
        let buf = buf_for(want);
        let want = want.min(buf.len());
        if want > 0 {
            let mut io = [std::io::IoSliceMut::new(&mut buf[..want])];
            match rustix::io::preadv2(&fd, &mut io, offset, rustix::io::ReadWriteFlags::NOWAIT) {
                // All of it, or nothing: a short count (part not cached, the file shrank)
                // goes the waiting way.
                Ok(n) if n == want => {}
                _ => return None,
            }
        }
        let eof = offset.saturating_add(want as u64) >= size;
        Some((want, eof, st))
    }

    /// NFS attributes of an object.
    pub fn fattr(&self, st: &rfs::Stat) -> Fattr3 {
        let major = ((st.st_rdev >> 8) & 0xfff) as u32 | ((st.st_rdev >> 32) as u32 & !0xfff);
        let minor = (st.st_rdev & 0xff) as u32 | ((st.st_rdev >> 12) as u32 & !0xff);
        Fattr3 {
            ftype: ftype_of(st.st_mode),
            mode: st.st_mode & 0o7777,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            used: (st.st_blocks as u64).saturating_mul(512),
            rdev: (major, minor),
            fsid: st.st_dev,
            fileid: st.st_ino,
            atime: NfsTime::from_host(st.st_atime, st.st_atime_nsec as u32),
            mtime: NfsTime::from_host(st.st_mtime, st.st_mtime_nsec as u32),
            ctime: NfsTime::from_host(st.st_ctime, st.st_ctime_nsec as u32),
        }
    }

    /// Current attributes of an open object.
    pub fn attrs(&self, o: &Obj) -> Option<Fattr3> {
        rfs::fstat(&o.fd).ok().map(|st| self.fattr(&st))
    }

    /// wcc_data with `before` and the object's attributes now.
    pub fn wcc(&self, before: &rfs::Stat, o: &Obj) -> Wcc {
        Wcc {
            before: Some(self.fattr(before).wcc()),
            after: self.attrs(o),
        }
    }

    /// May `c` access `st` for `want` (bits 4 = r, 2 = w, 1 = x of the rwx triplet)?
    pub fn permits(c: &Cred, st: &rfs::Stat, want: u32) -> bool {
        if c.uid == 0 {
            // Root passes, except execute on a file with no execute bit at all.
            return want & 1 == 0 || ftype_of(st.st_mode) == ftype::DIR || st.st_mode & 0o111 != 0;
        }
        let bits = if c.uid == st.st_uid {
            (st.st_mode >> 6) & 7
        } else if c.in_group(st.st_gid) {
            (st.st_mode >> 3) & 7
        } else {
            st.st_mode & 7
        };
        bits & want == want
    }

    fn need(c: &Cred, st: &rfs::Stat, want: u32) -> Result<(), Stat> {
        if Self::permits(c, st, want) {
            Ok(())
        } else {
            Err(Stat::Acces)
        }
    }

    fn need_dir_change(&self, c: &Cred, dir: &Obj) -> Result<(), Stat> {
        if self.read_only {
            return Err(Stat::RoFs);
        }
        if dir.ftype() != ftype::DIR {
            return Err(Stat::NotDir);
        }
        Self::need(c, &dir.st, 2 | 1)
    }

    /// LOOKUP (RFC 1813 §3.3.3): `name` in directory `dir`.
    pub fn lookup(&self, c: &Cred, dir: &Obj, name: &[u8]) -> Result<Obj, Stat> {
        if dir.ftype() != ftype::DIR {
            return Err(Stat::NotDir);
        }
        let n = check_name(name)?;
        Self::need(c, &dir.st, 1)?;
        let rel = if name == b"." {
            dir.path.clone()
        } else if name == b".." {
            dir.path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            dir.path.join(n)
        };
        let o = self.open_obj(&rel)?;
        self.remember(&o)?;
        Ok(o)
    }

    /// The buffers READ results of [`POOLED_READ_MIN`] octets or more are read into and
    /// RDMA-Written from ([`BulkPool`]: no zeroing pass, no fresh pages, no allocation per
    /// call).
    pub fn read_pool(&self) -> &BulkPool {
        &self.read_pool
    }

    /// READLINK (RFC 1813 §3.3.5): the target, never resolved by the server.
    pub fn readlink(&self, o: &Obj) -> Result<Vec<u8>, Stat> {
        if o.ftype() != ftype::LNK {
            return Err(Stat::Inval);
        }
        let t = rfs::readlinkat(&o.fd, "", Vec::new())?;
        Ok(t.into_bytes())
    }

    /// READ (RFC 1813 §3.3.6): up to `count` bytes at `offset`, and whether that reached EOF.
    pub fn read(
        &self,
        c: &Cred,
        o: &Obj,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), Stat> {
        let mut buf = Vec::new();
        let (got, eof) = self.read_with(c, o, offset, count, |want| {
            buf.resize(want, 0);
            &mut buf[..]
        })?;
        // Fewer when the file ended sooner than its size said (it shrank meanwhile).
        buf.truncate(got);
        Ok((buf, eof))
    }

    /// READ into the memory `buf_for` gives for the number of bytes wanted (at most `count`
    /// and [`MAX_IO`]; no more than it gives are read): the bytes read (fewer at the end of the
    /// file), and whether that reached EOF. Only the bytes read are written.
    pub fn read_with<'b>(
        &self,
        c: &Cred,
        o: &Obj,
        offset: u64,
        count: u32,
        buf_for: impl FnOnce(usize) -> &'b mut [u8],
    ) -> Result<(usize, bool), Stat> {
        match o.ftype() {
            ftype::REG => {}
            ftype::DIR => return Err(Stat::IsDir),
            _ => return Err(Stat::Inval),
        }
        if c.uid != o.st.st_uid {
            Self::need(c, &o.st, 4)?;
        }
        // Opened for reading by `resolve_for_read`: its size is the one fstat just gave.
        let opened;
        let (f, size): (&OwnedFd, u64) = if o.readable {
            (&o.fd, o.st.st_size as u64)
        } else {
            opened = self.open_rel(&o.path, OFlags::RDONLY, Mode::empty())?;
            let size = rfs::fstat(&opened)?.st_size as u64;
            (&opened, size)
        };
        let want = (count.min(MAX_IO) as u64).min(size.saturating_sub(offset)) as usize;
        let buf = buf_for(want);
        let want = want.min(buf.len());
        let mut got = 0;
        while got < want {
            match rustix::io::pread(f, &mut buf[got..want], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let eof = offset.saturating_add(got as u64) >= size;
        Ok((got, eof))
    }

    /// WRITE (RFC 1813 §3.3.7): `data` at `offset`, made as stable as `stable` asks; returns
    /// the level achieved and the file's wcc.
    pub fn write(
        &self,
        c: &Cred,
        o: &Obj,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<(StableHow, Wcc), Stat> {
        if self.read_only {
            return Err(Stat::RoFs);
        }
        match o.ftype() {
            ftype::REG => {}
            ftype::DIR => return Err(Stat::IsDir),
            _ => return Err(Stat::Inval),
        }
        if c.uid != o.st.st_uid {
            Self::need(c, &o.st, 2)?;
        }
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Stat::FBig);
        }
        let f = File::from(self.open_rel(&o.path, OFlags::WRONLY, Mode::empty())?);
        f.write_all_at(data, offset)?;
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => f.sync_data()?,
            StableHow::FileSync => f.sync_all()?,
        }
        Ok((stable, self.wcc(&o.st, o)))
    }

    /// COMMIT (RFC 1813 §3.3.21): flush the whole file (offset and count are advisory).
    pub fn commit(&self, o: &Obj) -> Result<Wcc, Stat> {
        if o.ftype() != ftype::REG {
            return Err(Stat::Inval);
        }
        let f = File::from(self.open_rel(&o.path, OFlags::RDONLY, Mode::empty())?);
        f.sync_all()?;
        Ok(self.wcc(&o.st, o))
    }

    /// SETATTR (RFC 1813 §3.3.2). `guard`: the ctime the client expects (else NOT_SYNC).
    pub fn setattr(
        &self,
        c: &Cred,
        o: &Obj,
        s: &Sattr3,
        guard: Option<NfsTime>,
    ) -> Result<Wcc, Stat> {
        if self.read_only {
            return Err(Stat::RoFs);
        }
        if let Some(g) = guard {
            if self.fattr(&o.st).ctime != g {
                return Err(Stat::NotSync);
            }
        }
        let owner = c.uid == 0 || c.uid == o.st.st_uid;
        // chmod / chown / explicit times: owner (or root) only; chgrp to a group of the owner.
        let explicit_times =
            matches!(s.atime, SetTime::Client(_)) || matches!(s.mtime, SetTime::Client(_));
        if (s.mode.is_some() || explicit_times) && !owner {
            return Err(Stat::Perm);
        }
        let chown = s.uid.is_some_and(|u| u != o.st.st_uid);
        let chgrp = s
            .gid
            .is_some_and(|g| g != o.st.st_gid && !(owner && c.in_group(g)));
        if c.uid != 0 && (chown || chgrp) {
            return Err(Stat::Perm);
        }
        let is_lnk = o.ftype() == ftype::LNK;
        if s.uid.is_some() || s.gid.is_some() {
            rfs::chownat(
                &o.fd,
                "",
                s.uid.map(rfs::Uid::from_raw),
                s.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        let times = s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange;
        if is_lnk {
            if s.mode.is_some() || s.size.is_some() || times {
                return Err(Stat::NotSupp);
            }
            return Ok(self.wcc(&o.st, o));
        }
        if s.mode.is_none() && s.size.is_none() && !times {
            return Ok(self.wcc(&o.st, o));
        }
        if !matches!(o.ftype(), ftype::REG | ftype::DIR) {
            // Devices, FIFOs and sockets are never opened (an open could block or act).
            return Err(Stat::NotSupp);
        }
        let fd = if s.size.is_some() {
            if o.ftype() != ftype::REG {
                return Err(Stat::IsDir);
            }
            if !owner {
                Self::need(c, &o.st, 2)?;
            }
            self.open_rel(&o.path, OFlags::WRONLY, Mode::empty())?
        } else {
            self.open_rel(&o.path, OFlags::RDONLY, Mode::empty())?
        };
        if let Some(m) = s.mode {
            rfs::fchmod(&fd, Mode::from_raw_mode(m & 0o7777))?;
        }
        if let Some(sz) = s.size {
            rfs::ftruncate(&fd, sz)?;
        }
        if times {
            if !owner && (s.atime != SetTime::Server || s.mtime != SetTime::Server) {
                return Err(Stat::Perm);
            }
            rfs::futimens(
                &fd,
                &Timestamps {
                    last_access: ts(s.atime),
                    last_modification: ts(s.mtime),
                },
            )?;
        }
        Ok(self.wcc(&o.st, o))
    }

    fn dirfd(&self, dir: &Obj) -> Result<OwnedFd, Stat> {
        self.open_rel(&dir.path, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
    }

    fn new_child(&self, c: &Cred, dir: &Obj, name: &OsStr, is_link: bool) -> Result<Obj, Stat> {
        let o = self.open_obj(&dir.path.join(name))?;
        // New objects belong to the caller (the server itself usually runs as root).
        let _ = rfs::chownat(
            &o.fd,
            "",
            Some(rfs::Uid::from_raw(c.uid)),
            Some(rfs::Gid::from_raw(c.gid)),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        );
        let _ = is_link;
        let o = self.open_obj(&o.path)?;
        self.remember(&o)?;
        Ok(o)
    }

    fn dir_wcc(&self, dir: &Obj) -> Wcc {
        self.wcc(&dir.st, dir)
    }

    /// CREATE (RFC 1813 §3.3.8). `how`: UNCHECKED (0), GUARDED (1) with attributes, or
    /// EXCLUSIVE (2) with a verifier, stored in the new file's atime/mtime so a retransmitted
    /// EXCLUSIVE create succeeds again.
    pub fn create(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        how: u32,
        attrs: &Sattr3,
        verf: [u8; 8],
    ) -> Result<DirOpResult, Stat> {
        self.need_dir_change(c, dir)?;
        let n = check_new_name(name)?;
        let rel = dir.path.join(n);
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o644) & 0o7777);
        let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::EXCL;
        let fd = match self.open_rel(&rel, flags, mode) {
            Ok(fd) => fd,
            Err(Stat::Exist) if how == 0 => {
                // UNCHECKED on an existing file (§3.3.8): no new file, so no new owner or mode;
                // only a size in the attributes applies, with the caller's write permission.
                let o = self.open_obj(&rel)?;
                if o.ftype() != ftype::REG {
                    return Err(Stat::Exist);
                }
                if let Some(sz) = attrs.size {
                    if c.uid != o.st.st_uid {
                        Self::need(c, &o.st, 2)?;
                    }
                    let f = self.open_rel(&rel, OFlags::WRONLY, Mode::empty())?;
                    rfs::ftruncate(&f, sz)?;
                }
                let o = self.open_obj(&rel)?;
                self.remember(&o)?;
                return Ok((Some(o), self.dir_wcc(dir)));
            }
            Err(Stat::Exist) if how == 2 => {
                // Retransmission of an EXCLUSIVE create: same verifier in the times.
                let o = self.open_obj(&rel)?;
                let v = self.fattr(&o.st);
                let stored =
                    [v.atime.seconds.to_be_bytes(), v.mtime.seconds.to_be_bytes()].concat();
                if o.ftype() == ftype::REG && stored == verf {
                    self.remember(&o)?;
                    return Ok((Some(o), self.dir_wcc(dir)));
                }
                return Err(Stat::Exist);
            }
            Err(e) => return Err(e),
        };
        // The mode asked for, not narrowed by the server's umask (the client applied its own).
        if attrs.mode.is_some() {
            rfs::fchmod(&fd, mode)?;
        }
        if how == 2 {
            let t = |b: &[u8]| Timespec {
                tv_sec: i64::from(u32::from_be_bytes(b.try_into().unwrap_or([0; 4]))),
                tv_nsec: 0,
            };
            rfs::futimens(
                &fd,
                &Timestamps {
                    last_access: t(&verf[..4]),
                    last_modification: t(&verf[4..]),
                },
            )?;
        } else if let Some(sz) = attrs.size {
            rfs::ftruncate(&fd, sz)?;
        }
        drop(fd);
        let o = self.new_child(c, dir, n, false)?;
        Ok((Some(o), self.dir_wcc(dir)))
    }

    /// MKDIR (RFC 1813 §3.3.9).
    pub fn mkdir(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        attrs: &Sattr3,
    ) -> Result<DirOpResult, Stat> {
        self.need_dir_change(c, dir)?;
        let n = check_new_name(name)?;
        let d = self.dirfd(dir)?;
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o755) & 0o7777);
        rfs::mkdirat(&d, n, mode)?;
        if attrs.mode.is_some() {
            // Not narrowed by the server's umask.
            rfs::chmodat(&d, n, mode, AtFlags::empty())?;
        }
        let o = self.new_child(c, dir, n, false)?;
        Ok((Some(o), self.dir_wcc(dir)))
    }

    /// SYMLINK (RFC 1813 §3.3.10): the target is stored verbatim and never resolved here.
    pub fn symlink(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        target: &[u8],
    ) -> Result<DirOpResult, Stat> {
        self.need_dir_change(c, dir)?;
        let n = check_new_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Stat::Inval);
        }
        let d = self.dirfd(dir)?;
        rfs::symlinkat(OsStr::from_bytes(target), &d, n)?;
        let o = self.new_child(c, dir, n, true)?;
        Ok((Some(o), self.dir_wcc(dir)))
    }

    /// REMOVE (RFC 1813 §3.3.12) or RMDIR (§3.3.13).
    pub fn remove(&self, c: &Cred, dir: &Obj, name: &[u8], rmdir: bool) -> Result<Wcc, Stat> {
        self.need_dir_change(c, dir)?;
        if name == b"." {
            return Err(Stat::Inval);
        }
        if name == b".." {
            return Err(Stat::NotEmpty);
        }
        let n = check_name(name)?;
        let d = self.dirfd(dir)?;
        let st = rfs::statat(&d, n, AtFlags::SYMLINK_NOFOLLOW)?;
        if !rmdir && ftype_of(st.st_mode) == ftype::DIR {
            return Err(Stat::IsDir);
        }
        if rmdir && ftype_of(st.st_mode) != ftype::DIR {
            return Err(Stat::NotDir);
        }
        // Sticky directory: only the owner of the entry or of the directory may remove it.
        if dir.st.st_mode & 0o1000 != 0
            && c.uid != 0
            && c.uid != st.st_uid
            && c.uid != dir.st.st_uid
        {
            return Err(Stat::Acces);
        }
        rfs::unlinkat(
            &d,
            n,
            if rmdir {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            },
        )?;
        self.forget_path(&dir.path.join(n));
        Ok(self.dir_wcc(dir))
    }

    /// RENAME (RFC 1813 §3.3.14): `from` in `fdir` to `to` in `tdir`.
    pub fn rename(
        &self,
        c: &Cred,
        fdir: &Obj,
        from: &[u8],
        tdir: &Obj,
        to: &[u8],
    ) -> Result<(Wcc, Wcc), Stat> {
        self.need_dir_change(c, fdir)?;
        self.need_dir_change(c, tdir)?;
        let f = check_new_name(from).map_err(|_| Stat::Inval)?;
        let t = check_new_name(to).map_err(|_| Stat::Inval)?;
        let fd = self.dirfd(fdir)?;
        let td = self.dirfd(tdir)?;
        let old = fdir.path.join(f);
        let new = tdir.path.join(t);
        if new.starts_with(&old) && new != old {
            return Err(Stat::Inval);
        }
        rfs::renameat(&fd, f, &td, t)?;
        let mut tab = self.table();
        self.retain_objects(&mut tab, |e| {
            !e.path.starts_with(&new) || e.path.starts_with(&old)
        });
        for e in tab.values_mut() {
            if let Ok(rest) = e.path.strip_prefix(&old) {
                e.path = if rest.as_os_str().is_empty() {
                    new.clone()
                } else {
                    new.join(rest)
                };
            }
        }
        drop(tab);
        Ok((self.dir_wcc(fdir), self.dir_wcc(tdir)))
    }

    /// LINK (RFC 1813 §3.3.15): a hard link to `file` as `name` in `dir`. Linked through the
    /// file's own descriptor (`AT_EMPTY_PATH`, which needs CAP_DAC_READ_SEARCH), never by path.
    pub fn link(&self, c: &Cred, file: &Obj, dir: &Obj, name: &[u8]) -> Result<Wcc, Stat> {
        self.need_dir_change(c, dir)?;
        if file.ftype() == ftype::DIR {
            return Err(Stat::IsDir);
        }
        let n = check_new_name(name)?;
        let d = self.dirfd(dir)?;
        rfs::linkat(&file.fd, "", &d, n, AtFlags::EMPTY_PATH)?;
        Ok(self.dir_wcc(dir))
    }

    /// Directory entries from `cookie` on (READDIR §3.3.16, READDIRPLUS §3.3.17): calls `f`
    /// with (fileid, name, next cookie) until it returns false; returns whether the end was
    /// reached. Cookies are the directory stream offsets (`d_off`); `.` and `..` are included.
    pub fn readdir(
        &self,
        c: &Cred,
        dir: &Obj,
        cookie: u64,
        mut f: impl FnMut(u64, &[u8], u64) -> bool,
    ) -> Result<bool, Stat> {
        if dir.ftype() != ftype::DIR {
            return Err(Stat::NotDir);
        }
        Self::need(c, &dir.st, 4)?;
        let fd = self.open_rel(&dir.path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
        let mut d = rfs::Dir::new(fd)?;
        if cookie != 0 {
            d.seek(cookie as i64).map_err(|_| Stat::BadCookie)?;
        }
        loop {
            match d.read() {
                None => return Ok(true),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(ent)) => {
                    let name = ent.file_name().to_bytes();
                    let ino = if name == b".." && dir.path.as_os_str().is_empty() {
                        dir.st.st_ino
                    } else {
                        ent.ino()
                    };
                    if !f(ino, name, ent.offset() as u64) {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// ACCESS (RFC 1813 §3.3.4): which of the asked bits `c` has on `o`.
    pub fn access(&self, c: &Cred, o: &Obj, asked: u32) -> u32 {
        self.access_st(c, &o.st, asked)
    }

    /// [`Export::access`] of an object with attributes `st`.
    pub fn access_st(&self, c: &Cred, st: &rfs::Stat, asked: u32) -> u32 {
        use super::xdr::access as a;
        let is_dir = ftype_of(st.st_mode) == ftype::DIR;
        let mut ok = 0;
        if Self::permits(c, st, 4) {
            ok |= a::READ;
        }
        if Self::permits(c, st, 2) && !self.read_only {
            ok |= a::MODIFY | a::EXTEND;
            if is_dir {
                ok |= a::DELETE;
            }
        }
        if Self::permits(c, st, 1) {
            ok |= if is_dir { a::LOOKUP } else { a::EXECUTE };
        }
        ok & asked
    }

    /// FSSTAT (RFC 1813 §3.3.18): `(tbytes, fbytes, abytes, tfiles, ffiles, afiles)`.
    pub fn fsstat(&self) -> Result<[u64; 6], Stat> {
        let v = rfs::fstatvfs(&self.root)?;
        let fr = v.f_frsize.max(1);
        Ok([
            v.f_blocks.saturating_mul(fr),
            v.f_bfree.saturating_mul(fr),
            v.f_bavail.saturating_mul(fr),
            v.f_files,
            v.f_ffree,
            v.f_favail,
        ])
    }

    /// The handle of `o` is also what READDIRPLUS needs: look up a directory entry by name
    /// without the permission check already done for the directory listing.
    pub fn entry(&self, dir: &Obj, name: &[u8]) -> Option<Obj> {
        let rel = match name {
            b"." => dir.path.clone(),
            b".." => dir.path.parent().map(Path::to_path_buf).unwrap_or_default(),
            n => {
                let n = check_name(n).ok()?;
                dir.path.join(n)
            }
        };
        let o = self.open_obj(&rel).ok()?;
        self.remember(&o).ok()?;
        Some(o)
    }

    /// The current time as the server sets it (for tests).
    pub fn now(&self) -> NfsTime {
        let t = now();
        NfsTime::from_host(t.tv_sec, t.tv_nsec as u32)
    }
}
