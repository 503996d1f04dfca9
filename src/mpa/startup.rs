//! MPA connection startup (RFC 5044 §7, RFC 6581 §5-§10), sans-IO.
//!
//! CONTRACT (fixed by the integrator; the MPA helper implements, may add items).

use crate::rdma::RtrKind;
use std::time::{Duration, Instant};

/// Which end of the MPA exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Initiator,
    Responder,
}

/// RFC 6581 §9 flags B/C/D: which RTR indications are offered / supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtrSet {
    pub send: bool,
    pub write: bool,
    pub read: bool,
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
        }
    }
}

/// A responder's view of a received MPA Request (handed to the application before accept/reject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    pub revision: u8,
    pub enhanced: bool,
    pub crc: bool,
    pub markers: bool,
    /// Enhanced data (RFC 6581 §9), None when S=0.
    pub ird: Option<u16>,
    pub ord: Option<u16>,
    /// Peer-to-peer offer (A=1), None for client-server.
    pub rtr: Option<RtrSet>,
    /// ULP private data (enhanced data stripped).
    pub private_data: Vec<u8>,
}

/// Outcome of a successful startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub role: Role,
    pub revision: u8,
    pub enhanced: bool,
    /// CRC on FPDUs we send / we receive (RFC 5044 §7.1 C-bit rules).
    pub crc_tx: bool,
    pub crc_rx: bool,
    /// Markers on FPDUs we send / we receive (per direction, M bit).
    pub markers_tx: bool,
    pub markers_rx: bool,
    /// Local IRD/ORD after RFC 6581 §9.1.
    pub ird: u16,
    pub ord: u16,
    /// The peer's advertised IRD/ORD (passed to the ULP as §9.1 demands), None if unenhanced.
    pub peer_ird: Option<u16>,
    pub peer_ord: Option<u16>,
    /// Peer-to-peer: the RTR kind the initiator will send / the responder awaits.
    pub rtr: Option<RtrKind>,
    /// The peer's ULP private data.
    pub peer_private_data: Vec<u8>,
}

/// Why startup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    #[error("peer rejected the connection")]
    Rejected,
    #[error("malformed MPA frame: {0}")]
    Malformed(&'static str),
    #[error("startup timed out")]
    Timeout,
    #[error("peer closed the stream during startup")]
    PeerClosed,
    #[error("peer closed after an enhanced request: retry with MPA rev 1")]
    EnhancedRefused,
    #[error("peer requires markers we do not support")]
    MarkersRefused,
    #[error("insufficient IRD/ORD")]
    InsufficientIrd,
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
        private_data: Vec<u8>,
        peer_ird: Option<u16>,
        peer_ord: Option<u16>,
    },
    /// Startup failed; the stream must be closed (after transmitting whatever is queued).
    Failed(StartupError),
}

/// The startup state machine of one end.
pub struct Startup {
    // implementation-defined
}

impl Startup {
    /// Initiator: queues the MPA Request immediately.
    pub fn initiator(_cfg: MpaConfig, _now: Instant) -> Self {
        todo!()
    }
    /// Responder: waits for the Request.
    pub fn responder(_cfg: MpaConfig, _now: Instant) -> Self {
        todo!()
    }
    /// Feed received bytes. Returns how many were consumed: never more than up to the end of the
    /// peer's Request/Reply frame, so FPDU bytes that follow stay with the caller.
    pub fn on_bytes(&mut self, _input: &[u8], _now: Instant) -> usize {
        todo!()
    }
    /// The peer closed the stream (EOF).
    pub fn on_eof(&mut self) {
        todo!()
    }
    /// Append bytes to send (Request, Reply or Reject) to `out`.
    pub fn poll_transmit(&mut self, _out: &mut Vec<u8>) {
        todo!()
    }
    pub fn poll_event(&mut self) -> Option<StartupEvent> {
        todo!()
    }
    /// Responder: accept the pending Request with our `MpaConfig` values (IRD/ORD, p2p support,
    /// private data), optionally overriding the private data.
    pub fn accept(&mut self, _private_data: Option<Vec<u8>>) {
        todo!()
    }
    /// Responder: reject the pending Request (R=1) with private data.
    pub fn reject(&mut self, _private_data: Vec<u8>) {
        todo!()
    }
    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }
    pub fn handle_timeout(&mut self, _now: Instant) {
        todo!()
    }
}
