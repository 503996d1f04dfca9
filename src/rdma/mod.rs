//! DDP (RFC 5041) and RDMAP (RFC 5040) as a sans-IO queue-pair engine, and the memory-region table
//! every tagged placement and Read Request is checked against.
//!
//! The engine takes ULPDUs (DDP header + payload, as the MPA deframer hands them up) and returns
//! ULPDUs to frame; it never touches a socket, a thread or a clock.

pub mod memory;
pub mod qp;
pub mod wr;

/// Re-exported: the QP engine sends and checks the RTR kind MPA negotiated.
pub use crate::mpa::RtrKind;
pub use memory::{Access, MemoryError, MemoryTable, Mr, MrBytes, MrBytesMut, PdId, SharedMem};
pub use qp::{AheadCounts, QpConfig, QpEngine, QpEvent, QpState, RtrRole, MIN_ULPDU_ROOM};
pub use smallvec::smallvec;
pub use wr::{
    InlineData, Opcode, PostError, RecvWr, SendWr, SgList, Sge, WcOpcode, WcStatus, WorkCompletion,
    MAX_INLINE_DATA, SG_INLINE,
};
