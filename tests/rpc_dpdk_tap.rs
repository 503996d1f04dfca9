//! RPC-over-RDMA between the DPDK dataplane and the kernel-TCP transport: DPDK net_tap in a
//! network namespace this test makes (and deletes); the test thread enters the namespace, so
//! the kernel side's sockets live there too. Both directions, every procedure and chunk path
//! with the data verified: an RdmaServer on DPDK with an RdmaClient over kernel TCP, then an
//! RdmaServer over kernel TCP with an RdmaClient on DPDK. The iWARP bytes cross smoltcp <->
//! the Linux TCP stack (checksums offloaded on the tap by default; the kernel verifies them).
//! Needs root. One EAL per process.

use std::net::SocketAddr;

use dpwarp::cm::Net;
use std::sync::Arc;
use std::time::Duration;

use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::rpc::block::BlockStore;
use dpwarp::rpc::client::{ClientConfig, RdmaClient};

mod netns_common;
use netns_common::{ip, Netns};
mod rpc_common;
use rpc_common::{block_server, exercise};

#[test]
fn rpc_between_dpdk_and_kernel_tcp_both_ways() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        eprintln!("rpc_dpdk_tap: still running after 60 s; aborting");
        std::process::abort();
    });
    let pid = std::process::id();
    let ns = Netns::new("dpwrpc");
    ns.enter();
    let tap = format!("dpwr{pid}");
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_tap0,iface={tap}"]
[[port]]
device = "net_tap0"
ip = "10.98.0.2/24"
mac = "02:00:00:98:00:02"
mbufs = 8191
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.98.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();
    assert!(dp.wait_link_up(Duration::from_secs(10)), "tap link down");
    // What the PMD granted, read back: the tap vdev, and the checksum offloads `auto` asks
    // for on net_tap (all four) in force.
    let r = dp.port_reports();
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!(
        (r.driver.as_str(), r.bus.as_str(), r.device.as_str()),
        ("net_tap", "vdev", "net_tap0"),
        "{r:?}"
    );
    assert_eq!((r.rx_queues, r.tx_queues, r.link_up), (1, 1, true), "{r:?}");
    assert_eq!(r.checksum_offload, "tx ipv4,tcp rx ipv4,tcp");
    assert_eq!(r.rx_offloads, "ipv4_cksum,tcp_cksum");
    assert!(r.tx_offloads.starts_with("ipv4_cksum,tcp_cksum"), "{r:?}");
    assert_eq!((r.mtu, r.link_mtu), (Some(1500), 1500), "{r:?}");

    // 1. Server on DPDK, client over kernel TCP (the Linux stack in the namespace).
    let store = Arc::new(BlockStore::memory(1 << 20));
    let srv = block_server(&store);
    let _h = srv
        .listen(&Net::from(ep.clone()), SocketAddr::from((ep.ip(), 20049)))
        .expect("listen on the dataplane");
    let addr = SocketAddr::from(([10, 98, 0, 2], 20049));
    let mut c = RdmaClient::connect(&Net::kernel(), addr, ClientConfig::default())
        .expect("kernel-TCP client connects to the DPDK server");
    exercise(&mut c, &store);
    drop(c);

    // 2. Server over kernel TCP, client on DPDK.
    let store2 = Arc::new(BlockStore::memory(1 << 20));
    let srv2 = block_server(&store2);
    let h2 = srv2
        .listen(&Net::kernel(), SocketAddr::from(([10, 98, 0, 1], 20050)))
        .expect("kernel listener in the namespace");
    let mut c2 = RdmaClient::connect(
        &Net::from(ep.clone()),
        SocketAddr::from(([10, 98, 0, 1], 20050)),
        ClientConfig::default(),
    )
    .expect("DPDK client connects to the kernel-TCP server");
    exercise(&mut c2, &store2);
    drop(c2);
    h2.stop();

    // The namespace's kernel (this thread's view) saw no bad checksums from the dataplane.
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let tcp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let vals: Vec<&str> = tcp[1].split_whitespace().collect();
    let i = names.iter().position(|n| *n == "InCsumErrors").unwrap();
    assert_eq!(vals[i], "0", "kernel counted TCP checksum errors");
    drop(dp);
}
