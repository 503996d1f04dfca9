//! The sans-IO engine alone (no transport, no threads): two [`Connection`]s back to back in one
//! thread, moving RDMA Writes from A's memory into B's: post, A's `poll_transmit` (DDP/RDMAP
//! segmentation, MPA framing, CRC32c), B's `on_bytes` (deframing, CRC check, placement),
//! completion. Bytes per second of Write payload, CRC on, MULPDU for a 1500-octet MTU. This is
//! the CPU cost of the protocol stack per byte, apart from TCP and the NIC.
//!
//! Run: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`

use dpwarp::verbs::{sge, smallvec};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{Access, MemoryTable, Mr, Opcode, RecvWr, SendWr};

fn pair(markers: bool) -> (Connection, Connection, MemoryTable, MemoryTable) {
    let now = Instant::now();
    let (ma, mb) = (MemoryTable::new(), MemoryTable::new());
    let mpa = MpaConfig {
        markers,
        ..MpaConfig::default()
    };
    let cfg = |pd| ConnConfig {
        mpa: mpa.clone(),
        pd,
        emss: 1460,
        ..ConnConfig::default()
    };
    let mut a = Connection::initiator(cfg(ma.alloc_pd()), ma.clone(), now);
    let mut b = Connection::responder(cfg(mb.alloc_pd()), mb.clone(), now);
    let pump = |a: &mut Connection, b: &mut Connection| {
        for _ in 0..100 {
            let (mut ab, mut ba) = (Vec::new(), Vec::new());
            a.poll_transmit(&mut ab);
            b.poll_transmit(&mut ba);
            if ab.is_empty() && ba.is_empty() {
                break;
            }
            b.on_bytes(&ab, now);
            a.on_bytes(&ba, now);
        }
    };
    pump(&mut a, &mut b);
    while let Some(ev) = b.poll_event() {
        if matches!(ev, ConnEvent::Request(_)) {
            b.accept(None);
        }
    }
    pump(&mut a, &mut b);
    assert!(a.is_established() && b.is_established());
    (a, b, ma, mb)
}

/// One RDMA Write of `n` octets from A's `src` into B's `dst`: A frames it, B deframes and
/// places it, A reaps the completion.
fn write_once(
    a: &mut Connection,
    b: &mut Connection,
    src: &Mr,
    dst: &Mr,
    n: usize,
    wire: &mut Vec<u8>,
    now: Instant,
) {
    a.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: dst.addr(),
            rkey: dst.stag(),
        },
        sg_list: smallvec![sge(src, 0, n)],
        signaled: true,
    })
    .unwrap();
    loop {
        wire.clear();
        a.poll_transmit(wire);
        if wire.is_empty() {
            break;
        }
        b.on_bytes(wire, now);
    }
    assert!(a.poll_completion().is_some());
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_write");
    for markers in [false, true] {
        for n in [4096usize, 65536, 1 << 20] {
            let (mut a, mut b, ma, mb) = pair(markers);
            let src = ma.register(a.config().pd, n, Access::LOCAL_WRITE);
            src.write_at(0, &vec![0x5a; n]);
            let dst = mb.register(
                b.config().pd,
                n,
                Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0),
            );
            let mut wire = Vec::with_capacity(2 * n);
            let now = Instant::now();
            g.throughput(Throughput::Bytes(n as u64));
            let name = if markers { "markers" } else { "plain" };
            g.bench_function(BenchmarkId::new(name, n), |bch| {
                bch.iter(|| write_once(&mut a, &mut b, &src, &dst, n, &mut wire, now))
            });
            assert!(!a.should_close() && !b.should_close());
        }
    }
    g.finish();

    // A storage target's memory: 1 MiB Writes from 32 sources into 32 sinks taken in turn
    // (64 MiB in all, beyond the caches), as a server READing a store's blocks into its
    // clients' write chunks does; `engine_write` moves one hot buffer.
    let mut g = c.benchmark_group("engine_write_spread");
    {
        let n = 1usize << 20;
        let (mut a, mut b, ma, mb) = pair(false);
        let srcs: Vec<_> = (0..32)
            .map(|i| {
                let m = ma.register(a.config().pd, n, Access::LOCAL_WRITE);
                m.write_at(0, &vec![i as u8; n]);
                m
            })
            .collect();
        let dsts: Vec<_> = (0..32)
            .map(|_| {
                let m = mb.register(
                    b.config().pd,
                    n,
                    Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0),
                );
                m.write_at(0, &vec![1; n]);
                m
            })
            .collect();
        let mut wire = Vec::with_capacity(2 * n);
        let now = Instant::now();
        let mut k = 0usize;
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_function(BenchmarkId::new("plain", n), |bch| {
            bch.iter(|| {
                let (src, dst) = (&srcs[k % srcs.len()], &dsts[(k * 7) % dsts.len()]);
                k += 1;
                write_once(&mut a, &mut b, src, dst, n, &mut wire, now)
            })
        });
        assert!(!a.should_close() && !b.should_close());
    }
    g.finish();

    // The same bytes the other way round: A RDMA-Reads B's memory (RFC 5040 §4.4): A's Read
    // Request, B's Read Responses (segmented, framed, CRC), A's placement and completion. Beside
    // `engine_write` it shows what a Read costs per byte over a Write (an RPC WRITE is pulled
    // this way, draft-ietf-nfsv4-rpcrdma §3.1).
    let mut g = c.benchmark_group("engine_read");
    for n in [65536usize, 1 << 20] {
        let (mut a, mut b, ma, mb) = pair(false);
        let dst = ma.register(a.config().pd, n, Access::LOCAL_WRITE);
        let src = mb.register(
            b.config().pd,
            n,
            Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0),
        );
        src.write_at(0, &vec![0x5a; n]);
        let (mut ab, mut ba) = (Vec::with_capacity(4096), Vec::with_capacity(2 * n));
        let now = Instant::now();
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_function(BenchmarkId::new("plain", n), |bch| {
            bch.iter(|| {
                a.post_send(SendWr {
                    wr_id: 1,
                    opcode: Opcode::Read {
                        remote_addr: src.addr(),
                        rkey: src.stag(),
                    },
                    sg_list: smallvec![sge(&dst, 0, n)],
                    signaled: true,
                })
                .unwrap();
                loop {
                    ab.clear();
                    a.poll_transmit(&mut ab);
                    b.on_bytes(&ab, now);
                    ba.clear();
                    b.poll_transmit(&mut ba);
                    if ab.is_empty() && ba.is_empty() {
                        break;
                    }
                    a.on_bytes(&ba, now);
                }
                assert!(a.poll_completion().is_some());
            })
        });
        assert!(!a.should_close() && !b.should_close());
    }
    g.finish();

    // The per-message cost: one 64 B Send from A to B, B's receive posted, both completions
    // reaped (what a latency ping-pong or an RPC call costs in the engines, apart from TCP).
    let mut g = c.benchmark_group("engine_send");
    let (mut a, mut b, ma, mb) = pair(false);
    let n = 64usize;
    let src = ma.register(a.config().pd, n, Access::LOCAL_WRITE);
    let dst = mb.register(b.config().pd, n, Access::LOCAL_WRITE);
    let mut wire = Vec::with_capacity(4096);
    let now = Instant::now();
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("plain", n), |bch| {
        bch.iter(|| {
            b.post_recv(RecvWr {
                wr_id: 2,
                sg_list: smallvec![sge(&dst, 0, n)],
            })
            .unwrap();
            a.post_send(SendWr {
                wr_id: 1,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&src, 0, n)],
                signaled: true,
            })
            .unwrap();
            wire.clear();
            a.poll_transmit(&mut wire);
            b.on_bytes(&wire, now);
            assert!(b.poll_completion().is_some());
            assert!(a.poll_completion().is_some());
        })
    });
    assert!(!a.should_close() && !b.should_close());
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
