//! Driven workers on one CPU: `dpwarp rpc-bench` (both ports of a net_ring pair in one
//! process, each driven by its own thread) run under `taskset -c 0`, so both workers are placed
//! on CPU 0. Left unset, `worker.driven_spin_us` then becomes 2 us for them (not 50): each
//! yields the CPU soon after it runs out of work, so the other gets to run (on one CPU, NULL
//! calls went from 7 thousand a second before any yield to about 195 thousand with 50 us and
//! 527 thousand with 2 us; docs/dataplane.md "Workers"). Set in the config, the value is kept.
//! Each run is a child process with its own EAL and its own ring names.

use std::process::Command;

mod dp_common;
use dp_common::unique;

/// Run `taskset -c 0 dpwarp rpc-bench` over `configs/net_ring.toml` (rings renamed for this
/// run, `extra` added to its `[worker]` section) for half a second of NULL calls; returns
/// (stderr at info level, the JSON line).
fn rpc_bench_on_cpu0(tag: &str, extra: &str) -> (String, serde_json::Value) {
    let src = format!("{}/configs/net_ring.toml", env!("CARGO_MANIFEST_DIR"));
    let ring = unique(tag);
    let text = std::fs::read_to_string(src)
        .unwrap()
        .replace("dpwring", &ring)
        .replace("[worker]\n", &format!("[worker]\n{extra}"));
    let cfg = std::env::temp_dir().join(format!("dpwarp-{ring}.toml"));
    std::fs::write(&cfg, text).unwrap();
    let o = Command::new("taskset")
        .args([
            "-c",
            "0",
            env!("CARGO_BIN_EXE_dpwarp"),
            "rpc-bench",
            "--config",
        ])
        .arg(&cfg)
        .args(["--op", "null", "--seconds", "0.5", "--json"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "rpc-bench failed: {stderr}\n{stdout}");
    let json = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no JSON line: {stdout}"));
    (stderr, json)
}

#[test]
fn driven_workers_sharing_a_cpu_yield_it_soon() {
    let (err, json) = rpc_bench_on_cpu0("dpwsh", "");
    assert!(
        err.contains("dataplane: worker 0 (Driven) on CPU Some(0)")
            && err.contains("dataplane: worker 1 (Driven) on CPU Some(0)"),
        "both workers on CPU 0: {err}"
    );
    assert!(
        err.contains("driven workers share CPU 0: each yields it after 2µs idle"),
        "{err}"
    );
    assert!(json["calls"].as_u64().unwrap() > 0, "{json}");

    // An explicit setting is kept, shared CPU or not.
    let (err, json) = rpc_bench_on_cpu0("dpwsx", "driven_spin_us = 50\n");
    assert!(!err.contains("driven workers share CPU"), "{err}");
    assert!(json["calls"].as_u64().unwrap() > 0, "{json}");
}
