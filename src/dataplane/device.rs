//! A smoltcp [`Device`] over one DPDK port queue.
//!
//! - rx: the worker calls [`DpdkDevice::rx_refill`] once per loop (one `rx_burst` of up to
//!   `batch` packets); `receive` hands them to smoltcp one by one. A two-segment frame whose
//!   first segment is exactly its headers ([`headers_only`]: a segment sent by reference) goes
//!   to smoltcp in its two parts (`RxToken::consume_split`); other chains are linearized (a
//!   counted copy), or dropped with a log line when that does not fit.
//! - tx: every frame is built directly in an mbuf from the port's pool (no allocation per packet
//!   outside the mempool) and queued; with transmit by reference
//!   ([`DpdkDevice::enable_zero_copy`], `TxToken::consume_split`) a TCP segment's payload is an
//!   external mbuf over the socket's transmit ring chained behind the headers, pinned there
//!   until freed ([`crate::dpdk::TxPins`]). [`DpdkDevice::flush`] calls `tx_burst`. Frames the driver
//!   does not take stay queued. When the queue holds `tx_max` frames, `transmit` (and `receive`,
//!   which must also return a tx token) says "not now": smoltcp keeps the data in its socket
//!   buffer and tries on the next poll. Nothing is dropped on a full tx ring, which matters
//!   because a lost segment costs a retransmission timeout (smoltcp: 700 ms initially, never below
//!   10 ms; docs/datapath.md "Loss recovery").
//! - Checksums (config `checksum`, see [`plan`] and docs/dataplane.md): the IPv4 header and TCP
//!   checksums the port's PMD offers to handle are offloaded to it (`auto`, the default, or
//!   `offload`); smoltcp computes and verifies the rest in software. Offloaded on tx: smoltcp
//!   leaves the field zero and [`DpdkTxToken`] marks the mbuf (`l2_len`, `l3_len`,
//!   `RTE_MBUF_F_TX_IPV4 | _IP_CKSUM | _TCP_CKSUM`, pseudo-header checksum in the TCP field).
//!   Offloaded on rx: smoltcp does not verify; `receive` takes the PMD's verdict from the
//!   mbuf's flags (good: accept; bad: drop and count; unknown: verify in software). Ports
//!   configured as a trusted shared-memory link skip checksums altogether.
//! - Faults (config `[port.faults]`, [`super::fault`]): when set, received bursts and sent
//!   frames go through a seeded injector (drop, duplicate, reorder, corrupt) and every received
//!   frame is checked here (IPv4 and TCP checksums in software) before smoltcp sees it. Without
//!   faults the data path pays one branch per burst and per frame.

use smoltcp::phy::{self, Checksum, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, TcpPacket};

use super::fault::{FaultStats, Faults, Frame};
use super::steer::{Dest, Steering};
use crate::config::FaultConfig;
use crate::dpdk::{offload, CksumVerdict, Mbuf, MbufStash, Mempool, Queue, TxPins};

/// IPv4/TCP checksum handling of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumMode {
    /// Computed on tx, verified on rx, by smoltcp (default; with `auto`/`offload` for what
    /// the PMD does not do).
    Software,
    /// Neither (shared-memory links between dpwarp processes).
    TrustedLink,
    /// Computed on tx only (peers whose frames carry offloaded, partial checksums).
    TxOnly,
}

/// The checksums a port's PMD computes (tx) and verifies (rx) for us: the
/// `RTE_ETH_{TX,RX}_OFFLOAD_{IPV4,TCP}_CKSUM` bits the port was configured with.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CksumOffload {
    /// The PMD fills IPv4 header checksums.
    pub tx_ipv4: bool,
    /// The PMD fills TCP checksums.
    pub tx_tcp: bool,
    /// The PMD verifies IPv4 header checksums.
    pub rx_ipv4: bool,
    /// The PMD verifies TCP checksums.
    pub rx_tcp: bool,
}

impl CksumOffload {
    /// `RTE_ETH_TX_OFFLOAD_*` bits for the port configuration.
    pub fn tx_bits(&self) -> u64 {
        (if self.tx_ipv4 {
            offload::TX_IPV4_CKSUM
        } else {
            0
        }) | (if self.tx_tcp {
            offload::TX_TCP_CKSUM
        } else {
            0
        })
    }

    /// `RTE_ETH_RX_OFFLOAD_*` bits for the port configuration.
    pub fn rx_bits(&self) -> u64 {
        (if self.rx_ipv4 {
            offload::RX_IPV4_CKSUM
        } else {
            0
        }) | (if self.rx_tcp {
            offload::RX_TCP_CKSUM
        } else {
            0
        })
    }

    /// Whether anything is offloaded.
    pub fn any(&self) -> bool {
        self.tx_bits() | self.rx_bits() != 0
    }

    /// For logs: `tx ipv4,tcp rx ipv4,tcp`.
    pub fn describe(&self) -> String {
        format!(
            "tx {} rx {}",
            offload::cksum_names(self.tx_bits()),
            offload::cksum_names(self.rx_bits())
        )
    }
}

/// Decide a port's checksum handling from its `checksum` setting and what its PMD offers
/// (`rte_eth_dev_info::{tx,rx}_offload_capa`):
/// - `auto` (default): offload each of IPv4-header/TCP, tx/rx, that the PMD offers (net_tap
///   offers all four in DPDK 22.11; net_ring, net_memif, net_af_packet and net_pcap none), the
///   rest in software;
/// - `offload`: the same, but a PMD that does not offer all four is a configuration error;
/// - `software`, `tx-only`, `trusted-link`: no offload (see [`ChecksumMode`]).
pub fn plan(
    setting: &str,
    driver: &str,
    tx_capa: u64,
    rx_capa: u64,
) -> Result<(ChecksumMode, CksumOffload), String> {
    let offered = CksumOffload {
        tx_ipv4: tx_capa & offload::TX_IPV4_CKSUM != 0,
        tx_tcp: tx_capa & offload::TX_TCP_CKSUM != 0,
        rx_ipv4: rx_capa & offload::RX_IPV4_CKSUM != 0,
        rx_tcp: rx_capa & offload::RX_TCP_CKSUM != 0,
    };
    match setting {
        "auto" => Ok((ChecksumMode::Software, offered)),
        "offload" => {
            if offered.tx_ipv4 && offered.tx_tcp && offered.rx_ipv4 && offered.rx_tcp {
                Ok((ChecksumMode::Software, offered))
            } else {
                Err(format!(
                    "checksum = \"offload\": {driver} offers IPv4/TCP checksum offload {} (needs \
                     tx ipv4,tcp rx ipv4,tcp); use \"auto\" or \"software\"",
                    offered.describe()
                ))
            }
        }
        "software" => Ok((ChecksumMode::Software, CksumOffload::default())),
        "tx-only" => Ok((ChecksumMode::TxOnly, CksumOffload::default())),
        "trusted-link" => Ok((ChecksumMode::TrustedLink, CksumOffload::default())),
        o => Err(format!(
            "checksum {o:?}: auto, offload, software, tx-only or trusted-link"
        )),
    }
}

/// Where a frame smoltcp built needs the PMD: `Some((l3_len, ipv4, tcp))` for an IPv4 frame
/// when any of its checksums is offloaded (`ipv4`: the header checksum, `tcp`: the TCP
/// checksum of an unfragmented TCP packet), None otherwise (ARP, or nothing offloaded).
pub fn tx_offload_for(frame: &[u8], off: CksumOffload) -> Option<(u16, bool, bool)> {
    if !(off.tx_ipv4 || off.tx_tcp) || frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl {
        return None;
    }
    // Offset and more-fragments bits: only a whole TCP packet has its TCP header here.
    let unfragmented = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff == 0;
    let tcp = off.tx_tcp && ip[9] == 6 && unfragmented && ip.len() >= ihl + 20;
    if !(off.tx_ipv4 || tcp) {
        return None;
    }
    Some((ihl as u16, off.tx_ipv4, tcp))
}

/// TCP payload octets of an Ethernet/IPv4/TCP `frame` (0 for anything else or a malformed
/// frame: smoltcp drops those).
pub fn tcp_payload_len(frame: &[u8]) -> usize {
    if frame.len() < 14 + 20 + 20 || frame[12..14] != [0x08, 0x00] {
        return 0;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip[9] != 6 || ihl < 20 {
        return 0;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    let Some(tcp) = ip.get(ihl..total) else {
        return 0;
    };
    let Some(&off) = tcp.get(12) else { return 0 };
    tcp.len().saturating_sub(usize::from(off >> 4) * 4)
}

impl ChecksumMode {
    /// For logs: what happens to the checksums not offloaded.
    pub fn describe(&self) -> &'static str {
        match self {
            ChecksumMode::Software => "computed and verified by smoltcp",
            ChecksumMode::TrustedLink => "neither computed nor verified (trusted link)",
            ChecksumMode::TxOnly => "computed by smoltcp, not verified on rx",
        }
    }
}

/// What to do with a received frame whose checksums are (partly) offloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxCksum {
    /// Its offloaded checksums are right: per the PMD, or (`software`) checked here because
    /// the PMD left one unchecked.
    Accept {
        /// At least one was verified in software.
        software: bool,
    },
    /// Nothing offloaded applies (not IPv4, or malformed: smoltcp drops those itself).
    Unchecked,
    /// A bad checksum (which one): drop the frame.
    Drop(&'static str),
}

/// Decide on a received Ethernet `frame` given the offloads in force and the PMD's verdicts
/// (`ip` for the IPv4 header, `l4` for TCP): GOOD and NONE (DPDK: "checksum not valid in the
/// packet, data integrity verified") accept, BAD drops, UNKNOWN is verified in software.
pub fn rx_verdict(frame: &[u8], off: CksumOffload, ip: CksumVerdict, l4: CksumVerdict) -> RxCksum {
    if !(off.rx_ipv4 || off.rx_tcp) || frame.len() < 14 || frame[12..14] != [0x08, 0x00] {
        return RxCksum::Unchecked;
    }
    // Malformed IPv4 (truncated, bad lengths) is left to smoltcp, which drops it.
    let Ok(pkt) = Ipv4Packet::new_checked(&frame[14..]) else {
        return RxCksum::Unchecked;
    };
    let mut software = false;
    if off.rx_ipv4 {
        match ip {
            CksumVerdict::Good | CksumVerdict::None => {}
            CksumVerdict::Bad => return RxCksum::Drop("IPv4 header (PMD)"),
            CksumVerdict::Unknown => {
                software = true;
                if !pkt.verify_checksum() {
                    return RxCksum::Drop("IPv4 header");
                }
            }
        }
    }
    let whole = !pkt.more_frags() && pkt.frag_offset() == 0;
    if off.rx_tcp && pkt.next_header() == IpProtocol::Tcp && whole {
        match l4 {
            CksumVerdict::Good | CksumVerdict::None => {}
            CksumVerdict::Bad => return RxCksum::Drop("TCP (PMD)"),
            CksumVerdict::Unknown => {
                let (src, dst) = (
                    IpAddress::Ipv4(pkt.src_addr()),
                    IpAddress::Ipv4(pkt.dst_addr()),
                );
                // A truncated TCP header is smoltcp's to drop.
                if let Ok(t) = TcpPacket::new_checked(pkt.payload()) {
                    software = true;
                    if !t.verify_checksum(&src, &dst) {
                        return RxCksum::Drop("TCP");
                    }
                }
            }
        }
    }
    RxCksum::Accept { software }
}

/// Counters of one device.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeviceStats {
    /// Frames taken from the rx queue by `rte_eth_rx_burst`.
    pub rx_packets: u64,
    /// Frames the driver accepted in `rte_eth_tx_burst`.
    pub tx_packets: u64,
    /// `transmit` refused because the tx queue was full (backpressure, not a drop).
    pub tx_backpressure: u64,
    /// The pool was empty when a frame was to be built.
    pub tx_no_mbuf: u64,
    /// Received frames smoltcp could not take (chained mbufs).
    pub rx_dropped: u64,
    /// Frames sent with checksums left to the PMD (`RTE_MBUF_F_TX_*_CKSUM`).
    pub tx_cksum_offload: u64,
    /// Received frames whose offloaded checksums the PMD reported good.
    pub rx_cksum_good: u64,
    /// Received frames with an offloaded checksum the PMD left unchecked, verified here in
    /// software.
    pub rx_cksum_sw: u64,
    /// Received frames dropped for a bad IPv4 header or TCP checksum (PMD verdict or software
    /// check of an offloaded checksum).
    pub rx_cksum_bad: u64,
    /// TCP payload octets in the frames handed to smoltcp (which copies them into the
    /// socket's receive ring).
    pub rx_tcp_payload: u64,
    /// TCP payload octets in the frames smoltcp built (copied from the socket's transmit
    /// ring into the mbuf), retransmissions included.
    pub tx_tcp_payload: u64,
    /// TCP segments with payload built (retransmissions included).
    pub tx_tcp_segments: u64,
    /// Of `tx_tcp_payload`, the octets sent by reference (an external mbuf over the socket's
    /// transmit ring, chained behind the headers; not copied).
    pub tx_zero_copy: u64,
    /// Segments whose payload went by reference.
    pub tx_zero_copy_segments: u64,
    /// TCP segments smoltcp handed over whole for this device to cut into frames
    /// (segmentation offload, `[tcp] gso`).
    pub tx_gso_segments: u64,
    /// The frames cut from them (each also counted in `tx_tcp_segments`).
    pub tx_gso_frames: u64,
    /// TCP segments of several frames handed to the PMD whole, as one mbuf chain, for the
    /// NIC to cut (TCP segmentation offload, port setting `tso`).
    pub tx_tso_segments: u64,
    /// The frames the NIC cuts from them (each also counted in `tx_tcp_segments`).
    pub tx_tso_frames: u64,
    /// Segments that could not go whole (a chain longer than the PMD takes, no mbuf for the
    /// chain, `rte_eth_tx_prepare` refusing) and were cut by the device instead.
    pub tx_tso_fallbacks: u64,
    /// Frames received on this queue that belong to another worker of the port, handed to
    /// it (flow steering, `super::steer`).
    pub rx_steered_out: u64,
    /// Frames other workers of the port received for this one, taken from its inbox (the
    /// ARP copies among them).
    pub rx_steered_in: u64,
    /// Copies of received ARP frames handed to the port's other workers.
    pub rx_arp_copies: u64,
    /// Frames for another worker dropped because its inbox was full (or no mbuf was left
    /// for an ARP copy).
    pub rx_steer_dropped: u64,
    /// Received octets copied to make a chained frame one buffer (`rte_pktmbuf_linearize`).
    pub rx_linearized: u64,
    /// Free mbufs in the port's pool when the counters were taken (with the mbufs of the
    /// port's other queues; a leak shows as a count that does not come back once traffic is
    /// over). Mbufs in a queue's transmit stash are not free: see `tx_stashed`.
    pub pool_free: u32,
    /// Mbufs this queue took from the pool ahead of transmitting ([`crate::dpdk::MbufStash`],
    /// at most 64): not in use, not free either.
    pub tx_stashed: u32,
    /// Fault injection counters (all zero on a port without `faults`).
    pub faults: FaultStats,
}

/// One DPDK port queue as a smoltcp device.
pub struct DpdkDevice {
    /// The port queue this device owns (no other thread can burst on it).
    queue: Queue,
    pool: &'static Mempool,
    /// Where frames to send get their mbufs: taken from `pool` a batch ahead.
    stash: MbufStash,
    batch: usize,
    mtu: usize,
    /// The current rx burst, reversed so frames are taken in arrival order with `pop`.
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    tx_max: usize,
    /// Copies of every frame received and sent, for a capture port (a `net_pcap` vdev with
    /// `tx_pcap=FILE`): the capture is written by DPDK's own pcap PMD.
    mirror: Option<Mirror>,
    /// Segmentation offload allowed (config `[tcp] gso`): smoltcp may hand over a TCP
    /// segment of several frames, which `consume_gso` cuts or, with `tso`, hands to the PMD
    /// whole (only where no checksum is computed in software, save the IPv4 header's with
    /// `tso`, and no faults are injected: `tcp_gso_frames`).
    gso: bool,
    /// TCP segmentation offload (port setting `tso`): such segments go to the PMD whole.
    tso: Option<Tso>,
    /// IPv4/TCP checksum handling (config `checksum`).
    checksum: ChecksumMode,
    /// The checksums the PMD handles (config `checksum` = `auto`/`offload`).
    offload: CksumOffload,
    /// The port's MAC address (what received frames must be sent to).
    mac: [u8; 6],
    /// Fault injection (config `faults`); None on every port unless configured.
    faults: Option<Box<Faults<Mbuf>>>,
    /// The rx burst as it comes out of the faults.
    rx_faulted: Vec<Mbuf>,
    /// Transmit by reference (None: every payload is copied into the mbuf).
    zc: Option<ZeroCopy>,
    /// An ARP frame was handed to smoltcp since [`DpdkDevice::take_arp_seen`] last looked.
    arp_seen: bool,
    /// A TCP SYN (without ACK) was handed to smoltcp since [`DpdkDevice::take_syn_seen`].
    syn_seen: bool,
    /// Look for SYNs at all (the worker listens on some port).
    watch_syn: bool,
    /// Flow steering between the port's workers (ports of more than one queue).
    steering: Option<Steering>,
    /// Frames of a burst kept for this worker while the others are handed over.
    rx_kept: Vec<Mbuf>,
    /// This device's counters.
    pub stats: DeviceStats,
}

/// Whether `frame` is an IPv4 TCP segment with SYN set and ACK clear (RFC 9293 3.1 flags,
/// RFC 791 IHL).
fn is_connection_request(frame: &[u8]) -> bool {
    if frame.get(12..14) != Some(&[0x08, 0x00][..]) || frame.get(23) != Some(&6) {
        return false;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    frame.get(14 + ihl + 13).is_some_and(|f| f & 0x12 == 0x02)
}

impl Drop for DpdkDevice {
    /// Frames not sent are freed (releasing their pins); a transmit ring some frame still
    /// points into (queued in the PMD or at the peer) is leaked rather than freed under it.
    fn drop(&mut self) {
        self.tx.clear();
        self.rx.clear();
        self.rx_kept.clear();
        self.rx_faulted.clear();
        self.faults = None;
        if let Some(z) = self.zc.as_mut() {
            for (sock, mut pins) in z.retired.drain(..) {
                if pins.outstanding() > 0 {
                    log::debug!("dpdk: a transmit ring still referenced by frames is leaked");
                    std::mem::forget(sock);
                }
            }
        }
    }
}

impl Frame for Mbuf {
    fn bytes(&self) -> &[u8] {
        self.data()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

/// A copy of `m` (every segment) in a new mbuf from `pool` (None when the pool is empty).
fn copy_mbuf(pool: &'static Mempool, m: &Mbuf) -> Option<Mbuf> {
    if m.nb_segs() > 1 {
        return m.deep_copy(pool);
    }
    let mut c = pool.alloc()?;
    c.append(m.data().len() as u16)?.copy_from_slice(m.data());
    Some(c)
}

/// Transmit by reference over the sockets' transmit rings (see [`crate::dpdk::TxPins`]).
struct ZeroCopy {
    /// Per registered ring, by its address: (length, its pins).
    rings: std::collections::BTreeMap<usize, (usize, TxPins)>,
    /// Sockets removed while frames still referenced their rings: kept (their rings with
    /// them) until the pins are released.
    retired: Vec<(smoltcp::socket::Socket<'static>, TxPins)>,
    /// Pins per ring.
    slots: usize,
}

/// A port (queue 0) that receives a copy of every frame.
pub struct Mirror {
    /// Queue 0 of the capture port, where the copies are sent.
    pub port: Queue,
    /// Pool the copies are allocated from.
    pub pool: &'static Mempool,
    /// Copies not yet taken by the capture port's driver (at most 1024; beyond that copies
    /// are skipped rather than stalling traffic).
    pub pending: Vec<Mbuf>,
}

impl Mirror {
    fn copy_mbuf(&mut self, m: &Mbuf) {
        if m.nb_segs() == 1 {
            return self.copy(m.data());
        }
        if self.pending.len() >= 1024 {
            return;
        }
        if let Some(c) = m.deep_copy(self.pool) {
            self.pending.push(c);
        }
    }

    fn copy(&mut self, frame: &[u8]) {
        if self.pending.len() >= 1024 {
            // The capture file cannot keep up: count it as a capture drop, never stall traffic.
            return;
        }
        if let Some(mut m) = self.pool.alloc() {
            if let Some(b) = m.append(frame.len() as u16) {
                b.copy_from_slice(frame);
                self.pending.push(m);
            }
        }
    }
}

impl DpdkDevice {
    /// A device on `queue` (of a port, [`crate::dpdk::Port::claim_queue`]); `mtu` is the IP MTU.
    pub fn new(queue: Queue, pool: &'static Mempool, batch: usize, mtu: usize) -> Self {
        DpdkDevice {
            queue,
            pool,
            stash: pool.stash(),
            batch,
            mtu,
            rx: Vec::with_capacity(batch),
            tx: Vec::with_capacity(batch * 8),
            tx_max: batch * 8,
            mirror: None,
            gso: false,
            tso: None,
            checksum: ChecksumMode::Software,
            offload: CksumOffload::default(),
            mac: [0; 6],
            faults: None,
            rx_faulted: Vec::new(),
            zc: None,
            arp_seen: false,
            syn_seen: false,
            watch_syn: false,
            steering: None,
            rx_kept: Vec::with_capacity(batch),
            stats: DeviceStats::default(),
        }
    }

    /// Whether an ARP frame was handed to smoltcp since the last call. An ARP reply may
    /// fill the neighbour a socket's SYN or data is waiting for (smoltcp holds such a
    /// socket back until the neighbour is known, RFC 826), and only an egress that visits
    /// that socket sends it: the worker then visits them all.
    pub fn take_arp_seen(&mut self) -> bool {
        std::mem::take(&mut self.arp_seen)
    }

    /// Whether a connection request (a TCP SYN without ACK, RFC 9293 3.5) was handed to
    /// smoltcp since the last call: a listening socket may have left LISTEN, and smoltcp
    /// answers a SYN no socket listens for with a RST, so the worker puts a fresh listening
    /// socket in its place before the next frame.
    pub fn take_syn_seen(&mut self) -> bool {
        std::mem::take(&mut self.syn_seen)
    }

    /// Whether to look for SYNs ([`DpdkDevice::take_syn_seen`]): only while the worker
    /// listens, so a worker that only connects pays nothing per frame.
    pub fn watch_syn(&mut self, on: bool) {
        self.watch_syn = on;
        self.syn_seen = false;
    }

    /// Send TCP payload by reference (external mbufs over the sockets' transmit rings,
    /// `slots` frames in flight per ring at most) instead of copying it into the mbuf. Only
    /// for PMDs that take chained mbufs and read them in software (no IOVA is set):
    /// docs/datapath.md "Copies".
    pub fn enable_zero_copy(&mut self, slots: usize) {
        self.zc = Some(ZeroCopy {
            rings: Default::default(),
            retired: Vec::new(),
            slots,
        });
    }

    /// Whether payload is sent by reference on this device.
    pub fn zero_copy(&self) -> bool {
        self.zc.is_some()
    }

    /// A new socket whose transmit ring frames may reference (call before it sends).
    pub fn zc_register(&mut self, s: &smoltcp::socket::tcp::Socket<'static>) {
        if let Some(z) = self.zc.as_mut() {
            let (base, len, _) = s.tx_ring_layout();
            z.rings.insert(base as usize, (len, TxPins::new(z.slots)));
        }
    }

    /// A socket removed from the interface: dropped now, or kept until no frame references
    /// its transmit ring any more.
    pub fn zc_retire(&mut self, sock: smoltcp::socket::Socket<'static>) {
        let Some(z) = self.zc.as_mut() else { return };
        #[allow(irrefutable_let_patterns)]
        let smoltcp::socket::Socket::Tcp(s) = &sock
        else {
            return;
        };
        let (base, _, _) = s.tx_ring_layout();
        if let Some((_, mut pins)) = z.rings.remove(&(base as usize)) {
            if pins.outstanding() > 0 {
                z.retired.push((sock, pins));
            }
        }
    }

    /// Free octets of `s`'s transmit ring, from where it writes next (around the end), that
    /// no frame in flight references: what may be written now.
    pub fn ring_room(&mut self, s: &smoltcp::socket::tcp::Socket<'static>) -> usize {
        let free = s.send_capacity() - s.send_queue();
        let Some(z) = self.zc.as_mut() else {
            return free;
        };
        let (base, cap, write_at) = s.tx_ring_layout();
        let Some((_, pins)) = z.rings.get_mut(&(base as usize)) else {
            return free;
        };
        let first = free.min(cap - write_at);
        let r = pins.free_run(write_at, first);
        if r < first || first == free {
            return r;
        }
        r + pins.free_run(0, free - first)
    }

    /// Sockets kept for their pins, and whether frames reference live rings (for tests and
    /// stats): (retired sockets, frames in flight over all rings).
    pub fn zc_outstanding(&mut self) -> (usize, usize) {
        let Some(z) = self.zc.as_mut() else {
            return (0, 0);
        };
        z.retired.retain_mut(|(_, p)| p.outstanding() > 0);
        let live: usize = z.rings.values_mut().map(|(_, p)| p.outstanding()).sum();
        let dead: usize = z.retired.iter_mut().map(|(_, p)| p.outstanding()).sum();
        (z.retired.len(), live + dead)
    }

    /// The port's own MAC address.
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.mac = mac;
    }

    /// Turn fault injection on (`Some`) or off. Faults need IPv4/TCP checksums computed and
    /// verified in software on this port (checksum mode `Software`, nothing offloaded: an
    /// offloading PMD would checksum a frame corrupted on tx as if it were right); the port
    /// is set up that way when its config has `faults`. Counters are kept across changes.
    pub fn set_faults(&mut self, cfg: Option<FaultConfig>) -> Result<(), String> {
        if let Some(c) = &cfg {
            c.validate()?;
            if self.checksum != ChecksumMode::Software || self.offload.any() {
                return Err(format!(
                    "faults need IPv4/TCP checksums computed and verified in software on this \
                     port (it has: {}, offload {}); give the port a [port.faults] table in its \
                     config",
                    self.checksum.describe(),
                    self.offload.describe()
                ));
            }
        }
        // The injector in force hands over its counters and the frames it holds back (they go
        // out after what is queued: still reordered, not lost).
        if let Some(mut old) = self.faults.take() {
            self.stats.faults = old.stats;
            for (m, rx) in old.take_held() {
                if rx {
                    self.rx.insert(0, m);
                } else {
                    self.tx.push(m);
                }
            }
        }
        if let Some(c) = cfg {
            let mut f = Faults::new(c, self.mac, u64::from(self.queue.index()));
            f.stats = self.stats.faults;
            self.faults = Some(Box::new(f));
        }
        Ok(())
    }

    /// This device's counters, fault counters included.
    pub fn stats(&self) -> DeviceStats {
        let mut s = self.stats;
        s.pool_free = self.pool.available();
        s.tx_stashed = self.stash.len() as u32;
        if let Some(f) = &self.faults {
            s.faults = f.stats;
        }
        s
    }

    /// Allow segmentation offload (`[tcp] gso`; see [`DeviceStats::tx_gso_segments`]).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Hand segments of several frames to the PMD whole (TCP segmentation offload; see
    /// [`Tso`]). The port must have been configured with `RTE_ETH_TX_OFFLOAD_TCP_TSO` and
    /// `_MULTI_SEGS` and offload the TCP checksum ([`DpdkDevice::set_checksum_offload`]);
    /// only with `[tcp] gso` do such segments exist.
    pub fn set_tso(&mut self, tso: Option<Tso>) {
        self.tso = tso;
    }

    /// Whether segments go to the PMD whole.
    pub fn tso(&self) -> bool {
        self.tso.is_some()
    }

    /// Which checksums smoltcp computes (tx) and verifies (rx): what the checksum mode asks
    /// for and the PMD does not handle, as (IPv4 tx, IPv4 rx, TCP tx, TCP rx). What
    /// `capabilities` tells smoltcp.
    fn software_checksums(&self) -> (bool, bool, bool, bool) {
        let (sw_tx, sw_rx) = match self.checksum {
            ChecksumMode::Software => (true, true),
            ChecksumMode::TrustedLink => (false, false),
            ChecksumMode::TxOnly => (true, false),
        };
        let o = self.offload;
        (
            sw_tx && !o.tx_ipv4,
            sw_rx && !o.rx_ipv4,
            sw_tx && !o.tx_tcp,
            sw_rx && !o.rx_tcp,
        )
    }

    /// How IPv4/TCP checksums are handled (see `PortConfig::checksum`).
    pub fn set_checksum_mode(&mut self, m: ChecksumMode) {
        self.checksum = m;
    }

    /// Which checksums the port's PMD handles; the port must have been configured with
    /// `off.tx_bits()` / `off.rx_bits()`.
    pub fn set_checksum_offload(&mut self, off: CksumOffload) {
        self.offload = off;
    }

    /// Check a received frame's offloaded checksums ([`rx_verdict`]); false: drop it (counted,
    /// with a rate-limited log line).
    fn rx_cksum_ok(&mut self, m: &Mbuf) -> bool {
        let (ipv, l4v) = m.rx_cksum();
        match rx_verdict(m.data(), self.offload, ipv, l4v) {
            RxCksum::Accept { software } => {
                if software {
                    self.stats.rx_cksum_sw += 1;
                } else {
                    self.stats.rx_cksum_good += 1;
                }
                true
            }
            RxCksum::Unchecked => true,
            RxCksum::Drop(what) => {
                self.stats.rx_cksum_bad += 1;
                // Every frame is counted; the log line is rate-limited (a peer can send many).
                if self.stats.rx_cksum_bad.is_power_of_two() {
                    let src = Ipv4Packet::new_checked(&m.data()[14..])
                        .map(|ip| ip.src_addr().to_string())
                        .unwrap_or_default();
                    log::warn!(
                        "dpdk: dropped a frame from {src} with a bad {what} checksum ({} so far)",
                        self.stats.rx_cksum_bad
                    );
                }
                false
            }
        }
    }

    /// Copy every frame to `mirror` as well.
    pub fn set_mirror(&mut self, port: Queue, pool: &'static Mempool) {
        self.mirror = Some(Mirror {
            port,
            pool,
            pending: Vec::with_capacity(1024),
        });
    }

    /// Steer received frames between this device and the port's other workers' devices.
    pub fn set_steering(&mut self, s: Steering) {
        self.steering = Some(s);
    }

    /// The port's flow steering, if it has more than one queue: the owner function and this
    /// device's queue index.
    pub fn steering(&self) -> Option<(&super::steer::Steer, usize)> {
        self.steering.as_ref().map(|s| (&*s.steer, s.me))
    }

    /// Pull one burst from the rx queue if everything earlier was consumed, and (with flow
    /// steering) hand the frames other workers own to them and take what they handed to this
    /// one. Returns how many frames are queued for smoltcp.
    pub fn rx_refill(&mut self) -> usize {
        if !self.rx.is_empty() {
            return 0;
        }
        // A burst takes at most the vector's spare room. With faults on, `rx` and
        // `rx_faulted` trade places every burst, so the one left here when faults are turned
        // off must have room too: with none, the queue would never be read again.
        self.rx.reserve(self.batch);
        let n = self.queue.rx_burst(&mut self.rx, self.batch);
        if n == 0 && self.steering.is_none() && self.faults.is_none() {
            // An empty burst: nothing to count, steer, fault or order (the idle pass).
            return 0;
        }
        self.stats.rx_packets += n as u64;
        if self.steering.is_some() {
            self.steer_burst();
        }
        if let Some(f) = self.faults.as_deref_mut() {
            let pool = self.pool;
            for mut m in self.rx.drain(..) {
                // Faults see (and corrupt) whole frames.
                if m.nb_segs() != 1 {
                    let n = u64::from(m.pkt_len()) - m.data().len() as u64;
                    if m.linearize() {
                        self.stats.rx_linearized += n;
                    }
                }
                f.apply(true, m, &mut self.rx_faulted, |m| copy_mbuf(pool, m));
            }
            f.tick(true, &mut self.rx_faulted);
            std::mem::swap(&mut self.rx, &mut self.rx_faulted);
        }
        self.rx.reverse();
        self.rx.len()
    }

    /// Flow steering of one burst (`super::steer`): frames of connections another worker
    /// owns go to its inbox, ARP frames to every worker (a copy each), the rest stay; then
    /// what the others handed to this worker joins the burst, up to a batch.
    fn steer_burst(&mut self) {
        let Some(st) = self.steering.as_ref() else {
            return;
        };
        let me = st.me;
        for m in self.rx.drain(..) {
            match st.steer.dest(m.data()) {
                Dest::Worker(k) if k != me => match st.inboxes[k].push(m) {
                    Ok(()) => self.stats.rx_steered_out += 1,
                    Err(m) => {
                        self.stats.rx_steer_dropped += 1;
                        drop(m);
                    }
                },
                Dest::Everyone => {
                    for (k, inbox) in st.inboxes.iter().enumerate() {
                        if k == me {
                            continue;
                        }
                        match copy_mbuf(self.pool, &m).map(|c| inbox.push(c)) {
                            Some(Ok(())) => self.stats.rx_arp_copies += 1,
                            _ => self.stats.rx_steer_dropped += 1,
                        }
                    }
                    self.rx_kept.push(m);
                }
                _ => self.rx_kept.push(m),
            }
        }
        while self.rx_kept.len() < self.batch {
            let Some(m) = st.inboxes[me].pop() else {
                break;
            };
            self.stats.rx_steered_in += 1;
            self.rx_kept.push(m);
        }
        std::mem::swap(&mut self.rx, &mut self.rx_kept);
    }

    /// Frames received but not yet given to smoltcp.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }

    /// Hand queued frames to the driver; returns how many it took.
    pub fn flush(&mut self) -> usize {
        // Nothing queued, nothing held back by the faults, no mirror, no retired ring waiting
        // for its frames: nothing to do (the idle pass).
        if self.tx.is_empty()
            && self.faults.is_none()
            && self.mirror.is_none()
            && self.zc.as_ref().is_none_or(|z| z.retired.is_empty())
        {
            return 0;
        }
        if let Some(f) = self.faults.as_deref_mut() {
            f.tick(false, &mut self.tx);
        }
        let mut sent = 0;
        while !self.tx.is_empty() {
            let n = self.queue.tx_burst(&mut self.tx);
            if n == 0 {
                break;
            }
            sent += n;
        }
        self.stats.tx_packets += sent as u64;
        if let Some(z) = self.zc.as_mut() {
            if !z.retired.is_empty() {
                z.retired.retain_mut(|(_, p)| p.outstanding() > 0);
            }
        }
        if let Some(m) = self.mirror.as_mut() {
            m.port.tx_burst(&mut m.pending);
        }
        sent
    }

    /// Frames waiting for the driver.
    pub fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    /// Whether the tx queue can take a frame (flushing to the driver first if it is full).
    fn tx_room(&mut self) -> bool {
        if self.tx.len() >= self.tx_max {
            self.flush();
        }
        self.tx.len() < self.tx_max
    }

    /// Room to send one frame: a slot in the tx queue and an mbuf already taken from the pool,
    /// or None (backpressure: smoltcp keeps its data and tries again on the next poll).
    fn tx_token(&mut self) -> Option<DpdkTxToken<'_>> {
        if !self.tx_room() {
            self.stats.tx_backpressure += 1;
            return None;
        }
        match self.stash.take() {
            Some(m) => Some(DpdkTxToken {
                dev: self,
                m: Some(m),
            }),
            None => {
                self.stats.tx_no_mbuf += 1;
                None
            }
        }
    }
}

impl Device for DpdkDevice {
    type RxToken<'a> = DpdkRxToken;
    type TxToken<'a> = DpdkTxToken<'a>;

    fn receive(&mut self, _ts: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        loop {
            if self.rx.is_empty() {
                return None;
            }
            // A reply needs room: without it the frame stays queued (backpressure reaches the
            // rx ring instead of dropping a segment that would have to be retransmitted).
            if !self.tx_room() {
                self.stats.tx_backpressure += 1;
                return None;
            }
            let mut m = self.rx.pop()?;
            // A segment sent by reference (a header mbuf and its payload, tx_zero_copy) goes
            // to smoltcp in its two parts; other chains are made one buffer (a copy).
            let split = m.nb_segs() == 2
                && !(self.offload.rx_ipv4 || self.offload.rx_tcp)
                && self.faults.is_none()
                && headers_only(m.data());
            let chained = u64::from(m.pkt_len()) - m.data().len() as u64;
            if !split && m.nb_segs() != 1 && !m.linearize() {
                log::warn!(
                    "dpdk: dropping a {}-segment frame of {} bytes (first {} bytes {:02x?})",
                    m.nb_segs(),
                    m.pkt_len(),
                    m.data().len(),
                    &m.data()[..m.data().len().min(40)]
                );
                self.stats.rx_dropped += 1;
                continue;
            }
            if !split {
                self.stats.rx_linearized += chained;
            }
            if (self.offload.rx_ipv4 || self.offload.rx_tcp) && !self.rx_cksum_ok(&m) {
                continue;
            }
            if let Some(f) = self.faults.as_deref_mut() {
                if !f.admit(m.data()) {
                    continue;
                }
            }
            if let Some(mi) = self.mirror.as_mut() {
                mi.copy_mbuf(&m);
            }
            self.stats.rx_tcp_payload += if split {
                chained
            } else {
                tcp_payload_len(m.data()) as u64
            };
            let d = m.data();
            if d.get(12..14) == Some(&[0x08, 0x06][..]) {
                self.arp_seen = true;
            } else if self.watch_syn && is_connection_request(d) {
                self.syn_seen = true;
            }
            // Most received frames need no answer of their own (ACKs ride on data segments
            // or go out in the egress pass): the mbuf is taken only if smoltcp answers.
            return Some((DpdkRxToken { m, split }, DpdkTxToken { dev: self, m: None }));
        }
    }

    fn transmit(&mut self, _ts: Instant) -> Option<Self::TxToken<'_>> {
        self.tx_token()
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = self.mtu + 14;
        c.max_burst_size = Some(self.batch);
        // smoltcp computes (tx) and verifies (rx) what the PMD does not.
        let ck = |tx: bool, rx: bool| match (tx, rx) {
            (true, true) => Checksum::Both,
            (true, false) => Checksum::Tx,
            (false, true) => Checksum::Rx,
            (false, false) => Checksum::None,
        };
        let (ip_tx, ip_rx, tcp_tx, tcp_rx) = self.software_checksums();
        c.checksum.ipv4 = ck(ip_tx, ip_rx);
        c.checksum.tcp = ck(tcp_tx, tcp_rx);
        c
    }

    /// Segmentation offload: the frames one segment may be cut into now, bounded by the room
    /// left in the tx queue. None where smoltcp computes a checksum (it would cover the
    /// whole segment, not each frame) or faults are injected (they work on the frames
    /// smoltcp builds).
    fn tcp_gso_frames(&self) -> usize {
        let (ip_tx, _, tcp_tx, _) = self.software_checksums();
        // With TSO a software IPv4 header checksum is fine: the NIC writes each segment's
        // (`RTE_MBUF_F_TX_IP_CKSUM`), and a segment cut here after all gets its own.
        if !self.gso || self.faults.is_some() || tcp_tx || (ip_tx && self.tso.is_none()) {
            return 0;
        }
        self.tx_max
            .saturating_sub(self.tx.len())
            .min(GSO_MAX_FRAMES)
    }
}

/// Frames one segment is cut into at most (segmentation offload): 44 frames of an MTU 1500
/// segment are 63 712 octets, within the IPv4 total length smoltcp writes for the segment.
/// Also the most librte_gso cuts one packet into (net_tap's TSO: `MAX_GSO_MBUFS`).
pub const GSO_MAX_FRAMES: usize = 64;

/// TCP segmentation offload on a device's port (port setting `tso`, docs/dataplane.md "TCP
/// segmentation offload"): a TCP segment smoltcp built of several frames goes to the PMD as
/// one mbuf chain, the payload copied into pool mbufs behind the headers, marked
/// `RTE_MBUF_F_TX_TCP_SEG` with the frame payload as `tso_segsz`; the NIC cuts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tso {
    /// Most mbufs of one packet the PMD takes (`tx_desc_lim.nb_seg_max`): a segment whose
    /// chain would be longer is cut by the device.
    pub max_segs: u16,
}

/// Room for the Ethernet, IPv4 and TCP headers (options included) of a segment the device
/// cuts.
const GSO_HEADERS_MAX: usize = 14 + 60 + 60;

/// A received frame.
pub struct DpdkRxToken {
    m: Mbuf,
    /// Headers and TCP payload in two segments ([`headers_only`]).
    split: bool,
}

impl DpdkRxToken {
    /// Hand the frame to `f` (whole, or as headers and payload), then give the mbuf back.
    fn hand<R>(mut self, f: impl FnOnce(&[u8], &[u8]) -> R) -> (R, Mbuf) {
        if self.split {
            if let Some(payload) = self.m.second_segment() {
                let r = f(self.m.data(), payload);
                return (r, self.m);
            }
        }
        // smoltcp takes split frames through `consume_split`; anything else chained is made
        // one buffer here.
        let r = if self.m.nb_segs() != 1 && !self.m.linearize() {
            f(&[], &[])
        } else {
            f(self.m.data(), &[])
        };
        (r, self.m)
    }
}

impl phy::RxToken for DpdkRxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        // The mbuf is freed to its pool when it drops, after `f` returns.
        let token = DpdkRxToken {
            split: false,
            ..self
        };
        token.hand(|frame, _| f(frame)).0
    }

    fn consume_split<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8], &[u8]) -> R,
    {
        self.hand(f).0
    }
}

/// The device as smoltcp's ingress sees it in the worker: each frame smoltcp consumes stays
/// held in `held` until the next one replaces it (or the worker drops it), so that the
/// payload a socket lent from it (`tcp::Socket::take_rx_lent`) can be placed after smoltcp
/// has returned, straight from the mbuf.
pub struct Ingress<'d> {
    /// The port queue the frames come from.
    pub dev: &'d mut DpdkDevice,
    /// Where each consumed frame stays.
    pub held: &'d mut HeldFrame,
}

/// The last frame smoltcp consumed through [`Ingress`].
#[derive(Default)]
pub struct HeldFrame(Option<Mbuf>);

impl HeldFrame {
    /// The octets `lent` names, if they lie in the held frame (either of its segments).
    pub fn lent(&self, lent: tcp::RxLent) -> Option<&[u8]> {
        let m = self.0.as_ref()?;
        // A frame sent by reference (net_ring, `tx_zero_copy`) holds the payload apart.
        if m.nb_segs() == 2 {
            if let Some(payload) = m.second_segment().and_then(|p| lent.within(p)) {
                return Some(payload);
            }
        }
        lent.within(m.data())
    }

    /// Free the held frame to its pool.
    pub fn release(&mut self) {
        self.0 = None;
    }
}

/// A received frame whose mbuf goes to a [`HeldFrame`] once consumed.
pub struct HeldRxToken<'d> {
    token: DpdkRxToken,
    held: &'d mut HeldFrame,
}

impl phy::RxToken for HeldRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let token = DpdkRxToken {
            split: false,
            ..self.token
        };
        let (r, m) = token.hand(|frame, _| f(frame));
        self.held.0 = Some(m);
        r
    }

    fn consume_split<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8], &[u8]) -> R,
    {
        let (r, m) = self.token.hand(f);
        self.held.0 = Some(m);
        r
    }
}

impl Device for Ingress<'_> {
    type RxToken<'a>
        = HeldRxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = DpdkTxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, ts: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let (token, tx) = self.dev.receive(ts)?;
        Some((
            HeldRxToken {
                token,
                held: &mut *self.held,
            },
            tx,
        ))
    }

    fn transmit(&mut self, ts: Instant) -> Option<Self::TxToken<'_>> {
        self.dev.transmit(ts)
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.dev.capabilities()
    }
}

/// Whether `frame` is exactly the Ethernet, IPv4 and TCP headers of a TCP segment (the first
/// segment of a frame sent by reference, whose payload is the next segment).
pub fn headers_only(frame: &[u8]) -> bool {
    if frame.len() < 14 + 20 + 20 || frame[12..14] != [0x08, 0x00] {
        return false;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip[9] != 6 || ihl < 20 || ip.len() < ihl + 20 {
        return false;
    }
    let doff = usize::from(ip[ihl + 12] >> 4) * 4;
    doff >= 20 && ip.len() == ihl + doff
}

/// Payloads shorter than this go behind the headers by copy even where transmit by
/// reference is on (`tx_zero_copy`, docs/datapath.md "Copies"): for a short segment the
/// second mbuf, its attachment and its pin cost more than copying the octets, and the PMD
/// handles one segment instead of two.
pub const TX_BY_REFERENCE_MIN: usize = 512;

/// Room for one frame to send.
pub struct DpdkTxToken<'a> {
    dev: &'a mut DpdkDevice,
    /// Allocated up front by `transmit` (so that back-pressure is decided before smoltcp
    /// commits to a segment); None for the token `receive` pairs with a frame, allocated
    /// only when used.
    m: Option<Mbuf>,
}

impl phy::TxToken for DpdkTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let Some(mut m) = self.m.or_else(|| self.dev.stash.take()) else {
            log::warn!("dpdk: mbuf pool empty; a {len}-byte reply frame lost");
            self.dev.stats.tx_no_mbuf += 1;
            let mut scratch = vec![0u8; len];
            return f(&mut scratch);
        };
        if len > usize::from(m.tailroom()) {
            // Start-up checks that MTU + Ethernet header fits a pool buffer, so this is a bug,
            // not a network condition; smoltcp's API still needs a buffer to write into.
            log::error!("dpdk: a {len}-byte frame does not fit one mbuf; frame lost");
            self.dev.stats.tx_no_mbuf += 1;
            let mut scratch = vec![0u8; len];
            return f(&mut scratch);
        }
        let buf = m.append(len as u16).expect("tailroom checked");
        let r = f(buf);
        let payload = tcp_payload_len(m.data()) as u64;
        self.dev.stats.tx_tcp_payload += payload;
        self.dev.stats.tx_tcp_segments += u64::from(payload > 0);
        self.dev.send(m);
        r
    }

    fn consume_split<R, F>(self, header_len: usize, payload: &[u8], f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let DpdkTxToken { dev, m } = self;
        let ring = ring_of(dev, payload);
        send_split(dev, m, ring, header_len, payload, f)
    }

    /// One TCP segment of several frames (RFC 9293 §3.7.1: each frame a segment of at most
    /// the MSS): the headers `f` writes once are copied into every frame with its IPv4 total
    /// length and sequence number; PSH and FIN stay on the last frame only. The checksums
    /// are the PMD's or nobody's (`tcp_gso_frames`), so none is recomputed here. Each
    /// frame's payload goes as `consume_split` sends one: by reference or copied. Cut at
    /// the socket's frame size, every frame begins where smoltcp's per-segment path would
    /// have begun a segment, on an FPDU (RFC 5044 App. A) when the sender marks records.
    fn consume_gso<R, F>(self, header_len: usize, payload: &[u8], frame_payload: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let DpdkTxToken { dev, m } = self;
        // Every frame's payload lies in the ring the segment's does: looked up once.
        let ring = ring_of(dev, payload);
        if frame_payload == 0 || payload.len() <= frame_payload || header_len > GSO_HEADERS_MAX {
            return send_split(dev, m, ring, header_len, payload, f);
        }
        let mut template = [0u8; GSO_HEADERS_MAX];
        let h = &mut template[..header_len];
        let r = f(h);
        let h = &template[..header_len];
        if !headers_only(h) {
            // smoltcp emits Ethernet/IPv4/TCP here; anything else is a bug, not input.
            log::error!("dpdk: a segment to cut has no Ethernet/IPv4/TCP headers; sent whole");
            return send_split(dev, m, ring, header_len, payload, |b| {
                b.copy_from_slice(h);
                r
            });
        }
        let mut m = m;
        if dev.tso.is_some() {
            match send_tso(dev, m, h, payload, frame_payload) {
                Ok(()) => return r,
                Err(back) => {
                    dev.stats.tx_tso_fallbacks += 1;
                    m = back;
                }
            }
        }
        let tcp = 14 + usize::from(h[14] & 0x0f) * 4;
        let seq = u32::from_be_bytes([h[tcp + 4], h[tcp + 5], h[tcp + 6], h[tcp + 7]]);
        let flags = h[tcp + 13];
        let frames = payload.len().div_ceil(frame_payload);
        // smoltcp computed the IPv4 header checksum (a TSO port whose PMD does not offload it):
        // each frame's header, of its own length, needs its own.
        let ip_sw = dev.software_checksums().0;
        for (k, piece) in payload.chunks(frame_payload).enumerate() {
            send_split(dev, m.take(), ring, header_len, piece, |b| {
                b.copy_from_slice(h);
                let total = (header_len - 14 + piece.len()) as u16;
                b[16..18].copy_from_slice(&total.to_be_bytes());
                let s = seq.wrapping_add((k * frame_payload) as u32);
                b[tcp + 4..tcp + 8].copy_from_slice(&s.to_be_bytes());
                if k + 1 < frames {
                    // PSH and FIN belong to the segment's end.
                    b[tcp + 13] = flags & !(0x08 | 0x01);
                }
                if ip_sw {
                    Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
                }
            });
        }
        dev.stats.tx_gso_segments += 1;
        dev.stats.tx_gso_frames += frames as u64;
        r
    }
}

/// One TCP segment of several frames (`h`, its Ethernet/IPv4/TCP headers as smoltcp wrote
/// them for the whole segment, and `payload`) to the PMD whole for the NIC to cut into frames
/// of `mss` payload octets (TCP segmentation offload, [`Tso`]): one mbuf chain, `m` (taken by
/// `transmit`, if any) holding the headers and as much payload as fits, pool mbufs the rest,
/// marked as `rte_mbuf_core.h` prescribes ([`Mbuf::set_tx_tso`]) and prepared by the PMD
/// (`rte_eth_tx_prepare`). The frames on the wire are the ones the device would have cut:
/// the same size, so every one still begins where smoltcp's per-segment path would have begun
/// a segment (RFC 5044 App. A). Err with `m` back when the segment is to be cut in software
/// after all (a chain longer than the PMD takes, the pool empty, the PMD refusing it).
fn send_tso(
    dev: &mut DpdkDevice,
    m: Option<Mbuf>,
    h: &[u8],
    payload: &[u8],
    mss: usize,
) -> Result<(), Option<Mbuf>> {
    let Some(tso) = dev.tso else {
        return Err(m);
    };
    let header_len = h.len();
    let ihl = usize::from(h[14] & 0x0f) * 4;
    let doff = usize::from(h[14 + ihl + 12] >> 4) * 4;
    let Ok(mss) = u16::try_from(mss) else {
        return Err(m);
    };
    let Some(mut head) = m.or_else(|| dev.stash.take()) else {
        return Err(None);
    };
    // Every mbuf of the pool has the same room: the first after the headers, the others whole.
    let room = usize::from(head.tailroom());
    if room <= header_len {
        return Err(Some(head));
    }
    let first = (room - header_len).min(payload.len());
    let segs = 1 + (payload.len() - first).div_ceil(room);
    if segs > usize::from(tso.max_segs) {
        return Err(Some(head));
    }
    let buf = head
        .append((header_len + first) as u16)
        .expect("tailroom checked");
    buf[..header_len].copy_from_slice(h);
    buf[header_len..].copy_from_slice(&payload[..first]);
    let mut rest = &payload[first..];
    while !rest.is_empty() {
        // An empty pool: the partial chain goes back to it, and the device's cut counts what
        // it cannot send.
        let mut seg = dev.stash.take().ok_or(None)?;
        let n = rest.len().min(usize::from(seg.tailroom()));
        seg.append(n as u16)
            .expect("n within the tailroom")
            .copy_from_slice(&rest[..n]);
        head.chain(seg).map_err(|_| None)?;
        rest = &rest[n..];
    }
    if !head.set_tx_tso(14, ihl as u16, doff as u16, mss) {
        return Err(None);
    }
    if let Err(e) = dev.queue.tx_prepare(&mut head) {
        // A PMD that refuses one will refuse the next: cut in software from now on.
        log::warn!(
            "dpdk: port {} queue {}: the PMD refused a TSO packet of {} octets ({e});              segments are cut by the device from now on",
            dev.queue.port_id(),
            dev.queue.index(),
            header_len + payload.len()
        );
        dev.tso = None;
        return Err(None);
    }
    let frames = payload.len().div_ceil(usize::from(mss)) as u64;
    dev.stats.tx_tso_segments += 1;
    dev.stats.tx_tso_frames += frames;
    dev.stats.tx_tcp_segments += frames;
    dev.stats.tx_tcp_payload += payload.len() as u64;
    // No capture port and no faults with TSO (the port plan), and the offload marks are set:
    // straight to the queue.
    dev.tx.push(head);
    if dev.tx.len() >= dev.batch {
        dev.flush();
    }
    Ok(())
}

/// The base of the transmit ring `payload` lies in wholly, if any (a segment across the
/// ring's wrap is gathered by smoltcp into a buffer of its own: copied).
fn ring_of(dev: &DpdkDevice, payload: &[u8]) -> Option<usize> {
    let at = payload.as_ptr() as usize;
    dev.zc.as_ref().and_then(|z| {
        z.rings
            .range(..=at)
            .next_back()
            .filter(|(&base, &(len, _))| at + payload.len() <= base + len)
            .map(|(&base, _)| base)
    })
}

/// One frame of `header_len` octets of headers (written by `f`) and `payload`, the payload by
/// reference where it lies in a transmit ring (`ring`, from [`ring_of`]) and is long enough,
/// else copied behind the headers; `m` is the mbuf `transmit` took ahead, if any.
fn send_split<R, F: FnOnce(&mut [u8]) -> R>(
    dev: &mut DpdkDevice,
    m: Option<Mbuf>,
    ring: Option<usize>,
    header_len: usize,
    payload: &[u8],
    f: F,
) -> R {
    let at = payload.as_ptr() as usize;
    let copy = |dev: &'_ mut DpdkDevice, m: Option<Mbuf>, f: F| {
        phy::TxToken::consume(DpdkTxToken { dev, m }, header_len + payload.len(), |buf| {
            let (h, p) = buf.split_at_mut(header_len);
            p.copy_from_slice(payload);
            f(h)
        })
    };
    let Some(base) = ring else {
        return copy(dev, m, f);
    };
    // A short payload is copied behind the headers: one segment for the PMD to copy and
    // free instead of two, no external buffer to attach or pin to release. Below this
    // size the chaining costs more than the copy it saves (64 B Send over memif: the
    // frame's transmit 140 -> 65 ns).
    if payload.len() < TX_BY_REFERENCE_MIN {
        return copy(dev, m, f);
    }
    let Some(mut m) = m.or_else(|| dev.stash.take()) else {
        return copy(dev, None, f);
    };
    if header_len + payload.len() > usize::from(m.tailroom()) {
        return copy(dev, Some(m), f);
    }
    let Some(ext) = dev.stash.take() else {
        return copy(dev, Some(m), f);
    };
    let buf = m.append(header_len as u16).expect("tailroom checked");
    let r = f(buf);
    let chained = match dev.zc.as_mut().and_then(|z| z.rings.get_mut(&base)) {
        Some((_, pins)) => pins.chain(&mut m, ext, payload, at - base),
        None => Err(Some(ext)),
    };
    match chained {
        Ok(()) => {
            dev.stats.tx_zero_copy += payload.len() as u64;
            dev.stats.tx_zero_copy_segments += 1;
        }
        Err(_) => {
            // No pin free: copy behind the headers (the room was checked above).
            m.append(payload.len() as u16)
                .expect("tailroom checked")
                .copy_from_slice(payload);
        }
    }
    dev.stats.tx_tcp_payload += payload.len() as u64;
    dev.stats.tx_tcp_segments += 1;
    dev.send(m);
    r
}

impl DpdkDevice {
    /// Queue a built frame (offload marks, capture copy, faults), flushing a full batch.
    fn send(&mut self, mut m: Mbuf) {
        if let Some((l3_len, ip, tcp)) = tx_offload_for(m.data(), self.offload) {
            if m.set_tx_cksum_offload(14, l3_len, ip, tcp) {
                self.stats.tx_cksum_offload += 1;
            }
        }
        if let Some(mi) = self.mirror.as_mut() {
            mi.copy_mbuf(&m);
        }
        if let Some(f) = self.faults.as_deref_mut() {
            let pool = self.pool;
            if m.nb_segs() > 1 && f.mutates() {
                // Corruption works on whole frames, and must never reach the transmit ring
                // the payload points into: a copy of the frame goes through the faults.
                match m.deep_copy(pool) {
                    Some(c) => m = c,
                    None => {
                        self.stats.tx_no_mbuf += 1;
                        return;
                    }
                }
            }
            f.apply(false, m, &mut self.tx, |m| copy_mbuf(pool, m));
        } else {
            self.tx.push(m);
        }
        if self.tx.len() >= self.batch {
            self.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpdk::ipv4_tcp_phdr;
    use smoltcp::wire::Ipv4Address;

    const ALL: CksumOffload = CksumOffload {
        tx_ipv4: true,
        tx_tcp: true,
        rx_ipv4: true,
        rx_tcp: true,
    };

    /// RFC 1071 one's-complement sum of `b` (big-endian words), not complemented.
    fn sum(b: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in b.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// An Ethernet + IPv4 (valid header checksum) + TCP frame with `payload`, TCP checksum 0
    /// (what smoltcp emits when TCP checksums are offloaded).
    fn tcp_frame(payload: &[u8], frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload.len()];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = (20 + 20 + payload.len()) as u16;
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6..8].copy_from_slice(&frag.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 95, 0, 2]);
        ip[16..20].copy_from_slice(&[10, 95, 0, 1]);
        Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let tcp = &mut f[34..54];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&18515u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x18; // PSH|ACK
        tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
        f[54..].copy_from_slice(payload);
        f
    }

    #[test]
    fn plan_follows_setting_and_capabilities() {
        use crate::dpdk::offload::*;
        // net_tap (DPDK 22.11): IPv4/UDP/TCP checksums both ways.
        let (tx, rx) = (
            TX_IPV4_CKSUM | TX_UDP_CKSUM | TX_TCP_CKSUM | TX_MULTI_SEGS,
            RX_IPV4_CKSUM | RX_UDP_CKSUM | RX_TCP_CKSUM,
        );
        assert_eq!(
            plan("auto", "net_tap", tx, rx),
            Ok((ChecksumMode::Software, ALL))
        );
        assert_eq!(plan("offload", "net_tap", tx, rx).unwrap().1, ALL);
        let (m, o) = plan("auto", "net_tap", tx, rx).unwrap();
        assert_eq!(
            (m, o.tx_bits(), o.rx_bits()),
            (ChecksumMode::Software, 0xa, 0xa)
        );
        // net_ring/net_memif: MULTI_SEGS only: auto means software.
        let none = CksumOffload::default();
        assert_eq!(
            plan("auto", "net_ring", TX_MULTI_SEGS, 0),
            Ok((ChecksumMode::Software, none))
        );
        let e = plan("offload", "net_memif", TX_MULTI_SEGS, 0).unwrap_err();
        assert!(
            e.contains("net_memif") && e.contains("tx none rx none"),
            "{e}"
        );
        // A PMD offering tx only: auto takes what there is; offload refuses.
        let (_, o) = plan("auto", "x", TX_IPV4_CKSUM | TX_TCP_CKSUM, 0).unwrap();
        assert!(o.tx_ipv4 && o.tx_tcp && !o.rx_ipv4 && !o.rx_tcp);
        assert!(plan("offload", "x", TX_IPV4_CKSUM | TX_TCP_CKSUM, 0).is_err());
        // The explicit software settings never offload.
        for (s, m) in [
            ("software", ChecksumMode::Software),
            ("tx-only", ChecksumMode::TxOnly),
            ("trusted-link", ChecksumMode::TrustedLink),
        ] {
            assert_eq!(plan(s, "net_tap", tx, rx), Ok((m, none)));
        }
        assert!(plan("hw", "net_tap", tx, rx).is_err());
        // The config's default is auto, and every setting plan knows parses.
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        let c = crate::config::DataplaneConfig::parse(base).unwrap();
        assert_eq!(c.ports[0].checksum, "auto");
        for s in ["auto", "offload", "software", "tx-only", "trusted-link"] {
            let c = crate::config::DataplaneConfig::parse(&format!("{base}checksum='{s}'\n"));
            assert_eq!(c.unwrap().ports[0].checksum, s);
        }
        // tx_zero_copy: auto by default; on and off; nothing else.
        assert_eq!(c.ports[0].tx_zero_copy, "auto");
        for s in ["auto", "on", "off"] {
            let c = crate::config::DataplaneConfig::parse(&format!("{base}tx_zero_copy='{s}'\n"));
            assert_eq!(c.unwrap().ports[0].tx_zero_copy, s);
        }
        assert!(
            crate::config::DataplaneConfig::parse(&format!("{base}tx_zero_copy='yes'\n")).is_err()
        );
    }

    #[test]
    fn tx_offload_marks_ipv4_and_whole_tcp_only() {
        let f = tcp_frame(b"hello", 0);
        assert_eq!(tx_offload_for(&f, ALL), Some((20, true, true)));
        let tcp_only = CksumOffload {
            tx_tcp: true,
            ..Default::default()
        };
        assert_eq!(tx_offload_for(&f, tcp_only), Some((20, false, true)));
        assert_eq!(tx_offload_for(&f, CksumOffload::default()), None);
        // A fragment (MF set) has no TCP header to fill: the IPv4 header only.
        let frag = tcp_frame(b"hello", 0x2000);
        assert_eq!(tx_offload_for(&frag, ALL), Some((20, true, false)));
        assert_eq!(tx_offload_for(&frag, tcp_only), None);
        // ICMP: the IPv4 header checksum only.
        let mut icmp = tcp_frame(b"", 0);
        icmp[14 + 9] = 1;
        assert_eq!(tx_offload_for(&icmp, ALL), Some((20, true, false)));
        // ARP and anything short or odd: nothing, and no panic.
        let mut arp = tcp_frame(b"", 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(tx_offload_for(&arp, ALL), None);
        for n in 0..f.len() {
            let _ = tx_offload_for(&f[..n], ALL);
        }
        let mut bad_ihl = f.clone();
        bad_ihl[14] = 0x4f; // 60-byte header in a 59-byte packet
        bad_ihl.truncate(14 + 59);
        assert_eq!(tx_offload_for(&bad_ihl, ALL), None);
    }

    #[test]
    fn rx_verdicts_accept_drop_or_verify_in_software() {
        use CksumVerdict::{Bad, Good, None as Nn, Unknown};
        // A frame with both checksums right (TCP filled the way smoltcp does in software).
        let mut f = tcp_frame(b"some payload", 0);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
            let (s, d) = (
                IpAddress::Ipv4(ip.src_addr()),
                IpAddress::Ipv4(ip.dst_addr()),
            );
            TcpPacket::new_unchecked(ip.payload_mut()).fill_checksum(&s, &d);
        }
        let sw = RxCksum::Accept { software: true };
        let hw = RxCksum::Accept { software: false };
        assert_eq!(rx_verdict(&f, ALL, Good, Good), hw);
        assert_eq!(rx_verdict(&f, ALL, Nn, Nn), hw);
        assert_eq!(rx_verdict(&f, ALL, Good, Unknown), sw);
        assert_eq!(rx_verdict(&f, ALL, Unknown, Unknown), sw);
        assert_eq!(
            rx_verdict(&f, ALL, Bad, Good),
            RxCksum::Drop("IPv4 header (PMD)")
        );
        assert_eq!(rx_verdict(&f, ALL, Good, Bad), RxCksum::Drop("TCP (PMD)"));
        // Nothing offloaded on rx: the verdicts are not looked at (smoltcp verifies).
        let tx_only = CksumOffload {
            tx_ipv4: true,
            tx_tcp: true,
            ..Default::default()
        };
        assert_eq!(rx_verdict(&f, tx_only, Bad, Bad), RxCksum::Unchecked);
        // Unknown verdicts on corrupted frames: the software check catches them.
        let mut bad_tcp = f.clone();
        bad_tcp[60] ^= 0x40;
        assert_eq!(
            rx_verdict(&bad_tcp, ALL, Good, Unknown),
            RxCksum::Drop("TCP")
        );
        assert_eq!(rx_verdict(&bad_tcp, ALL, Good, Good), hw); // the PMD's word is taken
        let mut bad_ip = f.clone();
        bad_ip[14 + 8] ^= 1; // TTL
        assert_eq!(
            rx_verdict(&bad_ip, ALL, Unknown, Good),
            RxCksum::Drop("IPv4 header")
        );
        // Only the TCP check offloaded: the IPv4 verdict is smoltcp's business.
        let tcp_rx = CksumOffload {
            rx_tcp: true,
            ..Default::default()
        };
        assert_eq!(rx_verdict(&bad_ip, tcp_rx, Bad, Good), hw);
        // ARP, truncated and malformed frames: left to smoltcp, no panic.
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(rx_verdict(&arp, ALL, Bad, Bad), RxCksum::Unchecked);
        for n in 0..f.len() {
            let _ = rx_verdict(&f[..n], ALL, Unknown, Unknown);
        }
        assert_eq!(rx_verdict(&f[..30], ALL, Bad, Bad), RxCksum::Unchecked);
        // A fragment carries no whole TCP segment: only its IPv4 header is checked.
        let frag = tcp_frame(b"x", 0x2000);
        assert_eq!(rx_verdict(&frag, ALL, Good, Bad), hw);
    }

    /// The first segment of a frame sent by reference is exactly its headers; anything else
    /// (payload in the first segment, ARP, truncated or odd headers) is not, and nothing panics.
    #[test]
    fn headers_only_recognises_a_split_frames_first_segment() {
        let h = tcp_frame(b"", 0);
        assert_eq!(h.len(), 54);
        assert!(headers_only(&h));
        assert!(!headers_only(&tcp_frame(b"x", 0)));
        let mut arp = h.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!headers_only(&arp));
        let mut udp = h.clone();
        udp[14 + 9] = 17;
        assert!(!headers_only(&udp));
        // TCP options (data offset 8 words) make the headers 12 octets longer.
        let mut opts = h.clone();
        opts[14 + 20 + 12] = 8 << 4;
        assert!(!headers_only(&opts));
        opts.extend_from_slice(&[1u8; 12]);
        assert!(headers_only(&opts));
        for n in 0..h.len() {
            assert!(!headers_only(&h[..n]));
        }
    }

    /// smoltcp's split emit (headers only, checksum over the payload where it lies) writes the
    /// same headers, checksum included, as the copying emit.
    #[test]
    fn split_emit_gives_the_copying_emits_headers_and_checksum() {
        use smoltcp::phy::ChecksumCapabilities;
        use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber};
        let payload: Vec<u8> = (0..1461u32).map(|i| (i * 7 + 3) as u8).collect();
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 18515,
            control: TcpControl::Psh,
            seq_number: TcpSeqNumber(0x0102_0304),
            ack_number: Some(TcpSeqNumber(77)),
            window_len: 4096,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None, None, None],
            timestamp: None,
            payload: &payload,
        };
        let (s, d) = (IpAddress::v4(10, 95, 0, 2), IpAddress::v4(10, 95, 0, 1));
        let caps = ChecksumCapabilities::default();
        let mut whole = vec![0u8; repr.header_len() + payload.len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut whole[..]), &s, &d, &caps);
        let mut header = vec![0u8; repr.header_len()];
        repr.emit_header_split(
            &mut TcpPacket::new_unchecked(&mut header[..]),
            &s,
            &d,
            &caps,
        );
        assert_eq!(header[..], whole[..repr.header_len()]);
        assert!(TcpPacket::new_checked(&whole[..])
            .unwrap()
            .verify_checksum(&s, &d));
        // Without software checksums both leave the field zero.
        let none = ChecksumCapabilities::ignored();
        repr.emit_header_split(
            &mut TcpPacket::new_unchecked(&mut header[..]),
            &s,
            &d,
            &none,
        );
        assert_eq!(&header[16..18], &[0, 0]);
    }

    #[test]
    fn phdr_then_nic_completion_gives_a_valid_tcp_checksum() {
        let payload = b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr";
        let mut f = tcp_frame(payload, 0);
        let tcp_len = (20 + payload.len()) as u16;
        assert!(ipv4_tcp_phdr(&mut f[14..], 20));
        // DPDK's phdr: the one's-complement sum of source, destination, protocol and TCP
        // length, stored in network order, not complemented (rte_mbuf_core.h).
        let mut ph = Vec::new();
        ph.extend_from_slice(&[10, 95, 0, 2, 10, 95, 0, 1, 0, 6]);
        ph.extend_from_slice(&tcp_len.to_be_bytes());
        assert_eq!(u16::from_be_bytes([f[50], f[51]]), sum(&ph));
        // What the PMD does: sum the TCP segment starting from that field, store the complement.
        let c = !sum(&f[34..]);
        f[50..52].copy_from_slice(&c.to_be_bytes());
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        let (s, d) = (
            IpAddress::Ipv4(Ipv4Address::new(10, 95, 0, 2)),
            IpAddress::Ipv4(Ipv4Address::new(10, 95, 0, 1)),
        );
        assert!(TcpPacket::new_checked(ip.payload())
            .unwrap()
            .verify_checksum(&s, &d));
        // And the check can fail: one flipped payload bit.
        f[60] ^= 1;
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(!TcpPacket::new_checked(ip.payload())
            .unwrap()
            .verify_checksum(&s, &d));
        // Too short for a TCP header: refused, nothing written.
        let mut short = [0u8; 39];
        assert!(!ipv4_tcp_phdr(&mut short, 20));
        assert!(!ipv4_tcp_phdr(&mut f[14..], 19));
    }
}
