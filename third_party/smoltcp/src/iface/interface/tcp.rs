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
        // the same remote endpoint and local port (`SocketSet::tcp_hint`), if it still accepts
        // it: finding it no longer costs a look at every socket of the set. A connection
        // request (SYN without ACK) takes the scan as upstream, so a listening socket earlier
        // in the set is found as before.
        #[cfg(feature = "alloc")]
        let key = hint_key(&ip_repr, &tcp_repr);
        #[cfg(feature = "alloc")]
        if let Some(key) = key {
            if let Some(index) = sockets.tcp_hint(key) {
                let mut hit = None;
                if let Some(item) = sockets.item_at_mut(index) {
                    let handle = item.meta.handle;
                    if let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) {
                        if tcp_socket.remote_endpoint().is_some()
                            && tcp_socket.accepts(self, &ip_repr, &tcp_repr)
                        {
                            hit = Some((
                                handle,
                                tcp_socket
                                    .process(self, &ip_repr, &tcp_repr)
                                    .map(|(ip, tcp)| Packet::new(ip, IpPayload::Tcp(tcp))),
                            ));
                        }
                    }
                }
                if let Some((handle, reply)) = hit {
                    sockets.touch(handle);
                    return reply;
                }
            }
        }
        let mut found = None;
        for (index, item) in sockets.indexed_items_mut() {
            let handle = item.meta.handle;
            let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) else {
                continue;
            };
            if tcp_socket.accepts(self, &ip_repr, &tcp_repr) {
                let reply = tcp_socket
                    .process(self, &ip_repr, &tcp_repr)
                    .map(|(ip, tcp)| Packet::new(ip, IpPayload::Tcp(tcp)));
                let connected = tcp_socket.remote_endpoint().is_some();
                found = Some((index, handle, connected, reply));
                break;
            }
        }
        if let Some((_index, handle, _connected, reply)) = found {
            #[cfg(feature = "alloc")]
            {
                sockets.touch(handle);
                if let (Some(key), true) = (key, _connected) {
                    sockets.set_tcp_hint(key, _index);
                }
            }
            let _ = handle;
            return reply;
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

/// dpwarp: the `SocketSet::tcp_hint` key of a segment that is not a connection request: its
/// remote address and port and its local port (one interface: the local address is the
/// interface's), or None.
#[cfg(feature = "alloc")]
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
