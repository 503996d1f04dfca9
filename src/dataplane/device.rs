//! A smoltcp [`Device`] over one DPDK port queue.
//!
//! - rx: the worker calls [`DpdkDevice::rx_refill`] once per loop (one `rx_burst` of up to
//!   `batch` packets); `receive` hands them to smoltcp one by one. Multi-segment packets are
//!   dropped with a log line (every configured pool holds a whole frame in one mbuf).
//! - tx: every frame is built directly in an mbuf from the port's pool (no allocation per packet
//!   outside the mempool) and queued; [`DpdkDevice::flush`] calls `tx_burst`. Frames the driver
//!   does not take stay queued. When the queue holds `tx_max` frames, `transmit` (and `receive`,
//!   which must also return a tx token) says "not now": smoltcp keeps the data in its socket
//!   buffer and tries on the next poll. Nothing is dropped on a full tx ring, which matters
//!   because smoltcp's minimum retransmission timeout is 1 s (docs/dataplane.md).
//! - Checksums are computed by smoltcp in software on tx and verified on rx (see
//!   docs/dataplane.md for why offload is not used), except on ports configured as a trusted
//!   shared-memory link.

use smoltcp::phy::{self, Checksum, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use crate::dpdk::{Mbuf, Mempool, Port};

/// IPv4/TCP checksum handling of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumMode {
    /// Computed on tx, verified on rx (default).
    Software,
    /// Neither (shared-memory links between dpwarp processes).
    TrustedLink,
    /// Computed on tx only (peers whose frames carry offloaded, partial checksums).
    TxOnly,
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
}

/// One DPDK port queue as a smoltcp device.
pub struct DpdkDevice {
    port: Port,
    queue: u16,
    pool: &'static Mempool,
    batch: usize,
    mtu: usize,
    /// The current rx burst, reversed so frames are taken in arrival order with `pop`.
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    tx_max: usize,
    /// Copies of every frame received and sent, for a capture port (a `net_pcap` vdev with
    /// `tx_pcap=FILE`): the capture is written by DPDK's own pcap PMD.
    mirror: Option<Mirror>,
    /// IPv4/TCP checksum handling (config `checksum`).
    checksum: ChecksumMode,
    /// This device's counters.
    pub stats: DeviceStats,
}

/// A port (queue 0) that receives a copy of every frame.
pub struct Mirror {
    /// The capture port; copies are sent on its queue 0.
    pub port: Port,
    /// Pool the copies are allocated from.
    pub pool: &'static Mempool,
    /// Copies not yet taken by the capture port's driver (at most 1024; beyond that copies
    /// are skipped rather than stalling traffic).
    pub pending: Vec<Mbuf>,
}

impl Mirror {
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
    /// A device on `queue` of `port`; `mtu` is the IP MTU.
    pub fn new(port: Port, queue: u16, pool: &'static Mempool, batch: usize, mtu: usize) -> Self {
        DpdkDevice {
            port,
            queue,
            pool,
            batch,
            mtu,
            rx: Vec::with_capacity(batch),
            tx: Vec::with_capacity(batch * 8),
            tx_max: batch * 8,
            mirror: None,
            checksum: ChecksumMode::Software,
            stats: DeviceStats::default(),
        }
    }

    /// How IPv4/TCP checksums are handled (see `PortConfig::checksum`).
    pub fn set_checksum_mode(&mut self, m: ChecksumMode) {
        self.checksum = m;
    }

    /// Copy every frame to `mirror` as well.
    pub fn set_mirror(&mut self, port: Port, pool: &'static Mempool) {
        self.mirror = Some(Mirror {
            port,
            pool,
            pending: Vec::with_capacity(1024),
        });
    }

    /// Pull one burst from the rx queue if everything earlier was consumed. Returns how many.
    pub fn rx_refill(&mut self) -> usize {
        if !self.rx.is_empty() {
            return 0;
        }
        let n = self.port.rx_burst(self.queue, &mut self.rx, self.batch);
        self.rx.reverse();
        self.stats.rx_packets += n as u64;
        n
    }

    /// Frames received but not yet given to smoltcp.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }

    /// Hand queued frames to the driver; returns how many it took.
    pub fn flush(&mut self) -> usize {
        let mut sent = 0;
        while !self.tx.is_empty() {
            let n = self.port.tx_burst(self.queue, &mut self.tx);
            if n == 0 {
                break;
            }
            sent += n;
        }
        self.stats.tx_packets += sent as u64;
        if let Some(m) = self.mirror.as_mut() {
            m.port.tx_burst(0, &mut m.pending);
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
        match self.pool.alloc() {
            Some(m) => Some(DpdkTxToken { dev: self, m }),
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
            let m = self.rx.pop()?;
            if m.nb_segs() != 1 {
                log::warn!(
                    "dpdk: dropping a {}-segment frame of {} bytes (pool buffers hold one frame)",
                    m.nb_segs(),
                    m.pkt_len()
                );
                self.stats.rx_dropped += 1;
                continue;
            }
            if let Some(mi) = self.mirror.as_mut() {
                mi.copy(m.data());
            }
            let tx = self.tx_token()?;
            return Some((DpdkRxToken { m }, tx));
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
        let ck = match self.checksum {
            ChecksumMode::Software => Checksum::Both,
            ChecksumMode::TrustedLink => Checksum::None,
            ChecksumMode::TxOnly => Checksum::Tx,
        };
        c.checksum.ipv4 = ck;
        c.checksum.tcp = ck;
        c
    }
}

/// A received frame.
pub struct DpdkRxToken {
    m: Mbuf,
}

impl phy::RxToken for DpdkRxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        // The mbuf is freed to its pool when `self.m` drops after `f` returns.
        f(self.m.data())
    }
}

/// Room for one frame to send.
pub struct DpdkTxToken<'a> {
    dev: &'a mut DpdkDevice,
    m: Mbuf,
}

impl phy::TxToken for DpdkTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut m = self.m;
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
        if let Some(mi) = self.dev.mirror.as_mut() {
            mi.copy(m.data());
        }
        self.dev.tx.push(m);
        if self.dev.tx.len() >= self.dev.batch {
            self.dev.flush();
        }
        r
    }
}
