//! The NFS tools end to end: `dpwarp nfs-server --config` over kernel TCP on loopback (free
//! ports, an export of its own), and `dpwarp nfs-probe --read`, the READ load, against it:
//! rpcbind and MOUNT found, the file READ for a while with every reply checked, the JSON's
//! figures; refusals (a missing file, a file smaller than one READ); and the server's counters
//! at SIGTERM, which show the READs went from its pool's buffers.

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
    let (nfs, mount, rpcbind) = (free_port(), free_port(), free_port());
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
    let log = dir.join("server.log");
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
    (s, nfs, rpcbind)
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
    assert!(count_after("from pool buffers ", ')') >= 262_144, "{line}");
    // The 4 KiB READs and the GETATTRs were answered on the connection's thread.
    assert!(count_after(" calls (", ' ') > 0, "{line}");
}
