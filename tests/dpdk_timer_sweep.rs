//! The sweeps between full ones visit only the connections whose socket timers are due (and
//! those closing or active), not every connection: 200 quiet connections on a net_ring pair
//! (background workers, the shipped `sweep_us` of 1 ms) with TCP keep-alives every 100 ms, so
//! every socket has a timer that fires about ten times a second and nothing else happens.
//! Over 1.5 s each worker runs hundreds of timer sweeps and only one in `FULL_SWEEP_EVERY`
//! (64) sweeps visits every connection; the timer sweeps' visits are about what the
//! keep-alive timers ask (each quiet socket about once per 100 ms), not 200 per sweep; and
//! the keep-alives are sent and answered (frames go out, nobody is given up on), so the
//! timers of quiet connections still fire. Then 3 rounds of 40 connections open and close
//! beside them (the worker's connection lists change under the sweeps), and afterwards every
//! quiet connection carries a Send each way. One EAL per process: the only EAL test of this
//! binary.

use std::net::SocketAddrV4;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::Device;

mod dp_common;
use dp_common::{ring_config, End};

const QUIET: usize = 200;
const PORT: u16 = 4811;
const KEEPALIVE_MS: u64 = 100;
const QUIET_FOR: Duration = Duration::from_millis(1500);
/// Connections opened and closed beside the quiet ones, per round.
const CHURN: usize = 40;

#[test]
fn sweeps_between_full_ones_visit_only_connections_with_timers_due() {
    let mut cfg = ring_config("dpwts", |_| {});
    assert_eq!(cfg.worker.sweep_us, 1000, "the shipped sweep interval");
    cfg.tcp.keepalive_ms = KEEPALIVE_MS;
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let listener = server_ep.listen(PORT).unwrap();
    let server_addr = SocketAddrV4::new(server_ep.ip(), PORT);

    let spd = dev.alloc_pd();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let mut quiet = Vec::new();
        for _ in 0..QUIET {
            let e = End::new(&spd);
            e.post_recv();
            let req = listener.get_request(Duration::from_secs(10)).unwrap();
            req.accept(&e.qp, &ConnParam::default()).unwrap();
            quiet.push(e);
        }
        // The churn's connections, accepted and left to close when the client closes them.
        let mut churned = Vec::new();
        for _ in 0..3 * CHURN {
            let e = End::new(&spd);
            let req = listener.get_request(Duration::from_secs(30)).unwrap();
            req.accept(&e.qp, &ConnParam::default()).unwrap();
            churned.push(e);
        }
        go_rx.recv().unwrap();
        for (i, e) in quiet.iter().enumerate() {
            e.recv(i as u8);
            e.send(i as u8 ^ 0xff);
        }
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
    // Settle: the handshakes' last segments and the first keep-alive timers.
    thread::sleep(Duration::from_millis(300));

    // Per worker: full sweeps, timer sweeps, their visits, frames sent, keep-alive give-ups.
    let counts = |dp: &Dataplane| -> Vec<[u64; 5]> {
        dp.stats()
            .iter()
            .map(|w| {
                [
                    w.sweeps,
                    w.timer_sweeps,
                    w.timer_sweep_visits,
                    w.device.tx_packets,
                    w.tcp_keepalive_timeouts,
                ]
            })
            .collect()
    };
    let before = counts(&dp);
    thread::sleep(QUIET_FOR);
    let after = counts(&dp);
    let mut frames = 0;
    for (w, (b, a)) in before.iter().zip(&after).enumerate() {
        let [full, timer, visits, tx, gave_up] = [0, 1, 2, 3, 4].map(|k| a[k] - b[k]);
        frames += tx;
        eprintln!(
            "worker {w}: {full} full sweeps, {timer} timer sweeps visiting {visits} \
             connections, {tx} frames sent, {gave_up} connections given up, in {QUIET_FOR:?} \
             with {QUIET} quiet connections and keep-alives every {KEEPALIVE_MS} ms"
        );
        assert!(
            timer >= 100,
            "worker {w}: {timer} timer sweeps in {QUIET_FOR:?}"
        );
        assert!(
            full <= timer / 63 + 2,
            "worker {w}: {full} full sweeps beside {timer} timer sweeps: every sweep visits \
             every connection"
        );
        // Each socket's keep-alive (or its answer, or the delayed ACK after either) asks for
        // a visit a few times per 100 ms at most: far fewer than every connection per sweep.
        let per_timer = (QUIET_FOR.as_millis() as u64 / KEEPALIVE_MS + 1) * 4;
        let allowed = QUIET as u64 * per_timer;
        assert!(
            visits <= allowed && visits < timer * QUIET as u64 / 4,
            "worker {w}: the timer sweeps visited {visits} connections in {timer} sweeps (at \
             most {allowed} expected): they visit every connection"
        );
        assert_eq!(gave_up, 0, "worker {w}: keep-alives went unanswered");
    }
    // The keep-alives went out: each quiet connection's idle timer fired several times
    // (a probe and its ACK at least once per 100 ms per connection, on one side or the other).
    let expected = QUIET as u64 * (QUIET_FOR.as_millis() as u64 / KEEPALIVE_MS) / 2;
    assert!(
        frames >= expected,
        "{frames} frames sent in {QUIET_FOR:?} by {QUIET} quiet connections with keep-alives \
         every {KEEPALIVE_MS} ms (at least {expected} expected): their timers did not fire"
    );

    // Connections coming and going beside them while timer sweeps run (the worker's lists
    // of connections change under the sweeps: indices kept from before may be stale).
    for round in 0..3 {
        let churn: Vec<End> = (0..CHURN)
            .map(|_| {
                let e = End::new(&pd);
                client_ep
                    .connect(server_addr, &e.qp, &ConnParam::default())
                    .unwrap_or_else(|err| panic!("churn round {round}: connect: {err}"));
                e
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        for e in &churn {
            e.qp.disconnect();
        }
        drop(churn);
        thread::sleep(Duration::from_millis(50));
    }

    // The heap of socket deadlines holds about one entry per connection, not one per
    // deadline ever queued (churned connections' and moved deadlines' entries are dropped).
    for (w, st) in dp.stats().iter().enumerate() {
        assert!(
            st.timers_queued <= 2 * st.connections + 64,
            "worker {w}: {} deadlines queued for {} connections",
            st.timers_queued,
            st.connections
        );
    }

    // The quiet connections still carry data both ways.
    go_tx.send(()).unwrap();
    for (i, e) in quiet.iter().enumerate() {
        e.post_recv();
        e.send(i as u8);
        e.recv(i as u8 ^ 0xff);
    }
    go_tx.send(()).unwrap();
    server.join().unwrap();
}
