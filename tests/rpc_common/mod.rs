//! Shared by the RPC-over-RDMA tests (kernel TCP, in-memory link, DPDK net_ring and net_memif):
//! the data pattern, READ/WRITE helpers and the walk through every procedure and chunk path.
#![allow(dead_code)]

use std::sync::Arc;

use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, RdmaClient, ReplyPath};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig};

/// An RPC-over-RDMA server of the block program over `store`, 32 credits at most.
pub fn block_server(store: &Arc<BlockStore>) -> RdmaServer {
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    RdmaServer::new(
        reg,
        ServerConfig {
            max_credits: 32,
            ..ServerConfig::default()
        },
    )
}

/// A NULL call on `c` succeeds (`what`: the panic message if it does not).
pub fn null(c: &mut RdmaClient, what: &str) {
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_NULL,
            Body::new(),
            &CallOpts::default(),
        )
        .expect(what);
    assert!(rep.results().is_ok());
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 9) as u8)
        })
        .collect()
}

pub fn read(c: &mut RdmaClient, off: u64, len: u32, opts: &CallOpts) -> (Vec<u8>, ReplyPath) {
    let (data, path) = read_status(c, off, len, opts);
    (data.expect("BLK_OK"), path)
}

/// A READ answered with SUCCESS: its data, or the block status it carried instead.
pub fn read_status(
    c: &mut RdmaClient,
    off: u64,
    len: u32,
    opts: &CallOpts,
) -> (Result<Vec<u8>, u32>, ReplyPath) {
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_READ,
            block::read_args(off, len),
            opts,
        )
        .expect("READ");
    let mut r = rep.results().expect("SUCCESS");
    (block::decode_read(&mut r).unwrap(), rep.path)
}

pub fn write(c: &mut RdmaClient, off: u64, data: Vec<u8>) -> u32 {
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            block::write_args(off, data),
            &CallOpts::default(),
        )
        .expect("WRITE");
    let mut r = rep.results().expect("SUCCESS");
    block::decode_write(&mut r).unwrap().expect("BLK_OK")
}

/// Every procedure and path: NULL, GETATTR, small WRITE inline, large WRITE via a read chunk,
/// READ inline, READ into a write chunk, a long reply into a reply chunk, a long reply as a read
/// chunk + RDMA_DONE, a long call (position-zero read chunk).
pub fn exercise(c: &mut RdmaClient, store: &BlockStore) {
    exercise_with(c, Some(store), store.size());
}

/// What the store holds at `off..off+len`: read directly when the store is in this process,
/// else through an RPC READ into a write chunk (a server in another process).
pub fn readback(c: &mut RdmaClient, store: Option<&BlockStore>, off: u64, len: usize) -> Vec<u8> {
    match store {
        Some(s) => s.read(off, len).unwrap(),
        None => {
            let opts = CallOpts {
                write_chunks: vec![len],
                reply_chunk: None,
                segments: 0,
            };
            read(c, off, len as u32, &opts).0
        }
    }
}

/// [`exercise`] against a store of `size` bytes that may live in another process.
pub fn exercise_with(c: &mut RdmaClient, store: Option<&BlockStore>, size: u64) {
    null(c, "NULL");
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_GETATTR,
            Body::new(),
            &CallOpts::default(),
        )
        .unwrap();
    let a = block::decode_getattr(&mut rep.results().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(a.size, size);

    // Small WRITE: inline. Large WRITE: read chunk pulled by the server.
    let small = pattern(1, 100);
    assert_eq!(write(c, 10, small.clone()), 100);
    assert_eq!(readback(c, store, 10, 100), small);
    let big = pattern(2, 300_000);
    assert_eq!(write(c, 4096, big.clone()), 300_000);
    assert_eq!(readback(c, store, 4096, 300_000), big);

    // READ inline (small), into a write chunk (big).
    let (d, path) = read(c, 10, 100, &CallOpts::default());
    assert_eq!((d, path), (small.clone(), ReplyPath::Inline));
    let opts = CallOpts {
        write_chunks: vec![300_000],
        reply_chunk: None,
        segments: 0,
    };
    let (d, path) = read(c, 4096, 300_000, &opts);
    assert_eq!(d, big);
    assert_eq!(
        path,
        ReplyPath::Inline,
        "only the data moved; the reply fits inline"
    );

    // A READ of 20 KB without a write chunk: the reply is too long to be inline.
    let want = readback(c, store, 4096, 20_000);
    let opts = CallOpts {
        write_chunks: vec![],
        reply_chunk: Some(64 * 1024),
        segments: 0,
    };
    let (d, path) = read(c, 4096, 20_000, &opts);
    assert_eq!((d, path), (want.clone(), ReplyPath::ReplyChunk));
    // ... and with no reply chunk either: a read chunk in the reply, then RDMA_DONE.
    let dones = c.stats.dones;
    let (d, path) = read(c, 4096, 20_000, &CallOpts::default());
    assert_eq!((d, path), (want, ReplyPath::ReadChunk));
    assert_eq!(c.stats.dones, dones + 1);

    // Long call: a WRITE whose inline part exceeds the server's inline limit because the bulk
    // threshold keeps the data inline.
    let longs = c.stats.long_calls;
    let mut args = Body::new();
    args.xdr().put_u64(8);
    args.xdr().put_opaque(&pattern(3, 9000));
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            args,
            &CallOpts::default(),
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(9000)
    );
    assert_eq!(readback(c, store, 8, 9000), pattern(3, 9000));
    assert_eq!(c.stats.long_calls, longs + 1);
    assert_eq!(c.stats.over_grant, 0);
}

/// The CPUs of a `Cpus_allowed_list` ("0-2,5").
pub fn cpu_list(l: &str) -> Vec<usize> {
    l.split(',')
        .filter(|r| !r.is_empty())
        .flat_map(|r| match r.split_once('-') {
            Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
            None => r.parse().unwrap()..=r.parse().unwrap(),
        })
        .collect()
}

/// (name, Cpus_allowed_list) of every thread of this process.
pub fn threads() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let p = t.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        out.push((name.trim().to_string(), cpus));
    }
    out
}

/// A file store's READ pool under load: `slots` distinct 1 MiB patterns written into the file
/// behind the server's back, then `rounds` times every slot READ with all of them in flight at
/// once (each into a write chunk), every reply checked against its own slot. A buffer lent
/// again while an earlier reply still needed it would show another slot's bytes. Returns the
/// bytes read.
pub fn pipelined_file_reads(
    c: &mut RdmaClient,
    store: &BlockStore,
    slots: usize,
    rounds: usize,
) -> u64 {
    const MIB: usize = 1 << 20;
    let data: Vec<Vec<u8>> = (0..slots).map(|i| pattern(i as u8 ^ 0x5a, MIB)).collect();
    for (i, d) in data.iter().enumerate() {
        store.write((i * MIB) as u64, d).expect("store write");
    }
    let opts = CallOpts {
        write_chunks: vec![MIB],
        reply_chunk: None,
        segments: 0,
    };
    for round in 0..rounds {
        let mut xids = Vec::new();
        for i in 0..slots {
            // Each round in another order, so that buffers meet other slots.
            let slot = (i * 7 + round) % slots;
            let xid = c
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_READ,
                    block::read_args((slot * MIB) as u64, MIB as u32),
                    &opts,
                )
                .expect("READ submitted");
            xids.push((xid, slot));
        }
        for (xid, slot) in xids {
            let rep = c.wait(xid).expect("READ answered");
            let mut r = rep.results().expect("SUCCESS");
            let got = block::decode_read(&mut r).unwrap().expect("BLK_OK");
            assert!(
                got == data[slot],
                "round {round}: the READ of slot {slot} returned other bytes"
            );
        }
    }
    (slots * rounds * MIB) as u64
}

/// WRITEs through a file store's pull buffers under load: `slots` distinct 1 MiB patterns, then
/// a 40 000-octet one over the start of each slot (shorter than the buffers, so a buffer's
/// leftover bytes would show), WRITTEN by read chunk with each round's all in flight at once;
/// then every slot compared with the file. Returns the bytes written.
pub fn pipelined_file_writes(c: &mut RdmaClient, store: &BlockStore, slots: usize) -> u64 {
    const MIB: usize = 1 << 20;
    const SHORT: usize = 40_000;
    let data: Vec<Vec<u8>> = (0..slots).map(|i| pattern(i as u8 ^ 0xa5, MIB)).collect();
    // Two rounds, each with its WRITEs in flight at once and none overlapping another of its
    // round (a blocking handler may run beside another): the full MiBs, then shorter WRITEs
    // over each slot's start with other bytes, into buffers that held the first round's.
    for short in [false, true] {
        let mut xids = Vec::new();
        for (i, d) in data.iter().enumerate() {
            let bytes = if short {
                pattern(i as u8 ^ 0x3c, SHORT)
            } else {
                d.clone()
            };
            let n = bytes.len() as u32;
            let xid = c
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    block::write_args((i * MIB) as u64, bytes),
                    &CallOpts::default(),
                )
                .expect("WRITE submitted");
            xids.push((xid, n));
        }
        for (xid, n) in xids {
            let rep = c.wait(xid).expect("WRITE answered");
            let mut r = rep.results().expect("SUCCESS");
            assert_eq!(block::decode_write(&mut r).unwrap(), Ok(n));
        }
    }
    for (i, d) in data.iter().enumerate() {
        let mut want = d.clone();
        want[..SHORT].copy_from_slice(&pattern(i as u8 ^ 0x3c, SHORT));
        let got = store.read((i * MIB) as u64, MIB).expect("store read");
        assert!(got == want, "slot {i}: the file holds other bytes");
    }
    (slots * (MIB + SHORT)) as u64
}
