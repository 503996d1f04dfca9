//! A whole responder connection (MPA startup, then FPDUs into the QP engine) fed a valid MPA
//! Request followed by arbitrary bytes with CRC off, so the fuzzer reaches DDP/RDMAP.
#![no_main]
use std::time::Instant;

use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{Access, MemoryTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let _mr = mem.register(pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let cfg = ConnConfig {
        mpa: MpaConfig {
            crc: false,
            ..MpaConfig::default()
        },
        pd,
        ..ConnConfig::default()
    };
    let mut c = Connection::responder(cfg, mem, now);
    // An enhanced rev 2 request, no CRC, IRD=ORD=1.
    let mut req = b"MPA ID Req Frame".to_vec();
    req.extend_from_slice(&[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
    c.on_bytes(&req, now);
    while let Some(ev) = c.poll_event() {
        if let ConnEvent::Request(_) = ev {
            c.accept(None);
        }
    }
    let mut out = Vec::new();
    c.poll_transmit(&mut out);
    for chunk in data.chunks(97) {
        c.on_bytes(chunk, now);
        out.clear();
        c.poll_transmit(&mut out);
        while c.poll_event().is_some() {}
        while c.poll_completion().is_some() {}
    }
});
