use super::*;

use crate::socket::tcp::Socket;

impl InterfaceInner {
    pub(crate) fn process_tcp<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        ip_repr: IpRepr,
        ip_payload: &'frame [u8],
    ) -> Option<Packet<'frame>> {
        let (src_addr, dst_addr) = (ip_repr.src_addr(), ip_repr.dst_addr());
        let tcp_packet = check!(TcpPacket::new_checked(ip_payload));
        let tcp_repr = check!(TcpRepr::parse(
            &tcp_packet,
            &src_addr,
            &dst_addr,
            &self.caps.checksum
        ));
        self.process_tcp_repr(sockets, ip_repr, tcp_repr)
    }

    /// dpwarp: `process_tcp` after parsing (shared with the split-frame path).
    pub(crate) fn process_tcp_repr<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        ip_repr: IpRepr,
        tcp_repr: TcpRepr<'frame>,
    ) -> Option<Packet<'frame>> {
        // dpwarp: a segment of a connection goes first to the socket that took the last one of
        // the same remote endpoint and local port (`SocketSet::tcp_hint`), if it is still
        // connected and accepts it: finding it no longer costs a look at every socket of the
        // set. Otherwise (a connection request, SYN without ACK, among them: no key) the scan
        // finds the first socket that accepts it, as upstream does.
        let key = hint_key(&ip_repr, &tcp_repr);
        let hinted = key
            .and_then(|k| sockets.tcp_hint(k))
            .filter(|&i| {
                sockets
                    .item_at_mut(i)
                    .is_some_and(|item| tcp_accepts(self, item, &ip_repr, &tcp_repr, true))
            });
        let index = hinted.or_else(|| {
            sockets
                .indexed_items_mut()
                .find(|(_, item)| tcp_accepts(self, item, &ip_repr, &tcp_repr, false))
                .map(|(i, _)| i)
        });
        if let Some((i, item)) = index.and_then(|i| sockets.item_at_mut(i).map(|t| (i, t))) {
            let handle = item.meta.handle;
            if let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) {
                let reply = tcp_socket
                    .process(self, &ip_repr, &tcp_repr)
                    .map(|(ip, tcp)| Packet::new(ip, IpPayload::Tcp(tcp)));
                let connected = tcp_socket.remote_endpoint().is_some();
                // dpwarp: the frame's caller may keep its headers for the next frame's
                // prediction (`predict.rs`).
                #[cfg(all(feature = "medium-ethernet", feature = "proto-ipv4"))]
                if connected {
                    self.rx_learned = super::predict::Learned::of(i, &ip_repr, &tcp_repr);
                }
                sockets.touch(handle);
                if let (Some(key), Some(index), None, true) = (key, index, hinted, connected) {
                    sockets.set_tcp_hint(key, index);
                }
                return reply;
            }
        }

        if tcp_repr.control == TcpControl::Rst
            || ip_repr.dst_addr().is_unspecified()
            || ip_repr.src_addr().is_unspecified()
        {
            // Never reply to a TCP RST packet with another TCP RST packet. We also never want to
            // send a TCP RST packet with unspecified addresses.
            None
        } else {
            // The packet wasn't handled by a socket, send a TCP RST packet.
            let (ip, tcp) = tcp::Socket::rst_reply(&ip_repr, &tcp_repr);
            Some(Packet::new(ip, IpPayload::Tcp(tcp)))
        }
    }
}

/// dpwarp: whether the socket of `item` is a TCP socket that accepts the segment (and, with
/// `connected`, has its remote endpoint: a hint never names a listening socket).
fn tcp_accepts(
    cx: &mut InterfaceInner,
    item: &crate::iface::socket_set::Item<'_>,
    ip_repr: &IpRepr,
    tcp_repr: &TcpRepr,
    connected: bool,
) -> bool {
    Socket::downcast(&item.socket).is_some_and(|s| {
        (!connected || s.remote_endpoint().is_some()) && s.accepts(cx, ip_repr, tcp_repr)
    })
}

/// dpwarp: the `SocketSet::tcp_hint` key of a segment that is not a connection request: its
/// remote address and port and its local port (one interface: the local address is the
/// interface's), or None.
fn hint_key(ip_repr: &IpRepr, tcp_repr: &TcpRepr) -> Option<u64> {
    if tcp_repr.control == TcpControl::Syn && tcp_repr.ack_number.is_none() {
        return None;
    }
    #[allow(irrefutable_let_patterns)]
    let IpAddress::Ipv4(src) = ip_repr.src_addr() else {
        return None;
    };
    Some(
        (u64::from(u32::from_be_bytes(src.octets())) << 32)
            | (u64::from(tcp_repr.src_port) << 16)
            | u64::from(tcp_repr.dst_port),
    )
}
