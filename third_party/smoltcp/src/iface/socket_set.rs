use core::fmt;
use managed::ManagedSlice;

use super::socket_meta::Meta;
use crate::socket::{AnySocket, Socket};

/// Opaque struct with space for storing one socket.
///
/// This is public so you can use it to allocate space for storing
/// sockets when creating an Interface.
#[derive(Debug, Default)]
pub struct SocketStorage<'a> {
    inner: Option<Item<'a>>,
}

impl<'a> SocketStorage<'a> {
    pub const EMPTY: Self = Self { inner: None };
}

/// An item of a socket set.
#[derive(Debug)]
pub(crate) struct Item<'a> {
    pub(crate) meta: Meta,
    pub(crate) socket: Socket<'a>,
}

/// A handle, identifying a socket in an Interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SocketHandle(usize);

impl SocketHandle {
    /// dpwarp: the handle's slot in its set (small, dense: fit to index a table by).
    pub fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for SocketHandle {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// An extensible set of sockets.
///
/// The lifetime `'a` is used when storing a `Socket<'a>`.  If you're using
/// owned buffers for your sockets (passed in as `Vec`s) you can use
/// `SocketSet<'static>`.
/// dpwarp: socket slots up to which `process_tcp_repr` only scans (no hint table).
#[cfg(feature = "alloc")]
const HINT_MIN_SLOTS: usize = 8;

#[derive(Debug)]
pub struct SocketSet<'a> {
    sockets: ManagedSlice<'a, SocketStorage<'a>>,
    /// dpwarp: the sockets that processed an incoming segment since the last
    /// [`SocketSet::take_touched`] (consecutive repeats recorded once).
    #[cfg(feature = "alloc")]
    touched: alloc::vec::Vec<SocketHandle>,
    /// dpwarp: where the connected TCP socket of a (remote address, remote port, local port)
    /// was last found, by a hash of the three (slot index + 1; 0 empty). Only a hint: a hit is
    /// checked with the socket's own `accepts`, a miss or a stale entry falls back to the scan
    /// over every socket, so the table needs no upkeep when sockets come and go.
    #[cfg(feature = "alloc")]
    tcp_hint: alloc::vec::Vec<u32>,
}

impl<'a> SocketSet<'a> {
    /// Create a socket set using the provided storage.
    pub fn new<SocketsT>(sockets: SocketsT) -> SocketSet<'a>
    where
        SocketsT: Into<ManagedSlice<'a, SocketStorage<'a>>>,
    {
        let sockets = sockets.into();
        SocketSet {
            sockets,
            #[cfg(feature = "alloc")]
            touched: alloc::vec::Vec::new(),
            #[cfg(feature = "alloc")]
            tcp_hint: alloc::vec::Vec::new(),
        }
    }

    /// dpwarp: move the handles of the sockets that processed incoming segments since the
    /// last call into `out` (cleared first), in the order they did; a socket that took several
    /// segments in a row appears once, one that took segments between others' may appear
    /// more than once.
    #[cfg(feature = "alloc")]
    pub fn take_touched(&mut self, out: &mut alloc::vec::Vec<SocketHandle>) {
        out.clear();
        core::mem::swap(out, &mut self.touched);
    }

    /// dpwarp: the socket that took a segment last since [`SocketSet::take_touched`] (after
    /// an ingress of one frame: the socket that frame went to, if it went to one; otherwise
    /// an earlier one).
    #[cfg(feature = "alloc")]
    pub fn last_touched(&self) -> Option<SocketHandle> {
        self.touched.last().copied()
    }

    #[cfg(feature = "alloc")]
    pub(crate) fn touch(&mut self, handle: SocketHandle) {
        if self.touched.last() != Some(&handle) {
            self.touched.push(handle);
        }
    }

    /// dpwarp: the slot a hint table entry for `key` names, if any (see `tcp_hint`). With
    /// a handful of socket slots the scan is as quick, and no hint is kept.
    #[cfg(feature = "alloc")]
    pub(crate) fn tcp_hint(&self, key: u64) -> Option<usize> {
        if self.tcp_hint.is_empty() || self.sockets.len() <= HINT_MIN_SLOTS {
            return None;
        }
        let slot = self.tcp_hint[Self::hint_index(key, self.tcp_hint.len())];
        (slot != 0).then(|| slot as usize - 1)
    }

    /// dpwarp: remember that the socket in slot `index` took a segment of `key`. The table
    /// keeps about four entries per socket slot (a power of two), so collisions are few.
    #[cfg(feature = "alloc")]
    pub(crate) fn set_tcp_hint(&mut self, key: u64, index: usize) {
        if self.sockets.len() <= HINT_MIN_SLOTS {
            return;
        }
        let want = (self.sockets.len() * 4).next_power_of_two().max(16);
        if self.tcp_hint.len() < want {
            self.tcp_hint.clear();
            self.tcp_hint.resize(want, 0);
        }
        let i = Self::hint_index(key, self.tcp_hint.len());
        self.tcp_hint[i] = u32::try_from(index + 1).unwrap_or(0);
    }

    #[cfg(feature = "alloc")]
    fn hint_index(key: u64, len: usize) -> usize {
        // Fibonacci hashing: the top bits of the product, as many as the table needs.
        let bits = len.trailing_zeros();
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    /// dpwarp: the socket of `handle` with its metadata, if it is still in the set.
    pub(crate) fn item(&self, handle: SocketHandle) -> Option<&Item<'a>> {
        self.sockets.get(handle.0).and_then(|x| x.inner.as_ref())
    }

    /// dpwarp: the socket of `handle` with its metadata, if it is still in the set.
    pub(crate) fn item_mut(&mut self, handle: SocketHandle) -> Option<&mut Item<'a>> {
        self.item_at_mut(handle.0)
    }

    /// dpwarp: the socket in slot `index` with its handle, if the slot holds one.
    pub(crate) fn item_at_mut(&mut self, index: usize) -> Option<&mut Item<'a>> {
        self.sockets.get_mut(index).and_then(|x| x.inner.as_mut())
    }

    /// Add a socket to the set, and return its handle.
    ///
    /// # Panics
    /// This function panics if the storage is fixed-size (not a `Vec`) and is full.
    pub fn add<T: AnySocket<'a>>(&mut self, socket: T) -> SocketHandle {
        fn put<'a>(index: usize, slot: &mut SocketStorage<'a>, socket: Socket<'a>) -> SocketHandle {
            net_trace!("[{}]: adding", index);
            let handle = SocketHandle(index);
            let mut meta = Meta::default();
            meta.handle = handle;
            *slot = SocketStorage {
                inner: Some(Item { meta, socket }),
            };
            handle
        }

        let socket = socket.upcast();

        for (index, slot) in self.sockets.iter_mut().enumerate() {
            if slot.inner.is_none() {
                return put(index, slot, socket);
            }
        }

        match &mut self.sockets {
            ManagedSlice::Borrowed(_) => panic!("adding a socket to a full SocketSet"),
            #[cfg(feature = "alloc")]
            ManagedSlice::Owned(sockets) => {
                sockets.push(SocketStorage { inner: None });
                let index = sockets.len() - 1;
                put(index, &mut sockets[index], socket)
            }
        }
    }

    /// Get a socket from the set by its handle, as mutable.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set
    /// or the socket has the wrong type.
    pub fn get<T: AnySocket<'a>>(&self, handle: SocketHandle) -> &T {
        match self.sockets[handle.0].inner.as_ref() {
            Some(item) => {
                T::downcast(&item.socket).expect("handle refers to a socket of a wrong type")
            }
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Get a mutable socket from the set by its handle, as mutable.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set
    /// or the socket has the wrong type.
    pub fn get_mut<T: AnySocket<'a>>(&mut self, handle: SocketHandle) -> &mut T {
        match self.sockets[handle.0].inner.as_mut() {
            Some(item) => T::downcast_mut(&mut item.socket)
                .expect("handle refers to a socket of a wrong type"),
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Remove a socket from the set, without changing its state.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set.
    pub fn remove(&mut self, handle: SocketHandle) -> Socket<'a> {
        net_trace!("[{}]: removing", handle.0);
        match self.sockets[handle.0].inner.take() {
            Some(item) => item.socket,
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Get an iterator to the inner sockets.
    pub fn iter(&self) -> impl Iterator<Item = (SocketHandle, &Socket<'a>)> {
        self.items().map(|i| (i.meta.handle, &i.socket))
    }

    /// Get a mutable iterator to the inner sockets.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (SocketHandle, &mut Socket<'a>)> {
        self.items_mut().map(|i| (i.meta.handle, &mut i.socket))
    }

    /// Iterate every socket in this set.
    pub(crate) fn items(&self) -> impl Iterator<Item = &Item<'a>> + '_ {
        self.sockets.iter().filter_map(|x| x.inner.as_ref())
    }

    /// Iterate every socket in this set.
    pub(crate) fn items_mut(&mut self) -> impl Iterator<Item = &mut Item<'a>> + '_ {
        self.sockets.iter_mut().filter_map(|x| x.inner.as_mut())
    }

    /// dpwarp: like `items_mut`, with each item's slot index.
    pub(crate) fn indexed_items_mut(
        &mut self,
    ) -> impl Iterator<Item = (usize, &mut Item<'a>)> + '_ {
        self.sockets
            .iter_mut()
            .enumerate()
            .filter_map(|(i, x)| x.inner.as_mut().map(|item| (i, item)))
    }
}

/// dpwarp: the touched list and the TCP hint table.
#[cfg(all(test, feature = "alloc", feature = "socket-tcp"))]
mod dpwarp_tests {
    use super::*;
    use crate::socket::tcp;

    fn tcp_socket() -> tcp::Socket<'static> {
        tcp::Socket::new(
            tcp::SocketBuffer::new(alloc::vec![0; 64]),
            tcp::SocketBuffer::new(alloc::vec![0; 64]),
        )
    }

    #[test]
    fn touched_handles_come_out_once_per_run_and_only_once() {
        let mut set = SocketSet::new(alloc::vec![]);
        let a = set.add(tcp_socket());
        let b = set.add(tcp_socket());
        set.touch(a);
        set.touch(a);
        set.touch(b);
        set.touch(a);
        let mut out = alloc::vec![b];
        set.take_touched(&mut out);
        assert_eq!(out, [a, b, a]);
        set.take_touched(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn hints_are_kept_only_beyond_a_handful_of_sockets() {
        let mut set = SocketSet::new(alloc::vec![]);
        let handles: alloc::vec::Vec<_> = (0..4).map(|_| set.add(tcp_socket())).collect();
        set.set_tcp_hint(7, handles[2].index());
        assert_eq!(set.tcp_hint(7), None, "a small set is scanned");
        for _ in 0..HINT_MIN_SLOTS {
            set.add(tcp_socket());
        }
        set.set_tcp_hint(7, handles[2].index());
        set.set_tcp_hint(8, handles[3].index());
        assert_eq!(set.tcp_hint(7), Some(handles[2].index()));
        assert_eq!(set.tcp_hint(8), Some(handles[3].index()));
        assert!(set.item_mut(handles[2]).is_some());
        set.remove(handles[2]);
        // A stale hint still names the slot; the item is gone, so the caller scans.
        assert!(set.item_mut(handles[2]).is_none());
    }
}
