//! `dpwarp perf` on DPDK (its default transport): perftest's `-R` tests with both rdma_cm connections (control,
//! then data) over the DPDK dataplane. Server and client are each their own `dpwarp perf` process
//! with its own EAL (one EAL per process), connected through a net_memif socket unique to this
//! test; write_bw, send_lat, write_lat and read_lat run one after another, each on a fresh pair
//! of processes (the latency tests run in the driven worker mode, each process's one thread
//! driving its worker between the test's steps).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");
const PORT: &str = "18611";

mod memif_common;
use memif_common::{configs, Kill};

/// Run `dpwarp perf <test> <args>` as server and client over a fresh memif pair; assert both
/// exit 0 and return (client stdout, server stdout).
fn run_pair(name: &str, test: &str, args: &[&str]) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("dpwarp-dpperf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let (scfg, ccfg) = configs(&dir, &sock, 95, 0, false);

    let mut server = Kill(
        Command::new(BIN)
            .args(["perf", test, "-R", "-p", PORT])
            .args(args)
            .args(["--transport", "dpdk", "--config"])
            .arg(&scfg)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The server logs "perf: listening" once its DPDK listener is installed; keep draining its
    // stderr afterwards so it never blocks on a full pipe.
    let err = server.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if l.contains(&format!("perf: listening on port {PORT}")) {
                let _ = tx.send(());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let mut sout = server.0.stdout.take().unwrap();
    let sdrain = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = sout.read_to_string(&mut s);
        s
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the DPDK perf server did not start listening"
    );

    // The client gives neither --transport nor --config: DPDK is the default transport and
    // $DPWARP_CONFIG names the config (the report's "dpwarp over dpdk" line shows which ran).
    let o = Command::new(BIN)
        .args(["perf", test, "-R", "10.95.0.1", "-p", PORT])
        .args(args)
        .env_remove("DPWARP_TRANSPORT")
        .env("DPWARP_CONFIG", &ccfg)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let cout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{test} client failed: {}\n{cout}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The server ends once the client has reported and disconnected.
    let st = server.0.wait().unwrap();
    let serr = drain.join().unwrap();
    let sout = sdrain.join().unwrap();
    assert!(st.success(), "{test} server exit {st}: {serr}\n{sout}");
    let _ = std::fs::remove_dir_all(&dir);
    (cout, sout)
}

/// The numeric row of a perftest table whose first two columns are `size` and `iters`.
fn row<'a>(out: &'a str, size: &str, iters: &str) -> Vec<&'a str> {
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 5 && f[0] == size && f[1] == iters)
        .collect();
    assert_eq!(rows.len(), 1, "one result row for {size} x {iters}:\n{out}");
    rows.into_iter().next().unwrap()
}

fn positive(field: &str, what: &str, out: &str) {
    let v: f64 = field
        .parse()
        .unwrap_or_else(|e| panic!("{what} {field:?}: {e}\n{out}"));
    assert!(v > 0.0 && v.is_finite(), "{what} = {v}\n{out}");
}

#[test]
fn perf_bandwidth_and_latency_tests_over_dpdk_memif() {
    // The option refusals come before any EAL start.
    for (args, want) in [
        (
            &[][..],
            "--transport dpdk (the default) needs --config FILE",
        ),
        (
            &["--transport", "dpdk"][..],
            "--transport dpdk (the default) needs --config FILE",
        ),
        (
            &["--transport", "kernel", "--config", "x.toml"][..],
            "--config is for --transport dpdk",
        ),
        // clap's usage error, listing the transports.
        (
            &["--transport", "xdp"][..],
            "[possible values: dpdk, kernel]",
        ),
    ] {
        let o = Command::new(BIN)
            .args(["perf", "write_bw", "-R", "10.95.1.1"])
            .args(args)
            .env_remove("DPWARP_TRANSPORT")
            .env_remove("DPWARP_CONFIG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }

    // write_bw: 200 RDMA Writes of 4 KiB (several TCP segments each) on the data connection,
    // the report exchange and the sync dests on the control connection.
    let (cout, sout) = run_pair("wbw", "write_bw", &["-s", "4096", "-n", "200", "--json"]);
    // The JSON line beside the table carries what the port's PMD granted.
    for out in [&cout, &sout] {
        let line = out
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no --json line:\n{out}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ports = v["ports"].as_array().unwrap_or_else(|| panic!("{line}"));
        assert_eq!(ports.len(), 1, "{line}");
        let p = &ports[0];
        assert_eq!(
            (&p["driver"], &p["bus"]),
            (&"net_memif".into(), &"vdev".into())
        );
        assert_eq!(p["device"], "net_memif0", "{line}");
        assert_eq!(p["link_up"], true, "{line}");
    }
    assert!(cout.contains("RDMA_Write BW Test"), "{cout}");
    assert!(cout.contains("dpwarp over dpdk"), "{cout}");
    assert!(cout.contains("BW average[MB/sec]"), "{cout}");
    let r = row(&cout, "4096", "200");
    positive(r[2], "BW peak", &cout);
    positive(r[3], "BW average", &cout);
    positive(r[4], "MsgRate", &cout);
    // The server printed the client's report, received over the control connection.
    let s = row(&sout, "4096", "200");
    positive(s[3], "server's BW average", &sout);

    // send_lat: 200 Send ping-pongs; 199 round-trip samples.
    let (cout, _) = run_pair("slat", "send_lat", &["-s", "64", "-n", "200"]);
    assert!(cout.contains("Send Latency Test"), "{cout}");
    assert!(cout.contains("t_typical[usec]"), "{cout}");
    let r = row(&cout, "64", "199");
    positive(r[2], "t_min", &cout);
    positive(r[4], "t_typical", &cout);
    positive(r[5], "t_avg", &cout);

    // write_lat: 200 RDMA Write ping-pongs, each side watching the last octet of its buffer
    // while it drives its worker (199 samples on both sides); read_lat: 200 RDMA Reads one
    // at a time (the client's row only).
    let (cout, sout) = run_pair("wlat", "write_lat", &["-s", "64", "-n", "200"]);
    assert!(cout.contains("RDMA_Write Latency Test"), "{cout}");
    for out in [&cout, &sout] {
        let r = row(out, "64", "199");
        positive(r[4], "t_typical", out);
    }
    let (cout, _) = run_pair("rlat", "read_lat", &["-s", "64", "-n", "200"]);
    assert!(cout.contains("RDMA_Read Latency Test"), "{cout}");
    let r = row(&cout, "64", "200");
    positive(r[2], "t_min", &cout);
    positive(r[4], "t_typical", &cout);
}
