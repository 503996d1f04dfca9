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
//! - `dpdk`, `dataplane` (cargo feature `dpdk`, on by default) and [`config`]: the DPDK FFI,
//!   the smoltcp-on-DPDK poll-mode workers that run connections to completion, and their TOML
//!   configuration (`docs/dataplane.md`). Everything else builds without DPDK.
//! - [`nfs`]: an NFSv3 target (RFC 1813) as a program of the RPC-over-RDMA server, with MOUNT v3
//!   and the rpcbind v2 port mapper over ONC RPC/TCP.
//! - [`rpc`]: RPC-over-RDMA (server framework, client, block-storage program) and the ONC RPC
//!   over TCP baseline.
//! - [`capture`]: offline pcap analysis (RFC 5044 App. A FPDU alignment).
//! - [`latency`]: the latency summary (one percentile definition) of every tool.
//! - [`wake`]: the eventfd with which the verbs layer wakes a connection driver.
//!
//! `unsafe` is denied everywhere except the `dpdk` module (the FFI fence), `nfs::sys` (the
//! kernel's file-handle and file-system-credential calls, which `rustix` does not wrap) and two
//! prefetch hints in the memory-region code (`rdma::memory`: lines about to be placed into and about to
//! be gathered from): the protocol core, memory regions and transports are otherwise safe
//! Rust.
#![deny(unsafe_code)]
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod affinity;
pub mod capture;
pub mod cm;
pub mod config;
pub mod conn;
pub mod crc;
#[cfg(feature = "dpdk")]
pub mod dataplane;
// The DPDK FFI fence: one of the three places that allow `unsafe` (its own
// `#![allow(unsafe_code)]`), beside `nfs::sys` (the file-handle system calls) and the
// memory-region code in `rdma::memory` (two prefetch hints); every block with a `// SAFETY:`
// comment.
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod latency;
pub mod mpa;
pub mod nfs;
pub mod rdma;
pub mod rpc;
pub mod transport;
pub mod verbs;
pub mod wake;
pub mod wire;
