//! `dpwarp`: the command-line tools (demo, rping, perf, dpperf, rpc-server, nfs-server, rpc-bench, ...).
//!
//! Conventions: enumerated options are clap `ValueEnum`s (a bad value is a usage error, exit
//! status 2, listing the valid ones); environment fallbacks are clap `env`s; logs go to stderr
//! at warn unless `-v`/`-vv` (or `RUST_LOG`) ask for more, so stdout carries only results;
//! `--json` output is serde_json.

mod cli;
mod demo;
mod dpperf;
mod load;
mod net;
mod nfs_bench;
mod nfs_probe;
mod nfs_server;
#[cfg(not(feature = "dpdk"))]
mod nodpdk;
mod perf;
mod rpc_bench;
mod rpc_server;
mod rping;
mod table;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dpwarp",
    version,
    about = "Kernel-bypass iWARP dataplane tools"
)]
struct Cli {
    /// More log output on stderr for any tool: -v info, -vv debug (default: warnings only;
    /// RUST_LOG, when set, overrides). `dpwarp -v rping ...`: rping's own -v shows ping data.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Connect two endpoints and run Send, RDMA Write and RDMA Read with the data verified.
    Demo(demo::Args),
    /// dpwarp's own bench protocol: write_bw / send_lat client and server over DPDK or kernel
    /// TCP, with copy and segment counts (used by scripts/bench, the demo and the tests). Not
    /// perftest's wire protocol (that is `dpwarp perf`): the test goes in the MPA private data,
    /// one connection per test and size, no control connection; the data loops are perf's.
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
    /// Serve a host directory as NFSv3 over RPC-over-RDMA, with MOUNT v3 and rpcbind over TCP.
    NfsServer(nfs_server::Args),
    /// dpwarp's RPC-over-RDMA client against an NFSv3/RDMA server (e.g. Linux knfsd): rpcbind,
    /// MOUNT over TCP, then NFS NULL, FSINFO and GETATTR on the export's root over RDMA.
    NfsProbe(nfs_probe::Args),
    /// NFSv3/RDMA storage load: N connections (like nconnect) x credits, an operation mix on a
    /// file it writes first, every reply checked; one JSON object (docs/nfs.md "nfs-bench").
    NfsBench(nfs_bench::Args),
    /// Benchmark NULL/READ/WRITE over RPC-over-RDMA and ONC RPC/TCP (--compare --json).
    RpcBench(rpc_bench::Args),
    /// rdma-core's rping over dpwarp: wire- and behaviour-compatible ping-pong of Send, RDMA Read
    /// and RDMA Write (-s server / -c client, -a addr, -p port, -C count, -S size, -v, -V, -d).
    Rping(rping::Args),
    /// perftest -R compatible benchmarks: `dpwarp perf <TEST> [SERVER]`.
    Perf(perf::Args),
}

fn main() {
    // An empty $DPWARP_TRANSPORT / $DPWARP_CONFIG means unset (`VAR= dpwarp ...`), as before
    // clap read them; clap would take "" as a value. Single-threaded here: nothing else reads
    // the environment concurrently.
    for v in ["DPWARP_TRANSPORT", "DPWARP_CONFIG"] {
        if std::env::var_os(v).is_some_and(|x| x.is_empty()) {
            std::env::remove_var(v);
        }
    }
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Whether `config` came from $DPWARP_CONFIG (tolerated with --transport kernel) or from
    // --config (refused there).
    let config_from_env = matches.subcommand().is_some_and(|(_, m)| {
        m.ids().any(|id| id.as_str() == "config")
            && m.value_source("config") == Some(clap::parser::ValueSource::EnvVariable)
    });
    let sub_verbose = match &mut cli.cmd {
        Cmd::Perf(a) => {
            a.net.config_from_env = config_from_env;
            a.verbosity.verbose
        }
        Cmd::Rping(a) => {
            a.net.config_from_env = config_from_env;
            0
        }
        Cmd::Dpperf(a) => {
            a.net.config_from_env = config_from_env;
            a.verbosity.verbose
        }
        Cmd::Demo(a) => a.verbosity.verbose,
        Cmd::TcpBaseline(a) => a.verbosity.verbose,
        Cmd::RpcServer(a) => a.verbosity.verbose,
        Cmd::NfsServer(a) => a.verbosity.verbose,
        Cmd::NfsProbe(a) => {
            a.net.config_from_env = config_from_env;
            a.verbosity.verbose
        }
        Cmd::NfsBench(a) => {
            a.net.config_from_env = config_from_env;
            a.verbosity.verbose
        }
        Cmd::RpcBench(a) => a.verbosity.verbose,
        Cmd::FpduAlign { .. } => 0,
    };
    cli::init_logging(cli.verbose.saturating_add(sub_verbose));
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
        Cmd::NfsServer(a) => nfs_server::run(a),
        Cmd::NfsProbe(a) => nfs_probe::run(a),
        Cmd::NfsBench(a) => nfs_bench::run(a),
        Cmd::RpcBench(a) => rpc_bench::run(a),
        Cmd::Rping(a) => rping::run(a),
        Cmd::Perf(a) => perf::run(a),
    };
    if let Err(e) = res {
        cli::progress_clear();
        eprintln!("dpwarp: {e}");
        std::process::exit(1);
    }
}
