//! 1,000 clients connect at once to a DPDK listener with the default `[tcp]` settings (4
//! listening sockets, `max_startups` and `max_connections` 256) and every one is served, as a
//! kernel-TCP listener serves them: each gets its MPA Reply (RFC 5044 §7.1.3) and the server
//! accepted its request. A SYN that finds the worker at a capacity is not answered (the
//! client retransmits it, RFC 9293 3.8.1, as with a kernel listener whose backlog is full);
//! such SYNs are counted in `WorkerStats::refused`. Before, smoltcp answered a SYN that found
//! no socket in LISTEN with a RST (only `backlog` sockets listened between two passes), and
//! SYNs past a capacity were reset too.
//!
//! DPDK net_tap inside a network namespace this test makes (and deletes); the clients are
//! kernel TCP sockets of threads in that namespace. Needs root. One EAL per process.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::Side;
use dpwarp::cm::ConnParam;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::mpa::{MpaConfig, Startup, StartupEvent};

mod netns_common;
use netns_common::{ip, Netns};

const CLIENTS: usize = 1000;

/// Connect, send an MPA Request, read until the Reply is complete: whether it accepted.
fn client(addr: SocketAddr, go: &Barrier) -> Result<(), String> {
    let now = Instant::now();
    let mut init = Startup::initiator(MpaConfig::default(), now);
    let mut req = Vec::new();
    init.poll_transmit(&mut req);
    go.wait();
    // Linux retransmits an unanswered SYN for about two minutes (tcp_syn_retries = 6).
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(120))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&req).map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Err("closed before the MPA Reply".into()),
            Ok(n) => {
                init.on_bytes(&buf[..n], Instant::now());
                match init.poll_event() {
                    Some(StartupEvent::Established(_)) => return Ok(()),
                    Some(e) => return Err(format!("{e:?}")),
                    None => {}
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

#[test]
fn a_thousand_concurrent_connections_to_a_dpdk_listener_are_all_served() {
    let pid = std::process::id();
    let ns = Netns::new("dpwmany");
    ns.enter();
    let tap = format!("dpwm{pid}");
    // The port and EAL only: [tcp] and [worker] as shipped.
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_tap0,iface={tap}"]
[[port]]
device = "net_tap0"
ip = "10.96.0.2/24"
mac = "02:00:00:96:00:02"
mbufs = 8191
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.96.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();
    let l = ep.listen(7300).unwrap();
    let addr: SocketAddr = "10.96.0.2:7300".parse().unwrap();

    // The server accepts every request it gets; each QP is dropped once accepted (its
    // connection then closes), as a short-lived client's would be.
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    let server = thread::spawn(move || {
        while acc.load(Ordering::SeqCst) < CLIENTS + 1 {
            let Ok(req) = l.get_request(Duration::from_secs(150)) else {
                break;
            };
            let side = Side::new();
            if req.accept(&side.qp, &ConnParam::default()).is_ok() {
                acc.fetch_add(1, Ordering::SeqCst);
            }
        }
        l
    });

    // ARP first, outside the burst.
    let go = Barrier::new(1);
    client(addr, &go).expect("first client");

    let go = Arc::new(Barrier::new(CLIENTS));
    let t0 = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let go = go.clone();
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || client(addr, &go))
                .expect("client thread")
        })
        .collect();
    let mut failed = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        if let Err(e) = c.join().unwrap() {
            failed.push(format!("client {i}: {e}"));
        }
    }
    let took = t0.elapsed();
    let refused: u64 = dp.stats().iter().map(|s| s.refused).sum();
    eprintln!(
        "{} of {CLIENTS} served in {took:?}; SYNs dropped for capacity: {refused}",
        CLIENTS - failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    let _l = server.join().unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), CLIENTS + 1);
    drop(dp);
}
