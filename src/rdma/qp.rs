//! The sans-IO queue-pair engine: RDMAP over DDP (RFC 5040, RFC 5041).
//!
//! CONTRACT (fixed by the integrator; the RDMA helper implements, may add items).

use super::memory::{MemoryTable, PdId};
use super::wr::{PostError, RecvWr, SendWr, WorkCompletion};
use crate::wire::terminate::TermCause;

/// RFC 6581 §9.2 Ready-To-Receive indication kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// Zero-length FULPDU Send (flag B).
    Send,
    /// Zero-length RDMA Write (flag C).
    Write,
    /// Zero-length RDMA Read (flag D).
    Read,
}

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
    pub pd: PdId,
    /// Inbound Read Queue depth: Read Requests we serve at once (RFC 5040 §6.5).
    pub ird: u32,
    /// Outbound Read depth: Read Requests we may have outstanding.
    pub ord: u32,
    pub sq_depth: usize,
    pub rq_depth: usize,
    pub rtr: Option<RtrRole>,
}

/// One queue pair's DDP/RDMAP state.
pub struct QpEngine {
    // implementation-defined
}

impl QpEngine {
    pub fn new(_cfg: QpConfig, _mem: MemoryTable) -> Self {
        todo!()
    }
    pub fn state(&self) -> QpState {
        todo!()
    }
    pub fn post_send(&mut self, _wr: SendWr) -> Result<(), PostError> {
        todo!()
    }
    pub fn post_recv(&mut self, _wr: RecvWr) -> Result<(), PostError> {
        todo!()
    }
    /// Process one ULPDU (DDP header + payload, CRC already verified by MPA). Never panics; any
    /// error queues the TERMINATE the RFCs demand (nothing of the offending message is placed).
    pub fn on_ulpdu(&mut self, _ulpdu: &[u8]) {
        todo!()
    }
    /// Append the next outgoing ULPDU (at most `mulpdu` bytes) to `out`; false if none is ready.
    pub fn poll_ulpdu(&mut self, _out: &mut Vec<u8>) -> bool {
        todo!()
    }
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        todo!()
    }
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        todo!()
    }
    /// A lower layer (MPA: CRC error, marker error; or the ULP) failed: queue a TERMINATE with
    /// `cause`, flush outstanding work, enter `Terminated`.
    pub fn terminate(&mut self, _cause: TermCause) {
        todo!()
    }
    /// The stream closed: flush every outstanding work request with `WrFlushErr`.
    pub fn flush(&mut self) {
        todo!()
    }
}
