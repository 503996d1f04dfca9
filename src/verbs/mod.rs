//! The verbs API, shaped like ibverbs (`ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_cq`,
//! `ibv_create_qp`, `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) in safe Rust.
//!
//! RFC 5040 §5 describes the RNIC interface semantics this API exposes (STags, tagged and untagged
//! buffers, completion ordering); RFC 5042 the protection model (PD, access rights, STag keys).
//!
//! ```
//! use dpwarp::verbs::{Access, Device};
//! let dev = Device::open();
//! let pd = dev.alloc_pd();
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ);
//! mr.write_at(0, b"hello");
//! assert_eq!(&mr.to_vec()[..5], b"hello");
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use crossbeam_queue::SegQueue;

use crate::conn::{ConnEvent, Connection};
use crate::rdma::qp::{inline_wr, validate_recv, validate_send, SendChecked};
pub use crate::rdma::{
    smallvec, Access, InlineData, MemoryTable, Mr, MrBytes, MrBytesMut, Opcode, PdId, PostError,
    RecvWr, SendWr, SgList, Sge, SharedMem, WcOpcode, WcStatus, WorkCompletion, MAX_INLINE_DATA,
    SG_INLINE,
};
use crate::wake::Wakeup;
use crate::wire::terminate::TermCause;

/// A software RNIC instance (`ibv_context`): owns the memory-region table its QPs place into.
#[derive(Clone, Default)]
pub struct Device {
    mem: MemoryTable,
}

impl Device {
    /// Open a device.
    pub fn open() -> Self {
        Device {
            mem: MemoryTable::new(),
        }
    }

    /// Allocate a protection domain (`ibv_alloc_pd`; RFC 5042 §5.3 on PDs).
    pub fn alloc_pd(&self) -> Pd {
        Pd {
            id: self.mem.alloc_pd(),
            mem: self.mem.clone(),
        }
    }

    /// The device's memory-region table.
    pub fn memory(&self) -> &MemoryTable {
        &self.mem
    }
}

/// A protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct Pd {
    id: PdId,
    mem: MemoryTable,
}

impl Pd {
    /// The PD's identifier.
    pub fn id(&self) -> PdId {
        self.id
    }

    /// The memory-region table the PD's regions live in.
    pub fn memory(&self) -> &MemoryTable {
        &self.mem
    }

    /// Register `len` zeroed bytes with `access` rights (`ibv_reg_mr`). The region's STag serves as
    /// lkey and rkey; its key byte is random (RFC 5040 §8.1, RFC 5042 §5.1.2).
    pub fn reg_mr(&self, len: usize, access: Access) -> Mr {
        self.mem.register(self.id, len, access)
    }

    /// Register memory that already holds data (`ibv_reg_mr` on an existing buffer): the
    /// region takes `data` over without copying it.
    pub fn reg_mr_from(&self, data: Vec<u8>, access: Access) -> Mr {
        self.mem.register_bytes(self.id, data, access)
    }

    /// Register `mem` in this PD without copying (`ibv_reg_mr` of a buffer that other PDs may
    /// have registered too): the region's bytes are `mem`'s ([`MemoryTable::register_shared`]).
    pub fn reg_mr_shared(&self, mem: &SharedMem, access: Access) -> Mr {
        self.mem.register_shared(self.id, mem, access)
    }

    /// Register `len` bytes of `mem` from `offset` (`ibv_reg_mr` of part of a buffer): the
    /// STag reaches those bytes only ([`MemoryTable::register_shared_range`]).
    pub fn reg_mr_shared_range(
        &self,
        mem: &SharedMem,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Mr {
        self.mem
            .register_shared_range(self.id, mem, offset, len, access)
    }

    /// Deregister a region (`ibv_dereg_mr`): its STag is invalid afterwards.
    pub fn dereg_mr(&self, mr: &Mr) -> bool {
        self.mem.deregister(mr.stag())
    }
}

/// What a [`Cq`] runs when it is polled empty ([`Cq::drive_with`]): one pass of the
/// dataplane worker that produces its completions; true if that did anything.
pub type CqDriver = Arc<dyn Fn() -> bool + Send + Sync>;

/// A completion queue (`ibv_cq`). Clones share the queue.
///
/// Its memory follows what is queued, not its depth: a channel of blocks made as completions
/// come and freed as they are taken (crossbeam's unbounded list flavour, 31 slots a block), the
/// depth enforced at push. A 4096-deep queue of fixed slots would be 128 KiB, more than the
/// rest of an idle RPC connection (docs/rpc.md "What a connection costs in memory").
#[derive(Clone)]
pub struct Cq {
    tx: Sender<WorkCompletion>,
    rx: Receiver<WorkCompletion>,
    depth: usize,
    driver: Arc<std::sync::OnceLock<CqDriver>>,
    notify: Arc<std::sync::OnceLock<CqNotify>>,
}

/// Where a [`Cq`] says that it has something once asked to ([`Cq::req_notify`]): the
/// `token` goes on the `ready` queue, as `ibv_req_notify_cq` and a completion channel tell a
/// verbs program which CQ to poll. For an owner that serves many CQs and should visit only
/// those with completions in them, not all of them on every pass.
struct CqNotify {
    ready: Arc<SegQueue<usize>>,
    token: usize,
    armed: AtomicBool,
}

impl Cq {
    /// A queue holding up to `depth` completions (`ibv_create_cq`). A full queue is a CQ overrun:
    /// the completion is dropped and logged (as a hardware CQ overrun is an async error).
    pub fn new(depth: usize) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Cq {
            tx,
            rx,
            depth: depth.max(1),
            driver: Arc::new(std::sync::OnceLock::new()),
            notify: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// Name this queue `token` on `ready` for [`Cq::req_notify`]. Set once; later calls are
    /// ignored.
    pub fn set_notify(&self, ready: Arc<SegQueue<usize>>, token: usize) {
        let _ = self.notify.set(CqNotify {
            ready,
            token,
            armed: AtomicBool::new(false),
        });
    }

    /// Ask for the next completion to put this queue's token on its ready queue, once
    /// (`ibv_req_notify_cq`; nothing without [`Cq::set_notify`]). As with verbs, a completion
    /// queued before the request does not notify: poll again after asking ([`Cq::is_empty`]).
    /// Completions pushed by another thread while the request is made may notify late; an
    /// owner that takes them from other threads also polls every queue now and then.
    pub fn req_notify(&self) {
        if let Some(n) = self.notify.get() {
            n.armed.store(true, Ordering::SeqCst);
        }
    }

    /// Whether no completion is queued.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Run to completion: whenever this queue is polled or waited on while empty, it runs
    /// `driver` (e.g. a driven DPDK worker's poll, `dataplane::Driver::poll`) before looking
    /// again, so the thread that reaps completions is the one that produces them (no hand-off
    /// to a worker thread). Set once; later calls are ignored.
    pub fn drive_with(&self, driver: CqDriver) {
        let _ = self.driver.set(driver);
    }

    /// Take up to `max` completions without waiting (`ibv_poll_cq`).
    pub fn poll(&self, max: usize) -> Vec<WorkCompletion> {
        if self.rx.is_empty() {
            self.drive();
        }
        self.rx.try_iter().take(max).collect()
    }

    /// Take one completion without waiting.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        if let Some(wc) = self.take() {
            return Some(wc);
        }
        self.drive();
        self.take()
    }

    /// One queued completion. The emptiness check comes first: crossbeam's `try_recv` on an
    /// empty channel issues a full fence (`mfence`), which a spinning poller would pay on
    /// every empty poll; `is_empty` is two plain loads.
    fn take(&self) -> Option<WorkCompletion> {
        if self.rx.is_empty() {
            return None;
        }
        self.rx.try_recv().ok()
    }

    /// Take one completion already queued, without running the driver.
    pub fn try_poll_one(&self) -> Option<WorkCompletion> {
        self.take()
    }

    /// Wait up to `timeout` for one completion.
    pub fn wait(&self, timeout: Duration) -> Option<WorkCompletion> {
        let Some(d) = self.driver.get() else {
            return self.rx.recv_timeout(timeout).ok();
        };
        let end = Instant::now() + timeout;
        // The clock is read every 32 passes: a pass of an idle driven worker costs about as
        // much as a clock read, and a timeout needs no better precision.
        let mut passes = 0u32;
        loop {
            if let Some(wc) = self.take() {
                return Some(wc);
            }
            let worked = d();
            passes = passes.wrapping_add(1);
            if passes.is_multiple_of(32) && Instant::now() >= end {
                return self.rx.try_recv().ok();
            }
            if !worked {
                std::hint::spin_loop();
            }
        }
    }

    /// True if polling this queue runs a driver ([`Cq::drive_with`]): a thread spinning on it
    /// is the one moving its bytes, so it has no reason to yield its CPU.
    pub fn is_driven(&self) -> bool {
        self.driver.get().is_some()
    }

    /// One pass of the driver, if there is one; true if it did anything.
    pub(crate) fn drive(&self) -> bool {
        self.driver.get().is_some_and(|d| d())
    }

    pub(crate) fn push(&self, wc: WorkCompletion) {
        // Several producers at once (QPs of different workers on one CQ) may together pass the
        // depth by a few: the bound is on memory, and the queue has room.
        if self.tx.len() >= self.depth {
            log::error!("cq: overrun, completion lost: {wc:?}");
            return;
        }
        // Unbounded, so it never waits; it cannot fail while `self` holds `rx`.
        if self.tx.send(wc).is_err() {
            return;
        }
        if let Some(n) = self.notify.get() {
            // A plain load while not asked (a busy owner never asks): the swap only for the
            // one completion that answers a request.
            if n.armed.load(Ordering::SeqCst) && n.armed.swap(false, Ordering::AcqRel) {
                n.ready.push(n.token);
            }
        }
    }
}

/// A QP's post ring: work requests posted and not yet taken by the connection's driver, at
/// most `cap` (then `QueueFull`). Lock-free (an application thread posts while the driver
/// takes), and its memory follows what is queued, not the capacity: a queue of blocks made as
/// WRs come and freed as they are taken (`crossbeam_queue::SegQueue`), so an idle QP costs a
/// few words here, not `cap` slots (a 1024-deep send ring of fixed slots is a quarter of a
/// megabyte per connection).
pub(crate) struct PostRing<T> {
    q: SegQueue<T>,
    cap: usize,
}

impl<T> PostRing<T> {
    fn new(cap: usize) -> Self {
        PostRing {
            q: SegQueue::new(),
            cap: cap.max(1),
        }
    }

    /// Queue `v`, or hand it back when `cap` are queued. (Several threads posting at once may
    /// together pass `cap` by a few: the bound is on memory, and the queue has room.)
    fn push(&self, v: T) -> Result<(), T> {
        if self.q.len() >= self.cap {
            return Err(v);
        }
        self.q.push(v);
        Ok(())
    }

    pub(crate) fn pop(&self) -> Option<T> {
        self.q.pop()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn capacity(&self) -> usize {
        self.cap
    }
}

/// Queue-pair capacities (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy)]
pub struct QpCap {
    /// Send work requests the connection holds at once (posted, not yet completed); as many
    /// more may wait in the QP's post ring until it takes them, after which `post_send`
    /// answers `QueueFull`.
    pub max_send_wr: usize,
    /// Receive work requests the connection holds at once; as many more may wait in the post
    /// ring (then `QueueFull`).
    pub max_recv_wr: usize,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
        }
    }
}

/// Queue-pair creation attributes (`ibv_qp_init_attr`).
#[derive(Clone)]
pub struct QpInitAttr {
    /// Where send-queue completions go.
    pub send_cq: Cq,
    /// Where receive-queue completions go.
    pub recv_cq: Cq,
    /// Queue depths.
    pub cap: QpCap,
}

impl QpInitAttr {
    /// One CQ for both queues.
    pub fn new(cq: &Cq) -> Self {
        QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCap::default(),
        }
    }
}

/// Before connection the QP's post rings only collect receive (and send) work requests; the
/// connection manager turns it into a live [`Connection`] (ibverbs allows `post_recv` in
/// INIT/RTR, and rping and perftest rely on it: receive buffers exist before the peer's first
/// Send).
pub(crate) enum QpSlot {
    /// Not connected yet: posted work waits in the post rings.
    Init,
    Live(Box<Connection>),
}

/// State shared between a [`Qp`] handle and the driver that moves its bytes.
pub(crate) struct QpShared {
    pub(crate) pd: Pd,
    pub(crate) cap: QpCap,
    /// The connection. A spin lock: its release is a plain store where std's `Mutex` swaps,
    /// and a message takes it several times (posts, the worker's receive, transmit and
    /// completion phases), each an atomic read-modify-write on the message's path
    /// (scripts/instructions counts them). Its holders keep it for engine work only, never
    /// across a system call; a waiter yields the CPU.
    pub(crate) slot: SlotLock,
    /// Send WRs posted by the application, not yet handed to the connection: a bounded
    /// lock-free ring (capacity `cap.max_send_wr`) the driver drains, so posting never waits
    /// for the driver's lock.
    /// Each with what `validate_send` found when it was posted (not looked up again), and its
    /// payload when posted inline.
    pub(crate) sq_ring: PostRing<(SendWr, SendChecked, Option<InlineData>)>,
    /// Receive WRs likewise (capacity `cap.max_recv_wr`), each with its capacity.
    pub(crate) rq_ring: PostRing<(RecvWr, u64)>,
    pub(crate) send_cq: Cq,
    pub(crate) recv_cq: Cq,
    /// Run by `post_send` after queuing a WR ([`Qp::drive_with`]): the doorbell of a driven
    /// dataplane worker.
    pub(crate) post_driver: std::sync::OnceLock<CqDriver>,
    /// Set once the QP was handed to the connection manager.
    pub(crate) connecting: AtomicBool,
    /// Set when the connection is gone (stream closed); posts fail afterwards.
    pub(crate) closed: AtomicBool,
    /// Set by a post that went straight into the connection ([`QpShared::direct_slot`]),
    /// taken by the dataplane worker's post phase, which then looks at the connection as if
    /// it had drained a WR from the post rings.
    pub(crate) posted_direct: AtomicBool,
    /// Application asked to disconnect.
    pub(crate) disconnect: AtomicBool,
    /// Why the connection ended, if a TERMINATE did it (the `ibv_get_async_event` role).
    pub(crate) terminate: Mutex<Option<QpTerminate>>,
    /// Wakes the kernel-transport driver thread when work is posted: made when that driver
    /// starts (`QpShared::make_wake`), before `sleepy_driver` is raised; a QP on a DPDK
    /// worker never has one (an eventfd per QP would be a descriptor per connection for
    /// nothing). None inside if no eventfd could be made: the driver then falls back to
    /// short idle waits.
    pub(crate) wake: OnceLock<Option<Wakeup>>,
    /// Bumped on every post; with `sleeping` it tells the driver whether it may sleep.
    pub(crate) post_seq: AtomicU64,
    /// Set (before its first pass) by a driver that may sleep waiting for posts (the kernel
    /// transport's thread): only then do posts bump `post_seq` and look at `sleeping`, two
    /// ordered atomics a poll-mode driver (DPDK, driven or not) has no use for.
    pub(crate) sleepy_driver: AtomicBool,
    /// Everything the connection sent has been acknowledged (kept by a dataplane worker each
    /// pass): the doorbell ([`Qp::drive_with`]) rings only then. With data in flight a pass
    /// is coming anyway, and framing each post on its own would cost the batching.
    pub(crate) stream_idle: AtomicBool,
    /// Set by the driver just before it sleeps in its transport's wait.
    pub(crate) sleeping: AtomicBool,
    /// This QP's flag among the post flags of the dataplane worker that drives it (set once
    /// the worker holds the connection): every post raises it, so the worker's post phase
    /// reads the post rings of the QPs that were posted to, not of every QP it holds.
    pub(crate) post_flag: OnceLock<PostFlag>,
    /// The ORD negotiated at establishment (RFC 6581 §9.1); `u32::MAX` until then. With ORD 0
    /// `post_send` refuses an RDMA Read at once (`PostError::ZeroOrd`).
    pub(crate) ord: AtomicU32,
    /// A [`DriverHook`] on its way to the driver thread ([`Qp::attach_driver_hook`]).
    hook: Mutex<HookSlot>,
    /// Set while `hook` holds a hook the driver has not taken yet (checked without the lock on
    /// every pass of the driver).
    hook_waiting: AtomicBool,
}

/// A poll-mode worker's post flags: one per socket slot, and one per group of
/// [`PostFlags::GROUP`] slots that goes up with any of its flags, so that a pass reads the
/// flags of the groups posted to, not every slot's (with 200 quiet connections the flag scan
/// was 40 % of a worker's passes).
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
pub(crate) struct PostFlags {
    /// One per socket slot.
    pub(crate) flags: Box<[AtomicBool]>,
    /// One per `GROUP` slots.
    pub(crate) groups: Box<[AtomicBool]>,
}

#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
impl PostFlags {
    /// Slots per group: the flags of one group share a cache line.
    pub(crate) const GROUP: usize = 64;

    /// `slots` flags, all down.
    pub(crate) fn new(slots: usize) -> PostFlags {
        let down = |n: usize| (0..n).map(|_| AtomicBool::new(false)).collect();
        PostFlags {
            flags: down(slots),
            groups: down(slots.div_ceil(Self::GROUP)),
        }
    }

    /// Raise the flag of `slot` (a release store after the ring push), then its group's. The
    /// worker lowers a group with an acquiring swap before it reads the group's flags, so
    /// either the swap reads this raise (or a later one) and then sees the flag and the push,
    /// or the group goes up again after the swap and the next pass reads it. The group's
    /// raise is a read-modify-write: other posters raise the same group, and a plain store
    /// of theirs would end this raise's release sequence, so a swap that read theirs would
    /// not be ordered after this flag (C++/Rust memory model; on x86 either is one locked
    /// instruction or a plain store). The slot's flag stays a plain store: one QP's.
    pub(crate) fn raise(&self, slot: usize) {
        self.flags[slot].store(true, Ordering::Release);
        self.groups[slot / Self::GROUP].swap(true, Ordering::Release);
    }

    /// Lower the flags of the first `slots` slots and their groups (a sweep, which reads every
    /// QP's rings anyway): each raised one with an acquiring swap, the raises' pair.
    pub(crate) fn lower_all(&self, slots: usize) {
        let groups = &self.groups[..slots.div_ceil(Self::GROUP)];
        for f in groups.iter().chain(&self.flags[..slots]) {
            if f.load(Ordering::Relaxed) {
                f.swap(false, Ordering::Acquire);
            }
        }
    }
}

/// One QP's flag among a poll-mode worker's post flags ([`QpShared::post_flag`]).
pub(crate) struct PostFlag {
    flags: Arc<PostFlags>,
    slot: usize,
}

// Made and matched only by the DPDK dataplane's workers.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
impl PostFlag {
    /// Flag `slot` of `flags`, or None if there is no such flag.
    pub(crate) fn new(flags: Arc<PostFlags>, slot: usize) -> Option<PostFlag> {
        (slot < flags.flags.len()).then_some(PostFlag { flags, slot })
    }

    /// Whether this is flag `slot` of `flags`.
    pub(crate) fn is(&self, flags: &Arc<PostFlags>, slot: usize) -> bool {
        Arc::ptr_eq(&self.flags, flags) && self.slot == slot
    }

    /// Raised after the ring push ([`PostFlags::raise`]); the worker takes the flag with an
    /// acquiring swap, so either the swap reads this store and sees the push, or it comes
    /// earlier in the flag's modification order and the flag stays up for its next pass.
    fn raise(&self) {
        self.flags.raise(self.slot);
    }
}

thread_local! {
    /// The QP whose connection this thread drives, as the address of its shared state (0:
    /// none). Only compared, never dereferenced.
    static DRIVING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Where [`Qp::attach_driver_hook`] leaves a hook for the driver thread. The slot only passes
/// the hook on: the driver takes it into a local of its own once it runs no other, and takes
/// what is left here when it closes, so the QP's shared state holds a hook that holds the QP
/// (an `Arc` cycle) only while that hook waits for a live driver.
#[derive(Default)]
struct HookSlot {
    /// A driver that runs hooks is moving this QP's connection: set when a kernel-transport
    /// driver starts, cleared when it closes.
    accepts: bool,
    /// Attached and not yet taken by the driver, which takes it once the hook it runs (if
    /// any) has finished.
    hook: Option<Box<dyn DriverHook>>,
}

/// What one pass of a [`DriverHook`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoll {
    /// Nothing to do: the driver may sleep until the peer sends, work is posted or the QP's
    /// [`QpWaker`] is woken.
    Idle,
    /// Did something (handled completions, posted work): the driver runs again at once.
    Worked,
    /// Done (it may have called [`Qp::disconnect`], or leave the connection to the
    /// application). The driver stops calling it, drops it on its own thread at once and
    /// runs the next hook attached ([`Qp::attach_driver_hook`]): a benchmark runs one hook
    /// per message size on one connection, as perftest's `-a`. A QP handle the hook owns is
    /// dropped with it; if it was the last, the connection closes as when an application drops
    /// its last handle, except that the driver does not wait there for its own close.
    Finished,
}

/// Work that runs on the thread driving a QP's connection, after each pass of its protocol
/// engine (run to completion: a completion is produced and handled, and the work it posts
/// picked up, on one thread, without a hand-off or a wake-up between threads).
///
/// Only the kernel-TCP backend (and the in-memory link, same driver) runs hooks; see
/// [`Qp::attach_driver_hook`]. A hook polls its CQs and posts work like any application code,
/// but it must never wait: it runs between the driver's receive and transmit, so a wait for
/// a completion (or for anything the driver itself has to do) would never end. Work that may
/// block belongs on another thread, which wakes the driver through a [`QpWaker`] when it
/// leaves results for the hook.
pub trait DriverHook: Send {
    /// One pass, after the driver moved the completions of its latest pass into the CQs.
    fn poll(&mut self) -> HookPoll;

    /// The connection has closed ([`Qp::is_closed`] is true; its outstanding work was flushed
    /// into the CQs); the hook is dropped right after. Not called on a hook that returned
    /// [`HookPoll::Finished`].
    fn closed(self: Box<Self>) {}
}

/// Wakes the driver of a QP from any thread (see [`DriverHook`]): its next pass runs even if
/// nothing arrived and nothing was posted. Holds no strong reference: waking a QP that is gone
/// does nothing.
#[derive(Clone)]
pub struct QpWaker(Weak<QpShared>);

impl QpWaker {
    /// Make the driver run a pass soon (at once if it is asleep).
    pub fn wake(&self) {
        if let Some(sh) = self.0.upgrade() {
            sh.kick();
        }
    }
}

/// The lock of a QP's connection (`QpShared::slot`).
pub(crate) type SlotLock = spin::mutex::SpinMutex<QpSlot, spin::relax::Yield>;
/// A held [`SlotLock`].
pub(crate) type SlotGuard<'a> = spin::mutex::SpinMutexGuard<'a, QpSlot, spin::relax::Yield>;

impl QpShared {
    /// The connection, locked. A driver thread that panicked while holding it released it as
    /// it unwound; the data inside is still consistent enough to flush.
    pub(crate) fn lock(&self) -> SlotGuard<'_> {
        self.slot.lock()
    }

    /// The connection, locked, when a WR may go straight into it as the worker's post phase
    /// would hand it over ([`QpShared::drain_posts`]): for a QP whose driver runs on the
    /// poster's thread (a driven dataplane worker: [`Qp::drive_with`]) no post ring between
    /// them, no second copy of the WR, no ring operation on either side. Only when the post
    /// ring (`send`: the send ring, else the receive ring) is empty, so WRs still reach the
    /// connection in the order they were posted; the connection is live and takes another WR
    /// now; and its lock is free (a `try_lock`: a poster never waits for a worker pass on
    /// another thread, nor deadlocks on a lock its own thread holds). `None`: the WR goes
    /// into the ring.
    fn direct_slot(&self, send: bool) -> Option<SlotGuard<'_>> {
        let ring_empty = if send {
            self.sq_ring.is_empty()
        } else {
            self.rq_ring.is_empty()
        };
        if !ring_empty {
            return None;
        }
        let slot = self.slot.try_lock()?;
        let room = match &*slot {
            QpSlot::Live(conn) if send => conn.send_room(),
            QpSlot::Live(conn) => conn.recv_room(),
            QpSlot::Init => 0,
        };
        (room > 0).then_some(slot)
    }

    /// Work was posted: make sure the driver sees it now. A dataplane worker: the QP's post
    /// flag goes up ([`PostFlag`]). A sleeping driver: Dekker-style, it sets `sleeping` then
    /// re-reads `post_seq`; we bump `post_seq` then read `sleeping`, both SeqCst, so at least
    /// one of us sees the other.
    pub(crate) fn kick(&self) {
        if let Some(f) = self.post_flag.get() {
            f.raise();
        }
        // The WR was pushed before this load: a driver that sets the flag afterwards drains
        // the rings in its first pass, after setting it.
        if !self.sleepy_driver.load(Ordering::SeqCst) {
            return;
        }
        self.post_seq.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(w) = self.wake() {
                w.notify();
            }
        }
    }

    /// Make the eventfd that wakes a sleeping driver, once (the kernel-TCP driver, as it
    /// starts; before it raises `sleepy_driver`, so a poster that sees that flag sees it).
    pub(crate) fn make_wake(&self) {
        self.wake.get_or_init(|| {
            Wakeup::new()
                .map_err(|e| log::warn!("verbs: no eventfd for the QP driver: {e}"))
                .ok()
        });
    }

    /// The eventfd that wakes a sleeping driver, if it has one.
    pub(crate) fn wake(&self) -> Option<&Wakeup> {
        self.wake.get().and_then(Option::as_ref)
    }

    fn hook_slot(&self) -> MutexGuard<'_, HookSlot> {
        self.hook.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A driver that runs [`DriverHook`]s starts moving this QP's connection.
    pub(crate) fn accept_hooks(&self) {
        self.hook_slot().accepts = true;
    }

    /// The calling thread drives this QP's connection from now on (a kernel-transport
    /// driver): the last application handle dropped here must not wait for the close, which
    /// only this thread can carry out ([`QpHandle`]'s drop).
    pub(crate) fn mark_driver_thread(&self) {
        DRIVING.with(|d| d.set(self as *const QpShared as usize));
    }

    /// The calling thread drives this QP's connection ([`QpShared::mark_driver_thread`]).
    fn on_driver_thread(&self) -> bool {
        DRIVING.with(|d| d.get() == self as *const QpShared as usize)
    }

    /// The hook attached since the last call, if any (the driver keeps it from here on).
    pub(crate) fn take_hook(&self) -> Option<Box<dyn DriverHook>> {
        if !self.hook_waiting.load(Ordering::Acquire) {
            return None;
        }
        self.hook_waiting.store(false, Ordering::Release);
        self.hook_slot().hook.take()
    }

    /// The driver is ending (after [`QpShared::set_closed`]): no hook is accepted from now on;
    /// returns one attached since its last pass, which it must still close.
    pub(crate) fn close_hooks(&self) -> Option<Box<dyn DriverHook>> {
        let mut slot = self.hook_slot();
        slot.accepts = false;
        self.hook_waiting.store(false, Ordering::Release);
        slot.hook.take()
    }

    /// Remember the first TERMINATE among connection events.
    pub(crate) fn note_event(&self, ev: &ConnEvent) {
        if let ConnEvent::Established(n) = ev {
            self.ord.store(u32::from(n.ord), Ordering::Release);
        }
        let t = match ev {
            ConnEvent::TerminateSent(c) => QpTerminate::Sent(*c),
            ConnEvent::TerminateReceived(c) => QpTerminate::Received(*c),
            _ => return,
        };
        let mut slot = self.terminate.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(t);
    }

    /// Hand the WRs waiting in the post rings to the connection, as many as it takes now (send
    /// ring first: a Send popped here was posted after every receive posted before it, which
    /// the receive ring then holds, so those buffers are in place before that Send's answer can
    /// arrive). The WRs were checked against the memory table when posted and are not looked
    /// up again here (a region deregistered since fails where its bytes are gathered or
    /// placed). A WR the connection refuses (closed, terminated) completes with an error
    /// instead.
    pub(crate) fn drain_posts(&self, conn: &mut Connection) {
        let mut room = conn.send_room();
        while room > 0 {
            let Some(posted) = self.sq_ring.pop() else {
                break;
            };
            room -= 1;
            self.hand_send(conn, posted);
        }
        let mut room = conn.recv_room();
        while room > 0 {
            let Some(posted) = self.rq_ring.pop() else {
                break;
            };
            room -= 1;
            self.hand_recv(conn, posted);
        }
    }

    /// Hand one checked send WR to the connection, from the post ring or straight from its
    /// poster ([`QpShared::direct_slot`]): one the connection refuses (closed, terminated)
    /// completes with an error instead.
    #[inline]
    fn hand_send(&self, conn: &mut Connection, posted: (SendWr, SendChecked, Option<InlineData>)) {
        let (wr, checked, inline) = posted;
        let (wr_id, opcode) = (wr.wr_id, send_wc_opcode(&wr.opcode));
        if let Err(e) = conn.post_send_checked(wr, checked, inline) {
            log::warn!("verbs: send WR {wr_id} refused when handed to the connection: {e}");
            self.send_cq.push(error_wc(wr_id, opcode, &e));
        }
    }

    /// [`QpShared::hand_send`] for a checked receive WR.
    #[inline]
    fn hand_recv(&self, conn: &mut Connection, (wr, cap): (RecvWr, u64)) {
        let wr_id = wr.wr_id;
        if let Err(e) = conn.post_recv_checked(wr, cap) {
            log::warn!("verbs: receive WR {wr_id} refused when handed to the connection: {e}");
            self.recv_cq
                .push(error_wc(wr_id, WcOpcode::Recv, &PostError::BadState));
        }
    }

    /// A WR went straight into the connection whose lock `slot` is: note it for the worker's
    /// post phase, let go of the lock, and raise the post flag.
    fn posted_directly(&self, slot: SlotGuard<'_>) {
        self.posted_direct.store(true, Ordering::Release);
        drop(slot);
        self.kick();
    }

    /// The connection is gone: posts fail from now on, and every WR still in the post rings
    /// completes with `WrFlushErr`.
    pub(crate) fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.flush_rings();
    }

    /// Complete every WR still in the post rings with `WrFlushErr`.
    pub(crate) fn flush_rings(&self) {
        while let Some((wr, _, _)) = self.sq_ring.pop() {
            let op = send_wc_opcode(&wr.opcode);
            self.send_cq
                .push(error_wc(wr.wr_id, op, &PostError::BadState));
        }
        while let Some((wr, _)) = self.rq_ring.pop() {
            self.recv_cq
                .push(error_wc(wr.wr_id, WcOpcode::Recv, &PostError::BadState));
        }
    }

    /// Move completions from the engine to the CQs; true if there were any.
    pub(crate) fn reap(&self, conn: &mut Connection) -> bool {
        let mut any = false;
        while let Some(wc) = conn.poll_completion() {
            any = true;
            if wc.opcode == WcOpcode::Recv {
                self.recv_cq.push(wc)
            } else {
                self.send_cq.push(wc)
            }
        }
        any
    }
}

/// A queue pair (`ibv_qp`). Create it, post receives, then hand it to [`crate::cm::connect`]
/// or [`crate::cm::ConnRequest::accept`]. Clones share the QP.
///
/// Dropping the last handle of a connected QP closes its connection the way
/// [`Qp::disconnect`] does and waits (at most [`CLOSE_FLUSH_TIMEOUT`]) until the driver has
/// written out what the connection still had to send — above all a TERMINATE, which RFC 5040
/// §7.1 says the Local Peer MUST send — and closed the stream; so a program that exits right
/// after an error still gets its TERMINATE on the wire ahead of the FIN.
#[derive(Clone)]
pub struct Qp {
    pub(crate) shared: Arc<QpShared>,
    /// Dropped with the last application handle (see [`QpHandle`]).
    _handle: Arc<QpHandle>,
}

/// How long dropping the last handle of a connected QP waits for its driver to flush what is
/// queued (TERMINATE, FPDUs) and close the stream.
pub const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Held only by application [`Qp`] handles (drivers and workers hold the [`QpShared`]): its
/// drop is the last application handle going away.
struct QpHandle {
    shared: Arc<QpShared>,
}

impl Drop for QpHandle {
    fn drop(&mut self) {
        let sh = &self.shared;
        if sh.closed.load(Ordering::Acquire) || !matches!(*sh.lock(), QpSlot::Live(_)) {
            return;
        }
        sh.disconnect.store(true, Ordering::Release);
        if sh.on_driver_thread() {
            // Dropped by a hook on the QP's own driver (a finished hook owned the last handle):
            // the driver closes the connection after this pass; waiting here would stop it.
            return;
        }
        sh.kick();
        if !wait_closed(sh, CLOSE_FLUSH_TIMEOUT) {
            log::warn!(
                "verbs: QP dropped; its connection did not close within {CLOSE_FLUSH_TIMEOUT:?}"
            );
        }
    }
}

/// Wait until `sh`'s stream has closed or `timeout` passed; true if closed. With a driven send
/// CQ the wait runs the driver.
fn wait_closed(sh: &QpShared, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if sh.closed.load(Ordering::Acquire) {
            return true;
        }
        if !sh.send_cq.drive() {
            std::thread::sleep(Duration::from_micros(
                if sh.send_cq.driver.get().is_some() {
                    0
                } else {
                    1000
                },
            ));
        }
    }
    sh.closed.load(Ordering::Acquire)
}

impl Qp {
    /// Create a QP in `pd` with the given CQs and capacities (`ibv_create_qp`).
    pub fn new(pd: &Pd, attr: &QpInitAttr) -> Qp {
        let shared = Arc::new(QpShared {
            pd: pd.clone(),
            cap: attr.cap,
            slot: SlotLock::new(QpSlot::Init),
            sq_ring: PostRing::new(attr.cap.max_send_wr),
            rq_ring: PostRing::new(attr.cap.max_recv_wr),
            send_cq: attr.send_cq.clone(),
            recv_cq: attr.recv_cq.clone(),
            post_driver: std::sync::OnceLock::new(),
            connecting: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            posted_direct: AtomicBool::new(false),
            disconnect: AtomicBool::new(false),
            terminate: Mutex::new(None),
            wake: OnceLock::new(),
            post_seq: AtomicU64::new(0),
            sleepy_driver: AtomicBool::new(false),
            stream_idle: AtomicBool::new(true),
            sleeping: AtomicBool::new(false),
            post_flag: OnceLock::new(),
            ord: AtomicU32::new(u32::MAX),
            hook: Mutex::new(HookSlot::default()),
            hook_waiting: AtomicBool::new(false),
        });
        Qp {
            _handle: Arc::new(QpHandle {
                shared: shared.clone(),
            }),
            shared,
        }
    }

    /// The QP's protection domain.
    pub fn pd(&self) -> &Pd {
        &self.shared.pd
    }

    /// Post a send-queue work request (`ibv_post_send`): Send, Send-SE, Send-Inv, RDMA Write,
    /// RDMA Read (RFC 5040 §5.3, §5.4). The local SGEs are checked now; the WR then goes into
    /// the QP's send ring, which the driver (kernel-TCP thread or DPDK worker) drains into the
    /// connection without the application ever waiting for its lock. A QP with a doorbell
    /// ([`Qp::drive_with`]) hands it straight to the connection instead when the ring is empty
    /// and the connection's lock free (never waiting for it). Errors mean nothing was
    /// queued: `QueueFull` when `max_send_wr` WRs wait in the ring. Requests posted before the
    /// connection is established go out once it is. An RDMA Read on a connection that
    /// negotiated ORD 0 is refused with `ZeroOrd` (posted before establishment, it completes
    /// with `LocQpOpErr`); Reads beyond a non-zero ORD wait on the send queue.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        if self.is_closed() {
            return Err(PostError::BadState);
        }
        if matches!(wr.opcode, Opcode::Read { .. }) && self.shared.ord.load(Ordering::Acquire) == 0
        {
            return Err(PostError::ZeroOrd);
        }
        let checked = validate_send(&self.shared.pd.mem, self.shared.pd.id, &wr)?;
        self.post_sq((wr, checked, None))
    }

    /// Run to completion on the send side: after queuing a send WR on a stream with nothing
    /// in flight (everything sent acknowledged), `post_send` and `post_send_inline` run
    /// `driver` (a driven DPDK worker's transmit phases, `cm::Net::qp_driver`), so the WR is
    /// framed and its first frames handed to the PMD during the call, as an RNIC starts on a
    /// WR when its doorbell is rung, instead of on the worker's next pass. With data in
    /// flight the WR waits for that pass, batched with the others. With a driver set, a send
    /// or receive WR posted while its post ring is empty goes straight into the connection
    /// (no ring between the poster and its driver, which runs on the same thread), when the
    /// connection takes another WR and its lock is free; otherwise into the ring. Set once;
    /// later calls are ignored.
    pub fn drive_with(&self, driver: CqDriver) {
        let _ = self.shared.post_driver.set(driver);
    }

    /// Queue a checked send WR (with a doorbell, straight into the connection when nothing
    /// waits in the ring: [`QpShared::direct_slot`]), then ring the doorbell
    /// ([`Qp::drive_with`]) if the stream is idle.
    fn post_sq(&self, posted: (SendWr, SendChecked, Option<InlineData>)) -> Result<(), PostError> {
        if self.shared.post_driver.get().is_some() {
            // Driven: straight into the connection when nothing waits in the ring.
            if let Some(mut slot) = self.shared.direct_slot(true) {
                if let QpSlot::Live(conn) = &mut *slot {
                    self.shared.hand_send(conn, posted);
                    self.shared.posted_directly(slot);
                    self.ring_doorbell();
                    return Ok(());
                }
            }
        }
        self.push_posted(&self.shared.sq_ring, posted)?;
        self.ring_doorbell();
        Ok(())
    }

    /// Run the doorbell ([`Qp::drive_with`]) if there is one and the stream is idle.
    fn ring_doorbell(&self) {
        if let Some(d) = self.shared.post_driver.get() {
            if self.shared.stream_idle.load(Ordering::Relaxed) {
                d();
            }
        }
    }

    /// Post a Send (any Send opcode) or an RDMA Write whose payload is `data` itself
    /// (`ibv_post_send` with `IBV_SEND_INLINE`): at most [`MAX_INLINE_DATA`] octets, copied
    /// into the work request now, so the caller may reuse `data` at once and no registered
    /// memory is written, looked up or held for the message (small messages: an RPC call or
    /// reply). Errors as [`Qp::post_send`]; an RDMA Read, or more than `MAX_INLINE_DATA`
    /// octets, is `Invalid`.
    pub fn post_send_inline(
        &self,
        wr_id: u64,
        opcode: Opcode,
        data: &[u8],
        signaled: bool,
    ) -> Result<(), PostError> {
        if self.is_closed() {
            return Err(PostError::BadState);
        }
        let (wr, checked, data) = inline_wr(wr_id, opcode, data, signaled)?;
        self.post_sq((wr, checked, Some(data)))
    }

    /// Put a checked WR into its post ring (`QueueFull` when the ring is) and wake the driver.
    fn push_posted<T>(&self, ring: &PostRing<T>, posted: T) -> Result<(), PostError> {
        ring.push(posted).map_err(|_| PostError::QueueFull)?;
        self.shared.kick();
        if self.is_closed() {
            // The driver finished while we pushed: nobody else will drain the ring.
            self.shared.flush_rings();
        }
        Ok(())
    }

    /// Post a receive buffer for one incoming untagged message (`ibv_post_recv`, RFC 5041
    /// §5.3), through the receive ring as `post_send` does.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        if self.is_closed() {
            return Err(PostError::BadState);
        }
        let cap = validate_recv(&self.shared.pd.mem, self.shared.pd.id, &wr)?;
        if self.shared.post_driver.get().is_some() {
            // Driven: straight into the connection when nothing waits in the ring
            // ([`QpShared::direct_slot`]).
            if let Some(mut slot) = self.shared.direct_slot(false) {
                if let QpSlot::Live(conn) = &mut *slot {
                    self.shared.hand_recv(conn, (wr, cap));
                    self.shared.posted_directly(slot);
                    return Ok(());
                }
            }
        }
        self.push_posted(&self.shared.rq_ring, (wr, cap))
    }

    /// Send WRs [`Qp::post_send`] takes now before it answers `QueueFull` (free slots of the
    /// post ring, which the connection's driver empties into the connection between passes).
    /// For a poster that cannot wait (a driver hook, a reactor): take on new work only when
    /// the WRs it will post fit.
    pub fn send_queue_room(&self) -> usize {
        let q = &self.shared.sq_ring;
        q.capacity() - q.len()
    }

    /// True once the underlying stream has closed (TERMINATE, disconnect, peer gone).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The TERMINATE that ended the connection, if one did (RFC 5040 §4.8). This is how a
    /// remote access error reaches the application: iWARP has no acknowledgements, so an RDMA
    /// Write the peer refuses has already completed locally when the peer's TERMINATE arrives
    /// (RFC 5041 §5.4); the QP then leaves RTS and later work is flushed, as with an
    /// `IBV_EVENT_QP_FATAL` async event on an RNIC.
    pub fn terminate_cause(&self) -> Option<QpTerminate> {
        *self
            .shared
            .terminate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Close the connection (`rdma_disconnect`): outstanding work is flushed, the stream closed.
    pub fn disconnect(&self) {
        self.shared.disconnect.store(true, Ordering::Release);
        self.shared.kick();
    }

    /// Wait until the stream has closed or `timeout` passed; true if closed. With a driven
    /// send CQ ([`Cq::drive_with`]) the wait runs the driver.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        wait_closed(&self.shared, timeout)
    }

    /// Run `hook` on the thread that drives this QP's connection, after each pass of the
    /// protocol engine, until it reports [`HookPoll::Finished`] or the connection closes
    /// ([`DriverHook::closed`]); it is dropped on that thread, so a hook may own a handle of
    /// this very QP (see [`HookPoll::Finished`]).
    ///
    /// Hooks run one at a time, in the order attached: one attached while another runs waits
    /// until that one has finished (or is closed with the connection, unrun), so an
    /// application may attach the next as soon as it has the previous one's result.
    ///
    /// Gives `hook` back when no driver can run it: the QP has not been handed to the
    /// connection manager yet (connect, accept), its connection has closed, another hook is
    /// already waiting for the driver to take it, or its backend has no driver thread of its
    /// own (the DPDK dataplane, whose workers run many QPs: there the application drives the
    /// worker instead, see `Net::poll_worker`).
    pub fn attach_driver_hook<H: DriverHook + 'static>(&self, hook: H) -> Result<(), H> {
        {
            let mut slot = self.shared.hook_slot();
            // Under the slot's lock: a driver that has closed cleared `accepts` (after
            // `set_closed`) before it took what was left here, so a hook is either refused now
            // or taken and closed by it.
            if !slot.accepts || slot.hook.is_some() || self.is_closed() {
                return Err(hook);
            }
            slot.hook = Some(Box::new(hook));
            self.shared.hook_waiting.store(true, Ordering::Release);
        }
        self.shared.kick();
        Ok(())
    }

    /// True if [`Qp::attach_driver_hook`] would take a hook now: the QP's connection is moved
    /// by a driver thread of its own that runs hooks, has not closed, and has no hook waiting
    /// to be taken.
    pub fn accepts_driver_hook(&self) -> bool {
        let slot = self.shared.hook_slot();
        slot.accepts && slot.hook.is_none() && !self.is_closed()
    }

    /// A handle that wakes this QP's driver from any thread (see [`DriverHook`]).
    pub fn waker(&self) -> QpWaker {
        QpWaker(Arc::downgrade(&self.shared))
    }

    /// Hand the QP to the connection manager exactly once.
    pub(crate) fn claim(&self) -> bool {
        !self.shared.connecting.swap(true, Ordering::AcqRel)
    }
}

/// A TERMINATE that ended a QP's connection (see [`Qp::terminate_cause`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTerminate {
    /// We sent a TERMINATE with this cause (we detected the error).
    Sent(TermCause),
    /// The peer sent a TERMINATE with this cause.
    Received(TermCause),
}

/// One SGE covering `len` bytes at `offset` into `mr`.
pub fn sge(mr: &Mr, offset: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + offset as u64,
        length: len as u32,
        lkey: mr.stag(),
    }
}

fn send_wc_opcode(op: &Opcode) -> WcOpcode {
    match op {
        Opcode::Write { .. } => WcOpcode::Write,
        Opcode::Read { .. } => WcOpcode::Read,
        _ => WcOpcode::Send,
    }
}

/// The completion of a WR the connection never took: flushed when it was closed, a protection
/// error when its local SGEs stopped being valid.
fn error_wc(wr_id: u64, opcode: WcOpcode, e: &PostError) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: match e {
            PostError::Invalid(_) => WcStatus::LocProtErr,
            PostError::ZeroOrd => WcStatus::LocQpOpErr,
            _ => WcStatus::WrFlushErr,
        },
        opcode,
        byte_len: 0,
        invalidated_rkey: None,
        solicited: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated_rkey: None,
            solicited: false,
        }
    }

    /// `req_notify`: the next completion puts the queue's token on the ready queue, once; a
    /// completion without a request, or a second one after the first answered it, does not.
    #[test]
    fn a_requested_notification_names_the_queue_once() {
        let ready = Arc::new(SegQueue::new());
        let cq = Cq::new(16);
        cq.push(wc(1));
        cq.set_notify(ready.clone(), 7);
        cq.push(wc(2));
        assert!(ready.is_empty(), "not asked");
        cq.req_notify();
        assert!(
            !cq.is_empty(),
            "completions queued before the request are still there"
        );
        cq.push(wc(3));
        cq.push(wc(4));
        assert_eq!(ready.pop(), Some(7));
        assert_eq!(ready.pop(), None, "notified once per request");
        for id in 1..=4 {
            assert_eq!(cq.try_poll_one().map(|w| w.wr_id), Some(id));
        }
        assert!(cq.is_empty());
        cq.req_notify();
        cq.push(wc(5));
        assert_eq!(ready.pop(), Some(7));
    }

    /// A CQ holds up to its depth: past it a completion is an overrun and is dropped (as
    /// `ibv_create_cq`'s cqe bounds a hardware CQ), and taking one makes room again.
    #[test]
    fn a_full_cq_drops_what_passes_its_depth() {
        let cq = Cq::new(3);
        for id in 1..=5 {
            cq.push(wc(id));
        }
        assert_eq!(cq.try_poll_one().map(|w| w.wr_id), Some(1));
        cq.push(wc(6));
        let ids: Vec<u64> = std::iter::from_fn(|| cq.try_poll_one().map(|w| w.wr_id)).collect();
        assert_eq!(ids, vec![2, 3, 6], "4 and 5 passed the depth of 3");
    }
}
