//! (MPA helper) — see contract in docs/CONTRACTS.md
