//! Hostile peers that only open TCP connections: a worker holds at most `tcp.max_connections`
//! (each costs a socket's buffers) and does not take the rest (their SYNs go unanswered and are
//! counted; a client retransmits, as to a kernel listener whose backlog is full), and takes new
//! ones again once old ones are gone. DPDK net_tap inside a network namespace this test makes (and
//! deletes); the test thread enters the namespace and connects with kernel TCP sockets that
//! never send an MPA Request. Needs root (netns, tap). One EAL per process.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;

mod netns_common;
use netns_common::{ip, Netns};

const LIMIT: usize = 3;

/// Connected, then either still open (`true`: a read times out) or reset/closed (`false`).
fn stays_open(s: &mut TcpStream, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    let mut b = [0u8; 16];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut b) {
            Ok(0) => return false,
            Ok(n) => panic!("the dataplane sent {n} bytes before any MPA Request"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return true
            }
            // net_tap's signals interrupt blocking calls of this process.
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return false,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Connect within `timeout`; a connection not taken fails here (its SYNs unanswered).
fn open(addr: SocketAddr, timeout: Duration) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_nodelay(true).unwrap();
    Some(s)
}

#[test]
fn connections_beyond_max_connections_are_not_taken() {
    let pid = std::process::id();
    let ns = Netns::new("dpwlim");
    ns.enter();
    let tap = format!("dpwl{pid}");
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_tap0,iface={tap}"]
[[port]]
device = "net_tap0"
ip = "10.97.0.2/24"
mac = "02:00:00:97:00:02"
mbufs = 4095
[worker]
spin_us = 5
[tcp]
rx_buffer = 65536
tx_buffer = 65536
backlog = 2
max_connections = {LIMIT}
# The held connections send no MPA Request: keep them for the whole test.
mpa_timeout_ms = 60000
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.97.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();
    let _listener = ep.listen(7100).unwrap();
    let addr: SocketAddr = "10.97.0.2:7100".parse().unwrap();

    // The first LIMIT connections are held (they wait for an MPA Request).
    let mut held = Vec::new();
    let t0 = Instant::now();
    while held.len() < LIMIT {
        assert!(t0.elapsed() < Duration::from_secs(20), "could not connect");
        if let Some(mut s) = open(addr, Duration::from_secs(5)) {
            if stays_open(&mut s, Duration::from_millis(300)) {
                held.push(s);
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // No further one is taken while they are (1.5 s: a SYN and its retransmission).
    for i in 0..4 {
        if let Some(mut s) = open(addr, Duration::from_millis(1500)) {
            assert!(
                !stays_open(&mut s, Duration::from_secs(3)),
                "connection {} beyond the limit was kept",
                LIMIT + i
            );
        }
    }
    let refused: u64 = dp.stats().iter().map(|s| s.refused).sum();
    assert!(refused >= 4, "refused {refused}");

    // Abort the held ones (RST): the worker frees them and takes a new connection again.
    for s in held.drain(..) {
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
    }
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no connection accepted after the held ones were gone"
        );
        if let Some(mut s) = open(addr, Duration::from_secs(5)) {
            if stays_open(&mut s, Duration::from_millis(500)) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(dp);
}
