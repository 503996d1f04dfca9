//! dpwarp's own DPDK FFI and safe wrappers (DPDK 22.11 LTS, linked dynamically).
//!
//! `build.rs` compiles `csrc/shim.c` (the static-inline fast path and port setup) and generates
//! bindings for `csrc/shim.h` only. This module is the only place with `unsafe` (the crate root
//! denies it everywhere else); every block says why it is sound.
//!
//! Resource model (see docs/dataplane.md):
//! - [`Eal`]: one per process. `rte_eal_init` fails with EALREADY on a second call, even after
//!   `rte_eal_cleanup`, so [`Eal::init`] succeeds once and later calls return an error.
//! - [`Mempool`]: created once and kept for the life of the process (`&'static`): ports and
//!   in-flight mbufs point into it, and the EAL itself cannot be torn down and re-created.
//! - [`Mbuf`]: owned packet buffer; dropping it returns it to its pool (no leaks).
//! - [`Port`]: an ethdev port (a vdev such as `net_ring`, `net_memif`, `net_tap`): setup and
//!   counters. It is `Copy`; receiving and sending go through a [`Queue`], the one handle of a
//!   queue pair ([`Port::claim_queue`]), which is not `Copy`/`Clone`/`Sync`, so one thread per
//!   queue is the type's rule, not a convention.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::NonNull;
use std::sync::OnceLock;

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/dpdk_bindings.rs"));
}

/// The DPDK version this crate was built against (from pkg-config).
pub const DPDK_VERSION: &str = env!("DPWARP_DPDK_VERSION");

/// RTE_ETH_TX_OFFLOAD_* and RTE_ETH_RX_OFFLOAD_* bits (rte_ethdev.h, DPDK 22.11).
pub mod offload {
    /// `RTE_ETH_TX_OFFLOAD_IPV4_CKSUM`: the NIC computes the IPv4 header checksum.
    pub const TX_IPV4_CKSUM: u64 = 1 << 1;
    /// `RTE_ETH_TX_OFFLOAD_UDP_CKSUM`: the NIC computes UDP checksums.
    pub const TX_UDP_CKSUM: u64 = 1 << 2;
    /// `RTE_ETH_TX_OFFLOAD_TCP_CKSUM`: the NIC computes TCP checksums.
    pub const TX_TCP_CKSUM: u64 = 1 << 3;
    /// `RTE_ETH_TX_OFFLOAD_TCP_TSO`: the NIC cuts a TCP packet larger than the MSS into
    /// segments (`RTE_MBUF_F_TX_TCP_SEG`).
    pub const TX_TCP_TSO: u64 = 1 << 5;
    /// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`: the driver accepts chained (multi-segment) mbufs.
    pub const TX_MULTI_SEGS: u64 = 1 << 15;
    /// `RTE_ETH_RX_OFFLOAD_IPV4_CKSUM`: the NIC verifies IPv4 header checksums on rx.
    pub const RX_IPV4_CKSUM: u64 = 1 << 1;
    /// `RTE_ETH_RX_OFFLOAD_UDP_CKSUM`: the NIC verifies UDP checksums on rx.
    pub const RX_UDP_CKSUM: u64 = 1 << 2;
    /// `RTE_ETH_RX_OFFLOAD_TCP_CKSUM`: the NIC verifies TCP checksums on rx.
    pub const RX_TCP_CKSUM: u64 = 1 << 3;

    /// The names of the `RTE_ETH_RX_OFFLOAD_*` bits in `bits` as DPDK spells them
    /// (`rte_eth_dev_rx_offload_name`), lower case, comma separated: e.g.
    /// `ipv4_cksum,tcp_cksum,scatter`; `none` for 0.
    pub fn rx_names(bits: u64) -> String {
        names(bits, |b| super::offload_name(false, b))
    }

    /// [`rx_names`] of `RTE_ETH_TX_OFFLOAD_*` bits (`rte_eth_dev_tx_offload_name`), e.g.
    /// `ipv4_cksum,tcp_cksum,tcp_tso,multi_segs`.
    pub fn tx_names(bits: u64) -> String {
        names(bits, |b| super::offload_name(true, b))
    }

    /// The `RTE_ETH_RSS_*` hash functions in `hf` (rte_ethdev.h, DPDK 22.11: ethdev has no
    /// name function for them), lower case: e.g. `ipv4,nonfrag_ipv4_tcp`; `none` for 0.
    pub fn rss_names(hf: u64) -> String {
        const RSS: [(u32, &str); 46] = [
            (2, "ipv4"),
            (3, "frag_ipv4"),
            (4, "nonfrag_ipv4_tcp"),
            (5, "nonfrag_ipv4_udp"),
            (6, "nonfrag_ipv4_sctp"),
            (7, "nonfrag_ipv4_other"),
            (8, "ipv6"),
            (9, "frag_ipv6"),
            (10, "nonfrag_ipv6_tcp"),
            (11, "nonfrag_ipv6_udp"),
            (12, "nonfrag_ipv6_sctp"),
            (13, "nonfrag_ipv6_other"),
            (14, "l2_payload"),
            (15, "ipv6_ex"),
            (16, "ipv6_tcp_ex"),
            (17, "ipv6_udp_ex"),
            (18, "port"),
            (19, "vxlan"),
            (20, "geneve"),
            (21, "nvgre"),
            (23, "gtpu"),
            (24, "eth"),
            (25, "s_vlan"),
            (26, "c_vlan"),
            (27, "esp"),
            (28, "ah"),
            (29, "l2tpv3"),
            (30, "pfcp"),
            (31, "pppoe"),
            (32, "ecpri"),
            (33, "mpls"),
            (34, "ipv4_chksum"),
            (35, "l4_chksum"),
            (36, "l2tpv2"),
            (52, "l3_pre96"),
            (53, "l3_pre64"),
            (54, "l3_pre56"),
            (55, "l3_pre48"),
            (56, "l3_pre40"),
            (57, "l3_pre32"),
            (58, "l2_dst_only"),
            (59, "l2_src_only"),
            (60, "l4_dst_only"),
            (61, "l4_src_only"),
            (62, "l3_dst_only"),
            (63, "l3_src_only"),
        ];
        names(hf, |b| {
            RSS.iter()
                .find(|(n, _)| 1u64 << n == b)
                .map(|(_, s)| s.to_string())
        })
    }

    /// Every set bit of `bits` by `name` (or `bitN` where it has none), in bit order.
    fn names(bits: u64, name: impl Fn(u64) -> Option<String>) -> String {
        let v: Vec<String> = (0..64)
            .map(|n| 1u64 << n)
            .filter(|b| bits & b != 0)
            .map(|b| name(b).unwrap_or_else(|| format!("bit{}", b.trailing_zeros())))
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }

    /// The names of the checksum bits in `capa` (for logs and errors), e.g. `ipv4,tcp`.
    pub fn cksum_names(capa: u64) -> String {
        let mut v = Vec::new();
        for (bit, name) in [(1u64 << 1, "ipv4"), (1 << 2, "udp"), (1 << 3, "tcp")] {
            if capa & bit != 0 {
                v.push(name);
            }
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

/// A DPDK call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// What was being done.
    pub what: String,
    /// The (positive) errno, when DPDK gave one; 0 when it did not (rte_errno may stay 0).
    pub errno: i32,
}

impl DpdkError {
    fn new(what: impl Into<String>, rc: i32) -> Self {
        DpdkError {
            what: what.into(),
            errno: rc.abs(),
        }
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.errno == 0 {
            return write!(f, "{} failed", self.what);
        }
        // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated
        // string for any errno value.
        let msg = unsafe { CStr::from_ptr(sys::dpw_strerror(self.errno)) };
        write!(
            f,
            "{} failed: {} (errno {})",
            self.what,
            msg.to_string_lossy(),
            self.errno
        )
    }
}

impl std::error::Error for DpdkError {}

/// DPDK's name of one `RTE_ETH_{RX,TX}_OFFLOAD_*` bit, lower case; None where DPDK has none
/// (it answers "UNKNOWN").
fn offload_name(tx: bool, bit: u64) -> Option<String> {
    // SAFETY: rte_eth_dev_{rx,tx}_offload_name return a pointer to a static NUL-terminated
    // string for any value (no EAL state is read).
    let s = unsafe { CStr::from_ptr(sys::dpw_offload_name(tx.into(), bit)) };
    let s = s.to_string_lossy();
    (s != "UNKNOWN").then(|| s.to_ascii_lowercase())
}

fn rte_errno() -> i32 {
    // SAFETY: reads the calling thread's rte_errno TLS variable.
    unsafe { sys::dpw_errno() }
}

fn check(what: &str, rc: i32) -> Result<(), DpdkError> {
    if rc < 0 {
        Err(DpdkError::new(what, rc))
    } else {
        Ok(())
    }
}

/// The initialised Environment Abstraction Layer (one per process).
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
    cpus: Vec<usize>,
}

pub use crate::affinity::{set_thread_cpus, thread_cpus};

mod zc;
pub use zc::TxPins;

/// The calling thread's DPDK lcore id, None for a thread DPDK does not know (`LCORE_ID_ANY`).
pub fn lcore_id() -> Option<u32> {
    // SAFETY: rte_lcore_id reads a thread-local set by EAL/rte_thread_register; it is valid on
    // any thread, before and after EAL init (UINT32_MAX for unknown threads).
    let id = unsafe { sys::dpw_lcore_id() };
    (id != u32::MAX).then_some(id)
}

/// The CPU the calling thread runs on now (`sched_getcpu`; 0 if it cannot be read). Through
/// glibc rather than rustix, whose vDSO lookup faults under valgrind (benches/path_instructions
/// runs the dataplane under callgrind).
pub fn current_cpu() -> usize {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let c = unsafe { sys::dpw_current_cpu() };
    usize::try_from(c).unwrap_or(0)
}

/// Give the calling thread an lcore id (`rte_thread_register`) unless it has one, so that
/// per-lcore mempool caches serve its mbuf allocations instead of the shared ring (a thread
/// without an lcore id goes to the ring for every mbuf). Returns the lcore id, or None when
/// DPDK has none left (RTE_MAX_LCORE) or the EAL is not initialised.
pub fn register_thread() -> Option<u32> {
    if let Some(id) = lcore_id() {
        return Some(id);
    }
    Eal::get()?;
    // SAFETY: the EAL is initialised (checked above); rte_thread_register only touches the
    // calling thread's TLS and EAL's lcore table under its own lock.
    let rc = unsafe { sys::dpw_thread_register() };
    if rc != 0 {
        log::warn!(
            "dpdk: rte_thread_register failed ({}): mbufs of this thread bypass the mempool cache",
            rte_errno()
        );
        return None;
    }
    lcore_id()
}

static EAL: OnceLock<Result<Eal, DpdkError>> = OnceLock::new();

impl Eal {
    /// Initialise the EAL with `args` (without the program name), once per process. Every later
    /// call returns the first call's outcome if the arguments are the same, and an error if they
    /// differ (the EAL cannot be re-initialised, DPDK 22.11).
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<&'static Eal, DpdkError> {
        let args: Vec<String> = args.iter().map(|s| s.as_ref().to_string()).collect();
        let r = EAL.get_or_init(|| Self::do_init(&args));
        match r {
            Ok(e) if e.args == args => Ok(e),
            Ok(e) => Err(DpdkError {
                what: format!(
                    "EAL already initialised in this process with {:?}; cannot re-init with {:?}",
                    e.args, args
                ),
                errno: libc::EALREADY,
            }),
            Err(e) => Err(e.clone()),
        }
    }

    /// The EAL if it was initialised successfully.
    pub fn get() -> Option<&'static Eal> {
        EAL.get().and_then(|r| r.as_ref().ok())
    }

    fn do_init(args: &[String]) -> Result<Eal, DpdkError> {
        let mut owned = vec![CString::new("dpwarp").expect("no NUL")];
        for a in args {
            owned.push(CString::new(a.as_str()).map_err(|_| DpdkError {
                what: format!("EAL argument {a:?} contains NUL"),
                errno: libc::EINVAL,
            })?);
        }
        // EAL keeps pointers into argv (e.g. for --vdev strings): leak them for the process.
        let owned: &'static [CString] = Box::leak(owned.into_boxed_slice());
        let argv: &'static mut [*mut libc::c_char] = Box::leak(
            owned
                .iter()
                .map(|c| c.as_ptr() as *mut libc::c_char)
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        log::info!("dpdk: EAL init (DPDK {DPDK_VERSION}) with {args:?}");
        // rte_eal_init pins the calling thread to the main lcore (`-l 0`: CPU 0), and every
        // thread spawned from it afterwards would inherit that one CPU. Remember the mask the
        // process was given and put it back: placement is decided per thread (workers are
        // pinned one per core by the dataplane, application threads keep the process mask).
        let cpus = thread_cpus();
        // SAFETY: argv holds argc valid NUL-terminated strings plus a NULL terminator, all
        // leaked so they outlive the EAL; OnceLock makes this the only call in the process.
        let rc = unsafe { sys::rte_eal_init(owned.len() as i32, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(DpdkError {
                what: format!("rte_eal_init({args:?})"),
                errno: rte_errno(),
            });
        }
        if !cpus.is_empty() {
            if let Err(e) = set_thread_cpus(&cpus) {
                log::warn!(
                    "dpdk: could not restore the thread's CPUs {cpus:?} after EAL init: {e}"
                );
            }
        }
        log::debug!("dpdk: process CPUs {cpus:?}; main lcore {:?}", lcore_id());
        Ok(Eal {
            args: args.to_vec(),
            cpus,
        })
    }

    /// The CPUs the initialising thread was allowed to run on before `rte_eal_init` pinned it
    /// (the process's mask: what workers and application threads are placed on).
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The arguments the EAL was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }
}

/// An mbuf pool (`rte_pktmbuf_pool_create`); lives for the rest of the process.
pub struct Mempool {
    ptr: NonNull<sys::rte_mempool>,
    data_room: u16,
    name: String,
}

// SAFETY: DPDK mempools are multi-producer/multi-consumer safe (ring ops with per-lcore caches;
// non-EAL threads use the shared ring), so the handle may be used from any thread.
unsafe impl Send for Mempool {}
// SAFETY: see Send: all operations through the handle are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Create a pool of `n` mbufs with `data_room` bytes each (headroom included).
    pub fn create(
        _eal: &Eal,
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<&'static Mempool, DpdkError> {
        let cname = CString::new(name).map_err(|_| DpdkError::new("pool name", libc::EINVAL))?;
        // SAFETY: cname is a valid C string for the duration of the call; the EAL is initialised
        // (the &Eal proves it).
        let p = unsafe { sys::dpw_pool_create(cname.as_ptr(), n, cache, data_room, -1) };
        let ptr = NonNull::new(p).ok_or_else(|| DpdkError {
            what: format!(
                "rte_pktmbuf_pool_create({name}, n={n}, data_room={data_room}): about {} MiB; \
                 with a large mtu lower the port's `mbufs` or give the EAL more memory (-m)",
                (u64::from(n) * (u64::from(data_room) + 192)) >> 20
            ),
            errno: rte_errno(),
        })?;
        Ok(Box::leak(Box::new(Mempool {
            ptr,
            data_room,
            name: name.to_string(),
        })))
    }

    /// Allocate one mbuf (None when the pool is empty).
    #[inline]
    pub fn alloc(&'static self) -> Option<Mbuf> {
        // SAFETY: the pool pointer is valid for the process lifetime.
        let m = unsafe { sys::dpw_pktmbuf_alloc(self.ptr.as_ptr()) };
        NonNull::new(m).map(|ptr| Mbuf { ptr })
    }

    /// Mbufs for transmit taken ahead of use (see [`MbufStash`]).
    pub fn stash(&'static self) -> MbufStash {
        // SAFETY: valid pool pointer; a plain computation from the pool's private data.
        let data_offset = unsafe { sys::dpw_pool_data_offset(self.ptr.as_ptr()) } as usize;
        MbufStash {
            pool: self,
            ready: std::collections::VecDeque::with_capacity(2 * STASH_BATCH),
            data_offset,
        }
    }

    /// Free mbufs in the pool.
    pub fn available(&self) -> u32 {
        // SAFETY: valid pool pointer.
        unsafe { sys::dpw_pool_avail(self.ptr.as_ptr()) }
    }

    /// Bytes of data room per mbuf (including RTE_PKTMBUF_HEADROOM).
    pub fn data_room(&self) -> u16 {
        self.data_room
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Mbufs taken in a batch at least [`STASH_BATCH`] ahead of their use.
const STASH_BATCH: usize = 32;

/// Mbufs taken from a pool ahead of use, each with its header lines and the lines its frame's
/// headers go to already asked for (`prefetchw`). A transmitting worker writes every mbuf it
/// allocates, and on `net_ring` (or any PMD freeing on another core) each one was last
/// written by the other core: allocated one at a time, every frame waited for those lines in
/// turn (about 10 % of the transmitting thread at MTU 1500); asked for a batch ahead, they
/// arrive together while earlier frames are built.
pub struct MbufStash {
    pool: &'static Mempool,
    /// Taken from the pool, not yet reset (`rte_mbuf_raw_alloc` state: direct, refcnt 1,
    /// one segment), in the order their lines were asked for.
    ready: std::collections::VecDeque<Mbuf>,
    data_offset: usize,
}

impl MbufStash {
    /// One mbuf as [`Mempool::alloc`] gives it (None when the pool is empty).
    #[inline]
    pub fn take(&mut self) -> Option<Mbuf> {
        if self.ready.len() <= STASH_BATCH {
            self.refill();
        }
        let Some(m) = self.ready.pop_front() else {
            return self.pool.alloc();
        };
        // SAFETY: `m` is ours, fresh from the pool (raw state); the reset makes it what
        // rte_pktmbuf_alloc returns.
        unsafe { sys::dpw_pktmbuf_reset(m.ptr.as_ptr()) };
        Some(m)
    }

    /// Mbufs taken from the pool and not handed out yet.
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Nothing taken ahead (yet).
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    fn refill(&mut self) {
        let mut raw = [std::ptr::null_mut::<sys::rte_mbuf>(); STASH_BATCH];
        // SAFETY: valid pool pointer; `raw` has room for STASH_BATCH pointers, all written on
        // success (0), none taken otherwise.
        let rc = unsafe {
            sys::dpw_mbuf_raw_alloc_bulk(
                self.pool.ptr.as_ptr(),
                raw.as_mut_ptr(),
                STASH_BATCH as u32,
            )
        };
        if rc != 0 {
            return;
        }
        for p in raw {
            let Some(ptr) = NonNull::new(p) else { continue };
            let b = p as *const u8;
            crate::rdma::memory::prefetch_line_for_write(b);
            crate::rdma::memory::prefetch_line_for_write(b.wrapping_add(64));
            crate::rdma::memory::prefetch_line_for_write(b.wrapping_add(self.data_offset));
            // Owned from here: dropping it frees it back (a raw mbuf is a valid one to free).
            self.ready.push_back(Mbuf { ptr });
        }
    }
}

/// An owned packet buffer; freed to its pool on drop.
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<sys::rte_mbuf>,
}

// SAFETY: an Mbuf is exclusively owned; freeing it from another thread is allowed by DPDK.
unsafe impl Send for Mbuf {}

/// Where struct rte_mbuf's per-frame fields lie (`dpw_mbuf_layout`, offsetof in the shim,
/// compiled against this DPDK): they are read inline, not through a shim call per field and
/// frame (those calls were 3-5 % of a receiving worker at MTU 1500).
#[inline(always)]
fn mbuf_layout() -> &'static sys::dpw_mbuf_layout {
    // SAFETY: an immutable C object, initialised at load time and never written.
    unsafe { &sys::dpw_mbuf_layout }
}

/// The field of `m` at `off` octets (an offset from [`mbuf_layout`]).
///
/// # Safety
/// `m` must point at a live rte_mbuf and `off` be the offset of a field of type `T` in it.
#[inline(always)]
unsafe fn mbuf_field<T: Copy>(m: *const sys::rte_mbuf, off: u16) -> T {
    // SAFETY: per the contract, the read stays inside the mbuf's header and has the field's
    // type; unaligned reads are fine for any offset.
    unsafe {
        (m as *const u8)
            .add(usize::from(off))
            .cast::<T>()
            .read_unaligned()
    }
}

/// `rte_pktmbuf_mtod` and `data_len` of `m`: where its data starts and how long it is.
///
/// # Safety
/// `m` must point at a live rte_mbuf.
#[inline(always)]
unsafe fn mbuf_data(m: *const sys::rte_mbuf) -> (*mut u8, usize) {
    let l = mbuf_layout();
    // SAFETY: per the contract; buf_addr is a pointer, data_off and data_len u16 fields.
    unsafe {
        let buf: *mut u8 = mbuf_field(m, l.buf_addr);
        let off: u16 = mbuf_field(m, l.data_off);
        let len: u16 = mbuf_field(m, l.data_len);
        (buf.add(usize::from(off)), usize::from(len))
    }
}

impl Mbuf {
    /// The packet's first segment data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: buf_addr + data_off points at data_len initialised bytes inside the mbuf
        // we own (rte_pktmbuf_mtod).
        unsafe {
            let (p, len) = mbuf_data(self.ptr.as_ptr());
            std::slice::from_raw_parts(p, len)
        }
    }

    /// Mutable view of the first segment's data.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `data`, and we hold the only reference.
        unsafe {
            let (p, len) = mbuf_data(self.ptr.as_ptr());
            std::slice::from_raw_parts_mut(p, len)
        }
    }

    /// The data of the second segment of a two-segment packet (None otherwise).
    ///
    /// It also asks for the line that freeing the packet will wait for (a hint, no wait):
    /// freeing a segment with an external buffer (what transmit by reference sends, `zc.rs`;
    /// on net_ring the receiving worker frees the sender's frames) detaches it, and
    /// `rte_pktmbuf_detach` reads the mbuf's IOVA from its mempool object header, in the 24
    /// octets before the mbuf: a line nothing else touches, so out of every cache by then.
    /// On net_ring at MTU 1500 that one load was 83 % of `dpw_pktmbuf_free` and 17 % of the
    /// receiving worker's time (`perf annotate`); asked for here, when the frame goes to
    /// smoltcp, it arrives while the deframer checks the CRC and places the payload.
    #[inline]
    pub fn second_segment(&self) -> Option<&[u8]> {
        if self.nb_segs() != 2 {
            return None;
        }
        // SAFETY: a two-segment packet we own: `next` is a valid mbuf of the chain (freed
        // with it), whose mtod points at data_len initialised bytes.
        unsafe {
            let n: *const sys::rte_mbuf = mbuf_field(self.ptr.as_ptr(), mbuf_layout().next);
            if n.is_null() {
                return None;
            }
            crate::rdma::memory::prefetch_line_for_read((n as *const u8).wrapping_sub(8));
            let (p, len) = mbuf_data(n);
            Some(std::slice::from_raw_parts(p, len))
        }
    }

    /// Number of segments (a chained packet has more than one).
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        // SAFETY: reads the u16 nb_segs field of the mbuf we own.
        unsafe { mbuf_field(self.ptr.as_ptr(), mbuf_layout().nb_segs) }
    }

    /// Coalesce a chained packet into its first segment (`rte_pktmbuf_linearize`): true when
    /// the packet is (now) one segment, false when the first segment's buffer is too small.
    pub fn linearize(&mut self) -> bool {
        // SAFETY: we own the mbuf; rte_pktmbuf_linearize copies the later segments' data into
        // the first one's tailroom (checking it) and frees them, or changes nothing.
        unsafe { sys::dpw_pktmbuf_linearize(self.ptr.as_ptr()) == 0 }
    }

    /// A copy of the whole packet (every segment) in new mbufs from `pool`, in one mbuf when
    /// it fits (`rte_pktmbuf_copy`); None when the pool is empty.
    pub fn deep_copy(&self, pool: &'static Mempool) -> Option<Mbuf> {
        // SAFETY: reads the mbuf chain we own; the pool lives for the process.
        let m = unsafe { sys::dpw_pktmbuf_copy(self.ptr.as_ptr(), pool.ptr.as_ptr()) };
        NonNull::new(m).map(|ptr| Mbuf { ptr })
    }

    /// Total packet length over all segments.
    pub fn pkt_len(&self) -> u32 {
        // SAFETY: reads a field of the mbuf we own.
        unsafe { sys::dpw_pkt_len(self.ptr.as_ptr()) }
    }

    /// Room left after the data.
    pub fn tailroom(&self) -> u16 {
        // SAFETY: reads fields of the mbuf we own.
        unsafe { sys::dpw_tailroom(self.ptr.as_ptr()) }
    }

    /// Offload flags (RTE_MBUF_F_*).
    pub fn ol_flags(&self) -> u64 {
        // SAFETY: reads a field of the mbuf we own.
        unsafe { sys::dpw_ol_flags(self.ptr.as_ptr()) }
    }

    /// The PMD's receive checksum verdicts (IPv4 header, L4) from `ol_flags`; meaningful only
    /// on a port configured with the matching `RTE_ETH_RX_OFFLOAD_*_CKSUM`.
    pub fn rx_cksum(&self) -> (CksumVerdict, CksumVerdict) {
        let (mut ip, mut l4) = (0i32, 0i32);
        // SAFETY: reads ol_flags of the mbuf we own; valid out pointers.
        unsafe { sys::dpw_rx_cksum(self.ptr.as_ptr(), &mut ip, &mut l4) };
        (CksumVerdict::from_raw(ip), CksumVerdict::from_raw(l4))
    }

    /// Have the PMD fill this frame's IPv4 header checksum (`ip`) and/or TCP checksum (`tcp`):
    /// sets `l2_len`/`l3_len` and `RTE_MBUF_F_TX_IPV4` (+ `_IP_CKSUM`, `_TCP_CKSUM`), zeroes
    /// the IPv4 checksum and writes the pseudo-header checksum into the TCP checksum field, as
    /// `rte_mbuf_core.h` prescribes. The port must have been configured with the matching
    /// `RTE_ETH_TX_OFFLOAD_*_CKSUM`. Returns false (and changes nothing) when the frame is too
    /// short for the headers named.
    pub fn set_tx_cksum_offload(&mut self, l2_len: u16, l3_len: u16, ip: bool, tcp: bool) -> bool {
        let need = usize::from(l2_len) + usize::from(l3_len) + if tcp { 20 } else { 0 };
        if l3_len < 20 || self.data().len() < need {
            return false;
        }
        // SAFETY: the first segment holds at least l2_len + l3_len (+ a 20-byte TCP header when
        // `tcp`) bytes (checked above), which is all the shim reads or writes.
        unsafe {
            sys::dpw_tx_cksum_offload(self.ptr.as_ptr(), l2_len, l3_len, ip.into(), tcp.into())
        };
        true
    }

    /// Chain `tail` (a packet of one or more segments) behind this packet's last segment
    /// (`rte_pktmbuf_chain`): this packet then owns it. `tail` comes back when the chain would
    /// exceed `RTE_MBUF_MAX_NB_SEGS`.
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        // SAFETY: both are mbufs we own; on success the head's chain owns `tail` (freed with
        // the head), so it is forgotten here, not dropped; on failure nothing was linked.
        let rc = unsafe { sys::dpw_pktmbuf_chain(self.ptr.as_ptr(), tail.ptr.as_ptr()) };
        if rc != 0 {
            return Err(tail);
        }
        std::mem::forget(tail);
        Ok(())
    }

    /// Have the PMD cut this Ethernet/IPv4/TCP packet (`l2_len`, `l3_len`, `l4_len` octets of
    /// headers, all in the first segment) into TCP segments of `tso_segsz` payload octets:
    /// `RTE_MBUF_F_TX_TCP_SEG | _IPV4 | _IP_CKSUM`, the header lengths and the MSS set, the IPv4
    /// checksum zeroed and the pseudo-header checksum without the length in the TCP checksum
    /// field, as `rte_mbuf_core.h` prescribes (csrc/shim.c `dpw_tx_tso`). The port must have
    /// been configured with `RTE_ETH_TX_OFFLOAD_TCP_TSO`. False (nothing changed) when the
    /// first segment is shorter than the headers named.
    pub fn set_tx_tso(&mut self, l2_len: u16, l3_len: u16, l4_len: u16, tso_segsz: u16) -> bool {
        let need = usize::from(l2_len) + usize::from(l3_len) + usize::from(l4_len);
        if l3_len < 20 || l4_len < 20 || tso_segsz == 0 || self.data().len() < need {
            return false;
        }
        // SAFETY: the first segment holds the l2_len + l3_len + l4_len octets of headers
        // (checked above), all the shim reads or writes of the data; the rest are mbuf fields
        // of the packet we own.
        unsafe { sys::dpw_tx_tso(self.ptr.as_ptr(), l2_len, l3_len, l4_len, tso_segsz) };
        true
    }

    /// Grow the data by `len` bytes and return them (None when the tailroom is too small).
    #[inline]
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: rte_pktmbuf_append checks the tailroom and returns NULL when it is too small;
        // otherwise the returned pointer addresses `len` bytes inside the mbuf we own.
        unsafe {
            let p = sys::dpw_pktmbuf_append(self.ptr.as_ptr(), len);
            if p.is_null() {
                None
            } else {
                Some(std::slice::from_raw_parts_mut(p, usize::from(len)))
            }
        }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (it was never handed to tx_burst, which forgets it).
        unsafe { sys::dpw_pktmbuf_free(self.ptr.as_ptr()) }
    }
}

/// A PMD's verdict on a received checksum (`RTE_MBUF_F_RX_IP_CKSUM_*`, `RTE_MBUF_F_RX_L4_CKSUM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CksumVerdict {
    /// Not checked (or the PMD does not say): verify in software.
    Unknown,
    /// Checked and wrong.
    Bad,
    /// Checked and right.
    Good,
    /// The packet carries no valid checksum yet (e.g. a partial one from a virtual device);
    /// its data is intact.
    None,
}

impl CksumVerdict {
    fn from_raw(v: i32) -> Self {
        #[allow(clippy::unnecessary_cast)]
        match v as u32 {
            x if x == sys::dpw_cksum_DPW_CKSUM_BAD as u32 => CksumVerdict::Bad,
            x if x == sys::dpw_cksum_DPW_CKSUM_GOOD as u32 => CksumVerdict::Good,
            x if x == sys::dpw_cksum_DPW_CKSUM_NONE as u32 => CksumVerdict::None,
            _ => CksumVerdict::Unknown,
        }
    }
}

/// Write the IPv4 pseudo-header checksum (DPDK's `rte_ipv4_phdr_cksum`) into the TCP checksum
/// field of `ip`, an IPv4 packet whose header is `l3_len` bytes: the value a NIC doing TCP
/// checksum offload starts its sum from. False (nothing written) when `ip` is too short.
pub fn ipv4_tcp_phdr(ip: &mut [u8], l3_len: u16) -> bool {
    if l3_len < 20 || ip.len() < usize::from(l3_len) + 20 {
        return false;
    }
    // SAFETY: `ip` holds the IPv4 header (l3_len >= 20 bytes, the 20 the shim reads) and a
    // 20-byte TCP header after it, whose checksum field (offset 16) is all the shim writes.
    unsafe { sys::dpw_ipv4_tcp_phdr(ip.as_mut_ptr(), l3_len, 0) };
    true
}

/// What a port can do.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Driver name (`rte_eth_dev_info::driver_name`, e.g. `net_memif`).
    pub driver: String,
    /// The port's MAC address (`rte_eth_macaddr_get`).
    pub mac: [u8; 6],
    /// Most rx queues the device supports (`rte_eth_dev_info::max_rx_queues`).
    pub max_rx_queues: u16,
    /// Most tx queues the device supports (`rte_eth_dev_info::max_tx_queues`).
    pub max_tx_queues: u16,
    /// Smallest MTU accepted by `rte_eth_dev_set_mtu`.
    pub min_mtu: u16,
    /// Largest MTU accepted by `rte_eth_dev_set_mtu` (`rte_eth_dev_info::max_mtu`).
    pub max_mtu: u16,
    /// Supported tx offloads (`RTE_ETH_TX_OFFLOAD_*` bits, see [`offload`]).
    pub tx_offload_capa: u64,
    /// Supported rx offloads (`RTE_ETH_RX_OFFLOAD_*` bits, see [`offload`]).
    pub rx_offload_capa: u64,
    /// Entries of the RSS redirection table (`rte_eth_dev_info::reta_size`; 0: none).
    pub reta_size: u16,
    /// Octets of the RSS hash key (`rte_eth_dev_info::hash_key_size`; 0: none).
    pub hash_key_size: u8,
    /// Largest frame the device receives (`rte_eth_dev_info::max_rx_pktlen`); with
    /// `max_mtu`, what bounds `rte_eth_dev_set_mtu` (ethdev's `eth_dev_validate_mtu`).
    pub max_rx_pktlen: u32,
    /// Most segments of one transmitted packet (`tx_desc_lim.nb_seg_max`; 65535: no limit).
    pub nb_seg_max: u16,
    /// Most segments of one MTU-sized frame of a TSO packet (`tx_desc_lim.nb_mtu_seg_max`).
    pub nb_mtu_seg_max: u16,
}

impl PortInfo {
    /// The largest MTU `rte_eth_dev_set_mtu` takes: `max_mtu`, and `max_rx_pktlen` less the
    /// overhead ethdev assumes (`max_rx_pktlen - max_mtu`, or the Ethernet header and CRC when
    /// the PMD gives no `max_mtu`: DPDK 22.11 `eth_dev_get_overhead_len`). net_tap: 1504.
    pub fn settable_mtu(&self) -> u32 {
        let max_mtu = u32::from(self.max_mtu);
        let by_frame = if self.max_mtu != u16::MAX && self.max_rx_pktlen > max_mtu {
            max_mtu
        } else {
            self.max_rx_pktlen.saturating_sub(14 + 4)
        };
        max_mtu.min(by_frame)
    }
}

/// What a configured port reports back ([`Port::grant`]): the device as the EAL names it, the
/// queues and offloads in force, its RSS.
#[derive(Debug, Clone)]
pub struct PortGrant {
    /// The device's name (`rte_dev_name`): a PCI address such as `0000:00:05.0`, a vdev's
    /// name such as `net_tap0`.
    pub name: String,
    /// Its bus (`rte_bus_name`): `pci`, `vdev`, ...
    pub bus: String,
    /// Rx queues configured (`rte_eth_dev_info::nb_rx_queues`).
    pub rx_queues: u16,
    /// Tx queues configured.
    pub tx_queues: u16,
    /// `RTE_ETH_RX_OFFLOAD_*` in force (`rte_eth_dev_conf_get`: `rxmode.offloads`).
    pub rx_offloads: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` in force (`txmode.offloads`).
    pub tx_offloads: u64,
    /// RSS was asked for (`rxmode.mq_mode`).
    pub rss_asked: bool,
    /// The RSS hash functions and key in use (`rte_eth_dev_rss_hash_conf_get`), or the
    /// (positive) errno it failed with (`ENOTSUP`: the PMD has no RSS to report).
    pub rss: Result<(u64, Vec<u8>), i32>,
}

/// Port counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Packets dropped by the hardware/driver because the rx queues were full.
    pub imissed: u64,
    /// Erroneous packets received.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Rx mbuf allocation failures (the port's mempool was empty).
    pub rx_nombuf: u64,
}

/// How to set a port up.
#[derive(Debug, Clone)]
pub struct PortConf {
    /// Queues (rx and tx), one per worker.
    pub queues: u16,
    /// Descriptors per rx queue (`rte_eth_rx_queue_setup`).
    pub rx_desc: u16,
    /// Descriptors per tx queue (`rte_eth_tx_queue_setup`).
    pub tx_desc: u16,
    /// 0 keeps the device default (1500).
    pub mtu: u16,
    /// `RTE_ETH_RX_OFFLOAD_*` bits for `rte_eth_conf::rxmode.offloads` (see [`offload`]).
    pub rx_offloads: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` bits for `rte_eth_conf::txmode.offloads` (see [`offload`]).
    pub tx_offloads: u64,
}

impl Default for PortConf {
    fn default() -> Self {
        PortConf {
            queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: 0,
            rx_offloads: 0,
            tx_offloads: 0,
        }
    }
}

/// An ethdev port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    id: u16,
}

impl Port {
    /// The port DPDK created for the device `name` (e.g. `net_memif0`, the `--vdev` name).
    pub fn by_name(_eal: &Eal, name: &str) -> Result<Port, DpdkError> {
        let cname = CString::new(name).map_err(|_| DpdkError::new("port name", libc::EINVAL))?;
        let mut id = 0u16;
        // SAFETY: valid C string and out pointer.
        let rc = unsafe { sys::dpw_port_by_name(cname.as_ptr(), &mut id) };
        check(&format!("rte_eth_dev_get_port_by_name({name})"), rc)?;
        Ok(Port { id })
    }

    /// Two `net_ring` ports wired back to back in this process (what A sends, B receives and
    /// vice versa), `queues` queue pairs each, rings of `ring_size` (a power of two).
    pub fn ring_pair(
        _eal: &Eal,
        name: &str,
        queues: u16,
        ring_size: u32,
    ) -> Result<(Port, Port), DpdkError> {
        let cname = CString::new(name).map_err(|_| DpdkError::new("ring name", libc::EINVAL))?;
        let (mut a, mut b) = (0u16, 0u16);
        // SAFETY: valid C string and out pointers; the EAL is initialised.
        let rc = unsafe { sys::dpw_ring_pair(cname.as_ptr(), queues, ring_size, &mut a, &mut b) };
        check(&format!("net_ring pair {name}"), rc)?;
        Ok((Port { id: a }, Port { id: b }))
    }

    /// The port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Device information and MAC address.
    pub fn info(&self) -> Result<PortInfo, DpdkError> {
        let mut i = sys::dpw_port_info::default();
        // SAFETY: out pointer to a properly sized struct.
        let rc = unsafe { sys::dpw_port_info(self.id, &mut i) };
        check("rte_eth_dev_info_get", rc)?;
        // SAFETY: the shim writes a NUL-terminated string (snprintf) into `driver`.
        let driver = unsafe { CStr::from_ptr(i.driver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(PortInfo {
            driver,
            mac: i.mac,
            max_rx_queues: i.max_rx_queues,
            max_tx_queues: i.max_tx_queues,
            min_mtu: i.min_mtu,
            max_mtu: i.max_mtu,
            tx_offload_capa: i.tx_offload_capa,
            rx_offload_capa: i.rx_offload_capa,
            reta_size: i.reta_size,
            hash_key_size: i.hash_key_size,
            max_rx_pktlen: i.max_rx_pktlen,
            nb_seg_max: i.nb_seg_max,
            nb_mtu_seg_max: i.nb_mtu_seg_max,
        })
    }

    /// What the port reports back once configured: see [`PortGrant`].
    pub fn grant(&self) -> Result<PortGrant, DpdkError> {
        let mut g = sys::dpw_port_grant::default();
        // SAFETY: out pointer to a properly sized struct.
        let rc = unsafe { sys::dpw_port_grant(self.id, &mut g) };
        check("rte_eth_dev_conf_get", rc)?;
        // SAFETY: the shim writes NUL-terminated strings (snprintf, or zeroes) into both.
        let (name, bus) = unsafe {
            (
                CStr::from_ptr(g.name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
                CStr::from_ptr(g.bus.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let key_len = usize::from(g.rss_key_len).min(g.rss_key.len());
        Ok(PortGrant {
            name,
            bus,
            rx_queues: g.nb_rx_queues,
            tx_queues: g.nb_tx_queues,
            rx_offloads: g.rx_offloads,
            tx_offloads: g.tx_offloads,
            rss_asked: g.rss_mq != 0,
            rss: if g.rss_rc == 0 {
                Ok((g.rss_hf, g.rss_key[..key_len].to_vec()))
            } else {
                Err(g.rss_rc.abs())
            },
        })
    }

    /// Configure queues (rx mbufs from `pool`), MTU and offloads. The port must be stopped.
    pub fn configure(&self, conf: &PortConf, pool: &'static Mempool) -> Result<(), DpdkError> {
        // SAFETY: the pool lives for the process; the shim only reads `conf` values.
        let rc = unsafe {
            sys::dpw_port_setup(
                self.id,
                conf.queues,
                conf.rx_desc,
                conf.tx_desc,
                pool.ptr.as_ptr(),
                conf.mtu,
                conf.rx_offloads,
                conf.tx_offloads,
            )
        };
        check(
            &format!(
                "configure port {} ({} queues, mtu {})",
                self.id, conf.queues, conf.mtu
            ),
            rc,
        )
    }

    /// Fill the RSS redirection table round robin over the first `queues` queues (entry
    /// *i* to queue *i* mod `queues`), as the dataplane's flow steering assumes
    /// (`dataplane::steer`). Fails with the PMD's error on ports without a table.
    pub fn reta_round_robin(&self, queues: u16) -> Result<(), DpdkError> {
        // SAFETY: plain call on a configured port; the shim builds the table on its stack.
        let rc = unsafe { sys::dpw_port_reta_round_robin(self.id, queues) };
        check("rte_eth_dev_rss_reta_update", rc)
    }

    /// Start the port.
    pub fn start(&self) -> Result<(), DpdkError> {
        // SAFETY: plain call on a configured port id.
        check("rte_eth_dev_start", unsafe { sys::dpw_port_start(self.id) })?;
        // Promiscuous mode is not supported by every vdev (net_ring); it is only a convenience.
        // SAFETY: plain call on a started port.
        let _ = unsafe { sys::dpw_port_promisc(self.id) };
        Ok(())
    }

    /// Stop the port, on the EAL interrupt thread (csrc/shim.c `dpw_port_on_intr_thread`:
    /// net_memif in DPDK 22.11 would otherwise race its own handler of the peer's DISCONNECT).
    pub fn stop(&self) -> Result<(), DpdkError> {
        // SAFETY: plain call.
        check("rte_eth_dev_stop", unsafe { sys::dpw_port_stop(self.id) })
    }

    /// Close the port (stopped first), on the EAL interrupt thread as [`Port::stop`]; a memif
    /// server removes its socket file here.
    pub fn close(&self) -> Result<(), DpdkError> {
        // SAFETY: plain call; the caller no longer uses the port's queues.
        check("rte_eth_dev_close", unsafe { sys::dpw_port_close(self.id) })
    }

    /// The current MTU.
    pub fn mtu(&self) -> Result<u16, DpdkError> {
        let mut m = 0u16;
        // SAFETY: valid out pointer.
        check("rte_eth_dev_get_mtu", unsafe {
            sys::dpw_port_mtu(self.id, &mut m)
        })?;
        Ok(m)
    }

    /// Counters.
    pub fn stats(&self) -> Result<PortStats, DpdkError> {
        let mut s = sys::dpw_port_stats::default();
        // SAFETY: valid out pointer.
        check("rte_eth_stats_get", unsafe {
            sys::dpw_port_stats(self.id, &mut s)
        })?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Link state: (speed in Mbit/s, up).
    pub fn link(&self) -> Result<(u32, bool), DpdkError> {
        let (mut speed, mut up) = (0u32, 0i32);
        // SAFETY: valid out pointers.
        check("rte_eth_link_get_nowait", unsafe {
            sys::dpw_port_link(self.id, &mut speed, &mut up)
        })?;
        Ok((speed, up != 0))
    }

    /// The handle of `queue` (its rx and tx queue pair) of this port: the only way to receive or
    /// send on it. DPDK's burst functions are not thread-safe per queue, so at most one
    /// [`Queue`] per (port, queue) exists at a time (a second claim fails with `EBUSY` until the
    /// first handle is dropped), and a [`Queue`] is neither `Copy`, `Clone` nor `Sync`: it can
    /// move to the one worker thread that polls it, never be shared.
    pub fn claim_queue(&self, queue: u16) -> Result<Queue, DpdkError> {
        let mut claimed = CLAIMED_QUEUES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !claimed.insert((self.id, queue)) {
            return Err(DpdkError::new(
                format!("port {} queue {queue} is already claimed", self.id),
                libc::EBUSY,
            ));
        }
        // net_memif's bursts go through the region gate (csrc/shim.c; docs/workers.md "net_memif
        // and a peer that disconnects"); other drivers do not unmap under a burst.
        let gate = if self.info().is_ok_and(|i| i.driver == "net_memif") {
            claim_region_gate(self.id, queue)
        } else {
            -1
        };
        Ok(Queue {
            port: self.id,
            queue,
            gate,
            _not_sync: std::marker::PhantomData,
        })
    }
}

/// A slot of the region gate for `port`'s `queue`, or -1 (with a log line why).
fn claim_region_gate(port: u16, queue: u16) -> i32 {
    static NOT_IN_EFFECT: std::sync::Once = std::sync::Once::new();
    if let Err(why) = hook_memif_region_gate() {
        NOT_IN_EFFECT.call_once(|| {
            log::warn!(
                "dpdk: net_memif's mmap64/munmap cannot be pointed at dpwarp's region gate \
                 ({why}): a net_memif peer that disconnects during a burst can crash this process"
            )
        });
    }
    // SAFETY: plain C call; the slot is released by the Queue's Drop.
    let gate = unsafe { sys::dpw_gate_claim() };
    if gate < 0 {
        log::warn!(
            "dpdk: port {port} queue {queue}: no region gate slot free; its bursts are not gated"
        );
    } else {
        log::debug!(
            "dpdk: port {port} queue {queue}: bursts through the region gate (barrier: {})",
            if region_gate_stats().membarrier {
                "membarrier"
            } else {
                "xchg"
            }
        );
    }
    gate
}

/// Point net_memif's own imports of `mmap64` and `munmap` (its GOT entries, nothing else in
/// the process) at the region gate: the number of entries that point there. Done by the first
/// claim of a net_memif queue; idempotent. An error when net_memif is not a loaded shared
/// object (a static DPDK build) or its table cannot be written.
pub fn hook_memif_region_gate() -> Result<u32, String> {
    let mut error = 0i32;
    // SAFETY: plain C call with a valid out pointer; it writes only net_memif's GOT entries
    // for mmap/mmap64/munmap, each an aligned pointer store of a function with the same
    // signature (csrc/shim.c).
    let n = unsafe { sys::dpw_gate_hook_memif(&mut error) };
    match n {
        n if n > 0 => Ok(n as u32),
        0 => Err("librte_net_memif is not a loaded shared object".into()),
        _ => Err(format!(
            "its import table: {}",
            std::io::Error::from_raw_os_error(error)
        )),
    }
}

/// Whether net_memif's imports of `mmap64` and `munmap` point at the region gate now (read
/// from its GOT): after the first net_memif queue is claimed, in any program that links
/// dpwarp with DPDK's shared PMDs. The host program's own `mmap` and `munmap` are never
/// touched.
pub fn region_gate_in_effect() -> bool {
    // SAFETY: plain C call (reads the GOT entries it wrote, under its lock).
    unsafe { sys::dpw_gate_memif_hooked() >= 2 }
}

/// The region gate's counts since the process started ([`region_gate_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionGateStats {
    /// net_memif's mmap and munmap calls (each waits for the bursts in progress).
    pub calls: u64,
    /// Of those, the ones that waited for a burst in progress.
    pub waits: u64,
    /// munmap calls net_memif itself made (its regions, on a disconnect).
    pub memif_unmaps: u64,
    /// mmap calls net_memif itself made (its regions, on a connect).
    pub memif_maps: u64,
    /// The bursts' barrier is made by the waiter's `membarrier(2)` (false: an `xchg` in each
    /// burst; meaningful once a gated queue exists).
    pub membarrier: bool,
}

/// The region gate's counts since the process started.
pub fn region_gate_stats() -> RegionGateStats {
    let mut s = RegionGateStats::default();
    // SAFETY: valid out pointers.
    unsafe {
        sys::dpw_gate_stats(
            &mut s.calls,
            &mut s.waits,
            &mut s.memif_unmaps,
            &mut s.memif_maps,
        );
        s.membarrier = sys::dpw_gate_uses_membarrier() != 0;
    }
    s
}

/// Hold the region gate as a burst does, for a test of the gate itself: the gate's mmap and
/// munmap (net_memif's) on any other thread wait until the returned guard is dropped. Not for data paths (a [`Queue`] of a
/// net_memif port holds it around each of its bursts).
#[doc(hidden)]
pub fn hold_region_gate_for_test() -> Option<RegionGateHold> {
    // SAFETY: plain C call; released in Drop.
    let slot = unsafe { sys::dpw_gate_claim() };
    if slot < 0 {
        return None;
    }
    // SAFETY: a slot this guard owns; entered once, exited in Drop on this same thread (the
    // guard is not Send).
    unsafe { sys::dpw_gate_enter(slot) };
    Some(RegionGateHold {
        slot,
        _not_send: std::marker::PhantomData,
    })
}

/// For a test of the gate itself: one anonymous page mapped through the gate's `mmap64`, the
/// one net_memif's import points at; None if that failed. The page
/// is unmapped the same way by [`PmdPage::unmap`] (or, if never called, on drop).
#[doc(hidden)]
pub fn map_page_as_a_pmd_for_test() -> Option<PmdPage> {
    // SAFETY: plain C call; the page is owned by the returned guard.
    let p = unsafe { sys::dpw_gate_test_map_page() };
    (!p.is_null()).then_some(PmdPage(p))
}

/// A page from [`map_page_as_a_pmd_for_test`], owned: only it can be unmapped through this.
#[doc(hidden)]
pub struct PmdPage(*mut std::ffi::c_void);

impl PmdPage {
    /// Unmap the page through the gate's `munmap`; whether that succeeded.
    pub fn unmap(self) -> bool {
        let page = self.0;
        std::mem::forget(self);
        // SAFETY: the page this guard owned (mapped by dpw_gate_test_map_page, never handed
        // out, unmapped only here: the guard is consumed).
        unsafe { sys::dpw_gate_test_unmap_page(page) == 0 }
    }
}

impl Drop for PmdPage {
    fn drop(&mut self) {
        // SAFETY: as in `unmap`; reached only when `unmap` was not called.
        unsafe { sys::dpw_gate_test_unmap_page(self.0) };
    }
}

/// See [`hold_region_gate_for_test`].
#[doc(hidden)]
pub struct RegionGateHold {
    slot: i32,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for RegionGateHold {
    fn drop(&mut self) {
        // SAFETY: the slot this guard entered, on the thread that entered it.
        unsafe {
            sys::dpw_gate_exit(self.slot);
            sys::dpw_gate_release(self.slot);
        }
    }
}

/// The (port, queue) pairs with a live [`Queue`] handle.
static CLAIMED_QUEUES: std::sync::Mutex<std::collections::BTreeSet<(u16, u16)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// One rx/tx queue pair of a port, owned by the one thread that polls it ([`Port::claim_queue`]).
///
/// Not `Copy` or `Clone` and not `Sync` (the `Cell` marker), so safe code cannot call
/// `rte_eth_rx_burst`/`rte_eth_tx_burst` on one queue from two threads; it is `Send`, so the
/// handle can be created on one thread and moved to its worker.
///
/// Sharing one with another thread does not compile:
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<dpwarp::dpdk::Queue>();
/// ```
/// and neither does duplicating one:
/// ```compile_fail
/// fn dup(q: &dpwarp::dpdk::Queue) -> dpwarp::dpdk::Queue { q.clone() }
/// ```
/// It moves to the worker that owns it:
/// ```
/// fn owned<T: Send>() {}
/// owned::<dpwarp::dpdk::Queue>();
/// ```
#[derive(Debug)]
pub struct Queue {
    port: u16,
    queue: u16,
    /// Its slot of the region gate (net_memif ports), or -1.
    gate: i32,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl Drop for Queue {
    fn drop(&mut self) {
        CLAIMED_QUEUES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(self.port, self.queue));
        // SAFETY: plain C call; -1 is ignored.
        unsafe { sys::dpw_gate_release(self.gate) };
    }
}

impl Queue {
    /// The port id.
    pub fn port_id(&self) -> u16 {
        self.port
    }

    /// The queue index.
    pub fn index(&self) -> u16 {
        self.queue
    }

    /// Whether its bursts hold the region gate (a net_memif port's queue with a slot).
    pub fn gated(&self) -> bool {
        self.gate >= 0
    }

    /// Receive up to `out`'s spare capacity (at most `max`, at most 512) packets into `out`.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let n = max.min(out.capacity() - out.len()).min(512) as u16;
        if n == 0 {
            return 0;
        }
        let len = out.len();
        // SAFETY: Mbuf is repr(transparent) over a non-null rte_mbuf pointer; the spare capacity
        // holds at least n slots; rx_burst writes `got` valid, owned mbuf pointers to them, and
        // only then do we extend the length over exactly those. `&mut self` on the queue's only
        // handle: no other thread is in a burst call on this queue.
        unsafe {
            let dst = out.as_mut_ptr().add(len) as *mut *mut sys::rte_mbuf;
            let got = sys::dpw_rx_burst(self.port, self.queue, dst, n, self.gate);
            out.set_len(len + usize::from(got));
            usize::from(got)
        }
    }

    /// `rte_eth_tx_prepare` of one packet about to be sent on this queue: whatever the PMD
    /// must fix up before its device takes an offload request (virtio: the TSO pseudo-header
    /// checksum with the length, as its host wants it). Most vdevs have nothing to do.
    pub fn tx_prepare(&mut self, m: &mut Mbuf) -> Result<(), DpdkError> {
        let mut p = m.ptr.as_ptr();
        // SAFETY: one owned mbuf, passed as a one-element array; `&mut self` on the queue's
        // only handle. A PMD may replace the packet (VLAN insertion: not asked for here); the
        // pointer it leaves is the one we then own.
        let n = unsafe { sys::dpw_tx_prepare(self.port, self.queue, &mut p, 1) };
        if let Some(ptr) = NonNull::new(p) {
            m.ptr = ptr;
        }
        if n == 1 {
            Ok(())
        } else {
            Err(DpdkError::new("rte_eth_tx_prepare", rte_errno()))
        }
    }

    /// Hand the first packets of `pkts` to the queue; returns how many the driver took (those
    /// are removed from `pkts`, the rest stay for a later call: nothing is dropped here).
    #[inline]
    pub fn tx_burst(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let n = pkts.len().min(usize::from(u16::MAX)) as u16;
        // SAFETY: repr(transparent) slice of owned mbuf pointers; the driver takes ownership of
        // the first `sent`, which we then remove without running Drop. `&mut self` on the
        // queue's only handle: no other thread is in a burst call on this queue.
        let sent = unsafe {
            usize::from(sys::dpw_tx_burst(
                self.port,
                self.queue,
                pkts.as_mut_ptr() as *mut *mut sys::rte_mbuf,
                n,
                self.gate,
            ))
        };
        for m in pkts.drain(..sent) {
            std::mem::forget(m);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One live handle per (port, queue); dropping it frees the queue for the next owner.
    /// (Port ids far beyond any real port: no DPDK call is made.)
    #[test]
    fn a_queue_has_one_handle_at_a_time() {
        let p = Port { id: 60_001 };
        let q0 = p.claim_queue(0).expect("first claim");
        let e = p
            .claim_queue(0)
            .expect_err("second claim of the same queue");
        assert_eq!(e.errno, libc::EBUSY);
        let q1 = p.claim_queue(1).expect("another queue of the same port");
        assert_eq!((q0.port_id(), q0.index(), q1.index()), (60_001, 0, 1));
        // Another port's queue 0 is its own.
        let other = Port { id: 60_002 }.claim_queue(0).expect("other port");
        drop(q0);
        let again = p.claim_queue(0).expect("claim after the owner dropped it");
        drop((again, q1, other));
    }
}
