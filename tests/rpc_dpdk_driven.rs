//! Run-to-completion RPC-over-RDMA on a driven dataplane (`WorkerMode::Driven`, net_ring pair in
//! one process): the server's reactor thread drives the server port's worker and serves the
//! connections on it, the test thread drives the client port's worker through the client's
//! CQs. Every procedure and chunk path with the data verified, then 32 pipelined WRITEs by read
//! chunk (RDMA Reads as continuations: several calls parked at once) and READs into write chunks
//! on two connections. No thread per connection exists: the request path never leaves the
//! reactor. A procedure registered as blocking runs on the handler pool: while it is held, the
//! reactor keeps answering. One EAL per process: this file holds the only EAL test of its
//! binary.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dpwarp::cm::Net;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::{Dataplane, WorkerMode};
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig, ServerStats};

mod rpc_common;
use rpc_common::{
    block_server, exercise, null, pattern, pipelined_file_reads, pipelined_file_writes, threads,
};

/// Abort the process if the test runs longer than `secs` (a hang must fail, not block CI).
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        eprintln!("rpc_dpdk_driven: still running after {secs} s; aborting");
        std::process::abort();
    });
}

#[test]
fn rpc_runs_to_completion_in_the_server_reactor() {
    watchdog(60);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/net_ring.toml"
    ))
    .unwrap();
    let cfg = DataplaneConfig::parse(&text).unwrap();
    let dp = Dataplane::start_with(&cfg, WorkerMode::Driven).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client = Net::from(dp.endpoint(1).unwrap());
    let server_net = Net::from(server_ep.clone());
    assert!(server_net.is_driven() && client.is_driven());

    let store = Arc::new(BlockStore::memory(1 << 20));
    let srv = block_server(&store);
    let h = srv
        .listen(&server_net, SocketAddr::from((server_ep.ip(), 20049)))
        .expect("listen on the driven dataplane");

    // Nothing else drives worker 0: every reply below comes from the reactor.
    let mut c = RdmaClient::connect(&client, h.addr, ClientConfig::default())
        .expect("client connects over the driven dataplane");
    assert_eq!(c.server_limits().maxcall_sendsize, 4096);
    exercise(&mut c, &store);

    // The client's QP has a doorbell (`Net::qp_driver`): a call's Send goes straight into its
    // connection when posted and out at once (`WorkerStats::posts_direct` counts the passes
    // that found such posts: at least one a call), instead of waiting in the post ring for
    // the next pass. Without the client's doorbell: 0.
    // The server's QPs have no doorbell (their posts go through the rings); instead its
    // reactor, once its connections have posted (the replies), runs the worker's send side
    // at once (`Net::poll_transmit_worker`, counted in `send_passes`) rather than leaving the
    // replies for the next pass's transmit phase, after its receive phase. Without it the
    // server's worker runs no send-side pass of its own: 0.
    let workers = dp.stats();
    assert_eq!(workers.len(), 2, "one worker per port");
    let (before, server_before) = (workers[1].posts_direct, workers[0].send_passes);
    const CALLS: u64 = 50;
    for _ in 0..CALLS {
        null(&mut c, "NULL");
    }
    let workers = dp.stats();
    let direct = workers[1].posts_direct - before;
    assert!(
        direct >= CALLS,
        "client: posts straight into the connection seen {direct} times for {CALLS} calls"
    );
    assert_eq!(
        workers[0].posts_direct, 0,
        "the server posted through its rings"
    );
    let server_passes = workers[0].send_passes - server_before;
    assert!(
        server_passes >= CALLS,
        "server: {server_passes} send-side passes of its own for {CALLS} replies"
    );

    let mut c2 = RdmaClient::connect(&client, h.addr, ClientConfig::default()).unwrap();
    let blk = 8192usize;
    for (i, cl) in [&mut c, &mut c2].into_iter().enumerate() {
        // 8 KiB WRITEs exceed the 4 KiB inline limit: each goes by read chunk, the server
        // parks the call while its RDMA Reads run and serves the others meanwhile.
        let mut xids = Vec::new();
        for k in 0..32u64 {
            let off = (i as u64 * 64 + k) * blk as u64;
            xids.push(
                cl.submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    block::write_args(off, pattern(k as u8 ^ 0x5a, blk)),
                    &CallOpts::default(),
                )
                .unwrap(),
            );
        }
        for x in xids {
            let rep = cl.wait(x).unwrap();
            assert_eq!(
                block::decode_write(&mut rep.results().unwrap()).unwrap(),
                Ok(blk as u32)
            );
        }
        let opts = CallOpts {
            write_chunks: vec![blk],
            reply_chunk: None,
            segments: 0,
        };
        let mut xids = Vec::new();
        for k in 0..32u64 {
            let off = (i as u64 * 64 + k) * blk as u64;
            let x = cl
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_READ,
                    block::read_args(off, blk as u32),
                    &opts,
                )
                .unwrap();
            xids.push((k, x));
        }
        for (k, x) in xids {
            let rep = cl.wait(x).unwrap();
            assert_eq!(
                block::decode_read(&mut rep.results().unwrap()).unwrap(),
                Ok(pattern(k as u8 ^ 0x5a, blk))
            );
        }
        assert_eq!(cl.stats.over_grant, 0);
        assert!(cl.stats.max_in_flight > 1, "calls were pipelined");
    }
    let st = srv.stats();
    assert_eq!(ServerStats::get(&st.connections), 2);
    assert!(ServerStats::get(&st.reads_pulled) >= 64);
    // Zero-copy bulk on the reactor too: every read chunk went straight into the memory store
    // and every READ result straight out of it (docs/rpc.md).
    assert_eq!(ServerStats::get(&st.bulk_staged_bytes), 0);
    assert!(ServerStats::get(&st.bulk_placed_bytes) >= 64 * blk as u64);

    // Placement: one reactor for the server port's one worker, pinned to that worker's CPU;
    // no thread per connection.
    let ts = threads();
    let reactors: Vec<_> = ts.iter().filter(|(n, _)| n == "rpc-reactor0").collect();
    assert_eq!(reactors.len(), 1, "threads: {ts:?}");
    if let Some(cpu) = server_net.worker_cpu(0) {
        assert_eq!(reactors[0].1, cpu.to_string(), "threads: {ts:?}");
    }
    assert!(
        !ts.iter().any(|(n, _)| n == "rpc-conn"),
        "a connection got its own thread: {ts:?}"
    );
    drop(c);
    drop(c2);
    h.stop();

    // A procedure registered as blocking runs on the handler pool, not on the reactor: while
    // it is held, NULL calls on the same connection are answered; released, it answers too.
    let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    reg.register_blocking(BLOCK_PROG, BLOCK_VERS, 99, move |_, _| {
        release_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the test releases the blocking call");
        Ok(Body::new())
    });
    let cfg = ServerConfig {
        handler_threads: 3,
        handler_cpus: Some(vec![*dpwarp::affinity::thread_cpus()
            .iter()
            .find(|&&c| Some(c) != server_net.worker_cpu(0))
            .unwrap_or(&0)]),
        ..ServerConfig::default()
    };
    let srv = RdmaServer::new(reg, cfg);
    let h = srv
        .listen(&server_net, SocketAddr::from((server_ep.ip(), 20050)))
        .unwrap();
    let mut c = RdmaClient::connect(&client, h.addr, ClientConfig::default()).unwrap();
    let held = c
        .submit(
            BLOCK_PROG,
            BLOCK_VERS,
            99,
            Body::new(),
            &CallOpts::default(),
        )
        .unwrap();
    for _ in 0..10 {
        null(&mut c, "NULL answered while a blocking call is held");
    }
    release_tx.send(()).unwrap();
    assert!(c.wait(held).unwrap().results().is_ok());
    let ts = threads();
    assert!(
        ts.iter().any(|(n, _)| n.starts_with("rpc-handler")),
        "threads: {ts:?}"
    );
    // The handler threads run where ServerConfig::handler_cpus says: here a CPU other than
    // the reactor's when there is one.
    let handler_cpu = *dpwarp::affinity::thread_cpus()
        .iter()
        .find(|&&c| Some(c) != server_net.worker_cpu(0))
        .unwrap_or(&0);
    // (The first server's pool, also `rpc-handler<i>`, keeps this thread's CPUs.)
    let placed = ts
        .iter()
        .filter(|(n, l)| n.starts_with("rpc-handler") && rpc_common::cpu_list(l) == [handler_cpu])
        .count();
    assert!(
        placed >= 3,
        "this server's three handler threads on CPU {handler_cpu}: {ts:?}"
    );
    drop(c);
    h.stop();

    // A file-backed store: its WRITEs are pulled into the server's pull buffers, its READs
    // run on the handler pool, read into buffers of the store's pool, while the reactor's
    // worker gathers earlier replies' RDMA Writes from theirs. Many in flight at once, the
    // file and every reply with their own bytes, none staged.
    let path = std::env::temp_dir().join(format!("dpwarp-driven-file-{}", std::process::id()));
    const SLOTS: usize = 12;
    let file = Arc::new(BlockStore::file(&path, (SLOTS << 20) as u64).unwrap());
    let srv = block_server(&file);
    let h = srv
        .listen(&server_net, SocketAddr::from((server_ep.ip(), 20051)))
        .unwrap();
    let mut c = RdmaClient::connect(&client, h.addr, ClientConfig::default()).unwrap();
    let w = pipelined_file_writes(&mut c, &file, SLOTS);
    let n = pipelined_file_reads(&mut c, &file, SLOTS, 4);
    let st = srv.stats();
    assert_eq!(ServerStats::get(&st.bulk_staged_bytes), 0);
    assert_eq!(ServerStats::get(&st.bulk_pooled_pull_bytes), w);
    assert_eq!(ServerStats::get(&st.bulk_lent_bytes), n);
    assert!((1..=SLOTS).contains(&file.read_pool_buffers()));
    drop(c);
    h.stop();
    let _ = std::fs::remove_file(&path);

    for s in dp.stats() {
        assert_eq!((s.device.rx_dropped, s.device.tx_no_mbuf), (0, 0), "{s:?}");
    }
}
