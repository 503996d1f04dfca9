//! Protection domains and memory regions (RFC 5040 §5.2 STag validation, RFC 5042 security).
//!
//! CONTRACT (fixed by the integrator; the RDMA helper implements the bodies, may add items).
//! `MemoryTable` is a cheap `Clone` handle (Arc inside), `Send + Sync`: the application registers
//! regions while the QP engines (possibly on other threads) place data into them.
//! STag = (index << 8) | key, with the key byte random (RFC 5040 §5.2: STags must not be guessable).
//! Region addresses are verbs-like absolute addresses: `[mr.addr(), mr.addr() + mr.len())`.

/// Access rights of a region (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_READ: Access = Access(4);
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
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
    #[error("invalid STag")]
    InvalidStag,
    #[error("STag invalidated")]
    Invalidated,
    #[error("base or bounds violation")]
    Bounds,
    #[error("access rights violation")]
    Access,
    #[error("protection domain mismatch")]
    PdMismatch,
}

/// The table of registered regions shared by a device's QPs. CONTRACT signatures below.
#[derive(Clone, Default)]
pub struct MemoryTable {
    // implementation-defined (Arc<...> inside)
}

impl MemoryTable {
    /// An empty table.
    pub fn new() -> Self {
        todo!()
    }
    /// A fresh protection domain.
    pub fn alloc_pd(&self) -> PdId {
        todo!()
    }
    /// Register `len` zeroed bytes owned by the table under `pd` with `access`; returns the region
    /// with a fresh STag (random key byte).
    pub fn register(&self, _pd: PdId, _len: usize, _access: Access) -> Mr {
        todo!()
    }
    /// Remove a region; later accesses through its STag fail with `InvalidStag`.
    pub fn deregister(&self, _stag: u32) -> bool {
        todo!()
    }
    /// Invalidate a region's STag (RFC 5040 §5.2; Send with Invalidate or local invalidate).
    /// Fails if the STag is unknown or the region is not `pd`'s.
    pub fn invalidate(&self, _stag: u32, _pd: PdId) -> Result<(), MemoryError> {
        todo!()
    }
    /// Look a region up by STag.
    pub fn get(&self, _stag: u32) -> Option<Mr> {
        todo!()
    }
    /// Validate `[addr, addr+len)` of region `stag` for `pd` with rights `need` (RFC 5040 §5.2
    /// order: STag valid, not invalidated, PD, rights, bounds) without moving a byte.
    pub fn check(
        &self,
        _stag: u32,
        _pd: PdId,
        _addr: u64,
        _len: usize,
        _need: Access,
    ) -> Result<(), MemoryError> {
        todo!()
    }
    /// `check` then copy `data` into the region at `addr`. Nothing is written on error.
    pub fn write(
        &self,
        _stag: u32,
        _pd: PdId,
        _addr: u64,
        _data: &[u8],
        _need: Access,
    ) -> Result<(), MemoryError> {
        todo!()
    }
    /// `check` then copy from the region at `addr` into `out`.
    pub fn read(
        &self,
        _stag: u32,
        _pd: PdId,
        _addr: u64,
        _out: &mut [u8],
        _need: Access,
    ) -> Result<(), MemoryError> {
        todo!()
    }
}

/// A registered memory region: a cheap `Clone` handle, `Send + Sync`.
#[derive(Clone)]
pub struct Mr {
    // implementation-defined
}

impl Mr {
    /// The STag (used as both lkey and rkey, as iWARP RNICs do).
    pub fn stag(&self) -> u32 {
        todo!()
    }
    /// Base address (Tagged Offset of the first byte).
    pub fn addr(&self) -> u64 {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn pd(&self) -> PdId {
        todo!()
    }
    pub fn access(&self) -> Access {
        todo!()
    }
    /// Local CPU write at byte `offset` from the start (panics if out of range: local caller bug).
    pub fn write_at(&self, _offset: usize, _data: &[u8]) {
        todo!()
    }
    /// Local CPU read at byte `offset` (panics if out of range: local caller bug).
    pub fn read_at(&self, _offset: usize, _out: &mut [u8]) {
        todo!()
    }
    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        todo!()
    }
}
