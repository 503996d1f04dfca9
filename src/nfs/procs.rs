//! The NFSv3 procedures (RFC 1813 §3.3) as handlers of a [`Registry`].
//!
//! Arguments that do not decode are GARBAGE_ARGS (RFC 5531 §9, via [`garbage`]); the connection
//! goes on serving. READ data is a bulk result ([`Body::put_bulk`]): it goes by write chunk when
//! the client offers one (RFC 8166 §3.4.6, RFC 8267 §2.1 makes READ data DDP-eligible); WRITE
//! data is a bulk argument ([`ArgReader::get_bulk`]) taken from the read chunk when the client
//! sent one. Large replies (READDIR, READDIRPLUS, READLINK) go by the client's reply chunk when
//! they exceed the inline size; that is the RPC server's business, not the handler's.

use std::sync::Arc;

use super::export::{Cred, Export, Obj, MAX_IO, POOLED_READ_MIN};
use super::xdr::{
    emit_post_op_attr, emit_post_op_fh, parse_diropargs, parse_fh, Fattr3, NfsTime, Sattr3,
    StableHow, Wcc, FATTR3_LEN, MAX_PATH, VERFSIZE,
};
use super::{proc_, Stat, NFS_PROG, NFS_V3};
use crate::rpc::program::{garbage, ArgReader, Body, Registry};
use crate::verbs::SharedMem;
use crate::wire::oncrpc::{AcceptStat, CallRepr};

type Res = core::result::Result<Body, AcceptStat>;
type Handler = fn(&Export, &Cred, &mut ArgReader<'_>) -> Res;
/// A procedure's attempt that never waits ([`dpwarp::rpc::program::NowaitFn`]).
type Nowait = fn(&Export, &Cred, &mut ArgReader<'_>) -> Option<Res>;

/// FSINFO `dtpref`: preferred READDIR size.
pub const DTPREF: u32 = 64 * 1024;

fn status(b: &mut Body, s: Stat) {
    b.xdr().put_u32(s.code());
}

fn resolve_or(
    e: &Export,
    c: &Cred,
    fh: &[u8],
    b: &mut Body,
    fail: impl FnOnce(&mut Body),
) -> Option<Obj> {
    match e.resolve(c, fh) {
        Ok(o) => Some(o),
        Err(s) => {
            status(b, s);
            fail(b);
            None
        }
    }
}

/// Register the 22 NFSv3 procedures for `export`.
pub fn register(reg: &mut Registry, export: Arc<Export>) {
    let table: [(u32, Handler); 22] = [
        (proc_::NULL, |_, _, _| Ok(Body::new())),
        (proc_::GETATTR, getattr),
        (proc_::SETATTR, setattr),
        (proc_::LOOKUP, lookup),
        (proc_::ACCESS, access),
        (proc_::READLINK, readlink),
        (proc_::READ, read),
        (proc_::WRITE, write),
        (proc_::CREATE, create),
        (proc_::MKDIR, mkdir),
        (proc_::SYMLINK, symlink),
        (proc_::MKNOD, mknod),
        (proc_::REMOVE, |e, c, a| remove(e, c, a, false)),
        (proc_::RMDIR, |e, c, a| remove(e, c, a, true)),
        (proc_::RENAME, rename),
        (proc_::LINK, link),
        (proc_::READDIR, |e, c, a| readdir(e, c, a, false)),
        (proc_::READDIRPLUS, |e, c, a| readdir(e, c, a, true)),
        (proc_::FSSTAT, fsstat),
        (proc_::FSINFO, fsinfo),
        (proc_::PATHCONF, pathconf),
        (proc_::COMMIT, commit),
    ];
    for (p, h) in table {
        let e = export.clone();
        // Every procedure touches the file system: none runs on a dataplane worker's thread,
        // but a READ of cached bytes of a file already open is answered there at once.
        // The caller as the export's client entry for the connection's peer makes it
        // (squashed, or denied: NFS3ERR_ACCES from `resolve`).
        let run = move |call: &CallRepr, a: &mut ArgReader<'_>| {
            let c = e.caller(&call.cred, a.peer);
            h(&e, &c, a)
        };
        let nowait: Option<Nowait> = match p {
            proc_::READ => Some(read_nowait),
            proc_::GETATTR => Some(getattr_nowait),
            proc_::ACCESS => Some(access_nowait),
            proc_::LOOKUP => Some(lookup_nowait),
            _ => None,
        };
        match nowait {
            Some(n) => {
                let e = export.clone();
                reg.register_blocking_with_nowait(NFS_PROG, NFS_V3, p, run, move |call, a| {
                    let c = e.caller(&call.cred, a.peer);
                    n(&e, &c, a)
                });
            }
            None => reg.register_blocking(NFS_PROG, NFS_V3, p, run),
        }
    }
}

fn getattr(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    if let Some(o) = resolve_or(e, c, fh, &mut b, |_| {}) {
        status(&mut b, Stat::Ok);
        e.fattr(&o.st).emit(b.xdr());
    }
    Ok(b)
}

/// GETATTR without waiting ([`Export::stat_nowait`]): the same reply as [`getattr`] when the
/// object's attributes come without a lookup that may wait, else `None`.
/// The nfsstat3 at the head of every result.
const REPLY_HEAD: usize = 4;

fn getattr_nowait(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Option<Res> {
    let fh = parse_fh(&mut a.xdr).ok()?;
    let st = e.stat_nowait(c, fh)?;
    let mut b = Body::with_capacity(REPLY_HEAD + FATTR3_LEN);
    status(&mut b, Stat::Ok);
    e.fattr(&st).emit(b.xdr());
    Some(Ok(b))
}

/// LOOKUP without waiting ([`Export::lookup_nowait`]): the same reply as [`lookup`] when
/// the directory and the name resolve from the kernel's lookup cache, else `None`.
fn lookup_nowait(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Option<Res> {
    let (fh, name) = parse_diropargs(&mut a.xdr).ok()?;
    let (o, dir) = e.lookup_nowait(c, fh, name)?;
    let mut b = Body::with_capacity(REPLY_HEAD + 4 + super::xdr::FHSIZE + 2 * (4 + FATTR3_LEN));
    status(&mut b, Stat::Ok);
    b.xdr().put_opaque(&e.handle(&o));
    emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
    emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
    Some(Ok(b))
}

/// ACCESS without waiting, as [`getattr_nowait`].
fn access_nowait(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Option<Res> {
    let fh = parse_fh(&mut a.xdr).ok()?;
    let asked = a.xdr.get_u32().ok()?;
    let (bits, st) = e.access_nowait(c, fh, asked)?;
    let mut b = Body::with_capacity(REPLY_HEAD + 4 + FATTR3_LEN + 4);
    status(&mut b, Stat::Ok);
    emit_post_op_attr(b.xdr(), Some(&e.fattr(&st)));
    b.xdr().put_u32(bits);
    Some(Ok(b))
}

fn setattr(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let s = Sattr3::parse(&mut a.xdr).map_err(garbage)?;
    let guard = if a.xdr.get_bool().map_err(garbage)? {
        Some(NfsTime::parse(&mut a.xdr).map_err(garbage)?)
    } else {
        None
    };
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    match e.setattr(c, &o, &s, guard) {
        Ok(w) => {
            status(&mut b, Stat::Ok);
            w.emit(b.xdr());
        }
        Err(s) => {
            status(&mut b, s);
            e.wcc(&o.st, &o).emit(b.xdr());
        }
    }
    Ok(b)
}

fn lookup(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    match e.lookup(c, &dir, name) {
        Ok(o) => {
            status(&mut b, Stat::Ok);
            b.xdr().put_opaque(&e.handle(&o));
            emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
            emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
        }
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
        }
    }
    Ok(b)
}

fn access(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let asked = a.xdr.get_u32().map_err(garbage)?;
    let mut b = Body::new();
    if let Some(o) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) {
        match e.access(c, &o, asked) {
            Ok(bits) => {
                status(&mut b, Stat::Ok);
                emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
                b.xdr().put_u32(bits);
            }
            Err(s) => {
                status(&mut b, s);
                emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
            }
        }
    }
    Ok(b)
}

fn readlink(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    match e.readlink(&o) {
        Ok(t) => {
            status(&mut b, Stat::Ok);
            emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
            b.xdr().put_opaque(&t);
        }
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
        }
    }
    Ok(b)
}

fn read(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let offset = a.xdr.get_u64().map_err(garbage)?;
    let count = a.xdr.get_u32().map_err(garbage)?;
    let mut b = Body::new();
    let o = match e.resolve_for_read(c, fh) {
        Ok(o) => o,
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), None);
            return Ok(b);
        }
    };
    // A large READ lands in a pool's buffer and is RDMA-Written from there (docs/nfs.md).
    enum Data {
        Own(Vec<u8>),
        Lent(SharedMem, usize),
    }
    let pooled = (count >= POOLED_READ_MIN)
        .then(|| e.read_pool().take(count.min(MAX_IO) as usize))
        .flatten();
    let read = match pooled {
        Some(mem) => {
            let r = {
                let mut g = mem.bytes_mut();
                e.read_with(c, &o, offset, count, |_| &mut g[..])
            };
            r.map(|(n, eof)| (Data::Lent(mem, n), eof))
        }
        None => e
            .read(c, &o, offset, count)
            .map(|(d, eof)| (Data::Own(d), eof)),
    };
    match read {
        Ok((data, eof)) => {
            status(&mut b, Stat::Ok);
            emit_post_op_attr(b.xdr(), e.attrs(&o).as_ref());
            let n = match &data {
                Data::Own(d) => d.len(),
                Data::Lent(_, n) => *n,
            };
            b.xdr().put_u32(n as u32);
            b.xdr().put_bool(eof);
            match data {
                Data::Own(d) => b.put_bulk(d),
                Data::Lent(mem, n) => b.put_bulk_region(&mem, 0, n),
            }
        }
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), e.attrs(&o).as_ref());
        }
    }
    Ok(b)
}

/// READ without waiting ([`Export::read_nowait`]): the same reply as [`read`] when the READ
/// is small (under [`POOLED_READ_MIN`]), its bytes are cached and the file is open, else
/// `None` (the handler pool runs [`read`]). A large READ's copy out of the page cache (tens of
/// microseconds for 1 MiB) would hold up every connection of the reactor meanwhile; on the
/// pool it runs beside them, and the hand-off is small beside it (docs/nfs.md).
fn read_nowait(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Option<Res> {
    let (fh, offset, count) = match (|| {
        let fh = parse_fh(&mut a.xdr)?;
        Ok::<_, crate::wire::Error>((fh, a.xdr.get_u64()?, a.xdr.get_u32()?))
    })() {
        Ok(v) => v,
        Err(_) => return None,
    };
    if count >= POOLED_READ_MIN {
        return None;
    }
    // Status, post_op_attr, count, eof (RFC 1813 §3.3.6).
    let mut b = Body::with_capacity(REPLY_HEAD + 4 + FATTR3_LEN + 8);
    // Read straight into a registered buffer the connection lends for the reply (RDMA-Written
    // from there), else into memory of its own.
    match a.result_buffer(count as usize) {
        Some(mem) => {
            let (n, eof, st) = {
                let mut g = mem.bytes_mut();
                e.read_nowait(c, fh, offset, count, |_| &mut g[..])?
            };
            read_ok(e, &mut b, &st, n, eof);
            b.put_bulk_region(&mem, 0, n);
        }
        None => {
            let mut data = Vec::new();
            let (n, eof, st) = e.read_nowait(c, fh, offset, count, |want| {
                data.resize(want, 0);
                &mut data[..]
            })?;
            data.truncate(n);
            read_ok(e, &mut b, &st, n, eof);
            b.put_bulk(data);
        }
    }
    Some(Ok(b))
}

/// A READ reply's head (RFC 1813 §3.3.6 READ3resok): status, attributes, count, eof; the data
/// follows as a bulk item.
fn read_ok(e: &Export, b: &mut Body, st: &rustix::fs::Stat, n: usize, eof: bool) {
    status(b, Stat::Ok);
    emit_post_op_attr(b.xdr(), Some(&e.fattr(st)));
    b.xdr().put_u32(n as u32);
    b.xdr().put_bool(eof);
}

fn write(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let offset = a.xdr.get_u64().map_err(garbage)?;
    let count = a.xdr.get_u32().map_err(garbage)?;
    let stable = StableHow::parse(&mut a.xdr).map_err(garbage)?;
    let data = a.get_bulk(MAX_IO as usize).map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    // RFC 1813 §3.3.7: `count` is the number of bytes of data; more data than count is written
    // only up to count, less is an error.
    let r = if (count as usize) > data.len() {
        Err(Stat::Inval)
    } else {
        e.write(c, &o, offset, &data[..count as usize], stable)
    };
    match r {
        Ok((committed, w)) => {
            status(&mut b, Stat::Ok);
            w.emit(b.xdr());
            b.xdr().put_u32(count);
            b.xdr().put_u32(committed as u32);
            b.xdr().put_fixed(&e.write_verf());
        }
        Err(s) => {
            status(&mut b, s);
            e.wcc(&o.st, &o).emit(b.xdr());
        }
    }
    Ok(b)
}

/// The common reply of CREATE, MKDIR, SYMLINK, MKNOD (RFC 1813 §3.3.8-11).
fn diropres(e: &Export, b: &mut Body, r: Result<super::export::DirOpResult, Stat>, dir: &Obj) {
    match r {
        Ok((o, w)) => {
            status(b, Stat::Ok);
            emit_post_op_fh(b.xdr(), o.as_ref().map(|o| e.handle(o)).as_deref());
            emit_post_op_attr(b.xdr(), o.as_ref().map(|o| e.fattr(&o.st)).as_ref());
            w.emit(b.xdr());
        }
        Err(s) => {
            status(b, s);
            e.wcc(&dir.st, dir).emit(b.xdr());
        }
    }
}

fn create(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let how = a.xdr.get_u32().map_err(garbage)?;
    let (attrs, verf) = match how {
        0 | 1 => (Sattr3::parse(&mut a.xdr).map_err(garbage)?, [0u8; 8]),
        2 => {
            let v = a.xdr.get_fixed(VERFSIZE).map_err(garbage)?;
            let mut verf = [0u8; 8];
            verf.copy_from_slice(v);
            (Sattr3::default(), verf)
        }
        _ => return Err(AcceptStat::GarbageArgs),
    };
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    let r = e.create(c, &dir, name, how, &attrs, verf);
    diropres(e, &mut b, r, &dir);
    Ok(b)
}

fn mkdir(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let attrs = Sattr3::parse(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    let r = e.mkdir(c, &dir, name, &attrs);
    diropres(e, &mut b, r, &dir);
    Ok(b)
}

fn symlink(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let attrs = Sattr3::parse(&mut a.xdr).map_err(garbage)?;
    let target = a.xdr.get_string(MAX_PATH).map_err(garbage)?;
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    let r = e.symlink(c, &dir, name, target, &attrs);
    diropres(e, &mut b, r, &dir);
    Ok(b)
}

/// MKNOD (RFC 1813 §3.3.11): `mknoddata3` is the type, then for NF3CHR / NF3BLK a
/// `devicedata3` (attributes and `specdata3` major, minor), for NF3SOCK / NF3FIFO attributes,
/// for any other type nothing (answered NFS3ERR_BADTYPE).
fn mknod(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    use super::xdr::ftype;
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let ft = a.xdr.get_u32().map_err(garbage)?;
    let (attrs, rdev) = match ft {
        ftype::CHR | ftype::BLK => {
            let s = Sattr3::parse(&mut a.xdr).map_err(garbage)?;
            let major = a.xdr.get_u32().map_err(garbage)?;
            let minor = a.xdr.get_u32().map_err(garbage)?;
            (s, (major, minor))
        }
        ftype::SOCK | ftype::FIFO => (Sattr3::parse(&mut a.xdr).map_err(garbage)?, (0, 0)),
        _ => (Sattr3::default(), (0, 0)),
    };
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    let r = e.mknod(c, &dir, name, ft, &attrs, rdev);
    diropres(e, &mut b, r, &dir);
    Ok(b)
}

fn remove(e: &Export, c: &Cred, a: &mut ArgReader<'_>, rmdir: bool) -> Res {
    let (fh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    match e.remove(c, &dir, name, rmdir) {
        Ok(w) => {
            status(&mut b, Stat::Ok);
            w.emit(b.xdr());
        }
        Err(s) => {
            status(&mut b, s);
            e.wcc(&dir.st, &dir).emit(b.xdr());
        }
    }
    Ok(b)
}

fn rename(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let (ffh, from) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let (tfh, to) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let two = |b: &mut Body| {
        Wcc::default().emit(b.xdr());
        Wcc::default().emit(b.xdr());
    };
    let Some(fdir) = resolve_or(e, c, ffh, &mut b, two) else {
        return Ok(b);
    };
    let Some(tdir) = resolve_or(e, c, tfh, &mut b, two) else {
        return Ok(b);
    };
    match e.rename(c, &fdir, from, &tdir, to) {
        Ok((fw, tw)) => {
            status(&mut b, Stat::Ok);
            fw.emit(b.xdr());
            tw.emit(b.xdr());
        }
        Err(s) => {
            status(&mut b, s);
            e.wcc(&fdir.st, &fdir).emit(b.xdr());
            e.wcc(&tdir.st, &tdir).emit(b.xdr());
        }
    }
    Ok(b)
}

fn link(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let (dfh, name) = parse_diropargs(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let fail = |b: &mut Body| {
        emit_post_op_attr(b.xdr(), None);
        Wcc::default().emit(b.xdr());
    };
    let Some(file) = resolve_or(e, c, fh, &mut b, fail) else {
        return Ok(b);
    };
    let Some(dir) = resolve_or(e, c, dfh, &mut b, fail) else {
        return Ok(b);
    };
    let r = e.link(c, &file, &dir, name);
    status(&mut b, r.as_ref().err().copied().unwrap_or(Stat::Ok));
    emit_post_op_attr(b.xdr(), e.attrs(&file).as_ref());
    r.unwrap_or_else(|_| e.wcc(&dir.st, &dir)).emit(b.xdr());
    Ok(b)
}

/// READDIR (§3.3.16) and READDIRPLUS (§3.3.17). The cookie verifier is always zero (cookies
/// are directory offsets, valid as long as the directory exists) and is not checked.
fn readdir(e: &Export, c: &Cred, a: &mut ArgReader<'_>, plus: bool) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let cookie = a.xdr.get_u64().map_err(garbage)?;
    let _verf = a.xdr.get_fixed(VERFSIZE).map_err(garbage)?;
    let dircount = a.xdr.get_u32().map_err(garbage)?;
    let maxcount = if plus {
        a.xdr.get_u32().map_err(garbage)?
    } else {
        dircount
    };
    let mut b = Body::new();
    let Some(dir) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    // Reply size so far: status, post_op_attr, cookieverf, list end, eof.
    let maxcount = (maxcount as usize).min(4 << 20);
    let dircount = (dircount as usize).min(4 << 20);
    let mut size = 4 + 4 + FATTR3_LEN + VERFSIZE + 4 + 4;
    let mut dsize = 0usize;
    let mut entries = crate::wire::xdr::XdrWriter::new();
    let mut n = 0usize;
    let r = e.readdir(c, &dir, cookie, plus, |ino, name, next, plusdata| {
        let base = 4 + 8 + 4 + crate::wire::xdr::padded(name.len()) + 8;
        let mut extra = crate::wire::xdr::XdrWriter::new();
        if plus {
            emit_post_op_attr(&mut extra, plusdata.as_ref().map(|p| &p.0));
            emit_post_op_fh(&mut extra, plusdata.as_ref().map(|p| &p.1[..]));
        }
        if size + base + extra.len() > maxcount || (plus && dsize + base > dircount) {
            return false;
        }
        size += base + extra.len();
        dsize += base;
        entries.put_bool(true);
        entries.put_u64(ino);
        entries.put_opaque(name);
        entries.put_u64(next);
        entries.put_raw(extra.as_slice());
        n += 1;
        true
    });
    match r {
        Ok(eof) if n > 0 || eof => {
            status(&mut b, Stat::Ok);
            emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
            b.xdr().put_fixed(&[0u8; VERFSIZE]);
            b.xdr().put_raw(entries.as_slice());
            b.xdr().put_bool(false);
            b.xdr().put_bool(eof);
        }
        Ok(_) => {
            status(&mut b, Stat::TooSmall);
            emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
        }
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), e.attrs(&dir).as_ref());
        }
    }
    Ok(b)
}

fn fsstat(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    match e.fsstat() {
        Ok(v) => {
            status(&mut b, Stat::Ok);
            emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
            for x in v {
                b.xdr().put_u64(x);
            }
            b.xdr().put_u32(0); // invarsec: the values may change at any time
        }
        Err(s) => {
            status(&mut b, s);
            emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
        }
    }
    Ok(b)
}

/// FSINFO (§3.3.19): rtmax = wtmax = 1 MiB (one RDMA chunk), FSF3_LINK | FSF3_SYMLINK |
/// FSF3_HOMOGENEOUS | FSF3_CANSETTIME.
fn fsinfo(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    status(&mut b, Stat::Ok);
    emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
    let w = b.xdr();
    w.put_u32(MAX_IO); // rtmax
    w.put_u32(MAX_IO); // rtpref
    w.put_u32(4096); // rtmult
    w.put_u32(MAX_IO); // wtmax
    w.put_u32(MAX_IO); // wtpref
    w.put_u32(4096); // wtmult
    w.put_u32(DTPREF); // dtpref
    w.put_u64(i64::MAX as u64); // maxfilesize
    NfsTime {
        seconds: 0,
        nseconds: 1,
    }
    .emit(w); // time_delta
    w.put_u32(0x1 | 0x2 | 0x8 | 0x10);
    Ok(b)
}

fn pathconf(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| emit_post_op_attr(b.xdr(), None)) else {
        return Ok(b);
    };
    status(&mut b, Stat::Ok);
    emit_post_op_attr(b.xdr(), Some(&e.fattr(&o.st)));
    let w = b.xdr();
    w.put_u32(65000); // linkmax
    w.put_u32(255); // name_max
    w.put_bool(true); // no_trunc
    w.put_bool(true); // chown_restricted
    w.put_bool(false); // case_insensitive
    w.put_bool(true); // case_preserving
    Ok(b)
}

fn commit(e: &Export, c: &Cred, a: &mut ArgReader<'_>) -> Res {
    let fh = parse_fh(&mut a.xdr).map_err(garbage)?;
    let _offset = a.xdr.get_u64().map_err(garbage)?;
    let _count = a.xdr.get_u32().map_err(garbage)?;
    let mut b = Body::new();
    let Some(o) = resolve_or(e, c, fh, &mut b, |b| Wcc::default().emit(b.xdr())) else {
        return Ok(b);
    };
    match e.commit(c, &o) {
        Ok(w) => {
            status(&mut b, Stat::Ok);
            w.emit(b.xdr());
            b.xdr().put_fixed(&e.write_verf());
        }
        Err(s) => {
            status(&mut b, s);
            e.wcc(&o.st, &o).emit(b.xdr());
        }
    }
    Ok(b)
}

/// Attributes decoded from a reply (tests, clients).
pub fn parse_fattr(r: &mut crate::wire::xdr::XdrReader<'_>) -> crate::wire::Result<Fattr3> {
    Fattr3::parse(r)
}
