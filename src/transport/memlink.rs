//! An in-memory duplex byte stream with fault injection, standing in for TCP (the LLP of
//! RFC 5044 §1) in engine tests, the demo's `mem` transport and fuzzing.
//!
//! Each direction is a bounded buffer ([`CAPACITY`] bytes): `send` takes what fits and returns
//! `WouldBlock` when the buffer is full, `recv` returns `WouldBlock` when nothing is readable, and
//! after [`Transport::shutdown`] (or dropping an end) the peer reads the buffered bytes, then EOF.
//! A send to an end that was dropped fails with `BrokenPipe`.
//!
//! Faults ([`LinkFaults`]) model what a real byte stream does to MPA: TCP may deliver any
//! segmentation (RFC 5044 §4 and App. A: FPDUs are not guaranteed to arrive segment-aligned, so
//! the deframer must reassemble), take time, and — past TCP's own checksum, which is what MPA's
//! CRC32c is for (RFC 5044 §4.4) — corrupt bits. Byte loss, reordering and duplication are not
//! modelled: TCP hides those from MPA. Every random choice comes from `seed`, so a failing test
//! replays exactly.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Transport;

/// Bytes each direction buffers before `send` returns `WouldBlock` (like a socket buffer).
pub const CAPACITY: usize = 4 * 1024 * 1024;

/// At most this many pending delay stamps per direction; beyond it new bytes join the last stamp
/// (only ever delaying bytes further), so many tiny sends cannot grow memory without bound.
const MAX_STAMPS: usize = 65_536;

/// Faults injected by a [`pair`]. `LinkFaults::default()` is a perfect link.
#[derive(Debug, Clone, Default)]
pub struct LinkFaults {
    /// `Some((min, max))`: every `recv` (both directions) returns at most a random number of
    /// bytes in `[min, max]` (a `min` of 0 counts as 1), as if TCP had segmented the stream so.
    pub resegment: Option<(usize, usize)>,
    /// Bytes become readable only this long after they were sent (both directions).
    pub delay: Duration,
    /// Bit offsets of the a->b stream to invert, counted from the first byte ever sent: offset
    /// `k` is byte `k / 8`, bit `k % 8` counted from the most significant bit (the RFCs' bit
    /// numbering), i.e. mask `0x80 >> (k % 8)`.
    pub flip_bits: Vec<u64>,
    /// Per byte sent a->b, the probability that one random bit of it is inverted.
    pub flip_probability: f64,
    /// Seed for every random choice (resegmentation sizes, random flips).
    pub seed: u64,
}

/// One direction's shared state.
#[derive(Debug)]
struct PipeState {
    /// Bytes sent and not yet received (readable or still delayed).
    buf: VecDeque<u8>,
    /// `(stream offset one past the last byte, when those bytes become readable)`, in order;
    /// empty when the link has no delay.
    stamps: VecDeque<(u64, Instant)>,
    /// Total bytes ever sent / received in this direction (stream offsets).
    sent: u64,
    received: u64,
    /// The writer shut down (or was dropped): EOF after `buf` drains.
    closed: bool,
    /// The reader was dropped: sends fail.
    reader_gone: bool,
}

#[derive(Debug)]
struct Pipe {
    state: Mutex<PipeState>,
    readable: Condvar,
}

impl Pipe {
    fn new() -> Arc<Pipe> {
        Arc::new(Pipe {
            state: Mutex::new(PipeState {
                buf: VecDeque::new(),
                stamps: VecDeque::new(),
                sent: 0,
                received: 0,
                closed: false,
                reader_gone: false,
            }),
            readable: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PipeState> {
        // A panic elsewhere cannot leave the byte queue inconsistent; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PipeState {
    /// Bytes readable at `now`, and when more become readable (if some are still delayed).
    fn readable(&self, now: Instant) -> (usize, Option<Instant>) {
        if self.stamps.is_empty() {
            return (self.buf.len(), None);
        }
        let mut end = self.received;
        for &(off, at) in &self.stamps {
            if at > now {
                let n = (end - self.received) as usize;
                return (n, Some(at));
            }
            end = off;
        }
        ((end - self.received) as usize, None)
    }

    fn at_eof(&self) -> bool {
        self.closed && self.buf.is_empty()
    }
}

/// Faults applied by the sending side of one direction.
#[derive(Debug)]
struct TxFaults {
    delay: Duration,
    /// Sorted, deduplicated bit offsets still ahead of the stream position.
    flip_bits: VecDeque<u64>,
    flip_probability: f64,
    rng: StdRng,
}

impl TxFaults {
    fn new(cfg: &LinkFaults, flips: bool, seed: u64) -> TxFaults {
        let mut bits: Vec<u64> = if flips {
            cfg.flip_bits.clone()
        } else {
            Vec::new()
        };
        bits.sort_unstable();
        bits.dedup();
        let p = if flips && cfg.flip_probability.is_finite() {
            cfg.flip_probability.clamp(0.0, 1.0)
        } else {
            0.0
        };
        TxFaults {
            delay: cfg.delay,
            flip_bits: bits.into(),
            flip_probability: p,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Whether any corruption is still to come.
    fn active(&self) -> bool {
        !self.flip_bits.is_empty() || self.flip_probability > 0.0
    }

    /// Corrupt `bytes`, which start at stream offset `start`.
    fn apply<'a>(&mut self, start: u64, bytes: impl Iterator<Item = &'a mut u8>) {
        for (off, b) in (start..).zip(bytes) {
            // Offsets are sorted and never behind `start` (earlier ones were consumed).
            while let Some(&bit) = self.flip_bits.front() {
                if bit / 8 != off {
                    break;
                }
                self.flip_bits.pop_front();
                *b ^= 0x80 >> (bit % 8);
                log::debug!("memlink: flipped bit {bit} of the a->b stream");
            }
            if self.flip_probability > 0.0 && self.rng.random_bool(self.flip_probability) {
                *b ^= 1 << self.rng.random_range(0..8u32);
            }
        }
    }
}

/// One end of an in-memory link. Implements [`Transport`]; `Send`, so it can move to a driver
/// thread.
#[derive(Debug)]
pub struct MemEnd {
    /// Bytes we send.
    tx: Arc<Pipe>,
    /// Bytes we receive.
    rx: Arc<Pipe>,
    tx_faults: TxFaults,
    /// `(min, max)` bytes per `recv`, and the generator choosing within it.
    resegment: Option<(usize, usize, StdRng)>,
    shut: bool,
}

/// A connected pair of ends `(a, b)` with `faults` applied; bit flips apply to bytes `a` sends.
pub fn pair(faults: LinkFaults) -> (MemEnd, MemEnd) {
    let ab = Pipe::new();
    let ba = Pipe::new();
    // Distinct streams per use so, e.g., resegmenting a->b does not mirror b->a.
    let seed = faults.seed;
    let reseg = |salt: u64| {
        faults.resegment.map(|(lo, hi)| {
            let lo = lo.max(1);
            (lo, hi.max(lo), StdRng::seed_from_u64(seed ^ salt))
        })
    };
    let a = MemEnd {
        tx: ab.clone(),
        rx: ba.clone(),
        tx_faults: TxFaults::new(&faults, true, seed ^ 0x0a0b_f11b),
        resegment: reseg(0x0b0a_5e65),
        shut: false,
    };
    let b = MemEnd {
        tx: ba,
        rx: ab,
        tx_faults: TxFaults::new(&faults, false, seed ^ 0x0b0a_f11b),
        resegment: reseg(0x0a0b_5e65),
        shut: false,
    };
    (a, b)
}

impl MemEnd {
    /// Bytes this end has sent so far (the stream offset of the next byte).
    pub fn bytes_sent(&self) -> u64 {
        self.tx.lock().sent
    }

    /// Bytes this end has received so far.
    pub fn bytes_received(&self) -> u64 {
        self.rx.lock().received
    }

    /// Block up to `timeout` until the send buffer has room (or the peer is gone); may return
    /// early.
    pub fn wait_writable(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut st = self.tx.lock();
        while st.buf.len() >= CAPACITY && !st.reader_gone {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .tx
                .readable
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

impl Transport for MemEnd {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let rx = self.rx.clone();
        let mut st = rx.lock();
        let (avail, _) = st.readable(Instant::now());
        if avail == 0 {
            return if st.at_eof() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let mut n = avail.min(buf.len());
        if let Some((lo, hi, rng)) = &mut self.resegment {
            n = n.min(rng.random_range(*lo..=*hi));
        }
        for (dst, src) in buf.iter_mut().zip(st.buf.drain(..n)) {
            *dst = src;
        }
        st.received += n as u64;
        let received = st.received;
        while st.stamps.front().is_some_and(|&(off, _)| off <= received) {
            st.stamps.pop_front();
        }
        // Room was made: wake a writer blocked in wait_writable.
        rx.readable.notify_all();
        Ok(n)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.shut {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "memlink: send after shutdown",
            ));
        }
        let tx = self.tx.clone();
        let mut st = tx.lock();
        if st.reader_gone {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "memlink: peer end dropped",
            ));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min(CAPACITY.saturating_sub(st.buf.len()));
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let start = st.sent;
        let at = st.buf.len();
        st.buf.extend(&buf[..n]);
        if self.tx_faults.active() {
            self.tx_faults.apply(start, st.buf.range_mut(at..));
        }
        st.sent += n as u64;
        if !self.tx_faults.delay.is_zero() {
            let ready = Instant::now() + self.tx_faults.delay;
            let end = st.sent;
            let full = st.stamps.len() >= MAX_STAMPS;
            match st.stamps.back_mut() {
                Some(last) if last.1 == ready || full => {
                    *last = (end, ready.max(last.1));
                }
                _ => st.stamps.push_back((end, ready)),
            }
        }
        tx.readable.notify_all();
        Ok(n)
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.shut = true;
        self.tx.lock().closed = true;
        self.tx.readable.notify_all();
        Ok(())
    }

    fn wait_readable(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut st = self.rx.lock();
        loop {
            let now = Instant::now();
            let (avail, next) = st.readable(now);
            if avail > 0 || st.at_eof() || now >= deadline {
                return Ok(());
            }
            let until = next.map_or(deadline, |t| t.min(deadline));
            let left = until
                .saturating_duration_since(now)
                .max(Duration::from_micros(1));
            st = self
                .rx
                .readable
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for MemEnd {
    fn drop(&mut self) {
        // Like closing a socket: the peer reads what we sent, then EOF; its sends fail.
        self.tx.lock().closed = true;
        self.tx.readable.notify_all();
        self.rx.lock().reader_gone = true;
        self.rx.readable.notify_all();
    }
}
