//! MPA connection startup (RFC 5044 §7, RFC 6581 §5-§10), sans-IO.

use crate::wire::mpa::{
    EnhancedData, Frame, FrameKind, FrameRepr, ENHANCED_DATA_LEN, HEADER_LEN, IRD_ORD_MASK,
    IRD_ORD_ULP, MAX_PRIVATE_DATA, REP_KEY, REQ_KEY,
};
use crate::wire::terminate::TermCause;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Which end of the MPA exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the MPA Request and waits for the Reply (RFC 5044 §7.1, the active side).
    Initiator,
    /// Waits for the MPA Request and answers with a Reply or Reject (RFC 5044 §7.1, the
    /// passive side).
    Responder,
}

/// RFC 6581 §9.2 Ready-To-Receive indication kinds: the zero-length message the initiator sends
/// after the MPA exchange. Negotiated here (flags B/C/D of the enhanced data); sent and checked
/// by the QP engine (`rdma::QpEngine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// Zero-length FULPDU Send (flag B).
    Send,
    /// Zero-length RDMA Write (flag C).
    Write,
    /// Zero-length RDMA Read (flag D).
    Read,
}

/// RFC 6581 §9 flags B/C/D: which RTR indications are offered / supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtrSet {
    /// B flag: zero-length Send RTR (RFC 6581 §9).
    pub send: bool,
    /// C flag: zero-length RDMA Write RTR (RFC 6581 §9).
    pub write: bool,
    /// D flag: zero-length RDMA Read RTR (RFC 6581 §9).
    pub read: bool,
}

impl RtrSet {
    /// Every RTR kind (Send, Write, Read).
    pub const ALL: RtrSet = RtrSet {
        send: true,
        write: true,
        read: true,
    };

    /// No kind set.
    pub fn is_empty(&self) -> bool {
        !(self.send || self.write || self.read)
    }

    /// Kinds in both sets.
    pub fn intersect(&self, other: &RtrSet) -> RtrSet {
        RtrSet {
            send: self.send && other.send,
            write: self.write && other.write,
            read: self.read && other.read,
        }
    }

    /// Whether `kind` is in the set.
    pub fn contains(&self, kind: RtrKind) -> bool {
        match kind {
            RtrKind::Send => self.send,
            RtrKind::Write => self.write,
            RtrKind::Read => self.read,
        }
    }

    /// The set holding only `kind`.
    pub fn only(kind: RtrKind) -> RtrSet {
        RtrSet {
            send: kind == RtrKind::Send,
            write: kind == RtrKind::Write,
            read: kind == RtrKind::Read,
        }
    }

    /// The preferred kind in the set: Write, then Read, then Send (the zero-length Write is the
    /// cheapest RTR and the one Linux siw prefers as responder; it never offers Send).
    pub fn preferred(&self) -> Option<RtrKind> {
        [RtrKind::Write, RtrKind::Read, RtrKind::Send]
            .into_iter()
            .find(|k| self.contains(*k))
    }
}

/// Local startup preferences.
#[derive(Debug, Clone)]
pub struct MpaConfig {
    /// MPA revision to send as initiator (1 or 2). A responder accepts 1 and 2 (RFC 6581 §6).
    pub revision: u8,
    /// Send the RFC 6581 enhanced data (S=1, rev 2 only).
    pub enhanced: bool,
    /// Request CRC (C bit). Default true; false is the explicit "prefer no CRC" of RFC 5044 §4.4.
    pub crc: bool,
    /// Require markers on FPDUs we receive (M bit).
    pub markers: bool,
    /// Our IRD / ORD (14-bit; 0x3FFF = "ULP negotiates", RFC 6581 §9.1).
    pub ird: u16,
    /// Our ORD: outbound RDMA Read Requests we want outstanding at once (same encoding as `ird`).
    pub ord: u16,
    /// Peer-to-peer: initiator offers these RTR kinds; responder supports these. None = client-server.
    pub p2p: Option<RtrSet>,
    /// ULP private data (at most 512 bytes, 508 when enhanced).
    pub private_data: Vec<u8>,
    /// Initiator: if an enhanced request is refused (peer closes), report
    /// `StartupError::EnhancedRefused` so the connection manager retries with rev 1.
    pub fallback_rev1: bool,
    /// Give up if startup has not completed within this time.
    pub timeout: Duration,
    /// RFC 5044 Appendix C "Permissive IETF RNIC": also interoperate with RDMA Consortium
    /// (RDMAC) peers, which send MPA Rev 0 and use DDP/RDMAP version 0 with markers and CRC.
    /// Default false: a Rev 0 Request is closed without a reply, as RFC 5044 §7.1.1 says for a
    /// revision we cannot interoperate with. When true:
    /// - responder: a Rev 0 Request with M=1, C=1 and S=0 (what an RDMAC RNIC sends, App.
    ///   C.2.4) is answered with a Rev 0 Reply (or Reject) with M=1 and C=1 and no enhanced
    ///   data; markers and CRC are then on in both directions. A Rev 0 Request with S=1, M=0 or
    ///   C=0 is still closed without a reply.
    /// - initiator that sent an unenhanced Request: a Rev 0 Reply with M=1 and C=1 (App. C.2.5,
    ///   C.1) is accepted with markers and CRC in both directions; a Rev 0 Reply to an enhanced
    ///   Request, or with M=0 or C=0, is closed as before.
    ///
    /// `Negotiated::revision == 0` then tells the ULP (and `Connection`) that the data phase
    /// speaks DDP/RDMAP version 0 (App. C.1: no mixing of versions; the same in both
    /// directions).
    pub rev0_permissive: bool,
}

impl Default for MpaConfig {
    fn default() -> Self {
        MpaConfig {
            revision: 2,
            enhanced: true,
            crc: true,
            markers: false,
            ird: 16,
            ord: 16,
            p2p: None,
            private_data: Vec::new(),
            fallback_rev1: false,
            timeout: Duration::from_secs(5),
            rev0_permissive: false,
        }
    }
}

/// A responder's view of a received MPA Request (handed to the application before accept/reject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    /// The Request's Rev field (1 or 2; RFC 5044 §7.1.1, RFC 6581 §6; 0 from an RDMAC peer when
    /// `MpaConfig::rev0_permissive` is on, RFC 5044 App. C).
    pub revision: u8,
    /// S bit: the Request carries RFC 6581 enhanced data (§6).
    pub enhanced: bool,
    /// C bit: the initiator wants CRCs (RFC 5044 §7.1.1); if set, both directions use them.
    pub crc: bool,
    /// M bit: the initiator requires markers on the FPDUs it receives (RFC 5044 §7.1.1).
    pub markers: bool,
    /// Enhanced data (RFC 6581 §9), None when S=0.
    pub ird: Option<u16>,
    /// The initiator's ORD from the enhanced data (RFC 6581 §9.1), None when S=0.
    pub ord: Option<u16>,
    /// Peer-to-peer offer (A=1), None for client-server.
    pub rtr: Option<RtrSet>,
    /// ULP private data (enhanced data stripped).
    pub private_data: Vec<u8>,
}

/// Outcome of a successful startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Which end of the exchange we were.
    pub role: Role,
    /// MPA revision in effect (the Reply echoes the Request's Rev; RFC 5044 §7.1.1). 0: an RDMAC
    /// peer (RFC 5044 App. C, `MpaConfig::rev0_permissive`): DDP/RDMAP version 0 on the wire,
    /// markers and CRC in both directions.
    pub revision: u8,
    /// Both frames carried RFC 6581 enhanced data (S=1, §6): IRD/ORD and RTR were negotiated.
    pub enhanced: bool,
    /// CRC on FPDUs we send / we receive (RFC 5044 §7.1 C-bit rules).
    pub crc_tx: bool,
    /// CRC checked on FPDUs we receive (always equal to `crc_tx`: C=1 in either frame means both).
    pub crc_rx: bool,
    /// Markers on FPDUs we send / we receive (per direction, M bit).
    pub markers_tx: bool,
    /// Markers expected on FPDUs we receive: our own M bit (RFC 5044 §4.3, §7.1.1).
    pub markers_rx: bool,
    /// Local IRD/ORD after RFC 6581 §9.1.
    pub ird: u16,
    /// Local ORD after RFC 6581 §9.1: at most the peer's IRD; bounds the RDMA Read Requests we
    /// have outstanding.
    pub ord: u16,
    /// The peer's advertised IRD/ORD (passed to the ULP as §9.1 demands), None if unenhanced.
    pub peer_ird: Option<u16>,
    /// The peer's advertised ORD (RFC 6581 §9.1), None if unenhanced.
    pub peer_ord: Option<u16>,
    /// Peer-to-peer: the RTR kind the initiator will send / the responder awaits.
    pub rtr: Option<RtrKind>,
    /// Peer-to-peer: every RTR kind acceptable as the first message. Initiator: the chosen kind
    /// only. Responder: all kinds it advertised in its Reply (RFC 6581 §9.2 lets the initiator
    /// pick any of them; `rtr` is then the preferred one). Empty for client-server.
    pub rtr_accept: RtrSet,
    /// The peer's ULP private data.
    pub peer_private_data: Vec<u8>,
}

/// Why startup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    /// Responder: our ULP rejected the Request; an MPA Reply with R=1 was queued and the stream
    /// closes after it (RFC 5044 §7.1.2). The initiator sees a Reject as `StartupEvent::Rejected`.
    #[error("peer rejected the connection")]
    Rejected,
    /// A startup frame broke RFC 5044 §7.1 / RFC 6581 §6, §10 (e.g. bad key, revision or S bit), or
    /// our own startup parameters could not be sent; the string says which. Nothing is replied.
    #[error("malformed MPA frame: {0}")]
    Malformed(&'static str),
    /// Startup did not complete within `MpaConfig::timeout` (RFC 5044 §7.1.2 startup timers).
    #[error("startup timed out")]
    Timeout,
    /// The peer closed the stream before startup completed.
    #[error("peer closed the stream during startup")]
    PeerClosed,
    /// Initiator with `fallback_rev1`: the peer closed after our enhanced (S=1) Request, as an
    /// unenhanced responder does (RFC 6581 §10); the caller may retry with MPA revision 1.
    #[error("peer closed after an enhanced request: retry with MPA rev 1")]
    EnhancedRefused,
    /// The peer requires markers this end cannot provide (RFC 5044 §7.1.1 M bit). Not produced at
    /// present: markers are supported in both directions.
    #[error("peer requires markers we do not support")]
    MarkersRefused,
    /// Initiator: the responder's ORD exceeds our IRD; startup ends in a TERMINATE with RFC 6581
    /// §9.1 code 6 (insufficient IRD resources).
    #[error("insufficient IRD/ORD")]
    InsufficientIrd,
    /// Initiator: no RTR kind (or connection model, A bit) in common with the responder; startup
    /// ends in a TERMINATE with RFC 6581 §9.2 code 7 (no matching RTR option).
    #[error("no matching RTR option")]
    NoMatchingRtr,
}

/// Startup events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupEvent {
    /// Responder: a valid Request arrived; the ULP must call `accept` or `reject`.
    Request(PeerRequest),
    /// Reply sent (responder) or received (initiator): FPDUs may flow (after RTR in p2p mode).
    Established(Negotiated),
    /// Initiator: the responder rejected (R=1); its private data and IRD/ORD are passed up
    /// (RFC 6581 §9.1: "for both MPA Accept and Reject").
    Rejected {
        /// The responder's ULP private data from the Reject frame (RFC 5044 §7.1.4).
        private_data: Vec<u8>,
        /// The responder's IRD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ird: Option<u16>,
        /// The responder's ORD from an enhanced Reject (RFC 6581 §9.1); `None` when S=0.
        peer_ord: Option<u16>,
    },
    /// Startup failed; the stream must be closed (after transmitting whatever is queued).
    Failed(StartupError),
    /// Initiator: frames were exchanged with parameters as in `negotiated`, but RFC 6581 demands
    /// a TERMINATE (`cause`: §9.1 code 6 insufficient IRD, §9.2 code 7 no matching RTR). The
    /// connection must send this TERMINATE as its first FPDU (framed per `negotiated`) and close.
    Terminate {
        /// The TERMINATE to send: layer LLP, MPA error type, RFC 6581 §8 code 6 or 7.
        cause: TermCause,
        /// The parameters both frames agreed on; they decide how the TERMINATE is framed.
        negotiated: Negotiated,
    },
}

/// Where the state machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Responder: collecting the Request.
    AwaitRequest,
    /// Responder: Request reported, waiting for `accept` / `reject`.
    AwaitUlp,
    /// Responder: Reply queued; `Established` is reported once `poll_transmit` took it.
    ReplyQueued,
    /// Initiator: Request queued or sent, collecting the Reply.
    AwaitReply,
    /// Startup over (established, rejected, failed or terminating).
    Done,
}

/// The startup state machine of one end.
///
/// Responder policy choices (RFC 6581 §9.1, §9.2), documented here because the RFC leaves them
/// open:
/// - Responder IRD = max(configured IRD, initiator ORD): the negotiation always succeeds
///   (§9.1 "responder IRD ... greater than or equal to the initiator ORD for successful
///   negotiations"; "the responder IRD MAY be increased"), and at least 1 when a Read RTR is
///   advertised. Responder ORD = min(configured ORD, initiator IRD) (§9.1 MUST).
/// - A responder configured with `p2p: None` still answers a peer-to-peer request (A=1) with
///   A=1 (§9.2 MUST) and treats itself as supporting every RTR kind: the QP engine implements
///   all three. `Some(set)` restricts the kinds; an empty set is treated like `None` because
///   §9.2 requires at least one supported option.
/// - The initiator treats its configured IRD as a hard maximum: a responder ORD above it is
///   "insufficient resources" (§9.1, TERMINATE code 6).
pub struct Startup {
    role: Role,
    cfg: MpaConfig,
    state: State,
    deadline: Instant,
    /// Received frame octets (at most 20 + 512).
    rx: Vec<u8>,
    tx: Vec<u8>,
    events: VecDeque<StartupEvent>,
    /// Responder: the validated Request.
    request: Option<FrameRepr>,
    /// Responder: the Negotiated to report once the Reply is out.
    pending: Option<Negotiated>,
    /// Initiator: what the Request said.
    sent_enhanced: bool,
}

impl Startup {
    fn new(role: Role, cfg: MpaConfig, now: Instant, state: State) -> Self {
        let deadline = now + cfg.timeout;
        Startup {
            role,
            cfg,
            state,
            deadline,
            rx: Vec::new(),
            tx: Vec::new(),
            events: VecDeque::new(),
            request: None,
            pending: None,
            sent_enhanced: false,
        }
    }

    /// Initiator: queues the MPA Request immediately (RFC 5044 §7.1.2 rule 1).
    ///
    /// A local configuration that cannot be sent (revision other than 1 or 2, private data over
    /// 512 octets or over 508 when enhanced) reports `Failed(Malformed)` and sends nothing.
    pub fn initiator(cfg: MpaConfig, now: Instant) -> Self {
        let mut s = Self::new(Role::Initiator, cfg, now, State::AwaitReply);
        let cfg = &s.cfg;
        if !(1..=2).contains(&cfg.revision) {
            s.fail_local("MPA revision must be 1 or 2");
            return s;
        }
        // RFC 6581 §6: enhanced features need Rev >= 2; §10: do not send the enhanced format
        // when no enhanced functionality is desired.
        let enhanced = cfg.enhanced && cfg.revision >= 2;
        let e = enhanced.then(|| {
            let set = cfg.p2p.unwrap_or_default();
            EnhancedData {
                p2p: cfg.p2p.is_some(),
                rtr_send: cfg.p2p.is_some() && set.send,
                rtr_write: cfg.p2p.is_some() && set.write,
                rtr_read: cfg.p2p.is_some() && set.read,
                ird: cfg.ird & IRD_ORD_MASK,
                ord: cfg.ord & IRD_ORD_MASK,
            }
        });
        let req = FrameRepr {
            kind: FrameKind::Request,
            markers: cfg.markers,
            crc: cfg.crc,
            rejected: false,
            rev: cfg.revision,
            enhanced: e,
            private_data: cfg.private_data.clone(),
        };
        if !req.is_valid_length() {
            s.fail_local("private data too long");
            return s;
        }
        req.emit_to_vec(&mut s.tx);
        s.sent_enhanced = enhanced;
        s
    }

    /// Responder: waits for the Request.
    pub fn responder(cfg: MpaConfig, now: Instant) -> Self {
        Self::new(Role::Responder, cfg, now, State::AwaitRequest)
    }

    /// This end's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Feed received bytes. Returns how many were consumed: never more than up to the end of the
    /// peer's Request/Reply frame, so FPDU bytes that follow stay with the caller.
    pub fn on_bytes(&mut self, input: &[u8], _now: Instant) -> usize {
        if !matches!(self.state, State::AwaitRequest | State::AwaitReply) {
            return 0;
        }
        let mut used = 0;
        if self.rx.len() < HEADER_LEN {
            let n = (HEADER_LEN - self.rx.len()).min(input.len());
            self.rx.extend_from_slice(&input[..n]);
            used = n;
            if self.rx.len() < HEADER_LEN {
                return used;
            }
            // Validate the key and PD_Length as soon as the fixed header is in: a wrong key
            // means close at once (RFC 5044 §7.1.2 rule 5), and PD_Length bounds buffering.
            let f = Frame::new_unchecked(&self.rx[..]);
            let want = match self.role {
                Role::Initiator => &REP_KEY,
                Role::Responder => &REQ_KEY,
            };
            if f.key() != want {
                let why = if f.key() == REQ_KEY {
                    "MPA Request received by an initiator (initiator/initiator startup)"
                } else if f.key() == REP_KEY {
                    "MPA Reply received by a responder (responder/responder startup)"
                } else {
                    "bad MPA key"
                };
                self.fail_peer(why);
                return used;
            }
            if usize::from(f.pd_length()) > MAX_PRIVATE_DATA {
                self.fail_peer("MPA PD_Length exceeds 512");
                return used;
            }
        }
        let total = Frame::new_unchecked(&self.rx[..]).total_len();
        let n = (total - self.rx.len()).min(input.len() - used);
        self.rx.extend_from_slice(&input[used..used + n]);
        used += n;
        if self.rx.len() == total {
            let rx = std::mem::take(&mut self.rx);
            match FrameRepr::parse(&Frame::new_unchecked(&rx[..])) {
                Ok(f) => match self.role {
                    Role::Responder => self.on_request(f),
                    Role::Initiator => self.on_reply(f),
                },
                Err(e) => {
                    log::warn!("mpa: malformed startup frame: {e}");
                    self.fail_peer("malformed MPA frame");
                }
            }
        }
        used
    }

    /// The peer closed the stream (EOF).
    pub fn on_eof(&mut self) {
        match self.state {
            State::AwaitReply => {
                let e = if self.sent_enhanced && self.cfg.fallback_rev1 {
                    // RFC 6581 §10: an unenhanced responder closes on an enhanced request; the
                    // initiator MAY retry with the unenhanced protocol.
                    StartupError::EnhancedRefused
                } else {
                    StartupError::PeerClosed
                };
                log::warn!("mpa: peer closed before its MPA Reply ({e})");
                self.finish(StartupEvent::Failed(e));
            }
            State::AwaitRequest | State::AwaitUlp | State::ReplyQueued => {
                log::warn!("mpa: peer closed during MPA startup");
                self.finish(StartupEvent::Failed(StartupError::PeerClosed));
            }
            State::Done => {}
        }
    }

    /// Append bytes to send (Request, Reply or Reject) to `out`.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.tx);
        if self.state == State::ReplyQueued {
            if let Some(n) = self.pending.take() {
                self.events.push_back(StartupEvent::Established(n));
            }
            self.state = State::Done;
        }
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<StartupEvent> {
        self.events.pop_front()
    }

    /// Responder: accept the pending Request with our `MpaConfig` values (IRD/ORD, p2p support,
    /// private data), optionally overriding the private data. `Established` is reported once
    /// `poll_transmit` has handed out the Reply.
    pub fn accept(&mut self, private_data: Option<Vec<u8>>) {
        if self.state != State::AwaitUlp {
            log::warn!("mpa: accept() without a pending MPA Request; ignored");
            return;
        }
        let Some(req) = self.request.take() else {
            return;
        };
        let private_data = private_data.unwrap_or_else(|| self.cfg.private_data.clone());
        let cfg = &self.cfg;
        // RFC 5044 §7.1.1 "C": CRCs are used by both ends if either frame has C=1.
        let crc = req.crc || cfg.crc;
        // RFC 5044 App. C.2.4: an RDMAC (Rev 0) initiator gets a Rev 0 Reply with M=1 and C=1;
        // on_request only let one through with M=1, C=1, S=0. Markers both ways (Figure 16).
        let rdmac = req.rev == 0;
        let mut n = Negotiated {
            role: Role::Responder,
            revision: req.rev,
            enhanced: req.enhanced.is_some(),
            crc_tx: crc,
            crc_rx: crc,
            // RFC 5044 §7.1.1 "M": M=1 in the Request requires markers on our FPDUs.
            markers_tx: req.markers,
            markers_rx: cfg.markers || rdmac,
            ird: cfg.ird,
            ord: cfg.ord,
            peer_ird: None,
            peer_ord: None,
            rtr: None,
            rtr_accept: RtrSet::default(),
            peer_private_data: req.private_data,
        };
        // RFC 6581 §10: enhanced reply to an enhanced request, unenhanced to an unenhanced one.
        let reply_e = req.enhanced.map(|e| {
            n.peer_ird = Some(e.ird);
            n.peer_ord = Some(e.ord);
            let mut r = EnhancedData::default();
            // RFC 6581 §9.2: A in the Reply matches A in the Request; B/C/D ignored when A=0.
            if e.p2p {
                let offered = RtrSet {
                    send: e.rtr_send,
                    write: e.rtr_write,
                    read: e.rtr_read,
                };
                let supported = cfg.p2p.filter(|s| !s.is_empty()).unwrap_or(RtrSet::ALL);
                let common = offered.intersect(&supported);
                // §9.2: set the supported options among those offered; if none match, set at
                // least one we support (the initiator will then TERMINATE with code 7).
                let adv = if common.is_empty() { supported } else { common };
                r.p2p = true;
                r.rtr_send = adv.send;
                r.rtr_write = adv.write;
                r.rtr_read = adv.read;
                n.rtr = adv.preferred();
                n.rtr_accept = adv;
            }
            // RFC 6581 §9.1 IRD: at least the initiator ORD; 0x3FFF: keep ours, echo 0x3FFF.
            if e.ord == IRD_ORD_ULP {
                r.ird = IRD_ORD_ULP;
            } else {
                let mut ird = cfg.ird.max(e.ord);
                if r.rtr_read && ird == 0 {
                    // §9.1: a Read RTR needs one inbound Read slot.
                    ird = 1;
                }
                n.ird = ird.min(IRD_ORD_ULP - 1);
                r.ird = n.ird;
            }
            // ORD: at most the initiator IRD; 0x3FFF: keep ours, echo 0x3FFF.
            if e.ird == IRD_ORD_ULP {
                r.ord = IRD_ORD_ULP;
            } else {
                n.ord = cfg.ord.min(e.ird);
                r.ord = n.ord;
            }
            r
        });
        let reply = FrameRepr {
            kind: FrameKind::Reply,
            markers: cfg.markers || rdmac,
            crc,
            rejected: false,
            rev: req.rev,
            enhanced: reply_e,
            private_data,
        };
        if !reply.is_valid_length() {
            self.fail_local("private data too long");
            return;
        }
        reply.emit_to_vec(&mut self.tx);
        self.pending = Some(n);
        self.state = State::ReplyQueued;
    }

    /// Responder: reject the pending Request (R=1) with private data (RFC 5044 §7.1.2 rule 2).
    /// An enhanced Request gets an enhanced Reject carrying our IRD/ORD (RFC 6581 §9.1: "specify
    /// the required ORD in the MPA Reject Frame"). Reports `Failed(Rejected)`: the stream is
    /// closed after the Reject is transmitted.
    pub fn reject(&mut self, private_data: Vec<u8>) {
        if self.state != State::AwaitUlp {
            log::warn!("mpa: reject() without a pending MPA Request; ignored");
            return;
        }
        let Some(req) = self.request.take() else {
            return;
        };
        let cfg = &self.cfg;
        let e = req.enhanced.map(|e| EnhancedData {
            p2p: e.p2p,
            rtr_send: false,
            rtr_write: false,
            rtr_read: false,
            ird: cfg.ird & IRD_ORD_MASK,
            ord: cfg.ord & IRD_ORD_MASK,
        });
        let mut reply = FrameRepr {
            kind: FrameKind::Reply,
            // An RDMAC peer's Reject also says Rev 0, M=1, C=1 (RFC 5044 App. C.2.4).
            markers: cfg.markers || req.rev == 0,
            crc: req.crc || cfg.crc,
            rejected: true,
            rev: req.rev,
            enhanced: e,
            private_data,
        };
        if !reply.is_valid_length() {
            log::warn!("mpa: reject private data too long; truncated to fit 512 octets");
            let max = MAX_PRIVATE_DATA - reply.enhanced.map_or(0, |_| ENHANCED_DATA_LEN);
            reply.private_data.truncate(max);
        }
        reply.emit_to_vec(&mut self.tx);
        self.finish(StartupEvent::Failed(StartupError::Rejected));
    }

    /// When `handle_timeout` should next be called (RFC 5044 §7.1.2 rules 8 and 10).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Done => None,
            _ => Some(self.deadline),
        }
    }

    /// Time passed: startup not complete by the deadline fails with `Timeout`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state != State::Done && now >= self.deadline {
            log::warn!(
                "mpa: startup did not complete within {:?}",
                self.cfg.timeout
            );
            self.tx.clear();
            self.finish(StartupEvent::Failed(StartupError::Timeout));
        }
    }

    fn finish(&mut self, ev: StartupEvent) {
        self.state = State::Done;
        self.rx = Vec::new();
        self.events.push_back(ev);
    }

    /// The peer sent something RFC 5044 §7.1.2 says to close on: nothing is sent.
    fn fail_peer(&mut self, why: &'static str) {
        log::warn!("mpa: {why}; closing without a reply");
        self.tx.clear();
        self.finish(StartupEvent::Failed(StartupError::Malformed(why)));
    }

    fn fail_local(&mut self, why: &'static str) {
        log::warn!("mpa: local startup configuration refused: {why}");
        self.tx.clear();
        self.finish(StartupEvent::Failed(StartupError::Malformed(why)));
    }

    fn on_request(&mut self, req: FrameRepr) {
        if req.rev == 0 && self.cfg.rev0_permissive {
            // RFC 5044 App. C.2.4: an RDMAC RNIC's Request is Rev 0 with M=1 and C=1; it has
            // no RFC 6581 enhanced data (§6: S=1 needs Rev >= 2).
            if req.enhanced.is_some() {
                return self.fail_peer("MPA Rev 0 Request with S=1");
            }
            if !(req.markers && req.crc) {
                return self.fail_peer("MPA Rev 0 Request without M=1 and C=1 (not an RDMAC RNIC)");
            }
        } else if !(1..=2).contains(&req.rev) {
            // RFC 5044 §7.1.1 "Rev": a revision we cannot interoperate with closes the
            // connection and is reported locally (no Reply). RFC 6581 §6: we speak 1 and 2 (and
            // 0 only with `rev0_permissive`, App. C).
            return self.fail_peer("unsupported MPA revision");
        }
        if req.enhanced.is_some() {
            if req.rev < 2 {
                // RFC 6581 §6: enhanced features need Rev >= 2.
                return self.fail_peer("MPA S=1 with Rev 1");
            }
            if !(self.cfg.enhanced && self.cfg.revision >= 2) {
                // RFC 6581 §10: an unenhanced responder treats S=1 as improperly formatted.
                return self.fail_peer("enhanced MPA Request to an unenhanced responder");
            }
        }
        let rtr = req.enhanced.filter(|e| e.p2p).map(|e| RtrSet {
            send: e.rtr_send,
            write: e.rtr_write,
            read: e.rtr_read,
        });
        let peer = PeerRequest {
            revision: req.rev,
            enhanced: req.enhanced.is_some(),
            crc: req.crc,
            markers: req.markers,
            ird: req.enhanced.map(|e| e.ird),
            ord: req.enhanced.map(|e| e.ord),
            rtr,
            private_data: req.private_data.clone(),
        };
        self.request = Some(req);
        self.state = State::AwaitUlp;
        self.events.push_back(StartupEvent::Request(peer));
    }

    /// RFC 5044 App. C.2.5: a permissive initiator whose (unenhanced) Request met an RDMAC
    /// responder, which answers Rev 0 with M=1 whatever our M bit said: version 0 DDP/RDMAP,
    /// markers and CRC in both directions.
    fn on_rdmac_reply(&mut self, rep: FrameRepr) {
        if self.sent_enhanced || rep.enhanced.is_some() {
            return self.fail_peer("MPA Rev 0 Reply to an enhanced Request");
        }
        if !(rep.markers && rep.crc) {
            return self.fail_peer("MPA Rev 0 Reply without M=1 and C=1 (not an RDMAC RNIC)");
        }
        if rep.rejected {
            log::warn!(
                "mpa: RDMAC (Rev 0) peer rejected the connection ({} octets of private data)",
                rep.private_data.len()
            );
            return self.finish(StartupEvent::Rejected {
                private_data: rep.private_data,
                peer_ird: None,
                peer_ord: None,
            });
        }
        log::info!("mpa: RDMAC (Rev 0) responder: DDP/RDMAP version 0, markers and CRC on");
        let cfg = &self.cfg;
        let n = Negotiated {
            role: Role::Initiator,
            revision: 0,
            enhanced: false,
            crc_tx: true,
            crc_rx: true,
            markers_tx: true,
            markers_rx: true,
            ird: cfg.ird,
            ord: cfg.ord,
            peer_ird: None,
            peer_ord: None,
            rtr: None,
            rtr_accept: RtrSet::default(),
            peer_private_data: rep.private_data,
        };
        self.finish(StartupEvent::Established(n))
    }

    fn on_reply(&mut self, rep: FrameRepr) {
        if rep.rev == 0 && rep.rev != self.cfg.revision && self.cfg.rev0_permissive {
            return self.on_rdmac_reply(rep);
        }
        if rep.rev != self.cfg.revision {
            return self.fail_peer("MPA Reply revision differs from the Request's");
        }
        if rep.rejected {
            log::warn!(
                "mpa: peer rejected the connection ({} octets of private data)",
                rep.private_data.len()
            );
            // RFC 6581 §9.1: pass the responder's IRD/ORD up for Reject too.
            return self.finish(StartupEvent::Rejected {
                private_data: rep.private_data,
                peer_ird: rep.enhanced.map(|e| e.ird),
                peer_ord: rep.enhanced.map(|e| e.ord),
            });
        }
        match (self.sent_enhanced, rep.enhanced.is_some()) {
            (true, false) => {
                return self.fail_peer("unenhanced MPA Reply to an enhanced Request");
            }
            (false, true) => {
                return self.fail_peer("enhanced MPA Reply to an unenhanced Request");
            }
            _ => {}
        }
        let cfg = &self.cfg;
        let crc = cfg.crc || rep.crc;
        let mut n = Negotiated {
            role: Role::Initiator,
            revision: rep.rev,
            enhanced: self.sent_enhanced,
            crc_tx: crc,
            crc_rx: crc,
            // M=1 in the Reply requires markers on the FPDUs we send.
            markers_tx: rep.markers,
            markers_rx: cfg.markers,
            ird: cfg.ird,
            ord: cfg.ord,
            peer_ird: rep.enhanced.map(|e| e.ird),
            peer_ord: rep.enhanced.map(|e| e.ord),
            rtr: None,
            rtr_accept: RtrSet::default(),
            peer_private_data: rep.private_data,
        };
        let Some(e) = rep.enhanced else {
            return self.finish(StartupEvent::Established(n));
        };
        // RFC 6581 §9.1: ORD at most the responder IRD (0x3FFF: leave ours unchanged).
        if e.ird != IRD_ORD_ULP {
            n.ord = cfg.ord.min(e.ird);
        }
        // IRD at least the responder ORD (0x3FFF: unchanged). Our configured IRD is what we
        // can give; a larger responder ORD is "insufficient IRD resources" (TERMINATE code 6).
        let mut cause = None;
        if e.ord != IRD_ORD_ULP && cfg.ird != IRD_ORD_ULP && e.ord > cfg.ird {
            log::warn!(
                "mpa: responder ORD {} exceeds our IRD {}: insufficient IRD resources",
                e.ord,
                cfg.ird
            );
            cause = Some(TermCause::MPA_INSUFFICIENT_IRD);
        }
        // RFC 6581 §9.2: choose one of the responder's RTR options among those we offered.
        let offered = cfg.p2p;
        match (offered, e.p2p) {
            (None, false) => {}
            (Some(ours), true) => {
                let theirs = RtrSet {
                    send: e.rtr_send,
                    write: e.rtr_write,
                    read: e.rtr_read,
                };
                match ours.intersect(&theirs).preferred() {
                    Some(k) => {
                        n.rtr = Some(k);
                        n.rtr_accept = RtrSet::only(k);
                    }
                    None => {
                        log::warn!(
                            "mpa: no RTR option in common (offered {ours:?}, responder {theirs:?})"
                        );
                        cause = cause.or(Some(TermCause::MPA_NO_MATCHING_RTR));
                    }
                }
            }
            (Some(_), false) | (None, true) => {
                log::warn!(
                    "mpa: responder answered connection model A={} to our A={}",
                    e.p2p,
                    offered.is_some()
                );
                cause = cause.or(Some(TermCause::MPA_NO_MATCHING_RTR));
            }
        }
        match cause {
            Some(cause) => self.finish(StartupEvent::Terminate {
                cause,
                negotiated: n,
            }),
            None => self.finish(StartupEvent::Established(n)),
        }
    }
}
