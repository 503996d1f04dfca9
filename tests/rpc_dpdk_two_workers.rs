//! An RPC-over-RDMA storage target on two DPDK workers of one port, with its clients on the
//! Linux stack: DPDK net_af_packet with two queues (`qpairs=2`) on a veth in a network
//! namespace this test makes (and deletes); the test thread enters the namespace, so the
//! clients' kernel-TCP sockets live there. The kernel's flow hash picks each received
//! frame's queue (a `PACKET_FANOUT_HASH` group, as a NIC's RSS would), unrelated to which
//! worker holds the connection: every connection must still be served whole, its frames
//! handed to their owner (src/dataplane/steer.rs; without it, a connection whose frames
//! land on the other worker is reset by that worker's smoltcp). Four clients at once, each
//! on its own server and store, three connections each, every procedure and chunk path with
//! the data verified. Needs root. One EAL per process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dpwarp::cm::Net;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::rpc::block::BlockStore;
use dpwarp::rpc::client::{ClientConfig, RdmaClient};

mod netns_common;
use netns_common::{ip, Netns};
mod rpc_common;
use rpc_common::{block_server, exercise};

const CLIENTS: u16 = 4;
const CONNECTIONS_EACH: usize = 3;

#[test]
fn rpc_target_on_two_workers_serves_kernel_clients_whatever_queue_their_frames_take() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("rpc_dpdk_two_workers: still running after 120 s; aborting");
        std::process::abort();
    });
    let pid = std::process::id();
    let ns = Netns::new("dpwr2w");
    ns.enter();
    let (a, b) = (format!("r2a{pid}"), format!("r2b{pid}"));
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&[
        "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
    ]);
    ip(&["-n", &ns.0, "addr", "add", "10.89.0.1/24", "dev", &b]);
    ip(&["-n", &ns.0, "link", "set", &a, "up"]);
    ip(&["-n", &ns.0, "link", "set", &b, "up"]);
    // AF_PACKET would hand DPDK the kernel's partially checksummed frames otherwise.
    let st = std::process::Command::new("ethtool")
        .args(["-K", &b, "tx", "off"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("ethtool");
    assert!(st.success(), "ethtool -K {b} tx off");
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_af_packet0,iface={a},qpairs=2"]
[[port]]
device = "net_af_packet0"
ip = "10.89.0.2/24"
mac = "02:00:00:89:00:02"
mbufs = 16383
cores = [0, 1]
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_af_packet");
    let ep = dp.endpoint(0).unwrap();
    assert!(dp.wait_link_up(Duration::from_secs(10)), "link down");

    let mut handles = Vec::new();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let store = Arc::new(BlockStore::memory(1 << 20));
        let srv = block_server(&store);
        let port = 20060 + i;
        handles.push(
            srv.listen(&Net::from(ep.clone()), SocketAddr::from((ep.ip(), port)))
                .expect("listen on the dataplane"),
        );
        clients.push(std::thread::spawn(move || {
            for _ in 0..CONNECTIONS_EACH {
                let addr = SocketAddr::from(([10, 89, 0, 2], port));
                let mut c = RdmaClient::connect(&Net::kernel(), addr, ClientConfig::default())
                    .expect("a kernel-TCP client connects to the DPDK server");
                exercise(&mut c, &store);
            }
        }));
    }
    for c in clients {
        c.join().expect("a client failed");
    }
    let stats = dp.stats();
    assert_eq!(stats.len(), 2, "{stats:?}");
    let handed: u64 = stats.iter().map(|s| s.device.rx_steered_out).sum();
    let taken: u64 = stats.iter().map(|s| s.device.rx_steered_in).sum();
    let arp: u64 = stats.iter().map(|s| s.device.rx_arp_copies).sum();
    let dropped: u64 = stats.iter().map(|s| s.device.rx_steer_dropped).sum();
    eprintln!("frames handed between the workers {handed}, taken {taken}, ARP copies {arp}, dropped {dropped}");
    // Twelve connections: that the kernel's hash sent every one to its owner's queue has
    // odds of 2^-12.
    assert!(
        handed > 0,
        "no frame was handed over: steering was not tested"
    );
    // Pushed into the inboxes (frames, ARP copies) against popped: equal but for the few
    // frames of the connections' last exchanges (the closes) in flight while each worker's
    // counters were read, one worker after the other (dropped ones were never pushed).
    assert!((handed + arp).abs_diff(taken) <= 16, "{stats:?}");
    // Both workers served connections.
    for (i, s) in stats.iter().enumerate() {
        assert!(
            s.device.tx_packets > 0,
            "worker {i} sent nothing: {stats:?}"
        );
    }
    drop(handles);
    drop(dp);
}
