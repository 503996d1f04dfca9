//! Work requests and work completions, shaped like ibverbs' `ibv_send_wr` / `ibv_recv_wr` /
//! `ibv_wc` (RFC 5040 §5, §7 describe the operations; RFC 7306 is not implemented).

/// One scatter/gather element: `length` bytes at absolute address `addr` inside the local memory
/// region whose STag is `lkey` (addresses are the region's `Mr::addr()` based, like verbs VAs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Absolute start address inside the region (`Mr::addr()` based).
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// STag of the local region the bytes are in.
    pub lkey: u32,
}

/// Inline capacity of a [`SgList`]: work requests with up to this many SGEs allocate nothing.
pub const SG_INLINE: usize = 2;

/// A work request's scatter/gather list (`ibv_send_wr.sg_list` + `num_sge`): up to
/// [`SG_INLINE`] elements are held inline, so posting a work request allocates nothing.
/// Build it from one SGE with `sge.into()`, or with [`smallvec!`](crate::verbs::smallvec)
/// like `vec!`: `smallvec![a, b]`.
pub type SgList = smallvec::SmallVec<[Sge; SG_INLINE]>;

impl From<Sge> for SgList {
    fn from(s: Sge) -> Self {
        smallvec::smallvec![s]
    }
}

/// Most octets a send-queue work request may carry in itself (`IBV_SEND_INLINE`,
/// `max_inline_data`): a Send or RDMA Write of that much is posted with its payload, so no
/// registered memory is written, looked up or held for it (`Qp::post_send_inline`).
pub const MAX_INLINE_DATA: usize = 512;

/// Inline payload held in the work request itself up to [`INLINE_HELD`] octets (beyond, on the
/// heap), as posted with `Qp::post_send_inline`.
pub type InlineData = smallvec::SmallVec<[u8; INLINE_HELD]>;

/// Octets of [`InlineData`] held without an allocation.
pub const INLINE_HELD: usize = 128;

/// The operation of a send-queue work request (RFC 5040 §4.3 opcodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// RDMAP Send (opcode 0011b).
    Send,
    /// Send with Solicited Event (0101b).
    SendSe,
    /// Send with Invalidate (0100b): the peer invalidates `inv_stag` on delivery.
    SendInv {
        /// The peer's STag to invalidate, carried in the Invalidate STag field (RFC 5040 §4.1).
        inv_stag: u32,
    },
    /// Send with Solicited Event and Invalidate (0110b).
    SendSeInv {
        /// The peer's STag to invalidate, carried in the Invalidate STag field (RFC 5040 §4.1).
        inv_stag: u32,
    },
    /// RDMA Write (0000b) to `remote_addr` (Tagged Offset) of the peer's region `rkey` (STag).
    Write {
        /// Data Sink Tagged Offset: where in the peer's region the data goes (RFC 5041 §4.2).
        remote_addr: u64,
        /// Data Sink STag of the peer's region (RFC 5040 §4.3).
        rkey: u32,
    },
    /// RDMA Read (Read Request 0001b, answered by Read Responses 0010b) from the peer's
    /// `remote_addr`/`rkey` into the local SGEs.
    Read {
        /// Data Source Tagged Offset in the peer's region (RFC 5040 §4.4).
        remote_addr: u64,
        /// Data Source STag of the peer's region (RFC 5040 §4.4).
        rkey: u32,
    },
}

impl Opcode {
    /// The opcode of this request's work completion.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            Opcode::Write { .. } => WcOpcode::Write,
            Opcode::Read { .. } => WcOpcode::Read,
            _ => WcOpcode::Send,
        }
    }
}

/// A send-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the work completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: Opcode,
    /// Local buffers: the message source (Send, Write) or the Read's Data Sink.
    pub sg_list: SgList,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
}

/// A receive-queue work request: buffers for one incoming untagged message (RFC 5041 §5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the work completion.
    pub wr_id: u64,
    /// Buffers the message is placed into, in order (each needs `Access::LOCAL_WRITE`).
    pub sg_list: SgList,
}

/// Completion status, named after `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed without error.
    Success,
    /// Incoming message longer than the posted receive buffers.
    LocLenErr,
    /// A local SGE failed its protection check (bad lkey, bounds, rights, PD).
    LocProtErr,
    /// The QP left RTS before this request was processed.
    WrFlushErr,
    /// The peer answered with a TERMINATE for a remote access error.
    RemAccessErr,
    /// The peer answered with a TERMINATE for an operation error.
    RemOpErr,
    /// The QP could not perform the request (`IBV_WC_LOC_QP_OP_ERR`): an RDMA Read posted
    /// before establishment on a connection that then negotiated ORD 0 ([`PostError::ZeroOrd`]).
    LocQpOpErr,
    /// Any other fatal error.
    GeneralErr,
}

/// What a completion completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send (any variant: SE, Invalidate) of the send queue.
    Send,
    /// An RDMA Write.
    Write,
    /// An RDMA Read (complete once the last Read Response was placed).
    Read,
    /// A receive WR consumed by an incoming Send message.
    Recv,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request this completes.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What kind of work request it was.
    pub opcode: WcOpcode,
    /// Bytes received (Recv) or transferred.
    pub byte_len: u32,
    /// Recv completions of Send with Invalidate: the STag the peer invalidated here.
    pub invalidated_rkey: Option<u32>,
    /// Recv completion of a Send with Solicited Event.
    pub solicited: bool,
}

/// Why a work request was refused at post time (nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The send or receive queue already holds its configured depth of work requests.
    #[error("queue full")]
    QueueFull,
    /// The QP is terminated or its connection closed.
    #[error("queue pair is not in a state that accepts work requests")]
    BadState,
    /// The request itself is unusable (an SGE failed its protection check, the message exceeds
    /// 2^32-1 bytes, the remote TO range wraps, ...); the string says why.
    #[error("invalid work request: {0}")]
    Invalid(&'static str),
    /// An RDMA Read on a connection whose negotiated ORD is 0: the peer's IRD allows no inbound
    /// Read Request, and RFC 5040 §6.1 / RFC 6581 §9.1 forbid more outstanding Reads than the
    /// ORD. (With an ORD above 0, Reads beyond it wait on the send queue, as on siw.)
    #[error("RDMA Read not allowed: the negotiated ORD is 0 (the peer's IRD allows no Read; RFC 6581 §9.1)")]
    ZeroOrd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sg_lists_up_to_the_inline_capacity_do_not_allocate() {
        let s = Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        };
        let one: SgList = s.into();
        assert_eq!(one.as_slice(), &[s]);
        let two: SgList = smallvec::smallvec![s; SG_INLINE];
        assert!(!one.spilled() && !two.spilled());
        let three: SgList = smallvec::smallvec![s; SG_INLINE + 1];
        assert!(three.spilled(), "more SGEs still work, on the heap");
    }
}
