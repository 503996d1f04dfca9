//! The kernel calls an NFS server needs that `rustix` does not wrap: file handles
//! (`name_to_handle_at(2)` / `open_by_handle_at(2)`) and the per-thread file-system
//! credentials (`setfsuid(2)` / `setfsgid(2)`).
//!
//! This is a small FFI fence like `dpwarp::dpdk`: the only `unsafe` of the NFS server, each
//! block with its reason. Supplementary groups go through `rustix::thread::set_thread_groups`
//! (the raw `setgroups` system call: per thread, where glibc's `setgroups` would change every
//! thread of the process).
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rustix::io::Errno;

/// `MAX_HANDLE_SZ` of `<fcntl.h>`: the largest kernel file handle.
pub const MAX_HANDLE_SZ: usize = 128;

/// A kernel file handle (`struct file_handle`): what `name_to_handle_at` gives for an object
/// and `open_by_handle_at` opens again, across renames and restarts, as long as the object
/// exists (the file system encodes inode and generation; RFC 1813 §2.4 asks the same of an
/// NFS handle).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelHandle {
    /// `handle_type` (file-system specific).
    pub kind: i32,
    /// `f_handle`: `handle_bytes` octets.
    pub bytes: Vec<u8>,
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

fn errno() -> Errno {
    Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// `name_to_handle_at(fd, "", AT_EMPTY_PATH)`: the handle of the object `fd` refers to (an
/// `O_PATH` descriptor will do; a symlink's own handle for a symlink's descriptor).
pub fn handle_of(fd: impl AsFd) -> Result<KernelHandle, Errno> {
    handle_at(fd, c"", libc::AT_EMPTY_PATH)
}

/// `name_to_handle_at(dirfd, name, 0)`: the handle of the entry `name` of a directory, not
/// following a symlink (READDIRPLUS gives handles without opening each entry).
pub fn handle_of_entry(dir: impl AsFd, name: &std::ffi::CStr) -> Result<KernelHandle, Errno> {
    handle_at(dir, name, 0)
}

fn handle_at(fd: impl AsFd, name: &std::ffi::CStr, flags: i32) -> Result<KernelHandle, Errno> {
    let mut h = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `name` is NUL-terminated; `h` is a `struct file_handle` whose `handle_bytes`
    // says how much room `f_handle` has (the kernel writes at most that, else EOVERFLOW);
    // `mount_id` is a valid int to write. The descriptor is borrowed for the call.
    let r = unsafe {
        libc::name_to_handle_at(
            fd.as_fd().as_raw_fd(),
            name.as_ptr(),
            (&mut h as *mut RawHandle).cast::<libc::file_handle>(),
            &mut mount_id,
            flags,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    let n = (h.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(KernelHandle {
        kind: h.handle_type,
        bytes: h.f_handle[..n].to_vec(),
    })
}

/// `open_by_handle_at(mount_fd, handle, flags | O_CLOEXEC)`: the object a handle names, on
/// the mount `mount_fd` is on. Needs CAP_DAC_READ_SEARCH in the effective set, so it is called
/// with the server's own file-system credentials, never a caller's ([`CallerCreds`]).
pub fn open_by_handle(mount_fd: impl AsFd, h: &KernelHandle, flags: i32) -> Result<OwnedFd, Errno> {
    if h.bytes.len() > MAX_HANDLE_SZ {
        return Err(Errno::INVAL);
    }
    let mut raw = RawHandle {
        handle_bytes: h.bytes.len() as u32,
        handle_type: h.kind,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `raw` is a `struct file_handle` of `handle_bytes` (<= MAX_HANDLE_SZ) octets that
    // lives across the call; the kernel only reads it. The descriptor is borrowed.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_fd().as_raw_fd(),
            (&mut raw as *mut RawHandle).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setfsuid(2)` on this thread; the previous fsuid (the call reports no error: the caller
/// checks with a second call, as the man page advises).
fn setfsuid(uid: u32) -> u32 {
    // SAFETY: a system call with an integer argument; it touches no memory of ours.
    unsafe { libc::setfsuid(uid) as u32 }
}

/// `setfsgid(2)` on this thread; the previous fsgid.
fn setfsgid(gid: u32) -> u32 {
    // SAFETY: as `setfsuid`.
    unsafe { libc::setfsgid(gid) as u32 }
}

/// The thread's current fsuid and fsgid (an invalid id changes nothing and returns them).
pub fn current_fs_ids() -> (u32, u32) {
    (setfsuid(u32::MAX), setfsgid(u32::MAX))
}

/// While alive, this thread's file-system work runs with a caller's uid, gid and groups:
/// the kernel then applies its own rules (mode bits, ACLs, sticky directories, set-id
/// clearing, who may chown, CAP_MKNOD), exactly as for a local process of that user. Changing
/// the fsuid away from 0 also drops the file-system capabilities (CAP_DAC_OVERRIDE,
/// CAP_FOWNER, CAP_FSETID, CAP_MKNOD, ...) from the thread's effective set
/// (capabilities(7) "Effect of user ID changes on capabilities"); going back to 0 restores
/// them. Dropped: the server's own ids and groups come back.
pub struct CallerCreds {
    uid: u32,
    gid: u32,
    groups: Vec<rustix::process::Gid>,
}

impl CallerCreds {
    /// Take on `uid`, `gid` and `groups` for this thread. `server` is the (fsuid, fsgid,
    /// groups) to return to. Fails (EPERM) when the process may not (no CAP_SETUID /
    /// CAP_SETGID): nothing is then left changed.
    pub fn enter(
        uid: u32,
        gid: u32,
        groups: &[u32],
        server: &(u32, u32, Vec<u32>),
    ) -> Result<CallerCreds, Errno> {
        let saved = CallerCreds {
            uid: server.0,
            gid: server.1,
            groups: server
                .2
                .iter()
                .map(|g| rustix::process::Gid::from_raw(*g))
                .collect(),
        };
        let gs: Vec<_> = groups
            .iter()
            .map(|g| rustix::process::Gid::from_raw(*g))
            .collect();
        rustix::thread::set_thread_groups(&gs)?;
        setfsgid(gid);
        setfsuid(uid);
        if current_fs_ids() != (uid, gid) {
            drop(saved);
            return Err(Errno::PERM);
        }
        Ok(saved)
    }
}

impl Drop for CallerCreds {
    fn drop(&mut self) {
        // The uid first: with fsuid 0 again the thread has its capabilities back.
        setfsuid(self.uid);
        setfsgid(self.gid);
        let _ = rustix::thread::set_thread_groups(&self.groups);
    }
}

/// `faccessat2(fd, "", mode, AT_EMPTY_PATH | AT_EACCESS)` (Linux 5.8): may this thread's
/// file-system credentials access the object `fd` refers to (an `O_PATH` descriptor will do)
/// for `mode` (`libc::R_OK | W_OK | X_OK`)? The kernel's own check: mode bits, ACLs,
/// capabilities, a read-only mount. (`rustix::fs::accessat` does not take `AT_EMPTY_PATH`.)
pub fn access(fd: impl AsFd, mode: i32) -> Result<(), Errno> {
    // SAFETY: the path is a NUL-terminated empty string that lives across the call; the other
    // arguments are integers and a borrowed descriptor.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(())
}
