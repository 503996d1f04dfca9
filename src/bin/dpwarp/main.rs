//! `dpwarp`: the command-line front end (demo now; rping, perf and rpc tools come with their issues).

mod demo;
mod rpc_bench;
mod rpc_server;

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
    /// Serve the block-storage program over RPC-over-RDMA (and ONC RPC/TCP) from a TOML config.
    RpcServer(rpc_server::Args),
    /// Benchmark NULL/READ/WRITE over RPC-over-RDMA and ONC RPC/TCP (--compare --json).
    RpcBench(rpc_bench::Args),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::RpcServer(a) => rpc_server::run(a),
        Cmd::RpcBench(a) => rpc_bench::run(a),
    };
    if let Err(e) = res {
        eprintln!("dpwarp: {e}");
        std::process::exit(1);
    }
}
