//! A QP's driver hook (src/verbs, src/cm/kernel.rs): work attached with
//! `Qp::attach_driver_hook` runs on the thread that drives the QP's connection (kernel TCP, the
//! in-memory link), handles the completions that thread produced and posts on it; hooks run
//! one after another on one connection; a finished hook that owns the QP's last handle is
//! dropped there without stopping the driver, and a hook is refused when no driver can run it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use dpwarp::cm::ConnParam;
use dpwarp::transport::memlink::LinkFaults;
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, DriverHook, HookPoll, Mr, Opcode, Qp, RecvWr, SendWr, WcOpcode,
    WcStatus,
};

/// Echoes the first message received back to the peer, then disconnects and finishes.
struct Echo {
    qp: Qp,
    cq: Cq,
    buf: Mr,
    /// The names of the threads `poll` ran on.
    threads: Arc<Mutex<Vec<String>>>,
    /// `closed` was called.
    closed: Arc<AtomicBool>,
    /// The hook was dropped.
    dropped: Arc<AtomicBool>,
    /// Calls of `poll` after `Finished`.
    polls_after_finish: Arc<AtomicUsize>,
    finished: bool,
}

impl DriverHook for Echo {
    fn poll(&mut self) -> HookPoll {
        if self.finished {
            self.polls_after_finish.fetch_add(1, Ordering::SeqCst);
        }
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().name().unwrap_or("").to_string());
        let Some(wc) = self.cq.poll_one() else {
            return HookPoll::Idle;
        };
        if wc.opcode != WcOpcode::Recv || wc.status != WcStatus::Success {
            return HookPoll::Worked;
        }
        let n = wc.byte_len as usize;
        self.qp
            .post_send(SendWr {
                wr_id: 7,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.buf, 0, n)],
                signaled: false,
            })
            .expect("post the echo");
        self.qp.disconnect();
        self.finished = true;
        HookPoll::Finished
    }

    fn closed(self: Box<Self>) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

type Probes = (Arc<Mutex<Vec<String>>>, Arc<AtomicBool>, Arc<AtomicBool>);

/// An [`Echo`] for `s`; with `post`, its receive buffer is posted.
fn echo(s: &Side, post: bool) -> (Echo, Probes) {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let closed = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let buf = s.pd.reg_mr(256, Access::LOCAL_WRITE);
    if post {
        s.qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&buf, 0, 256)],
        })
        .unwrap();
    }
    let h = Echo {
        qp: s.qp.clone(),
        cq: s.cq.clone(),
        buf,
        threads: threads.clone(),
        closed: closed.clone(),
        dropped: dropped.clone(),
        polls_after_finish: Arc::new(AtomicUsize::new(0)),
        finished: false,
    };
    (h, (threads, closed, dropped))
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn hook_runs_on_the_driver(link: Link) {
    let mut c = Side::new();
    let mut s = Side::new();
    // Not connected: no driver to run it.
    let (early, _) = echo(&s, false);
    let early =
        s.qp.attach_driver_hook(early)
            .expect_err("refused before connect");
    assert!(!s.qp.accepts_driver_hook());
    drop(early);
    connect_sides(
        link,
        &mut c,
        &mut s,
        ConnParam::default(),
        ConnParam::default(),
    )
    .unwrap();
    assert!(s.qp.accepts_driver_hook());
    let (hook, (threads, closed, dropped)) = echo(&s, true);
    let polls_after = hook.polls_after_finish.clone();
    assert!(s.qp.attach_driver_hook(hook).is_ok());
    // The hook holds the QP now; the test's handle goes (the connection stays up).
    let sqp = s.qp.clone();
    drop(s);

    let rbuf = c.pd.reg_mr(256, Access::LOCAL_WRITE);
    c.qp.post_recv(RecvWr {
        wr_id: 2,
        sg_list: smallvec![sge(&rbuf, 0, 256)],
    })
    .unwrap();
    let sbuf = c.pd.reg_mr(64, Access::LOCAL_WRITE);
    sbuf.write_at(0, b"ping through the driver hook");
    c.qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&sbuf, 0, 28)],
        signaled: true,
    })
    .unwrap();
    let mut got = None;
    for _ in 0..2 {
        let wc = wc_ok(&c.cq);
        if wc.opcode == WcOpcode::Recv {
            got = Some(wc.byte_len);
        }
    }
    assert_eq!(got, Some(28), "the hook echoed the message");
    assert_eq!(&rbuf.to_vec()[..28], b"ping through the driver hook");
    // The hook disconnected and finished: it is dropped, and the connection closes.
    assert!(c.qp.wait_closed(Duration::from_secs(10)));
    wait_for("the hook is dropped", || dropped.load(Ordering::SeqCst));
    assert!(sqp.wait_closed(Duration::from_secs(10)));
    assert!(
        !closed.load(Ordering::SeqCst),
        "a finished hook is not closed"
    );
    assert_eq!(polls_after.load(Ordering::SeqCst), 0);
    let names = threads.lock().unwrap().clone();
    assert!(!names.is_empty());
    assert!(
        names.iter().all(|n| n == "dpwarp-qp"),
        "the hook ran on the QP's driver thread only: {names:?}"
    );
    // Closed: refused.
    let (late, _) = echo(&c, false);
    assert!(sqp.attach_driver_hook(late).is_err());
}

#[test]
fn hook_runs_on_the_memlink_driver() {
    hook_runs_on_the_driver(Link::Mem(LinkFaults::default()));
}

#[test]
fn hook_runs_on_the_kernel_tcp_driver() {
    hook_runs_on_the_driver(Link::Kernel);
}

/// A hook that never finishes is closed when the peer goes, then dropped.
#[test]
fn unfinished_hook_is_closed_when_the_peer_goes() {
    let (c, s) = connect_pair(
        Link::Mem(LinkFaults::default()),
        ConnParam::default(),
        ConnParam::default(),
    )
    .unwrap();
    struct Idle {
        qp: Qp,
        closed: Arc<AtomicBool>,
        dropped: Arc<AtomicBool>,
    }
    impl DriverHook for Idle {
        fn poll(&mut self) -> HookPoll {
            HookPoll::Idle
        }
        fn closed(self: Box<Self>) {
            assert!(self.qp.is_closed());
            self.closed.store(true, Ordering::SeqCst);
        }
    }
    impl Drop for Idle {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }
    let closed = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let waker = s.qp.waker();
    s.qp.attach_driver_hook(Idle {
        qp: s.qp.clone(),
        closed: closed.clone(),
        dropped: dropped.clone(),
    })
    .ok()
    .expect("attached");
    waker.wake();
    drop(s);
    drop(c);
    wait_for("the hook is closed and dropped", || {
        dropped.load(Ordering::SeqCst)
    });
    assert!(closed.load(Ordering::SeqCst));
    // The QP is gone: waking it does nothing.
    waker.wake();
}

/// Counts `rounds` received messages, answering each, then finishes; `id` goes into its
/// answers' first octet so the peer tells the hooks apart.
struct Counter {
    qp: Qp,
    cq: Cq,
    buf: Mr,
    id: u8,
    left: u32,
    thread: Arc<Mutex<Option<String>>>,
    dropped: Arc<AtomicBool>,
}

impl DriverHook for Counter {
    fn poll(&mut self) -> HookPoll {
        *self.thread.lock().unwrap() = std::thread::current().name().map(str::to_string);
        let Some(wc) = self.cq.poll_one() else {
            return HookPoll::Idle;
        };
        assert_eq!(wc.status, WcStatus::Success);
        if wc.opcode != WcOpcode::Recv {
            return HookPoll::Worked;
        }
        self.qp
            .post_recv(RecvWr {
                wr_id: 1,
                sg_list: smallvec![sge(&self.buf, 64, 64)],
            })
            .unwrap();
        self.buf.write_at(0, &[self.id]);
        self.qp
            .post_send(SendWr {
                wr_id: 2,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.buf, 0, 1)],
                signaled: false,
            })
            .unwrap();
        self.left -= 1;
        if self.left == 0 {
            HookPoll::Finished
        } else {
            HookPoll::Worked
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Hooks run one after another on one connection (as `dpwarp perf -a` runs one per size): the
/// second, attached while the first runs, waits and runs once the first has finished; a third
/// is attached after the second finished; each runs on the driver thread and is dropped when
/// it finishes, with the connection still up. (Before, a QP took one hook in its life: the
/// sizes after the first of `perf send_lat -a` over kernel TCP ran on the application
/// thread, 25 times slower.)
fn hooks_run_in_turn(link: Link) {
    let mut c = Side::new();
    let mut s = Side::new();
    connect_sides(
        link,
        &mut c,
        &mut s,
        ConnParam::default(),
        ConnParam::default(),
    )
    .unwrap();
    let sbuf = s.pd.reg_mr(128, Access::LOCAL_WRITE);
    for _ in 0..4 {
        s.qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&sbuf, 64, 64)],
        })
        .unwrap();
    }
    let counter = |id: u8, left: u32| {
        let thread = Arc::new(Mutex::new(None));
        let dropped = Arc::new(AtomicBool::new(false));
        let h = Counter {
            qp: s.qp.clone(),
            cq: s.cq.clone(),
            buf: sbuf.clone(),
            id,
            left,
            thread: thread.clone(),
            dropped: dropped.clone(),
        };
        (h, thread, dropped)
    };
    let (first, t1, d1) = counter(1, 2);
    let (second, t2, d2) = counter(2, 3);
    assert!(s.qp.attach_driver_hook(first).is_ok());
    // Attached while the first runs (it has seen no message yet): waits for it.
    wait_for("the driver takes the first hook", || {
        t1.lock().unwrap().is_some()
    });
    assert!(s.qp.attach_driver_hook(second).is_ok());
    // A third while the second still waits to be taken: refused.
    let (extra, _, _) = counter(9, 1);
    assert!(s.qp.attach_driver_hook(extra).is_err());
    assert!(!s.qp.accepts_driver_hook());

    let cbuf = c.pd.reg_mr(128, Access::LOCAL_WRITE);
    for _ in 0..4 {
        c.qp.post_recv(RecvWr {
            wr_id: 3,
            sg_list: smallvec![sge(&cbuf, 64, 64)],
        })
        .unwrap();
    }
    // One message, one answer; returns the id of the hook that answered.
    let ask = || {
        c.qp.post_send(SendWr {
            wr_id: 4,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&cbuf, 0, 8)],
            signaled: false,
        })
        .unwrap();
        let wc = wc_ok(&c.cq);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        c.qp.post_recv(RecvWr {
            wr_id: 3,
            sg_list: smallvec![sge(&cbuf, 64, 64)],
        })
        .unwrap();
        cbuf.to_vec()[64]
    };
    let answers: Vec<u8> = (0..5).map(|_| ask()).collect();
    assert_eq!(answers, [1, 1, 2, 2, 2], "the hooks answered in turn");
    wait_for("the finished hooks are dropped", || {
        d1.load(Ordering::SeqCst) && d2.load(Ordering::SeqCst)
    });
    assert!(!s.qp.is_closed(), "finished hooks leave the connection up");
    // After the second finished: the next is taken.
    assert!(s.qp.accepts_driver_hook());
    let (third, t3, d3) = counter(3, 1);
    assert!(s.qp.attach_driver_hook(third).is_ok());
    assert_eq!(ask(), 3);
    wait_for("the third hook is dropped", || d3.load(Ordering::SeqCst));
    for t in [t1, t2, t3] {
        assert_eq!(t.lock().unwrap().as_deref(), Some("dpwarp-qp"));
    }
}

#[test]
fn hooks_run_in_turn_on_the_memlink_driver() {
    hooks_run_in_turn(Link::Mem(LinkFaults::default()));
}

#[test]
fn hooks_run_in_turn_on_the_kernel_tcp_driver() {
    hooks_run_in_turn(Link::Kernel);
}
