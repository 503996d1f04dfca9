//! `dpwarp perf` server against `dpwarp perf` client over kernel loopback: the perftest -R
//! control protocol (version, system data, MTU, dest records, bandwidth report) and the data
//! phase of write_bw and read_bw. The same code runs against stock perftest on siw in
//! `scripts/interop`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

fn spawn(args: &[&str], tag: &str) -> (Child, PathBuf) {
    let out =
        std::env::temp_dir().join(format!("dpwarp-interop-perf-{}-{tag}", std::process::id()));
    // Kernel TCP: DPDK is the tools' default transport.
    let child = Command::new(BIN)
        .arg("perf")
        .args(["--transport", "kernel"])
        .args(args)
        .env_remove("DPWARP_TRANSPORT")
        .env_remove("DPWARP_CONFIG")
        .stdout(Stdio::from(File::create(&out).unwrap()))
        .stderr(Stdio::from(File::create(err_path(&out)).unwrap()))
        .spawn()
        .expect("run dpwarp");
    (child, out)
}

/// Where `spawn` keeps the stderr of the run whose stdout goes to `out`.
fn err_path(out: &Path) -> PathBuf {
    out.with_extension("err")
}

/// `finish`, which must succeed: otherwise the panic shows what the run printed (its log lines
/// are on stderr), so a failure seen once in CI can be read. The stderr file is removed on
/// success.
fn finish_ok(c: Child, out: &Path, limit: Duration, who: &str) {
    if finish(c, limit) {
        let _ = std::fs::remove_file(err_path(out));
        return;
    }
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    panic!(
        "{who} failed\n--- stdout\n{}\n--- stderr\n{}",
        read(out),
        read(&err_path(out))
    );
}

fn finish(mut c: Child, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(st) = c.try_wait().unwrap() {
            return st.success();
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
    panic!("dpwarp perf did not finish in {limit:?}");
}

/// Wait until something listens on `port` (without connecting: /proc/net/tcp).
fn wait_listening(port: &str) {
    let want = format!(":{:04X} 00000000:0000 0A", port.parse::<u16>().unwrap());
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if std::fs::read_to_string("/proc/net/tcp").is_ok_and(|s| s.contains(&want)) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!("server never listened on {port}");
}

/// The table row for `size`: (#bytes, #iterations, peak, average, rate) as strings.
fn row(text: &str, size: usize) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() == 5 && f[0] == size.to_string())
        .unwrap_or_else(|| panic!("no result row for {size} in:\n{text}"))
}

/// The latency table row for `size`: (#bytes, #iterations, t_min, t_max, t_typical, t_avg,
/// t_stdev, 99 %, 99.9 %) as strings.
fn lat_row(text: &str, size: usize) -> Option<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 9 && f[0] == size.to_string())
}

fn bw(test: &str, size: usize, iters: u64) {
    let port = free_port().to_string();
    let s = size.to_string();
    let n = iters.to_string();
    let (server, sout) = spawn(
        &[test, "-R", "-p", &port, "-s", &s],
        &format!("{test}-{size}-s"),
    );
    wait_listening(&port);
    let (client, cout) = spawn(
        &[
            test,
            "127.0.0.1",
            "-R",
            "-p",
            &port,
            "-s",
            &s,
            "-n",
            &n,
            "--json",
        ],
        &format!("{test}-{size}-c"),
    );
    finish_ok(client, &cout, Duration::from_secs(60), "client");
    finish_ok(server, &sout, Duration::from_secs(30), "server");
    let c = std::fs::read_to_string(&cout).unwrap();
    let sv = std::fs::read_to_string(&sout).unwrap();
    let _ = std::fs::remove_file(&cout);
    let _ = std::fs::remove_file(&sout);
    let cr = row(&c, size);
    let sr = row(&sv, size);
    assert_eq!(cr[1], n, "all iterations completed");
    // The server prints the report the client sent over the control connection.
    assert_eq!(cr, sr);
    let avg: f64 = cr[3].parse().unwrap();
    assert!(avg > 0.0);
    assert!(c.contains(&format!(
        "\"test\":\"{test}\",\"bytes\":{size},\"iterations\":{iters}"
    )));
}

#[test]
fn perf_write_bw_loopback() {
    bw("write_bw", 65536, 300);
}

#[test]
fn perf_read_bw_loopback() {
    bw("read_bw", 4096, 300);
}

#[test]
fn perf_send_bw_loopback() {
    // Sends paced by the server's RDMA-Written credits: more messages than receives posted.
    let port = free_port().to_string();
    let (server, sout) = spawn(
        &["send_bw", "-R", "-p", &port, "-s", "4096", "-n", "2000"],
        "send_bw-s",
    );
    wait_listening(&port);
    let (client, cout) = spawn(
        &[
            "send_bw",
            "127.0.0.1",
            "-R",
            "-p",
            &port,
            "-s",
            "4096",
            "-n",
            "2000",
        ],
        "send_bw-c",
    );
    finish_ok(client, &cout, Duration::from_secs(60), "client");
    finish_ok(server, &sout, Duration::from_secs(30), "server");
    for f in [cout, sout] {
        let t = std::fs::read_to_string(&f).unwrap();
        let _ = std::fs::remove_file(&f);
        assert_eq!(row(&t, 4096)[1], "2000", "{t}");
    }
}

/// A latency test: both ends print a row (read_lat: only the client) with
/// t_min <= p50 <= p99 <= p99.9 <= t_max... up to the histogram's 3 significant digits.
fn lat(test: &str) {
    let port = free_port().to_string();
    let (server, sout) = spawn(
        &[test, "-R", "-p", &port, "-s", "64", "-n", "300"],
        &format!("{test}-s"),
    );
    wait_listening(&port);
    let (client, cout) = spawn(
        &[
            test,
            "127.0.0.1",
            "-R",
            "-p",
            &port,
            "-s",
            "64",
            "-n",
            "300",
            "--json",
        ],
        &format!("{test}-c"),
    );
    finish_ok(client, &cout, Duration::from_secs(60), "client");
    finish_ok(server, &sout, Duration::from_secs(30), "server");
    let c = std::fs::read_to_string(&cout).unwrap();
    let sv = std::fs::read_to_string(&sout).unwrap();
    let _ = std::fs::remove_file(&cout);
    let _ = std::fs::remove_file(&sout);
    let mut outs = vec![c.clone()];
    if test != "read_lat" {
        outs.push(sv);
    }
    for t in outs {
        let f: Vec<f64> = lat_row(&t, 64)
            .unwrap_or_else(|| panic!("no latency row in:\n{t}"))
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        let (min, max, p50, p99, p999) = (f[2], f[3], f[4], f[7], f[8]);
        assert!(f[1] >= 299.0, "iterations: {t}");
        assert!(min > 0.0 && min <= max, "{t}");
        assert!(p50 <= p99 && p99 <= p999, "{t}");
        // HDR histogram values are within 0.1% of a recorded sample.
        assert!(p50 >= min * 0.999 && p999 <= max * 1.001, "{t}");
    }
    assert!(c.contains("\"p99_9_us\""));
    // Over kernel TCP the test runs on the data QP's driver thread (a driver hook), with no
    // hand-off to the application thread per message or completion.
    assert!(c.contains("\"on_driver_thread\":true"), "{c}");
}

#[test]
fn perf_write_lat_loopback() {
    lat("write_lat");
}

#[test]
fn perf_read_lat_loopback() {
    lat("read_lat");
}

#[test]
fn perf_send_lat_loopback() {
    lat("send_lat");
}

/// `send_lat -a`: every size from 2 octets to 8 MiB on one connection, both ends print a row
/// for each. The receives a size leaves posted take the next size's first Sends, so they must
/// be as long as the largest message (they were reposted at the current size: the 4-octet
/// Sends hit 2-octet receives, a DDP "message too long" TERMINATE and both ends failed).
/// Every size runs on the QP's driver thread (`on_driver_thread`), as the first does: a QP
/// took one driver hook in its life, so the sizes after the first ran on the application
/// thread with a thread wake-up each way (p50 70-95 us against 3.4 us at 2 octets).
#[test]
fn perf_send_lat_all_sizes_loopback() {
    let port = free_port().to_string();
    let (server, sout) = spawn(
        &["send_lat", "-a", "-R", "-p", &port, "-n", "20", "--json"],
        "send_lat-a-s",
    );
    wait_listening(&port);
    let (client, cout) = spawn(
        &[
            "send_lat",
            "127.0.0.1",
            "-a",
            "-R",
            "-p",
            &port,
            "-n",
            "20",
            "--json",
        ],
        "send_lat-a-c",
    );
    finish_ok(client, &cout, Duration::from_secs(60), "client");
    finish_ok(server, &sout, Duration::from_secs(30), "server");
    for f in [cout, sout] {
        let t = std::fs::read_to_string(&f).unwrap();
        let _ = std::fs::remove_file(&f);
        for e in 1..=23 {
            let size = 1usize << e;
            assert!(
                // 20 round trips, 19 intervals between them (as `lat` above).
                lat_row(&t, size).is_some_and(|f| f[1] == "19"),
                "no row for {size} octets in:\n{t}"
            );
            let json = t
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["bytes"] == size)
                .unwrap_or_else(|| panic!("no JSON line for {size} octets in:\n{t}"));
            assert_eq!(
                json["on_driver_thread"], true,
                "{size} octets did not run on the driver thread:\n{t}"
            );
        }
    }
}

/// `-D` where the test does not run for a duration (send_bw and the latency tests count -n
/// iterations): refused on both ends, with the reason, before any connection. It was ignored:
/// `send_lat -D 1` ran and reported its default 5000 iterations.
#[test]
fn perf_refuses_duration_where_it_counts_iterations() {
    for test in ["send_bw", "send_lat", "write_lat", "read_lat"] {
        for client in [false, true] {
            let mut args = vec![test, "-D", "1", "-p", "9"];
            if client {
                args.push("127.0.0.1");
            }
            let (c, out) = spawn(&args, &format!("refuse-D-{test}-{client}"));
            assert!(!finish(c, Duration::from_secs(10)), "{test} -D ran");
            let err = std::fs::read_to_string(err_path(&out)).unwrap();
            let _ = std::fs::remove_file(err_path(&out));
            let _ = std::fs::remove_file(out);
            assert!(
                err.contains("-D (duration) is supported for write_bw and read_bw"),
                "{test}: {err}"
            );
        }
    }
}

#[test]
fn perf_refuses_unknown_tests() {
    let (c, out) = spawn(&["atomic_lat", "127.0.0.1"], "refuse");
    assert!(!finish(c, Duration::from_secs(10)));
    let _ = std::fs::remove_file(err_path(&out));
    let _ = std::fs::remove_file(out);
}
