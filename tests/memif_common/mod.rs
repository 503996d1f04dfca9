//! Shared by the DPDK tests that run dpwarp processes over a net_memif pair (one EAL per
//! process): a child that is killed when the test ends, and the dataplane config of one end.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Child;

/// Kills (and reaps) the child process when dropped, so a failing test leaves nothing behind.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Write `DIR/ROLE.toml`: one net_memif port (`role` server or client on socket `sock`) with
/// address `ip`/24 and `mac`, no hugepages.
pub fn config(dir: &Path, role: &str, sock: &Path, ip: &str, mac: &str) -> PathBuf {
    config_mtu(dir, role, sock, ip, mac, 0)
}

/// [`config`] with `mtu` on the port (0: the default 1500); above 1500 the memif buffers are
/// made large enough for a frame (`bsize`, see `DataplaneConfig` validation).
pub fn config_mtu(dir: &Path, role: &str, sock: &Path, ip: &str, mac: &str, mtu: u16) -> PathBuf {
    config_zc(dir, role, sock, ip, mac, mtu, false)
}

/// [`config_mtu`], and with `zero_copy` the memif devarg `zero-copy=yes` (which DPDK takes
/// from a client only, and only with the EAL option `--single-file-segments`).
pub fn config_zc(
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
