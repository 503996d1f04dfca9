//! The tools' transport setup, shared by `rping`, `perf`, `dpperf` and the demo: resolving
//! `--transport` / `--config`, starting the DPDK dataplane, the servers' MPA startup options.
//! Connections themselves go through the library's one connection API ([`dpwarp::cm::Net`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{NetArgs, TransportArg};
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::{Dataplane, Endpoint, WorkerMode};
use dpwarp::cm::{ListenConfig, Listener, Net};
use dpwarp::config::DataplaneConfig;
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::{Dataplane, Endpoint, WorkerMode};

/// A server's MPA startup options (`--mpa-timeout`, `--max-startups`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StartupOpts {
    /// Server: how long an incoming connection may take to deliver its whole MPA Request
    /// before it is closed (RFC 5044 §7.1.2 item 10), e.g. `300ms`, `5s`, `2.5` (seconds).
    /// Default 5 s (on DPDK: the config's `[tcp] mpa_timeout_ms`).
    #[arg(long, value_parser = parse_duration)]
    pub mpa_timeout: Option<Duration>,
    /// Server: MPA startups in progress at most; connections beyond are closed with a log
    /// line. Default 256 (on DPDK: the config's `[tcp] max_startups`).
    #[arg(long)]
    pub max_startups: Option<usize>,
}

/// `300ms`, `5s` or a number of seconds (`2.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(v) = t.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: a duration like 300ms, 5s or 2.5"))?;
    if !v.is_finite() || v < 0.0 || v * scale > 86_400.0 {
        return Err(format!("{s:?}: between 0 and a day"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

impl StartupOpts {
    /// Listen on `addr` through `net` with the server's `--mpa-timeout` / `--max-startups`:
    /// with neither set the transport's own settings apply (kernel TCP: [`ListenConfig`]'s
    /// defaults; DPDK: the config's `[tcp]` values), else [`ListenConfig`]'s defaults for the
    /// unset one.
    pub fn listen(&self, net: &Net, addr: SocketAddr) -> Result<Listener, String> {
        self.listen_opts(net, addr, false)
    }

    /// [`StartupOpts::listen`], also taking MPA Rev 0 Requests from RDMA Consortium peers when
    /// `rev0_permissive` (RFC 5044 App. C; on DPDK the startup deadline and cap are then
    /// [`ListenConfig`]'s unless given).
    pub fn listen_opts(
        &self,
        net: &Net,
        addr: SocketAddr,
        rev0_permissive: bool,
    ) -> Result<Listener, String> {
        let r = if self.mpa_timeout.is_none() && self.max_startups.is_none() && !rev0_permissive {
            net.listen(addr)
        } else {
            let d = ListenConfig::default();
            net.listen_with(
                addr,
                &ListenConfig {
                    mpa_timeout: self.mpa_timeout.unwrap_or(d.mpa_timeout),
                    max_startups: self.max_startups.unwrap_or(d.max_startups),
                    mpa_rev0_permissive: rev0_permissive,
                    ..d
                },
            )
        };
        r.map_err(|e| format!("listen {addr}: {e}"))
    }
}

/// The byte-stream backend a tool (`rping`, `perf`, `dpperf`) runs on, resolved from its
/// `--transport` and `--config` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Kernel TCP sockets.
    Kernel,
    /// The DPDK dataplane described by this config file.
    Dpdk(PathBuf),
}

/// Resolve `--transport`/`--config` the way every tool does (DPDK is the default).
///
/// - `--transport` falls back to `$DPWARP_TRANSPORT` (clap's `env`), then `dpdk`.
/// - For dpdk, `--config` falls back to `$DPWARP_CONFIG`; with neither the tool stops with an
///   error naming both ways out: it never silently runs over kernel TCP instead.
/// - An explicit `--config` with kernel is refused (it would be ignored); `$DPWARP_CONFIG` is
///   not, so one exported config does not break kernel runs.
pub fn backend(n: &NetArgs) -> Result<Backend, String> {
    match n.transport {
        TransportArg::Kernel if n.config.is_some() && !n.config_from_env => {
            Err("--config is for --transport dpdk".into())
        }
        TransportArg::Kernel => Ok(Backend::Kernel),
        TransportArg::Dpdk => n.config.clone().map(Backend::Dpdk).ok_or_else(|| {
            "--transport dpdk (the default) needs --config FILE or $DPWARP_CONFIG (a \
             dataplane config, see configs/), or use --transport kernel"
                .to_string()
        }),
    }
}

/// The `"ports"` of a tool's `--json` output: what each port's PMD granted
/// (`Dataplane::port_reports`: device, bus, driver, queues, link, MTU, offloads, RSS).
pub fn ports_json(dp: &Dataplane) -> serde_json::Value {
    serde_json::to_value(dp.port_reports()).unwrap_or_default()
}

/// Log every dataplane worker's device counters (info level: on stderr with -v), the checksum
/// offload ones included.
pub fn log_device_stats(dp: &Dataplane) {
    for (i, w) in dp.stats().iter().enumerate() {
        let d = &w.device;
        log::info!(
            "dataplane: worker {i}: rx {} tx {} backpressure {}; checksum offload: tx {} \
             rx good {} rx sw-verified {} rx bad {}",
            d.rx_packets,
            d.tx_packets,
            d.tx_backpressure,
            d.tx_cksum_offload,
            d.rx_cksum_good,
            d.rx_cksum_sw,
            d.rx_cksum_bad
        );
        if d.rx_steered_out + d.rx_steered_in + d.rx_arp_copies + d.rx_steer_dropped > 0 {
            log::info!(
                "dataplane: worker {i}: flow steering: handed to other workers {}, taken from \
                 them {}, ARP copies {}, dropped {}",
                d.rx_steered_out,
                d.rx_steered_in,
                d.rx_arp_copies,
                d.rx_steer_dropped
            );
        }
        // A line of its own: scripts (and tests/dpdk_kernel_peer.rs) read the one above.
        log::info!(
            "dataplane: worker {i}: tcp retransmits: fast {} timeout {}, loss probes {}, \
             zero-window probes {}; tagged FPDUs placed out of order {} ({} octets)",
            w.tcp_fast_retransmits,
            w.tcp_timeout_retransmits,
            w.tcp_loss_probes,
            w.tcp_window_probes,
            w.ooo_placed_fpdus,
            w.ooo_placed_octets
        );
        if d.tx_gso_segments + d.tx_tso_segments + d.tx_tso_fallbacks > 0 {
            log::info!(
                "dataplane: worker {i}: segments of several frames: cut by the device {} into \
                 {} frames; by the NIC (tso) {} into {} frames; tso fallbacks {}",
                d.tx_gso_segments,
                d.tx_gso_frames,
                d.tx_tso_segments,
                d.tx_tso_frames,
                d.tx_tso_fallbacks
            );
        }
        log::info!(
            "dataplane: worker {i}: idle yields {} (driven, past worker.driven_spin_us); \
             CPU contended in {} of {} windows, taking turns in {}; yields after {}us idle; \
             warm keep-alives {}, rehearsals {}",
            w.idle_yields,
            w.contended_windows,
            w.contention_windows,
            w.turn_windows,
            w.driven_spin_us,
            w.warm_frames,
            w.warm_rehearsals
        );
    }
}

/// Start the dataplane from a config file and return the endpoint of port `port`
/// (background worker threads).
pub fn start_dpdk(config: &std::path::Path, port: usize) -> Result<(Dataplane, Endpoint), String> {
    start_dpdk_with(config, port, WorkerMode::Background)
}

/// [`start_dpdk`] in `mode`; with [`WorkerMode::Driven`] the calling thread is pinned to the
/// port's (first) worker core and drives its workers from then on.
pub fn start_dpdk_with(
    config: &std::path::Path,
    port: usize,
    mode: WorkerMode,
) -> Result<(Dataplane, Endpoint), String> {
    let cfg = DataplaneConfig::load(config)?;
    let dp = Dataplane::start_with(&cfg, mode).map_err(|e| e.to_string())?;
    let ep = dp
        .endpoint(port)
        .ok_or_else(|| format!("{}: no port {port}", config.display()))?;
    if let Some(d) = dp.port_drivers(port).first() {
        d.attach();
        log::info!(
            "dataplane: this thread drives port {port}'s workers on CPU {:?}",
            d.cpu()
        );
    }
    Ok((dp, ep))
}

/// How `dpperf` runs the workers (`--worker-mode`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    /// The tool's thread drives its dataplane worker (run to completion, no thread hand-off).
    Driven,
    /// Worker threads in the background; the tool's thread posts and reaps.
    Background,
}

impl From<ModeArg> for WorkerMode {
    fn from(m: ModeArg) -> WorkerMode {
        match m {
            ModeArg::Driven => WorkerMode::Driven,
            ModeArg::Background => WorkerMode::Background,
        }
    }
}
