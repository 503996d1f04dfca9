//! The region gate (csrc/shim.c; docs/workers.md "net_memif and a peer that disconnects"):
//! DPDK 22.11's net_memif unmaps its shared regions on the EAL interrupt thread when the peer
//! disconnects, and maps new ones when it reconnects, while a burst on a worker thread may
//! still be using the old ones (a segfault in librte_net_memif: an rpc-server whose client
//! exited, in CI; this file's memif test without the mmap half of the gate). dpwarp points
//! net_memif's own imports of mmap64 and munmap (its GOT entries, nothing else) at functions
//! that wait for any net_memif burst in progress; the host program's mmap and munmap stay
//! glibc's.
//!
//! - `the_gates_munmap_and_mmap_wait_for_a_burst_in_progress`: the functions net_memif's
//!   imports point at do not return while another thread holds the gate as a burst does;
//! - `the_programs_own_mmap_never_waits`: libc's mmap/munmap, called by this program while a
//!   burst holds the gate, return at once (the library interposes nothing process-wide);
//! - `a_program_that_links_dpwarp_exports_no_mmap`: `nm -D` of this test executable defines
//!   no mmap, mmap64 or munmap;
//! - `memif_queues_are_gated_and_the_pmd_maps_through_the_gate`: both ends of a memif link in
//!   one process, the server's queue polled by a thread without pause (as a worker does) while
//!   the client disconnects and reconnects 50 times; net_memif's own mmaps and munmaps of the
//!   regions pass through the gate, memif queues are gated and a net_ring queue is not, and
//!   the process survives (before the mmap half it died in about one run in five).
//!
//! One EAL per process: the last is the only EAL test of this binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::dpdk::{self, Mbuf, Port, PortConf};

mod memif_common;
use memif_common::{memif_pair_in_one_process, wait_link};

/// Run `call` on this thread while another holds the gate for 200 ms; whether `call` returned
/// only after the gate was released, and the gate's counts before and after.
fn run_while_held(call: impl FnOnce()) -> (bool, dpdk::RegionGateStats, dpdk::RegionGateStats) {
    let released = AtomicBool::new(false);
    let mut waited = false;
    let (held_tx, held_rx) = mpsc::channel();
    let before = dpdk::region_gate_stats();
    thread::scope(|s| {
        s.spawn(|| {
            let hold = dpdk::hold_region_gate_for_test().expect("a gate slot");
            held_tx.send(()).unwrap();
            // Long enough that an ungated call on the other thread returns well before.
            thread::sleep(Duration::from_millis(200));
            released.store(true, Ordering::SeqCst);
            drop(hold);
        });
        held_rx.recv().unwrap();
        call();
        waited = released.load(Ordering::SeqCst);
    });
    (waited, before, dpdk::region_gate_stats())
}

fn waits_for_the_holder(what: &str, call: impl FnOnce()) {
    let (waited, before, after) = run_while_held(call);
    assert!(waited, "{what} returned while a burst held the gate");
    assert!(
        after.waits > before.waits,
        "{what}: {before:?} -> {after:?}"
    );
}

#[test]
fn the_gates_munmap_and_mmap_wait_for_a_burst_in_progress() {
    let page = dpdk::map_page_as_a_pmd_for_test().expect("mmap64");
    waits_for_the_holder("munmap", || assert!(page.unmap(), "munmap failed"));
    let mut page = None;
    waits_for_the_holder("mmap64", || page = dpdk::map_page_as_a_pmd_for_test());
    assert!(page.expect("mmap64").unmap(), "munmap failed");
}

#[test]
fn the_programs_own_mmap_never_waits() {
    let (waited, _, _) = run_while_held(|| {
        // SAFETY: an anonymous private page, unmapped right after; nothing else refers to it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            assert_eq!(libc::munmap(p, 4096), 0, "munmap");
        }
    });
    assert!(!waited, "the program's own mmap/munmap waited for the gate");
}

#[test]
fn a_program_that_links_dpwarp_exports_no_mmap() {
    let exe = std::env::current_exe().expect("current_exe");
    let out = std::process::Command::new("nm")
        .arg("-D")
        .arg(&exe)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm -D {}", exe.display());
    let syms = String::from_utf8_lossy(&out.stdout);
    // Lines are "<value> <type> <name>" when defined, "U <name>" when imported.
    let mut imported = Vec::new();
    let mut defined = Vec::new();
    for line in syms.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match f.as_slice() {
            [kind, name] | [_, kind, name] => (*kind, name.split('@').next().unwrap_or(name)),
            _ => continue,
        };
        if matches!(name, "mmap" | "mmap64" | "munmap") {
            if kind == "U" || kind == "w" {
                imported.push(name);
            } else {
                defined.push(name);
            }
        }
    }
    assert!(
        defined.is_empty(),
        "{} defines {defined:?} in its dynamic symbols",
        exe.display()
    );
    // The program does use them (std and DPDK do), from glibc.
    assert!(
        imported.contains(&"munmap"),
        "nm -D of {} shows no import of munmap: {syms}",
        exe.display()
    );
}

#[test]
fn memif_queues_are_gated_and_the_pmd_maps_through_the_gate() {
    let (eal, pool, server, client, sock) = memif_pair_in_one_process("regiongate");
    let (ring_a, _ring_b) = Port::ring_pair(eal, "regiongate", 1, 1024).expect("net_ring pair");
    ring_a
        .configure(&PortConf::default(), pool)
        .expect("configure ring");
    assert!(
        !ring_a.claim_queue(0).expect("ring queue").gated(),
        "a net_ring queue is gated"
    );

    let mut server_q = server.claim_queue(0).expect("server queue");
    let client_q = client.claim_queue(0).expect("client queue");
    assert!(
        server_q.gated() && client_q.gated(),
        "memif queues not gated"
    );
    assert!(
        dpdk::region_gate_in_effect(),
        "net_memif's mmap64/munmap imports do not point at the gate"
    );
    drop(client_q);

    const ROUNDS: usize = 50;
    server.start().expect("server start");
    let before = dpdk::region_gate_stats();
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        // The server's queue polled without pause, as a worker polls it, through every
        // disconnect the client makes.
        let poller = sc.spawn(|| {
            let mut got: Vec<Mbuf> = Vec::with_capacity(32);
            let mut bursts = 0u64;
            while !stop.load(Ordering::Relaxed) {
                server_q.rx_burst(&mut got, 32);
                got.clear();
                bursts += 1;
            }
            bursts
        });
        for round in 0..ROUNDS {
            client.start().expect("client start");
            wait_link(&client, &format!("round {round}: client"));
            wait_link(&server, &format!("round {round}: server"));
            // The client's stop sends DISCONNECT; the server's interrupt thread unmaps the
            // regions while the poller bursts.
            client.stop().expect("client stop");
            let t0 = Instant::now();
            while server.link().expect("link").1 {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "round {round}: server link still up"
                );
                thread::sleep(Duration::from_millis(1));
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(poller.join().unwrap() > 0, "the poller never burst");
    });
    let after = dpdk::region_gate_stats();
    eprintln!("region gate: {after:?}");
    // Each connect maps a region on both ends (the client creates its own, the server maps
    // the client's) and each disconnect unmaps them (the client's on its stop, the server's on
    // the DISCONNECT, after its link reads down; the last round's may come after this read):
    // net_memif's own calls, through the gate.
    assert!(
        after.memif_maps - before.memif_maps >= 2 * ROUNDS as u64
            && after.memif_unmaps - before.memif_unmaps >= 2 * ROUNDS as u64 - 1,
        "net_memif's mmaps/munmaps did not pass through the gate: {before:?} -> {after:?}"
    );
    drop(server_q);
    server.stop().expect("server stop");
    client.close().expect("client close");
    server.close().expect("server close");
    let _ = std::fs::remove_file(&sock);
}
