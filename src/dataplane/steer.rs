//! Flow steering between the workers of one port: which worker owns a TCP connection, and
//! handing a frame that arrived on another worker's queue to its owner.
//!
//! Each worker runs its own smoltcp interface with its own sockets, so every segment of a
//! connection must reach the worker that holds its socket. A multi-queue NIC does not know
//! that: it spreads received frames over its queues by its own hash (RSS), and
//! net_af_packet with `qpairs > 1` by the kernel's flow hash (a `PACKET_FANOUT_HASH` group).
//! Before this module a frame landing on the wrong queue met a worker with no socket for it,
//! whose smoltcp answered with a RST: a connection opened by one worker was reset by another.
//!
//! The owner of a connection is a function of its 4-tuple alone (no shared table): the
//! Toeplitz hash (the RSS hash of Microsoft's specification, which NICs compute) of the
//! IPv4 source and destination addresses and TCP ports, under a key that repeats one 16-bit
//! pattern, which makes the hash the same for both directions of a connection (Woo and
//! Park's symmetric RSS key, `6d5a`). The hash indexes a redirection table of `reta` entries
//! filled round robin with the port's queues, as NICs fill it.
//!
//! - A worker that opens a connection picks a local port its own queue owns
//!   ([`Steer::owns`]), so the connection's frames belong to the worker that holds its socket.
//! - A received IPv4/TCP frame whose owner is another worker goes to that worker's inbox
//!   (a bounded lock-free queue; full: the frame is dropped and counted, as a NIC drops at a
//!   full ring, and TCP retransmits); a SYN goes to the owner too, whose listener takes it.
//! - ARP frames go to every worker (a copy each): an ARP reply to one worker's request may
//!   land on any queue, and each worker keeps its own neighbour cache.
//! - Anything else stays where it arrived.
//!
//! Two dpwarp ends on queue-paired vdevs (net_ring pairs, net_memif: queue *i* of one side
//! reaches queue *i* of the other) compute the same owner from either side, so no frame is
//! handed over there. On a NIC whose RSS takes the symmetric key and a round-robin table
//! (`dpw_port_setup` asks for both), the NIC's queue is the owner and no frame is handed over
//! either; on one that does not (af_packet's kernel hash), about `(n - 1) / n` of the frames
//! are. The port's `rx_steered_*` counters say which.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::dpdk::Mbuf;

/// The symmetric Toeplitz key: `6d5a` repeated (40 octets, the length most NICs take; a
/// longer key repeats the same pattern). With a key of period 16 bits, swapping the source
/// and destination addresses, and the ports, leaves the hash unchanged.
pub const SYMMETRIC_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Redirection table size assumed when the port reports none (vdevs): any size gives the
/// same owner on both ends of a queue-paired link, as long as both use it.
pub const DEFAULT_RETA: u32 = 512;

/// The Toeplitz hash of `input` under `key` (Microsoft RSS, "Verifying the RSS Hash
/// Calculation"): for every set bit of the input, XOR in the 32 key bits starting at that
/// bit's position. `key` must be at least `input.len() + 4` octets; missing key bits count
/// as zero.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |k| u32::from((k >> (7 - i % 8)) & 1))
    };
    let mut window = (0..32).fold(0u32, |w, i| (w << 1) | bit(i));
    let mut hash = 0u32;
    for (n, b) in input.iter().enumerate() {
        for j in 0..8 {
            if b & (0x80 >> j) != 0 {
                hash ^= window;
            }
            window = (window << 1) | bit(32 + n * 8 + j);
        }
    }
    hash
}

/// Where a received frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// The worker of this queue index on the port.
    Worker(usize),
    /// Every worker of the port (ARP).
    Everyone,
    /// Whichever worker received it (not IPv4/TCP, a fragment, or too short to tell).
    Here,
}

/// The owner function of one port: `queues` workers, a redirection table of `reta`
/// entries, the symmetric key.
#[derive(Debug, Clone)]
pub struct Steer {
    /// The redirection table: entry i is queue i mod the port's queues, as a NIC's filled round
    /// robin.
    reta: Vec<u16>,
    /// The hash of a 16-bit fold of the tuple, by its high and its low octet.
    tables: [[u32; 256]; 2],
}

impl Steer {
    /// The owner function for a port of `queues` queues and a redirection table of `reta`
    /// entries (0: [`DEFAULT_RETA`]).
    pub fn new(queues: usize, reta: u32) -> Steer {
        let mut tables = [[0u32; 256]; 2];
        for (pos, t) in tables.iter_mut().enumerate() {
            for (b, e) in t.iter_mut().enumerate() {
                let mut input = [0u8; 2];
                input[pos] = b as u8;
                *e = toeplitz(&SYMMETRIC_KEY, &input);
            }
        }
        let queues = queues.clamp(1, usize::from(u16::MAX));
        let entries = if reta == 0 { DEFAULT_RETA } else { reta };
        Steer {
            reta: (0..entries as usize).map(|i| (i % queues) as u16).collect(),
            tables,
        }
    }

    /// The Toeplitz hash (symmetric key) of an IPv4/TCP 4-tuple in the order RSS reads it
    /// from a frame: source address, destination address, source port, destination port.
    ///
    /// Toeplitz XORs one 32-bit key window for each set input bit, the window starting at
    /// that bit; with a key of period 16 bits the window depends only on the bit's position
    /// modulo 16. So the hash of the 96-bit tuple is the hash of its six 16-bit words XORed
    /// together (which is also why swapping source and destination changes nothing): one
    /// lookup for each octet of that fold. The unit tests check it against the bitwise
    /// definition.
    pub fn hash(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let a = u32::from_be_bytes(src) ^ u32::from_be_bytes(dst);
        let fold = (a >> 16) as u16 ^ a as u16 ^ sport ^ dport;
        let [hi, lo] = fold.to_be_bytes();
        self.tables[0][usize::from(hi)] ^ self.tables[1][usize::from(lo)]
    }

    /// The queue that owns a connection: the redirection table's entry for the hash, the
    /// table filled round robin.
    pub fn owner(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> usize {
        let h = self.hash(src, dst, sport, dport) as usize;
        usize::from(self.reta[h % self.reta.len()])
    }

    /// Whether queue `me` owns the connection from `local` to `remote` (either order gives
    /// the same answer).
    pub fn owns(&self, me: usize, local: ([u8; 4], u16), remote: ([u8; 4], u16)) -> bool {
        self.owner(remote.0, local.0, remote.1, local.1) == me
    }

    /// Where a received Ethernet frame goes. Reads only its headers; any octets at all
    /// (a peer's frame is hostile) give an answer.
    pub fn dest(&self, frame: &[u8]) -> Dest {
        match frame.get(12..14) {
            Some([0x08, 0x06]) => Dest::Everyone,
            Some([0x08, 0x00]) => {
                let ip = &frame[14..];
                let (Some(&vihl), Some(&proto), Some(frag)) = (ip.first(), ip.get(9), ip.get(6..8))
                else {
                    return Dest::Here;
                };
                let ihl = usize::from(vihl & 0x0f) * 4;
                // More fragments, or an offset: only a first fragment holds the ports, and
                // its others would not follow it.
                if vihl >> 4 != 4 || proto != 6 || ihl < 20 || frag[0] & 0x3f != 0 || frag[1] != 0 {
                    return Dest::Here;
                }
                match (ip.get(12..20), ip.get(ihl..ihl + 4)) {
                    (Some(a), Some(p)) => Dest::Worker(self.owner(
                        [a[0], a[1], a[2], a[3]],
                        [a[4], a[5], a[6], a[7]],
                        u16::from_be_bytes([p[0], p[1]]),
                        u16::from_be_bytes([p[2], p[3]]),
                    )),
                    _ => Dest::Here,
                }
            }
            _ => Dest::Here,
        }
    }
}

/// One worker's end of a port's steering: the owner function, its own queue index and every
/// worker's inbox.
pub struct Steering {
    /// The owner function (shared by the port's workers).
    pub steer: Arc<Steer>,
    /// This worker's queue index on the port.
    pub me: usize,
    /// Frames handed to each worker of the port by the others, by queue index.
    pub inboxes: Arc<[ArrayQueue<Mbuf>]>,
}

impl Steering {
    /// The steering ends of a port's `queues` workers, inboxes of `depth` frames each.
    pub fn for_port(queues: usize, reta: u32, depth: usize) -> Vec<Steering> {
        let steer = Arc::new(Steer::new(queues, reta));
        let inboxes: Arc<[ArrayQueue<Mbuf>]> = (0..queues)
            .map(|_| ArrayQueue::new(depth.max(1)))
            .collect::<Vec<_>>()
            .into();
        (0..queues)
            .map(|me| Steering {
                steer: steer.clone(),
                me,
                inboxes: inboxes.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's RSS verification key and its IPv4 vectors ("Verifying the RSS Hash
    /// Calculation"; also the 82599 datasheet §7.1.2.8.3 and DPDK's test_thash): source,
    /// destination, source port, destination port, the hash of the addresses alone and of
    /// the 4-tuple.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];
    type Vector = ([u8; 4], [u8; 4], u16, u16, u32, u32);
    const MS_V4: [Vector; 5] = [
        (
            [66, 9, 149, 187],
            [161, 142, 100, 80],
            2794,
            1766,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [199, 92, 111, 2],
            [65, 69, 140, 83],
            14230,
            4739,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [24, 19, 198, 95],
            [12, 22, 207, 184],
            12898,
            38024,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [38, 27, 205, 30],
            [209, 142, 163, 6],
            48228,
            2217,
            0x82989176,
            0xafc7327f,
        ),
        (
            [153, 39, 163, 191],
            [202, 188, 127, 2],
            44251,
            1303,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn toeplitz_gives_microsofts_rss_verification_hashes() {
        for (s, d, sp, dp, h2, h4) in MS_V4 {
            let mut t = Vec::new();
            t.extend_from_slice(&s);
            t.extend_from_slice(&d);
            assert_eq!(toeplitz(&MS_KEY, &t), h2, "{s:?} -> {d:?}");
            t.extend_from_slice(&sp.to_be_bytes());
            t.extend_from_slice(&dp.to_be_bytes());
            assert_eq!(toeplitz(&MS_KEY, &t), h4, "{s:?}:{sp} -> {d:?}:{dp}");
        }
    }

    #[test]
    fn folded_hash_is_toeplitz_under_the_symmetric_key_and_symmetric() {
        let st = Steer::new(4, 0);
        for (s, d, sp, dp, _, _) in MS_V4 {
            let mut t = Vec::new();
            t.extend_from_slice(&s);
            t.extend_from_slice(&d);
            t.extend_from_slice(&sp.to_be_bytes());
            t.extend_from_slice(&dp.to_be_bytes());
            assert_eq!(st.hash(s, d, sp, dp), toeplitz(&SYMMETRIC_KEY, &t));
            assert_eq!(st.hash(s, d, sp, dp), st.hash(d, s, dp, sp));
            assert_eq!(st.owner(s, d, sp, dp), st.owner(d, s, dp, sp));
        }
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let (s, d) = (x.to_be_bytes(), x.rotate_left(7).to_be_bytes());
            let (sp, dp) = (x as u16, (x >> 16) as u16);
            let mut t = Vec::new();
            for part in [&s[..], &d[..], &sp.to_be_bytes(), &dp.to_be_bytes()] {
                t.extend_from_slice(part);
            }
            assert_eq!(st.hash(s, d, sp, dp), toeplitz(&SYMMETRIC_KEY, &t));
            assert_eq!(st.hash(s, d, sp, dp), st.hash(d, s, dp, sp));
        }
    }

    #[test]
    fn local_ports_spread_over_every_queue() {
        for queues in [2usize, 3, 4, 8] {
            let st = Steer::new(queues, 0);
            let mut seen = vec![0usize; queues];
            for port in 49152..49152 + 4096u16 {
                seen[st.owner([10, 0, 0, 1], [10, 0, 0, 2], 18515, port)] += 1;
            }
            for (q, n) in seen.iter().enumerate() {
                // Round robin over the table and a linear hash: each queue gets a fair share.
                assert!(
                    *n > 4096 / queues / 2,
                    "{queues} queues: queue {q} owns {n} ports"
                );
            }
        }
    }

    fn frame(ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    fn ipv4_tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, ihl: u8) -> Vec<u8> {
        let mut ip = vec![0u8; usize::from(ihl) * 4];
        ip[0] = 0x40 | ihl;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        ip.extend_from_slice(&sport.to_be_bytes());
        ip.extend_from_slice(&dport.to_be_bytes());
        ip.extend_from_slice(&[0u8; 16]);
        ip
    }

    #[test]
    fn frames_go_to_the_owner_of_their_tuple_everyone_or_here() {
        let st = Steer::new(4, 128);
        let (a, b) = ([10, 1, 0, 1], [10, 1, 0, 2]);
        for port in 40000..40100u16 {
            let want = Dest::Worker(st.owner(a, b, port, 80));
            assert_eq!(st.dest(&frame(0x0800, &ipv4_tcp(a, b, port, 80, 5))), want);
            // IPv4 options move the ports; the owner follows them.
            assert_eq!(st.dest(&frame(0x0800, &ipv4_tcp(a, b, port, 80, 7))), want);
            // The reply direction has the same owner.
            assert_eq!(st.dest(&frame(0x0800, &ipv4_tcp(b, a, 80, port, 5))), want);
        }
        assert_eq!(st.dest(&frame(0x0806, &[0u8; 28])), Dest::Everyone);
        assert_eq!(st.dest(&frame(0x86dd, &[0u8; 60])), Dest::Here);
        let mut udp = ipv4_tcp(a, b, 1, 2, 5);
        udp[9] = 17;
        assert_eq!(st.dest(&frame(0x0800, &udp)), Dest::Here);
        let mut later_fragment = ipv4_tcp(a, b, 1, 2, 5);
        later_fragment[7] = 1;
        assert_eq!(st.dest(&frame(0x0800, &later_fragment)), Dest::Here);
        let mut first_fragment = ipv4_tcp(a, b, 1, 2, 5);
        first_fragment[6] = 0x20;
        assert_eq!(st.dest(&frame(0x0800, &first_fragment)), Dest::Here);
        // Hostile lengths: every prefix of a frame, and header lengths past it.
        let full = frame(0x0800, &ipv4_tcp(a, b, 1, 2, 5));
        for n in 0..full.len() {
            let d = st.dest(&full[..n]);
            assert!(n >= 14 + 24 || d == Dest::Here, "{n} octets: {d:?}");
        }
        for ihl in 0..16u8 {
            let mut f = frame(0x0800, &ipv4_tcp(a, b, 1, 2, 5));
            f[14] = 0x40 | ihl;
            let _ = st.dest(&f);
        }
    }
}
