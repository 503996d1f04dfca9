use super::*;

impl InterfaceInner {
    pub(super) fn process_ethernet<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        meta: crate::phy::PacketMeta,
        frame: &'frame [u8],
        fragments: &'frame mut FragmentsBuffer,
    ) -> Option<EthernetPacket<'frame>> {
        let eth_frame = check!(EthernetFrame::new_checked(frame));

        // Ignore any packets not directed to our hardware address or any of the multicast groups.
        if !eth_frame.dst_addr().is_broadcast()
            && !eth_frame.dst_addr().is_multicast()
            && HardwareAddress::Ethernet(eth_frame.dst_addr()) != self.hardware_addr
        {
            return None;
        }

        match eth_frame.ethertype() {
            #[cfg(feature = "proto-ipv4")]
            EthernetProtocol::Arp => self.process_arp(self.now, &eth_frame),
            #[cfg(feature = "proto-ipv4")]
            EthernetProtocol::Ipv4 => {
                let ipv4_packet = check!(Ipv4Packet::new_checked(eth_frame.payload()));

                self.process_ipv4(
                    sockets,
                    meta,
                    eth_frame.src_addr().into(),
                    &ipv4_packet,
                    fragments,
                )
                .map(EthernetPacket::Ip)
            }
            #[cfg(feature = "proto-ipv6")]
            EthernetProtocol::Ipv6 => {
                let ipv6_packet = check!(Ipv6Packet::new_checked(eth_frame.payload()));
                self.process_ipv6(sockets, meta, eth_frame.src_addr().into(), &ipv6_packet)
                    .map(EthernetPacket::Ip)
            }
            // Drop all other traffic.
            _ => None,
        }
    }

    /// dpwarp: an Ethernet/IPv4/TCP frame whose TCP payload is held apart from its headers
    /// (`RxToken::consume_split`): `header` is exactly the Ethernet, IPv4 and TCP headers.
    /// Only the plain case takes this path: unfragmented unicast TCP from a unicast address
    /// to our MAC and one of our addresses, the IPv4 total length exactly the frame's.
    /// Checksums are verified as usual, the TCP one over the header and the payload where
    /// they are; `Some(reply)` then. For anything else (`None`) the caller hands the frame
    /// to the whole-frame path, on a copy, so that splitting a frame never changes what
    /// becomes of it (dpwarp's fuzz target `tcp_ingress` compares the two).
    #[cfg(all(feature = "proto-ipv4", feature = "socket-tcp"))]
    pub(super) fn process_ethernet_split_tcp<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        header: &'frame [u8],
        payload: &'frame [u8],
    ) -> Option<Option<EthernetPacket<'frame>>> {
        let eth_frame = check!(EthernetFrame::new_checked(header));
        if HardwareAddress::Ethernet(eth_frame.dst_addr()) != self.hardware_addr
            || eth_frame.ethertype() != EthernetProtocol::Ipv4
        {
            return None;
        }
        let ip: &'frame [u8] = &header[EthernetFrame::<&[u8]>::header_len()..];
        if ip.len() < 20 {
            return None;
        }
        let ipv4 = Ipv4Packet::new_unchecked(ip);
        let hl = ipv4.header_len() as usize;
        if ipv4.version() != 4
            || hl < 20
            || ip.len() < hl + 20
            || usize::from(ipv4.total_len()) != ip.len() + payload.len()
            || ipv4.more_frags()
            || ipv4.frag_offset() != 0
            || ipv4.next_header() != IpProtocol::Tcp
        {
            return None;
        }
        let (src, dst) = (ipv4.src_addr(), ipv4.dst_addr());
        if !self.is_unicast_v4(src) || !self.has_ip_addr(dst) {
            return None;
        }
        let tcp_header: &'frame [u8] = &ip[hl..];
        let tcp_packet = check!(TcpPacket::new_checked(tcp_header));
        if tcp_packet.header_len() as usize != tcp_header.len() {
            return None;
        }
        // The plain case from here on: what the whole-frame path would do.
        if self.caps.checksum.ipv4.rx() && !ipv4.verify_checksum() {
            return Some(None);
        }
        // As `process_ipv4` does for every unicast datagram: the sender's neighbor entry lives
        // on (found by the fuzz target: a stream received only as split frames lost the
        // entry after 60 s and stalled behind an ARP request).
        self.neighbor_cache.reset_expiry_if_existing(
            IpAddress::Ipv4(src),
            HardwareAddress::Ethernet(eth_frame.src_addr()),
            self.now,
        );
        let (s, d) = (IpAddress::Ipv4(src), IpAddress::Ipv4(dst));
        // Not under a fuzzer, as `TcpPacket::verify_checksum`.
        if self.caps.checksum.tcp.rx() && !cfg!(fuzzing) {
            use crate::wire::ip::checksum;
            let sum = checksum::combine(&[
                checksum::pseudo_header(
                    &s,
                    &d,
                    IpProtocol::Tcp,
                    (tcp_header.len() + payload.len()) as u32,
                ),
                checksum::data(tcp_header),
                checksum::data(payload),
            ]);
            if sum != !0 {
                return Some(None);
            }
        }
        let Ok(mut tcp_repr) = TcpRepr::parse(
            &tcp_packet,
            &s,
            &d,
            &crate::phy::ChecksumCapabilities::ignored(),
        ) else {
            net_trace!("iface: malformed TCP header");
            return Some(None);
        };
        tcp_repr.payload = payload;
        let ip_repr = IpRepr::Ipv4(Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_header.len() + payload.len(),
            hop_limit: ipv4.hop_limit(),
        });
        Some(
            self.process_tcp_repr(sockets, ip_repr, tcp_repr)
                .map(EthernetPacket::Ip),
        )
    }

    pub(super) fn dispatch_ethernet<Tx, F>(
        &mut self,
        tx_token: Tx,
        buffer_len: usize,
        f: F,
    ) -> Result<(), DispatchError>
    where
        Tx: TxToken,
        F: FnOnce(EthernetFrame<&mut [u8]>),
    {
        let tx_len = EthernetFrame::<&[u8]>::buffer_len(buffer_len);
        tx_token.consume(tx_len, |tx_buffer| {
            debug_assert!(tx_buffer.as_ref().len() == tx_len);
            let mut frame = EthernetFrame::new_unchecked(tx_buffer);

            let src_addr = self.hardware_addr.ethernet_or_panic();
            frame.set_src_addr(src_addr);

            f(frame);

            Ok(())
        })
    }
}
