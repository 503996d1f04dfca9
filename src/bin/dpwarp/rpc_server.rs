//! `dpwarp rpc-server`: the block-storage program (and NULL) over RPC-over-RDMA, and optionally
//! the same program over ONC RPC on kernel TCP, configured by a TOML file (configs/rpc-*.toml).
//!
//! RPC-over-RDMA runs over the DPDK dataplane (`transport = "dpdk"`, the default: `dataplane`
//! names a dataplane config, e.g. configs/net_memif_server.toml, and `listen` must be an
//! address of its port `dataplane_port`) or over kernel TCP (`transport = "kernel"`). The server
//! itself is `dpwarp::rpc::target::RpcTarget`; this module parses arguments, prints and waits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dpwarp::rpc::block;
use dpwarp::rpc::listener::RdmaListener;
use dpwarp::rpc::server::{RdmaServer, ServerStats};
use dpwarp::rpc::target::{RpcServerConfig, RpcTarget};
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
         bulk octets RDMA-Written {} (from pool buffers {}, from the connections' result \
         buffers {}), RDMA-Read into place {}, \
         RDMA-Read into pull buffers {}, through buffers of their own {}",
        g(&st.connections),
        g(&st.calls),
        g(&st.calls_nowait),
        g(&st.bytes_written),
        g(&st.bulk_lent_bytes),
        g(&st.bulk_result_buf_bytes),
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

/// The dataplane counters of a listener over DPDK, at stop.
pub fn log_listener_stats(l: &RdmaListener) {
    #[cfg(feature = "dpdk")]
    if let Some(dp) = l.dataplane() {
        crate::net::log_device_stats(dp);
    }
    #[cfg(not(feature = "dpdk"))]
    let _ = l;
}

pub fn run(a: Args) -> Result<(), String> {
    let mut cfg = RpcServerConfig::load(&a.config)?;
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    if let Some(t) = a.transport {
        cfg.transport = t.name().into();
    }
    // The dataplane config is read and checked before anything starts (a typo should not cost
    // an EAL start).
    let transport = cfg.transport(&a.config, a.dataplane.as_deref())?;
    let mut target = RpcTarget::start(&cfg, transport)?;
    println!(
        "rpc-server: RPC-over-RDMA ({}) on {}, block store {} bytes ({}), program {:#x} v{}",
        target.listener.describe(),
        target.listener.addr(),
        target.store.size(),
        cfg.store.kind,
        block::BLOCK_PROG,
        block::BLOCK_VERS
    );
    if let (Some(t), Some(th)) = (&cfg.tcp, &target.tcp) {
        println!(
            "rpc-server: ONC RPC over TCP (record marking) on {}, {}",
            th.addr,
            match t.poll {
                tcp::TcpPoll::Blocking => "blocking",
                tcp::TcpPoll::Busy => "busy-polled",
            }
        );
    }
    if let Some(sig) = serve_until(a.duration)? {
        println!("rpc-server: {sig}: stopping");
    }
    target.stop();
    log_server_stats("rpc-server", &target.server);
    log_listener_stats(&target.listener);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpwarp::config::DataplaneConfig;

    #[test]
    fn shipped_configs_parse() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
        let s = RpcServerConfig::load(&root.join("rpc-server.toml")).unwrap();
        assert_eq!(s.store.kind, "memory");
        assert!(s.tcp.is_some());
        let sc = s.rdma.server_config();
        assert_eq!((sc.credit_pool, sc.max_credits), (1024, 128));
        let f = RpcServerConfig::load(&root.join("rpc-file.toml")).unwrap();
        assert_eq!(f.store.kind, "file");
        let fc = f.rdma.server_config();
        assert_eq!(fc.reply_padding.map(|p| p.align), Some(4096));
        let cf = root.join("rpc-server.toml");
        assert!(
            dpwarp::rpc::listener::Transport::from_config("kernel", &cf, None, None, 0).is_ok()
        );
        assert!(dpwarp::rpc::listener::Transport::from_config("xdp", &cf, None, None, 0).is_err());
        assert_eq!(s.transport, "kernel");
        let dfile = root.join("rpc-dpdk-memif-server.toml");
        let d = RpcServerConfig::load(&dfile).unwrap();
        assert_eq!(d.transport, "dpdk");
        let dpwarp::rpc::listener::Transport::Dpdk { dataplane: dp, .. } =
            d.transport(&dfile, None).unwrap()
        else {
            panic!("not the dpdk transport")
        };
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
        assert!(!RpcServerConfig::load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("on", "mpa_rev0 = \"permissive\"");
        assert!(RpcServerConfig::load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("off", "mpa_rev0 = \"refuse\"");
        assert!(!RpcServerConfig::load(&p)
            .unwrap()
            .rdma
            .server_config()
            .listen
            .is_some_and(|l| l.mpa_rev0_permissive));
        let _ = std::fs::remove_file(&p);
        let p = write("bad", "mpa_rev0 = \"sometimes\"");
        let e = RpcServerConfig::load(&p).unwrap_err();
        assert!(e.contains("mpa_rev0"), "{e}");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<RpcServerConfig>(
            "listen = \"127.0.0.1:1\"\nbogus = 1\n[store]\nkind = \"memory\"\nsize = 1\n",
        );
        assert!(e.is_err());
    }
}
