//! A TERMINATE is never lost at close (RFC 5040 §7.1: the Local Peer MUST send it). The
//! server's TERMINATE is provoked while megabytes of its RDMA Writes wait for a peer that has
//! stopped reading, and the server application closes at once:
//! - in-process: the driver must not close the stream as soon as the bytes it had staged are
//!   out (it used to, leaving the TERMINATE queued behind them unsent);
//! - in a child process that exits right after the error (this test binary re-run with
//!   `CHILD_ENV` set), as `dpwarp perf -R` did: dropping the QP must wait for the flush.

mod common;
mod terminate_common;

use dpwarp::verbs::smallvec;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dpwarp::cm::{ConnParam, Listener};
use dpwarp::verbs::{sge, Access, Opcode, SendWr};
use terminate_common::{assert_terminated, peer, LEN};

const CHILD_ENV: &str = "DPWARP_TEST_TERMINATE_CHILD";

/// The server: accept one connection, RDMA Write `LEN` octets into the region the peer named in
/// its private data (address, STag), wait for the TERMINATE it sends when the peer writes to an
/// STag it never advertised, then drop everything at once.
fn server(l: Listener) {
    let req = l.get_request(Duration::from_secs(10)).expect("request");
    let pd = &req.peer.private_data;
    let sink_addr = u64::from_be_bytes(pd[..8].try_into().unwrap());
    let sink_stag = u32::from_be_bytes(pd[8..12].try_into().unwrap());
    let s = Side::new();
    let src = s.pd.reg_mr(LEN, Access::LOCAL_WRITE);
    req.accept(&s.qp, &ConnParam::default()).expect("accept");
    let chunk = LEN / 8;
    for i in 0..8u64 {
        s.qp.post_send(SendWr {
            wr_id: i,
            opcode: Opcode::Write {
                remote_addr: sink_addr + i * chunk as u64,
                rkey: sink_stag,
            },
            sg_list: smallvec![sge(&src, i as usize * chunk, chunk)],
            signaled: true,
        })
        .unwrap();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while s.qp.terminate_cause().is_none() && !s.qp.is_closed() && Instant::now() < end {
        std::hint::spin_loop();
    }
    drop(s);
    drop(l);
}

#[test]
fn rfc5040_s7_1_terminate_queued_behind_a_full_send_buffer_still_goes_out() {
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = l.local_addr().unwrap();
    let srv = std::thread::spawn(move || server(l));
    let events = peer(addr);
    assert_terminated(&events, "in-process server");
    srv.join().unwrap();
}

/// The server half of [`rfc5040_s7_1_terminate_reaches_the_peer_before_exit`] (child process).
#[test]
#[ignore = "the server half of rfc5040_s7_1_terminate_reaches_the_peer_before_exit (child process)"]
fn terminate_child_server() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    println!("PORT={}", l.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    server(l);
    // As a tool that exits on the error: every thread ends here.
    std::process::exit(0);
}

#[test]
fn rfc5040_s7_1_terminate_reaches_the_peer_before_exit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for round in 0..5 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "terminate_child_server",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the server process");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = loop {
            let line = lines.next().expect("the server prints its port").unwrap();
            if let Some(p) = line.strip_prefix("PORT=") {
                break p.trim().parse().unwrap();
            }
        };
        let events = peer(SocketAddr::from(([127, 0, 0, 1], port)));
        assert_terminated(&events, &format!("round {round}"));
        assert!(child.wait().unwrap().success());
    }
}
