//! A worker's pass costs what its busy connections need, not what it holds: a storage target
//! keeps many clients connected while few are active. 100 quiet connections sit beside a busy
//! one on a net_ring pair (background workers); during 2000 Send ping-pongs on the busy one,
//! each worker locks a QP to look for work (`WorkerStats::engine_checks`) a few times per
//! round trip, not once per connection per pass (before: every connection on every pass whose
//! clock had moved, tens of thousands here), reads the post rings only of QPs posted to
//! (`WorkerStats::post_ring_reads`; before: every QP's on every pass) and reads the post flags
//! of one group of 64 socket slots, not all of them (`post_flag_reads`), and its transmit phase
//! visits only connections not quiet (`WorkerStats::transmit_visits`; before: all, every
//! pass), as do its deliver phase (`deliver_visits`: only sockets that took segments) and its
//! completions phase (`completion_visits`: only active connections). Afterwards every quiet
//! connection still carries a Send each way (the egress that visits only sockets with
//! something new did not forget them), and a quiet connection's disconnect is acted on at
//! once, not by the next sweep. The workers sweep only at their start (`sweep_us` two
//! minutes): so neither a first connect (its SYN held back by smoltcp until ARP has answered)
//! nor a disconnect can have waited for a sweep. One EAL per process: the only EAL test of
//! this binary.

use std::net::SocketAddrV4;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::Device;

mod dp_common;
use dp_common::{ring_config, End};

/// More than one group of post flags (`PostFlags::GROUP`, 64 socket slots) in all.
const QUIET: usize = 100;
const PINGS: usize = 2000;
const PORT: u16 = 4810;
/// Far longer than the test takes (2 s quiet, 12 s once under a loaded CI run).
const SWEEP_US: u64 = 120_000_000;

#[test]
fn quiet_connections_cost_a_busy_one_nothing_and_still_work() {
    let mut cfg = ring_config("dpwqc", |_| {});
    // Sweeps far apart (the first pass is one, the next comes after SWEEP_US): what this test
    // shows happening without a sweep cannot have waited for one, however slow the machine.
    cfg.worker.sweep_us = SWEEP_US;
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let listener = server_ep.listen(PORT).unwrap();
    let server_addr = SocketAddrV4::new(server_ep.ip(), PORT);

    // The server: accepts the quiet connections and the busy one, answers every ping, then
    // takes one Send on each quiet connection and answers it.
    let spd = dev.alloc_pd();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let mut quiet = Vec::new();
        for _ in 0..QUIET + 1 {
            let e = End::new(&spd);
            e.post_recv();
            let req = listener.get_request(Duration::from_secs(10)).unwrap();
            req.accept(&e.qp, &ConnParam::default()).unwrap();
            quiet.push(e);
        }
        let busy = quiet.pop().unwrap();
        for i in 0..PINGS {
            busy.recv(i as u8);
            busy.post_recv();
            busy.send(i as u8 ^ 0xff);
        }
        go_rx.recv().unwrap();
        for (i, e) in quiet.iter().enumerate() {
            e.recv(100u8.wrapping_add(i as u8));
            e.send(200u8.wrapping_add(i as u8));
        }
        // Keep every QP until the client has its answers.
        go_rx.recv().unwrap();
    });

    let pd = dev.alloc_pd();
    let mut quiet = Vec::new();
    for _ in 0..QUIET {
        let e = End::new(&pd);
        client_ep
            .connect(server_addr, &e.qp, &ConnParam::default())
            .expect("connect a quiet connection");
        quiet.push(e);
    }
    let busy = End::new(&pd);
    busy.post_recv();
    client_ep
        .connect(server_addr, &busy.qp, &ConnParam::default())
        .expect("connect the busy connection");

    // Per worker: engine checks, post ring reads, sweeps, transmit visits, passes, deliver
    // visits, completion visits, post flag reads.
    let counts = |dp: &Dataplane| -> Vec<[u64; 8]> {
        dp.stats()
            .iter()
            .map(|w| {
                [
                    w.engine_checks,
                    w.post_ring_reads,
                    w.sweeps,
                    w.transmit_visits,
                    w.loops,
                    w.deliver_visits,
                    w.completion_visits,
                    w.post_flag_reads,
                ]
            })
            .collect()
    };
    let before = counts(&dp);
    for i in 0..PINGS {
        busy.send(i as u8);
        busy.recv(i as u8 ^ 0xff);
        busy.post_recv();
    }
    let after = counts(&dp);
    for (w, (b, a)) in before.iter().zip(&after).enumerate() {
        let [checks, reads, sweeps, visits, passes, delivers, reaps, flags] = [
            a[0] - b[0],
            a[1] - b[1],
            a[2] - b[2],
            a[3] - b[3],
            a[4] - b[4],
            a[5] - b[5],
            a[6] - b[6],
            a[7] - b[7],
        ];
        eprintln!(
            "worker {w}: {checks} engine checks, {reads} post ring reads, {flags} post flag \
             reads, {visits} transmit visits, {delivers} deliver visits, {reaps} completion \
             visits in {passes} passes for {PINGS} round trips ({sweeps} sweeps meanwhile)"
        );
        // Outside the sweep the post phase reads the flags of the group of socket slots the
        // busy connection's posts raise (64 at most), not one per slot (over 100 here).
        let allowed = 64 * passes;
        assert!(
            flags <= allowed,
            "worker {w} read {flags} post flags in {passes} passes with {QUIET} quiet \
             connections (at most {allowed} expected): every slot's flag is being read on \
             every pass"
        );
        assert!(
            checks <= 6 * PINGS as u64,
            "worker {w} looked at engines {checks} times for {PINGS} round trips with {QUIET} \
             quiet connections: the quiet ones are being looked at too"
        );
        // A sweep reads every QP's rings; otherwise only those posted to are read.
        let allowed = 6 * PINGS as u64 + sweeps * (QUIET as u64 + 1);
        assert!(
            reads <= allowed,
            "worker {w} read post rings {reads} times for {PINGS} round trips with {QUIET} \
             quiet connections ({sweeps} sweeps, at most {allowed} expected): the quiet ones' \
             rings are being read on every pass"
        );
        // Outside the sweep the transmit phase visits the busy connection (and, for a pass
        // or two after it was reaped or went quiet, not more than a few others).
        let allowed = 2 * passes + sweeps * (QUIET as u64 + 1);
        assert!(
            visits <= allowed,
            "worker {w}: the transmit phase visited connections {visits} times in {passes} \
             passes with {QUIET} quiet connections ({sweeps} sweeps, at most {allowed} \
             expected): the quiet ones are being visited on every pass"
        );
        // The deliver phase visits the sockets that took segments (the busy one, at most
        // twice per round trip: the data, the ACK), the completions phase the active ones.
        let allowed = 4 * PINGS as u64 + sweeps * (QUIET as u64 + 1);
        assert!(
            delivers <= allowed,
            "worker {w}: the deliver phase visited connections {delivers} times for {PINGS} \
             round trips with {QUIET} quiet connections ({sweeps} sweeps, at most {allowed} \
             expected): the quiet ones are being visited on every pass"
        );
        let allowed = 2 * passes + sweeps * (QUIET as u64 + 1);
        assert!(
            reaps <= allowed,
            "worker {w}: the completions phase visited connections {reaps} times in {passes} \
             passes with {QUIET} quiet connections ({sweeps} sweeps, at most {allowed} \
             expected): the quiet ones are being visited on every pass"
        );
    }

    // The quiet connections still carry data both ways.
    for e in &quiet {
        e.post_recv();
    }
    go_tx.send(()).unwrap();
    for (i, e) in quiet.iter().enumerate() {
        e.send(100u8.wrapping_add(i as u8));
        e.recv(200u8.wrapping_add(i as u8));
    }

    // A quiet connection's disconnect is seen at once, not by the next sweep: it raises the
    // QP's post flag, and the post phase marks the QP for the completions phase, which visits
    // only active connections outside the sweep. With sweeps SWEEP_US apart, a close that
    // waited for one would not end within the 10 s below; and every close is counted: had
    // it seen a sweep, the sweep count would have moved.
    thread::sleep(Duration::from_millis(20)); // every connection quiet again
    let sweeps = |dp: &Dataplane| -> u64 { dp.stats().iter().map(|w| w.sweeps).sum() };
    let mut without_sweep = 0;
    for e in &quiet {
        let before = sweeps(&dp);
        e.qp.disconnect();
        // Spin (`wait_closed` sleeps a millisecond between looks in the background mode).
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !e.qp.is_closed() {
            assert!(
                std::time::Instant::now() < end,
                "a quiet connection did not close within 10 s (sweeps {SWEEP_US} us apart): \
                 its disconnect waits for a sweep"
            );
            thread::yield_now();
        }
        if sweeps(&dp) == before {
            without_sweep += 1;
        }
    }
    eprintln!("{without_sweep} of {QUIET} quiet connections closed with no sweep meanwhile");
    assert!(
        without_sweep > 0,
        "every disconnect of a quiet connection waited for a sweep"
    );
    go_tx.send(()).unwrap();
    server.join().unwrap();
}
