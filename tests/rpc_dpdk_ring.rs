//! RPC-over-RDMA over the DPDK dataplane in one process: an [`RdmaServer`] listening on one port
//! of a net_ring pair (`configs/net_ring.toml`), [`RdmaClient`]s connecting from the other, iWARP
//! over smoltcp over rte_rings. Every procedure and chunk path with the data verified (NULL,
//! GETATTR, WRITE inline and via a read chunk, READ inline / into a write chunk / reply chunk /
//! read chunk + RDMA_DONE, a long call), then pipelined calls at 32 credits on two connections
//! at once; a connection beyond the credit pool is refused with an MPA Reject. One EAL per process: this file holds the only EAL test of its binary.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dpwarp::cm::{CmError, Net};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::Registry;
use dpwarp::rpc::server::{RdmaServer, ServerConfig, ServerStats};
use dpwarp::rpc::RpcError;

mod rpc_common;
use rpc_common::{block_server, exercise, null, pattern};

/// Abort the process if the test runs longer than `secs` (a hang must fail, not block CI).
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        eprintln!("rpc_dpdk_ring: still running after {secs} s; aborting");
        std::process::abort();
    });
}

#[test]
fn rpc_over_dpdk_net_ring_all_paths() {
    watchdog(30);
    let t0 = Instant::now();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/net_ring.toml"
    ))
    .unwrap();
    let cfg = DataplaneConfig::parse(&text).unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();

    let store = Arc::new(BlockStore::memory(1 << 20));
    let srv = block_server(&store);
    let h = srv
        .listen(
            &Net::from(server_ep.clone()),
            SocketAddr::from((server_ep.ip(), 20049)),
        )
        .expect("listen on the dataplane");
    assert_eq!(h.addr.to_string(), "10.90.0.1:20049");
    let remote = SocketAddrV4::new(server_ep.ip(), 20049);

    let mut c = RdmaClient::connect(
        &Net::from(client_ep.clone()),
        SocketAddr::from(remote),
        ClientConfig::default(),
    )
    .expect("client connects over the dataplane");
    // CONFIG_RDMA ran over the dataplane: the server's limits arrived.
    assert_eq!(c.server_limits().maxcall_sendsize, 4096);
    exercise(&mut c, &store);

    // Pipelined: two connections, 32 credits each, WRITE via read chunks and READ into write
    // chunks interleaved, every byte checked; the grant is never exceeded.
    let mut c2 = RdmaClient::connect(
        &Net::from(client_ep.clone()),
        SocketAddr::from(remote),
        ClientConfig::default(),
    )
    .unwrap();
    let blk = 8192usize;
    for (i, cl) in [&mut c, &mut c2].into_iter().enumerate() {
        let mut xids = Vec::new();
        for k in 0..32u64 {
            let off = (i as u64 * 64 + k) * blk as u64;
            let x = cl
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    block::write_args(off, pattern(k as u8, blk)),
                    &CallOpts::default(),
                )
                .unwrap();
            xids.push(x);
        }
        for x in xids {
            let rep = cl.wait(x).unwrap();
            assert_eq!(
                block::decode_write(&mut rep.results().unwrap()).unwrap(),
                Ok(blk as u32)
            );
        }
    }
    for (i, cl) in [&mut c, &mut c2].into_iter().enumerate() {
        let opts = CallOpts {
            write_chunks: vec![blk],
            reply_chunk: None,
            segments: 0,
        };
        let mut xids = Vec::new();
        for k in 0..32u64 {
            let off = (i as u64 * 64 + k) * blk as u64;
            xids.push((
                k,
                cl.submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_READ,
                    block::read_args(off, blk as u32),
                    &opts,
                )
                .unwrap(),
            ));
        }
        for (k, x) in xids {
            let rep = cl.wait(x).unwrap();
            assert_eq!(
                block::decode_read(&mut rep.results().unwrap()).unwrap(),
                Ok(pattern(k as u8, blk))
            );
        }
        assert_eq!(cl.stats.over_grant, 0);
        assert!(cl.stats.max_in_flight > 1, "calls were pipelined");
    }
    let st = srv.stats();
    assert_eq!(ServerStats::get(&st.connections), 2);
    assert!(ServerStats::get(&st.reads_pulled) >= 64);
    drop(c);
    drop(c2);
    h.stop();

    // Admission over the dataplane: a pool of 2 buffers admits one connection (grant 1 + its
    // DONE slot); the next is refused with an MPA Reject carrying `rpcrdma: no credits`.
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let small = RdmaServer::new(
        reg,
        ServerConfig {
            credit_pool: 2,
            ..ServerConfig::default()
        },
    );
    let h2 = small
        .listen(
            &Net::from(server_ep.clone()),
            SocketAddr::from((server_ep.ip(), 20050)),
        )
        .unwrap();
    let remote2 = SocketAddrV4::new(server_ep.ip(), 20050);
    let mut first = RdmaClient::connect(
        &Net::from(client_ep.clone()),
        SocketAddr::from(remote2),
        ClientConfig::default(),
    )
    .unwrap();
    assert_eq!(first.grant(), 1);
    match RdmaClient::connect(
        &Net::from(client_ep.clone()),
        SocketAddr::from(remote2),
        ClientConfig::default(),
    ) {
        Err(RpcError::Cm(CmError::Rejected { private_data, .. })) => {
            assert_eq!(private_data, b"rpcrdma: no credits")
        }
        Err(e) => panic!("expected an MPA reject, got {e}"),
        Ok(_) => panic!("a connection beyond the credit pool was admitted"),
    }
    // The admitted connection is unaffected.
    null(&mut first, "NULL on the admitted connection");
    drop(first);
    h2.stop();
    assert!(t0.elapsed() < Duration::from_secs(30));
    // No frame was lost on the rings (a loss would cost smoltcp's 1 s retransmission timeout).
    for s in dp.stats() {
        assert_eq!((s.device.rx_dropped, s.device.tx_no_mbuf), (0, 0), "{s:?}");
    }
}
