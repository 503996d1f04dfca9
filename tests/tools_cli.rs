//! The tools' command-line conventions: an unknown value of an enumerated option is clap's usage
//! error (exit status 2, the valid values listed) and `--help` lists them; `$DPWARP_TRANSPORT`
//! and `$DPWARP_CONFIG` go through clap; every `--json` line parses as JSON with the keys the
//! scripts read; logs stay at warn unless `-v` asks for info, so stdout and stderr carry no INFO
//! lines by default. Everything here runs over kernel TCP on loopback.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

/// `dpwarp args` with no `DPWARP_*` and no `RUST_LOG` from the test's environment.
fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("DPWARP_TRANSPORT")
        .env_remove("DPWARP_CONFIG")
        .env_remove("RUST_LOG");
    c
}

fn run(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("run dpwarp")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status 2 (clap's usage error) with every one of `values` in its list.
fn assert_usage_error(args: &[&str], env: &[(&str, &str)], values: &[&str]) {
    let mut c = cmd(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run(&mut c);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?} {env:?}: {err}");
    let list = err
        .lines()
        .find(|l| l.contains("[possible values:"))
        .unwrap_or_else(|| panic!("{args:?}: no list of values in: {err}"));
    for v in values {
        assert!(list.contains(v), "{args:?}: {v} not in {list}");
    }
}

#[test]
fn an_unknown_enumerated_value_is_a_usage_error_listing_the_valid_ones() {
    let tests = [
        "write_bw",
        "read_bw",
        "send_bw",
        "write_lat",
        "read_lat",
        "send_lat",
    ];
    assert_usage_error(&["perf", "write_bwx"], &[], &tests);
    assert_usage_error(&["perf", "write_bw", "--crc", "maybe"], &[], &["on", "off"]);
    assert_usage_error(
        &["perf", "write_bw", "--transport", "xdp"],
        &[],
        &["dpdk", "kernel"],
    );
    assert_usage_error(
        &["dpperf", "--test", "rping-client"],
        &[],
        &["write_bw", "send_lat"],
    );
    assert_usage_error(
        &["dpperf", "--worker-mode", "x"],
        &[],
        &["driven", "background"],
    );
    assert_usage_error(&["tcp-baseline", "--wait", "x"], &[], &["blocking", "busy"]);
    assert_usage_error(
        &["rping", "-c", "-a", "127.0.0.1", "--p2p", "write,rdma"],
        &[],
        &["write", "read", "send"],
    );
    assert_usage_error(
        &["demo", "--transport", "tcp"],
        &[],
        &["dpdk", "kernel", "mem"],
    );
    assert_usage_error(
        &["rpc-bench", "--op", "stat"],
        &[],
        &["null", "read", "write"],
    );
    assert_usage_error(&["rpc-bench", "--proto", "udp"], &[], &["rdma", "tcp"]);
    assert_usage_error(
        &["rpc-bench", "--tcp-poll", "spin"],
        &[],
        &["blocking", "busy"],
    );
    assert_usage_error(
        &["rpc-server", "--config", "x.toml", "--transport", "xdp"],
        &[],
        &["dpdk", "kernel"],
    );
    // The environment fallback is checked the same way.
    assert_usage_error(
        &["rping", "-c", "-a", "127.0.0.1"],
        &[("DPWARP_TRANSPORT", "xdp")],
        &["dpdk", "kernel"],
    );
    assert_usage_error(&["demo"], &[("DPWARP_TRANSPORT", "tcp")], &["mem"]);
    // An out-of-range MPA revision too (not a list, but the same exit status).
    let o = run(&mut cmd(&["rping", "-s", "--mpa-rev", "3"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn help_lists_the_values_and_the_environment_fallbacks() {
    let o = run(&mut cmd(&["perf", "--help"]));
    assert!(o.status.success());
    let h = text(&o.stdout);
    for v in [
        "write_bw",
        "read_bw",
        "send_bw",
        "write_lat",
        "read_lat",
        "send_lat",
        "[env: DPWARP_TRANSPORT=]",
        "[env: DPWARP_CONFIG=]",
    ] {
        assert!(h.contains(v), "{v} missing from perf --help:\n{h}");
    }
    let o = run(&mut cmd(&["dpperf", "--help"]));
    let h = text(&o.stdout);
    assert!(
        h.contains("write_bw") && h.contains("send_lat") && h.contains("driven"),
        "{h}"
    );
    let o = run(&mut cmd(&["rpc-bench", "--help"]));
    let h = text(&o.stdout);
    assert!(
        h.contains("null") && h.contains("rdma") && h.contains("kernel"),
        "{h}"
    );
}

/// `$DPWARP_TRANSPORT` selects the transport; `$DPWARP_CONFIG` is tolerated with kernel (one
/// exported config does not break kernel runs), an explicit `--config` is not; an empty
/// variable counts as unset.
#[test]
fn environment_fallbacks_go_through_clap() {
    let port = free_port().to_string();
    // Kernel from the environment, nothing listening: the connection is refused (so the
    // transport was accepted and used).
    let client = [
        "rping",
        "-c",
        "-a",
        "127.0.0.1",
        "-p",
        &port,
        "--timeout",
        "2",
    ];
    let o = run(cmd(&client).env("DPWARP_TRANSPORT", "kernel"));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("RDMA_CM_EVENT_UNREACHABLE"), "{err}");
    let o = run(cmd(&client)
        .env("DPWARP_TRANSPORT", "kernel")
        .env("DPWARP_CONFIG", "/nonexistent/dpw.toml"));
    let err = text(&o.stderr);
    assert!(err.contains("RDMA_CM_EVENT_UNREACHABLE"), "{err}");
    let mut args = client.to_vec();
    args.extend(["--config", "/nonexistent/dpw.toml"]);
    let o = run(cmd(&args).env("DPWARP_TRANSPORT", "kernel"));
    assert!(
        text(&o.stderr).contains("--config is for --transport dpdk"),
        "{}",
        text(&o.stderr)
    );
    // Empty = unset: the dpdk default, which needs a config.
    let o = run(cmd(&client).env("DPWARP_TRANSPORT", ""));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("needs --config FILE or $DPWARP_CONFIG"),
        "{err}"
    );
}

/// Wait for `child` with a generous limit; its output.
fn finish(child: std::process::Child, limit: Duration, what: &str) -> Output {
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            // Only the process this test started, by its id.
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("{what} did not finish in {limit:?}");
        }
    }
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn assert_keys(v: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        let mut x = v;
        for part in k.split('.') {
            x = &x[part];
        }
        assert!(!x.is_null(), "{k} missing in {v}");
    }
}

/// A perf server and client (`size` bytes, `extra` arguments, `env` on top of [`cmd`]'s) over
/// kernel loopback; (client, server) outputs.
fn perf_pair(test: &str, size: &str, extra: &[&str], env: &[(&str, &str)]) -> (Output, Output) {
    use std::io::{BufRead, BufReader, Read};
    let port = free_port().to_string();
    // perftest's rule: both sides get the same size and iterations.
    let mut server = cmd(&[
        "perf",
        test,
        "--transport",
        "kernel",
        "-p",
        &port,
        "-s",
        size,
        "-n",
        "200",
    ])
    .args(extra)
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The server says so on stderr once it listens (whatever the log level); keep draining
    // its stderr afterwards.
    let mut err = BufReader::new(server.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut all = String::new();
        let mut line = String::new();
        while err.read_line(&mut line).unwrap_or(0) > 0 {
            if line.contains("perf: listening on port") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            line.clear();
        }
        let _ = err.read_to_string(&mut all);
        all
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the perf server did not start listening");
    let client = run(cmd(&[
        "perf",
        test,
        "127.0.0.1",
        "--transport",
        "kernel",
        "-p",
        &port,
        "-s",
        size,
        "-n",
        "200",
        "--json",
    ])
    .args(extra)
    .envs(env.iter().copied()));
    let mut server = finish(server, Duration::from_secs(30), "perf server");
    server.stderr = drain.join().unwrap().into_bytes();
    (client, server)
}

#[test]
fn perf_json_parses_with_the_expected_keys_and_no_info_logs_by_default() {
    let (c, s) = perf_pair("write_bw", "4096", &[], &[]);
    let (out, err) = (text(&c.stdout), text(&c.stderr));
    assert!(c.status.success(), "{err}");
    assert!(s.status.success(), "{}", text(&s.stderr));
    let v = json_lines(&out);
    assert_eq!(v.len(), 1, "{out}");
    assert_keys(
        &v[0],
        &[
            "test",
            "bytes",
            "iterations",
            "bw_peak",
            "bw_average",
            "unit",
            "msg_rate_mpps",
        ],
    );
    assert_eq!(v[0]["test"], "write_bw");
    assert_eq!(v[0]["bytes"], 4096);
    assert_eq!(v[0]["iterations"], 200);
    assert_eq!(v[0]["unit"], "MB/sec");
    // Warn by default: no INFO line anywhere; the server's readiness line is not a log line.
    for o in [&c, &s] {
        for t in [text(&o.stdout), text(&o.stderr)] {
            assert!(!t.contains(" INFO "), "{t}");
        }
    }
    assert!(text(&s.stderr).contains("perf: listening on port"));

    let (c, _) = perf_pair("send_lat", "64", &[], &[]);
    assert!(c.status.success(), "{}", text(&c.stderr));
    let v = json_lines(&text(&c.stdout));
    assert_eq!(v.len(), 1);
    assert_keys(
        &v[0],
        &[
            "test",
            "bytes",
            "iterations",
            "t_min_us",
            "t_max_us",
            "p50_us",
            "t_avg_us",
            "t_stdev_us",
            "p99_us",
            "p99_9_us",
        ],
    );
    let f = |k: &str| v[0][k].as_f64().unwrap();
    assert!(f("t_min_us") <= f("p50_us") && f("p50_us") <= f("p99_us"));
    assert!(f("p99_us") <= f("p99_9_us") && f("p99_9_us") <= f("t_max_us"));
}

#[test]
fn verbose_turns_on_info_logs_on_stderr_only() {
    let (c, s) = perf_pair("write_bw", "4096", &["-v"], &[]);
    assert!(c.status.success() && s.status.success());
    // perf logs the peer's perftest version at info.
    assert!(
        text(&c.stderr).contains(" INFO ") && text(&c.stderr).contains("perftest version"),
        "{}",
        text(&c.stderr)
    );
    assert!(!text(&c.stdout).contains(" INFO "));
    // RUST_LOG, when set, overrides -v.
    let (c, _) = perf_pair("write_bw", "4096", &["-v"], &[("RUST_LOG", "warn")]);
    assert!(c.status.success());
    assert!(!text(&c.stderr).contains(" INFO "), "{}", text(&c.stderr));
}

/// A `dpwarp dpperf --server` over kernel TCP on `addr` serving `count` connections, its
/// output piped.
fn kernel_dpperf_server(addr: &str, count: &str) -> std::process::Child {
    cmd(&[
        "dpperf",
        "--transport",
        "kernel",
        "--server",
        "--count",
        count,
        "--addr",
        addr,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// A `dpwarp dpperf --transport kernel --addr ADDR ARGS` client, tried again for up to 20 s
/// while its server is not listening yet.
fn kernel_dpperf_client(addr: &str, args: &[&str]) -> Output {
    let t = Instant::now();
    loop {
        let mut a = vec!["dpperf", "--transport", "kernel", "--addr", addr];
        a.extend_from_slice(args);
        let o = run(&mut cmd(&a));
        if o.status.success() || t.elapsed() > Duration::from_secs(20) {
            return o;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn dpperf_and_tcp_baseline_json_keep_the_bench_keys() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = kernel_dpperf_server(&addr, "2");
    let mut lines = Vec::new();
    for test in ["write_bw", "send_lat"] {
        let o = kernel_dpperf_client(
            &addr,
            &[
                "--json", "--test", test, "--size", "64", "--iters", "200", "--warmup", "300",
            ],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(!text(&o.stderr).contains(" INFO "), "{}", text(&o.stderr));
        // scripts/bench rewrites `"transport":"kernel"` and the leading `{` with sed.
        let out = text(&o.stdout);
        assert!(
            out.starts_with("{\"") && out.contains("\"transport\":\"kernel\""),
            "{out}"
        );
        lines.extend(json_lines(&out));
    }
    let s = finish(server, Duration::from_secs(30), "dpperf server");
    assert!(s.status.success(), "{}", text(&s.stderr));
    assert_eq!(lines.len(), 2);
    for v in &lines {
        assert_keys(
            v,
            &[
                "transport",
                "test",
                "size",
                "iters",
                "gbps",
                "mpps",
                "lat_us.min",
                "lat_us.p50",
                "lat_us.p99",
                "lat_us.p999",
                "lat_us.max",
                "lat_us.avg",
            ],
        );
    }
    // What the PMDs granted is DPDK's (`"ports"`); kernel TCP has none to report.
    assert!(lines.iter().all(|v| v.get("ports").is_none()), "{lines:?}");
    assert_eq!(lines[0]["test"], "write_bw");
    assert!(lines[0]["gbps"].as_f64().unwrap() > 0.0);
    assert_eq!(lines[1]["test"], "send_lat");
    let l = &lines[1]["lat_us"];
    assert!(l["min"].as_f64().unwrap() <= l["p50"].as_f64().unwrap());
    assert!(l["p999"].as_f64().unwrap() <= l["max"].as_f64().unwrap());
    // The 300 warm-up round trips were exchanged (the server ran 500 and finished) and left
    // out of the figures: 200 samples.
    assert_eq!(lines[1]["iters"], 200);
    assert_eq!(lines[1]["warmup"], 300);
    assert_eq!(l["count"], 200);
    // Over kernel TCP the ping-pong runs on the QP's driver thread (a driver hook), with no
    // hand-off to the application thread per message.
    assert_eq!(lines[1]["on_driver_thread"], true);
    assert!(lines[0].get("warmup").is_none(), "write_bw has no warm-up");

    let o = run(&mut cmd(&[
        "tcp-baseline",
        "--json",
        "--size",
        "4096",
        "--total",
        "4194304",
        "--iters",
        "200",
        "--warmup",
        "50",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = json_lines(&text(&o.stdout));
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["transport"], "kernel_tcp");
    assert_eq!(v[0]["test"], "tcp_stream");
    assert_eq!(v[1]["test"], "tcp_pingpong");
    assert_keys(
        &v[1],
        &["size", "iters", "gbps", "lat_us.p50", "lat_us.p99"],
    );
    assert_eq!(v[1]["warmup"], 50);
    assert_eq!(v[1]["lat_us"]["count"], 200, "the warm-up is not counted");

    // The write-size sweep scripts/bench takes the kernel's best stream from: stream only,
    // TCP_NODELAY on, one result per size, each moving the bytes asked for.
    let o = run(&mut cmd(&[
        "tcp-baseline",
        "--json",
        "--stream-only",
        "--nodelay",
        "--wait",
        "busy",
        "--size",
        "16384,65536",
        "--total",
        "4194304",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = json_lines(&text(&o.stdout));
    assert_eq!(v.len(), 2, "no ping-pong with --stream-only");
    for (r, size) in v.iter().zip([16384, 65536]) {
        assert_eq!(r["transport"], "kernel_tcp_busy_nodelay");
        assert_eq!(r["test"], "tcp_stream");
        assert_eq!(r["size"], size);
        assert_eq!(r["iters"], 4194304 / size);
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn rpc_bench_json_keeps_its_keys() {
    let o = run(&mut cmd(&[
        "rpc-bench",
        "--proto",
        "tcp",
        "--op",
        "read",
        "--size",
        "4096",
        "--seconds",
        "0.2",
        "--json",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_keys(
        &v,
        &[
            "proto",
            "transport",
            "op",
            "size",
            "credits",
            "span",
            "store_ranges",
            "calls",
            "seconds",
            "calls_per_s",
            "p50_us",
            "p99_us",
            "p999_us",
            "gbps",
        ],
    );
    assert_eq!(
        (v["proto"].as_str(), v["op"].as_str()),
        (Some("tcp"), Some("read"))
    );
    assert!(v["p50_us"].as_f64().unwrap() <= v["p999_us"].as_f64().unwrap());
    // One store range of --size per call in flight (32 by default).
    assert_eq!(
        (v["span"].as_u64(), v["store_ranges"].as_u64()),
        (Some(32 * 4096), Some(32))
    );
    assert!(!text(&o.stderr).contains(" INFO "), "{}", text(&o.stderr));
}

/// `--tcp-poll busy`: the ONC RPC/TCP client and server spin on non-blocking sockets; the JSON
/// says which way the run waited.
#[test]
fn rpc_bench_tcp_busy_polled() {
    for poll in ["blocking", "busy"] {
        let o = run(&mut cmd(&[
            "rpc-bench",
            "--proto",
            "tcp",
            "--tcp-poll",
            poll,
            "--op",
            "read",
            "--size",
            "300000",
            "--seconds",
            "0.2",
            "--json",
        ]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["tcp_poll"], poll);
        assert_eq!(v["transport"], "kernel");
        assert!(v["calls"].as_u64().unwrap() > 0, "{v}");
        assert!(v["gbps"].as_f64().unwrap() > 0.0, "{v}");
    }
}

/// `rpc-bench --compare` (ten measurements): one progress line per phase on stderr when it
/// is not a terminal, nothing of it on stdout, which stays one JSON document.
#[test]
fn rpc_bench_compare_shows_its_phases_on_stderr() {
    let o = run(cmd(&[
        "rpc-bench",
        "--compare",
        "--json",
        "--transport",
        "kernel",
        "--seconds",
        "0.2",
        "--credits",
        "4",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR")));
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let phases: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rpc-bench: "))
        .collect();
    assert_eq!(phases.len(), 10, "{err}");
    for (i, l) in phases.iter().enumerate() {
        assert!(l.starts_with(&format!("rpc-bench: {}/10 ", i + 1)), "{l}");
    }
    assert!(
        !err.contains('\r'),
        "no terminal, no carriage returns: {err:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert!(v["null_calls_per_s_tcp"].as_f64().unwrap() > 0.0);
    // Latency at 1 credit as well as at --credits (issue: fair figures).
    for k in [
        "null_p50_us_rdma_1credit",
        "null_p99_us_rdma_1credit",
        "null_p50_us_tcp_1credit",
        "null_p99_us_tcp_1credit",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
}

/// `dpperf --no-crc`: FPDUs go without CRC32c only when both ends ask (RFC 5044 §7.1: a C bit
/// of 1 in either the Request or the Reply turns it on in both directions); the client's JSON
/// says what was negotiated (`mpa_crc`).
#[test]
fn dpperf_no_crc_needs_both_ends() {
    for (server_no_crc, client_no_crc, want) in [
        (true, true, false),
        (false, true, true),
        (true, false, true),
    ] {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut sargs = vec![
            "dpperf",
            "--transport",
            "kernel",
            "--server",
            "--count",
            "1",
        ];
        sargs.extend(["--addr", &addr]);
        if server_no_crc {
            sargs.push("--no-crc");
        }
        let server = cmd(&sargs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut cargs = vec!["--json", "--test", "write_bw"];
        cargs.extend(["--size", "65536", "--iters", "50"]);
        if client_no_crc {
            cargs.push("--no-crc");
        }
        let o = kernel_dpperf_client(&addr, &cargs);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let s = finish(server, Duration::from_secs(30), "dpperf server");
        assert!(s.status.success(), "{}", text(&s.stderr));
        let lines = json_lines(&text(&o.stdout));
        assert_eq!(lines.len(), 1);
        assert_eq!(
            lines[0]["mpa_crc"],
            serde_json::Value::Bool(want),
            "server --no-crc {server_no_crc}, client --no-crc {client_no_crc}: {}",
            lines[0]
        );
        // With CRC on, which code computed it (the x86-64 build's split one, src/crc.rs).
        if want {
            assert_eq!(
                lines[0]["mpa_crc_impl"],
                serde_json::Value::from(dpwarp::crc::implementation())
            );
        } else {
            assert!(lines[0].get("mpa_crc_impl").is_none(), "{}", lines[0]);
        }
        assert!(lines[0]["gbps"].as_f64().unwrap() > 0.0);
    }
}

/// `dpperf --mps N`: the client's pings go N a second, not back to back (sockperf's
/// `under-load --mps`), and each latency is half of one ping's own round trip. Over kernel TCP
/// the ping-pong runs on the QP's driver thread (`Stepped::step`). 100 pings at 1000 a second
/// take at least 99 ms; back to back they took well under 10 here.
#[test]
fn dpperf_paced_pings_go_at_the_rate_asked() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = kernel_dpperf_server(&addr, "1");
    let o = kernel_dpperf_client(
        &addr,
        &[
            "--json", "--test", "send_lat", "--size", "64", "--iters", "100", "--warmup", "0",
            "--mps", "1000",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = finish(server, Duration::from_secs(30), "dpperf server");
    assert!(s.status.success(), "{}", text(&s.stderr));
    let v = &json_lines(&text(&o.stdout))[0];
    assert_eq!(v["pings_per_s"], 1000, "{v}");
    assert_eq!(v["lat_us"]["count"], 100, "{v}");
    let run_s = v["run_s"].as_f64().unwrap();
    assert!(run_s >= 0.099, "100 pings at 1000/s in {run_s} s: {v}");
}

/// `tcp-baseline --mps`: the kernel's ping-pong paced the same way, ping-pong only (no
/// stream); 100 round trips at 1000 a second take at least 99 ms (back to back, a few).
#[test]
fn tcp_baseline_paced_pings_go_at_the_rate_asked() {
    let o = run(&mut cmd(&[
        "tcp-baseline",
        "--pingpong-only",
        "--wait",
        "busy",
        "--json",
        "--size",
        "64",
        "--iters",
        "100",
        "--warmup",
        "0",
        "--mps",
        "1000",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines = json_lines(&text(&o.stdout));
    assert_eq!(lines.len(), 1, "the ping-pong only: {lines:?}");
    let v = &lines[0];
    assert_eq!(v["test"], "tcp_pingpong", "{v}");
    assert_eq!(v["pings_per_s"], 1000, "{v}");
    assert_eq!(v["lat_us"]["count"], 100, "{v}");
    let run_s = v["run_s"].as_f64().unwrap();
    assert!(
        run_s >= 0.099,
        "100 round trips at 1000/s in {run_s} s: {v}"
    );
    let o = run(&mut cmd(&["tcp-baseline", "--mps", "0"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// `--mps 0` is a usage error (a rate of nothing).
#[test]
fn dpperf_mps_zero_is_a_usage_error() {
    let o = run(&mut cmd(&["dpperf", "--test", "send_lat", "--mps", "0"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
