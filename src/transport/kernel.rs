//! Kernel TCP transport (infra helper).
