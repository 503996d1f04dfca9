//! On kernel TCP and the in-memory link an RPC connection is served on its QP's driver thread
//! (src/rpc/server.rs `serve_request`, a `verbs::DriverHook`): a call is answered on the
//! `dpwarp-qp` thread that received it, with no `rpc-conn` thread; a procedure registered as
//! blocking runs on the handler pool (`rpc-handler<i>`) and its reply still arrives (the pool
//! wakes the driver); a connection the client drops ends cleanly: its credits go back to the
//! pool and no thread of it is left.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::Net;
use dpwarp::rpc::block::{self, BlockStore};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::{ArgReader, Body, Registry};
use dpwarp::rpc::server::{RdmaServer, Served, ServerConfig};
use dpwarp::transport::memlink::{self, LinkFaults};
use dpwarp::wire::oncrpc::{AcceptStat, CallRepr};

mod rpc_common;
use rpc_common::{exercise, null};

const PROBE_PROG: u32 = 0x2000_4711;
const PROBE_VERS: u32 = 1;
/// Registered as non-blocking: runs where the connection is served.
const PROC_WHERE: u32 = 1;
/// Registered as blocking: runs on the handler pool.
const PROC_WHERE_BLOCKING: u32 = 2;

/// The names of the threads the probe procedures ran on, by procedure.
type Seen = Arc<Mutex<Vec<(u32, String)>>>;

/// Thread counts are per process: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn server(cfg: ServerConfig) -> (RdmaServer, Arc<BlockStore>, Seen) {
    let store = Arc::new(BlockStore::memory(1 << 20));
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    for (proc_, blocking) in [(PROC_WHERE, false), (PROC_WHERE_BLOCKING, true)] {
        let seen = seen.clone();
        let f = move |_: &CallRepr, _: &mut ArgReader<'_>| -> Result<Body, AcceptStat> {
            let name = thread::current().name().unwrap_or("").to_string();
            seen.lock().unwrap().push((proc_, name));
            Ok(Body::new())
        };
        if blocking {
            reg.register_blocking(PROBE_PROG, PROBE_VERS, proc_, f);
        } else {
            reg.register(PROBE_PROG, PROBE_VERS, proc_, f);
        }
    }
    (RdmaServer::new(reg, cfg), store, seen)
}

fn probe(c: &mut RdmaClient, proc_: u32) {
    let rep = c
        .call(
            PROBE_PROG,
            PROBE_VERS,
            proc_,
            Body::new(),
            &CallOpts::default(),
        )
        .expect("probe call answered");
    assert!(rep.results().is_ok());
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(n) = std::fs::read_to_string(e.path().join("comm")) {
            v.push(n.trim_end().to_string());
        }
    }
    v
}

fn count(name: &str) -> usize {
    thread_names().iter().filter(|n| *n == name).count()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "{what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Calls on `c` (served by `s`): where they ran, and that blocking ones reach the pool and
/// come back.
fn check_where_calls_run(c: &mut RdmaClient, s: &RdmaServer, seen: &Seen) {
    null(c, "NULL answered");
    probe(c, PROC_WHERE);
    for _ in 0..20 {
        probe(c, PROC_WHERE_BLOCKING);
    }
    probe(c, PROC_WHERE);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 22, "{seen:?}");
    for (p, name) in &seen {
        match *p {
            PROC_WHERE => assert_eq!(name, "dpwarp-qp", "non-blocking call ran on {name}"),
            _ => assert!(
                name.starts_with("rpc-handler"),
                "blocking call ran on {name}"
            ),
        }
    }
    assert_eq!(
        count("rpc-conn"),
        0,
        "no connection thread: {:?}",
        thread_names()
    );
    assert_eq!(s.pool().connections(), 1);
}

#[test]
fn kernel_tcp_calls_are_served_on_the_qp_driver_thread() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (s, store, seen) = server(ServerConfig::default());
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    check_where_calls_run(&mut c, &s, &seen);
    // Every chunk path (read chunks pulled, write and reply chunks, RDMA_DONE) on the driver.
    exercise(&mut c, &store);
    // The client goes: the connection ends on the server, its credits return and its driver
    // thread (and the client's) exits.
    drop(c);
    wait_for("the connection left the credit pool", || {
        s.pool().connections() == 0
    });
    wait_for("no QP driver thread left", || count("dpwarp-qp") == 0);
    h.stop();
}

#[test]
fn memlink_calls_are_served_on_the_qp_driver_thread() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (s, _store, seen) = server(ServerConfig {
        handler_threads: 1,
        ..ServerConfig::default()
    });
    let (ce, se) = memlink::pair(LinkFaults::default());
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let mut c = RdmaClient::connect_transport(Box::new(ce), ClientConfig::default()).unwrap();
    let served = h.join().unwrap().expect("server accepts");
    assert!(matches!(served, Served::OnDriver), "{served:?}");
    check_where_calls_run(&mut c, &s, &seen);
    drop(c);
    wait_for("the connection left the credit pool", || {
        s.pool().connections() == 0
    });
    wait_for("no QP driver thread left", || count("dpwarp-qp") == 0);
    // The server (and so the handler pool) stays usable for the next connection.
    let (ce, se) = memlink::pair(LinkFaults::default());
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let mut c = RdmaClient::connect_transport(Box::new(ce), ClientConfig::default()).unwrap();
    h.join().unwrap().expect("server accepts");
    probe(&mut c, PROC_WHERE_BLOCKING);
    null(&mut c, "NULL on a second connection");
}
