//! A private pair of QPs that a worker with `worker.warm_us` runs a 64 B Send through while
//! its application is quiet, so that the code of a request's path outside TCP and the PMD
//! (the verbs posts and CQ polls, the QP's shared state, the engine's DDP/RDMAP segmentation,
//! MPA framing and CRC32c, deframing and placement, completions; RFC 5040 §5.3, RFC 5041
//! §5, RFC 5044 §4) is still in this core's caches when the next request comes.
//!
//! The keep-alives of `Worker::warm` run smoltcp and the PMD on both ends, but no FPDU: the
//! engine sees nothing of them. A core that shares its caches with work we do not see loses
//! what it has not touched for some tens of microseconds (docs/testing.md "Paced pings",
//! `benches/idle_state`), and the framing of a Send after such a gap takes several times as
//! long as back to back. The pair
//! here is two [`Qp`]s of the application's kind (with a doorbell, so that posts go straight
//! into their connections, as a driven application's do), whose [`Connection`]s are wired
//! back to back through a buffer: a Send goes from one to the other by the calls the
//! application and the worker make (`Qp::post_send`,
//! `Qp::post_recv`, `drain_posts`, `transmit_into` over a [`SliceBuf`], `on_bytes`,
//! `pump::events`, `Cq::poll_one`). Nothing reaches a socket, a real QP or the wire; its
//! memory is a device of its own.

use std::sync::Arc;
use std::time::Instant;

use crate::cm::pump;
use crate::conn::{ConnConfig, ConnEvent, Connection};
use crate::rdma::{smallvec, Access, Opcode, RecvWr, SendWr, WcStatus};
use crate::verbs::{sge, Cq, Device, Mr, Qp, QpInitAttr, QpSlot};
use crate::wire::txbuf::SliceBuf;

/// The Send's size: a request's, as a ping or an RPC call.
const SIZE: usize = 64;

/// The pair, established: two QPs of the application's kind, each with its CQ, their
/// connections installed as the connection manager installs them.
pub(crate) struct Rehearsal {
    qa: Qp,
    qb: Qp,
    ca: Cq,
    cb: Cq,
    src: Mr,
    dst: Mr,
    wire: Vec<u8>,
    ends: Vec<usize>,
    now: Instant,
}

impl Rehearsal {
    /// Two engines through their MPA startup (RFC 5044 §7, RFC 6581 as configured by
    /// default) at this worker's EMSS, each then made the live connection of a QP (with a
    /// doorbell that does nothing, so that posts go straight into the connection, as a driven
    /// application's do); None if they do not establish (they always do: the startup is
    /// between two copies of this code).
    pub(crate) fn new(emss: usize) -> Option<Rehearsal> {
        let now = Instant::now();
        let dev = Device::open();
        let pd = dev.alloc_pd();
        let (ca, cb) = (Cq::new(8), Cq::new(8));
        let (qa, qb) = (
            Qp::new(&pd, &QpInitAttr::new(&ca)),
            Qp::new(&pd, &QpInitAttr::new(&cb)),
        );
        let cfg = ConnConfig {
            pd: pd.id(),
            emss,
            sq_depth: 4,
            rq_depth: 4,
            ..ConnConfig::default()
        };
        let mut a = Connection::initiator(cfg.clone(), pd.memory().clone(), now);
        let mut b = Connection::responder(cfg, pd.memory().clone(), now);
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
        for (qp, conn) in [(&qa, a), (&qb, b)] {
            qp.drive_with(Arc::new(|| false));
            let mut conn = conn;
            let mut slot = qp.shared.lock();
            qp.shared.drain_posts(&mut conn);
            *slot = QpSlot::Live(Box::new(conn));
        }
        let src = pd.reg_mr(SIZE, Access::LOCAL_WRITE);
        let dst = pd.reg_mr(SIZE, Access::LOCAL_WRITE);
        wire.resize(4096, 0);
        Some(Rehearsal {
            qa,
            qb,
            ca,
            cb,
            src,
            dst,
            wire,
            ends: Vec::with_capacity(4),
            now,
        })
    }

    /// One Send from A to B: posted on the QPs, framed into the buffer, received and placed,
    /// the completions moved to the CQs and polled there. False if it did not complete (then
    /// the pair is not used again).
    pub(crate) fn run(&mut self) -> bool {
        let posted = self
            .qb
            .post_recv(RecvWr {
                wr_id: 2,
                sg_list: smallvec![sge(&self.dst, 0, SIZE)],
            })
            .is_ok()
            && self
                .qa
                .post_send(SendWr {
                    wr_id: 1,
                    opcode: Opcode::Send,
                    sg_list: smallvec![sge(&self.src, 0, SIZE)],
                    signaled: true,
                })
                .is_ok();
        if !posted {
            return false;
        }
        let n = {
            let sh = &self.qa.shared;
            let mut slot = sh.lock();
            let QpSlot::Live(a) = &mut *slot else {
                return false;
            };
            sh.drain_posts(a);
            self.ends.clear();
            let n = a.transmit_into(&mut SliceBuf::new(&mut self.wire), Some(&mut self.ends));
            pump::events(sh, a, |_| {});
            if a.should_close() {
                return false;
            }
            n
        };
        {
            let sh = &self.qb.shared;
            let mut slot = sh.lock();
            let QpSlot::Live(b) = &mut *slot else {
                return false;
            };
            sh.drain_posts(b);
            b.on_bytes(&self.wire[..n], self.now);
            pump::events(sh, b, |_| {});
            if b.should_close() {
                return false;
            }
        }
        let ok = |cq: &Cq| {
            cq.poll_one()
                .is_some_and(|wc| wc.status == WcStatus::Success)
        };
        ok(&self.ca) & ok(&self.cb)
    }
}

impl Drop for Rehearsal {
    /// Nobody drives these connections: marked closed, the QPs' handles do not wait for a
    /// close on their way out (`QpHandle`'s drop).
    fn drop(&mut self) {
        self.qa.shared.set_closed();
        self.qb.shared.set_closed();
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
