//! Offline capture analysis (std only, no DPDK needed; `dpwarp fpdu-align FILE`).
//!
//! RFC 5044 App. A check on a capture: what fraction of TCP data segments begin with an FPDU
//! header (the sender derives MULPDU from the EMSS so every FPDU fits one segment, and should
//! start segments on FPDU boundaries; packing several FPDUs into one segment is allowed).
//!
//! Reads a classic pcap (Ethernet, IPv4, TCP), reassembles each direction of each connection
//! in sequence order, skips the MPA Request/Reply (RFC 5044 §7.1) and walks the FPDUs by their
//! ULPDU_Length (§4.1: 2-byte length, payload, pad to 4, CRC if negotiated). Captures with
//! markers or gaps are reported as such. Input is untrusted: every read is bounds-checked.

use std::collections::HashMap;

/// Per-capture result.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// TCP segments with payload after MPA startup.
    pub data_segments: u64,
    /// Of those, segments whose first byte is the first byte of an FPDU.
    pub aligned: u64,
    /// Flows skipped (markers negotiated, sequence gaps, unparsable MPA frames).
    pub skipped_flows: u64,
    /// The longest frame in the capture, in octets (Ethernet header included).
    pub max_frame: u64,
}

impl Alignment {
    /// `aligned / data_segments`: the share of data segments that start on an FPDU boundary
    /// (0.0 when there were none).
    pub fn fraction(&self) -> f64 {
        if self.data_segments == 0 {
            0.0
        } else {
            self.aligned as f64 / self.data_segments as f64
        }
    }
}

type FlowKey = ([u8; 4], u16, [u8; 4], u16);

#[derive(Default)]
struct Flow {
    next_seq: Option<u32>,
    bytes: Vec<u8>,
    /// Stream offsets at which data segments began.
    starts: Vec<usize>,
    gap: bool,
}

fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?))
}
fn be32(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Parse an MPA Request/Reply at the start of `s`: (frame length, C bit, M bit).
fn mpa_frame(s: &[u8]) -> Option<(usize, bool, bool)> {
    let key = s.get(..16)?;
    if !key.starts_with(b"MPA ID Req Frame") && !key.starts_with(b"MPA ID Rep Frame") {
        return None;
    }
    let flags = *s.get(16)?;
    let pd_len = usize::from(be16(s, 18)?);
    Some((20 + pd_len, flags & 0x40 != 0, flags & 0x80 != 0))
}

/// Analyse a pcap file's bytes. At most `max_bytes` of stream data are kept per flow.
pub fn analyse(pcap: &[u8], max_bytes: usize) -> Result<Alignment, String> {
    let magic = be32(pcap, 0).ok_or("not a pcap file")?;
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => false,
        0xd4c3b2a1 | 0x4d3cb2a1 => true,
        _ => return Err(format!("not a classic pcap file (magic {magic:#x})")),
    };
    let u32_at = |i: usize| -> Option<u32> {
        let b: [u8; 4] = pcap.get(i..i + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let linktype = u32_at(20).ok_or("truncated pcap header")?;
    if linktype != 1 {
        return Err(format!("link type {linktype} is not Ethernet"));
    }
    let mut flows: HashMap<FlowKey, Flow> = HashMap::new();
    let mut max_frame = 0u64;
    let mut pos = 24;
    while pos + 16 <= pcap.len() {
        let incl = u32_at(pos + 8).ok_or("truncated record")? as usize;
        let rec = pcap
            .get(pos + 16..pos + 16 + incl)
            .ok_or("truncated packet")?;
        pos += 16 + incl;
        max_frame = max_frame.max(incl as u64);
        // Ethernet II, IPv4, TCP.
        if be16(rec, 12) != Some(0x0800) {
            continue;
        }
        let ip = &rec[14..];
        let Some(&vihl) = ip.first() else { continue };
        if vihl >> 4 != 4 || ip.get(9) != Some(&6) {
            continue;
        }
        let ihl = usize::from(vihl & 0xf) * 4;
        let Some(tot) = be16(ip, 2).map(usize::from) else {
            continue;
        };
        let Some(tcp) = ip.get(ihl..tot.min(ip.len())) else {
            continue;
        };
        let (Some(sp), Some(dp), Some(seq)) = (be16(tcp, 0), be16(tcp, 2), be32(tcp, 4)) else {
            continue;
        };
        let Some(&off) = tcp.get(12) else { continue };
        let flags = tcp.get(13).copied().unwrap_or(0);
        let Some(payload) = tcp.get(usize::from(off >> 4) * 4..) else {
            continue;
        };
        let (Some(src), Some(dst)) = (ip.get(12..16), ip.get(16..20)) else {
            continue;
        };
        let key = (src.try_into().unwrap(), sp, dst.try_into().unwrap(), dp);
        let f = flows.entry(key).or_default();
        if flags & 0x02 != 0 {
            // SYN: data starts at seq + 1.
            f.next_seq = Some(seq.wrapping_add(1));
            continue;
        }
        if payload.is_empty() || f.gap {
            continue;
        }
        let Some(next) = f.next_seq else {
            f.gap = true; // capture started mid-connection
            continue;
        };
        let d = seq.wrapping_sub(next) as i32;
        if d < 0 {
            continue; // retransmission of data already seen
        }
        if d > 0 {
            f.gap = true;
            continue;
        }
        if f.bytes.len() + payload.len() > max_bytes {
            continue;
        }
        f.starts.push(f.bytes.len());
        f.bytes.extend_from_slice(payload);
        f.next_seq = Some(seq.wrapping_add(payload.len() as u32));
    }

    let mut res = Alignment {
        max_frame,
        ..Alignment::default()
    };
    let keys: Vec<FlowKey> = flows.keys().copied().collect();
    for k in keys {
        let f = &flows[&k];
        if f.bytes.is_empty() {
            continue;
        }
        let rev = (k.2, k.3, k.0, k.1);
        let Some((len, c, m)) = mpa_frame(&f.bytes) else {
            res.skipped_flows += 1;
            continue;
        };
        // RFC 5044 §7.1: CRC is used if either side asked for it.
        let peer_c = flows
            .get(&rev)
            .and_then(|p| mpa_frame(&p.bytes))
            .map(|x| x.1)
            .unwrap_or(true);
        let peer_m = flows
            .get(&rev)
            .and_then(|p| mpa_frame(&p.bytes))
            .map(|x| x.2)
            .unwrap_or(false);
        // M in the peer's frame asks us to send markers (per direction, RFC 5044 §7.1.1).
        if peer_m || f.gap {
            res.skipped_flows += 1;
            continue;
        }
        let _ = m;
        let crc = if c || peer_c { 4 } else { 0 };
        let mut boundaries = std::collections::HashSet::new();
        let mut p = len;
        while p + 2 <= f.bytes.len() {
            boundaries.insert(p);
            let ul = usize::from(be16(&f.bytes, p).unwrap_or(0));
            let fp = (2 + ul).div_ceil(4) * 4 + crc;
            p += fp;
        }
        for &s in &f.starts {
            if s < len {
                continue;
            }
            res.data_segments += 1;
            if boundaries.contains(&s) {
                res.aligned += 1;
            }
        }
    }
    Ok(res)
}
