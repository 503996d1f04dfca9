//! Verbs API (integrator).
