//! Stand-ins for the DPDK dataplane types when dpwarp is built without the `dpdk` cargo feature.
//!
//! The tools keep one code path for both transports (`--transport kernel|dpdk`); without the
//! feature the library has no `dataplane` module, so the tools import these instead. Every
//! handle holds a private [`Infallible`], so none can exist: [`Dataplane::start`], the only way
//! to get one, always fails with [`NoDpdk`] ("built without the dpdk feature"), and every method
//! below is unreachable, which the compiler checks (`match self.0 {}`). The field is private so
//! that the tools' own code is not flagged as unreachable. A config is still loaded and checked
//! first, so a typo is reported before the missing feature.

use std::convert::Infallible;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

use dpwarp::cm::Net;
use dpwarp::config::DataplaneConfig;

/// The error of every dataplane start in a build without the `dpdk` feature.
#[derive(Debug, Clone, Copy)]
pub struct NoDpdk;

impl fmt::Display for NoDpdk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "--transport dpdk: this dpwarp was built without the dpdk feature (rebuild with \
             default features and libdpdk installed), or use --transport kernel",
        )
    }
}

impl std::error::Error for NoDpdk {}

/// A running dataplane; never exists in this build.
pub struct Dataplane(Infallible);

impl Dataplane {
    /// Always [`NoDpdk`].
    pub fn start(_cfg: &DataplaneConfig) -> Result<Dataplane, NoDpdk> {
        Err(NoDpdk)
    }
    /// Always [`NoDpdk`].
    pub fn start_with(_cfg: &DataplaneConfig, _mode: WorkerMode) -> Result<Dataplane, NoDpdk> {
        Err(NoDpdk)
    }
    pub fn port_drivers(&self, _i: usize) -> Vec<Driver> {
        match self.0 {}
    }
    pub fn endpoint(&self, _i: usize) -> Option<Endpoint> {
        match self.0 {}
    }
    pub fn stats(&self) -> Vec<WorkerStats> {
        match self.0 {}
    }
    pub fn wait_link_up(&self, _timeout: Duration) -> bool {
        match self.0 {}
    }
    pub fn port_reports(&self) -> Vec<PortReport> {
        match self.0 {}
    }
    pub fn port_reporter(&self) -> PortReporter {
        match self.0 {}
    }
}

/// Stands in for `dataplane::PortReport` (only ever serialized).
pub type PortReport = serde_json::Value;

/// Mirrors `dataplane::PortReporter`; never exists in this build.
#[derive(Clone)]
pub struct PortReporter(Infallible);

impl PortReporter {
    pub fn reports(&self) -> Vec<PortReport> {
        match self.0 {}
    }
}

/// Like the real one, stopping the dataplane is dropping it.
impl Drop for Dataplane {
    fn drop(&mut self) {
        match self.0 {}
    }
}

/// Mirrors `dataplane::WorkerMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMode {
    Background,
    Driven,
}

/// A worker driver; never exists in this build.
pub struct Driver(Infallible);

impl Driver {
    pub fn attach(&self) {
        match self.0 {}
    }
    pub fn cpu(&self) -> Option<usize> {
        match self.0 {}
    }
}

/// Mirrors `dataplane::CopyStats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyStats {
    pub tx_payload: u64,
    pub tx_copied: u64,
    pub rx_payload: u64,
    pub rx_copied: u64,
}

impl CopyStats {
    pub fn since(&self, _before: &CopyStats) -> CopyStats {
        *self
    }
    pub fn tx_per_byte(&self) -> Option<f64> {
        None
    }
    pub fn rx_per_byte(&self) -> Option<f64> {
        None
    }
    pub fn sum<'a>(_it: impl IntoIterator<Item = &'a CopyStats>) -> CopyStats {
        CopyStats::default()
    }
}

/// The counters `dpwarp` logs (mirrors `dataplane::WorkerStats`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerStats {
    pub device: DeviceStats,
    pub copies: CopyStats,
    pub loops: u64,
    pub connections: usize,
    pub cpu: Option<usize>,
    pub sweeps: u64,
    pub timer_sweeps: u64,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub tcp_fast_retransmits: u64,
    pub tcp_timeout_retransmits: u64,
    pub tcp_loss_probes: u64,
    pub tcp_window_probes: u64,
    pub idle_yields: u64,
    pub contended_windows: u64,
    pub turn_windows: u64,
    pub contention_windows: u64,
    pub driven_spin_us: u64,
    pub warm_frames: u64,
    pub warm_rehearsals: u64,
    pub ooo_placed_fpdus: u64,
    pub ooo_placed_octets: u64,
}

/// Mirrors the fields of `dataplane::device::DeviceStats` the tools print.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub tx_backpressure: u64,
    pub tx_cksum_offload: u64,
    pub rx_cksum_good: u64,
    pub rx_cksum_sw: u64,
    pub rx_cksum_bad: u64,
    pub tx_tcp_segments: u64,
    pub tx_gso_segments: u64,
    pub tx_gso_frames: u64,
    pub tx_tso_segments: u64,
    pub tx_tso_frames: u64,
    pub tx_tso_fallbacks: u64,
    pub rx_steered_out: u64,
    pub rx_steered_in: u64,
    pub rx_arp_copies: u64,
    pub rx_steer_dropped: u64,
}

/// A port's rdma_cm-shaped entry points; never exists in this build.
#[derive(Clone)]
pub struct Endpoint(Infallible);

impl Endpoint {
    pub fn ip(&self) -> Ipv4Addr {
        match self.0 {}
    }
    pub fn poll(&self) -> bool {
        match self.0 {}
    }
    pub fn is_driven(&self) -> bool {
        match self.0 {}
    }
    pub fn poll_transmit(&self) -> bool {
        match self.0 {}
    }
}

/// `Net::from(endpoint)` of a `dpdk` build.
impl From<Endpoint> for Net {
    fn from(ep: Endpoint) -> Net {
        match ep.0 {}
    }
}
