//! `dpwarp`: the command-line front end (demo now; rping, perf and rpc tools come with their issues).

mod demo;
mod perf;
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
        Cmd::Rping(a) => rping::run(a),
        Cmd::Perf(a) => perf::run(a),
    };
    if let Err(e) = res {
        eprintln!("dpwarp: {e}");
        std::process::exit(1);
    }
}
