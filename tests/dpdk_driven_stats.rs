//! `Dataplane::stats()` while other threads drive the workers without pause
//! (`WorkerMode::Driven`, each driver retaking its worker's lock right after every pass): the
//! counters come back from the driver (a command answered in its next pass) instead of
//! waiting for a free moment of the lock, which such a driver leaves only for nanoseconds
//! (a bench that read them so overran its run by tens of seconds). Then, with the drivers
//! gone, from the lock. One EAL per process: the only EAL test of this binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::dataplane::{Dataplane, WorkerMode};

mod dp_common;
use dp_common::{shipped_config, unique};

#[test]
fn stats_answer_while_the_workers_are_driven_without_pause() {
    let ring = unique("dpwst");
    let cfg = shipped_config("net_ring.toml", &[("dpwring", &ring)]);
    let dp = Dataplane::start_with(&cfg, WorkerMode::Driven).expect("dataplane");
    let stop = Arc::new(AtomicBool::new(false));
    let drivers: Vec<_> = (0..2)
        .map(|port| {
            let d = dp.port_drivers(port)[0].clone();
            let stop = stop.clone();
            thread::spawn(move || {
                d.attach();
                let mut passes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    d.poll();
                    passes += 1;
                }
                passes
            })
        })
        .collect();
    // Let both drivers run.
    thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let first = dp.stats();
    assert_eq!(first.len(), 2);
    let mut last = first.clone();
    for i in 0..20 {
        let s = dp.stats();
        assert_eq!(s.len(), 2);
        for (w, (a, b)) in s.iter().zip(&last).enumerate() {
            assert!(
                a.loops >= b.loops,
                "read {i}: worker {w}'s passes went back"
            );
        }
        last = s;
    }
    for (w, (a, b)) in last.iter().zip(&first).enumerate() {
        assert!(a.loops > b.loops, "worker {w} made no pass over 21 reads");
    }
    let took = t0.elapsed();
    let still_driving = drivers.iter().all(|d| !d.is_finished());
    stop.store(true, Ordering::Relaxed);
    let passes: Vec<u64> = drivers.into_iter().map(|d| d.join().unwrap()).collect();
    assert!(still_driving && passes.iter().all(|&p| p > 0), "{passes:?}");
    // 21 reads: without the driver's answer each waits for the lock, seconds at a time.
    assert!(
        took < Duration::from_secs(10),
        "21 reads of the counters took {took:?} while the workers were driven"
    );
    // Nobody drives them now: read from the lock.
    let after = dp.stats();
    assert!(after.iter().zip(&last).all(|(a, b)| a.loops >= b.loops));
}
