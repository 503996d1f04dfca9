//! DPDK <-> the Linux kernel TCP stack, each test in a network namespace it creates (and
//! deletes), with names unique to the test process:
//! - net_tap: the DPDK process runs inside the namespace, its tap interface appears there and
//!   gets the kernel side's address; a dpwarp kernel-TCP perf server listens in the namespace.
//! - net_af_packet on a veth pair inside the namespace (kernel tx checksum offload turned off on
//!   the kernel end, since AF_PACKET hands over partially checksummed frames otherwise).
//!
//! The DPDK side is a `dpwarp dpperf` client (write_bw, whose final Send is answered only after
//! every Write arrived, then send_lat). Needs root (netns, tap, veth): without it the tests fail
//! rather than pass silently.
//!
//! Under loss (net_af_packet, the DPDK port dropping 2 % of its frames with `[port.faults]`):
//! dpwarp's TCP (the vendored smoltcp) recovers by fast retransmits driven by the Linux
//! receiver's duplicate ACKs and SACK blocks, and Linux recovers what the DPDK side failed to
//! receive with the SACK blocks dpwarp's receiver sends (third_party/smoltcp/DPWARP.md "Loss
//! recovery").
//!
//! Through a bottleneck (a Linux bridge port at 20 Mbit/s with a 60 KB queue, in a third
//! namespace): with congestion control dpwarp's sender loses little at the queue, without it
//! (`[tcp] congestion_control = "none"`) it overruns the queue (docs/datapath.md
//! "Congestion control").

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod netns_common;
use netns_common::{ip, Netns};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn netns(tag: &str) -> Netns {
    let ns = Netns::new(&format!("dpw{tag}"));
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ns
}

/// `dpwarp dpperf` run inside `ns`; the caller adds its arguments.
fn dpperf_in(ns: &Netns) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &ns.0,
        env!("CARGO_BIN_EXE_dpwarp"),
        "dpperf",
    ]);
    c
}

fn kernel_server(ns: &Netns, port: u16, count: usize) -> Kill {
    let mut c = dpperf_in(ns)
        .args(["--transport", "kernel", "--server"])
        .args([
            "--count",
            &count.to_string(),
            "--addr",
            &format!("0.0.0.0:{port}"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&mut c, "kernel server");
    Kill(c)
}

/// Read a dpperf server's stdout up to its "listening" line (20 s at most).
fn wait_listening(c: &mut Child, what: &str) {
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let t0 = Instant::now();
    loop {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("{what} exited"))
            .unwrap();
        if l.contains("listening") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{what} not listening"
        );
    }
}

fn write_config(tag: &str, vdev: &str, ip: &str, mac: &str) -> std::path::PathBuf {
    write_config_with(tag, vdev, ip, mac, "")
}

/// [`write_config`] with `port_extra` appended to the port's table (after `mbufs`).
fn write_config_with(
    tag: &str,
    vdev: &str,
    ip: &str,
    mac: &str,
    port_extra: &str,
) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("dpwarp-{tag}-{}.toml", std::process::id()));
    let text = format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev={vdev}"]
[[port]]
device = "{dev}"
ip = "{ip}/24"
mac = "{mac}"
mbufs = 8191
{port_extra}
[worker]
spin_us = 5
"#,
        dev = vdev.split(',').next().unwrap()
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// A veth pair `<tag>a<pid>` / `<tag>b<pid>` in `ns`, both up, the kernel end (b) at
/// `kernel_ip` with `ethtool -K` `features` set; returns the DPDK end's name. The kernel end
/// needs at least its tx checksum offload off: it would otherwise send frames with only a
/// partial TCP checksum, which AF_PACKET passes to DPDK as they are.
fn veth_in_netns(ns: &Netns, tag: &str, kernel_ip: &str, features: &[&str]) -> String {
    let a = format!("{tag}a{}", std::process::id());
    let b = format!("{tag}b{}", std::process::id());
    ip(&[
        "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
    ]);
    ip(&["-n", &ns.0, "addr", "add", kernel_ip, "dev", &b]);
    ip(&["-n", &ns.0, "link", "set", &a, "up"]);
    ip(&["-n", &ns.0, "link", "set", &b, "up"]);
    ethtool_k(ns, &b, features);
    a
}

/// `ethtool -K dev features` in `ns`, required to succeed.
fn ethtool_k(ns: &Netns, dev: &str, features: &[&str]) {
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.0, "ethtool", "-K", dev])
        .args(features)
        .stdout(Stdio::null())
        .status()
        .expect("ethtool");
    assert!(st.success(), "ethtool -K {dev} {features:?} failed");
}

/// Run the DPDK perf client inside `ns`; `setup` runs once the client process exists (to give
/// the tap its address).
fn dpdk_client(ns: &Netns, cfg: &std::path::Path, server: &str, test: &str, size: &str) -> Child {
    dpperf_in(ns)
        .args(["--json", "--iters", "200"])
        .args(["--addr", server, "--test", test, "--size", size, "--config"])
        .arg(cfg)
        // Info level: the port's checksum plan and the device counters logged at exit.
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for the client; (stdout, stderr) once it succeeded.
fn finish(c: Child, what: &str) -> (String, String) {
    let o = c.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{what} failed: {err}\n{out}");
    (out, err)
}

/// The checksum offload counters the dpperf client logged at exit ("checksum offload: tx N rx
/// good N rx sw-verified N rx bad N"): (tx, good, sw, bad).
fn cksum_counters(err: &str) -> (u64, u64, u64, u64) {
    let l = err
        .lines()
        .find(|l| l.contains("checksum offload: tx"))
        .unwrap_or_else(|| panic!("no device counters logged:\n{err}"));
    let after = |k: &str| number_after(l, k);
    (
        after("checksum offload: tx "),
        after("rx good "),
        after("rx sw-verified "),
        after("rx bad "),
    )
}

/// The one port of the `"ports"` array a dpperf client's `--json` line for `test` carries
/// (what the PMD granted: `dataplane::PortReport`), checked to be the only one.
fn json_port(out: &str, test: &str) -> serde_json::Value {
    let line = out
        .lines()
        .find(|l| l.contains(&format!("\"test\":\"{test}\"")))
        .unwrap_or_else(|| panic!("no {test} line:\n{out}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    let ports = v["ports"]
        .as_array()
        .unwrap_or_else(|| panic!("no ports array: {line}"));
    assert_eq!(ports.len(), 1, "{line}");
    ports[0].clone()
}

/// The kernel's count in namespace `ns` of packets dropped for a bad IPv4 header
/// (IpInHdrErrors, which counts bad header checksums) plus TCP segments dropped for a bad
/// checksum (TcpInCsumErrors).
fn kernel_csum_errors(ns: &Netns) -> u64 {
    kernel_counter(ns, "IpInHdrErrors") + kernel_counter(ns, "TcpInCsumErrors")
}

#[test]
fn tap_dpdk_to_kernel_stack_in_netns() {
    let ns = netns("tap");
    let tap = format!("dpwt{}", std::process::id());
    let _srv = kernel_server(&ns, 18516, 2);
    let cfg = write_config(
        "tap",
        &format!("net_tap0,iface={tap}"),
        "10.95.0.2",
        "02:00:00:95:00:02",
    );
    for (test, size) in [("write_bw", "65536"), ("send_lat", "64")] {
        let c = dpdk_client(&ns, &cfg, "10.95.0.1:18516", test, size);
        // The tap exists once the client's EAL created it: give the kernel end its address.
        let t0 = Instant::now();
        loop {
            let st = Command::new("ip")
                .args(["-n", &ns.0, "link", "show", &tap])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            if st.success() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "tap never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("ip")
            .args(["-n", &ns.0, "addr", "add", "10.95.0.1/24", "dev", &tap])
            .stderr(Stdio::null())
            .status();
        ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
        let (out, err) = finish(c, test);
        assert!(out.contains(&format!("\"test\":\"{test}\"")), "{out}");
        // net_tap offers IPv4/TCP checksum offload both ways and `checksum` defaults to
        // auto: the PMD fills our checksums and the kernel verifies them (a wrong one is
        // dropped and counted, and the transfer stalls: with the offload flags left unset,
        // smoltcp's zero checksums go out and this client fails); the PMD checks the kernel's
        // and we take its verdict.
        assert!(
            err.contains("offload tx ipv4,tcp rx ipv4,tcp"),
            "offload not enabled on net_tap:\n{err}"
        );
        // What the PMD granted, logged at start and in the JSON: the vdev and its bus as the
        // EAL names them, and the checksum offloads asked for in force both ways.
        assert!(
            err.contains("granted: net_tap0 (bus vdev, driver net_tap)"),
            "no port report logged:\n{err}"
        );
        let p = json_port(&out, test);
        assert_eq!(
            (&p["driver"], &p["bus"], &p["device"]),
            (&"net_tap".into(), &"vdev".into(), &"net_tap0".into()),
            "{p}"
        );
        assert_eq!((&p["rx_queues"], &p["tx_queues"]), (&1.into(), &1.into()));
        assert_eq!(p["checksum_offload"], "tx ipv4,tcp rx ipv4,tcp", "{p}");
        assert_eq!(p["rx_offloads"], "ipv4_cksum,tcp_cksum", "{p}");
        let tx_on = p["tx_offloads"].as_str().unwrap();
        assert!(
            tx_on.starts_with("ipv4_cksum,tcp_cksum"),
            "tx offloads in force: {p}"
        );
        for capa in ["ipv4_cksum", "tcp_cksum", "tcp_tso", "multi_segs"] {
            assert!(p["tx_offload_capa"].as_str().unwrap().contains(capa), "{p}");
        }
        assert_eq!(p["link_up"], true, "{p}");
        assert_eq!(p["rss"]["asked"], false, "one queue: {p}");
        let (tx, good, sw, bad) = cksum_counters(&err);
        assert!(tx > 100, "frames sent with checksum offload: {tx}\n{err}");
        assert!(good > 100, "frames the PMD verified: {good}\n{err}");
        assert_eq!((sw, bad), (0, 0), "{err}");
    }
    assert_eq!(
        kernel_csum_errors(&ns),
        0,
        "the kernel saw bad TCP checksums"
    );
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn af_packet_on_veth_in_netns() {
    let ns = netns("afp");
    let a = veth_in_netns(&ns, "dpw", "10.96.0.1/24", &["tx", "off"]);
    let _srv = kernel_server(&ns, 18517, 2);
    let cfg = write_config(
        "afp",
        &format!("net_af_packet0,iface={a}"),
        "10.96.0.2",
        "02:00:00:96:00:02",
    );
    for (test, size) in [("write_bw", "65536"), ("send_lat", "64")] {
        let c = dpdk_client(&ns, &cfg, "10.96.0.1:18517", test, size);
        let (out, err) = finish(c, test);
        assert!(out.contains(&format!("\"test\":\"{test}\"")), "{out}");
        // net_af_packet offers no checksum offload: smoltcp computes and verifies them.
        assert!(err.contains("offload tx none rx none"), "{err}");
        let p = json_port(&out, test);
        assert_eq!(
            (&p["driver"], &p["bus"]),
            (&"net_af_packet".into(), &"vdev".into())
        );
        assert_eq!(
            (&p["rx_offloads"], &p["checksum_offload"]),
            (&"none".into(), &"tx none rx none".into()),
            "{p}"
        );
        assert_eq!(cksum_counters(&err), (0, 0, 0, 0), "{err}");
    }
    assert_eq!(
        kernel_csum_errors(&ns),
        0,
        "the kernel saw bad TCP checksums"
    );
    let _ = std::fs::remove_file(cfg);
}

/// The kernel's TCP sockets in `ns` on `port` (local or remote) in a closing state that
/// waits for the peer (FIN-WAIT-1, FIN-WAIT-2, CLOSING, LAST-ACK), one `ss` line each.
fn kernel_closing_sockets(ns: &Netns, port: u16) -> Vec<String> {
    output_in(
        ns,
        &[
            "ss",
            "-tanH",
            "state",
            "fin-wait-1",
            "state",
            "fin-wait-2",
            "state",
            "closing",
            "state",
            "last-ack",
        ],
    )
    .lines()
    .filter(|l| l.contains(&format!(":{port} ")))
    .map(str::to_string)
    .collect()
}

/// A DPDK process that closes its connection and exits at once still completes the TCP close
/// with its peer: dropping the dataplane keeps the workers polling (for up to 1 s) until
/// every closing connection has had its FIN and the peer's acknowledged. The kernel peer's
/// socket is then gone; without that drain the peer's FIN went to a port that no longer
/// existed, and its socket sat in LAST-ACK, retransmitting the FIN (for minutes, Linux's
/// `tcp_orphan_retries`). Over memif the peer's last segments were then sent into a link
/// the departing process was tearing down (docs/workers.md "Stopping").
#[test]
fn af_packet_client_exit_completes_the_tcp_close() {
    let ns = netns("afc");
    let a = veth_in_netns(&ns, "dpc", "10.98.0.1/24", &["tx", "off"]);
    let _srv = kernel_server(&ns, 18519, 3);
    let cfg = write_config(
        "afc",
        &format!("net_af_packet0,iface={a}"),
        "10.98.0.2",
        "02:00:00:98:00:02",
    );
    for round in 0..3 {
        let c = dpdk_client(&ns, &cfg, "10.98.0.1:18519", "send_lat", "64");
        let (_, err) = finish(c, "send_lat");
        let stop: Vec<&str> = err.lines().filter(|l| l.contains("stopp")).collect();
        // The kernel server closes its side when it sees the client's FIN (at once); give
        // a retransmitted FIN time to be answered, if there is anyone left to answer it.
        let t0 = Instant::now();
        let mut left = kernel_closing_sockets(&ns, 18519);
        while !left.is_empty() && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(50));
            left = kernel_closing_sockets(&ns, 18519);
        }
        assert!(
            left.is_empty(),
            "round {round}: kernel sockets still closing 3 s after the DPDK client exited: \
             {left:?}; the client: {stop:?}"
        );
    }
    let _ = std::fs::remove_file(cfg);
}

/// `[worker] warm_us` against the Linux TCP stack: the DPDK client's keep-alives while its
/// application is quiet (RFC 1122 §4.2.3.6: the last acknowledged octet again) are answered by
/// the kernel (an ACK each: the client receives at least as many frames beyond the ping-pong's
/// as it sent keep-alives), they carry nothing the kernel takes as data (the paced ping-pong
/// completes, no retransmission on either side), and the kernel counts each as a duplicate of
/// data it already has (its D-SACK counter).
#[test]
fn af_packet_warm_keep_alives_are_answered_by_the_kernel() {
    let ns = netns("afw");
    let a = veth_in_netns(&ns, "dpk", "10.92.0.1/24", &["tx", "off"]);
    let _srv = kernel_server(&ns, 18521, 1);
    let cfg = write_config(
        "afw",
        &format!("net_af_packet0,iface={a}"),
        "10.92.0.2",
        "02:00:00:92:00:02",
    );
    // The [worker] table is the config's last: warm_us joins it.
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("warm_us = 20\n");
    std::fs::write(&cfg, text).unwrap();
    let retrans_before = kernel_counter(&ns, "TcpRetransSegs");
    let dsacks_before = kernel_counter(&ns, "TcpExtTCPDSACKOldSent");
    let c = dpperf_in(&ns)
        .args([
            "--json", "--iters", "200", "--warmup", "50", "--mps", "1000",
        ])
        .args([
            "--addr",
            "10.92.0.1:18521",
            "--test",
            "send_lat",
            "--size",
            "64",
        ])
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = finish(c, "paced send_lat with warm_us");
    assert_eq!(json_u64(&out, "count"), 200, "{out}");
    let counter = |key: &str| number_after(&err, key);
    let warm = counter("warm keep-alives ");
    let rx = counter(": rx ");
    // 250 pings in 0.25 s with 1 ms between them: thousands of 20 us idle stretches.
    assert!(warm > 100, "{warm} keep-alives in 250 gaps of 1 ms:\n{err}");
    // Each ping brings one reply; everything else the client received answered a keep-alive.
    assert!(
        rx >= 250 + warm * 9 / 10,
        "{rx} frames received for 250 pings and {warm} keep-alives: the kernel left keep-alives \
         unanswered\n{err}"
    );
    assert_eq!(counter("tcp retransmits: fast "), 0, "{err}");
    assert_eq!(
        kernel_counter(&ns, "TcpRetransSegs"),
        retrans_before,
        "the kernel retransmitted"
    );
    // Linux takes each as a duplicate of data it has (RFC 2883 D-SACK in its answer).
    let dsacks = kernel_counter(&ns, "TcpExtTCPDSACKOldSent") - dsacks_before;
    assert!(
        (warm * 9 / 10..=warm).contains(&dsacks),
        "{dsacks} D-SACKs for old data from the kernel for {warm} keep-alives"
    );
    eprintln!("keep-alives {warm}, frames received {rx}, kernel D-SACKs for old data {dsacks}");
    let _ = std::fs::remove_file(cfg);
}

/// The standard output of `cmd` run in `ns` (`ip netns exec`), required to succeed.
fn output_in(ns: &Netns, cmd: &[&str]) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The kernel's count in namespace `ns` of the TCP counter `key` (nstat, absolute).
fn kernel_counter(ns: &Netns, key: &str) -> u64 {
    let s = output_in(ns, &["nstat", "-asz", key]);
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("nstat {key}: {s}"))
}

/// The number right after the first `key` in `text` (a log line's counter).
fn number_after(text: &str, key: &str) -> u64 {
    let i = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
        + key.len();
    text[i..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The value of `"key":N` in a JSON line.
fn json_u64(line: &str, key: &str) -> u64 {
    number_after(line, &format!("\"{key}\":"))
}

/// Both directions through 2 % loss between dpwarp on DPDK (net_af_packet on a veth) and the
/// Linux TCP stack: every Write arrives (write_bw's final Send is answered only after all of
/// them), dpwarp's sender repairs its losses with fast retransmits (the Linux receiver's
/// duplicate ACKs and SACK blocks), and Linux's sender repairs the frames dpwarp's port
/// dropped on receive by SACK recovery, from the SACK blocks dpwarp's receiver sends.
#[test]
fn af_packet_loss_both_ways_with_kernel_peer() {
    let ns = netns("afl");
    // No segmentation offload either: the kernel then sends frames of the MSS, each of which
    // the faults may drop on its own.
    let a = veth_in_netns(
        &ns,
        "dpl",
        "10.98.0.1/24",
        &["tx", "off", "tso", "off", "gso", "off"],
    );
    let vdev = format!("net_af_packet0,iface={a}");
    let faults = |direction: &str| {
        format!(
            "checksum = \"software\"\n[port.faults]\nseed = 11\ndrop = 0.02\n\
             direction = \"{direction}\""
        )
    };

    // dpwarp sends: 2 % of the DPDK port's frames dropped on the way out.
    let _srv = kernel_server(&ns, 18518, 1);
    let cfg = write_config_with(
        "afl-tx",
        &vdev,
        "10.98.0.2",
        "02:00:00:98:00:02",
        &faults("tx"),
    );
    let c = dpdk_client(&ns, &cfg, "10.98.0.1:18518", "write_bw", "65536");
    let (out, err) = finish(c, "write_bw under tx loss");
    let line = out
        .lines()
        .find(|l| l.contains("\"test\":\"write_bw\""))
        .unwrap_or_else(|| panic!("no result: {out}\n{err}"));
    let fast = json_u64(line, "fast");
    eprintln!(
        "dpwarp sending: fast retransmits {fast}, timeouts {}",
        json_u64(line, "timeout")
    );
    assert!(
        fast > 0,
        "dpwarp retransmitted nothing by fast retransmit under 2 % loss: {line}\n{err}"
    );
    let _ = std::fs::remove_file(cfg);

    // Linux sends (dpwarp's kernel-TCP transport as the client), the DPDK server's port drops
    // 2 % of the frames it receives.
    let cfg = write_config_with(
        "afl-rx",
        &vdev,
        "10.98.0.2",
        "02:00:00:98:00:02",
        &faults("rx"),
    );
    let mut srv = dpperf_in(&ns)
        .args(["--server", "--json"])
        .args(["--count", "1", "--addr", "10.98.0.2:18519", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(&mut srv, "DPDK server");
    let srv = Kill(srv);
    let retrans0 = kernel_counter(&ns, "TcpRetransSegs");
    let sack0 = kernel_counter(&ns, "TcpExtTCPSackRecovery");
    let dsack0 = kernel_counter(&ns, "TcpExtTCPDSACKRecv");
    let c = dpperf_in(&ns)
        .args(["--transport", "kernel"])
        .args([
            "--json", "--iters", "200", "--test", "write_bw", "--size", "65536",
        ])
        .args(["--addr", "10.98.0.2:18519"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = finish(c, "write_bw from the kernel under rx loss");
    assert!(out.contains("\"test\":\"write_bw\""), "{out}\n{err}");
    let retrans = kernel_counter(&ns, "TcpRetransSegs") - retrans0;
    let sack = kernel_counter(&ns, "TcpExtTCPSackRecovery") - sack0;
    // D-SACKs from dpwarp's receiver (a retransmission that was not needed), for the record.
    let dsack = kernel_counter(&ns, "TcpExtTCPDSACKRecv") - dsack0;
    eprintln!(
        "kernel sending: {retrans} segments retransmitted, {sack} SACK recoveries, {dsack} \
         D-SACKs received"
    );
    assert!(
        retrans > 0,
        "the kernel retransmitted nothing: no loss was injected?"
    );
    assert!(
        sack > 0,
        "the kernel never recovered with SACK ({retrans} segments retransmitted): dpwarp's \
         receiver sent no usable SACK blocks"
    );
    drop(srv);
    let _ = std::fs::remove_file(cfg);
}

/// (packets sent, packets dropped) by the root qdisc of `dev` in `ns` (`tc -s qdisc`).
fn qdisc_counts(ns: &Netns, dev: &str) -> (u64, u64) {
    let s = output_in(ns, &["tc", "-s", "qdisc", "show", "dev", dev]);
    let word_after = |k: &str| -> u64 {
        let i = s.find(k).unwrap_or_else(|| panic!("{k} in {s}")) + k.len();
        s[i..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let pkts = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[1] == "pkt")
        .map(|w| w[0].parse().unwrap())
        .unwrap_or_else(|| panic!("pkt in {s}"));
    (pkts, word_after("dropped"))
}

/// Through a bottleneck (a Linux bridge whose port towards the receiver sends at 20 Mbit/s
/// from a 60 KB queue, as a switch or router would), dpwarp's TCP sender with congestion
/// control (`[tcp] congestion_control`, CUBIC by default, RFC 9438) fills the link and loses
/// little at the queue; without it (`none`: only the receive window limits what is in
/// flight) it overruns the queue every round trip and most of what it sends is dropped there.
/// The receiver is Linux; the DPDK port is net_af_packet on a veth into the bridge's
/// namespace. 20 Mbit/s, far below what even a debug build sends on a loaded host, so that
/// the sender without congestion control overruns the queue whatever the load (at 100 Mbit/s
/// CI runs' debug senders dropped only 2.8-4.6 times as many frames as with CUBIC);
/// scripts/bottleneck measures at 100 Mbit/s with a release build.
#[test]
fn af_packet_through_a_bottleneck_with_kernel_peer() {
    let (d, k, m) = (netns("bnd"), netns("bnk"), netns("bnm"));
    ip(&[
        "-n", &d.0, "link", "add", "d0", "type", "veth", "peer", "name", "d1", "netns", &m.0,
    ]);
    ip(&[
        "-n", &k.0, "link", "add", "k0", "type", "veth", "peer", "name", "k1", "netns", &m.0,
    ]);
    ip(&["-n", &m.0, "link", "add", "br0", "type", "bridge"]);
    for port in ["d1", "k1"] {
        ip(&["-n", &m.0, "link", "set", port, "master", "br0"]);
    }
    for (ns, dev) in [(&m, "br0"), (&m, "d1"), (&m, "k1"), (&d, "d0"), (&k, "k0")] {
        ip(&["-n", &ns.0, "link", "set", dev, "up"]);
    }
    ip(&["-n", &k.0, "addr", "add", "10.99.0.1/24", "dev", "k0"]);
    // Frames of one MSS each way (the kernel would otherwise hand AF_PACKET partially
    // checksummed frames, and send 64 KB ones through the bridge).
    for (ns, dev) in [(&d, "d0"), (&k, "k0"), (&m, "d1"), (&m, "k1")] {
        ethtool_k(
            ns,
            dev,
            &["tx", "off", "tso", "off", "gso", "off", "gro", "off"],
        );
    }
    let st = Command::new("ip")
        .args([
            "netns", "exec", &m.0, "tc", "qdisc", "add", "dev", "k1", "root",
        ])
        .args(["tbf", "rate", "20mbit", "burst", "20k", "limit", "60000"])
        .status()
        .expect("tc");
    assert!(st.success(), "tc qdisc add tbf");
    let _srv = kernel_server(&k, 18520, 2);

    // (qdisc drops, packets through it) for one write_bw run with `cc`.
    let run = |cc: &str| -> (u64, u64) {
        let cfg = write_config_with(
            &format!("bn-{cc}"),
            "net_af_packet0,iface=d0",
            "10.99.0.2",
            "02:00:00:99:00:02",
            &format!("[tcp]\ncongestion_control = \"{cc}\""),
        );
        let (sent0, dropped0) = qdisc_counts(&m, "k1");
        let c = dpperf_in(&d)
            .args([
                "--json", "--iters", "50", "--test", "write_bw", "--size", "65536",
            ])
            .args(["--addr", "10.99.0.1:18520", "--config"])
            .arg(&cfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, err) = finish(c, &format!("write_bw through the bottleneck, {cc}"));
        let _ = std::fs::remove_file(cfg);
        let (sent1, dropped1) = qdisc_counts(&m, "k1");
        let line = out
            .lines()
            .find(|l| l.contains("\"test\":\"write_bw\""))
            .unwrap_or_else(|| panic!("no result: {out}\n{err}"));
        let (sent, dropped) = (sent1 - sent0, dropped1 - dropped0);
        eprintln!(
            "bottleneck, congestion_control = {cc}: {} Mbit/s, {sent} packets through, \
             {dropped} dropped at the queue; fast retransmits {}, timeouts {}",
            line.split("\"gbps\":")
                .nth(1)
                .and_then(|v| v.split([',', '}']).next())
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(0.0, |g| g * 1000.0),
            json_u64(line, "fast"),
            json_u64(line, "timeout")
        );
        (dropped, sent)
    };
    let (cubic_dropped, cubic_sent) = run("cubic");
    let (none_dropped, none_sent) = run("none");
    assert!(
        cubic_sent > 2000 && none_sent > 2000,
        "3.3 MB went through the bottleneck: {cubic_sent} / {none_sent} packets"
    );
    assert!(
        cubic_dropped * 20 < cubic_sent,
        "with congestion control, {cubic_dropped} of {cubic_sent} packets dropped at the queue"
    );
    assert!(
        none_dropped > 5 * cubic_dropped.max(1),
        "without congestion control the sender should overrun the queue: {none_dropped} \
         dropped, {cubic_dropped} with it"
    );
}

/// The flow steering counters of every worker a dpperf process logged at exit ("flow
/// steering: handed to other workers N, taken from them N, ARP copies N, dropped N"),
/// summed: (handed over, taken, ARP copies, dropped).
fn steering_counters(err: &str) -> (u64, u64, u64, u64) {
    err.lines()
        .filter(|l| l.contains("flow steering: handed"))
        .map(|l| {
            (
                number_after(l, "handed to other workers "),
                number_after(l, "taken from them "),
                number_after(l, "ARP copies "),
                number_after(l, "dropped "),
            )
        })
        .fold((0, 0, 0, 0), |a, b| {
            (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3)
        })
}

/// The owners took what was handed to them (frames and ARP copies pushed into the inboxes,
/// `handed + arp`, against those popped, `taken`): all of it but for the few frames of the
/// last exchange in flight while the counters were read at exit, one worker after the other.
fn inboxes_drained(handed: u64, taken: u64, arp: u64, log: &str) {
    assert!(
        (handed + arp).abs_diff(taken) <= 16,
        "handed over and taken differ:\n{log}"
    );
}

/// Message sizes for the steering tests: one connection each (dpperf opens one per size),
/// so twelve connections whose 4-tuples the kernel's hash spreads over the two queues.
const STEER_BW_SIZES: &str = "65536,32768,16384,8192,4096,2048,1024,512";
const STEER_LAT_SIZES: &str = "64,128,256,512";

/// A DPDK port of two queues served by two workers, where the PMD spreads received frames
/// by a hash of its own: net_af_packet with `qpairs=2` puts its two sockets in a
/// `PACKET_FANOUT_HASH` group, so the kernel picks each frame's queue by its flow hash, as
/// a NIC's RSS does. A connection's frames must still reach the worker holding its socket
/// (src/dataplane/steer.rs): before flow steering, a SYN-ACK landing on the other worker's
/// queue met a worker with no socket for it, whose RST ended the connection ("TCP connect
/// failed"), and nearly every run of this test failed at its first connections. Here
/// dpwarp is the client of twelve connections (one per size) to the Linux stack.
#[test]
fn af_packet_two_workers_client_frames_reach_their_owner() {
    let ns = netns("afs");
    let a = veth_in_netns(&ns, "dps", "10.98.0.1/24", &["tx", "off"]);
    let _srv = kernel_server(&ns, 18519, 12);
    let cfg = write_config_with(
        "afs",
        &format!("net_af_packet0,iface={a},qpairs=2"),
        "10.98.0.2",
        "02:00:00:98:00:02",
        "cores = [0, 1]",
    );
    let mut handed = 0;
    for (test, sizes) in [("write_bw", STEER_BW_SIZES), ("send_lat", STEER_LAT_SIZES)] {
        let c = dpdk_client(&ns, &cfg, "10.98.0.1:18519", test, sizes);
        let (out, err) = finish(c, test);
        assert_eq!(
            out.lines()
                .filter(|l| l.contains(&format!("\"test\":\"{test}\"")))
                .count(),
            sizes.split(',').count(),
            "{out}\n{err}"
        );
        assert!(err.contains("queues 2"), "{err}");
        let (out_n, in_n, arp, _) = steering_counters(&err);
        inboxes_drained(out_n, in_n, arp, &err);
        handed += out_n;
    }
    // The kernel's hash and dpwarp's owner function are unrelated: with twelve connections
    // some frames landed on the other worker's queue (all twelve agreeing by chance: 2^-12).
    assert!(
        handed > 0,
        "no frame was handed over: the test did not test steering"
    );
    let _ = std::fs::remove_file(cfg);
}

/// The same port shape with dpwarp as the server: the kernel's hash puts each connection's
/// SYN on either queue, and it must reach the worker that owns its 4-tuple, whose listener
/// takes it, and every later frame of the connection too. Twelve connections from the Linux
/// stack (`dpperf --transport kernel`), served one after another.
#[test]
fn af_packet_two_workers_server_frames_reach_their_owner() {
    let ns = netns("afv");
    let a = veth_in_netns(&ns, "dpv", "10.99.0.1/24", &["tx", "off"]);
    let cfg = write_config_with(
        "afv",
        &format!("net_af_packet0,iface={a},qpairs=2"),
        "10.99.0.2",
        "02:00:00:99:00:02",
        "cores = [0, 1]",
    );
    let mut srv = dpperf_in(&ns)
        .args(["--server", "--count", "12", "--addr", "0.0.0.0:18520"])
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&mut srv, "dpdk server");
    let mut stderr = srv.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut srv = Kill(srv);
    for (test, sizes) in [("write_bw", STEER_BW_SIZES), ("send_lat", STEER_LAT_SIZES)] {
        let c = dpperf_in(&ns)
            .args(["--transport", "kernel", "--json", "--iters", "200"])
            .args(["--addr", "10.99.0.2:18520", "--test", test, "--size", sizes])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, err) = finish(c, &format!("kernel {test} client"));
        assert_eq!(
            out.lines()
                .filter(|l| l.contains(&format!("\"test\":\"{test}\"")))
                .count(),
            sizes.split(',').count(),
            "{out}\n{err}"
        );
    }
    // The server exits after its twelfth connection, logging its counters.
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = srv.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "dpdk server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = log.join().unwrap();
    assert!(st.success(), "dpdk server failed: {err}");
    assert!(err.contains("queues 2"), "{err}");
    let (out_n, in_n, arp, _) = steering_counters(&err);
    inboxes_drained(out_n, in_n, arp, &err);
    assert!(
        out_n > 0,
        "no frame was handed over: the test did not test steering\n{err}"
    );
    let _ = std::fs::remove_file(cfg);
}
