//! The data-moving loops of the benchmarks, once: `perf` (perftest's wire protocol) and
//! `dpperf` (dpwarp's own bench protocol) differ in how they set up a test (perftest's control
//! connection vs. one MPA private-data exchange) but move the data the same way:
//!
//! - [`bw_window`]: RDMA Writes (or Reads) of one buffer with at most `depth` outstanding,
//!   `iters` of them or until a deadline (perftest's `run_iter_bw`);
//! - [`send_pingpong_run_to_completion`]: a ping-pong of Sends where the client sends first and
//!   each side answers the peer's message (perftest's `run_iter_lat_send`); latency = half the
//!   round trip. It runs on the thread that drives the QP, where the QP has one (the
//!   kernel-TCP transport's driver thread, through a [`DriverHook`]), else on the caller's.

use dpwarp::verbs::smallvec;
use std::time::{Duration, Instant};

use dpwarp::verbs::{
    sge, Cq, DriverHook, HookPoll, Mr, Opcode, Qp, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

use crate::cli::progress_tick;

/// No completion (no progress) for this long fails a loop or latency test (the peer is gone
/// or stuck).
pub const STALLED: Duration = Duration::from_secs(60);

/// How a loop waits for its next completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `Cq::wait` in slices of 20 ms (sleeps on the queue; a CQ with a driver
    /// (`Cq::drive_with`) runs it meanwhile).
    Block,
    /// Busy-poll `Cq::poll_one` (which runs the CQ's driver, if any), yielding between polls
    /// when there is none: no sleep on the latency-critical path.
    Spin,
}

impl Wait {
    /// The next completion within about `slice`, or None.
    fn next(self, cq: &Cq, slice: Duration) -> Option<WorkCompletion> {
        match self {
            Wait::Block => cq.wait(slice),
            Wait::Spin => {
                // The clock is read only once the first polls found nothing: a completion
                // already there (a ping-pong's turn) costs no clock read.
                let mut end = None;
                // A driven queue's poll is the worker's pass: yielding between passes would add
                // a system call to every idle pass of the thread that moves the bytes.
                let driven = cq.is_driven();
                let mut n = 0u32;
                loop {
                    if let Some(wc) = cq.poll_one() {
                        return Some(wc);
                    }
                    n = n.wrapping_add(1);
                    if n.is_multiple_of(256)
                        && Instant::now() >= *end.get_or_insert_with(|| Instant::now() + slice)
                    {
                        return None;
                    }
                    // A driven pass is itself the wait (a hundred nanoseconds or so of polling
                    // the device): no `pause` between passes, which on these hosts adds about
                    // 20 ns to every pass and so to the time a frame waits to be seen.
                    if !driven {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
}

/// The next completion of `qp`'s `cq`: an error for a failed one, a closed QP or
/// [`STALLED`] without any.
pub fn next_ok(qp: &Qp, cq: &Cq, wait: Wait, what: &str) -> Result<WorkCompletion, String> {
    // Read the clock only once a slice passed with nothing (not per completion).
    let mut end = None;
    loop {
        match wait.next(cq, Duration::from_millis(20)) {
            Some(wc) if wc.status != WcStatus::Success => {
                return Err(format!(
                    "{what}: completion failed: {:?} ({wc:?})",
                    wc.status
                ))
            }
            Some(wc) => return Ok(wc),
            None if qp.is_closed() => return Err(format!("{what}: connection closed")),
            None if Instant::now() > *end.get_or_insert_with(|| Instant::now() + STALLED) => {
                return Err(format!("{what}: no completion for {STALLED:?}"))
            }
            None => {}
        }
    }
}

/// What [`bw_window`] moves.
pub struct Window<'a> {
    /// RDMA Write or Read (with the peer's buffer and STag).
    pub opcode: Opcode,
    /// The local buffer every WR uses (`size` octets from its start).
    pub buf: &'a Mr,
    pub size: usize,
    /// WRs to complete (`u64::MAX` with a deadline).
    pub iters: u64,
    /// Stop posting at this time.
    pub deadline: Option<Instant>,
    /// Outstanding WRs at most.
    pub depth: usize,
    /// Record post and completion times of the first `track` WRs (perftest's BW peak).
    pub track: usize,
}

/// What a [`bw_window`] run did.
pub struct WindowRun {
    /// When the first WR was posted.
    pub t0: Instant,
    /// WRs completed.
    pub done: u64,
    /// Post and completion times of the first `track` WRs.
    pub posted: Vec<Instant>,
    pub completed: Vec<Instant>,
}

/// Post `w.iters` (or until `w.deadline`) WRs of `w.opcode` with at most `w.depth`
/// outstanding; every completion must succeed.
pub fn bw_window(qp: &Qp, cq: &Cq, wait: Wait, w: &Window<'_>) -> Result<WindowRun, String> {
    let want = w.iters;
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut t_posted: Vec<Instant> = Vec::with_capacity(w.track);
    let mut t_completed: Vec<Instant> = Vec::with_capacity(w.track);
    let t0 = Instant::now();
    loop {
        let stop_posting = w.deadline.is_some_and(|d| Instant::now() >= d) || posted >= want;
        while !stop_posting && posted - done < w.depth as u64 && posted < want {
            qp.post_send(SendWr {
                wr_id: posted,
                opcode: w.opcode,
                sg_list: smallvec![sge(w.buf, 0, w.size)],
                signaled: true,
            })
            .map_err(|e| format!("post send: {e}"))?;
            posted += 1;
            if t_posted.len() < w.track {
                t_posted.push(Instant::now());
            }
            if w.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        if done == posted && (stop_posting || w.deadline.is_some_and(|d| Instant::now() >= d)) {
            break;
        }
        next_ok(qp, cq, wait, "a data WR")?;
        done += 1;
        if t_completed.len() < w.track {
            t_completed.push(Instant::now());
        }
        if done.is_multiple_of(256) {
            progress_tick(done, want);
        }
    }
    Ok(WindowRun {
        t0,
        done,
        posted: t_posted,
        completed: t_completed,
    })
}

/// A ping-pong of `iters` Sends of `size` octets each way: the client sends first, each side
/// answers the peer's message and re-posts a receive into `buf` (which also holds what is
/// sent). Returns the one-way latencies: half the time between consecutive sends, one round
/// trip each (`iters - 1` samples, as perftest); with `last_round` the client's last round trip
/// (its last send to the last reply) is one more (`iters` samples).
///
/// Where the QP has a driver thread of its own (the kernel-TCP transport) the ping-pong runs
/// there as a [`DriverHook`] ([`run_on_driver_thread`]), so a message is answered in the pass
/// that received it, with no hand-off to this thread and back (a thread wake-up each way);
/// this thread waits for the result. Elsewhere (the DPDK dataplane, whose application thread
/// drives the worker itself) it runs here, waiting for each completion with `wait`. The flag
/// says whether it ran on the driver thread.
///
/// With `pace` the client sends one ping per `pace` instead of back to back (sockperf's
/// `under-load --mps`): after a reply it polls its CQ (which drives a driven worker) until
/// `pace` has passed since its last ping, so the dataplane sees the idle gaps a storage target
/// sees between requests. The latencies are then half of each ping's own round trip (ping to
/// its reply, `iters` samples), not of the time between pings.
#[allow(clippy::too_many_arguments)]
pub fn send_pingpong_run_to_completion(
    qp: &Qp,
    cq: &Cq,
    wait: Wait,
    client: bool,
    buf: &Mr,
    size: usize,
    iters: u64,
    last_round: bool,
    pace: Option<Duration>,
) -> Result<(Vec<Duration>, bool), String> {
    let mut pp = PingPong::new(qp, cq, buf, client, size, iters, last_round);
    pp.pace = pace.filter(|_| client);
    let mut pp = match run_on_driver_thread(qp, pp) {
        Ok(r) => return r,
        Err(pp) => pp,
    };
    pp.progress = true;
    pp.start()?;
    while !pp.is_done() {
        if pp.due.is_some() {
            // Between paced pings: poll (and so drive) until the next one is due.
            pp.send_due()?;
            if let Some(wc) = cq.poll_one() {
                pp.on_wc(wc)?;
            }
            continue;
        }
        let wc = next_ok(qp, cq, wait, "send_lat")?;
        pp.on_wc(wc)?;
    }
    Ok((pp.latencies(), false))
}

/// A latency test advanced one step at a time, never blocking: run as a [`DriverHook`] on
/// the QP's driver thread ([`run_on_driver_thread`]) or by a loop on the calling thread.
pub trait Stepped: Send + 'static {
    /// Take what completed (or landed) and move on as far as possible without waiting; true
    /// if anything moved.
    fn step(&mut self) -> Result<bool, String>;
    /// Every exchange done and every posted operation completed.
    fn is_done(&self) -> bool;
    /// The one-way latencies measured.
    fn samples(&self) -> Vec<Duration>;
    /// The CQ its completions go to (to report what a close flushed).
    fn cq(&self) -> &Cq;
    /// The test's name, for errors.
    fn name(&self) -> &'static str;
    /// Tick the progress line from now on (run on the calling thread, not the driver's).
    fn show_progress(&mut self) {}
}

/// Run `test` on `qp`'s driver thread, where the QP has one (the kernel-TCP transport): a
/// message or completion is handled in the driver's pass that produced it, with no hand-off
/// to this thread and back (a thread wake-up each way). This thread waits for the result:
/// the samples and whether they were taken on another thread. `Err(test)` where the QP has
/// no driver thread (the DPDK dataplane, whose application thread drives the worker).
pub fn run_on_driver_thread<T: Stepped>(
    qp: &Qp,
    test: T,
) -> Result<Result<(Vec<Duration>, bool), String>, T> {
    if !qp.accepts_driver_hook() {
        return Err(test);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    if let Err(h) = qp.attach_driver_hook(OnDriver {
        test,
        done: Some(tx),
    }) {
        // The connection closed (or took another hook) since the check.
        return Err(h.test);
    }
    let me = std::thread::current().id();
    Ok(rx
        .recv()
        .unwrap_or_else(|_| Err("the driver dropped the test".into()))
        .map(|(l, ran_on)| (l, ran_on != me)))
}

/// A [`Stepped`] test as a [`DriverHook`]; the result goes to `done` with the thread that
/// ran it.
struct OnDriver<T> {
    test: T,
    done: Option<std::sync::mpsc::Sender<OnDriverDone>>,
}

type OnDriverDone = Result<(Vec<Duration>, std::thread::ThreadId), String>;

impl<T> OnDriver<T> {
    fn finish(&mut self, r: Result<Vec<Duration>, String>) -> HookPoll {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(r.map(|l| (l, std::thread::current().id())));
        }
        HookPoll::Finished
    }
}

impl<T: Stepped> DriverHook for OnDriver<T> {
    fn poll(&mut self) -> HookPoll {
        match self.test.step() {
            Err(e) => self.finish(Err(e)),
            Ok(_) if self.test.is_done() => {
                let l = self.test.samples();
                self.finish(Ok(l))
            }
            Ok(true) => HookPoll::Worked,
            Ok(false) => HookPoll::Idle,
        }
    }

    fn closed(mut self: Box<Self>) {
        // Completions the close flushed say why, if any came.
        let name = self.test.name();
        let why = std::iter::from_fn(|| self.test.cq().try_poll_one())
            .find(|wc| wc.status != WcStatus::Success)
            .map_or(format!("{name}: connection closed"), |wc| {
                format!("{name}: completion failed: {:?} ({wc:?})", wc.status)
            });
        self.finish(Err(why));
    }
}

/// The ping-pong's state, advanced one completion at a time: by
/// [`send_pingpong_run_to_completion`]'s loop on the calling thread, or as a [`DriverHook`]
/// on the QP's driver thread.
struct PingPong {
    qp: Qp,
    cq: Cq,
    buf: Mr,
    client: bool,
    size: usize,
    iters: u64,
    last_round: bool,
    scnt: u64,
    rcnt: u64,
    sends_done: u64,
    posted_at: Vec<Instant>,
    /// Tick this thread's progress line (the calling thread's; not the driver thread's).
    progress: bool,
    /// The client's ping interval, if paced; then `due` is when the next ping goes (set by
    /// the reply to the last) and `paced` holds half of each ping's round trip.
    pace: Option<Duration>,
    due: Option<Instant>,
    paced: Vec<Duration>,
}

impl PingPong {
    fn new(
        qp: &Qp,
        cq: &Cq,
        buf: &Mr,
        client: bool,
        size: usize,
        iters: u64,
        last_round: bool,
    ) -> PingPong {
        PingPong {
            qp: qp.clone(),
            cq: cq.clone(),
            buf: buf.clone(),
            client,
            size,
            iters,
            last_round,
            scnt: 0,
            rcnt: 0,
            sends_done: 0,
            posted_at: Vec::with_capacity(iters as usize + 1),
            progress: false,
            pace: None,
            due: None,
            paced: Vec::new(),
        }
    }

    /// Send the paced ping that is due, if one is. True if it sent.
    fn send_due(&mut self) -> Result<bool, String> {
        match self.due {
            Some(t) if Instant::now() >= t => {
                self.due = None;
                self.send().map(|()| true)
            }
            _ => Ok(false),
        }
    }

    /// The client's first Send (everyone else waits for the peer's message before sending).
    /// True if it sent.
    fn start(&mut self) -> Result<bool, String> {
        if !(self.client && self.scnt == 0 && self.iters > 0) {
            return Ok(false);
        }
        self.send().map(|()| true)
    }

    fn send(&mut self) -> Result<(), String> {
        self.posted_at.push(Instant::now());
        self.scnt += 1;
        if self.progress && self.scnt.is_multiple_of(1024) {
            progress_tick(self.scnt, self.iters);
        }
        self.qp
            .post_send(SendWr {
                wr_id: self.scnt,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.buf, 0, self.size)],
                signaled: true,
            })
            .map_err(|e| format!("post send: {e}"))
    }

    /// One completion: a Recv is answered at once (its buffer re-posted, the next Send
    /// posted); a Send's is counted, so none is left behind an error.
    fn on_wc(&mut self, wc: WorkCompletion) -> Result<(), String> {
        if wc.status != WcStatus::Success {
            return Err(format!(
                "send_lat: completion failed: {:?} ({wc:?})",
                wc.status
            ));
        }
        if wc.opcode != WcOpcode::Recv {
            self.sends_done += 1;
            return Ok(());
        }
        self.rcnt += 1;
        // Paced: this reply ends the last ping's round trip, and the next ping waits for its
        // time (`send_due`) instead of going now.
        let paced = self.pace.zip(self.posted_at.last().copied());
        if let Some((pace, sent)) = paced {
            self.paced
                .push(Instant::now().saturating_duration_since(sent) / 2);
            if self.scnt < self.iters {
                self.due = Some(sent + pace);
            }
        } else if self.last_round && self.client && self.rcnt == self.iters {
            self.posted_at.push(Instant::now());
        }
        // The whole buffer, as the receives posted before the test: with `perf -a` the next
        // size's first Sends land in receives posted during this size (a 4-octet Send in a
        // 2-octet receive was a DDP "too long" TERMINATE, RFC 5041 §7.2).
        self.qp
            .post_recv(RecvWr {
                wr_id: self.rcnt,
                sg_list: smallvec![sge(&self.buf, 0, self.buf.len())],
            })
            .map_err(|e| format!("post recv: {e}"))?;
        if paced.is_none() && self.scnt < self.iters {
            self.send()?;
        }
        Ok(())
    }

    /// Every message sent and received, every Send completed.
    fn is_done(&self) -> bool {
        self.rcnt >= self.iters && self.scnt >= self.iters && self.sends_done >= self.scnt
    }

    /// Half the time between consecutive sends (and the last reply, with `last_round`); paced,
    /// half of each ping's round trip.
    fn latencies(&self) -> Vec<Duration> {
        if self.pace.is_some() {
            return self.paced.clone();
        }
        half_round_trips(&self.posted_at)
    }
}

/// The one-way latencies of a ping-pong whose side posted at `posted_at`: half of each
/// round trip, the time between consecutive posts (perftest reports one-way latency).
pub fn half_round_trips(posted_at: &[Instant]) -> Vec<Duration> {
    posted_at.windows(2).map(|w| (w[1] - w[0]) / 2).collect()
}

impl Stepped for PingPong {
    fn step(&mut self) -> Result<bool, String> {
        let mut moved = self.start()?;
        moved |= self.send_due()?;
        while let Some(wc) = self.cq.try_poll_one() {
            moved = true;
            self.on_wc(wc)?;
        }
        Ok(moved)
    }
    fn is_done(&self) -> bool {
        PingPong::is_done(self)
    }
    fn samples(&self) -> Vec<Duration> {
        self.latencies()
    }
    fn cq(&self) -> &Cq {
        &self.cq
    }
    fn name(&self) -> &'static str {
        "send_lat"
    }
    fn show_progress(&mut self) {
        self.progress = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpwarp::cm::{ConnParam, Net};
    use dpwarp::verbs::{Access, Device, QpCap, QpInitAttr};

    fn endpoint(dev: &Device) -> (Qp, Cq, Mr) {
        let pd = dev.alloc_pd();
        let cq = Cq::new(64);
        let mut attr = QpInitAttr::new(&cq);
        attr.cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
        };
        let qp = Qp::new(&pd, &attr);
        let buf = pd.reg_mr(64, Access::LOCAL_WRITE);
        for i in 0..4 {
            qp.post_recv(RecvWr {
                wr_id: i,
                sg_list: smallvec![sge(&buf, 0, 64)],
            })
            .unwrap();
        }
        (qp, cq, buf)
    }

    /// Over the kernel-TCP transport both ends run the ping-pong on their QP's driver thread
    /// and measure every round trip.
    #[test]
    fn kernel_transport_pingpong_runs_on_the_driver_thread() {
        const ITERS: u64 = 200;
        let net = Net::kernel();
        let l = net.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let dev = Device::open();
            let (qp, cq, buf) = endpoint(&dev);
            let req = l.get_request(Duration::from_secs(10)).unwrap();
            req.accept(&qp, &ConnParam::default()).unwrap();
            let r = send_pingpong_run_to_completion(
                &qp,
                &cq,
                Wait::Spin,
                false,
                &buf,
                64,
                ITERS,
                false,
                None,
            );
            qp.wait_closed(Duration::from_secs(5));
            r
        });
        let dev = Device::open();
        let (qp, cq, buf) = endpoint(&dev);
        Net::kernel()
            .connect(addr, &qp, &ConnParam::default())
            .unwrap();
        let (lat, on_driver) = send_pingpong_run_to_completion(
            &qp,
            &cq,
            Wait::Spin,
            true,
            &buf,
            64,
            ITERS,
            true,
            None,
        )
        .unwrap();
        qp.disconnect();
        let (_, server_on_driver) = server.join().unwrap().unwrap();
        assert!(
            on_driver,
            "the client's ping-pong ran on the calling thread"
        );
        assert!(
            server_on_driver,
            "the server's ping-pong ran on the calling thread"
        );
        // One sample per round trip: ITERS posts and the last reply.
        assert_eq!(lat.len(), ITERS as usize);
    }
}
