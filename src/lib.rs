//! dpwarp: a software iWARP RNIC.
//!
//! Layers, bottom to top (see `docs/ARCHITECTURE.md`):
//! - [`wire`]: zero-copy views and plain `Repr`s for MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and
//!   RDMAP (RFC 5040) headers.
//! - [`crc`]: CRC32c (RFC 5044 §4.4) on the fastest correct implementation for the CPU.
//! - [`mpa`]: sans-IO MPA connection startup, FPDU framer and streaming deframer.
//! - [`rdma`]: sans-IO DDP/RDMAP queue-pair engine and the memory-region table.
//! - [`conn`]: one iWARP connection: MPA startup, then FPDUs carrying the QP engine's ULPDUs.
//! - [`transport`]: the byte-stream trait and its backends (kernel TCP, in-memory link).
//! - [`verbs`] and [`cm`]: the ibverbs / rdma_cm shaped safe API applications use.
//! - [`dpdk`], [`dataplane`], [`config`]: the DPDK FFI, the smoltcp-on-DPDK poll-mode workers
//!   that run connections to completion, and their TOML configuration (`docs/dataplane.md`).
//! - [`rpc`]: RPC-over-RDMA (server framework, client, block-storage program) and the ONC RPC
//!   over TCP baseline.
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod cm;
pub mod config;
pub mod conn;
pub mod crc;
pub mod dataplane;
pub mod dpdk;
pub mod mpa;
pub mod rdma;
pub mod rpc;
pub mod transport;
pub mod verbs;
pub mod wire;
