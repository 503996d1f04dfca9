//! A reactor with quiet connections beside busy ones: `dpwarp rpc-bench --idle-connections`
//! over a net_ring pair in a child process (the in-process server's reactor serves every
//! connection of its worker). 60 connections are opened first and make no call; 4 more then
//! keep 4 READs each in flight, every reply checked against the store's pattern. The reactor
//! polls a connection only while it has work or after its CQ named it (`Cq::req_notify`), and
//! all of them now and then: the busy ones must all be served, and the idle ones held through
//! the measurement.

use std::process::Command;

mod dp_common;
use dp_common::unique;

#[test]
fn busy_connections_are_served_beside_sixty_idle_ones() {
    let src = format!("{}/configs/net_ring.toml", env!("CARGO_MANIFEST_DIR"));
    let ring = unique("dpwidle");
    let text = std::fs::read_to_string(src)
        .unwrap()
        .replace("dpwring", &ring);
    let cfg = std::env::temp_dir().join(format!("dpwarp-{ring}.toml"));
    std::fs::write(&cfg, text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .args(["rpc-bench", "--config"])
        .arg(&cfg)
        .args(["--op", "read", "--size", "4096", "--connections", "4"])
        .args([
            "--credits",
            "4",
            "--idle-connections",
            "60",
            "--seconds",
            "0.5",
        ])
        .arg("--json")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "rpc-bench --idle-connections 60: {err}");
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = out
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no JSON: {out}"));
    assert_eq!(v["idle_connections"], 60, "{v}");
    assert_eq!(v["connections"], 4, "{v}");
    let per: Vec<u64> = v["per_connection_calls"]
        .as_array()
        .expect("per-connection calls")
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(
        per.iter().all(|&c| c > 0),
        "every busy connection served: {v}"
    );
    assert_eq!(per.iter().sum::<u64>(), v["calls"].as_u64().unwrap(), "{v}");
}
