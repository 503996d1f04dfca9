//! (RDMA helper) — see contract in docs/CONTRACTS.md
