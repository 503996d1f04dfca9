//! One side of an RPC-over-RDMA connection on the verbs API: receive buffers, send buffers,
//! staging regions for chunk data, and RDMA Read/Write of chunk segments. Shared by the server
//! and the client.
//!
//! Buffers are registered once and reused: a send buffer or a staging region is handed back
//! only when the completion of the Send that used it (or that follows the RDMA Writes that
//! used it — send-queue completions are in order) arrives, because the engine gathers the bytes
//! when it transmits, not when the work request is posted.
//!
//! Messages of at most [`MAX_INLINE_DATA`] octets that hold nothing else go inline
//! (`Qp::post_send_inline`, `IBV_SEND_INLINE`): no send buffer at all.
//!
//! Sends are signaled selectively (verbs' selective signaling): one in [`SIGNAL_EVERY`], each
//! that holds resources besides its buffer, and each that takes the last free buffer. A
//! completion tells that every earlier work request of the send queue completed too (they
//! complete in order; an unsignaled one that fails still completes, in error), so it hands
//! back the buffers of the unsignaled Sends before it: a completion to make, queue and reap
//! per 16 Sends instead of one per Send.

use crate::verbs::smallvec;
use std::collections::VecDeque;
use std::time::Duration;

use super::program::ResultBufs;
use super::RpcError;
use crate::verbs::{
    sge, Access, Cq, CqDriver, Mr, Opcode, Pd, Qp, QpCap, QpInitAttr, RecvWr, SendWr, SharedMem,
    WcStatus, WorkCompletion, MAX_INLINE_DATA,
};
use crate::wire::rpcrdma::{Segment, Segments};

/// What a send-queue work request holds until it completes.
pub(crate) enum Res {
    /// A staging region (RDMA Write source) returned to the cache.
    Stage(Mr),
    /// A region made of a handler's result bytes (RDMA Write source), deregistered.
    Adopted(Mr),
    /// A registration of shared memory kept for the connection ([`RpcQp::shared`]): only
    /// the handle is dropped.
    Kept(Mr),
    /// One of the connection's result buffers ([`ResultBufs`]), given back.
    Lent(usize),
}

/// Send buffers kept at most.
const MAX_SEND_BUFS: usize = 256;
/// One Send in this many is signaled (module docs).
const SIGNAL_EVERY: usize = 16;
/// Staging regions kept for reuse.
const MAX_STAGE_CACHE: usize = 16;
/// Registrations of shared memory (a block store) kept per connection.
const MAX_SHARED: usize = 8;
/// Send and receive WRs an RPC QP's connection holds each way (`QpCap`); as many more may
/// wait in its post rings.
const MAX_WR: usize = 1024;
/// The one CQ of [`RpcQp::create_shared`]: room for a completion of every WR that can be
/// outstanding (held by the connection or waiting in a post ring, both ways), so it never
/// overruns even when every WR completes at once (a flush). Its slots are allocated up front,
/// so it is most of what an idle connection's QP costs in memory (32 octets a slot).
const SHARED_CQ_DEPTH: usize = 4 * MAX_WR;

/// One side of an RPC-over-RDMA connection: its QP, CQs and registered buffers (named apart
/// from `dataplane::Endpoint`, a DPDK port's address).
pub(crate) struct RpcQp {
    pub qp: Qp,
    pub pd: Pd,
    pub scq: Cq,
    pub rcq: Cq,
    recv_bufs: Vec<Mr>,
    pub recv_size: usize,
    pub send_size: usize,
    send_free: Vec<Mr>,
    send_count: usize,
    stage_free: Vec<Mr>,
    /// Shared memory registered in this PD ([`RpcQp::shared`]), deregistered on drop.
    shared: Vec<(SharedMem, Mr)>,
    /// Buffers lent to handlers for small bulk results, RDMA Write sources.
    pub result_bufs: ResultBufs,
    next_wr: u64,
    /// Per Send not known complete, in posting order: its `wr_id`, its send buffer and the
    /// regions it holds (the common Send holds nothing else and allocates no vector).
    pending: VecDeque<(u64, Mr, Vec<Res>)>,
    /// Sends posted unsignaled since the last signaled one.
    unsignaled: usize,
    pub timeout: Duration,
    /// Busy-poll the receive CQ this long before sleeping on it.
    pub spin: Duration,
    /// One CQ for both queues (`scq` and `rcq` are the same queue): the owner polls it and
    /// dispatches by opcode, so nothing here may wait on it (see [`RpcQp::create_shared`]).
    one_cq: bool,
}

impl RpcQp {
    /// A QP in `pd` with its own send and receive CQs (4096 deep, 1024 WRs each way), wrapped.
    /// With `driver`, both CQs run it when polled empty (a driven dataplane worker).
    pub fn create(pd: Pd, recv_size: usize, send_size: usize, driver: Option<CqDriver>) -> Self {
        let scq = Cq::new(4096);
        let rcq = Cq::new(4096);
        if let Some(d) = driver {
            scq.drive_with(d.clone());
            rcq.drive_with(d);
        }
        Self::with_cqs(pd, scq, rcq, recv_size, send_size)
    }

    /// A QP in `pd` whose send and receive completions share one CQ ([`SHARED_CQ_DEPTH`]): for an owner
    /// that never blocks (the server's connection state machine), which polls that one queue
    /// and dispatches by opcode, so a Read completion is seen as soon as a Recv is.
    pub fn create_shared(pd: Pd, recv_size: usize, send_size: usize) -> Self {
        let cq = Cq::new(SHARED_CQ_DEPTH);
        let mut ep = Self::with_cqs(pd, cq.clone(), cq, recv_size, send_size);
        ep.one_cq = true;
        ep
    }

    fn with_cqs(pd: Pd, scq: Cq, rcq: Cq, recv_size: usize, send_size: usize) -> Self {
        let attr = QpInitAttr {
            send_cq: scq.clone(),
            recv_cq: rcq.clone(),
            cap: QpCap {
                max_send_wr: MAX_WR,
                max_recv_wr: MAX_WR,
            },
        };
        let qp = Qp::new(&pd, &attr);
        Self::new(qp, pd, scq, rcq, recv_size, send_size)
    }

    pub fn new(qp: Qp, pd: Pd, scq: Cq, rcq: Cq, recv_size: usize, send_size: usize) -> Self {
        RpcQp {
            result_bufs: ResultBufs::new(pd.clone()),
            qp,
            pd,
            scq,
            rcq,
            recv_bufs: Vec::new(),
            recv_size,
            send_size,
            send_free: Vec::new(),
            send_count: 0,
            stage_free: Vec::new(),
            shared: Vec::new(),
            next_wr: 1,
            pending: VecDeque::new(),
            unsignaled: 0,
            timeout: Duration::from_secs(10),
            spin: Duration::ZERO,
            one_cq: false,
        }
    }

    /// The next receive completion: busy-poll up to `spin` (a wake-up costs more than a short
    /// spin when messages arrive back to back), then sleep on the CQ up to `timeout`.
    ///
    /// Where the CQ is filled by another thread (a kernel-TCP QP's driver, not pinned), the
    /// busy-poll yields the CPU between polls: that driver may be waiting for this very CPU,
    /// and a spin that kept it off would stretch each call to the spin's length (docs/rpc.md
    /// "Over kernel TCP: spins that yield"). A driven CQ's poll is the worker's pass.
    pub fn wait_recv(&self, timeout: Duration) -> Option<WorkCompletion> {
        if !self.spin.is_zero() {
            let driven = self.rcq.is_driven();
            let t = std::time::Instant::now();
            while t.elapsed() < self.spin {
                if let Some(wc) = self.rcq.poll_one() {
                    return Some(wc);
                }
                if driven {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        self.rcq.wait(timeout)
    }

    /// Register and post one more receive buffer.
    pub fn add_recv(&mut self) -> Result<(), RpcError> {
        let mr = self.pd.reg_mr(self.recv_size, Access::LOCAL_WRITE);
        let idx = self.recv_bufs.len() as u64;
        self.qp.post_recv(RecvWr {
            wr_id: idx,
            sg_list: smallvec![sge(&mr, 0, self.recv_size)],
        })?;
        self.recv_bufs.push(mr);
        Ok(())
    }

    /// Copy the message out of the buffer a receive completion names into `out`, a buffer the
    /// caller reuses (no allocation per message once it has grown to the receive size). False
    /// (and `out` empty) when the completion names no buffer of ours.
    pub fn take_recv_into(&self, wc: &WorkCompletion, out: &mut Vec<u8>) -> bool {
        out.clear();
        let Some(mr) = self.recv_bufs.get(wc.wr_id as usize) else {
            return false;
        };
        let n = (wc.byte_len as usize).min(mr.len());
        out.extend_from_slice(&mr.bytes()[..n]);
        true
    }

    /// Post the buffer of a receive completion again.
    pub fn repost(&self, wc: &WorkCompletion) -> Result<(), RpcError> {
        let Some(mr) = self.recv_bufs.get(wc.wr_id as usize) else {
            return Ok(());
        };
        self.qp.post_recv(RecvWr {
            wr_id: wc.wr_id,
            sg_list: smallvec![sge(mr, 0, self.recv_size)],
        })?;
        Ok(())
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    /// A staging region of at least `len` bytes (reused when one is free). Local access only:
    /// regions the peer may read are registered apart (see [`RpcQp::expose`]).
    pub fn stage(&mut self, len: usize) -> Mr {
        if let Some(i) = self.stage_free.iter().position(|m| m.len() >= len) {
            return self.stage_free.swap_remove(i);
        }
        self.pd.reg_mr(len.max(4096), Access::LOCAL_WRITE)
    }

    /// Give a staging region back.
    pub fn unstage(&mut self, mr: Mr) {
        if self.stage_free.len() < MAX_STAGE_CACHE {
            self.stage_free.push(mr);
        } else {
            self.pd.dereg_mr(&mr);
        }
    }

    /// Make `data` itself an RDMA Write source (no copy into a staging region).
    pub fn adopt(&self, data: Vec<u8>) -> Mr {
        self.pd.reg_mr_from(data, Access::LOCAL_WRITE)
    }

    /// `mem` registered in this connection's PD for local access (RDMA Write source, RDMA
    /// Read sink; the peer gets no rights to it), and what a work request using it holds until
    /// its Send completes. The first [`MAX_SHARED`] memories stay registered for the
    /// connection's life; others, and memory lent by a pool ([`SharedMem::is_lent`]), are
    /// registered for the one request and deregistered when it completes.
    pub fn shared(&mut self, mem: &SharedMem) -> (Mr, Res) {
        if mem.is_lent() {
            // A pool's buffer (`program::BulkPool`): registered for this request only, so that
            // it is free again once the request is done.
            let mr = self.pd.reg_mr_shared(mem, Access::LOCAL_WRITE);
            return (mr.clone(), Res::Adopted(mr));
        }
        if let Some((_, mr)) = self.shared.iter().find(|(m, _)| m.same(mem)) {
            return (mr.clone(), Res::Kept(mr.clone()));
        }
        let mr = self.pd.reg_mr_shared(mem, Access::LOCAL_WRITE);
        if self.shared.len() < MAX_SHARED {
            self.shared.push((mem.clone(), mr.clone()));
            (mr.clone(), Res::Kept(mr))
        } else {
            (mr.clone(), Res::Adopted(mr))
        }
    }

    /// Free what a request held once its Send completed (or failed to post).
    pub fn release(&mut self, r: Res) {
        match r {
            Res::Stage(m) => self.unstage(m),
            Res::Adopted(m) => {
                self.pd.dereg_mr(&m);
            }
            Res::Kept(m) => drop(m),
            Res::Lent(slot) => self.result_bufs.give_back(slot),
        }
    }

    /// Register `data` in a region the peer may RDMA Read (a chunk we advertise).
    pub fn expose(&self, data: &[u8]) -> Mr {
        let mr = self
            .pd
            .reg_mr(data.len().max(1), Access::LOCAL_WRITE | Access::REMOTE_READ);
        mr.write_at(0, data);
        mr
    }

    /// Make `data` itself a region the peer may RDMA Read (a read chunk we advertise), without
    /// copying it.
    pub fn expose_owned(&self, data: Vec<u8>) -> Mr {
        if data.is_empty() {
            return self.expose(&[]);
        }
        self.pd
            .reg_mr_from(data, Access::LOCAL_WRITE | Access::REMOTE_READ)
    }

    /// Make `len` bytes of `mem` from `offset` a region the peer may RDMA Read (a read chunk
    /// we advertise), in place: the STag reaches those bytes only.
    pub fn expose_window(&self, mem: &SharedMem, offset: usize, len: usize) -> Mr {
        self.pd
            .reg_mr_shared_range(mem, offset, len, Access::REMOTE_READ)
    }

    /// Register `len` bytes the peer may RDMA Write (a write or reply chunk we advertise).
    pub fn sink(&mut self, len: usize) -> Mr {
        self.pd
            .reg_mr(len.max(1), Access::LOCAL_WRITE | Access::REMOTE_WRITE)
    }

    /// Handle one send-queue completion: free what its request held.
    pub fn on_send_wc(&mut self, wc: &WorkCompletion) -> Result<(), RpcError> {
        // Send-queue completions come in posting order: this one, signaled or failed, says
        // every earlier work request is done too.
        while self.pending.front().is_some_and(|p| p.0 <= wc.wr_id) {
            let Some((_, buf, res)) = self.pending.pop_front() else {
                break;
            };
            if self.send_free.len() < MAX_SEND_BUFS {
                self.send_free.push(buf);
            } else {
                self.send_count -= 1;
                self.pd.dereg_mr(&buf);
            }
            for r in res {
                self.release(r);
            }
        }
        if wc.status != WcStatus::Success {
            return Err(RpcError::Rdma(format!(
                "{:?} failed: {:?}",
                wc.opcode, wc.status
            )));
        }
        Ok(())
    }

    /// Handle every send completion already queued.
    ///
    /// Only what is queued: a driven worker is not run for it (a pass here, on every Send the
    /// client posts, would put each call in a segment of its own instead of letting the next
    /// wait's pass frame the calls posted meanwhile together).
    pub fn reap_sends(&mut self) -> Result<(), RpcError> {
        while let Some(wc) = self.scq.try_poll_one() {
            self.on_send_wc(&wc)?;
        }
        Ok(())
    }

    fn send_buf(&mut self) -> Result<Mr, RpcError> {
        loop {
            if !self.one_cq {
                self.reap_sends()?;
            }
            if let Some(m) = self.send_free.pop() {
                return Ok(m);
            }
            // With one CQ the owner reaps send completions itself and cannot wait here; the
            // Sends in flight are bounded by the receive buffers it posted (one reply per
            // received message), so a buffer beyond the usual cap is registered instead.
            if self.send_count < MAX_SEND_BUFS || self.one_cq {
                self.send_count += 1;
                return Ok(self.pd.reg_mr(self.send_size, Access::LOCAL_WRITE));
            }
            let wc = self.scq.wait(self.timeout).ok_or(RpcError::Timeout)?;
            self.on_send_wc(&wc)?;
        }
    }

    /// Send `bytes` (at most `send_size`), holding `extra` until the Send completes.
    pub fn send(&mut self, bytes: &[u8], extra: Vec<Res>) -> Result<(), RpcError> {
        if bytes.len() > self.send_size {
            return Err(RpcError::Usage("message longer than the send buffer"));
        }
        if extra.is_empty() && bytes.len() <= MAX_INLINE_DATA {
            // A small message holding nothing goes inline (IBV_SEND_INLINE): no send buffer
            // to write, look up, hold until a completion and hand back. Unsignaled: a failure
            // still completes (in error), and the order of completions stays the wr_ids'.
            let id = self.wr_id();
            return Ok(self.qp.post_send_inline(id, Opcode::Send, bytes, false)?);
        }
        let mr = self.send_buf()?;
        mr.write_at(0, bytes);
        let id = self.wr_id();
        // Signaled when it holds more than its buffer, once in SIGNAL_EVERY, and when no free
        // buffer is left (a later `send_buf` may wait for this completion).
        let signaled =
            !extra.is_empty() || self.unsignaled + 1 >= SIGNAL_EVERY || self.send_free.is_empty();
        let r = self.qp.post_send(SendWr {
            wr_id: id,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&mr, 0, bytes.len())],
            signaled,
        });
        match r {
            Ok(()) => {
                self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
                self.pending.push_back((id, mr, extra));
                Ok(())
            }
            Err(e) => {
                self.send_free.push(mr);
                for x in extra {
                    self.release(x);
                }
                Err(e.into())
            }
        }
    }

    /// Post one RDMA Read of `seg` into `sink` at `off` (signaled); returns its `wr_id`.
    pub fn post_read(&mut self, seg: &Segment, sink: &Mr, off: usize) -> Result<u64, RpcError> {
        let id = self.wr_id();
        self.qp.post_send(SendWr {
            wr_id: id,
            opcode: Opcode::Read {
                remote_addr: seg.offset,
                rkey: seg.handle,
            },
            sg_list: smallvec![sge(sink, off, seg.length as usize)],
            signaled: true,
        })?;
        Ok(id)
    }

    /// RDMA Read every segment into `sink` back to back, at most `window` Reads outstanding
    /// (the peer's IRD, RFC 5040 §6.3 / draft §6.2 maxrdmaread). Returns the bytes read.
    pub fn rdma_read(
        &mut self,
        segs: &[Segment],
        sink: &Mr,
        window: usize,
    ) -> Result<usize, RpcError> {
        debug_assert!(
            !self.one_cq,
            "a blocking Read on a shared CQ would take other completions"
        );
        let window = window.max(1);
        let mut outstanding: Vec<u64> = Vec::new();
        let mut off = 0usize;
        let mut next = 0usize;
        loop {
            while next < segs.len() && outstanding.len() < window {
                let s = segs[next];
                next += 1;
                if s.length == 0 {
                    continue;
                }
                let id = self.post_read(&s, sink, off)?;
                off += s.length as usize;
                outstanding.push(id);
            }
            if outstanding.is_empty() {
                return Ok(off);
            }
            let wc = self.scq.wait(self.timeout).ok_or(RpcError::Timeout)?;
            if let Some(i) = outstanding.iter().position(|&x| x == wc.wr_id) {
                outstanding.swap_remove(i);
                if wc.status != WcStatus::Success {
                    return Err(RpcError::Rdma(format!("RDMA Read failed: {:?}", wc.status)));
                }
            } else {
                self.on_send_wc(&wc)?;
            }
        }
    }

    /// RDMA Write `len` bytes of `src` from `src_off` into `segs` in order; returns the segments
    /// with their lengths rewritten to what was written (RFC 8166 §4.3.2). Unsignaled: the Send
    /// that follows completes after them and frees `src`.
    pub fn rdma_write(
        &mut self,
        src: &Mr,
        src_off: usize,
        len: usize,
        segs: &[Segment],
    ) -> Result<Segments, RpcError> {
        let mut out = Segments::with_capacity(segs.len());
        let mut done = 0usize;
        for s in segs {
            let n = (len - done).min(s.length as usize);
            if n > 0 {
                let id = self.wr_id();
                self.qp.post_send(SendWr {
                    wr_id: id,
                    opcode: Opcode::Write {
                        remote_addr: s.offset,
                        rkey: s.handle,
                    },
                    sg_list: smallvec![sge(src, src_off + done, n)],
                    signaled: false,
                })?;
            }
            done += n;
            out.push(Segment {
                length: n as u32,
                ..*s
            });
        }
        if done < len {
            return Err(RpcError::Usage("chunk smaller than the data"));
        }
        Ok(out)
    }
}

impl Drop for RpcQp {
    /// The shared-memory registrations end with the connection (the memory itself lives on).
    fn drop(&mut self) {
        for (_, mr) in self.shared.drain(..) {
            self.pd.dereg_mr(&mr);
        }
        self.result_bufs.release_all();
    }
}
