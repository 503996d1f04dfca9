//! MPA (RFC 5044) with enhanced connection setup (RFC 6581), sans-IO: connection startup
//! ([`startup`]), the FPDU framer ([`framer`]) and the streaming deframer ([`deframer`]).

pub mod deframer;
pub mod framer;
pub mod startup;

pub use deframer::{DeframeError, Deframer, FpduAt, Ulpdu};
pub use framer::Framer;
pub use startup::{
    MpaConfig, Negotiated, PeerRequest, Role, RtrKind, RtrSet, Startup, StartupError, StartupEvent,
};
