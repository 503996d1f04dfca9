//! The NFS tools end to end: `dpwarp nfs-server --config` over kernel TCP on loopback (free
//! ports, an export of its own), and `dpwarp nfs-probe --read`, the READ load, against it:
//! rpcbind and MOUNT found, the file READ for a while with every reply checked, the JSON's
//! figures; refusals (a missing file, a file smaller than one READ); and the server's counters
//! at SIGTERM, which show the READs went from its pool's buffers. `dpwarp nfs-bench` against
//! it with 16 connections and a mix of READ, WRITE, GETATTR and LOOKUP, every reply checked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

/// A unique directory under the temp dir, removed at drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!(
            "dpwarp-nfs-cli-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("export")).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An `nfs-server` child, killed when dropped (its stderr printed if the test fails).
struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("nfs-server's stderr:\n{log}");
        }
    }
}

/// `nfs-server` over kernel TCP exporting `dir/export` as `/export`; returns it and its NFS and
/// rpcbind ports once rpcbind answers.
fn server(dir: &Path) -> (Server, u16, u16) {
    let ports = (free_port(), free_port(), free_port());
    (start(dir, ports), ports.0, ports.2)
}

/// `nfs-server` on these (NFS, MOUNT, rpcbind) ports, once rpcbind answers; its state file
/// (the handle key) is `dir/state`.
fn start(dir: &Path, (nfs, mount, rpcbind): (u16, u16, u16)) -> Server {
    let cfg = dir.join("nfs.toml");
    std::fs::write(
        &cfg,
        format!(
            "export = \"{}\"\nname = \"/export\"\nlisten = \"127.0.0.1:{nfs}\"\n\
             transport = \"kernel\"\n\
             clients = [\"127.0.0.1(rw,no_root_squash,insecure)\"]\n\
             state_file = \"{}\"\n\
             [mount]\nlisten = \"127.0.0.1:{mount}\"\n\
             [rpcbind]\nlisten = \"127.0.0.1:{rpcbind}\"\n[rdma]\ncrc = false\n",
            dir.join("export").display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    let log = dir.join(format!("server-{}.log", free_port()));
    let child = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["nfs-server", "--config"])
        .arg(&cfg)
        .args(["--duration", "120"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let s = Server { child, log };
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", rpcbind)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "nfs-server did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

fn probe(nfs: u16, rpcbind: u16, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args([
            "nfs-probe",
            "--server",
            "127.0.0.1",
            "--transport",
            "kernel",
        ])
        .args([
            "--port",
            &nfs.to_string(),
            "--rpcbind-port",
            &rpcbind.to_string(),
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// [`probe`] that must succeed: its JSON.
fn probe_json(nfs: u16, rpcbind: u16, extra: &[&str]) -> serde_json::Value {
    let out = probe(nfs, rpcbind, extra);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfs-probe {extra:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn nfs_probe_read_loads_nfs_server_from_its_pool() {
    let dir = Dir::new("read");
    // 4 MiB of a pattern no two READ offsets share.
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.0.join("export/f.bin"), &data).unwrap();
    std::fs::write(dir.0.join("export/small"), b"tiny").unwrap();
    let (mut s, nfs, rpcbind) = server(&dir.0);

    for (size, credits) in [("262144", "8"), ("4096", "16")] {
        let j = probe_json(
            nfs,
            rpcbind,
            &[
                "--read",
                "f.bin",
                "--size",
                size,
                "--credits",
                credits,
                "--seconds",
                "0.5",
            ],
        );
        let r = &j["read"];
        assert_eq!(j["null"], "ok");
        assert_eq!(r["file_size"], data.len() as u64, "{r}");
        assert_eq!(r["size"].to_string(), size, "{r}");
        assert!(r["reads"].as_u64().unwrap() > 0, "{r}");
        assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(
            r["max_in_flight"].as_u64().unwrap() > 1,
            "READs were pipelined: {r}"
        );
    }

    // The GETATTR load on the same file.
    let j = probe_json(
        nfs,
        rpcbind,
        &["--getattr", "f.bin", "--credits", "8", "--seconds", "0.3"],
    );
    let g = &j["getattr_load"];
    assert!(g["calls"].as_u64().unwrap() > 0, "{g}");
    assert!(g["calls_per_s"].as_f64().unwrap() > 0.0, "{g}");
    assert!(g["max_in_flight"].as_u64().unwrap() > 1, "pipelined: {g}");

    let j = probe_json(
        nfs,
        rpcbind,
        &["--lookup", "f.bin", "--credits", "8", "--seconds", "0.3"],
    );
    assert!(j["lookup_load"]["calls"].as_u64().unwrap() > 0, "{j}");

    // Refusals: a file that is not there, one smaller than a READ.
    let out = probe(nfs, rpcbind, &["--read", "nothere", "--seconds", "0.1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("LOOKUP nothere"),
        "{err}"
    );
    let out = probe(nfs, rpcbind, &["--read", "small", "--seconds", "0.1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("fewer than one READ"),
        "{err}"
    );

    // The server's counters at SIGTERM: the 256 KiB READs went from its pool's buffers.
    let st = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t = Instant::now();
    while s.child.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "still running");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(&s.log).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("nfs-server:") && l.contains("from pool buffers"))
        .unwrap_or_else(|| panic!("no counters line:\n{log}"));
    // The number between `marker` and the next `end` in the line.
    let count_after = |marker: &str, end: char| -> u64 {
        line.split(marker)
            .nth(1)
            .and_then(|r| r.split(end).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {marker:?}: {line}"))
    };
    assert!(count_after("from pool buffers ", ',') >= 262_144, "{line}");
    // The 4 KiB READs (each into a write chunk) from the connections' result buffers.
    assert!(count_after("result buffers ", ')') > 0, "{line}");
    // The 4 KiB READs and the GETATTRs were answered on the connection's thread.
    assert!(count_after(" calls (", ' ') > 0, "{line}");
}

/// `nfs-bench --connections 16` against `nfs-server`: every connection made calls, every
/// kind in the mix ran, and every reply was checked (READ data against the pattern the bench
/// wrote, WRITE counts, GETATTR's file id, LOOKUP's handle); the file on the server holds the
/// pattern the bench reads.
#[test]
fn nfs_bench_sixteen_connections_with_a_mix_verifies_every_reply() {
    let dir = Dir::new("bench");
    let (_srv, nfs, rpcbind) = server(&dir.0);
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args([
            "nfs-bench",
            "--server",
            "127.0.0.1",
            "--transport",
            "kernel",
        ])
        .args([
            "--port",
            &nfs.to_string(),
            "--rpcbind-port",
            &rpcbind.to_string(),
        ])
        .args(["--connections", "16", "--credits", "4", "--seconds", "1.5"])
        .args([
            "--mix",
            "read=4,write=2,getattr=1,lookup=1",
            "--file-size",
            "1048576",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfs-bench: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(j["connections"], 16);
    assert_eq!(j["verified"], true, "{j}");
    assert!(j["errors"].as_array().unwrap().is_empty(), "{j}");
    let per = j["per_connection_ops"].as_array().unwrap();
    assert_eq!(per.len(), 16);
    assert!(per.iter().all(|n| n.as_u64().unwrap() > 0), "{j}");
    for op in ["read", "write", "getattr", "lookup"] {
        assert!(j["by_op"][op].as_u64().unwrap() > 0, "no {op}: {j}");
    }
    for k in [
        "ops_per_s",
        "gbps",
        "p50_us",
        "p99_us",
        "p999_us",
        "min_share",
    ] {
        assert!(j[k].as_f64().unwrap() > 0.0, "{k}: {j}");
    }
    assert!(!j["threads"].as_array().unwrap().is_empty());
    // What the bench wrote is on the server's disk: its pattern, octet for octet (the same
    // function as the bench's).
    let data = std::fs::read(dir.0.join("export/nfs-bench.dat")).unwrap();
    assert_eq!(data.len(), 1 << 20);
    let pattern = |off: u64| {
        let o = off % 1_048_573;
        (o.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (o as u8)
    };
    assert!(
        data.iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i as u64)),
        "the file does not hold the bench's pattern"
    );
}

mod restart {
    //! `kill -9` of `nfs-server` while a client holds handles and has UNSTABLE data written,
    //! then a restart on the same config and state file: RFC 1813 §3.3.7's recovery.
    use super::*;
    use dpwarp::cm::Net;
    use dpwarp::nfs::mount::mproc;
    use dpwarp::nfs::xdr::{parse_post_op_attr, Sattr3, Wcc};
    use dpwarp::nfs::{proc_, MOUNT_PROG, MOUNT_V3, NFS_PROG, NFS_V3};
    use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
    use dpwarp::rpc::program::Body;
    use dpwarp::rpc::tcp::TcpClient;
    use dpwarp::wire::oncrpc::{Auth, AuthSys};
    use std::net::SocketAddr;

    fn call(c: &mut RdmaClient, p: u32, b: Body) -> Vec<u8> {
        let r = c
            .call(NFS_PROG, NFS_V3, p, b, &CallOpts::default())
            .expect("call completes");
        let rr = r.results().expect("SUCCESS");
        rr.xdr.rest().to_vec()
    }

    fn connect(nfs: u16) -> RdmaClient {
        let mut c = RdmaClient::connect(
            &Net::kernel(),
            SocketAddr::from(([127, 0, 0, 1], nfs)),
            ClientConfig::default(),
        )
        .expect("connects");
        c.cred = Auth::Sys(AuthSys {
            stamp: 1,
            machinename: b"test"[..].into(),
            uid: 0,
            gid: 0,
            gids: Default::default(),
        });
        c
    }

    fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes(b[..4].try_into().unwrap())
    }

    /// GETATTR's status.
    fn getattr(c: &mut RdmaClient, fh: &[u8]) -> u32 {
        let mut b = Body::new();
        b.xdr().put_opaque(fh);
        be32(&call(c, proc_::GETATTR, b))
    }

    /// WRITE: (status, verifier).
    fn write(c: &mut RdmaClient, fh: &[u8], off: u64, data: &[u8], stable: u32) -> (u32, [u8; 8]) {
        let mut b = Body::new();
        b.xdr().put_opaque(fh);
        b.xdr().put_u64(off);
        b.xdr().put_u32(data.len() as u32);
        b.xdr().put_u32(stable);
        b.xdr().put_opaque(data);
        let r = call(c, proc_::WRITE, b);
        let mut x = dpwarp::wire::xdr::XdrReader::new(&r);
        let st = x.get_u32().unwrap();
        Wcc::parse(&mut x).unwrap();
        if st != 0 {
            return (st, [0; 8]);
        }
        x.get_u32().unwrap();
        x.get_u32().unwrap();
        (st, x.get_fixed(8).unwrap().try_into().unwrap())
    }

    /// COMMIT's verifier.
    fn commit(c: &mut RdmaClient, fh: &[u8]) -> [u8; 8] {
        let mut b = Body::new();
        b.xdr().put_opaque(fh);
        b.xdr().put_u64(0);
        b.xdr().put_u32(0);
        let r = call(c, proc_::COMMIT, b);
        let mut x = dpwarp::wire::xdr::XdrReader::new(&r);
        assert_eq!(x.get_u32().unwrap(), 0);
        Wcc::parse(&mut x).unwrap();
        x.get_fixed(8).unwrap().try_into().unwrap()
    }

    /// CREATE or MKDIR of `name` in `dir`: the new handle.
    fn make(c: &mut RdmaClient, dir: &[u8], name: &str, mkdir: bool) -> Vec<u8> {
        let mut b = Body::new();
        b.xdr().put_opaque(dir);
        b.xdr().put_opaque(name.as_bytes());
        if !mkdir {
            b.xdr().put_u32(0);
        }
        Sattr3 {
            mode: Some(0o644),
            ..Default::default()
        }
        .emit(b.xdr());
        let r = call(c, if mkdir { proc_::MKDIR } else { proc_::CREATE }, b);
        let mut x = dpwarp::wire::xdr::XdrReader::new(&r);
        assert_eq!(x.get_u32().unwrap(), 0, "{name}");
        assert!(x.get_bool().unwrap());
        let fh = x.get_opaque(64).unwrap().to_vec();
        parse_post_op_attr(&mut x).unwrap();
        fh
    }

    fn mnt(mount: u16) -> Vec<u8> {
        let mut mc = TcpClient::connect(SocketAddr::from(([127, 0, 0, 1], mount)), 1).unwrap();
        let mut b = Body::new();
        b.xdr().put_opaque(b"/export");
        let r = mc.call(MOUNT_PROG, MOUNT_V3, mproc::MNT, &b).unwrap();
        let mut rr = r.results().unwrap();
        assert_eq!(rr.xdr.get_u32().unwrap(), 0);
        rr.xdr.get_opaque(64).unwrap().to_vec()
    }

    #[test]
    fn kill_9_and_restart_keeps_every_handle_and_the_resent_unstable_data() {
        let dir = Dir::new("restart");
        let ports = (free_port(), free_port(), free_port());
        let mut srv = start(&dir.0, ports);
        let root = mnt(ports.1);
        let mut c = connect(ports.0);
        let sub = make(&mut c, &root, "sub", true);
        let f = make(&mut c, &sub, "data", false);
        // UNSTABLE writes: the client keeps the data until a COMMIT answers with the same
        // verifier as the WRITEs (RFC 1813 §3.3.7).
        let chunks: Vec<Vec<u8>> = (0..4u8)
            .map(|i| (0..65536).map(|j| (j as u8) ^ i.wrapping_mul(37)).collect())
            .collect();
        let mut verf = None;
        for (i, d) in chunks.iter().enumerate() {
            let (st, v) = write(&mut c, &f, (i * 65536) as u64, d, 0);
            assert_eq!(st, 0);
            assert!(
                verf.is_none_or(|w| w == v),
                "one verifier per server instance"
            );
            verf = Some(v);
        }
        let verf = verf.unwrap();
        // kill -9, while the client holds its handles, and a restart on the same state file.
        srv.child.kill().unwrap();
        srv.child.wait().unwrap();
        drop(c);
        let _srv2 = start(&dir.0, ports);
        let mut c = connect(ports.0);
        // Every old handle still works.
        for fh in [&root, &sub, &f] {
            assert_eq!(getattr(&mut c, fh), 0, "an old handle after the restart");
        }
        assert_eq!(mnt(ports.1), root, "MNT gives the same root handle");
        // COMMIT answers with a new verifier: the client sends its UNSTABLE data again, then
        // commits again, with the handle it already had.
        let v2 = commit(&mut c, &f);
        assert_ne!(v2, verf, "a restart changes the write verifier");
        for (i, d) in chunks.iter().enumerate() {
            let (st, v) = write(&mut c, &f, (i * 65536) as u64, d, 0);
            assert_eq!((st, v), (0, v2));
        }
        assert_eq!(commit(&mut c, &f), v2);
        let on_disk = std::fs::read(dir.0.join("export/sub/data")).unwrap();
        assert_eq!(on_disk, chunks.concat(), "nothing lost");
        // And the old directory handle takes new entries.
        make(&mut c, &sub, "after", false);
        assert!(dir.0.join("export/sub/after").exists());
        // The state file is the server's, 0600.
        let m = std::fs::metadata(dir.0.join("state")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777,
            0o600
        );
    }
}
