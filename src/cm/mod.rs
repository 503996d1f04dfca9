//! Connection manager (integrator).
