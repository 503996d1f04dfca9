//! Transmit by reference: a frame's payload as an external-buffer mbuf pointing into a TCP
//! socket's transmit ring (`rte_pktmbuf_attach_extbuf`), chained behind the header mbuf.
//!
//! [`TxPins`] keeps, per transmit ring, which octets are referenced by frames not yet freed
//! by the PMD or the peer (a *pin* per external mbuf). The sender must write into its ring
//! only where [`TxPins::free_run`] says nothing points: TCP frees ring space when it is
//! acknowledged, which can come before the last frame referencing it is freed (a
//! retransmission still queued, or a frame another thread has not consumed yet on
//! `net_ring`). The free callback runs on whichever thread frees the mbuf, so a pin's state is
//! an atomic.
//!
//! # Contract (what the dataplane upholds)
//!
//! The memory of a ring registered with [`TxPins`] must stay allocated and unmodified where
//! pinned until every pin on it is released ([`TxPins::outstanding`] is 0): the dataplane
//! writes ring space only up to `free_run`, and keeps a removed socket (which owns the ring)
//! until its pins are released, leaking it if the worker ends before (docs/datapath.md
//! "Copies").

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::{sys, Mbuf};

/// Storage for one `struct rte_mbuf_ext_shared_info` (24 octets on 64-bit, checked).
type ShinfoStorage = [u64; 4];

struct PinSlot {
    /// The external buffer's shared info: written by the worker while the slot is free,
    /// then only by DPDK (its refcnt) until the free callback.
    shinfo: UnsafeCell<ShinfoStorage>,
    /// A live mbuf references `start..start + len`.
    busy: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
}

// SAFETY: `shinfo` is written by the owning worker only while `busy` is false (no mbuf refers
// to it), and by DPDK through atomic refcount updates while it is busy; everything else is
// atomic.
unsafe impl Sync for PinSlot {}

struct PinShared {
    slots: Box<[PinSlot]>,
}

/// The pins of one transmit ring (see the module docs). Owned by the worker that sends
/// from the ring; the free callbacks reach the shared part from any thread.
pub struct TxPins {
    shared: Arc<PinShared>,
    /// Slots possibly busy (those handed out and not yet seen released).
    active: Vec<u32>,
    /// Per slot: listed in `active`.
    listed: Vec<bool>,
    cursor: usize,
}

/// Runs when the last reference to an external buffer goes (PMD, peer or fault injector,
/// any thread).
unsafe extern "C" fn release_pin(_addr: *mut c_void, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `PinSlot` this buffer was attached with (`TxPins::chain`). The
    // slot lives in `PinShared`, which outlives every busy slot: `TxPins` frees it only when it
    // sees no slot busy, and leaks it otherwise (`Drop for TxPins`). DPDK is done with the
    // slot's shared info when it calls this, and the store below is the slot's last use here.
    // No reference count is taken per pin: a count shared by both cores cost two cache-line
    // transfers per frame.
    unsafe {
        let slot = &*(opaque as *const PinSlot);
        slot.busy.store(false, Ordering::Release);
    }
}

impl TxPins {
    /// A table for at most `slots` frames in flight at once (beyond, frames are copied).
    pub fn new(slots: usize) -> TxPins {
        // SAFETY: plain queries of a struct's size and alignment.
        let (size, align) = unsafe { (sys::dpw_shinfo_size(), sys::dpw_shinfo_align()) };
        assert!(
            size as usize <= std::mem::size_of::<ShinfoStorage>()
                && align as usize <= std::mem::align_of::<ShinfoStorage>(),
            "rte_mbuf_ext_shared_info is {size} octets aligned {align}"
        );
        let slots: Box<[PinSlot]> = (0..slots.max(1))
            .map(|_| PinSlot {
                shinfo: UnsafeCell::new([0; 4]),
                busy: AtomicBool::new(false),
                start: AtomicUsize::new(0),
                len: AtomicUsize::new(0),
            })
            .collect();
        let n = slots.len();
        TxPins {
            shared: Arc::new(PinShared { slots }),
            active: Vec::new(),
            listed: vec![false; n],
            cursor: 0,
        }
    }

    /// Frames still referencing the ring.
    pub fn outstanding(&mut self) -> usize {
        let (slots, listed) = (&self.shared.slots, &mut self.listed);
        self.active.retain(|&i| {
            let busy = slots[i as usize].busy.load(Ordering::Acquire);
            listed[i as usize] = busy;
            busy
        });
        self.active.len()
    }

    /// How many octets from `offset` (at most `n`) no frame references: up to the first
    /// pinned octet.
    pub fn free_run(&mut self, offset: usize, n: usize) -> usize {
        let mut limit = n;
        let (slots, listed) = (&self.shared.slots, &mut self.listed);
        self.active.retain(|&i| {
            let s = &slots[i as usize];
            if !s.busy.load(Ordering::Acquire) {
                listed[i as usize] = false;
                return false;
            }
            let (start, len) = (
                s.start.load(Ordering::Relaxed),
                s.len.load(Ordering::Relaxed),
            );
            if start < offset + limit && offset < start + len {
                limit = start.saturating_sub(offset);
            }
            true
        });
        limit
    }

    /// Chain `ext` (a fresh mbuf) behind `head`, pointing at `payload` (which sits at `offset`
    /// in the ring this table belongs to) instead of copying it; `payload` is pinned until
    /// the frame is freed. Errors (the caller copies instead): `Some(ext)` back when no pin
    /// is free, None when the chain could not be made (`ext` freed).
    pub fn chain(
        &mut self,
        head: &mut Mbuf,
        ext: Mbuf,
        payload: &[u8],
        offset: usize,
    ) -> Result<(), Option<Mbuf>> {
        let Ok(len) = u16::try_from(payload.len()) else {
            return Err(Some(ext));
        };
        let n = self.shared.slots.len();
        let mut found = None;
        for k in 0..n {
            let i = (self.cursor + k) % n;
            if !self.shared.slots[i].busy.load(Ordering::Acquire) {
                found = Some(i);
                break;
            }
        }
        let Some(i) = found else {
            return Err(Some(ext));
        };
        self.cursor = (i + 1) % n;
        let slot = &self.shared.slots[i];
        slot.start.store(offset, Ordering::Relaxed);
        slot.len.store(payload.len(), Ordering::Relaxed);
        slot.busy.store(true, Ordering::Relaxed);
        if !self.listed[i] {
            self.listed[i] = true;
            self.active.push(i as u32);
        }
        let ext = std::mem::ManuallyDrop::new(ext);
        // SAFETY: `head` and `ext` are mbufs we own (`ext` fresh from a pool, refcnt 1,
        // direct); the shim initialises the slot's shared info (free to write: the slot was
        // not busy, so no mbuf refers to it) and attaches `ext` to `payload`, which the
        // module contract keeps allocated and unmodified until `release_pin` runs for this
        // slot. On success the chain owns `ext`; on failure `ext` is ours again, and freeing
        // it runs `release_pin`, which releases the slot.
        let rc = unsafe {
            sys::dpw_chain_extbuf(
                head.ptr.as_ptr(),
                ext.ptr.as_ptr(),
                payload.as_ptr() as *mut c_void,
                len,
                slot.shinfo.get() as *mut c_void,
                Some(release_pin),
                slot as *const PinSlot as *mut c_void,
            )
        };
        if rc != 0 {
            drop(std::mem::ManuallyDrop::into_inner(ext));
            return Err(None);
        }
        Ok(())
    }
}

impl Drop for TxPins {
    /// The slots stay allocated for as long as a frame may still free one: when some slot is
    /// busy, the shared part is leaked (as the ring itself is, docs/datapath.md "Copies").
    fn drop(&mut self) {
        if self.outstanding() > 0 {
            std::mem::forget(Arc::clone(&self.shared));
        }
    }
}

#[cfg(test)]
impl TxPins {
    /// Pin `start..start + len` as a frame would (no mbuf: tests of the bookkeeping only).
    fn pin_for_test(&mut self, start: usize, len: usize) -> usize {
        let n = self.shared.slots.len();
        let i = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| !self.shared.slots[i].busy.load(Ordering::Acquire))
            .expect("a free slot");
        self.cursor = (i + 1) % n;
        let slot = &self.shared.slots[i];
        slot.start.store(start, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.busy.store(true, Ordering::Release);
        if !self.listed[i] {
            self.listed[i] = true;
            self.active.push(i as u32);
        }
        i
    }

    /// What the free callback does for slot `i`.
    fn release_for_test(&self, i: usize) {
        self.shared.slots[i].busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writable runs stop at the first pinned octet; released pins free their octets; slots
    /// are reused.
    #[test]
    fn free_runs_stop_at_pinned_octets() {
        let mut p = TxPins::new(2);
        assert_eq!(p.free_run(0, 1000), 1000);
        let a = p.pin_for_test(100, 100); // 100..200
        let b = p.pin_for_test(500, 100); // 500..600
        assert_eq!(p.outstanding(), 2);
        assert_eq!(p.free_run(0, 1000), 100);
        assert_eq!(p.free_run(0, 100), 100); // ends right where the pin starts
        assert_eq!(p.free_run(150, 10), 0); // inside a pin
        assert_eq!(p.free_run(199, 10), 0);
        assert_eq!(p.free_run(200, 1000), 300);
        assert_eq!(p.free_run(600, 50), 50);
        p.release_for_test(a);
        assert_eq!(p.free_run(0, 1000), 500);
        assert_eq!(p.outstanding(), 1);
        // The released slot is taken again.
        let c = p.pin_for_test(0, 10);
        assert_eq!(c, a);
        assert_eq!(p.free_run(0, 1000), 0);
        assert_eq!(p.free_run(10, 1000), 490);
        p.release_for_test(b);
        p.release_for_test(c);
        assert_eq!(p.outstanding(), 0);
        assert_eq!(p.free_run(0, 1000), 1000);
    }
}
