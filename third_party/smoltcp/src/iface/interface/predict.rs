//! dpwarp: receive header prediction for Ethernet/IPv4/TCP frames.
//!
//! Most frames a connection receives in a row differ from the one before only in the fields
//! that must move: the IPv4 identification, total length and checksum, the TCP sequence and
//! acknowledgment numbers, the window, the PSH flag and the TCP checksum. Everything else
//! (addresses, ports, header lengths, TTL, the other flags, the TCP options) stays, and so
//! does the socket that takes them. Parsing each frame's Ethernet, IPv4 and TCP headers
//! (`TcpRepr::parse` walks the options) and finding its socket again took about 300
//! instructions a frame of a 64 KiB RDMA Write at MTU 1500 in dpwarp; this path's own compare
//! and reads take back about half of that (dpwarp's docs/datapath.md "Header prediction
//! (receive)").
//!
//! After a frame took the full path to a connected TCP socket, its headers are kept as a
//! template with that socket ([`RxPrediction`]). A later frame whose header octets equal the
//! template's outside the moving fields is that socket's too: its moving fields are read at
//! their offsets, the template's parsed headers are reused for the rest, and the segment goes
//! to `Socket::process` directly, which checks it as it checks any segment (sequence
//! acceptability, ACK, window, state). Anything that does not match takes the full path,
//! which learns the new template. Van Jacobson's header prediction (4.3BSD Reno's
//! `tcp_input`) made the same bet one layer down.
//!
//! Only where no checksum is verified in software (the device verified them, or the link is
//! trusted): the full path verifies checksums, this one reads no more of the frame than the
//! fields above.

use super::*;
use crate::socket::tcp::Socket as TcpSocket;

/// The longest Ethernet, IPv4 and TCP headers, options included.
const HEADERS_MAX: usize = 14 + 60 + 60;

const WORDS_MAX: usize = HEADERS_MAX.div_ceil(8);

const ETH: usize = 14;
const TCP_FLAG_PSH: u8 = 0x08;

/// The headers of the last frame that took the full path to a connected TCP socket, the
/// socket, and what the full path parsed from them.
pub(crate) struct RxPrediction {
    /// The template, as (offset, octets, mask) words covering `len` octets (the last word
    /// may overlap the one before): a frame matches when each of its words equals the
    /// template's where the mask is set, which is everywhere but the moving fields.
    words: [(usize, u64, u64); WORDS_MAX],
    nwords: usize,
    /// Ethernet, IPv4 and TCP headers, options included.
    len: usize,
    /// Where the TCP header starts.
    tcp: usize,
    index: usize,
    ip: Ipv4Repr,
    tcp_repr: TcpRepr<'static>,
}

/// What `process_tcp_repr` tells the frame's caller about a segment a TCP socket took, for
/// it to keep as the next template.
#[derive(Clone, Copy)]
pub(crate) struct Learned {
    index: usize,
    ip: Ipv4Repr,
    tcp_repr: TcpRepr<'static>,
}

impl Learned {
    /// A segment `process_tcp_repr` gave the socket in slot `index`: kept only for what the
    /// prediction can take, ACK segments with no SYN, FIN or RST.
    pub(crate) fn of(index: usize, ip_repr: &IpRepr, tcp_repr: &TcpRepr) -> Option<Self> {
        #[allow(irrefutable_let_patterns)]
        let IpRepr::Ipv4(ip) = *ip_repr else {
            return None;
        };
        if !matches!(tcp_repr.control, TcpControl::None | TcpControl::Psh)
            || tcp_repr.ack_number.is_none()
        {
            return None;
        }
        Some(Learned {
            index,
            ip,
            tcp_repr: TcpRepr {
                payload: &[],
                ..*tcp_repr
            },
        })
    }
}

impl InterfaceInner {
    /// Whether frames may be predicted: Ethernet, and no checksum verified in software.
    fn rx_predictable(&self) -> bool {
        self.header_prediction
            && matches!(self.caps.medium, Medium::Ethernet)
            && !self.caps.checksum.ipv4.rx()
            && !self.caps.checksum.tcp.rx()
    }

    /// Forget the template (the interface's addresses changed).
    pub(crate) fn rx_forget(&mut self) {
        self.rx_prediction = None;
        self.rx_learned = None;
    }

    /// After a frame took the full path: keep its headers as the template if a connected TCP
    /// socket took it as an ACK segment (`rx_learned`). `frame` and `tail` are as the device
    /// handed them (`RxToken::consume_split`).
    pub(crate) fn rx_learn(&mut self, frame: &[u8], tail: &[u8]) {
        let Some(l) = self.rx_learned.take() else {
            return;
        };
        if !self.rx_predictable() || frame.len() < ETH + 20 {
            return;
        }
        let ip = &frame[ETH..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let tcp = ETH + ihl;
        if frame[12..14] != [0x08, 0x00]
            || ip[0] >> 4 != 4
            || ip[9] != 6
            // Fragments never match: more-fragments clear, offset 0.
            || ip[6] & 0x3f != 0
            || ip[7] != 0
            || ihl < 20
            || frame.len() < tcp + 20
        {
            return;
        }
        let len = tcp + usize::from(frame[tcp + 12] >> 4) * 4;
        if len > frame.len()
            || len > HEADERS_MAX
            || (!tail.is_empty() && len != frame.len())
            || HardwareAddress::Ethernet(EthernetAddress::from_bytes(&frame[..6]))
                != self.hardware_addr
            || !self.has_ip_addr(l.ip.dst_addr)
        {
            return;
        }
        // The moving fields: IPv4 total length (16..18), identification (18..20) and
        // checksum (24..26); TCP sequence and acknowledgment numbers (4..12), PSH, window
        // (14..16) and checksum (16..18).
        let mut mask = [0xffu8; HEADERS_MAX];
        for r in [16..20, 24..26, tcp + 4..tcp + 12, tcp + 14..tcp + 18] {
            mask[r].fill(0);
        }
        mask[tcp + 13] = !TCP_FLAG_PSH;
        let mut words = [(0, 0, 0); WORDS_MAX];
        let mut nwords = 0;
        let mut at = 0;
        while at < len {
            let off = at.min(len - 8);
            words[nwords] = (off, word(&frame[off..]), word(&mask[off..]));
            nwords += 1;
            at += 8;
        }
        self.rx_prediction = Some(RxPrediction {
            words,
            nwords,
            len,
            tcp,
            index: l.index,
            ip: l.ip,
            tcp_repr: l.tcp_repr,
        });
    }

    /// A frame that matches the template goes to the template's socket: `Some(reply)` when
    /// it did, None when the frame must take the full path.
    pub(crate) fn process_predicted<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        frame: &'frame [u8],
        tail: &'frame [u8],
    ) -> Option<Option<Packet<'frame>>> {
        let p = self.rx_prediction.as_ref()?;
        let (n, tcp) = (p.len, p.tcp);
        let h = frame.get(..n)?;
        // Equal to the template outside the moving fields.
        let differ = p.words[..p.nwords].iter().fold(0, |d, &(off, t, m)| {
            d | ((h.get(off..off + 8).map_or(!0, word) ^ t) & m)
        });
        if differ != 0 {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
        let payload = if tail.is_empty() {
            // A short frame may be padded past the IPv4 datagram.
            frame.get(n..ETH + total)?
        } else if frame.len() == n && ETH + total == n + tail.len() {
            tail
        } else {
            return None;
        };
        // The TCP header's fixed part, read at constant offsets.
        let th: &[u8; 20] = h[tcp..tcp + 20].try_into().ok()?;
        let tcp_repr = TcpRepr {
            seq_number: TcpSeqNumber(i32::from_be_bytes([th[4], th[5], th[6], th[7]])),
            ack_number: Some(TcpSeqNumber(i32::from_be_bytes([
                th[8], th[9], th[10], th[11],
            ]))),
            window_len: u16::from_be_bytes([th[14], th[15]]),
            control: if th[13] & TCP_FLAG_PSH != 0 {
                TcpControl::Psh
            } else {
                TcpControl::None
            },
            payload,
            ..p.tcp_repr
        };
        let ip_repr = IpRepr::Ipv4(Ipv4Repr {
            payload_len: total - (tcp - ETH),
            ..p.ip
        });
        let (index, src_addr) = (p.index, p.ip.src_addr);
        let item = sockets.item_at_mut(index)?;
        let handle = item.meta.handle;
        let socket = TcpSocket::downcast_mut(&mut item.socket)?;
        // The slot may hold another socket by now, or this one closed or reconnected.
        if socket.remote_endpoint().is_none() || !socket.accepts(self, &ip_repr, &tcp_repr) {
            return None;
        }
        // What the full path's `process_ipv4` does for every unicast frame: the sender's
        // neighbor entry lives on. Without it a stream whose every frame is predicted loses
        // the entry after its lifetime (60 s) and stalls behind an ARP request (found by the
        // fuzz target `tcp_ingress`).
        let src_mac = EthernetAddress::from_bytes(&h[6..12]);
        self.neighbor_cache.reset_expiry_if_existing(
            IpAddress::Ipv4(src_addr),
            HardwareAddress::Ethernet(src_mac),
            self.now,
        );
        let reply = socket
            .process(self, &ip_repr, &tcp_repr)
            .map(|(ip, tcp)| Packet::new(ip, IpPayload::Tcp(tcp)));
        sockets.touch(handle);
        self.rx_predicted += 1;
        Some(reply)
    }
}

/// The first 8 octets of `b` (at least 8 long), in memory order.
fn word(b: &[u8]) -> u64 {
    u64::from_ne_bytes(b[..8].try_into().unwrap())
}

#[cfg(all(test, feature = "medium-ethernet", feature = "socket-tcp"))]
mod dpwarp_tests {
    use super::*;
    use crate::iface::SocketHandle;
    use crate::phy::ChecksumCapabilities;
    use crate::socket::tcp;
    use crate::tests::{setup, TestingDevice};
    use crate::time::Instant;
    use std::vec::Vec;

    const LOCAL: Ipv4Address = Ipv4Address::new(192, 168, 1, 1);
    const REMOTE: Ipv4Address = Ipv4Address::new(192, 168, 1, 2);
    const REMOTE_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x22]);
    const LOCAL_MAC: EthernetAddress = EthernetAddress([0x02, 0x02, 0x02, 0x02, 0x02, 0x02]);

    /// An Ethernet/IPv4/TCP frame from REMOTE:5000 to LOCAL:`port`.
    fn frame(port: u16, control: TcpControl, seq: u32, ack: Option<u32>, data: &[u8]) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 5000,
            dst_port: port,
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: 4096,
            window_scale: None,
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: data,
        };
        let ip = Ipv4Repr {
            src_addr: REMOTE,
            dst_addr: LOCAL,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut buf = vec![0; 14 + ip.buffer_len() + tcp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.set_src_addr(REMOTE_MAC);
        eth.set_dst_addr(LOCAL_MAC);
        eth.set_ethertype(EthernetProtocol::Ipv4);
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..34]), &caps);
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut buf[34..]),
            &REMOTE.into(),
            &LOCAL.into(),
            &caps,
        );
        buf
    }

    /// The TCP segments the interface sent.
    fn sent(device: &mut TestingDevice) -> Vec<(TcpControl, u32, u32, usize)> {
        let mut out = Vec::new();
        while let Some(f) = device.tx_queue.pop_front() {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            // (MLD reports of the IPv6 addresses `setup` gives, in builds with IPv6.)
            if eth.ethertype() != EthernetProtocol::Ipv4 {
                continue;
            }
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            let repr = TcpRepr::parse(
                &tcp,
                &LOCAL.into(),
                &REMOTE.into(),
                &ChecksumCapabilities::ignored(),
            )
            .unwrap();
            out.push((
                repr.control,
                repr.seq_number.0 as u32,
                repr.ack_number.map_or(0, |a| a.0 as u32),
                repr.payload.len(),
            ));
        }
        out
    }

    struct Peer {
        iface: Interface,
        sockets: SocketSet<'static>,
        device: TestingDevice,
        handle: SocketHandle,
        /// Our side's next sequence number, acknowledged by every frame the test sends.
        ack: u32,
    }

    impl Peer {
        /// A socket listening on port 4000, connected by REMOTE (initial sequence 1000), on
        /// an interface that verifies no checksum (`trusted`) or one that verifies both.
        fn connected(trusted: bool) -> Peer {
            let (mut iface, mut sockets, device) = setup(Medium::Ethernet);
            if trusted {
                iface.inner.caps.checksum = ChecksumCapabilities::ignored();
            }
            iface.inner.neighbor_cache.fill(
                REMOTE.into(),
                HardwareAddress::Ethernet(REMOTE_MAC),
                Instant::ZERO,
            );
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; 65536]),
                tcp::SocketBuffer::new(vec![0; 65536]),
            );
            s.listen(4000).unwrap();
            let handle = sockets.add(s);
            let mut p = Peer {
                iface,
                sockets,
                device,
                handle,
                ack: 0,
            };
            p.feed(frame(4000, TcpControl::Syn, 1000, None, &[]));
            let synack = sent(&mut p.device);
            assert_eq!(synack.len(), 1, "{synack:?}");
            assert_eq!((synack[0].0, synack[0].2), (TcpControl::Syn, 1001));
            p.ack = synack[0].1.wrapping_add(1);
            p.feed(frame(4000, TcpControl::None, 1001, Some(p.ack), &[]));
            assert_eq!(p.socket().state(), tcp::State::Established);
            p
        }

        fn feed(&mut self, f: Vec<u8>) {
            self.device.rx_queue.push_back(f);
            self.iface
                .poll(Instant::ZERO, &mut self.device, &mut self.sockets);
        }

        fn socket(&mut self) -> &mut tcp::Socket<'static> {
            self.sockets.get_mut::<tcp::Socket>(self.handle)
        }

        fn data(&mut self, seq: u32, data: &[u8]) {
            let f = frame(4000, TcpControl::Psh, seq, Some(self.ack), data);
            self.feed(f);
        }

        fn received(&mut self) -> Vec<u8> {
            let mut buf = vec![0; 65536];
            let n = self.socket().recv_slice(&mut buf).unwrap();
            buf.truncate(n);
            buf
        }
    }

    #[test]
    fn test_segments_of_a_connection_are_predicted() {
        let mut p = Peer::connected(true);
        // The handshake's last ACK taught the template; data segments with PSH match it.
        assert_eq!(p.iface.rx_predicted(), 0);
        p.data(1001, b"abcd");
        p.data(1005, b"efgh");
        p.data(1009, b"ijkl");
        assert_eq!(p.iface.rx_predicted(), 3);
        assert_eq!(p.received(), b"abcdefghijkl");

        // Out of order: predicted too, and the socket still holds it back and acknowledges
        // at once (a duplicate ACK asking for 1013).
        sent(&mut p.device);
        p.data(1017, b"qrst");
        assert_eq!(p.iface.rx_predicted(), 4);
        let acks = sent(&mut p.device);
        assert_eq!(acks.last().map(|a| a.2), Some(1013), "{acks:?}");
        p.data(1013, b"mnop");
        assert_eq!(p.received(), b"mnopqrst");

        // A FIN differs outside the moving fields: the full path, which closes.
        let f = frame(4000, TcpControl::Fin, 1021, Some(p.ack), &[]);
        p.feed(f);
        assert_eq!(p.iface.rx_predicted(), 5);
        assert_eq!(p.socket().state(), tcp::State::CloseWait);
    }

    #[test]
    fn test_nothing_is_predicted_where_checksums_are_verified() {
        let mut p = Peer::connected(false);
        p.data(1001, b"abcd");
        p.data(1005, b"efgh");
        assert_eq!(p.iface.rx_predicted(), 0);
        assert_eq!(p.received(), b"abcdefgh");
    }

    #[test]
    fn test_another_port_or_a_new_socket_in_the_slot_takes_the_full_path() {
        let mut p = Peer::connected(true);
        p.data(1001, b"abcd");
        assert_eq!(p.iface.rx_predicted(), 1);
        sent(&mut p.device);

        // Another local port: no socket, a RST.
        let f = frame(4001, TcpControl::Psh, 1005, Some(p.ack), b"efgh");
        p.feed(f);
        assert_eq!(p.iface.rx_predicted(), 1);
        let rst = sent(&mut p.device);
        assert_eq!(rst.first().map(|r| r.0), Some(TcpControl::Rst), "{rst:?}");

        // The connection's socket goes; a listening one takes its slot. A frame that matches
        // the template is not the listener's: the full path answers with a RST.
        p.data(1005, b"efgh");
        assert_eq!(p.iface.rx_predicted(), 2);
        p.sockets.remove(p.handle);
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 1024]),
            tcp::SocketBuffer::new(vec![0; 1024]),
        );
        s.listen(4000).unwrap();
        let h = p.sockets.add(s);
        assert_eq!(h, p.handle, "the slot is reused");
        sent(&mut p.device);
        p.data(1009, b"ijkl");
        assert_eq!(p.iface.rx_predicted(), 2);
        let rst = sent(&mut p.device);
        assert_eq!(rst.first().map(|r| r.0), Some(TcpControl::Rst), "{rst:?}");
        assert_eq!(p.socket().state(), tcp::State::Listen);
    }

    #[test]
    fn test_predicted_frames_keep_the_neighbor_entry_alive() {
        let mut p = Peer::connected(true);
        // A frame every 30 s for 90 s, each predicted: the entry filled at 0 lives on.
        for (k, secs) in [30, 60, 90].into_iter().enumerate() {
            let f = frame(4000, TcpControl::Psh, 1001 + 4 * k as u32, Some(p.ack), b"abcd");
            p.device.rx_queue.push_back(f);
            p.iface
                .poll(Instant::from_secs(secs), &mut p.device, &mut p.sockets);
        }
        assert_eq!(p.iface.rx_predicted(), 3);
        let answer = p
            .iface
            .inner
            .neighbor_cache
            .lookup(&REMOTE.into(), Instant::from_secs(100));
        assert!(
            matches!(answer, crate::iface::neighbor::Answer::Found(_)),
            "the neighbor entry expired"
        );
    }

    #[test]
    fn test_split_frames_keep_the_neighbor_entry_alive() {
        // Checksums verified: no prediction, the split path of the full path.
        let mut p = Peer::connected(false);
        p.iface.inner.now = Instant::from_secs(50);
        let f = frame(4000, TcpControl::Psh, 1001, Some(p.ack), b"abcd");
        let (headers, payload) = f.split_at(14 + 20 + 20);
        p.iface
            .inner
            .process_ethernet_split_tcp(&mut p.sockets, headers, payload);
        assert_eq!(p.received(), b"abcd");
        let answer = p
            .iface
            .inner
            .neighbor_cache
            .lookup(&REMOTE.into(), Instant::from_secs(100));
        assert!(
            matches!(answer, crate::iface::neighbor::Answer::Found(_)),
            "the neighbor entry expired"
        );
    }

    #[test]
    fn test_header_prediction_turned_off() {
        let mut p = Peer::connected(true);
        p.iface.set_header_prediction(false);
        assert!(!p.iface.header_prediction());
        p.data(1001, b"abcd");
        p.data(1005, b"efgh");
        assert_eq!(p.iface.rx_predicted(), 0);
        assert_eq!(p.received(), b"abcdefgh");
        p.iface.set_header_prediction(true);
        p.data(1009, b"ijkl");
        p.data(1013, b"mnop");
        // The first frame after turning it on teaches the template, the next matches it.
        assert_eq!(p.iface.rx_predicted(), 1);
        assert_eq!(p.received(), b"ijklmnop");
    }

    #[test]
    fn test_a_changed_address_forgets_the_template() {
        let mut p = Peer::connected(true);
        p.data(1001, b"abcd");
        assert_eq!(p.iface.rx_predicted(), 1);
        p.iface.update_ip_addrs(|a| {
            a.retain(|c| c.address() != IpAddress::Ipv4(LOCAL));
            a.push(IpCidr::new(IpAddress::v4(192, 168, 1, 9), 24)).unwrap();
        });
        p.data(1005, b"efgh");
        assert_eq!(p.iface.rx_predicted(), 1);
        assert_eq!(p.received(), b"abcd");
    }
}
