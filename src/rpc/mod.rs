//! RPC-over-RDMA (draft-ietf-nfsv4-rpcrdma-01, wire-compatible with RFC 8166 version 1) on the
//! verbs/CM API, plus the same programs over record-marked ONC RPC on kernel TCP as a baseline.
//!
//! - [`program`]: handler registry, argument reader and results body (transport independent).
//! - [`credits`]: the server's shared receive-buffer pool and per-connection grants (§3.3).
//! - [`server`]: the RPC-over-RDMA server framework (a state machine per connection, run on the
//!   thread that moves its bytes where it can), accepting over kernel TCP or the DPDK dataplane.
//! - [`client`]: the RPC-over-RDMA client library, connecting over either.
//! - [`tcp`]: ONC RPC over kernel TCP (RFC 5531 §11 record marking), server and client.
//! - [`block`]: the NULL procedure and a block-storage program backed by memory or a file.
//!
//! See `docs/rpc.md` for the design, the credit rules and what is not done.

pub mod block;
pub mod client;
pub mod config;
pub mod credits;
mod endpoint;
pub mod listener;
pub mod program;
pub mod server;
pub mod target;
pub mod tcp;

use crate::wire::xdr::{XdrReader, XdrWriter};

/// CONFIG_RDMA program (draft §6.2). The draft leaves the number unassigned ("nnnnnn"); this one
/// is from the user-defined range of RFC 5531 §7.3 and is dpwarp's choice.
pub const CONFIG_RDMA_PROG: u32 = 0x2000_1ab0;
/// CONFIG_RDMA_PROG version `VERS1` (draft §6.2).
pub const CONFIG_RDMA_VERS: u32 = 1;
/// Procedure CONF_RDMA: `config_rdma_reply CONF_RDMA(config_rdma_req)` (draft §6.2).
pub const CONF_RDMA: u32 = 1;

/// The inline size every peer must accept before configuration (draft §6.1: at least 1 KB;
/// RFC 8166 §3.3.2's default inline threshold is the same 1024).
pub const DEFAULT_INLINE: u32 = 1024;

/// `config_rdma_req` (draft §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigReq {
    /// Largest inline call the client will send.
    pub maxcall_sendsize: u32,
    /// Largest inline reply the client accepts.
    pub maxreply_sendsize: u32,
    /// RDMA Reads the client lets the server have outstanding against it (its IRD).
    pub maxrdmaread: u32,
}

/// `config_rdma_reply` (draft §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigReply {
    /// Largest inline call the server accepts.
    pub maxcall_sendsize: u32,
    /// The server's receive-buffer alignment for RDMA_MSGP (0: no padding wanted).
    pub align: u32,
    /// RDMA Reads the client may have outstanding against the server (its IRD).
    pub maxrdmaread: u32,
}

impl ConfigReq {
    /// Encode as XDR (three `uint32`s, draft §6.2).
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.maxcall_sendsize);
        w.put_u32(self.maxreply_sendsize);
        w.put_u32(self.maxrdmaread);
    }
    /// Decode from XDR (draft §6.2).
    pub fn parse(r: &mut XdrReader<'_>) -> crate::wire::Result<Self> {
        Ok(ConfigReq {
            maxcall_sendsize: r.get_u32()?,
            maxreply_sendsize: r.get_u32()?,
            maxrdmaread: r.get_u32()?,
        })
    }
}

impl ConfigReply {
    /// Encode as XDR (three `uint32`s, draft §6.2).
    pub fn emit(&self, w: &mut XdrWriter) {
        w.put_u32(self.maxcall_sendsize);
        w.put_u32(self.align);
        w.put_u32(self.maxrdmaread);
    }
    /// Decode from XDR (draft §6.2).
    pub fn parse(r: &mut XdrReader<'_>) -> crate::wire::Result<Self> {
        Ok(ConfigReply {
            maxcall_sendsize: r.get_u32()?,
            align: r.get_u32()?,
            maxrdmaread: r.get_u32()?,
        })
    }
}

/// Errors of the RPC client and server.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// Connection management (connect, accept, disconnect) failed.
    #[error("connection: {0}")]
    Cm(#[from] crate::cm::CmError),
    /// An I/O error (TCP transport, file or device).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Posting a work request to a queue pair failed.
    #[error("post: {0}")]
    Post(#[from] crate::verbs::PostError),
    /// A received header or RPC message did not decode.
    #[error("malformed message: {0}")]
    Wire(#[from] crate::wire::Error),
    #[error("peer answered RDMA_ERROR/ERR_VERS (supports {low}..={high})")]
    /// The peer answered RDMA_ERROR / ERR_VERS (RFC 8166 §4.5.1).
    ErrVers {
        /// Lowest RPC-over-RDMA version the peer supports.
        low: u32,
        /// Highest RPC-over-RDMA version the peer supports.
        high: u32,
    },
    /// The peer answered RDMA_ERROR / ERR_CHUNK (RFC 8166 §4.5.2).
    #[error("peer answered RDMA_ERROR/ERR_CHUNK")]
    ErrChunk,
    /// A work completion (Send, Receive, RDMA Read/Write) reported an error status.
    #[error("RDMA operation failed: {0}")]
    Rdma(String),
    /// No completion or reply arrived in time.
    #[error("timed out")]
    Timeout,
    /// The connection was closed.
    #[error("connection closed")]
    Closed,
    /// An operation the current state does not allow (e.g. an unknown XID, nothing in flight, a
    /// message larger than the buffers, an exhausted credit pool).
    #[error("{0}")]
    Usage(&'static str),
}
