//! One iWARP connection engine (integrator).
