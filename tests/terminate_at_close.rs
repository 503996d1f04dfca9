//! A TERMINATE is never lost at close (RFC 5040 §7.1: the Local Peer MUST send it): a server
//! process that detects a remote access error and exits at once still gets its TERMINATE to the
//! peer ahead of the FIN. The server runs in a child process (this test binary re-run with
//! `CHILD_ENV` set), so its exit really ends every thread, as a tool's exit does.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dpwarp::cm::{self, ConnParam, Listener};
use dpwarp::verbs::{sge, Access, Opcode, QpTerminate, SendWr};

const CHILD_ENV: &str = "DPWARP_TEST_TERMINATE_CHILD";

/// The server: accept one connection, wait for the TERMINATE it sends when the peer writes to
/// an STag it never advertised, then drop everything and exit the process at once.
#[test]
#[ignore = "the server half of rfc5040_s7_1_terminate_reaches_the_peer_before_exit (child process)"]
fn terminate_child_server() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    println!("PORT={}", l.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    let req = l.get_request(Duration::from_secs(10)).expect("request");
    let s = Side::new();
    let _mr = s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    req.accept(&s.qp, &ConnParam::default()).expect("accept");
    let end = Instant::now() + Duration::from_secs(10);
    while s.qp.terminate_cause().is_none() && !s.qp.is_closed() && Instant::now() < end {
        std::hint::spin_loop();
    }
    drop(s);
    drop(l);
    std::process::exit(0);
}

#[test]
fn rfc5040_s7_1_terminate_reaches_the_peer_before_exit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for round in 0..20 {
        let mut child = Command::new(&exe)
            .args(["--exact", "terminate_child_server", "--ignored", "--nocapture"])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the server process");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = loop {
            let line = lines
                .next()
                .expect("the server prints its port")
                .unwrap();
            if let Some(p) = line.strip_prefix("PORT=") {
                break p.trim().parse().unwrap();
            }
        };
        let c = Side::new();
        let buf = c.pd.reg_mr(4096, Access::LOCAL_WRITE);
        cm::connect_tcp(
            SocketAddr::from(([127, 0, 0, 1], port)),
            &c.qp,
            &ConnParam::default(),
        )
        .expect("connect");
        // An RDMA Write to an STag the server never advertised (RFC 5040 §7.1 case 2).
        c.qp.post_send(SendWr {
            wr_id: 1,
            opcode: Opcode::Write {
                remote_addr: 0,
                rkey: 0x5eed_0000,
            },
            sg_list: vec![sge(&buf, 0, 64)],
            signaled: true,
        })
        .unwrap();
        assert!(c.qp.wait_closed(Duration::from_secs(10)), "round {round}: still open");
        assert!(
            matches!(c.qp.terminate_cause(), Some(QpTerminate::Received(_))),
            "round {round}: the stream closed without the server's TERMINATE ({:?})",
            c.qp.terminate_cause()
        );
        assert!(child.wait().unwrap().success());
    }
}

/// The TERMINATE is queued while megabytes of the server's RDMA Writes still wait for a peer
/// that does not read: once the peer reads again, the TERMINATE must come before the FIN (the
/// driver used to close as soon as the bytes already staged were out).
#[test]
fn rfc5040_s7_1_terminate_queued_behind_a_full_send_buffer_still_goes_out() {
    use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
    use dpwarp::rdma::{MemoryTable, PdId};
    use std::io::Read;
    use std::net::TcpStream;

    const LEN: usize = 32 << 20;
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = l.local_addr().unwrap();
    // The raw peer: the sans-IO engine over a socket whose reading we control.
    let mem = MemoryTable::new();
    let sink = mem.register(PdId(0), LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (sink_addr, sink_stag) = (sink.addr(), sink.stag());
    let server = std::thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).expect("request");
        let s = Side::new();
        let src = s.pd.reg_mr(LEN, Access::LOCAL_WRITE);
        req.accept(&s.qp, &ConnParam::default()).expect("accept");
        for i in 0..8u64 {
            let chunk = LEN / 8;
            s.qp.post_send(SendWr {
                wr_id: i,
                opcode: Opcode::Write {
                    remote_addr: sink_addr + i * chunk as u64,
                    rkey: sink_stag,
                },
                sg_list: vec![sge(&src, i as usize * chunk, chunk)],
                signaled: true,
            })
            .unwrap();
        }
        let end = Instant::now() + Duration::from_secs(10);
        while s.qp.terminate_cause().is_none() && !s.qp.is_closed() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The application closes at once.
        drop(s);
    });
    let mut sock = TcpStream::connect(addr).unwrap();
    let mut conn = Connection::initiator(ConnConfig::default(), mem.clone(), Instant::now());
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    conn.poll_transmit(&mut out);
    sock.write_all(&out).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut events = Vec::new();
    while !conn.is_established() {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "EOF during startup");
        conn.on_bytes(&buf[..n], Instant::now());
        while let Some(ev) = conn.poll_event() {
            events.push(ev);
        }
    }
    // Take the first 64 KiB of the server's Writes, then stop reading and let its send
    // buffer fill.
    let mut first = 0usize;
    while first < 64 * 1024 {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "EOF before the server's Writes");
        first += n;
        conn.on_bytes(&buf[..n], Instant::now());
    }
    std::thread::sleep(Duration::from_millis(200));
    // Provoke a TERMINATE with a Write to an STag the server never advertised.
    conn.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: 0,
            rkey: 0x5eed_0000,
        },
        sg_list: vec![dpwarp::verbs::Sge {
            addr: sink_addr,
            length: 64,
            lkey: sink_stag,
        }],
        signaled: true,
    })
    .unwrap();
    out.clear();
    conn.poll_transmit(&mut out);
    sock.write_all(&out).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Now read everything until EOF.
    let mut total = 0usize;
    loop {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n;
                conn.on_bytes(&buf[..n], Instant::now())
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}"),
        }
        while let Some(ev) = conn.poll_event() {
            events.push(ev);
        }
        if events
            .iter()
            .any(|e| matches!(e, ConnEvent::TerminateReceived(_)))
        {
            break;
        }
    }
    while let Some(ev) = conn.poll_event() {
        events.push(ev);
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ConnEvent::TerminateReceived(_))),
        "the stream ended without the server's TERMINATE: {events:?}"
    );
    eprintln!("read {total} octets after the pause; events {events:?}");
    drop(sock);
    server.join().unwrap();
}
