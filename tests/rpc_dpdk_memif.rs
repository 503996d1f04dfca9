//! RPC-over-RDMA across two processes over net_memif: `dpwarp rpc-server` with `transport =
//! "dpdk"` (a child process with its own EAL, memif server side) and this test process as the
//! client (its own EAL, memif client side) walking every procedure and chunk path with the data
//! verified by reading it back (NULL, GETATTR, WRITE inline and via a read chunk, READ inline /
//! into a write chunk / reply chunk / read chunk + RDMA_DONE, a long call). Then `dpwarp
//! rpc-bench --transport dpdk --server` as a third process drives READ and WRITE against the same
//! server and must exit 0 (it checks every reply). One EAL per process; a memif socket unique to
//! this test.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, SocketAddrV4};

use dpwarp::cm::Net;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::rpc::client::{ClientConfig, RdmaClient};

mod memif_common;
mod rpc_common;
use memif_common::{configs, Kill};
use rpc_common::exercise_with;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");
const STORE: u64 = 1 << 20;

/// Abort the process if the test runs longer than `secs` (a hang must fail, not block CI); the
/// server child is killed by its own `--duration`.
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        eprintln!("rpc_dpdk_memif: still running after {secs} s; aborting");
        std::process::abort();
    });
}

#[test]
fn rpc_over_dpdk_memif_server_child_process() {
    watchdog(40);
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("dpwarp-rpcmemif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let (scfg, ccfg) = configs(&dir, &sock, 95, 0, false);
    // The rpc-server config names its dataplane config relative to its own directory.
    let rcfg = dir.join("rpc.toml");
    std::fs::write(
        &rcfg,
        format!(
            "listen = \"10.95.0.1:20049\"\ntransport = \"dpdk\"\ndataplane = \"{}\"\n\
             [store]\nkind = \"memory\"\nsize = {STORE}\n[rdma]\nmax_credits = 16\n",
            scfg.file_name().unwrap().to_string_lossy()
        ),
    )
    .unwrap();

    // The server's log goes to a file a failure prints (its stdout is read for the listen line).
    let server_log = dir.join("server.log");
    let mut server = Kill(
        Command::new(BIN)
            .args(["rpc-server", "--config"])
            .arg(&rcfg)
            .args(["--duration", "35"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&server_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let out = server.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if l.contains("RPC-over-RDMA (iWARP over the DPDK dataplane") {
                let _ = tx.send(l.clone());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("rpc-server did not start listening on the dataplane");
    assert!(line.contains("on 10.95.0.1:20049"), "{line}");

    // This process: the memif client side.
    let dp = Dataplane::start(&DataplaneConfig::load(&ccfg).unwrap()).expect("dataplane");
    assert!(dp.wait_link_up(Duration::from_secs(10)), "memif link");
    let ep = dp.endpoint(0).unwrap();
    let remote: SocketAddrV4 = "10.95.0.1:20049".parse().unwrap();
    let ccfg_rpc = ClientConfig {
        credits: 8,
        timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let mut c = RdmaClient::connect(&Net::from(ep.clone()), SocketAddr::from(remote), ccfg_rpc)
        .expect("connect over memif");
    assert_eq!(c.server_limits().maxcall_sendsize, 4096);
    exercise_with(&mut c, None, STORE);
    assert!(c.grant() <= 16, "grant {} above max_credits", c.grant());
    drop(c);
    drop(dp);

    // A third process: the benchmark client over the dataplane, READ (write chunks) then WRITE
    // (read chunks); it checks every reply and fails on a wrong byte.
    for op in ["read", "write"] {
        let o = Command::new(BIN)
            .args(["rpc-bench", "--transport", "dpdk", "--config"])
            .arg(&ccfg)
            .args(["--server", "10.95.0.1:20049", "--op", op, "--size", "65536"])
            .args(["--credits", "8", "--seconds", "0.3", "--json"])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "rpc-bench {op}: {}\n--- rpc-server's log:\n{}",
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(&server_log).unwrap_or_default()
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["transport"], "dpdk");
        assert!(v["calls"].as_u64().unwrap() > 0, "{v}");
        assert!(v["gbps"].as_f64().unwrap() > 0.0, "{v}");
    }
    drop(server);
    let _ = drain.join();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(t0.elapsed() < Duration::from_secs(40));
}
