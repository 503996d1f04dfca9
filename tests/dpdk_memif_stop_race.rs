//! Stopping a net_memif port while its peer disconnects: both ends of one memif link in one
//! process, connected, then stopped at the same moment from two threads, many times over.
//!
//! DPDK 22.11's memif tears a connection down in `memif_disconnect`, which both
//! `rte_eth_dev_stop` (on the caller's thread) and the control channel's handler for the peer's
//! DISCONNECT message (on the EAL interrupt thread) run, with only the control channel itself
//! under a lock: the two could close the same queue descriptors and free the same regions at
//! once. Seen as a segfault in `rte_eth_dev_stop` at the end of a dpperf run (one run in about
//! ten), when both processes stopped their ports together. dpwarp stops and closes ports on
//! the interrupt thread (`dpdk::Port::stop`), so the two cannot overlap. Without that, this
//! test fails: in 1000 rounds EAL's `rte_free` reported a double free ("EAL: Error: Invalid
//! memory") 16 to 67 times, and one run in four died of a segfault.
//!
//! The rounds run in a child process (this test binary again, `CHILD` set), so that the
//! parent can read EAL's log lines on its stderr and see how it ended.
//! One EAL per process: this file holds the only EAL test of its binary.

use std::sync::Barrier;
use std::thread;

mod memif_common;
use memif_common::{memif_pair_in_one_process, wait_link};

const TEST: &str = "memif_ports_stopped_while_the_peer_disconnects";
const CHILD: &str = "DPW_STOPRACE_CHILD";

#[test]
fn memif_ports_stopped_while_the_peer_disconnects() {
    if std::env::var_os(CHILD).is_some() {
        return rounds();
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([TEST, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("Error")).collect();
    assert!(
        out.status.success() && errors.is_empty(),
        "child: {}; {} EAL error lines, e.g. {:?}\nstdout: {}",
        out.status,
        errors.len(),
        errors.first(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran no rounds: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Start both ends, wait for the link, stop both at once; `ROUNDS` times.
fn rounds() {
    let (_eal, _pool, server, client, sock) = memif_pair_in_one_process("stoprace");
    const ROUNDS: usize = 1000;
    let barrier = Barrier::new(2);
    for round in 0..ROUNDS {
        server.start().expect("server start");
        client.start().expect("client start");
        wait_link(&server, &format!("round {round}: server"));
        wait_link(&client, &format!("round {round}: client"));
        // The client's stop sends DISCONNECT, which the server's control channel handles on
        // the interrupt thread while the other thread stops the server.
        thread::scope(|sc| {
            sc.spawn(|| {
                barrier.wait();
                server.stop().expect("server stop");
            });
            barrier.wait();
            client.stop().expect("client stop");
        });
        assert!(
            !server.link().expect("link").1,
            "round {round}: server link still up"
        );
    }
    client.close().expect("client close");
    server.close().expect("server close");
    let _ = std::fs::remove_file(&sock);
}
