//! `dpwarp perf` server against `dpwarp perf` client over kernel loopback: the perftest -R
//! control protocol (version, system data, MTU, dest records, bandwidth report) and the data
//! phase of write_bw and read_bw. The same code runs against stock perftest on siw in
//! `scripts/interop`.

use std::fs::File;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(args: &[&str], tag: &str) -> (Child, std::path::PathBuf) {
    let out =
        std::env::temp_dir().join(format!("dpwarp-interop-perf-{}-{tag}", std::process::id()));
    let child = Command::new(BIN)
        .arg("perf")
        .args(args)
        .stdout(Stdio::from(File::create(&out).unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .expect("run dpwarp");
    (child, out)
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
    assert!(finish(client, Duration::from_secs(60)), "client failed");
    assert!(finish(server, Duration::from_secs(30)), "server failed");
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
fn perf_refuses_tests_it_does_not_have() {
    let (c, out) = spawn(&["send_lat", "127.0.0.1"], "refuse");
    assert!(!finish(c, Duration::from_secs(10)));
    let _ = std::fs::remove_file(out);
}
