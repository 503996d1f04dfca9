//! Chunk lists: arbitrary bytes after a valid RDMA_MSG fixed header go through the chunk-list
//! parser; the read list is grouped into chunks (positions must not decrease), and a call
//! decoder walks bulk items against the chunks. Nothing panics.
#![no_main]
use dpwarp::rpc::program::{ArgReader, ChunkData, PulledChunk};
use dpwarp::wire::rpcrdma::HeaderRepr;
use dpwarp::wire::xdr::XdrReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut msg = vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0];
    msg.extend_from_slice(data);
    if let Ok((h, n)) = HeaderRepr::parse(&msg) {
        let Some(c) = h.body.chunks() else { return };
        if let Ok(rc) = c.read_chunks() {
            let mut last = 0;
            for ch in &rc {
                assert!(ch.position >= last);
                last = ch.position;
                let _ = ch.len();
            }
            // Pretend each chunk was pulled (bounded fake data) or placed in memory of a
            // procedure's choosing (odd positions), and decode bulk items.
            let pulled: Vec<PulledChunk> = rc
                .iter()
                .map(|ch| PulledChunk {
                    position: ch.position,
                    data: if ch.position % 2 == 1 {
                        ChunkData::Placed((ch.len() as usize).min(4096))
                    } else {
                        ChunkData::Bytes(vec![0u8; (ch.len() as usize).min(4096)])
                    },
                })
                .collect();
            let body = &msg[n..];
            let mut a = ArgReader::new(XdrReader::new(body), &pulled);
            for _ in 0..8 {
                if a.get_bulk(1 << 16).is_err() {
                    break;
                }
            }
            let _ = a.finish();
        }
    }
});
