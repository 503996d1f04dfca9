//! CRC32c (RFC 5044 §4.4) implementations compared on this CPU, with memcpy as the yardstick.
//!
//! `crc-fast` folds with (V)PCLMULQDQ; `crc32c` uses the SSE4.2 `crc32` instruction (three-way
//! interleaved). `crate::crc` uses whichever wins here; see docs/crc.md for the table.
//!
//! Run: `cargo bench --bench crc -- --warm-up-time 1 --measurement-time 2`

use crc_fast::{CrcAlgorithm, Digest};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SIZES: [usize; 11] = [64, 128, 160, 200, 256, 300, 512, 1448, 4096, 8948, 65536];

fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for &n in &SIZES {
        let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31)).collect();
        let mut dst = vec![0u8; n];
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("crc-fast", n), &data, |b, d| {
            b.iter(|| crc_fast::crc32_iscsi(black_box(d)))
        });
        // The append form `crate::crc::crc32c_append` needs (a Digest seeded with a running CRC).
        g.bench_with_input(BenchmarkId::new("crc-fast-append", n), &data, |b, d| {
            b.iter(|| {
                let mut dg = Digest::new_with_init_state(
                    CrcAlgorithm::Crc32Iscsi,
                    u64::from(black_box(0u32) ^ 0xffff_ffff),
                );
                dg.update(black_box(d));
                dg.finalize() as u32
            })
        });
        // The same CRC as custom parameters: crc-fast's generic (V)PCLMULQDQ folding, without
        // the fusion with the SSE4.2 `crc32` instruction its CRC-32/ISCSI path takes.
        let params = crc_fast::CrcParams::new(
            "CRC-32C",
            32,
            0x1edc6f41,
            0xffff_ffff,
            true,
            0xffff_ffff,
            0xe306_9283,
        );
        g.bench_with_input(BenchmarkId::new("crc-fast-clmul", n), &data, |b, d| {
            b.iter(|| crc_fast::checksum_with_params(params, black_box(d)) as u32)
        });
        g.bench_with_input(BenchmarkId::new("crc32c", n), &data, |b, d| {
            b.iter(|| crc32c::crc32c(black_box(d)))
        });
        g.bench_with_input(BenchmarkId::new("dpwarp::crc", n), &data, |b, d| {
            b.iter(|| dpwarp::crc::crc32c(black_box(d)))
        });
        g.bench_with_input(BenchmarkId::new("memcpy", n), &data, |b, d| {
            b.iter(|| {
                dst.copy_from_slice(black_box(d));
                black_box(&mut dst);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, crc);
criterion_main!(benches);
