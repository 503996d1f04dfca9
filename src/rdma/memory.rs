//! Protection domains and memory regions (STag validation: RFC 5040 §7.2, RFC 5041 §7; security: RFC 5040 §8.1, RFC 5042).
//!
//! `MemoryTable` is a cheap `Clone` handle (Arc inside), `Send + Sync`: the application registers
//! regions while the QP engines (possibly on other threads) place data into them.
//! STag = (index << 8) | key (RFC 5040 §4.4: a 24-bit index and an 8-bit key). Both are
//! unpredictable (RFC 5040 §8.1.1 item 8: an RNIC MUST choose STags difficult to predict, and it
//! is RECOMMENDED to spread them sparsely over the whole range; RFC 5042 §5.1.2): the key byte is
//! random and the index is drawn at random over the full 24-bit range, so one STag the peer
//! learns says nothing about the next. A freed index is kept in a quarantine of the last
//! [`STAG_QUARANTINE`] freed indices and never drawn while there, so a peer still holding an old
//! STag cannot reach the region that replaced it (bounded memory: a few bytes per live region plus
//! the quarantine).
//! Region addresses are verbs-like absolute addresses: `[mr.addr(), mr.addr() + mr.len())`; the
//! address is the heap address of the region's buffer (unique while the region lives, like a VA).
//! Each region's bytes sit behind an `RwLock`, so placement from an engine thread and local CPU
//! access never race.
//!
//! One table, one writer at a time (register, deregister, invalidate take the table's write
//! lock), and readers that take guards: every access by STag, whichever side makes it (a
//! received segment placed, an outgoing ULPDU gathered, a work request's SGEs checked at
//! post), goes through `MemoryTable::checked`: the STag's lookup (index and key, RFC 5040
//! §8.1.1), then `Checks::check` (not invalidated, PD, rights, bounds, in RFC 5041 §7.1's
//! order); the bytes are then read or written under the region's own lock, taken for that one
//! access. Nothing holds a region between two accesses (a message's next segment looks its
//! STag up again), so deregistration and invalidation take effect at the next segment. The
//! one cache is `Recent`, a thread's last lookups, which spares the table's lock.
//! Every address computation a peer influences (TO, lengths) is overflow-checked.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;

use rand::Rng;

use crate::wire::txbuf::TxBuf;

/// Access rights of a region (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u32);

impl Access {
    /// Local placement: receive buffers (untagged Sends land here) and RDMA Read sinks.
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may target the region with RDMA Write (RFC 5040 §5.1).
    pub const REMOTE_WRITE: Access = Access(2);
    /// The peer may name the region as Data Source of an RDMA Read Request (RFC 5040 §5.2).
    pub const REMOTE_READ: Access = Access(4);
    /// The rights of both `self` and `other` (also available as `|`).
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
    /// Whether every right in `other` is also in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

/// A protection domain identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

/// Why a memory access was refused (maps onto RFC 5040 §7.2 / RFC 5041 §7.2 TERMINATE codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// No registered region has this STag (RFC 5041 §7.1 tagged check 1; TERMINATE "Invalid STag").
    #[error("invalid STag")]
    InvalidStag,
    /// The STag was invalidated (RFC 5040 §5.3 Send with Invalidate, or locally); reported as
    /// "Invalid STag" on the wire.
    #[error("STag invalidated")]
    Invalidated,
    /// The TO range falls outside the region or the TO + length wraps (RFC 5041 §7.1 checks 3-5).
    #[error("base or bounds violation")]
    Bounds,
    /// The region lacks the [`Access`] right the operation needs (RFC 5040 §7.2 "Access rights
    /// violation").
    #[error("access rights violation")]
    Access,
    /// The region belongs to another protection domain than the QP's: "STag not associated with
    /// RDMAP Stream" (RFC 5040 §7.2, RFC 5041 §7.2; PDs: RFC 5042 §2.2.4).
    #[error("protection domain mismatch")]
    PdMismatch,
}

/// One registered region: what its checks read ([`Checks`], through `Deref`) and its bytes.
struct Region {
    checks: Arc<Checks>,
    /// The bytes; shared with other regions over the same memory ([`SharedMem`]).
    data: Arc<Bytes>,
}

/// What the checks of an access read of a region (RFC 5041 §7.1), apart from its bytes: a
/// thread's [`Recent`] lookups may hold it strongly, so a check that moves no byte (a work
/// request's SGEs at post) costs no atomic read-modify-write, where a region's own reference
/// count costs two (a weak reference upgraded, the strong one dropped). Holding it keeps no
/// byte alive: [`Mr::into_bytes`] still finds the bytes unshared.
struct Checks {
    stag: u32,
    pd: PdId,
    access: Access,
    base: u64,
    len: usize,
    /// Where the region's first byte sits in its memory: 0, or the start of a window over a
    /// [`SharedMem`] ([`MemoryTable::register_shared_range`]); `base` is that byte's address.
    start: usize,
    invalidated: AtomicBool,
    /// Registered: cleared by [`MemoryTable::deregister`] (a thread's [`Recent`] lookups check
    /// it, as they do not go through the table).
    live: AtomicBool,
}

impl std::ops::Deref for Region {
    type Target = Checks;
    fn deref(&self) -> &Checks {
        &self.checks
    }
}

/// A region's bytes behind their lock.
type Bytes = RwLock<Box<[u8]>>;

/// Placements this large are taken as part of a stream (a multi-segment tagged message).
const PREFETCH_MIN: usize = 512;

/// Ask the CPU to fetch `bytes`' cache lines for writing, without waiting.
fn prefetch_for_write(bytes: &[u8]) {
    each_line(bytes, prefetch_line_for_write);
}

/// Call `f` with an address in each 64-octet cache line `bytes` touches, from the line of its
/// first octet: a counted loop of a few instructions a line (it runs for every large segment
/// gathered or placed).
#[inline]
fn each_line(bytes: &[u8], f: impl Fn(*const u8)) {
    if bytes.is_empty() {
        return;
    }
    let p = bytes.as_ptr();
    let lead = p as usize & 63;
    let first = p.wrapping_sub(lead);
    let mut i = 0;
    while i < lead + bytes.len() {
        f(first.wrapping_add(i));
        i += 64;
    }
}

/// Ask the CPU to fetch `bytes`' cache lines for reading, without waiting.
fn prefetch_for_read(bytes: &[u8]) {
    each_line(bytes, prefetch_line_for_read);
}

/// Ask the CPU to fetch the cache line holding `p` (`prefetcht0`) without waiting: a later
/// load from it finds the line in the cache instead of waiting for memory. Any address is
/// fine; nothing is read or written.
#[allow(unsafe_code)]
#[inline]
pub(crate) fn prefetch_line_for_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint. It loads nothing into a register, never faults (not even
    // on an unmapped address) and changes no memory the program sees.
    unsafe {
        std::arch::asm!("prefetcht0 [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask the CPU to fetch the cache line holding `p` for writing (`prefetchw`) without waiting:
/// a later store to it finds the line owned instead of waiting for another core to give it
/// up. Any address is fine; nothing is read or written.
#[allow(unsafe_code)]
#[inline]
pub(crate) fn prefetch_line_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` is a hint. It loads nothing into a register, never faults (not even
    // on an unmapped address) and changes no memory the program sees; CPUs without PRFCHW
    // decode its opcode (0F 0D) as a no-op.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl Region {
    fn bytes(&self) -> parking_lot::RwLockReadGuard<'_, Box<[u8]>> {
        self.data.read()
    }
    fn bytes_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Box<[u8]>> {
        self.data.write()
    }
    /// Copy `data` to offset `off` (checked: [`Checks::check`]).
    fn place(&self, off: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut bytes = self.bytes_mut();
        let end = off + data.len();
        bytes[off..end].copy_from_slice(data);
        // Tagged messages arrive in order (RFC 5041 §5.1: each DDP segment continues the
        // last), so the next segment of a large message lands right after this one. Fetching
        // those lines for ownership now lets the next copy hit the cache instead of waiting
        // for the lines while the lock's release drains the stores.
        if data.len() >= PREFETCH_MIN {
            prefetch_for_write(&bytes[end..bytes.len().min(end + data.len())]);
        }
    }
}

impl Checks {
    /// The checks after the STag's (RFC 5041 §7.1, in its order): not invalidated, `pd`'s,
    /// rights `need`, `[addr, addr+len)` inside; the offset of `addr`.
    fn check(&self, pd: PdId, addr: u64, len: usize, need: Access) -> Result<usize, MemoryError> {
        if self.invalidated.load(Ordering::Acquire) {
            return Err(MemoryError::Invalidated);
        }
        if self.pd != pd {
            return Err(MemoryError::PdMismatch);
        }
        if !self.access.contains(need) {
            return Err(MemoryError::Access);
        }
        self.offset(addr, len)
    }
    /// Offset in the memory of `[addr, addr+len)`, which must lie inside the region
    /// (overflow-checked, RFC 5041 §7.1 checks 3-5): a window's bytes are the only ones its
    /// STag reaches.
    fn offset(&self, addr: u64, len: usize) -> Result<usize, MemoryError> {
        let off = addr.checked_sub(self.base).ok_or(MemoryError::Bounds)?;
        let off = usize::try_from(off).map_err(|_| MemoryError::Bounds)?;
        let end = off.checked_add(len).ok_or(MemoryError::Bounds)?;
        if end > self.len {
            return Err(MemoryError::Bounds);
        }
        Ok(self.start + off)
    }
}

/// Hashes a 24-bit STag index (already random: a multiply spreads it over the 64 bits a
/// `HashMap` uses, with no per-lookup cost of SipHash on the placement path).
#[derive(Default)]
struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IndexMap<V> = HashMap<u32, V, BuildHasherDefault<IndexHasher>>;
type IndexSet = HashSet<u32, BuildHasherDefault<IndexHasher>>;

struct Table {
    /// Live regions by STag index (1..=[`MAX_INDEX`]; index 0 is never used: STag 0 and siw's
    /// Write RTR STag 1 must not name a region).
    regions: IndexMap<Arc<Region>>,
    /// Recently freed indices, oldest first (at most [`STAG_QUARANTINE`]); not drawn again
    /// while listed here (`quarantined` holds the same indices for lookup).
    quarantine: VecDeque<u32>,
    quarantined: IndexSet,
}

impl Table {
    fn free(&self, i: u32) -> bool {
        i != 0 && !self.regions.contains_key(&i) && !self.quarantined.contains(&i)
    }

    /// A fresh STag index, drawn at random over 1..=2^24-1 (RFC 5040 §8.1.1 item 8): neither
    /// live nor quarantined. Once the table is so full that random draws keep missing, a scan
    /// from a random start; if only quarantined indices are left, the oldest one is released.
    fn draw_index(&mut self) -> u32 {
        let mut rng = rand::rng();
        for _ in 0..64 {
            let i = rng.random_range(1..=MAX_INDEX);
            if self.free(i) {
                return i;
            }
        }
        let start = rng.random_range(1..=MAX_INDEX);
        if let Some(i) = (start..=MAX_INDEX).chain(1..start).find(|&i| self.free(i)) {
            return i;
        }
        while let Some(i) = self.quarantine.pop_front() {
            self.quarantined.remove(&i);
            if !self.regions.contains_key(&i) {
                return i;
            }
        }
        panic!("STag index space exhausted: 2^24 - 1 regions registered");
    }

    fn release(&mut self, i: u32) {
        if self.quarantine.len() >= STAG_QUARANTINE {
            if let Some(old) = self.quarantine.pop_front() {
                self.quarantined.remove(&old);
            }
        }
        self.quarantine.push_back(i);
        self.quarantined.insert(i);
    }
}

struct Inner {
    /// Tells this table's entries in a thread's [`Recent`] from another table's.
    id: u64,
    next_pd: AtomicU32,
    table: std::sync::RwLock<Table>,
}

/// Source of [`Inner::id`].
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Regions a thread looked up lately (direct-mapped by STag index, [`RECENT_SLOTS`] slots, any
/// table). The data path names the same regions over and over (a connection's receive and send
/// buffers, the block store), and the table's lock costs two atomic read-modify-writes per
/// lookup on top of the region's reference count: a hit here costs one. Entries are weak (a
/// deregistered region is not kept alive, and [`Mr::into_bytes`] still finds its bytes
/// unshared) and checked against [`Checks::live`], so a lookup never returns a region the table
/// no longer has. Beside the weak reference each entry holds the region's [`Checks`] strongly:
/// a check that needs no byte ([`MemoryTable::check`]) reads them with no reference count
/// touched.
struct Recent {
    slots: Vec<RecentSlot>,
}

/// Table id, STag, the region, its checks.
type RecentSlot = (u64, u32, Weak<Region>, Option<Arc<Checks>>);

const RECENT_SLOTS: usize = 256;

impl Default for Recent {
    fn default() -> Self {
        Recent {
            slots: vec![(0, 0, Weak::new(), None); RECENT_SLOTS],
        }
    }
}

impl Recent {
    /// The STag index is drawn at random (module docs), so its low bits spread the slots.
    fn slot(stag: u32) -> usize {
        (stag >> 8) as usize % RECENT_SLOTS
    }

    fn find(&self, table: u64, stag: u32) -> Option<Arc<Region>> {
        let (t, s, w, _) = &self.slots[Self::slot(stag)];
        if *t != table || *s != stag {
            return None;
        }
        w.upgrade().filter(|r| r.live.load(Ordering::Acquire))
    }

    /// `f` of the checks of region `stag` of `table`, if this thread looked it up lately and
    /// it is still registered.
    fn with_checks<T>(&self, table: u64, stag: u32, f: impl FnOnce(&Checks) -> T) -> Option<T> {
        match &self.slots[Self::slot(stag)] {
            (t, s, _, Some(c)) if *t == table && *s == stag && c.live.load(Ordering::Acquire) => {
                Some(f(c))
            }
            _ => None,
        }
    }

    fn put(&mut self, table: u64, stag: u32, r: &Arc<Region>) {
        self.slots[Self::slot(stag)] = (table, stag, Arc::downgrade(r), Some(r.checks.clone()));
    }
}

thread_local! {
    static RECENT: RefCell<Recent> = RefCell::default();
}

/// Largest STag index (24 bits).
const MAX_INDEX: u32 = (1 << 24) - 1;

/// How many of the most recently freed STag indices are never drawn again while they are
/// among the last this many freed (RFC 5040 §8.1.1: a peer may still hold an STag after the
/// region is gone; reusing its index at once would let it reach the next region). 64 Ki
/// indices: at most ~1 MiB of bookkeeping, and a random draw hits a given older index with
/// probability 2^-24 (times 2^-8 for the key byte).
pub const STAG_QUARANTINE: usize = 1 << 16;

/// The table of registered regions shared by a device's QPs.
#[derive(Clone)]
pub struct MemoryTable {
    inner: Arc<Inner>,
}

impl Default for MemoryTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryTable {
    /// An empty table.
    pub fn new() -> Self {
        MemoryTable {
            inner: Arc::new(Inner {
                id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
                next_pd: AtomicU32::new(1),
                table: std::sync::RwLock::new(Table {
                    regions: IndexMap::default(),
                    quarantine: VecDeque::new(),
                    quarantined: IndexSet::default(),
                }),
            }),
        }
    }
    fn table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.inner.table.read().unwrap_or_else(|p| p.into_inner())
    }
    fn table_mut(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.inner.table.write().unwrap_or_else(|p| p.into_inner())
    }
    fn region(&self, stag: u32) -> Option<Arc<Region>> {
        let id = self.inner.id;
        // `try_with`: during thread teardown the cache is gone, the table still answers.
        if let Ok(Some(r)) = RECENT.try_with(|c| c.borrow().find(id, stag)) {
            return Some(r);
        }
        let r = {
            let t = self.table();
            let r = t.regions.get(&(stag >> 8))?;
            // The key byte must match too: a stale or guessed key is an invalid STag.
            (r.stag == stag).then(|| r.clone())?
        };
        let _ = RECENT.try_with(|c| c.borrow_mut().put(id, stag, &r));
        Some(r)
    }
    /// A fresh protection domain.
    pub fn alloc_pd(&self) -> PdId {
        PdId(self.inner.next_pd.fetch_add(1, Ordering::Relaxed))
    }
    /// Register `len` zeroed bytes owned by the table under `pd` with `access`; returns the region
    /// with a fresh STag (random index and key byte; see the module docs).
    ///
    /// Panics if 2^24 - 1 regions are registered at once (local resource exhaustion).
    pub fn register(&self, pd: PdId, len: usize, access: Access) -> Mr {
        self.register_bytes(pd, vec![0u8; len], access)
    }

    /// Register `data` itself (no copy) under `pd` with `access`: the region owns the bytes from
    /// now on. For data built elsewhere that is to be sent by RDMA (a bulk RPC result), so it is
    /// not copied into a staging region first.
    ///
    /// Panics like [`MemoryTable::register`].
    pub fn register_bytes(&self, pd: PdId, data: Vec<u8>, access: Access) -> Mr {
        self.register_data(pd, Arc::new(Bytes::new(data.into_boxed_slice())), access)
    }

    /// Register the memory of `mem` under `pd` with `access`, sharing its bytes (no copy): the
    /// same memory may be registered in several protection domains at once, each registration
    /// with its own STag, as `ibv_reg_mr` of one buffer in several PDs. The region's address is
    /// the memory's, in every registration. For memory that outlives connections and is
    /// reached by each connection's QP in that connection's own PD (a block store RDMA Written
    /// from and RDMA Read into; RFC 5042 §2.2.4: a server allocates a PD per client).
    ///
    /// Panics like [`MemoryTable::register`].
    pub fn register_shared(&self, pd: PdId, mem: &SharedMem, access: Access) -> Mr {
        self.register_data(pd, mem.data.clone(), access)
    }

    /// Register `len` bytes of `mem` from `offset` (no copy), as `ibv_reg_mr` of part of a
    /// buffer: the region's address is that first byte's, and its STag reaches no byte
    /// outside the window. For lending a peer one piece of a larger buffer (an RPC client's
    /// bulk argument that the server RDMA-Reads, RFC 8166 §3.5.3): the rest stays private.
    /// Local access through the `Mr` ([`Mr::bytes`], [`Mr::write_at`], ...) sees the window.
    ///
    /// Panics if the window does not lie inside `mem` (a local caller bug), or like
    /// [`MemoryTable::register`].
    pub fn register_shared_range(
        &self,
        pd: PdId,
        mem: &SharedMem,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Mr {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= mem.len()),
            "register_shared_range: window beyond the memory"
        );
        self.register_window(pd, mem.data.clone(), Some((offset, len)), access)
    }

    fn register_data(&self, pd: PdId, data: Arc<Bytes>, access: Access) -> Mr {
        self.register_window(pd, data, None, access)
    }

    /// Register `window` (offset, length) of `data`, or all of it.
    fn register_window(
        &self,
        pd: PdId,
        data: Arc<Bytes>,
        window: Option<(usize, usize)>,
        access: Access,
    ) -> Mr {
        let (base, start, len) = {
            let d = data.read();
            let (start, len) = window.unwrap_or((0, d.len()));
            (d.as_ptr() as usize as u64 + start as u64, start, len)
        };
        let mut t = self.table_mut();
        // RFC 5040 §8.1.1 item 8 / RFC 5042 §5.1.2: STags must not be predictable.
        let index = t.draw_index();
        let key: u8 = rand::random();
        let stag = (index << 8) | u32::from(key);
        let region = Arc::new(Region {
            checks: Arc::new(Checks {
                stag,
                pd,
                access,
                base,
                len,
                start,
                invalidated: AtomicBool::new(false),
                live: AtomicBool::new(true),
            }),
            data,
        });
        t.regions.insert(index, region.clone());
        Mr { region }
    }
    /// Remove a region; later accesses through its STag fail with `InvalidStag`.
    pub fn deregister(&self, stag: u32) -> bool {
        let mut t = self.table_mut();
        let i = stag >> 8;
        match t.regions.get(&i) {
            Some(r) if r.stag == stag => {
                r.live.store(false, Ordering::Release);
                t.regions.remove(&i);
                t.release(i);
                true
            }
            _ => false,
        }
    }
    /// Invalidate a region's STag (RFC 5040 §5.3; Send with Invalidate or local invalidate).
    /// Fails if the STag is unknown or the region is not `pd`'s.
    pub fn invalidate(&self, stag: u32, pd: PdId) -> Result<(), MemoryError> {
        let r = self.region(stag).ok_or(MemoryError::InvalidStag)?;
        if r.pd != pd {
            return Err(MemoryError::PdMismatch);
        }
        if r.invalidated.swap(true, Ordering::AcqRel) {
            return Err(MemoryError::Invalidated);
        }
        Ok(())
    }
    /// Look a region up by STag.
    pub fn get(&self, stag: u32) -> Option<Mr> {
        self.region(stag).map(|region| Mr { region })
    }
    fn checked(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Result<(Arc<Region>, usize), MemoryError> {
        let r = self.region(stag).ok_or(MemoryError::InvalidStag)?;
        let off = r.check(pd, addr, len, need)?;
        Ok((r, off))
    }
    /// Validate `[addr, addr+len)` of region `stag` for `pd` with rights `need` (RFC 5040 §7.2, RFC 5041 §7.1
    /// order: STag valid, not invalidated, PD, rights, bounds) without moving a byte.
    pub fn check(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Result<(), MemoryError> {
        // A region this thread looked up lately: its checks, with no reference count touched
        // (a work request's SGEs are checked at every post).
        let id = self.inner.id;
        if let Ok(Some(r)) = RECENT.try_with(|c| {
            c.borrow()
                .with_checks(id, stag, |k| k.check(pd, addr, len, need))
        }) {
            return r.map(|_| ());
        }
        self.checked(stag, pd, addr, len, need).map(|_| ())
    }
    /// `check` then copy `data` into the region at `addr`. Nothing is written on error. The
    /// engine passes the payload slice straight from the received ULPDU: one copy per byte.
    pub fn write(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), MemoryError> {
        let (r, off) = self.checked(stag, pd, addr, data.len(), need)?;
        r.place(off, data);
        Ok(())
    }
    /// `check` then copy from the region at `addr` into `out`.
    pub fn read(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        out: &mut [u8],
        need: Access,
    ) -> Result<(), MemoryError> {
        let (r, off) = self.checked(stag, pd, addr, out.len(), need)?;
        out.copy_from_slice(&r.bytes()[off..off + out.len()]);
        Ok(())
    }
    /// `check` then append `len` bytes of the region at `addr` to `out` (the engine gathers an
    /// outgoing ULPDU this way without zero-filling first). Each ULPDU is checked and read
    /// under its own lookup and read lock, as each received segment is placed
    /// ([`MemoryTable::write`]): nothing is held between two of them, so a region
    /// deregistered or invalidated between two ULPDUs of one message refuses the next.
    pub fn read_append<B: TxBuf + ?Sized>(
        &self,
        stag: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        need: Access,
        out: &mut B,
    ) -> Result<(), MemoryError> {
        let (r, off) = self.checked(stag, pd, addr, len, need)?;
        gather(&r.bytes(), off, len, out);
        Ok(())
    }
}

/// Append `bytes[off..off + len]` to `out` (checked by the caller). The ULPDUs of a large
/// message are gathered one after the other from consecutive octets (RFC 5041 §5: a message's
/// DDP segments carry it in order), so the next one's lines are asked for now: a storage
/// target's source (a READ's block, a WRITE's buffer) is seldom in the cache, and the fetch
/// then overlaps this ULPDU's CRC and transmission instead of stalling the next copy
/// (docs/rpc.md "READ and WRITE over the same memory").
fn gather<B: TxBuf + ?Sized>(bytes: &[u8], off: usize, len: usize, out: &mut B) {
    let end = off + len;
    out.put(&bytes[off..end]);
    if len >= PREFETCH_MIN {
        prefetch_for_read(&bytes[end..bytes.len().min(end + len)]);
    }
}

/// A registered memory region: a cheap `Clone` handle, `Send + Sync`.
#[derive(Clone)]
pub struct Mr {
    region: Arc<Region>,
}

impl Mr {
    /// The region's bytes as a `Vec`, without copying, once the region is deregistered and this
    /// is its last handle (the table and the engines hold none then: an engine holds a region
    /// only during one access, and a thread's recent lookups hold it weakly); otherwise the handle back.
    /// For data RDMA-Read into a fresh region and then handed on (an RPC WRITE's data on its way
    /// to a file): the bytes land once, where they are used.
    /// Memory registered with [`MemoryTable::register_shared`] stays shared: `Err` while the
    /// [`SharedMem`] or another registration of it holds the bytes.
    /// A window over part of a memory ([`MemoryTable::register_shared_range`]) stays shared too.
    pub fn into_bytes(self) -> Result<Vec<u8>, Mr> {
        if self.region.start != 0 {
            return Err(self);
        }
        match Arc::try_unwrap(self.region) {
            Ok(r) => match Arc::try_unwrap(r.data) {
                Ok(lock) => Ok(lock.into_inner().into_vec()),
                Err(data) => Err(Mr {
                    region: Arc::new(Region { data, ..r }),
                }),
            },
            Err(region) => Err(Mr { region }),
        }
    }

    /// The region's memory, to register in another PD ([`MemoryTable::register_shared`]).
    pub fn shared(&self) -> SharedMem {
        SharedMem {
            data: self.region.data.clone(),
            lent: false,
        }
    }
}

impl core::fmt::Debug for Mr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mr")
            .field("stag", &format_args!("{:#x}", self.region.stag))
            .field("addr", &format_args!("{:#x}", self.region.base))
            .field("len", &self.region.len)
            .field("pd", &self.region.pd)
            .field("access", &self.region.access)
            .finish()
    }
}

impl Mr {
    /// The STag (used as both lkey and rkey, as iWARP RNICs do).
    pub fn stag(&self) -> u32 {
        self.region.stag
    }
    /// Base address (Tagged Offset of the first byte).
    pub fn addr(&self) -> u64 {
        self.region.base
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.region.len
    }
    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The protection domain.
    pub fn pd(&self) -> PdId {
        self.region.pd
    }
    /// The access rights.
    pub fn access(&self) -> Access {
        self.region.access
    }
    /// Whether the STag was invalidated (RFC 5040 §5.3).
    pub fn is_invalidated(&self) -> bool {
        self.region.invalidated.load(Ordering::Acquire)
    }
    /// Local CPU write at byte `offset` from the start (panics if out of range: local caller bug).
    pub fn write_at(&self, offset: usize, data: &[u8]) {
        self.bytes_mut()[offset..offset + data.len()].copy_from_slice(data);
    }
    /// Local CPU read at byte `offset` (panics if out of range: local caller bug).
    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.bytes()[offset..offset + out.len()]);
    }
    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }
    /// The region's part of its memory's bytes.
    fn window(&self) -> core::ops::Range<usize> {
        self.region.start..self.region.start + self.region.len
    }
    /// The region's bytes in place, for the application to fill without a staging copy
    /// (e.g. `file.read_exact(&mut mr.bytes_mut())`, then post an RDMA Write or Send from
    /// it). Placement into the region by the engine (a peer's RDMA Write, a Read Response,
    /// a received Send) waits while the guard is held, so hold it briefly; bytes written
    /// through it are what the next Write/Send/Read Response from the region carries.
    pub fn bytes_mut(&self) -> MrBytesMut<'_> {
        MrBytesMut(self.region.bytes_mut(), self.window())
    }
    /// [`Mr::bytes_mut`] if nothing holds the region's bytes now (an engine placing into it
    /// or gathering from it in a transmit pass, a reader), else None at once: for a thread
    /// that also drives the engines and must not wait on itself.
    pub fn try_bytes_mut(&self) -> Option<MrBytesMut<'_>> {
        self.region
            .data
            .try_write()
            .map(|g| MrBytesMut(g, self.window()))
    }
    /// The region's bytes in place, read-only (e.g. to check or parse what a peer placed
    /// without copying it out); placement waits while the guard is held.
    pub fn bytes(&self) -> MrBytes<'_> {
        MrBytes(self.region.bytes(), self.window())
    }
}

/// Memory that may be registered in several protection domains at once
/// ([`MemoryTable::register_shared`], [`crate::verbs::Pd::reg_mr_shared`]): a cheap `Clone`
/// handle (`Send + Sync`) to bytes that live as long as the handle or any region over them.
/// Local CPU access goes through the same lock as placement into its regions, so an engine
/// placing a Read Response and a local reader never race.
#[derive(Clone)]
pub struct SharedMem {
    data: Arc<Bytes>,
    /// Lent for one use at a time (a buffer of a pool, `rpc::program::BulkPool`): whoever
    /// registers it keeps the registration only while that use lasts, so that the memory
    /// comes back to its pool.
    lent: bool,
}

impl SharedMem {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> Self {
        SharedMem::from_vec(vec![0u8; len])
    }
    /// `data` itself (no copy).
    pub fn from_vec(data: Vec<u8>) -> Self {
        SharedMem {
            data: Arc::new(Bytes::new(data.into_boxed_slice())),
            lent: false,
        }
    }
    /// `len` zeroed bytes that a pool lends for one use at a time ([`SharedMem::is_lent`]).
    pub fn new_lent(len: usize) -> Self {
        SharedMem {
            lent: true,
            ..SharedMem::new(len)
        }
    }
    /// Whether the memory is lent for one use at a time: registrations of it are not to be
    /// kept beyond the work request that uses it.
    pub fn is_lent(&self) -> bool {
        self.lent
    }
    /// Whether this handle is the only one: no other handle, and no region over the memory
    /// (a registration holds the bytes until it is deregistered and its last `Mr` dropped).
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.data) == 1
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }
    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The address every registration of the whole memory has (its first byte's).
    pub fn addr(&self) -> u64 {
        self.bytes().as_ptr() as usize as u64
    }
    /// Whether `self` and `other` are the same memory.
    pub fn same(&self, other: &SharedMem) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }
    /// The bytes in place, read-only; placement into a region over them waits meanwhile.
    pub fn bytes(&self) -> MrBytes<'_> {
        let g = self.data.read();
        let all = 0..g.len();
        MrBytes(g, all)
    }
    /// The bytes in place; placement into a region over them waits meanwhile.
    pub fn bytes_mut(&self) -> MrBytesMut<'_> {
        let g = self.data.write();
        let all = 0..g.len();
        MrBytesMut(g, all)
    }
}

impl core::fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedMem")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}

/// The same memory (identity, not contents).
impl PartialEq for SharedMem {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}

impl Eq for SharedMem {}

/// In-place write access to a region's bytes ([`Mr::bytes_mut`]).
/// Holds the memory's lock and the range of its bytes that is the region's.
pub struct MrBytesMut<'a>(
    parking_lot::RwLockWriteGuard<'a, Box<[u8]>>,
    core::ops::Range<usize>,
);

impl core::ops::Deref for MrBytesMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[self.1.clone()]
    }
}

impl core::ops::DerefMut for MrBytesMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let r = self.1.clone();
        &mut self.0[r]
    }
}

/// In-place read access to a region's bytes ([`Mr::bytes`]).
/// Holds the memory's lock and the range of its bytes that is the region's.
pub struct MrBytes<'a>(
    parking_lot::RwLockReadGuard<'a, Box<[u8]>>,
    core::ops::Range<usize>,
);

impl core::ops::Deref for MrBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[self.1.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefetches reach every cache line of the bytes, from the line of the first octet
    /// to the line of the last, one address each, whatever the alignment.
    #[test]
    fn each_line_visits_every_line_once() {
        let buf = vec![0u8; 4096];
        let base = buf.as_ptr() as usize;
        for (off, len) in [
            (0, 0),
            (0, 1),
            (0, 64),
            (0, 65),
            (1, 63),
            (1, 64),
            (63, 2),
            (100, 1442),
        ] {
            let bytes = &buf[off..off + len];
            let seen = std::cell::RefCell::new(Vec::new());
            each_line(bytes, |p| seen.borrow_mut().push(p as usize));
            let want: Vec<usize> = if len == 0 {
                Vec::new()
            } else {
                let (first, last) = ((base + off) & !63, (base + off + len - 1) & !63);
                (first..=last).step_by(64).collect()
            };
            assert_eq!(seen.into_inner(), want, "offset {off}, {len} octets");
        }
    }

    /// Each access, placement or gather, is checked on its own and holds nothing after it:
    /// a message's segments and ULPDUs look the STag up one by one, so a deregistration or
    /// an invalidation between two of them refuses the next (RFC 5040 §5.3, RFC 5041 §7.1),
    /// the checks of a region looked up just before still run in full (PD, rights, bounds),
    /// and the region's bytes stay free for local access and for `Mr::into_bytes`.
    #[test]
    fn every_access_is_checked_alone_and_holds_nothing_after() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let w = Access::REMOTE_WRITE;
        let e = |r: Result<(), MemoryError>| r.unwrap_err();
        let mr = m.register(pd, 64, RW);
        let (stag, addr) = (mr.stag(), mr.addr());
        m.write(stag, pd, addr, b"ab", w).unwrap();
        assert!(
            mr.try_bytes_mut().is_some(),
            "nothing held between segments"
        );
        m.write(stag, pd, addr + 2, b"cd", w).unwrap();
        let mut out = Vec::new();
        m.read_append(stag, pd, addr, 4, Access::REMOTE_READ, &mut out)
            .unwrap();
        assert!(mr.try_bytes_mut().is_some(), "nothing held between ULPDUs");
        assert_eq!(out, b"abcd");
        // A region looked up a moment ago is still checked in full, in RFC 5041 §7.1's order.
        let other = m.alloc_pd();
        assert_eq!(
            e(m.write(stag, other, addr, b"x", w)),
            MemoryError::PdMismatch
        );
        let ro = m.register(pd, 8, Access::REMOTE_READ);
        m.read_append(ro.stag(), pd, ro.addr(), 1, Access::REMOTE_READ, &mut out)
            .unwrap();
        assert_eq!(
            e(m.write(ro.stag(), pd, ro.addr(), b"x", w)),
            MemoryError::Access
        );
        assert_eq!(
            e(m.read_append(ro.stag(), pd, ro.addr() + 7, 2, Access(0), &mut out)),
            MemoryError::Bounds
        );
        assert!(m.deregister(stag));
        let v = mr.into_bytes().expect("no engine holds the region");
        assert_eq!(&v[..4], b"abcd");

        // Between two segments of one message: invalidated, then deregistered.
        for deregister in [false, true] {
            let mr = m.register(pd, 64, RW);
            let (stag, addr) = (mr.stag(), mr.addr());
            m.write(stag, pd, addr, b"ab", w).unwrap();
            let want = if deregister {
                assert!(m.deregister(stag));
                MemoryError::InvalidStag
            } else {
                m.invalidate(stag, pd).unwrap();
                MemoryError::Invalidated
            };
            assert_eq!(m.write(stag, pd, addr + 2, b"cd", w), Err(want));
            let mut out = Vec::new();
            assert_eq!(
                m.read_append(stag, pd, addr, 2, Access(0), &mut out),
                Err(want)
            );
            assert!(out.is_empty());
            assert_eq!(
                &mr.to_vec()[..4],
                b"ab\0\0",
                "nothing of the refused segment placed"
            );
        }
    }

    /// `Mr::into_bytes` hands over the very buffer the region placed into (no copy), and only
    /// once nothing else holds the region.
    #[test]
    fn into_bytes_takes_the_region_buffer_without_a_copy() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mr = m.register(pd, 4096, Access::LOCAL_WRITE);
        mr.write_at(100, b"placed");
        let addr = mr.addr();
        let other = mr.clone();
        let mr = mr.into_bytes().expect_err("a second handle exists");
        drop(other);
        let mr = mr.into_bytes().expect_err("still registered");
        assert!(m.deregister(mr.stag()));
        let v = mr.into_bytes().expect("last handle, deregistered");
        assert_eq!(v.as_ptr() as u64, addr, "the same buffer");
        assert_eq!(&v[100..106], b"placed");
    }

    const RW: Access = Access(7);

    /// A check of a region this thread looked up lately is answered from its cached checks
    /// (no reference count touched): it still sees an invalidation, a deregistration and
    /// every other check at once, the same STag in another table is not this table's, and the
    /// cached checks keep no byte: `Mr::into_bytes` still hands the buffer over.
    #[test]
    fn checks_from_recent_lookups_follow_the_region() {
        let m = MemoryTable::new();
        let (pd, pd2) = (m.alloc_pd(), m.alloc_pd());
        let mr = m.register(pd, 64, Access::LOCAL_WRITE);
        let (stag, addr) = (mr.stag(), mr.addr());
        m.write(stag, pd, addr, b"x", Access::LOCAL_WRITE).unwrap();
        let id = m.inner.id;
        let cached = |m: &MemoryTable| {
            RECENT.with(|c| c.borrow().with_checks(m.inner.id, stag, |_| ()).is_some())
        };
        assert!(
            cached(&m),
            "the write's lookup left the checks in this thread's cache"
        );
        assert_eq!(m.check(stag, pd, addr, 64, Access::LOCAL_WRITE), Ok(()));
        assert_eq!(
            m.check(stag, pd2, addr, 1, Access(0)),
            Err(MemoryError::PdMismatch)
        );
        assert_eq!(m.check(stag, pd, addr, 1, RW), Err(MemoryError::Access));
        assert_eq!(
            m.check(stag, pd, addr + 1, 64, Access(0)),
            Err(MemoryError::Bounds)
        );
        assert_eq!(
            m.check(stag, pd, addr.wrapping_sub(1), 1, Access(0)),
            Err(MemoryError::Bounds)
        );
        assert_eq!(
            m.check(stag ^ 1, pd, addr, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
        let other = MemoryTable::new();
        assert_ne!(other.inner.id, id);
        assert_eq!(
            other.check(stag, pd, addr, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
        m.invalidate(stag, pd).unwrap();
        assert!(cached(&m));
        assert_eq!(
            m.check(stag, pd, addr, 1, Access(0)),
            Err(MemoryError::Invalidated)
        );
        assert!(m.deregister(stag));
        assert_eq!(
            m.check(stag, pd, addr, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
        assert!(
            !cached(&m),
            "a deregistered region's checks are not answered"
        );
        let v = mr.into_bytes().expect("the cached checks hold no byte");
        assert_eq!(v[0], b'x');
    }

    /// A thread's recent lookups never outlive the registration: after `deregister` the STag
    /// is invalid at once, though this thread looked it up just before; the same STag value in
    /// another table is that table's business; and a looked-up region still hands its bytes
    /// over unshared (the recent entries do not hold it).
    #[test]
    fn recent_lookups_follow_the_table() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mr = m.register(pd, 64, RW);
        for _ in 0..3 {
            m.write(mr.stag(), pd, mr.addr(), b"x", RW).unwrap();
        }
        assert!(m.get(mr.stag()).is_some());
        let other = MemoryTable::new();
        assert!(other.get(mr.stag()).is_none(), "another table's STag");
        assert!(m.deregister(mr.stag()));
        assert_eq!(
            m.write(mr.stag(), pd, mr.addr(), b"x", RW),
            Err(MemoryError::InvalidStag)
        );
        assert!(m.get(mr.stag()).is_none());
        let v = mr.into_bytes().expect("no handle kept by the lookups");
        assert_eq!(v[0], b'x');
        // Many regions through the few recent slots: every one is found, each its own.
        let mrs: Vec<Mr> = (0..2 * RECENT_SLOTS)
            .map(|_| m.register(pd, 8, RW))
            .collect();
        for _ in 0..2 {
            for (i, r) in mrs.iter().enumerate() {
                m.write(r.stag(), pd, r.addr(), &[i as u8], RW).unwrap();
            }
        }
        for (i, r) in mrs.iter().enumerate() {
            assert_eq!(r.to_vec()[0], i as u8);
        }
    }

    /// One memory registered in two PDs: each registration checks its own PD, both place into
    /// and gather from the same bytes, and the memory outlives both registrations.
    #[test]
    fn shared_memory_in_two_pds_is_one_buffer() {
        let m = MemoryTable::new();
        let (a, b) = (m.alloc_pd(), m.alloc_pd());
        let mem = SharedMem::new(64);
        let ra = m.register_shared(a, &mem, RW);
        let rb = m.register_shared(b, &mem, RW);
        assert_ne!(ra.stag(), rb.stag());
        assert_eq!(ra.addr(), mem.addr());
        assert_eq!(rb.addr(), mem.addr());
        assert_eq!(
            m.check(ra.stag(), b, ra.addr(), 1, RW),
            Err(MemoryError::PdMismatch),
            "a registration is only valid in its own PD"
        );
        m.write(ra.stag(), a, ra.addr() + 8, b"abc", RW).unwrap();
        let mut out = Vec::new();
        m.read_append(rb.stag(), b, rb.addr() + 8, 3, RW, &mut out)
            .unwrap();
        assert_eq!(out, b"abc");
        assert_eq!(&mem.bytes()[8..11], b"abc");
        assert!(m.deregister(ra.stag()));
        let ra = ra.into_bytes().expect_err("the memory is still shared");
        assert_eq!(ra.addr(), mem.addr());
        assert!(m.deregister(rb.stag()));
        drop((ra, rb));
        assert_eq!(
            &mem.bytes()[8..11],
            b"abc",
            "the memory outlives its regions"
        );
        assert_eq!(mem, mem.clone());
        assert_ne!(mem, SharedMem::new(64));
    }

    /// A window over part of a memory: its STag reaches the window's bytes and no other (at
    /// either edge, by every path the engine takes), local access sees the window, and the
    /// bytes stay the memory's.
    #[test]
    fn a_window_reaches_only_its_own_bytes() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mem = SharedMem::from_vec((0..=255u8).collect());
        let w = m.register_shared_range(pd, &mem, 100, 50, RW);
        assert_eq!(
            w.addr(),
            mem.addr() + 100,
            "the address of the window's first byte"
        );
        assert_eq!(w.len(), 50);
        assert_eq!(&w.bytes()[..], &mem.bytes()[100..150]);
        let mut out = Vec::new();
        m.read_append(w.stag(), pd, w.addr(), 50, RW, &mut out)
            .unwrap();
        assert_eq!(out, (100..150u8).collect::<Vec<_>>());
        // One octet before the window, one past its end, and a range across its end.
        for (addr, len) in [(w.addr() - 1, 1), (w.addr() + 50, 1), (w.addr() + 40, 11)] {
            assert_eq!(
                m.check(w.stag(), pd, addr, len, RW),
                Err(MemoryError::Bounds),
                "{len} octets at window + {}",
                addr as i64 - w.addr() as i64
            );
            let mut out = Vec::new();
            assert_eq!(
                m.read_append(w.stag(), pd, addr, len, RW, &mut out),
                Err(MemoryError::Bounds)
            );
            assert_eq!(
                m.write(w.stag(), pd, addr, &vec![0xee; len], RW),
                Err(MemoryError::Bounds)
            );
        }
        let mut out = Vec::new();
        m.read_append(w.stag(), pd, w.addr() + 49, 1, RW, &mut out)
            .unwrap();
        m.write(w.stag(), pd, w.addr() + 48, b"xy", RW).unwrap();
        assert_eq!(
            m.write(w.stag(), pd, w.addr() + 49, b"yz", RW),
            Err(MemoryError::Bounds)
        );
        assert!(mem.bytes()[..148]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == i as u8));
        assert_eq!(&mem.bytes()[148..151], &[b'x', b'y', 150]);
        w.write_at(0, b"local");
        assert_eq!(&mem.bytes()[100..105], b"local");
        let mut five = [0u8; 5];
        w.read_at(0, &mut five);
        assert_eq!(&five, b"local");
        assert_eq!(w.to_vec().len(), 50);
        assert!(m.deregister(w.stag()));
        drop(mem);
        let w = w
            .into_bytes()
            .expect_err("a window never hands over the whole memory");
        assert_eq!(w.bytes()[0], b'l');
    }

    #[test]
    #[should_panic(expected = "window beyond the memory")]
    fn a_window_beyond_its_memory_is_refused() {
        let m = MemoryTable::new();
        let mem = SharedMem::new(64);
        m.register_shared_range(m.alloc_pd(), &mem, 60, 5, RW);
    }

    #[test]
    fn bytes_mut_is_the_registered_buffer_in_place() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let data = vec![0u8; 4096];
        let ptr = data.as_ptr();
        let mr = m.register_bytes(pd, data, Access::LOCAL_WRITE | Access::REMOTE_READ);
        {
            let mut b = mr.bytes_mut();
            assert_eq!(b.as_ptr(), ptr, "the application's own buffer, not a copy");
            b[100..104].copy_from_slice(b"disk");
        }
        assert_eq!(mr.bytes().as_ptr(), ptr);
        // What the engine gathers for a Write/Read Response is what was written in place.
        let mut out = Vec::new();
        m.read_append(
            mr.stag(),
            pd,
            mr.addr() + 100,
            4,
            Access::REMOTE_READ,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"disk");
    }

    #[test]
    fn register_bytes_takes_the_data_without_copying() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let data: Vec<u8> = (0..1000).map(|i| i as u8).collect();
        let ptr = data.as_ptr() as u64;
        let mr = m.register_bytes(pd, data, Access::LOCAL_WRITE);
        assert_eq!(mr.addr(), ptr, "the region is the caller's buffer");
        assert_eq!(mr.len(), 1000);
        assert_eq!(mr.to_vec(), (0..1000).map(|i| i as u8).collect::<Vec<_>>());
        let mut out = Vec::new();
        m.read_append(mr.stag(), pd, ptr + 10, 5, Access(0), &mut out)
            .unwrap();
        assert_eq!(out, [10, 11, 12, 13, 14]);
        assert_eq!(
            m.check(mr.stag(), pd, ptr + 996, 5, Access(0)),
            Err(MemoryError::Bounds)
        );
    }

    #[test]
    fn rfc5040_s5_2_check_order_and_bounds() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        let mr = m.register(pd, 100, Access::LOCAL_WRITE | Access::REMOTE_READ);
        let a = mr.addr();
        assert_eq!(m.check(mr.stag(), pd, a, 100, Access::REMOTE_READ), Ok(()));
        assert_eq!(
            m.check(mr.stag() ^ 1, pd, a, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
        assert_eq!(
            m.check(mr.stag() + 0x100, pd, a, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
        // PD is checked before rights, rights before bounds.
        assert_eq!(
            m.check(mr.stag(), other, a + 1000, 1, RW),
            Err(MemoryError::PdMismatch)
        );
        assert_eq!(
            m.check(mr.stag(), pd, a + 1000, 1, RW),
            Err(MemoryError::Access)
        );
        assert_eq!(
            m.check(mr.stag(), pd, a + 1, 100, Access(0)),
            Err(MemoryError::Bounds)
        );
        assert_eq!(
            m.check(mr.stag(), pd, a - 1, 1, Access(0)),
            Err(MemoryError::Bounds)
        );
        assert_eq!(
            m.check(mr.stag(), pd, u64::MAX, usize::MAX, Access(0)),
            Err(MemoryError::Bounds)
        );
        assert_eq!(m.check(mr.stag(), pd, a + 100, 0, Access(0)), Ok(()));
        m.invalidate(mr.stag(), pd).unwrap();
        assert_eq!(
            m.check(mr.stag(), pd, a, 1, Access(0)),
            Err(MemoryError::Invalidated)
        );
        assert!(m.deregister(mr.stag()));
        assert_eq!(
            m.check(mr.stag(), pd, a, 1, Access(0)),
            Err(MemoryError::InvalidStag)
        );
    }

    #[test]
    fn rfc5040_s5_2_failed_write_moves_nothing() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mr = m.register(pd, 8, RW);
        assert!(m.write(mr.stag(), pd, mr.addr() + 4, &[1; 5], RW).is_err());
        assert_eq!(mr.to_vec(), vec![0; 8]);
        m.write(mr.stag(), pd, mr.addr() + 4, &[1; 4], RW).unwrap();
        assert_eq!(mr.to_vec(), vec![0, 0, 0, 0, 1, 1, 1, 1]);
        let mut out = [0u8; 2];
        m.read(mr.stag(), pd, mr.addr() + 3, &mut out, RW).unwrap();
        assert_eq!(out, [0, 1]);
    }

    #[test]
    fn rfc5042_invalidate_requires_same_pd() {
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mr = m.register(pd, 8, RW);
        assert_eq!(
            m.invalidate(mr.stag(), m.alloc_pd()),
            Err(MemoryError::PdMismatch)
        );
        assert!(!mr.is_invalidated());
    }

    #[test]
    fn table_is_send_sync_and_quarantines_freed_indices() {
        fn ss<T: Send + Sync>() {}
        ss::<MemoryTable>();
        ss::<Mr>();
        let m = MemoryTable::new();
        let pd = m.alloc_pd();
        let a = m.register(pd, 1, RW);
        assert!(a.stag() >> 8 >= 1);
        let first = a.stag() >> 8;
        assert!(m.deregister(a.stag()));
        assert!(m.get(a.stag()).is_none());
        // RFC 5040 §8.1.1: a peer may still hold the old STag; its index is not drawn again
        // while it is among the last STAG_QUARANTINE freed.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let b = m.register(pd, 1, RW);
            assert_ne!(b.stag() >> 8, first);
            assert!(seen.insert(b.stag() >> 8), "index reused while quarantined");
            assert!(m.get(b.stag()).is_some());
            assert!(m.deregister(b.stag()));
        }
        assert!(m.table().quarantine.len() <= STAG_QUARANTINE);
    }

    #[test]
    fn quarantine_is_bounded_and_a_full_table_still_draws() {
        let mut t = Table {
            regions: IndexMap::default(),
            quarantine: VecDeque::new(),
            quarantined: IndexSet::default(),
        };
        for i in 1..=(STAG_QUARANTINE as u32 + 10) {
            t.release(i);
        }
        assert_eq!(t.quarantine.len(), STAG_QUARANTINE);
        assert_eq!(t.quarantined.len(), STAG_QUARANTINE);
        // The oldest ten left the quarantine.
        assert!(t.free(1) && t.free(10) && !t.free(11));
        let i = t.draw_index();
        assert!(t.free(i) && (1..=MAX_INDEX).contains(&i));
    }
}
