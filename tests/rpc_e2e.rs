//! RPC-over-RDMA end to end: every procedure and chunk path with the data verified, over the
//! in-memory link (plain and resegmented) and kernel TCP loopback.

use std::net::SocketAddr;

use dpwarp::cm::Net;
use std::sync::Arc;
use std::thread;

use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient, ReplyPath};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig};
use dpwarp::transport::memlink::{self, LinkFaults};

mod rpc_common;
use dpwarp::wire::xdr::Padding;
use rpc_common::{exercise, pattern, read, write};

fn server(cfg: ServerConfig, size: usize) -> (RdmaServer, Arc<BlockStore>) {
    let store = Arc::new(BlockStore::memory(size));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    (RdmaServer::new(reg, cfg), store)
}

fn mem_client(s: &RdmaServer, faults: LinkFaults, cfg: ClientConfig) -> RdmaClient {
    let (ce, se) = memlink::pair(faults);
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let c = RdmaClient::connect_transport(Box::new(ce), cfg).expect("client connects");
    h.join().unwrap().expect("server accepts");
    c
}

#[test]
fn all_paths_over_memlink() {
    let (s, store) = server(ServerConfig::default(), 1 << 20);
    let mut c = mem_client(&s, LinkFaults::default(), ClientConfig::default());
    let lim = c.server_limits();
    assert_eq!(lim.maxcall_sendsize, 4096);
    exercise(&mut c, &store);
}

#[test]
fn all_paths_over_resegmented_memlink() {
    let (s, store) = server(ServerConfig::default(), 1 << 20);
    let f = LinkFaults {
        resegment: Some((1, 700)),
        seed: 5,
        ..LinkFaults::default()
    };
    let mut c = mem_client(&s, f, ClientConfig::default());
    exercise(&mut c, &store);
}

#[test]
fn all_paths_over_kernel_tcp() {
    let (s, store) = server(ServerConfig::default(), 1 << 20);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    exercise(&mut c, &store);
    drop(c);
    h.stop();
}

#[test]
fn msgp_padding_both_directions() {
    let cfg = ServerConfig {
        align: 64,
        reply_padding: Some(Padding {
            align: 64,
            thresh: 32,
        }),
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg, 1 << 16);
    let ccfg = ClientConfig {
        padding_thresh: Some(32),
        bulk_threshold: 4096,
        ..ClientConfig::default()
    };
    let mut c = mem_client(&s, LinkFaults::default(), ccfg);
    assert_eq!(c.server_limits().align, 64);
    let data = pattern(7, 1000);
    assert_eq!(write(&mut c, 100, data.clone()), 1000);
    assert_eq!(store.read(100, 1000).unwrap(), data);
    let (d, path) = read(&mut c, 100, 1000, &CallOpts::default());
    assert_eq!((d, path), (data, ReplyPath::InlinePadded));
}

#[test]
fn config_rdma_limits_are_obeyed() {
    // A server accepting only 1 KiB inline calls: a 2 KiB inline-encoded call must become a long
    // call; a client accepting only 1 KiB inline replies gets a 2 KiB reply via the reply chunk.
    let cfg = ServerConfig {
        inline_recv: 1024,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg, 1 << 16);
    let ccfg = ClientConfig {
        inline_recv: 1024,
        bulk_threshold: 1 << 20,
        ..ClientConfig::default()
    };
    let mut c = mem_client(&s, LinkFaults::default(), ccfg);
    assert_eq!(c.server_limits().maxcall_sendsize, 1024);
    let data = pattern(9, 2048);
    assert_eq!(write(&mut c, 0, data.clone()), 2048);
    assert_eq!(c.stats.long_calls, 1);
    assert_eq!(store.read(0, 2048).unwrap(), data);
    let opts = CallOpts {
        write_chunks: vec![],
        reply_chunk: Some(4096),
        segments: 0,
    };
    let (d, path) = read(&mut c, 0, 2048, &opts);
    assert_eq!((d, path), (data.clone(), ReplyPath::ReplyChunk));
    let (d, path) = read(&mut c, 0, 900, &opts);
    assert_eq!((d, path), (data[..900].to_vec(), ReplyPath::Inline));
}

#[test]
fn block_store_backed_by_a_file() {
    let dir = std::env::temp_dir().join(format!("dpwarp-rpc-file-{}", std::process::id()));
    let store = Arc::new(BlockStore::file(&dir, 1 << 20).unwrap());
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let s = RdmaServer::new(reg, ServerConfig::default());
    let mut c = mem_client(&s, LinkFaults::default(), ClientConfig::default());
    let data = pattern(4, 200_000);
    assert_eq!(write(&mut c, 1000, data.clone()), 200_000);
    let opts = CallOpts {
        write_chunks: vec![200_000],
        reply_chunk: None,
        segments: 0,
    };
    assert_eq!(read(&mut c, 1000, 200_000, &opts).0, data);
    drop(c);
    let _ = std::fs::remove_file(&dir);
}

#[test]
fn multi_segment_chunks_every_path() {
    let (s, store) = server(ServerConfig::default(), 1 << 20);
    let mut c = mem_client(&s, LinkFaults::default(), ClientConfig::default());
    let big = pattern(11, 300_001);
    // WRITE through a read chunk of 4 segments.
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            block::write_args(3, big.clone()),
            &CallOpts {
                segments: 4,
                ..CallOpts::default()
            },
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(300_001)
    );
    assert_eq!(store.read(3, 300_001).unwrap(), big);
    // READ into a write chunk of 3 segments (larger than needed: lengths rewritten).
    let opts = CallOpts {
        write_chunks: vec![400_000],
        segments: 3,
        ..CallOpts::default()
    };
    let (d, _) = read(&mut c, 3, 300_001, &opts);
    assert_eq!(d, big);
    // A long reply into a reply chunk of 5 segments.
    let opts = CallOpts {
        reply_chunk: Some(50_000),
        segments: 5,
        ..CallOpts::default()
    };
    let (d, path) = read(&mut c, 3, 30_000, &opts);
    assert_eq!((d, path), (big[..30_000].to_vec(), ReplyPath::ReplyChunk));
    // A long call in a position-zero read chunk of 3 segments.
    let mut args = Body::new();
    args.xdr().put_u64(0);
    args.xdr().put_opaque(&pattern(12, 9000));
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            args,
            &CallOpts {
                segments: 3,
                ..CallOpts::default()
            },
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(9000)
    );
    assert_eq!(store.read(0, 9000).unwrap(), pattern(12, 9000));
}

/// Draft §6.2 (found by an independent probe): a client that announces `maxreply_sendsize` 512
/// gets no inline reply above 512 octets — the announced value is the limit even below the
/// 1 KB basic level of §6.1. Longer replies go by the reply chunk when one is offered, else by
/// a position-zero read chunk and RDMA_DONE.
#[test]
fn config_rdma_maxreply_512_is_the_inline_limit() {
    let (s, store) = server(ServerConfig::default(), 1 << 16);
    let data = pattern(3, 4096);
    store.write(0, &data).unwrap();
    let ccfg = ClientConfig {
        inline_recv: 512,
        bulk_threshold: 1 << 20,
        ..ClientConfig::default()
    };
    for (name, faults) in [
        ("memlink", LinkFaults::default()),
        (
            "resegmented",
            LinkFaults {
                resegment: Some((1, 700)),
                seed: 5,
                ..LinkFaults::default()
            },
        ),
    ] {
        let mut c = mem_client(&s, faults, ccfg.clone());
        let with_chunk = CallOpts {
            reply_chunk: Some(4096),
            ..CallOpts::default()
        };
        for len in [100u32, 400, 600, 660, 900, 960, 2000] {
            let (d, path) = read(&mut c, 0, len, &with_chunk);
            assert_eq!(d, data[..len as usize], "{name}: READ {len}");
            if len >= 500 {
                assert_eq!(path, ReplyPath::ReplyChunk, "{name}: READ {len}");
            }
            let (d, path) = read(&mut c, 0, len, &CallOpts::default());
            assert_eq!(
                d,
                data[..len as usize],
                "{name}: READ {len} without a reply chunk"
            );
            if len >= 500 {
                assert_eq!(path, ReplyPath::ReadChunk, "{name}: READ {len}");
            }
        }
        assert!(
            c.stats.largest_received <= 512,
            "{name}: an inline message of {} octets after maxreply 512",
            c.stats.largest_received
        );
        assert!(
            c.stats.largest_received > 400,
            "{name}: small replies went inline"
        );
    }
}

/// RFC 8797 (what the Linux NFS/RDMA client sends after IRD/ORD in its MPA Request): the server
/// answers with its own connection private data, takes the client's receive size as the
/// inline reply limit without CONFIG_RDMA, and never sends an RFC 8166 requester a reply by
/// read chunk (it has no RDMA_DONE): without a reply chunk a long reply is ERR_CHUNK.
#[test]
fn rfc8797_connection_private_data_sets_the_inline_threshold() {
    use dpwarp::cm::ConnParam;
    use dpwarp::rpc::RpcError;
    use dpwarp::wire::rpcrdma_cpd::CpdRepr;
    let (s, store) = server(ServerConfig::default(), 1 << 16);
    let data = pattern(7, 8192);
    store.write(0, &data).unwrap();
    let cpd = CpdRepr {
        remote_invalidate: true,
        send_size: 2048,
        recv_size: 2048,
    };
    let ccfg = ClientConfig {
        inline_recv: 2048,
        inline_send: 2048,
        configure: false, // an RFC 8166 client has no CONFIG_RDMA
        bulk_threshold: 1 << 20,
        conn: ConnParam {
            private_data: cpd.emit().to_vec(),
            ..ConnParam::default()
        },
        ..ClientConfig::default()
    };
    let mut c = mem_client(&s, LinkFaults::default(), ccfg);
    let theirs = CpdRepr::find(&c.server_private_data).expect("the server answers in kind");
    assert!(
        !theirs.remote_invalidate,
        "dpwarp never sends Send with Invalidate"
    );
    assert_eq!((theirs.send_size, theirs.recv_size), (4096, 4096));
    // 1800 octets: above the RFC 8166 default of 1024, within the announced 2048: inline.
    let (d, path) = read(&mut c, 0, 1800, &CallOpts::default());
    assert_eq!((d, path), (data[..1800].to_vec(), ReplyPath::Inline));
    let with_chunk = CallOpts {
        reply_chunk: Some(8192),
        ..CallOpts::default()
    };
    let (d, path) = read(&mut c, 0, 3000, &with_chunk);
    assert_eq!((d, path), (data[..3000].to_vec(), ReplyPath::ReplyChunk));
    assert!(c.stats.largest_received <= 2048);
    let r = c.call(
        BLOCK_PROG,
        BLOCK_VERS,
        block::PROC_READ,
        block::read_args(0, 3000),
        &CallOpts::default(),
    );
    assert!(matches!(r, Err(RpcError::ErrChunk)), "{r:?}");
    // The connection still serves.
    let (d, _) = read(&mut c, 0, 100, &CallOpts::default());
    assert_eq!(d, data[..100]);
}
