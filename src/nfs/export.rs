//! The exported directory: file handles, the caller's credentials, and the file-system
//! operations behind the NFSv3 procedures.
//!
//! **File handles** (RFC 1813 §2.4 `nfs_fh3`, at most 64 bytes) carry the kernel's own handle
//! of the object (`name_to_handle_at(2)`, as knfsd and nfs-ganesha's VFS layer do):
//! `"DPW2" | export id u32 | NFS type u8 | handle_type i32 | f_handle | MAC[16]`. The MAC is
//! the first 16 bytes of keyed BLAKE3 over the export root's own kernel handle and everything
//! before it, with a 32-byte key kept in the server's state file ([`HandleKey`]). A handle is
//! opened with `open_by_handle_at(2)` on the export's mount: no path walk per call, no depth
//! limit, and it stays valid across server restarts and renames; NFS3ERR_STALE only when the
//! object is gone. Wrong length, tag or MAC (and so a handle of another export directory, whose
//! root handle the MAC covers): NFS3ERR_BADHANDLE.
//!
//! What the key protects: `open_by_handle_at` opens any inode of the file system that a
//! handle names, wherever it is, so a handle must be one this server gave out for an object it
//! reached beneath the export (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` from a directory of the export). Whoever reads the
//! key can forge handles to every file of the exported file system. As with knfsd's
//! `no_subtree_check`, an object a local user moves out of the export stays reachable through
//! the handles given out for it before.
//!
//! **Credentials**: each call's file-system work runs on its thread with the caller's AUTH_SYS
//! uid, gid and groups as file-system credentials, after the export's squashing
//! ([`super::exports`]; [`super::sys::CallerCreds`]), so the kernel applies its own rules:
//! mode bits, ACLs, sticky directories, set-id clearing on write and chmod, who may chown,
//! CAP_MKNOD for device nodes. As knfsd, READ and WRITE are allowed to the file's owner
//! whatever its mode bits (a file created read-only is still written by the client that
//! created it) and READ to whoever may execute the file.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps};
use rustix::io::Errno;

use super::exports::ClientList;
use super::sys::{self, CallerCreds, KernelHandle};
use super::xdr::{ftype, Fattr3, NfsTime, Sattr3, SetTime, StableHow, Wcc};
use super::Stat;
use crate::rpc::program::BulkPool;
use crate::wire::oncrpc::{Auth, Gids};

const FH_TAG: &[u8; 4] = b"DPW2";
/// Tag, export id, NFS type, kernel handle type.
const FH_HEAD: usize = 4 + 4 + 1 + 4;
const FH_MAC: usize = 16;
/// `NFS3_FHSIZE` (RFC 1813 §2.4).
pub const FH_MAX: usize = 64;
/// The longest kernel handle that fits in an NFSv3 handle with our header and MAC.
pub const MAX_KERNEL_HANDLE: usize = FH_MAX - FH_HEAD - FH_MAC;
/// Largest READ / WRITE count (FSINFO rtmax / wtmax): 1 MiB, one RDMA chunk.
pub const MAX_IO: u32 = 1 << 20;

/// The key of the handles' MAC, kept across restarts in the server's state file.
#[derive(Clone)]
pub struct HandleKey([u8; 32]);

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

const STATE_HEADER: &str = "# dpwarp nfs-server state (docs/nfs.md \"File handles\"). Whoever \
reads this key can forge NFS file handles to any file of the exported file systems: keep it \
0600, owned by root.\n";

impl HandleKey {
    /// A fresh random key (a server whose handles need not outlive it: tests, probes).
    pub fn random() -> HandleKey {
        let mut k = [0u8; 32];
        rand::fill(&mut k);
        HandleKey(k)
    }

    /// The key in the state file `path`, made (mode 0600, its directory 0700 if missing) with
    /// a fresh random key if the file does not exist. Refused: a file others may read or
    /// write, or one that does not hold a key.
    pub fn load_or_create(path: &Path) -> Result<HandleKey, String> {
        let shown = path.display();
        match std::fs::metadata(path) {
            Ok(m) => {
                if m.permissions().mode() & 0o077 != 0 {
                    return Err(format!(
                        "state file {shown}: mode {:o} lets others read or change the handle \
                         key; chmod 600 it",
                        m.permissions().mode() & 0o7777
                    ));
                }
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("state file {shown}: {e}"))?;
                Self::parse(&text).ok_or_else(|| {
                    format!("state file {shown}: no `key = \"<64 hex digits>\"` line")
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(|e| format!("state file directory {}: {e}", dir.display()))?;
                }
                let k = HandleKey::random();
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| format!("state file {shown}: {e}"))?;
                let hex: String = k.0.iter().map(|b| format!("{b:02x}")).collect();
                f.write_all(format!("{STATE_HEADER}key = \"{hex}\"\n").as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| format!("state file {shown}: {e}"))?;
                log::info!("nfs: new handle key in {shown}");
                Ok(k)
            }
            Err(e) => Err(format!("state file {shown}: {e}")),
        }
    }

    fn parse(text: &str) -> Option<HandleKey> {
        let line = text.lines().map(str::trim).find(|l| l.starts_with("key"))?;
        let v = line.split_once('=')?.1.trim().trim_matches('"');
        if v.len() != 64 {
            return None;
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(v.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(HandleKey(k))
    }
}

/// The caller of one call, as the export lets it act (RFC 5531 App. A credential, then
/// [`super::exports`] squashing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    /// The uid its file-system work runs as.
    pub uid: u32,
    /// The gid.
    pub gid: u32,
    /// Supplementary gids.
    pub gids: Gids,
    /// Its client entry allows changes (`rw`).
    pub rw: bool,
    /// No client entry matches it: every call but NULL is NFS3ERR_ACCES.
    pub denied: bool,
}

impl Cred {
    /// A caller with these ids and write access (a program calling [`Export`] directly).
    pub fn new(uid: u32, gid: u32, gids: Vec<u32>) -> Cred {
        Cred {
            uid,
            gid,
            gids: Gids::from_vec(gids),
            rw: true,
            denied: false,
        }
    }
}

/// An object of the export, resolved and open (`O_PATH`, or for reading).
pub struct Obj {
    /// A descriptor of it: `O_PATH`, or `O_RDONLY` from [`Export::resolve_for_read`].
    pub fd: Arc<OwnedFd>,
    /// Its attributes when resolved.
    pub st: rfs::Stat,
    kh: KernelHandle,
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

/// Objects whose handles were resolved lately, kept open: a call answered on the connection's
/// own thread ([`Export::stat_nowait`], [`Export::read_nowait`], [`Export::lookup_nowait`])
/// uses only these, since `open_by_handle_at` of an inode the kernel has evicted reads the
/// disk. Oldest first in `order`.
///
/// `verified` maps the wire handles whose MAC was checked once to their kept object, so the
/// calls after the first find it by the handle's octets instead of computing the keyed BLAKE3
/// again (after `fstat`, the largest cost of a GETATTR answered at once). Only octets that passed the check are ever inserted, and an entry goes with its object,
/// so a forged handle still has to pass [`Export::decode`].
///
/// Both maps hash with FxHash, not a keyed hash: their keys are octets no peer chooses (kernel
/// handles the file system made, and wire handles that carry our MAC), so no peer can make
/// them collide; every call answered at once looks both up.
#[derive(Default)]
struct OpenObjects {
    map: FxHashMap<KernelHandle, Entry>,
    order: VecDeque<KernelHandle>,
    verified: FxHashMap<Box<[u8]>, KernelHandle>,
}

struct Entry {
    kept: Kept,
    /// The wire handle in `verified` for this object, if any.
    fh: Option<Box<[u8]>>,
}

#[derive(Clone)]
struct Kept {
    path: Arc<OwnedFd>,
    /// Open for reading (regular files a READ resolved).
    read: Option<Arc<OwnedFd>>,
    /// Open for writing (regular files an UNSTABLE WRITE reached), until the client's COMMIT
    /// or the object's eviction: an UNSTABLE WRITE stream costs one `open_by_handle_at`, not
    /// one a call (knfsd's file cache does the same). Like any open writer it makes a local
    /// `execve` of the file fail with ETXTBSY meanwhile.
    write: Option<Arc<OwnedFd>>,
    /// The object's attributes as a call answered at once last took them
    /// ([`Export::set_attr_cache`]).
    attrs: Option<CachedAttrs>,
    /// Callers other than the owner the kernel let read it lately ([`ReadGrant`]).
    read_grants: Option<Arc<Vec<ReadGrant>>>,
}

/// A caller the kernel let read a kept file (`access(2)` with the caller's credentials, as
/// [`Export::may_read`] asks), and the state of the file it decided on: its mode, owner, group
/// and ctime. A change to any of what the decision depends on (mode bits, owner, group, an
/// ACL) sets the ctime, so a READ answered at once by the same caller while those four are
/// unchanged gets the same answer without taking on the caller's credentials (three
/// `set*id` calls there and three back, each making new kernel credentials). Read from a fresh
/// `fstat` (or attributes cached as [`Export::set_attr_cache`] allows).
#[derive(Clone, PartialEq, Eq)]
struct ReadGrant {
    file: FileAccessKey,
    uid: u32,
    gid: u32,
    gids: Gids,
}

/// What a permission decision on a file depends on, as `fstat` shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileAccessKey {
    mode: u32,
    uid: u32,
    gid: u32,
    ctime: (i64, i64),
}

impl FileAccessKey {
    fn of(st: &rfs::Stat) -> FileAccessKey {
        FileAccessKey {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// Callers a kept file remembers as allowed to read it at most (the latest first).
const READ_GRANTS: usize = 4;

/// Attributes taken by `fstat`, with when and at which change count of the export
/// ([`Export::set_attr_cache`]).
#[derive(Clone, Copy)]
struct CachedAttrs {
    st: rfs::Stat,
    /// Taken at or after this instant.
    at: std::time::Instant,
    /// [`Export::changes`] read before the `fstat`.
    changes: u64,
}

/// Counts a change the export makes when dropped, that is once the change is done, on every
/// path out of the procedure (errors too: a failed call may have changed something before it
/// failed).
struct Changing<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Objects [`OpenObjects`] keeps at most (each one to three descriptors): few beside the
/// default limit of 1024 open files.
const KEPT_OBJECTS: usize = 128;

impl OpenObjects {
    fn get(&self, kh: &KernelHandle) -> Option<Kept> {
        self.map.get(kh).map(|e| e.kept.clone())
    }

    /// The kept object whose wire handle `fh` was verified before.
    fn get_verified(&self, fh: &[u8]) -> Option<(&KernelHandle, &Kept)> {
        let kh = self.verified.get(fh)?;
        Some((kh, &self.map.get(kh)?.kept))
    }

    /// Remember that `fh` (its MAC checked) names the kept object `kh`.
    fn verify(&mut self, fh: &[u8], kh: &KernelHandle) {
        let Some(e) = self.map.get_mut(kh) else {
            return;
        };
        if let Some(old) = e.fh.replace(fh.into()) {
            self.verified.remove(&old);
        }
        self.verified.insert(fh.into(), kh.clone());
    }

    fn put(&mut self, kh: &KernelHandle, path: Option<&Arc<OwnedFd>>, read: Option<&Arc<OwnedFd>>) {
        if let Some(e) = self.map.get_mut(kh) {
            if let Some(r) = read {
                e.kept.read = Some(r.clone());
            }
            return;
        }
        let Some(path) = path.or(read) else {
            return;
        };
        self.map.insert(
            kh.clone(),
            Entry {
                kept: Kept {
                    path: path.clone(),
                    read: read.cloned(),
                    write: None,
                    attrs: None,
                    read_grants: None,
                },
                fh: None,
            },
        );
        self.order.push_back(kh.clone());
        while self.order.len() > KEPT_OBJECTS {
            if let Some(old) = self.order.pop_front() {
                self.forget(&old);
            }
        }
    }

    /// Keep `w`, open for writing, with the kept object `kh` (nothing if it is not kept).
    fn put_write(&mut self, kh: &KernelHandle, w: &Arc<OwnedFd>) {
        if let Some(e) = self.map.get_mut(kh) {
            e.kept.write = Some(w.clone());
        }
    }

    /// Give up the descriptor open for writing kept with `kh`, if any.
    fn take_write(&mut self, kh: &KernelHandle) -> Option<Arc<OwnedFd>> {
        self.map.get_mut(kh)?.kept.write.take()
    }

    fn forget(&mut self, kh: &KernelHandle) -> bool {
        match self.map.remove(kh) {
            Some(e) => {
                if let Some(fh) = e.fh {
                    self.verified.remove(&fh);
                }
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, kh: &KernelHandle) {
        if self.forget(kh) {
            self.order.retain(|k| k != kh);
        }
    }
}

/// An exported directory.
pub struct Export {
    root: Arc<OwnedFd>,
    /// The root opened for reading: `open_by_handle_at` wants a descriptor of the mount that
    /// is not `O_PATH`.
    mount_fd: OwnedFd,
    root_path: PathBuf,
    root_st: rfs::Stat,
    root_kh: KernelHandle,
    id: u32,
    key: HandleKey,
    verf: [u8; 8],
    clients: ClientList,
    /// The server's own file-system ids and groups, which a thread returns to after a call.
    server_ids: (u32, u32, Vec<u32>),
    /// The buffers large READs are read into ([`Export::read_pool`]).
    read_pool: BulkPool,
    open: Mutex<OpenObjects>,
    /// Handle MACs computed to check a handle ([`Export::handles_checked`]).
    macs_checked: std::sync::atomic::AtomicU64,
    /// READ permissions the kernel was asked for ([`Export::read_access_checks`]).
    read_checks: std::sync::atomic::AtomicU64,
    /// Changes made through the export so far (each procedure that may change an object
    /// counts one when it is done): attributes cached before the last one are not used.
    changes: std::sync::atomic::AtomicU64,
    /// How long cached attributes may be used ([`Export::set_attr_cache`]); zero: never.
    attr_cache: std::time::Duration,
}

/// READs asking this much or more are read into a buffer of [`Export::read_pool`]; smaller
/// ones into a `Vec` of their own (no pass worth sparing, and they mostly go inline).
pub const POOLED_READ_MIN: u32 = 32 * 1024;

/// Buffers of [`MAX_IO`] octets in the READ pool at most (this many MiB, made as needed):
/// READs in flight at once beyond it use buffers of their own.
const POOLED_READ_BUFFERS: usize = 64;

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

/// `/proc/self/fd/N` of a descriptor: the way to chmod what an `O_PATH` descriptor names on
/// kernels before `fchmodat2` (6.6), with the caller's credentials checked as for any path.
fn proc_path(fd: &impl AsFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
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

/// What a READDIRPLUS entry carries besides its name: attributes and handle.
pub type EntryPlus = (Fattr3, Vec<u8>);

impl Export {
    /// Export `dir` (a directory; not `/`) to `clients`, its handles under `key`. Draws the
    /// write verifier. Needs root (CAP_DAC_READ_SEARCH to open handles, CAP_SETUID and
    /// CAP_SETGID to take on callers' credentials), and a file system whose handles fit in
    /// NFSv3's 64 bytes.
    pub fn new(dir: &Path, key: HandleKey, clients: ClientList) -> Result<Export, String> {
        let shown = dir.display();
        let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("export {shown}: {e}"))?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "export {shown} is a symlink: export the directory it names ({})",
                std::fs::canonicalize(dir)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|e| e.to_string())
            ));
        }
        let root = rfs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| format!("export {shown}: {e}"))?;
        let root_st = rfs::fstat(&root).map_err(|e| format!("export {shown}: {e}"))?;
        let mount_fd = rfs::openat(
            &root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("export {shown}: {e}"))?;
        let slash = rfs::stat("/").map_err(|e| format!("/: {e}"))?;
        if (root_st.st_dev, root_st.st_ino) == (slash.st_dev, slash.st_ino) {
            return Err(
                "export /: refusing to export the whole host file system; export a directory"
                    .into(),
            );
        }
        let root_kh = sys::handle_of(&root).map_err(|e| {
            format!(
                "export {shown}: its file system gives no file handles (name_to_handle_at: {e})"
            )
        })?;
        if root_kh.bytes.len() > MAX_KERNEL_HANDLE {
            return Err(format!(
                "export {shown}: its file system's handles are {} bytes, more than the {} an \
                 NFSv3 handle has room for",
                root_kh.bytes.len(),
                MAX_KERNEL_HANDLE
            ));
        }
        sys::open_by_handle(&mount_fd, &root_kh, libc::O_PATH).map_err(|e| {
            format!(
                "export {shown}: open_by_handle_at: {e} (nfs-server needs root: \
                 CAP_DAC_READ_SEARCH, CAP_SETUID, CAP_SETGID)"
            )
        })?;
        let (fsuid, fsgid) = sys::current_fs_ids();
        let groups = rustix::process::getgroups()
            .map_err(|e| format!("getgroups: {e}"))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        let mut verf = [0u8; 8];
        rand::fill(&mut verf);
        let mut idh = blake3::Hasher::new_keyed(&key.0);
        idh.update(b"export id");
        idh.update(&root_kh.kind.to_be_bytes());
        idh.update(&root_kh.bytes);
        let id = u32::from_be_bytes(idh.finalize().as_bytes()[..4].try_into().unwrap_or([0; 4]));
        Ok(Export {
            root: Arc::new(root),
            mount_fd,
            root_path: dir.to_path_buf(),
            root_st,
            root_kh,
            id,
            key,
            verf,
            clients,
            server_ids: (fsuid, fsgid, groups),
            read_pool: BulkPool::new(MAX_IO as usize, POOLED_READ_BUFFERS),
            open: Mutex::new(OpenObjects::default()),
            macs_checked: Default::default(),
            read_checks: Default::default(),
            changes: Default::default(),
            attr_cache: std::time::Duration::ZERO,
        })
    }

    /// The exported host directory.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Who may use the export ([`super::exports`]).
    pub fn clients(&self) -> &ClientList {
        &self.clients
    }

    /// The caller of a call with credential `auth` from `peer`: squashed as its client entry
    /// says, or denied when no entry matches.
    pub fn caller(&self, auth: &Auth, peer: Option<std::net::SocketAddr>) -> Cred {
        match self.clients.rule_for(peer) {
            Some(r) => {
                let id = r.options.identity(auth);
                Cred {
                    uid: id.uid,
                    gid: id.gid,
                    gids: id.gids,
                    rw: r.options.rw,
                    denied: false,
                }
            }
            None => Cred {
                uid: super::exports::ANON_ID,
                gid: super::exports::ANON_ID,
                gids: Gids::new(),
                rw: false,
                denied: true,
            },
        }
    }

    /// The write verifier (RFC 1813 §3.3.7 `writeverf3`): random per server instance, so a
    /// client detects a restart that may have lost UNSTABLE data and sends it again.
    pub fn write_verf(&self) -> [u8; 8] {
        self.verf
    }

    /// Run the rest of a call on this thread as `c` (until the guard drops); nothing to do
    /// when `c` is the server itself.
    fn as_caller(&self, c: &Cred) -> Result<Option<CallerCreds>, Stat> {
        let (u, g, gs) = &self.server_ids;
        if c.uid == *u && c.gid == *g && c.gids[..] == gs[..] {
            return Ok(None);
        }
        CallerCreds::enter(c.uid, c.gid, &c.gids, &self.server_ids)
            .map(Some)
            .map_err(|e| {
                log::error!("nfs: cannot take on uid {} gid {}: {e}", c.uid, c.gid);
                Stat::ServerFault
            })
    }

    /// How many handles had their MAC computed to check them so far: once per handle of a
    /// kept object (a call answered at once finds it by the handle's octets after that), once
    /// per call on the pool.
    pub fn handles_checked(&self) -> u64 {
        self.macs_checked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times a READ by a caller other than the file's owner asked the kernel whether
    /// the caller may read (with the caller's credentials); a READ answered at once whose
    /// caller the kernel allowed before, the file's mode, owner, group and ctime unchanged
    /// since, does not ask again (a `ReadGrant`, private to this module).
    pub fn read_access_checks(&self) -> u64 {
        self.read_checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn open_objects(&self) -> std::sync::MutexGuard<'_, OpenObjects> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mac(&self, body: &[u8]) -> [u8; FH_MAC] {
        let mut h = blake3::Hasher::new_keyed(&self.key.0);
        h.update(&self.root_kh.kind.to_be_bytes());
        h.update(&(self.root_kh.bytes.len() as u32).to_be_bytes());
        h.update(&self.root_kh.bytes);
        h.update(body);
        let mut m = [0u8; FH_MAC];
        m.copy_from_slice(&h.finalize().as_bytes()[..FH_MAC]);
        m
    }

    fn handle_from(&self, ft: u32, kh: &KernelHandle) -> Vec<u8> {
        let mut v = Vec::with_capacity(FH_HEAD + kh.bytes.len() + FH_MAC);
        v.extend_from_slice(FH_TAG);
        v.extend_from_slice(&self.id.to_be_bytes());
        v.push(ft as u8);
        v.extend_from_slice(&kh.kind.to_be_bytes());
        v.extend_from_slice(&kh.bytes);
        let m = self.mac(&v);
        v.extend_from_slice(&m);
        v
    }

    /// The file handle of `o`.
    pub fn handle(&self, o: &Obj) -> Vec<u8> {
        self.handle_from(o.ftype(), &o.kh)
    }

    /// The root's handle (MOUNT MNT).
    pub fn root_handle(&self) -> Result<Vec<u8>, Stat> {
        Ok(self.handle_from(ftype::DIR, &self.root_kh))
    }

    fn root_obj(&self) -> Result<Obj, Stat> {
        Ok(Obj {
            fd: self.root.clone(),
            st: rfs::fstat(&self.root)?,
            kh: self.root_kh.clone(),
            readable: false,
        })
    }

    fn is_root(&self, st: &rfs::Stat) -> bool {
        (st.st_dev, st.st_ino) == (self.root_st.st_dev, self.root_st.st_ino)
    }

    /// `(NFS type, kernel handle)` of one of our handles: NFS3ERR_BADHANDLE if it is not one,
    /// NFS3ERR_STALE if its export id is not this export's (behind a valid MAC, which covers the
    /// root's handle, only a server with several exports could give such a handle out).
    fn decode(&self, fh: &[u8]) -> Result<(u32, KernelHandle), Stat> {
        if fh.len() < FH_HEAD + FH_MAC || fh.len() > FH_MAX || &fh[..4] != FH_TAG {
            return Err(Stat::BadHandle);
        }
        let (body, mac) = fh.split_at(fh.len() - FH_MAC);
        self.macs_checked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let m = self.mac(body);
        // Constant-time comparison of the MAC.
        if m.iter().zip(mac).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
            return Err(Stat::BadHandle);
        }
        let be32 =
            |r: std::ops::Range<usize>| u32::from_be_bytes(body[r].try_into().unwrap_or([0; 4]));
        if be32(4..8) != self.id {
            return Err(Stat::Stale);
        }
        Ok((
            u32::from(body[8]),
            KernelHandle {
                kind: be32(9..13) as i32,
                bytes: body[FH_HEAD..].to_vec(),
            },
        ))
    }

    /// An object opened from its kernel handle, checked to exist still (a removed object that
    /// some descriptor keeps alive has no link left).
    fn obj_from(&self, kh: KernelHandle, fd: Arc<OwnedFd>, readable: bool) -> Result<Obj, Stat> {
        let st = rfs::fstat(&fd)?;
        if st.st_nlink == 0 {
            self.open_objects().remove(&kh);
            return Err(Stat::Stale);
        }
        Ok(Obj {
            fd,
            st,
            kh,
            readable,
        })
    }

    /// Resolve a file handle (RFC 1813 §2.4) for caller `c`: NFS3ERR_ACCES for a denied
    /// caller, NFS3ERR_BADHANDLE if it is not one of ours, NFS3ERR_STALE if its object is gone.
    pub fn resolve(&self, c: &Cred, fh: &[u8]) -> Result<Obj, Stat> {
        self.resolve_as(c, fh, false)
    }

    /// [`Export::resolve`] for a READ: a regular file is opened for reading at once (and kept
    /// open for the READs after it).
    pub fn resolve_for_read(&self, c: &Cred, fh: &[u8]) -> Result<Obj, Stat> {
        self.resolve_as(c, fh, true)
    }

    fn resolve_as(&self, c: &Cred, fh: &[u8], read: bool) -> Result<Obj, Stat> {
        if c.denied {
            return Err(Stat::Acces);
        }
        let (ft, kh) = self.decode(fh)?;
        let read = read && ft == ftype::REG;
        let kept = self.open_objects().get(&kh);
        if let Some(k) = kept {
            match (read, k.read) {
                (false, _) => return self.obj_from(kh, k.path, false),
                (true, Some(r)) => return self.obj_from(kh, r, true),
                (true, None) => {}
            }
        }
        let flags = if read {
            libc::O_RDONLY | libc::O_NONBLOCK
        } else {
            libc::O_PATH
        };
        let fd = match sys::open_by_handle(&self.mount_fd, &kh, flags) {
            Ok(fd) => Arc::new(fd),
            // The object is gone (ESTALE), or the handle names nothing of this file system.
            Err(Errno::STALE | Errno::NOENT | Errno::INVAL | Errno::LOOP) => {
                return Err(Stat::Stale)
            }
            Err(e) => return Err(e.into()),
        };
        let o = self.obj_from(kh, fd, read)?;
        if o.ftype() != ft {
            return Err(Stat::Stale);
        }
        let fd = Some(&o.fd);
        if read {
            self.open_objects().put(&o.kh, None, fd);
        } else {
            self.open_objects().put(&o.kh, fd, None);
        }
        Ok(o)
    }

    /// The kept object a handle names, without waiting (for the connection's own thread):
    /// `None` for a handle that is not ours or not kept open, a denied caller, or while a
    /// handler holds the table.
    fn kept_nowait(&self, c: &Cred, fh: &[u8]) -> Option<(KernelHandle, Kept)> {
        self.kept_nowait_with(c, fh, |kh, k| (kh.clone(), k.clone()))
    }

    /// [`Export::kept_nowait`], taking from the kept object only what `take` takes (a call
    /// answered at once that needs one descriptor copies no handle and no other descriptor).
    fn kept_nowait_with<T>(
        &self,
        c: &Cred,
        fh: &[u8],
        take: impl FnOnce(&KernelHandle, &Kept) -> T,
    ) -> Option<T> {
        if c.denied {
            return None;
        }
        {
            let t = self.open.try_lock().ok()?;
            if let Some((kh, k)) = t.get_verified(fh) {
                return Some(take(kh, k));
            }
        }
        let (_, kh) = self.decode(fh).ok()?;
        let mut t = self.open.try_lock().ok()?;
        let k = t.map.get(&kh)?.kept.clone();
        t.verify(fh, &kh);
        Some(take(&kh, &k))
    }

    /// An object of the export from a fresh descriptor `fd` (its kernel handle taken).
    fn obj_of_fd(&self, fd: OwnedFd) -> Result<Obj, Stat> {
        let kh = sys::handle_of(&fd)?;
        if kh.bytes.len() > MAX_KERNEL_HANDLE {
            log::warn!(
                "nfs: an object's kernel handle is {} bytes, too long for NFSv3",
                kh.bytes.len()
            );
            return Err(Stat::ServerFault);
        }
        let st = rfs::fstat(&fd)?;
        Ok(Obj {
            fd: Arc::new(fd),
            st,
            kh,
            readable: false,
        })
    }

    /// `name` in `dir`, opened `O_PATH` beneath it (never following a symlink, never into
    /// another mount), with the credentials in force; `resolve` adds flags.
    fn open_child(&self, dir: &Obj, name: &OsStr, extra: ResolveFlags) -> Result<Obj, Stat> {
        let how = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::openat2(&*dir.fd, name, how, Mode::empty(), resolve_flags() | extra) {
            Err(Errno::NOSYS)
                if extra.is_empty()
                    && name != "."
                    && name != ".."
                    && !name.as_bytes().contains(&b'/') =>
            {
                // No openat2 (Linux before 5.6, a container's seccomp filter, valgrind): one
                // name, not followed if a symlink, stays beneath `dir` as RESOLVE_BENEATH and
                // RESOLVE_NO_SYMLINKS ask; RESOLVE_NO_XDEV is checked after, by mount id.
                let fd = rfs::openat(&*dir.fd, name, how, Mode::empty())?;
                let mnt = |fd: &OwnedFd| {
                    rfs::statx(fd, "", AtFlags::EMPTY_PATH, rfs::StatxFlags::MNT_ID)
                        .map(|x| x.stx_mnt_id)
                };
                if mnt(&fd)? != mnt(&dir.fd)? {
                    return Err(Errno::XDEV.into());
                }
                fd
            }
            r => r?,
        };
        self.obj_of_fd(fd)
    }

    /// Remember `o` as lately resolved.
    fn keep(&self, o: &Obj) {
        self.open_objects().put(&o.kh, Some(&o.fd), None);
    }

    /// LOOKUP (RFC 1813 §3.3.3) without waiting, for the connection's own thread: `name` in
    /// the directory `dir_fh` names, when the directory is kept open and the name resolves
    /// from the kernel's lookup cache alone (`RESOLVE_CACHED`, Linux 5.12) with the caller's
    /// credentials; then the object and the directory. `None` otherwise (or on any error),
    /// with nothing changed: [`Export::lookup`] then answers on a thread that may wait.
    pub fn lookup_nowait(&self, c: &Cred, dir_fh: &[u8], name: &[u8]) -> Option<(Obj, Obj)> {
        if name == b"." || name == b".." {
            return None;
        }
        let n = check_name(name).ok()?;
        let (kh, k) = self.kept_nowait(c, dir_fh)?;
        let dir = Obj {
            st: rfs::fstat(&k.path).ok().filter(|st| st.st_nlink > 0)?,
            fd: k.path,
            kh,
            readable: false,
        };
        if dir.ftype() != ftype::DIR {
            return None;
        }
        let o = {
            let _as = self.as_caller(c).ok()?;
            self.open_child(&dir, n, ResolveFlags::CACHED).ok()?
        };
        self.open.try_lock().ok()?.put(&o.kh, Some(&o.fd), None);
        Some((o, dir))
    }

    /// The attributes of the object a handle names, without waiting (GETATTR, ACCESS on the
    /// connection's own thread): only an object kept open; `None` otherwise (the call then
    /// goes to a thread that may wait, with the same outcome or the error).
    pub fn stat_nowait(&self, c: &Cred, fh: &[u8]) -> Option<rfs::Stat> {
        // Under the table's lock only the descriptor is taken, and the kernel handle only
        // when the attributes will be cached under it.
        let st = match self.kept_nowait_with(c, fh, |kh, k| {
            self.fresh_attrs(k.attrs.as_ref())
                .map_err(|when| (when.map(|w| (kh.clone(), w)), k.path.clone()))
        })? {
            Ok(st) => st,
            Err((cache, path)) => {
                self.take_attrs(&path, cache.as_ref().map(|(kh, when)| (kh, *when)))?
            }
        };
        (st.st_nlink > 0).then_some(st)
    }

    /// How long the attributes of a kept object, taken for a call answered at once, may be
    /// used again for the next such call (GETATTR, ACCESS, READ) when nothing was changed
    /// through the export meanwhile (default zero: an `fstat` for every call, as knfsd does).
    /// Every procedure that may change an object (SETATTR, WRITE, CREATE,
    /// MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, COMMIT) makes every cached entry
    /// stale once it is done, before its reply goes, so a client sees its own changes and
    /// every other client's at once. What is not seen for up to this long: changes made
    /// beside the export (a local process, another server on the same directory), and the
    /// access time the export's own READs move; a file removed beside the export is still
    /// answered for meanwhile. For an export only the server changes (nfs-ganesha's attribute
    /// cache, `Attr_Expiration_Time`, keeps them 60 s by default); a hot file's GETATTRs from
    /// many clients then cost one `fstat` a period instead of one a call, and a millisecond
    /// is enough for that.
    pub fn set_attr_cache(&mut self, keep: std::time::Duration) {
        self.attr_cache = keep;
    }

    /// Counts one change through the export when the guard drops ([`Export::set_attr_cache`]).
    fn changing(&self) -> Changing<'_> {
        Changing(&self.changes)
    }

    /// The cached attributes `a` if they may be used now ([`Export::set_attr_cache`]); else
    /// the change count and instant that fresh ones, taken after this, are valid under (`None`
    /// with the cache off).
    fn fresh_attrs(
        &self,
        a: Option<&CachedAttrs>,
    ) -> Result<rfs::Stat, Option<(u64, std::time::Instant)>> {
        if self.attr_cache.is_zero() {
            // Off: nothing cached, no clock read.
            return Err(None);
        }
        let changes = self.changes.load(std::sync::atomic::Ordering::Acquire);
        let now = std::time::Instant::now();
        match a {
            Some(a)
                if a.changes == changes
                    && now.saturating_duration_since(a.at) < self.attr_cache =>
            {
                Ok(a.st)
            }
            _ => Err(Some((changes, now))),
        }
    }

    /// `fstat` of a kept object through `fd`; with `cache`, kept as that object's (its kernel
    /// handle, and the change count and instant from [`Export::fresh_attrs`], read before
    /// the `fstat`: a change counted after it makes the entry stale, even one the `fstat`
    /// already saw).
    fn take_attrs(
        &self,
        fd: &OwnedFd,
        cache: Option<(&KernelHandle, (u64, std::time::Instant))>,
    ) -> Option<rfs::Stat> {
        let st = rfs::fstat(fd).ok()?;
        if let Some((kh, (changes, at))) = cache {
            if let Ok(mut t) = self.open.try_lock() {
                if let Some(e) = t.map.get_mut(kh) {
                    e.kept.attrs = Some(CachedAttrs { st, at, changes });
                }
            }
        }
        Some(st)
    }

    /// The attributes of the kept object `kh` (its `cached` ones when they may be used, else
    /// by `fstat` of `fd`, cached in turn).
    fn kept_attrs(
        &self,
        kh: &KernelHandle,
        cached: Option<&CachedAttrs>,
        fd: &OwnedFd,
    ) -> Option<rfs::Stat> {
        match self.fresh_attrs(cached) {
            Ok(st) => Some(st),
            Err(when) => self.take_attrs(fd, when.map(|w| (kh, w))),
        }
    }

    /// ACCESS without waiting: [`Export::access`] of a kept object, and its attributes.
    pub fn access_nowait(&self, c: &Cred, fh: &[u8], asked: u32) -> Option<(u32, rfs::Stat)> {
        let (kh, k) = self.kept_nowait(c, fh)?;
        let st = self.kept_attrs(&kh, k.attrs.as_ref(), &k.path)?;
        let o = Obj {
            st: Some(st).filter(|st| st.st_nlink > 0)?,
            fd: k.path,
            kh,
            readable: false,
        };
        Some((self.access(c, &o, asked).ok()?, o.st))
    }

    /// A READ (RFC 1813 §3.3.6) that never waits, for the thread that moves the connection's
    /// bytes: only when the handle names a regular file a READ opened lately (kept open), the
    /// caller may read it, and every byte asked for (up to EOF) is in the page cache
    /// (`preadv2` with `RWF_NOWAIT`). Then: the bytes read into the memory `buf_for` gives,
    /// whether they reached EOF, and the file's attributes. `None` otherwise, with nothing
    /// changed: [`Export::read_with`] then answers on a thread that may wait.
    pub fn read_nowait<'b>(
        &self,
        c: &Cred,
        fh: &[u8],
        offset: u64,
        count: u32,
        buf_for: impl FnOnce(usize) -> &'b mut [u8],
    ) -> Option<(usize, bool, rfs::Stat)> {
        let (kh, k) = self.kept_nowait(c, fh)?;
        let fd = match k.read {
            Some(fd) => fd,
            None => {
                // Kept `O_PATH` only (LOOKUP, CREATE): opened again for reading through
                // procfs, which never waits for a disk; then kept for the READs after it.
                if ftype_of(rfs::fstat(&k.path).ok()?.st_mode) != ftype::REG {
                    return None;
                }
                let fd = Arc::new(
                    rfs::open(
                        proc_path(&*k.path),
                        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .ok()?,
                );
                self.open.try_lock().ok()?.put(&kh, None, Some(&fd));
                fd
            }
        };
        let st = self.kept_attrs(&kh, k.attrs.as_ref(), &fd)?;
        if st.st_nlink == 0 {
            if let Ok(mut t) = self.open.try_lock() {
                t.remove(&kh);
            }
            return None;
        }
        let o = Obj {
            fd,
            st,
            kh,
            readable: true,
        };
        if ftype_of(st.st_mode) != ftype::REG
            || self.may_read_kept(c, &o, k.read_grants.as_deref()).is_err()
        {
            return None;
        }
        let size = st.st_size as u64;
        let want = (count.min(MAX_IO) as u64).min(size.saturating_sub(offset)) as usize;
        let buf = buf_for(want);
        let want = want.min(buf.len());
        if want > 0 {
            let mut io = [std::io::IoSliceMut::new(&mut buf[..want])];
            match rustix::io::preadv2(&*o.fd, &mut io, offset, rustix::io::ReadWriteFlags::NOWAIT) {
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
        rfs::fstat(&*o.fd).ok().map(|st| self.fattr(&st))
    }

    /// wcc_data with `before` and the object's attributes now.
    pub fn wcc(&self, before: &rfs::Stat, o: &Obj) -> Wcc {
        Wcc {
            before: Some(self.fattr(before).wcc()),
            after: self.attrs(o),
        }
    }

    fn dir_wcc(&self, dir: &Obj) -> Wcc {
        self.wcc(&dir.st, dir)
    }

    /// May `c` read `o`: its owner (knfsd's owner override), or as the kernel says for `c`'s
    /// credentials, reading or executing (knfsd lets whoever may execute a file read it).
    fn may_read(&self, c: &Cred, o: &Obj) -> Result<(), Stat> {
        if c.uid == o.st.st_uid {
            return Ok(());
        }
        self.read_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _as = self.as_caller(c)?;
        sys::access(&*o.fd, libc::R_OK)
            .or_else(|_| sys::access(&*o.fd, libc::X_OK))
            .map_err(Stat::from)
    }

    /// [`Export::may_read`] of the kept object `o` (`o.st` taken before this), answered from
    /// `grants` when the kernel allowed this caller before on the same mode, owner, group and
    /// ctime ([`ReadGrant`]); a new allowance is remembered with the object.
    fn may_read_kept(
        &self,
        c: &Cred,
        o: &Obj,
        grants: Option<&Vec<ReadGrant>>,
    ) -> Result<(), Stat> {
        if c.uid == o.st.st_uid {
            return Ok(());
        }
        let file = FileAccessKey::of(&o.st);
        let same =
            |g: &ReadGrant| g.file == file && g.uid == c.uid && g.gid == c.gid && g.gids == c.gids;
        if grants.is_some_and(|g| g.iter().any(same)) {
            return Ok(());
        }
        self.may_read(c, o)?;
        if let Ok(mut t) = self.open.try_lock() {
            if let Some(e) = t.map.get_mut(&o.kh) {
                // Grants for another state of the file are stale: dropped.
                let mut v = vec![ReadGrant {
                    file,
                    uid: c.uid,
                    gid: c.gid,
                    gids: c.gids.clone(),
                }];
                if let Some(old) = e.kept.read_grants.as_deref() {
                    v.extend(old.iter().filter(|g| g.file == file).cloned());
                }
                v.truncate(READ_GRANTS);
                e.kept.read_grants = Some(Arc::new(v));
            }
        }
        Ok(())
    }

    /// May `c` write `o`: its owner, or as the kernel says (with the credentials in force).
    fn may_write(c: &Cred, o: &Obj) -> Result<(), Stat> {
        if c.uid == o.st.st_uid {
            return Ok(());
        }
        sys::access(&*o.fd, libc::W_OK).map_err(Stat::from)
    }

    fn need_rw(&self, c: &Cred) -> Result<(), Stat> {
        if c.rw {
            Ok(())
        } else {
            Err(Stat::RoFs)
        }
    }

    fn need_dir(dir: &Obj) -> Result<(), Stat> {
        if dir.ftype() != ftype::DIR {
            return Err(Stat::NotDir);
        }
        Ok(())
    }

    /// `o` open for writing: the descriptor kept with it, else a new one (as the server:
    /// `open_by_handle_at` needs it; the caller's permission is checked after,
    /// [`Export::may_write`]), kept if `keep`.
    fn open_for_write(&self, o: &Obj, keep: bool) -> Result<Arc<OwnedFd>, Stat> {
        if let Some(w) = self.open_objects().get(&o.kh).and_then(|k| k.write) {
            return Ok(w);
        }
        let fd = sys::open_by_handle(&self.mount_fd, &o.kh, libc::O_WRONLY | libc::O_NONBLOCK)
            .map_err(|e| match e {
                Errno::STALE | Errno::NOENT => Stat::Stale,
                e => e.into(),
            })?;
        let fd = Arc::new(fd);
        if keep {
            self.open_objects().put_write(&o.kh, &fd);
        }
        Ok(fd)
    }

    /// LOOKUP (RFC 1813 §3.3.3): `name` in directory `dir`, with `c`'s credentials (the
    /// kernel checks search permission). `..` of the export root is the root.
    pub fn lookup(&self, c: &Cred, dir: &Obj, name: &[u8]) -> Result<Obj, Stat> {
        Self::need_dir(dir)?;
        let n = check_name(name)?;
        let _as = self.as_caller(c)?;
        let o = match name {
            b"." => {
                sys::access(&*dir.fd, libc::X_OK)?;
                return self.obj_from(dir.kh.clone(), dir.fd.clone(), false);
            }
            b".." if self.is_root(&dir.st) => {
                sys::access(&*dir.fd, libc::X_OK)?;
                return self.root_obj();
            }
            b".." => {
                // Not RESOLVE_BENEATH: `..` of a directory of the export is its parent.
                let fd = rfs::openat2(
                    &*dir.fd,
                    "..",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
                )?;
                self.obj_of_fd(fd)?
            }
            _ => self.open_child(dir, n, ResolveFlags::empty())?,
        };
        self.keep(&o);
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
        let t = rfs::readlinkat(&*o.fd, "", Vec::new())?;
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
    /// file), and whether that reached EOF. `o` comes from [`Export::resolve_for_read`].
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
        if !o.readable {
            return Err(Stat::ServerFault);
        }
        self.may_read(c, o)?;
        let size = o.st.st_size as u64;
        let want = (count.min(MAX_IO) as u64).min(size.saturating_sub(offset)) as usize;
        let buf = buf_for(want);
        let want = want.min(buf.len());
        let mut got = 0;
        while got < want {
            match rustix::io::pread(&*o.fd, &mut buf[got..want], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let eof = offset.saturating_add(got as u64) >= size;
        Ok((got, eof))
    }

    /// WRITE (RFC 1813 §3.3.7): `data` at `offset`, made as stable as `stable` asks; returns
    /// the level achieved and the file's wcc. Written with the caller's credentials, so the
    /// kernel clears set-id bits as for a local write.
    pub fn write(
        &self,
        c: &Cred,
        o: &Obj,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<(StableHow, Wcc), Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        match o.ftype() {
            ftype::REG => {}
            ftype::DIR => return Err(Stat::IsDir),
            _ => return Err(Stat::Inval),
        }
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Stat::FBig);
        }
        // Only UNSTABLE data has a COMMIT coming to give the descriptor up again.
        let fd = self.open_for_write(o, stable == StableHow::Unstable)?;
        {
            let _as = self.as_caller(c)?;
            Self::may_write(c, o)?;
            let (mut at, mut rest) = (offset, data);
            while !rest.is_empty() {
                match rustix::io::pwrite(&*fd, rest, at) {
                    Ok(0) => return Err(Stat::Io),
                    Ok(n) => {
                        rest = &rest[n..];
                        at += n as u64;
                    }
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => rfs::fdatasync(&*fd)?,
            StableHow::FileSync => rfs::fsync(&*fd)?,
        }
        Ok((stable, self.wcc(&o.st, o)))
    }

    /// COMMIT (RFC 1813 §3.3.21): flush the whole file (offset and count are advisory).
    pub fn commit(&self, c: &Cred, o: &Obj) -> Result<Wcc, Stat> {
        let _changing = self.changing();
        if o.ftype() != ftype::REG {
            return Err(Stat::Inval);
        }
        self.need_rw(c)?;
        // The client commits what it wrote when it is done with it (the Linux client on
        // close), so the descriptor its WRITEs kept open goes now.
        match self.open_objects().take_write(&o.kh) {
            Some(w) => rfs::fsync(&*w)?,
            None => File::from(
                sys::open_by_handle(&self.mount_fd, &o.kh, libc::O_RDONLY | libc::O_NONBLOCK)
                    .map_err(|_| Stat::Stale)?,
            )
            .sync_all()?,
        }
        Ok(self.wcc(&o.st, o))
    }

    /// SETATTR (RFC 1813 §3.3.2). `guard`: the ctime the client expects (else NOT_SYNC). Each
    /// change is made with the caller's credentials: the kernel decides who may chown, chmod
    /// (clearing set-gid for a caller outside the file's group) and set times.
    pub fn setattr(
        &self,
        c: &Cred,
        o: &Obj,
        s: &Sattr3,
        guard: Option<NfsTime>,
    ) -> Result<Wcc, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        if let Some(g) = guard {
            if self.fattr(&o.st).ctime != g {
                return Err(Stat::NotSync);
            }
        }
        let is_lnk = o.ftype() == ftype::LNK;
        let times = s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange;
        if is_lnk && s.mode.is_some() {
            // Linux keeps no mode for symlinks (fchmodat AT_SYMLINK_NOFOLLOW: EOPNOTSUPP).
            return Err(Stat::NotSupp);
        }
        let trunc = match s.size {
            Some(_) if o.ftype() == ftype::DIR => return Err(Stat::IsDir),
            Some(_) if o.ftype() != ftype::REG => return Err(Stat::Inval),
            Some(sz) => Some((self.open_for_write(o, false)?, sz)),
            None => None,
        };
        let _as = self.as_caller(c)?;
        if s.uid.is_some() || s.gid.is_some() {
            rfs::chownat(
                &*o.fd,
                "",
                s.uid.map(rfs::Uid::from_raw),
                s.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        if let Some((f, sz)) = trunc {
            Self::may_write(c, o)?;
            rfs::ftruncate(&f, sz)?;
        }
        if let Some(m) = s.mode {
            rfs::chmod(proc_path(&*o.fd), Mode::from_raw_mode(m & 0o7777))?;
        }
        if times {
            rfs::utimensat(
                &*o.fd,
                "",
                &Timestamps {
                    last_access: ts(s.atime),
                    last_modification: ts(s.mtime),
                },
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        Ok(self.wcc(&o.st, o))
    }

    /// The object just made as `name` in `dir` (with the credentials in force).
    fn new_child(&self, dir: &Obj, name: &OsStr) -> Result<Obj, Stat> {
        let o = self.open_child(dir, name, ResolveFlags::empty())?;
        self.keep(&o);
        Ok(o)
    }

    /// The reply of an operation that just made `name` in `dir` (with the caller's
    /// credentials in force): the object opened and kept, `mode` set when the client gave one
    /// (not narrowed by the server's umask), the owner and group `attrs` ask for, and the
    /// attributes as they are after all that.
    fn made(
        &self,
        dir: &Obj,
        name: &OsStr,
        attrs: &Sattr3,
        mode: Option<Mode>,
    ) -> Result<DirOpResult, Stat> {
        let o = self.new_child(dir, name)?;
        if let Some(m) = mode {
            rfs::chmod(proc_path(&*o.fd), m)?;
        }
        Self::chown_new(&o, attrs)?;
        Ok((Some(Self::refreshed(o)?), self.dir_wcc(dir)))
    }

    /// `o` with its attributes as they are now: a reply's post-op attributes must show the
    /// mode and owner set after the object was made, or the client caches stale ones (and
    /// sees its ctime move later).
    fn refreshed(mut o: Obj) -> Result<Obj, Stat> {
        o.st = rfs::fstat(&*o.fd)?;
        Ok(o)
    }

    /// Owner and group a new object's attributes ask for (the caller's credentials decide
    /// whether the kernel allows them).
    fn chown_new(o: &Obj, attrs: &Sattr3) -> Result<(), Stat> {
        if attrs.uid.is_some() || attrs.gid.is_some() {
            rfs::chownat(
                &*o.fd,
                "",
                attrs.uid.map(rfs::Uid::from_raw),
                attrs.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        Ok(())
    }

    /// CREATE (RFC 1813 §3.3.8). `how`: UNCHECKED (0), GUARDED (1) with attributes, or
    /// EXCLUSIVE (2) with a verifier, stored in the new file's atime/mtime so a retransmitted
    /// EXCLUSIVE create succeeds again. Made with the caller's credentials: owned by the
    /// caller, its group as the kernel gives it (the directory's when that is set-gid).
    pub fn create(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        how: u32,
        attrs: &Sattr3,
        verf: [u8; 8],
    ) -> Result<DirOpResult, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        let n = check_new_name(name)?;
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o644) & 0o7777);
        let _as = self.as_caller(c)?;
        let flags = OFlags::CREATE
            | OFlags::WRONLY
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NONBLOCK;
        let fd = match rfs::openat(&*dir.fd, n, flags, mode) {
            Ok(fd) => fd,
            Err(Errno::EXIST) if how == 0 => {
                // UNCHECKED on an existing file (§3.3.8): no new file, so no new owner or mode;
                // only a size in the attributes applies, as a SETATTR would.
                let o = self.open_child(dir, n, ResolveFlags::empty())?;
                if o.ftype() != ftype::REG {
                    return Err(Stat::Exist);
                }
                if let Some(sz) = attrs.size {
                    let f = rfs::openat2(
                        &*dir.fd,
                        n,
                        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                        Mode::empty(),
                        resolve_flags(),
                    )?;
                    rfs::ftruncate(&f, sz)?;
                }
                self.keep(&o);
                return Ok((Some(Self::refreshed(o)?), self.dir_wcc(dir)));
            }
            Err(Errno::EXIST) if how == 2 => {
                // Retransmission of an EXCLUSIVE create: same verifier in the times.
                let o = self.open_child(dir, n, ResolveFlags::empty())?;
                let v = self.fattr(&o.st);
                let stored =
                    [v.atime.seconds.to_be_bytes(), v.mtime.seconds.to_be_bytes()].concat();
                if o.ftype() == ftype::REG && stored == verf {
                    self.keep(&o);
                    return Ok((Some(o), self.dir_wcc(dir)));
                }
                return Err(Stat::Exist);
            }
            Err(e) => return Err(e.into()),
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
        // EXCLUSIVE carries a verifier, no attributes (§3.3.8).
        let owner = if how == 2 { &Sattr3::default() } else { attrs };
        self.made(dir, n, owner, None)
    }

    /// MKDIR (RFC 1813 §3.3.9), with the caller's credentials.
    pub fn mkdir(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        attrs: &Sattr3,
    ) -> Result<DirOpResult, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        let n = check_new_name(name)?;
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o755) & 0o7777);
        let _as = self.as_caller(c)?;
        rfs::mkdirat(&*dir.fd, n, mode)?;
        self.made(dir, n, attrs, attrs.mode.map(|_| mode))
    }

    /// SYMLINK (RFC 1813 §3.3.10): the target is stored verbatim and never resolved here.
    pub fn symlink(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        target: &[u8],
        attrs: &Sattr3,
    ) -> Result<DirOpResult, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        let n = check_new_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Stat::Inval);
        }
        let _as = self.as_caller(c)?;
        rfs::symlinkat(OsStr::from_bytes(target), &*dir.fd, n)?;
        self.made(dir, n, attrs, None)
    }

    /// MKNOD (RFC 1813 §3.3.11): a FIFO, socket, or character or block device (`rdev`:
    /// major, minor), with the caller's credentials (so devices only for an unsquashed root:
    /// the kernel asks for CAP_MKNOD). Other types: NFS3ERR_BADTYPE.
    pub fn mknod(
        &self,
        c: &Cred,
        dir: &Obj,
        name: &[u8],
        ft: u32,
        attrs: &Sattr3,
        rdev: (u32, u32),
    ) -> Result<DirOpResult, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        let n = check_new_name(name)?;
        let (kind, dev) = match ft {
            ftype::CHR => (rfs::FileType::CharacterDevice, rfs::makedev(rdev.0, rdev.1)),
            ftype::BLK => (rfs::FileType::BlockDevice, rfs::makedev(rdev.0, rdev.1)),
            ftype::SOCK => (rfs::FileType::Socket, 0),
            ftype::FIFO => (rfs::FileType::Fifo, 0),
            _ => return Err(Stat::BadType),
        };
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o644) & 0o7777);
        let _as = self.as_caller(c)?;
        rfs::mknodat(&*dir.fd, n, kind, mode, dev)?;
        self.made(dir, n, attrs, attrs.mode.map(|_| mode))
    }

    /// REMOVE (RFC 1813 §3.3.12) or RMDIR (§3.3.13), with the caller's credentials (the
    /// kernel checks the directory's permission and its sticky bit).
    pub fn remove(&self, c: &Cred, dir: &Obj, name: &[u8], rmdir: bool) -> Result<Wcc, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        if name == b"." {
            return Err(Stat::Inval);
        }
        if name == b".." {
            return Err(Stat::NotEmpty);
        }
        let n = check_name(name)?;
        let _as = self.as_caller(c)?;
        let gone = CString::new(name)
            .ok()
            .and_then(|cn| sys::handle_of_entry(&*dir.fd, &cn).ok());
        let flags = if rmdir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rfs::unlinkat(&*dir.fd, n, flags)?;
        if let Some(kh) = gone {
            // A kept descriptor would keep a removed file's blocks allocated.
            self.open_objects().remove(&kh);
        }
        Ok(self.dir_wcc(dir))
    }

    /// RENAME (RFC 1813 §3.3.14): `from` in `fdir` to `to` in `tdir`, with the caller's
    /// credentials. Handles follow the object (they name the inode, not the path).
    pub fn rename(
        &self,
        c: &Cred,
        fdir: &Obj,
        from: &[u8],
        tdir: &Obj,
        to: &[u8],
    ) -> Result<(Wcc, Wcc), Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(fdir)?;
        Self::need_dir(tdir)?;
        let f = check_new_name(from).map_err(|_| Stat::Inval)?;
        let t = check_new_name(to).map_err(|_| Stat::Inval)?;
        let _as = self.as_caller(c)?;
        let replaced = CString::new(to)
            .ok()
            .and_then(|cn| sys::handle_of_entry(&*tdir.fd, &cn).ok());
        rfs::renameat(&*fdir.fd, f, &*tdir.fd, t)?;
        if let Some(kh) = replaced {
            self.open_objects().remove(&kh);
        }
        Ok((self.dir_wcc(fdir), self.dir_wcc(tdir)))
    }

    /// LINK (RFC 1813 §3.3.15): a hard link to `file` as `name` in `dir`. The caller must be
    /// allowed to add entries to `dir` (checked with its credentials); the link itself is made
    /// through the file's own descriptor (`AT_EMPTY_PATH`, which needs CAP_DAC_READ_SEARCH),
    /// as knfsd links without the local `protected_hardlinks` rule.
    pub fn link(&self, c: &Cred, file: &Obj, dir: &Obj, name: &[u8]) -> Result<Wcc, Stat> {
        let _changing = self.changing();
        self.need_rw(c)?;
        Self::need_dir(dir)?;
        if file.ftype() == ftype::DIR {
            return Err(Stat::IsDir);
        }
        let n = check_new_name(name)?;
        {
            let _as = self.as_caller(c)?;
            sys::access(&*dir.fd, libc::W_OK | libc::X_OK)?;
        }
        rfs::linkat(&*file.fd, "", &*dir.fd, n, AtFlags::EMPTY_PATH)?;
        Ok(self.dir_wcc(dir))
    }

    /// Directory entries from `cookie` on (READDIR §3.3.16, READDIRPLUS §3.3.17): calls `f`
    /// with (fileid, name, next cookie, the entry's attributes and handle if `plus`) until it
    /// returns false; returns whether the end was reached. Cookies are the directory stream
    /// offsets (`d_off`); `.` and `..` are included. Read with the caller's credentials.
    pub fn readdir(
        &self,
        c: &Cred,
        dir: &Obj,
        cookie: u64,
        plus: bool,
        mut f: impl FnMut(u64, &[u8], u64, Option<EntryPlus>) -> bool,
    ) -> Result<bool, Stat> {
        Self::need_dir(dir)?;
        let _as = self.as_caller(c)?;
        let fd = rfs::openat(
            &*dir.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut d = rfs::Dir::new(fd)?;
        if cookie != 0 {
            d.seek(cookie as i64).map_err(|_| Stat::BadCookie)?;
        }
        let root = self.is_root(&dir.st);
        loop {
            match d.read() {
                None => return Ok(true),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(ent)) => {
                    let name = ent.file_name().to_bytes();
                    let ino = if name == b".." && root {
                        dir.st.st_ino
                    } else {
                        ent.ino()
                    };
                    let extra = if plus {
                        self.entry(dir, ent.file_name())
                    } else {
                        None
                    };
                    if !f(ino, name, ent.offset() as u64, extra) {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// A READDIRPLUS entry's attributes and handle, without opening it: `statx` and
    /// `name_to_handle_at` of the name (`..` of the root is the root; a mount point below the
    /// export, or anything else that fails, gets none).
    fn entry(&self, dir: &Obj, name: &std::ffi::CStr) -> Option<EntryPlus> {
        let bytes = name.to_bytes();
        if bytes == b"." || (bytes == b".." && self.is_root(&dir.st)) {
            let (st, kh) = if bytes == b"." {
                (rfs::fstat(&*dir.fd).ok()?, dir.kh.clone())
            } else {
                (rfs::fstat(&*self.root).ok()?, self.root_kh.clone())
            };
            return Some((self.fattr(&st), self.handle_from(ftype::DIR, &kh)));
        }
        let st = rfs::statat(&*dir.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if st.st_dev != self.root_st.st_dev {
            return None;
        }
        let kh = sys::handle_of_entry(&*dir.fd, name).ok()?;
        if kh.bytes.len() > MAX_KERNEL_HANDLE {
            return None;
        }
        Some((self.fattr(&st), self.handle_from(ftype_of(st.st_mode), &kh)))
    }

    /// ACCESS (RFC 1813 §3.3.4): which of the asked bits `c` has on `o`, as the kernel says
    /// for `c`'s credentials (mode bits, ACLs); changes only where `c`'s entry is `rw`.
    pub fn access(&self, c: &Cred, o: &Obj, asked: u32) -> Result<u32, Stat> {
        use super::xdr::access as a;
        let is_dir = o.ftype() == ftype::DIR;
        let _as = self.as_caller(c)?;
        let may = |m| sys::access(&*o.fd, m).is_ok();
        let mut ok = 0;
        if asked & a::READ != 0 && may(libc::R_OK) {
            ok |= a::READ;
        }
        if asked & (a::MODIFY | a::EXTEND | a::DELETE) != 0 && c.rw && may(libc::W_OK) {
            ok |= a::MODIFY | a::EXTEND;
            if is_dir {
                ok |= a::DELETE;
            }
        }
        if asked & (a::LOOKUP | a::EXECUTE) != 0 && may(libc::X_OK) {
            ok |= if is_dir { a::LOOKUP } else { a::EXECUTE };
        }
        Ok(ok & asked)
    }

    /// FSSTAT (RFC 1813 §3.3.18): `(tbytes, fbytes, abytes, tfiles, ffiles, afiles)`.
    pub fn fsstat(&self) -> Result<[u64; 6], Stat> {
        let v = rfs::fstatvfs(&*self.root)?;
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

    /// The current time as the server sets it (for tests).
    pub fn now(&self) -> NfsTime {
        let t = now();
        NfsTime::from_host(t.tv_sec, t.tv_nsec as u32)
    }
}
