//! The DDP/RDMAP queue-pair engine fed arbitrary ULPDUs (as a peer could send after a valid CRC):
//! never panics, and only registered, remotely writable memory can change. The first input byte
//! picks IRD and ORD (0-3 each: 0 is a hard limit) and whether the engine speaks the RDMAC
//! version 0 (RFC 5044 App. C).
#![no_main]
use dpwarp::rdma::{Access, MemoryTable, QpConfig, QpEngine, RecvWr, Sge};
use dpwarp::verbs::smallvec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let ro = mem.register(pd, 256, Access::LOCAL_WRITE | Access::REMOTE_READ);
    ro.write_at(0, &[0xEE; 256]);
    let rw = mem.register(pd, 256, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let mut qp = QpEngine::new(
        QpConfig {
            mulpdu: 1024,
            pd,
            ird: u32::from((mode >> 1) & 3),
            ord: u32::from((mode >> 3) & 3),
            sq_depth: 8,
            rq_depth: 8,
            rtr: None,
        },
        mem.clone(),
    );
    if mode & 1 != 0 {
        qp.use_rdmac_version();
    }
    let rbuf = mem.register(pd, 128, Access::LOCAL_WRITE);
    let _ = qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![Sge {
            addr: rbuf.addr(),
            length: 128,
            lkey: rbuf.stag(),
        }],
    });
    let _ = rw;
    // Split the input into ULPDUs by a length byte.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        qp.on_ulpdu(&tail[..n]);
        rest = &tail[n..];
        let mut out = Vec::new();
        while qp.poll_ulpdu(&mut out) {
            assert!(out.len() <= 1024 * 64);
            out.clear();
        }
        while qp.poll_completion().is_some() {}
        while qp.poll_event().is_some() {}
    }
    assert!(ro.to_vec().iter().all(|&b| b == 0xEE));
});
