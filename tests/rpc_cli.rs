//! The command-line tools: `dpwarp rpc-server --config` serves a storage target a client can use
//! over both RPC-over-RDMA and ONC RPC/TCP; `dpwarp rpc-bench --compare --json` prints the five
//! figures from one run, over the DPDK dataplane by default (net_ring in one process) and over
//! kernel TCP; the refusals of a dpdk transport without a dataplane config.

use std::net::SocketAddr;

use dpwarp::cm::Net;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dpwarp::rpc::block::{self, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::Body;
use dpwarp::rpc::tcp::TcpClient;

mod common;
use common::free_port;

/// An `rpc-server` child: killed when dropped; its stderr goes to `log`, printed when the test
/// fails (a server that could not bind its port, say, tells why).
struct Server {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Server {
    /// `dpwarp rpc-server --config CFG --duration 60`, its stderr to `server.log` in `dir`.
    fn start(cfg: &std::path::Path, stdout: Stdio, dir: &std::path::Path) -> Server {
        let log = dir.join("server.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
            .args(["rpc-server", "--config"])
            .arg(cfg)
            .args(["--duration", "60"])
            .stdout(stdout)
            .stderr(f)
            .spawn()
            .unwrap();
        Server { child, log }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("rpc-server's stderr ({}):\n{log}", self.log.display());
        }
    }
}

fn connect_retry(addr: SocketAddr) -> RdmaClient {
    let t = Instant::now();
    loop {
        match RdmaClient::connect(&Net::kernel(), addr, ClientConfig::default()) {
            Ok(c) => return c,
            Err(e) if t.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("rpc-server did not come up: {e}"),
        }
    }
}

#[test]
fn rpc_server_from_a_config_file_serves_both_protocols() {
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (p1, p2) = (free_port(), free_port());
    let img = dir.join("block.img");
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{p1}\"\ntransport = \"kernel\"\n[store]\nkind = \"file\"\n\
             size = 1048576\npath = \"{}\"\n[rdma]\nmax_credits = 8\n[tcp]\nlisten = \"127.0.0.1:{p2}\"\n",
            img.display()
        ),
    )
    .unwrap();
    let server = Server::start(&cfg, Stdio::null(), &dir);
    let mut c = connect_retry(SocketAddr::from(([127, 0, 0, 1], p1)));
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            block::write_args(512, data.clone()),
            &CallOpts::default(),
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(100_000)
    );
    let opts = CallOpts {
        write_chunks: vec![100_000],
        reply_chunk: None,
        segments: 0,
    };
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_READ,
            block::read_args(512, 100_000),
            &opts,
        )
        .unwrap();
    assert_eq!(
        block::decode_read(&mut rep.results().unwrap()).unwrap(),
        Ok(data.clone())
    );
    assert!(c.grant() <= 8);
    // The same store over ONC RPC / TCP.
    let mut t = TcpClient::connect(SocketAddr::from(([127, 0, 0, 1], p2)), 4).unwrap();
    let rep = t
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_READ,
            &block::read_args(512, 100_000),
        )
        .unwrap();
    assert_eq!(
        block::decode_read(&mut rep.results().unwrap()).unwrap(),
        Ok(data)
    );
    let rep = t
        .call(BLOCK_PROG, BLOCK_VERS, block::PROC_GETATTR, &Body::new())
        .unwrap();
    assert_eq!(
        block::decode_getattr(&mut rep.results().unwrap())
            .unwrap()
            .unwrap()
            .size,
        1 << 20
    );
    drop(c);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel-TCP `rpc-server` over a 64 KiB memory store on a free port, with `rdma` as its
/// `[rdma]` keys, in a directory under the temp dir named by `tag`; and a client it has
/// served a GETATTR. Returns the server, the client, the port and the directory.
fn memory_server(
    tag: &str,
    rdma: &str,
    stdout: Stdio,
) -> (Server, RdmaClient, u16, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = free_port();
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{p}\"\ntransport = \"kernel\"\n[store]\nkind = \"memory\"\n\
             size = 65536\n[rdma]\n{rdma}"
        ),
    )
    .unwrap();
    let server = Server::start(&cfg, stdout, &dir);
    let mut c = connect_retry(SocketAddr::from(([127, 0, 0, 1], p)));
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_GETATTR,
            Body::new(),
            &CallOpts::default(),
        )
        .unwrap();
    assert!(rep.results().is_ok());
    (server, c, p, dir)
}

/// `[rdma] keepalive_ms` turns on TCP keep-alives on the server's accepted kernel-TCP
/// connections (the kernel then resets one whose client vanished while it was idle): `ss`
/// shows the keep-alive timer on the server's end of an idle connection, and none without.
#[test]
fn rpc_server_kernel_tcp_keepalives_follow_the_config() {
    for keepalive_ms in [0u64, 1500] {
        let (server, c, p, dir) = memory_server(
            &format!("ka{keepalive_ms}"),
            &format!("keepalive_ms = {keepalive_ms}\nkeepalive_probes = 2\n"),
            Stdio::null(),
        );
        // The server's end (local port p), once idle: nothing unacknowledged, so that ss
        // shows the keep-alive timer rather than the retransmission one.
        let t = Instant::now();
        let ss = loop {
            let out = Command::new("ss")
                .args([
                    "-tnoH",
                    "state",
                    "established",
                    &format!("( sport = :{p} )"),
                ])
                .output()
                .expect("ss (iproute2)");
            let ss = String::from_utf8_lossy(&out.stdout).to_string();
            assert_eq!(ss.lines().count(), 1, "one connection to the server: {ss}");
            let send_q = ss.split_whitespace().nth(1).unwrap_or("?");
            if send_q == "0" || t.elapsed() > Duration::from_secs(5) {
                break ss;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if keepalive_ms == 0 {
            assert!(!ss.contains("keepalive"), "{ss}");
        } else {
            // timer:(keepalive,<left>,<probes sent>): at most the configured idle time left.
            let left = ss
                .split("timer:(keepalive,")
                .nth(1)
                .unwrap_or_else(|| panic!("no keep-alive timer: {ss}"));
            let left = left.split(',').next().unwrap();
            let ms: f64 = if let Some(ms) = left.strip_suffix("ms") {
                ms.parse().unwrap()
            } else {
                left.trim_end_matches("sec").parse::<f64>().unwrap() * 1000.0
            };
            assert!(ms <= keepalive_ms as f64, "{ss}");
        }
        drop(c);
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// SIGTERM (a service manager's stop) and SIGINT (Ctrl-C) stop `rpc-server` cleanly: it says
/// so, stops its listeners and exits 0, instead of dying by the signal.
#[test]
fn rpc_server_stops_cleanly_on_sigterm_and_sigint() {
    for sig in ["TERM", "INT"] {
        let (mut server, c, _, dir) = memory_server(&format!("sig{sig}"), "", Stdio::piped());
        drop(c);
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t = Instant::now();
        let status = loop {
            if let Some(st) = server.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "SIG{sig}: still running"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(server.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert!(status.success(), "SIG{sig}: {status:?}\n{out}");
        assert!(out.contains(&format!("SIG{sig}: stopping")), "{out}");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `[tcp] poll = "busy"`: the ONC RPC/TCP side of `rpc-server` busy-polls (said on stdout),
/// and serves a busy-polled client's WRITE and READ, verified.
#[test]
fn rpc_server_tcp_busy_polled() {
    let (p1, p2) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-cli-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{p1}\"\ntransport = \"kernel\"\n[store]\nkind = \"memory\"\n\
             size = 1048576\n[tcp]\nlisten = \"127.0.0.1:{p2}\"\npoll = \"busy\"\n"
        ),
    )
    .unwrap();
    let mut server = Server::start(&cfg, Stdio::piped(), &dir);
    let mut out = std::io::BufReader::new(server.child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ONC RPC over TCP") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "rpc-server ended"
        );
    }
    assert!(line.trim_end().ends_with("busy-polled"), "{line}");
    let mut t = TcpClient::connect_with(
        SocketAddr::from(([127, 0, 0, 1], p2)),
        4,
        dpwarp::rpc::tcp::TcpPoll::Busy,
    )
    .unwrap();
    let data: Vec<u8> = (0..300_001u32).map(|i| (i % 249) as u8).collect();
    let rep = t
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            &block::write_args(3, data.clone()),
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(300_001)
    );
    let rep = t
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_READ,
            &block::read_args(3, 300_001),
        )
        .unwrap();
    assert_eq!(
        block::decode_read(&mut rep.results().unwrap()).unwrap(),
        Ok(data)
    );
    drop(t);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rpc-bench --compare --json` (with `--transport T` when given) from the source tree.
fn compare_json(transport: Option<&str>) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dpwarp"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["rpc-bench", "--compare", "--json", "--seconds", "0.3"])
        .args(["--credits", "8"])
        .env("RUST_LOG", "warn");
    if let Some(t) = transport {
        cmd.args(["--transport", t]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    for k in [
        "null_calls_per_s_rdma",
        "null_calls_per_s_tcp",
        "null_calls_ratio",
        "read_1m_gbps_rdma",
        "read_1m_gbps_tcp",
        "write_1m_gbps_verbs",
    ] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing"));
        assert!(x > 0.0, "{k} = {x}");
    }
    // The TCP baseline is measured blocking and busy-polled; the plain keys are the better run.
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing"));
    let better = |base: &str, higher: bool| {
        let (b, p) = (f(&format!("{base}_blocking")), f(&format!("{base}_busy")));
        assert!(b > 0.0 && p > 0.0, "{base}: {b} {p}");
        let want = if higher { b.max(p) } else { b.min(p) };
        assert!(
            (f(base) - want).abs() <= 1e-9 * want,
            "{base} is the better of {b} and {p}"
        );
        if want == b {
            "blocking"
        } else {
            "busy"
        }
    };
    assert_eq!(
        v["tcp_baseline"]["null"],
        better("null_calls_per_s_tcp", true)
    );
    assert_eq!(
        v["tcp_baseline"]["read_1m"],
        better("read_1m_gbps_tcp", true)
    );
    assert_eq!(
        v["tcp_baseline"]["null_1credit"],
        better("null_p50_us_tcp_1credit", false)
    );
    // (serde_json parses floats to within an ulp or so, hence the tolerance.)
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    assert!(close(
        f("null_calls_ratio"),
        f("null_calls_per_s_rdma") / f("null_calls_per_s_tcp")
    ));
    assert!(close(
        f("read_1m_ratio"),
        f("read_1m_gbps_rdma") / f("read_1m_gbps_tcp")
    ));
    // The READs went to a store range of 1 MiB per call in flight.
    let credits = v["credits"].as_u64().unwrap();
    assert_eq!(
        (v["span"].as_u64(), v["store_ranges"].as_u64()),
        (Some(credits << 20), Some(credits)),
        "{v}"
    );
    v
}

/// The default: the RDMA side over the DPDK dataplane (configs/net_ring.toml, server and client
/// in this one process; its own EAL as a child process), the TCP baseline on the kernel.
#[cfg(feature = "dpdk")]
#[test]
fn rpc_bench_compare_json_prints_the_five_figures_over_dpdk_by_default() {
    let v = compare_json(None);
    assert_eq!(v["rdma_transport"], "dpdk");
    assert!(v["rdma_setup"].as_str().unwrap().contains("net_ring.toml"));
}

#[test]
fn rpc_bench_compare_json_over_kernel_tcp() {
    let v = compare_json(Some("kernel"));
    assert_eq!(v["rdma_transport"], "kernel");
    assert!(v["rdma_setup"].as_str().unwrap().contains("kernel TCP"));
}

/// `rpc-bench --connections 16` against a remote `rpc-server` (kernel TCP): sixteen connections
/// at once, all driven by the bench's one thread, every READ checked against its range's
/// pattern; the JSON has each connection's calls, which add up to the total, and the slowest
/// one's share of the mean.
#[test]
fn rpc_bench_drives_many_connections_and_checks_every_reply() {
    let (server, _c, port, dir) = memory_server("conns", "", Stdio::null());
    let addr = format!("127.0.0.1:{port}");
    let o = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["rpc-bench", "--transport", "kernel", "--server", &addr])
        .args(["--connections", "16", "--credits", "4", "--op", "read"])
        .args(["--size", "4096", "--seconds", "0.3", "--json"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "rpc-bench --connections 16: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["connections"], 16, "{v}");
    let per: Vec<u64> = v["per_connection_calls"]
        .as_array()
        .expect("per-connection calls")
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(per.len(), 16, "{v}");
    assert!(per.iter().all(|&c| c > 0), "every connection served: {v}");
    assert_eq!(per.iter().sum::<u64>(), v["calls"].as_u64().unwrap(), "{v}");
    let min = v["min_share"].as_f64().unwrap();
    assert!(min > 0.0 && min <= 1.0, "{v}");
    assert!(v["max_share"].as_f64().unwrap() >= 1.0, "{v}");
    // One measurement only.
    let e = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["rpc-bench", "--transport", "kernel", "--server", &addr])
        .args(["--connections", "2", "--compare"])
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("without --compare"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rpc-bench` against a remote `rpc-server` (kernel TCP): READs and WRITEs go to one store
/// range per call in flight, at most what the store holds (GETATTR), or to the `--span` given:
/// the READ load writes each range's own pattern (every reply is checked against its range's),
/// a WRITE load overwrites the ranges it was spread over and nothing beyond them.
#[test]
fn rpc_bench_spreads_calls_over_store_ranges() {
    let (server, mut c, port, dir) = memory_server("spread", "", Stdio::null());
    let addr = format!("127.0.0.1:{port}");
    let bench = |extra: &[&str]| -> (serde_json::Value, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
            .args(["rpc-bench", "--transport", "kernel", "--server", &addr])
            .args(["--size", "4096", "--seconds", "0.2", "--json"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "rpc-bench {extra:?}: {err}");
        (serde_json::from_slice(&o.stdout).expect("JSON"), err)
    };
    let mut range = |k: u64| -> Vec<u8> {
        let rep = c
            .call(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                block::read_args(k * 4096, 4096),
                &CallOpts::default(),
            )
            .unwrap();
        block::decode_read(&mut rep.results().unwrap())
            .unwrap()
            .unwrap()
    };
    let pattern = |k: u64| -> Vec<u8> { (0..4096u64).map(|i| ((i + k) % 251) as u8).collect() };

    // 8 calls in flight: 8 ranges of the 64 KiB store, each holding its own pattern.
    let (v, err) = bench(&["--op", "read", "--credits", "8"]);
    assert_eq!(v["store_ranges"], 8, "{v}");
    assert!(v["calls"].as_u64().unwrap() > 0, "{v}");
    assert!(!err.contains("store holds"), "{err}");
    for k in 0..8 {
        assert_eq!(range(k), pattern(k), "range {k}");
    }
    // 32 in flight: the store holds 16 ranges of 4 KiB, and the bench says it used those.
    let (v, err) = bench(&["--op", "read", "--credits", "32"]);
    assert_eq!(v["store_ranges"], 16, "{v}");
    assert!(
        err.contains("the store holds 65536 octets: 16 ranges"),
        "{err}"
    );
    assert_eq!(range(15), pattern(15));
    // WRITEs spread over --span 16 KiB: ranges 0-3 now hold the client's 0x5a, range 4 its
    // pattern still.
    let (v, _) = bench(&["--op", "write", "--credits", "8", "--span", "16384"]);
    assert_eq!(v["store_ranges"], 4, "{v}");
    assert_eq!(v["span"], 16384, "{v}");
    for k in 0..4 {
        assert_eq!(range(k), vec![0x5a; 4096], "range {k}");
    }
    assert_eq!(range(4), pattern(4));
    drop(c);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn dpwarp_fails(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Without a dataplane config the dpdk default fails before any EAL start, naming configs/ and
/// --transport kernel.
#[test]
fn dpdk_without_a_dataplane_config_is_refused_clearly() {
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-cli-nocfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No configs/net_ring.toml in this directory.
    let e = dpwarp_fails(&dir, &["rpc-bench", "--seconds", "0.1"]);
    assert!(
        e.contains("configs/") && e.contains("--transport kernel"),
        "{e}"
    );
    let e = dpwarp_fails(&dir, &["rpc-bench", "--server", "10.9.9.9:20049"]);
    assert!(
        e.contains("needs --config") && e.contains("--transport kernel"),
        "{e}"
    );
    let e = dpwarp_fails(
        &dir,
        &["rpc-bench", "--transport", "kernel", "--config", "x.toml"],
    );
    assert!(e.contains("--config is for --transport dpdk"), "{e}");
    // rpc-server: transport omitted (dpdk) and no `dataplane`.
    let cfg = dir.join("rpc.toml");
    std::fs::write(
        &cfg,
        "listen = \"127.0.0.1:1\"\n[store]\nkind = \"memory\"\nsize = 4096\n",
    )
    .unwrap();
    let e = dpwarp_fails(&dir, &["rpc-server", "--config", cfg.to_str().unwrap()]);
    assert!(
        e.contains("needs a dataplane config") && e.contains("transport = \"kernel\""),
        "{e}"
    );
    // A listen address that is not the dataplane port's.
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:1\"\ndataplane = \"{}/configs/net_ring.toml\"\n\
             [store]\nkind = \"memory\"\nsize = 4096\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    )
    .unwrap();
    let e = dpwarp_fails(&dir, &["rpc-server", "--config", cfg.to_str().unwrap()]);
    assert!(e.contains("not the address of dataplane port 0"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Built without the `dpdk` feature, every tool's dpdk transport (the default) stops with a
/// clear error after checking its config (a config typo is still reported as such).
#[cfg(not(feature = "dpdk"))]
#[test]
fn dpdk_transport_in_a_build_without_dpdk_says_so() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-cli-nodpdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ring = format!("{root}/configs/net_ring.toml");
    for args in [
        vec!["demo", "--transport", "dpdk", "--config", ring.as_str()],
        vec!["rpc-bench", "--seconds", "0.1", "--config", ring.as_str()],
        vec!["perf", "write_bw", "--config", ring.as_str()],
        vec!["rping", "-s", "--config", ring.as_str()],
        vec!["dpperf", "--server", "--config", ring.as_str()],
    ] {
        let e = dpwarp_fails(&dir, &args);
        assert!(
            e.contains("built without the dpdk feature"),
            "{args:?}: {e}"
        );
    }
    let cfg = dir.join("rpc.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"0.0.0.0:20049\"\ndataplane = \"{ring}\"\n\
             [store]\nkind = \"memory\"\nsize = 4096\n"
        ),
    )
    .unwrap();
    let e = dpwarp_fails(&dir, &["rpc-server", "--config", cfg.to_str().unwrap()]);
    assert!(e.contains("built without the dpdk feature"), "{e}");
    // The config is still checked first.
    let e = dpwarp_fails(&dir, &["perf", "write_bw", "--config", "/nonexistent.toml"]);
    assert!(!e.contains("built without"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
