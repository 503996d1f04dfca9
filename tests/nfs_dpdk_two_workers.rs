//! The NFS target on two DPDK workers of one port, loaded by many connections at once:
//! `dpwarp nfs-server` with `transport = "dpdk"` on net_af_packet with two queues (`qpairs=2`)
//! on a veth in a network namespace this test makes (and deletes), and `dpwarp nfs-bench`
//! over kernel TCP from the namespace's side of the veth, 16 connections x 4 credits with a
//! mix of READ, WRITE, GETATTR and LOOKUP. The kernel's flow hash picks each received frame's
//! queue (a `PACKET_FANOUT_HASH` group, as a NIC's RSS would), unrelated to which worker holds
//! the connection, so frames are handed between the workers (src/dataplane/steer.rs). Every
//! reply must be right (READ data against the pattern the bench wrote first), every
//! connection served, and both workers must have carried traffic (the server's counters at
//! SIGTERM). Needs root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;
mod netns_common;
use netns_common::{ip, Netns};

const CONNECTIONS: usize = 16;

/// The server child, stopped with SIGTERM when dropped (its log printed if the test fails).
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    /// SIGTERM, wait, and the log: the server prints its counters when it stops.
    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "nfs-server did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("nfs-server's log:\n{log}");
        }
    }
}

/// A directory of the test's own, removed at drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_server(dir: &Path, veth: &str, mount: u16) -> Server {
    let dp = dir.join("dataplane.toml");
    std::fs::write(
        &dp,
        format!(
            r#"[eal]
args = ["-l", "0", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_af_packet0,iface={veth},qpairs=2"]
[[port]]
device = "net_af_packet0"
ip = "10.88.0.2/24"
mac = "02:00:00:88:00:02"
mbufs = 16383
cores = [0, 1]
"#
        ),
    )
    .unwrap();
    let cfg = dir.join("nfs.toml");
    std::fs::write(
        &cfg,
        format!(
            "export = \"{}\"\nname = \"/export\"\nlisten = \"10.88.0.2:20049\"\n\
             transport = \"dpdk\"\ndataplane = \"{}\"\n\
             clients = [\"10.88.0.0/24(rw,no_root_squash,insecure)\", \
             \"127.0.0.1(rw,no_root_squash,insecure)\"]\n\
             state_file = \"{}\"\n\
             [mount]\nlisten = \"127.0.0.1:{mount}\"\n[rpcbind]\nenabled = false\n",
            dir.join("export").display(),
            dp.display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    let log = dir.join("server.log");
    let child = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["nfs-server", "--config"])
        .arg(&cfg)
        .args(["--duration", "100"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let s = Server { child, log };
    let t = Instant::now();
    // MOUNT over kernel TCP comes up after the dataplane.
    while std::net::TcpStream::connect(("127.0.0.1", mount)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "nfs-server did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    s
}

#[test]
fn nfs_target_on_two_workers_serves_sixteen_connections_and_verifies_every_reply() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(150));
        eprintln!("nfs_dpdk_two_workers: still running after 150 s; aborting");
        std::process::abort();
    });
    let pid = std::process::id();
    let dir = Dir(std::env::temp_dir().join(format!("dpwarp-nfs2w-{pid}")));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(dir.0.join("export")).unwrap();
    let ns = Netns::new("dpwn2w");
    // The children (server and bench) start from this thread: they live in the namespace.
    ns.enter();
    let (a, b) = (format!("n2a{pid}"), format!("n2b{pid}"));
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&[
        "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
    ]);
    ip(&["-n", &ns.0, "addr", "add", "10.88.0.1/24", "dev", &b]);
    ip(&["-n", &ns.0, "link", "set", &a, "up"]);
    ip(&["-n", &ns.0, "link", "set", &b, "up"]);
    // AF_PACKET would hand DPDK the kernel's partially checksummed frames otherwise.
    let st = Command::new("ethtool")
        .args(["-K", &b, "tx", "off"])
        .stdout(Stdio::null())
        .status()
        .expect("ethtool");
    assert!(st.success(), "ethtool -K {b} tx off");

    let mount = free_port();
    let server = start_server(&dir.0, &a, mount);
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args([
            "nfs-bench",
            "--server",
            "10.88.0.2",
            "--transport",
            "kernel",
        ])
        .args([
            "--mountaddr",
            "127.0.0.1",
            "--mount-port",
            &mount.to_string(),
        ])
        .args(["--connections", &CONNECTIONS.to_string(), "--credits", "4"])
        .args(["--seconds", "2", "--file-size", "1048576"])
        .args(["--mix", "read=4,write=2,getattr=1,lookup=1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfs-bench: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("nfs-bench on two workers: {j}");
    assert_eq!(j["connections"], CONNECTIONS);
    assert_eq!(j["verified"], true, "{j}");
    assert!(j["errors"].as_array().unwrap().is_empty(), "{j}");
    let per = j["per_connection_ops"].as_array().unwrap();
    assert_eq!(per.len(), CONNECTIONS);
    assert!(per.iter().all(|n| n.as_u64().unwrap() > 0), "{j}");
    for op in ["read", "write", "getattr", "lookup"] {
        assert!(j["by_op"][op].as_u64().unwrap() > 0, "no {op}: {j}");
    }

    let log = server.stop();
    // "dataplane: worker {i}: rx N tx M ...": both workers carried frames of their own
    // connections (a worker holding none would send nothing but ARP answers).
    let tx_of = |i: usize| -> u64 {
        let key = format!("dataplane: worker {i}: rx ");
        log.lines()
            .find_map(|l| l.split(&key).nth(1))
            .and_then(|r| r.split(" tx ").nth(1))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counters of worker {i}: {log}"))
    };
    let (t0, t1) = (tx_of(0), tx_of(1));
    eprintln!("frames sent: worker 0 {t0}, worker 1 {t1}");
    assert!(
        t0 > 1000 && t1 > 1000,
        "both workers serve connections: {t0} / {t1}"
    );
    assert!(
        log.contains("flow steering: handed to other workers"),
        "no frame was handed between the workers: {log}"
    );
    drop(ns);
}
