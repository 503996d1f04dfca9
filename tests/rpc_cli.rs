//! The command-line tools: `dpwarp rpc-server --config` serves a storage target a client can use
//! over both RPC-over-RDMA and ONC RPC/TCP; `dpwarp rpc-bench --compare --json` prints the five
//! figures from one run; the dpdk transport is refused honestly.

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dpwarp::rpc::block::{self, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::Body;
use dpwarp::rpc::tcp::TcpClient;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn connect_retry(addr: SocketAddr) -> RdmaClient {
    let t = Instant::now();
    loop {
        match RdmaClient::connect_tcp(addr, ClientConfig::default()) {
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["rpc-server", "--config"])
        .arg(&cfg)
        .args(["--duration", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rpc_bench_compare_json_prints_the_five_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args([
            "rpc-bench",
            "--compare",
            "--json",
            "--seconds",
            "0.3",
            "--credits",
            "8",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
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
    ] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing"));
        assert!(x > 0.0, "{k} = {x}");
    }
}

#[test]
fn dpdk_transport_is_refused_not_faked() {
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["rpc-bench", "--transport", "dpdk", "--seconds", "0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not wired"));
}
