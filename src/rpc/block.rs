//! The NULL procedure and a block-storage program: READ (offset, count -> data, returned in a
//! write chunk when the client offers one), WRITE (offset, data, taken from a read chunk when the
//! client sends one), GETATTR. Backed by memory or by a file.
//!
//! ```text
//! program DPWARP_BLOCK_PROG { version BLOCK_V1 {
//!     void      NULL(void)                     = 0;
//!     read_res  READ(uint64 offset, uint32 count) = 1;  read_res  = status, [opaque data<>]
//!     write_res WRITE(uint64 offset, opaque data<>) = 2; write_res = status, uint32 count
//!     attr_res  GETATTR(void)                   = 3;  attr_res  = status, [uint64 size,
//!                                                                 uint32 block_size, bool ro]
//! } = 1; } = 0x20000b1c;
//! ```
//! Zero-copy bulk: the memory store's bytes are registered memory ([`SharedMem`]), registered
//! in each connection's protection domain. READ data is RDMA-Written into the client's write
//! chunk straight from the store ([`Body::put_bulk_region`]); WRITE data is RDMA-Read from the
//! client's read chunk straight into the store (a placer, [`Registry::register_with_placement`]).
//! Neither is copied on the server; over TCP and inline the bytes are copied into the message
//! as they must be. A file store reads READ results of 32 KiB to 1 MiB into buffers of a
//! [`BulkPool`] and RDMA-Writes them from there (one copy, page cache to buffer, with no
//! zeroing pass and no allocation a call); its WRITE data arrives in the server's pull buffers.
//!
//! Status values: 0 OK, 5 EIO, 22 EINVAL (count above the per-call limit), 30 EROFS,
//! 34 ERANGE (beyond the end of the store).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::client::{BulkView, ReplyReader};
use super::program::{garbage, Body, Bulk, BulkPool, Placement, Registry};
use crate::verbs::SharedMem;
use crate::wire::xdr::XdrReader;

/// Program number (RFC 5531 §7.3 user-defined range; dpwarp's choice).
pub const BLOCK_PROG: u32 = 0x2000_0b1c;
/// Program version `BLOCK_V1`.
pub const BLOCK_VERS: u32 = 1;
/// NULL: no arguments, no results (RFC 5531 §12.1 convention).
pub const PROC_NULL: u32 = 0;
/// READ(offset, count) -> status, data.
pub const PROC_READ: u32 = 1;
/// WRITE(offset, data) -> status, count.
pub const PROC_WRITE: u32 = 2;
/// GETATTR() -> status, size, block size, read-only flag.
pub const PROC_GETATTR: u32 = 3;

/// Status: success.
pub const BLK_OK: u32 = 0;
/// Status: the backing file reported an I/O error.
pub const BLK_EIO: u32 = 5;
/// Status: count above [`MAX_IO`].
pub const BLK_EINVAL: u32 = 22;
/// Status: WRITE to a read-only store.
pub const BLK_EROFS: u32 = 30;
/// Status: the range extends beyond the end of the store.
pub const BLK_ERANGE: u32 = 34;

/// Largest READ/WRITE count per call.
pub const MAX_IO: usize = 16 << 20;

enum Backing {
    Memory(SharedMem),
    /// A file, and the buffers its READ results are read into ([`BulkPool`]).
    File(File, BulkPool),
}

/// READ results of a file store from this size up to [`POOLED_READ_MAX`] are read into a
/// pool's buffer; others into a `Vec` of their own (small ones have no pass worth sparing and
/// mostly go inline).
const POOLED_READ_MIN: usize = 32 * 1024;

/// The size of a file store's pool buffers (1 MiB: the usual largest READ, as NFS's rtmax).
const POOLED_READ_MAX: usize = 1 << 20;

/// Buffers of a file store's pool at most: READs in flight at once before the rest use
/// buffers of their own (memory: this many MiB at most, made as needed).
const POOLED_READ_BUFFERS: usize = 64;

/// A block store.
pub struct BlockStore {
    backing: Backing,
    size: u64,
    /// Block size reported by GETATTR (4096 by default; advisory, I/O is byte-addressed).
    pub block_size: u32,
    /// Refuse WRITE with [`BLK_EROFS`].
    pub read_only: bool,
}

impl BlockStore {
    /// `size` zeroed bytes in memory that RDMA moves bulk data to and from directly (see the
    /// module docs).
    pub fn memory(size: usize) -> Self {
        BlockStore {
            backing: Backing::Memory(SharedMem::new(size)),
            size: size as u64,
            block_size: 4096,
            read_only: false,
        }
    }

    /// A file of `size` bytes (created or extended as needed).
    pub fn file(path: &Path, size: u64) -> std::io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if f.metadata()?.len() < size {
            f.set_len(size)?;
        }
        Ok(BlockStore {
            backing: Backing::File(f, BulkPool::new(POOLED_READ_MAX, POOLED_READ_BUFFERS)),
            size,
            block_size: 4096,
            read_only: false,
        })
    }

    /// The memory of a memory store (the bytes RDMA moves data to and from); `None` for a
    /// file.
    pub fn memory_region(&self) -> Option<&SharedMem> {
        match &self.backing {
            Backing::Memory(m) => Some(m),
            Backing::File(..) => None,
        }
    }

    /// Buffers the file store's READ pool has made so far (0 for a memory store): at most
    /// the READs of 32 KiB to 1 MiB that were in flight at once, up to 64.
    pub fn read_pool_buffers(&self) -> usize {
        match &self.backing {
            Backing::File(_, pool) => pool.buffers(),
            Backing::Memory(_) => 0,
        }
    }

    /// Size of the store in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn range(&self, off: u64, len: usize) -> Result<(), u32> {
        if len > MAX_IO {
            return Err(BLK_EINVAL);
        }
        match off.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(BLK_ERANGE),
        }
    }

    /// Read `len` bytes at `off`, or a `BLK_*` status.
    pub fn read(&self, off: u64, len: usize) -> Result<Vec<u8>, u32> {
        self.range(off, len)?;
        match &self.backing {
            Backing::Memory(m) => Ok(m.bytes()[off as usize..off as usize + len].to_vec()),
            Backing::File(f, _) => {
                let mut v = vec![0u8; len];
                read_file(f, off, &mut v)?;
                Ok(v)
            }
        }
    }

    /// [`BlockStore::read`] of a file store that never waits: `len` bytes at `off` (under
    /// 32 KiB) if all of them are in the page cache (`preadv2` with `RWF_NOWAIT`), a range
    /// error at once; `None` if the read would wait or is large (a large READ's copy is left
    /// to the handler pool, beside the thread that moves the bytes), and for a memory store.
    pub fn read_nowait(&self, off: u64, len: usize) -> Option<Result<Vec<u8>, u32>> {
        let Backing::File(f, _) = &self.backing else {
            return None;
        };
        if let Err(st) = self.range(off, len) {
            return Some(Err(st));
        }
        if len >= POOLED_READ_MIN {
            return None;
        }
        let mut v = vec![0u8; len];
        if len > 0 {
            let mut io = [std::io::IoSliceMut::new(&mut v)];
            match rustix::io::preadv2(f, &mut io, off, rustix::io::ReadWriteFlags::NOWAIT) {
                Ok(n) if n == len => {}
                _ => return None,
            }
        }
        Some(Ok(v))
    }

    /// READ results for `len` bytes at `off`: the memory store's bytes in place (RDMA-Written
    /// from the store), a file's read into a pool's buffer (RDMA-Written from there) or into a
    /// `Vec`, or a `BLK_*` status.
    fn read_into(&self, b: &mut Body, off: u64, len: usize) {
        match (&self.backing, self.range(off, len)) {
            (Backing::Memory(m), Ok(())) => {
                b.xdr().put_u32(BLK_OK);
                b.put_bulk_region(m, off as usize, len);
                return;
            }
            (Backing::File(f, pool), Ok(())) if len >= POOLED_READ_MIN => {
                if let Some(buf) = pool.take(len) {
                    let read = read_file(f, off, &mut buf.bytes_mut()[..len]);
                    match read {
                        Ok(()) => {
                            b.xdr().put_u32(BLK_OK);
                            b.put_bulk_region(&buf, 0, len);
                        }
                        Err(st) => b.xdr().put_u32(st),
                    }
                    return;
                }
            }
            _ => {}
        }
        match self.read(off, len) {
            Ok(d) => {
                b.xdr().put_u32(BLK_OK);
                b.put_bulk(d);
            }
            Err(st) => b.xdr().put_u32(st),
        }
    }

    /// Where WRITE data of `len` bytes at `off` goes in a writable memory store, if the
    /// range is valid; `None` otherwise (the handler answers the error as ever).
    fn place(&self, off: u64, len: usize) -> Option<(SharedMem, usize)> {
        match &self.backing {
            Backing::Memory(m) if !self.read_only && self.range(off, len).is_ok() => {
                Some((m.clone(), off as usize))
            }
            _ => None,
        }
    }

    /// Write `data` at `off`, or a `BLK_*` status.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), u32> {
        if self.read_only {
            return Err(BLK_EROFS);
        }
        self.range(off, data.len())?;
        match &self.backing {
            Backing::Memory(m) => {
                m.bytes_mut()[off as usize..off as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            Backing::File(f, _) => f.write_all_at(data, off).map_err(|e| {
                log::warn!("block: write at {off}: {e}");
                BLK_EIO
            }),
        }
    }
}

/// `buf.len()` bytes of `f` at `off`, or `BLK_EIO`.
fn read_file(f: &File, off: u64, buf: &mut [u8]) -> Result<(), u32> {
    f.read_exact_at(buf, off).map_err(|e| {
        log::warn!("block: read at {off}: {e}");
        BLK_EIO
    })
}

/// Register NULL, READ, WRITE and GETATTR for `store`.
pub fn register(reg: &mut Registry, store: Arc<BlockStore>) {
    // File I/O may block: such calls leave a run-to-completion worker for the handler pool.
    let file_backed = matches!(store.backing, Backing::File(..));
    let read_store = store.clone();
    reg.register(BLOCK_PROG, BLOCK_VERS, PROC_NULL, |_, _| Ok(Body::new()));
    let s = store.clone();
    reg.register(BLOCK_PROG, BLOCK_VERS, PROC_READ, move |_, a| {
        let off = a.xdr.get_u64().map_err(garbage)?;
        let count = a.xdr.get_u32().map_err(garbage)? as usize;
        let mut b = Body::new();
        s.read_into(&mut b, off, count);
        Ok(b)
    });
    let s = store.clone();
    let p = store.clone();
    reg.register_with_placement(
        BLOCK_PROG,
        BLOCK_VERS,
        PROC_WRITE,
        move |_, a| {
            let off = a.xdr.get_u64().map_err(garbage)?;
            let r = match a.get_bulk_placed(MAX_IO).map_err(garbage)? {
                // RDMA-Read into the store already (the placer checked the range and rights).
                Bulk::Placed(n) => Ok(n),
                Bulk::Bytes(data) => s.write(off, data).map(|()| data.len()),
            };
            let mut b = Body::new();
            match r {
                Ok(n) => {
                    b.xdr().put_u32(BLK_OK);
                    b.xdr().put_u32(n as u32);
                }
                Err(st) => {
                    b.xdr().put_u32(st);
                    b.xdr().put_u32(0);
                }
            }
            Ok(b)
        },
        move |_, x: &mut XdrReader<'_>| {
            // The arguments as the handler decodes them: offset, then the data's length word;
            // the data's read chunk sits right after it.
            let off = x.get_u64().ok()?;
            let len = x.get_len(MAX_IO).ok()?;
            let (mem, offset) = p.place(off, len)?;
            Some(Placement {
                position: x.position() as u32,
                mem,
                offset,
                len,
            })
        },
    );
    let s = store;
    reg.register(BLOCK_PROG, BLOCK_VERS, PROC_GETATTR, move |_, _| {
        let mut b = Body::new();
        b.xdr().put_u32(BLK_OK);
        b.xdr().put_u64(s.size());
        b.xdr().put_u32(s.block_size);
        b.xdr().put_bool(s.read_only);
        Ok(b)
    });
    if file_backed {
        reg.mark_blocking(BLOCK_PROG, BLOCK_VERS, PROC_READ);
        reg.mark_blocking(BLOCK_PROG, BLOCK_VERS, PROC_WRITE);
        // A small READ of cached bytes is answered where the call arrived (no hand-off to
        // the pool; docs/rpc.md "How a call is served").
        reg.set_nowait(BLOCK_PROG, BLOCK_VERS, PROC_READ, move |_, a| {
            let off = a.xdr.get_u64().ok()?;
            let count = a.xdr.get_u32().ok()? as usize;
            let d = read_store.read_nowait(off, count)?;
            let mut b = Body::new();
            match d {
                Ok(d) => {
                    b.xdr().put_u32(BLK_OK);
                    b.put_bulk(d);
                }
                Err(st) => b.xdr().put_u32(st),
            }
            Some(Ok(b))
        });
    }
}

/// READ arguments.
pub fn read_args(off: u64, count: u32) -> Body {
    let mut b = Body::new();
    b.xdr().put_u64(off);
    b.xdr().put_u32(count);
    b
}

/// WRITE arguments (the data is DDP-eligible).
pub fn write_args(off: u64, data: Vec<u8>) -> Body {
    let mut b = Body::new();
    b.xdr().put_u64(off);
    b.put_bulk(data);
    b
}

/// WRITE arguments whose data is `len` bytes of registered memory from `offset`: over
/// RPC-over-RDMA the server RDMA-Reads them in place ([`Body::put_bulk_region`]).
pub fn write_args_region(off: u64, mem: &SharedMem, offset: usize, len: usize) -> Body {
    let mut b = Body::new();
    b.xdr().put_u64(off);
    b.put_bulk_region(mem, offset, len);
    b
}

/// Decode READ results: the data where it arrived (the client's write-chunk region, or the
/// inline reply; [`BulkView`], no copy) or a status.
pub fn decode_read_view<'a>(
    r: &mut ReplyReader<'a>,
) -> Result<Result<BulkView<'a>, u32>, crate::wire::Error> {
    let st = r.xdr.get_u32()?;
    if st != BLK_OK {
        return Ok(Err(st));
    }
    Ok(Ok(r.get_bulk(MAX_IO)?))
}

/// Decode READ results: a copy of the data ([`decode_read_view`] hands out the data in
/// place) or a status.
pub fn decode_read(r: &mut ReplyReader<'_>) -> Result<Result<Vec<u8>, u32>, crate::wire::Error> {
    Ok(decode_read_view(r)?.map(|d| d.to_vec()))
}

/// Decode WRITE results: bytes written or a status.
pub fn decode_write(r: &mut ReplyReader<'_>) -> Result<Result<u32, u32>, crate::wire::Error> {
    let st = r.xdr.get_u32()?;
    let n = r.xdr.get_u32()?;
    Ok(if st == BLK_OK { Ok(n) } else { Err(st) })
}

/// GETATTR results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// Size of the store in bytes.
    pub size: u64,
    /// The store's block size.
    pub block_size: u32,
    /// The store refuses writes.
    pub read_only: bool,
}

/// Decode GETATTR results: attributes or a status.
pub fn decode_getattr(r: &mut ReplyReader<'_>) -> Result<Result<Attr, u32>, crate::wire::Error> {
    let st = r.xdr.get_u32()?;
    if st != BLK_OK {
        return Ok(Err(st));
    }
    Ok(Ok(Attr {
        size: r.xdr.get_u64()?,
        block_size: r.xdr.get_u32()?,
        read_only: r.xdr.get_bool()?,
    }))
}
