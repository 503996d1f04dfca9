//! Packet fault injection under smoltcp: seeded drop, duplicate, reorder and corrupt faults on
//! the Ethernet frames of one port queue, received and/or sent (config `[port.faults]`,
//! [`crate::config::FaultConfig`]; [`super::Endpoint::set_faults`] at run time). For soak
//! tests: a lossy, corrupting link between two dpwarp stacks in one process (net_ring).
//!
//! Off by default; a device without faults pays one branch per received burst, received frame
//! and sent frame. A port with faults computes and verifies IPv4/TCP checksums in software
//! (RFC 1071, RFC 9293 §3.1) and the device verifies every received frame itself before
//! smoltcp sees it ([`check_frame`]), so every frame the checks refuse is counted; a corruption
//! the checksums cannot see (`corrupt_neutral`, or octets that cancel out) is left to MPA's
//! CRC32c (RFC 5044 §4.4), which terminates the connection (RFC 5044 §8).

use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, TcpPacket};

use crate::config::{FaultConfig, FaultDirection};

/// Counters of a port queue's fault injector (all zero without faults).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that went through the rx faults.
    pub rx_frames: u64,
    /// Frames that went through the tx faults.
    pub tx_frames: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Frames passed twice.
    pub duplicated: u64,
    /// Frames held back and passed after the next one.
    pub reordered: u64,
    /// Frames with `corrupt_bytes` octets flipped.
    pub corrupted: u64,
    /// Frames with a TCP payload octet flipped and the TCP checksum fixed up (left to the MPA
    /// CRC).
    pub corrupted_neutral: u64,
    /// Corrupted frames the receiving device's checks refuse (this port's for corruption on
    /// rx, the peer's on tx) at the Ethernet layer (destination address not the receiver's,
    /// unknown ethertype, malformed ARP), as smoltcp would.
    pub corrupt_caught_l2: u64,
    /// Corrupted frames refused for a malformed IPv4 header or a bad header checksum.
    pub corrupt_caught_ipv4: u64,
    /// Corrupted frames refused for a malformed TCP header or a bad TCP checksum.
    pub corrupt_caught_tcp: u64,
    /// Corrupted frames that pass every check because only octets no checksum covers
    /// and nothing reads were flipped (the Ethernet source address, a destination address
    /// that stayed ours or became group, trailing octets beyond the IPv4 total length);
    /// smoltcp learns neighbours from ARP only.
    pub corrupt_harmless: u64,
    /// Corrupted frames that pass every check with an IPv4 or TCP octet changed
    /// (checksum-neutral corruption): only the MPA CRC can catch these.
    pub corrupt_undetected: u64,
    /// Received frames (corrupted here or by the peer) refused at the Ethernet layer.
    pub rx_rejected_l2: u64,
    /// Received frames refused for their IPv4 header.
    pub rx_rejected_ipv4: u64,
    /// Received frames refused for their TCP header or checksum.
    pub rx_rejected_tcp: u64,
}

impl FaultStats {
    /// Received frames the checks refused.
    pub fn rx_rejected(&self) -> u64 {
        self.rx_rejected_l2 + self.rx_rejected_ipv4 + self.rx_rejected_tcp
    }

    /// Corrupted frames the checks refuse.
    pub fn corrupt_caught(&self) -> u64 {
        self.corrupt_caught_l2 + self.corrupt_caught_ipv4 + self.corrupt_caught_tcp
    }

    /// Sum of two counter sets (several queues or ports).
    pub fn add(&mut self, o: &FaultStats) {
        self.rx_frames += o.rx_frames;
        self.tx_frames += o.tx_frames;
        self.dropped += o.dropped;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.corrupted += o.corrupted;
        self.corrupted_neutral += o.corrupted_neutral;
        self.corrupt_caught_l2 += o.corrupt_caught_l2;
        self.corrupt_caught_ipv4 += o.corrupt_caught_ipv4;
        self.corrupt_caught_tcp += o.corrupt_caught_tcp;
        self.corrupt_harmless += o.corrupt_harmless;
        self.corrupt_undetected += o.corrupt_undetected;
        self.rx_rejected_l2 += o.rx_rejected_l2;
        self.rx_rejected_ipv4 += o.rx_rejected_ipv4;
        self.rx_rejected_tcp += o.rx_rejected_tcp;
    }
}

/// What the device's checks make of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// smoltcp may have it: a well-formed ARP frame, or IPv4 (and TCP) with good checksums,
    /// or a frame for another protocol over IPv4 with a good header checksum.
    Ok,
    /// Not for us at the Ethernet layer, or an ethertype/ARP frame smoltcp would drop.
    L2,
    /// Malformed IPv4 header or bad header checksum.
    Ipv4,
    /// Malformed TCP header or bad TCP checksum.
    Tcp,
}

/// Check a received Ethernet frame the way smoltcp would with software checksums: the
/// destination address (`mac`, broadcast or group), the ethertype, the IPv4 header and its
/// checksum, the TCP header and its checksum (over the pseudo-header, RFC 9293 §3.1).
pub fn check_frame(frame: &[u8], mac: &[u8; 6]) -> Check {
    if frame.len() < 14 {
        return Check::L2;
    }
    let dst = &frame[0..6];
    if dst != mac && dst[0] & 1 == 0 {
        return Check::L2;
    }
    match [frame[12], frame[13]] {
        // ARP for IPv4 over Ethernet (what smoltcp's parser accepts).
        [0x08, 0x06] => {
            return if frame.len() >= 42 && frame[14..20] == [0, 1, 8, 0, 6, 4] {
                Check::Ok
            } else {
                Check::L2
            }
        }
        [0x08, 0x00] => {}
        _ => return Check::L2,
    }
    let Ok(ip) = Ipv4Packet::new_checked(&frame[14..]) else {
        return Check::Ipv4;
    };
    if ip.version() != 4 || !ip.verify_checksum() {
        return Check::Ipv4;
    }
    if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
        return Check::Ok;
    }
    let (src, dst) = (
        IpAddress::Ipv4(ip.src_addr()),
        IpAddress::Ipv4(ip.dst_addr()),
    );
    match TcpPacket::new_checked(ip.payload()) {
        Ok(t) if t.verify_checksum(&src, &dst) => Check::Ok,
        _ => Check::Tcp,
    }
}

/// A frame the injector can look into.
pub trait Frame: Sized {
    /// Its octets.
    fn bytes(&self) -> &[u8];
    /// Its octets, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Frame for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// SplitMix64: small, seeded, good enough to draw faults.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A frame held back by a reorder fault.
struct Held<F> {
    frame: F,
    /// Ticks (polls) it has waited.
    age: u8,
}

/// The fault injector of one device (port queue).
pub struct Faults<F> {
    cfg: FaultConfig,
    rng: Rng,
    mac: [u8; 6],
    rx_held: Option<Held<F>>,
    tx_held: Option<Held<F>>,
    /// Its counters.
    pub stats: FaultStats,
}

impl<F: Frame> Faults<F> {
    /// Whether frames may be corrupted (their octets changed).
    pub fn mutates(&self) -> bool {
        self.cfg.corrupt > 0.0 || self.cfg.corrupt_neutral > 0.0
    }

    /// An injector for a device whose own address is `mac`; `lane` (the queue) is added to
    /// the seed so that queues draw different faults.
    pub fn new(cfg: FaultConfig, mac: [u8; 6], lane: u64) -> Self {
        let rng = Rng(cfg
            .seed
            .wrapping_add(lane.wrapping_mul(0x2545_f491_4f6c_dd1d)));
        Faults {
            cfg,
            rng,
            mac,
            rx_held: None,
            tx_held: None,
            stats: FaultStats::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Whether faults apply to received (`rx`) or sent frames.
    pub fn applies(&self, rx: bool) -> bool {
        match self.cfg.direction {
            FaultDirection::Rx => rx,
            FaultDirection::Tx => !rx,
            FaultDirection::Both => true,
        }
    }

    /// Check a received frame before smoltcp sees it ([`check_frame`]); false: drop it
    /// (counted).
    pub fn admit(&mut self, frame: &[u8]) -> bool {
        match check_frame(frame, &self.mac) {
            Check::Ok => true,
            Check::L2 => {
                self.stats.rx_rejected_l2 += 1;
                false
            }
            Check::Ipv4 => {
                self.stats.rx_rejected_ipv4 += 1;
                false
            }
            Check::Tcp => {
                self.stats.rx_rejected_tcp += 1;
                false
            }
        }
    }

    /// Pass one frame through the faults of lane `rx` (received) or not (sent): what comes
    /// out is pushed to `out` in order. `copy` makes a duplicate (None: no room, no
    /// duplicate).
    pub fn apply(
        &mut self,
        rx: bool,
        mut f: F,
        out: &mut Vec<F>,
        copy: impl FnOnce(&F) -> Option<F>,
    ) {
        if !self.applies(rx) {
            out.push(f);
            return;
        }
        if rx {
            self.stats.rx_frames += 1;
        } else {
            self.stats.tx_frames += 1;
        }
        if self.rng.chance(self.cfg.drop)
            || (self.cfg.drop_fin > 0.0
                && carries_fin(f.bytes())
                && self.rng.chance(self.cfg.drop_fin))
        {
            self.stats.dropped += 1;
            return;
        }
        // The duplicate is taken before any corruption: one of the two copies is intact.
        let dup = if self.rng.chance(self.cfg.duplicate) {
            copy(&f)
        } else {
            None
        };
        if dup.is_some() {
            self.stats.duplicated += 1;
        }
        if self.rng.chance(self.cfg.corrupt) {
            self.corrupt(rx, f.bytes_mut());
        }
        if self.rng.chance(self.cfg.corrupt_neutral)
            && corrupt_neutral(&mut self.rng, f.bytes_mut())
        {
            self.stats.corrupted_neutral += 1;
        }
        let reorder = self.rng.chance(self.cfg.reorder);
        let held = if rx {
            &mut self.rx_held
        } else {
            &mut self.tx_held
        };
        if reorder && held.is_none() {
            self.stats.reordered += 1;
            *held = Some(Held { frame: f, age: 0 });
            if let Some(d) = dup {
                out.push(d);
            }
            return;
        }
        out.push(f);
        if let Some(d) = dup {
            out.push(d);
        }
        // The held frame goes after the next one.
        if let Some(h) = held.take() {
            out.push(h.frame);
        }
    }

    /// Once per poll of lane `rx`: a frame held since the previous tick goes out, so a
    /// reordered frame waits for at most one more poll when no other frame follows it.
    pub fn tick(&mut self, rx: bool, out: &mut Vec<F>) {
        let held = if rx {
            &mut self.rx_held
        } else {
            &mut self.tx_held
        };
        match held {
            Some(h) if h.age >= 1 => out.push(held.take().expect("held").frame),
            Some(h) => h.age += 1,
            None => {}
        }
    }

    /// Flip `corrupt_bytes` octets of an IPv4 frame at random positions (XOR with a nonzero
    /// value) and classify what the receiver's checks will make of it: this port's on rx, on
    /// tx the peer's (a fault port checks the same way), whose address is the frame's
    /// destination before the flips.
    fn corrupt(&mut self, rx: bool, b: &mut [u8]) {
        if b.len() < 14 || b[12..14] != [0x08, 0x00] {
            return;
        }
        self.stats.corrupted += 1;
        let mut to = self.mac;
        if !rx {
            to.copy_from_slice(&b[0..6]);
        }
        // Octets within the IPv4 packet (its total length), which a checksum covers.
        let ip_end = if b.len() >= 18 {
            (14 + usize::from(u16::from_be_bytes([b[16], b[17]]))).min(b.len())
        } else {
            b.len()
        };
        let mut covered = false;
        for _ in 0..self.cfg.corrupt_bytes {
            let i = self.rng.below(b.len());
            let x = (self.rng.below(255) + 1) as u8;
            covered |= (12..ip_end).contains(&i);
            b[i] ^= x;
        }
        match check_frame(b, &to) {
            Check::Ok if covered => self.stats.corrupt_undetected += 1,
            Check::Ok => self.stats.corrupt_harmless += 1,
            Check::L2 => self.stats.corrupt_caught_l2 += 1,
            Check::Ipv4 => self.stats.corrupt_caught_ipv4 += 1,
            Check::Tcp => self.stats.corrupt_caught_tcp += 1,
        }
    }

    /// The frames held back by reorder faults, each with true for the rx lane (when the
    /// injector is replaced).
    pub fn take_held(&mut self) -> impl Iterator<Item = (F, bool)> {
        let r = self.rx_held.take().map(|h| (h.frame, true));
        let t = self.tx_held.take().map(|h| (h.frame, false));
        r.into_iter().chain(t)
    }
}

/// Whether `frame` is an IPv4 TCP segment with FIN set.
fn carries_fin(frame: &[u8]) -> bool {
    use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return false;
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return false;
    };
    ip.next_header() == IpProtocol::Tcp
        && TcpPacket::new_checked(ip.payload()).is_ok_and(|t| t.fin())
}

/// Flip one TCP payload octet of an Ethernet/IPv4/TCP frame and recompute the TCP checksum so
/// that no checksum notices. False (nothing done) for anything without TCP payload.
fn corrupt_neutral(rng: &mut Rng, b: &mut [u8]) -> bool {
    if b.len() < 14 || b[12..14] != [0x08, 0x00] {
        return false;
    }
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut b[14..]) else {
        return false;
    };
    if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
        return false;
    }
    let (src, dst) = (
        IpAddress::Ipv4(ip.src_addr()),
        IpAddress::Ipv4(ip.dst_addr()),
    );
    let Ok(mut t) = TcpPacket::new_checked(ip.payload_mut()) else {
        return false;
    };
    let x = (rng.below(255) + 1) as u8;
    let p = t.payload_mut();
    if p.is_empty() {
        return false;
    }
    let i = rng.below(p.len());
    p[i] ^= x;
    t.fill_checksum(&src, &dst);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0x90, 0, 2];

    /// An Ethernet/IPv4/TCP frame to `MAC` with right checksums.
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload.len()];
        f[0..6].copy_from_slice(&MAC);
        f[6..12].copy_from_slice(&[2, 0, 0, 0x90, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = (40 + payload.len()) as u16;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 90, 0, 1]);
        f[30..34].copy_from_slice(&[10, 90, 0, 2]);
        f[34..36].copy_from_slice(&4791u16.to_be_bytes());
        f[36..38].copy_from_slice(&40000u16.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = 0x18;
        f[54..].copy_from_slice(payload);
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.fill_checksum();
        let (s, d) = (
            IpAddress::Ipv4(ip.src_addr()),
            IpAddress::Ipv4(ip.dst_addr()),
        );
        TcpPacket::new_unchecked(ip.payload_mut()).fill_checksum(&s, &d);
        f
    }

    fn cfg() -> FaultConfig {
        FaultConfig {
            seed: 1,
            ..FaultConfig::default()
        }
    }

    #[test]
    fn check_frame_accepts_good_and_refuses_each_kind_of_bad() {
        let f = frame(b"0123456789abcdef");
        assert_eq!(check_frame(&f, &MAC), Check::Ok);
        let mut other = f.clone();
        other[5] ^= 1; // another unicast address
        assert_eq!(check_frame(&other, &MAC), Check::L2);
        let mut group = f.clone();
        group[0] |= 1; // group address: smoltcp takes it
        assert_eq!(check_frame(&group, &MAC), Check::Ok);
        let mut et = f.clone();
        et[12] = 0x86;
        assert_eq!(check_frame(&et, &MAC), Check::L2);
        let mut arp = f.clone();
        arp[13] = 0x06; // an IPv4 packet read as ARP: smoltcp's parser refuses it
        assert_eq!(check_frame(&arp, &MAC), Check::L2);
        let mut ttl = f.clone();
        ttl[22] ^= 0x10;
        assert_eq!(check_frame(&ttl, &MAC), Check::Ipv4);
        let mut payload = f.clone();
        payload[60] ^= 0x01;
        assert_eq!(check_frame(&payload, &MAC), Check::Tcp);
        // Every truncation is refused or accepted without a panic.
        for n in 0..f.len() {
            assert_ne!(check_frame(&f[..n], &MAC), Check::Ok, "{n}");
        }
    }

    #[test]
    fn every_single_octet_flip_is_caught_or_harmless() {
        // RFC 1071: changing one octet changes one 16-bit word by a nonzero amount below
        // 0xffff, so the one's-complement sum changes: every flip inside the IPv4 packet is
        // caught; flips in the Ethernet addresses are caught by the address filter or are
        // harmless.
        let f = frame(&[0x5a; 64]);
        for i in 0..f.len() {
            for x in [0x01u8, 0x80, 0xff, 0x37] {
                let mut g = f.clone();
                g[i] ^= x;
                let c = check_frame(&g, &MAC);
                if i >= 12 {
                    assert_ne!(c, Check::Ok, "octet {i} ^ {x:#x} passed");
                }
            }
        }
        // Through the injector: corrupt = 1.0 on rx, every frame corrupted and classified.
        let mut inj: Faults<Vec<u8>> = Faults::new(
            FaultConfig {
                corrupt: 1.0,
                ..cfg()
            },
            MAC,
            0,
        );
        let mut out = Vec::new();
        for _ in 0..2000 {
            inj.apply(true, f.clone(), &mut out, |_| None);
        }
        let s = inj.stats;
        assert_eq!(s.corrupted, 2000);
        assert_eq!(s.corrupt_undetected, 0);
        assert_eq!(s.corrupt_caught() + s.corrupt_harmless, 2000);
        assert!(
            s.corrupt_caught_tcp > 1000 && s.corrupt_caught_ipv4 > 0,
            "{s:?}"
        );
        // admit() refuses exactly the caught ones.
        let admitted = out.iter().filter(|g| inj.admit(g)).count() as u64;
        assert_eq!(admitted, s.corrupt_harmless);
        assert_eq!(inj.stats.rx_rejected(), s.corrupt_caught());
    }

    #[test]
    fn tx_corruption_is_classified_as_the_peer_will_see_it() {
        // A port with another address sends frames to MAC: its tx corruption is judged
        // against MAC, and the peer's admit() refuses exactly the caught ones.
        let f = frame(&[0x3c; 200]);
        let mut tx: Faults<Vec<u8>> = Faults::new(
            FaultConfig {
                corrupt: 1.0,
                direction: FaultDirection::Tx,
                ..cfg()
            },
            [2, 0, 0, 0x90, 0, 1],
            0,
        );
        let mut peer: Faults<Vec<u8>> = Faults::new(cfg(), MAC, 0);
        let mut out = Vec::new();
        for _ in 0..1000 {
            tx.apply(false, f.clone(), &mut out, |_| None);
            tx.apply(true, f.clone(), &mut out, |_| None); // rx untouched
        }
        let s = tx.stats;
        assert_eq!((s.tx_frames, s.rx_frames, s.corrupted), (1000, 0, 1000));
        assert_eq!(s.corrupt_caught() + s.corrupt_harmless, 1000);
        let admitted = out.iter().filter(|g| peer.admit(g)).count() as u64;
        assert_eq!(admitted, 1000 + s.corrupt_harmless);
        assert_eq!(peer.stats.rx_rejected(), s.corrupt_caught());
    }

    #[test]
    fn neutral_corruption_passes_the_checksums_and_changes_the_payload() {
        let f = frame(&[0xa5; 100]);
        let mut inj: Faults<Vec<u8>> = Faults::new(
            FaultConfig {
                corrupt_neutral: 1.0,
                ..cfg()
            },
            MAC,
            0,
        );
        let mut out = Vec::new();
        inj.apply(true, f.clone(), &mut out, |_| None);
        assert_eq!(inj.stats.corrupted_neutral, 1);
        assert_eq!(check_frame(&out[0], &MAC), Check::Ok);
        assert_eq!(out[0][..50], f[..50]); // all but the TCP checksum and payload
        assert_ne!(out[0][54..], f[54..]);
        // No payload: nothing to corrupt.
        let ack = frame(b"");
        inj.apply(true, ack.clone(), &mut out, |_| None);
        assert_eq!(inj.stats.corrupted_neutral, 1);
        assert_eq!(out[1], ack);
    }

    #[test]
    fn drop_duplicate_reorder_keep_every_frame_accounted_for() {
        let c = FaultConfig {
            drop: 0.1,
            duplicate: 0.1,
            reorder: 0.1,
            direction: FaultDirection::Both,
            ..cfg()
        };
        let mut inj: Faults<Vec<u8>> = Faults::new(c.clone(), MAC, 0);
        let mut out = Vec::new();
        let n = 10_000u32;
        for i in 0..n {
            inj.apply(false, i.to_be_bytes().to_vec(), &mut out, |f| {
                Some(f.clone())
            });
            if i % 7 == 0 {
                inj.tick(false, &mut out);
            }
        }
        inj.tick(false, &mut out);
        inj.tick(false, &mut out);
        let s = inj.stats;
        assert_eq!(s.tx_frames, u64::from(n));
        assert_eq!(out.len() as u64, u64::from(n) - s.dropped + s.duplicated);
        for (k, v) in [
            (s.dropped, "drop"),
            (s.duplicated, "dup"),
            (s.reordered, "reorder"),
        ] {
            assert!((700..1300).contains(&k), "{v}: {k}");
        }
        // Every frame not dropped comes out (twice if duplicated), none invented; some out of
        // order.
        let ids: Vec<u32> = out
            .iter()
            .map(|f| u32::from_be_bytes(f[..4].try_into().unwrap()))
            .collect();
        let mut seen = vec![0u8; n as usize];
        for &i in &ids {
            seen[i as usize] += 1;
        }
        assert_eq!(seen.iter().filter(|&&x| x == 0).count() as u64, s.dropped);
        assert_eq!(
            seen.iter().filter(|&&x| x == 2).count() as u64,
            s.duplicated
        );
        assert!(ids.windows(2).any(|w| w[1] < w[0]));
        // Seeded: the same seed gives the same faults.
        let mut again: Faults<Vec<u8>> = Faults::new(c, MAC, 0);
        let mut out2 = Vec::new();
        for i in 0..n {
            again.apply(false, i.to_be_bytes().to_vec(), &mut out2, |f| {
                Some(f.clone())
            });
            if i % 7 == 0 {
                again.tick(false, &mut out2);
            }
        }
        again.tick(false, &mut out2);
        again.tick(false, &mut out2);
        assert_eq!(out, out2);
        // Direction rx only: sent frames pass untouched and uncounted.
        let mut rx_only: Faults<Vec<u8>> = Faults::new(FaultConfig { drop: 1.0, ..cfg() }, MAC, 0);
        let mut o = Vec::new();
        rx_only.apply(false, vec![1], &mut o, |_| None);
        rx_only.apply(true, vec![2], &mut o, |_| None);
        assert_eq!(o, vec![vec![1]]);
        assert_eq!((rx_only.stats.tx_frames, rx_only.stats.dropped), (0, 1));
    }

    #[test]
    fn a_held_frame_goes_after_the_next_or_on_the_second_tick() {
        let mut inj: Faults<Vec<u8>> = Faults::new(
            FaultConfig {
                reorder: 1.0,
                ..cfg()
            },
            MAC,
            0,
        );
        let mut out = Vec::new();
        inj.apply(true, vec![1], &mut out, |_| None); // held
        inj.apply(true, vec![2], &mut out, |_| None); // out, then 1
        assert_eq!(out, vec![vec![2], vec![1]]);
        inj.apply(true, vec![3], &mut out, |_| None); // held
        inj.tick(true, &mut out);
        assert_eq!(out.len(), 2);
        inj.tick(true, &mut out);
        assert_eq!(out[2], vec![3]);
        assert_eq!(inj.stats.reordered, 2);
        inj.apply(true, vec![4], &mut out, |_| None);
        assert_eq!(inj.take_held().count(), 1);
    }
}
