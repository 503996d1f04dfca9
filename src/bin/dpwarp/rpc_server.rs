//! `dpwarp rpc-server`: the block-storage program (and NULL) over RPC-over-RDMA, and optionally
//! the same program over ONC RPC on kernel TCP, configured by a TOML file (configs/rpc-*.toml).
//!
//! RPC-over-RDMA runs over the DPDK dataplane (`transport = "dpdk"`, the default: `dataplane`
//! names a dataplane config, e.g. configs/net_memif_server.toml, and `listen` must be an
//! address of its port `dataplane_port`) or over kernel TCP (`transport = "kernel"`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::{Dataplane, WorkerMode};
use dpwarp::cm::Net;
use dpwarp::config::{parse_cidr, DataplaneConfig};
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::{Dataplane, WorkerMode};
use dpwarp::rpc::block::{self, BlockStore};
/// The `[rdma]` section both servers' configurations share (`dpwarp::rpc::config`).
pub use dpwarp::rpc::config::RdmaSection as RdmaConfig;
use dpwarp::rpc::program::Registry;
use dpwarp::rpc::server::{RdmaServer, ServerHandle, ServerStats};
use dpwarp::rpc::tcp;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// TOML configuration (see configs/rpc-server.toml).
    #[arg(long)]
    config: PathBuf,
    /// Override the RPC-over-RDMA listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Override the transport: dpdk (the DPDK dataplane) or kernel (iWARP over kernel TCP).
    #[arg(long, value_enum)]
    transport: Option<crate::cli::TransportArg>,
    /// Override the dataplane config (a configs/net_*.toml file) for transport dpdk.
    #[arg(long)]
    dataplane: Option<PathBuf>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    duration: Option<u64>,
    #[command(flatten)]
    pub verbosity: crate::cli::Verbosity,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// RPC-over-RDMA listen address.
    pub listen: SocketAddr,
    /// "dpdk" (default) or "kernel".
    #[serde(default = "default_transport")]
    pub transport: String,
    /// Dataplane config for transport "dpdk" (relative paths: from this file's directory).
    #[serde(default)]
    pub dataplane: Option<PathBuf>,
    /// Which port of the dataplane config serves RPC-over-RDMA.
    #[serde(default)]
    pub dataplane_port: usize,
    pub store: StoreConfig,
    #[serde(default)]
    pub rdma: RdmaConfig,
    /// Also serve the program over ONC RPC / kernel TCP (the baseline).
    #[serde(default)]
    pub tcp: Option<TcpConfig>,
}

fn default_transport() -> String {
    "dpdk".into()
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// "memory" or "file".
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// Backing file for kind = "file".
    pub path: Option<PathBuf>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    pub listen: SocketAddr,
    /// How each connection's thread waits on its socket: "blocking" (default) or "busy"
    /// (spinning on a non-blocking socket, a core per connection: the busy-polled baseline
    /// for `rpc-bench --tcp-server ... --tcp-poll busy`).
    #[serde(default)]
    pub poll: tcp::TcpPoll,
}

pub fn load(path: &PathBuf) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let c: FileConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if !matches!(c.rdma.mpa_rev0.as_str(), "refuse" | "permissive") {
        return Err(format!(
            "{}: [rdma] mpa_rev0 = {:?}: \"refuse\" or \"permissive\"",
            path.display(),
            c.rdma.mpa_rev0
        ));
    }
    Ok(c)
}

pub fn make_store(s: &StoreConfig) -> Result<Arc<BlockStore>, String> {
    match s.kind.as_str() {
        "memory" => Ok(Arc::new(BlockStore::memory(s.size as usize))),
        "file" => {
            let p = s
                .path
                .as_ref()
                .ok_or("store.kind = \"file\" needs store.path")?;
            BlockStore::file(p, s.size)
                .map(Arc::new)
                .map_err(|e| format!("{}: {e}", p.display()))
        }
        k => Err(format!("store.kind {k:?}: expected \"memory\" or \"file\"")),
    }
}

pub fn check_transport(t: &str) -> Result<(), String> {
    match t {
        "kernel" | "dpdk" => Ok(()),
        t => Err(format!("transport {t:?}: expected \"dpdk\" or \"kernel\"")),
    }
}

/// The dataplane config of a `transport = "dpdk"` server: `over` (`--dataplane`) as given,
/// else the file's `dataplane` resolved against the directory of the config file `config`.
pub fn dataplane_path(
    config: &Path,
    over: Option<&PathBuf>,
    file: Option<&PathBuf>,
) -> Result<PathBuf, String> {
    if let Some(p) = over {
        return Ok(p.clone());
    }
    match file {
        Some(p) if p.is_relative() => Ok(config
            .parent()
            .map(|d| d.join(p))
            .unwrap_or_else(|| p.clone())),
        Some(p) => Ok(p.clone()),
        None => Err(format!(
            "{}: transport \"dpdk\" (the default) needs a dataplane config: set `dataplane = \
             \"FILE\"` (e.g. net_memif_server.toml, see configs/rpc-dpdk-memif-server.toml) or \
             pass --dataplane FILE; or use transport = \"kernel\" / --transport kernel for \
             iWARP over kernel TCP",
            config.display()
        )),
    }
}

/// A running RPC-over-RDMA listener: `_dp` keeps the EAL, ports and workers (if any) running.
/// Serve until `duration` seconds (if any) have passed or SIGTERM or SIGINT arrives (a
/// service manager's stop, Ctrl-C): the servers' main loop. Returns the signal's name if one
/// ended it, so that the caller stops its listeners and logs its counters before exiting.
/// The server's counters at stop (info level): connections, calls, and where the bulk bytes
/// went (docs/rpc.md "Zero-copy bulk").
pub fn log_server_stats(tool: &str, s: &RdmaServer) {
    let st = s.stats();
    let g = |c| ServerStats::get(c);
    log::info!(
        "{tool}: {} connections, {} calls ({} answered at once without the handler pool); \
         bulk octets RDMA-Written {} (from pool buffers {}), RDMA-Read into place {}, \
         RDMA-Read into pull buffers {}, through buffers of their own {}",
        g(&st.connections),
        g(&st.calls),
        g(&st.calls_nowait),
        g(&st.bytes_written),
        g(&st.bulk_lent_bytes),
        g(&st.bulk_placed_bytes),
        g(&st.bulk_pooled_pull_bytes),
        g(&st.bulk_staged_bytes)
    );
}

pub fn serve_until(duration: Option<u64>) -> Result<Option<&'static str>, String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = Vec::new();
    for (name, sig) in [("SIGTERM", SIGTERM), ("SIGINT", SIGINT)] {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| format!("{name} handler: {e}"))?;
        signals.push((name, flag));
    }
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if let Some((name, _)) = signals
            .iter()
            .find(|(_, f)| f.load(std::sync::atomic::Ordering::Relaxed))
        {
            return Ok(Some(name));
        }
        if duration.is_some_and(|d| start.elapsed() >= Duration::from_secs(d)) {
            return Ok(None);
        }
    }
}

pub struct RdmaListener {
    pub _dp: Option<Dataplane>,
    pub handle: ServerHandle,
    /// How it listens, for the start-up line.
    pub how: String,
}

/// Start `server` listening on `listen`: over kernel TCP when `dpcfg` is None, else on port
/// `dataplane_port` of the DPDK dataplane `dpcfg` (whose address `listen` must be). The one
/// place the RPC-over-RDMA servers of this binary (rpc-server, nfs-server) pick a transport.
pub fn listen_rdma(
    server: &RdmaServer,
    listen: SocketAddr,
    dpcfg: Option<(PathBuf, DataplaneConfig)>,
    dataplane_port: usize,
) -> Result<RdmaListener, String> {
    match dpcfg {
        None => {
            let handle = server
                .listen(&Net::kernel(), listen)
                .map_err(|e| format!("listen {listen}: {e}"))?;
            Ok(RdmaListener {
                _dp: None,
                handle,
                how: "iWARP over kernel TCP".to_string(),
            })
        }
        Some((path, dc)) => {
            let pc = dc
                .ports
                .get(dataplane_port)
                .ok_or_else(|| format!("{}: no port {}", path.display(), dataplane_port))?;
            let device = pc.device.clone();
            let (ip, _) = parse_cidr(&pc.ip).map_err(|e| format!("{}: {e}", path.display()))?;
            match listen {
                SocketAddr::V4(v4) if v4.ip().is_unspecified() || *v4.ip() == ip => {}
                l => {
                    return Err(format!(
                        "listen {l}: not the address of dataplane port {} ({ip}) in {}",
                        dataplane_port,
                        path.display()
                    ))
                }
            }
            // Run to completion: the server's reactors drive the port's workers and serve each
            // connection on its worker's thread (blocking procedures go to the handler pool).
            let dp = Dataplane::start_with(&dc, WorkerMode::Driven)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let ep = dp.endpoint(dataplane_port).expect("port checked above");
            let addr = SocketAddr::from((ep.ip(), listen.port()));
            let handle = server
                .listen(&Net::from(ep), addr)
                .map_err(|e| format!("listen {listen} on the dataplane: {e}"))?;
            Ok(RdmaListener {
                _dp: Some(dp),
                handle,
                how: format!(
                    "iWARP over the DPDK dataplane, {device} of {}, served to completion on its workers",
                    path.display()
                ),
            })
        }
    }
}

pub fn run(a: Args) -> Result<(), String> {
    let mut cfg = load(&a.config)?;
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    if let Some(t) = a.transport {
        cfg.transport = t.name().into();
    }
    check_transport(&cfg.transport)?;
    if cfg.transport == "kernel" && a.dataplane.is_some() {
        return Err("--dataplane is for transport dpdk".into());
    }
    // Resolve the dataplane config before anything starts (a typo should not cost an EAL start).
    let dpcfg = if cfg.transport == "dpdk" {
        let path = dataplane_path(&a.config, a.dataplane.as_ref(), cfg.dataplane.as_ref())?;
        let dc = DataplaneConfig::load(&path)?;
        Some((path, dc))
    } else {
        None
    };
    let store = make_store(&cfg.store)?;
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let mut scfg = cfg.rdma.server_config();
    if dpcfg.is_some() && cfg.rdma.mpa_rev0 != "permissive" {
        // The dataplane config's `[tcp]` `mpa_timeout_ms` / `max_startups` apply (a permissive
        // listener, RFC 5044 App. C, takes this file's `[rdma]` values instead).
        scfg.listen = None;
    }
    let server = RdmaServer::new(reg.clone(), scfg);
    let l = listen_rdma(&server, cfg.listen, dpcfg, cfg.dataplane_port)?;
    let (h, how) = (&l.handle, &l.how);
    println!(
        "rpc-server: RPC-over-RDMA ({how}) on {}, block store {} bytes ({}), program {:#x} v{}",
        h.addr,
        store.size(),
        cfg.store.kind,
        block::BLOCK_PROG,
        block::BLOCK_VERS
    );
    let th = match &cfg.tcp {
        Some(t) => {
            let th = tcp::serve_with(t.listen, reg, t.poll)
                .map_err(|e| format!("listen {}: {e}", t.listen))?;
            println!(
                "rpc-server: ONC RPC over TCP (record marking) on {}, {}",
                th.addr,
                match t.poll {
                    tcp::TcpPoll::Blocking => "blocking",
                    tcp::TcpPoll::Busy => "busy-polled",
                }
            );
            Some(th)
        }
        None => None,
    };
    if let Some(sig) = serve_until(a.duration)? {
        println!("rpc-server: {sig}: stopping");
    }
    l.handle.stop();
    if let Some(t) = th {
        t.stop();
    }
    log_server_stats("rpc-server", &server);
    if let Some(dp) = &l._dp {
        crate::net::log_device_stats(dp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_configs_parse() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
        let s = load(&root.join("rpc-server.toml")).unwrap();
        assert_eq!(s.store.kind, "memory");
        assert!(s.tcp.is_some());
        let sc = s.rdma.server_config();
        assert_eq!((sc.credit_pool, sc.max_credits), (1024, 128));
        let f = load(&root.join("rpc-file.toml")).unwrap();
        assert_eq!(f.store.kind, "file");
        let fc = f.rdma.server_config();
        assert_eq!(fc.reply_padding.map(|p| p.align), Some(4096));
        assert!(check_transport("dpdk").is_ok());
        assert!(check_transport("kernel").is_ok());
        assert!(check_transport("xdp").is_err());
        assert_eq!(s.transport, "kernel");
        let d = load(&root.join("rpc-dpdk-memif-server.toml")).unwrap();
        assert_eq!(d.transport, "dpdk");
        let a = Args {
            config: root.join("rpc-dpdk-memif-server.toml"),
            listen: None,
            transport: None,
            dataplane: None,
            duration: None,
            verbosity: Default::default(),
        };
        let dp = DataplaneConfig::load(
            &dataplane_path(&a.config, a.dataplane.as_ref(), d.dataplane.as_ref()).unwrap(),
        )
        .unwrap();
        let ip = dp.ports[d.dataplane_port]
            .ip
            .split('/')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(d.listen.ip().to_string(), ip);
        // Its client side: the same memif socket, the other role, an address on the same /24.
        let c = DataplaneConfig::load(&root.join("rpc-memif-dataplane-client.toml")).unwrap();
        let sock = |a: &[String]| {
            a.iter()
                .find_map(|x| x.split(',').find_map(|kv| kv.strip_prefix("socket=")))
                .map(str::to_string)
        };
        assert_eq!(sock(&c.eal.args), sock(&dp.eal.args));
        assert!(c.eal.args.iter().any(|a| a.contains("role=client")));
        assert!(c.ports[0].ip.starts_with("10.91.0."));
        assert_eq!((dp.worker.spin_us, c.worker.spin_us), (0, 0));
    }

    #[test]
    fn mpa_rev0_key() {
        let dir = std::env::temp_dir();
        let write = |name: &str, rdma: &str| {
            let p = dir.join(format!(
                "dpwarp-mpa-rev0-{}-{name}.toml",
                std::process::id()
            ));
            std::fs::write(
                &p,
                format!("listen = \"127.0.0.1:1\"\n[store]\nkind = \"memory\"\nsize = 1\n[rdma]\n{rdma}\n"),
            )
            .unwrap();
            p
        };
        let p = write("default", "");
        assert!(!load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("on", "mpa_rev0 = \"permissive\"");
        assert!(load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("off", "mpa_rev0 = \"refuse\"");
        assert!(!load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("bad", "mpa_rev0 = \"sometimes\"");
        let e = load(&p).unwrap_err();
        assert!(e.contains("mpa_rev0"), "{e}");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<FileConfig>(
            "listen = \"127.0.0.1:1\"\nbogus = 1\n[store]\nkind = \"memory\"\nsize = 1\n",
        );
        assert!(e.is_err());
    }
}
