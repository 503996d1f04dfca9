//! The kernel-TCP listener runs MPA startups concurrently, each under a deadline (RFC 5044
//! §7.1.2 item 10): stalled or slow peers in their startup never hold up another client, and
//! stalled ones are closed at the deadline.

mod common;

use dpwarp::verbs::smallvec;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use dpwarp::cm::{self, ConnParam, ListenConfig, Listener};
use dpwarp::mpa::{MpaConfig, Startup};
use dpwarp::verbs::{sge, Access, Opcode, RecvWr, SendWr};

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
    assert_eq!(out.len(), 20 + 4 + pd, "enhanced rev 2 Request");
    out
}

/// 64 stalled startups: a third send nothing, a third 10 octets of the key, a third the
/// header and half of their private data.
fn stalled_clients(addr: SocketAddr) -> Vec<TcpStream> {
    let req = request_bytes(100);
    (0..64)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect stalled client");
            match i % 3 {
                0 => {}
                1 => s.write_all(&req[..10]).unwrap(),
                _ => s.write_all(&req[..20 + (req.len() - 20) / 2]).unwrap(),
            }
            s
        })
        .collect()
}

/// Serve every request on `l` (accept with a fresh side that has one receive posted) until
/// `n` Sends arrived; returns how many requests were served.
fn serve(l: Arc<Listener>, n: usize) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut sides = Vec::new();
        let mut got = 0;
        let end = Instant::now() + Duration::from_secs(20);
        while got < n && Instant::now() < end {
            let Ok(req) = l.get_request(Duration::from_millis(100)) else {
                continue;
            };
            let s = Side::new();
            let buf = s.pd.reg_mr(4096, Access::LOCAL_WRITE);
            s.qp.post_recv(RecvWr {
                wr_id: 7,
                sg_list: smallvec![sge(&buf, 0, 4096)],
            })
            .unwrap();
            req.accept(&s.qp, &ConnParam::default()).expect("accept");
            let wc = wc_ok(&s.cq);
            assert_eq!(wc.byte_len, 64);
            assert_eq!(&buf.to_vec()[..64], &pattern(3, 64)[..]);
            got += 1;
            sides.push((s, buf));
        }
        got
    })
}

/// A client that connects and sends 64 octets; returns the time it took.
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

/// True if `s` reads as closed (EOF or reset) within `limit`.
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
            Ok(_) => {} // a stalled peer never gets a Reply, but keep reading
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn rfc5044_s7_1_2_stalled_startups_do_not_block_a_normal_connection() {
    let l = Arc::new(Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap());
    let addr = l.local_addr().unwrap();
    let mut stalled = stalled_clients(addr);
    // Give the acceptor the chance to take all 64 into startup first.
    thread::sleep(Duration::from_millis(50));
    let server = serve(l.clone(), 1);
    let took = normal_client(addr);
    assert!(
        took < Duration::from_secs(1),
        "a normal connection behind 64 stalled startups took {took:?}"
    );
    // The stalled ones are still in their startup (default deadline 5 s): not closed.
    for s in stalled.iter_mut().take(3) {
        assert!(!closed_within(s, Duration::from_millis(10)));
    }
    assert_eq!(server.join().unwrap(), 1);
}

#[test]
fn rfc5044_s7_1_2_stalled_startups_closed_at_the_deadline() {
    let cfg = ListenConfig {
        mpa_timeout: Duration::from_millis(300),
        ..ListenConfig::default()
    };
    let l = Listener::bind_with(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = l.local_addr().unwrap();
    let t0 = Instant::now();
    let mut stalled = stalled_clients(addr);
    for (i, s) in stalled.iter_mut().enumerate() {
        let limit =
            (t0 + Duration::from_millis(300 + 1500)).saturating_duration_since(Instant::now());
        assert!(
            closed_within(s, limit),
            "stalled client {i} (kind {}) still open {:?} after it connected",
            i % 3,
            t0.elapsed()
        );
    }
    // The listener still serves.
    let server = serve(Arc::new(l), 1);
    normal_client(addr);
    assert_eq!(server.join().unwrap(), 1);
}

#[test]
fn rfc5044_s7_1_2_a_slow_valid_client_does_not_delay_another() {
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = l.local_addr().unwrap();
    // A valid Request one octet every 50 ms: 20 + 4 + 16 octets, about 2 s in all.
    let req = request_bytes(16);
    let slow = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        for b in &req {
            s.write_all(&[*b]).unwrap();
            thread::sleep(Duration::from_millis(50));
        }
        // The Reply comes once the server accepts it.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = [0u8; 20];
        s.read_exact(&mut reply)
            .expect("MPA Reply to the slow client");
        assert_eq!(&reply[..16], b"MPA ID Rep Frame");
        s
    });
    thread::sleep(Duration::from_millis(100));
    // The slow client is first in line; the normal one must not wait for it.
    let srv = thread::spawn(move || {
        let first = l
            .get_request(Duration::from_secs(10))
            .expect("first request");
        let t = Instant::now();
        let s = Side::new();
        let buf = s.pd.reg_mr(4096, Access::LOCAL_WRITE);
        s.qp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: smallvec![sge(&buf, 0, 4096)],
        })
        .unwrap();
        first.accept(&s.qp, &ConnParam::default()).expect("accept");
        let wc = wc_ok(&s.cq);
        assert_eq!(wc.byte_len, 64);
        // Then the slow one, once it is complete.
        let second = l
            .get_request(Duration::from_secs(10))
            .expect("slow request");
        let s2 = Side::new();
        second
            .accept(&s2.qp, &ConnParam::default())
            .expect("accept slow");
        (t, s, s2)
    });
    let took = normal_client(addr);
    assert!(
        took < Duration::from_secs(1),
        "a normal connection behind a slow startup took {took:?}"
    );
    let (_t, _s, _s2) = srv.join().unwrap();
    drop(slow.join().unwrap());
}

#[test]
fn startups_beyond_max_startups_are_closed() {
    let cfg = ListenConfig {
        max_startups: 4,
        ..ListenConfig::default()
    };
    let l = Listener::bind_with(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = l.local_addr().unwrap();
    let mut held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Let the acceptor take all four into startup.
    thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(addr).unwrap();
    assert!(
        closed_within(&mut fifth, Duration::from_secs(2)),
        "a fifth startup beyond max_startups = 4 was kept"
    );
    for s in held.iter_mut() {
        assert!(
            !closed_within(s, Duration::from_millis(20)),
            "a held startup was closed"
        );
    }
    // Once one of them is gone, a new connection is taken into startup again.
    drop(held.pop());
    thread::sleep(Duration::from_millis(200));
    let mut again = TcpStream::connect(addr).unwrap();
    assert!(!closed_within(&mut again, Duration::from_millis(300)));
}
