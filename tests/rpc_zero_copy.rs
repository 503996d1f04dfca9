//! Zero-copy bulk (docs/rpc.md): a 1 MiB WRITE is RDMA-Read from the client's read chunk
//! straight into the registered memory block store, and the READ of it is RDMA-Written into the
//! client's write chunk straight from the store; the client hands the data back as a view of
//! its write-chunk region. The server's `bulk_staged_bytes` counts every bulk byte that went
//! through a buffer of its own instead: 0 here, over the in-memory link and kernel TCP, while a
//! file-backed store (which has no registered memory) pulls its WRITEs into the server's pull
//! buffers (`bulk_pooled_pull_bytes`) and reads its READs into buffers of a pool
//! (`bulk_lent_bytes`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;

use dpwarp::cm::Net;
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{BulkView, CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig, ServerStats};
use dpwarp::transport::memlink::{self, LinkFaults};
use dpwarp::verbs::SharedMem;

mod common;
mod rpc_common;
use rpc_common::pattern;

const MIB: usize = 1 << 20;

fn server(store: BlockStore) -> (RdmaServer, Arc<BlockStore>) {
    let store = Arc::new(store);
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    (RdmaServer::new(reg, ServerConfig::default()), store)
}

fn mem_client(s: &RdmaServer) -> RdmaClient {
    let (ce, se) = memlink::pair(LinkFaults::default());
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let c = RdmaClient::connect_transport(Box::new(ce), ClientConfig::default()).unwrap();
    h.join().unwrap().expect("server accepts");
    c
}

fn write_status(c: &mut RdmaClient, off: u64, data: Vec<u8>) -> Result<u32, u32> {
    write_args_status(c, block::write_args(off, data))
}

/// A WRITE with these arguments: the count written, or the status.
fn write_args_status(c: &mut RdmaClient, args: Body) -> Result<u32, u32> {
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            args,
            &CallOpts::default(),
        )
        .expect("WRITE answered");
    let mut r = rep.results().expect("SUCCESS");
    block::decode_write(&mut r).unwrap()
}

/// READ `len` bytes at `off` into a write chunk; asserts the client hands back a view of the
/// write-chunk region (not a copy) and returns the bytes.
fn read_chunk(c: &mut RdmaClient, off: u64, len: usize) -> Vec<u8> {
    let opts = CallOpts {
        write_chunks: vec![len],
        reply_chunk: None,
        segments: 0,
    };
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_READ,
            block::read_args(off, len as u32),
            &opts,
        )
        .expect("READ");
    let mut r = rep.results().expect("SUCCESS");
    let view = block::decode_read_view(&mut r).unwrap().expect("BLK_OK");
    assert!(
        matches!(view, BulkView::Chunk(..)),
        "the data is handed back in the write-chunk region"
    );
    view.to_vec()
}

fn counters(s: &RdmaServer) -> (u64, u64, u64) {
    let st = s.stats();
    (
        ServerStats::get(&st.bulk_staged_bytes),
        ServerStats::get(&st.bulk_placed_bytes),
        ServerStats::get(&st.bytes_written),
    )
}

/// A 1 MiB WRITE then READ through chunks against the memory store: the data round-trips, lands
/// in the store's own memory (same address before and after), and no bulk byte is staged.
fn write_read_in_place(s: &RdmaServer, store: &BlockStore, c: &mut RdmaClient, seed: u8) {
    let mem = store.memory_region().expect("a memory store").clone();
    let addr = mem.addr();
    let off = 4096 * u64::from(seed) + 3;
    let data = pattern(seed, MIB);
    let before = counters(s);
    assert_eq!(write_status(c, off, data.clone()), Ok(MIB as u32));
    let o = off as usize;
    assert!(
        mem.bytes()[o..o + MIB] == data[..],
        "the store's bytes changed in place"
    );
    assert_eq!(mem.addr(), addr, "the store's memory is the same memory");
    assert_eq!(read_chunk(c, off, MIB), data);
    let after = counters(s);
    assert_eq!(after.0 - before.0, 0, "bulk bytes staged outside the store");
    assert_eq!(
        after.1 - before.1,
        MIB as u64,
        "bytes RDMA-Read into the store"
    );
    assert_eq!(
        after.2 - before.2,
        MIB as u64,
        "bytes RDMA-Written from the store"
    );
}

#[test]
fn write_read_1mib_never_staged_over_memlink() {
    let (s, store) = server(BlockStore::memory(8 * MIB));
    let mut c = mem_client(&s);
    write_read_in_place(&s, &store, &mut c, 1);
    // Twice on one connection: the store stays registered in the connection's PD.
    write_read_in_place(&s, &store, &mut c, 2);
    // A second connection (its own PD) reaches the same memory.
    let mut c2 = mem_client(&s);
    write_read_in_place(&s, &store, &mut c2, 3);
}

#[test]
fn write_read_1mib_never_staged_over_kernel_tcp() {
    let (s, store) = server(BlockStore::memory(4 * MIB));
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    write_read_in_place(&s, &store, &mut c, 4);
    drop(c);
    h.stop();
}

fn lent(s: &RdmaServer) -> u64 {
    ServerStats::get(&s.stats().bulk_lent_bytes)
}

fn pooled_pulls(s: &RdmaServer) -> u64 {
    ServerStats::get(&s.stats().bulk_pooled_pull_bytes)
}

/// A file-backed store has no registered memory: a WRITE's data is RDMA-Read into a buffer
/// of the server's pull pool and written to the file from there (`bulk_pooled_pull_bytes`),
/// and a READ's is read from the file into a buffer of the store's pool and RDMA-Written from
/// there (`bulk_lent_bytes`); neither goes through a fresh buffer (staged), except small ones.
#[test]
fn file_store_pools_writes_and_reads() {
    let path = std::env::temp_dir().join(format!("dpwarp-zc-{}", std::process::id()));
    let (s, store) = server(BlockStore::file(&path, 2 * MIB as u64).unwrap());
    let mut c = mem_client(&s);
    let data = pattern(5, MIB);
    assert_eq!(write_status(&mut c, 0, data.clone()), Ok(MIB as u32));
    assert_eq!(
        pooled_pulls(&s),
        MIB as u64,
        "the WRITE went into a pull buffer"
    );
    assert_eq!(
        s.pull_pool_idle(),
        1,
        "and the buffer came back after the call"
    );
    assert_eq!(read_chunk(&mut c, 0, MIB), data);
    assert_eq!(counters(&s), (0, 0, MIB as u64));
    assert_eq!(lent(&s), MIB as u64, "the READ went from the pool's buffer");
    // Again: the same buffers (the call and the reply are done with them).
    let data2 = pattern(6, MIB);
    assert_eq!(
        write_status(&mut c, MIB as u64, data2.clone()),
        Ok(MIB as u32)
    );
    assert_eq!(s.pull_pool_idle(), 1);
    assert_eq!(read_chunk(&mut c, MIB as u64, MIB), data2);
    assert_eq!(read_chunk(&mut c, 0, MIB), data);
    assert_eq!(store.read_pool_buffers(), 1);
    // A small READ (under 32 KiB) takes a buffer of its own, as before.
    assert_eq!(read_chunk(&mut c, 100, 20_000), data[100..20_100]);
    assert_eq!(counters(&s).0, 20_000);
    drop(c);
    let _ = std::fs::remove_file(&path);
}

/// WRITEs whose data is a window of the client's registered memory (`put_bulk_region`), over
/// the in-memory link and kernel TCP: the server RDMA-Reads each window in place (counted on
/// the client, nothing copied there), several in flight from one memory land where each
/// call said, the same memory serves again once the replies are in, and a window under the
/// bulk threshold goes inline.
#[test]
fn client_writes_from_windows_of_registered_memory() {
    const CALLS: usize = 6;
    let (s, store) = server(BlockStore::memory(CALLS * MIB));
    let c = mem_client(&s);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let k = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    let store_mem = store.memory_region().expect("a memory store").clone();
    for (round, mut c) in [c, k].into_iter().enumerate() {
        // One memory holding every call's data, each window 7 octets off a MiB boundary.
        let mem = SharedMem::from_vec(pattern(40 + round as u8, CALLS * MIB + 7));
        let before = counters(&s).1;
        let xids: Vec<u32> = (0..CALLS)
            .map(|i| {
                let args = block::write_args_region((i * MIB) as u64, &mem, i * MIB + 7, MIB);
                c.submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    args,
                    &CallOpts::default(),
                )
                .unwrap()
            })
            .collect();
        assert!(
            c.stats.max_in_flight >= 2,
            "the WRITEs were in flight together"
        );
        for x in xids {
            let rep = c.wait(x).expect("WRITE answered");
            let mut r = rep.results().expect("SUCCESS");
            assert_eq!(block::decode_write(&mut r).unwrap(), Ok(MIB as u32));
        }
        assert!(
            store_mem.bytes()[..] == mem.bytes()[7..],
            "round {round}: the store holds each window's bytes where its call put them"
        );
        assert_eq!(
            c.stats.region_bytes_lent,
            (CALLS * MIB) as u64,
            "every window was lent in place"
        );
        assert_eq!(
            counters(&s).1 - before,
            (CALLS * MIB) as u64,
            "and RDMA-Read by the server into its store"
        );
        // The memory again (its windows' registrations ended with their calls): new bytes,
        // one call, and a window under the bulk threshold (inline, not lent).
        mem.bytes_mut()[7..7 + MIB].copy_from_slice(&pattern(50, MIB));
        let args = block::write_args_region(0, &mem, 7, MIB);
        assert_eq!(write_args_status(&mut c, args), Ok(MIB as u32));
        assert!(store_mem.bytes()[..MIB] == pattern(50, MIB)[..]);
        let args = block::write_args_region(0, &mem, 3, 100);
        assert_eq!(write_args_status(&mut c, args), Ok(100));
        assert!(store_mem.bytes()[..100] == mem.bytes()[3..103]);
        assert_eq!(c.stats.region_bytes_lent, (CALLS * MIB + MIB) as u64);
    }
    h.stop();
}

/// READ of a file store without a write chunk: the data inline, or the status.
fn read_inline(c: &mut RdmaClient, off: u64, len: u32) -> Result<Vec<u8>, u32> {
    rpc_common::read_status(c, off, len, &CallOpts::default()).0
}

/// Small READs of a file store whose bytes are in the page cache are answered where the call
/// arrived, not on the handler pool (`calls_nowait`), as are range errors; bytes dropped from
/// the page cache and large READs go to the pool; every READ returns the file's bytes.
#[test]
fn file_store_small_cached_reads_are_answered_at_once() {
    let path = std::env::temp_dir().join(format!("dpwarp-zc-nowait-{}", std::process::id()));
    let (s, _store) = server(BlockStore::file(&path, MIB as u64).unwrap());
    let mut c = mem_client(&s);
    let nowait = || ServerStats::get(&s.stats().calls_nowait);
    let data = pattern(21, 256 * 1024);
    assert_eq!(write_status(&mut c, 0, data.clone()), Ok(data.len() as u32));
    assert_eq!(nowait(), 0, "a WRITE goes to the pool");
    assert_eq!(read_inline(&mut c, 100, 4000).unwrap(), data[100..4100]);
    assert_eq!(read_chunk(&mut c, 5000, 20_000), data[5000..25_000]);
    assert_eq!(
        read_inline(&mut c, MIB as u64 - 10, 20),
        Err(block::BLK_ERANGE)
    );
    assert_eq!(
        nowait(),
        3,
        "cached bytes and a range error answered at once"
    );
    assert_eq!(read_chunk(&mut c, 0, 64 * 1024), data[..64 * 1024]);
    assert_eq!(nowait(), 3, "a large READ goes to the pool");
    // (The kernel may keep a page a moment longer than asked: tried a few times.)
    let pooled = (0..20).any(|_| {
        common::evict_from_page_cache(&path);
        let k = nowait();
        assert_eq!(read_inline(&mut c, 8192, 4096).unwrap(), data[8192..12_288]);
        nowait() == k
    });
    assert!(
        pooled,
        "bytes dropped from the page cache were never read on the pool"
    );
    let k = nowait();
    assert_eq!(read_inline(&mut c, 8192, 4096).unwrap(), data[8192..12_288]);
    assert_eq!(nowait(), k + 1);
    drop(c);
    let _ = std::fs::remove_file(&path);
}

/// Many WRITEs, then READs, of a file store in flight at once, over the in-memory link and
/// kernel TCP: the file holds what each WRITE sent (pull buffers reused, a shorter WRITE's
/// bytes only), every READ reply carries its own bytes (no pool buffer is lent again before
/// its reply is done with it), nothing is staged, and the READ pool makes no more buffers than
/// READs were in flight.
#[test]
fn pipelined_file_writes_and_reads_get_their_own_bytes() {
    const SLOTS: usize = 12;
    let path = std::env::temp_dir().join(format!("dpwarp-zc-pipe-{}", std::process::id()));
    let (s, store) = server(BlockStore::file(&path, (SLOTS * MIB) as u64).unwrap());
    let mut c = mem_client(&s);
    let w = rpc_common::pipelined_file_writes(&mut c, &store, SLOTS);
    let n = rpc_common::pipelined_file_reads(&mut c, &store, SLOTS, 3);
    drop(c);
    let h = s
        .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let mut c = RdmaClient::connect(&Net::kernel(), h.addr, ClientConfig::default()).unwrap();
    let w = w + rpc_common::pipelined_file_writes(&mut c, &store, SLOTS);
    let n = n + rpc_common::pipelined_file_reads(&mut c, &store, SLOTS, 3);
    drop(c);
    h.stop();
    assert_eq!(counters(&s).0, 0, "nothing staged");
    assert_eq!(pooled_pulls(&s), w, "every WRITE into a pull buffer");
    assert_eq!(lent(&s), n, "every READ from the pool");
    let made = store.read_pool_buffers();
    assert!(
        (1..=SLOTS).contains(&made),
        "{made} pool buffers for {SLOTS} READs in flight"
    );
    let _ = std::fs::remove_file(&path);
}

/// Placement only where the handler would write: a WRITE past the end of the store or to a
/// read-only store is not placed (nothing lands in the store) and gets its error status.
#[test]
fn refused_writes_are_not_placed() {
    let (s, store) = server(BlockStore::memory(MIB));
    let mut c = mem_client(&s);
    let data = pattern(6, 64 * 1024);
    assert_eq!(
        write_status(&mut c, (MIB - 1000) as u64, data.clone()),
        Err(block::BLK_ERANGE)
    );
    assert!(store
        .memory_region()
        .unwrap()
        .bytes()
        .iter()
        .all(|&b| b == 0));
    assert_eq!(counters(&s).1, 0, "nothing placed");

    let mut ro = BlockStore::memory(MIB);
    ro.read_only = true;
    let (s, store) = server(ro);
    let mut c = mem_client(&s);
    assert_eq!(write_status(&mut c, 0, data), Err(block::BLK_EROFS));
    assert!(store
        .memory_region()
        .unwrap()
        .bytes()
        .iter()
        .all(|&b| b == 0));
    assert_eq!(counters(&s).1, 0, "nothing placed");
}
