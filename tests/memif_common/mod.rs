//! Shared by the DPDK tests that run dpwarp processes over a net_memif pair (one EAL per
//! process): a child that is killed when the test ends, and the dataplane configs of the link.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout};
use std::time::{Duration, Instant};

/// Kills (and reaps) the child process when dropped, so a failing test leaves nothing behind.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait (20 s at most) until a `dpwarp dpperf --server` started with its stdout piped prints
/// that it listens (its memif socket exists then); returns the rest of its stdout.
pub fn listening(server: &mut Child) -> Lines<BufReader<ChildStdout>> {
    let mut lines = BufReader::new(server.stdout.take().expect("stdout piped")).lines();
    let t0 = Instant::now();
    loop {
        let l = lines.next().expect("server exited early").unwrap();
        if l.contains("listening") {
            return lines;
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
}

/// Write `DIR/server.toml` and `DIR/client.toml`: the two ends of one net_memif link on socket
/// `sock`, addresses 10.`net`.0.1/24 (server) and 10.`net`.0.2/24 (client), MACs
/// 02:00:00:`net`:00:01 and :02, `mtu` on both ports (0: the default 1500), and with
/// `client_zc` the client in memif's zero-copy mode. Returns (server, client).
pub fn configs(dir: &Path, sock: &Path, net: u8, mtu: u16, client_zc: bool) -> (PathBuf, PathBuf) {
    let end = |role: &str, host: u8, zc: bool| {
        let ip = format!("10.{net}.0.{host}");
        let mac = format!("02:00:00:{net}:00:{host:02}");
        config_zc(dir, role, sock, &ip, &mac, mtu, zc)
    };
    (end("server", 1, false), end("client", 2, client_zc))
}

/// One end: `DIR/ROLE.toml`, a net_memif port (`role` server or client on socket `sock`) with
/// address `ip`/24 and `mac`, `mtu` (0: the default 1500; above 1500 the memif buffers are
/// made large enough for a frame, `bsize`, see `DataplaneConfig` validation), and with
/// `zero_copy` the memif devarg `zero-copy=yes` (which DPDK takes from a client only, and only
/// with the EAL option `--single-file-segments`).
fn config_zc(
    dir: &Path,
    role: &str,
    sock: &Path,
    ip: &str,
    mac: &str,
    mtu: u16,
    zero_copy: bool,
) -> PathBuf {
    let (zc, sfs) = if zero_copy {
        (",zero-copy=yes", "\"--single-file-segments\", ")
    } else {
        ("", "")
    };
    let bsize = if mtu > 1500 {
        format!(",bsize={}", (usize::from(mtu) + 14).next_multiple_of(1024))
    } else {
        String::new()
    };
    let text = format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", {sfs}"--no-pci", "--log-level=*:warning",
        "--vdev=net_memif0,role={role},id=0,socket={sock},socket-abstract=no{bsize}{zc}"]
[[port]]
device = "net_memif0"
ip = "{ip}/24"
mac = "{mac}"
mbufs = 8191
mtu = {mtu}
[worker]
spin_us = 5
"#,
        sock = sock.display()
    );
    let p = dir.join(format!("{role}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Both ends of one net_memif link in this process (one EAL per process: call once): the EAL
/// with a server vdev `net_memif0` and a client vdev `net_memif1` on a socket unique to this
/// process and `tag`, a pool named `tag`, both ports configured with the defaults. Returns
/// (eal, pool, server, client, socket path; the caller removes it).
pub fn memif_pair_in_one_process(
    tag: &str,
) -> (
    &'static dpwarp::dpdk::Eal,
    &'static dpwarp::dpdk::Mempool,
    dpwarp::dpdk::Port,
    dpwarp::dpdk::Port,
    PathBuf,
) {
    use dpwarp::dpdk::{Eal, Mempool, Port, PortConf};
    let sock = std::env::temp_dir().join(format!("dpw-{tag}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let s = sock.display();
    let args = [
        "-l".to_string(),
        "0".into(),
        "--no-huge".into(),
        "-m".into(),
        "256".into(),
        "--no-shconf".into(),
        "--no-pci".into(),
        "--log-level=*:error".into(),
        format!("--vdev=net_memif0,role=server,id=0,socket={s},socket-abstract=no"),
        format!("--vdev=net_memif1,role=client,id=0,socket={s},socket-abstract=no"),
    ];
    let eal = Eal::init(&args).expect("EAL init");
    let pool = Mempool::create(eal, tag, 4095, 0, 2176).expect("pool");
    let server = Port::by_name(eal, "net_memif0").expect("server port");
    let client = Port::by_name(eal, "net_memif1").expect("client port");
    for p in [server, client] {
        p.configure(&PortConf::default(), pool).expect("configure");
    }
    (eal, pool, server, client, sock)
}

/// Wait (10 s at most, else panic naming `what`) until `p`'s link is up.
pub fn wait_link(p: &dpwarp::dpdk::Port, what: &str) {
    let t0 = Instant::now();
    while !p.link().expect("link").1 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what}: no link after 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
