//! One connection of a worker: its TCP socket (a handle into the worker's smoltcp socket set),
//! its QP (the sans-IO engine behind [`QpShared`]), its staging buffer and its close state.
//! The worker schedules connections (which to visit in a phase) and owns what they share (the
//! interface, the device, the socket set); everything a connection does in a phase is a method
//! here.
//!
//! Invariants (each relied on by the worker's scheduling, and tested below where it is a
//! decision rather than a hand-off to smoltcp or the engine):
//! 1. **Stream order.** `out[out_pos..]` is output staged for the socket and not yet in it;
//!    while any is left, nothing is framed in place ([`Conn::feed`]): staged bytes precede
//!    whatever the engine frames next in the TCP byte stream. `ends` are the record (FPDU,
//!    startup frame) ends in `out`, ascending, so a segment can start at a record (RFC 5044
//!    Appendix A).
//! 2. **States only move forward**: `Connecting` -> `Live` -> `Closing`; a connection leaves
//!    `Closing` only by removal ([`Conn::reap`] answering [`Reaped::remove`]).
//! 3. **The QP reads closed only after its last bytes are on the wire**: a connection that
//!    closes hands its QP back ([`Reaped::closed`]) and the worker marks it closed after the
//!    egress that sends its FIN, so what the engine queued last (a TERMINATE, RFC 5040 §7.1)
//!    leaves before the application can see the close and exit.
//! 4. **A closing socket is kept** until its close finished (closed, or TIME-WAIT with the
//!    ACK of the peer's FIN sent), or [`CLOSE_LINGER`] after everything it sent was
//!    acknowledged, or [`CLOSE_DATA_LINGER`] after the close while data is unacknowledged
//!    ([`closing_verdict`]): what was accepted before a close is not given up after a few
//!    losses, and a vanished peer still frees the socket.
//! 5. **Quiet means nothing to do** ([`Conn::is_quiet`]): a connection the transmit and
//!    completions phases skip has nothing staged, a checked engine with no timer and nothing
//!    to frame, and nothing to reap; anything that can change that (a post, a segment) lists
//!    it again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;

use super::super::device::DpdkDevice;
use super::{close_finished, TcpConfig, WorkerStats};
use crate::cm::pump;
use crate::conn::{ConnEvent, PlacedAhead};
use crate::rdma::MIN_ULPDU_ROOM;
use crate::verbs::{QpShared, QpSlot};
use crate::wire::terminate::TermCause;
use crate::wire::txbuf::{SliceBuf, TxBuf};

/// How long a closing connection keeps sending what its engine still queues.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);
/// How long a closing socket may linger, once everything it sent before its FIN has been
/// acknowledged, before it is aborted (its FIN or the peer's not acknowledged: a lost FIN,
/// a peer gone).
pub(super) const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// How long a closing socket keeps retransmitting data the peer has not acknowledged yet
/// before it is aborted: what was accepted before the close (a final Send) is not given up
/// after a few lost segments (smoltcp's retransmission timeout backs off to seconds), and a
/// peer that is gone still frees the socket in the end.
pub(super) const CLOSE_DATA_LINGER: Duration = Duration::from_secs(60);

/// Room for the smallest FPDU [`Conn::feed`] frames in place: a [`MIN_ULPDU_ROOM`] ULPDU plus
/// the length field, pad and CRC (RFC 5044 §4.1).
const MIN_DIRECT_FPDU: usize = MIN_ULPDU_ROOM + 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CState {
    Connecting,
    Live,
    Closing(Instant),
}

pub(super) struct Conn {
    h: SocketHandle,
    sh: Option<Arc<QpShared>>,
    events: Option<Sender<ConnEvent>>,
    /// Bytes from the connection not yet in the socket, `out[out_pos..]` (invariant 1).
    out: Vec<u8>,
    out_pos: usize,
    /// Offsets in `out` just past each record (FPDU, startup frames), ascending.
    ends: Vec<usize>,
    state: CState,
    /// The peer closed its direction (FIN seen and reported to the connection).
    eof: bool,
    /// When the connection first wanted to close with output still to stage.
    closing_since: Option<Instant>,
    /// When a closing socket had nothing left unacknowledged but its FIN ([`CLOSE_LINGER`]
    /// counts from here).
    close_drained: Option<Instant>,
    /// What the worker knows of the engine since it last looked (locks it may skip).
    marks: EngineMarks,
    /// Its socket processed an incoming segment this pass (smoltcp's `take_touched`), or the
    /// connection is new: the per-connection steps that look at the socket (deliver, the
    /// doorbell's `stream_idle`) visit it. The others wait for a sweep
    /// (`WorkerConfig::sweep_us`), so a pass costs the same with 1 or 200 quiet connections
    /// beside the busy one. Lowered by the worker at the end of the transmit phase.
    pub(super) touched: bool,
    /// Its QP raises this worker's post flag of its socket slot (`Worker::post_flags`).
    pub(super) post_flag: bool,
    /// Listed in `Schedule::active`: the transmit phase visits it on the next pass.
    pub(super) active: bool,
    /// When it went quiet, the earliest timer of its socket (smoltcp's `poll_at`, smoltcp's
    /// clock in microseconds; `None`: it waits for a segment), or the same pass's clock for a
    /// connection that is not live (closing: its socket closes on timers, and a reap removes
    /// it). The sweep between full ones visits it when that is due (`Worker::timer_sweep`).
    pub(super) timer_due: Option<i64>,
    /// The deadline of its one live entry in `Schedule::timers` (an entry for another
    /// deadline is stale and skipped).
    pub(super) timer_queued: Option<i64>,
}

/// What a worker remembers of a connection's engine between passes, so that passes where
/// nothing reached it skip its QP lock.
struct EngineMarks {
    /// The pass clock at which `transmit` last found the connection framing in place with its
    /// timers handled: until something reaches the engine (posts, received bytes:
    /// [`EngineMarks::look_again`]) or its timer is due (`timer_at`) there is nothing for that
    /// check to do, and its lock is skipped.
    tx_checked: Option<Instant>,
    /// The engine's next timer (`Connection::poll_timeout`) as of that check.
    timer_at: Option<Instant>,
    /// At that check, or when it last framed in place, the engine had nothing to frame
    /// (`Connection::has_tx_work`): the egress passes skip offering it ring room (and the QP
    /// lock) until something that can give it work happens (posted WRs, received bytes, its
    /// timers).
    tx_idle: bool,
    /// The engine was touched since its completions and events were last reaped; a clean
    /// connection is reaped only when the application asked to close or left.
    dirty: bool,
}

impl EngineMarks {
    /// Something may have given the engine work, completions or events (posts drained, bytes
    /// received or delivered, a staged frame): `transmit` checks it again under its lock, and
    /// `completions` reaps it.
    fn look_again(&mut self) {
        self.tx_checked = None;
        self.tx_idle = false;
        self.dirty = true;
    }
}

/// What [`Conn::drain_posted`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drained {
    Nothing,
    /// Only a post that went straight into the connection: the rings were empty.
    Direct,
    /// WRs from the post rings.
    Rings,
}

/// What the completions phase is to do with a connection after [`Conn::reap`].
#[derive(Default)]
pub(super) struct Reaped {
    /// Completions, events or a close happened.
    pub work: bool,
    /// Remove it: its socket is aborted and retired (invariant 4).
    pub remove: bool,
    /// Its socket closed now: the egress that sends the FIN comes next, and only then is its
    /// QP marked closed (invariant 3).
    pub closed: bool,
    /// Octets its engine copied on receive, counted once as it closes.
    pub rx_copied: u64,
    /// Octets staged for the close (what the engine queued last).
    pub staged: usize,
    /// A transmit phase still has something to send for it (staged bytes, the ACK of the
    /// peer's FIN in TIME-WAIT): list it active.
    pub visit: bool,
}

/// The socket facts a closing connection's fate depends on.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClosingSocket {
    /// Closed, or TIME-WAIT with the ACK of the peer's FIN sent (`close_finished`).
    pub finished: bool,
    /// Not CLOSED, LISTEN nor TIME-WAIT (smoltcp's `is_open`).
    pub open: bool,
    /// Octets sent and not acknowledged (or not sent yet), the FIN aside.
    pub unacknowledged: bool,
}

impl ClosingSocket {
    fn of(s: &tcp::Socket) -> Self {
        ClosingSocket {
            finished: close_finished(s),
            open: s.is_open(),
            unacknowledged: s.send_queue() > 0,
        }
    }
}

/// What becomes of a closing connection (invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closing {
    /// Not finished: keep it.
    Keep,
    /// TIME-WAIT with the ACK of the peer's FIN still owed: keep it, and let a transmit phase
    /// send that ACK (removed before, the peer would wait for it in LAST-ACK).
    AckOwed,
    /// Finished, or lingered too long: remove it.
    Remove,
}

/// Invariant 4: `since` is when the connection began closing, `drained` when its socket was
/// first seen with nothing unacknowledged but the FIN (set here).
pub(super) fn closing_verdict(
    since: Instant,
    drained: &mut Option<Instant>,
    s: ClosingSocket,
    now: Instant,
) -> Closing {
    if s.finished {
        Closing::Remove
    } else if !s.open {
        Closing::AckOwed
    } else if s.unacknowledged {
        if now.duration_since(since) > CLOSE_DATA_LINGER {
            Closing::Remove
        } else {
            Closing::Keep
        }
    } else {
        let drained = *drained.get_or_insert(now);
        if now.duration_since(drained) > CLOSE_LINGER {
            Closing::Remove
        } else {
            Closing::Keep
        }
    }
}

impl Conn {
    /// An established connection (accepted) with its QP and the CM's event channel.
    pub(super) fn new(
        h: SocketHandle,
        sh: Option<Arc<QpShared>>,
        events: Option<Sender<ConnEvent>>,
    ) -> Self {
        Conn {
            h,
            sh,
            events,
            out: Vec::new(),
            out_pos: 0,
            ends: Vec::new(),
            state: CState::Live,
            eof: false,
            closing_since: None,
            close_drained: None,
            marks: EngineMarks {
                tx_checked: None,
                timer_at: None,
                tx_idle: false,
                dirty: true,
            },
            touched: true,
            post_flag: false,
            active: false,
            timer_due: None,
            timer_queued: None,
        }
    }

    /// An active open still in the TCP handshake.
    pub(super) fn connecting(
        h: SocketHandle,
        sh: Arc<QpShared>,
        events: Sender<ConnEvent>,
    ) -> Self {
        let mut c = Conn::new(h, Some(sh), Some(events));
        c.state = CState::Connecting;
        c
    }

    /// A rejecting responder: `reply` (an MPA Reply with the Rejected bit, RFC 5044 §7.1),
    /// then the close.
    pub(super) fn rejecting(h: SocketHandle, reply: Vec<u8>) -> Self {
        let mut c = Conn::new(h, None, None);
        c.out = reply;
        c
    }

    /// A socket the listener gave up on during MPA startup, closing.
    pub(super) fn closing(h: SocketHandle, now: Instant) -> Self {
        let mut c = Conn::new(h, None, None);
        c.state = CState::Closing(now);
        c.eof = true;
        c
    }

    pub(super) fn socket(&self) -> SocketHandle {
        self.h
    }

    pub(super) fn qp(&self) -> Option<&Arc<QpShared>> {
        self.sh.as_ref()
    }

    pub(super) fn is_live(&self) -> bool {
        self.state == CState::Live
    }

    pub(super) fn is_closing(&self) -> bool {
        matches!(self.state, CState::Closing(_))
    }

    /// Something may have given the engine work (a segment for its socket).
    pub(super) fn look_again(&mut self) {
        self.marks.look_again();
    }

    /// Its application asked to close or left: the completions phase must reap it though
    /// nothing else touched it.
    pub(super) fn mark_dirty(&mut self) {
        self.marks.dirty = true;
    }

    /// Invariant 5: nothing for the transmit phase until something reaches it (a post, a
    /// segment: both list it in `Schedule::active` again) or the sweep: live, with a QP that
    /// raises a post flag, nothing staged, its engine checked with nothing to frame and no
    /// timer, and reaped. (The transmit phase does nothing for a connection not live.)
    pub(super) fn is_quiet(&self) -> bool {
        !self.is_live()
            || (self.post_flag
                && self.out_pos >= self.out.len()
                && self.marks.tx_checked.is_some()
                && self.marks.timer_at.is_none()
                && self.marks.tx_idle
                && !self.marks.dirty
                && !self.touched)
    }

    /// Octets its engine copied on receive (placement, reassembly) so far, while it is not
    /// closing (a closing connection's were counted by [`Conn::reap`]).
    /// In-order payload the socket lent from a frame (nothing before it is left unread)
    /// into the engine, which verifies and places it from there (RFC 5044 §4, App. A).
    /// False when the QP is no longer live: the octets go with it.
    pub(super) fn place_lent(&self, payload: &[u8], now: Instant) -> bool {
        let Some(sh) = self.sh.as_deref() else {
            return false;
        };
        let mut guard = sh.lock();
        let QpSlot::Live(conn) = &mut *guard else {
            return false;
        };
        conn.on_bytes(payload, now);
        true
    }

    /// Place the tagged FPDUs at the front of an out-of-order segment's payload, `ahead`
    /// octets past what the engine was given (`Connection::place_ahead`); the octets taken.
    pub(super) fn place_ahead(&self, ahead: u64, payload: &[u8]) -> PlacedAhead {
        let Some(sh) = self.sh.as_deref() else {
            return PlacedAhead::default();
        };
        let mut guard = sh.lock();
        let QpSlot::Live(conn) = &mut *guard else {
            return PlacedAhead::default();
        };
        conn.place_ahead(ahead, payload)
    }

    pub(super) fn rx_copied(&self) -> u64 {
        if self.is_closing() {
            return 0;
        }
        match self.sh.as_deref().map(|sh| sh.lock()) {
            Some(g) => match &*g {
                QpSlot::Live(conn) => conn.rx_copied(),
                _ => 0,
            },
            None => 0,
        }
    }

    /// Posted WRs of its QP into its engine, if it is live and something is posted; saying
    /// where the work came from. `stats` counts the looks at the post rings and the posts that
    /// went straight into the connection.
    pub(super) fn drain_posted(&mut self, stats: &mut WorkerStats) -> Drained {
        if !self.is_live() {
            return Drained::Nothing;
        }
        let Some(sh) = self.sh.as_ref() else {
            return Drained::Nothing;
        };
        stats.post_ring_reads += 1;
        if sh.sq_ring.is_empty() && sh.rq_ring.is_empty() {
            // A post that went straight into the connection (driven mode: `Qp::post_send` and
            // `post_recv` through `QpShared::direct_slot`): nothing to drain, but the engine
            // has new work. The load first, so a QP posted to through its rings costs no
            // read-modify-write here.
            if sh.posted_direct.load(Ordering::Relaxed)
                && sh.posted_direct.swap(false, Ordering::Acquire)
            {
                stats.posts_direct += 1;
                self.marks.look_again();
                return Drained::Direct;
            }
            return Drained::Nothing;
        }
        if let QpSlot::Live(conn) = &mut *sh.lock() {
            sh.drain_posts(conn);
            self.marks.look_again();
            return Drained::Rings;
        }
        Drained::Nothing
    }

    /// Phase 5 for this connection: a finished handshake makes it live; then everything its
    /// socket received goes into the engine (MPA deframing, placement), and a FIN becomes the
    /// engine's EOF. `worker` and `tcp` name it in log lines. True if something moved.
    pub(super) fn deliver(
        &mut self,
        s: &mut tcp::Socket<'static>,
        now: Instant,
        stats: &mut WorkerStats,
        worker: usize,
        tcp: &TcpConfig,
    ) -> bool {
        let mut work = false;
        match self.state {
            CState::Live => {}
            CState::Connecting => {
                if s.state() != tcp::State::Established {
                    return false;
                }
                self.state = CState::Live;
                // WRs posted while it connected: their flags were taken by passes that
                // skipped it.
                self.drain_posted(stats);
                work = true;
            }
            CState::Closing(_) => return false,
        }
        let Some(sh) = self.sh.as_ref() else {
            return work;
        };
        if !s.can_recv() && (self.eof || s.may_recv() || s.state() == tcp::State::Established) {
            return work;
        }
        // What the engine does with the bytes may queue frames for the staged path (an MPA
        // Reply, a TERMINATE): `transmit` looks again.
        self.marks.look_again();
        let mut guard = sh.lock();
        let QpSlot::Live(conn) = &mut *guard else {
            return work;
        };
        // Everything smoltcp has (two pieces for a wrapped buffer).
        while s.can_recv() {
            let n = s
                .recv(|b| {
                    conn.on_bytes(b, now);
                    (b.len(), b.len())
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            work = true;
        }
        if !self.eof && !s.may_recv() && s.state() != tcp::State::Established {
            self.eof = true;
            log_given_up(s, stats, worker, tcp);
            conn.on_eof();
            work = true;
        }
        work
    }

    /// Phase 6, first half, for this connection: its engine's timers, and its output staged
    /// when it cannot be framed in place. `now` is the pass clock. Returns the octets staged;
    /// `checks` counts the looks under the QP lock.
    pub(super) fn stage(&mut self, now: Instant, checks: &mut u64) -> usize {
        if !self.is_live() || self.out_pos < self.out.len() {
            return 0;
        }
        if self.marks.tx_checked.is_some() && self.marks.timer_at.is_none_or(|t| now < t) {
            return 0;
        }
        let Some(sh) = self.sh.as_ref() else { return 0 };
        *checks += 1;
        let mut guard = sh.lock();
        let QpSlot::Live(conn) = &mut *guard else {
            return 0;
        };
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
            self.marks.dirty = true;
        }
        self.out.clear();
        self.out_pos = 0;
        self.ends.clear();
        if conn.can_transmit_direct() {
            // FPDUs are framed straight into the socket ([`Conn::feed`]).
            self.marks.tx_checked = Some(now);
            self.marks.timer_at = conn.poll_timeout();
            self.marks.tx_idle = !conn.has_tx_work();
            return 0;
        }
        self.marks.look_again();
        conn.poll_transmit_records(&mut self.out, &mut self.ends);
        self.out.len()
    }

    /// Phase 6, second half, for this connection: staged bytes, or FPDUs framed in place, into
    /// its socket `s` (aligned with segments when `align`, RFC 5044 Appendix A). Returns
    /// (octets into the socket, octets staged meanwhile); sets `wrapped` as [`feed_direct`].
    pub(super) fn feed(
        &mut self,
        s: &mut tcp::Socket<'static>,
        dev: &mut DpdkDevice,
        emss: usize,
        align: bool,
        wrapped: &mut bool,
    ) -> (usize, usize) {
        if !self.may_feed() {
            return (0, 0);
        }
        if self.sh.is_none() {
            // A rejecting responder: the Reply, then close.
            let room = dev.ring_room(s);
            return (feed_all(self, s, room), 0);
        }
        if self.has_staged() {
            // The ring space that may be written (free, and no frame points into it).
            let room = dev.ring_room(s);
            let n = if align {
                feed_segment(self, s, emss, room)
            } else {
                feed_all(self, s, room)
            };
            return (n, 0);
        }
        self.marks.dirty = true;
        let (direct, staged, fed) = feed_direct(self, s, emss, align, dev, wrapped);
        (direct + fed, staged)
    }

    /// Whether [`Conn::feed`] may have something to write (the worker asks before it looks its
    /// socket up): live, and something staged or an engine not known to be idle.
    pub(super) fn may_feed(&self) -> bool {
        self.is_live() && !(self.marks.tx_idle && self.sh.is_some() && !self.has_staged())
    }

    /// Staged output not yet in the socket.
    fn has_staged(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Whether another egress pass of this phase could move something of its now: staged
    /// bytes, or octets smoltcp left unsent (its burst ended) where something is new (a
    /// segment, framing, the sweep).
    pub(super) fn wants_another_pass(&self, s: &tcp::Socket, sweeping: bool) -> bool {
        self.is_live()
            && (self.has_staged()
                || ((self.touched || !self.marks.tx_idle || sweeping) && s.send_unsent() > 0))
    }

    /// Phase 7 for this connection: completions to the CQs, events to the CM, and its close:
    /// the socket closed once the application asked (or the engine failed, or the peer's FIN
    /// came) and the staged bytes are out; a closing connection removed per invariant 4.
    pub(super) fn reap(
        &mut self,
        s: &mut tcp::Socket<'static>,
        now: Instant,
        stats: &mut WorkerStats,
    ) -> Reaped {
        let mut r = Reaped::default();
        match self.state {
            CState::Closing(since) => {
                match closing_verdict(since, &mut self.close_drained, ClosingSocket::of(s), now) {
                    Closing::Keep => {}
                    Closing::AckOwed => r.visit = true,
                    Closing::Remove => r.remove = true,
                }
            }
            CState::Connecting => {
                let sh = self.sh.as_ref().expect("connecting has a QP");
                if !s.is_open() || sh.disconnect.load(Ordering::Acquire) {
                    log::warn!("dataplane: TCP connect failed");
                    self.finish_engine(&mut stats.mpa_crc_errors);
                    if let Some(sh) = self.sh.as_ref() {
                        sh.set_closed();
                    }
                    r.remove = true;
                }
            }
            CState::Live => {
                let drained = !self.has_staged();
                // The QP is taken out of the Conn for the reap and put back (no reference count
                // traffic on every pass): the worker still holds one reference.
                let close = match self.sh.take() {
                    None => drained || !s.may_send(),
                    Some(sh) => {
                        // Nothing touched since its last reap: no new completion or event;
                        // only the application can want it closed.
                        let close = if self.needs_reap(&sh) {
                            self.marks.dirty = false;
                            let (w, close) = reap_engine(&self.events, &sh, stats);
                            r.work |= w;
                            close
                        } else {
                            false
                        };
                        // What the engine queued while the staged bytes waited for the socket
                        // (a TERMINATE, RFC 5040 §7.1) goes out before the FIN.
                        if close && drained && !self.eof {
                            r.staged = self.stage_rest(&sh, now);
                        }
                        self.sh = Some(sh);
                        if r.staged > 0 {
                            r.work = true;
                            r.visit = true;
                        }
                        self.eof || (close && drained && r.staged == 0)
                    }
                };
                if close {
                    s.close();
                    r.rx_copied = self.finish_engine(&mut stats.mpa_crc_errors);
                    r.closed = true;
                    self.state = CState::Closing(now);
                    r.work = true;
                }
            }
        }
        r
    }

    /// Whether [`Conn::reap`] has anything to do for a live connection with QP `sh` (taken out
    /// of it or not): something touched its engine since the last reap, or its application
    /// asked to close or left. A connection that has seen EOF is always reaped.
    pub(super) fn needs_reap(&self, sh: &Arc<QpShared>) -> bool {
        self.marks.dirty || close_asked(sh)
    }

    /// Whether the completions phase can skip it without reading its socket: live, no EOF,
    /// and nothing to reap.
    pub(super) fn reap_skippable(&self) -> bool {
        match (&self.state, &self.sh, self.eof) {
            (CState::Live, Some(sh), false) => !self.needs_reap(sh),
            _ => false,
        }
    }

    /// The connection ended: final completions and events. Returns the octets its engine
    /// copied on receive (for the worker's copy count). The QP is marked closed by the caller
    /// (invariant 3).
    fn finish_engine(&mut self, crc_errors: &mut u64) -> u64 {
        let Some(sh) = self.sh.as_ref() else { return 0 };
        let mut copied = 0;
        if let QpSlot::Live(conn) = &mut *sh.lock() {
            pump::finish(sh, conn, |ev| forward(&self.events, crc_errors, ev));
            copied = conn.rx_copied();
        } else if let Some(e) = &self.events {
            let _ = e.try_send(ConnEvent::Closed);
        }
        copied
    }

    /// A closing connection's engine may still hold output (queued after the bytes staged
    /// last): stage it, unless closing began [`CLOSE_FLUSH`] ago. Returns the octets staged.
    fn stage_rest(&mut self, sh: &Arc<QpShared>, now: Instant) -> usize {
        let since = *self.closing_since.get_or_insert(now);
        if now.duration_since(since) > CLOSE_FLUSH {
            return 0;
        }
        let QpSlot::Live(conn) = &mut *sh.lock() else {
            return 0;
        };
        self.out.clear();
        self.out_pos = 0;
        self.ends.clear();
        conn.poll_transmit_records(&mut self.out, &mut self.ends);
        self.out.len()
    }
}

/// A connection's socket gave up (`[tcp] user_timeout_ms`, keep-alives unanswered): counted
/// and logged as the RFC names it.
fn log_given_up(s: &tcp::Socket, stats: &mut WorkerStats, worker: usize, tcp: &TcpConfig) {
    let peer = || {
        s.remote_endpoint()
            .map_or_else(|| "?".to_string(), |e| e.to_string())
    };
    if s.user_timeouts() > 0 {
        stats.tcp_user_timeouts += 1;
        log::warn!(
            "dataplane: worker {worker}: connection to {}: nothing acknowledged for \
             tcp.user_timeout_ms = {}: given up (RST; RFC 9293 3.8.3)",
            peer(),
            tcp.user_timeout_ms
        );
    }
    if s.keep_alive_timeouts() > 0 {
        stats.tcp_keepalive_timeouts += 1;
        log::warn!(
            "dataplane: worker {worker}: connection to {}: {} keep-alives {} ms apart \
             unanswered (tcp.keepalive_probes, tcp.keepalive_ms): given up (RST; RFC 9293 \
             3.8.4)",
            peer(),
            tcp.keepalive_probes,
            tcp.keepalive_ms
        );
    }
}

/// The application asked to close `sh`'s connection, or left it (the worker holds the only
/// reference).
pub(super) fn close_asked(sh: &Arc<QpShared>) -> bool {
    sh.disconnect.load(Ordering::Acquire) || Arc::strong_count(sh) <= 1
}

/// Completions to the CQs and events to the connection manager. Returns (did work, the
/// connection should close once its bytes are out).
fn reap_engine(
    events: &Option<Sender<ConnEvent>>,
    sh: &Arc<QpShared>,
    stats: &mut WorkerStats,
) -> (bool, bool) {
    let mut guard = sh.lock();
    let QpSlot::Live(conn) = &mut *guard else {
        return (false, true);
    };
    let work = pump::events(sh, conn, |ev| {
        forward(events, &mut stats.mpa_crc_errors, ev)
    });
    // One reference is the worker's (the caller took it out of the Conn).
    (work, pump::close_wanted(sh, conn, 1))
}

/// An event to the connection manager's waiter, counting TERMINATEs for MPA CRC errors.
fn forward(events: &Option<Sender<ConnEvent>>, crc_errors: &mut u64, ev: ConnEvent) {
    *crc_errors += u64::from(ev == ConnEvent::TerminateSent(TermCause::MPA_CRC));
    if let Some(e) = events {
        let _ = e.try_send(ev);
    }
}

/// Frame the connection's next FPDUs straight into the socket's transmit ring: each ULPDU is
/// gathered from registered memory to the place TCP sends (and retransmits) it from, the CRC
/// computed there: one copy per payload octet before the device (docs/datapath.md "Copies").
///
/// With `align` (RFC 5044 Appendix A: segments begin with an FPDU header) the socket cuts
/// segments at the FPDU ends marked here (the vendored smoltcp's `tx_records`), and only what
/// the peer's window admits now is framed, so no FPDU waits behind a window smaller than
/// itself; an FPDU is cut smaller where the window or the ring's contiguous room is smaller
/// than a full one. Where the ring wraps with less than [`MIN_DIRECT_FPDU`] contiguous, one
/// segment's FPDUs are framed into the connection's staging buffer instead and sent from there
/// (smoltcp gathers a segment across the wrap). Returns (octets framed into the ring, octets
/// framed into the staging buffer, octets of those written to the ring); sets `wrapped` when
/// framing stopped at the end of the ring's contiguous room with more room after the wrap.
fn feed_direct(
    c: &mut Conn,
    s: &mut tcp::Socket<'static>,
    emss: usize,
    align: bool,
    dev: &mut DpdkDevice,
    wrapped: &mut bool,
) -> (usize, usize, usize) {
    let Some(sh) = c.sh.as_ref() else {
        return (0, 0, 0);
    };
    if !s.may_send() {
        return (0, 0, 0);
    }
    let limit = if align {
        let unsent = s.send_unsent();
        let room = s.send_window_left().saturating_sub(unsent);
        if room < MIN_DIRECT_FPDU {
            if s.send_queue() > 0 {
                // Wait for the ACK that opens the window.
                return (0, 0, 0);
            }
            // A window this small with nothing in flight does not grow by waiting: one small
            // FPDU goes in and TCP sends what the window allows.
            MIN_DIRECT_FPDU
        } else {
            room
        }
    } else {
        usize::MAX
    };
    // Free and not referenced by a frame in flight (transmit by reference); looked at only
    // once the window admits an FPDU (the scan is per frame in flight).
    let free = dev.ring_room(s);
    if free < MIN_DIRECT_FPDU {
        return (0, 0, 0);
    }
    let mut guard = sh.lock();
    let QpSlot::Live(conn) = &mut *guard else {
        return (0, 0, 0);
    };
    if !conn.can_transmit_direct() {
        return (0, 0, 0);
    }
    c.ends.clear();
    let ends = &mut c.ends;
    // Whether the engine was offered room for an FPDU in place: then it wrote all it had
    // (it cuts a data FPDU to the room), and writing nothing means it has nothing to send.
    let mut offered = false;
    let direct = s
        .send(|ring| {
            let n = ring.len().min(limit).min(free);
            if n < MIN_DIRECT_FPDU {
                return (0, 0);
            }
            offered = true;
            let mut out = SliceBuf::new(&mut ring[..n]);
            let w = conn.transmit_into(&mut out, Some(&mut *ends));
            // Stopped by the end of the ring's contiguous room, not by the window or the free
            // room: the next call frames on after the wrap.
            *wrapped |= w > 0 && ring.len() < limit.min(free);
            (w, w)
        })
        .unwrap_or(0);
    // Offered room, the engine framed what it had: with nothing left, the egress passes stop
    // offering it room (and taking its lock) until something gives it work.
    if offered {
        c.marks.tx_idle = !conn.has_tx_work();
    }
    if direct == 0 && offered {
        return (0, 0, 0);
    }
    if direct > 0 {
        if align {
            for &e in c.ends.iter() {
                s.push_tx_record_end_before(direct - e);
            }
        }
        c.ends.clear();
        return (direct, 0, 0);
    }
    // The contiguous room before the ring wraps is too small for an FPDU: stage one
    // segment's worth and let the ring take it across the wrap.
    let n = limit
        .min(free)
        .min(emss.min(s.remote_mss()).max(MIN_DIRECT_FPDU));
    c.out.clear();
    c.out.resize(n, 0);
    c.ends.clear();
    let w = {
        let mut out = SliceBuf::new(&mut c.out[..]);
        conn.transmit_into(&mut out, Some(&mut c.ends));
        out.len()
    };
    c.out.truncate(w);
    c.out_pos = 0;
    drop(guard);
    if w == 0 {
        return (0, 0, 0);
    }
    let fed = if align {
        feed_segment(c, s, emss, free)
    } else {
        feed_all(c, s, free)
    };
    (0, w, fed)
}

/// Without alignment (`tcp.fpdu_alignment = false`) and for a rejecting responder's Reply:
/// everything the socket takes. Returns the octets written.
fn feed_all(c: &mut Conn, s: &mut tcp::Socket<'static>, room: usize) -> usize {
    let mut fed = 0;
    while c.out_pos < c.out.len() && s.can_send() && fed < room {
        let end = c.out.len().min(c.out_pos + (room - fed));
        match s.send_slice(&c.out[c.out_pos..end]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                c.out_pos += n;
                fed += n;
            }
        }
    }
    fed
}

/// RFC 5044 Appendix A (and §4.2: an FPDU fits one segment): give smoltcp the next segment's
/// payload as whole FPDUs, so that the segment it cuts begins with an FPDU header.
///
/// smoltcp starts every segment at SND.NXT and fills it with up to min(MSS, window) queued
/// octets. So the worker writes into the socket only when nothing is unsent, and at most the
/// whole records that fit that room (several small FPDUs may share a segment: packing is
/// allowed). Returns the octets written.
///
/// Exceptions, each keeping the connection moving rather than aligned: a record larger than a
/// segment (the peer announced an MSS below the EMSS MULPDU was derived from, or the MPA
/// startup frames) goes in whole and TCP splits it; a window smaller than the next FPDU with
/// nothing in flight will not grow by waiting for ACKs, so the FPDU goes in and TCP splits it.
/// Retransmissions after a timeout are cut by smoltcp from SND.UNA and need not be aligned.
fn feed_segment(
    c: &mut Conn,
    s: &mut tcp::Socket<'static>,
    emss: usize,
    ring_room: usize,
) -> usize {
    if c.out_pos >= c.out.len() || !s.may_send() || s.send_unsent() > 0 {
        return 0;
    }
    let segment = emss.min(s.remote_mss()).max(1);
    let room = segment.min(s.send_window_left());
    // Records still to go; bytes after the last recorded end (none today) count as one more.
    let first = c.ends.partition_point(|&e| e <= c.out_pos);
    let ends = c.ends[first..]
        .iter()
        .copied()
        .chain((c.ends.last().copied().unwrap_or(0) < c.out.len()).then_some(c.out.len()));
    let mut end = c.out_pos;
    let mut next = c.out.len();
    for e in ends {
        if e - c.out_pos <= room {
            end = e;
        } else {
            next = e;
            break;
        }
    }
    if end == c.out_pos {
        if next - c.out_pos > segment || s.send_queue() == 0 {
            end = next;
        } else {
            // Wait for the ACK that opens the window.
            return 0;
        }
    }
    // `ring_room`: free and not referenced by a frame in flight (transmit by reference).
    let free = ring_room.min(s.send_capacity() - s.send_queue());
    if end - c.out_pos > free {
        if free < s.send_capacity() {
            // Wait for ACKs to free the room rather than split a record across segments.
            return 0;
        }
        // A record larger than the whole transmit buffer (a small configured tcp.tx_buffer):
        // it cannot be aligned anyway.
        end = c.out_pos + free;
    }
    match s.send_slice(&c.out[c.out_pos..end]) {
        Ok(n) => {
            c.out_pos += n;
            n
        }
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::iface::SocketSet;

    fn socket_set() -> (SocketSet<'static>, SocketHandle) {
        let mut set = SocketSet::new(Vec::new());
        let s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 64]),
            tcp::SocketBuffer::new(vec![0; 64]),
        );
        let h = set.add(s);
        (set, h)
    }

    fn sock(finished: bool, open: bool, unacknowledged: bool) -> ClosingSocket {
        ClosingSocket {
            finished,
            open,
            unacknowledged,
        }
    }

    /// Invariant 4: a finished close is removed at once; the ACK of the peer's FIN owed in
    /// TIME-WAIT keeps it however long it has been.
    #[test]
    fn a_finished_close_is_removed_and_an_owed_ack_keeps_it() {
        let t0 = Instant::now();
        let mut drained = None;
        let late = t0 + CLOSE_DATA_LINGER * 2;
        assert_eq!(
            closing_verdict(t0, &mut drained, sock(true, false, false), t0),
            Closing::Remove
        );
        assert_eq!(
            closing_verdict(t0, &mut drained, sock(false, false, false), late),
            Closing::AckOwed
        );
        assert_eq!(drained, None);
    }

    /// Invariant 4: data the peer has not acknowledged keeps the socket for
    /// CLOSE_DATA_LINGER after the close, not for CLOSE_LINGER.
    #[test]
    fn unacknowledged_data_is_kept_for_the_data_linger() {
        let t0 = Instant::now();
        let mut drained = None;
        let s = sock(false, true, true);
        let after_linger = t0 + CLOSE_LINGER * 2;
        assert_eq!(
            closing_verdict(t0, &mut drained, s, after_linger),
            Closing::Keep
        );
        assert_eq!(drained, None, "not drained while data is unacknowledged");
        let after_data_linger = t0 + CLOSE_DATA_LINGER + Duration::from_millis(1);
        assert_eq!(
            closing_verdict(t0, &mut drained, s, after_data_linger),
            Closing::Remove
        );
    }

    /// Invariant 4: once only the FIN is unacknowledged, CLOSE_LINGER counts from when that
    /// was first seen, not from the close.
    #[test]
    fn the_fin_linger_counts_from_when_the_data_was_acknowledged() {
        let t0 = Instant::now();
        let mut drained = None;
        let s = sock(false, true, false);
        let t1 = t0 + CLOSE_DATA_LINGER; // long after the close: the data took that long
        assert_eq!(closing_verdict(t0, &mut drained, s, t1), Closing::Keep);
        assert_eq!(drained, Some(t1));
        assert_eq!(
            closing_verdict(t0, &mut drained, s, t1 + CLOSE_LINGER),
            Closing::Keep
        );
        assert_eq!(
            closing_verdict(
                t0,
                &mut drained,
                s,
                t1 + CLOSE_LINGER + Duration::from_millis(1)
            ),
            Closing::Remove
        );
        assert_eq!(drained, Some(t1), "the first sighting is kept");
    }

    /// Invariants 2 and 3: a rejecting responder whose socket can no longer send closes on
    /// its first reap (moving to Closing, its close reported so the FIN goes out), and a
    /// closed socket is removed on the next; it never goes back to Live.
    #[test]
    fn a_connection_moves_from_live_to_closing_to_removed() {
        let (mut set, h) = socket_set();
        let mut stats = WorkerStats::default();
        let mut c = Conn::rejecting(h, vec![1, 2, 3]);
        assert!(c.is_live() && c.has_staged());
        let now = Instant::now();
        let r = c.reap(set.get_mut::<tcp::Socket>(h), now, &mut stats);
        assert!(r.closed && r.work && !r.remove);
        assert!(c.is_closing() && !c.is_live());
        let r = c.reap(set.get_mut::<tcp::Socket>(h), now, &mut stats);
        assert!(r.remove && !r.closed, "a closed socket's close is finished");
        assert!(c.is_closing());
    }

    /// A socket the listener gave up on starts closing, and is quiet for the transmit phase.
    #[test]
    fn a_startup_given_up_on_is_closing_and_quiet() {
        let (_set, h) = socket_set();
        let c = Conn::closing(h, Instant::now());
        assert!(c.is_closing() && c.is_quiet() && !c.may_feed());
        assert!(
            !c.reap_skippable(),
            "the completions phase must see its close through"
        );
    }

    /// Invariant 5: a new connection is not quiet (touched, its engine unchecked and
    /// unreaped); once checked idle, reaped and untouched, it is; anything that may give its
    /// engine work (`look_again`) makes it visited again.
    #[test]
    fn quiet_means_checked_reaped_untouched_and_nothing_staged() {
        let (_set, h) = socket_set();
        let mut c = Conn::rejecting(h, Vec::new());
        assert!(!c.is_quiet());
        c.post_flag = true;
        c.touched = false;
        c.marks.tx_checked = Some(Instant::now());
        c.marks.tx_idle = true;
        c.marks.dirty = false;
        assert!(c.is_quiet());
        c.marks.timer_at = Some(Instant::now());
        assert!(!c.is_quiet(), "a pending engine timer is work");
        c.marks.timer_at = None;
        c.out = vec![0; 4];
        assert!(!c.is_quiet() && c.may_feed(), "staged bytes are work");
        c.out.clear();
        assert!(c.is_quiet());
        c.look_again();
        assert!(!c.is_quiet() && c.marks.dirty && !c.marks.tx_idle);
    }

    /// Invariant 1: staging happens only once what was staged before is in the socket.
    #[test]
    fn nothing_is_staged_over_bytes_still_staged() {
        let (_set, h) = socket_set();
        let mut c = Conn::rejecting(h, vec![9; 8]);
        let mut checks = 0;
        assert_eq!(c.stage(Instant::now(), &mut checks), 0);
        assert_eq!((c.out.len(), c.out_pos, checks), (8, 0, 0));
    }
}
