//! A hostile TCP peer on the wire against DPDK ports. The test drives the far side of a
//! net_ring pair itself, frame by frame: its own minimal TCP (frames built with smoltcp's wire
//! types) carries a real iWARP stream, made by dpwarp's sans-IO [`Connection`] as the initiator,
//! to a dataplane worker with a verbs server behind it. Around every data segment it sends
//! decoys that a correct receiver must drop, each carrying octets that differ from the stream's:
//!
//! - frames a receiver must not take at the link or IP layer (another MAC, another IPv4
//!   address, a fragment, an IPv4 total length past the frame, a header length below 5 or
//!   past the frame, a TCP data offset past the segment, a runt, IP protocol UDP);
//! - segments a receiver must not take at the TCP layer (RFC 9293 §3.10.7.4): wholly before
//!   the receive window or far past it, acknowledging data never sent (far past, or just past
//!   the right edge of every window the peer offered, where dpwarp may hold octets queued),
//!   a SYN in the window (RFC 5961 §4: a challenge ACK, not a reset), an out-of-window RST;
//! - on the port that verifies checksums (`checksum = "software"`): a bad TCP or IPv4 checksum.
//!
//! Real segments are duplicated, swapped with the next one, and some carry IPv4 options.
//! Its ACKs of dpwarp's data carry bogus SACK blocks, old acknowledgment numbers, and close
//! the window for a while; half the updates that open it again are lost, so that dpwarp must
//! probe the shut window (RFC 9293 §3.8.6.1) when the peer has nothing else to send.
//!
//! If any decoy octet were taken, the MPA CRC32c of its FPDU would fail (or a Send's content
//! check would), a TERMINATE would go out and the test fails, naming the seed; if an ACK of
//! queued octets were taken, they would never be sent and the exchange stalls. Every echo and
//! the RDMA Write's target are checked octet for octet.
//!
//! Three sessions, one per port: `checksum = "software"`; `trusted-link`, where the
//! worker's receive header prediction is in play (checksum decoys are left out there: that
//! mode verifies none by design); and, in a second dataplane in the same EAL, `software` with
//! `[tcp] fpdu_alignment = false`, whose worker hands the socket more than the peer's window
//! lets it send. That session found smoltcp taking an ACK of queued, unsent octets
//! (third_party/smoltcp/DPWARP.md, `snd_max`); the aligned worker rarely queues any.
//!
//! Then two peers that vanish: on that second dataplane (`user_timeout_ms = 2000`) one with
//! octets waiting on it, given up on at the user timeout; and in a third dataplane
//! (`keepalive_ms = 200`, three probes) an idle one, which answers keep-alives for a while
//! and keeps its connection, then goes quiet and is given up on after three unanswered.
//!
//! One EAL per process: one #[test]. `HOSTILE_SEED=N` replays a seed (the test prints it),
//! `HOSTILE_KINDS=4,16` sends only those decoys (indices into `KINDS`; "none" for a clean
//! run), `HOSTILE_TRACE=1` logs every frame the peer sends and receives.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::ConnParam;
use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::dataplane::{Dataplane, Endpoint};
use dpwarp::dpdk::{Eal, Mbuf, Mempool, Port, PortConf, Queue};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{MemoryTable, Mr as RawMr, PdId};
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, IpAddress, IpProtocol, Ipv4Packet, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

mod dp_common;
use dp_common::{advertise, advertised, unique};

/// Octets of one Send at most, and the server's receive slots.
const SLOT: usize = 9000;
const SLOTS: usize = 16;
/// Sends in flight from the peer (each is echoed before the next beyond this goes).
const WINDOW: usize = 8;
/// Sends the peer makes, then one RDMA Write of `WRITE_LEN` and a final Send.
const MESSAGES: u32 = 240;
const WRITE_LEN: usize = 256 * 1024;
/// The final Send's tag.
const DONE: u32 = u32::MAX;
const LISTEN_PORT: u16 = 4791;
const PEER_PORT: u16 = 40_123;
const MSS: usize = 1460;
/// The receive window the peer offers (scaled by 2^7): small, so that dpwarp often holds
/// echoes it may not send yet.
const OUR_WINDOW: u32 = 8192;

/// The content of message `i` (its first four octets carry `i`).
fn message(i: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8 ^ 0x5a)
        .collect();
    m[..4].copy_from_slice(&i.to_be_bytes());
    m
}

fn write_pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32 * 13 + (k >> 9) as u32) as u8)
        .collect()
}

/// xorshift64*: the decoys' choices and contents, repeatable from the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn garbage(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The verbs server on the dataplane: checks every Send and echoes it; after the final Send,
// checks the RDMA Write's target and answers with one octet (1: the target matched).

fn serve(ep: Endpoint, dev: Device) -> thread::JoinHandle<Result<u32, String>> {
    thread::spawn(move || {
        let pd = dev.alloc_pd();
        let cq = Cq::new(4 * SLOTS);
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        let slots = pd.reg_mr(SLOT * SLOTS, Access::LOCAL_WRITE);
        let verdict = pd.reg_mr(1, Access::LOCAL_WRITE);
        let target = pd.reg_mr(WRITE_LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        for s in 0..SLOTS {
            qp.post_recv(RecvWr {
                wr_id: s as u64,
                sg_list: smallvec![sge(&slots, s * SLOT, SLOT)],
            })
            .map_err(|e| format!("post_recv: {e}"))?;
        }
        let listener = ep.listen(LISTEN_PORT).map_err(|e| e.to_string())?;
        let req = listener
            .get_request(Duration::from_secs(20))
            .map_err(|e| format!("no connection request: {e}"))?;
        req.accept(
            &qp,
            &ConnParam {
                private_data: advertise(&target),
                ..ConnParam::default()
            },
        )
        .map_err(|e| format!("accept: {e}"))?;
        let mut checked = 0u32;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if Instant::now() > deadline {
                return Err(format!("server: no final Send after {checked} messages"));
            }
            let Some(wc) = cq.wait(Duration::from_millis(100)) else {
                if let Some(t) = qp.terminate_cause() {
                    return Err(format!("server QP terminated: {t:?}"));
                }
                if qp.is_closed() {
                    return Err(format!("connection closed after {checked} Sends"));
                }
                continue;
            };
            if wc.status != WcStatus::Success {
                return Err(format!("server completion {wc:?}"));
            }
            match wc.opcode {
                WcOpcode::Recv => {
                    let s = wc.wr_id as usize;
                    let mut got = vec![0u8; wc.byte_len as usize];
                    slots.read_at(s * SLOT, &mut got);
                    if got.len() < 4 {
                        return Err(format!("a Send of {} octets", got.len()));
                    }
                    let i = u32::from_be_bytes(got[..4].try_into().unwrap());
                    if i == DONE {
                        let ok = target.to_vec() == write_pattern(WRITE_LEN);
                        verdict.write_at(0, &[ok as u8]);
                        qp.post_send(SendWr {
                            wr_id: 1 << 32,
                            opcode: Opcode::Send,
                            sg_list: smallvec![sge(&verdict, 0, 1)],
                            signaled: true,
                        })
                        .map_err(|e| format!("post_send verdict: {e}"))?;
                        // Until the verdict's own completion: echoes may complete first.
                        loop {
                            match cq.wait(Duration::from_secs(20)) {
                                Some(w) if w.status != WcStatus::Success => {
                                    return Err(format!("completion {w:?}"))
                                }
                                Some(w) if w.wr_id == 1 << 32 => break,
                                Some(_) => {}
                                None => return Err("no completion of the verdict".into()),
                            }
                        }
                        return if ok {
                            Ok(checked)
                        } else {
                            Err("the RDMA Write's target differs from what was written".into())
                        };
                    }
                    if got != message(i, got.len()) {
                        return Err(format!("Send {i} ({} octets) arrived altered", got.len()));
                    }
                    checked += 1;
                    // Echo it from its slot; the slot is reposted when the echo completes.
                    qp.post_send(SendWr {
                        wr_id: (1 << 40) | s as u64,
                        opcode: Opcode::Send,
                        sg_list: smallvec![sge(&slots, s * SLOT, got.len())],
                        signaled: true,
                    })
                    .map_err(|e| format!("post_send echo: {e}"))?;
                }
                WcOpcode::Send => {
                    let s = (wc.wr_id & 0xffff) as usize;
                    qp.post_recv(RecvWr {
                        wr_id: s as u64,
                        sg_list: smallvec![sge(&slots, s * SLOT, SLOT)],
                    })
                    .map_err(|e| format!("repost: {e}"))?;
                }
                other => return Err(format!("unexpected completion {other:?}")),
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The wire: the raw side of the ring pair.

struct Wire {
    q: Queue,
    pool: &'static Mempool,
    out: Vec<Mbuf>,
    inb: Vec<Mbuf>,
    trace: bool,
}

impl Wire {
    fn send(&mut self, frame: &[u8], what: &str) {
        if self.trace {
            eprintln!("peer -> {what} ({} octets)", frame.len());
        }
        let mut m = self.pool.alloc().expect("peer mbuf");
        m.append(frame.len() as u16)
            .expect("frame fits an mbuf")
            .copy_from_slice(frame);
        self.out.push(m);
        let t0 = Instant::now();
        while !self.out.is_empty() {
            self.q.tx_burst(&mut self.out);
            assert!(t0.elapsed() < Duration::from_secs(5), "ring full for 5 s");
        }
    }

    fn recv(&mut self) -> Option<Vec<u8>> {
        if self.inb.is_empty() {
            self.q.rx_burst(&mut self.inb, 32);
            self.inb.reverse();
        }
        let m = self.inb.pop()?;
        let mut f = m.data().to_vec();
        assert!(m.nb_segs() <= 2, "a frame of {} segments", m.nb_segs());
        if let Some(s) = m.second_segment() {
            f.extend_from_slice(s);
        }
        Some(f)
    }
}

// ---------------------------------------------------------------------------------------------
// The hostile peer: its TCP, the iWARP initiator above it, and the decoys.

/// The kinds of decoy, counted so that the test can show each was sent.
const KINDS: [&str; 21] = [
    "bad TCP checksum",
    "bad IPv4 checksum",
    "other MAC",
    "other IPv4 address",
    "IPv4 fragment",
    "IPv4 length past the frame",
    "IPv4 header length 4",
    "IPv4 header length past the frame",
    "TCP data offset past the segment",
    "runt",
    "IP protocol UDP",
    "before the window",
    "far past the window",
    "ACK of data never sent",
    "SYN in the window",
    "RST out of the window",
    "ACK of data queued but not sent",
    "duplicated segment",
    "swapped segments",
    "the stream's octets past the window",
    "lost window update",
];

struct Peer {
    wire: Wire,
    rng: Rng,
    checksums: bool,
    /// The kinds of decoy sent (`HOSTILE_KINDS=3,12` narrows them down to replay a finding).
    kinds: [bool; KINDS.len()],
    mac: EthernetAddress,
    ip: Ipv4Addr,
    dp_mac: EthernetAddress,
    dp_ip: Ipv4Addr,
    // Our send side.
    snd_una: u32,
    snd_nxt: u32,
    /// Octets from `snd_una` on, sent or not.
    stream: VecDeque<u8>,
    dp_window: u32,
    dp_wscale: u8,
    last_progress: Instant,
    held: Option<(u32, Vec<u8>, Instant)>,
    // Our receive side.
    rcv_nxt: u32,
    /// The highest sequence number dpwarp has sent (one past its last octet).
    dp_snd_max: u32,
    window_shut_until: Option<Instant>,
    /// `snd_una` when octets were last sent past dpwarp's window.
    past_window_at: Option<u32>,
    established: bool,
    fin: bool,
    /// The peer has vanished: it takes frames off the wire and answers none.
    silent: bool,
    /// dpwarp reset the connection (seen while silent).
    rst: bool,
    /// Keep-alives dpwarp sent (one octet one below RCV.NXT, RFC 1122 4.2.3.6), answered
    /// unless silent.
    keepalives: u32,
    /// The server's MPA Reply private data: the RDMA Write's target.
    private_data: Option<Vec<u8>>,
    sent_decoys: [u32; KINDS.len()],
    ip_options: u32,
    conn: Connection,
}

impl Peer {
    fn ip_frame(
        &self,
        dst_mac: EthernetAddress,
        dst: Ipv4Addr,
        proto: u8,
        options: &[u8],
        l4: &[u8],
    ) -> Vec<u8> {
        let ihl = 20 + options.len();
        let mut f = vec![0u8; 14 + ihl + l4.len()];
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: dst_mac,
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
            ip.set_version(4);
            ip.set_header_len(ihl as u8);
            ip.set_dscp(0);
            ip.set_ecn(0);
            ip.set_total_len((ihl + l4.len()) as u16);
            ip.set_ident(self.ip_ident());
            ip.clear_flags();
            ip.set_dont_frag(true);
            ip.set_frag_offset(0);
            ip.set_hop_limit(64);
            ip.set_next_header(IpProtocol::from(proto));
            ip.set_src_addr(self.ip);
            ip.set_dst_addr(dst);
        }
        f[14 + 20..14 + ihl].copy_from_slice(options);
        Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
        f[14 + ihl..].copy_from_slice(l4);
        f
    }

    /// An ARP frame from us to `dst_mac` about `target_ip` (`target_mac`).
    fn arp_frame(
        &self,
        operation: ArpOperation,
        dst_mac: EthernetAddress,
        target_mac: EthernetAddress,
        target_ip: Ipv4Addr,
    ) -> Vec<u8> {
        let arp = ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.ip,
            target_hardware_addr: target_mac,
            target_protocol_addr: target_ip,
        };
        let mut b = vec![0u8; 14 + arp.buffer_len()];
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: dst_mac,
            ethertype: EthernetProtocol::Arp,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut b[..]));
        arp.emit(&mut ArpPacket::new_unchecked(&mut b[14..]));
        b
    }

    /// A sequence number of dpwarp's past anything it may have sent: beyond the right edge
    /// of every window we offered.
    fn past_our_window(&mut self) -> u32 {
        self.rcv_nxt
            .wrapping_add(OUR_WINDOW + 1)
            .wrapping_add(self.rng.below(64) as u32)
    }

    /// An IPv4 identification that varies from frame to frame (a moving field the receive
    /// header prediction must ignore).
    fn ip_ident(&self) -> u16 {
        (self.snd_nxt ^ self.rcv_nxt) as u16
    }

    /// A TCP segment from us to dpwarp (checksum over the pseudo-header of `dst`).
    fn tcp(&self, dst: Ipv4Addr, repr: &TcpRepr) -> Vec<u8> {
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut TcpPacket::new_unchecked(&mut b[..]),
            &IpAddress::Ipv4(self.ip),
            &IpAddress::Ipv4(dst),
            &ChecksumCapabilities::default(),
        );
        b
    }

    fn our_window(&self) -> u16 {
        if self.window_shut_until.is_some() {
            0
        } else {
            (OUR_WINDOW >> 7) as u16
        }
    }

    fn seg<'a>(&self, seq: u32, control: TcpControl, payload: &'a [u8]) -> TcpRepr<'a> {
        TcpRepr {
            src_port: PEER_PORT,
            dst_port: LISTEN_PORT,
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: Some(TcpSeqNumber(self.rcv_nxt as i32)),
            window_len: self.our_window(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        }
    }

    fn frame(&self, repr: &TcpRepr) -> Vec<u8> {
        let l4 = self.tcp(self.dp_ip, repr);
        self.ip_frame(self.dp_mac, self.dp_ip, 6, &[], &l4)
    }

    fn decoy(&mut self, kind: usize, frame: &[u8]) {
        if !self.kinds[kind] {
            return;
        }
        self.sent_decoys[kind] += 1;
        self.wire.send(frame, KINDS[kind]);
    }

    /// Decoys for the real segment (`seq`, `len` octets): each carries octets other than the
    /// stream's, so that taking any of it breaks an FPDU's CRC.
    fn decoys(&mut self, seq: u32, len: usize) {
        let n = self.rng.below(4);
        for _ in 0..n {
            let junk = self.rng.garbage(len.max(1));
            let real_seq = self.seg(seq, TcpControl::Psh, &junk);
            let kind = self.rng.below(17) as usize;
            match kind {
                0 | 1 if !self.checksums => {}
                0 => {
                    let mut l4 = self.tcp(self.dp_ip, &real_seq);
                    l4[16] ^= 0x5a; // the TCP checksum field
                    let f = self.ip_frame(self.dp_mac, self.dp_ip, 6, &[], &l4);
                    self.decoy(kind, &f);
                }
                1 => {
                    let mut f = self.frame(&real_seq);
                    f[14 + 10] ^= 0xa5; // the IPv4 header checksum
                    self.decoy(kind, &f);
                }
                2 => {
                    let l4 = self.tcp(self.dp_ip, &real_seq);
                    let other = EthernetAddress([0x02, 0, 0, 0x77, 0x77, 0x77]);
                    let f = self.ip_frame(other, self.dp_ip, 6, &[], &l4);
                    self.decoy(kind, &f);
                }
                3 => {
                    let o = self.dp_ip.octets();
                    let other = Ipv4Addr::new(o[0], o[1], o[2], o[3] ^ 0x40);
                    let l4 = self.tcp(other, &real_seq);
                    let f = self.ip_frame(self.dp_mac, other, 6, &[], &l4);
                    self.decoy(kind, &f);
                }
                4 => {
                    // A first fragment whose TCP checksum covers only what it carries.
                    let mut f = self.frame(&real_seq);
                    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                    ip.set_dont_frag(false);
                    ip.set_more_frags(self.rng.chance(50));
                    if !ip.more_frags() {
                        ip.set_frag_offset(8 * (1 + self.rng.below(100) as u16));
                    }
                    ip.fill_checksum();
                    self.decoy(kind, &f);
                }
                5 => {
                    let mut f = self.frame(&real_seq);
                    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                    let tl = ip.total_len();
                    ip.set_total_len(tl + 1 + self.rng.below(400) as u16);
                    ip.fill_checksum();
                    self.decoy(kind, &f);
                }
                6 | 7 => {
                    let mut f = self.frame(&real_seq);
                    if kind == 7 && f.len() < 14 + 60 {
                        // The checksum of a 60-octet header reads 60 octets, more than a frame
                        // with a short payload holds; it is cut to 40 below either way.
                        f.resize(14 + 60, 0);
                    }
                    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                    ip.set_header_len(if kind == 6 { 16 } else { 60 });
                    ip.fill_checksum();
                    if kind == 7 {
                        f.truncate(14 + 40);
                    }
                    self.decoy(kind, &f);
                }
                8 => {
                    let mut l4 = self.tcp(self.dp_ip, &real_seq);
                    let mut t = TcpPacket::new_unchecked(&mut l4[..]);
                    t.set_header_len(60);
                    t.fill_checksum(&IpAddress::Ipv4(self.ip), &IpAddress::Ipv4(self.dp_ip));
                    l4.truncate(40.min(l4.len()));
                    let f = self.ip_frame(self.dp_mac, self.dp_ip, 6, &[], &l4);
                    self.decoy(kind, &f);
                }
                9 => {
                    let f = self.frame(&real_seq);
                    let cut = self.rng.below(54) as usize;
                    self.decoy(kind, &f[..cut]);
                }
                10 => {
                    let l4 = self.tcp(self.dp_ip, &real_seq);
                    let f = self.ip_frame(self.dp_mac, self.dp_ip, 17, &[], &l4);
                    self.decoy(kind, &f);
                }
                11 => {
                    // Wholly before what dpwarp has acknowledged.
                    let back = junk.len() as u32 + 1 + self.rng.below(20_000) as u32;
                    let r = self.seg(self.snd_una.wrapping_sub(back), TcpControl::Psh, &junk);
                    let f = self.frame(&r);
                    self.decoy(kind, &f);
                }
                12 => {
                    // Past any window dpwarp can offer (its receive ring is 32 KiB).
                    let ahead = (1 << 20) + self.rng.below(1 << 24) as u32;
                    let r = self.seg(self.snd_nxt.wrapping_add(ahead), TcpControl::Psh, &junk);
                    let f = self.frame(&r);
                    self.decoy(kind, &f);
                }
                13 => {
                    let mut r = real_seq;
                    let ahead = (1 << 20) + self.rng.below(1 << 28) as u32;
                    r.ack_number = Some(TcpSeqNumber(self.dp_snd_max.wrapping_add(ahead) as i32));
                    let f = self.frame(&r);
                    self.decoy(kind, &f);
                }
                14 => {
                    let r = self.seg(seq, TcpControl::Syn, &junk);
                    let f = self.frame(&r);
                    self.decoy(kind, &f);
                }
                15 => {
                    let ahead = (1 << 20) + self.rng.below(1 << 24) as u32;
                    let mut r = self.seg(self.snd_nxt.wrapping_add(ahead), TcpControl::Rst, &[]);
                    r.ack_number = None;
                    let f = self.frame(&r);
                    self.decoy(kind, &f);
                }
                _ => {
                    // An ACK just past any octet dpwarp may have sent (the right edge of the
                    // window we offer): RFC 9293 §3.10.7.4 drops the segment whether or not
                    // dpwarp holds more queued.
                    let mut r = real_seq;
                    r.ack_number = Some(TcpSeqNumber(self.past_our_window() as i32));
                    let f = self.frame(&r);
                    self.decoy(16, &f);
                }
            }
        }
    }

    /// Send the stream's octets at `seq` (from `stream`), with decoys, maybe duplicated, with
    /// IPv4 options, or held back to go after the next segment.
    fn send_data(&mut self, seq: u32, data: Vec<u8>) {
        self.decoys(seq, data.len());
        if self.held.is_none() && self.rng.chance(10) && self.kinds[18] {
            self.sent_decoys[18] += 1;
            self.held = Some((seq, data, Instant::now()));
            return;
        }
        self.send_real(seq, &data);
        if let Some((s, d, _)) = self.held.take() {
            self.send_real(s, &d);
        }
    }

    fn send_real(&mut self, seq: u32, data: &[u8]) {
        let r = self.seg(seq, TcpControl::Psh, data);
        let l4 = self.tcp(self.dp_ip, &r);
        let options: &[u8] = if self.rng.chance(8) {
            self.ip_options += 1;
            &[1, 1, 1, 0] // NOP NOP NOP, end of options
        } else {
            &[]
        };
        let f = self.ip_frame(self.dp_mac, self.dp_ip, 6, options, &l4);
        self.wire.send(&f, "data");
        if self.rng.chance(5) && self.kinds[17] {
            self.sent_decoys[17] += 1;
            self.wire.send(&f, "data again");
        }
    }

    /// Our ACK of dpwarp's data, now and then with nonsense SACK blocks or an old number.
    fn send_ack(&mut self) {
        let mut r = self.seg(self.snd_nxt, TcpControl::None, &[]);
        if self.rng.chance(20) {
            let a = self.dp_snd_max.wrapping_add(self.rng.below(1 << 20) as u32);
            r.sack_ranges = [
                Some((a, a.wrapping_add(1000))),
                Some((self.rcv_nxt.wrapping_add(500), self.rcv_nxt)),
                Some((
                    self.rcv_nxt.wrapping_sub(70_000),
                    self.rcv_nxt.wrapping_sub(3),
                )),
            ];
        }
        let f = self.frame(&r);
        self.wire.send(&f, "ack");
        if self.rng.chance(10) {
            let mut r = self.seg(self.snd_nxt, TcpControl::None, &[]);
            r.ack_number = Some(TcpSeqNumber(
                self.rcv_nxt.wrapping_sub(1 + self.rng.below(5000) as u32) as i32,
            ));
            let f = self.frame(&r);
            self.wire.send(&f, "old ack");
        }
    }

    /// Take what dpwarp sent: ARP, its SYN-ACK, ACKs and data (fed to the initiator in order).
    fn receive(&mut self) {
        while let Some(f) = self.wire.recv() {
            let Ok(eth) = EthernetFrame::new_checked(&f[..]) else {
                continue;
            };
            match eth.ethertype() {
                EthernetProtocol::Arp => {
                    let Ok(arp) = ArpPacket::new_checked(eth.payload()) else {
                        continue;
                    };
                    if let Ok(ArpRepr::EthernetIpv4 {
                        operation: ArpOperation::Request,
                        source_hardware_addr,
                        source_protocol_addr,
                        target_protocol_addr,
                        ..
                    }) = ArpRepr::parse(&arp)
                    {
                        if target_protocol_addr == self.ip {
                            let b = self.arp_frame(
                                ArpOperation::Reply,
                                source_hardware_addr,
                                source_hardware_addr,
                                source_protocol_addr,
                            );
                            self.wire.send(&b, "arp reply");
                        }
                    }
                }
                EthernetProtocol::Ipv4 => self.receive_ipv4(eth.payload()),
                _ => {}
            }
        }
    }

    fn receive_ipv4(&mut self, b: &[u8]) {
        let caps = if self.checksums {
            ChecksumCapabilities::default()
        } else {
            ChecksumCapabilities::ignored()
        };
        let ip = Ipv4Packet::new_checked(b).expect("dpwarp sent a malformed IPv4 packet");
        if self.checksums {
            assert!(ip.verify_checksum(), "dpwarp sent a bad IPv4 checksum");
        }
        if ip.dst_addr() != self.ip || ip.next_header() != IpProtocol::Tcp {
            return;
        }
        let tcp =
            TcpPacket::new_checked(ip.payload()).expect("dpwarp sent a malformed TCP segment");
        let r = TcpRepr::parse(
            &tcp,
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(self.ip),
            &caps,
        )
        .expect("dpwarp sent a TCP segment that does not parse (or a bad checksum)");
        if r.dst_port != PEER_PORT || r.src_port != LISTEN_PORT {
            return;
        }
        if self.wire.trace {
            eprintln!(
                "peer <- {:?} seq {} ack {:?} win {} len {}",
                r.control,
                r.seq_number.0 as u32,
                r.ack_number.map(|a| a.0 as u32),
                r.window_len,
                r.payload.len()
            );
        }
        if r.control == TcpControl::Rst {
            // Before the handshake: the listener was not up yet; the SYN is sent again.
            assert!(
                !self.established || self.silent,
                "dpwarp reset the connection"
            );
            self.rst = true;
            return;
        }
        if r.payload.len() == 1 && (r.seq_number.0 as u32).wrapping_add(1) == self.rcv_nxt {
            self.keepalives += 1;
        }
        if self.silent {
            return;
        }
        if r.control == TcpControl::Syn {
            if !self.established {
                self.rcv_nxt = (r.seq_number.0 as u32).wrapping_add(1);
                self.dp_snd_max = self.rcv_nxt;
                self.dp_wscale = r.window_scale.unwrap_or(0);
                // RFC 7323 §2.2: a SYN's window is not scaled.
                self.dp_window = r.window_len as u32;
                self.snd_una = self.snd_una.wrapping_add(1);
                self.snd_nxt = self.snd_una;
                self.established = true;
                self.send_ack();
            }
            return;
        } else if !self.established {
            return;
        }
        if let Some(ack) = r.ack_number {
            let ack = ack.0 as u32;
            let acked = ack.wrapping_sub(self.snd_una);
            if acked > 0 && acked <= self.snd_nxt.wrapping_sub(self.snd_una) {
                self.stream.drain(..acked as usize);
                self.snd_una = ack;
                self.last_progress = Instant::now();
            }
            if ack == self.snd_una {
                self.dp_window = (r.window_len as u32) << self.dp_wscale;
            }
        }
        let seq = r.seq_number.0 as u32;
        let end = seq.wrapping_add(r.payload.len() as u32);
        if (end.wrapping_sub(self.dp_snd_max) as i32) > 0 {
            self.dp_snd_max = end;
        }
        // An empty segment off our RCV.NXT (a zero-window probe, one below it) is answered
        // with an ACK, as RFC 9293 section 3.10.7.4 answers any unacceptable segment.
        let mut ack_now = r.payload.is_empty() && seq != self.rcv_nxt;
        if !r.payload.is_empty() {
            // In order (or overlapping what we have): the new part goes to the initiator.
            // Out of order: only our (duplicate) ACK, which asks for what is missing.
            ack_now = true;
            let behind = self.rcv_nxt.wrapping_sub(seq);
            if (behind as i32) >= 0 && (behind as usize) < r.payload.len() {
                self.conn
                    .on_bytes(&r.payload[behind as usize..], std::time::Instant::now());
                self.rcv_nxt = end;
            }
        }
        if r.control == TcpControl::Fin && end == self.rcv_nxt {
            self.fin = true;
            self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
            ack_now = true;
        }
        if ack_now {
            if self.rng.chance(3) && self.window_shut_until.is_none() {
                self.window_shut_until = Some(Instant::now() + Duration::from_millis(2));
            }
            self.send_ack();
        }
    }

    /// Move what the initiator has to say into the stream; send what fits dpwarp's window;
    /// retransmit after 30 ms without progress.
    fn transmit(&mut self) {
        let mut out = Vec::new();
        self.conn.poll_transmit(&mut out);
        self.stream.extend(out);
        if let Some(t) = self.window_shut_until {
            if Instant::now() >= t {
                self.window_shut_until = None;
                // While our window was shut, dpwarp may hold echoes unsent: an ACK just past
                // what it sent would acknowledge queued octets.
                for _ in 0..2 {
                    let junk = self.rng.garbage(100);
                    let mut r = self.seg(self.snd_nxt, TcpControl::Psh, &junk);
                    r.window_len = 0;
                    r.ack_number = Some(TcpSeqNumber(self.past_our_window() as i32));
                    let f = self.frame(&r);
                    self.decoy(16, &f);
                }
                // The window update, or it is lost: then dpwarp learns of the open window
                // from the next segment, and when the peer has none to send (all its Sends
                // await their echoes), only by probing the shut window (RFC 9293 section
                // 3.8.6.1); without probes both ends would wait for good.
                if self.kinds[20] && self.rng.chance(50) {
                    self.sent_decoys[20] += 1;
                } else {
                    self.send_ack();
                }
            }
        }
        if self.snd_una != self.snd_nxt && self.last_progress.elapsed() > Duration::from_millis(30)
        {
            self.snd_nxt = self.snd_una;
            self.last_progress = Instant::now();
        }
        // The stream's next octets past dpwarp's window (a peer that ignores it): taken up to
        // the window's edge or not at all, never past it. Once per acknowledgment while the
        // window is full, not on every pass.
        let in_flight = self.snd_nxt.wrapping_sub(self.snd_una) as usize;
        let unsent = self.stream.len() - in_flight;
        let room = (self.dp_window as usize).saturating_sub(in_flight);
        if unsent > room && self.kinds[19] && self.past_window_at != Some(self.snd_una) {
            self.past_window_at = Some(self.snd_una);
            self.sent_decoys[19] += 1;
            let n = MSS.min(unsent);
            let data: Vec<u8> = self
                .stream
                .range(in_flight..in_flight + n)
                .copied()
                .collect();
            let r = self.seg(self.snd_nxt, TcpControl::Psh, &data);
            let f = self.frame(&r);
            self.wire.send(&f, "past the window");
        }
        loop {
            let in_flight = self.snd_nxt.wrapping_sub(self.snd_una) as usize;
            let room = (self.dp_window as usize).saturating_sub(in_flight);
            let unsent = self.stream.len() - in_flight;
            let n = MSS.min(room).min(unsent);
            if n == 0 {
                break;
            }
            let data: Vec<u8> = self
                .stream
                .range(in_flight..in_flight + n)
                .copied()
                .collect();
            let seq = self.snd_nxt;
            self.snd_nxt = self.snd_nxt.wrapping_add(n as u32);
            self.send_data(seq, data);
        }
        if let Some((s, d, t)) = self.held.take() {
            if t.elapsed() > Duration::from_millis(1) {
                self.send_real(s, &d);
            } else {
                self.held = Some((s, d, t));
            }
        }
    }

    fn step(&mut self) {
        self.receive();
        self.transmit();
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                ConnEvent::Established(n) => self.private_data = Some(n.peer_private_data),
                ConnEvent::TerminateReceived(t) => panic!(
                    "dpwarp sent a TERMINATE {t:?}: octets of a decoy were taken (or the stream \
                     lost some)"
                ),
                other => panic!("initiator event {other:?}"),
            }
        }
    }
}

/// Start the far port, a verbs server on `ep`, and a peer connected to it (ARP, the TCP
/// handshake; the MPA Request waits in its initiator).
fn open_peer(
    eal: &'static Eal,
    far: Port,
    ep: &Endpoint,
    checksums: bool,
    seed: u64,
    tag: &str,
) -> (
    Peer,
    MemoryTable,
    PdId,
    thread::JoinHandle<Result<u32, String>>,
) {
    let pool = Mempool::create(eal, &format!("{tag}p"), 4095, 0, 2176).unwrap();
    far.configure(&PortConf::default(), pool).unwrap();
    far.start().unwrap();
    let server = serve(ep.clone(), Device::open());
    thread::sleep(Duration::from_millis(100)); // the listener is up

    let mem = MemoryTable::new();
    let pd: PdId = mem.alloc_pd();
    let now = std::time::Instant::now();
    let conn = Connection::initiator(
        ConnConfig {
            mpa: MpaConfig::default(),
            pd,
            emss: MSS,
            ..ConnConfig::default()
        },
        mem.clone(),
        now,
    );
    let mut p = Peer {
        wire: Wire {
            q: far.claim_queue(0).unwrap(),
            pool,
            out: Vec::new(),
            inb: Vec::with_capacity(32),
            trace: std::env::var_os("HOSTILE_TRACE").is_some(),
        },
        rng: Rng(seed | 1),
        checksums,
        kinds: kinds_from_env(),
        mac: EthernetAddress([0x02, 0, 0, 0x9f, 0, 2]),
        ip: Ipv4Addr::from(u32::from(ep.ip()) + 1),
        dp_mac: EthernetAddress([0; 6]),
        dp_ip: ep.ip(),
        snd_una: 0x1234_0000,
        snd_nxt: 0x1234_0000,
        stream: VecDeque::new(),
        dp_window: 0,
        dp_wscale: 0,
        last_progress: Instant::now(),
        held: None,
        rcv_nxt: 0,
        dp_snd_max: 0,
        window_shut_until: None,
        past_window_at: None,
        established: false,
        fin: false,
        silent: false,
        rst: false,
        keepalives: 0,
        private_data: None,
        sent_decoys: [0; KINDS.len()],
        ip_options: 0,
        conn,
    };
    // dpwarp's MAC: ARP for it (the dataplane answers like any host).
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.dp_mac == EthernetAddress([0; 6]) {
        assert!(
            Instant::now() < deadline,
            "no ARP reply from the dataplane: far port {:?}",
            far.stats()
        );
        let b = p.arp_frame(
            ArpOperation::Request,
            EthernetAddress::BROADCAST,
            EthernetAddress([0; 6]),
            p.dp_ip,
        );
        p.wire.send(&b, "arp request");
        thread::sleep(Duration::from_millis(20));
        while let Some(f) = p.wire.recv() {
            if p.wire.trace {
                eprintln!("peer <- {:02x?}", &f[..f.len().min(42)]);
            }
            let eth = EthernetFrame::new_unchecked(&f[..]);
            if eth.ethertype() == EthernetProtocol::Arp {
                if let Ok(ArpRepr::EthernetIpv4 {
                    operation: ArpOperation::Reply,
                    source_hardware_addr,
                    ..
                }) = ArpRepr::parse(&ArpPacket::new_unchecked(eth.payload()))
                {
                    p.dp_mac = source_hardware_addr;
                }
            }
        }
    }
    // The handshake: SYN with window scaling and SACK.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.established {
        assert!(Instant::now() < deadline, "no SYN-ACK");
        let mut syn = p.seg(p.snd_una, TcpControl::Syn, &[]);
        syn.ack_number = None;
        syn.window_scale = Some(7);
        syn.max_seg_size = Some(MSS as u16);
        syn.sack_permitted = true;
        syn.window_len = OUR_WINDOW as u16; // not scaled in a SYN (RFC 7323 §2.2)
        let f = p.frame(&syn);
        p.wire.send(&f, "syn");
        let t = Instant::now();
        while !p.established && t.elapsed() < Duration::from_millis(200) {
            p.receive();
        }
    }
    (p, mem, pd, server)
}

/// One hostile session against the dataplane endpoint `ep` over the ring whose far port is
/// `far`: the whole exchange must complete with every octet intact. Returns the decoy counts
/// and how many real segments carried IPv4 options.
fn hostile_session(
    eal: &'static Eal,
    far: Port,
    ep: Endpoint,
    checksums: bool,
    seed: u64,
    tag: &str,
) -> ([u32; KINDS.len()], u32) {
    let (mut p, mem, pd, server) = open_peer(eal, far, &ep, checksums, seed, tag);

    // The exchange.
    let src = mem.register(
        pd,
        SLOT * MESSAGES as usize,
        dpwarp::rdma::Access::LOCAL_WRITE,
    );
    let echo = mem.register(pd, SLOT * WINDOW, dpwarp::rdma::Access::LOCAL_WRITE);
    let wsrc = mem.register(pd, WRITE_LEN, dpwarp::rdma::Access::LOCAL_WRITE);
    wsrc.write_at(0, &write_pattern(WRITE_LEN));
    for s in 0..WINDOW {
        p.conn
            .post_recv(RecvWr {
                wr_id: s as u64,
                sg_list: smallvec![raw_sge(&echo, s * SLOT, SLOT)],
            })
            .unwrap();
    }
    let mut expected: VecDeque<Vec<u8>> = VecDeque::new();
    let mut next = 0u32;
    let mut verdict: Option<u8> = None;
    let mut wrote = false;
    let deadline = Instant::now() + Duration::from_secs(90);
    while verdict.is_none() {
        assert!(
            Instant::now() < deadline,
            "seed {seed:#x}: stalled after {next} Sends, {} echoes outstanding, decoys {:?}",
            expected.len(),
            p.sent_decoys
        );
        p.step();
        while let Some(wc) = p.conn.poll_completion() {
            assert_eq!(wc.status, WcStatus::Success, "seed {seed:#x}: {wc:?}");
            if wc.opcode == WcOpcode::Recv {
                let s = wc.wr_id as usize;
                let mut got = vec![0u8; wc.byte_len as usize];
                echo.read_at(s * SLOT, &mut got);
                if expected.is_empty() && wrote {
                    assert_eq!(got.len(), 1, "the verdict is one octet");
                    verdict = Some(got[0]);
                } else {
                    let want = expected.pop_front().expect("an echo nobody asked for");
                    assert!(
                        got == want,
                        "seed {seed:#x}: echo of {} octets altered",
                        want.len()
                    );
                }
                p.conn
                    .post_recv(RecvWr {
                        wr_id: s as u64,
                        sg_list: smallvec![raw_sge(&echo, s * SLOT, SLOT)],
                    })
                    .unwrap();
            }
        }
        if verdict.is_none() && p.fin {
            panic!(
                "seed {seed:#x}: dpwarp closed the connection after {next} Sends; server: {:?}",
                server.join()
            );
        }
        if !p.conn.is_established() {
            continue;
        }
        if next < MESSAGES && expected.len() < WINDOW - 1 {
            let len = 4 + p.rng.below(SLOT as u64 - 3) as usize;
            let m = message(next, len);
            let off = next as usize * SLOT;
            src.write_at(off, &m);
            p.conn
                .post_send(SendWr {
                    wr_id: next as u64,
                    opcode: Opcode::Send,
                    sg_list: smallvec![raw_sge(&src, off, len)],
                    signaled: false,
                })
                .unwrap();
            expected.push_back(m);
            next += 1;
        } else if next == MESSAGES && expected.is_empty() && !wrote {
            // The server's advertisement, from the MPA Reply's private data.
            let (addr, stag) = advertised(
                p.private_data
                    .as_ref()
                    .expect("the MPA Reply's private data"),
            );
            p.conn
                .post_send(SendWr {
                    wr_id: 1 << 33,
                    opcode: Opcode::Write {
                        remote_addr: addr,
                        rkey: stag,
                    },
                    sg_list: smallvec![raw_sge(&wsrc, 0, WRITE_LEN)],
                    signaled: false,
                })
                .unwrap();
            let off = 0;
            src.write_at(off, &DONE.to_be_bytes());
            p.conn
                .post_send(SendWr {
                    wr_id: 1 << 34,
                    opcode: Opcode::Send,
                    sg_list: smallvec![raw_sge(&src, off, 4)],
                    signaled: false,
                })
                .unwrap();
            wrote = true;
        }
    }
    let served = server.join().unwrap();
    assert_eq!(served, Ok(MESSAGES), "seed {seed:#x}: the server's account");
    assert_eq!(verdict, Some(1), "seed {seed:#x}: the RDMA Write's target");
    (p.sent_decoys, p.ip_options)
}

/// A peer that vanishes: it sends a few Sends, and from then on acknowledges nothing while
/// the server's echoes wait for it. The dataplane must give the connection up at its
/// `[tcp] user_timeout_ms` (RFC 9293 section 3.8.3: a RST, and the server's QP closes),
/// not retransmit for good. Returns how long that took from the peer's silence.
fn vanishing_session(eal: &'static Eal, far: Port, ep: Endpoint, tag: &str) -> Duration {
    let (mut p, mem, pd, server) = open_peer(eal, far, &ep, true, 7, tag);
    p.kinds = [false; KINDS.len()];
    let src = mem.register(pd, SLOT, dpwarp::rdma::Access::LOCAL_WRITE);
    let echo = mem.register(pd, 4 * SLOT, dpwarp::rdma::Access::LOCAL_WRITE);
    for i in 0..4 {
        p.conn
            .post_recv(RecvWr {
                wr_id: i,
                sg_list: smallvec![raw_sge(&echo, i as usize * SLOT, SLOT)],
            })
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.conn.is_established() {
        assert!(Instant::now() < deadline, "no MPA Reply");
        p.step();
    }
    for i in 0..4u32 {
        let m = message(i, 2000);
        src.write_at(0, &m);
        p.conn
            .post_send(SendWr {
                wr_id: i as u64,
                opcode: Opcode::Send,
                sg_list: smallvec![raw_sge(&src, 0, m.len())],
                signaled: false,
            })
            .unwrap();
        p.step();
    }
    // Once the Sends are on the wire, silence: their echoes wait on the peer for good.
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.snd_nxt.wrapping_sub(p.snd_una) as usize != p.stream.len() || p.stream.is_empty() {
        assert!(Instant::now() < deadline, "the Sends did not go");
        p.step();
    }
    vanish(&mut p, server)
}

/// The peer goes quiet for good: the server's QP must close (the dataplane gave the
/// connection up) and a RST come. Returns how long that took from the silence.
fn vanish(p: &mut Peer, server: thread::JoinHandle<Result<u32, String>>) -> Duration {
    p.silent = true;
    let quiet = Instant::now();
    let served = server.join().unwrap();
    let took = quiet.elapsed();
    assert!(
        // Closed, or its receive WRs flushed (RFC 5040 §5.3 on the stream's end).
        matches!(&served, Err(e) if e.contains("connection closed") || e.contains("WrFlushErr")),
        "the server's QP: {served:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while !p.rst && Instant::now() < deadline {
        p.receive();
    }
    assert!(p.rst, "no RST from the dataplane when it gave up");
    took
}

/// A peer that goes quiet while nothing waits on it: an established connection, idle, whose
/// peer first answers the dataplane's keep-alives (`[tcp] keepalive_ms`: the connection
/// stays up however long it is idle), then vanishes. The dataplane must give it up after
/// `[tcp] keepalive_probes` unanswered (RFC 9293 section 3.8.4: a RST, and the server's QP
/// closes); without keep-alives nothing would ever notice (the retransmission timer and the
/// user timeout see only octets waiting). Returns the keep-alives answered and how long the
/// giving up took from the peer's silence.
fn idle_vanishing_session(
    eal: &'static Eal,
    far: Port,
    ep: Endpoint,
    tag: &str,
    answering: Duration,
) -> (u32, Duration) {
    let (mut p, _mem, _pd, server) = open_peer(eal, far, &ep, true, 11, tag);
    p.kinds = [false; KINDS.len()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.conn.is_established() {
        assert!(Instant::now() < deadline, "no MPA Reply");
        p.step();
    }
    // Idle and alive: every keep-alive answered.
    let alive = Instant::now();
    while alive.elapsed() < answering {
        p.step();
        assert!(
            !server.is_finished(),
            "the server gave up on a peer that answers its keep-alives: {:?}",
            server.join()
        );
    }
    let answered = p.keepalives;
    (answered, vanish(&mut p, server))
}

fn kinds_from_env() -> [bool; KINDS.len()] {
    match std::env::var("HOSTILE_KINDS") {
        Ok(list) => {
            let mut k = [false; KINDS.len()];
            for i in list
                .split(',')
                .filter_map(|x| x.trim().parse::<usize>().ok())
            {
                k[i] = true;
            }
            k
        }
        Err(_) => [true; KINDS.len()],
    }
}

/// A scatter/gather element over `len` octets of the peer's region `mr` from `off`.
fn raw_sge(mr: &RawMr, off: usize, len: usize) -> dpwarp::rdma::Sge {
    dpwarp::rdma::Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.stag(),
    }
}

#[test]
fn a_hostile_tcp_peer_on_the_wire_gets_nothing_taken_and_nothing_lost() {
    let tag = unique("hp");
    let port = |side: &str, net: u8, checksum: &str| {
        format!(
            r#"
[[port]]
device = "ring:{tag}{side}:a"
ip = "10.{net}.0.1/24"
mac = "02:00:00:{net:02x}:00:01"
mbufs = 8191
checksum = "{checksum}"
"#
        )
    };
    let config = |ports: String, tcp_extra: &str| {
        let text = format!(
            r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "512", "--no-shconf", "--no-pci", "--log-level=*:warning"]
{ports}
[worker]
spin_us = 0

[tcp]
rx_buffer = 32768
tx_buffer = 262144
{tcp_extra}
"#
        );
        dpwarp::config::DataplaneConfig::parse(&text).unwrap()
    };
    // As shipped: a port that verifies checksums, and a trusted link (receive header
    // prediction on).
    let cfg = config(
        port("s", 93, "software") + &port("t", 94, "trusted-link"),
        "",
    );
    let dp = Dataplane::start(&cfg).expect("dataplane");
    // A second dataplane in the same EAL without FPDU alignment: its worker hands the socket
    // whatever it takes, so the socket holds octets the peer's window does not let it send
    // (what an ACK of queued octets needs).
    // Its second port: a peer that vanishes, given up on at a short user timeout.
    let cfg_u = config(
        port("u", 95, "software") + &port("v", 96, "software"),
        "fpdu_alignment = false\nuser_timeout_ms = 2000",
    );
    let dp_u = Dataplane::start(&cfg_u).expect("second dataplane");
    // A third: keep-alives every 200 ms, an idle peer given up on after three unanswered.
    let cfg_k = config(
        port("w", 97, "software"),
        "keepalive_ms = 200\nkeepalive_probes = 3",
    );
    let dp_k = Dataplane::start(&cfg_k).expect("third dataplane");
    let eal = Eal::get().unwrap();
    let seed: u64 = std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("HOSTILE_SEED={seed}");
    let sessions = [
        ("s", true, dp.endpoint(0).unwrap()),
        ("t", false, dp.endpoint(1).unwrap()),
        ("u", true, dp_u.endpoint(0).unwrap()),
    ];
    for (i, (side, checksums, ep)) in sessions.into_iter().enumerate() {
        let far = Port::by_name(eal, &format!("net_ring_{tag}{side}_b")).unwrap();
        let (decoys, options) = hostile_session(
            eal,
            far,
            ep,
            checksums,
            seed.wrapping_add(i as u64),
            &format!("{tag}{side}"),
        );
        eprintln!(
            "port {side}: decoys {:?}, {options} real segments with IPv4 options",
            decoys
                .iter()
                .zip(KINDS)
                .map(|(n, k)| format!("{k}: {n}"))
                .collect::<Vec<_>>()
        );
        // Every kind was sent (unless narrowed down), checksum decoys only where verified.
        let wanted = kinds_from_env();
        for (k, n) in decoys.iter().enumerate() {
            if k < 2 && !checksums {
                assert_eq!(*n, 0);
            } else if wanted[k] {
                assert!(*n > 0, "no decoy of kind {:?} was sent", KINDS[k]);
            }
        }
        assert!(options > 0);
    }
    let far = Port::by_name(eal, &format!("net_ring_{tag}v_b")).unwrap();
    let took = vanishing_session(eal, far, dp_u.endpoint(1).unwrap(), &format!("{tag}v"));
    eprintln!("a vanished peer was given up on {took:?} after it went quiet");
    // From the first retransmission timeout (50 ms) on, 2 s, checked at a retransmission
    // timeout (backed off to 1.6 s by then) or an egress sweep.
    assert!(took >= Duration::from_secs(2), "given up early: {took:?}");
    assert!(took < Duration::from_secs(10), "given up late: {took:?}");
    assert_eq!(
        dp_u.stats()
            .iter()
            .map(|w| w.tcp_user_timeouts)
            .sum::<u64>(),
        1
    );
    let far = Port::by_name(eal, &format!("net_ring_{tag}w_b")).unwrap();
    let answering = Duration::from_millis(1500);
    let (answered, took) = idle_vanishing_session(
        eal,
        far,
        dp_k.endpoint(0).unwrap(),
        &format!("{tag}w"),
        answering,
    );
    eprintln!(
        "an idle peer answered {answered} keep-alives in {answering:?}, then was given up on \
         {took:?} after it went quiet"
    );
    // One every 200 ms of idle (the first 200 ms after the handshake).
    assert!(answered >= 4, "keep-alives answered: {answered}");
    // The last answered keep-alive at most 200 ms before the silence; three more 200 ms
    // apart, the RST when a fourth falls due: 600-800 ms after it, plus the worker's sweep.
    assert!(
        took >= Duration::from_millis(500),
        "given up early: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "given up late: {took:?}");
    let ks = dp_k.stats();
    assert_eq!(ks.iter().map(|w| w.tcp_keepalive_timeouts).sum::<u64>(), 1);
    assert_eq!(ks.iter().map(|w| w.tcp_user_timeouts).sum::<u64>(), 0);
    // The trusted link's frames took the receive header prediction (where a decoy that
    // matched the template outside the moving fields would slip past the full path's checks).
    let t = &dp.stats()[1];
    assert!(t.rx_predicted > 0, "no frame was predicted: {t:?}");
    let window_probes: u64 = dp
        .stats()
        .iter()
        .chain(dp_u.stats().iter())
        .map(|w| w.tcp_window_probes)
        .sum();
    eprintln!("zero-window probes: {window_probes}");
}
