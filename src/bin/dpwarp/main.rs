//! `dpwarp`: the command-line front end (demo now; rping, perf and rpc tools come with their issues).

mod demo;
mod dpperf;
#[cfg(not(feature = "dpdk"))]
mod nodpdk;
mod perf;
mod rpc_bench;
mod rpc_server;
mod rping;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dpwarp",
    version,
    about = "Kernel-bypass iWARP dataplane tools"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Connect two endpoints and run Send, RDMA Write and RDMA Read with the data verified.
    Demo(demo::Args),
    /// dpwarp's own write_bw / send_lat client and server over DPDK or kernel TCP (used by
    /// scripts/bench and the demo; not perftest's protocol: see `dpwarp perf` for that).
    Dpperf(dpperf::Args),
    /// Plain kernel-TCP loopback baselines (stream and ping-pong) for scripts/bench.
    TcpBaseline(dpperf::TcpArgs),
    /// RFC 5044 App. A: the fraction of TCP data segments in a pcap that begin with an FPDU.
    FpduAlign {
        /// A pcap (Ethernet) of iWARP traffic, e.g. from configs/net_pcap.toml.
        pcap: std::path::PathBuf,
    },
    /// Serve the block-storage program over RPC-over-RDMA (and ONC RPC/TCP) from a TOML config.
    RpcServer(rpc_server::Args),
    /// Benchmark NULL/READ/WRITE over RPC-over-RDMA and ONC RPC/TCP (--compare --json).
    RpcBench(rpc_bench::Args),
    /// rdma-core's rping over dpwarp: wire- and behaviour-compatible ping-pong of Send, RDMA Read
    /// and RDMA Write (-s server / -c client, -a addr, -p port, -C count, -S size, -v, -V, -d).
    Rping(rping::Args),
    /// perftest -R compatible benchmarks: `dpwarp perf write_bw|read_bw|send_bw|write_lat|read_lat|send_lat [server]`.
    Perf(perf::Args),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Dpperf(a) => dpperf::run(a),
        Cmd::TcpBaseline(a) => dpperf::run_tcp(a),
        Cmd::FpduAlign { pcap } => std::fs::read(&pcap)
            .map_err(|e| format!("{}: {e}", pcap.display()))
            .and_then(|b| dpwarp::capture::analyse(&b, 1 << 30))
            .map(|r| {
                println!(
                    "{}: {} of {} TCP data segments begin with an FPDU header ({:.1}%); {} flows skipped",
                    pcap.display(),
                    r.aligned,
                    r.data_segments,
                    100.0 * r.fraction(),
                    r.skipped_flows
                )
            }),
        Cmd::RpcServer(a) => rpc_server::run(a),
        Cmd::RpcBench(a) => rpc_bench::run(a),
        Cmd::Rping(a) => rping::run(a),
        Cmd::Perf(a) => perf::run(a),
    };
    if let Err(e) = res {
        eprintln!("dpwarp: {e}");
        std::process::exit(1);
    }
}
