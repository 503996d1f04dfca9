//! A poll-mode worker: one per configured core, pinned, owning one port queue, a smoltcp
//! interface, its TCP sockets and the iWARP connections on them.
//!
//! [`Worker::poll_once`] is one run-to-completion pass made of named phases:
//! 1. `commands`: connect/listen/accept/reject requests from applications;
//! 2. `rx`: one rx burst, then smoltcp ingress (every received frame into its socket);
//! 3. `accept`: the listeners (`worker/listen.rs`): listening sockets that left LISTEN become
//!    probes reading their MPA Request (`cm::acceptor`), complete ones go to the application;
//! 4. `post`: work requests from the QPs' post rings into their engines;
//! 5. `deliver`: received stream bytes into the sans-IO [`crate::conn::Connection`]s
//!    (MPA deframing, CRC check, DDP placement, RDMAP);
//! 6. `transmit`: FPDUs from the engines into the sockets (one segment of whole FPDUs at a
//!    time, RFC 5044 App. A), smoltcp egress, tx burst;
//! 7. `completions`: completions to the CQs, connection events, closes.
//!
//! Driven, a pass whose segments completed work runs `completions` before `transmit` and
//! ends there; the application's next call runs the owed transmit phase (see `poll_once`).
//!
//! The worker runs either on its own pinned thread ([`Worker::run`], the background mode) or
//! is driven by an application thread that calls `poll_once` between its own work (the driven
//! mode, [`super::Driver`]): one thread per core, no hand-off between an application thread
//! and a worker thread. Applications reach a worker through a bounded crossbeam channel
//! (connect/listen/accept/reject); posting work and reaping completions go through the QP's
//! bounded lock-free post rings and the CQs' bounded queues, as with the kernel-TCP driver.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use smoltcp::iface::{
    Config, Interface, PollIngressSingleResult, PollResult, SocketHandle, SocketSet,
};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, Ipv4Address};

use super::contention::{Contention, RunDelay};
use super::device::{DeviceStats, DpdkDevice, HeldFrame, Ingress};
use super::rehearsal::Rehearsal;
use listen::Listeners;

mod conn;
mod listen;
use crate::cm::ListenConfig;
use crate::config::{CongestionControl, TcpConfig, WorkerConfig};
use crate::conn::{ConnEvent, PlacedAhead};
use crate::mpa::PeerRequest;
use crate::verbs::{PostFlag, PostFlags, QpShared};
use conn::{close_asked, Conn, Drained, Reaped};

/// How long a reported request may wait for accept/reject. (How long an incoming connection
/// may take to deliver its MPA Request is its listener's `mpa_timeout`, `[tcp] mpa_timeout_ms`.)
const AWAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping worker (its dataplane dropped) keeps polling while a connection that
/// its application closed is still closing: its FIN not acknowledged yet, or the peer's FIN
/// not received (RFC 9293 section 3.6: FIN-WAIT-1, FIN-WAIT-2, CLOSING, LAST-ACK). A process
/// that closes its QPs and exits at once then still completes the close with its peers, as the
/// kernel does for a process that exits; without it the peer's FIN found nobody, and the
/// peer's socket retransmitted it from LAST-ACK for minutes.
const STOP_DRAIN: Duration = Duration::from_secs(1);
/// A driven worker idle for longer than `worker.driven_spin_us` yields its core on every
/// this many idle passes (a multiple of 16: those passes read the clock).
const IDLE_YIELD_EVERY: u32 = 16;
/// `worker.driven_spin_us` by default for a driven worker alone on its CPU (as far as this
/// process knows): longer than any wait of a ping-pong or a stream between pinned processes.
pub const DRIVEN_SPIN_ALONE_US: u64 = 50;
/// `worker.driven_spin_us` by default for a driven worker that shares its CPU with another
/// worker of this process (`Dataplane::start_with`).
pub const DRIVEN_SPIN_SHARED_US: u64 = 2;
/// How long after its connection last sent data a worker with `worker.warm_us` keeps the
/// path warm (`Worker::warm`): a request a second after the last one finds it cold again.
pub const WARM_FOR: Duration = Duration::from_secs(1);
/// A sweep is followed by at least this many times its own length without one (`poll_once`).
const SWEEP_SHARE: u32 = 10;
/// One sweep in this many visits every connection; the others only those with a timer due,
/// the active ones and those closing (`Worker::timer_sweep`).
const FULL_SWEEP_EVERY: u32 = 64;
/// Egress passes per loop (each sends at most one segment per socket).
const EGRESS_PASSES: usize = 256;

/// A connection request reported to a listener.
pub(crate) struct Incoming {
    pub id: u64,
    pub peer: PeerRequest,
    pub raw: Vec<u8>,
    pub remote: SocketAddr,
    pub worker: usize,
}

/// A worker's command channel, sending side: the command, then a flag the worker reads on
/// every pass instead of asking the channel (`Receiver::is_empty` is about 33 instructions,
/// 66 of a 64 B Send's; the flag is one load of a line that stays in the worker's cache until
/// a command comes).
#[derive(Clone)]
pub(crate) struct CmdSender {
    tx: Sender<Cmd>,
    pending: Arc<PendingFlag>,
}

/// The flag of [`CmdSender`], alone on its cache line: the worker loads it on every pass, and
/// a neighbour written by another thread would make each load a miss.
#[repr(align(64))]
pub(crate) struct PendingFlag(AtomicBool);

impl CmdSender {
    /// Queue `cmd` (blocking while the channel is full, as `Sender::send`), then raise the
    /// flag: the worker takes the command on its next pass.
    pub fn send(&self, cmd: Cmd) -> Result<(), crossbeam_channel::SendError<Cmd>> {
        let r = self.tx.send(cmd);
        // Release: the command is in the channel before the worker can see the flag.
        self.pending.0.store(true, Ordering::Release);
        r
    }
}

/// A worker's command channel, receiving side ([`CmdSender`]).
pub(crate) struct CmdReceiver {
    rx: Receiver<Cmd>,
    pending: Arc<PendingFlag>,
}

/// A command channel of `cap` commands.
pub(crate) fn command_channel(cap: usize) -> (CmdSender, CmdReceiver) {
    let (tx, rx) = crossbeam_channel::bounded(cap);
    let pending = Arc::new(PendingFlag(AtomicBool::new(false)));
    (
        CmdSender {
            tx,
            pending: pending.clone(),
        },
        CmdReceiver { rx, pending },
    )
}

/// Requests from applications to a worker.
pub(crate) enum Cmd {
    Connect {
        remote: SocketAddrV4,
        sh: Arc<QpShared>,
        events: Sender<ConnEvent>,
    },
    Listen {
        port: u16,
        requests: Sender<Incoming>,
        /// MPA startup deadline and cap for this listener (None: the worker's `[tcp]` ones).
        startup: Option<(Duration, usize)>,
        reply: Sender<Result<(), String>>,
        /// RFC 5044 App. C: also take MPA Rev 0 (RDMAC) Requests.
        rev0_permissive: bool,
    },
    Unlisten {
        port: u16,
    },
    Accept {
        id: u64,
        sh: Arc<QpShared>,
        events: Sender<ConnEvent>,
    },
    /// Send `bytes` (an MPA Reply with R=1) on the awaiting connection `id`, then close it.
    Reject {
        id: u64,
        bytes: Vec<u8>,
    },
    Stats {
        reply: Sender<WorkerStats>,
    },
    /// Turn fault injection on or off (`Endpoint::set_faults`).
    SetFaults {
        faults: Option<crate::config::FaultConfig>,
        reply: Sender<Result<(), String>>,
    },
    Stop,
}

/// Counters of one worker.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerStats {
    /// Counters of the worker's port queue.
    pub device: DeviceStats,
    /// Iterations of the poll loop so far.
    pub loops: u64,
    /// Nanoseconds the worker spent in passes that moved something (a frame, a post, a
    /// completion, a segment), and in the rest (`idle_ns`): read from the clock reads the
    /// loop makes anyway (after every pass that did work, every 16th idle pass), so it costs
    /// nothing extra. An idle stretch shorter than 16 passes counts as busy, and in the driven
    /// mode the caller's time between passes counts too: the share overstates the load when
    /// the worker waits in short gaps (a ping-pong), and is exact enough under a stream:
    /// `busy_ns / (busy_ns + idle_ns)` near 1 says this worker is the bottleneck.
    pub busy_ns: u64,
    /// See `busy_ns`.
    pub idle_ns: u64,
    /// Connections the worker holds (connecting, established or closing) when asked.
    pub connections: usize,
    /// Connection requests (SYNs) dropped for capacity: the worker held `tcp.max_connections`,
    /// or the listener had `max_startups` MPA startups in progress (the client retransmits
    /// its SYN; `Worker::relisten`).
    pub refused: u64,
    /// Complete MPA Requests closed because the listener's hand-off to the application was
    /// full (`max_startups` per worker waiting for `get_request`; each logged).
    pub requests_refused: u64,
    /// The CPU the worker is placed on (its `cores` entry, or one of the process's CPUs).
    pub cpu: Option<usize>,
    /// The CPU the thread polling the worker ran on when the counters were taken.
    pub ran_on: usize,
    /// Whether that thread may run only on `cpu`.
    pub pinned: bool,
    /// The DPDK lcore id of that thread (None: unregistered, its mbufs bypass the mempool
    /// cache).
    pub lcore: Option<u32>,
    /// Payload copies inside dpwarp (see [`CopyStats`]).
    pub copies: CopyStats,
    /// Frames sent by reference (tx_zero_copy) not yet freed by the PMD or the peer: each
    /// pins the transmit ring octets it points at. 0 once the traffic is over (no mbuf kept).
    pub tx_refs: usize,
    /// Removed sockets kept because frames still point into their transmit rings.
    pub tx_rings_kept: usize,
    /// TCP segments this worker's sockets retransmitted on their own (fast retransmit: three
    /// duplicate ACKs, a partial ACK in recovery, or the peer's SACK blocks showing a hole,
    /// RFC 5681 section 3.2, RFC 6582, RFC 6675) and retransmission timeouts (RFC 6298:
    /// each resends from the first unacknowledged octet), over live and removed sockets.
    /// Both 0 on a link that loses nothing.
    pub tcp_fast_retransmits: u64,
    /// See `tcp_fast_retransmits`.
    pub tcp_timeout_retransmits: u64,
    /// Tail loss probes (RFC 8985 section 7: the last segment of a burst sent again, or one
    /// new segment, when no ACK came for 2 x SRTT), over live and removed sockets.
    pub tcp_loss_probes: u64,
    /// Zero-window probes (RFC 9293 section 3.8.6.1: the peer's window shut with octets
    /// waiting; vendored smoltcp `Socket::window_probes`), over live and removed sockets.
    pub tcp_window_probes: u64,
    /// Connections given up on at `[tcp] user_timeout_ms` (octets unacknowledged that long:
    /// the peer vanished or stopped taking them), each with a RST and a warning.
    pub tcp_user_timeouts: u64,
    /// Idle connections given up on for `[tcp] keepalive_probes` unanswered keep-alives
    /// (`[tcp] keepalive_ms`: the peer vanished while nothing waited on it), each with a RST
    /// and a warning.
    pub tcp_keepalive_timeouts: u64,
    /// Received frames that took smoltcp's header prediction (vendored smoltcp
    /// `Interface::rx_predicted`): headers equal to the last frame's of the same connection
    /// outside the fields that move, so not parsed again nor their socket looked up
    /// (docs/datapath.md "Header prediction"). 0 where checksums are verified in software.
    pub rx_predicted: u64,
    /// Connections this worker's engines terminated for an FPDU CRC error (RFC 5044 §8: a
    /// TERMINATE, then the stream closes; nothing of the FPDU is placed).
    pub mpa_crc_errors: u64,
    /// Times the transmit phase locked a connection's QP to look for work (timers, framing
    /// in place or staged). A connection is looked at after something reached its engine
    /// (posts, received bytes) or when its timer is due, not on every pass: quiet
    /// connections cost a pass nothing here.
    pub engine_checks: u64,
    /// Passes that visited every connection (a full sweep, one in `FULL_SWEEP_EVERY` sweeps,
    /// which come every `WorkerConfig::sweep_us` at most) rather than only those with
    /// something new.
    pub sweeps: u64,
    /// The other sweeps: those that visited only the connections with a socket timer due,
    /// closing or active (`Worker::timer_sweep`).
    pub timer_sweeps: u64,
    /// Connections the timer sweeps visited, summed.
    pub timer_sweep_visits: u64,
    /// Entries in the worker's heap of socket deadlines when asked, stale ones included: at
    /// most about twice the connections (a timer sweep rebuilds it past that).
    pub timers_queued: usize,
    /// Times the post phase read a QP's post rings. Outside the sweep it reads only those of
    /// QPs posted to since (their post flags), so quiet connections cost it nothing.
    pub post_ring_reads: u64,
    /// Times the post phase found WRs an application had posted straight into its connection
    /// (driven mode: `Qp::post_send` and `post_recv` with nothing waiting in the post rings)
    /// instead of through the post rings.
    pub posts_direct: u64,
    /// Send-side passes run on their own (`poll_transmit`, driven mode): a QP's doorbell
    /// after a post, or an RPC server's reactor after its connections posted.
    pub send_passes: u64,
    /// Post flags the post phase read outside the sweep, summed over passes: only those of
    /// the groups of slots posted to since (`verbs::PostFlags`), at most 64 per group, not one per
    /// socket slot.
    pub post_flag_reads: u64,
    /// Connections the transmit phase visited, summed over passes. Outside the sweep (and
    /// passes that ran a command or an MPA startup step) it visits only those not quiet yet
    /// and those posted to or touched since.
    pub transmit_visits: u64,
    /// Connections the deliver phase visited, summed over passes. Outside the sweep it
    /// visits only those whose sockets took segments this pass (and new ones).
    pub deliver_visits: u64,
    /// Connections the completions phase visited, summed over passes. Outside the sweep it
    /// visits only the active ones (as the transmit phase leaves the list): a quiet
    /// connection has no completion, and its application's disconnect raises its post flag,
    /// which lists it.
    pub completion_visits: u64,
    /// Passes of a driven worker that handed completions to the application before their
    /// transmit phase, which the application's next call then ran (`Worker::poll_once`).
    pub transmit_deferred: u64,
    /// Idle passes of a driven worker that yielded the core (`sched_yield`): those past
    /// `worker.driven_spin_us` without work, one in 16 (`Worker::poll_once`).
    pub idle_yields: u64,
    /// The idle time after which a driven worker's passes yield now (`worker.driven_spin_us`,
    /// or its default for this worker's placement and the contention of its CPU), in
    /// microseconds.
    pub driven_spin_us: u64,
    /// Windows in which a driven worker with `worker.detect_shared_cpu` measured how long its
    /// thread waited for its CPU (`contention::WINDOW`, 100 ms of idle passes).
    pub contention_windows: u64,
    /// Of those, the windows in which it waited for its CPU more than a tenth of the window.
    pub contended_windows: u64,
    /// Of those, the windows in which it waited mostly inside its own yields shorter than a
    /// millisecond: the thread it yielded to gave the CPU back. Two in a row: the CPU is
    /// shared with such a thread (a peer process), and the worker yields after
    /// `DRIVEN_SPIN_SHARED_US` until a window that is not one of these
    /// (`dataplane::contention`).
    pub turn_windows: u64,
    /// Times the worker found its CPU shared (and shortened its spin) after finding it its own.
    pub cpu_found_shared: u64,
    /// Keep-alives sent to keep the packet paths warm while the application was quiet
    /// (`worker.warm_us`, `Worker::warm`).
    pub warm_frames: u64,
    /// 64 B Sends run through the worker's private pair of QPs meanwhile, to keep the
    /// engine's code warm (`worker.warm_us`, `dataplane::rehearsal`).
    pub warm_rehearsals: u64,
    /// Tagged FPDUs placed out of order, from segments that arrived behind a hole in the TCP
    /// stream (`[tcp] ooo_placement`, RFC 5044 App. A.3).
    pub ooo_placed_fpdus: u64,
    /// Their octets: placed once, from the frame, and never copied into the receive buffer
    /// (the reassembly copy they were spared).
    pub ooo_placed_octets: u64,
}

/// A closing socket's close is over: closed, or in TIME-WAIT with the ACK of the peer's FIN
/// sent (`ack_pending`: the peer waits for that ACK in LAST-ACK).
fn close_finished(s: &tcp::Socket) -> bool {
    match s.state() {
        tcp::State::Closed => true,
        tcp::State::TimeWait => !s.ack_pending(),
        _ => false,
    }
}

/// A socket's (fast, timeout) TCP retransmissions, tail loss probes and zero-window probes
/// so far.
fn retransmissions(sock: &smoltcp::socket::Socket<'static>) -> (u64, u64, u64, u64) {
    #[allow(irrefutable_let_patterns)]
    if let smoltcp::socket::Socket::Tcp(t) = sock {
        let (fast, timeout) = t.retransmissions();
        (fast, timeout, t.loss_probes(), t.window_probes())
    } else {
        (0, 0, 0, 0)
    }
}

/// Remove a socket for good: count its retransmissions into `done`, and let the device keep
/// its transmit ring while frames still point into it.
fn retire_socket(
    dev: &mut DpdkDevice,
    done: &mut (u64, u64, u64, u64),
    sock: smoltcp::socket::Socket<'static>,
) {
    let (fast, timeout, probes, window_probes) = retransmissions(&sock);
    done.0 += fast;
    done.1 += timeout;
    done.2 += probes;
    done.3 += window_probes;
    dev.zc_retire(sock);
}

/// Octets copied inside dpwarp, per direction, to compare with the payload octets moved
/// (copies per byte = copied / payload). PMD copies (memif shared memory) are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// TCP payload octets sent (each FPDU octet once, retransmissions aside).
    pub tx_payload: u64,
    /// Octets copied on transmit: engine -> staging buffer -> socket transmit ring, and the
    /// socket transmit ring -> mbuf copy smoltcp makes when it builds a segment (not for
    /// payload sent by reference, `tx_zero_copy`).
    pub tx_copied: u64,
    /// TCP payload octets received in order.
    pub rx_payload: u64,
    /// Octets copied on receive: chained frames linearized, mbuf -> socket receive ring
    /// (smoltcp) and everything the engine copies (placement into registered memory,
    /// reassembly of split FPDUs).
    pub rx_copied: u64,
}

impl CopyStats {
    /// The counts accumulated since `before` was taken.
    pub fn since(&self, before: &CopyStats) -> CopyStats {
        CopyStats {
            tx_payload: self.tx_payload.saturating_sub(before.tx_payload),
            tx_copied: self.tx_copied.saturating_sub(before.tx_copied),
            rx_payload: self.rx_payload.saturating_sub(before.rx_payload),
            rx_copied: self.rx_copied.saturating_sub(before.rx_copied),
        }
    }

    /// Copies per payload octet sent (None before any was sent).
    pub fn tx_per_byte(&self) -> Option<f64> {
        (self.tx_payload > 0).then(|| self.tx_copied as f64 / self.tx_payload as f64)
    }

    /// Copies per payload octet received (None before any was received).
    pub fn rx_per_byte(&self) -> Option<f64> {
        (self.rx_payload > 0).then(|| self.rx_copied as f64 / self.rx_payload as f64)
    }

    /// The sum over several workers.
    pub fn sum<'a>(it: impl IntoIterator<Item = &'a CopyStats>) -> CopyStats {
        it.into_iter().fold(CopyStats::default(), |a, b| CopyStats {
            tx_payload: a.tx_payload + b.tx_payload,
            tx_copied: a.tx_copied + b.tx_copied,
            rx_payload: a.rx_payload + b.rx_payload,
            rx_copied: a.rx_copied + b.rx_copied,
        })
    }
}

/// The peer of a socket, for log lines.
fn remote_of(s: &tcp::Socket<'static>) -> SocketAddr {
    s.remote_endpoint()
        .map(|e| match e.addr {
            IpAddress::Ipv4(a) => SocketAddr::from((a.octets(), e.port)),
        })
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// What a worker is made of (everything but its run-time state).
pub(crate) struct WorkerParts {
    pub index: usize,
    pub dev: DpdkDevice,
    pub mac: [u8; 6],
    pub ip: (Ipv4Addr, u8),
    pub gateway: Option<Ipv4Addr>,
    pub mtu: usize,
    pub cmds: CmdReceiver,
    pub wcfg: WorkerConfig,
    pub tcp: TcpConfig,
}

/// Which connections and sockets a pass visits (the worker as a scheduler: a phase visits the
/// connections that have work, not every one, except on a sweep): lists of indices in
/// `Worker::conns`, each kept free of duplicates by a flag on the connection
/// ([`list_once`]).
#[derive(Default)]
struct Schedule {
    /// Socket slot (`SocketHandle::index`) -> index in `conns` (`u32::MAX`: none), rebuilt
    /// when `conns` changed (`conn_index_stale`).
    conn_index: Vec<u32>,
    conn_index_stale: bool,
    /// Scratch for smoltcp's touched sockets.
    touched: Vec<SocketHandle>,
    /// Indices in `conns` marked `touched` this pass (their flags are cleared at its end).
    touched_conns: Vec<usize>,
    /// Scratch for the sockets touched by a pass while `touched` still holds those of the
    /// pass whose transmit phase is owed.
    touched_more: Vec<SocketHandle>,
    /// This pass's egress visits every socket (a sweep, a command, an MPA startup step), not
    /// only those with something new (`egress_handles`).
    egress_all: bool,
    /// The sockets this pass's egress visits otherwise: those that took segments and those
    /// of the connections fed.
    egress_handles: Vec<SocketHandle>,
    /// Indices in `conns` the transmit phase visits on a pass that does not visit them all:
    /// those not yet quiet after the last transmit phase (`Conn::is_quiet`), and those posted
    /// to or touched since (`Conn::active` keeps it free of duplicates).
    active: Vec<usize>,
    /// Scratch for the indices a transmit phase visits.
    visit: Vec<usize>,
    /// Scratch for the indices a completions phase visits.
    reap_visit: Vec<usize>,
    /// `conns` changed since `active` was built (its indices may be wrong): the next transmit
    /// phase visits every connection.
    active_stale: bool,
    /// Quiet connections' next timers: (deadline in smoltcp's clock, µs; socket slot), the
    /// earliest first (`Conn::timer_due`, `Conn::timer_queued`).
    timers: BinaryHeap<Reverse<(i64, usize)>>,
    /// The connections this pass's timer sweep visits: the completions phase reaps them too.
    swept: Vec<usize>,
    /// Scratch for their sockets.
    swept_sockets: Vec<SocketHandle>,
}

/// Octets and retransmissions the phases count as they go, and those of connections and
/// sockets gone, for [`Worker::stats`].
#[derive(Default)]
struct Totals {
    /// Octets the engines wrote into the connections' staging buffers (`Conn::out`).
    tx_staged: u64,
    /// Octets copied from the staging buffers into the sockets' transmit rings.
    tx_fed: u64,
    /// Octets the engines of connections that ended copied on receive.
    rx_copied_done: u64,
    /// Retransmissions (fast, timeout) of the sockets removed so far.
    retransmits_done: (u64, u64, u64, u64),
    /// TCP payload octets placed straight from the frames the sockets lent them from, or
    /// handed over ahead of a hole and placed (smoltcp did not copy them into a receive
    /// buffer).
    rx_direct: u64,
}

/// `worker.warm_us` (default 0: off; docs/workers.md "Keeping the path warm"): what
/// [`Worker::warm`] knows of the data path it keeps warm.
struct WarmPath {
    /// `worker.warm_us`: the connection that last sent data (its index in `conns` and its
    /// socket) and when it did (`Worker::warm` keeps its path warm for `WARM_FOR` after).
    conn: Option<(usize, SocketHandle, Instant)>,
    /// The pass clock of the last pass that did application work: posts, payload received
    /// or delivered, completions, data fed, commands (with `warm_us` the driven spin counts
    /// from it, not from `last_work`, which keep-alives and their answers renew).
    last_app_work: Instant,
    /// When `warm` last ran the private QPs, and last sent a keep-alive.
    last_rehearsal: Instant,
    last_keep_alive: Instant,
    /// The private pair of QPs `warm` runs a Send through (made with the worker when
    /// `warm_us` is set; None without it, or after it failed to establish or to complete a
    /// Send).
    rehearsal: Option<Rehearsal>,
}

/// A worker: its port queue, smoltcp interface, sockets and connections.
pub(crate) struct Worker {
    index: usize,
    dev: DpdkDevice,
    /// The frame smoltcp's ingress consumed last, while `rx` places what it lent.
    held: HeldFrame,
    cmds: CmdReceiver,
    wcfg: WorkerConfig,
    tcp: TcpConfig,
    totals: Totals,
    warm: WarmPath,
    /// The pass's clock and what the worker keeps of earlier passes' times.
    clock: PassClock,
    /// How long a driven worker spins idle before its passes yield.
    spin: Spin,
    /// Whether and since when the worker is stopping.
    stop: StopState,
    iface: Interface,
    sockets: SocketSet<'static>,
    conns: Vec<Conn>,
    sched: Schedule,
    listeners: Listeners,
    closing_startups: Vec<SocketHandle>,
    next_port: u16,
    stats: WorkerStats,
    emss: usize,
    rbuf: Vec<u8>,
    /// The CPU this worker's thread is pinned to, if any.
    pub(crate) cpu: Option<usize>,
    /// One flag per socket slot (`SocketHandle::index`), raised by every post to the QP of
    /// the connection on that socket (`QpShared::post_flag`, `kick`): the post phase reads the
    /// post rings of those QPs only, not of every QP it holds; and one flag per group of
    /// slots, so that it reads only the flags of groups posted to ([`PostFlags`]).
    post_flags: Arc<PostFlags>,
    /// Connections whose QP has no flag here (its socket slot beyond `post_flags`, or the QP
    /// took a flag elsewhere earlier): their rings are read on every pass.
    unflagged: usize,
    /// The worker runs on its own thread ([`Worker::run`]), not driven by an application's.
    background: bool,
    /// The last pass handed completions to the driving application before its transmit
    /// phase ([`Worker::poll_once`]): the next pass, or the doorbell's `poll_transmit`, runs it.
    transmit_owed: bool,
}

/// A worker's post flags: one for every socket slot it is likely to use (its connections,
/// their MPA startups and lingering closes, listeners), at most 65536.
fn post_flag_slots(max_connections: usize) -> usize {
    max_connections
        .saturating_add(64)
        .saturating_mul(2)
        .min(1 << 16)
}

fn new_socket(tcp_cfg: &TcpConfig) -> tcp::Socket<'static> {
    let rx = tcp::SocketBuffer::new(vec![0u8; tcp_cfg.rx_buffer]);
    let tx = tcp::SocketBuffer::new(vec![0u8; tcp_cfg.tx_buffer]);
    let mut s = tcp::Socket::new(rx, tx);
    // RFC 5044 App. A.2: FPDUs go out at once; Nagle would hold short FPDUs back.
    s.set_nagle_enabled(false);
    // RFC 5044 App. A: segments cut at the FPDU ends the worker marks (feed_direct).
    s.set_tx_records(tcp_cfg.fpdu_alignment);
    s.set_rto_min(smoltcp::time::Duration::from_millis(tcp_cfg.rto_min_ms));
    // RFC 9293 3.8.3 (R2): a peer that stops acknowledging is given up on, not retried for
    // good (a vanished peer would otherwise hold the connection and its QP forever).
    s.set_user_timeout(
        (tcp_cfg.user_timeout_ms > 0)
            .then(|| smoltcp::time::Duration::from_millis(tcp_cfg.user_timeout_ms)),
    );
    // RFC 9293 3.8.4: keep-alives only when asked for (MUST-24); an idle peer that answers
    // none of `keepalive_probes` is given up on (the vendored smoltcp's count, DPWARP.md).
    if tcp_cfg.keepalive_ms > 0 {
        s.set_keep_alive(Some(smoltcp::time::Duration::from_millis(
            tcp_cfg.keepalive_ms,
        )));
        s.set_keep_alive_probes(Some(tcp_cfg.keepalive_probes));
    }
    s.set_congestion_control(match tcp_cfg.congestion_control {
        CongestionControl::Cubic => tcp::CongestionControl::Cubic,
        CongestionControl::Reno => tcp::CongestionControl::Reno,
        CongestionControl::None => tcp::CongestionControl::None,
    });
    s
}

fn st_now(t0: Instant) -> smoltcp::time::Instant {
    st_at(t0, Instant::now())
}

/// smoltcp's clock at `now` (one clock read per worker pass: `clock_gettime` showed up at 8 %
/// of a streaming sender's profile when every phase read it).
fn st_at(t0: Instant, now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(now.saturating_duration_since(t0).as_micros() as i64)
}

/// A worker's clock: read once per pass (`Worker::poll_once`), and the times that decide
/// what a pass may skip.
struct PassClock {
    /// The worker's epoch: smoltcp's time is measured from it.
    t0: Instant,
    /// The clock as last read by `poll_once`.
    now: Instant,
    /// `now` as nanoseconds since `t0`: converted once per clock read, not in every phase
    /// that hands smoltcp the time (`Worker::pass_ts`).
    ns: u64,
    /// Passes in a row that did nothing.
    idle_passes: u32,
    /// The last pass that did work.
    last_work: Instant,
    /// The pass clock of the last smoltcp egress that sent nothing: until the clock moves or
    /// something reaches the sockets, another egress would find nothing to send either.
    egress_idle_at: Option<Instant>,
    /// When the next sweep is due (`WorkerConfig::sweep_us`).
    sweep_at: Instant,
    /// This pass visits every connection (a full sweep).
    sweeping: bool,
    /// This pass is a timer sweep (`Worker::timer_sweep`).
    timer_sweep: bool,
    /// Sweeps since the last full one.
    since_full: u32,
}

/// How long a driven worker stays idle before its passes yield (docs/workers.md "Two cores").
struct Spin {
    /// The spin now: `base`, or `DRIVEN_SPIN_SHARED_US` while the worker's thread takes turns
    /// on its CPU with another (`contention`).
    current: Duration,
    /// `wcfg.driven_spin_us`, or its default for this worker's placement.
    base: Duration,
    /// With `wcfg.detect_shared_cpu` (and `driven_spin_us` unset), the spin follows how the
    /// driving thread shares its CPU: windows of its run delay and its yields
    /// (`dataplane::contention`).
    contention: Option<(Contention, RunDelay)>,
}

/// A worker's stop.
struct StopState {
    /// Set once stopped: [`Cmd::Stop`] or every command sender gone, and then no closing
    /// connection left open or `STOP_DRAIN` passed (`since`).
    done: bool,
    /// Stopping since then: the closing connections may still finish their close.
    since: Option<Instant>,
}

impl Worker {
    /// Build the worker's smoltcp interface over its port queue.
    pub fn new(p: WorkerParts, cpu: Option<usize>) -> Worker {
        let t0 = Instant::now();
        let WorkerParts {
            index,
            mut dev,
            mac,
            ip,
            gateway,
            mtu,
            cmds,
            wcfg,
            tcp,
        } = p;
        let post_flags = Arc::new(PostFlags::new(post_flag_slots(tcp.max_connections)));
        let driven_spin =
            Duration::from_micros(wcfg.driven_spin_us.unwrap_or(DRIVEN_SPIN_ALONE_US));
        let adaptive = wcfg.driven_spin_us.is_none() && wcfg.detect_shared_cpu;
        let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        config.random_seed = rand::random();
        let mut iface = Interface::new(config, &mut dev, st_now(t0));
        iface.set_header_prediction(tcp.header_prediction);
        iface.update_ip_addrs(|a| {
            let o = ip.0.octets();
            let _ = a.push(IpCidr::new(IpAddress::v4(o[0], o[1], o[2], o[3]), ip.1));
        });
        if let Some(g) = gateway {
            let o = g.octets();
            let _ = iface
                .routes_mut()
                .add_default_ipv4_route(Ipv4Address::new(o[0], o[1], o[2], o[3]));
        }
        let emss = mtu.saturating_sub(40);
        // `worker.warm_us`: the private pair of QPs `warm` runs a Send through.
        let rehearsal = if wcfg.warm_us == 0 {
            None
        } else {
            let r = Rehearsal::new(emss);
            if r.is_none() {
                log::warn!(
                    "dataplane: worker {index}: the QPs kept warm did not establish; warm_us \
                     sends keep-alives only"
                );
            }
            r
        };
        log::info!(
            "dataplane: worker {index} up: {}/{} mac {} mtu {mtu} emss {emss}",
            ip.0,
            ip.1,
            crate::config::format_mac(&mac),
        );
        Worker {
            index,
            dev,
            held: HeldFrame::default(),
            cmds,
            wcfg,
            tcp,
            totals: Totals::default(),
            warm: WarmPath {
                conn: None,
                last_app_work: t0,
                last_rehearsal: t0,
                last_keep_alive: t0,
                rehearsal,
            },
            clock: PassClock {
                t0,
                now: t0,
                ns: 0,
                idle_passes: 0,
                last_work: Instant::now(),
                egress_idle_at: None,
                sweep_at: t0,
                sweeping: true,
                timer_sweep: false,
                since_full: 0,
            },
            spin: Spin {
                current: driven_spin,
                base: driven_spin,
                contention: adaptive.then(|| (Contention::new(t0), RunDelay::default())),
            },
            stop: StopState {
                done: false,
                since: None,
            },
            iface,
            sockets: SocketSet::new(Vec::new()),
            conns: Vec::new(),
            sched: Schedule {
                conn_index_stale: true,
                egress_all: true,
                active_stale: true,
                ..Schedule::default()
            },
            listeners: Listeners::new(index),
            closing_startups: Vec::new(),
            next_port: 49152 + (rand::random::<u16>() % 8192),
            stats: WorkerStats::default(),
            emss,
            rbuf: vec![0u8; 64 * 1024],
            cpu,
            post_flags,
            unflagged: 0,
            background: false,
            transmit_owed: false,
        }
    }

    /// The background mode: poll until [`Cmd::Stop`] or until every command sender is gone,
    /// backing off when idle as `[worker]` says.
    pub fn run(mut self) {
        self.background = true;
        while !self.stop.done {
            let work = self.poll_once();
            self.back_off(work);
        }
    }

    /// The clock of this pass: read when the previous pass did work, and every 16th idle pass
    /// (an idle pass costs little more than a clock read, and smoltcp's timers are
    /// millisecond ones); the time since the last read goes to the busy or idle account.
    #[inline]
    fn pass_now(&mut self) -> Instant {
        if !self.clock.idle_passes.is_multiple_of(16) {
            return self.clock.now;
        }
        let n = Instant::now();
        // One conversion per clock read serves the accounting and smoltcp's clock (a
        // `Duration` subtraction costs about 50 instructions).
        let ns = n.saturating_duration_since(self.clock.t0).as_nanos() as u64;
        // Since the last read: one pass that did work (idle_passes was reset by it), or 16
        // that did not.
        let dt = ns.saturating_sub(self.clock.ns);
        if self.clock.idle_passes == 0 {
            self.stats.busy_ns += dt;
        } else {
            self.stats.idle_ns += dt;
        }
        self.clock.now = n;
        self.clock.ns = ns;
        n
    }

    /// One pass of every phase; true if anything happened (a command, a frame, bytes moved, a
    /// completion or event).
    pub fn poll_once(&mut self) -> bool {
        if self.stop.done {
            return false;
        }
        self.stats.loops += 1;
        // What the application's side of this pass moved (`last_app_work`): posts, payload
        // received or delivered, completions, commands; not frames alone (ACKs, keep-alives).
        let (fed_before, direct_before) = (self.totals.tx_fed, self.totals.rx_direct);
        let mut work = self.commands();
        let mut app = work;
        if self.stop.done {
            return true;
        }
        // Commands (connect, listen, accept) and MPA startups change which sockets have
        // something to send in ways the egress below does not track: it then visits them all.
        self.sched.egress_all |= work;
        let now = self.pass_now();
        // Posted work first, so that receive buffers are in place for the bytes the rx phase
        // places straight from the frames (`place_from_frame`).
        // Every `sweep_us` a sweep: a full one (every connection and socket) once in
        // FULL_SWEEP_EVERY, else a timer sweep (after the rx phase) that visits only the
        // connections whose socket timers are due, those closing and the active ones.
        let sweep_due = now >= self.clock.sweep_at;
        self.clock.sweeping = false;
        self.clock.timer_sweep = false;
        if sweep_due {
            self.clock.sweep_at = now + Duration::from_micros(self.wcfg.sweep_us);
            self.clock.since_full += 1;
            if self.clock.since_full >= FULL_SWEEP_EVERY {
                self.clock.since_full = 0;
                self.clock.sweeping = true;
                self.stats.sweeps += 1;
            } else {
                self.clock.timer_sweep = true;
                self.stats.timer_sweeps += 1;
            }
        }
        let posted = self.post();
        work |= posted;
        app |= posted;
        if self.rx(now) {
            // Bytes placed from the frames may have queued frames for the staged path
            // (a TERMINATE): `transmit` looks again at every connection that took a segment.
            self.mark_touched();
            work = true;
        }
        if self.clock.timer_sweep {
            work |= self.timer_sweep(now);
        }
        // An MPA startup in progress (or its end: a RST, a Reply) is sent by an egress that
        // visits every socket; startups are short and few.
        let accepted = self.accept(now);
        if accepted || self.listeners.in_startup() {
            self.sched.egress_all = true;
        }
        work |= accepted;
        let delivered = self.deliver(now);
        work |= delivered;
        app |= accepted || delivered || self.totals.rx_direct != direct_before;
        if work {
            self.clock.egress_idle_at = None;
        }
        // Run to completion on the application's thread (driven mode): when segments this
        // pass took completed work, the completions go to the application before the transmit
        // phase, and the pass ends there. What the transmit phase had for those segments (an
        // ACK, a window update, an engine's reply) goes out with the application's answer, in
        // the transmit phase its doorbell (`poll_transmit`) or its next pass runs: one egress
        // instead of two, and its completion one egress earlier. Never twice in a row, so a stream of
        // completions still gets a transmit phase every other pass; never on a sweep or on a
        // pass whose egress visits every socket (commands, MPA startups); never in the
        // background mode, which has nobody to hand over to.
        if !self.background
            && !self.transmit_owed
            && !self.clock.sweeping
            && !self.sched.egress_all
            && !self.sched.touched_conns.is_empty()
        {
            let reaped = self.completions(now);
            if reaped {
                self.stats.transmit_deferred += 1;
                self.transmit_owed = true;
                self.publish_stream_idle(false);
                self.clock.last_work = now;
                self.warm.last_app_work = now;
                self.clock.idle_passes = 0;
                return true;
            }
            // Nothing to hand over: the usual order, the completions again only if the
            // transmit phase moved something (Sends it framed may have completed).
            if self.transmit(now) {
                app |= self.completions(now);
                work = true;
            }
        } else {
            work |= self.transmit(now);
            let reaped = self.completions(now);
            work |= reaped;
            app |= reaped;
        }
        if self.clock.sweeping || self.clock.timer_sweep {
            // A sweep walks every connection: with thousands of them it outlasts `sweep_us`,
            // and every pass would be a sweep. The next one comes no sooner than SWEEP_SHARE
            // times its own length after it ended, so sweeps take at most about 1/SWEEP_SHARE
            // of the worker (a quiet connection's timers are then late by that much more).
            let end = Instant::now();
            let took = end.saturating_duration_since(now);
            self.clock.sweep_at = self.clock.sweep_at.max(end + took * SWEEP_SHARE);
        }
        if app || self.totals.tx_fed != fed_before {
            self.warm.last_app_work = now;
        }
        if self.stop.since.is_some() {
            self.stop.done = self.drained(Instant::now());
        }
        if work || self.dev.rx_pending() > 0 || self.dev.tx_pending() > 0 {
            self.clock.last_work = now;
            self.clock.idle_passes = 0;
        } else {
            self.idle_pass(now);
        }
        work
    }

    /// The end of a pass that found nothing to do. Driven mode, long idle: whatever this
    /// thread waits for may need the core it holds (a peer process on the same core, the
    /// other end of a memif or net_ring link), and a thread that never blocks keeps the core
    /// for its whole time slice, milliseconds: two driven processes on one core moved
    /// 1 Gbit/s where they move 30 on two. So past `driven_spin_us` without work, every 16th
    /// idle pass (those that read the clock) yields. Background workers back off in
    /// `back_off`.
    fn idle_pass(&mut self, now: Instant) {
        if !self.background
            && !self.wcfg.busy_poll
            && self.clock.idle_passes.is_multiple_of(IDLE_YIELD_EVERY)
        {
            self.check_contention(now);
            // With `warm_us` the keep-alives and their answers are frames without
            // application work: the spin counts from the last application work, so that a
            // worker whose CPU is shared still yields, finds that it takes turns, and stops
            // warming (`warm`); on a CPU of its own a yield returns at once.
            let idle_from = if self.wcfg.warm_us != 0 {
                self.warm.last_app_work
            } else {
                self.clock.last_work
            };
            if now.saturating_duration_since(idle_from) >= self.spin.current {
                self.stats.idle_yields += 1;
                std::thread::yield_now();
                if let Some((c, _)) = self.spin.contention.as_mut() {
                    c.note_yield(Instant::now().saturating_duration_since(now));
                }
            }
        }
        if self.wcfg.warm_us != 0 && self.clock.idle_passes.is_multiple_of(16) {
            self.warm(now);
        }
        self.clock.idle_passes = self.clock.idle_passes.wrapping_add(1);
    }

    /// `worker.warm_us`, on an idle pass, while a connection sent data less than `WARM_FOR`
    /// ago: on a core that loses what it has not touched for 20-50 us (docs/workers.md
    /// "Keeping the path warm"), keep the lines a request will need in use.
    /// - `warm_us` after that data and after the last run, a 64 B Send through the worker's
    ///   private pair of QPs (`dataplane::rehearsal`: the verbs and engine code). Counted from
    ///   the data sent, not from the last frame, so that the keep-alives and their answers
    ///   either way do not put it off;
    /// - `warm_us` without a frame either way and after the last one, a TCP keep-alive on
    ///   that connection (RFC 1122 §4.2.3.6; smoltcp's `keep_alive_now`), whose egress and
    ///   the peer's ACK run both ends' packet paths (smoltcp, the PMD, the mempool). Only on
    ///   an established connection with nothing in flight; the side that answers the other's
    ///   keep-alives sends none of its own.
    ///
    /// Not while stopping, and not on a driven worker that shares its CPU (the frames would
    /// keep it from yielding to the thread it takes turns with).
    fn warm(&mut self, now: Instant) {
        let Some((i, h, fed)) = self.warm.conn else {
            return;
        };
        if now.saturating_duration_since(fed) >= WARM_FOR || self.stop.since.is_some() {
            self.warm.conn = None;
            return;
        }
        let interval = Duration::from_micros(self.wcfg.warm_us);
        let rehearse = now.saturating_duration_since(fed.max(self.warm.last_rehearsal)) >= interval;
        let keep_alive = now
            .saturating_duration_since(self.clock.last_work.max(self.warm.last_keep_alive))
            >= interval;
        if !(rehearse || keep_alive)
            || (!self.background
                && !self.wcfg.busy_poll
                && self.spin.current <= Duration::from_micros(DRIVEN_SPIN_SHARED_US))
        {
            return;
        }
        // `conns` may have changed since (an index moved, a connection gone): then nothing
        // until the next data sent names one.
        if !self
            .conns
            .get(i)
            .is_some_and(|c| c.socket() == h && c.is_live())
        {
            self.warm.conn = None;
            return;
        }
        if rehearse {
            self.warm.last_rehearsal = now;
            self.rehearse();
        }
        if !keep_alive {
            return;
        }
        self.warm.last_keep_alive = now;
        let s = self.sockets.get_mut::<tcp::Socket>(h);
        if s.send_queue() > 0 || !s.keep_alive_now() {
            return;
        }
        let ts = self.pass_ts(now);
        self.iface
            .poll_egress_sockets(ts, &mut self.dev, &mut self.sockets, &[h]);
        self.dev.flush();
        self.stats.warm_frames += 1;
    }

    /// smoltcp's clock for this pass: `now` is the pass clock, already converted (`pass_ns`).
    fn pass_ts(&self, now: Instant) -> smoltcp::time::Instant {
        debug_assert_eq!(now, self.clock.now);
        smoltcp::time::Instant::from_micros((self.clock.ns / 1000) as i64)
    }

    /// One Send through the private pair of QPs, if there is one.
    fn rehearse(&mut self) {
        if let Some(r) = self.warm.rehearsal.as_mut() {
            if r.run() {
                self.stats.warm_rehearsals += 1;
            } else {
                log::warn!(
                    "dataplane: worker {}: a Send through the QPs kept warm did not \
                     complete; warm_us sends keep-alives only",
                    self.index
                );
                self.warm.rehearsal = None;
            }
        }
    }

    /// The send side of a pass only: posted work into the engines, then FPDUs framed into
    /// the sockets, egress and the tx burst (a QP's doorbell in driven mode,
    /// `Endpoint::poll_transmit`). No receive, no completions: the next [`Worker::poll_once`]
    /// does those. Timers see the clock of the last pass.
    pub fn poll_transmit(&mut self) -> bool {
        if self.stop.done {
            return false;
        }
        self.stats.send_passes += 1;
        let now = self.clock.now;
        let mut work = self.post();
        if work {
            self.clock.egress_idle_at = None;
        }
        work |= self.transmit(now);
        if work {
            // The next pass reads the clock and counts this as busy time.
            self.clock.idle_passes = 0;
        }
        work
    }

    /// Counters, with the placement of the calling thread.
    pub fn stats(&mut self) -> WorkerStats {
        self.stats.device = self.dev.stats();
        self.stats.rx_predicted = self.iface.rx_predicted();
        self.stats.connections = self.conns.len();
        self.stats.timers_queued = self.sched.timers.len();
        (self.stats.tx_rings_kept, self.stats.tx_refs) = self.dev.zc_outstanding();
        self.stats.cpu = self.cpu;
        self.stats.ran_on = crate::dpdk::current_cpu();
        self.stats.pinned = self.cpu.is_some_and(|c| crate::dpdk::thread_cpus() == [c]);
        self.stats.lcore = crate::dpdk::lcore_id();
        self.stats.driven_spin_us = self.spin.current.as_micros() as u64;
        let (mut fast, mut timeout, mut probes, mut window_probes) = self.totals.retransmits_done;
        for (_, sock) in self.sockets.iter() {
            let (f, t, p, w) = retransmissions(sock);
            fast += f;
            timeout += t;
            probes += p;
            window_probes += w;
        }
        (
            self.stats.tcp_fast_retransmits,
            self.stats.tcp_timeout_retransmits,
            self.stats.tcp_loss_probes,
            self.stats.tcp_window_probes,
        ) = (fast, timeout, probes, window_probes);
        // Transmit: engine -> staging buffer, staging buffer -> socket ring, socket ring ->
        // mbuf (smoltcp, counted by the device; not for payload sent by reference).
        // Receive: chained frames made one buffer, mbuf -> socket ring (smoltcp, counted by
        // the device), then what the engines copy (placement, reassembly).
        let d = self.dev.stats;
        self.stats.copies = CopyStats {
            tx_payload: d.tx_tcp_payload,
            tx_copied: self.totals.tx_staged
                + self.totals.tx_fed
                + d.tx_tcp_payload.saturating_sub(d.tx_zero_copy),
            rx_payload: d.rx_tcp_payload,
            rx_copied: d.rx_tcp_payload.saturating_sub(self.totals.rx_direct)
                + d.rx_linearized
                + self.rx_engine_copied(),
        };
        self.stats
    }

    /// Octets the engines of this worker's connections copied on receive (placement and
    /// reassembly), summed over live connections and those that ended.
    fn rx_engine_copied(&self) -> u64 {
        let mut n = self.totals.rx_copied_done;
        for c in &self.conns {
            // A closing connection's were counted into `rx_copied_done` as it closed.
            n += c.rx_copied();
        }
        n
    }

    /// Stop: every connection's QP is marked closed; the worker stops once no connection is
    /// closing (`STOP_DRAIN` at most, see `drained`). Connections still live stay as they are.
    fn stop(&mut self) {
        if self.stop.since.is_some() {
            return;
        }
        for c in &self.conns {
            if let Some(sh) = c.qp() {
                sh.set_closed();
            }
        }
        self.stop.since = Some(Instant::now());
        let closing = self.closing_open();
        if closing > 0 {
            log::info!(
                "dataplane: worker {}: stopping: {closing} connection(s) closing",
                self.index
            );
        }
        self.stop.done = closing == 0;
    }

    /// Connections whose close is under way: closing, their socket's close not finished
    /// (`close_finished`).
    fn closing_open(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| {
                c.is_closing() && !close_finished(self.sockets.get::<tcp::Socket>(c.socket()))
            })
            .count()
    }

    /// Stopping (with connections closing when it began), and nothing left to wait for:
    /// every one of them closed (or in TIME-WAIT with its last ACK sent), or `STOP_DRAIN`
    /// has passed. Logs how long the closes took.
    fn drained(&self, now: Instant) -> bool {
        let Some(since) = self.stop.since else {
            return false;
        };
        let closing = self.closing_open();
        let waited = now.saturating_duration_since(since);
        let done = closing == 0 || waited >= STOP_DRAIN;
        if done {
            log::info!(
                "dataplane: worker {}: stopped after {waited:?}, {closing} connection(s) still closing",
                self.index
            );
        }
        done
    }

    /// True once the worker has stopped (see [`Worker::poll_once`]).
    pub fn is_stopped(&self) -> bool {
        self.stop.done
    }

    /// How long a driven worker stays idle before its passes yield the core (what
    /// `worker.driven_spin_us` sets).
    pub(crate) fn set_driven_spin(&mut self, d: Duration) {
        self.spin.current = d;
        self.spin.base = d;
    }

    /// Once a window (`contention::WINDOW`), from an idle pass of a driven worker left to its
    /// default spin: did its thread take turns on its CPU with another in the window that
    /// ended (waited for it, and mostly inside its own yields)? Two such windows in a row: a
    /// peer process shares the core, which this process cannot see otherwise, and the worker
    /// yields after `DRIVEN_SPIN_SHARED_US` idle until a window that is not one of these
    /// (docs/workers.md "Workers").
    fn check_contention(&mut self, now: Instant) {
        let Some((c, delay)) = self.spin.contention.as_mut() else {
            return;
        };
        if !c.due(now) {
            return;
        }
        let Some(waited) = delay.read() else {
            self.spin.contention = None;
            return;
        };
        let Some(w) = c.observe(now, waited) else {
            return;
        };
        log::trace!(
            "dataplane: worker {}: run delay {waited} ns: {w:?}",
            self.index
        );
        self.stats.contention_windows += 1;
        self.stats.contended_windows += u64::from(w.contended);
        self.stats.turn_windows += u64::from(w.taking_turns);
        let spin = if c.shared() {
            self.spin
                .base
                .min(Duration::from_micros(DRIVEN_SPIN_SHARED_US))
        } else {
            self.spin.base
        };
        if spin != self.spin.current {
            if c.shared() {
                // Said once at info (a CPU shared on and off would fill the log), then at debug.
                let level = if self.stats.cpu_found_shared == 0 {
                    log::Level::Info
                } else {
                    log::Level::Debug
                };
                log::log!(
                    level,
                    "dataplane: worker {}: CPU shared (its thread takes turns on it with \
                     another): yields after {spin:?} idle",
                    self.index
                );
                self.stats.cpu_found_shared += 1;
            } else {
                log::debug!(
                    "dataplane: worker {}: CPU its own again (or busy with a thread that \
                     keeps it): yields after {spin:?} idle",
                    self.index
                );
            }
            self.spin.current = spin;
        }
    }

    // --- phase 1: commands ----------------------------------------------------------------------
    fn commands(&mut self) -> bool {
        // crossbeam's `try_recv` on an empty channel issues a full fence (`mfence`) and its
        // `is_empty` is about 33 instructions; the senders' flag is one load (`CmdSender`).
        // Every 64th pass still asks the channel, which is how a channel whose senders are
        // all gone (the endpoint dropped) is noticed.
        if !self.stats.loops.is_multiple_of(64) && !self.cmds.pending.0.load(Ordering::Relaxed) {
            return false;
        }
        // Acquire: every command whose flag this clears is in the channel for the loop below;
        // one sent after it raises the flag again.
        self.cmds.pending.0.swap(false, Ordering::Acquire);
        let mut work = false;
        loop {
            let cmd = match self.cmds.rx.try_recv() {
                Ok(c) => c,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    self.stop();
                    return true;
                }
            };
            work = true;
            match cmd {
                Cmd::Stop => {
                    self.stop();
                    return true;
                }
                Cmd::Stats { reply } => {
                    let s = self.stats();
                    let _ = reply.try_send(s);
                }
                Cmd::SetFaults { faults, reply } => {
                    let _ = reply.try_send(self.dev.set_faults(faults));
                }
                Cmd::Connect { remote, sh, events } => self.connect(remote, sh, events),
                Cmd::Listen {
                    port,
                    requests,
                    startup,
                    reply,
                    rev0_permissive,
                } => {
                    let startup = startup.unwrap_or((
                        Duration::from_millis(self.tcp.mpa_timeout_ms),
                        self.tcp.max_startups,
                    ));
                    let policy = ListenConfig {
                        mpa_timeout: startup.0,
                        max_startups: startup.1,
                        mpa_rev0_permissive: rev0_permissive,
                        ..ListenConfig::default()
                    };
                    let r = self.listeners.listen(
                        port,
                        requests,
                        policy,
                        &mut self.sockets,
                        &mut self.dev,
                        &self.tcp,
                    );
                    self.dev.watch_syn(self.listeners.is_listening());
                    let _ = reply.try_send(r);
                }
                Cmd::Unlisten { port } => {
                    for h in self.listeners.unlisten(port) {
                        retire_socket(
                            &mut self.dev,
                            &mut self.totals.retransmits_done,
                            self.sockets.remove(h),
                        );
                    }
                    self.dev.watch_syn(self.listeners.is_listening());
                }
                Cmd::Accept { id, sh, events } => match self.listeners.take_request(id) {
                    Some(h) => {
                        self.lend_rx(h);
                        self.add_conn(Conn::new(h, Some(sh), Some(events)));
                    }
                    None => {
                        let _ = events.try_send(ConnEvent::Closed);
                        sh.set_closed();
                    }
                },
                Cmd::Reject { id, bytes } => {
                    if let Some(h) = self.listeners.take_request(id) {
                        self.add_conn(Conn::rejecting(h, bytes));
                    }
                }
            }
        }
        work
    }

    /// Received in-order payload is lent from the frame when the socket's receive buffer is
    /// empty (`tcp::Socket::set_rx_lend`), and `rx` places it into the connection's engine
    /// from the mbuf (RFC 5044 App. A: with aligned segments each holds whole FPDUs, which
    /// the deframer verifies and places in one pass): one copy per payload octet, into
    /// registered memory. Bytes that arrive while older ones wait in the buffer take the
    /// buffered path of `deliver`, so order holds.
    fn lend_rx(&mut self, h: SocketHandle) {
        let s = self.sockets.get_mut::<tcp::Socket>(h);
        s.set_rx_lend(true);
        s.set_rx_peek_ahead(self.tcp.ooo_placement);
    }

    fn held(&self) -> usize {
        self.conns.len() + self.listeners.held()
    }

    fn connect(&mut self, remote: SocketAddrV4, sh: Arc<QpShared>, events: Sender<ConnEvent>) {
        if self.held() >= self.tcp.max_connections {
            log::warn!(
                "dataplane: worker {} holds tcp.max_connections = {}; not connecting to {remote}",
                self.index,
                self.tcp.max_connections
            );
            let _ = events.try_send(ConnEvent::Closed);
            sh.set_closed();
            return;
        }
        let mut s = new_socket(&self.tcp);
        let o = remote.ip().octets();
        let next = |p: u16| if p >= 65000 { 49152 } else { p + 1 };
        self.next_port = next(self.next_port);
        // With several workers on the port, a local port this worker's queue owns
        // (steer.rs): the connection's frames then belong here wherever they arrive. About
        // one port in n is; the bound only guards against a degenerate owner function.
        if let (Some((st, me)), Some(local)) = (self.dev.steering(), self.iface.ipv4_addr()) {
            let mut tries = 0;
            while !st.owns(me, (local.octets(), self.next_port), (o, remote.port()))
                && tries < 65536
            {
                self.next_port = next(self.next_port);
                tries += 1;
            }
        }
        let r = s.connect(
            self.iface.context(),
            (IpAddress::v4(o[0], o[1], o[2], o[3]), remote.port()),
            self.next_port,
        );
        match r {
            Ok(()) => {
                self.dev.zc_register(&s);
                let h = self.sockets.add(s);
                self.lend_rx(h);
                self.add_conn(Conn::connecting(h, sh, events));
            }
            Err(e) => {
                log::warn!("dataplane: connect to {remote}: {e}");
                let _ = events.try_send(ConnEvent::Closed);
                sh.set_closed();
            }
        }
    }

    // --- phase 2: rx burst + smoltcp ingress -----------------------------------------------------
    fn rx(&mut self, now: Instant) -> bool {
        // Frames left from the last burst (smoltcp stopped taking them while the tx queue was
        // full) go first; a new burst only when they are all taken.
        self.dev.rx_refill();
        if self.dev.rx_pending() == 0 {
            return false;
        }
        let ts = self.pass_ts(now);
        loop {
            let mut ingress = Ingress {
                dev: &mut self.dev,
                held: &mut self.held,
            };
            let r = self
                .iface
                .poll_ingress_single(ts, &mut ingress, &mut self.sockets);
            if r == PollIngressSingleResult::None {
                break;
            }
            self.place_from_frame(now);
            if self.dev.take_syn_seen() && self.listeners.is_listening() {
                self.relisten(now);
            }
        }
        // Nothing lent is left in it: the last frame goes back to its pool.
        self.held.release();
        if self.dev.take_arp_seen() {
            // A neighbour filled may release a socket smoltcp held back for it (a first SYN):
            // no segment of that socket marks it for the egress.
            self.sched.egress_all = true;
        }
        true
    }

    /// What the frame just taken gave its socket's consumer, placed by that socket's
    /// connection straight from the held frame, before anything else reads the socket:
    /// - in-order payload the socket lent (the octets precede whatever the socket buffers
    ///   after them);
    /// - the payload of an out-of-order segment it handed over (`tcp::Socket::
    ///   set_rx_peek_ahead`, on with `[tcp] ooo_placement`): the connection places the tagged
    ///   FPDUs at its front at once (RFC 5044 App. A.3, `Connection::place_ahead`) and the
    ///   socket buffers the rest. Always settled, whatever happens here: a payload left
    ///   unsettled would make the socket abort the connection.
    fn place_from_frame(&mut self, now: Instant) {
        let Some(h) = self.sockets.last_touched() else {
            return;
        };
        let s = self.sockets.get_mut::<tcp::Socket>(h);
        let (lent, ahead) = (s.take_rx_lent(), s.take_rx_ahead());
        if lent.is_none() && ahead.is_none() {
            return;
        }
        self.index_conns();
        let conn = match self.sched.conn_index.get(h.index()) {
            Some(&i) if i != u32::MAX => Some(&self.conns[i as usize]),
            _ => None,
        };
        // In the frame, or in the copy smoltcp made of a split frame it could not take in
        // two parts.
        let (held, iface) = (&self.held, &self.iface);
        let in_frame = |l: tcp::RxLent| held.lent(l).or_else(|| l.within(iface.rx_copy()));
        if let Some(lent) = lent {
            match (conn, in_frame(lent)) {
                (None, _) => log::error!(
                    "dataplane: {} octets lent by a socket with no connection",
                    lent.len()
                ),
                (_, None) => log::error!(
                    "dataplane: {} octets lent outside the frame held",
                    lent.len()
                ),
                (Some(c), Some(payload)) => {
                    if c.place_lent(payload, now) {
                        self.totals.rx_direct += payload.len() as u64;
                    }
                }
            }
        }
        if let Some(ahead) = ahead {
            let Some(payload) = in_frame(ahead.payload) else {
                log::error!(
                    "dataplane: {} octets handed over outside the frame held",
                    ahead.payload.len()
                );
                return;
            };
            let placed = conn.map_or(PlacedAhead::default(), |c| {
                c.place_ahead(ahead.ahead as u64, payload)
            });
            let s = self.sockets.get_mut::<tcp::Socket>(h);
            s.settle_rx_ahead(&payload[placed.octets..]);
            self.stats.ooo_placed_fpdus += placed.fpdus as u64;
            self.stats.ooo_placed_octets += placed.octets as u64;
            // Placed from the frame, never copied into the socket's buffer: as lent octets.
            self.totals.rx_direct += placed.octets as u64;
        }
    }

    /// Hold `c` (`conn_index` is rebuilt before its next use). Its QP's posts raise the flag
    /// of its socket slot from now on; the flag starts raised, for WRs posted before.
    fn add_conn(&mut self, mut c: Conn) {
        if let Some(sh) = c.qp() {
            let slot = c.socket().index();
            if let Some(f) = PostFlag::new(self.post_flags.clone(), slot) {
                // Set once: a QP connects once.
                let _ = sh.post_flag.set(f);
            }
            c.post_flag = sh
                .post_flag
                .get()
                .is_some_and(|f| f.is(&self.post_flags, slot));
            if c.post_flag {
                self.post_flags.raise(slot);
            } else {
                self.unflagged += 1;
            }
        }
        // New: the steps that look at the socket visit it on this pass (bytes may have come
        // with its startup), as if it had taken a segment.
        c.touched = true;
        self.sched.touched_conns.push(self.conns.len());
        self.conns.push(c);
        self.sched.conn_index_stale = true;
        self.sched.active_stale = true;
    }

    /// `conn_index` up to date.
    #[inline]
    fn index_conns(&mut self) {
        if self.sched.conn_index_stale {
            self.rebuild_conn_index();
        }
    }

    fn rebuild_conn_index(&mut self) {
        self.sched.conn_index.clear();
        for (i, c) in self.conns.iter().enumerate() {
            let slot = c.socket().index();
            if self.sched.conn_index.len() <= slot {
                self.sched.conn_index.resize(slot + 1, u32::MAX);
            }
            self.sched.conn_index[slot] = i as u32;
        }
        self.sched.conn_index_stale = false;
    }

    /// The connections whose sockets took segments in the rx phase (smoltcp's
    /// `take_touched`): marked `touched`, and their engines looked at again.
    fn mark_touched(&mut self) {
        if self.transmit_owed {
            // The owed transmit phase's egress still needs the sockets touched before.
            self.sockets.take_touched(&mut self.sched.touched_more);
            for h in self.sched.touched_more.drain(..) {
                if !self.sched.touched.contains(&h) {
                    self.sched.touched.push(h);
                }
            }
        } else {
            self.sockets.take_touched(&mut self.sched.touched);
        }
        if self.sched.touched.is_empty() {
            return;
        }
        self.index_conns();
        for h in self.sched.touched.iter() {
            if let Some(&i) = self.sched.conn_index.get(h.index()) {
                if i == u32::MAX {
                    continue;
                }
                let c = &mut self.conns[i as usize];
                c.look_again();
                list_once(&mut c.active, i as usize, &mut self.sched.active);
                list_once(&mut c.touched, i as usize, &mut self.sched.touched_conns);
            }
        }
    }

    /// A sweep between full ones (every `sweep_us`, FULL_SWEEP_EVERY - 1 of each
    /// FULL_SWEEP_EVERY): what a full sweep visits every connection for, for only the
    /// connections that need it. A quiet connection's socket has nothing new until a segment
    /// comes (which touches it) or one of its smoltcp timers is due (retransmission, tail loss
    /// probe, delayed ACK, persist, keep-alive, close: `Conn::timer_due`, kept in
    /// `Schedule::timers` when it went quiet); a closing connection is visited every time
    /// (its socket closes on timers, and the completions phase removes it); an active one has
    /// its socket's timers run here too (its socket is egressed only when touched or fed). Their
    /// sockets' egress runs first, so the timers fire now; then they are marked touched and
    /// active, so that this pass's deliver, transmit and completions phases see what the
    /// timers did (a retransmission sent, a socket closed), as after a segment. What no
    /// timer announces (a post that raced with its QP's adoption, an application that left
    /// without a disconnect) waits for the next full sweep.
    fn timer_sweep(&mut self, now: Instant) -> bool {
        self.index_conns();
        let ts = self.pass_ts(now);
        let now_us = ts.total_micros();
        self.sched.swept.clear();
        // An entry goes stale when its connection's deadline moves earlier (a new one is
        // queued) or the connection goes, and stays until its own deadline, which may be a
        // keep-alive hours away: a peer that keeps moving a deadline earlier would grow the
        // heap without bound. Past twice the live entries (one per connection at most) it is
        // rebuilt with the live ones only.
        if self.sched.timers.len() > 2 * self.conns.len() + 64 {
            let (conns, index) = (&self.conns, &self.sched.conn_index);
            let mut live = std::mem::take(&mut self.sched.timers).into_vec();
            live.retain(|&Reverse((at, slot))| {
                index
                    .get(slot)
                    .and_then(|&i| conns.get(i as usize))
                    .is_some_and(|c| c.timer_queued == Some(at))
            });
            live.sort_unstable();
            live.dedup();
            self.sched.timers = BinaryHeap::from(live);
        }
        while let Some(&Reverse((at, slot))) = self.sched.timers.peek() {
            if at > now_us {
                break;
            }
            self.sched.timers.pop();
            let Some(&i) = self.sched.conn_index.get(slot) else {
                continue;
            };
            let Some(c) = self.conns.get_mut(i as usize) else {
                continue;
            };
            if c.timer_queued != Some(at) {
                continue;
            }
            c.timer_queued = None;
            match c.timer_due {
                // Moved later since it was queued: queued again for then.
                Some(d) if d > now_us => {
                    c.timer_queued = Some(d);
                    self.sched.timers.push(Reverse((d, slot)));
                }
                Some(_) => {
                    c.timer_due = None;
                    self.sched.swept.push(i as usize);
                }
                None => {}
            }
        }
        // The active ones, unless `conns` changed since that list was made (its indices may
        // name other connections, or none: a removal moved the last one): this pass's
        // transmit phase then visits every connection anyway, and their sockets' timers wait
        // for the next timer sweep.
        if !self.sched.active_stale {
            self.sched.swept.extend_from_slice(&self.sched.active);
        }
        if self.sched.swept.is_empty() {
            return false;
        }
        self.stats.timer_sweep_visits += self.sched.swept.len() as u64;
        self.sched.swept_sockets.clear();
        for &i in self.sched.swept.iter() {
            let Some(c) = self.conns.get_mut(i) else {
                continue;
            };
            self.sched.swept_sockets.push(c.socket());
            c.look_again();
            list_once(&mut c.active, i, &mut self.sched.active);
            list_once(&mut c.touched, i, &mut self.sched.touched_conns);
        }
        let sent = self.iface.poll_egress_sockets(
            ts,
            &mut self.dev,
            &mut self.sockets,
            &self.sched.swept_sockets,
        );
        self.clock.egress_idle_at = None;
        sent != PollResult::None
    }

    // --- phase 3: listeners and MPA Requests -----------------------------------------------------
    /// [`Listeners::relisten`] (after a frame that carried a SYN, and on every pass).
    fn relisten(&mut self, now: Instant) -> bool {
        let held = self.conns.len();
        self.listeners.relisten(
            &mut self.sockets,
            &mut self.dev,
            &self.tcp,
            held,
            &mut self.stats.refused,
            now,
        )
    }

    /// Phase 3: new connections into MPA startup, startups read, requests handed out; the
    /// connections the listeners gave up on close here.
    fn accept(&mut self, now: Instant) -> bool {
        let mut work = self.relisten(now);
        if !self.listeners.in_startup() {
            return work;
        }
        self.closing_startups.clear();
        let mut closing = std::mem::take(&mut self.closing_startups);
        work |= self.listeners.advance(
            &mut self.sockets,
            &mut self.rbuf,
            now,
            &mut closing,
            &mut self.stats.requests_refused,
        );
        for &h in &closing {
            self.sched.egress_all = true;
            self.add_conn(Conn::closing(h, now));
        }
        self.closing_startups = closing;
        work
    }

    // --- phase 4: posted work requests into the engines -------------------------------------------
    fn post(&mut self) -> bool {
        let mut work = false;
        if self.clock.sweeping {
            // Every QP's rings, as a safety net (a post that raced with the QP's adoption and
            // found no flag to raise): the flags raised meanwhile are taken with them.
            let slots = self.sched.conn_index.len().min(self.post_flags.flags.len());
            self.post_flags.lower_all(slots);
            for c in self.conns.iter_mut() {
                work |= c.drain_posted(&mut self.stats) != Drained::Nothing;
            }
            return work;
        }
        self.index_conns();
        let slots = self.sched.conn_index.len().min(self.post_flags.flags.len());
        let flags = &self.post_flags;
        for (g, group) in flags.groups[..slots.div_ceil(PostFlags::GROUP)]
            .iter()
            .enumerate()
        {
            if !group.load(Ordering::Relaxed) {
                continue;
            }
            // Lowered before its flags are read: a raise whose group store this swap does not
            // read puts the group up again for the next pass (`PostFlags::raise`).
            group.swap(false, Ordering::Acquire);
            let lo = g * PostFlags::GROUP;
            let hi = (lo + PostFlags::GROUP).min(slots);
            self.stats.post_flag_reads += (hi - lo) as u64;
            let mut keep = false;
            for (f, &i) in flags.flags[lo..hi]
                .iter()
                .zip(&self.sched.conn_index[lo..hi])
            {
                if i == u32::MAX || !f.load(Ordering::Relaxed) {
                    continue;
                }
                let c = &mut self.conns[i as usize];
                list_once(&mut c.active, i as usize, &mut self.sched.active);
                // The flag stays up while posts keep coming through the rings, so a busy
                // QP costs no read-modify-write here; it is lowered on the first pass that
                // finds nothing. Its group stays up with it, for the next pass. A post that
                // went straight into the connection (a driven QP, one WR at a time) leaves
                // nothing for a next pass: its flag is lowered now, as below, which costs
                // one swap instead of the group's raise here and the two swaps of the next
                // pass (scripts/instructions: atomics per 64 B Send).
                match c.drain_posted(&mut self.stats) {
                    Drained::Rings => {
                        work = true;
                        keep = true;
                        continue;
                    }
                    Drained::Direct => work = true,
                    Drained::Nothing => {}
                }
                // Lowered, then one more look: a post whose raise came before this swap is
                // seen now (Acquire pairs with the raise's release), one after it raises the
                // flag (and its group) again.
                f.swap(false, Ordering::Acquire);
                if c.drain_posted(&mut self.stats) != Drained::Nothing {
                    work = true;
                } else if c.qp().is_some_and(close_asked) {
                    // Raised for a disconnect (`Qp::disconnect` and dropping the last handle
                    // kick the QP after setting it; the swap above made that visible): the
                    // completions phase reaps it, though it is quiet otherwise.
                    c.mark_dirty();
                }
            }
            if keep {
                // A read-modify-write, like a poster's raise: a plain store here would end
                // the release sequence of a raise that came since the swap above.
                group.swap(true, Ordering::Relaxed);
            }
        }
        if self.unflagged > 0 {
            for c in self.conns.iter_mut().filter(|c| !c.post_flag) {
                work |= c.drain_posted(&mut self.stats) != Drained::Nothing;
            }
        }
        work
    }

    // --- phase 5: received bytes into the engines ------------------------------------------------
    fn deliver(&mut self, now: Instant) -> bool {
        // Outside the sweep only connections touched this pass are visited: none, nothing.
        if !self.clock.sweeping && self.sched.touched_conns.is_empty() {
            return false;
        }
        let mut work = false;
        // Bytes, a FIN or the handshake's end come with a segment: a socket that took none
        // this pass has nothing new, unless smoltcp changed it on a timer (the sweep). So
        // outside the sweep only the connections touched this pass are visited.
        let all = self.clock.sweeping;
        let n = if all {
            self.conns.len()
        } else {
            self.sched.touched_conns.len()
        };
        self.stats.deliver_visits += n as u64;
        for k in 0..n {
            let i = if all { k } else { self.sched.touched_conns[k] };
            let Some(c) = self.conns.get_mut(i) else {
                continue;
            };
            let s = self.sockets.get_mut::<tcp::Socket>(c.socket());
            work |= c.deliver(s, now, &mut self.stats, self.index, &self.tcp);
        }
        work
    }

    // --- phase 6: FPDUs into the sockets, egress, tx burst ---------------------------------------
    fn transmit(&mut self, now: Instant) -> bool {
        self.transmit_owed = false;
        // Nothing to do here: no connection to visit or that took a segment, and an egress
        // since the clock last moved that sent nothing. Everything below would find that (its
        // visits and smoltcp's egress skipped, nothing to publish); only frames queued for the
        // device by this pass's other phases may wait. About a fifth of an idle pass's
        // instructions. (Not the "quiet pass" of docs/dataplane.md, tried and not kept.)
        if !(self.clock.sweeping || self.sched.egress_all || self.sched.active_stale)
            && self.sched.active.is_empty()
            && self.sched.touched_conns.is_empty()
            && self.sched.touched.is_empty()
            && self.clock.egress_idle_at == Some(now)
        {
            return self.dev.flush() > 0;
        }
        let mut work = false;
        // The connections to visit: all of them on a sweep or when the egress visits every
        // socket anyway, else those listed active (a quiet one has nothing here).
        let mut visit = std::mem::take(&mut self.sched.visit);
        visit.clear();
        if self.clock.sweeping || self.sched.egress_all || self.sched.active_stale {
            visit.extend(0..self.conns.len());
        } else {
            visit.extend_from_slice(&self.sched.active);
        }
        self.stats.transmit_visits += visit.len() as u64;
        for &i in visit.iter() {
            let staged = self.conns[i].stage(now, &mut self.stats.engine_checks);
            self.totals.tx_staged += staged as u64;
            work |= staged > 0;
        }
        // One pass frames what each window admits and smoltcp sends up to a burst of segments
        // per socket; another pass only while something is left that a pass can move now
        // (`again` below), bounded (the device refuses when its tx queue is full).
        let align = self.tcp.fpdu_alignment;
        for _ in 0..EGRESS_PASSES {
            let mut fed = false;
            let mut wrapped = false;
            for &i in visit.iter() {
                let c = &mut self.conns[i];
                if !c.may_feed() {
                    continue;
                }
                let s = self.sockets.get_mut::<tcp::Socket>(c.socket());
                let (n, staged) = c.feed(s, &mut self.dev, self.emss, align, &mut wrapped);
                self.totals.tx_staged += staged as u64;
                if n > 0 {
                    fed = true;
                    self.totals.tx_fed += n as u64;
                    list_once(&mut c.touched, i, &mut self.sched.touched_conns);
                    if self.wcfg.warm_us != 0 && c.qp().is_some() {
                        self.warm.conn = Some((i, c.socket(), now));
                    }
                }
            }
            // An idle pass (nothing received, posted or fed, the clock unchanged since an
            // egress that sent nothing) skips smoltcp's walk over every socket: its timers
            // are millisecond ones and the clock moves every 16 idle passes.
            if !fed && self.clock.egress_idle_at == Some(now) {
                break;
            }
            // smoltcp's clock, only for a pass that goes on to the egress (an idle one has
            // stopped above).
            let ts = self.pass_ts(now);
            let sent = if self.sched.egress_all || self.clock.sweeping {
                self.iface.poll_egress(ts, &mut self.dev, &mut self.sockets)
            } else {
                // Only the sockets with something new: those that took segments (ACKs,
                // window updates, handshake replies) and those fed above.
                self.sched.egress_handles.clear();
                self.sched
                    .egress_handles
                    .extend_from_slice(&self.sched.touched);
                for &i in self.sched.touched_conns.iter() {
                    if let Some(c) = self.conns.get(i) {
                        // Fed, and not already listed for a segment it took.
                        if !self.sched.touched.contains(&c.socket()) {
                            self.sched.egress_handles.push(c.socket());
                        }
                    }
                }
                self.iface.poll_egress_sockets(
                    ts,
                    &mut self.dev,
                    &mut self.sockets,
                    &self.sched.egress_handles,
                )
            };
            if sent == PollResult::None && !fed {
                // Only when the device took everything: a full tx queue is no proof that
                // smoltcp has nothing to send.
                if self.dev.tx_pending() == 0 {
                    self.clock.egress_idle_at = Some(now);
                }
                break;
            }
            self.clock.egress_idle_at = None;
            work = true;
            // Again only for staged bytes (fed a segment per pass), framing that stopped at the
            // end of the ring with more room after its wrap, or octets smoltcp left unsent (its
            // burst ended): a window or a ring that was full stays so until the next rx phase.
            // A quiet connection (nothing to frame, no segment this pass) has nothing a second
            // pass could move.
            let again = wrapped
                || visit.iter().any(|&i| {
                    let c = &self.conns[i];
                    let s = self.sockets.get::<tcp::Socket>(c.socket());
                    c.wants_another_pass(s, self.clock.sweeping)
                });
            if !again {
                break;
            }
        }
        if self.dev.flush() > 0 {
            work = true;
        }
        let all = self.clock.sweeping;
        self.publish_stream_idle(all);
        for &i in self.sched.touched_conns.iter() {
            if let Some(c) = self.conns.get_mut(i) {
                c.touched = false;
            }
        }
        self.sched.touched_conns.clear();
        self.sched.touched.clear();
        self.sched.egress_all = false;
        // The next pass visits what is not quiet yet, and what gets posts or segments; a
        // connection going quiet leaves its socket's next timer to the timer sweep.
        self.sched.active.clear();
        let ts = self.pass_ts(now);
        for &i in visit.iter() {
            let c = &mut self.conns[i];
            c.active = !c.is_quiet();
            if c.active {
                self.sched.active.push(i);
                continue;
            }
            let due = if c.is_live() {
                self.iface
                    .socket_poll_at(ts, &self.sockets, c.socket())
                    .map(|t| t.total_micros())
            } else {
                Some(ts.total_micros())
            };
            c.timer_due = due;
            if let Some(d) = due {
                if c.timer_queued.is_none_or(|q| d < q) {
                    c.timer_queued = Some(d);
                    self.sched.timers.push(Reverse((d, c.socket().index())));
                }
            }
        }
        self.sched.active_stale = false;
        self.sched.visit = visit;
        work
    }

    /// For the doorbell (`Qp::drive_with`), which rings only while nothing is in flight:
    /// after a transmit phase (ACKs came in the rx phase before it, new data went out in it),
    /// or after the rx phase of a pass that leaves its transmit phase owed. Stored only on a
    /// change: the application thread reads it on every post. What is in flight changes with
    /// an ACK (a segment) or new data (fed), both of which mark the connection `touched`;
    /// quiet connections are left to the sweep (`all`, which also clears their `touched`).
    fn publish_stream_idle(&mut self, all: bool) {
        let n = if all {
            self.conns.len()
        } else {
            self.sched.touched_conns.len()
        };
        for k in 0..n {
            let i = if all { k } else { self.sched.touched_conns[k] };
            let Some(c) = self.conns.get_mut(i) else {
                continue;
            };
            if all {
                c.touched = false;
            }
            if let (true, Some(sh)) = (c.is_live(), c.qp()) {
                let idle = self.sockets.get::<tcp::Socket>(c.socket()).send_queue() == 0;
                if sh.stream_idle.load(Ordering::Relaxed) != idle {
                    sh.stream_idle.store(idle, Ordering::Relaxed);
                }
            }
        }
    }

    // --- phase 7: completions, events, closes ----------------------------------------------------
    fn completions(&mut self, now: Instant) -> bool {
        // Nothing to visit (the visit list below would be empty): nothing to reap or close.
        if !(self.clock.sweeping || self.sched.active_stale)
            && self.sched.active.is_empty()
            && (!self.clock.timer_sweep || self.sched.swept.is_empty())
        {
            return false;
        }
        let mut work = false;
        let mut closed = false;
        let mut newly_closed = Vec::new();
        // Closing sockets still open when CLOSE_LINGER ran out (their FIN not acknowledged):
        // aborted, and removed only after the egress below has sent their RST.
        let mut lingered = Vec::new();
        // The connections to visit: all of them on a sweep or when `active` may be wrong,
        // else the active ones. A quiet connection (`Conn::is_quiet`: live, reaped, nothing
        // staged) has nothing here unless its application asked to close or left: a
        // disconnect (`Qp::disconnect`, dropping the last handle) raises its post flag, and
        // the post phase then marks it for a reap; an application that left without that
        // (all handles gone, no disconnect) is found by the sweep. Visited from the highest
        // index down, so a `swap_remove` moves into the current index a connection already
        // visited.
        let mut visit = std::mem::take(&mut self.sched.reap_visit);
        visit.clear();
        if self.clock.sweeping || self.sched.active_stale {
            visit.extend(0..self.conns.len());
        } else {
            visit.extend_from_slice(&self.sched.active);
            if self.clock.timer_sweep {
                visit.extend_from_slice(&self.sched.swept);
            }
            visit.sort_unstable();
            visit.dedup();
        }
        self.stats.completion_visits += visit.len() as u64;
        for &i in visit.iter().rev() {
            let Some(c) = self.conns.get_mut(i) else {
                continue;
            };
            // A live connection nothing touched since its last reap, that has not seen EOF
            // and whose application neither asked to close nor left, has nothing here: skip it
            // without reading its socket.
            if c.reap_skippable() {
                continue;
            }
            let s = self.sockets.get_mut::<tcp::Socket>(c.socket());
            let Reaped {
                work: w,
                remove,
                closed: now_closed,
                rx_copied,
                staged,
                visit: again,
            } = c.reap(s, now, &mut self.stats);
            work |= w;
            self.totals.tx_staged += staged as u64;
            self.totals.rx_copied_done += rx_copied;
            if again {
                // Staged bytes, or the ACK of the peer's FIN, for a transmit phase still to
                // come (this pass handed its completions over first).
                list_once(&mut c.active, i, &mut self.sched.active);
            }
            if now_closed {
                // Its QP is marked closed only after the egress below (conn.rs, invariant 3).
                newly_closed.extend(c.qp().cloned());
                closed = true;
            }
            if remove {
                let c = self.conns.swap_remove(i);
                self.sched.conn_index_stale = true;
                self.sched.active_stale = true;
                if c.qp().is_some() && !c.post_flag {
                    self.unflagged -= 1;
                }
                let s = self.sockets.get_mut::<tcp::Socket>(c.socket());
                let open = s.is_open();
                s.abort();
                if open {
                    lingered.push(c.socket());
                } else {
                    retire_socket(
                        &mut self.dev,
                        &mut self.totals.retransmits_done,
                        self.sockets.remove(c.socket()),
                    );
                }
            }
        }
        self.sched.reap_visit = visit;
        if closed || !lingered.is_empty() {
            // The FIN goes out now: the QP reads as closed from here on, and a driving
            // application may stop polling as soon as it sees that. An aborted socket sends
            // its RST here (smoltcp sends it from CLOSED on the next dispatch): removed at
            // once, it sent nothing, and a peer whose FINs were all lost (a lossy link) was
            // left with a connection open for good.
            let ts = st_now(self.clock.t0);
            self.iface.poll_egress(ts, &mut self.dev, &mut self.sockets);
            self.dev.flush();
        }
        for h in lingered {
            retire_socket(
                &mut self.dev,
                &mut self.totals.retransmits_done,
                self.sockets.remove(h),
            );
        }
        for sh in newly_closed {
            sh.set_closed();
        }
        work
    }

    /// Idle back-off of the background mode.
    fn back_off(&mut self, work: bool) {
        if work || self.wcfg.busy_poll {
            if !work {
                std::hint::spin_loop();
            }
            return;
        }
        // Shared cores: spin briefly, then yield (the application thread waiting for a
        // completion may be on this core), and sleep once idle for longer (tests run in
        // parallel on two cores; docs/workers.md "Two cores").
        let idle = self.clock.last_work.elapsed();
        if idle < Duration::from_micros(self.wcfg.spin_us) {
            std::hint::spin_loop();
        } else if idle < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(self.wcfg.idle_sleep_us));
        }
    }
}

impl Drop for Worker {
    /// With transmit by reference, every socket goes through the device, which keeps (and at
    /// its own drop leaks) the transmit rings frames still point into.
    fn drop(&mut self) {
        if !self.dev.zero_copy() {
            return;
        }
        let handles: Vec<SocketHandle> = self.sockets.iter().map(|(h, _)| h).collect();
        for h in handles {
            retire_socket(
                &mut self.dev,
                &mut self.totals.retransmits_done,
                self.sockets.remove(h),
            );
        }
    }
}

/// Put index `i` on `list` unless its flag says it is there already (`Conn::active` for
/// `Schedule::active`, `Conn::touched` for `Schedule::touched_conns`): each list stays free of
/// duplicates.
fn list_once(listed: &mut bool, i: usize, list: &mut Vec<usize>) {
    if !*listed {
        *listed = true;
        list.push(i);
    }
}
