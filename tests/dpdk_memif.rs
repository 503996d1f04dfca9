//! net_memif across two processes: a `dpwarp dpperf --server` and a `dpwarp dpperf` client, each
//! with its own EAL, connected through a memif socket unique to this test. The client runs
//! write_bw (its final Send is answered only after every Write arrived) and send_lat
//! (every ping answered), so success means data flowed both ways over DPDK. The same at MTU
//! 9000: memif carries jumbo frames although the PMD reports a 1518-octet maximum, and a 64 KiB
//! Write travels in 8 segments instead of 46.

use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

mod memif_common;
use memif_common::{configs, listening, Kill};

#[test]
fn memif_two_processes_write_bw_and_send_lat() {
    let bw = two_processes("std", 0, false);
    // 64 KiB in 1460-octet segments (MTU 1500).
    assert!(bw["segments_per_msg"].as_f64().unwrap() > 40.0, "{bw}");
    // memif offloads no checksum, so these ports compute them in software and smoltcp cuts
    // every frame itself: no segmentation offload (it needs `trusted-link`, tests/dpdk_gso.rs).
    assert_eq!(bw["gso_frames"].as_u64(), Some(0), "{bw}");
}

#[test]
fn memif_two_processes_at_mtu_9000_send_jumbo_frames() {
    let bw = two_processes("jumbo", 9000, false);
    // 64 KiB in 8960-octet segments: 8 (and a few more for the final Send and retransmits).
    let segs = bw["segments_per_msg"].as_f64().unwrap();
    assert!((8.0..9.0).contains(&segs), "{bw}");
}

/// memif's zero-copy client (`zero-copy=yes`): the client's mbufs are the shared memory, and
/// its transmit descriptors point into them by offset from the first EAL memory segment list.
/// A frame whose payload lay in a TCP ring outside EAL memory (transmit by reference) would
/// hand the peer an offset outside the region: the server process crashed reading it. So
/// such a port copies each payload into its mbuf (one segment per frame): data flows both
/// ways, at MTU 1500 and 9000.
#[test]
fn memif_zero_copy_client_copies_payload_into_its_mbufs() {
    for mtu in [0, 9000] {
        let bw = two_processes(&format!("zc{mtu}"), mtu, true);
        // Gathered into the TCP ring, then copied into the mbuf: 2 per byte, where by
        // reference it would be 1. A retransmitted segment is copied into an mbuf again but
        // not into the ring, and counts as payload sent again: with a share r of the payload
        // resent, the copy gives 1 + 1/(1 + r) and by reference 1/(1 + r) <= 1, so 1.5
        // tells them apart for any r below 1. Under a loaded test run (both processes share
        // CPU 0, and memif drops what a descheduled peer does not take) r was 2 % (1.98) and
        // once 18 % (1.85, 0.09 Gbit/s).
        let tx = bw["copies"]["tx_per_byte"].as_f64().unwrap();
        assert!((1.5..2.01).contains(&tx), "{bw}");
    }
}

/// A memif client whose server is not accepting yet (started after it, or still tearing down
/// the previous client's connection) fails its port start ("memif_connect_client(): Failed to
/// connect socket"); the dataplane tries the start again for up to 10 s. Here the client
/// process starts first and its server a second later: the client must still connect and run
/// its test (without the retry it exited at once with "rte_eth_dev_start failed").
#[test]
fn memif_client_started_before_its_server_connects_when_the_server_comes() {
    let dir = std::env::temp_dir().join(format!("dpwarp-memif-early-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let (scfg, ccfg) = configs(&dir, &sock, 96, 0, false);
    let bin = env!("CARGO_BIN_EXE_dpwarp");
    let client = Kill(
        Command::new(bin)
            .args([
                "dpperf",
                "--addr",
                "10.96.0.1:18515",
                "--json",
                "--test",
                "send_lat",
            ])
            .args(["--size", "64", "--iters", "100", "--config"])
            .arg(&ccfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let mut server = Kill(
        Command::new(bin)
            .args(["dpperf", "--server", "--json", "--count", "1"])
            .args(["--addr", "10.96.0.1:18515", "--config"])
            .arg(&scfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut client = client;
    let read_all = |r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(r).read_to_string(&mut s);
            s
        })
    };
    let out = read_all(Box::new(client.0.stdout.take().unwrap()));
    let err = read_all(Box::new(client.0.stderr.take().unwrap()));
    let st = client.0.wait().unwrap();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert!(st.success(), "client failed: {stderr}\n{stdout}");
    assert!(stdout.contains("\"test\":\"send_lat\""), "{stdout}");
    // It did find the server not accepting at first.
    assert!(stderr.contains("trying again"), "{stderr}");
    assert!(server.0.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dpperf server and two client processes (write_bw 64 KiB, send_lat 64 B paced at 2000
/// pings a second) over one memif
/// link at `mtu` (the client in memif's zero-copy mode with `client_zc`); returns the client's
/// write_bw result.
fn two_processes(tag: &str, mtu: u16, client_zc: bool) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("dpwarp-memif-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let (scfg, ccfg) = configs(&dir, &sock, 93, mtu, client_zc);
    let bin = env!("CARGO_BIN_EXE_dpwarp");

    let mut server = Kill(
        Command::new(bin)
            .args([
                "dpperf",
                "--server",
                "--json",
                "--count",
                "2",
                "--addr",
                "10.93.0.1:18515",
                "--config",
            ])
            .arg(&scfg)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = listening(&mut server.0);
    let run = |test: &str, sizes: &str, iters: &str, extra: &[&str]| {
        let o = Command::new(bin)
            .args([
                "dpperf",
                "--addr",
                "10.93.0.1:18515",
                "--json",
                "--test",
                test,
            ])
            .args(["--size", sizes, "--iters", iters])
            .args(extra)
            .arg("--config")
            .arg(&ccfg)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{test} failed: {}\n{stdout}",
            String::from_utf8_lossy(&o.stderr)
        );
        stdout
    };
    // Each client process makes one connection (one size): the server serves two.
    let bw = run("write_bw", "65536", "300", &[]);
    assert!(
        bw.contains("\"test\":\"write_bw\"") && bw.contains("\"size\":65536"),
        "{bw}"
    );
    // Paced pings (`--mps`, sockperf's under-load): the client drives its worker between
    // them (the idle gaps a server sees between requests); 320 pings at 2000 a second take at
    // least 0.1595 s.
    let lat = run(
        "send_lat",
        "64",
        "300",
        &["--warmup", "20", "--mps", "2000"],
    );
    let lat: serde_json::Value = lat
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no send_lat JSON: {lat}"));
    assert_eq!(lat["test"], "send_lat", "{lat}");
    assert_eq!(lat["pings_per_s"], 2000, "{lat}");
    assert_eq!(lat["lat_us"]["count"], 300, "{lat}");
    assert!(lat["run_s"].as_f64().unwrap() >= 0.1595, "{lat}");
    let st = server.0.wait().unwrap();
    assert!(st.success(), "server exit {st}");
    // The server's --json lines: this side's copy counts per connection, in the shape
    // scripts/bench reads (`role`, `test`, `size`, `copies.rx_per_byte`).
    let srv: Vec<serde_json::Value> = lines
        .map(|l| l.unwrap())
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(srv.len(), 2, "{srv:?}");
    assert_eq!(srv[0]["role"], "server");
    assert_eq!(srv[0]["test"], "write_bw");
    assert_eq!(srv[0]["size"], 65536);
    assert!(srv[0]["copies"]["rx_payload"].as_u64().unwrap() >= 65536 * 300);
    assert!(srv[0]["copies"]["rx_per_byte"].as_f64().is_some());
    assert_eq!(srv[1]["test"], "send_lat");
    let _ = std::fs::remove_dir_all(&dir);
    bw.lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("a write_bw JSON line")
}
