//! What a gap costs the next turn on this core: a dependent chain of loads over the same cache
//! lines, walked again after the thread spun on the clock for a gap, as a paced ping's send
//! path walks its code and data again after the previous ping (docs/testing.md "Paced
//! pings").
//!
//! ```text
//! cargo bench --bench idle_state -- [--cpu 1] [--reps 1000] [--lines 64,256]
//!                                   [--gaps 0,10,20,50,100,1000] [--warm-us 10,40]
//! ```
//!
//! For each count of lines, two layouts:
//! - `pages`: one line on each of that many 4 KiB pages (at a different offset in each, so the
//!   lines fall in different L1 sets), the way a send path's state lies: a socket here, a
//!   connection there, a ring slot, a descriptor, an mbuf;
//! - `dense`: the same number of lines side by side.
//!
//! The chain visits the lines in a shuffled order (each load's address comes from the load
//! before, so neither the out-of-order core nor the prefetchers can run ahead: a walk in
//! address order is prefetched and hides what this measures). Each sample spins on the clock
//! for the gap, then times one walk; the figure is the p50 (and p90) over `--reps` samples,
//! in ns per line. `warm` rows wait out a 1000 us gap but walk the chain every `--warm-us`
//! meanwhile: if what the gap costs is state lost with time (lines, translations) rather than
//! the gap itself (a clock or power effect), touching the lines inside the gap keeps it.
//!
//! Safe code only (indices into a `Vec<usize>`, one per line). Pin it (`--cpu`) to a CPU
//! where nothing else of yours runs.

use std::time::{Duration, Instant};

struct Args {
    cpu: Option<usize>,
    reps: usize,
    lines: Vec<usize>,
    gaps: Vec<u64>,
    warm: Vec<u64>,
}

fn list(v: &str) -> Vec<u64> {
    v.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| usage(&format!("not a number: {s}")))
        })
        .collect()
}

fn usage(why: &str) -> ! {
    eprintln!(
        "idle_state: {why}\nusage: idle_state [--cpu N] [--reps N] [--lines 64,256] \
         [--gaps 0,10,20,50,100,1000] [--warm-us 10,40]"
    );
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        cpu: Some(1),
        reps: 1000,
        lines: vec![64, 256],
        gaps: vec![0, 10, 20, 50, 100, 1000],
        warm: vec![10, 40],
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        // What cargo and test runners pass to a harness-less bench: `--bench` from `cargo
        // bench`; `--list` (and its `--format terse`) from `cargo nextest` listing tests:
        // this binary has none.
        match k.as_str() {
            "--bench" | "--exact" | "--ignored" | "--nocapture" => continue,
            "--list" => std::process::exit(0),
            _ => {}
        }
        let Some(v) = it.next() else {
            usage(&format!("{k} needs a value"))
        };
        match k.as_str() {
            "--cpu" => a.cpu = v.parse().ok(),
            "--reps" => a.reps = list(&v)[0].max(10) as usize,
            "--lines" => {
                a.lines = list(&v)
                    .into_iter()
                    .map(|n| n.clamp(2, 4096) as usize)
                    .collect()
            }
            "--gaps" => a.gaps = list(&v),
            "--warm-us" => a.warm = list(&v),
            "--format" => {}
            _ => usage(&format!("unknown option {k}")),
        }
    }
    a
}

/// A chain over `lines` cache lines: `next[i]` is the index (in usize words) of the line after
/// the one at word `i`. `stride` words between consecutive lines' slots before shuffling.
struct Chain {
    next: Vec<usize>,
    start: usize,
    lines: usize,
}

const WORDS_PER_LINE: usize = 64 / std::mem::size_of::<usize>();
const WORDS_PER_PAGE: usize = 4096 / std::mem::size_of::<usize>();

impl Chain {
    fn new(lines: usize, spread: bool) -> Chain {
        let words = if spread {
            lines * WORDS_PER_PAGE
        } else {
            lines * WORDS_PER_LINE
        };
        // The line slots: in `pages`, page p holds its line at line offset p % 64, so that the
        // lines spread over the L1 sets (a 4 KiB stride alone would put them all in one set).
        let slots: Vec<usize> = (0..lines)
            .map(|p| {
                if spread {
                    p * WORDS_PER_PAGE + (p % 64) * WORDS_PER_LINE
                } else {
                    p * WORDS_PER_LINE
                }
            })
            .collect();
        // A fixed shuffle (xorshift), the same on every run.
        let mut order: Vec<usize> = (0..lines).collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in (1..lines).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        // Touch every page so none is first faulted in during a sample.
        let mut next = vec![1usize; words];
        for k in 0..lines {
            next[slots[order[k]]] = slots[order[(k + 1) % lines]];
        }
        Chain {
            next,
            start: slots[order[0]],
            lines,
        }
    }

    /// One walk over every line; returns where it ended (so the loads are not optimised out).
    fn walk(&self) -> usize {
        let mut i = self.start;
        for _ in 0..self.lines {
            i = self.next[i];
        }
        i
    }
}

/// Spin on the clock for `gap`, walking the chain every `warm` meanwhile if set.
fn wait(chain: &Chain, gap: Duration, warm: Option<Duration>, sink: &mut usize) {
    let t0 = Instant::now();
    let mut last = t0;
    loop {
        let now = Instant::now();
        if now.duration_since(t0) >= gap {
            return;
        }
        if let Some(w) = warm {
            if now.duration_since(last) >= w {
                *sink ^= chain.walk();
                last = now;
            }
        }
        std::hint::spin_loop();
    }
}

fn sample(chain: &Chain, gap: Duration, warm: Option<Duration>, reps: usize) -> (f64, f64) {
    let mut sink = 0usize;
    // Warm up: the chain in cache, the code hot.
    for _ in 0..100 {
        sink ^= chain.walk();
    }
    let mut ns: Vec<u64> = Vec::with_capacity(reps);
    for _ in 0..reps {
        wait(chain, gap, warm, &mut sink);
        let t = Instant::now();
        sink ^= std::hint::black_box(chain.walk());
        ns.push(t.elapsed().as_nanos() as u64);
    }
    std::hint::black_box(sink);
    ns.sort_unstable();
    let per = |v: u64| v as f64 / chain.lines as f64;
    (per(ns[reps / 2]), per(ns[reps * 9 / 10]))
}

fn main() {
    let a = args();
    if let Some(cpu) = a.cpu {
        if let Err(e) = dpwarp::affinity::set_thread_cpus(&[cpu]) {
            eprintln!("idle_state: cannot pin to CPU {cpu} ({e}); running unpinned");
        }
    }
    println!(
        "idle_state: CPUs {:?}, {} samples a row; ns per line (a dependent chain), p50 / p90",
        dpwarp::affinity::thread_cpus(),
        a.reps
    );
    println!(
        "{:>6} {:>6} {:>8} {:>8} {:>9} {:>9}",
        "layout", "lines", "gap_us", "warm_us", "p50", "p90"
    );
    for &lines in &a.lines {
        for spread in [true, false] {
            let chain = Chain::new(lines, spread);
            let layout = if spread { "pages" } else { "dense" };
            for &g in &a.gaps {
                let (p50, p90) = sample(&chain, Duration::from_micros(g), None, a.reps);
                println!(
                    "{layout:>6} {lines:>6} {g:>8} {:>8} {p50:>9.2} {p90:>9.2}",
                    "-"
                );
            }
            for &w in &a.warm {
                let (p50, p90) = sample(
                    &chain,
                    Duration::from_micros(1000),
                    Some(Duration::from_micros(w)),
                    a.reps,
                );
                println!(
                    "{layout:>6} {lines:>6} {:>8} {w:>8} {p50:>9.2} {p90:>9.2}",
                    1000
                );
            }
        }
    }
}
