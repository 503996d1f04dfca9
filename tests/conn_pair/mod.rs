//! Two sans-IO `Connection`s wired back to back by the test, in Full MPA operation (the
//! engine tests that move bytes between them by hand).
#![allow(dead_code)]

use std::time::Instant;

use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{MemoryTable, Mr, PdId, Sge};

pub struct Pair {
    pub a: Connection,
    pub b: Connection,
    pub mem_a: MemoryTable,
    pub mem_b: MemoryTable,
    pub pd_a: PdId,
    pub pd_b: PdId,
    /// Every byte A has sent, in order (for corruption tests).
    pub a_sent: Vec<u8>,
}

pub fn cfg(pd: PdId, mpa: MpaConfig) -> ConnConfig {
    ConnConfig {
        mpa,
        pd,
        ..ConnConfig::default()
    }
}

pub fn events(c: &mut Connection) -> Vec<ConnEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

impl Pair {
    pub fn new(mpa: MpaConfig) -> Pair {
        let now = Instant::now();
        let mem_a = MemoryTable::new();
        let mem_b = MemoryTable::new();
        let pd_a = mem_a.alloc_pd();
        let pd_b = mem_b.alloc_pd();
        let a = Connection::initiator(cfg(pd_a, mpa.clone()), mem_a.clone(), now);
        let b = Connection::responder(cfg(pd_b, mpa), mem_b.clone(), now);
        let mut p = Pair {
            a,
            b,
            mem_a,
            mem_b,
            pd_a,
            pd_b,
            a_sent: Vec::new(),
        };
        p.pump();
        let ev = events(&mut p.b);
        assert!(matches!(ev.first(), Some(ConnEvent::Request(_))), "{ev:?}");
        p.b.accept(None);
        p.pump();
        assert!(events(&mut p.a)
            .iter()
            .any(|e| matches!(e, ConnEvent::Established(_))));
        assert!(events(&mut p.b)
            .iter()
            .any(|e| matches!(e, ConnEvent::Established(_))));
        p
    }

    /// Move bytes both ways until neither side has anything to say.
    pub fn pump(&mut self) {
        let now = Instant::now();
        for _ in 0..10_000 {
            let mut ab = Vec::new();
            self.a.poll_transmit(&mut ab);
            let mut ba = Vec::new();
            self.b.poll_transmit(&mut ba);
            if ab.is_empty() && ba.is_empty() {
                return;
            }
            self.a_sent.extend_from_slice(&ab);
            self.b.on_bytes(&ab, now);
            self.a.on_bytes(&ba, now);
        }
        panic!("pump did not settle");
    }

    /// Take what A wants to send without delivering it.
    pub fn take_a(&mut self) -> Vec<u8> {
        let mut ab = Vec::new();
        self.a.poll_transmit(&mut ab);
        ab
    }
}

pub fn sge(mr: &Mr, off: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.stag(),
    }
}
