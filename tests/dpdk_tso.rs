//! TCP segmentation offload (port setting `tso`, docs/dataplane.md "TCP segmentation offload") on
//! net_tap, against the Linux TCP stack: a dataplane of three tap ports in a network namespace
//! this test makes (and deletes), the test thread inside it so the kernel-TCP peers (dpwarp's
//! kernel transport: Linux TCP underneath) live there too.
//!
//! - port 0, `tso = "auto"` at MTU 1488: net_tap offers TCP_TSO with MULTI_SEGS and the TCP
//!   checksum is offloaded, so segments smoltcp builds of several frames go to the PMD whole,
//!   one mbuf chain each, and the PMD cuts them (net_tap through librte_gso). 64 KiB RDMA
//!   Writes and Sends to a kernel-TCP peer arrive byte for byte, the device counted TSO
//!   segments and no fallback, the kernel received frames of the MSS (its TCP InSegs), and
//!   it saw no bad checksum (those of every cut frame are the PMD's).
//! - port 1, the same with `tso = "off"`: the device cuts the segments; no TSO segment.
//! - port 2, `tso = "auto"` at the default MTU 1500: net_tap in DPDK 22.11 takes a TSO packet
//!   only if a whole frame fits its MTU, which cannot be raised past 1504: not used, and the
//!   port report says why.
//!
//! MTU 1488 and not 1490 (the most net_tap allows with TSO): smoltcp builds segments of several
//! frames only where FPDUs fill the frames, and an FPDU is a multiple of 4 octets (RFC 5044
//! §4.1 padding), so the EMSS must be one too (1448). Needs root. One EAL per process.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::thread;
use std::time::Duration;

use dpwarp::cm::{ConnParam, Net};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::{Dataplane, Endpoint, WorkerStats};
use dpwarp::verbs::{sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr};
use dpwarp::verbs::{WcOpcode, WcStatus};

mod dp_common;
use dp_common::{advertise, advertised, pattern};
mod netns_common;
use netns_common::{ip, Netns};

const SIZE: usize = 65536;
const WRITES: usize = 48;
const SENDS: usize = 16;
const MTU: u16 = 1488;

/// The namespace's Linux counter `key` of `table` (`Tcp`, `Ip`) in /proc/net/snmp, as this
/// thread (inside the namespace) sees it.
fn snmp(table: &str, key: &str) -> u64 {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let rows: Vec<&str> = snmp
        .lines()
        .filter(|l| l.starts_with(&format!("{table}:")))
        .collect();
    let names: Vec<&str> = rows[0].split_whitespace().collect();
    let vals: Vec<&str> = rows[1].split_whitespace().collect();
    let i = names.iter().position(|n| *n == key).unwrap();
    vals[i].parse().unwrap()
}

/// Write `WRITES` 64 KiB RDMA Writes, then `SENDS` 64 KiB Sends, from `ep` to a kernel-TCP
/// peer listening on `peer` (in this namespace), which checks every octet it received.
fn writes_and_sends_to_kernel_peer(ep: &Endpoint, peer: SocketAddrV4, seed: u8) {
    let listener = Net::kernel()
        .listen(SocketAddr::V4(peer))
        .expect("kernel-TCP listener in the namespace");
    let (checked_tx, checked) = std::sync::mpsc::channel();
    let server = thread::spawn(move || {
        let dev = Device::open();
        let pd = dev.alloc_pd();
        let cq = Cq::new(2 * SENDS);
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        let target = pd.reg_mr(WRITES * SIZE, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let inbox = pd.reg_mr(SENDS * SIZE, Access::LOCAL_WRITE);
        for i in 0..SENDS {
            qp.post_recv(RecvWr {
                wr_id: i as u64,
                sg_list: smallvec![sge(&inbox, i * SIZE, SIZE)],
            })
            .unwrap();
        }
        let req = listener.get_request(Duration::from_secs(20)).unwrap();
        req.accept(
            &qp,
            &ConnParam {
                private_data: advertise(&target),
                ..ConnParam::default()
            },
        )
        .unwrap();
        for i in 0..SENDS {
            let wc = cq.wait(Duration::from_secs(60)).expect("a Send");
            assert_eq!(wc.status, WcStatus::Success, "Send {i}");
            assert_eq!(wc.opcode, WcOpcode::Recv);
            assert_eq!(wc.wr_id, i as u64, "Sends arrive in order");
            assert_eq!(wc.byte_len as usize, SIZE);
        }
        // Every Write was placed before the Sends that followed it were delivered.
        let (t, r) = (target.to_vec(), inbox.to_vec());
        for (what, got, n, base) in [("Write", &t, WRITES, 0u8), ("Send", &r, SENDS, 100)] {
            for i in 0..n {
                let want = pattern(seed ^ base.wrapping_add(i as u8), SIZE);
                if let Some(k) = (0..SIZE).find(|&k| got[i * SIZE + k] != want[k]) {
                    panic!(
                        "{what} {i} differs at octet {k}: got {:?}, sent {:?}",
                        &got[i * SIZE + k..(i * SIZE + k + 16).min((i + 1) * SIZE)],
                        &want[k..(k + 16).min(SIZE)]
                    );
                }
            }
        }
        checked_tx.send(()).unwrap();
        assert!(qp.wait_closed(Duration::from_secs(30)), "no disconnect");
    });

    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(WRITES + SENDS);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr((WRITES + SENDS) * SIZE, Access::LOCAL_WRITE);
    let neg = ep.connect(peer, &qp, &ConnParam::default()).unwrap();
    let (raddr, rkey) = advertised(&neg.peer_private_data);
    for i in 0..WRITES {
        src.write_at(i * SIZE, &pattern(seed ^ i as u8, SIZE));
        qp.post_send(SendWr {
            wr_id: i as u64,
            opcode: Opcode::Write {
                remote_addr: raddr + (i * SIZE) as u64,
                rkey,
            },
            sg_list: smallvec![sge(&src, i * SIZE, SIZE)],
            signaled: true,
        })
        .unwrap();
    }
    for i in 0..SENDS {
        let at = (WRITES + i) * SIZE;
        src.write_at(at, &pattern(seed ^ 100u8.wrapping_add(i as u8), SIZE));
        qp.post_send(SendWr {
            wr_id: (WRITES + i) as u64,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&src, at, SIZE)],
            signaled: true,
        })
        .unwrap();
    }
    for _ in 0..WRITES + SENDS {
        let wc = cq.wait(Duration::from_secs(60)).expect("a completion");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    // Close once the peer has received and checked everything (a failed check ends its
    // thread, and the join reports it).
    let _ = checked.recv_timeout(Duration::from_secs(60));
    qp.disconnect();
    server.join().expect("the kernel-TCP peer's checks");
}

fn tso(s: &[WorkerStats], k: usize) -> (u64, u64, u64, u64) {
    let d = &s[k].device;
    (
        d.tx_tso_segments,
        d.tx_tso_frames,
        d.tx_tso_fallbacks,
        d.tx_gso_segments,
    )
}

#[test]
fn tso_on_net_tap_to_the_kernel_stack() {
    thread::spawn(|| {
        thread::sleep(Duration::from_secs(120));
        eprintln!("dpdk_tso: still running after 120 s; aborting");
        std::process::abort();
    });
    let pid = std::process::id();
    let ns = Netns::new("dpwtso");
    ns.enter();
    let taps: Vec<String> = (0..3).map(|k| format!("dpwso{k}{pid}")).collect();
    let vdevs: Vec<String> = taps
        .iter()
        .enumerate()
        .map(|(k, t)| format!("\"--vdev=net_tap{k},iface={t}\""))
        .collect();
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning",
        {}]
[[port]]
device = "net_tap0"
ip = "10.93.0.2/24"
mac = "02:00:00:93:00:02"
mtu = {MTU}
[[port]]
device = "net_tap1"
ip = "10.93.1.2/24"
mac = "02:00:00:93:01:02"
mtu = {MTU}
tso = "off"
[[port]]
device = "net_tap2"
ip = "10.93.2.2/24"
mac = "02:00:00:93:02:02"
"#,
        vdevs.join(", ")
    ))
    .unwrap();
    assert_eq!(cfg.ports[0].tso, "auto", "tso is auto by default");
    let dp = Dataplane::start(&cfg).expect("dataplane on three taps");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    for (k, t) in taps.iter().enumerate() {
        ip(&[
            "-n",
            &ns.0,
            "addr",
            "add",
            &format!("10.93.{k}.1/24"),
            "dev",
            t,
        ]);
        ip(&["-n", &ns.0, "link", "set", t, "up"]);
    }
    assert!(dp.wait_link_up(Duration::from_secs(10)), "tap link down");

    // What was asked and granted.
    let r = dp.port_reports();
    assert!(r[0].tso.granted, "{:?}", r[0]);
    assert_eq!(r[0].tso.setting, "auto");
    assert!(r[0].tx_offloads.contains("tcp_tso"), "{:?}", r[0]);
    assert!(r[0].tx_offloads.contains("multi_segs"), "{:?}", r[0]);
    // net_tap's MTU is raised by the Ethernet header for its check of TSO frames.
    assert_eq!(
        (r[0].mtu, r[0].link_mtu),
        (Some(MTU + 14), MTU),
        "{:?}",
        r[0]
    );
    assert!(!r[1].tso.granted && r[1].tso.detail == "off", "{:?}", r[1]);
    assert!(!r[1].tx_offloads.contains("tcp_tso"), "{:?}", r[1]);
    assert_eq!(r[1].mtu, Some(MTU), "{:?}", r[1]);
    assert!(!r[2].tso.granted, "{:?}", r[2]);
    assert!(r[2].tso.detail.contains("use mtu <= 1490"), "{:?}", r[2]);
    assert_eq!(r[2].mtu, Some(1500), "{:?}", r[2]);

    // TSO: the frames the PMD cut arrive at the kernel, every octet in place.
    let (segs0, csum0) = (snmp("Tcp", "InSegs"), snmp("Tcp", "InCsumErrors"));
    let ep = dp.endpoint(0).unwrap();
    writes_and_sends_to_kernel_peer(&ep, SocketAddrV4::new(Ipv4Addr::new(10, 93, 0, 1), 4801), 3);
    let in_segs = snmp("Tcp", "InSegs") - segs0;
    let s = dp.stats();
    let (tso_segs, tso_frames, fallbacks, gso_segs) = tso(&s, 0);
    eprintln!(
        "tso = auto: {tso_segs} segments to the PMD whole, {tso_frames} frames; fallbacks \
         {fallbacks}, cut by the device {gso_segs}; the kernel received {in_segs} segments"
    );
    assert!(tso_segs > 0, "no segment went to the PMD whole: {:?}", s[0]);
    assert!(tso_frames >= 2 * tso_segs, "{tso_frames} frames");
    assert_eq!(fallbacks, 0, "{:?}", s[0]);
    // 4 MiB at an EMSS of 1448: about 2900 frames, one TCP segment each at the kernel (it
    // received 64 KiB ones if net_tap had not cut them).
    let payload = ((WRITES + SENDS) * SIZE) as u64;
    assert!(
        in_segs >= payload / u64::from(MTU - 40),
        "the kernel received {in_segs} TCP segments for {payload} octets"
    );

    // tso = "off": the device cuts them.
    let ep = dp.endpoint(1).unwrap();
    writes_and_sends_to_kernel_peer(
        &ep,
        SocketAddrV4::new(Ipv4Addr::new(10, 93, 1, 1), 4802),
        77,
    );
    let s = dp.stats();
    let (tso_segs, _, fallbacks, gso_segs) = tso(&s, 1);
    assert_eq!((tso_segs, fallbacks), (0, 0), "{:?}", s[1]);
    assert!(gso_segs > 0, "the device cut no segment: {:?}", s[1]);

    assert_eq!(
        snmp("Tcp", "InCsumErrors") - csum0,
        0,
        "the kernel counted TCP checksum errors"
    );
    assert_eq!(snmp("Ip", "InHdrErrors"), 0, "IPv4 header errors");
    drop(dp);
}
