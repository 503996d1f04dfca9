//! A reactor with quiet connections beside busy ones: `dpwarp rpc-bench --idle-connections`
//! over a net_ring pair in a child process (the in-process server's reactor serves every
//! connection of its worker). 60 connections are opened first and make no call; 4 more then
//! keep 4 READs each in flight, every reply checked against the store's pattern. The reactor
//! polls a connection only while it has work or after its CQ named it (`Cq::req_notify`), and
//! all of them now and then: the busy ones must all be served, and the idle ones held through
//! the measurement (each answers a NULL call after it). The tool reports what they cost:
//! resident bytes per idle connection and each worker's nanoseconds per pass.

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
    // The idle connections were held through the measurement: each answers a NULL call after it.
    assert_eq!(
        v["idle_served"], 60,
        "every idle connection still served: {v}"
    );
    // What they cost: resident memory per idle connection (both ends in this process), and
    // each worker's passes while they were held.
    let bytes = v["bytes_per_idle_connection"]
        .as_f64()
        .expect("bytes per idle connection");
    // Both ends of an idle connection are in this process: the client's two CQs and the
    // server's one, 4096 completions deep each, would alone be 384 KiB if their slots were
    // allocated up front (verbs::Cq makes them as completions come); the rest, with this
    // config's 1 MiB socket buffers mostly untouched, is well under it.
    assert!(
        bytes > 0.0 && bytes < 320.0 * 1024.0,
        "resident bytes per idle connection: {bytes}: {v}"
    );
    let workers = v["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 2, "a server and a client worker: {v}");
    for w in workers {
        assert!(w["passes"].as_u64().unwrap() > 0, "{v}");
        assert!(w["ns_per_pass"].as_f64().unwrap() > 0.0, "{v}");
        // 64 connections end at each worker (the server's and the client's side of each).
        assert!(w["connections"].as_u64().unwrap() >= 64, "{v}");
    }
}
