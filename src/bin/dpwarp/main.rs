//! `dpwarp`: the command-line front end (demo now; rping, perf and rpc tools come with their issues).

mod demo;
mod perf;

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
    /// perftest-style write_bw / send_lat client or server over DPDK or kernel TCP.
    Perf(perf::Args),
    /// Plain kernel-TCP loopback baselines (stream and ping-pong) for scripts/bench.
    TcpBaseline(perf::TcpArgs),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Perf(a) => perf::run(a),
        Cmd::TcpBaseline(a) => perf::run_tcp(a),
    };
    if let Err(e) = res {
        eprintln!("dpwarp: {e}");
        std::process::exit(1);
    }
}
