//! `dpwarp rping --transport dpdk`: an rping server and an rping client, each its own process with
//! its own EAL (one EAL per process), connected through a net_memif socket unique to this test.
//! The full rping ping-pong (advertise in a Send, RDMA Read, go-ahead, advertise, RDMA Write,
//! go-ahead) runs over the DPDK dataplane with the client validating every ping (-V); a ping
//! bigger than one TCP segment makes the Read Response and the Write span several FPDUs.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

mod memif_common;
use memif_common::{configs, Kill};

#[test]
fn rping_over_dpdk_memif_two_processes() {
    const COUNT: usize = 5;
    const SIZE: &str = "4000";
    let dir = std::env::temp_dir().join(format!("dpwarp-dprping-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let (scfg, ccfg) = configs(&dir, &sock, 94, 0, false);

    let mut server = Kill(
        Command::new(BIN)
            .args([
                "rping",
                "-s",
                "-a",
                "10.94.0.1",
                "-p",
                "7174",
                "-v",
                "-S",
                SIZE,
            ])
            .args(["--timeout", "30", "--transport", "dpdk", "--config"])
            .arg(&scfg)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The server logs "rping: listening" once its DPDK listener is installed; keep draining
    // its stderr afterwards so it never blocks on a full pipe.
    let err = server.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if l.contains("rping: listening on port 7174") {
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
        "the DPDK rping server did not start listening"
    );

    // The client gives neither --transport nor --config: DPDK is the default and
    // $DPWARP_CONFIG names the config (a kernel-TCP client could not reach 10.94.0.1 at all).
    let o = Command::new(BIN)
        .args(["rping", "-c", "-a", "10.94.0.1", "-p", "7174", "-v", "-V"])
        .args(["-C", &COUNT.to_string(), "-S", SIZE, "--timeout", "30"])
        .env_remove("DPWARP_TRANSPORT")
        .env("DPWARP_CONFIG", &ccfg)
        .output()
        .unwrap();
    let cout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "client failed: {}\n{cout}",
        String::from_utf8_lossy(&o.stderr)
    );
    // -V: the client compared each ping's RDMA-Written echo with what it sent; -v printed it.
    let pings: Vec<&str> = cout
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .collect();
    assert_eq!(pings.len(), COUNT, "{cout}");
    for (i, l) in pings.iter().enumerate() {
        assert!(l.starts_with(&format!("ping data: rdma-ping-{i}: ")), "{l}");
    }

    // The (non-persistent) server ends when the client disconnects.
    let st = server.0.wait().unwrap();
    let serr = drain.join().unwrap();
    let sout = sdrain.join().unwrap();
    assert!(st.success(), "server exit {st}: {serr}");
    assert_eq!(
        sout.lines()
            .filter(|l| l.starts_with("server ping data: rdma-ping-"))
            .count(),
        COUNT,
        "{sout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dpwarp rping` with `DPWARP_*` as given (none by default) and `args`; (success, stderr).
fn rping(env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let mut c = Command::new(BIN);
    c.arg("rping").args(args);
    c.env_remove("DPWARP_TRANSPORT").env_remove("DPWARP_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn rping_defaults_to_dpdk_and_needs_a_config() {
    // Every case fails before any EAL start, so this test needs no DPDK resources.
    const NEED: &str = "--transport dpdk (the default) needs --config FILE or $DPWARP_CONFIG";
    // No transport, no config: DPDK is the default, and it says what to do instead of quietly
    // running over kernel TCP.
    for args in [&["-s"][..], &["-c", "-a", "10.94.1.1"][..]] {
        let (ok, err) = rping(&[], args);
        assert!(!ok && err.contains(NEED), "{args:?}: {err}");
        assert!(err.contains("or use --transport kernel"), "{err}");
    }
    let (ok, err) = rping(&[], &["-c", "-a", "10.94.1.1", "--transport", "dpdk"]);
    assert!(!ok && err.contains(NEED), "{err}");
    // $DPWARP_CONFIG is the config when --config is absent (here: a file that does not exist,
    // so the error names it); an explicit --config wins over it.
    let (ok, err) = rping(
        &[("DPWARP_CONFIG", "/nonexistent/dpw-env.toml")],
        &["-c", "-a", "10.94.1.1"],
    );
    assert!(!ok && err.contains("dpw-env.toml"), "{err}");
    let (ok, err) = rping(
        &[("DPWARP_CONFIG", "/nonexistent/dpw-env.toml")],
        &[
            "-c",
            "-a",
            "10.94.1.1",
            "--config",
            "/nonexistent/dpw-arg.toml",
        ],
    );
    assert!(
        !ok && err.contains("dpw-arg.toml") && !err.contains("dpw-env"),
        "{err}"
    );
    // $DPWARP_TRANSPORT=kernel selects kernel TCP, where an explicit --config is refused.
    let (ok, err) = rping(
        &[("DPWARP_TRANSPORT", "kernel")],
        &["-c", "-a", "10.94.1.1", "--config", "x.toml"],
    );
    assert!(
        !ok && err.contains("--config is for --transport dpdk"),
        "{err}"
    );
    // An unknown transport is clap's usage error, naming the valid ones.
    let (ok, err) = rping(&[], &["-c", "-a", "10.94.1.1", "--transport", "xdp"]);
    assert!(
        !ok && err.contains("[possible values: dpdk, kernel]"),
        "{err}"
    );
    // dpperf (scripts/bench's tool) resolves its transport and config the same way.
    let o = Command::new(BIN)
        .args(["dpperf", "--test", "send_lat"])
        .env_remove("DPWARP_TRANSPORT")
        .env_remove("DPWARP_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(NEED), "{err}");
}
