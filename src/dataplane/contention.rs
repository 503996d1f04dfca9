//! Whether the thread driving a worker takes turns on its CPU with another thread.
//!
//! A driven worker polls while idle and yields its CPU only after `worker.driven_spin_us`
//! without work (`Worker::poll_once`). That spin suits a CPU of its own; on a CPU shared with
//! the process at the other end of the link (two processes on one core, a test box with fewer
//! cores than processes), each turn of a ping-pong then waits a whole spin for the peer to get
//! the CPU. The process sees its own workers' placement, not other processes'. What the
//! thread does see is the time the scheduler kept it runnable but not running: the second
//! field of `/proc/thread-self/schedstat`, "time spent waiting on a runqueue" in nanoseconds
//! (the kernel's Documentation/scheduler/sched-stats.rst). Alone on its CPU it stays near
//! zero (a kernel thread now and then); shared, it grows by tens of milliseconds in every
//! tenth of a second.
//!
//! Waiting alone does not say that yielding sooner helps. A peer on the same CPU gives it back
//! when it has done its turn, so nearly all the waiting happens inside the worker's own
//! yields, and each is short: about 7 us on average in a 64 B ping-pong between two processes
//! on one CPU (at most 0.1-0.5 ms), 0.3-0.4 ms when the peer streams 64 KiB Writes (at most
//! 0.5-0.7 ms). There a short spin lets each side run as soon as the other is done (the
//! ping-pong: 56 us one way with a 50 us spin, 4.6 with 2). A thread that keeps the CPU busy
//! (a build, `while :; do :; done`) takes it by preemption instead, and a yield to it lasts
//! until its time slice ends, up to a scheduler tick (4 ms here): a short spin there made a
//! ping-pong between a worker on the busy CPU and a peer on another 2 ms one way instead of
//! 1.5 us. So a window counts as taking turns only when the thread waited for more than a
//! tenth of it and at least half of that inside its own yields shorter than `LONG_YIELD`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How long one window of the measure lasts.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);
/// A window in which the thread waited for its CPU longer than this share of it (in
/// thousandths) finds the CPU contended: 10 %, 10 ms in 100. Measured on the hosts of this
/// project: alone on its CPU a worker's thread waited 0-0.8 ms in most windows and up to 17
/// ms in a few (kernel threads: kdamond, kcompactd, each about a millisecond a run); two
/// processes on one CPU waited 40-84 ms in every window.
pub(crate) const CONTENDED_PERMILLE: u64 = 100;
/// A yield that lasted this long gave the CPU to a thread that ran out a time slice, not to one
/// that took its turn and gave it back: its time does not count as taking turns.
pub(crate) const LONG_YIELD: Duration = Duration::from_millis(1);
/// Windows of taking turns in a row that make the CPU count as shared: one window of kernel threads
/// on a CPU of its own does not.
pub(crate) const SHARED_AFTER: u32 = 2;

/// The calling thread's run delay so far: `/proc/thread-self/schedstat`, opened once per
/// thread (the file follows the thread that opened it) and read with `pread`.
#[derive(Default)]
pub(crate) struct RunDelay {
    file: Option<(ThreadId, File)>,
}

impl RunDelay {
    /// Nanoseconds the calling thread has waited on a runqueue, or None where the kernel
    /// does not say (no procfs, a kernel without CONFIG_SCHED_INFO): the worker then stops
    /// asking.
    pub fn read(&mut self) -> Option<u64> {
        let me = std::thread::current().id();
        if self.file.as_ref().is_none_or(|(t, _)| *t != me) {
            match File::open("/proc/thread-self/schedstat") {
                Ok(f) => self.file = Some((me, f)),
                Err(e) => {
                    log::debug!("dataplane: no /proc/thread-self/schedstat ({e}): CPU contention not measured");
                    return None;
                }
            }
        }
        let (_, f) = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        parse_run_delay(&buf[..n])
    }
}

/// The second field of a schedstat line ("<on cpu ns> <waiting ns> <timeslices>").
pub(crate) fn parse_run_delay(line: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(line).ok()?;
    s.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// One finished window of [`Contention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The thread waited for its CPU for more than `CONTENDED_PERMILLE` of the window.
    pub contended: bool,
    /// Contended, and at least half of the waiting inside the thread's own yields shorter
    /// than `LONG_YIELD`: the other thread gave the CPU back when it had done.
    pub taking_turns: bool,
}

/// Windows of the run delay and of the thread's yields: `SHARED_AFTER` windows in a row of
/// taking turns say that the CPU is shared with a thread that gives it back, until a window
/// that was not.
pub(crate) struct Contention {
    since: Instant,
    waited_at_start: Option<u64>,
    /// Time spent in yields shorter than `LONG_YIELD` since the window began.
    yielded: Duration,
    /// Windows of taking turns in a row, up to the last one.
    streak: u32,
}

impl Contention {
    pub fn new(now: Instant) -> Contention {
        Contention {
            since: now,
            waited_at_start: None,
            yielded: Duration::ZERO,
            streak: 0,
        }
    }

    /// A yield of the CPU that lasted `took` until the thread ran again.
    pub fn note_yield(&mut self, took: Duration) {
        if took < LONG_YIELD {
            self.yielded = self.yielded.saturating_add(took);
        }
    }

    /// The last `SHARED_AFTER` windows were all windows of taking turns.
    pub fn shared(&self) -> bool {
        self.streak >= SHARED_AFTER
    }

    /// True once the current window is over (the caller then reads the run delay).
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= WINDOW
    }

    /// Close the window at `now` with the run delay `waited` (ns) and start the next: the
    /// window that ended, or None for the first reading (no window yet). A window that ran
    /// long (the worker was busy and did not look) counts its waiting against its own length.
    pub fn observe(&mut self, now: Instant, waited: u64) -> Option<Window> {
        let start = self.waited_at_start.replace(waited);
        let len = now.saturating_duration_since(self.since);
        let yielded =
            u64::try_from(std::mem::take(&mut self.yielded).as_nanos()).unwrap_or(u64::MAX);
        self.since = now;
        let start = start?;
        let len_ns = u64::try_from(len.as_nanos()).unwrap_or(u64::MAX).max(1);
        let delta = waited.saturating_sub(start);
        let contended = delta.saturating_mul(1000) > len_ns.saturating_mul(CONTENDED_PERMILLE);
        let taking_turns = contended && yielded.saturating_mul(2) >= delta;
        self.streak = if taking_turns {
            self.streak.saturating_add(1)
        } else {
            0
        };
        Some(Window {
            contended,
            taking_turns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_line_is_parsed() {
        assert_eq!(parse_run_delay(b"864457 51021 1\n"), Some(51021));
        assert_eq!(parse_run_delay(b"864457\n"), None);
        assert_eq!(parse_run_delay(b"a b c"), None);
        assert_eq!(parse_run_delay(b""), None);
    }

    #[test]
    fn windows_of_taking_turns_make_a_shared_cpu() {
        let ms = 1_000_000;
        let turns = Window {
            contended: true,
            taking_turns: true,
        };
        let t = Instant::now();
        let mut c = Contention::new(t);
        assert!(!c.due(t + WINDOW / 2));
        assert!(c.due(t + WINDOW));
        // The first reading only starts a window.
        assert_eq!(c.observe(t + WINDOW, 5 * ms), None);
        // 5 ms in 100 (kernel threads): not contended.
        let w = c.observe(t + 2 * WINDOW, 10 * ms).unwrap();
        assert!(!w.contended && !w.taking_turns);
        let yields = |c: &mut Contention, n: u32, each: Duration| {
            for _ in 0..n {
                c.note_yield(each);
            }
        };
        // 30 ms in 100, 20 of them in short yields: taking turns, but one window is not yet
        // a shared CPU.
        yields(&mut c, 2000, Duration::from_micros(10));
        assert_eq!(c.observe(t + 3 * WINDOW, 40 * ms), Some(turns));
        assert!(!c.shared());
        yields(&mut c, 100, Duration::from_micros(450));
        assert_eq!(c.observe(t + 4 * WINDOW, 90 * ms), Some(turns));
        assert!(c.shared());
        // 50 ms in 100, 10 of them in yields: the rest by preemption, a thread that keeps the
        // CPU busy. Contended, not taking turns, and the streak is over.
        yields(&mut c, 1000, Duration::from_micros(10));
        let w = c.observe(t + 5 * WINDOW, 140 * ms).unwrap();
        assert!(w.contended && !w.taking_turns);
        assert!(!c.shared());
        // 50 ms in 100, all of them in yields, but most in yields of a time slice (to a busy
        // thread): not taking turns.
        yields(&mut c, 12, Duration::from_millis(4));
        yields(&mut c, 4, Duration::from_micros(500));
        let w = c.observe(t + 6 * WINDOW, 190 * ms).unwrap();
        assert!(w.contended && !w.taking_turns);
        // Yields of the window before do not count in the next.
        yields(&mut c, 2000, Duration::from_micros(10));
        assert_eq!(c.observe(t + 7 * WINDOW, 210 * ms), Some(turns));
        let w = c.observe(t + 8 * WINDOW, 240 * ms).unwrap();
        assert!(w.contended && !w.taking_turns);
        // 20 ms in yields, but in a window of a second (the worker was busy and did not
        // look): not contended.
        let t = t + Duration::from_secs(1);
        yields(&mut c, 2000, Duration::from_micros(10));
        let w = c.observe(t + 8 * WINDOW, 260 * ms).unwrap();
        assert!(!w.contended && !w.taking_turns);
        // A counter that went backwards counts nothing.
        let w = c.observe(t + 9 * WINDOW, 1).unwrap();
        assert!(!w.contended);
    }

    #[test]
    fn this_threads_run_delay_is_read() {
        let mut r = RunDelay::default();
        // procfs with schedstat on every kernel this project runs on (CONFIG_SCHED_INFO).
        let a = r.read().expect("a run delay");
        let b = r.read().expect("a run delay");
        assert!(b >= a);
        // Another thread opens its own file.
        let other = std::thread::spawn(move || {
            r.read().expect("a run delay");
            r.file.as_ref().map(|(t, _)| *t)
        })
        .join()
        .unwrap();
        assert_ne!(other, Some(std::thread::current().id()));
    }
}
