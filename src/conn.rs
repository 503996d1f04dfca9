//! One iWARP connection as a sans-IO engine: MPA startup (RFC 5044 §7, RFC 6581), then Full
//! MPA/DDP operation where every ULPDU the [`QpEngine`] produces is framed into an FPDU and every
//! FPDU received is deframed, CRC-checked and handed to the QP engine.
//!
//! The caller (a backend driver: kernel TCP thread, DPDK worker, test harness) moves bytes:
//! `on_bytes` with what the stream delivered, `poll_transmit` for what to send, `poll_event` /
//! `poll_completion` for what happened, and `should_close` once the stream must be closed
//! (after a TERMINATE or a failed startup, RFC 5040 §6.1: the LLP stream is closed after a
//! TERMINATE has been sent).

use std::collections::VecDeque;
use std::time::Instant;

use crate::mpa::{
    DeframeError, Deframer, Framer, MpaConfig, Negotiated, PeerRequest, Role, Startup,
    StartupError, StartupEvent, Ulpdu,
};
use crate::rdma::MIN_ULPDU_ROOM;
use crate::rdma::{
    AheadCounts, InlineData, MemoryTable, Opcode, PdId, PostError, QpConfig, QpEngine, QpEvent,
    QpState, RecvWr, RtrKind, RtrRole, SendWr, WcStatus, WorkCompletion,
};
use crate::wire::ddp::TAGGED_HEADER_LEN;
use crate::wire::terminate::TermCause;
use crate::wire::txbuf::TxBuf;

/// The largest FPDU payload we accept from a peer. RFC 5044 §4.1: ULPDU_Length is 16 bits; siw
/// sends FPDUs no larger than a segment but accepts larger ones, so accept up to the field limit.
pub const MAX_RX_ULPDU: usize = 65535;

/// How many octets one [`Connection::poll_transmit`] call appends at most (it stops after the
/// FPDU that reaches this). A peer's Read Requests can ask for as much as the registered regions
/// hold; the responses are produced as the transport drains them, not all at once.
pub const TX_BUDGET: usize = 256 * 1024;

/// Parameters of a connection (both MPA and the QP behind it).
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// MPA startup preferences (revision, CRC, markers, IRD/ORD, peer-to-peer, private data).
    pub mpa: MpaConfig,
    /// Protection domain of the QP.
    pub pd: PdId,
    /// Send and receive queue depths.
    pub sq_depth: usize,
    /// Receive queue depth: receive WRs held at once (before and after establishment).
    pub rq_depth: usize,
    /// The transport's effective MSS; MULPDU is derived from it so that each FPDU fits one
    /// segment (RFC 5044 §4.2, App. A).
    pub emss: usize,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            mpa: MpaConfig::default(),
            pd: PdId(0),
            sq_depth: 256,
            rq_depth: 256,
            emss: 1448,
        }
    }
}

/// What happened on the connection (completions are polled separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    /// Responder: a valid MPA Request arrived; call [`Connection::accept`] or [`Connection::reject`].
    Request(PeerRequest),
    /// MPA startup completed (and, in peer-to-peer mode, the RTR exchange): data may flow.
    Established(Negotiated),
    /// Initiator: the responder rejected the connection.
    Rejected {
        /// The responder's ULP private data from the Reject frame (RFC 5044 §7.1.4).
        private_data: Vec<u8>,
        /// The responder's IRD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ird: Option<u16>,
        /// The responder's ORD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ord: Option<u16>,
    },
    /// Startup failed.
    Failed(StartupError),
    /// The peer terminated the connection (RFC 5040 §4.8).
    TerminateReceived(TermCause),
    /// We terminated the connection with this cause.
    TerminateSent(TermCause),
    /// The stream ended.
    Closed,
}

/// Full MPA/DDP operation.
struct DataPhase {
    framer: Framer,
    deframer: Deframer,
    qp: QpEngine,
    /// Held back until the RTR completes (peer-to-peer) so `Established` means "data may flow".
    established: Option<Negotiated>,
}

/// What [`Connection::place_ahead`] took from a segment's front.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlacedAhead {
    /// Tagged FPDUs placed.
    pub fpdus: usize,
    /// Their octets (headers, payload, pad, CRC).
    pub octets: usize,
}

/// One connection.
pub struct Connection {
    cfg: ConnConfig,
    mem: MemoryTable,
    startup: Startup,
    data: Option<DataPhase>,
    /// Work requests posted before the QP engine exists (ibverbs allows post_recv in INIT/RTR).
    early_recv: VecDeque<RecvWr>,
    early_send: VecDeque<(SendWr, Option<InlineData>)>,
    /// Completions of early send WRs the QP engine refused at establishment (e.g. a Read when
    /// the negotiated ORD is 0): they complete in error rather than vanish.
    refused: VecDeque<WorkCompletion>,
    events: VecDeque<ConnEvent>,
    /// Bytes to send that were produced outside `poll_transmit` (startup frames, TERMINATE).
    tx: Vec<u8>,
    /// Scratch buffer for one outgoing ULPDU, with markers only (without them the QP engine
    /// gathers each ULPDU straight into its FPDU): empty until a marker connection sends, so
    /// a connection costs no 64 KiB here for it (docs/rpc.md "What a connection costs in memory").
    ulpdu: Vec<u8>,
    close: bool,
    closed_reported: bool,
}

impl Connection {
    /// An initiator (active side): the MPA Request is queued at once.
    pub fn initiator(cfg: ConnConfig, mem: MemoryTable, now: Instant) -> Self {
        let startup = Startup::initiator(cfg.mpa.clone(), now);
        Self::new(cfg, mem, startup)
    }

    /// A responder (passive side): waits for the MPA Request.
    pub fn responder(cfg: ConnConfig, mem: MemoryTable, now: Instant) -> Self {
        let startup = Startup::responder(cfg.mpa.clone(), now);
        Self::new(cfg, mem, startup)
    }

    fn new(cfg: ConnConfig, mem: MemoryTable, startup: Startup) -> Self {
        let mut c = Connection {
            cfg,
            mem,
            startup,
            data: None,
            early_recv: VecDeque::new(),
            early_send: VecDeque::new(),
            refused: VecDeque::new(),
            events: VecDeque::new(),
            tx: Vec::new(),
            ulpdu: Vec::new(),
            close: false,
            closed_reported: false,
        };
        c.drive_startup();
        c
    }

    /// The configuration this connection was created with.
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// True once the stream should be closed: a TERMINATE went out or came in, or startup
    /// failed. The caller transmits whatever `poll_transmit` still returns, then closes.
    pub fn should_close(&self) -> bool {
        self.close
    }

    /// Whether Full MPA/DDP operation has started and the QP is ready to send.
    pub fn is_established(&self) -> bool {
        matches!(&self.data, Some(d) if d.established.is_none() && d.qp.state() == QpState::Rts)
    }

    /// Whether MPA startup is still running ([`Connection::on_bytes`] and the timeouts use
    /// their `now` only then).
    pub fn in_startup(&self) -> bool {
        self.data.is_none()
    }

    /// Feed bytes the stream delivered.
    pub fn on_bytes(&mut self, mut input: &[u8], now: Instant) {
        if self.close {
            return;
        }
        if self.data.is_none() {
            let used = self.startup.on_bytes(input, now).min(input.len());
            input = &input[used..];
            self.drive_startup();
            if self.data.is_none() {
                if !input.is_empty() && !self.close {
                    // RFC 5044 §7.1.2 rule 5/6: nothing but the MPA frame may arrive before
                    // startup completes (a responder never sends before its Reply is sent).
                    log::warn!(
                        "mpa: {} bytes arrived before MPA startup completed; closing",
                        input.len()
                    );
                    self.fail(StartupError::Malformed("data before MPA startup completed"));
                }
                return;
            }
        }
        if input.is_empty() {
            return;
        }
        let Some(d) = self.data.as_mut() else { return };
        let qp = &mut d.qp;
        let res = if d.deframer.has_placed_ahead() {
            d.deframer.push_ulpdus(input, &mut |u| match u {
                Ulpdu::Whole(b) => qp.on_ulpdu(b),
                Ulpdu::Placed { head, payload_len } => qp.on_ulpdu_placed(head, payload_len),
            })
        } else {
            d.deframer.push(input, &mut |ulpdu| qp.on_ulpdu(ulpdu))
        };
        if let Err(e) = res {
            self.on_deframe_error(e);
        }
        self.drive_qp();
    }

    /// Place the tagged data of a segment that arrived ahead of its turn (RFC 5044 App. A.3):
    /// `seg` is its payload, `ahead` octets past the next octet [`Connection::on_bytes`] will
    /// be given (the octets between are buffered in order or still missing). The whole
    /// FPDUs at its front that are certainly FPDUs (`Deframer::fpdus_ahead`: CRC32c matches,
    /// markers off) and carry an RDMA Write or a Read Response that passes every check its
    /// turn would make ([`QpEngine::place_ahead`]) are placed now, one after the other up to
    /// the first that is not; untagged messages and control wait for their turn. Returns
    /// how many octets at the front of `seg` were so taken: the caller does not pass them
    /// to `on_bytes` (their place in the stream is passed over unread, and the in-order pass
    /// makes the checks and completions of their turn from the headers kept).
    pub fn place_ahead(&mut self, ahead: u64, seg: &[u8]) -> PlacedAhead {
        let mut taken = PlacedAhead::default();
        if self.close {
            return taken;
        }
        let Some(d) = self.data.as_mut() else {
            return taken;
        };
        let fpdus: smallvec::SmallVec<[_; 8]> = d.deframer.fpdus_ahead(seg, ahead).collect();
        for (at, ulpdu) in fpdus {
            // Asked first, kept after: what the deframer would not pass over stays in the
            // stream, and is placed in its turn.
            if !d.deframer.may_place_ahead(at) || !d.qp.place_ahead(ulpdu) {
                break;
            }
            let head = &ulpdu[..TAGGED_HEADER_LEN];
            if !d
                .deframer
                .placed_ahead(at, head, ulpdu.len() - TAGGED_HEADER_LEN)
            {
                break;
            }
            taken.fpdus += 1;
            taken.octets += at.len;
        }
        taken
    }

    /// Tagged data placed ahead of its turn so far ([`Connection::place_ahead`]).
    pub fn ahead_counts(&self) -> AheadCounts {
        self.data
            .as_ref()
            .map_or(AheadCounts::default(), |d| d.qp.ahead_counts())
    }

    /// The stream reached end of file.
    pub fn on_eof(&mut self) {
        if self.data.is_none() {
            self.startup.on_eof();
            self.drive_startup();
        } else if let Some(d) = self.data.as_mut() {
            d.qp.flush();
        }
        self.drive_qp();
        self.close = true;
        if !self.closed_reported {
            self.closed_reported = true;
            self.events.push_back(ConnEvent::Closed);
        }
    }

    /// Append the bytes ready to go out to `out`: at most about [`TX_BUDGET`] octets per call
    /// (whole FPDUs); call again once they are sent for the rest.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) {
        self.transmit(out, None);
    }

    /// [`Connection::poll_transmit`], also pushing onto `ends` the offset in `out` just past
    /// each record appended: every FPDU, and the MPA startup frames as one record. A sender that
    /// controls TCP segmentation uses it to start every segment with an FPDU header and put
    /// only whole FPDUs in a segment (RFC 5044 Appendix A; §4.2 sizes FPDUs to the EMSS).
    pub fn poll_transmit_records(&mut self, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
        self.transmit(out, Some(ends));
    }

    fn transmit(&mut self, out: &mut Vec<u8>, mut ends: Option<&mut Vec<usize>>) {
        let budget_end = out.len().saturating_add(TX_BUDGET);
        let mark = |out: &Vec<u8>, ends: &mut Option<&mut Vec<usize>>| {
            if let Some(e) = ends.as_deref_mut() {
                if e.last().copied().unwrap_or(0) < out.len() {
                    e.push(out.len());
                }
            }
        };
        if self.data.is_none() {
            self.startup.poll_transmit(out);
            self.drive_startup();
            mark(out, &mut ends);
        }
        out.append(&mut self.tx);
        mark(out, &mut ends);
        if let Some(d) = self.data.as_mut() {
            if d.framer.markers_enabled() {
                while out.len() < budget_end {
                    self.ulpdu.clear();
                    if !d.qp.poll_ulpdu(&mut self.ulpdu) {
                        break;
                    }
                    d.framer.emit(&self.ulpdu, &[], out);
                    mark(out, &mut ends);
                }
            } else {
                // The QP engine gathers each ULPDU straight into its FPDU: one copy fewer.
                while out.len() < budget_end {
                    let qp = &mut d.qp;
                    if !d
                        .framer
                        .frame_into(out, |o| qp.poll_ulpdu_max(o, usize::MAX))
                    {
                        break;
                    }
                    mark(out, &mut ends);
                }
            }
        }
        self.drive_qp();
    }

    /// Whether [`Connection::transmit_into`] can produce the next octets: Full MPA operation
    /// with markers off and no startup frame pending. Otherwise use `poll_transmit`.
    pub fn can_transmit_direct(&self) -> bool {
        self.tx.is_empty() && matches!(&self.data, Some(d) if !d.framer.markers_enabled())
    }

    /// Whether [`Connection::transmit_into`] may write anything now: false only when the
    /// engine certainly has nothing to frame and no event to report (a driver skips the call).
    pub fn has_tx_work(&self) -> bool {
        !self.tx.is_empty() || self.data.as_ref().is_some_and(|d| d.qp.has_ulpdu())
    }

    /// Frame whole FPDUs into `out` until its room cannot hold one more of at least
    /// [`MIN_ULPDU_ROOM`] octets of ULPDU: each ULPDU is gathered from registered memory
    /// straight into place and the CRC computed there (RFC 5044 §4.1), so over a [`SliceBuf`]
    /// on the TCP transmit ring every payload octet is copied once. FPDUs are cut smaller than
    /// the MULPDU where the room left is smaller (any DDP segment size up to the MULPDU is
    /// allowed, RFC 5041 §5). Returns the octets written; `ends` (if given) gets the offset past
    /// each FPDU. Does nothing unless [`Connection::can_transmit_direct`].
    ///
    /// [`SliceBuf`]: crate::wire::txbuf::SliceBuf
    pub fn transmit_into<B: TxBuf + ?Sized>(
        &mut self,
        out: &mut B,
        mut ends: Option<&mut Vec<usize>>,
    ) -> usize {
        if !self.can_transmit_direct() {
            return 0;
        }
        let start = out.len();
        if let Some(d) = self.data.as_mut() {
            while let Some(max) = Framer::max_ulpdu_for_room(out.room()) {
                if max < MIN_ULPDU_ROOM {
                    break;
                }
                let qp = &mut d.qp;
                if !d.framer.frame_into(out, |o| qp.poll_ulpdu_max(o, max)) {
                    break;
                }
                if let Some(e) = ends.as_deref_mut() {
                    e.push(out.len());
                }
            }
        }
        self.drive_qp();
        out.len() - start
    }

    /// Octets the receive path copied so far: FPDUs reassembled from split pieces plus
    /// payload placed into registered memory (the dataplane's copies-per-byte count).
    pub fn rx_copied(&self) -> u64 {
        self.data
            .as_ref()
            .map_or(0, |d| d.deframer.reassembled() + d.qp.rx_placed())
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// Next work completion, if any.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        if let Some(wc) = self.refused.pop_front() {
            return Some(wc);
        }
        self.data.as_mut()?.qp.poll_completion()
    }

    /// Post a send-queue work request (queued until the connection is established).
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        match self.data.as_mut() {
            Some(d) => d.qp.post_send(wr),
            None => self.queue_early_send(wr, None),
        }
    }

    /// Hold a send WR (and its inline payload) until the connection is established; it is
    /// checked and posted then.
    fn queue_early_send(
        &mut self,
        wr: SendWr,
        inline: Option<InlineData>,
    ) -> Result<(), PostError> {
        if self.close {
            return Err(PostError::BadState);
        }
        if self.early_send.len() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        self.early_send.push_back((wr, inline));
        Ok(())
    }

    /// Post a Send or RDMA Write carrying `data` itself (`IBV_SEND_INLINE`, at most
    /// [`crate::rdma::MAX_INLINE_DATA`] octets; [`QpEngine::post_send_inline`]); queued until
    /// the connection is established, like [`Connection::post_send`].
    pub fn post_send_inline(
        &mut self,
        wr_id: u64,
        opcode: Opcode,
        data: &[u8],
        signaled: bool,
    ) -> Result<(), PostError> {
        let (wr, checked, data) = crate::rdma::qp::inline_wr(wr_id, opcode, data, signaled)?;
        self.post_send_checked(wr, checked, Some(data))
    }

    /// [`Connection::post_send`] of a WR `validate_send` passed already (the verbs post ring):
    /// not checked against the memory table a second time once established.
    pub(crate) fn post_send_checked(
        &mut self,
        wr: SendWr,
        checked: crate::rdma::qp::SendChecked,
        inline: Option<InlineData>,
    ) -> Result<(), PostError> {
        match self.data.as_mut() {
            Some(d) => d.qp.post_send_checked(wr, checked, inline),
            None => self.queue_early_send(wr, inline),
        }
    }

    /// [`Connection::post_recv`] of a WR `validate_recv` passed already (capacity `cap`).
    pub(crate) fn post_recv_checked(&mut self, wr: RecvWr, cap: u64) -> Result<(), PostError> {
        match self.data.as_mut() {
            Some(d) => d.qp.post_recv_checked(wr, cap),
            None => self.post_recv(wr),
        }
    }

    /// How many more send-queue WRs [`Connection::post_send`] takes now (any number when it
    /// would refuse them anyway: closed, terminated).
    pub fn send_room(&self) -> usize {
        match self.data.as_ref() {
            Some(d) => d.qp.send_room(),
            None if self.close => usize::MAX,
            None => self.cfg.sq_depth.saturating_sub(self.early_send.len()),
        }
    }

    /// How many more receive WRs [`Connection::post_recv`] takes now (as `send_room`).
    pub fn recv_room(&self) -> usize {
        match self.data.as_ref() {
            Some(d) => d.qp.recv_room(),
            None if self.close => usize::MAX,
            None => self.cfg.rq_depth.saturating_sub(self.early_recv.len()),
        }
    }

    /// Post a receive-queue work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        match self.data.as_mut() {
            Some(d) => d.qp.post_recv(wr),
            None if self.close => Err(PostError::BadState),
            None if self.early_recv.len() >= self.cfg.rq_depth => Err(PostError::QueueFull),
            None => {
                self.early_recv.push_back(wr);
                Ok(())
            }
        }
    }

    /// Responder: accept the pending MPA Request (with optional private data overriding the
    /// configured one).
    pub fn accept(&mut self, private_data: Option<Vec<u8>>) {
        self.startup.accept(private_data);
        self.drive_startup();
    }

    /// Responder: reject the pending MPA Request with private data (RFC 5044 §7.1.2).
    pub fn reject(&mut self, private_data: Vec<u8>) {
        self.startup.reject(private_data);
        self.drive_startup();
    }

    /// Terminate the connection from the ULP (RFC 5040 §6.1): a TERMINATE with `cause` goes out.
    pub fn terminate(&mut self, cause: TermCause) {
        if let Some(d) = self.data.as_mut() {
            d.qp.terminate(cause);
            self.drive_qp();
        } else {
            self.close = true;
        }
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.data.is_none() && !self.close {
            self.startup.poll_timeout()
        } else {
            None
        }
    }

    /// Time passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.data.is_none() && !self.close {
            self.startup.handle_timeout(now);
            self.drive_startup();
        }
    }

    fn fail(&mut self, e: StartupError) {
        self.close = true;
        self.events.push_back(ConnEvent::Failed(e));
    }

    fn on_deframe_error(&mut self, e: DeframeError) {
        // RFC 5044 §8: on an FPDU error (CRC, marker, length) MPA reports to the ULP and the
        // connection is torn down; RFC 5040 §4.8 / RFC 6580: a TERMINATE names the LLP layer.
        log::warn!("mpa: {e}: nothing of the FPDU placed; sending TERMINATE and closing");
        if let Some(d) = self.data.as_mut() {
            d.qp.terminate(e.cause());
        }
    }

    /// Turn startup events into connection events; enter Full MPA/DDP operation when done.
    fn drive_startup(&mut self) {
        while let Some(ev) = self.startup.poll_event() {
            match ev {
                StartupEvent::Request(r) => self.events.push_back(ConnEvent::Request(r)),
                StartupEvent::Established(n) => self.enter_data_phase(n),
                StartupEvent::Rejected {
                    private_data,
                    peer_ird,
                    peer_ord,
                } => {
                    self.close = true;
                    self.events.push_back(ConnEvent::Rejected {
                        private_data,
                        peer_ird,
                        peer_ord,
                    });
                }
                StartupEvent::Failed(e) => {
                    log::warn!("mpa: startup failed: {e}");
                    self.fail(e);
                }
                // RFC 6581 §9.1 (code 6), §9.2 (code 7), §9.3 (code 5): the frames were
                // exchanged, but the negotiated model cannot be honoured. The TERMINATE is an
                // RDMAP message, so it goes out as the first FPDU (framed as negotiated, before
                // any RTR) and the stream is closed after it; the ULP never sees Established.
                StartupEvent::Terminate { cause, negotiated } => {
                    log::warn!(
                        "mpa: startup ends in TERMINATE (layer {:?} type {:#x} code {:#04x})",
                        cause.layer,
                        cause.etype,
                        cause.code
                    );
                    let e = if cause == TermCause::MPA_INSUFFICIENT_IRD {
                        StartupError::InsufficientIrd
                    } else if cause == TermCause::MPA_NO_MATCHING_RTR {
                        StartupError::NoMatchingRtr
                    } else {
                        StartupError::Malformed("local catastrophic error during startup")
                    };
                    self.fail(e);
                    self.enter_data_phase_to_terminate(negotiated, cause);
                }
            }
        }
    }

    /// Start Full MPA operation only to send `cause` as the first FPDU and close.
    fn enter_data_phase_to_terminate(&mut self, mut n: Negotiated, cause: TermCause) {
        n.rtr = None;
        self.early_send.clear();
        self.enter_data_phase_inner(n, false);
        if let Some(d) = self.data.as_mut() {
            d.qp.terminate(cause);
        }
        self.drive_qp();
    }

    fn enter_data_phase(&mut self, n: Negotiated) {
        self.enter_data_phase_inner(n, true);
    }

    fn enter_data_phase_inner(&mut self, n: Negotiated, report: bool) {
        let mulpdu = Framer::mulpdu_for_emss(self.cfg.emss, n.markers_tx);
        let rtr = n.rtr.map(|k| match n.role {
            Role::Initiator => RtrRole::Initiator(k),
            Role::Responder => RtrRole::Responder(k),
        });
        let qp_cfg = QpConfig {
            mulpdu,
            pd: self.cfg.pd,
            ird: u32::from(n.ird),
            ord: u32::from(n.ord),
            sq_depth: self.cfg.sq_depth,
            rq_depth: self.cfg.rq_depth,
            rtr,
        };
        let mut qp = QpEngine::new(qp_cfg, self.mem.clone());
        if n.revision == 0 {
            // RFC 5044 App. C: an RDMAC peer (MPA Rev 0) speaks DDP/RDMAP version 0.
            qp.use_rdmac_version();
        }
        if n.role == Role::Responder && n.rtr.is_some() {
            // RFC 6581 §9.2: the initiator may send any of the RTR kinds we advertised.
            let kinds: Vec<RtrKind> = [RtrKind::Send, RtrKind::Write, RtrKind::Read]
                .into_iter()
                .filter(|&k| n.rtr_accept.contains(k))
                .collect();
            qp.accept_rtr_kinds(&kinds);
        }
        for wr in self.early_recv.drain(..) {
            if let Err(e) = qp.post_recv(wr) {
                log::warn!("conn: receive posted before establishment refused: {e}");
            }
        }
        for (wr, inline) in self.early_send.drain(..) {
            let (wr_id, opcode) = (wr.wr_id, wr.opcode.wc_opcode());
            let r = match inline {
                Some(d) => qp.post_send_inline(wr.wr_id, wr.opcode, &d, wr.signaled),
                None => qp.post_send(wr),
            };
            if let Err(e) = r {
                log::warn!("conn: send WR {wr_id} posted before establishment refused: {e}");
                self.refused.push_back(WorkCompletion {
                    wr_id,
                    status: match e {
                        PostError::ZeroOrd => WcStatus::LocQpOpErr,
                        PostError::Invalid(_) => WcStatus::LocProtErr,
                        _ => WcStatus::WrFlushErr,
                    },
                    opcode,
                    byte_len: 0,
                    invalidated_rkey: None,
                    solicited: false,
                });
            }
        }
        let held = if rtr.is_some() { Some(n.clone()) } else { None };
        if held.is_none() && report {
            self.events.push_back(ConnEvent::Established(n.clone()));
        }
        self.data = Some(DataPhase {
            framer: Framer::new(n.crc_tx, n.markers_tx),
            deframer: Deframer::new(n.crc_rx, n.markers_rx, MAX_RX_ULPDU),
            qp,
            established: held,
        });
        self.drive_qp();
    }

    /// Turn QP events into connection events.
    fn drive_qp(&mut self) {
        let Some(d) = self.data.as_mut() else { return };
        while let Some(ev) = d.qp.poll_event() {
            match ev {
                QpEvent::RtrComplete => {
                    if let Some(n) = d.established.take() {
                        self.events.push_back(ConnEvent::Established(n));
                    }
                }
                QpEvent::TerminateReceived(c) => {
                    log::warn!(
                        "rdmap: peer sent TERMINATE layer {:?} type {:#x} code {:#04x}",
                        c.layer,
                        c.etype,
                        c.code
                    );
                    self.close = true;
                    self.events.push_back(ConnEvent::TerminateReceived(c));
                }
                QpEvent::TerminateSent(c) => {
                    self.close = true;
                    self.events.push_back(ConnEvent::TerminateSent(c));
                }
            }
        }
    }
}
