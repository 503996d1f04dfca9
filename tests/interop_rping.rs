//! `dpwarp rping` server and client against each other over kernel TCP loopback: the rping
//! message protocol (advertise in a Send, RDMA Read, go-ahead, advertise, RDMA Write, go-ahead)
//! with data validation, in the MPA variants the siw matrix (`scripts/interop`) runs against the
//! real peer. No VM needed, so CI covers the protocol on every run.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

/// A free loopback port (bound then released; the server binds it right after).
/// A running `dpwarp rping` whose stdout/stderr go to files: `-v` prints whole ping buffers
/// (64 KiB lines), which would fill a pipe nobody reads until exit and stall the tool.
struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

fn spawn(args: &[&str]) -> Proc {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let base =
        std::env::temp_dir().join(format!("dpwarp-interop-rping-{}-{n}", std::process::id()));
    let out = base.with_extension("out");
    let err = base.with_extension("err");
    // These cases run over kernel TCP; DPDK is the tools' default transport, so say so (unless
    // the case picks its own) and keep the caller's DPWARP_* environment out.
    let kernel: &[&str] = if args.contains(&"--transport") {
        &[]
    } else {
        &["--transport", "kernel"]
    };
    let child = Command::new(BIN)
        .arg("rping")
        .args(kernel)
        .args(args)
        .env_remove("DPWARP_TRANSPORT")
        .env_remove("DPWARP_CONFIG")
        .stdout(Stdio::from(File::create(&out).unwrap()))
        .stderr(Stdio::from(File::create(&err).unwrap()))
        .spawn()
        .expect("run dpwarp");
    Proc { child, out, err }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn collect(p: &mut Proc, status: ExitStatus) -> Output {
    let o = Output {
        status,
        stdout: std::fs::read(&p.out).unwrap_or_default(),
        stderr: std::fs::read(&p.err).unwrap_or_default(),
    };
    let _ = std::fs::remove_file(&p.out);
    let _ = std::fs::remove_file(&p.err);
    o
}

/// Wait for the process at most `limit`; kill it (and fail) if it hangs.
fn finish(mut p: Proc, limit: Duration, what: &str) -> Output {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return collect(&mut p, st);
        }
        if Instant::now() > end {
            let _ = p.child.kill();
            let st = p.child.wait().unwrap();
            let out = collect(&mut p, st);
            panic!(
                "{what} did not finish in {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the server accepts TCP connections on `port` (without consuming its one accept:
/// poll /proc/net/tcp for the listening socket).
fn wait_listening(server: &mut Proc, port: u16) {
    let want = format!(":{port:04X} 00000000:0000 0A");
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open("/proc/net/tcp") {
            let _ = f.read_to_string(&mut s);
        }
        if s.contains(&want) {
            return;
        }
        if let Some(st) = server.child.try_wait().unwrap() {
            panic!("server exited early: {st}");
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!("server never listened on {port}");
}

/// The text rping's client puts in ping `n` of `size` bytes (what `-V` compares and `-v`
/// prints): "rdma-ping-N: " then letters from 'A'+n cycling through 'A'..='z', NUL at the end.
fn expected_ping(n: usize, size: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ").into_bytes();
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < size - 1 {
        s.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    String::from_utf8(s).unwrap()
}

/// Run server and client with the given extra options; check both ends saw every ping.
fn ping_pong(count: usize, size: usize, server_extra: &[&str], client_extra: &[&str]) {
    let port = free_port();
    let ps = port.to_string();
    let ss = size.to_string();
    let cs = count.to_string();
    let mut sargs = vec!["-s", "-a", "127.0.0.1", "-p", &ps, "-S", &ss, "-v"];
    sargs.extend_from_slice(server_extra);
    let mut server = spawn(&sargs);
    wait_listening(&mut server, port);
    let mut cargs = vec![
        "-c",
        "-a",
        "127.0.0.1",
        "-p",
        &ps,
        "-S",
        &ss,
        "-C",
        &cs,
        "-v",
        "-V",
        "--timeout",
        "20",
    ];
    cargs.extend_from_slice(client_extra);
    let client = finish(spawn(&cargs), Duration::from_secs(60), "client");
    let server = finish(server, Duration::from_secs(20), "server");
    let cout = String::from_utf8_lossy(&client.stdout);
    let sout = String::from_utf8_lossy(&server.stdout);
    assert!(
        client.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(
        server.status.success(),
        "server failed: {}",
        String::from_utf8_lossy(&server.stderr)
    );
    let cl: Vec<&str> = cout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    let sl: Vec<&str> = sout
        .lines()
        .filter(|l| l.starts_with("server ping data: "))
        .collect();
    assert_eq!(cl.len(), count, "client output:\n{cout}");
    assert_eq!(sl.len(), count, "server output:\n{sout}");
    for n in 0..count {
        let want = expected_ping(n, size);
        assert_eq!(cl[n], format!("ping data: {want}"));
        assert_eq!(sl[n], format!("server ping data: {want}"));
    }
    // The server notices the client's disconnect, as rping's does.
    assert!(
        String::from_utf8_lossy(&server.stderr).contains("server DISCONNECT EVENT..."),
        "{}",
        String::from_utf8_lossy(&server.stderr)
    );
}

#[test]
fn rping_rev2_crc_on_small() {
    ping_pong(5, 64, &[], &["--crc", "on"]);
}

#[test]
fn rping_rev2_crc_off_largest() {
    // 65535: the largest size stock rping accepts (-S 65536 is refused, see below).
    ping_pong(3, 65535, &["--crc", "off"], &["--crc", "off"]);
}

#[test]
fn rping_server_turns_crc_on_for_a_no_crc_client() {
    // RFC 5044 §7.1: C=1 in either frame means CRC both ways; the data must still flow.
    ping_pong(2, 100, &["--crc", "on"], &["--crc", "off"]);
}

#[test]
fn rping_mpa_rev1() {
    ping_pong(3, 64, &[], &["--mpa-rev", "1"]);
}

#[test]
fn rping_p2p_write_rtr() {
    ping_pong(2, 64, &["--p2p", "write,read"], &["--p2p", "write"]);
}

#[test]
fn rping_p2p_read_rtr() {
    ping_pong(2, 64, &["--p2p", "read"], &["--p2p", "write,read"]);
}

#[test]
fn rping_rejects_sizes_stock_rping_rejects() {
    for size in ["22", "65536"] {
        let out = finish(
            spawn(&["-c", "-a", "127.0.0.1", "-S", size]),
            Duration::from_secs(10),
            "client",
        );
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("Invalid size {size}")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn rping_client_larger_than_server_buffer_fails_cleanly() {
    // The server RDMA Reads the advertised length into its own -S buffer: like rping on an RNIC
    // that is a local protection error, and both ends must exit with an error, not hang.
    let port = free_port();
    let ps = port.to_string();
    let mut server = spawn(&["-s", "-a", "127.0.0.1", "-p", &ps, "-S", "64"]);
    wait_listening(&mut server, port);
    let client = finish(
        spawn(&[
            "-c",
            "-a",
            "127.0.0.1",
            "-p",
            &ps,
            "-S",
            "4096",
            "-C",
            "1",
            "--timeout",
            "10",
        ]),
        Duration::from_secs(30),
        "client",
    );
    let server = finish(server, Duration::from_secs(20), "server");
    assert!(!client.status.success());
    assert!(!server.status.success());
}

#[test]
fn rping_client_source_address() {
    // -I: bind the client's side of the stream to a source address first.
    ping_pong(2, 64, &[], &["-I", "127.0.0.1"]);
}

#[test]
fn rping_dpdk_without_a_config_is_refused() {
    let out = finish(
        spawn(&["-c", "-a", "127.0.0.1", "--transport", "dpdk"]),
        Duration::from_secs(10),
        "client",
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--transport dpdk"));
}
