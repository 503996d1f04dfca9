//! The vendored smoltcp's TCP receive path, set up as the DPDK dataplane runs it (Ethernet,
//! Nagle off, segments cut at record ends, payload lent from the frame, split frames,
//! segmentation offload),
//! under a hostile peer: segments with any flags, sequence and acknowledgment numbers near and
//! far from what is expected, windows, options, truncated and corrupted frames, and arbitrary
//! octets after an Ethernet header; between them the application sends, reads, closes, aborts
//! and replaces the socket, and time passes.
//!
//! Two copies of the whole stack take the same input: one with header prediction on (both
//! halves: `predict.rs`, and the fast path of `Socket::process`), frames handed split where
//! the input says (headers apart from the payload, `RxToken::consume_split`) and, where the
//! input says, enough sockets for `SocketSet`'s hint table; and a reference with prediction
//! off, whole frames and one socket. Checked:
//! - no panic (smoltcp's sequence-number arithmetic panics on underflow, release builds too:
//!   a peer that reaches one crashes the worker);
//! - every frame sent, every octet delivered and the socket's state are the same in both
//!   (prediction and split frames change the route a frame takes, never the result); the
//!   socket's full `Debug` state is compared at the end;
//! - the octets delivered (lent and read by `recv`, in order) are the peer's stream: the octet
//!   at sequence number `s` is always `pattern(s)`, so a misplaced octet shows (checked while
//!   no corrupted or arbitrary frame was fed, whose payload could be anything).
#![no_main]
use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use smoltcp::iface::{Config, Interface, PollIngressSingleResult, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, HardwareAddress, IpAddress, IpCidr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};

const LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const LOCAL_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const PEER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
const LOCAL_PORT: u16 = 20049;
const PEER_PORT: u16 = 40000;
/// Payloads are cut from one stream of this many octets' worth of pattern.
const MAX_PAYLOAD: usize = 9000;

/// `TCP_INGRESS_TRACE=1` when running one input: what each step fed and what came back.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TCP_INGRESS_TRACE").is_some())
}

macro_rules! trace {
    ($($t:tt)*) => {
        if tracing() {
            eprintln!($($t)*);
        }
    };
}

/// The peer's octet at sequence number `s`.
fn pattern(s: u32) -> u8 {
    (s.wrapping_mul(0x9E37_79B1) >> 24) as u8
}

/// The fuzzer's bytes, read as the operations' parameters; zeros once they run out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct Frame {
    bytes: Vec<u8>,
    /// Handed as headers and payload apart when it is exactly Ethernet/IPv4/TCP, as the
    /// dataplane's device hands a two-segment mbuf.
    split: bool,
}

struct FuzzDevice {
    rx: VecDeque<Frame>,
    /// The frame consumed last (as the dataplane's `HeldFrame`): what a socket lent lies in it.
    held: Option<Frame>,
    tx: Vec<Vec<u8>>,
    caps: DeviceCapabilities,
    gso: usize,
}

impl phy::Device for FuzzDevice {
    type RxToken<'a> = Rx<'a>;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _: Instant) -> Option<(Rx<'_>, Tx<'_>)> {
        let f = self.rx.pop_front()?;
        Some((Rx(f, &mut self.held), Tx(&mut self.tx)))
    }
    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        Some(Tx(&mut self.tx))
    }
    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
    fn tcp_gso_frames(&self) -> usize {
        self.gso
    }
}

struct Rx<'a>(Frame, &'a mut Option<Frame>);

/// Where a frame's TCP payload starts, if the frame is Ethernet/IPv4/TCP with a payload
/// (the test the dataplane applies to a received two-segment mbuf).
fn headers_len(f: &[u8]) -> Option<usize> {
    if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[23] != 6 {
        return None;
    }
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let tcp = 14 + ihl;
    if ihl < 20 || f.len() < tcp + 20 {
        return None;
    }
    let doff = usize::from(f[tcp + 12] >> 4) * 4;
    let h = tcp + doff;
    (doff >= 20 && h < f.len()).then_some(h)
}

impl phy::RxToken for Rx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.0.bytes);
        *self.1 = Some(self.0);
        r
    }
    fn consume_split<R, F: FnOnce(&[u8], &[u8]) -> R>(self, f: F) -> R {
        let b = &self.0.bytes;
        let r = match headers_len(b) {
            Some(h) if self.0.split => f(&b[..h], &b[h..]),
            _ => f(b, &[]),
        };
        *self.1 = Some(self.0);
        r
    }
}

struct Tx<'a>(&'a mut Vec<Vec<u8>>);

impl phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.push(buf);
        r
    }
}

/// How the socket is made, from the input's first bytes.
#[derive(Clone, Copy)]
struct Setup {
    trusted: bool,
    mtu: usize,
    gso: usize,
    rx_buffer: usize,
    tx_buffer: usize,
    records: bool,
    ack_delay: Option<Duration>,
    keep_alive: Option<Duration>,
    timeout: Option<Duration>,
    congestion: tcp::CongestionControl,
    active: bool,
    /// Closed sockets in the first slots of the stack under test (not the reference's), so
    /// that it finds the socket through `SocketSet`'s hint table (kept beyond 8 slots),
    /// the reference by its scan.
    crowd: bool,
    /// The dataplane's `[tcp] rto_min_ms` (default 50) and `user_timeout_ms` (default
    /// 120 s), or smoltcp's own (no user timeout).
    rto_min: Option<Duration>,
}

impl Setup {
    fn read(r: &mut Input) -> Setup {
        let a = r.u8();
        let b = r.u8();
        Setup {
            trusted: a & 1 == 0,
            mtu: if a & 2 == 0 { 1500 } else { 9000 },
            gso: if a & 4 == 0 { 0 } else { 4 },
            rx_buffer: [4096, 65536, 1 << 20, 1500][usize::from(a >> 3) & 3],
            tx_buffer: [4096, 65536, 1 << 20, 1500][usize::from(a >> 5) & 3],
            records: a & 0x80 == 0,
            ack_delay: [Some(Duration::from_millis(10)), None][usize::from(b & 1)],
            keep_alive: [None, Some(Duration::from_secs(1))][usize::from(b >> 1) & 1],
            timeout: [None, Some(Duration::from_secs(5))][usize::from(b >> 2) & 1],
            congestion: [
                tcp::CongestionControl::Reno,
                tcp::CongestionControl::Cubic,
                tcp::CongestionControl::None,
                tcp::CongestionControl::Reno,
            ][usize::from(b >> 3) & 3],
            active: b & 0x20 != 0,
            crowd: b & 0x40 != 0,
            rto_min: (b & 0x80 == 0).then(|| Duration::from_millis(50)),
        }
    }

    fn socket(&self) -> tcp::Socket<'static> {
        let rx = tcp::SocketBuffer::new(vec![0u8; self.rx_buffer]);
        let tx = tcp::SocketBuffer::new(vec![0u8; self.tx_buffer]);
        let mut s = tcp::Socket::new(rx, tx);
        s.set_nagle_enabled(false);
        s.set_tx_records(self.records);
        s.set_ack_delay(self.ack_delay);
        s.set_keep_alive(self.keep_alive);
        s.set_timeout(self.timeout);
        s.set_congestion_control(self.congestion);
        if let Some(rto_min) = self.rto_min {
            s.set_rto_min(rto_min);
            s.set_user_timeout(Some(Duration::from_secs(120)));
            // As a worker with `[tcp] keepalive_ms` sets them.
            s.set_keep_alive_probes(self.keep_alive.map(|_| 3));
        }
        s
    }
}

/// One copy of the stack.
struct World {
    iface: Interface,
    dev: FuzzDevice,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    /// Whether the socket lends in-order payload (else it buffers everything).
    lend: bool,
    /// Octets delivered, lent and read by `recv`, in order.
    delivered: Vec<u8>,
    /// Octets the socket took from the application (`send_slice`) since it was opened.
    enqueued: usize,
}

impl World {
    fn new(setup: &Setup, prediction: bool, now: Instant) -> World {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = setup.mtu + 14;
        if setup.trusted {
            caps.checksum = ChecksumCapabilities::ignored();
        }
        let mut dev = FuzzDevice {
            rx: VecDeque::new(),
            held: None,
            tx: Vec::new(),
            caps,
            gso: setup.gso,
        };
        let mut config = Config::new(HardwareAddress::Ethernet(LOCAL_MAC));
        config.random_seed = 0x5eed;
        let mut iface = Interface::new(config, &mut dev, now);
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::Ipv4(LOCAL_IP), 24));
        });
        iface.set_header_prediction(prediction);
        let mut w = World {
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            handle: SocketHandle::default(),
            lend: true,
            delivered: Vec::new(),
            enqueued: 0,
        };
        if setup.crowd && prediction {
            for _ in 0..9 {
                w.sockets.add(setup.socket());
            }
        }
        w.handle = w.sockets.add(setup.socket());
        w.open(setup);
        w
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }

    /// Listen or connect, the socket lending in-order payload as the dataplane's do.
    fn open(&mut self, setup: &Setup) {
        let lend = self.lend;
        let s = self.sockets.get_mut::<tcp::Socket>(self.handle);
        s.set_rx_lend(lend);
        if setup.active {
            let cx = self.iface.context();
            let _ = s.connect(cx, (IpAddress::Ipv4(PEER_IP), PEER_PORT), LOCAL_PORT);
        } else {
            let _ = s.listen(LOCAL_PORT);
        }
    }

    /// As the worker polls: one frame at a time, what it lent taken from the frame at once
    /// (`Worker::place_lent`), then the egress.
    fn poll(&mut self, now: Instant) {
        while self
            .iface
            .poll_ingress_single(now, &mut self.dev, &mut self.sockets)
            != PollIngressSingleResult::None
        {
            let Some(h) = self.sockets.last_touched() else {
                continue;
            };
            let Some(lent) = self.sockets.get_mut::<tcp::Socket>(h).take_rx_lent() else {
                continue;
            };
            let frame = self.dev.held.as_ref().expect("a frame was consumed");
            let Some(payload) = lent
                .within(&frame.bytes)
                .or_else(|| lent.within(self.iface.rx_copy()))
            else {
                panic!("{lent:?} neither in the frame nor in the interface's copy of it");
            };
            assert_eq!(h, self.handle, "only the connection's socket lends");
            self.delivered.extend_from_slice(payload);
        }
        self.dev.held = None;
        self.iface.poll_egress(now, &mut self.dev, &mut self.sockets);
    }
}

/// What the peer knows of the connection, from the frames the stack sent.
#[derive(Default)]
struct Peer {
    /// The next octet the peer sends.
    snd_nxt: u32,
    /// The highest sequence number the stack has sent (SYN and FIN count).
    rcv_max: Option<u32>,
    /// The last acknowledgment number the stack sent.
    acked: Option<u32>,
    /// The stack's last timestamp value, echoed.
    tsval: u32,
    /// The stack's ISS, from its SYN or SYN-ACK (None again with a new socket).
    iss: Option<u32>,
    /// The highest sequence number the stack has sent since that ISS, RSTs left out: a RST
    /// in reply to a stray segment takes its sequence number from that segment's ACK, any
    /// number the peer chose (`rcv_max` counts those too, as the peer's ACKs may).
    sent_max: Option<u32>,
}

fn wrapping_max(a: u32, b: u32) -> u32 {
    if (b.wrapping_sub(a) as i32) > 0 {
        b
    } else {
        a
    }
}

fn seq(s: u32) -> TcpSeqNumber {
    TcpSeqNumber(s as i32)
}

fn ethernet(ethertype: EthernetProtocol, payload_len: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; 14 + payload_len];
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: LOCAL_MAC,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    (buf, 14)
}

/// A frame carrying `repr` from the peer, checksums right.
fn tcp_frame(repr: &TcpRepr) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let ip = Ipv4Repr {
        src_addr: PEER_IP,
        dst_addr: LOCAL_IP,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    };
    let (mut buf, at) = ethernet(EthernetProtocol::Ipv4, 20 + repr.buffer_len());
    let mut p = Ipv4Packet::new_unchecked(&mut buf[at..]);
    ip.emit(&mut p, &caps);
    let mut t = TcpPacket::new_unchecked(p.payload_mut());
    repr.emit(
        &mut t,
        &IpAddress::Ipv4(PEER_IP),
        &IpAddress::Ipv4(LOCAL_IP),
        &caps,
    );
    buf
}

fn arp_frame(operation: ArpOperation) -> Vec<u8> {
    let repr = ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr: PEER_MAC,
        source_protocol_addr: PEER_IP,
        target_hardware_addr: if operation == ArpOperation::Reply {
            LOCAL_MAC
        } else {
            EthernetAddress([0; 6])
        },
        target_protocol_addr: LOCAL_IP,
    };
    let (mut buf, at) = ethernet(EthernetProtocol::Arp, repr.buffer_len());
    repr.emit(&mut ArpPacket::new_unchecked(&mut buf[at..]));
    buf
}

/// The TCP segment in a frame the stack sent, if it is one.
fn sent_segment(f: &[u8]) -> Option<TcpRepr<'_>> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    TcpRepr::parse(
        &t,
        &IpAddress::Ipv4(LOCAL_IP),
        &IpAddress::Ipv4(PEER_IP),
        &ChecksumCapabilities::ignored(),
    )
    .ok()
}

/// Whether a frame the stack sent is an ARP request.
fn is_arp_request(f: &[u8]) -> bool {
    EthernetFrame::new_checked(f).is_ok_and(|eth| {
        eth.ethertype() == EthernetProtocol::Arp
            && matches!(
                ArpPacket::new_checked(eth.payload()).and_then(|p| ArpRepr::parse(&p)),
                Ok(ArpRepr::EthernetIpv4 {
                    operation: ArpOperation::Request,
                    ..
                })
            )
    })
}

/// Learn from the frames the stack sent; answer its ARP requests.
fn observe(peer: &mut Peer, frames: &[Vec<u8>], replies: &mut Vec<Vec<u8>>) {
    for f in frames {
        if is_arp_request(f) {
            replies.push(arp_frame(ArpOperation::Reply));
        }
        let Some(t) = sent_segment(f) else {
            continue;
        };
        let s = t.seq_number.0 as u32;
        let len = t.payload.len() as u32
            + u32::from(matches!(t.control, TcpControl::Syn | TcpControl::Fin));
        let end = s.wrapping_add(len);
        if t.control == TcpControl::Syn && peer.iss != Some(s) {
            peer.iss = Some(s);
            peer.sent_max = None;
        }
        if t.control != TcpControl::Rst {
            peer.sent_max = Some(peer.sent_max.map_or(end, |m| wrapping_max(m, end)));
        }
        peer.rcv_max = Some(peer.rcv_max.map_or(end, |m| wrapping_max(m, end)));
        if let Some(a) = t.ack_number {
            peer.acked = Some(a.0 as u32);
        }
        if let Some(ts) = t.timestamp {
            peer.tsval = ts.tsval;
        }
    }
}

/// RFC 9293 section 3.10.7.4: an ACK of something not yet sent is dropped. So the octets
/// that left the socket's buffer (what the application queued less what is still there)
/// were all sent: `iss + 1 + acked` is at most the highest sequence number the stack had
/// sent (SYN and FIN count, so the bound has one octet of slack at a FIN). Checked while the
/// connection is synchronized: a reset empties the buffer without an ACK.
fn check_acked_were_sent(w: &mut World, iss: Option<u32>, sent: Option<u32>, step: usize) {
    use tcp::State::*;
    let (Some(iss), Some(sent)) = (iss, sent) else {
        return;
    };
    let enqueued = w.enqueued;
    let s = w.socket();
    if !matches!(
        s.state(),
        Established | FinWait1 | FinWait2 | CloseWait | Closing | LastAck | TimeWait
    ) {
        return;
    }
    let acked = enqueued - s.send_queue();
    let una = iss.wrapping_add(1).wrapping_add(acked as u32);
    assert!(
        (sent.wrapping_sub(una) as i32) >= 0,
        "step {step}: {acked} octets acknowledged out of the buffer, but only up to {sent} \
         was sent (ISS {iss})"
    );
}

/// The stream check: the octets at `from..` of `delivered` follow `pattern` from `irs + 1`.
fn check_stream(delivered: &[u8], irs: u32) {
    for (k, &b) in delivered.iter().enumerate() {
        let s = irs.wrapping_add(1).wrapping_add(k as u32);
        assert_eq!(b, pattern(s), "delivered octet {k} (sequence number {s})");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Input(data);
    let setup = Setup::read(&mut r);
    let mut now = Instant::from_millis(1_000);
    let mut worlds = [
        World::new(&setup, true, now),
        World::new(&setup, false, now),
    ];
    let mut peer = Peer {
        snd_nxt: r.u32(),
        ..Peer::default()
    };
    let stream: Vec<u8> = Vec::with_capacity(MAX_PAYLOAD);
    let mut stream = stream;
    // The peer's ISN as the socket took it (None before a SYN was accepted), and whether
    // the stream check still holds (no frame fed whose payload could be anything).
    let mut irs: Option<u32> = None;
    let mut stream_checked = true;
    // The SYNs' sequence numbers in the frames fed since the last poll, and the socket's
    // state at that poll.
    let mut syns: Vec<u32> = Vec::new();
    let mut polled_state = worlds[0].socket().state();
    let mut feed: Vec<Frame> = vec![Frame {
        bytes: arp_frame(ArpOperation::Request),
        split: false,
    }];
    let mut steps = 0;
    while !r.is_empty() && steps < 400 {
        steps += 1;
        let op = r.u8();
        match op % 16 {
            // A segment from the peer (most operations).
            0..=7 => {
                let kind = r.u8();
                let control = match kind & 7 {
                    0 | 1 | 2 => TcpControl::None,
                    3 | 4 => TcpControl::Psh,
                    5 => TcpControl::Syn,
                    6 => TcpControl::Fin,
                    _ => TcpControl::Rst,
                };
                let small = u32::from(r.u16() % 3000);
                let s = match r.u8() % 8 {
                    0..=3 => peer.snd_nxt,
                    4 => peer.acked.unwrap_or(peer.snd_nxt),
                    5 => peer.snd_nxt.wrapping_sub(small),
                    6 => peer.snd_nxt.wrapping_add(small),
                    _ => r.u32(),
                };
                let a = match r.u8() % 8 {
                    0..=3 => peer.rcv_max,
                    4 => peer.rcv_max.map(|m| m.wrapping_sub(small)),
                    5 => peer.rcv_max.map(|m| m.wrapping_add(small)),
                    6 => Some(r.u32()),
                    _ => None,
                };
                let opts = r.u8();
                let len = if control == TcpControl::Rst {
                    0
                } else {
                    usize::from(r.u16()) % (setup.mtu.min(MAX_PAYLOAD) + 1)
                };
                let data_seq = if control == TcpControl::Syn {
                    s.wrapping_add(1)
                } else {
                    s
                };
                stream.clear();
                stream.extend((0..len as u32).map(|k| pattern(data_seq.wrapping_add(k))));
                let mut repr = TcpRepr {
                    src_port: PEER_PORT,
                    dst_port: LOCAL_PORT,
                    control,
                    seq_number: seq(s),
                    ack_number: a.map(seq),
                    window_len: [65535, 0, 1, 512, 4096, 30000, 65535, 65535]
                        [usize::from(opts & 7)],
                    window_scale: None,
                    max_seg_size: None,
                    sack_permitted: false,
                    sack_ranges: [None; 3],
                    timestamp: None,
                    payload: &stream,
                };
                if control == TcpControl::Syn {
                    repr.window_scale =
                        [None, Some(0), Some(7), Some(14)][usize::from(opts >> 3) & 3];
                    repr.max_seg_size =
                        [None, Some(1460), Some(536), Some(0)][usize::from(opts >> 5) & 3];
                    repr.sack_permitted = opts & 0x80 != 0;
                    syns.push(s);
                } else if opts & 0x80 != 0 {
                    let base = peer.rcv_max.unwrap_or(0);
                    let l = r.u16();
                    let rr = r.u16();
                    repr.sack_ranges[0] = Some((
                        base.wrapping_sub(u32::from(l)),
                        base.wrapping_add(u32::from(rr)).wrapping_sub(1000),
                    ));
                }
                if opts & 0x40 != 0 && control != TcpControl::Syn {
                    repr.timestamp = Some(TcpTimestampRepr::new(now.millis() as u32, peer.tsval));
                }
                let mut bytes = tcp_frame(&repr);
                // Sometimes a corrupted or cut frame: any octet changed, or cut short.
                let harm = r.u8();
                trace!("step {steps}: feed {repr} (harm {harm:#x})");
                if harm & 0xe0 == 0xe0 {
                    let at = usize::from(r.u16()) % bytes.len();
                    let x = r.u8() | 1;
                    trace!("  octet {at} of {} ^= {x:#x}", bytes.len());
                    bytes[at] ^= x;
                    if tracing() {
                        let ip = Ipv4Packet::new_unchecked(&bytes[14..]);
                        let t = TcpPacket::new_unchecked(ip.payload());
                        trace!(
                            "  ip checksum ok {}, tcp checksum ok {}",
                            ip.verify_checksum(),
                            t.verify_checksum(
                                &IpAddress::Ipv4(PEER_IP),
                                &IpAddress::Ipv4(LOCAL_IP)
                            )
                        );
                    }
                    stream_checked = false;
                } else if harm & 0xe0 == 0xc0 {
                    let cut = usize::from(r.u16()) % bytes.len();
                    trace!("  cut to {} of {}", cut.max(14), bytes.len());
                    bytes.truncate(cut.max(14));
                    stream_checked = false;
                }
                if s == peer.snd_nxt && harm & 0xc0 != 0xc0 {
                    peer.snd_nxt = peer.snd_nxt.wrapping_add(
                        len as u32
                            + u32::from(matches!(control, TcpControl::Syn | TcpControl::Fin)),
                    );
                }
                feed.push(Frame {
                    bytes,
                    split: harm & 1 != 0,
                });
            }
            // Arbitrary octets after an Ethernet header (IPv4 or ARP).
            8 => {
                let n = usize::from(r.u8()) + usize::from(r.u8()) * 4;
                let ethertype = if r.u8() & 1 == 0 {
                    EthernetProtocol::Ipv4
                } else {
                    EthernetProtocol::Arp
                };
                let (mut bytes, at) = ethernet(ethertype, 0);
                bytes.truncate(at);
                bytes.extend_from_slice(r.bytes(n));
                stream_checked = false;
                feed.push(Frame {
                    bytes,
                    split: n & 1 != 0,
                });
            }
            // The application sends (a record each, as the dataplane marks FPDUs).
            9 => {
                let n = usize::from(r.u16()) % 20_000;
                let chunk: Vec<u8> = (0..n).map(|k| k as u8).collect();
                for w in worlds.iter_mut() {
                    let s = w.socket();
                    let took = s.send_slice(&chunk).unwrap_or(0);
                    if took > 0 {
                        s.push_tx_record_end();
                    }
                    w.enqueued += took;
                }
            }
            // The application reads.
            10 => {
                let n = usize::from(r.u16());
                for w in worlds.iter_mut() {
                    let mut buf = vec![0u8; n];
                    let got = w.socket().recv_slice(&mut buf).unwrap_or(0);
                    w.delivered.extend_from_slice(&buf[..got]);
                }
            }
            // Time passes.
            11 => {
                let d = match r.u8() % 8 {
                    0 => 1,
                    1 => 10,
                    2 => 200,
                    3 => 1_000,
                    4 => 3_000,
                    5 => 70_000,
                    6 => u64::from(r.u16()),
                    _ => 7_200_000,
                };
                now += Duration::from_millis(d);
                trace!("step {steps}: {d} ms pass");
            }
            // Whether the socket lends (off: a consumer that takes the buffered path).
            12 => {
                let lend = r.u8() % 4 != 0;
                for w in worlds.iter_mut() {
                    w.lend = lend;
                    w.socket().set_rx_lend(lend);
                }
            }
            // The application closes or aborts, or the worker sends a keep-alive.
            13 => {
                let what = r.u8() % 3;
                for w in worlds.iter_mut() {
                    match what {
                        0 => w.socket().close(),
                        1 => w.socket().abort(),
                        // The dataplane's warm-up keep-alive (`[worker] warm_us`).
                        _ => {
                            w.socket().keep_alive_now();
                        }
                    }
                }
            }
            // A new socket in the slot of the old one (the prediction's template must not
            // send the old connection's frames to it), listening or connecting again.
            14 => {
                for w in worlds.iter_mut() {
                    w.sockets.remove(w.handle);
                    w.handle = w.sockets.add(setup.socket());
                    w.delivered.clear();
                    w.enqueued = 0;
                    w.open(&setup);
                }
                peer.iss = None;
                peer.sent_max = None;
                irs = None;
                stream_checked = true;
            }
            // The interface's addresses are set again (the template is forgotten).
            _ => {
                for w in worlds.iter_mut() {
                    w.iface.update_ip_addrs(|a| {
                        a.clear();
                        let _ = a.push(IpCidr::new(IpAddress::Ipv4(LOCAL_IP), 24));
                    });
                }
            }
        }
        // Frames are fed in bursts: each frame to both stacks, then both poll.
        if op & 0x10 == 0 || feed.len() > 8 {
            for f in feed.drain(..) {
                // The second stack (the reference) always takes whole frames.
                worlds[1].dev.rx.push_back(Frame {
                    bytes: f.bytes.clone(),
                    split: false,
                });
                worlds[0].dev.rx.push_back(f);
            }
            // What the stack had sent before this poll: the ACKs it takes in the poll (which
            // takes every frame in before it sends) may take no more out of its buffer.
            let sent_before = peer.sent_max;
            for w in worlds.iter_mut() {
                w.poll(now);
                check_acked_were_sent(w, peer.iss, sent_before, steps);
            }
            let [a, b] = &mut worlds;
            assert_eq!(a.dev.tx, b.dev.tx, "frames sent differ (step {steps})");
            assert_eq!(
                a.socket().state(),
                b.socket().state(),
                "states differ (step {steps})"
            );
            let mut replies = Vec::new();
            if tracing() {
                for f in &a.dev.tx {
                    match sent_segment(f) {
                        Some(r) => trace!("  sent {r}"),
                        None => trace!("  sent {} octets", f.len()),
                    }
                }
                trace!(
                    "  state {}, {} predicted, at {now}",
                    a.socket().state(),
                    a.iface.rx_predicted()
                );
            }
            observe(&mut peer, &a.dev.tx, &mut replies);
            a.dev.tx.clear();
            b.dev.tx.clear();
            feed.extend(replies.into_iter().map(|bytes| Frame {
                bytes,
                split: false,
            }));
            // A SYN the socket took starts a new stream: the check follows its ISN.
            use tcp::State::*;
            let state = worlds[0].socket().state();
            if !syns.is_empty()
                && state != polled_state
                && matches!(state, SynReceived | Established)
            {
                if matches!(polled_state, Listen | SynSent) && syns.iter().all(|&x| x == syns[0]) {
                    irs = Some(syns[0]);
                } else {
                    stream_checked = false;
                }
            }
            syns.clear();
            polled_state = state;
        }
        let [a, b] = &worlds;
        let (da, db) = (&a.delivered, &b.delivered);
        assert_eq!(*da, *db, "octets delivered differ (step {steps})");
        if let (Some(irs), true) = (irs, stream_checked) {
            check_stream(&da, irs);
        }
    }
    let [a, b] = &mut worlds;
    let (sa, sb) = (a.socket(), b.socket());
    assert_eq!(
        (
            sa.recv_queue(),
            sa.send_queue(),
            sa.local_endpoint(),
            sa.remote_endpoint()
        ),
        (
            sb.recv_queue(),
            sb.send_queue(),
            sb.local_endpoint(),
            sb.remote_endpoint()
        ),
        "queues or endpoints differ at the end"
    );
    // The whole state, buffers' contents included, where formatting it is quick.
    if setup.rx_buffer + setup.tx_buffer <= 2 * 4096 {
        let (sa, sb) = (format!("{sa:?}"), format!("{sb:?}"));
        assert!(sa == sb, "socket states differ at the end");
    }
});
