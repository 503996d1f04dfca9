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
