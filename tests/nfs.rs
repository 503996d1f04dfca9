//! NFSv3 over RPC-over-RDMA against a temporary export directory (one per test): every
//! procedure through dpwarp's RPC-over-RDMA client over the in-memory link and kernel TCP
//! loopback; file-handle forgery, `..` and symlink escapes refused; WRITE/COMMIT verifiers; READ
//! at and beyond EOF; a malformed call gets GARBAGE_ARGS and the next call is served; MOUNT v3
//! and the port mapper over ONC RPC/TCP.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

mod common;

use dpwarp::cm::Net;
use dpwarp::nfs::export::{Export, HandleKey};
use dpwarp::nfs::exports::ClientList;
use dpwarp::nfs::mount::{self, mproc, pproc, IPPROTO_TCP};
use dpwarp::nfs::xdr::{access, ftype, parse_post_op_attr, Fattr3, NfsTime, Sattr3, SetTime, Wcc};
use dpwarp::nfs::{proc_, procs, Stat, MOUNT_PROG, MOUNT_V3, NFS_PROG, NFS_V3, PMAP_PROG, PMAP_V2};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient, Reply, ReplyPath};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig, ServerHandle, ServerStats};
use dpwarp::rpc::tcp::{self, TcpClient};
use dpwarp::transport::memlink::{self, LinkFaults};
use dpwarp::wire::oncrpc::{AcceptStat, Auth, AuthSys, ReplyStat};

/// A unique, empty export directory removed at drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "dpwarp-nfs-{tag}-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory entry: name and (READDIRPLUS) handle.
type DirEntry = (String, Option<Vec<u8>>);

struct Nfs {
    c: RdmaClient,
    e: Arc<Export>,
    root: Vec<u8>,
    _srv: RdmaServer,
}

fn root_cred() -> Auth {
    Auth::Sys(AuthSys {
        stamp: 1,
        machinename: b"test"[..].into(),
        uid: 0,
        gid: 0,
        gids: Default::default(),
    })
}

fn user_cred(uid: u32) -> Auth {
    Auth::Sys(AuthSys {
        stamp: 1,
        machinename: b"test"[..].into(),
        uid,
        gid: uid,
        gids: Default::default(),
    })
}

/// An export of `dir` to the client entries `clients` (exports(5) syntax).
fn export_to(dir: &TempDir, clients: &[&str]) -> Arc<Export> {
    Arc::new(
        Export::new(
            &dir.0,
            HandleKey::random(),
            ClientList::parse(clients).unwrap(),
        )
        .unwrap(),
    )
}

/// Every client, writable, root not squashed: the tests call as root unless they say.
const OPEN: &[&str] = &["*(rw,no_root_squash,insecure)"];

fn server(dir: &TempDir) -> (RdmaServer, Arc<Export>) {
    let e = export_to(dir, OPEN);
    let mut reg = Registry::new();
    procs::register(&mut reg, e.clone());
    (RdmaServer::new(reg, ServerConfig::default()), e)
}

fn over_memlink(dir: &TempDir) -> Nfs {
    memlink_to(export_to(dir, OPEN))
}

/// The same over kernel TCP loopback; the listener is stopped by the caller.
fn over_kernel_tcp(dir: &TempDir) -> (Nfs, ServerHandle) {
    let (s, e) = server(dir);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    c.cred = root_cred();
    let root = e.root_handle().unwrap();
    let n = Nfs {
        c,
        e,
        root,
        _srv: s,
    };
    (n, h)
}

fn diropargs(b: &mut Body, fh: &[u8], name: &str) {
    b.xdr().put_opaque(fh);
    b.xdr().put_opaque(name.as_bytes());
}

fn fh_body(fh: &[u8]) -> Body {
    let mut b = Body::new();
    b.xdr().put_opaque(fh);
    b
}

fn success(r: &Reply) -> dpwarp::rpc::client::ReplyReader<'_> {
    r.results().expect("accepted with SUCCESS")
}

impl Nfs {
    fn call(&mut self, p: u32, b: Body) -> Reply {
        self.call_opts(p, b, &CallOpts::default())
    }
    fn call_opts(&mut self, p: u32, b: Body, o: &CallOpts) -> Reply {
        self.c
            .call(NFS_PROG, NFS_V3, p, b, o)
            .expect("call completes")
    }

    fn getattr(&mut self, fh: &[u8]) -> Result<Fattr3, u32> {
        let r = self.call(proc_::GETATTR, fh_body(fh));
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        if st != 0 {
            return Err(st);
        }
        Ok(Fattr3::parse(&mut rr.xdr).unwrap())
    }

    fn lookup(&mut self, dir: &[u8], name: &str) -> Result<(Vec<u8>, Fattr3), u32> {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        let r = self.call(proc_::LOOKUP, b);
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        if st != 0 {
            parse_post_op_attr(&mut rr.xdr).unwrap();
            return Err(st);
        }
        let fh = rr.xdr.get_opaque(64).unwrap().to_vec();
        let a = parse_post_op_attr(&mut rr.xdr).unwrap().unwrap();
        parse_post_op_attr(&mut rr.xdr).unwrap();
        Ok((fh, a))
    }

    /// CREATE/MKDIR/SYMLINK reply: handle or status.
    fn diropres(r: &Reply) -> Result<Vec<u8>, u32> {
        let mut rr = success(r);
        let st = rr.xdr.get_u32().unwrap();
        if st != 0 {
            Wcc::parse(&mut rr.xdr).unwrap();
            return Err(st);
        }
        assert!(rr.xdr.get_bool().unwrap(), "post_op_fh3 present");
        let fh = rr.xdr.get_opaque(64).unwrap().to_vec();
        assert!(parse_post_op_attr(&mut rr.xdr).unwrap().is_some());
        let w = Wcc::parse(&mut rr.xdr).unwrap();
        assert!(w.before.is_some() && w.after.is_some());
        Ok(fh)
    }

    fn create(&mut self, dir: &[u8], name: &str, how: u32) -> Result<Vec<u8>, u32> {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        b.xdr().put_u32(how);
        if how == 2 {
            b.xdr().put_fixed(&[1, 2, 3, 4, 5, 6, 7, 8]);
        } else {
            Sattr3 {
                mode: Some(0o640),
                ..Default::default()
            }
            .emit(b.xdr());
        }
        let r = self.call(proc_::CREATE, b);
        Self::diropres(&r)
    }

    fn mkdir(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>, u32> {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        Sattr3 {
            mode: Some(0o755),
            ..Default::default()
        }
        .emit(b.xdr());
        let r = self.call(proc_::MKDIR, b);
        Self::diropres(&r)
    }

    /// MKNOD (RFC 1813 §3.3.11) of type `ft` with `mode` and, for devices, `rdev`.
    fn mknod(
        &mut self,
        dir: &[u8],
        name: &str,
        ft: u32,
        mode: u32,
        rdev: (u32, u32),
    ) -> Result<Vec<u8>, u32> {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        b.xdr().put_u32(ft);
        Sattr3 {
            mode: Some(mode),
            ..Default::default()
        }
        .emit(b.xdr());
        if ft == ftype::CHR || ft == ftype::BLK {
            b.xdr().put_u32(rdev.0);
            b.xdr().put_u32(rdev.1);
        }
        let r = self.call(proc_::MKNOD, b);
        Self::diropres(&r)
    }

    fn symlink(&mut self, dir: &[u8], name: &str, target: &str) -> Result<Vec<u8>, u32> {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        Sattr3::default().emit(b.xdr());
        b.xdr().put_opaque(target.as_bytes());
        let r = self.call(proc_::SYMLINK, b);
        Self::diropres(&r)
    }

    /// WRITE: (count, committed, verifier) or status.
    fn write(
        &mut self,
        fh: &[u8],
        off: u64,
        data: &[u8],
        stable: u32,
    ) -> Result<(u32, u32, [u8; 8]), u32> {
        let mut b = Body::new();
        b.xdr().put_opaque(fh);
        b.xdr().put_u64(off);
        b.xdr().put_u32(data.len() as u32);
        b.xdr().put_u32(stable);
        b.put_bulk(data.to_vec());
        let r = self.call(proc_::WRITE, b);
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        Wcc::parse(&mut rr.xdr).unwrap();
        if st != 0 {
            return Err(st);
        }
        let n = rr.xdr.get_u32().unwrap();
        let committed = rr.xdr.get_u32().unwrap();
        let v: [u8; 8] = rr.xdr.get_fixed(8).unwrap().try_into().unwrap();
        Ok((n, committed, v))
    }

    /// READ: (data, eof, path) or status. Offers a write chunk of `chunk` bytes if non-zero.
    fn read(
        &mut self,
        fh: &[u8],
        off: u64,
        count: u32,
        chunk: usize,
    ) -> Result<(Vec<u8>, bool, ReplyPath), u32> {
        let mut b = Body::new();
        b.xdr().put_opaque(fh);
        b.xdr().put_u64(off);
        b.xdr().put_u32(count);
        let o = CallOpts {
            write_chunks: if chunk > 0 { vec![chunk] } else { vec![] },
            ..CallOpts::default()
        };
        let r = self.call_opts(proc_::READ, b, &o);
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        parse_post_op_attr(&mut rr.xdr).unwrap();
        if st != 0 {
            return Err(st);
        }
        let n = rr.xdr.get_u32().unwrap();
        let eof = rr.xdr.get_bool().unwrap();
        let d = rr.get_bulk(1 << 20).unwrap().to_vec();
        assert_eq!(n as usize, d.len());
        Ok((d, eof, r.path))
    }

    fn commit(&mut self, fh: &[u8]) -> Result<[u8; 8], u32> {
        let mut b = fh_body(fh);
        b.xdr().put_u64(0);
        b.xdr().put_u32(0);
        let r = self.call(proc_::COMMIT, b);
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        Wcc::parse(&mut rr.xdr).unwrap();
        if st != 0 {
            return Err(st);
        }
        Ok(rr.xdr.get_fixed(8).unwrap().try_into().unwrap())
    }

    /// REMOVE / RMDIR status.
    fn remove(&mut self, dir: &[u8], name: &str, rmdir: bool) -> u32 {
        let mut b = Body::new();
        diropargs(&mut b, dir, name);
        let r = self.call(if rmdir { proc_::RMDIR } else { proc_::REMOVE }, b);
        let mut rr = success(&r);
        let st = rr.xdr.get_u32().unwrap();
        Wcc::parse(&mut rr.xdr).unwrap();
        st
    }

    /// READDIR or READDIRPLUS from cookie 0 until EOF: names (and, for PLUS, handles).
    fn readdir(&mut self, dir: &[u8], plus: bool, count: u32) -> Result<Vec<DirEntry>, u32> {
        let mut out = vec![];
        let mut cookie = 0u64;
        loop {
            let mut b = fh_body(dir);
            b.xdr().put_u64(cookie);
            b.xdr().put_fixed(&[0; 8]);
            b.xdr().put_u32(count);
            if plus {
                b.xdr().put_u32(count * 4);
            }
            let o = CallOpts {
                reply_chunk: Some(1 << 20),
                ..CallOpts::default()
            };
            let r = self.call_opts(
                if plus {
                    proc_::READDIRPLUS
                } else {
                    proc_::READDIR
                },
                b,
                &o,
            );
            let mut rr = success(&r);
            let st = rr.xdr.get_u32().unwrap();
            parse_post_op_attr(&mut rr.xdr).unwrap();
            if st != 0 {
                return Err(st);
            }
            rr.xdr.get_fixed(8).unwrap();
            while rr.xdr.get_bool().unwrap() {
                let _ino = rr.xdr.get_u64().unwrap();
                let name = String::from_utf8(rr.xdr.get_opaque(255).unwrap().to_vec()).unwrap();
                cookie = rr.xdr.get_u64().unwrap();
                let fh = if plus {
                    parse_post_op_attr(&mut rr.xdr).unwrap();
                    if rr.xdr.get_bool().unwrap() {
                        Some(rr.xdr.get_opaque(64).unwrap().to_vec())
                    } else {
                        None
                    }
                } else {
                    None
                };
                out.push((name, fh));
            }
            if rr.xdr.get_bool().unwrap() {
                return Ok(out);
            }
        }
    }
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Every procedure once, with the host directory checked.
fn exercise(n: &mut Nfs, dir: &TempDir) {
    let root = n.root.clone();
    // NULL
    let r = n.call(proc_::NULL, Body::new());
    assert!(r.results().is_ok());
    // GETATTR of the root.
    let a = n.getattr(&root).unwrap();
    assert_eq!(a.ftype, ftype::DIR);
    assert_eq!(a.fileid, std::fs::metadata(&dir.0).unwrap().ino());
    // CREATE (UNCHECKED), then GUARDED on the same name fails with EXIST.
    let f = n.create(&root, "a.bin", 0).unwrap();
    assert_eq!(n.create(&root, "a.bin", 1), Err(Stat::Exist.code()));
    assert_eq!(
        std::fs::metadata(dir.0.join("a.bin")).unwrap().mode() & 0o777,
        0o640
    );
    // EXCLUSIVE: a retransmission with the same verifier succeeds with the same file.
    let x1 = n.create(&root, "x.bin", 2).unwrap();
    let x2 = n.create(&root, "x.bin", 2).unwrap();
    assert_eq!(x1, x2);
    // WRITE 300 KiB by read chunk (FILE_SYNC), READ it back by write chunk.
    let data = pattern(3, 300 * 1024);
    let pulled0 = ServerStats::get(&n._srv.stats().reads_pulled);
    let pooled0 = ServerStats::get(&n._srv.stats().bulk_pooled_pull_bytes);
    let (cnt, committed, _) = n.write(&f, 0, &data, 2).unwrap();
    assert_eq!(
        ServerStats::get(&n._srv.stats().reads_pulled),
        pulled0 + 1,
        "the WRITE data came by read chunk"
    );
    assert_eq!(
        ServerStats::get(&n._srv.stats().bulk_pooled_pull_bytes),
        pooled0 + data.len() as u64,
        "into a buffer of the server's pull pool"
    );
    assert_eq!((cnt as usize, committed), (data.len(), 2));
    assert_eq!(std::fs::read(dir.0.join("a.bin")).unwrap(), data);
    let written0 = ServerStats::get(&n._srv.stats().bytes_written);
    let lent0 = ServerStats::get(&n._srv.stats().bulk_lent_bytes);
    let (d, eof, path) = n.read(&f, 0, data.len() as u32, 1 << 20).unwrap();
    assert_eq!(d, data);
    assert_eq!(
        ServerStats::get(&n._srv.stats().bytes_written),
        written0 + data.len() as u64,
        "the READ data went by write chunk"
    );
    assert_eq!(
        ServerStats::get(&n._srv.stats().bulk_lent_bytes),
        lent0 + data.len() as u64,
        "the READ data was read into a buffer of the export's pool and written from there"
    );
    assert!(eof);
    assert_eq!(
        path,
        ReplyPath::Inline,
        "the data went by write chunk, the rest inline"
    );
    // A small READ inline (no chunk offered), not at EOF.
    let (d, eof, _) = n.read(&f, 10, 100, 0).unwrap();
    assert_eq!((d.as_slice(), eof), (&data[10..110], false));
    // LOOKUP finds it with the same handle.
    let (fh2, attrs) = n.lookup(&root, "a.bin").unwrap();
    assert_eq!(fh2, f);
    assert_eq!(attrs.size, data.len() as u64);
    assert_eq!(n.lookup(&root, "nope"), Err(Stat::NoEnt.code()));
    // SETATTR: truncate and chmod, visible on the host.
    let mut b = fh_body(&f);
    Sattr3 {
        size: Some(1000),
        mode: Some(0o600),
        mtime: SetTime::Client(NfsTime {
            seconds: 1_000_000,
            nseconds: 0,
        }),
        ..Default::default()
    }
    .emit(b.xdr());
    b.xdr().put_bool(false);
    let r = n.call(proc_::SETATTR, b);
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    let w = Wcc::parse(&mut rr.xdr).unwrap();
    assert_eq!(w.after.unwrap().size, 1000);
    let m = std::fs::metadata(dir.0.join("a.bin")).unwrap();
    assert_eq!(
        (m.len(), m.mode() & 0o777, m.mtime()),
        (1000, 0o600, 1_000_000)
    );
    // ACCESS: root gets what it asks on a file except EXECUTE (no x bit).
    let mut b = fh_body(&f);
    b.xdr().put_u32(0x3f);
    let r = n.call(proc_::ACCESS, b);
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    parse_post_op_attr(&mut rr.xdr).unwrap();
    let got = rr.xdr.get_u32().unwrap();
    assert_eq!(got & access::READ, access::READ);
    assert_eq!(got & access::MODIFY, access::MODIFY);
    assert_eq!(got & access::EXECUTE, 0);
    // MKDIR, SYMLINK, READLINK.
    let d = n.mkdir(&root, "sub").unwrap();
    assert!(dir.0.join("sub").is_dir());
    let l = n.symlink(&d, "ln", "../a.bin").unwrap();
    assert_eq!(
        std::fs::read_link(dir.0.join("sub/ln")).unwrap(),
        PathBuf::from("../a.bin")
    );
    let r = n.call(proc_::READLINK, fh_body(&l));
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    parse_post_op_attr(&mut rr.xdr).unwrap();
    assert_eq!(rr.xdr.get_opaque(4096).unwrap(), b"../a.bin");
    // LINK a.bin as sub/hard.
    let mut b = fh_body(&f);
    diropargs(&mut b, &d, "hard");
    let r = n.call(proc_::LINK, b);
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    assert_eq!(
        std::fs::metadata(dir.0.join("sub/hard")).unwrap().ino(),
        std::fs::metadata(dir.0.join("a.bin")).unwrap().ino()
    );
    // RENAME sub/hard -> root/moved.
    let mut b = Body::new();
    diropargs(&mut b, &d, "hard");
    diropargs(&mut b, &root, "moved");
    let r = n.call(proc_::RENAME, b);
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    Wcc::parse(&mut rr.xdr).unwrap();
    Wcc::parse(&mut rr.xdr).unwrap();
    assert!(dir.0.join("moved").exists() && !dir.0.join("sub/hard").exists());
    // A renamed directory: its handle still resolves, its children too.
    let mut b = Body::new();
    diropargs(&mut b, &root, "sub");
    diropargs(&mut b, &root, "sub2");
    let r = n.call(proc_::RENAME, b);
    assert_eq!(success(&r).xdr.get_u32().unwrap(), 0);
    assert_eq!(n.getattr(&d).unwrap().ftype, ftype::DIR);
    assert_eq!(n.getattr(&l).unwrap().ftype, ftype::LNK);
    // READDIR and READDIRPLUS (small count: several calls with cookies).
    for _ in 0..40 {
        n.create(&d, &format!("f{:02}", rand_suffix() % 100_000), 0)
            .ok();
    }
    let want: std::collections::BTreeSet<String> = std::fs::read_dir(dir.0.join("sub2"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .chain([".".to_string(), "..".to_string()])
        .collect();
    let plain = n.readdir(&d, false, 512).unwrap();
    let got: std::collections::BTreeSet<String> = plain.iter().map(|e| e.0.clone()).collect();
    assert_eq!(got, want);
    assert_eq!(plain.len(), want.len(), "no entry twice");
    let plus = n.readdir(&d, true, 1024).unwrap();
    let got: std::collections::BTreeSet<String> = plus.iter().map(|e| e.0.clone()).collect();
    assert_eq!(got, want);
    let lnfh = plus
        .iter()
        .find(|e| e.0 == "ln")
        .unwrap()
        .1
        .clone()
        .unwrap();
    assert_eq!(lnfh, l);
    // READDIR with a count too small for one entry: TOOSMALL.
    let mut b = fh_body(&d);
    b.xdr().put_u64(0);
    b.xdr().put_fixed(&[0; 8]);
    b.xdr().put_u32(50);
    let r = n.call(proc_::READDIR, b);
    assert_eq!(success(&r).xdr.get_u32().unwrap(), Stat::TooSmall.code());
    // REMOVE, RMDIR (not empty, then empty).
    assert_eq!(n.remove(&root, "moved", false), 0);
    assert!(!dir.0.join("moved").exists());
    assert_eq!(n.remove(&root, "sub2", true), Stat::NotEmpty.code());
    assert_eq!(n.remove(&root, "sub2", false), Stat::IsDir.code());
    let e = n.mkdir(&root, "empty").unwrap();
    assert_eq!(n.remove(&root, "empty", true), 0);
    assert_eq!(n.getattr(&e), Err(Stat::Stale.code()), "removed: stale");
    // FSSTAT, FSINFO, PATHCONF.
    let r = n.call(proc_::FSSTAT, fh_body(&root));
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    parse_post_op_attr(&mut rr.xdr).unwrap();
    let tbytes = rr.xdr.get_u64().unwrap();
    assert!(tbytes > 0);
    let r = n.call(proc_::FSINFO, fh_body(&root));
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    parse_post_op_attr(&mut rr.xdr).unwrap();
    let rtmax = rr.xdr.get_u32().unwrap();
    rr.xdr.get_u32().unwrap();
    rr.xdr.get_u32().unwrap();
    let wtmax = rr.xdr.get_u32().unwrap();
    assert_eq!((rtmax, wtmax), (1 << 20, 1 << 20));
    let r = n.call(proc_::PATHCONF, fh_body(&root));
    let mut rr = success(&r);
    assert_eq!(rr.xdr.get_u32().unwrap(), 0);
    parse_post_op_attr(&mut rr.xdr).unwrap();
    rr.xdr.get_u32().unwrap();
    assert_eq!(rr.xdr.get_u32().unwrap(), 255);
    // COMMIT returns the WRITE verifier.
    let (_, _, wv) = n.write(&f, 0, b"hello", 0).unwrap();
    assert_eq!(n.commit(&f).unwrap(), wv);
    // MKNOD of a FIFO (every type: `mknod_makes_every_type`).
    let fifo = n.mknod(&root, "fifo", ftype::FIFO, 0o640, (0, 0)).unwrap();
    assert_eq!(n.getattr(&fifo).unwrap().ftype, ftype::FIFO);
}

#[test]
fn every_procedure_over_memlink() {
    let dir = TempDir::new("mem");
    let mut n = over_memlink(&dir);
    exercise(&mut n, &dir);
}

#[test]
fn every_procedure_over_kernel_tcp() {
    let dir = TempDir::new("tcp");
    let (mut n, h) = over_kernel_tcp(&dir);
    exercise(&mut n, &dir);
    drop(n);
    h.stop();
}

/// The Linux 6.1 NFS/RDMA client's connection as captured (docs/nfs.md): MPA rev 2 enhanced,
/// CRC off, IRD 128 / ORD 0 and RFC 8797 §4 private data `f6ab0e18 01 01 03 03` after them, no
/// CONFIG_RDMA, 128 credits asked. dpwarp accepts it, and WRITE by read chunk and READ by write
/// chunk work (the server's RDMA Reads use the client's IRD).
#[test]
fn linux_client_connection_parameters() {
    let dir = TempDir::new("linuxparams");
    let (s, e) = server(&dir);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let cfg = ClientConfig {
        credits: 128,
        configure: false,
        inline_send: 1024,
        inline_recv: 4096,
        conn: dpwarp::cm::ConnParam {
            private_data: vec![0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03],
            responder_resources: 128,
            initiator_depth: 0,
            crc: false,
            ..dpwarp::cm::ConnParam::default()
        },
        ..ClientConfig::default()
    };
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, cfg).unwrap();
    c.cred = root_cred();
    let root = e.root_handle().unwrap();
    let mut n = Nfs {
        c,
        e,
        root: root.clone(),
        _srv: s,
    };
    assert_eq!(n.getattr(&root).unwrap().ftype, ftype::DIR);
    let f = n.create(&root, "linux", 0).unwrap();
    let data = pattern(9, 128 * 1024);
    let (cnt, _, _) = n.write(&f, 0, &data, 0).unwrap();
    assert_eq!(cnt as usize, data.len());
    let (d, eof, _) = n.read(&f, 0, data.len() as u32, data.len()).unwrap();
    assert_eq!((d, eof), (data, true));
    drop(n);
    h.stop();
}

#[test]
fn forged_and_stale_handles_are_refused() {
    let dir = TempDir::new("forge");
    std::fs::write(dir.0.join("secret"), b"x").unwrap();
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let (fh, _) = n.lookup(&root, "secret").unwrap();
    // Flip each byte in turn: never accepted.
    for i in 0..fh.len() {
        let mut f = fh.clone();
        f[i] ^= 0x01;
        assert_eq!(n.getattr(&f), Err(Stat::BadHandle.code()), "byte {i}");
    }
    // Wrong length, empty.
    assert_eq!(n.getattr(&fh[..fh.len() - 1]), Err(Stat::BadHandle.code()));
    assert_eq!(n.getattr(&[]), Err(Stat::BadHandle.code()));
    // A handle of another server instance (another secret) for the same file.
    let other = Export::new(
        &dir.0,
        HandleKey::random(),
        ClientList::parse(OPEN).unwrap(),
    )
    .unwrap();
    let theirs = other.root_handle().unwrap();
    assert_eq!(n.getattr(&theirs), Err(Stat::BadHandle.code()));
    // A handle for a file replaced behind the server's back: stale.
    std::fs::remove_file(dir.0.join("secret")).unwrap();
    assert_eq!(n.getattr(&fh), Err(Stat::Stale.code()));
    std::fs::write(dir.0.join("secret"), b"new").unwrap();
    let r = n.getattr(&fh);
    assert!(
        r == Err(Stat::Stale.code()),
        "a new file at the old path is not the old handle's object: {r:?}"
    );
    // READ opens a regular file's handle for reading at once (Export::resolve_for_read): by a
    // replaced file's handle it is stale too, and a FIFO put at the path (no writer: a
    // blocking open would wait for good) is not waited on and is not read.
    assert_eq!(n.read(&fh, 0, 10, 0), Err(Stat::Stale.code()));
    let (fresh, _) = n.lookup(&root, "secret").unwrap();
    assert_eq!(n.read(&fresh, 0, 10, 0).unwrap().0, b"new");
    std::fs::remove_file(dir.0.join("secret")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.0.join("secret"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    assert_eq!(n.read(&fresh, 0, 10, 0), Err(Stat::Stale.code()));
    // Sanity: the export root handle still works.
    assert!(n.getattr(&root).is_ok());
    let _ = n.e.root_path();
}

#[test]
fn dotdot_and_symlink_escapes_are_refused() {
    let outside = TempDir::new("outside");
    std::fs::write(outside.0.join("passwd"), b"outside data").unwrap();
    let dir = TempDir::new("escape");
    std::fs::create_dir(dir.0.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside.0, dir.0.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.0.join("passwd"), dir.0.join("d/pw")).unwrap();
    std::os::unix::fs::symlink("../..", dir.0.join("d/up")).unwrap();
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    // `..` of the root is the root.
    let (up, a) = n.lookup(&root, "..").unwrap();
    assert_eq!(up, root);
    assert_eq!(a.fileid, std::fs::metadata(&dir.0).unwrap().ino());
    let (d, _) = n.lookup(&root, "d").unwrap();
    let (dd, _) = n.lookup(&d, "..").unwrap();
    assert_eq!(dd, root);
    // Names with a slash are refused.
    assert!(n.lookup(&root, "d/../..").is_err());
    assert!(n.lookup(&root, "../x").is_err());
    // A symlink to a directory outside: LOOKUP gives the symlink itself, which is not a
    // directory, so nothing can be looked up through it.
    let (out, a) = n.lookup(&root, "out").unwrap();
    assert_eq!(a.ftype, ftype::LNK);
    assert_eq!(n.lookup(&out, "passwd"), Err(Stat::NotDir.code()));
    // A symlink to a file outside: READ refuses it (not a regular file), never follows it.
    let (pw, _) = n.lookup(&d, "pw").unwrap();
    assert_eq!(n.read(&pw, 0, 100, 0), Err(Stat::Inval.code()));
    assert_eq!(n.write(&pw, 0, b"pwned", 2), Err(Stat::Inval.code()));
    assert_eq!(
        std::fs::read(outside.0.join("passwd")).unwrap(),
        b"outside data"
    );
    let (up, _) = n.lookup(&d, "up").unwrap();
    assert_eq!(n.lookup(&up, ".."), Err(Stat::NotDir.code()));
    // CREATE through a symlink name: refused, nothing written outside.
    assert!(n.create(&d, "pw", 0).is_err());
    assert_eq!(
        std::fs::read(outside.0.join("passwd")).unwrap(),
        b"outside data"
    );
    // A directory swapped for a symlink behind the server's back: the old handle's path now
    // meets a symlink, which resolution refuses (stale), never followed.
    std::fs::create_dir(dir.0.join("e")).unwrap();
    let (e, _) = n.lookup(&root, "e").unwrap();
    std::fs::remove_dir(dir.0.join("e")).unwrap();
    std::os::unix::fs::symlink(&outside.0, dir.0.join("e")).unwrap();
    assert_eq!(n.lookup(&e, "passwd"), Err(Stat::Stale.code()));
}

#[test]
fn write_commit_verifier_and_read_at_eof() {
    let dir = TempDir::new("verf");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let f = n.create(&root, "v", 0).unwrap();
    let (c0, s0, v0) = n.write(&f, 0, &pattern(1, 4096), 0).unwrap();
    assert_eq!((c0, s0), (4096, 0), "UNSTABLE answered UNSTABLE");
    let (_, s1, v1) = n.write(&f, 4096, &pattern(2, 4096), 1).unwrap();
    assert_eq!(s1, 1, "DATA_SYNC");
    let (_, s2, v2) = n.write(&f, 8192, &pattern(3, 10), 2).unwrap();
    assert_eq!(s2, 2, "FILE_SYNC");
    assert_eq!((v0, v1), (v2, v2), "one verifier per server instance");
    assert_eq!(n.commit(&f).unwrap(), v0);
    // Another server instance (a restart) has another verifier.
    let dir2 = TempDir::new("verf2");
    let mut n2 = over_memlink(&dir2);
    let r2 = n2.root.clone();
    let g = n2.create(&r2, "v", 0).unwrap();
    let (_, _, w) = n2.write(&g, 0, b"x", 0).unwrap();
    assert_ne!(w, v0, "a restarted server's verifier differs");
    // READ at and beyond EOF: empty data, eof true.
    let size = 8192 + 10;
    let (d, eof, _) = n.read(&f, size, 100, 0).unwrap();
    assert!(d.is_empty() && eof);
    let (d, eof, _) = n.read(&f, size + 1_000_000, 100, 4096).unwrap();
    assert!(d.is_empty() && eof);
    let (d, eof, _) = n.read(&f, size - 5, 100, 0).unwrap();
    assert_eq!((d.len(), eof), (5, true));
    // The same from a pool's buffer (a count of 32 KiB or more), by write chunk and inline:
    // only the 5 bytes read go, whatever the buffer held before.
    let full = n.read(&f, 0, 64 * 1024, 1 << 20).unwrap();
    assert_eq!((full.0.len(), full.1), (size as usize, true));
    let (d, eof, _) = n.read(&f, size - 5, 64 * 1024, 1 << 20).unwrap();
    assert_eq!((&d[..], eof), (&pattern(3, 10)[5..], true));
    let (d, eof, _) = n.read(&f, size - 5, 64 * 1024, 0).unwrap();
    assert_eq!((&d[..], eof), (&pattern(3, 10)[5..], true));
    assert_eq!(ServerStats::get(&n._srv.stats().bulk_lent_bytes), size + 5);
    // WRITE with count above the data: INVAL; on a directory: ISDIR.
    let mut b = Body::new();
    b.xdr().put_opaque(&f);
    b.xdr().put_u64(0);
    b.xdr().put_u32(100);
    b.xdr().put_u32(0);
    b.put_bulk(vec![1; 10]);
    let r = n.call(proc_::WRITE, b);
    assert_eq!(success(&r).xdr.get_u32().unwrap(), Stat::Inval.code());
    assert_eq!(n.write(&root, 0, b"x", 0), Err(Stat::IsDir.code()));
}

/// [`over_kernel_tcp`] (its listener, for the caller to stop) or [`over_memlink`].
fn over(dir: &TempDir, kernel_tcp: bool) -> (Nfs, Option<ServerHandle>) {
    if kernel_tcp {
        let (n, h) = over_kernel_tcp(dir);
        (n, Some(h))
    } else {
        (over_memlink(dir), None)
    }
}

fn nowait(n: &Nfs) -> u64 {
    ServerStats::get(&n._srv.stats().calls_nowait)
}

/// (octets RDMA-Written from the connection's registered result buffers, from buffers made
/// for one reply).
fn written_from(n: &Nfs) -> (u64, u64) {
    let st = n._srv.stats();
    (
        ServerStats::get(&st.bulk_result_buf_bytes),
        ServerStats::get(&st.bulk_staged_bytes),
    )
}

/// Descriptors of this process open on the file `path`, removed or not (the server runs in
/// this process; the link of a removed file's descriptor reads "PATH (deleted)").
fn fds_on(path: &std::path::Path) -> usize {
    open_flags_on(path).len()
}

/// The open flags (`/proc/self/fdinfo`) of each descriptor of this process on `path`, also
/// once the file was removed.
fn open_flags_on(path: &std::path::Path) -> Vec<u32> {
    let p = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| {
                let t = t.to_string_lossy();
                t == p || t == format!("{p} (deleted)")
            })
        })
        .filter_map(|e| {
            let info = std::fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        })
        .collect()
}

/// Small READs (under 32 KiB) of a file whose path is in the kernel's lookup cache (or that a
/// READ opened before) and whose bytes are in the page cache are answered on the
/// connection's own thread without the handler pool
/// (`calls_nowait`), with the same bytes and EOF flags as the pool's; bytes dropped from the
/// page cache, a caller without read permission, a large READ and a removed file go the
/// waiting way (with the same statuses as before), and a removed file's descriptor is not
/// kept. Over the in-memory link and kernel TCP.
#[test]
fn reads_of_cached_bytes_are_answered_at_once() {
    for over_tcp in [false, true] {
        let dir = TempDir::new(if over_tcp { "nowait-tcp" } else { "nowait-mem" });
        let (mut n, h) = over(&dir, over_tcp);
        let root = n.root.clone();
        let f = n.create(&root, "c", 0).unwrap();
        let size = 256 * 1024 + 10;
        let data = pattern(9, size);
        n.write(&f, 0, &data, 2).unwrap();
        // The first READ opens the file at once (its path is in the kernel's lookup cache:
        // CREATE just made it); the rest find it open.
        let before = nowait(&n);
        assert_eq!(n.read(&f, 0, 4096, 0).unwrap().0, data[..4096]);
        assert_eq!(
            nowait(&n),
            before + 1,
            "the first READ opened the file at once"
        );
        assert_eq!(n.read(&f, 100, 4096, 0).unwrap().0, data[100..4196]);
        let (from_bufs, from_own) = written_from(&n);
        let (d, eof, _) = n.read(&f, 8000, 30_000, 30_000).unwrap();
        assert_eq!(
            (&d[..], eof),
            (&data[8000..38_000], false),
            "by write chunk"
        );
        // Read into one of the connection's registered result buffers and RDMA-Written from
        // there: no buffer allocated and registered for the one reply.
        assert_eq!(written_from(&n), (from_bufs + 30_000, from_own));
        let (d, eof, _) = n.read(&f, size as u64 - 5, 100, 0).unwrap();
        assert_eq!((&d[..], eof), (&data[size - 5..], true));
        let (d, eof, _) = n.read(&f, size as u64 + 7, 100, 0).unwrap();
        assert!(d.is_empty() && eof);
        assert_eq!(nowait(&n) - before, 5, "all five answered at once");
        // A large READ (a pool buffer's) still goes to the pool: its copy would hold up the
        // connection's thread.
        let (d, eof, _) = n.read(&f, 0, 1 << 20, 1 << 20).unwrap();
        assert_eq!(
            (d == data, eof),
            (true, true),
            "a pool buffer's READ, to EOF"
        );
        assert_eq!(nowait(&n) - before, 5);
        // Out of the page cache: the READ waits on the pool, and brings the bytes back.
        // (The kernel may keep a page a moment longer than asked: tried a few times.)
        let path = dir.0.join("c");
        let file = std::fs::File::open(&path).unwrap();
        let pooled = (0..20).any(|_| {
            common::evict_from_page_cache(&path);
            let k = nowait(&n);
            assert_eq!(n.read(&f, 8192, 4096, 0).unwrap().0, data[8192..12288]);
            nowait(&n) == k
        });
        assert!(
            pooled,
            "bytes dropped from the page cache were never read on the pool"
        );
        let k = nowait(&n);
        assert_eq!(n.read(&f, 8192, 4096, 0).unwrap().0, data[8192..12288]);
        assert_eq!(nowait(&n), k + 1);
        // Another caller without the right to read: refused as before, not at once.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let k = nowait(&n);
        n.c.cred = user_cred(4242);
        assert_eq!(n.read(&f, 0, 10, 0), Err(Stat::Acces.code()));
        n.c.cred = root_cred();
        assert_eq!(nowait(&n), k);
        // Removed through NFS: stale, and no descriptor left holding its blocks.
        drop(file);
        assert_eq!(
            fds_on(&path),
            2,
            "the descriptors kept for the calls answered at once (O_PATH, and for reading)"
        );
        assert_eq!(n.remove(&root, "c", false), 0);
        assert_eq!(n.read(&f, 0, 10, 0), Err(Stat::Stale.code()));
        assert_eq!(fds_on(&path), 0, "the removed file's descriptor was closed");
        drop(n);
        if let Some(h) = h {
            h.stop();
        }
    }
}

/// ACCESS bits granted to the caller, or the status.
fn access_of(n: &mut Nfs, fh: &[u8], asked: u32) -> Result<u32, u32> {
    let mut b = fh_body(fh);
    b.xdr().put_u32(asked);
    let r = n.call(proc_::ACCESS, b);
    let mut rr = success(&r);
    let st = rr.xdr.get_u32().unwrap();
    parse_post_op_attr(&mut rr.xdr).unwrap();
    if st != 0 {
        return Err(st);
    }
    Ok(rr.xdr.get_u32().unwrap())
}

/// GETATTR, ACCESS and LOOKUP of objects whose paths are in the kernel's lookup cache are
/// answered on the connection's own thread (`calls_nowait`) with the object's attributes, the
/// caller's rights and its handle; a name that is not there, ".", a directory the caller may
/// not search, a handle whose object went away and a forged one get their NOENT, ACCES, STALE
/// or BADHANDLE from the pool as before. Over the in-memory link and kernel TCP.
#[test]
fn metadata_calls_are_answered_at_once() {
    for over_tcp in [false, true] {
        let dir = TempDir::new(if over_tcp { "attr-tcp" } else { "attr-mem" });
        let (mut n, h) = over(&dir, over_tcp);
        let root = n.root.clone();
        let f = n.create(&root, "g", 0).unwrap();
        n.write(&f, 0, &pattern(3, 5000), 2).unwrap();
        let path = dir.0.join("g");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        let k = nowait(&n);
        let a = n.getattr(&f).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((a.size, a.mode, a.fileid), (5000, 0o640, m.ino()));
        let ra = n.getattr(&root).unwrap();
        assert_eq!(ra.ftype, ftype::DIR);
        assert_eq!(
            access_of(&mut n, &f, 0x3f),
            Ok(access::READ | access::MODIFY | access::EXTEND),
            "root: all but EXECUTE"
        );
        n.c.cred = user_cred(4242);
        assert_eq!(
            access_of(&mut n, &f, 0x3f),
            Ok(0),
            "others: nothing on 0640"
        );
        n.c.cred = root_cred();
        // LOOKUP of a cached name: the same handle and attributes as CREATE gave.
        let (fh, la) = n.lookup(&root, "g").unwrap();
        assert_eq!((fh, la.fileid, la.size), (f.clone(), m.ino(), 5000));
        assert_eq!(nowait(&n) - k, 5, "answered at once");
        // A name that is not there, "." and a directory the caller may not search: the
        // pool's answers.
        let k = nowait(&n);
        assert_eq!(
            n.lookup(&root, "nothere").map(|_| ()),
            Err(Stat::NoEnt.code())
        );
        assert_eq!(n.lookup(&root, ".").unwrap().0, root);
        let sub = n.mkdir(&root, "private").unwrap();
        n.create(&sub, "inside", 0).unwrap();
        std::fs::set_permissions(
            dir.0.join("private"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        n.c.cred = user_cred(4242);
        assert_eq!(
            n.lookup(&sub, "inside").map(|_| ()),
            Err(Stat::Acces.code())
        );
        n.c.cred = root_cred();
        assert_eq!(nowait(&n), k, "none of those at once");
        // Gone behind the server's back, and forged: the pool's answers.
        std::fs::remove_file(&path).unwrap();
        let k = nowait(&n);
        assert_eq!(n.getattr(&f), Err(Stat::Stale.code()));
        assert_eq!(access_of(&mut n, &f, 1), Err(Stat::Stale.code()));
        let mut forged = f.clone();
        forged[30] ^= 1;
        assert_eq!(n.getattr(&forged), Err(Stat::BadHandle.code()));
        assert_eq!(nowait(&n), k, "none of those at once");
        drop(n);
        if let Some(h) = h {
            h.stop();
        }
    }
}

/// A handle's MAC is checked once for a kept object: the GETATTRs and READs answered at once
/// after the first find the object by the handle's octets. A handle differing in any octet
/// (the MAC, the kernel handle) is checked again and refused, before and after; the object
/// removed takes its entry with it (STALE from the pool, checked again).
#[test]
fn a_kept_objects_handle_is_checked_once_and_forgeries_still_fail() {
    let dir = TempDir::new("macs");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let f = n.create(&root, "m", 0).unwrap();
    n.write(&f, 0, &pattern(5, 8192), 2).unwrap();
    n.getattr(&f).unwrap();
    let k = nowait(&n);
    let checked = n.e.handles_checked();
    for i in 0..20u64 {
        assert_eq!(n.getattr(&f).unwrap().size, 8192);
        assert_eq!(
            n.read(&f, i * 100, 512, 0).unwrap().0,
            pattern(5, 8192)[i as usize * 100..][..512]
        );
    }
    assert_eq!(nowait(&n) - k, 40, "all answered at once");
    assert!(
        n.e.handles_checked() - checked <= 1,
        "40 calls on one kept object computed {} MACs",
        n.e.handles_checked() - checked
    );
    for at in [f.len() - 1, f.len() - 20, 20] {
        let mut forged = f.clone();
        forged[at] ^= 0x40;
        let before = n.e.handles_checked();
        assert_eq!(
            n.getattr(&forged),
            Err(Stat::BadHandle.code()),
            "octet {at}"
        );
        assert!(n.e.handles_checked() > before, "octet {at}: not checked");
    }
    assert_eq!(n.getattr(&f).unwrap().size, 8192);
    std::fs::remove_file(dir.0.join("m")).unwrap();
    assert_eq!(n.getattr(&f), Err(Stat::Stale.code()));
    let before = n.e.handles_checked();
    assert_eq!(n.getattr(&f), Err(Stat::Stale.code()));
    assert!(
        n.e.handles_checked() > before,
        "a removed object's handle is checked again"
    );
}

/// Descriptors of this process open for writing on `path` (`/proc/self/fdinfo` flags).
fn writers_of(path: &std::path::Path) -> usize {
    open_flags_on(path)
        .into_iter()
        .filter(|f| f & libc::O_ACCMODE as u32 != 0)
        .count()
}

/// An UNSTABLE WRITE stream opens its file once: the descriptor stays with the kept object
/// across WRITEs (one, however many WRITEs), and the client's COMMIT gives it up (none after).
/// The data written through it is all there, and a WRITE after the COMMIT opens it again.
#[test]
fn a_write_stream_keeps_one_descriptor_until_commit() {
    let dir = TempDir::new("wfd");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let f = n.create(&root, "w", 0).unwrap();
    let path = dir.0.join("w");
    assert_eq!(writers_of(&path), 0);
    for i in 0..16u64 {
        n.write(&f, i * 4096, &pattern(i as u8, 4096), 0).unwrap();
        assert_eq!(writers_of(&path), 1, "after WRITE {i}");
    }
    n.commit(&f).unwrap();
    assert_eq!(
        writers_of(&path),
        0,
        "COMMIT leaves the file open for writing"
    );
    let want: Vec<u8> = (0..16u8).flat_map(|i| pattern(i, 4096)).collect();
    assert_eq!(std::fs::read(&path).unwrap(), want);
    n.write(&f, 0, &pattern(99, 100), 0).unwrap();
    assert_eq!(writers_of(&path), 1);
    n.commit(&f).unwrap();
    assert_eq!(std::fs::read(&path).unwrap()[..100], pattern(99, 100)[..]);
}

/// Attributes taken for a call answered at once are used again for `set_attr_cache`'s time:
/// a change beside the export (a local truncate) is not seen meanwhile, one through the export
/// (WRITE, SETATTR, REMOVE by another name's LINK) is seen by the very next call, also by the
/// READ answered at once; with the cache off a local change is seen at once, and with a short
/// one after it ran out.
#[test]
fn cached_attributes_never_hide_a_change_made_through_the_export() {
    let len = |n: &mut Nfs, f: &[u8]| n.getattr(f).unwrap().size;
    // A new export of `dir` with `keep` as its attribute cache, and its file "f" of 5000
    // octets, written and read (kept open, its attributes cached by a GETATTR at once).
    let with_cache = |dir: &TempDir, keep: Duration| {
        let mut e = Export::new(
            &dir.0,
            HandleKey::random(),
            ClientList::parse(OPEN).unwrap(),
        )
        .unwrap();
        e.set_attr_cache(keep);
        let mut n = memlink_to(Arc::new(e));
        let root = n.root.clone();
        let f = n.create(&root, "f", 0).unwrap();
        n.write(&f, 0, &pattern(1, 5000), 2).unwrap();
        n.read(&f, 0, 4096, 0).unwrap();
        assert_eq!(len(&mut n, &f), 5000);
        (n, f)
    };
    // The file cut to 100 octets beside the export.
    let truncate_beside = |dir: &TempDir| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.0.join("f"))
            .unwrap()
            .set_len(100)
            .unwrap()
    };
    // An hour: only changes through the export end it.
    let dir = TempDir::new("acache");
    let (mut n, f) = with_cache(&dir, Duration::from_secs(3600));
    let root = n.root.clone();
    let k = nowait(&n);
    assert_eq!(len(&mut n, &f), 5000);
    truncate_beside(&dir);
    assert_eq!(
        len(&mut n, &f),
        5000,
        "a local change is not seen while cached"
    );
    n.write(&f, 6000, &pattern(2, 10), 0).unwrap();
    assert_eq!(
        len(&mut n, &f),
        6010,
        "the export's own WRITE is seen at once"
    );
    assert_eq!(n.chmod(&f, 0o604), 0);
    assert_eq!(n.getattr(&f).unwrap().mode, 0o604, "and its SETATTR");
    // Beyond the size cached before the WRITE, within the one it made.
    let (d, eof, _) = n.read(&f, 5500, 100, 0).unwrap();
    assert_eq!(
        (d.len(), eof),
        (100, false),
        "a READ sees the size the WRITE made"
    );
    let link = n.call(proc_::LINK, {
        let mut b = fh_body(&f);
        diropargs(&mut b, &root, "g");
        b
    });
    assert_eq!(success(&link).xdr.get_u32().unwrap(), 0);
    assert_eq!(n.getattr(&f).unwrap().nlink, 2, "and its LINK");
    assert!(nowait(&n) - k >= 5, "GETATTRs answered at once");
    drop(n);
    // Off: every call answered at once takes the attributes again.
    let dir = TempDir::new("acache0");
    let (mut n, f) = with_cache(&dir, Duration::ZERO);
    truncate_beside(&dir);
    assert_eq!(
        len(&mut n, &f),
        100,
        "no cache: a local change is seen at once"
    );
    drop(n);
    // Short: a local change is seen once the time ran out.
    let dir = TempDir::new("acache50");
    let (mut n, f) = with_cache(&dir, Duration::from_millis(50));
    truncate_beside(&dir);
    thread::sleep(Duration::from_millis(120));
    assert_eq!(len(&mut n, &f), 100, "seen after the cache time");
}

/// A READ by a caller other than the file's owner asks the kernel (with the caller's
/// credentials) once: the READs answered at once after it, by the same caller on the same file
/// state, do not ask again. Any change of the file's mode (beside the export or through it)
/// and another caller ask again, and the kernel's "no" is the answer.
#[test]
fn a_readers_permission_is_asked_once_per_file_state() {
    let dir = TempDir::new("rgrant");
    let path = dir.0.join("shared");
    std::fs::write(&path, pattern(5, 8192)).unwrap();
    std::os::unix::fs::chown(&path, Some(1000), Some(1000)).unwrap();
    let chmod = |m: u32| {
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    chmod(0o644);
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let (f, _) = n.lookup(&root, "shared").unwrap();
    let checks = |n: &Nfs| n.e.read_access_checks();
    n.c.cred = user_cred(4242);
    for _ in 0..2 {
        assert_eq!(n.read(&f, 0, 4096, 0).unwrap().0, pattern(5, 8192)[..4096]);
    }
    let (k, at_once) = (checks(&n), nowait(&n));
    for i in 0..8u64 {
        let off = (i % 2) * 4096;
        let (d, _, _) = n.read(&f, off, 4096, 0).unwrap();
        assert_eq!(d, pattern(5, 8192)[off as usize..off as usize + 4096]);
    }
    assert_eq!(nowait(&n) - at_once, 8, "answered at once");
    assert_eq!(
        checks(&n),
        k,
        "the kernel's answer reused for the same caller and file"
    );
    // Beside the export: the mode changes, the kernel is asked, and says no.
    chmod(0o600);
    assert_eq!(n.read(&f, 0, 4096, 0).map(|_| ()), Err(Stat::Acces.code()));
    chmod(0o644);
    let k = checks(&n);
    n.read(&f, 0, 4096, 0).unwrap();
    assert!(checks(&n) > k, "asked again after the mode changed");
    // Another caller is asked for on its own.
    n.c.cred = user_cred(4343);
    let k = checks(&n);
    n.read(&f, 0, 4096, 0).unwrap();
    assert!(checks(&n) > k, "another caller is asked for");
    // Through the export: SETATTR takes "other" read away.
    n.c.cred = root_cred();
    assert_eq!(n.chmod(&f, 0o640), 0);
    for who in [4242, 4343] {
        n.c.cred = user_cred(who);
        assert_eq!(
            n.read(&f, 0, 4096, 0).map(|_| ()),
            Err(Stat::Acces.code()),
            "uid {who} after SETATTR mode 0640"
        );
    }
}

/// Large READs of one file, many in flight at once (each into a write chunk), in three orders:
/// each reply carries its own range's bytes, all from buffers of the export's READ pool
/// (`bulk_lent_bytes`), and the pool makes no more buffers than READs were in flight. Over the
/// in-memory link and kernel TCP (where a QP's own thread gathers each RDMA Write's bytes while
/// the next READs are served: a buffer lent again too early shows another range's bytes).
#[test]
fn pipelined_large_reads_from_the_pool_get_their_own_bytes() {
    const PARTS: usize = 10;
    const PART: usize = 256 * 1024;
    let dir = TempDir::new("pool");
    let data = pattern(9, PARTS * PART);
    std::fs::write(dir.0.join("big"), &data).unwrap();
    let reads = |n: &mut Nfs| {
        let root = n.root.clone();
        let (fh, _) = n.lookup(&root, "big").unwrap();
        let lent0 = ServerStats::get(&n._srv.stats().bulk_lent_bytes);
        let opts = CallOpts {
            write_chunks: vec![PART],
            ..CallOpts::default()
        };
        for round in 0..3 {
            let mut xids = Vec::new();
            for i in 0..PARTS {
                let part = (i * 3 + round) % PARTS;
                let mut b = Body::new();
                b.xdr().put_opaque(&fh);
                b.xdr().put_u64((part * PART) as u64);
                b.xdr().put_u32(PART as u32);
                let xid = n.c.submit(NFS_PROG, NFS_V3, proc_::READ, b, &opts).unwrap();
                xids.push((xid, part));
            }
            for (xid, part) in xids {
                let r = n.c.wait(xid).unwrap();
                let mut rr = success(&r);
                assert_eq!(rr.xdr.get_u32().unwrap(), 0, "NFS3_OK");
                parse_post_op_attr(&mut rr.xdr).unwrap();
                assert_eq!(rr.xdr.get_u32().unwrap() as usize, PART);
                let _eof = rr.xdr.get_bool().unwrap();
                let d = rr.get_bulk(PART).unwrap().to_vec();
                assert!(
                    d == data[part * PART..(part + 1) * PART],
                    "round {round}: the READ of part {part} returned other bytes"
                );
            }
        }
        assert_eq!(
            ServerStats::get(&n._srv.stats().bulk_lent_bytes) - lent0,
            (3 * PARTS * PART) as u64
        );
        let made = n.e.read_pool().buffers();
        assert!(
            (1..=PARTS).contains(&made),
            "{made} pool buffers for {PARTS} READs in flight"
        );
    };
    let mut n = over_memlink(&dir);
    reads(&mut n);
    let (mut n, h) = over_kernel_tcp(&dir);
    reads(&mut n);
    drop(n);
    h.stop();
}

#[test]
fn malformed_call_gets_garbage_args_and_the_next_is_served() {
    let dir = TempDir::new("garbage");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    // A truncated GETATTR (length word says 44, nothing follows).
    let mut b = Body::new();
    b.xdr().put_u32(44);
    let r = n.call(proc_::GETATTR, b);
    assert_eq!(
        r.header.stat,
        ReplyStat::Accepted {
            verf: Auth::None,
            stat: AcceptStat::GarbageArgs
        }
    );
    // A handle longer than NFS3_FHSIZE.
    let mut b = Body::new();
    b.xdr().put_opaque(&[0u8; 65]);
    let r = n.call(proc_::GETATTR, b);
    assert!(matches!(
        r.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    // A bad stable_how.
    let mut b = fh_body(&root);
    b.xdr().put_u64(0);
    b.xdr().put_u32(1);
    b.xdr().put_u32(7);
    b.xdr().put_opaque(b"x");
    let r = n.call(proc_::WRITE, b);
    assert!(matches!(
        r.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    // The connection goes on.
    assert_eq!(n.getattr(&root).unwrap().ftype, ftype::DIR);
    // NFSACL and NLM are not served: PROG_UNAVAIL.
    for prog in [100227, 100021] {
        let r =
            n.c.call(prog, 3, 0, Body::new(), &CallOpts::default())
                .unwrap();
        assert!(matches!(
            r.header.stat,
            ReplyStat::Accepted {
                stat: AcceptStat::ProgUnavail,
                ..
            }
        ));
    }
}

#[test]
fn credentials_are_checked() {
    let dir = TempDir::new("cred");
    std::fs::write(dir.0.join("private"), b"root only").unwrap();
    std::fs::set_permissions(
        dir.0.join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let (p, _) = n.lookup(&root, "private").unwrap();
    n.c.cred = user_cred(1234);
    assert_eq!(n.read(&p, 0, 10, 0), Err(Stat::Acces.code()));
    assert_eq!(n.write(&p, 0, b"x", 2), Err(Stat::Acces.code()));
    // The root directory is 0755 root-owned (made by the test as root): no CREATE for uid 1234.
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(n.create(&root, "mine", 0), Err(Stat::Acces.code()));
    // A world-writable directory: the new file belongs to the caller.
    std::fs::create_dir(dir.0.join("pub")).unwrap();
    std::fs::set_permissions(
        dir.0.join("pub"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let (pubd, _) = n.lookup(&root, "pub").unwrap();
    n.create(&pubd, "mine", 0).unwrap();
    let m = std::fs::metadata(dir.0.join("pub/mine")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 1234));
    assert_eq!(
        m.mode() & 0o777,
        0o640,
        "the mode asked for, not narrowed by a umask"
    );
    // An UNCHECKED CREATE of someone else's existing file takes nothing over.
    std::fs::write(dir.0.join("pub/theirs"), b"data").unwrap();
    n.create(&pubd, "theirs", 0).unwrap();
    let m = std::fs::metadata(dir.0.join("pub/theirs")).unwrap();
    assert_eq!((m.uid(), m.len()), (0, 4));
}

#[test]
fn mount_and_portmapper_over_tcp() {
    let dir = TempDir::new("mount");
    let e = export_to(&dir, OPEN);
    let mut mreg = Registry::new();
    mount::register_mount(&mut mreg, e.clone(), "/export");
    let mh = tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), mreg).unwrap();
    let mut preg = Registry::new();
    mount::register_pmap(&mut preg, mount::pmap_table(mh.addr.port(), 0));
    let ph = tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), preg).unwrap();

    // rpcbind: GETPORT MOUNT v3/TCP.
    let mut pc = TcpClient::connect(ph.addr, 1).unwrap();
    let r = pc
        .call(PMAP_PROG, PMAP_V2, pproc::NULL, &Body::new())
        .unwrap();
    assert!(r.results().is_ok());
    let mut b = Body::new();
    for v in [MOUNT_PROG, MOUNT_V3, IPPROTO_TCP, 0] {
        b.xdr().put_u32(v);
    }
    let r = pc.call(PMAP_PROG, PMAP_V2, pproc::GETPORT, &b).unwrap();
    assert_eq!(
        r.results().unwrap().xdr.get_u32().unwrap(),
        u32::from(mh.addr.port())
    );
    // Not registered: port 0.
    let mut b = Body::new();
    for v in [100021, 4, IPPROTO_TCP, 0] {
        b.xdr().put_u32(v);
    }
    let r = pc.call(PMAP_PROG, PMAP_V2, pproc::GETPORT, &b).unwrap();
    assert_eq!(r.results().unwrap().xdr.get_u32().unwrap(), 0);
    // rpcbind v3/v4 is not served: PROG_MISMATCH 2..2 (the client falls back to v2).
    let r = pc.call(PMAP_PROG, 4, 0, &Body::new()).unwrap();
    assert!(matches!(
        r.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::ProgMismatch { low: 2, high: 2 },
            ..
        }
    ));

    // MOUNT: NULL, MNT (with and without a trailing slash), unknown path, EXPORT, UMNT.
    let mut mc = TcpClient::connect(mh.addr, 1).unwrap();
    assert!(mc
        .call(MOUNT_PROG, MOUNT_V3, mproc::NULL, &Body::new())
        .unwrap()
        .results()
        .is_ok());
    for path in ["/export", "/export/"] {
        let mut b = Body::new();
        b.xdr().put_opaque(path.as_bytes());
        let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
        let mut rr = r.results().unwrap();
        assert_eq!(rr.xdr.get_u32().unwrap(), 0);
        let fh = rr.xdr.get_opaque(64).unwrap();
        assert_eq!(fh, e.root_handle().unwrap().as_slice());
        let n = rr.xdr.get_u32().unwrap();
        let flavors: Vec<u32> = (0..n).map(|_| rr.xdr.get_u32().unwrap()).collect();
        assert_eq!(flavors, vec![1, 0]);
    }
    let mut b = Body::new();
    b.xdr().put_opaque(b"/etc");
    let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
    assert_eq!(
        r.results().unwrap().xdr.get_u32().unwrap(),
        mount::MNT3ERR_NOENT
    );
    let r = mc
        .call(MOUNT_PROG, MOUNT_V3, mproc::EXPORT, &Body::new())
        .unwrap();
    let mut rr = r.results().unwrap();
    assert!(rr.xdr.get_bool().unwrap());
    assert_eq!(rr.xdr.get_opaque(1024).unwrap(), b"/export");
    let mut b = Body::new();
    b.xdr().put_opaque(b"/export");
    assert!(mc
        .call(MOUNT_PROG, MOUNT_V3, mproc::UMNT, &b)
        .unwrap()
        .results()
        .is_ok());
    // A malformed MNT: GARBAGE_ARGS, and the connection goes on.
    let mut b = Body::new();
    b.xdr().put_u32(5000);
    let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
    assert!(matches!(
        r.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    assert!(mc
        .call(MOUNT_PROG, MOUNT_V3, mproc::NULL, &Body::new())
        .unwrap()
        .results()
        .is_ok());
    // NFSACL over the MOUNT port: PROG_UNAVAIL.
    let r = mc.call(100227, 3, 0, &Body::new()).unwrap();
    assert!(matches!(
        r.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::ProgUnavail,
            ..
        }
    ));
    drop((pc, mc));
    mh.stop();
    ph.stop();
}

/// [`over_memlink`] for an export made by the test (its client list, its key).
fn memlink_to(e: Arc<Export>) -> Nfs {
    let mut reg = Registry::new();
    procs::register(&mut reg, e.clone());
    let s = RdmaServer::new(reg, ServerConfig::default());
    let (ce, se) = memlink::pair(LinkFaults::default());
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let mut c = RdmaClient::connect_transport(Box::new(ce), ClientConfig::default()).unwrap();
    h.join().unwrap().unwrap();
    c.cred = root_cred();
    let root = e.root_handle().unwrap();
    Nfs {
        c,
        e,
        root,
        _srv: s,
    }
}

impl Nfs {
    /// SETATTR of the mode alone.
    fn chmod(&mut self, fh: &[u8], mode: u32) -> u32 {
        let mut b = fh_body(fh);
        Sattr3 {
            mode: Some(mode),
            ..Default::default()
        }
        .emit(b.xdr());
        b.xdr().put_bool(false);
        let r = self.call(proc_::SETATTR, b);
        success(&r).xdr.get_u32().unwrap()
    }
}

fn mode_of(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// The kernel's own rules apply, because each call runs with the caller's credentials: a
/// WRITE by someone other than the owner clears the set-uid and set-gid bits (pjdfstest
/// chmod/12.t), a chmod by an owner outside the file's group drops set-gid (chmod/00.t), a
/// non-owner's chmod is refused, new objects take the group of a set-gid directory.
#[test]
fn the_kernel_applies_its_rules_to_the_callers_credentials() {
    let dir = TempDir::new("setid");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // uid 1000 makes a file and sets it 06777.
    n.c.cred = user_cred(1000);
    let f = n.create(&root, "setid", 0).unwrap();
    let path = dir.0.join("setid");
    assert_eq!(n.chmod(&f, 0o6777), 0);
    assert_eq!(
        mode_of(&path),
        0o6777,
        "the owner (in the file's group) keeps set-gid"
    );
    // uid 2000 writes it (it is world-writable): both bits go, as for a local write.
    n.c.cred = user_cred(2000);
    n.write(&f, 0, b"x", 2).unwrap();
    assert_eq!(
        mode_of(&path),
        0o777,
        "a non-owner's WRITE cleared set-uid and set-gid"
    );
    // ... and may not chmod it.
    assert_eq!(n.chmod(&f, 0o4777), Stat::Perm.code());
    assert_eq!(mode_of(&path), 0o777);
    // The owner moves it to a group it is not in (as root), then sets set-gid: dropped.
    std::os::unix::fs::chown(&path, None, Some(3000)).unwrap();
    n.c.cred = user_cred(1000);
    assert_eq!(n.chmod(&f, 0o2755), 0);
    assert_eq!(
        mode_of(&path),
        0o755,
        "set-gid of a group the owner is not in is dropped"
    );
    // A set-gid directory: new objects take its group.
    std::fs::create_dir(dir.0.join("sg")).unwrap();
    std::os::unix::fs::chown(dir.0.join("sg"), None, Some(3000)).unwrap();
    std::fs::set_permissions(
        dir.0.join("sg"),
        std::os::unix::fs::PermissionsExt::from_mode(0o2777),
    )
    .unwrap();
    let (sg, _) = n.lookup(&root, "sg").unwrap();
    n.create(&sg, "child", 0).unwrap();
    let m = std::fs::metadata(dir.0.join("sg/child")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 3000));
    // A sticky directory: uid 2000 may not remove uid 1000's file in it.
    std::fs::set_permissions(
        dir.0.join("sg"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    n.c.cred = user_cred(2000);
    assert_eq!(n.remove(&sg, "child", false), Stat::Perm.code());
    assert!(dir.0.join("sg/child").exists());
}

/// knfsd's default: root is squashed to 65534 unless the client entry says
/// `no_root_squash`; `all_squash` maps everyone.
#[test]
fn root_is_squashed_by_default() {
    let dir = TempDir::new("squash");
    std::fs::write(dir.0.join("private"), b"root only").unwrap();
    std::fs::set_permissions(
        dir.0.join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::create_dir(dir.0.join("pub")).unwrap();
    std::fs::set_permissions(
        dir.0.join("pub"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut n = memlink_to(export_to(&dir, &["*(rw)"]));
    let root = n.root.clone();
    let (p, _) = n.lookup(&root, "private").unwrap();
    assert_eq!(
        n.read(&p, 0, 10, 0),
        Err(Stat::Acces.code()),
        "squashed root reads nothing of root's"
    );
    assert_eq!(n.write(&p, 0, b"x", 2), Err(Stat::Acces.code()));
    assert_eq!(
        n.create(&root, "x", 0),
        Err(Stat::Acces.code()),
        "nor creates in root's 0755"
    );
    let (pubd, _) = n.lookup(&root, "pub").unwrap();
    n.create(&pubd, "mine", 0).unwrap();
    let m = std::fs::metadata(dir.0.join("pub/mine")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (65534, 65534),
        "root's file belongs to nobody"
    );
    assert_eq!(std::fs::read(dir.0.join("private")).unwrap(), b"root only");
    // all_squash with anonuid/anongid: a user becomes them too.
    let mut n = memlink_to(export_to(
        &dir,
        &["*(rw,all_squash,anonuid=4321,anongid=4322)"],
    ));
    n.c.cred = user_cred(1000);
    let root = n.root.clone();
    let (pubd, _) = n.lookup(&root, "pub").unwrap();
    n.create(&pubd, "anon", 0).unwrap();
    let m = std::fs::metadata(dir.0.join("pub/anon")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4321, 4322));
    // A read-only entry: changes are NFS3ERR_ROFS.
    let mut n = memlink_to(export_to(&dir, &["*(ro,no_root_squash)"]));
    let root = n.root.clone();
    assert_eq!(n.create(&root, "ro", 0), Err(Stat::RoFs.code()));
    let (p, _) = n.lookup(&root, "private").unwrap();
    assert_eq!(n.write(&p, 0, b"x", 2), Err(Stat::RoFs.code()));
    assert_eq!(n.read(&p, 0, 9, 0).unwrap().0, b"root only");
}

/// A client the export's list does not name is refused at MOUNT (MNT3ERR_ACCES) and at the
/// RDMA connection (an MPA Reject); a `secure` entry refuses MOUNT from an unreserved port.
#[test]
fn clients_outside_the_export_are_refused() {
    let dir = TempDir::new("refuse");
    let mnt = |e: Arc<Export>| {
        let mut mreg = Registry::new();
        mount::register_mount(&mut mreg, e, "/export");
        let mh = tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), mreg).unwrap();
        let mut mc = TcpClient::connect(mh.addr, 1).unwrap();
        let mut b = Body::new();
        b.xdr().put_opaque(b"/export");
        let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
        let st = r.results().unwrap().xdr.get_u32().unwrap();
        drop(mc);
        mh.stop();
        st
    };
    // 127.0.0.1 is not in 192.0.2.0/24.
    let other = export_to(&dir, &["192.0.2.0/24(rw,insecure)"]);
    assert_eq!(mnt(other.clone()), mount::MNT3ERR_ACCES);
    // `secure` (the default): this test's port is not reserved.
    assert_eq!(
        mnt(export_to(&dir, &["127.0.0.1(rw)"])),
        mount::MNT3ERR_ACCES
    );
    assert_eq!(
        mnt(export_to(&dir, &["127.0.0.0/8(rw,insecure)"])),
        mount::MNT3_OK
    );
    // The RDMA connection: refused before any call.
    let mut reg = Registry::new();
    procs::register(&mut reg, other.clone());
    let e = other.clone();
    let cfg = ServerConfig {
        admit: Some(dpwarp::rpc::server::Admit(Arc::new(move |peer| {
            e.clients().rule_for(peer).is_some()
        }))),
        ..ServerConfig::default()
    };
    let s = RdmaServer::new(reg, cfg);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let refused = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default());
    assert!(
        refused.is_err(),
        "a connection from outside the export's networks was accepted"
    );
    assert_eq!(ServerStats::get(&s.stats().connections), 0);
    h.stop();
    // An admitted client whose calls nonetheless match no entry (a server without the
    // connection check): every call but NULL is NFS3ERR_ACCES.
    let mut n = memlink_to(other);
    let root = n.root.clone();
    assert_eq!(n.getattr(&root), Err(Stat::Acces.code()));
    assert!(n.call(proc_::NULL, Body::new()).results().is_ok());
}

/// MKNOD (RFC 1813 §3.3.11) makes FIFOs, sockets and devices; devices only for an unsquashed
/// root (the kernel wants CAP_MKNOD), and regular files or directories are NFS3ERR_BADTYPE.
#[test]
fn mknod_makes_every_type() {
    use std::os::unix::fs::FileTypeExt;
    let dir = TempDir::new("mknod");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    let fifo = n.mknod(&root, "fifo", ftype::FIFO, 0o640, (0, 0)).unwrap();
    let sock = n.mknod(&root, "sock", ftype::SOCK, 0o600, (0, 0)).unwrap();
    let chr = n.mknod(&root, "null", ftype::CHR, 0o666, (1, 3)).unwrap();
    let blk = n.mknod(&root, "loop", ftype::BLK, 0o660, (7, 200)).unwrap();
    let t = |name: &str| std::fs::symlink_metadata(dir.0.join(name)).unwrap();
    assert!(t("fifo").file_type().is_fifo() && mode_of(&dir.0.join("fifo")) == 0o640);
    assert!(t("sock").file_type().is_socket());
    assert!(t("null").file_type().is_char_device());
    assert_eq!(t("null").rdev(), rustix::fs::makedev(1, 3));
    assert!(t("loop").file_type().is_block_device());
    assert_eq!(t("loop").rdev(), rustix::fs::makedev(7, 200));
    for (fh, ty) in [
        (&fifo, ftype::FIFO),
        (&sock, ftype::SOCK),
        (&chr, ftype::CHR),
        (&blk, ftype::BLK),
    ] {
        assert_eq!(n.getattr(fh).unwrap().ftype, ty);
    }
    assert_eq!(n.getattr(&chr).unwrap().rdev, (1, 3));
    // Never opened for I/O: READ and WRITE of a device are NFS3ERR_INVAL.
    assert_eq!(n.read(&chr, 0, 10, 0), Err(Stat::Inval.code()));
    assert_eq!(n.write(&chr, 0, b"x", 2), Err(Stat::Inval.code()));
    // chmod of a FIFO works (no open).
    assert_eq!(n.chmod(&fifo, 0o600), 0);
    assert_eq!(mode_of(&dir.0.join("fifo")), 0o600);
    assert_eq!(
        n.mknod(&root, "reg", ftype::REG, 0o644, (0, 0)),
        Err(Stat::BadType.code())
    );
    assert_eq!(
        n.mknod(&root, "fifo", ftype::FIFO, 0o644, (0, 0)),
        Err(Stat::Exist.code())
    );
    // A user: FIFOs yes, devices no.
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    n.c.cred = user_cred(1000);
    n.mknod(&root, "ufifo", ftype::FIFO, 0o644, (0, 0)).unwrap();
    assert_eq!(t("ufifo").uid(), 1000);
    assert_eq!(
        n.mknod(&root, "unull", ftype::CHR, 0o666, (1, 3)),
        Err(Stat::Perm.code())
    );
    // A squashed root: no devices either.
    let mut n = memlink_to(export_to(&dir, &["*(rw)"]));
    let root = n.root.clone();
    assert_eq!(
        n.mknod(&root, "snull", ftype::CHR, 0o666, (1, 3)),
        Err(Stat::Perm.code())
    );
    assert!(!dir.0.join("snull").exists() && !dir.0.join("unull").exists());
}

/// Objects are reached by handle, not by path from the export root: a tree deeper than
/// PATH_MAX is served; handles survive renames and a new server instance with the same key
/// (what a restart with the same state file is), and only a removed object is stale.
#[test]
fn handles_need_no_path_and_survive_renames_and_restarts() {
    let dir = TempDir::new("deep");
    let key = HandleKey::random();
    let export =
        || Arc::new(Export::new(&dir.0, key.clone(), ClientList::parse(OPEN).unwrap()).unwrap());
    let mut n = memlink_to(export());
    let root = n.root.clone();
    let name = "d".repeat(200);
    let mut fh = root.clone();
    let levels = 25; // 25 * 201 > 4096 (PATH_MAX)
    for _ in 0..levels {
        fh = n.mkdir(&fh, &name).unwrap();
    }
    let deep_dir = fh.clone();
    let f = n.create(&deep_dir, "bottom", 0).unwrap();
    let data = pattern(3, 100_000);
    n.write(&f, 0, &data, 2).unwrap();
    assert_eq!(n.read(&f, 0, 200_000, 0).unwrap().0, data);
    // The host sees it at a path longer than PATH_MAX (walked one component at a time).
    let mut d = rustix::fs::open(
        &dir.0,
        rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    for _ in 0..levels {
        d = rustix::fs::openat(
            &d,
            name.as_str(),
            rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
    }
    let host = rustix::fs::openat(
        &d,
        "bottom",
        rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    assert_eq!(rustix::fs::fstat(&host).unwrap().st_size, 100_000);
    // Renamed behind the server's back: the handles still name it.
    std::fs::rename(dir.0.join(&name), dir.0.join("moved")).unwrap();
    assert_eq!(n.read(&f, 0, 10, 0).unwrap().0, data[..10]);
    assert!(n.lookup(&deep_dir, "bottom").is_ok());
    // A new server instance with the same key (a restart): every handle still works.
    drop(n);
    let mut n = memlink_to(export());
    assert_eq!(n.root, root, "the root handle is the same");
    assert_eq!(n.read(&f, 0, 200_000, 0).unwrap().0, data);
    assert_eq!(n.getattr(&deep_dir).unwrap().ftype, ftype::DIR);
    n.create(&deep_dir, "after", 0).unwrap();
    // Removed: stale.
    assert_eq!(n.remove(&deep_dir, "bottom", false), 0);
    assert_eq!(n.getattr(&f), Err(Stat::Stale.code()));
    // Another key: the old handles are not ours.
    let mut n = memlink_to(export_to(&dir, OPEN));
    assert_eq!(n.getattr(&deep_dir), Err(Stat::BadHandle.code()));
}

/// The state file: made 0600 with a key on first start, the same key read back after; one
/// that others may read is refused.
#[test]
fn the_state_file_keeps_the_key() {
    let dir = TempDir::new("state");
    let path = dir.0.join("sub/state");
    let k1 = HandleKey::load_or_create(&path).unwrap();
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(&dir.0.join("sub")), 0o700);
    let k2 = HandleKey::load_or_create(&path).unwrap();
    let ex = std::fs::create_dir_all(dir.0.join("x")).map(|_| dir.0.join("x"));
    let fh = |k: HandleKey| {
        Export::new(ex.as_ref().unwrap(), k, ClientList::parse(OPEN).unwrap())
            .unwrap()
            .root_handle()
            .unwrap()
    };
    assert_eq!(fh(k1), fh(k2), "the key read back is the key made");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let e = HandleKey::load_or_create(&path).unwrap_err();
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::write(dir.0.join("bad"), "key = \"zz\"\n").unwrap();
    std::fs::set_permissions(
        dir.0.join("bad"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    assert!(HandleKey::load_or_create(&dir.0.join("bad")).is_err());
    // Exporting `/` or a symlink is refused.
    assert!(Export::new(
        std::path::Path::new("/"),
        HandleKey::random(),
        ClientList::parse(OPEN).unwrap()
    )
    .is_err());
    std::os::unix::fs::symlink(dir.0.join("x"), dir.0.join("link")).unwrap();
    let e = Export::new(
        &dir.0.join("link"),
        HandleKey::random(),
        ClientList::parse(OPEN).unwrap(),
    )
    .err()
    .unwrap();
    assert!(e.contains("symlink"), "{e}");
}

/// The attributes in a MKDIR / MKNOD / CREATE reply are those after the mode and owner were
/// set (pjdfstest's rename::preserve_metadata and unchanged_ctime_failed found replies made
/// before the chmod: the client cached a stale mode and saw the ctime move later).
#[test]
fn replies_carry_the_attributes_after_the_mode_was_set() {
    let dir = TempDir::new("postop");
    let mut n = over_memlink(&dir);
    let root = n.root.clone();
    for (p, name) in [
        (proc_::MKDIR, "d"),
        (proc_::MKNOD, "s"),
        (proc_::CREATE, "f"),
    ] {
        let mut b = Body::new();
        diropargs(&mut b, &root, name);
        if p == proc_::MKNOD {
            b.xdr().put_u32(ftype::SOCK);
        }
        if p == proc_::CREATE {
            b.xdr().put_u32(0);
        }
        Sattr3 {
            mode: Some(0o777),
            ..Default::default()
        }
        .emit(b.xdr());
        let r = n.call(p, b);
        let mut rr = success(&r);
        assert_eq!(rr.xdr.get_u32().unwrap(), 0, "{name}");
        assert!(rr.xdr.get_bool().unwrap());
        rr.xdr.get_opaque(64).unwrap();
        let a = parse_post_op_attr(&mut rr.xdr).unwrap().unwrap();
        assert_eq!(
            a.mode, 0o777,
            "{name}: the reply's mode is the one set, not umask-narrowed"
        );
        assert_eq!(mode_of(&dir.0.join(name)), 0o777);
        let now = std::fs::symlink_metadata(dir.0.join(name)).unwrap();
        assert_eq!(
            (a.ctime.seconds, a.ctime.nseconds),
            (now.ctime() as u32, now.ctime_nsec() as u32),
            "{name}: the reply's ctime is the current one"
        );
    }
}

/// The target as a library type (`dpwarp::nfs::target`): what `nfs-server` runs, embedded in a
/// program: NFS over RPC-over-RDMA on kernel TCP, then MOUNT found through rpcbind.
#[test]
fn an_embedded_target_serves_mount_and_nfs() {
    use dpwarp::nfs::target::{NfsTarget, TargetConfig};
    let dir = TempDir::new("target");
    std::fs::write(dir.0.join("hello"), b"hello").unwrap();
    let lo = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut target = NfsTarget::new(TargetConfig {
        name: "/export".into(),
        clients: ClientList::parse(&["127.0.0.1(rw,no_root_squash,insecure)"]).unwrap(),
        mount_listen: lo,
        rpcbind_listen: Some(lo),
        ..TargetConfig::new(&dir.0)
    })
    .unwrap();
    let h = target.listen(&Net::kernel(), lo).unwrap();
    target.announce().unwrap();
    // rpcbind names the MOUNT port.
    let mut pc = TcpClient::connect(target.rpcbind.as_ref().unwrap().addr, 1).unwrap();
    let mut b = Body::new();
    for v in [MOUNT_PROG, MOUNT_V3, IPPROTO_TCP, 0] {
        b.xdr().put_u32(v);
    }
    let r = pc.call(PMAP_PROG, PMAP_V2, pproc::GETPORT, &b).unwrap();
    let port = r.results().unwrap().xdr.get_u32().unwrap() as u16;
    assert_eq!(Some(port), target.mount_addr().map(|a| a.port()));
    let mut mc = TcpClient::connect(SocketAddr::from(([127, 0, 0, 1], port)), 1).unwrap();
    let mut b = Body::new();
    b.xdr().put_opaque(b"/export");
    let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
    let mut rr = r.results().unwrap();
    assert_eq!(rr.xdr.get_u32().unwrap(), mount::MNT3_OK);
    let root = rr.xdr.get_opaque(64).unwrap().to_vec();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    c.cred = root_cred();
    let mut n = Nfs {
        c,
        e: target.export.clone(),
        root: root.clone(),
        _srv: target.server.clone(),
    };
    let (f, _) = n.lookup(&root, "hello").unwrap();
    assert_eq!(n.read(&f, 0, 100, 0).unwrap().0, b"hello");
    drop((n, pc, mc));
    h.stop();
    target.stop();
}
