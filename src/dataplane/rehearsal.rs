//! A private pair of engines that a worker with `worker.warm_us` runs a 64 B Send through
//! while its application is quiet, so that the engine's code (posting, DDP/RDMAP segmentation,
//! MPA framing and CRC32c, deframing and placement, completions; RFC 5040 §5.3, RFC 5041
//! §5, RFC 5044 §4) is still in this core's caches when the next request comes.
//!
//! The keep-alives of `Worker::warm` run smoltcp and the PMD on both ends, but no FPDU: the
//! engine sees nothing of them. On the hosts measured a core loses what it has not touched
//! for 20-50 us (docs/dataplane.md "Keeping the path warm", `benches/idle_state`), and
//! after 100 us the framing of a 64 B Send took four times as long as back to back. The pair
//! here is two [`Connection`]s of the same type the worker's connections are, wired back to
//! back through a buffer: a Send goes from one to the other by the entry points the worker
//! and its sockets' receive sinks call (`post_send`, `post_recv`, `transmit_into` over a
//! [`SliceBuf`], `on_bytes`, `poll_completion`). Nothing reaches a socket, a real QP or the
//! wire; its memory is a table of its own.

use std::time::Instant;

use crate::conn::{ConnConfig, ConnEvent, Connection};
use crate::rdma::smallvec;
use crate::rdma::{Access, MemoryTable, Mr, Opcode, RecvWr, SendWr, Sge};
use crate::wire::txbuf::SliceBuf;

/// The Send's size: a request's, as a ping or an RPC call.
const SIZE: usize = 64;

/// The pair, established.
pub(crate) struct Rehearsal {
    a: Connection,
    b: Connection,
    src: Mr,
    dst: Mr,
    wire: Vec<u8>,
    ends: Vec<usize>,
    now: Instant,
}

impl Rehearsal {
    /// Two engines through their MPA startup (RFC 5044 §7, RFC 6581 as configured by
    /// default) at this worker's EMSS; None if they do not establish (they always do: the
    /// startup is between two copies of this code).
    pub(crate) fn new(emss: usize) -> Option<Rehearsal> {
        let now = Instant::now();
        let (ma, mb) = (MemoryTable::new(), MemoryTable::new());
        let cfg = |pd| ConnConfig {
            pd,
            emss,
            sq_depth: 4,
            rq_depth: 4,
            ..ConnConfig::default()
        };
        let mut a = Connection::initiator(cfg(ma.alloc_pd()), ma.clone(), now);
        let mut b = Connection::responder(cfg(mb.alloc_pd()), mb.clone(), now);
        let mut wire = Vec::with_capacity(4096);
        for _ in 0..8 {
            wire.clear();
            a.poll_transmit(&mut wire);
            b.on_bytes(&wire, now);
            while let Some(ev) = b.poll_event() {
                if matches!(ev, ConnEvent::Request(_)) {
                    b.accept(None);
                }
            }
            wire.clear();
            b.poll_transmit(&mut wire);
            a.on_bytes(&wire, now);
            while a.poll_event().is_some() {}
            if a.is_established() && b.is_established() {
                break;
            }
        }
        if !(a.is_established() && b.is_established()) {
            return None;
        }
        let src = ma.register(a.config().pd, SIZE, Access::LOCAL_WRITE);
        let dst = mb.register(b.config().pd, SIZE, Access::LOCAL_WRITE);
        wire.resize(4096, 0);
        Some(Rehearsal {
            a,
            b,
            src,
            dst,
            wire,
            ends: Vec::with_capacity(4),
            now,
        })
    }

    /// One Send from A to B: posted, framed into the buffer, received and placed, both
    /// completions reaped. False if it did not complete (then the pair is not used again).
    pub(crate) fn run(&mut self) -> bool {
        let posted = self
            .b
            .post_recv(RecvWr {
                wr_id: 2,
                sg_list: smallvec![Sge {
                    addr: self.dst.addr(),
                    length: SIZE as u32,
                    lkey: self.dst.stag(),
                }],
            })
            .is_ok()
            && self
                .a
                .post_send(SendWr {
                    wr_id: 1,
                    opcode: Opcode::Send,
                    sg_list: smallvec![Sge {
                        addr: self.src.addr(),
                        length: SIZE as u32,
                        lkey: self.src.stag(),
                    }],
                    signaled: true,
                })
                .is_ok();
        if !posted {
            return false;
        }
        self.ends.clear();
        let mut out = SliceBuf::new(&mut self.wire);
        let n = self.a.transmit_into(&mut out, Some(&mut self.ends));
        self.b.on_bytes(&self.wire[..n], self.now);
        let sent = self.a.poll_completion().is_some();
        let received = self.b.poll_completion().is_some();
        sent && received && !self.a.should_close() && !self.b.should_close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_goes_through_the_pair_again_and_again() {
        let mut r = Rehearsal::new(1460).expect("established");
        for i in 0..1000u32 {
            r.src.write_at(0, &i.to_le_bytes());
            assert!(r.run(), "run {i}");
            let mut b = [0u8; 4];
            r.dst.read_at(0, &mut b);
            assert_eq!(u32::from_le_bytes(b), i, "placed");
        }
    }
}
