//! The DPDK listener runs MPA startups concurrently, each under a deadline (RFC 5044 §7.1.2
//! item 10) and a cap: stalled or slow peers in their startup never hold up another client,
//! stalled ones are closed (RST) at the deadline, connections beyond the cap are not taken
//! (their SYNs are dropped and counted; the client retransmits).
//! DPDK net_tap inside a network namespace this test makes (and deletes); the test thread
//! enters the namespace and its kernel TCP sockets are the peers. Needs root. One EAL per
//! process, so one test.

mod common;

use dpwarp::verbs::smallvec;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::{pattern, wc_ok, Side};
use dpwarp::cm::{self, ConnParam, ListenConfig, Listener};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::mpa::{MpaConfig, Startup};
use dpwarp::verbs::{sge, Access, Opcode, RecvWr, SendWr};

mod netns_common;
use netns_common::{ip, Netns};

/// The MPA Request bytes a default initiator sends, with `pd` octets of private data.
fn request_bytes(pd: usize) -> Vec<u8> {
    let mut s = Startup::initiator(
        MpaConfig {
            private_data: vec![0x5a; pd],
            ..MpaConfig::default()
        },
        Instant::now(),
    );
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    out
}

/// `n` stalled startups (each with the time it connected): a third send nothing, a third 10
/// octets of the key, a third the header and half of their private data.
fn stalled_clients(addr: SocketAddr, n: usize) -> Vec<(TcpStream, Instant)> {
    let req = request_bytes(100);
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .expect("connect stalled client");
            s.set_nodelay(true).unwrap();
            match i % 3 {
                0 => {}
                1 => s.write_all(&req[..10]).unwrap(),
                _ => s.write_all(&req[..20 + (req.len() - 20) / 2]).unwrap(),
            }
            (s, Instant::now())
        })
        .collect()
}

/// EOF or reset within `limit` (true), or still open (false).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut b = [0u8; 64];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(n) => panic!("{n} octets to a peer that sent no complete MPA Request"),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            // net_tap's signals interrupt blocking calls of this process.
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Accept `n` requests on `l`, each with one receive posted, and check its 64-octet Send.
fn serve(l: Listener, n: usize) -> thread::JoinHandle<Listener> {
    thread::spawn(move || {
        let mut sides = Vec::new();
        for _ in 0..n {
            let req = l.get_request(Duration::from_secs(20)).expect("request");
            let s = Side::new();
            let buf = s.pd.reg_mr(4096, Access::LOCAL_WRITE);
            s.qp.post_recv(RecvWr {
                wr_id: 7,
                sg_list: smallvec![sge(&buf, 0, 4096)],
            })
            .unwrap();
            req.accept(&s.qp, &ConnParam::default()).expect("accept");
            assert_eq!(wc_ok(&s.cq).byte_len, 64);
            assert_eq!(&buf.to_vec()[..64], &pattern(3, 64)[..]);
            sides.push((s, buf));
        }
        l
    })
}

/// A kernel-TCP dpwarp client that connects and sends 64 octets; the time it took.
fn normal_client(addr: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let c = Side::new();
    cm::connect_tcp(addr, &c.qp, &ConnParam::default()).expect("connect");
    let buf = c.pd.reg_mr(4096, Access::LOCAL_WRITE);
    buf.write_at(0, &pattern(3, 64));
    c.qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&buf, 0, 64)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    let took = t0.elapsed();
    c.qp.disconnect();
    took
}

#[test]
fn rfc5044_s7_1_2_dpdk_listener_startups_concurrent_with_deadline_and_cap() {
    let pid = std::process::id();
    let ns = Netns::new("dpwlc");
    ns.enter();
    let tap = format!("dpwc{pid}");
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
[worker]
spin_us = 5
[tcp]
rx_buffer = 65536
tx_buffer = 65536
mpa_timeout_ms = 300
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.98.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();

    // 1. 64 stalled startups on a listener with the config's 300 ms deadline: a normal
    //    connection still completes at once, and every stalled one is closed by its deadline
    //    (plus a margin).
    let l = ep.listen(7200).unwrap();
    let addr: SocketAddr = "10.98.0.2:7200".parse().unwrap();
    // The first connection through the tap also resolves ARP: not part of what is measured.
    let warm = serve(l, 1);
    normal_client(addr);
    let l = warm.join().unwrap();
    let mut stalled = stalled_clients(addr, 64);
    let server = serve(l, 1);
    let took = normal_client(addr);
    assert!(
        took < Duration::from_secs(1),
        "a normal connection behind 64 stalled startups took {took:?}"
    );
    for (i, (s, at)) in stalled.iter_mut().enumerate() {
        let limit =
            (*at + Duration::from_millis(300 + 1500)).saturating_duration_since(Instant::now());
        assert!(
            closed_within(s, limit),
            "stalled client {i} (kind {}) still open {:?} after it connected",
            i % 3,
            at.elapsed()
        );
    }
    drop(server.join().unwrap());

    // 2. A valid client sending its Request one octet every 50 ms (5 s deadline on this
    //    listener) does not delay another client, and is served itself once complete.
    let l = ep
        .listen_with(
            7201,
            &ListenConfig {
                mpa_timeout: Duration::from_secs(5),
                ..ListenConfig::default()
            },
        )
        .unwrap();
    let addr: SocketAddr = "10.98.0.2:7201".parse().unwrap();
    let req = request_bytes(16);
    let slow = thread::spawn(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_nodelay(true).unwrap();
        for b in &req {
            s.write_all(&[*b]).unwrap();
            thread::sleep(Duration::from_millis(50));
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = [0u8; 20];
        loop {
            match s.read_exact(&mut reply) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                r => break r.expect("MPA Reply to the slow client"),
            }
        }
        assert_eq!(&reply[..16], b"MPA ID Rep Frame");
        s
    });
    thread::sleep(Duration::from_millis(100));
    let srv = thread::spawn(move || {
        let first = l
            .get_request(Duration::from_secs(10))
            .expect("first request");
        let s = Side::new();
        let buf = s.pd.reg_mr(4096, Access::LOCAL_WRITE);
        s.qp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: smallvec![sge(&buf, 0, 4096)],
        })
        .unwrap();
        first.accept(&s.qp, &ConnParam::default()).expect("accept");
        assert_eq!(wc_ok(&s.cq).byte_len, 64);
        let second = l
            .get_request(Duration::from_secs(10))
            .expect("slow request");
        let s2 = Side::new();
        second
            .accept(&s2.qp, &ConnParam::default())
            .expect("accept slow");
        (l, s, s2)
    });
    let took = normal_client(addr);
    assert!(
        took < Duration::from_secs(1),
        "a normal connection behind a slow startup took {took:?}"
    );
    let _kept = srv.join().unwrap();
    drop(slow.join().unwrap());

    // 3. The cap: with 4 startups in progress a fifth connection is not taken (its SYN is
    //    dropped and retransmitted, as with a kernel listener whose backlog is full).
    let _l = ep
        .listen_with(
            7202,
            &ListenConfig {
                mpa_timeout: Duration::from_secs(5),
                max_startups: 4,
                ..ListenConfig::default()
            },
        )
        .unwrap();
    let addr: SocketAddr = "10.98.0.2:7202".parse().unwrap();
    let mut held = stalled_clients(addr, 4);
    // Let the worker take all four into startup.
    thread::sleep(Duration::from_millis(200));
    // 1.5 s: the first SYN and its retransmission at 1 s, well inside the held startups'
    // 5 s deadline.
    let refused_before: u64 = dp.stats().iter().map(|s| s.refused).sum();
    match TcpStream::connect_timeout(&addr, Duration::from_millis(1500)) {
        Err(_) => {} // not taken: its SYNs went unanswered
        Ok(mut s) => assert!(
            closed_within(&mut s, Duration::from_secs(2)),
            "a fifth startup beyond max_startups = 4 was kept"
        ),
    }
    for (s, _) in held.iter_mut() {
        assert!(
            !closed_within(s, Duration::from_millis(20)),
            "a held startup was closed"
        );
    }
    let refused: u64 = dp.stats().iter().map(|s| s.refused).sum();
    assert!(
        refused > refused_before,
        "the SYN beyond max_startups was not counted"
    );
    drop(held);

    // 4. The hand-off: a listener whose application takes no request holds max_startups (2)
    //    complete Requests for it; the next ones are closed, counted and logged.
    let _l = ep
        .listen_with(
            7203,
            &ListenConfig {
                mpa_timeout: Duration::from_secs(5),
                max_startups: 2,
                ..ListenConfig::default()
            },
        )
        .unwrap();
    let addr: SocketAddr = "10.98.0.2:7203".parse().unwrap();
    let req = request_bytes(0);
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.write_all(&req).unwrap();
        clients.push(s);
        // One at a time: each Request completes before the next connection's SYN.
        thread::sleep(Duration::from_millis(100));
    }
    let mut closed = 0;
    for s in clients.iter_mut() {
        closed += usize::from(closed_within(s, Duration::from_millis(500)));
    }
    let requests_refused: u64 = dp.stats().iter().map(|s| s.requests_refused).sum();
    assert_eq!(
        (closed, requests_refused),
        (2, 2),
        "complete Requests beyond the hand-off's room"
    );
    drop(dp);
}
