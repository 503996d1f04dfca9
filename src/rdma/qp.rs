//! The sans-IO queue-pair engine: RDMAP over DDP (RFC 5040, RFC 5041).
//!
//! Behaviour the connection layer relies on:
//! - Local SGEs are validated at post time (lkey valid, same PD, bounds; LOCAL_WRITE for receive
//!   buffers and Read sinks): a bad SGE is refused with `PostError::Invalid` and nothing is queued.
//! - An RDMA Read takes one sink: several SGEs are accepted only when they are contiguous in the
//!   same region (like siw's single sink SGE).
//! - IRD and ORD are hard limits (RFC 5040 §6.1, §6.5; RFC 6581 §9.1): a Read Request beyond IRD
//!   is answered by TERMINATE (DDP untagged "no buffer" on QN 1), so IRD 0 refuses every Read
//!   (the zero-length RTR Read of RFC 6581 §9.2 is not counted); with ORD 0 a Read is refused at
//!   post time (`PostError::ZeroOrd`); with ORD n > 0 further Reads wait on the send queue
//!   (bounded by its depth) until a Read Response completes one.
//! - Send/Write completions are queued when the last ULPDU is handed out (RFC 5041 §5.4), in
//!   submission order behind earlier Reads (RFC 5040 §5.5 rule 15). A received TERMINATE that
//!   names one of our messages (its DDP header) turns that message's not-yet-polled completion
//!   into `RemAccessErr`/`RemOpErr`: the ULP had not been informed yet, and RFC 5040 §6.2.1 says
//!   outstanding messages SHOULD be considered completed in error.
//! - After a TERMINATE (sent or received) the engine drops every further inbound segment
//!   (RFC 5041 §7.1) except a peer TERMINATE, and transmits nothing but its own TERMINATE.

use std::collections::VecDeque;

use super::memory::{Access, MemoryError, MemoryTable, PdId};
use super::wr::{
    InlineData, Opcode, PostError, RecvWr, SendWr, SgList, Sge, WcOpcode, WcStatus, WorkCompletion,
    MAX_INLINE_DATA,
};
use crate::mpa::RtrKind;
use crate::wire::ddp::{
    BufferRepr, HeaderRepr, Segment, DDP_VERSION, QN_READ_REQUEST, QN_SEND, QN_TERMINATE,
    TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::wire::rdmap::{
    control_opcode, control_version, RdmapOpcode, ReadRequest, ReadRequestRepr, TerminateRepr,
    RDMAP_VERSION,
};
use crate::wire::terminate::{BitOrder, TermCause};
use crate::wire::txbuf::TxBuf;

/// The smallest ULPDU limit [`QpEngine::poll_ulpdu_max`] honours: RFC 5044 §4.5's minimum
/// MULPDU (128 octets), more than any fixed-size ULPDU (a TERMINATE with the offending DDP and
/// RDMAP headers is 58 octets).
pub const MIN_ULPDU_ROOM: usize = 128;

/// The QP's role in peer-to-peer RTR exchange (RFC 6581 §9.2, §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrRole {
    /// Send this RTR before anything else.
    Initiator(RtrKind),
    /// Hold every outgoing ULPDU until an RTR of kind `0` arrives (fencing, RFC 6581 §4.3); any other
    /// first message is answered by TERMINATE (layer LLP, type MPA, code 0x07).
    Responder(RtrKind),
}

/// QP states (RFC 5040 §6; verbs RTS / ERROR / closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Waiting for the peer's RTR (responder in peer-to-peer mode). Posting is allowed; nothing is sent.
    AwaitRtr,
    /// Ready to send.
    Rts,
    /// A TERMINATE was sent or received; the stream must be closed after the queued TERMINATE
    /// is transmitted. Outstanding work requests are flushed.
    Terminated,
}

/// Non-completion events the engine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpEvent {
    /// The peer's RTR arrived (responder) or ours was queued (initiator): the connection is up.
    RtrComplete,
    /// The peer sent a TERMINATE (decoded tolerantly, siw's bit order included).
    TerminateReceived(TermCause),
    /// We queued a TERMINATE for this cause; close after transmitting it.
    TerminateSent(TermCause),
}

/// Parameters of a QP engine.
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// Largest ULPDU (DDP header + payload) the framer accepts (MULPDU, RFC 5044 §4.2 / App. A).
    pub mulpdu: usize,
    /// Protection domain: every STag this QP places into or reads from must belong to it.
    pub pd: PdId,
    /// Inbound Read Queue depth: Read Requests we serve at once (RFC 5040 §6.5); a hard limit,
    /// 0 refuses every Read Request (TERMINATE).
    pub ird: u32,
    /// Outbound Read depth: Read Requests we may have outstanding (RFC 6581 §9.1); a hard limit,
    /// 0 refuses RDMA Reads at post time (`PostError::ZeroOrd`).
    pub ord: u32,
    /// Send queue depth: send WRs in flight (posted, not yet completed) at once.
    pub sq_depth: usize,
    /// Receive queue depth: posted receive WRs (untagged buffers of QN 0) held at once.
    pub rq_depth: usize,
    /// Peer-to-peer RTR role negotiated by MPA (RFC 6581 §9.2); `None` for client-server.
    pub rtr: Option<RtrRole>,
}

/// Identifies a message we sent, so a peer TERMINATE quoting its DDP header can be attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxIdent {
    Tagged { stag: u32 },
    Untagged { qn: u32, msn: u32 },
}

/// A posted send-queue WR, kept in submission order until its completion is released.
struct Inflight {
    seq: u64,
    wr_id: u64,
    opcode: WcOpcode,
    signaled: bool,
    byte_len: u32,
    done: Option<WcStatus>,
    ident: Option<TxIdent>,
}

/// The SQ message being segmented: the cursor of the WR at the front of `sq`, which stays
/// there (its SGE list or inline payload read in place) until the message's last FPDU is
/// framed. Moving the WR out of the queue into the cursor, and the cursor into `tx_cur`, cost
/// two copies of a few hundred octets a message (about 110 of a 64 B Send's instructions,
/// `scripts/instructions`).
struct TxMsg {
    seq: Option<u64>,
    opcode: RdmapOpcode,
    /// Tagged: STag and base TO.
    stag: u32,
    to: u64,
    /// Untagged: QN, MSN, Invalidate STag.
    qn: u32,
    msn: u32,
    inv_stag: u32,
    /// Fixed payload (Read Request header) instead of the WR's SGEs or inline payload.
    fixed: Option<ReadRequestRepr>,
    len: u32,
    sent: u32,
    /// Gather cursor: SGE index and offset inside it.
    sge_idx: usize,
    sge_off: u32,
}

/// An RDMA Read we requested (ORD slot).
struct OutRead {
    /// None for the RTR Read (no WR).
    seq: Option<u64>,
    sink_stag: u32,
    sink_to: u64,
    len: u32,
}

/// An inbound Read Request being served (IRD slot).
struct InRead {
    sink_stag: u32,
    sink_to: u64,
    src_stag: u32,
    src_to: u64,
    len: u32,
    sent: u32,
}

/// A posted receive.
struct PostedRecv {
    wr: RecvWr,
    cap: u64,
    /// Set when the L segment arrived: (length, solicited, invalidate STag).
    done: Option<(u32, bool, Option<u32>)>,
}

/// Tagged data placed ahead of its turn (RFC 5044 App. A.3, [`QpEngine::place_ahead`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AheadCounts {
    /// Tagged FPDUs placed out of order.
    pub fpdus: u64,
    /// Their payload octets.
    pub octets: u64,
    /// Payload octets the in-order pass found placed already and did not copy again (the
    /// copy out of the reassembly buffer they were spared).
    pub recognised: u64,
}

/// One queue pair's DDP/RDMAP state.
pub struct QpEngine {
    cfg: QpConfig,
    mem: MemoryTable,
    state: QpState,
    next_seq: u64,
    inflight: VecDeque<Inflight>,
    /// Posted (seq, wr, inline payload), not yet framed to the end: the front is the message
    /// `tx_cur` segments while that is set.
    sq: VecDeque<(u64, SendWr, Option<InlineData>)>,
    tx_cur: Option<TxMsg>,
    out_reads: VecDeque<OutRead>,
    irrq: VecDeque<InRead>,
    rq: VecDeque<PostedRecv>,
    /// Next MSN to send / expected to receive, per QN 0..=2 (RFC 5041 §5.3: start at 1).
    msn_tx: [u32; 3],
    msn_rx: [u32; 3],
    term_out: Option<Vec<u8>>,
    /// The ULPDU size limit of the current `poll_ulpdu_max` call.
    limit: usize,
    term_received: bool,
    cq: VecDeque<(WorkCompletion, Option<TxIdent>)>,
    events: VecDeque<QpEvent>,
    rtr_send: Option<RtrKind>,
    /// Responder: acceptable RTR kinds (send, write, read).
    rtr_accept: [bool; 3],
    /// Fairness toggle between SQ traffic and Read Responses.
    prefer_resp: bool,
    /// Status for the receive WR an error is attributed to (index in `rq`).
    rq_err: Option<(usize, WcStatus)>,
    /// Payload octets placed into registered memory (tagged and untagged): the receive-side
    /// copies the engine makes, for the dataplane's copies-per-byte count.
    rx_placed: u64,
    /// What [`QpEngine::place_ahead`] placed, and what of it the in-order pass then found
    /// placed already ([`QpEngine::ahead_counts`]).
    ahead: AheadCounts,
    /// The tagged segment being processed was placed ahead of its turn already, with this
    /// many octets of payload ([`QpEngine::on_ulpdu_placed`]): check it, do not copy it.
    placed_already: Option<usize>,
    /// RFC 5044 App. C: the peer is an RDMAC RNIC (MPA Rev 0): DDP and RDMAP version 0 on the
    /// wire in both directions ([`QpEngine::use_rdmac_version`]).
    rdmac: bool,
}

fn rtr_index(k: RtrKind) -> usize {
    match k {
        RtrKind::Send => 0,
        RtrKind::Write => 1,
        RtrKind::Read => 2,
    }
}

/// RFC 5044 App. C: swap DDP version (DV, low bits of octet 0) and RDMAP version (RV, top bits
/// of octet 1) between 0 (RDMAC) and 1 (IETF); 2 and 3 stay invalid. Its own inverse.
fn swap_wire_version(ulpdu: &mut [u8]) {
    if let [ddp_ctrl, rdmap_ctrl, ..] = ulpdu {
        *ddp_ctrl ^= 0x01;
        *rdmap_ctrl ^= 0x40;
    }
}

/// Map a tagged placement failure to RFC 5041 §7.2 (access rights: RFC 5040 §7 code, as siw
/// does, since DDP defines none).
fn tagged_cause(e: MemoryError, wrap: bool) -> TermCause {
    match e {
        MemoryError::InvalidStag | MemoryError::Invalidated => TermCause::DDP_TAGGED_INVALID_STAG,
        MemoryError::Bounds if wrap => TermCause::DDP_TAGGED_TO_WRAP,
        MemoryError::Bounds => TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION,
        MemoryError::PdMismatch => TermCause::DDP_TAGGED_STAG_NOT_ASSOCIATED,
        MemoryError::Access => TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION,
    }
}

/// Map a Read Request source failure to RFC 5040 §7.2 / §4.8 Remote Protection codes.
fn read_cause(e: MemoryError) -> TermCause {
    match e {
        MemoryError::InvalidStag | MemoryError::Invalidated => TermCause::RDMAP_INVALID_STAG,
        MemoryError::Bounds => TermCause::RDMAP_BASE_OR_BOUNDS_VIOLATION,
        MemoryError::Access => TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION,
        MemoryError::PdMismatch => TermCause::RDMAP_STAG_NOT_ASSOCIATED,
    }
}

fn status_for(cause: TermCause) -> WcStatus {
    if cause.is_access_error() {
        WcStatus::RemAccessErr
    } else {
        WcStatus::RemOpErr
    }
}

impl QpEngine {
    /// A new engine; with `cfg.rtr = Some(Responder(_))` it starts in `AwaitRtr`.
    pub fn new(cfg: QpConfig, mem: MemoryTable) -> Self {
        let mut rtr_accept = [false; 3];
        let mut rtr_send = None;
        let state = match cfg.rtr {
            Some(RtrRole::Responder(k)) => {
                rtr_accept[rtr_index(k)] = true;
                QpState::AwaitRtr
            }
            Some(RtrRole::Initiator(k)) => {
                rtr_send = Some(k);
                QpState::Rts
            }
            None => QpState::Rts,
        };
        QpEngine {
            cfg,
            mem,
            state,
            next_seq: 0,
            inflight: VecDeque::new(),
            sq: VecDeque::new(),
            tx_cur: None,
            out_reads: VecDeque::new(),
            irrq: VecDeque::new(),
            rq: VecDeque::new(),
            msn_tx: [1; 3],
            msn_rx: [1; 3],
            term_out: None,
            limit: usize::MAX,
            term_received: false,
            cq: VecDeque::new(),
            events: VecDeque::new(),
            rtr_send,
            rtr_accept,
            prefer_resp: false,
            rq_err: None,
            rx_placed: 0,
            placed_already: None,
            ahead: AheadCounts::default(),
            rdmac: false,
        }
    }

    /// RFC 5044 App. C (permissive mode): speak the RDMA Consortium's DDP/RDMAP version 0 with an
    /// RDMAC peer (MPA Rev 0). The headers are the IETF ones with DV = 0 and RV = 0: every
    /// ULPDU we emit carries version 0, a received one must carry version 0 (a version 1
    /// segment is refused as an invalid DDP/RDMAP version, App. C.1: no mixing), and the engine
    /// otherwise runs unchanged. Call before the first ULPDU moves.
    pub fn use_rdmac_version(&mut self) {
        self.rdmac = true;
    }

    /// Responder: also accept these RTR kinds (RFC 6581 §9.2 when several were offered).
    pub fn accept_rtr_kinds(&mut self, kinds: &[RtrKind]) {
        for &k in kinds {
            self.rtr_accept[rtr_index(k)] = true;
        }
    }

    /// How many more send-queue WRs [`QpEngine::post_send`] takes now (any number once the QP
    /// is terminated: posts then fail at once).
    pub fn send_room(&self) -> usize {
        if self.state == QpState::Terminated {
            return usize::MAX;
        }
        self.cfg.sq_depth.saturating_sub(self.inflight.len())
    }

    /// How many more receive WRs [`QpEngine::post_recv`] takes now (as `send_room`).
    pub fn recv_room(&self) -> usize {
        if self.state == QpState::Terminated {
            return usize::MAX;
        }
        self.cfg.rq_depth.saturating_sub(self.rq.len())
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    fn ord(&self) -> usize {
        self.cfg.ord as usize
    }
    fn ird(&self) -> usize {
        self.cfg.ird as usize
    }

    fn check_sges(&self, sges: &[Sge], need: Access) -> Result<u64, PostError> {
        check_sges(&self.mem, self.cfg.pd, sges, need)
    }

    /// Post a send-queue WR (RFC 5040 §5). SGEs are validated now; see the module docs.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        self.admit_send(&wr.opcode)?;
        let checked = validate_send(&self.mem, self.cfg.pd, &wr)?;
        self.enqueue_send(wr, checked, None);
        Ok(())
    }

    /// Whether the send queue takes a WR of `opcode` now: not terminated, not full, and no
    /// RDMA Read on a connection that negotiated ORD 0.
    fn admit_send(&self, opcode: &Opcode) -> Result<(), PostError> {
        if self.state == QpState::Terminated {
            return Err(PostError::BadState);
        }
        if self.inflight.len() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        if self.cfg.ord == 0 && matches!(opcode, Opcode::Read { .. }) {
            log::warn!("rdmap: RDMA Read refused: the negotiated ORD is 0");
            return Err(PostError::ZeroOrd);
        }
        Ok(())
    }

    /// Post a Send (any Send opcode) or an RDMA Write whose payload is `data` itself
    /// (`IBV_SEND_INLINE`): at most [`MAX_INLINE_DATA`] octets, copied into the work request now,
    /// so nothing of it is read from registered memory later. An RDMA Read carries no payload
    /// and is refused (`Invalid`).
    pub fn post_send_inline(
        &mut self,
        wr_id: u64,
        opcode: Opcode,
        data: &[u8],
        signaled: bool,
    ) -> Result<(), PostError> {
        let (wr, checked, data) = inline_wr(wr_id, opcode, data, signaled)?;
        self.post_send_checked(wr, checked, Some(data))
    }

    /// [`QpEngine::post_send`] of a WR [`validate_send`] passed already (the verbs layer checks
    /// a WR when the application posts it, before the driver hands it over): the state and
    /// queue checks, not the memory lookups again. A region deregistered since is caught
    /// where its bytes are gathered or placed.
    pub(crate) fn post_send_checked(
        &mut self,
        wr: SendWr,
        checked: SendChecked,
        inline: Option<InlineData>,
    ) -> Result<(), PostError> {
        self.admit_send(&wr.opcode)?;
        self.enqueue_send(wr, checked, inline);
        Ok(())
    }

    fn enqueue_send(
        &mut self,
        wr: SendWr,
        (total, opcode, ident): SendChecked,
        inline: Option<InlineData>,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.inflight.push_back(Inflight {
            seq,
            wr_id: wr.wr_id,
            opcode,
            signaled: wr.signaled,
            byte_len: total,
            done: None,
            ident,
        });
        self.sq.push_back((seq, wr, inline));
    }

    /// Post a receive buffer for one untagged message on QN 0 (RFC 5041 §5.3).
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        self.admit_recv()?;
        let cap = self.check_sges(&wr.sg_list, Access::LOCAL_WRITE)?;
        self.post_recv_checked(wr, cap)
    }

    /// Whether the receive queue takes a WR now: not terminated, not full.
    fn admit_recv(&self) -> Result<(), PostError> {
        if self.state == QpState::Terminated {
            return Err(PostError::BadState);
        }
        if self.rq.len() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        Ok(())
    }

    /// [`QpEngine::post_recv`] of a WR [`validate_recv`] passed already (with the capacity it
    /// returned), as [`QpEngine::post_send_checked`].
    pub(crate) fn post_recv_checked(&mut self, wr: RecvWr, cap: u64) -> Result<(), PostError> {
        self.admit_recv()?;
        self.rq.push_back(PostedRecv {
            wr,
            cap,
            done: None,
        });
        Ok(())
    }

    // ------------------------------------------------------------------ completions

    fn inflight_mut(&mut self, seq: u64) -> Option<&mut Inflight> {
        let head = self.inflight.front()?.seq;
        let i = usize::try_from(seq.checked_sub(head)?).ok()?;
        self.inflight.get_mut(i)
    }

    // Inlined on purpose: it runs for every completion, and the compiler's own choice not to
    // inline it (nor `Framer::frame_into`) after unrelated changes cost the RPC NULL path.
    #[inline]
    fn complete_seq(&mut self, seq: u64, status: WcStatus, ident: Option<TxIdent>) {
        if let Some(f) = self.inflight_mut(seq) {
            f.done = Some(status);
            if ident.is_some() {
                f.ident = ident;
            }
        }
        self.release();
    }

    /// Release finished WRs in submission order (RFC 5040 §5.5 rule 15).
    fn release(&mut self) {
        while self.inflight.front().is_some_and(|f| f.done.is_some()) {
            let Some(f) = self.inflight.pop_front() else {
                break;
            };
            let status = f.done.unwrap_or(WcStatus::GeneralErr);
            if f.signaled || status != WcStatus::Success {
                self.cq.push_back((
                    WorkCompletion {
                        wr_id: f.wr_id,
                        status,
                        opcode: f.opcode,
                        byte_len: f.byte_len,
                        invalidated_rkey: None,
                        solicited: false,
                    },
                    f.ident,
                ));
            }
        }
    }

    /// Release receive completions in MSN order.
    fn release_recv(&mut self) {
        while let Some((len, solicited, inv)) = self.rq.front().and_then(|r| r.done) {
            let Some(r) = self.rq.pop_front() else { break };
            self.msn_rx[0] = self.msn_rx[0].wrapping_add(1);
            if let Some(stag) = inv {
                if let Err(e) = self.mem.invalidate(stag, self.cfg.pd) {
                    // Pre-checked on arrival; only a concurrent local change gets here.
                    log::warn!("rdmap: Send with Invalidate: STag {stag:#x} {e}");
                }
            }
            self.cq.push_back((
                WorkCompletion {
                    wr_id: r.wr.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: len,
                    invalidated_rkey: inv,
                    solicited,
                },
                None,
            ));
        }
    }

    /// Next work completion.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.cq.pop_front().map(|c| c.0)
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    // ------------------------------------------------------------------ termination

    /// A lower layer (MPA: CRC error, marker error; or the ULP) failed: queue a TERMINATE with
    /// `cause`, flush outstanding work, enter `Terminated` (RFC 5040 §7.1 case 1: no headers).
    pub fn terminate(&mut self, cause: TermCause) {
        self.fail(cause, None, None);
    }

    /// The stream closed: flush every outstanding work request with `WrFlushErr`.
    pub fn flush(&mut self) {
        self.state = QpState::Terminated;
        self.flush_all(None);
    }

    /// Queue our TERMINATE (RFC 5040 §4.8, §7.1), unless one was already sent or received.
    fn fail(
        &mut self,
        cause: TermCause,
        offending: Option<(&[u8], u16)>,
        rr: Option<ReadRequestRepr>,
    ) {
        if self.state == QpState::Terminated {
            log::debug!("rdmap: already terminated; not sending another TERMINATE");
            return;
        }
        log::warn!(
            "rdmap: sending TERMINATE layer {:?} type {:#x} code {:#04x}; nothing of the offending message placed",
            cause.layer,
            cause.etype,
            cause.code
        );
        let msn = self.msn_tx[2];
        self.msn_tx[2] = msn.wrapping_add(1);
        let mut out = Vec::with_capacity(UNTAGGED_HEADER_LEN + 52);
        HeaderRepr {
            last: true,
            ddp_version: DDP_VERSION,
            rdmap_control: RdmapOpcode::Terminate.control(),
            buffer: BufferRepr::Untagged {
                inv_stag: 0,
                qn: QN_TERMINATE,
                msn,
                mo: 0,
            },
        }
        .emit_to_vec(&mut out);
        TerminateRepr::for_cause(cause, offending, rr).emit_to_vec(&mut out);
        self.term_out = Some(out);
        self.events.push_back(QpEvent::TerminateSent(cause));
        self.state = QpState::Terminated;
        self.flush_all(None);
    }

    /// Flush everything outstanding; `attrib` = a peer TERMINATE's cause and the message it named.
    fn flush_all(&mut self, attrib: Option<(TermCause, Option<TxIdent>)>) {
        let named = attrib.and_then(|(c, id)| id.map(|id| (c, id)));
        if let Some((cause, id)) = named {
            for (wc, ident) in self.cq.iter_mut() {
                if *ident == Some(id)
                    && wc.status == WcStatus::Success
                    && wc.opcode != WcOpcode::Recv
                {
                    wc.status = status_for(cause);
                }
            }
        }
        self.tx_cur = None;
        self.sq.clear();
        self.out_reads.clear();
        self.irrq.clear();
        for f in self.inflight.iter_mut() {
            match (f.done, named) {
                (None, Some((cause, id))) if f.ident == Some(id) => {
                    f.done = Some(status_for(cause))
                }
                (Some(WcStatus::Success), Some((cause, id))) if f.ident == Some(id) => {
                    f.done = Some(status_for(cause))
                }
                (None, _) => f.done = Some(WcStatus::WrFlushErr),
                _ => {}
            }
        }
        self.release();
        let rq_err = self.rq_err.take();
        for (i, r) in self.rq.drain(..).enumerate() {
            let status = match rq_err {
                Some((j, s)) if i == j => s,
                _ => WcStatus::WrFlushErr,
            };
            self.cq.push_back((
                WorkCompletion {
                    wr_id: r.wr.wr_id,
                    status,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    invalidated_rkey: None,
                    solicited: false,
                },
                None,
            ));
        }
    }

    // ------------------------------------------------------------------ transmit

    /// Append the next outgoing ULPDU (at most `mulpdu` bytes) to `out`; false if none is ready.
    pub fn poll_ulpdu<B: TxBuf + ?Sized>(&mut self, out: &mut B) -> bool {
        self.poll_ulpdu_max(out, usize::MAX)
    }

    /// Whether [`QpEngine::poll_ulpdu_max`] may have a ULPDU to write, or an event waits:
    /// false only when it certainly has neither (no TERMINATE or RTR queued, no message in
    /// progress or posted, no Read Response owed). A driver that knows this skips offering
    /// transmit room (and the locks that go with it) on passes with nothing to send.
    pub fn has_ulpdu(&self) -> bool {
        self.term_out.is_some()
            || !self.events.is_empty()
            || (self.state == QpState::Rts
                && (self.rtr_send.is_some()
                    || self.tx_cur.is_some()
                    || !self.sq.is_empty()
                    || !self.irrq.is_empty()))
    }

    /// [`QpEngine::poll_ulpdu`] with the ULPDU also no larger than `max` octets (at least
    /// [`MIN_ULPDU_ROOM`], which every fixed-size ULPDU — TERMINATE, Read Request, RTR — fits):
    /// the framer asks for a smaller FPDU where the room left in the TCP transmit ring or
    /// segment is smaller than a full one. Data-carrying messages are cut into DDP segments of
    /// that size (RFC 5041 §5: any segment size up to the MULPDU is allowed).
    pub fn poll_ulpdu_max<B: TxBuf + ?Sized>(&mut self, out: &mut B, max: usize) -> bool {
        let start = out.len();
        let ready = self.poll_ulpdu_max_ietf(out, max);
        if ready && self.rdmac {
            // RFC 5044 App. C: DDP/RDMAP version 0 on the wire to an RDMAC peer.
            swap_wire_version(out.written_mut(start));
        }
        ready
    }

    fn poll_ulpdu_max_ietf<B: TxBuf + ?Sized>(&mut self, out: &mut B, max: usize) -> bool {
        self.limit = max.max(MIN_ULPDU_ROOM);
        if let Some(t) = self.term_out.take() {
            out.put(&t);
            return true;
        }
        if self.state != QpState::Rts {
            return false;
        }
        if let Some(k) = self.rtr_send.take() {
            self.emit_rtr(k, out);
            self.events.push_back(QpEvent::RtrComplete);
            return true;
        }
        let sq_ready = self.tx_cur.is_some()
            || self.sq.front().is_some_and(|(_, wr, _)| {
                !matches!(wr.opcode, Opcode::Read { .. }) || self.out_reads.len() < self.ord()
            });
        let resp_ready = !self.irrq.is_empty();
        // siw cannot interleave segments of two tagged messages (it reports "packet
        // intersection"), so a Write in progress and a Read Response in progress exclude
        // each other; untagged SQ traffic interleaves with responses segment by segment.
        let cur_tagged = self.tx_cur.as_ref().is_some_and(|t| t.opcode.is_tagged());
        let next_tagged = cur_tagged
            || (self.tx_cur.is_none()
                && self
                    .sq
                    .front()
                    .is_some_and(|(_, wr, _)| matches!(wr.opcode, Opcode::Write { .. })));
        let resp_started = self.irrq.front().is_some_and(|r| r.sent > 0);
        let sq_ok = sq_ready && !(next_tagged && resp_started);
        let resp_ok = resp_ready && !cur_tagged;
        let do_resp = match (sq_ok, resp_ok) {
            (false, false) => return false,
            (true, false) => false,
            (false, true) => true,
            (true, true) => self.prefer_resp,
        };
        self.prefer_resp = !do_resp;
        let start = out.len();
        let ok = if do_resp {
            self.emit_read_response(out)
        } else {
            self.emit_sq(out)
        };
        if !ok {
            out.truncate(start);
            if let Some(t) = self.term_out.take() {
                out.put(&t);
                return true;
            }
            return false;
        }
        true
    }

    fn room(&self, hdr: usize) -> u32 {
        let ulpdu = self.cfg.mulpdu.min(self.limit);
        u32::try_from(ulpdu.saturating_sub(hdr).max(1)).unwrap_or(u32::MAX)
    }

    fn emit_rtr<B: TxBuf + ?Sized>(&mut self, k: RtrKind, out: &mut B) {
        // RFC 6581 §9.2 with siw's choices: zero-length Send (QN 0), zero-length Write to
        // STag 1 / TO 0, or zero-length Read Request on QN 1 answered by a zero-length Read
        // Response. The RTR consumes an MSN on its queue.
        let (ctrl, buffer) = match k {
            RtrKind::Send => {
                let msn = self.msn_tx[0];
                self.msn_tx[0] = msn.wrapping_add(1);
                (
                    RdmapOpcode::Send.control(),
                    BufferRepr::Untagged {
                        inv_stag: 0,
                        qn: QN_SEND,
                        msn,
                        mo: 0,
                    },
                )
            }
            RtrKind::Write => (
                RdmapOpcode::RdmaWrite.control(),
                BufferRepr::Tagged { stag: 1, to: 0 },
            ),
            RtrKind::Read => {
                let msn = self.msn_tx[1];
                self.msn_tx[1] = msn.wrapping_add(1);
                self.out_reads.push_back(OutRead {
                    seq: None,
                    sink_stag: 0,
                    sink_to: 0,
                    len: 0,
                });
                (
                    RdmapOpcode::ReadRequest.control(),
                    BufferRepr::Untagged {
                        inv_stag: 0,
                        qn: QN_READ_REQUEST,
                        msn,
                        mo: 0,
                    },
                )
            }
        };
        HeaderRepr {
            last: true,
            ddp_version: DDP_VERSION,
            rdmap_control: ctrl,
            buffer,
        }
        .emit_to(out);
        if k == RtrKind::Read {
            ReadRequestRepr::default().emit_to(out);
        }
    }

    /// Start the SQ WR at the front as a message (it stays in the queue; `tx_cur` holds the
    /// cursor).
    fn start_sq(&mut self) -> Option<TxMsg> {
        let (seq, wr, inline) = self.sq.front()?;
        let (seq, opcode) = (*seq, wr.opcode);
        let len: u32 = match inline {
            // At most MAX_INLINE_DATA (validate_inline).
            Some(d) => d.len() as u32,
            None => wr.sg_list.iter().map(|s| s.length).sum(),
        };
        let mut m = TxMsg {
            seq: Some(seq),
            opcode: RdmapOpcode::Send,
            stag: 0,
            to: 0,
            qn: QN_SEND,
            msn: 0,
            inv_stag: 0,
            fixed: None,
            len,
            sent: 0,
            sge_idx: 0,
            sge_off: 0,
        };
        let send_msn = |s: &mut Self| {
            let msn = s.msn_tx[0];
            s.msn_tx[0] = msn.wrapping_add(1);
            msn
        };
        match opcode {
            Opcode::Send => m.msn = send_msn(self),
            Opcode::SendSe => {
                m.opcode = RdmapOpcode::SendSe;
                m.msn = send_msn(self);
            }
            Opcode::SendInv { inv_stag } => {
                m.opcode = RdmapOpcode::SendInv;
                m.inv_stag = inv_stag;
                m.msn = send_msn(self);
            }
            Opcode::SendSeInv { inv_stag } => {
                m.opcode = RdmapOpcode::SendSeInv;
                m.inv_stag = inv_stag;
                m.msn = send_msn(self);
            }
            Opcode::Write { remote_addr, rkey } => {
                m.opcode = RdmapOpcode::RdmaWrite;
                m.stag = rkey;
                m.to = remote_addr;
            }
            Opcode::Read { remote_addr, rkey } => {
                let msn = self.msn_tx[1];
                self.msn_tx[1] = msn.wrapping_add(1);
                // The Data Sink: the first local SGE of the WR (still at the front).
                let (sink_stag, sink_to) = self
                    .sq
                    .front()
                    .and_then(|(_, wr, _)| wr.sg_list.first())
                    .map_or((0, 0), |s| (s.lkey, s.addr));
                let rr = ReadRequestRepr {
                    sink_stag,
                    sink_to,
                    size: len,
                    src_stag: rkey,
                    src_to: remote_addr,
                };
                m.opcode = RdmapOpcode::ReadRequest;
                m.qn = QN_READ_REQUEST;
                m.msn = msn;
                m.fixed = Some(rr);
                self.out_reads.push_back(OutRead {
                    seq: Some(seq),
                    sink_stag,
                    sink_to,
                    len,
                });
                if let Some(f) = self.inflight_mut(seq) {
                    f.ident = Some(TxIdent::Untagged {
                        qn: QN_READ_REQUEST,
                        msn,
                    });
                }
            }
        }
        Some(m)
    }

    fn emit_sq<B: TxBuf + ?Sized>(&mut self, out: &mut B) -> bool {
        if self.tx_cur.is_none() {
            match self.start_sq() {
                Some(m) => self.tx_cur = Some(m),
                None => return false,
            }
        }
        // The message is worked on where it is: it holds its SGE list inline (a few hundred
        // octets), and moving it out and back for every ULPDU cost two copies of it per FPDU.
        let Some(m) = self.tx_cur.as_ref() else {
            return false;
        };
        let tagged = m.opcode.is_tagged();
        let hdr = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let (chunk, last) = if m.fixed.is_some() {
            (0, true)
        } else {
            let c = (m.len - m.sent).min(self.room(hdr));
            (c, m.sent + c == m.len)
        };
        let buffer = if tagged {
            BufferRepr::Tagged {
                stag: m.stag,
                to: m.to.wrapping_add(u64::from(m.sent)),
            }
        } else {
            BufferRepr::Untagged {
                inv_stag: m.inv_stag,
                qn: m.qn,
                msn: m.msn,
                mo: m.sent,
            }
        };
        HeaderRepr {
            last,
            ddp_version: DDP_VERSION,
            rdmap_control: m.opcode.control(),
            buffer,
        }
        .emit_to(out);
        let pd = self.cfg.pd;
        let Some(m) = self.tx_cur.as_mut() else {
            return false;
        };
        // The WR this message is (start_sq left it at the front).
        let Some((_, wr, inline)) = self.sq.front() else {
            self.tx_cur = None;
            return false;
        };
        if let Some(f) = &m.fixed {
            // Emitted straight into the outgoing FPDU (no buffer per Read Request).
            f.emit_to(out);
        } else if let Some(d) = inline {
            let from = m.sent as usize;
            out.put(&d[from..from + chunk as usize]);
        } else {
            // Gather `chunk` bytes from the SGE list.
            let mut left = chunk;
            while left > 0 {
                let Some(s) = wr.sg_list.get(m.sge_idx).copied() else {
                    break;
                };
                let n = (s.length - m.sge_off).min(left);
                if n > 0 {
                    let r = self.mem.read_append(
                        s.lkey,
                        pd,
                        s.addr + u64::from(m.sge_off),
                        n as usize,
                        Access(0),
                        out,
                    );
                    if let Err(e) = r {
                        log::warn!("rdma: local SGE {s:?} became unusable while sending: {e}");
                        let seq = m.seq;
                        self.tx_cur = None;
                        self.sq.pop_front();
                        if let Some(seq) = seq {
                            self.complete_seq(seq, WcStatus::LocProtErr, None);
                        }
                        self.fail(TermCause::RDMAP_LOCAL_CATASTROPHIC, None, None);
                        return false;
                    }
                }
                m.sge_off += n;
                left -= n;
                if m.sge_off == s.length {
                    m.sge_idx += 1;
                    m.sge_off = 0;
                }
            }
        }
        m.sent += chunk;
        if last {
            let (seq, opcode, stag, qn, msn) = (m.seq, m.opcode, m.stag, m.qn, m.msn);
            self.tx_cur = None;
            self.sq.pop_front();
            if let (Some(seq), false) = (seq, opcode == RdmapOpcode::ReadRequest) {
                let ident = if tagged {
                    TxIdent::Tagged { stag }
                } else {
                    TxIdent::Untagged { qn, msn }
                };
                self.complete_seq(seq, WcStatus::Success, Some(ident));
            }
        }
        true
    }

    fn emit_read_response<B: TxBuf + ?Sized>(&mut self, out: &mut B) -> bool {
        let room = self.room(TAGGED_HEADER_LEN);
        let pd = self.cfg.pd;
        let Some(r) = self.irrq.front_mut() else {
            return false;
        };
        let chunk = (r.len - r.sent).min(room);
        let last = r.sent + chunk == r.len;
        HeaderRepr {
            last,
            ddp_version: DDP_VERSION,
            rdmap_control: RdmapOpcode::ReadResponse.control(),
            buffer: BufferRepr::Tagged {
                stag: r.sink_stag,
                to: r.sink_to.wrapping_add(u64::from(r.sent)),
            },
        }
        .emit_to(out);
        if chunk > 0 {
            let res = self.mem.read_append(
                r.src_stag,
                pd,
                r.src_to + u64::from(r.sent),
                chunk as usize,
                Access::REMOTE_READ,
                out,
            );
            if let Err(e) = res {
                // Validated on arrival; the ULP deregistered or invalidated it since.
                log::warn!(
                    "rdmap: Read source STag {:#x} became unusable: {e}",
                    r.src_stag
                );
                self.fail(read_cause(e), None, None);
                return false;
            }
        }
        r.sent += chunk;
        if last {
            self.irrq.pop_front();
        }
        true
    }

    // ------------------------------------------------------------------ receive

    /// Payload octets placed into registered memory so far (copies per byte on receive).
    pub fn rx_placed(&self) -> u64 {
        self.rx_placed
    }

    /// Process one ULPDU (DDP header + payload, CRC already verified by MPA). Never panics; any
    /// error queues the TERMINATE the RFCs demand (nothing of the offending message is placed).
    pub fn on_ulpdu(&mut self, ulpdu: &[u8]) {
        if self.rdmac {
            // Version 0 is what this connection speaks: present it to the checks as 1 (and a
            // version 1 segment as 0, which they refuse). The copy costs only RDMAC peers.
            let mut v = ulpdu.to_vec();
            swap_wire_version(&mut v);
            return self.on_ulpdu_ietf(&v);
        }
        self.on_ulpdu_ietf(ulpdu)
    }

    /// [`QpEngine::on_ulpdu`] for a tagged ULPDU whose payload [`QpEngine::place_ahead`]
    /// placed already, given by its `head` (its DDP and RDMAP headers, as kept then) and
    /// its payload's length: every check and every effect of its turn (ordering,
    /// completion, errors) as for any other, but no octet is copied.
    pub fn on_ulpdu_placed(&mut self, head: &[u8], payload_len: usize) {
        self.placed_already = Some(payload_len);
        self.on_ulpdu(head);
        self.placed_already = None;
    }

    /// Place a tagged ULPDU that arrived ahead of its turn (RFC 5044 App. A.3: a segment
    /// that came in behind a hole in the TCP stream): DDP allows tagged placement in any
    /// order, while delivery (completions, message order, untagged messages and control)
    /// stays in order (RFC 5041 §5, §7). Only an RDMA Write or a Read Response with payload,
    /// on a live connection speaking RFC 5040 versions, is placed, and only after every
    /// check its turn would make passes (RFC 5041 §7.1, RFC 5040 §7.2: STag, not
    /// invalidated, PD, rights, bounds; a Read Response must also lie within the sink of a
    /// Read we have outstanding). Returns whether it was placed. Anything else is left for
    /// its turn, with nothing reported: the in-order pass judges it then, and terminates
    /// the stream if it must. Nothing completes here.
    pub fn place_ahead(&mut self, ulpdu: &[u8]) -> bool {
        if self.state != QpState::Rts || self.rdmac {
            return false;
        }
        let Ok(seg) = Segment::new_checked(ulpdu) else {
            return false;
        };
        let p = seg.payload();
        if !seg.tagged()
            || p.is_empty()
            || seg.ddp_version() != DDP_VERSION
            || control_version(seg.rdmap_control()) != RDMAP_VERSION
        {
            return false;
        }
        let (stag, to) = (seg.stag(), seg.to());
        let need = match RdmapOpcode::from_u8(control_opcode(seg.rdmap_control())) {
            Some(RdmapOpcode::RdmaWrite) => Access::REMOTE_WRITE,
            Some(RdmapOpcode::ReadResponse) => {
                let within_a_sink = self.out_reads.iter().any(|r| {
                    r.sink_stag == stag
                        && to
                            .checked_sub(r.sink_to)
                            .and_then(|o| o.checked_add(p.len() as u64))
                            .is_some_and(|end| end <= u64::from(r.len))
                });
                if !within_a_sink {
                    return false;
                }
                Access::LOCAL_WRITE
            }
            _ => return false,
        };
        if self.mem.write(stag, self.cfg.pd, to, p, need).is_err() {
            return false;
        }
        self.rx_placed += p.len() as u64;
        self.ahead.fpdus += 1;
        self.ahead.octets += p.len() as u64;
        true
    }

    /// Tagged data placed ahead of its turn so far ([`QpEngine::place_ahead`]).
    pub fn ahead_counts(&self) -> AheadCounts {
        self.ahead
    }

    /// A tagged segment's payload into its region: checked and copied, or only checked when
    /// it was placed ahead of its turn ([`QpEngine::on_ulpdu_placed`]).
    fn place_tagged(
        &mut self,
        stag: u32,
        to: u64,
        p: &[u8],
        need: Access,
    ) -> Result<(), MemoryError> {
        if let Some(len) = self.placed_already {
            self.ahead.recognised += len as u64;
            return self.mem.check(stag, self.cfg.pd, to, len, need);
        }
        self.rx_placed += p.len() as u64;
        self.mem.write(stag, self.cfg.pd, to, p, need)
    }

    fn on_ulpdu_ietf(&mut self, ulpdu: &[u8]) {
        let seg = match Segment::new_checked(ulpdu) {
            Ok(s) => s,
            Err(e) => {
                log::warn!(
                    "ddp: ULPDU of {} bytes has no complete DDP header: {e}",
                    ulpdu.len()
                );
                if self.state != QpState::Terminated {
                    self.fail(TermCause::RDMAP_CATASTROPHIC_LOCALIZED, None, None);
                }
                return;
            }
        };
        let hdr = seg.header();
        let seg_len = u16::try_from(ulpdu.len()).unwrap_or(u16::MAX);
        let off = Some((hdr, seg_len));
        let tagged = seg.tagged();
        let ctrl = seg.rdmap_control();
        let opcode = RdmapOpcode::from_u8(control_opcode(ctrl));
        if self.state == QpState::Terminated {
            // RFC 5041 §7.1: silently drop everything after an error, but still hear the
            // peer's own TERMINATE.
            if !tagged && seg.qn() == QN_TERMINATE && opcode == Some(RdmapOpcode::Terminate) {
                if !self.term_received {
                    self.on_terminate(seg.payload());
                }
            } else {
                log::debug!("ddp: dropping a segment after termination");
            }
            return;
        }
        if self.state == QpState::AwaitRtr {
            self.on_rtr(&seg);
            return;
        }
        // DDP checks first (RFC 5041 §7.1), then RDMAP (RFC 5040 §7.2).
        if seg.ddp_version() != DDP_VERSION {
            log::warn!("ddp: invalid DDP version {}", seg.ddp_version());
            let c = if tagged {
                TermCause::DDP_TAGGED_INVALID_DDP_VERSION
            } else {
                TermCause::DDP_UNTAGGED_INVALID_DDP_VERSION
            };
            return self.fail(c, off, None);
        }
        if !tagged && seg.qn() > QN_TERMINATE {
            log::warn!("ddp: invalid QN {}", seg.qn());
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_QN, off, None);
        }
        if control_version(ctrl) != RDMAP_VERSION {
            log::warn!("rdmap: invalid RDMAP version {}", control_version(ctrl));
            return self.fail(TermCause::RDMAP_INVALID_RDMAP_VERSION, off, None);
        }
        let Some(op) = opcode.filter(|op| {
            op.is_tagged() == tagged && (tagged || op.queue_number() == Some(seg.qn()))
        }) else {
            log::warn!(
                "rdmap: unexpected opcode {:#x} (tagged {tagged}, QN {})",
                control_opcode(ctrl),
                if tagged { 0 } else { seg.qn() }
            );
            return self.fail(TermCause::RDMAP_UNEXPECTED_OPCODE, off, None);
        };
        match op {
            RdmapOpcode::RdmaWrite => self.on_write(&seg),
            RdmapOpcode::ReadResponse => self.on_read_response(&seg),
            RdmapOpcode::ReadRequest => self.on_read_request(&seg),
            RdmapOpcode::Terminate => self.on_terminate(seg.payload()),
            _ => self.on_send(&seg, op),
        }
    }

    fn seg_off<'a>(seg: &'a Segment<&[u8]>) -> Option<(&'a [u8], u16)> {
        let len = u16::try_from(seg.header_len() + seg.payload().len()).unwrap_or(u16::MAX);
        Some((seg.header(), len))
    }

    fn on_rtr(&mut self, seg: &Segment<&[u8]>) {
        let ok_hdr = seg.ddp_version() == DDP_VERSION
            && control_version(seg.rdmap_control()) == RDMAP_VERSION
            && seg.last();
        let op = RdmapOpcode::from_u8(control_opcode(seg.rdmap_control()));
        let p = seg.payload();
        let kind = match (ok_hdr, seg.tagged(), op) {
            (true, false, Some(RdmapOpcode::Send))
                if seg.qn() == QN_SEND
                    && seg.msn() == self.msn_rx[0]
                    && seg.mo() == 0
                    && p.is_empty() =>
            {
                Some(RtrKind::Send)
            }
            (true, true, Some(RdmapOpcode::RdmaWrite)) if p.is_empty() => Some(RtrKind::Write),
            (true, false, Some(RdmapOpcode::ReadRequest))
                if seg.qn() == QN_READ_REQUEST && seg.msn() == self.msn_rx[1] && seg.mo() == 0 =>
            {
                ReadRequestRepr::parse(&ReadRequest::new_unchecked(&p))
                    .ok()
                    .filter(|r| r.size == 0)
                    .map(|r| {
                        self.irrq.push_back(InRead {
                            sink_stag: r.sink_stag,
                            sink_to: r.sink_to,
                            src_stag: r.src_stag,
                            src_to: r.src_to,
                            len: 0,
                            sent: 0,
                        });
                        RtrKind::Read
                    })
            }
            _ => None,
        };
        match kind {
            Some(k) if self.rtr_accept[rtr_index(k)] => {
                match k {
                    RtrKind::Send => self.msn_rx[0] = self.msn_rx[0].wrapping_add(1),
                    RtrKind::Read => self.msn_rx[1] = self.msn_rx[1].wrapping_add(1),
                    RtrKind::Write => {}
                }
                log::debug!("rdmap: RTR ({k:?}) received; connection ready");
                self.state = QpState::Rts;
                self.events.push_back(QpEvent::RtrComplete);
            }
            _ => {
                log::warn!("rdmap: first message is not an acceptable RTR (got {kind:?})");
                self.irrq.clear();
                self.fail(TermCause::MPA_NO_MATCHING_RTR, None, None);
            }
        }
    }

    fn on_write(&mut self, seg: &Segment<&[u8]>) {
        let p = seg.payload();
        let plen = self.placed_already.unwrap_or(p.len());
        // RFC 5041 §7.1: only non-zero-length tagged segments are validated (siw's Write RTR).
        if plen == 0 {
            return;
        }
        let (stag, to) = (seg.stag(), seg.to());
        let wrap = to.checked_add(plen as u64).is_none();
        if let Err(e) = self.place_tagged(stag, to, p, Access::REMOTE_WRITE) {
            log::warn!("ddp: RDMA Write to STag {stag:#x} TO {to:#x} len {plen} refused: {e}");
            self.fail(tagged_cause(e, wrap), Self::seg_off(seg), None);
        }
    }

    fn on_read_response(&mut self, seg: &Segment<&[u8]>) {
        let p = seg.payload();
        let plen = self.placed_already.unwrap_or(p.len());
        let Some(head) = self.out_reads.front() else {
            log::warn!("rdmap: Read Response without an outstanding Read Request");
            return self.fail(TermCause::RDMAP_UNEXPECTED_OPCODE, Self::seg_off(seg), None);
        };
        let (stag, to) = (seg.stag(), seg.to());
        if plen > 0 {
            if stag != head.sink_stag {
                log::warn!(
                    "ddp: Read Response to STag {stag:#x}, requested {:#x}",
                    head.sink_stag
                );
                return self.fail(TermCause::DDP_TAGGED_INVALID_STAG, Self::seg_off(seg), None);
            }
            let in_range = to
                .checked_sub(head.sink_to)
                .and_then(|o| o.checked_add(plen as u64))
                .is_some_and(|end| end <= u64::from(head.len));
            if !in_range {
                log::warn!("ddp: Read Response TO {to:#x} len {plen} outside the sink");
                let wrap = to.checked_add(plen as u64).is_none();
                return self.fail(
                    tagged_cause(MemoryError::Bounds, wrap),
                    Self::seg_off(seg),
                    None,
                );
            }
            if let Err(e) = self.place_tagged(stag, to, p, Access::LOCAL_WRITE) {
                log::warn!("ddp: Read Response placement into STag {stag:#x} refused: {e}");
                let wrap = to.checked_add(plen as u64).is_none();
                return self.fail(tagged_cause(e, wrap), Self::seg_off(seg), None);
            }
        }
        if seg.last() {
            if let Some(r) = self.out_reads.pop_front() {
                if let Some(seq) = r.seq {
                    self.complete_seq(seq, WcStatus::Success, None);
                }
            }
        }
    }

    fn on_read_request(&mut self, seg: &Segment<&[u8]>) {
        let off = Self::seg_off(seg);
        if self.irrq.len() >= self.ird() {
            log::warn!("rdmap: Read Request beyond IRD {}", self.ird());
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER, off, None);
        }
        if seg.msn() != self.msn_rx[1] {
            log::warn!(
                "ddp: Read Request MSN {} (expected {})",
                seg.msn(),
                self.msn_rx[1]
            );
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MSN_RANGE, off, None);
        }
        if seg.mo() != 0 || !seg.last() {
            log::warn!("ddp: Read Request not a single segment at MO 0");
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MO, off, None);
        }
        let p = seg.payload();
        let rr = match ReadRequestRepr::parse(&ReadRequest::new_unchecked(&p)) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("rdmap: malformed Read Request header: {e}");
                return self.fail(TermCause::RDMAP_OP_UNSPECIFIED, off, None);
            }
        };
        if rr.size > 0 {
            let wrap = rr.src_to.checked_add(u64::from(rr.size)).is_none()
                || rr.sink_to.checked_add(u64::from(rr.size)).is_none();
            let res = self.mem.check(
                rr.src_stag,
                self.cfg.pd,
                rr.src_to,
                rr.size as usize,
                Access::REMOTE_READ,
            );
            let cause = match res {
                Err(MemoryError::Bounds) if wrap => Some(TermCause::RDMAP_TO_WRAP),
                Err(e) => Some(read_cause(e)),
                Ok(()) if wrap => Some(TermCause::RDMAP_TO_WRAP),
                Ok(()) => None,
            };
            if let Some(c) = cause {
                log::warn!(
                    "rdmap: Read Request for STag {:#x} TO {:#x} size {} refused",
                    rr.src_stag,
                    rr.src_to,
                    rr.size
                );
                return self.fail(c, off, Some(rr));
            }
        }
        self.msn_rx[1] = self.msn_rx[1].wrapping_add(1);
        self.irrq.push_back(InRead {
            sink_stag: rr.sink_stag,
            sink_to: rr.sink_to,
            src_stag: rr.src_stag,
            src_to: rr.src_to,
            len: rr.size,
            sent: 0,
        });
    }

    fn on_send(&mut self, seg: &Segment<&[u8]>, op: RdmapOpcode) {
        let off = Self::seg_off(seg);
        let p = seg.payload();
        let d = seg.msn().wrapping_sub(self.msn_rx[0]) as usize;
        if self.rq.is_empty() {
            log::warn!("ddp: Send MSN {} but no receive buffer posted", seg.msn());
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER, off, None);
        }
        if d >= self.rq.len() {
            log::warn!(
                "ddp: Send MSN {} outside [{}, +{})",
                seg.msn(),
                self.msn_rx[0],
                self.rq.len()
            );
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MSN_RANGE, off, None);
        }
        let cap = self.rq[d].cap;
        let mo = u64::from(seg.mo());
        if mo > cap {
            log::warn!("ddp: Send MO {mo} beyond the {cap}-byte buffer");
            self.rq_err = Some((d, WcStatus::LocLenErr));
            return self.fail(TermCause::DDP_UNTAGGED_INVALID_MO, off, None);
        }
        if mo + p.len() as u64 > cap {
            log::warn!(
                "ddp: Send MO {mo} + {} exceeds the {cap}-byte buffer",
                p.len()
            );
            self.rq_err = Some((d, WcStatus::LocLenErr));
            return self.fail(TermCause::DDP_UNTAGGED_MESSAGE_TOO_LONG, off, None);
        }
        let inv =
            matches!(op, RdmapOpcode::SendInv | RdmapOpcode::SendSeInv).then(|| seg.inv_stag());
        if let Some(stag) = inv {
            // RFC 5040 §7.2 checks 4-5, before anything is placed; §5.3: an STag not associated
            // with this stream gets "STag cannot be Invalidated" (as siw sends it: Remote
            // Protection Error type).
            let cause = match self.mem.get(stag) {
                None => Some(TermCause::RDMAP_INVALID_STAG),
                Some(mr) if mr.is_invalidated() => Some(TermCause::RDMAP_INVALID_STAG),
                Some(mr) if mr.pd() != self.cfg.pd => {
                    Some(TermCause::RDMAP_PROT_STAG_CANNOT_BE_INVALIDATED)
                }
                Some(_) => None,
            };
            if let Some(c) = cause {
                log::warn!("rdmap: Send with Invalidate names STag {stag:#x} we cannot invalidate");
                return self.fail(c, off, None);
            }
        }
        // Scatter: check every piece, then copy (nothing placed if any piece fails).
        let mut pieces: smallvec::SmallVec<[(Sge, u64, usize, usize); 2]> =
            smallvec::SmallVec::new();
        let (mut pos, mut done) = (0u64, 0usize);
        for s in &self.rq[d].wr.sg_list {
            let end = pos + u64::from(s.length);
            if done < p.len() && mo + (done as u64) < end {
                let at = mo + done as u64 - pos;
                let n = ((end - (mo + done as u64)) as usize).min(p.len() - done);
                pieces.push((*s, s.addr + at, done, n));
                done += n;
            }
            pos = end;
        }
        // One piece (the usual case) needs no check before its copy: the write checks, and
        // writes nothing when the check fails (a region lookup fewer per message).
        if pieces.len() > 1 {
            for &(s, addr, _, n) in &pieces {
                if let Err(e) = self
                    .mem
                    .check(s.lkey, self.cfg.pd, addr, n, Access::LOCAL_WRITE)
                {
                    log::warn!("rdma: receive SGE {s:?} became unusable: {e}");
                    self.rq_err = Some((d, WcStatus::LocProtErr));
                    return self.fail(TermCause::RDMAP_LOCAL_CATASTROPHIC, None, None);
                }
            }
        }
        for (s, addr, from, n) in pieces {
            if let Err(e) = self.mem.write(
                s.lkey,
                self.cfg.pd,
                addr,
                &p[from..from + n],
                Access::LOCAL_WRITE,
            ) {
                log::warn!("rdma: receive SGE {s:?} became unusable: {e}");
                self.rq_err = Some((d, WcStatus::LocProtErr));
                return self.fail(TermCause::RDMAP_LOCAL_CATASTROPHIC, None, None);
            }
            self.rx_placed += n as u64;
        }
        if seg.last() {
            let len = u32::try_from(mo + p.len() as u64).unwrap_or(u32::MAX);
            let solicited = matches!(op, RdmapOpcode::SendSe | RdmapOpcode::SendSeInv);
            self.rq[d].done = Some((len, solicited, inv));
            self.release_recv();
        }
    }

    fn on_terminate(&mut self, body: &[u8]) {
        self.term_received = true;
        let (cause, named) = match TerminateRepr::parse(body) {
            Ok((t, order)) => {
                if order == BitOrder::Siw {
                    log::info!(
                        "rdmap: decoded a TERMINATE in siw bit order (nibbles/M-D-R swapped)"
                    );
                }
                let named = t.ddp_header.as_ref().and_then(|h| {
                    let s = Segment::new_checked(&h[..]).ok()?;
                    Some(if s.tagged() {
                        TxIdent::Tagged { stag: s.stag() }
                    } else {
                        TxIdent::Untagged {
                            qn: s.qn(),
                            msn: s.msn(),
                        }
                    })
                });
                (t.control.cause, named)
            }
            Err(e) => {
                log::warn!("rdmap: malformed TERMINATE from the peer: {e}");
                (TermCause::RDMAP_OP_UNSPECIFIED, None)
            }
        };
        log::warn!(
            "rdmap: TERMINATE received: layer {:?} type {:#x} code {:#04x}",
            cause.layer,
            cause.etype,
            cause.code
        );
        self.events.push_back(QpEvent::TerminateReceived(cause));
        self.state = QpState::Terminated;
        self.flush_all(Some((cause, named)));
    }
}

fn check_sges(mem: &MemoryTable, pd: PdId, sges: &[Sge], need: Access) -> Result<u64, PostError> {
    let mut total = 0u64;
    for s in sges {
        mem.check(s.lkey, pd, s.addr, s.length as usize, need)
            .map_err(|e| {
                log::warn!("rdma: local SGE {s:?} refused: {e}");
                PostError::Invalid("local SGE failed its protection check")
            })?;
        total += u64::from(s.length);
    }
    Ok(total)
}

/// The checks `QpEngine::post_send` makes before queueing a send-queue WR (local SGEs against
/// `mem` for `pd`, message length, remote range, RDMA Read sink shape), for a poster that
/// queues WRs elsewhere first (the verbs layer's post ring) and wants its errors at once.
/// Returns the message length and the completion's opcode and identity.
pub(crate) fn validate_send(
    mem: &MemoryTable,
    pd: PdId,
    wr: &SendWr,
) -> Result<SendChecked, PostError> {
    let need = match wr.opcode {
        Opcode::Read { .. } => Access::LOCAL_WRITE,
        _ => Access(0),
    };
    let total = check_sges(mem, pd, &wr.sg_list, need)?;
    let total =
        u32::try_from(total).map_err(|_| PostError::Invalid("message longer than 2^32-1"))?;
    let (opcode, ident) = match wr.opcode {
        Opcode::Write { remote_addr, rkey } => {
            if remote_addr.checked_add(u64::from(total)).is_none() {
                return Err(PostError::Invalid("remote address + length wraps"));
            }
            (WcOpcode::Write, Some(TxIdent::Tagged { stag: rkey }))
        }
        Opcode::Read { remote_addr, .. } => {
            if remote_addr.checked_add(u64::from(total)).is_none() {
                return Err(PostError::Invalid("remote address + length wraps"));
            }
            let mut it = wr.sg_list.windows(2);
            if it.any(|w| w[0].lkey != w[1].lkey || w[0].addr + u64::from(w[0].length) != w[1].addr)
            {
                return Err(PostError::Invalid(
                    "RDMA Read needs one contiguous sink (one region)",
                ));
            }
            (WcOpcode::Read, None)
        }
        _ => (WcOpcode::Send, None),
    };
    Ok((total, opcode, ident))
}

/// What [`validate_send`] found: the message length, the completion's opcode and identity.
pub(crate) type SendChecked = (u32, WcOpcode, Option<TxIdent>);

/// The work request of an inline post, checked ([`validate_inline`]), with its payload copied.
pub(crate) fn inline_wr(
    wr_id: u64,
    opcode: Opcode,
    data: &[u8],
    signaled: bool,
) -> Result<(SendWr, SendChecked, InlineData), PostError> {
    let checked = validate_inline(&opcode, data.len())?;
    let wr = SendWr {
        wr_id,
        opcode,
        sg_list: SgList::new(),
        signaled,
    };
    Ok((wr, checked, InlineData::from_slice(data)))
}

/// The checks of an inline post ([`QpEngine::post_send_inline`]): a Send or an RDMA Write of
/// at most [`MAX_INLINE_DATA`] octets, its remote range not wrapping.
pub(crate) fn validate_inline(opcode: &Opcode, len: usize) -> Result<SendChecked, PostError> {
    if len > MAX_INLINE_DATA {
        return Err(PostError::Invalid(
            "inline data longer than MAX_INLINE_DATA",
        ));
    }
    let total = len as u32;
    match *opcode {
        Opcode::Read { .. } => Err(PostError::Invalid("an RDMA Read carries no inline data")),
        Opcode::Write { remote_addr, rkey } => {
            if remote_addr.checked_add(u64::from(total)).is_none() {
                return Err(PostError::Invalid("remote address + length wraps"));
            }
            Ok((total, WcOpcode::Write, Some(TxIdent::Tagged { stag: rkey })))
        }
        _ => Ok((total, WcOpcode::Send, None)),
    }
}

/// The checks `QpEngine::post_recv` makes (local SGEs writable, in `pd`); returns the capacity.
pub(crate) fn validate_recv(mem: &MemoryTable, pd: PdId, wr: &RecvWr) -> Result<u64, PostError> {
    check_sges(mem, pd, &wr.sg_list, Access::LOCAL_WRITE)
}
