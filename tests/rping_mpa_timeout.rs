//! `dpwarp rping -s --transport kernel --mpa-timeout 300ms`: connections that stall in their MPA
//! startup are closed at the deadline with a log line naming the peer and why, and a normal
//! client is served meanwhile (RFC 5044 §7.1.2 item 10).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut b = [0u8; 64];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn rping_server_mpa_timeout_closes_stalled_startups_and_logs_them() {
    // -P: the server keeps listening after the client, so the stalled connections are closed
    // by their deadline rather than by the listener going away.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Kill(
        Command::new(BIN)
            .args([
                "rping",
                "-s",
                "-P",
                "--transport",
                "kernel",
                "-a",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &port.to_string(),
                "--mpa-timeout",
                "300ms",
                "--timeout",
                "30",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let err = server.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if l.contains("rping: listening on port") {
                let _ = tx.send(());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the rping server did not start listening");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let silent = TcpStream::connect(addr).unwrap();
    let mut partial = TcpStream::connect(addr).unwrap();
    partial.write_all(b"MPA ID Req ").unwrap();
    let names = [
        silent.local_addr().unwrap().to_string(),
        partial.local_addr().unwrap().to_string(),
    ];
    // A normal client is served while both stall.
    let o = Command::new(BIN)
        .args(["rping", "-c", "--transport", "kernel", "-a", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-C", "1", "-V", "--timeout", "30"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rping client: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (mut s, name) in [silent, partial].into_iter().zip(&names) {
        assert!(
            closed_within(&mut s, Duration::from_secs(3)),
            "{name} still open past the 300 ms deadline"
        );
    }
    // The persistent server keeps listening: stop it, then read its log.
    drop(server);
    let log = drain.join().unwrap();
    for name in &names {
        assert!(
            log.lines().any(
                |l| l.contains(&format!("closing {name} during MPA startup"))
                    && l.contains("deadline")
            ),
            "no deadline log line for {name}:\n{log}"
        );
    }
}
