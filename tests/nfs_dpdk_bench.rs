//! `dpwarp nfs-bench` as one command on DPDK: without `--server` it starts the NFS target in
//! its own process on port 0 of a two-port dataplane (configs/net_ring.toml: rte_rings, no
//! hugepages, no kernel setup) and loads it from port 1 with 16 connections and a mix of all
//! four operations (READs of two sizes) beside 48 idle connections. Every reply must be
//! right (READ data against the pattern the bench wrote first), every connection served,
//! every idle connection still answered after the load, both workers (target's and bench's)
//! must have run passes, and the verbs RDMA Write reference (`--verbs-reference`) must have
//! run over the same ports.
//! Needs root (the target's `open_by_handle_at`).

use std::process::Command;

const CONNECTIONS: usize = 16;
const IDLE: usize = 48;
/// READs of two sizes (the 64 KiB ones into the READ pool's buffers), WRITEs of --size.
const MIX: &str = "read4k=4,read64k=1,write=2,getattr=1,lookup=1";

#[test]
fn nfs_bench_runs_its_own_target_on_dpdk_and_verifies_every_reply() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp"))
        .current_dir(root)
        .args(["nfs-bench", "--config", "configs/net_ring.toml"])
        .args(["--connections", &CONNECTIONS.to_string(), "--credits", "4"])
        .args(["--idle-connections", &IDLE.to_string()])
        .args(["--seconds", "1", "--file-size", "1048576"])
        .args(["--mix", MIX])
        .arg("--verbs-reference")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfs-bench: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(j["transport"], "dpdk", "{j}");
    assert_eq!(j["in_process_server"], true, "{j}");
    assert_eq!(j["connections"], CONNECTIONS);
    // The mix as run: the WRITEs with --size (4 KiB by default).
    assert_eq!(
        j["mix"], "read4k=4,read64k=1,write4k=2,getattr=1,lookup=1",
        "{j}"
    );
    assert_eq!(j["verified"], true, "{j}");
    assert!(j["errors"].as_array().unwrap().is_empty(), "{j}");
    let per = j["per_connection_ops"].as_array().unwrap();
    assert_eq!(per.len(), CONNECTIONS);
    assert!(per.iter().all(|n| n.as_u64().unwrap() > 0), "{j}");
    for op in ["read", "write", "getattr", "lookup"] {
        assert!(j["by_op"][op].as_u64().unwrap() > 0, "no {op}: {j}");
    }
    // The target answered some calls of the load at once on its worker's thread (READs of
    // cached bytes, GETATTRs, LOOKUPs of kept objects) and the WRITEs on its pool.
    let calls = j["server_calls"]["calls"].as_u64().unwrap();
    let at_once = j["server_calls"]["answered_at_once"].as_u64().unwrap();
    assert!(at_once > 0 && at_once < calls, "{j}");
    // The verbs reference ran over the same ports, in rounds taking turns with the load
    // (three by default), the figures the medians of the rounds'.
    assert!(j["verbs_write_gbps"].as_f64().unwrap() > 0.0, "{j}");
    assert!(j["gbps_vs_verbs_write"].as_f64().unwrap() > 0.0, "{j}");
    let rounds = j["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "{j}");
    let mut ratios: Vec<f64> = rounds
        .iter()
        .map(|r| {
            assert!(r["verbs_write_gbps"].as_f64().unwrap() > 0.0, "{j}");
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{j}");
            r["gbps_vs_verbs_write"].as_f64().unwrap()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    assert_eq!(j["gbps_vs_verbs_write"].as_f64(), Some(ratios[1]), "{j}");
    assert_eq!(j["idle_connections"], IDLE);
    assert_eq!(j["idle_served"], IDLE, "{j}");
    let workers = j["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{j}");
    assert!(
        workers.iter().all(|w| w["passes"].as_u64().unwrap() > 0),
        "{j}"
    );
    // Both workers sent and received payload (calls, READ data, WRITE data pulled), and say
    // how many copies of it they made per octet: the client places the READ data it
    // receives (at least one copy per octet over net_ring, which hands mbufs over).
    for key in ["tx_copies_per_octet", "rx_copies_per_octet"] {
        assert!(
            workers.iter().all(|w| w[key].as_f64().is_some()),
            "{key}: {j}"
        );
    }
    assert!(
        workers
            .iter()
            .any(|w| w["rx_copies_per_octet"].as_f64().unwrap() > 0.5),
        "{j}"
    );
    // The target's worker holds the busy and the idle connections.
    assert!(
        workers
            .iter()
            .any(|w| w["connections"].as_u64().unwrap() >= (CONNECTIONS + IDLE) as u64),
        "{j}"
    );
}
