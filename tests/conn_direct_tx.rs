//! Direct framing (`Connection::transmit_into` over a `SliceBuf`, as the DPDK worker frames
//! FPDUs straight into the TCP transmit ring): whatever room the ring offers — tiny, odd, a
//! full segment — every FPDU fits it, the peer decodes the stream (CRC on), and Send, RDMA
//! Write and RDMA Read all complete with their bytes intact.

use dpwarp::verbs::smallvec;
use std::time::Instant;

use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{Access, MemoryTable, Mr, Opcode, RecvWr, SendWr, Sge, WcStatus};
use dpwarp::wire::txbuf::SliceBuf;

fn sge(mr: &Mr, off: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.stag(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// xorshift: rooms vary deterministically.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn transmit_into_any_room_carries_send_write_read_intact() {
    let now = Instant::now();
    let (mem_a, mem_b) = (MemoryTable::new(), MemoryTable::new());
    let (pd_a, pd_b) = (mem_a.alloc_pd(), mem_b.alloc_pd());
    let mpa = MpaConfig::default();
    let cfg = |pd| ConnConfig {
        mpa: mpa.clone(),
        pd,
        emss: 1448,
        ..ConnConfig::default()
    };
    let mut a = Connection::initiator(cfg(pd_a), mem_a.clone(), now);
    let mut b = Connection::responder(cfg(pd_b), mem_b.clone(), now);
    // Startup through the staging path (transmit_into refuses before Full MPA operation).
    let mut scratch = [0u8; 4096];
    assert_eq!(a.transmit_into(&mut SliceBuf::new(&mut scratch), None), 0);
    assert!(!a.can_transmit_direct());
    for _ in 0..10 {
        let mut ab = Vec::new();
        a.poll_transmit(&mut ab);
        b.on_bytes(&ab, now);
        while let Some(ev) = b.poll_event() {
            if matches!(ev, ConnEvent::Request(_)) {
                b.accept(None);
            }
        }
        let mut ba = Vec::new();
        b.poll_transmit(&mut ba);
        a.on_bytes(&ba, now);
    }
    assert!(a.is_established() && b.is_established());
    assert!(a.can_transmit_direct());

    const SEND: usize = 50_000;
    const WRITE: usize = 300_000;
    const READ: usize = 120_000;
    let src = mem_a.register(pd_a, WRITE, Access::LOCAL_WRITE | Access::REMOTE_READ);
    src.write_at(0, &pattern(WRITE, 1));
    let rsink = mem_a.register(pd_a, READ, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rbuf = mem_b.register(pd_b, SEND, Access::LOCAL_WRITE);
    let wsink = mem_b.register(pd_b, WRITE, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rsrc = mem_b.register(pd_b, READ, Access::LOCAL_WRITE | Access::REMOTE_READ);
    rsrc.write_at(0, &pattern(READ, 9));
    b.post_recv(RecvWr {
        wr_id: 10,
        sg_list: smallvec![sge(&rbuf, 0, SEND)],
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, SEND)],
        signaled: true,
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Write {
            remote_addr: wsink.addr(),
            rkey: wsink.stag(),
        },
        sg_list: smallvec![sge(&src, 0, WRITE)],
        signaled: true,
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Read {
            remote_addr: rsrc.addr(),
            rkey: rsrc.stag(),
        },
        sg_list: smallvec![sge(&rsink, 0, READ)],
        signaled: true,
    })
    .unwrap();

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut ring = vec![0u8; 16 * 1024];
    let mut done_a = Vec::new();
    let mut done_b = Vec::new();
    let mut smallest_used = usize::MAX;
    for _ in 0..100_000 {
        // Rooms from 0 to 3000 octets, the small ones often.
        let room = match rng.next() % 4 {
            0 => (rng.next() % 200) as usize,
            1 => 1448,
            _ => (rng.next() % 3000) as usize,
        };
        let mut out = SliceBuf::new(&mut ring[..room]);
        let mut ends = Vec::new();
        let n = a.transmit_into(&mut out, Some(&mut ends));
        // The pass gathered under one lock per region and let it go on return: an
        // application driving the engine on this thread may write the source now.
        assert!(src.try_bytes_mut().is_some(), "transmit_into kept a lock");
        assert!(n <= room);
        assert!(!out.overflowed());
        if n > 0 {
            smallest_used = smallest_used.min(room);
            assert_eq!(ends.last().copied(), Some(n), "whole FPDUs only");
        }
        b.on_bytes(&ring[..n], now);
        let mut ba = Vec::new();
        b.poll_transmit(&mut ba);
        assert!(rsrc.try_bytes_mut().is_some(), "poll_transmit kept a lock");
        a.on_bytes(&ba, now);
        done_a.extend(std::iter::from_fn(|| a.poll_completion()));
        done_b.extend(std::iter::from_fn(|| b.poll_completion()));
        if done_a.len() == 3 && done_b.len() == 1 {
            break;
        }
    }
    assert!(
        smallest_used >= 136,
        "an FPDU framed into {smallest_used} octets"
    );
    assert_eq!(done_b.len(), 1, "{done_b:?}");
    assert_eq!(done_a.len(), 3, "{done_a:?}");
    assert!(done_a
        .iter()
        .chain(&done_b)
        .all(|c| c.status == WcStatus::Success));
    let mut got = vec![0u8; WRITE];
    wsink.read_at(0, &mut got);
    assert!(got == pattern(WRITE, 1), "RDMA Write data differs");
    let mut got = vec![0u8; SEND];
    rbuf.read_at(0, &mut got);
    assert!(got == pattern(SEND, 1), "Send data differs");
    let mut got = vec![0u8; READ];
    rsink.read_at(0, &mut got);
    assert!(got == pattern(READ, 9), "RDMA Read data differs");
    assert!(a
        .poll_event()
        .is_none_or(|e| !matches!(e, ConnEvent::TerminateReceived(_))));
}
