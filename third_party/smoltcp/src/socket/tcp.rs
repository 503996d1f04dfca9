// Heads up! Before working on this file you should read, at least, RFC 793 and
// the parts of RFC 1122 that discuss TCP, as well as RFC 7323 for some of the TCP options.
// Consult RFC 7414 when implementing a new feature.

use core::fmt::Display;
#[cfg(feature = "async")]
use core::task::Waker;
use core::{fmt, mem};

#[cfg(feature = "async")]
use crate::socket::WakerRegistration;
use crate::socket::{Context, PollAt};
use crate::storage::{Assembler, RingBuffer};
use crate::time::{Duration, Instant};
use crate::wire::{
    IpAddress, IpEndpoint, IpListenEndpoint, IpProtocol, IpRepr, TcpControl, TcpRepr, TcpSeqNumber,
    TcpTimestampGenerator, TcpTimestampRepr, TCP_HEADER_LEN,
};

mod congestion;

macro_rules! tcp_trace {
    ($($arg:expr),*) => (net_log!(trace, $($arg),*));
}

/// Error returned by [`Socket::listen`]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ListenError {
    InvalidState,
    Unaddressable,
}

impl Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            ListenError::InvalidState => write!(f, "invalid state"),
            ListenError::Unaddressable => write!(f, "unaddressable destination"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ListenError {}

/// Error returned by [`Socket::connect`]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConnectError {
    InvalidState,
    Unaddressable,
}

impl Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            ConnectError::InvalidState => write!(f, "invalid state"),
            ConnectError::Unaddressable => write!(f, "unaddressable destination"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConnectError {}

/// Error returned by [`Socket::send`]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendError {
    InvalidState,
}

impl Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            SendError::InvalidState => write!(f, "invalid state"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SendError {}

/// Error returned by [`Socket::recv`]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RecvError {
    InvalidState,
    Finished,
}

impl Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            RecvError::InvalidState => write!(f, "invalid state"),
            RecvError::Finished => write!(f, "operation finished"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RecvError {}

/// A TCP socket ring buffer.
pub type SocketBuffer<'a> = RingBuffer<'a, u8>;

/// The state of a TCP socket, according to [RFC 793].
///
/// [RFC 793]: https://tools.ietf.org/html/rfc793
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            State::Closed => write!(f, "CLOSED"),
            State::Listen => write!(f, "LISTEN"),
            State::SynSent => write!(f, "SYN-SENT"),
            State::SynReceived => write!(f, "SYN-RECEIVED"),
            State::Established => write!(f, "ESTABLISHED"),
            State::FinWait1 => write!(f, "FIN-WAIT-1"),
            State::FinWait2 => write!(f, "FIN-WAIT-2"),
            State::CloseWait => write!(f, "CLOSE-WAIT"),
            State::Closing => write!(f, "CLOSING"),
            State::LastAck => write!(f, "LAST-ACK"),
            State::TimeWait => write!(f, "TIME-WAIT"),
        }
    }
}

// dpwarp: the estimator works in microseconds (upstream 0.12: milliseconds). Its rounding
// (`+ 7` and `+ 3` below) floored a millisecond estimate at 7 ms of RTT and 10 ms of
// deviation when every sample read 0 ms, which on a link with RTTs of tens of microseconds
// held the RTO at 47 ms, by accident rather than by the 10 ms minimum.

// Conservative initial RTT estimate.
const RTTE_INITIAL_RTT: u32 = 300_000;
const RTTE_INITIAL_DEV: u32 = 100_000;

// Minimum "safety margin" for the RTO that kicks in when the
// variance gets very low.
const RTTE_MIN_MARGIN: u32 = 5_000;

// dpwarp: 50 ms (0.12: 10 ms). The RTO must outlast the peer's delayed ACK (smoltcp 10 ms,
// Linux at least 40 ms) and the stalls of a loaded host: with 10 ms, which the microsecond
// estimator reached, a spurious timeout in a test run under load made a server resend a whole
// 1 MiB RDMA Read Response (go-back-N; there is no undo), and a lone segment to a Linux peer
// could be resent before Linux's delayed ACK. 50 ms is where the accidental floor above had
// kept dpwarp all along; Linux's minimum is 200 ms, RFC 6298's 1 s.
const RTTE_MIN_RTO: u32 = 50_000;
const RTTE_MAX_RTO: u32 = 10_000_000;

#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct RttEstimator {
    // Using u32 instead of Duration to save space (Duration is i64)
    rtt: u32,
    deviation: u32,
    /// dpwarp: whether a sample was taken yet (RFC 6298 (2.2)).
    have_measurement: bool,
    timestamp: Option<(Instant, TcpSeqNumber)>,
    max_seq_sent: Option<TcpSeqNumber>,
    /// dpwarp: retransmission timeouts since the last sample: the RTO is doubled for each
    /// (RFC 6298 (5.5)).
    backoff: u8,
    /// dpwarp: the smallest RTO, in microseconds (`Socket::set_rto_min`).
    min_rto: u32,
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self {
            rtt: RTTE_INITIAL_RTT,
            deviation: RTTE_INITIAL_DEV,
            have_measurement: false,
            timestamp: None,
            max_seq_sent: None,
            backoff: 0,
            min_rto: RTTE_MIN_RTO,
        }
    }
}

impl RttEstimator {
    /// dpwarp: the smoothed round-trip time, microseconds (CUBIC's RTT, RFC 9438 4.4).
    fn srtt_us(&self) -> u32 {
        self.rtt
    }

    fn retransmission_timeout(&self) -> Duration {
        let margin = RTTE_MIN_MARGIN.max(self.deviation * 4);
        let us = (self.rtt + margin).clamp(self.min_rto, RTTE_MAX_RTO);
        // dpwarp: backed off (`on_rto`), up to the maximum.
        let us = (u64::from(us) << self.backoff).min(u64::from(RTTE_MAX_RTO));
        Duration::from_micros(us)
    }

    /// A round-trip time sample, in microseconds.
    fn sample(&mut self, new_rtt: u32) {
        // dpwarp: no sample above the largest RTO (a stall, not a round trip), so that the
        // sums below cannot overflow.
        let new_rtt = new_rtt.min(RTTE_MAX_RTO);
        if !self.have_measurement {
            // dpwarp: RFC 6298 (2.2): the first measurement R sets SRTT <- R, RTTVAR <- R/2
            // (0.12 averaged it into its 300 ms guess, so a connection's RTO took some 40
            // round trips to come down from 700 ms, and a loss early in a connection cost
            // most of a second).
            self.have_measurement = true;
            self.rtt = new_rtt;
            self.deviation = new_rtt / 2;
        } else {
            // "Congestion Avoidance and Control", Van Jacobson, Michael J. Karels, 1988
            self.rtt = (self.rtt * 7 + new_rtt + 7) / 8;
            let diff = (self.rtt as i32 - new_rtt as i32).unsigned_abs();
            self.deviation = (self.deviation * 3 + diff + 3) / 4;
        }

        self.backoff = 0;

        let rto = self.retransmission_timeout().total_millis();
        tcp_trace!(
            "rtte: sample={:?} rtt={:?} dev={:?} rto={:?}",
            new_rtt,
            self.rtt,
            self.deviation,
            rto
        );
    }

    fn on_send(&mut self, timestamp: Instant, seq: TcpSeqNumber) {
        if self
            .max_seq_sent
            .map(|max_seq_sent| seq > max_seq_sent)
            .unwrap_or(true)
        {
            self.max_seq_sent = Some(seq);
            if self.timestamp.is_none() {
                self.timestamp = Some((timestamp, seq));
                tcp_trace!("rtte: sampling at seq={:?}", seq);
            }
        }
    }

    fn on_ack(&mut self, timestamp: Instant, seq: TcpSeqNumber) {
        if let Some((sent_timestamp, sent_seq)) = self.timestamp {
            if seq >= sent_seq {
                let rtt = (timestamp - sent_timestamp).total_micros();
                self.sample(u32::try_from(rtt).unwrap_or(u32::MAX));
                self.timestamp = None;
            }
        }
    }

    /// Any retransmission: a segment sent twice gives no RTT sample (Karn's algorithm,
    /// RFC 6298 section 3).
    fn on_retransmit(&mut self) {
        if self.timestamp.is_some() {
            tcp_trace!("rtte: abort sampling due to retransmit");
        }
        self.timestamp = None;
    }

    /// dpwarp: a retransmission timeout (upstream 29340b71: a fast retransmit is no reason to
    /// back off). Aborts sampling and doubles the RTO until the next sample (RFC 6298 (5.5)).
    /// 0.12 instead doubled the RTT estimate after every third timeout; from a round trip of
    /// microseconds that left the RTO at its floor for many timeouts in a row, and a peer gone
    /// silent (a client process that exited before its last ACK) got a retransmission at
    /// every floor interval while the socket lingered (22 in 240 ms with a 10 ms floor).
    fn on_rto(&mut self) {
        self.on_retransmit();
        self.backoff = (self.backoff + 1).min(16);
        tcp_trace!(
            "rtte: timeout, backing off: rto={:?}",
            self.retransmission_timeout().total_millis()
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Timer {
    Idle {
        keep_alive_at: Option<Instant>,
    },
    Retransmit {
        expires_at: Instant,
        delay: Duration,
    },
    Close {
        expires_at: Instant,
    },
}

const ACK_DELAY_DEFAULT: Duration = Duration::from_millis(10);
/// dpwarp: the shortest probe timeout of a tail loss probe (RFC 8985 section 7.2 asks for
/// 2 x SRTT; on links of tens of microseconds that is below the jitter of the hosts, and
/// Linux adds 2 ms too).
const TLP_MIN_PTO: Duration = Duration::from_millis(2);
/// dpwarp: the longest interval between zero-window probes (Linux's TCP_RTO_MAX is 120 s).
const PERSIST_MAX: Duration = Duration::from_secs(60);

/// dpwarp: the tail loss probe that is due (RFC 8985 section 7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum TlpProbe {
    /// One new segment, beyond the congestion window.
    NewData,
    /// The last segment sent, again: from this sequence number to SND.NXT.
    Retransmit(TcpSeqNumber),
}
const CLOSE_DELAY: Duration = Duration::from_millis(10_000);

impl Timer {
    fn new() -> Timer {
        Timer::Idle {
            keep_alive_at: None,
        }
    }

    fn should_keep_alive(&self, timestamp: Instant) -> bool {
        match *self {
            Timer::Idle {
                keep_alive_at: Some(keep_alive_at),
            } if timestamp >= keep_alive_at => true,
            _ => false,
        }
    }

    fn should_retransmit(&self, timestamp: Instant) -> Option<Duration> {
        match *self {
            Timer::Retransmit { expires_at, delay } if timestamp >= expires_at => {
                Some(timestamp - expires_at + delay)
            }
            _ => None,
        }
    }

    fn should_close(&self, timestamp: Instant) -> bool {
        match *self {
            Timer::Close { expires_at } if timestamp >= expires_at => true,
            _ => false,
        }
    }

    fn poll_at(&self) -> PollAt {
        match *self {
            Timer::Idle {
                keep_alive_at: Some(keep_alive_at),
            } => PollAt::Time(keep_alive_at),
            Timer::Idle {
                keep_alive_at: None,
            } => PollAt::Ingress,
            Timer::Retransmit { expires_at, .. } => PollAt::Time(expires_at),
            Timer::Close { expires_at } => PollAt::Time(expires_at),
        }
    }

    fn set_for_idle(&mut self, timestamp: Instant, interval: Option<Duration>) {
        *self = Timer::Idle {
            keep_alive_at: interval.map(|interval| timestamp + interval),
        }
    }

    fn set_keep_alive(&mut self) {
        if let Timer::Idle { keep_alive_at } = self {
            if keep_alive_at.is_none() {
                *keep_alive_at = Some(Instant::from_millis(0))
            }
        }
    }

    fn rewind_keep_alive(&mut self, timestamp: Instant, interval: Option<Duration>) {
        if let Timer::Idle { keep_alive_at } = self {
            *keep_alive_at = interval.map(|interval| timestamp + interval)
        }
    }

    fn set_for_retransmit(&mut self, timestamp: Instant, delay: Duration) {
        match *self {
            Timer::Idle { .. } => {
                *self = Timer::Retransmit {
                    expires_at: timestamp + delay,
                    delay,
                }
            }
            Timer::Retransmit { expires_at, delay } if timestamp >= expires_at => {
                *self = Timer::Retransmit {
                    expires_at: timestamp + delay,
                    delay: delay * 2,
                }
            }
            Timer::Retransmit { .. } => (),
            Timer::Close { .. } => (),
        }
    }

    /// dpwarp: start the retransmission timer afresh (RFC 6298 (5.3)).
    fn restart_retransmit(&mut self, timestamp: Instant, delay: Duration) {
        *self = Timer::Retransmit {
            expires_at: timestamp + delay,
            delay,
        }
    }

    fn set_for_close(&mut self, timestamp: Instant) {
        *self = Timer::Close {
            expires_at: timestamp + CLOSE_DELAY,
        }
    }

    fn is_retransmit(&self) -> bool {
        match *self {
            Timer::Retransmit { .. } => true,
            _ => false,
        }
    }
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum AckDelayTimer {
    Idle,
    Waiting(Instant),
    Immediate,
}

#[derive(Debug, Copy, Clone, Eq, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Tuple {
    local: IpEndpoint,
    remote: IpEndpoint,
}

impl Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.local, self.remote)
    }
}

/// A congestion control algorithm.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CongestionControl {
    None,

    #[cfg(feature = "socket-tcp-reno")]
    Reno,

    #[cfg(feature = "socket-tcp-cubic")]
    Cubic,
}

/// dpwarp: in-order payload a socket accepted without buffering it (see
/// [`Socket::set_rx_lend`]): where its octets lie in the frame the interface was handed (by
/// address) and how many there are. The octets stay in that frame; whoever lent the frame to
/// the interface resolves them with [`RxLent::within`] while it still holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxLent {
    addr: usize,
    len: usize,
}

impl RxLent {
    /// The number of octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an empty payload is not lent.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The octets, if they lie wholly within `frame` (the buffer the segment came in, or
    /// one segment of it); None for any other buffer.
    pub fn within<'f>(&self, frame: &'f [u8]) -> Option<&'f [u8]> {
        let offset = self.addr.checked_sub(frame.as_ptr() as usize)?;
        frame.get(offset..offset.checked_add(self.len)?)
    }
}

/// dpwarp: an out-of-order segment's payload a socket accepted (see
/// [`Socket::set_rx_peek_ahead`]): where it lies in the frame the interface was handed
/// ([`RxLent::within`] resolves it) and how far ahead of the stream it is. The socket counts
/// it as received (it is acknowledged, and SACKed) but has not written it into the receive
/// buffer yet: [`Socket::settle_rx_ahead`] does, for the octets the consumer did not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxAhead {
    /// The payload's octets in the frame.
    pub payload: RxLent,
    /// Octets between the next octet `recv` returns and the payload's first: those buffered
    /// in order and not read yet, then the hole.
    pub ahead: usize,
}

#[cfg(test)]
std::thread_local! {
    /// dpwarp tests: the segments the header-predicted path of `Socket::process` took.
    static FAST_PATH_TAKEN: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// A Transmission Control Protocol socket.
///
/// A TCP socket may passively listen for connections or actively connect to another endpoint.
/// Note that, for listening sockets, there is no "backlog"; to be able to simultaneously
/// accept several connections, as many sockets must be allocated, or any new connection
/// attempts will be reset.
#[derive(Debug)]
pub struct Socket<'a> {
    state: State,
    timer: Timer,
    rtte: RttEstimator,
    assembler: alloc::boxed::Box<Assembler>,
    rx_buffer: SocketBuffer<'a>,
    rx_fin_received: bool,
    tx_buffer: SocketBuffer<'a>,
    /// Interval after which, if no inbound packets are received, the connection is aborted.
    timeout: Option<Duration>,
    /// Interval at which keep-alive packets will be sent.
    keep_alive: Option<Duration>,
    /// The time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    hop_limit: Option<u8>,
    /// Address passed to listen(). Listen address is set when listen() is called and
    /// used every time the socket is reset back to the LISTEN state.
    listen_endpoint: IpListenEndpoint,
    /// Current 4-tuple (local and remote endpoints).
    tuple: Option<Tuple>,
    /// The sequence number corresponding to the beginning of the transmit buffer.
    /// I.e. an ACK(local_seq_no+n) packet removes n bytes from the transmit buffer.
    local_seq_no: TcpSeqNumber,
    /// The sequence number corresponding to the beginning of the receive buffer.
    /// I.e. userspace reading n bytes adds n to remote_seq_no.
    remote_seq_no: TcpSeqNumber,
    /// The last sequence number sent.
    /// I.e. in an idle socket, local_seq_no+tx_buffer.len().
    remote_last_seq: TcpSeqNumber,
    /// dpwarp: the highest sequence number ever sent, one past the last octet or flag (BSD's
    /// SND.MAX). `remote_last_seq` is SND.NXT and goes back at a retransmission timeout; an ACK
    /// above this one acknowledges something not yet sent (RFC 9293 section 3.10.7.4), even
    /// when the transmit buffer holds octets that far. Set with the ISS; `remote_last_seq`
    /// counts as well where only that was set (the tests' sockets).
    snd_max: TcpSeqNumber,
    /// The last acknowledgement number sent.
    /// I.e. in an idle socket, remote_seq_no+rx_buffer.len().
    remote_last_ack: Option<TcpSeqNumber>,
    /// The last window length sent.
    remote_last_win: u16,
    /// The sending window scaling factor advertised to remotes which support RFC 1323.
    /// It is zero if the window <= 64KiB and/or the remote does not support it.
    remote_win_shift: u8,
    /// The remote window size, relative to local_seq_no
    /// I.e. we're allowed to send octets until local_seq_no+remote_win_len
    remote_win_len: usize,
    /// The receive window scaling factor for remotes which support RFC 1323, None if unsupported.
    remote_win_scale: Option<u8>,
    /// Whether or not the remote supports selective ACK as described in RFC 2018.
    remote_has_sack: bool,
    /// The maximum number of data octets that the remote side may receive.
    remote_mss: usize,
    /// The timestamp of the last packet received.
    remote_last_ts: Option<Instant>,
    /// The sequence number of the last packet received, used for sACK
    local_rx_last_seq: Option<TcpSeqNumber>,
    /// The ACK number of the last packet received.
    local_rx_last_ack: Option<TcpSeqNumber>,
    /// The number of packets received directly after
    /// each other which have the same ACK number.
    local_rx_dup_acks: u8,
    /// dpwarp: the next dispatch retransmits one segment at SND.UNA (the third duplicate
    /// ACK, or a partial ACK in recovery), ahead of any new data (RFC 5681 section 3.2,
    /// RFC 6582 section 3.2; upstream d84a8980).
    pending_fast_retransmit: bool,
    /// dpwarp: in fast recovery (RFC 6582 section 3.2) until `recover` is acknowledged.
    in_recovery: bool,
    /// dpwarp: the congestion window during fast recovery (RFC 6582 section 3.2 steps 2-5:
    /// ssthresh plus three segments, one more per further duplicate ACK, less what a partial
    /// ACK acknowledges); the controller's window outside it.
    recovery_window: usize,
    /// dpwarp: RFC 6582's "recover": the highest sequence number sent when fast recovery
    /// began or a timeout struck; duplicate ACKs at or below it start no fast retransmit
    /// (section 4). None once acknowledged past (so that it never meets wrapped sequence
    /// numbers).
    recover: Option<TcpSeqNumber>,
    /// dpwarp: the last fast retransmission: SND.UNA it repeated and SND.NXT when it went
    /// out (see `note_sack`).
    rexmit_at: Option<(TcpSeqNumber, TcpSeqNumber)>,
    /// dpwarp: how far the last ACK that moved SND.UNA moved it (RFC 6582 section 4.1's
    /// ACK heuristic).
    last_ack_advance: usize,
    /// dpwarp: segments retransmitted by fast retransmit and by timeout, since the socket
    /// was created (see `Socket::retransmissions`).
    fast_retransmits: u64,
    timeout_retransmits: u64,
    /// dpwarp: the tail loss probe (RFC 8985 section 7): when its timeout fires, if armed;
    /// the probe due; and SND.NXT when the outstanding one went (RFC 8985's TLP.end_seq).
    tlp_at: Option<Instant>,
    tlp_pending: Option<TlpProbe>,
    tlp_out: Option<TcpSeqNumber>,
    tail_loss_probes: u64,
    /// dpwarp: the persist timer (RFC 9293 section 3.8.6.1): while the peer's window is
    /// zero, octets wait and none is in flight, a zero-window probe goes at this instant;
    /// and how many went since the window closed (each doubles the next interval).
    zwp_at: Option<Instant>,
    zwp_probes: u32,
    window_probes: u64,
    /// dpwarp: R2 of RFC 9293 section 3.8.3 as a time (`set_user_timeout`); when the first
    /// retransmission timeout since SND.UNA last moved fired, and SND.UNA then; when the
    /// first zero-window probe no segment has answered since went.
    user_timeout: Option<Duration>,
    rto_stall_since: Option<Instant>,
    una_seen: TcpSeqNumber,
    zwp_unanswered: Option<Instant>,
    user_timeouts: u64,
    /// dpwarp: keep-alives left unanswered before the connection is given up on
    /// (`set_keep_alive_probes`); those sent since the peer's last segment; whether the
    /// next one was armed by `keep_alive_now` (not counted); connections given up on so.
    keep_alive_probes: Option<u32>,
    keep_alive_unanswered: u32,
    keep_alive_forced: bool,
    keep_alive_timeouts: u64,
    /// dpwarp: the keep-alive timer's own deadline while one armed by `keep_alive_now` waits
    /// to go (restored after it, so that such keep-alives never postpone the timer's).
    keep_alive_due: Option<Instant>,

    /// Duration for Delayed ACK. If None no ACKs will be delayed.
    ack_delay: Option<Duration>,
    /// Delayed ack timer. If set, packets containing exclusively
    /// ACK or window updates (ie, no data) won't be sent until expiry.
    ack_delay_timer: AckDelayTimer,

    /// Used for rate-limiting: No more challenge ACKs will be sent until this instant.
    challenge_ack_timer: Instant,

    /// Nagle's Algorithm enabled.
    nagle: bool,

    /// The congestion control algorithm.
    congestion_controller: congestion::AnyController,

    /// tsval generator - if some, tcp timestamp is enabled
    tsval_generator: Option<TcpTimestampGenerator>,

    /// 0 if not seen or timestamp not enabled
    last_remote_tsval: u32,

    #[cfg(feature = "async")]
    rx_waker: WakerRegistration,
    #[cfg(feature = "async")]
    tx_waker: WakerRegistration,

    /// dpwarp: in-order payload is lent from the segment when nothing is buffered.
    rx_lend: bool,
    /// dpwarp: the payload last lent and not yet taken (`take_rx_lent`).
    rx_lent: Option<RxLent>,
    /// dpwarp: out-of-order payload is handed to the consumer first (`take_rx_ahead`).
    rx_peek_ahead: bool,
    /// dpwarp: the out-of-order payload last accepted, not yet taken.
    rx_ahead: Option<RxAhead>,
    /// dpwarp: where the payload of `rx_ahead` belongs in the receive buffer (offset past
    /// its readable octets) and how long it is, until `settle_rx_ahead` writes it.
    rx_ahead_unsettled: Option<(usize, usize)>,
    /// dpwarp: a segment's payload gathered from both ends of the transmit ring.
    tx_linear: alloc::vec::Vec<u8>,
    /// dpwarp: sequence numbers just past each record (an MPA FPDU) queued for sending, in
    /// order; `dispatch` cuts segments at the last record end that fits (None: off).
    tx_records: Option<alloc::collections::VecDeque<TcpSeqNumber>>,
    /// dpwarp: index in `tx_records` of the first end past SND.NXT when last cut (segments go
    /// out in order, so the next cut starts there instead of searching every end in flight).
    tx_record_next: usize,
}

/// dpwarp: the index of the first record end after `bound`, from `from` on (the ends are
/// ascending, and those before `from` are at or before `bound`): a walk of up to 16 ends, then
/// a binary search.
fn first_end_past(
    r: &alloc::collections::VecDeque<TcpSeqNumber>,
    from: usize,
    bound: TcpSeqNumber,
) -> usize {
    let mut i = from;
    while i < r.len() && r[i] <= bound {
        i += 1;
        if i - from == 16 {
            return r.partition_point(|&e| e <= bound);
        }
    }
    i
}

/// dpwarp: the most record ends a socket remembers (beyond, segments are cut as usual).
const MAX_TX_RECORDS: usize = 1 << 16;

const DEFAULT_MSS: usize = 536;

impl<'a> Socket<'a> {
    #[allow(unused_comparisons)] // small usize platforms always pass rx_capacity check
    /// Create a socket using the given buffers.
    pub fn new<T>(rx_buffer: T, tx_buffer: T) -> Socket<'a>
    where
        T: Into<SocketBuffer<'a>>,
    {
        let (rx_buffer, tx_buffer) = (rx_buffer.into(), tx_buffer.into());
        let rx_capacity = rx_buffer.capacity();

        // From RFC 1323:
        // [...] the above constraints imply that 2 * the max window size must be less
        // than 2**31 [...] Thus, the shift count must be limited to 14 (which allows
        // windows of 2**30 = 1 Gbyte).
        #[cfg(not(target_pointer_width = "16"))] // Prevent overflow
        if rx_capacity > (1 << 30) {
            panic!("receiving buffer too large, cannot exceed 1 GiB")
        }
        let rx_cap_log2 = mem::size_of::<usize>() * 8 - rx_capacity.leading_zeros() as usize;

        Socket {
            state: State::Closed,
            timer: Timer::new(),
            rtte: RttEstimator::default(),
            assembler: alloc::boxed::Box::new(Assembler::new()),
            tx_buffer,
            rx_buffer,
            rx_fin_received: false,
            timeout: None,
            keep_alive: None,
            hop_limit: None,
            listen_endpoint: IpListenEndpoint::default(),
            tuple: None,
            local_seq_no: TcpSeqNumber::default(),
            remote_seq_no: TcpSeqNumber::default(),
            remote_last_seq: TcpSeqNumber::default(),
            snd_max: TcpSeqNumber::default(),
            remote_last_ack: None,
            remote_last_win: 0,
            remote_win_len: 0,
            remote_win_shift: rx_cap_log2.saturating_sub(16) as u8,
            remote_win_scale: None,
            remote_has_sack: false,
            remote_mss: DEFAULT_MSS,
            remote_last_ts: None,
            local_rx_last_ack: None,
            local_rx_last_seq: None,
            local_rx_dup_acks: 0,
            pending_fast_retransmit: false,
            in_recovery: false,
            recovery_window: 0,
            recover: None,
            last_ack_advance: 0,
            rexmit_at: None,
            fast_retransmits: 0,
            timeout_retransmits: 0,
            tlp_at: None,
            zwp_at: None,
            zwp_probes: 0,
            window_probes: 0,
            user_timeout: None,
            rto_stall_since: None,
            una_seen: TcpSeqNumber::default(),
            zwp_unanswered: None,
            user_timeouts: 0,
            keep_alive_probes: None,
            keep_alive_unanswered: 0,
            keep_alive_forced: false,
            keep_alive_timeouts: 0,
            keep_alive_due: None,
            tlp_pending: None,
            tlp_out: None,
            tail_loss_probes: 0,
            ack_delay: Some(ACK_DELAY_DEFAULT),
            ack_delay_timer: AckDelayTimer::Idle,
            challenge_ack_timer: Instant::from_secs(0),
            nagle: true,
            tsval_generator: None,
            last_remote_tsval: 0,
            congestion_controller: congestion::AnyController::new(),

            #[cfg(feature = "async")]
            rx_waker: WakerRegistration::new(),
            #[cfg(feature = "async")]
            tx_waker: WakerRegistration::new(),
            rx_lend: false,
            rx_lent: None,
            rx_peek_ahead: false,
            rx_ahead: None,
            rx_ahead_unsettled: None,
            tx_linear: alloc::vec::Vec::new(),
            tx_records: None,
            tx_record_next: 0,
        }
    }

    /// dpwarp: accept in-order payload without copying it into the receive buffer whenever
    /// the receive buffer is empty, no out-of-order data is held, no lent payload waits to
    /// be taken and the payload lies in the frame the device handed in (not in a copy the
    /// interface made: a split frame made whole, a reassembled datagram): the segment's payload is recorded as lent ([`Socket::take_rx_lent`]) and
    /// counts as received and read at once (RCV.NXT and the ACK advance as after `recv`).
    /// The consumer takes it before the interface is handed another frame (the octets live
    /// in the frame) and before it reads the receive buffer, which holds only later octets:
    /// so it sees the stream in order, after everything `recv` returned. Payload that is
    /// not taken is lost to the stream.
    pub fn set_rx_lend(&mut self, lend: bool) {
        self.rx_lend = lend;
    }

    /// dpwarp: the in-order payload the last segment lent, if any (see
    /// [`Socket::set_rx_lend`]).
    pub fn take_rx_lent(&mut self) -> Option<RxLent> {
        self.rx_lent.take()
    }

    /// dpwarp: hand each out-of-order segment's payload (accepted ahead of a hole, and lying
    /// in the frame the device handed in) to the consumer before it is buffered, for one
    /// that can use octets before their turn (an RDMA NIC placing tagged data out of order,
    /// RFC 5044 Appendix A.3) and so need not have them buffered. The socket acknowledges
    /// the payload as received, records it ([`Socket::take_rx_ahead`]) and leaves its place
    /// in the receive buffer unwritten until the consumer calls
    /// [`Socket::settle_rx_ahead`] with the octets it did not take, which the socket then
    /// buffers; `recv` later returns the taken octets' place in the stream as whatever the
    /// buffer held there (the consumer skips them). The consumer settles before the
    /// interface is handed another frame: a record left unsettled then is a broken
    /// contract, and the socket aborts the connection rather than deliver octets it never
    /// had.
    pub fn set_rx_peek_ahead(&mut self, peek: bool) {
        self.rx_peek_ahead = peek;
    }

    /// dpwarp: the out-of-order payload the last segment brought, if any (see
    /// [`Socket::set_rx_peek_ahead`]); settle it with [`Socket::settle_rx_ahead`].
    pub fn take_rx_ahead(&mut self) -> Option<RxAhead> {
        self.rx_ahead.take()
    }

    /// dpwarp: buffer the octets of the last out-of-order payload the consumer did not take:
    /// `rest`, the payload's tail (the consumer took the octets before it). A `rest` longer
    /// than the payload, or a call with nothing to settle, changes nothing and returns
    /// false.
    pub fn settle_rx_ahead(&mut self, rest: &[u8]) -> bool {
        let Some((offset, len)) = self.rx_ahead_unsettled else {
            return false;
        };
        if rest.len() > len {
            return false;
        }
        self.rx_ahead_unsettled = None;
        self.rx_ahead = None;
        let written = self
            .rx_buffer
            .write_unallocated(offset + (len - rest.len()), rest);
        debug_assert_eq!(written, rest.len());
        true
    }

    /// dpwarp: an out-of-order payload left unsettled when another segment comes (see
    /// [`Socket::set_rx_peek_ahead`]): its octets are gone, and the stream cannot be
    /// delivered whole.
    fn rx_ahead_broken(&mut self) -> bool {
        if self.rx_ahead_unsettled.is_none() {
            return false;
        }
        net_debug!("out-of-order payload handed to the consumer was never settled; aborting");
        self.rx_ahead_unsettled = None;
        self.rx_ahead = None;
        self.abort();
        true
    }

    /// Enable or disable TCP Timestamp.
    pub fn set_tsval_generator(&mut self, generator: Option<TcpTimestampGenerator>) {
        self.tsval_generator = generator;
    }

    /// Return whether TCP Timestamp is enabled.
    pub fn timestamp_enabled(&self) -> bool {
        self.tsval_generator.is_some()
    }

    /// Set an algorithm for congestion control.
    ///
    /// `CongestionControl::None` indicates that no congestion control is applied.
    /// Options `CongestionControl::Cubic` and `CongestionControl::Reno` are also available.
    /// To use Reno and Cubic, please enable the `socket-tcp-reno` and `socket-tcp-cubic` features
    /// in the `smoltcp` crate, respectively.
    ///
    /// `CongestionControl::Reno` is a classic congestion control algorithm valued for its simplicity.
    /// Despite having a lower algorithmic complexity than `Cubic`,
    /// it is less efficient in terms of bandwidth usage.
    ///
    /// `CongestionControl::Cubic` represents a modern congestion control algorithm designed to
    /// be more efficient and fair compared to `CongestionControl::Reno`.
    /// It is the default choice for Linux, Windows, and macOS.
    /// `CongestionControl::Cubic` relies on double precision (`f64`) floating point operations, which may cause issues in some contexts:
    /// * Small embedded processors (such as Cortex-M0, Cortex-M1, and Cortex-M3) do not have an FPU, and floating point operations consume significant amounts of CPU time and Flash space.
    /// * Interrupt handlers should almost always avoid floating-point operations.
    /// * Kernel-mode code on desktop processors usually avoids FPU operations to reduce the penalty of saving and restoring FPU registers.
    ///
    /// In all these cases, `CongestionControl::Reno` is a better choice of congestion control algorithm.
    pub fn set_congestion_control(&mut self, congestion_control: CongestionControl) {
        use congestion::*;

        self.congestion_controller = match congestion_control {
            CongestionControl::None => AnyController::None(no_control::NoControl),

            #[cfg(feature = "socket-tcp-reno")]
            CongestionControl::Reno => AnyController::Reno(reno::Reno::new()),

            #[cfg(feature = "socket-tcp-cubic")]
            CongestionControl::Cubic => AnyController::Cubic(cubic::Cubic::new()),
        };
        // dpwarp: a controller set after the handshake starts from what it told.
        let controller = self.congestion_controller.inner_mut();
        controller.set_mss(self.remote_mss);
        controller.set_remote_window(self.remote_win_len);
    }

    /// dpwarp: the congestion window in octets: what may be in flight as far as congestion
    /// control is concerned (`usize::MAX` without congestion control).
    ///
    /// Outside recovery, the first two duplicate ACKs each let one new segment go beyond it
    /// (Limited Transmit, RFC 3042 section 2): a small window then still draws the third
    /// duplicate ACK that starts fast retransmit, instead of waiting for the timeout.
    pub fn congestion_window(&self) -> usize {
        if self.in_recovery {
            self.recovery_window
        } else {
            let limited_transmit = usize::from(self.local_rx_dup_acks.min(2)) * self.remote_mss;
            self.congestion_controller
                .inner()
                .window()
                .saturating_add(limited_transmit)
        }
    }

    /// dpwarp: the duplicate ACKs that start fast retransmit: three (RFC 5681 section 3.2),
    /// or, with fewer than four segments outstanding and nothing new that may be sent, one
    /// less than those outstanding (Early Retransmit, RFC 5827 section 3.1): with three
    /// segments out, the third can draw only two duplicates.
    fn duplicate_ack_threshold(&self) -> u8 {
        let flight = self.flight();
        let mss = self.remote_mss.max(1);
        let outstanding = flight.div_ceil(mss);
        let unsent = self.tx_buffer.len().saturating_sub(flight);
        let room = self.send_window().saturating_sub(flight);
        let nothing_new = unsent == 0 || room < mss.min(unsent);
        // One segment outstanding draws no duplicate ACK of its own (an empty ACK then is a
        // window update or a probe's answer): ER needs two (section 3.1, "oseg - 1" >= 1).
        if (2..4).contains(&outstanding) && nothing_new {
            (outstanding - 1) as u8
        } else {
            3
        }
    }

    /// dpwarp: the window from SND.UNA that may be in flight: the peer's receive window or
    /// the congestion window, whichever is smaller (RFC 5681 section 3.1: "the minimum of
    /// cwnd and rwnd").
    fn send_window(&self) -> usize {
        let cwnd = if self.tlp_pending == Some(TlpProbe::NewData) {
            // A probe of new data goes beyond the congestion window (RFC 8985 section 7.3):
            // one segment more than is in flight.
            self.flight().saturating_add(self.remote_mss)
        } else {
            self.congestion_window()
        };
        self.remote_win_len.min(cwnd)
    }

    /// dpwarp: the octets sent and not yet acknowledged (SND.NXT - SND.UNA).
    fn flight(&self) -> usize {
        if self.remote_last_seq > self.local_seq_no {
            self.remote_last_seq - self.local_seq_no
        } else {
            0
        }
    }

    /// dpwarp: arm the tail loss probe (RFC 8985 section 7.2) after new data went out or an
    /// ACK of new data left some in flight: at 2 x SRTT (at least `TLP_MIN_PTO`), unless the
    /// retransmission timer fires first. Not in fast recovery, not after a timeout until the
    /// next RTT sample, not while a probe is outstanding, and not for one segment in flight:
    /// there RFC 8985 adds the peer's worst-case delayed ACK (200 ms), which leaves the
    /// timeout first anyway (as on Linux, which adds its minimum RTO).
    fn arm_tlp(&mut self, now: Instant) {
        self.tlp_at = None;
        if !self.rtte.have_measurement
            || self.rtte.backoff > 0
            || self.in_recovery
            || self.pending_fast_retransmit
            || self.tlp_out.is_some()
            || self.flight() <= self.remote_mss
        {
            return;
        }
        let pto = Duration::from_micros(2 * u64::from(self.rtte.srtt_us())).max(TLP_MIN_PTO);
        let at = now + pto;
        if let Timer::Retransmit { expires_at, .. } = self.timer {
            if at >= expires_at {
                return;
            }
        }
        self.tlp_at = Some(at);
    }

    /// dpwarp: an ACK of new octets (SND.UNA has moved to it): it ends an outstanding
    /// probe's episode once it covers the probe, and arms the probe again for what is still
    /// in flight.
    ///
    /// No congestion response follows a probe that resent the last segment. RFC 8985
    /// section 7.4.2 asks for one unless a D-SACK (RFC 2883) shows the original arrived too,
    /// and the sender reads no D-SACK (only the receiver sends them), so every such probe
    /// would count as a repaired loss. On hosts whose stalls outlast 2 x SRTT, most probes
    /// are spurious, and the response cut the window at every round trip: over memif at MTU
    /// 9000 in a debug build, 1100 probes for 300 64 KiB Writes, the window held at its
    /// floor of two segments and 0.009 Gbit/s (tests/dpdk_memif.rs). A loss the probe did
    /// repair goes without its window reduction; one found by duplicate ACKs or SACK blocks
    /// after the probe gets the usual one (fast recovery).
    fn tlp_acked(&mut self, now: Instant) {
        // Progress: a probe due but not sent yet is not needed.
        self.tlp_pending = None;
        if self.tlp_out.is_some_and(|end| self.local_seq_no >= end) {
            self.tlp_out = None;
        }
        if self.flight() == 0 {
            self.tlp_at = None;
        } else {
            self.arm_tlp(now);
        }
    }

    /// dpwarp: no probe armed, due or outstanding (fast recovery or a timeout takes over, or
    /// the connection starts afresh).
    fn cancel_tlp(&mut self) {
        self.tlp_at = None;
        self.tlp_pending = None;
        self.tlp_out = None;
    }

    /// dpwarp: the probe timeout fired (RFC 8985 section 7.3): send one new segment if the
    /// receive window admits one, else the last segment sent again.
    fn fire_tlp(&mut self) {
        let flight = self.flight();
        if flight == 0 || !self.fast_retransmit_state() || self.in_recovery {
            return;
        }
        let unsent = self.tx_buffer.len().saturating_sub(flight);
        let room = self.window_left(self.remote_win_len);
        let new_data =
            unsent > 0 && room > 0 && (!self.nagle || unsent.min(room) >= self.remote_mss);
        self.tlp_pending = Some(if new_data {
            TlpProbe::NewData
        } else {
            TlpProbe::Retransmit(self.remote_last_seq - flight.min(self.remote_mss))
        });
        net_debug!("tail loss probe: {:?}", self.tlp_pending);
    }

    /// Return the current congestion control algorithm.
    pub fn congestion_control(&self) -> CongestionControl {
        use congestion::*;

        match self.congestion_controller {
            AnyController::None(_) => CongestionControl::None,

            #[cfg(feature = "socket-tcp-reno")]
            AnyController::Reno(_) => CongestionControl::Reno,

            #[cfg(feature = "socket-tcp-cubic")]
            AnyController::Cubic(_) => CongestionControl::Cubic,
        }
    }

    /// Register a waker for receive operations.
    ///
    /// The waker is woken on state changes that might affect the return value
    /// of `recv` method calls, such as receiving data, or the socket closing.
    ///
    /// Notes:
    ///
    /// - Only one waker can be registered at a time. If another waker was previously registered,
    ///   it is overwritten and will no longer be woken.
    /// - The Waker is woken only once. Once woken, you must register it again to receive more wakes.
    /// - "Spurious wakes" are allowed: a wake doesn't guarantee the result of `recv` has
    ///   necessarily changed.
    #[cfg(feature = "async")]
    pub fn register_recv_waker(&mut self, waker: &Waker) {
        self.rx_waker.register(waker)
    }

    /// Register a waker for send operations.
    ///
    /// The waker is woken on state changes that might affect the return value
    /// of `send` method calls, such as space becoming available in the transmit
    /// buffer, or the socket closing.
    ///
    /// Notes:
    ///
    /// - Only one waker can be registered at a time. If another waker was previously registered,
    ///   it is overwritten and will no longer be woken.
    /// - The Waker is woken only once. Once woken, you must register it again to receive more wakes.
    /// - "Spurious wakes" are allowed: a wake doesn't guarantee the result of `send` has
    ///   necessarily changed.
    #[cfg(feature = "async")]
    pub fn register_send_waker(&mut self, waker: &Waker) {
        self.tx_waker.register(waker)
    }

    /// Return the timeout duration.
    ///
    /// See also the [set_timeout](#method.set_timeout) method.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Return the ACK delay duration.
    ///
    /// See also the [set_ack_delay](#method.set_ack_delay) method.
    pub fn ack_delay(&self) -> Option<Duration> {
        self.ack_delay
    }

    /// Return whether Nagle's Algorithm is enabled.
    ///
    /// See also the [set_nagle_enabled](#method.set_nagle_enabled) method.
    pub fn nagle_enabled(&self) -> bool {
        self.nagle
    }

    /// Return the current window field value, including scaling according to RFC 1323.
    ///
    /// Used in internal calculations as well as packet generation.
    #[inline]
    fn scaled_window(&self) -> u16 {
        u16::try_from(self.rx_buffer.window() >> self.remote_win_shift).unwrap_or(u16::MAX)
    }

    /// Return the last window field value, including scaling according to RFC 1323.
    ///
    /// Used in internal calculations as well as packet generation.
    ///
    /// Unlike `remote_last_win`, we take into account new packets received (but not acknowledged)
    /// since the last window update and adjust the window length accordingly. This ensures a fair
    /// comparison between the last window length and the new window length we're going to
    /// advertise.
    #[inline]
    fn last_scaled_window(&self) -> Option<u16> {
        let last_ack = self.remote_last_ack?;
        let next_ack = self.remote_seq_no + self.rx_buffer.len();

        let last_win = (self.remote_last_win as usize) << self.remote_win_shift;
        // dpwarp: what is left of the last advertised window, 0 once the peer has sent past
        // its right edge. A peer may (it ignores the window, or lent payload and the
        // application's reads moved RCV.NXT past that edge, which the socket accepts up to its
        // buffer's capacity): `last_ack + last_win - next_ack` then panicked ("subtract
        // sequence numbers with underflow") in the next `dispatch`.
        let last_win_adjusted = (last_ack + last_win).0.wrapping_sub(next_ack.0).max(0) as usize;

        Some(u16::try_from(last_win_adjusted >> self.remote_win_shift).unwrap_or(u16::MAX))
    }

    /// Set the timeout duration.
    ///
    /// A socket with a timeout duration set will abort the connection if either of the following
    /// occurs:
    ///
    ///   * After a [connect](#method.connect) call, the remote endpoint does not respond within
    ///     the specified duration;
    ///   * After establishing a connection, there is data in the transmit buffer and the remote
    ///     endpoint exceeds the specified duration between any two packets it sends;
    ///   * After enabling [keep-alive](#method.set_keep_alive), the remote endpoint exceeds
    ///     the specified duration between any two packets it sends.
    pub fn set_timeout(&mut self, duration: Option<Duration>) {
        self.timeout = duration
    }

    /// Set the ACK delay duration.
    ///
    /// By default, the ACK delay is set to 10ms.
    pub fn set_ack_delay(&mut self, duration: Option<Duration>) {
        self.ack_delay = duration
    }

    /// Enable or disable Nagle's Algorithm.
    ///
    /// Also known as "tinygram prevention". By default, it is enabled.
    /// Disabling it is equivalent to Linux's TCP_NODELAY flag.
    ///
    /// When enabled, Nagle's Algorithm prevents sending segments smaller than MSS if
    /// there is data in flight (sent but not acknowledged). In other words, it ensures
    /// at most only one segment smaller than MSS is in flight at a time.
    ///
    /// It ensures better network utilization by preventing sending many very small packets,
    /// at the cost of increased latency in some situations, particularly when the remote peer
    /// has ACK delay enabled.
    pub fn set_nagle_enabled(&mut self, enabled: bool) {
        self.nagle = enabled
    }

    /// Return the keep-alive interval.
    ///
    /// See also the [set_keep_alive](#method.set_keep_alive) method.
    pub fn keep_alive(&self) -> Option<Duration> {
        self.keep_alive
    }

    /// Set the keep-alive interval.
    ///
    /// An idle socket with a keep-alive interval set will transmit a "keep-alive ACK" packet
    /// every time it receives no communication during that interval. As a result, three things
    /// may happen:
    ///
    ///   * The remote endpoint is fine and answers with an ACK packet.
    ///   * The remote endpoint has rebooted and answers with an RST packet.
    ///   * The remote endpoint has crashed and does not answer.
    ///
    /// The keep-alive functionality together with the timeout functionality allows to react
    /// to these error conditions.
    pub fn set_keep_alive(&mut self, interval: Option<Duration>) {
        self.keep_alive = interval;
        if self.keep_alive.is_some() {
            // If the connection is idle and we've just set the option, it would not take effect
            // until the next packet, unless we wind up the timer explicitly.
            self.timer.set_keep_alive();
        }
    }

    /// dpwarp: have the next dispatch send a keep-alive (RFC 1122 §4.2.3.6: the last octet
    /// already acknowledged, again), if the connection is established and idle (nothing in
    /// flight, no retransmission timer running); the keep-alive interval is left as set.
    /// The peer answers it with an ACK. dpwarp's workers use it to run both ends' send and
    /// receive paths while the application is quiet (`worker.warm_us`). Returns whether one
    /// is armed.
    pub fn keep_alive_now(&mut self) -> bool {
        if self.state != State::Established {
            return false;
        }
        match &mut self.timer {
            Timer::Idle { keep_alive_at } => {
                if !self.keep_alive_forced {
                    self.keep_alive_due = *keep_alive_at;
                }
                *keep_alive_at = Some(Instant::from_millis(0));
                self.keep_alive_forced = true;
                true
            }
            _ => false,
        }
    }

    /// dpwarp: give up on an idle connection (abort it, a RST) when `probes` keep-alives in
    /// a row went unanswered: the peer vanished while nothing waited on it, which neither
    /// the retransmission timer nor the user timeout sees (RFC 9293 section 3.8.4; Linux's
    /// TCP_KEEPCNT, with TCP_KEEPIDLE and TCP_KEEPINTVL both the keep-alive interval). Any
    /// segment from the peer starts the count again; keep-alives armed by `keep_alive_now`
    /// are not counted. `None`, the default, keeps sending them for good, as upstream does
    /// (upstream's `set_timeout` gives up on silence of any kind instead).
    pub fn set_keep_alive_probes(&mut self, probes: Option<u32>) {
        self.keep_alive_probes = probes;
    }

    /// dpwarp: connections this socket gave up on for unanswered keep-alives (0 or 1).
    pub fn keep_alive_timeouts(&self) -> u64 {
        self.keep_alive_timeouts
    }

    /// dpwarp: whether a keep-alive falls due with as many unanswered as allowed already.
    fn keep_alive_gave_up(&self, now: Instant) -> bool {
        self.keep_alive_probes
            .is_some_and(|limit| self.keep_alive_unanswered >= limit)
            && !self.keep_alive_forced
            && self.timer.should_keep_alive(now)
    }

    /// Return the time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    ///
    /// See also the [set_hop_limit](#method.set_hop_limit) method
    pub fn hop_limit(&self) -> Option<u8> {
        self.hop_limit
    }

    /// Set the time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    ///
    /// A socket without an explicitly set hop limit value uses the default [IANA recommended]
    /// value (64).
    ///
    /// # Panics
    ///
    /// This function panics if a hop limit value of 0 is given. See [RFC 1122 § 3.2.1.7].
    ///
    /// [IANA recommended]: https://www.iana.org/assignments/ip-parameters/ip-parameters.xhtml
    /// [RFC 1122 § 3.2.1.7]: https://tools.ietf.org/html/rfc1122#section-3.2.1.7
    pub fn set_hop_limit(&mut self, hop_limit: Option<u8>) {
        // A host MUST NOT send a datagram with a hop limit value of 0
        if let Some(0) = hop_limit {
            panic!("the time-to-live value of a packet must not be zero")
        }

        self.hop_limit = hop_limit
    }

    /// Return the listen endpoint
    #[inline]
    pub fn listen_endpoint(&self) -> IpListenEndpoint {
        self.listen_endpoint
    }

    /// Return the local endpoint, or None if not connected.
    #[inline]
    pub fn local_endpoint(&self) -> Option<IpEndpoint> {
        Some(self.tuple?.local)
    }

    /// Return the remote endpoint, or None if not connected.
    #[inline]
    pub fn remote_endpoint(&self) -> Option<IpEndpoint> {
        Some(self.tuple?.remote)
    }

    /// dpwarp: whether the socket owes its peer an ACK (data or a FIN received and not yet
    /// acknowledged). A socket in TIME-WAIT that still owes the ACK of the peer's FIN must not
    /// be dropped before its next dispatch: the peer would wait for that ACK in LAST-ACK.
    pub fn ack_pending(&self) -> bool {
        self.ack_to_transmit()
    }

    /// Return the connection state, in terms of the TCP state machine.
    #[inline]
    pub fn state(&self) -> State {
        self.state
    }

    fn reset(&mut self) {
        let rx_cap_log2 =
            mem::size_of::<usize>() * 8 - self.rx_buffer.capacity().leading_zeros() as usize;

        self.state = State::Closed;
        self.timer = Timer::new();
        let min_rto = self.rtte.min_rto;
        self.rtte = RttEstimator::default();
        self.rtte.min_rto = min_rto;
        self.assembler.clear();
        self.tx_buffer.clear();
        if let Some(r) = self.tx_records.as_mut() {
            r.clear();
        }
        self.tx_record_next = 0;
        self.rx_buffer.clear();
        self.rx_fin_received = false;
        self.listen_endpoint = IpListenEndpoint::default();
        self.tuple = None;
        self.local_seq_no = TcpSeqNumber::default();
        self.remote_seq_no = TcpSeqNumber::default();
        self.remote_last_seq = TcpSeqNumber::default();
        self.snd_max = TcpSeqNumber::default();
        self.remote_last_ack = None;
        self.remote_last_win = 0;
        self.remote_win_len = 0;
        self.remote_win_scale = None;
        self.remote_win_shift = rx_cap_log2.saturating_sub(16) as u8;
        self.remote_mss = DEFAULT_MSS;
        self.remote_last_ts = None;
        self.zwp_at = None;
        self.zwp_probes = 0;
        self.zwp_unanswered = None;
        self.rto_stall_since = None;
        self.keep_alive_unanswered = 0;
        self.keep_alive_forced = false;
        self.keep_alive_due = None;
        self.ack_delay_timer = AckDelayTimer::Idle;
        self.challenge_ack_timer = Instant::from_secs(0);
        self.local_rx_dup_acks = 0;
        self.pending_fast_retransmit = false;
        self.in_recovery = false;
        self.recovery_window = 0;
        self.recover = None;
        self.rexmit_at = None;
        self.cancel_tlp();
        // dpwarp: a fresh window for the next connection, same algorithm.
        self.set_congestion_control(self.congestion_control());

        #[cfg(feature = "async")]
        {
            self.rx_waker.wake();
            self.tx_waker.wake();
        }
    }

    /// Start listening on the given endpoint.
    ///
    /// This function returns `Err(Error::InvalidState)` if the socket was already open
    /// (see [is_open](#method.is_open)), and `Err(Error::Unaddressable)`
    /// if the port in the given endpoint is zero.
    pub fn listen<T>(&mut self, local_endpoint: T) -> Result<(), ListenError>
    where
        T: Into<IpListenEndpoint>,
    {
        let local_endpoint = local_endpoint.into();
        if local_endpoint.port == 0 {
            return Err(ListenError::Unaddressable);
        }

        if self.is_open() {
            // If we were already listening to same endpoint there is nothing to do; exit early.
            //
            // In the past listening on an socket that was already listening was an error,
            // however this makes writing an acceptor loop with multiple sockets impossible.
            // Without this early exit, if you tried to listen on a socket that's already listening you'll
            // immediately get an error. The only way around this is to abort the socket first
            // before listening again, but this means that incoming connections can actually
            // get aborted between the abort() and the next listen().
            if matches!(self.state, State::Listen) && self.listen_endpoint == local_endpoint {
                return Ok(());
            } else {
                return Err(ListenError::InvalidState);
            }
        }

        self.reset();
        self.listen_endpoint = local_endpoint;
        self.tuple = None;
        self.set_state(State::Listen);
        Ok(())
    }

    /// Connect to a given endpoint.
    ///
    /// The local port must be provided explicitly. Assuming `fn get_ephemeral_port() -> u16`
    /// allocates a port between 49152 and 65535, a connection may be established as follows:
    ///
    /// ```no_run
    /// # #[cfg(all(
    /// #     feature = "medium-ethernet",
    /// #     feature = "proto-ipv4",
    /// # ))]
    /// # {
    /// # use smoltcp::socket::tcp::{Socket, SocketBuffer};
    /// # use smoltcp::iface::Interface;
    /// # use smoltcp::wire::IpAddress;
    /// #
    /// # fn get_ephemeral_port() -> u16 {
    /// #     49152
    /// # }
    /// #
    /// # let mut socket = Socket::new(
    /// #     SocketBuffer::new(vec![0; 1200]),
    /// #     SocketBuffer::new(vec![0; 1200])
    /// # );
    /// #
    /// # let mut iface: Interface = todo!();
    /// #
    /// socket.connect(
    ///     iface.context(),
    ///     (IpAddress::v4(10, 0, 0, 1), 80),
    ///     get_ephemeral_port()
    /// ).unwrap();
    /// # }
    /// ```
    ///
    /// The local address may optionally be provided.
    ///
    /// This function returns an error if the socket was open; see [is_open](#method.is_open).
    /// It also returns an error if the local or remote port is zero, or if the remote address
    /// is unspecified.
    pub fn connect<T, U>(
        &mut self,
        cx: &mut Context,
        remote_endpoint: T,
        local_endpoint: U,
    ) -> Result<(), ConnectError>
    where
        T: Into<IpEndpoint>,
        U: Into<IpListenEndpoint>,
    {
        let remote_endpoint: IpEndpoint = remote_endpoint.into();
        let local_endpoint: IpListenEndpoint = local_endpoint.into();

        if self.is_open() {
            return Err(ConnectError::InvalidState);
        }
        if remote_endpoint.port == 0 || remote_endpoint.addr.is_unspecified() {
            return Err(ConnectError::Unaddressable);
        }
        if local_endpoint.port == 0 {
            return Err(ConnectError::Unaddressable);
        }

        // If local address is not provided, choose it automatically.
        let local_endpoint = IpEndpoint {
            addr: match local_endpoint.addr {
                Some(addr) => {
                    if addr.is_unspecified() {
                        return Err(ConnectError::Unaddressable);
                    }
                    addr
                }
                None => cx
                    .get_source_address(&remote_endpoint.addr)
                    .ok_or(ConnectError::Unaddressable)?,
            },
            port: local_endpoint.port,
        };

        if local_endpoint.addr.version() != remote_endpoint.addr.version() {
            return Err(ConnectError::Unaddressable);
        }

        self.reset();
        self.tuple = Some(Tuple {
            local: local_endpoint,
            remote: remote_endpoint,
        });
        self.set_state(State::SynSent);

        let seq = Self::random_seq_no(cx);
        self.local_seq_no = seq;
        self.remote_last_seq = seq;
        self.snd_max = seq;
        Ok(())
    }

    #[cfg(test)]
    fn random_seq_no(_cx: &mut Context) -> TcpSeqNumber {
        TcpSeqNumber(10000)
    }

    #[cfg(not(test))]
    fn random_seq_no(cx: &mut Context) -> TcpSeqNumber {
        TcpSeqNumber(cx.rand().rand_u32() as i32)
    }

    /// Close the transmit half of the full-duplex connection.
    ///
    /// Note that there is no corresponding function for the receive half of the full-duplex
    /// connection; only the remote end can close it. If you no longer wish to receive any
    /// data and would like to reuse the socket right away, use [abort](#method.abort).
    pub fn close(&mut self) {
        match self.state {
            // In the LISTEN state there is no established connection.
            State::Listen => self.set_state(State::Closed),
            // In the SYN-SENT state the remote endpoint is not yet synchronized and, upon
            // receiving an RST, will abort the connection.
            State::SynSent => self.set_state(State::Closed),
            // In the SYN-RECEIVED, ESTABLISHED and CLOSE-WAIT states the transmit half
            // of the connection is open, and needs to be explicitly closed with a FIN.
            State::SynReceived | State::Established => self.set_state(State::FinWait1),
            State::CloseWait => self.set_state(State::LastAck),
            // In the FIN-WAIT-1, FIN-WAIT-2, CLOSING, LAST-ACK, TIME-WAIT and CLOSED states,
            // the transmit half of the connection is already closed, and no further
            // action is needed.
            State::FinWait1
            | State::FinWait2
            | State::Closing
            | State::TimeWait
            | State::LastAck
            | State::Closed => (),
        }
    }

    /// Aborts the connection, if any.
    ///
    /// This function instantly closes the socket. One reset packet will be sent to the remote
    /// endpoint.
    ///
    /// In terms of the TCP state machine, the socket may be in any state and is moved to
    /// the `CLOSED` state.
    pub fn abort(&mut self) {
        self.set_state(State::Closed);
    }

    /// Return whether the socket is passively listening for incoming connections.
    ///
    /// In terms of the TCP state machine, the socket must be in the `LISTEN` state.
    #[inline]
    pub fn is_listening(&self) -> bool {
        match self.state {
            State::Listen => true,
            _ => false,
        }
    }

    /// Return whether the socket is open.
    ///
    /// This function returns true if the socket will process incoming or dispatch outgoing
    /// packets. Note that this does not mean that it is possible to send or receive data through
    /// the socket; for that, use [can_send](#method.can_send) or [can_recv](#method.can_recv).
    ///
    /// In terms of the TCP state machine, the socket must not be in the `CLOSED`
    /// or `TIME-WAIT` states.
    #[inline]
    pub fn is_open(&self) -> bool {
        match self.state {
            State::Closed => false,
            State::TimeWait => false,
            _ => true,
        }
    }

    /// Return whether a connection is active.
    ///
    /// This function returns true if the socket is actively exchanging packets with
    /// a remote endpoint. Note that this does not mean that it is possible to send or receive
    /// data through the socket; for that, use [can_send](#method.can_send) or
    /// [can_recv](#method.can_recv).
    ///
    /// If a connection is established, [abort](#method.close) will send a reset to
    /// the remote endpoint.
    ///
    /// In terms of the TCP state machine, the socket must not be in the `CLOSED`, `TIME-WAIT`,
    /// or `LISTEN` state.
    #[inline]
    pub fn is_active(&self) -> bool {
        match self.state {
            State::Closed => false,
            State::TimeWait => false,
            State::Listen => false,
            _ => true,
        }
    }

    /// Return whether the transmit half of the full-duplex connection is open.
    ///
    /// This function returns true if it's possible to send data and have it arrive
    /// to the remote endpoint. However, it does not make any guarantees about the state
    /// of the transmit buffer, and even if it returns true, [send](#method.send) may
    /// not be able to enqueue any octets.
    ///
    /// In terms of the TCP state machine, the socket must be in the `ESTABLISHED` or
    /// `CLOSE-WAIT` state.
    #[inline]
    pub fn may_send(&self) -> bool {
        match self.state {
            State::Established => true,
            // In CLOSE-WAIT, the remote endpoint has closed our receive half of the connection
            // but we still can transmit indefinitely.
            State::CloseWait => true,
            _ => false,
        }
    }

    /// Return whether the receive half of the full-duplex connection is open.
    ///
    /// This function returns true if it's possible to receive data from the remote endpoint.
    /// It will return true while there is data in the receive buffer, and if there isn't,
    /// as long as the remote endpoint has not closed the connection.
    ///
    /// In terms of the TCP state machine, the socket must be in the `ESTABLISHED`,
    /// `FIN-WAIT-1`, or `FIN-WAIT-2` state, or have data in the receive buffer instead.
    #[inline]
    pub fn may_recv(&self) -> bool {
        match self.state {
            State::Established => true,
            // In FIN-WAIT-1/2, we have closed our transmit half of the connection but
            // we still can receive indefinitely.
            State::FinWait1 | State::FinWait2 => true,
            // If we have something in the receive buffer, we can receive that.
            _ if !self.rx_buffer.is_empty() => true,
            _ => false,
        }
    }

    /// Check whether the transmit half of the full-duplex connection is open
    /// (see [may_send](#method.may_send)), and the transmit buffer is not full.
    #[inline]
    pub fn can_send(&self) -> bool {
        if !self.may_send() {
            return false;
        }

        !self.tx_buffer.is_full()
    }

    /// Return the maximum number of bytes inside the recv buffer.
    #[inline]
    pub fn recv_capacity(&self) -> usize {
        self.rx_buffer.capacity()
    }

    /// Return the maximum number of bytes inside the transmit buffer.
    #[inline]
    pub fn send_capacity(&self) -> usize {
        self.tx_buffer.capacity()
    }

    /// Check whether the receive half of the full-duplex connection buffer is open
    /// (see [may_recv](#method.may_recv)), and the receive buffer is not empty.
    #[inline]
    pub fn can_recv(&self) -> bool {
        if !self.may_recv() {
            return false;
        }

        !self.rx_buffer.is_empty()
    }

    fn send_impl<'b, F, R>(&'b mut self, f: F) -> Result<R, SendError>
    where
        F: FnOnce(&'b mut SocketBuffer<'a>) -> (usize, R),
    {
        if !self.may_send() {
            return Err(SendError::InvalidState);
        }

        let old_length = self.tx_buffer.len();
        let (size, result) = f(&mut self.tx_buffer);
        if size > 0 {
            // The connection might have been idle for a long time, and so remote_last_ts
            // would be far in the past. Unless we clear it here, we'll abort the connection
            // down over in dispatch() by erroneously detecting it as timed out.
            if old_length == 0 {
                self.remote_last_ts = None
            }

            #[cfg(any(test, feature = "verbose"))]
            tcp_trace!(
                "tx buffer: enqueueing {} octets (now {})",
                size,
                old_length + size
            );
        }
        Ok(result)
    }

    /// Call `f` with the largest contiguous slice of octets in the transmit buffer,
    /// and enqueue the amount of elements returned by `f`.
    ///
    /// This function returns `Err(Error::Illegal)` if the transmit half of
    /// the connection is not open; see [may_send](#method.may_send).
    pub fn send<'b, F, R>(&'b mut self, f: F) -> Result<R, SendError>
    where
        F: FnOnce(&'b mut [u8]) -> (usize, R),
    {
        self.send_impl(|tx_buffer| tx_buffer.enqueue_many_with(f))
    }

    /// Enqueue a sequence of octets to be sent, and fill it from a slice.
    ///
    /// This function returns the amount of octets actually enqueued, which is limited
    /// by the amount of free space in the transmit buffer; down to zero.
    ///
    /// See also [send](#method.send).
    pub fn send_slice(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.send_impl(|tx_buffer| {
            let size = tx_buffer.enqueue_slice(data);
            (size, size)
        })
    }

    fn recv_error_check(&mut self) -> Result<(), RecvError> {
        // We may have received some data inside the initial SYN, but until the connection
        // is fully open we must not dequeue any data, as it may be overwritten by e.g.
        // another (stale) SYN. (We do not support TCP Fast Open.)
        if !self.may_recv() {
            if self.rx_fin_received {
                return Err(RecvError::Finished);
            }
            return Err(RecvError::InvalidState);
        }

        Ok(())
    }

    fn recv_impl<'b, F, R>(&'b mut self, f: F) -> Result<R, RecvError>
    where
        F: FnOnce(&'b mut SocketBuffer<'a>) -> (usize, R),
    {
        self.recv_error_check()?;

        let _old_length = self.rx_buffer.len();
        let (size, result) = f(&mut self.rx_buffer);
        self.remote_seq_no += size;
        if size > 0 {
            #[cfg(any(test, feature = "verbose"))]
            tcp_trace!(
                "rx buffer: dequeueing {} octets (now {})",
                size,
                _old_length - size
            );
        }
        Ok(result)
    }

    /// Call `f` with the largest contiguous slice of octets in the receive buffer,
    /// and dequeue the amount of elements returned by `f`.
    ///
    /// This function errors if the receive half of the connection is not open.
    ///
    /// If the receive half has been gracefully closed (with a FIN packet), `Err(Error::Finished)`
    /// is returned. In this case, the previously received data is guaranteed to be complete.
    ///
    /// In all other cases, `Err(Error::Illegal)` is returned and previously received data (if any)
    /// may be incomplete (truncated).
    pub fn recv<'b, F, R>(&'b mut self, f: F) -> Result<R, RecvError>
    where
        F: FnOnce(&'b mut [u8]) -> (usize, R),
    {
        self.recv_impl(|rx_buffer| rx_buffer.dequeue_many_with(f))
    }

    /// Dequeue a sequence of received octets, and fill a slice from it.
    ///
    /// This function returns the amount of octets actually dequeued, which is limited
    /// by the amount of occupied space in the receive buffer; down to zero.
    ///
    /// See also [recv](#method.recv).
    pub fn recv_slice(&mut self, data: &mut [u8]) -> Result<usize, RecvError> {
        self.recv_impl(|rx_buffer| {
            let size = rx_buffer.dequeue_slice(data);
            (size, size)
        })
    }

    /// Peek at a sequence of received octets without removing them from
    /// the receive buffer, and return a pointer to it.
    ///
    /// This function otherwise behaves identically to [recv](#method.recv).
    pub fn peek(&mut self, size: usize) -> Result<&[u8], RecvError> {
        self.recv_error_check()?;

        let buffer = self.rx_buffer.get_allocated(0, size);
        if !buffer.is_empty() {
            #[cfg(any(test, feature = "verbose"))]
            tcp_trace!("rx buffer: peeking at {} octets", buffer.len());
        }
        Ok(buffer)
    }

    /// Peek at a sequence of received octets without removing them from
    /// the receive buffer, and fill a slice from it.
    ///
    /// This function otherwise behaves identically to [recv_slice](#method.recv_slice).
    pub fn peek_slice(&mut self, data: &mut [u8]) -> Result<usize, RecvError> {
        Ok(self.rx_buffer.read_allocated(0, data))
    }

    /// Return the amount of octets queued in the transmit buffer.
    ///
    /// Note that the Berkeley sockets interface does not have an equivalent of this API.
    pub fn send_queue(&self) -> usize {
        self.tx_buffer.len()
    }

    /// dpwarp: the octets queued in the transmit buffer that have not been sent yet (those
    /// beyond SND.NXT; after a retransmission timeout, also the ones to be sent again).
    ///
    /// The next segment `dispatch` emits starts with the first of these octets.
    pub fn send_unsent(&self) -> usize {
        let in_flight = if self.remote_last_seq > self.local_seq_no {
            self.remote_last_seq - self.local_seq_no
        } else {
            0
        };
        self.tx_buffer.len().saturating_sub(in_flight)
    }

    /// dpwarp: the transmit buffer's storage (its address and length) and the index in it
    /// where the next octets queued will be written; the free space runs from there, around
    /// the end, for `send_capacity() - send_queue()` octets. A sender whose segments are
    /// sent by reference (`TxToken::consume_split`) uses this to write only where no frame
    /// still points.
    pub fn tx_ring_layout(&self) -> (*const u8, usize, usize) {
        let (base, write_at) = self.tx_buffer.write_layout();
        (base, self.tx_buffer.capacity(), write_at)
    }

    /// dpwarp: segments this socket retransmitted since it was created: (fast retransmits,
    /// those started by duplicate ACKs, partial ACKs or SACK blocks; retransmission
    /// timeouts, each of which resends from SND.UNA). A loss-free link shows (0, 0).
    pub fn retransmissions(&self) -> (u64, u64) {
        (self.fast_retransmits, self.timeout_retransmits)
    }

    /// dpwarp: tail loss probes sent since the socket was created (RFC 8985 section 7; new
    /// data or the last segment again).
    pub fn loss_probes(&self) -> u64 {
        self.tail_loss_probes
    }

    /// dpwarp: the smallest retransmission timeout (default 50 ms; kept across `reset`). It
    /// must outlast the peer's delayed ACK and the stalls of the hosts on the path, or
    /// timeouts fire early and resend all in flight. Clamped to 1 ms ..= 10 s.
    pub fn set_rto_min(&mut self, rto_min: Duration) {
        let us = u32::try_from(rto_min.total_micros()).unwrap_or(u32::MAX);
        self.rtte.min_rto = us.clamp(1_000, RTTE_MAX_RTO);
    }

    /// dpwarp: the maximum segment size the peer announced (the default 536 until its SYN
    /// said otherwise). A segment carries at most the smaller of this and the local MSS.
    pub fn remote_mss(&self) -> usize {
        self.remote_mss
    }

    /// dpwarp: cut segments at record ends (RFC 5044 Appendix A: every segment begins with an
    /// FPDU header). With records on, the sender marks the end of each record it queues with
    /// [`Socket::push_tx_record_end`]; `dispatch` then ends each segment at the last record
    /// end that fits the MSS and the window (a record larger than a segment is split as
    /// usual), so a transmit buffer holding many records is sent as many aligned segments,
    /// retransmissions included.
    pub fn set_tx_records(&mut self, on: bool) {
        self.tx_records = on.then(alloc::collections::VecDeque::new);
        self.tx_record_next = 0;
    }

    /// dpwarp: the octets queued so far end a record (see [`Socket::set_tx_records`]).
    pub fn push_tx_record_end(&mut self) {
        self.push_tx_record_end_before(0);
    }

    /// dpwarp: a record ends `back` octets before the end of what is queued (for a sender that
    /// queued several records with one `send`).
    pub fn push_tx_record_end_before(&mut self, back: usize) {
        let Some(queued) = self.tx_buffer.len().checked_sub(back) else {
            return;
        };
        let end = self.local_seq_no + queued;
        if let Some(r) = self.tx_records.as_mut() {
            if r.back().is_some_and(|&b| b >= end) || r.len() >= MAX_TX_RECORDS {
                return;
            }
            r.push_back(end);
        }
    }

    /// dpwarp: the largest segment size no larger than `size` that starts at SND.NXT and ends
    /// on a record end, or `size` when no record end falls inside it.
    fn cut_at_record(&mut self, size: usize) -> usize {
        self.cut_at_record_from(self.remote_last_seq, size)
    }

    /// dpwarp: [`Socket::cut_at_record`] for a segment starting at `start` (at or after
    /// SND.NXT: the next frames of a segment the device cuts).
    fn cut_at_record_from(&mut self, start: TcpSeqNumber, size: usize) -> usize {
        let una = self.local_seq_no;
        let Some(r) = self.tx_records.as_mut() else {
            return size;
        };
        let mut next = self.tx_record_next;
        while r.front().is_some_and(|&e| e <= una) {
            r.pop_front();
            next = next.saturating_sub(1);
        }
        // The ends are ascending. The first one past the start: where the last cut left off,
        // unless SND.NXT went back (a retransmission) or ran far ahead; then a search.
        next = next.min(r.len());
        if next > 0 && r[next - 1] > start {
            next = r.partition_point(|&e| e <= start);
        }
        let next = first_end_past(r, next, start);
        self.tx_record_next = next;
        // The last end at or before the limit, if after the start (a segment usually holds
        // a few records: walk, and search when it holds many).
        let last = first_end_past(r, next, start + size);
        match last.checked_sub(1).filter(|&i| i >= next).map(|i| r[i]) {
            Some(e) if e > start => e - start,
            _ => size,
        }
    }

    /// dpwarp: segmentation offload. Given the first frame's worth of a segment (`first`
    /// octets at SND.NXT, offset `offset` into the transmit buffer, as `dispatch` cut it), the
    /// octets of the whole segment when the device cuts up to `frames` frames of `frame`
    /// octets from it: the frames the per-segment path would send one after the other, as
    /// long as each but the last is a full frame, the window (`win_limit`), the congestion
    /// window and `max_len` admit them, and they lie in one piece of the ring (a frame
    /// across the ring's wrap ends the segment before it). Each frame ends where
    /// [`Socket::cut_at_record`] would end it, so segments cut at record ends stay so.
    fn gso_extend(
        &mut self,
        frames: usize,
        offset: usize,
        first: usize,
        frame: usize,
        win_limit: usize,
        max_len: usize,
    ) -> usize {
        let unsent = self.tx_buffer.len().saturating_sub(offset);
        if frames < 2 || frame == 0 || first != frame || unsent <= frame || win_limit <= frame {
            return first;
        }
        let contiguous = self.tx_buffer.get_allocated(offset, unsent).len();
        // The per-segment path cuts each segment by the window (receive and congestion) and
        // the data queued; what it does not know (the IPv4 length limit, the ring's wrap)
        // ends the segment before a frame it would cut differently, never inside one.
        let cut_by = win_limit.min(unsent);
        let fits = max_len.min(contiguous);
        let (mut total, mut n) = (first, 1);
        while n < frames && total < cut_by {
            let want = (cut_by - total).min(frame);
            let piece = self
                .cut_at_record_from(self.remote_last_seq + total, want)
                .min(want);
            if piece == 0 || total + piece > fits {
                break;
            }
            total += piece;
            n += 1;
            if piece < frame {
                break;
            }
        }
        total
    }

    /// dpwarp: the octets the peer's receive window and the congestion window still admit
    /// beyond SND.NXT, i.e. the most the next segment may carry as far as the windows are
    /// concerned.
    pub fn send_window_left(&self) -> usize {
        self.window_left(self.send_window())
    }

    /// dpwarp: the octets a window of `window` from SND.UNA still admits beyond SND.NXT (0 if
    /// the peer shrank its window below what was sent).
    fn window_left(&self, window: usize) -> usize {
        let right_edge = self.local_seq_no + window;
        if right_edge > self.remote_last_seq {
            right_edge - self.remote_last_seq
        } else {
            0
        }
    }

    /// Return the amount of octets queued in the receive buffer. This value can be larger than
    /// the slice read by the next `recv` or `peek` call because it includes all queued octets,
    /// and not only the octets that may be returned as a contiguous slice.
    ///
    /// Note that the Berkeley sockets interface does not have an equivalent of this API.
    pub fn recv_queue(&self) -> usize {
        self.rx_buffer.len()
    }

    fn set_state(&mut self, state: State) {
        if self.state != state {
            tcp_trace!("state={}=>{}", self.state, state);
        }

        self.state = state;

        #[cfg(feature = "async")]
        {
            // Wake all tasks waiting. Even if we haven't received/sent data, this
            // is needed because return values of functions may change depending on the state.
            // For example, a pending read has to fail with an error if the socket is closed.
            self.rx_waker.wake();
            self.tx_waker.wake();
        }
    }

    pub(crate) fn reply(ip_repr: &IpRepr, repr: &TcpRepr) -> (IpRepr, TcpRepr<'static>) {
        let reply_repr = TcpRepr {
            src_port: repr.dst_port,
            dst_port: repr.src_port,
            control: TcpControl::None,
            seq_number: TcpSeqNumber(0),
            ack_number: None,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None, None, None],
            timestamp: None,
            payload: &[],
        };
        let ip_reply_repr = IpRepr::new(
            ip_repr.dst_addr(),
            ip_repr.src_addr(),
            IpProtocol::Tcp,
            reply_repr.buffer_len(),
            64,
        );
        (ip_reply_repr, reply_repr)
    }

    pub(crate) fn rst_reply(ip_repr: &IpRepr, repr: &TcpRepr) -> (IpRepr, TcpRepr<'static>) {
        debug_assert!(repr.control != TcpControl::Rst);

        let (ip_reply_repr, mut reply_repr) = Self::reply(ip_repr, repr);

        // See https://www.snellman.net/blog/archive/2016-02-01-tcp-rst/ for explanation
        // of why we sometimes send an RST and sometimes an RST|ACK
        reply_repr.control = TcpControl::Rst;
        reply_repr.seq_number = repr.ack_number.unwrap_or_default();
        if repr.control == TcpControl::Syn && repr.ack_number.is_none() {
            reply_repr.ack_number = Some(repr.seq_number + repr.segment_len());
        }

        (ip_reply_repr, reply_repr)
    }

    fn ack_reply(&mut self, ip_repr: &IpRepr, repr: &TcpRepr) -> (IpRepr, TcpRepr<'static>) {
        let (mut ip_reply_repr, mut reply_repr) = Self::reply(ip_repr, repr);
        reply_repr.timestamp = repr
            .timestamp
            .and_then(|tcp_ts| tcp_ts.generate_reply(self.tsval_generator));

        // From RFC 793:
        // [...] an empty acknowledgment segment containing the current send-sequence number
        // and an acknowledgment indicating the next sequence number expected
        // to be received.
        reply_repr.seq_number = self.remote_last_seq;
        reply_repr.ack_number = Some(self.remote_seq_no + self.rx_buffer.len());
        self.remote_last_ack = reply_repr.ack_number;

        // From RFC 1323:
        // The window field [...] of every outgoing segment, with the exception of SYN
        // segments, is right-shifted by [advertised scale value] bits[...]
        reply_repr.window_len = self.scaled_window();
        self.remote_last_win = reply_repr.window_len;

        // If the remote supports selective acknowledgement, add the option to the outgoing
        // segment.
        if self.remote_has_sack {
            net_debug!("sending sACK option with current assembler ranges");

            // RFC 2018: The first SACK block (i.e., the one immediately following the kind and
            // length fields in the option) MUST specify the contiguous block of data containing
            // the segment which triggered this ACK, unless that segment advanced the
            // Acknowledgment Number field in the header.
            reply_repr.sack_ranges[0] = None;

            // dpwarp: the assembler's ranges are offsets from the ACK number; they are added to
            // it as sequence numbers (upstream 25d4f7c5). 0.12 added them to the ACK number
            // taken as an unsigned integer, which overflowed (a panic where overflow is
            // checked, as in debug builds) for ACK numbers in the upper half of the sequence
            // space, where half of all connections start.
            let ack = reply_repr.ack_number.unwrap_or(TcpSeqNumber(0));
            let assembler = &self.assembler;
            let ranges = || {
                assembler
                    .iter_data(0)
                    .map(move |(left, right)| (ack + left, ack + right))
            };
            let wire = |(left, right): (TcpSeqNumber, TcpSeqNumber)| (left.0 as u32, right.0 as u32);

            if let Some(last_seg_seq) = self.local_rx_last_seq {
                reply_repr.sack_ranges[0] = ranges()
                    .find(|&(left, right)| left <= last_seg_seq && right >= last_seg_seq)
                    .map(wire);
            }

            if reply_repr.sack_ranges[0].is_none() {
                // The matching segment was removed from the assembler, meaning the acknowledgement
                // number has advanced, or there was no previous sACK.
                //
                // While the RFC says we SHOULD keep a list of reported sACK ranges, and iterate
                // through those, that is currently infeasible. Instead, we offer the range with
                // the lowest sequence number (if one exists) to hint at what segments would
                // most quickly advance the acknowledgement number.
                reply_repr.sack_ranges[0] = ranges().next().map(wire);
            }

            // dpwarp: fill the other two blocks too, lowest ranges first (RFC 2018 section
            // 4: "as many distinct SACK blocks as possible"). A sender then learns of up to
            // three runs held per ACK instead of one: the lowest holes, which it repairs
            // first, are the ones it learns about.
            let first = reply_repr.sack_ranges[0];
            let mut more = ranges().map(|r| Some(wire(r))).filter(|r| *r != first);
            if first.is_some() {
                reply_repr.sack_ranges[1] = more.next().flatten();
                reply_repr.sack_ranges[2] = more.next().flatten();
            }
        }

        // Since the sACK option may have changed the length of the payload, update that.
        ip_reply_repr.set_payload_len(reply_repr.buffer_len());
        (ip_reply_repr, reply_repr)
    }

    fn challenge_ack_reply(
        &mut self,
        cx: &mut Context,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        if cx.now() < self.challenge_ack_timer {
            return None;
        }

        // Rate-limit to 1 per second max.
        self.challenge_ack_timer = cx.now() + Duration::from_secs(1);

        Some(self.ack_reply(ip_repr, repr))
    }

    pub(crate) fn accepts(&self, _cx: &mut Context, ip_repr: &IpRepr, repr: &TcpRepr) -> bool {
        if self.state == State::Closed {
            return false;
        }

        // If we're still listening for SYNs and the packet has an ACK, it cannot
        // be destined to this socket, but another one may well listen on the same
        // local endpoint.
        if self.state == State::Listen && repr.ack_number.is_some() {
            return false;
        }

        if let Some(tuple) = &self.tuple {
            // Reject packets not matching the 4-tuple
            ip_repr.dst_addr() == tuple.local.addr
                && repr.dst_port == tuple.local.port
                && ip_repr.src_addr() == tuple.remote.addr
                && repr.src_port == tuple.remote.port
        } else {
            // We're listening, reject packets not matching the listen endpoint.
            let addr_ok = match self.listen_endpoint.addr {
                Some(addr) => ip_repr.dst_addr() == addr,
                None => true,
            };
            addr_ok && repr.dst_port != 0 && repr.dst_port == self.listen_endpoint.port
        }
    }

    pub(crate) fn process(
        &mut self,
        cx: &mut Context,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        debug_assert!(self.accepts(cx, ip_repr, repr));
        if self.rx_ahead_broken() {
            return None;
        }

        // dpwarp: header prediction, the socket's half (4.3BSD Reno's `tcp_input`, its second
        // case): in ESTABLISHED, a segment that carries the next octets expected, fits the
        // window, acknowledges nothing new (SND.UNA, no SACK block) and carries no flag but
        // ACK and PSH, outside recovery. Every check and update of the full path below comes
        // to the same for it, and is made here directly: the acceptable-ACK, window and state
        // tables are skipped. The receiver of a stream takes nearly all its segments so.
        if self.state == State::Established
            && matches!(repr.control, TcpControl::None | TcpControl::Psh)
            && repr.ack_number == Some(self.local_seq_no)
            && !repr.payload.is_empty()
            && repr.seq_number == self.remote_seq_no + self.rx_buffer.len()
            && repr.payload.len() <= self.rx_buffer.window()
            && !self.in_recovery
            && repr.sack_ranges == [None; 3]
            // Unless the interface has it off (`Interface::set_header_prediction`).
            && cx.header_prediction
        {
            let ack = self.local_seq_no;
            let now = cx.now();
            self.local_rx_last_seq = Some(repr.seq_number);
            self.rtte.on_ack(now, ack);
            // (ESTABLISHED, no flag): an ACK of everything outstanding resets the timer to
            // idle, as any ACK does while no retransmission is timed.
            if !self.timer.is_retransmit() || self.remote_last_seq == ack {
                self.timer.set_for_idle(now, self.keep_alive);
            }
            self.remote_last_ts = Some(now);
            self.keep_alive_unanswered = 0;
            let scale = self.remote_win_scale.unwrap_or(0);
            let win = (repr.window_len as usize) << (scale as usize);
            self.remote_win_len = win;
            self.congestion_controller
                .inner_mut()
                .set_remote_window(win);
            // Not a duplicate ACK (it carries data): the count restarts.
            self.local_rx_dup_acks = 0;
            self.local_rx_last_ack = Some(ack);
            if self.recover.is_some_and(|r| ack > r) {
                self.recover = None;
            }
            if self.remote_last_seq < self.local_seq_no {
                self.remote_last_seq = self.local_seq_no;
            }
            if let Some(timestamp) = repr.timestamp {
                self.last_remote_tsval = timestamp.tsval;
            }
            #[cfg(test)]
            FAST_PATH_TAKEN.with(|c| c.set(c.get() + 1));
            return self.process_payload(cx, ip_repr, repr, repr.payload, 0);
        }

        // Consider how much the sequence number space differs from the transmit buffer space.
        let (sent_syn, sent_fin) = match self.state {
            // In SYN-SENT or SYN-RECEIVED, we've just sent a SYN.
            State::SynSent | State::SynReceived => (true, false),
            // In FIN-WAIT-1, LAST-ACK, or CLOSING, we've just sent a FIN.
            State::FinWait1 | State::LastAck | State::Closing => (false, true),
            // In all other states we've already got acknowledgements for
            // all of the control flags we sent.
            _ => (false, false),
        };
        let control_len = (sent_syn as usize) + (sent_fin as usize);

        // Reject unacceptable acknowledgements.
        match (self.state, repr.control, repr.ack_number) {
            // An RST received in response to initial SYN is acceptable if it acknowledges
            // the initial SYN.
            (State::SynSent, TcpControl::Rst, None) => {
                net_debug!("unacceptable RST (expecting RST|ACK) in response to initial SYN");
                return None;
            }
            (State::SynSent, TcpControl::Rst, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    net_debug!("unacceptable RST|ACK in response to initial SYN");
                    return None;
                }
            }
            // Any other RST need only have a valid sequence number.
            (_, TcpControl::Rst, _) => (),
            // The initial SYN cannot contain an acknowledgement.
            (State::Listen, _, None) => (),
            // This case is handled in `accepts()`.
            (State::Listen, _, Some(_)) => unreachable!(),
            // SYN|ACK in the SYN-SENT state must have the exact ACK number.
            (State::SynSent, TcpControl::Syn, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    net_debug!("unacceptable SYN|ACK in response to initial SYN");
                    return Some(Self::rst_reply(ip_repr, repr));
                }
            }
            // TCP simultaneous open.
            // This is required by RFC 9293, which states "A TCP implementation MUST support
            // simultaneous open attempts (MUST-10)."
            (State::SynSent, TcpControl::Syn, None) => (),
            // ACKs in the SYN-SENT state are invalid.
            (State::SynSent, TcpControl::None, Some(ack_number)) => {
                // If the sequence number matches, ignore it instead of RSTing.
                // I'm not sure why, I think it may be a workaround for broken TCP
                // servers, or a defense against reordering. Either way, if Linux
                // does it, we do too.
                if ack_number == self.local_seq_no + 1 {
                    net_debug!(
                        "expecting a SYN|ACK, received an ACK with the right ack_number, ignoring."
                    );
                    return None;
                }

                net_debug!(
                    "expecting a SYN|ACK, received an ACK with the wrong ack_number, sending RST."
                );
                return Some(Self::rst_reply(ip_repr, repr));
            }
            // Anything else in the SYN-SENT state is invalid.
            (State::SynSent, _, _) => {
                net_debug!("expecting a SYN|ACK");
                return None;
            }
            // Every packet after the initial SYN must be an acknowledgement.
            (_, _, None) => {
                net_debug!("expecting an ACK");
                return None;
            }
            // ACK in the SYN-RECEIVED state must have the exact ACK number, or we RST it.
            (State::SynReceived, _, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    net_debug!("unacceptable ACK in response to SYN|ACK");
                    return Some(Self::rst_reply(ip_repr, repr));
                }
            }
            // Every acknowledgement must be for transmitted but unacknowledged data.
            (_, _, Some(ack_number)) => {
                let unacknowledged = self.tx_buffer.len() + control_len;

                // Acceptable ACK range (both inclusive)
                let mut ack_min = self.local_seq_no;
                // dpwarp: at most what was sent (SND.MAX), not what the buffer holds: an ACK
                // of queued octets never sent must not take them out of the buffer, nor
                // carry its segment's text in (RFC 9293 section 3.10.7.4). Upstream bounds
                // it by the buffer.
                let sent_max = self.snd_max.max(self.remote_last_seq);
                let ack_max = (self.local_seq_no + unacknowledged).min(sent_max);

                // If we have sent a SYN, it MUST be acknowledged.
                if sent_syn {
                    ack_min += 1;
                }

                if ack_number < ack_min {
                    net_debug!(
                        "duplicate ACK ({} not in {}...{})",
                        ack_number,
                        ack_min,
                        ack_max
                    );
                    return None;
                }

                if ack_number > ack_max {
                    net_debug!(
                        "unacceptable ACK ({} not in {}...{})",
                        ack_number,
                        ack_min,
                        ack_max
                    );
                    return self.challenge_ack_reply(cx, ip_repr, repr);
                }
            }
        }

        let window_start = self.remote_seq_no + self.rx_buffer.len();
        let window_end = self.remote_seq_no + self.rx_buffer.capacity();
        let segment_start = repr.seq_number;
        let segment_end = repr.seq_number + repr.payload.len();

        let (payload, payload_offset) = match self.state {
            // In LISTEN and SYN-SENT states, we have not yet synchronized with the remote end.
            State::Listen | State::SynSent => (&[][..], 0),
            _ => {
                // https://www.rfc-editor.org/rfc/rfc9293.html#name-segment-acceptability-tests
                let segment_in_window = match (
                    segment_start == segment_end,
                    window_start == window_end,
                ) {
                    (true, _) if segment_end == window_start - 1 => {
                        net_debug!(
                            "received a keep-alive or window probe packet, will send an ACK"
                        );
                        false
                    }
                    (true, true) => {
                        if window_start == segment_start {
                            true
                        } else {
                            net_debug!(
                                "zero-length segment not inside zero-length window, will send an ACK."
                            );
                            false
                        }
                    }
                    (true, false) => {
                        if window_start <= segment_start && segment_start < window_end {
                            true
                        } else {
                            net_debug!("zero-length segment not inside window, will send an ACK.");
                            false
                        }
                    }
                    (false, true) => {
                        net_debug!(
                            "non-zero-length segment with zero receive window, will only send an ACK"
                        );
                        false
                    }
                    (false, false) => {
                        if (window_start <= segment_start && segment_start < window_end)
                            || (window_start < segment_end && segment_end <= window_end)
                        {
                            true
                        } else {
                            net_debug!(
                                "segment not in receive window ({}..{} not intersecting {}..{}), will send challenge ACK",
                                segment_start,
                                segment_end,
                                window_start,
                                window_end
                            );
                            false
                        }
                    }
                };

                if segment_in_window {
                    let overlap_start = window_start.max(segment_start);
                    let overlap_end = window_end.min(segment_end);

                    // the checks done above imply this.
                    debug_assert!(overlap_start <= overlap_end);

                    self.local_rx_last_seq = Some(repr.seq_number);

                    (
                        &repr.payload[overlap_start - segment_start..overlap_end - segment_start],
                        overlap_start - window_start,
                    )
                } else {
                    // If we're in the TIME-WAIT state, restart the TIME-WAIT timeout, since
                    // the remote end may not have realized we've closed the connection.
                    if self.state == State::TimeWait {
                        self.timer.set_for_close(cx.now());
                    }

                    // dpwarp (upstream #1162): a segment carrying data is ACKed every time,
                    // not at most once a second: it is the peer's retransmission of data whose
                    // ACK was lost (or a window probe), and the peer sends it from its timer,
                    // never in answer to our ACK, so it cannot feed an ACK loop (RFC 9293
                    // section 3.10.7.4: "an acknowledgment should be sent in reply"). With
                    // the limit, one lost ACK stalled the connection for a second or more:
                    // the peer's timeouts backed off while every retransmission went
                    // unanswered (seen in tests/dpdk_soak.rs).
                    if !repr.payload.is_empty()
                        && !matches!(repr.control, TcpControl::Syn | TcpControl::Rst)
                    {
                        let (mut ip_reply, mut reply) = self.ack_reply(ip_repr, repr);
                        // dpwarp: a D-SACK (RFC 2883 section 4): when all of the segment was
                        // received before, the first SACK block reports it, and the others
                        // follow. The sender learns its retransmission was not needed (Linux
                        // then undoes the window reduction it made for it).
                        if self.remote_has_sack && segment_end <= window_start {
                            let dsack = (segment_start.0 as u32, segment_end.0 as u32);
                            let [first, second, _] = reply.sack_ranges;
                            reply.sack_ranges = [Some(dsack), first, second];
                            // The option grew: the IP payload with it, or the header would be
                            // written past the buffer sized for it.
                            ip_reply.set_payload_len(reply.buffer_len());
                        }
                        return Some((ip_reply, reply));
                    }
                    return self.challenge_ack_reply(cx, ip_repr, repr);
                }
            }
        };
        // dpwarp: RFC 9293 section 3.10.7.4, seventh step: in CLOSE-WAIT, CLOSING, LAST-ACK
        // and TIME-WAIT the peer's FIN has been received, so "ignore the segment text".
        // Upstream placed octets past the FIN in the receive buffer, where `recv` (and a
        // loan) delivered them after the end of the stream (found by dpwarp's fuzz
        // target `tcp_ingress`).
        let (payload, payload_offset) = if matches!(
            self.state,
            State::CloseWait | State::Closing | State::LastAck | State::TimeWait
        ) {
            (&[][..], 0)
        } else {
            (payload, payload_offset)
        };

        // Compute the amount of acknowledged octets, removing the SYN and FIN bits
        // from the sequence space.
        let mut ack_len = 0;
        let mut ack_of_fin = false;
        let mut ack_all = false;
        if repr.control != TcpControl::Rst {
            if let Some(ack_number) = repr.ack_number {
                // Sequence number corresponding to the first byte in `tx_buffer`.
                // This normally equals `local_seq_no`, but is 1 higher if we have sent a SYN,
                // as the SYN occupies 1 sequence number "before" the data.
                let tx_buffer_start_seq = self.local_seq_no + (sent_syn as usize);

                if ack_number >= tx_buffer_start_seq {
                    ack_len = ack_number - tx_buffer_start_seq;

                    // We could've sent data before the FIN, so only remove FIN from the sequence
                    // space if all of that data is acknowledged.
                    if sent_fin && self.tx_buffer.len() + 1 == ack_len {
                        ack_len -= 1;
                        tcp_trace!("received ACK of FIN");
                        ack_of_fin = true;
                    }

                    ack_all = self.remote_last_seq == ack_number
                }

                self.rtte.on_ack(cx.now(), ack_number);
            }
        }

        // Disregard control flags we don't care about or shouldn't act on yet.
        let mut control = repr.control;
        control = control.quash_psh();

        // If a FIN is received at the end of the current segment, but
        // we have a hole in the assembler before the current segment, disregard this FIN.
        if control == TcpControl::Fin && window_start < segment_start {
            tcp_trace!("ignoring FIN because we don't have full data yet. window_start={} segment_start={}", window_start, segment_start);
            control = TcpControl::None;
        }

        // Validate and update the state.
        match (self.state, control) {
            // RSTs are not accepted in the LISTEN state.
            (State::Listen, TcpControl::Rst) => return None,

            // RSTs in SYN-RECEIVED flip the socket back to the LISTEN state.
            // Here we need to additionally check `listen_endpoint`, because we want to make sure
            // that SYN-RECEIVED was actually converted from the LISTEN state (another possible
            // reason is TCP simultaneous open).
            (State::SynReceived, TcpControl::Rst) if self.listen_endpoint.port != 0 => {
                tcp_trace!("received RST");
                self.tuple = None;
                self.set_state(State::Listen);
                return None;
            }

            // RSTs in any other state close the socket.
            (_, TcpControl::Rst) => {
                tcp_trace!("received RST");
                self.set_state(State::Closed);
                self.tuple = None;
                return None;
            }

            // SYN packets in the LISTEN state change it to SYN-RECEIVED.
            (State::Listen, TcpControl::Syn) => {
                tcp_trace!("received SYN");
                if let Some(max_seg_size) = repr.max_seg_size {
                    if max_seg_size == 0 {
                        tcp_trace!("received SYNACK with zero MSS, ignoring");
                        return None;
                    }
                    self.congestion_controller
                        .inner_mut()
                        .set_mss(max_seg_size as usize);
                    self.remote_mss = max_seg_size as usize
                }

                self.tuple = Some(Tuple {
                    local: IpEndpoint::new(ip_repr.dst_addr(), repr.dst_port),
                    remote: IpEndpoint::new(ip_repr.src_addr(), repr.src_port),
                });
                self.local_seq_no = Self::random_seq_no(cx);
                self.remote_seq_no = repr.seq_number + 1;
                self.remote_last_seq = self.local_seq_no;
                self.snd_max = self.local_seq_no;
                self.remote_has_sack = repr.sack_permitted;
                self.remote_win_scale = repr.window_scale;
                // Remote doesn't support window scaling, don't do it.
                if self.remote_win_scale.is_none() {
                    self.remote_win_shift = 0;
                }
                // Remote doesn't support timestamping, don't do it.
                if repr.timestamp.is_none() {
                    self.tsval_generator = None;
                }
                self.set_state(State::SynReceived);
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // ACK packets in the SYN-RECEIVED state change it to ESTABLISHED.
            (State::SynReceived, TcpControl::None) => {
                self.set_state(State::Established);
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // FIN packets in the SYN-RECEIVED state change it to CLOSE-WAIT.
            // It's not obvious from RFC 793 that this is permitted, but
            // 7th and 8th steps in the "SEGMENT ARRIVES" event describe this behavior.
            (State::SynReceived, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                self.set_state(State::CloseWait);
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // SYN|ACK packets in the SYN-SENT state change it to ESTABLISHED.
            // SYN packets in the SYN-SENT state change it to SYN-RECEIVED.
            (State::SynSent, TcpControl::Syn) => {
                if repr.ack_number.is_some() {
                    tcp_trace!("received SYN|ACK");
                } else {
                    tcp_trace!("received SYN");
                }
                if let Some(max_seg_size) = repr.max_seg_size {
                    if max_seg_size == 0 {
                        tcp_trace!("received SYNACK with zero MSS, ignoring");
                        return None;
                    }
                    self.remote_mss = max_seg_size as usize;
                    self.congestion_controller
                        .inner_mut()
                        .set_mss(self.remote_mss);
                }

                self.remote_seq_no = repr.seq_number + 1;
                self.remote_last_seq = self.local_seq_no + 1;
                self.remote_last_ack = Some(repr.seq_number);
                self.remote_has_sack = repr.sack_permitted;
                self.remote_win_scale = repr.window_scale;
                // Remote doesn't support window scaling, don't do it.
                if self.remote_win_scale.is_none() {
                    self.remote_win_shift = 0;
                }
                // Remote doesn't support timestamping, don't do it.
                if repr.timestamp.is_none() {
                    self.tsval_generator = None;
                }

                if repr.ack_number.is_some() {
                    self.set_state(State::Established);
                } else {
                    self.set_state(State::SynReceived);
                }
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // ACK packets in ESTABLISHED state reset the retransmit timer,
            // except for duplicate ACK packets which preserve it.
            // dpwarp: RFC 6298 (5.2) an ACK of all outstanding data stops the timer; (5.3)
            // an ACK of some new data restarts it (upstream 13774ff2), so a recovery that
            // is making progress is not cut short by a timeout.
            (State::Established, TcpControl::None) => {
                if !self.timer.is_retransmit() || ack_all {
                    self.timer.set_for_idle(cx.now(), self.keep_alive);
                } else if ack_len > 0 {
                    self.timer
                        .restart_retransmit(cx.now(), self.rtte.retransmission_timeout());
                }
            }

            // FIN packets in ESTABLISHED state indicate the remote side has closed.
            (State::Established, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                self.set_state(State::CloseWait);
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // ACK packets in FIN-WAIT-1 state change it to FIN-WAIT-2, if we've already
            // sent everything in the transmit buffer. If not, they reset the retransmit timer.
            (State::FinWait1, TcpControl::None) => {
                if ack_of_fin {
                    self.set_state(State::FinWait2);
                }
                if ack_all {
                    self.timer.set_for_idle(cx.now(), self.keep_alive);
                }
            }

            // FIN packets in FIN-WAIT-1 state change it to CLOSING, or to TIME-WAIT
            // if they also acknowledge our FIN.
            (State::FinWait1, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                // dpwarp: the ACK of a FIN that ends our close goes at once, not after the
                // delayed-ACK timer (as Linux's tcp_fin in FIN-WAIT-1 and FIN-WAIT-2): no
                // data of ours can come to carry it, and the peer waits for it in LAST-ACK.
                // An application that exits once its close is done (dpwarp's dataplane stops
                // when its closing sockets are in TIME-WAIT) would otherwise take the ACK along.
                self.ack_delay_timer = AckDelayTimer::Immediate;
                if ack_of_fin {
                    self.set_state(State::TimeWait);
                    self.timer.set_for_close(cx.now());
                } else {
                    self.set_state(State::Closing);
                    self.timer.set_for_idle(cx.now(), self.keep_alive);
                }
            }

            // Data packets in FIN-WAIT-2 reset the idle timer.
            (State::FinWait2, TcpControl::None) => {
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // FIN packets in FIN-WAIT-2 state change it to TIME-WAIT.
            (State::FinWait2, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                // dpwarp: acknowledged at once, as in FIN-WAIT-1 above.
                self.ack_delay_timer = AckDelayTimer::Immediate;
                self.set_state(State::TimeWait);
                self.timer.set_for_close(cx.now());
            }

            // ACK packets in CLOSING state change it to TIME-WAIT.
            (State::Closing, TcpControl::None) => {
                if ack_of_fin {
                    self.set_state(State::TimeWait);
                    self.timer.set_for_close(cx.now());
                } else {
                    self.timer.set_for_idle(cx.now(), self.keep_alive);
                }
            }

            // ACK packets in CLOSE-WAIT state reset the retransmit timer.
            (State::CloseWait, TcpControl::None) => {
                self.timer.set_for_idle(cx.now(), self.keep_alive);
            }

            // ACK packets in LAST-ACK state change it to CLOSED.
            (State::LastAck, TcpControl::None) => {
                if ack_of_fin {
                    // Clear the remote endpoint, or we'll send an RST there.
                    self.set_state(State::Closed);
                    self.tuple = None;
                } else {
                    self.timer.set_for_idle(cx.now(), self.keep_alive);
                }
            }

            _ => {
                net_debug!("unexpected packet {}", repr);
                return None;
            }
        }

        // Update remote state.
        self.remote_last_ts = Some(cx.now());
        self.keep_alive_unanswered = 0;

        // RFC 1323: The window field (SEG.WND) in the header of every incoming segment, with the
        // exception of SYN segments, is left-shifted by Snd.Wind.Scale bits before updating SND.WND.
        let scale = match repr.control {
            TcpControl::Syn => 0,
            _ => self.remote_win_scale.unwrap_or(0),
        };
        let new_remote_win_len = (repr.window_len as usize) << (scale as usize);
        let is_window_update = new_remote_win_len != self.remote_win_len;
        self.remote_win_len = new_remote_win_len;

        self.congestion_controller
            .inner_mut()
            .set_remote_window(new_remote_win_len);

        if ack_len > 0 {
            // Dequeue acknowledged octets.
            debug_assert!(self.tx_buffer.len() >= ack_len);
            tcp_trace!(
                "tx buffer: dequeueing {} octets (now {})",
                ack_len,
                self.tx_buffer.len() - ack_len
            );
            self.tx_buffer.dequeue_allocated(ack_len);

            // There's new room available in tx_buffer, wake the waiting task if any.
            #[cfg(feature = "async")]
            self.tx_waker.wake();
        }

        if let Some(ack_number) = repr.ack_number {
            // TODO: When flow control is implemented,
            // refractor the following block within that implementation

            // Detect and react to duplicate ACKs by:
            // 1. Check if duplicate ACK and change self.local_rx_dup_acks accordingly
            // 2. If exactly 3 duplicate ACKs received, set for fast retransmit
            // 3. Update the last received ACK (self.local_rx_last_ack)
            match self.local_rx_last_ack {
                // Duplicate ACK if payload empty and ACK doesn't move send window ->
                // Increment duplicate ACK count and set for retransmit if we just received
                // the third duplicate ACK
                Some(last_rx_ack)
                    if repr.payload.is_empty()
                        && last_rx_ack == ack_number
                        && ack_number < self.remote_last_seq
                        && !is_window_update =>
                {
                    // Increment duplicate ACK count
                    self.local_rx_dup_acks = self.local_rx_dup_acks.saturating_add(1);

                    net_debug!(
                        "received duplicate ACK for seq {} (duplicate nr {}{})",
                        ack_number,
                        self.local_rx_dup_acks,
                        if self.local_rx_dup_acks == u8::MAX {
                            "+"
                        } else {
                            ""
                        }
                    );

                    // dpwarp: the third duplicate ACK retransmits the segment at SND.UNA at
                    // once, even while new data waits, and enters recovery until all that
                    // was sent so far is acknowledged (RFC 5681 section 3.2 steps 2-4, RFC
                    // 6582 section 3.2 step 2). Upstream 0.12 armed a timer that dispatch
                    // only looked at when nothing new could be sent, and then resent all
                    // in flight; the next new segment turned it into a full timeout.
                    // After a timeout, duplicate ACKs below "recover" may only echo octets
                    // sent twice; RFC 6582 section 4's ACK heuristic still takes them for a
                    // new loss when the last ACK moved SND.UNA by at most 4 segments (a
                    // receiver that already held the octets would have jumped further).
                    let new_loss = self.recover.is_none_or(|r| ack_number > r)
                        || self.last_ack_advance <= 4 * self.remote_mss;
                    let threshold = self.duplicate_ack_threshold();
                    let dup_acks = self.local_rx_dup_acks;
                    if (threshold..=3).contains(&dup_acks) && !self.in_recovery && new_loss {
                        self.pending_fast_retransmit = true;
                        self.enter_recovery(cx.now());
                        net_debug!("started fast retransmit");
                    } else if self.in_recovery {
                        // RFC 6582 section 3.2 step 4: each further duplicate ACK means a
                        // segment left the network; the window lets one more go.
                        self.recovery_window =
                            self.recovery_window.saturating_add(self.remote_mss);
                    }
                }
                // No duplicate ACK -> Reset state and update last received ACK
                _ => {
                    if self.local_rx_dup_acks > 0 {
                        self.local_rx_dup_acks = 0;
                        net_debug!("reset duplicate ACK count");
                    }
                    self.local_rx_last_ack = Some(ack_number);
                    if ack_len > 0 {
                        self.last_ack_advance = ack_len;
                    }
                    // dpwarp: in recovery, an ACK short of the recovery point means the
                    // next segment was lost too: retransmit it now, without waiting for
                    // three more duplicates (NewReno's partial ACK, RFC 6582 section 3.2
                    // step 5). One that reaches the point ends recovery (step 6).
                    let passed = self.recover.is_some_and(|r| ack_number >= r);
                    let flight = self.flight();
                    if self.in_recovery && passed {
                        self.in_recovery = false;
                        self.pending_fast_retransmit = false;
                        self.rexmit_at = None;
                        self.congestion_controller
                            .inner_mut()
                            .on_recovery_end(flight.saturating_sub(ack_len));
                    } else if self.in_recovery && ack_len > 0 {
                        self.pending_fast_retransmit = true;
                        // Step 5: deflate by what was acknowledged, add back one segment
                        // if it was at least one.
                        let add_back = if ack_len >= self.remote_mss {
                            self.remote_mss
                        } else {
                            0
                        };
                        self.recovery_window = self
                            .recovery_window
                            .saturating_sub(ack_len)
                            .saturating_add(add_back)
                            .max(self.remote_mss);
                        net_debug!("partial ACK for seq {}: retransmitting", ack_number);
                    } else if ack_len > 0 {
                        self.congestion_controller.inner_mut().on_ack(
                            cx.now(),
                            ack_len,
                            flight,
                            &self.rtte,
                        );
                    }
                    if self.recover.is_some_and(|r| ack_number > r) {
                        self.recover = None;
                    }
                }
            };
            // We've processed everything in the incoming segment, so advance the local
            // sequence number past it.
            self.local_seq_no = ack_number;
            // During retransmission, if an earlier segment got lost but later was
            // successfully received, self.local_seq_no can move past self.remote_last_seq.
            // Do not attempt to retransmit the latter segments; not only this is pointless
            // in theory but also impossible in practice, since they have been already
            // deallocated from the buffer.
            if ack_len > 0 {
                self.tlp_acked(cx.now());
            }
            if self.remote_last_seq < self.local_seq_no {
                self.remote_last_seq = self.local_seq_no
            }
            self.note_sack(cx.now(), repr);
        }

        // update last remote tsval
        if let Some(timestamp) = repr.timestamp {
            self.last_remote_tsval = timestamp.tsval;
        }

        self.process_payload(cx, ip_repr, repr, payload, payload_offset)
    }

    /// dpwarp: the part of `process` that takes an acceptable segment's payload (`payload`,
    /// trimmed to the window, at `payload_offset` past RCV.NXT): the lent payload, the
    /// assembler and receive buffer, the delayed ACK. Shared with the header-predicted path.
    fn process_payload(
        &mut self,
        cx: &mut Context,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
        payload: &[u8],
        payload_offset: usize,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        // dpwarp: in-order payload with nothing buffered is lent from the segment (the octets
        // are received and read at once: RCV.NXT moves as in `recv_impl`).
        if self.rx_lend
            && self.rx_lent.is_none()
            && cx.rx_payload_in_frame
            && payload_offset == 0
            && !payload.is_empty()
            && self.rx_buffer.is_empty()
            && self.assembler.is_empty()
        {
            self.rx_lent = Some(RxLent {
                addr: payload.as_ptr() as usize,
                len: payload.len(),
            });
            self.remote_seq_no += payload.len();
            // Nothing to buffer; the ACK is due as for data read by `recv`.
            if let Some(ack_delay) = self.ack_delay {
                if self.ack_to_transmit() {
                    self.ack_delay_timer = match self.ack_delay_timer {
                        AckDelayTimer::Idle => AckDelayTimer::Waiting(cx.now() + ack_delay),
                        AckDelayTimer::Waiting(_) if self.immediate_ack_to_transmit() => {
                            AckDelayTimer::Immediate
                        }
                        t => t,
                    };
                }
            }
            return None;
        }

        let payload_len = payload.len();
        if payload_len == 0 {
            return None;
        }

        let assembler_was_empty = self.assembler.is_empty();

        // Try adding payload octets to the assembler.
        let Ok(contig_len) = self
            .assembler
            .add_then_remove_front(payload_offset, payload_len)
        else {
            net_debug!(
                "assembler: too many holes to add {} octets at offset {}",
                payload_len,
                payload_offset
            );
            // dpwarp: still acknowledge at once, as for any out-of-order segment (RFC 5681
            // section 4.2): the duplicate ACK and its SACK block tell the sender what is
            // missing; upstream sent nothing.
            return Some(self.ack_reply(ip_repr, repr));
        };

        // Place payload octets into the buffer.
        tcp_trace!(
            "rx buffer: receiving {} octets at offset {}",
            payload_len,
            payload_offset
        );
        // dpwarp: payload behind a hole goes to the consumer first (set_rx_peek_ahead); with a
        // hole before it nothing becomes contiguous here, so the buffered length is still
        // what `recv` returns before the hole.
        if self.rx_peek_ahead && payload_offset > 0 && cx.rx_payload_in_frame {
            self.rx_ahead = Some(RxAhead {
                payload: RxLent {
                    addr: payload.as_ptr() as usize,
                    len: payload_len,
                },
                ahead: self.rx_buffer.len() + payload_offset,
            });
            self.rx_ahead_unsettled = Some((payload_offset, payload_len));
        } else {
            let len_written = self.rx_buffer.write_unallocated(payload_offset, payload);
            debug_assert!(len_written == payload_len);
        }


        if contig_len != 0 {
            // Enqueue the contiguous data octets in front of the buffer.
            tcp_trace!(
                "rx buffer: enqueueing {} octets (now {})",
                contig_len,
                self.rx_buffer.len() + contig_len
            );
            self.rx_buffer.enqueue_unallocated(contig_len);

            // There's new data in rx_buffer, notify waiting task if any.
            #[cfg(feature = "async")]
            self.rx_waker.wake();
        }

        if !self.assembler.is_empty() {
            // Print the ranges recorded in the assembler.
            tcp_trace!("assembler: {}", self.assembler);
        }

        // Handle delayed acks
        if let Some(ack_delay) = self.ack_delay {
            if self.ack_to_transmit() {
                self.ack_delay_timer = match self.ack_delay_timer {
                    AckDelayTimer::Idle => {
                        tcp_trace!("starting delayed ack timer");
                        AckDelayTimer::Waiting(cx.now() + ack_delay)
                    }
                    AckDelayTimer::Waiting(_) if self.immediate_ack_to_transmit() => {
                        tcp_trace!("delayed ack timer already started, forcing expiry");
                        AckDelayTimer::Immediate
                    }
                    timer @ AckDelayTimer::Waiting(_) => {
                        tcp_trace!("waiting until delayed ack timer expires");
                        timer
                    }
                    AckDelayTimer::Immediate => {
                        tcp_trace!("delayed ack timer already force-expired");
                        AckDelayTimer::Immediate
                    }
                };
            }
        }

        // Per RFC 5681, we should send an immediate ACK when either:
        //  1) an out-of-order segment is received, or
        //  2) a segment arrives that fills in all or part of a gap in sequence space.
        if !self.assembler.is_empty() || !assembler_was_empty {
            // Note that we change the transmitter state here.
            // This is fine because smoltcp assumes that it can always transmit zero or one
            // packets for every packet it receives.
            tcp_trace!("ACKing incoming segment");
            Some(self.ack_reply(ip_repr, repr))
        } else {
            None
        }
    }

    /// dpwarp: whether the user timeout ran out, checked as a retransmission timeout or a
    /// zero-window probe falls due (only those show that octets wait on the peer, so an idle
    /// connection, or one whose application stopped polling for a while, is never given up
    /// on). Retransmitting: counted from the first retransmission timeout since SND.UNA last
    /// moved. Probing a zero window: from the first probe no segment has answered since, so
    /// that a peer that answers the probes is never given up on (RFC 9293 section 3.8.6.1,
    /// MUST-37).
    fn user_timed_out(&mut self, now: Instant) -> bool {
        // Nothing timed (every segment but those of a stall): two loads.
        if self.rto_stall_since.is_none() && self.zwp_unanswered.is_none() {
            return false;
        }
        let Some(limit) = self.user_timeout else {
            return false;
        };
        if self.una_seen != self.local_seq_no || self.tx_buffer.is_empty() {
            self.rto_stall_since = None;
        }
        let rto_due = self.timer.should_retransmit(now).is_some();
        let retransmitting = rto_due && self.rto_stall_since.is_some_and(|t| now >= t + limit);
        if let (Some(probe), Some(heard)) = (self.zwp_unanswered, self.remote_last_ts) {
            if heard >= probe {
                self.zwp_unanswered = None;
            }
        }
        let probe_due = self.zwp_at.is_some_and(|at| now >= at);
        let probing = probe_due && self.zwp_unanswered.is_some_and(|t| now >= t + limit);
        retransmitting || probing
    }

    /// dpwarp: give up on the connection (abort it, a RST) when octets have waited this long
    /// for the peer to acknowledge any of them: R2 of RFC 9293 section 3.8.3 (MUST-20, R2 at
    /// least 100 s), what Linux's TCP_USER_TIMEOUT sets. An idle connection is never given
    /// up on, nor one whose peer answers zero-window probes. Checked when the socket
    /// dispatches (its retransmission and persist timers wake it); `None`, the default,
    /// retransmits for good, as upstream does.
    pub fn set_user_timeout(&mut self, timeout: Option<Duration>) {
        self.user_timeout = timeout;
    }

    /// dpwarp: connections this socket gave up on at the user timeout (0 or 1).
    pub fn user_timeouts(&self) -> u64 {
        self.user_timeouts
    }

    fn timed_out(&self, timestamp: Instant) -> bool {
        match (self.remote_last_ts, self.timeout) {
            (Some(remote_last_ts), Some(timeout)) => timestamp >= remote_last_ts + timeout,
            (_, _) => false,
        }
    }

    /// dpwarp: whether `seq_to_transmit` is false for a reason cheaper to see: in ESTABLISHED
    /// or CLOSE-WAIT (no SYN or FIN to send) with every queued octet sent and no fast
    /// retransmission or tail loss probe retransmission pending, there is nothing it could
    /// send (the window admits no octet past SND.UNA + the queue). False when unsure.
    fn sent_everything(&self, cx: &mut Context) -> bool {
        let sure = matches!(self.state, State::Established | State::CloseWait)
            && !self.pending_fast_retransmit
            && !matches!(self.tlp_pending, Some(TlpProbe::Retransmit(_)))
            && self.remote_last_seq == self.local_seq_no + self.tx_buffer.len();
        debug_assert!(!sure || !self.seq_to_transmit(cx));
        sure
    }

    fn seq_to_transmit(&self, cx: &mut Context) -> bool {
        // dpwarp: a fast retransmit goes out whatever the window and Nagle say: its octets
        // were sent (and admitted by the window) before.
        if self.pending_fast_retransmit && self.fast_retransmit_state() {
            return true;
        }
        if matches!(self.tlp_pending, Some(TlpProbe::Retransmit(_))) && self.fast_retransmit_state()
        {
            return true;
        }
        let ip_header_len = match self.tuple.unwrap().local.addr {
            #[cfg(feature = "proto-ipv4")]
            IpAddress::Ipv4(_) => crate::wire::IPV4_HEADER_LEN,
            #[cfg(feature = "proto-ipv6")]
            IpAddress::Ipv6(_) => crate::wire::IPV6_HEADER_LEN,
        };

        // Max segment size we're able to send due to MTU limitations.
        let local_mss = cx.ip_mtu() - ip_header_len - TCP_HEADER_LEN;

        // The effective max segment size, taking into account our and remote's limits.
        let effective_mss = local_mss.min(self.remote_mss);

        // Have we sent data that hasn't been ACKed yet?
        let data_in_flight = self.remote_last_seq != self.local_seq_no;

        // If we want to send a SYN and we haven't done so, do it!
        if matches!(self.state, State::SynSent | State::SynReceived) && !data_in_flight {
            return true;
        }

        // max sequence number we can send.
        // dpwarp: the congestion window limits what is in flight from SND.UNA, like the
        // receive window (0.12 compared it with what the next dispatch could add).
        let max_send_seq =
            self.local_seq_no + core::cmp::min(self.send_window(), self.tx_buffer.len());

        // Max amount of octets we can send.
        let max_send = if max_send_seq >= self.remote_last_seq {
            max_send_seq - self.remote_last_seq
        } else {
            0
        };

        // Can we send at least 1 octet?
        let mut can_send = max_send != 0;
        // Can we send at least 1 full segment?
        let can_send_full = max_send >= effective_mss;

        // Do we have to send a FIN?
        let want_fin = match self.state {
            State::FinWait1 => true,
            State::Closing => true,
            State::LastAck => true,
            _ => false,
        };

        // If we're applying the Nagle algorithm we don't want to send more
        // until one of:
        // * There's no data in flight
        // * We can send a full packet
        // * We have all the data we'll ever send (we're closing send)
        if self.nagle && data_in_flight && !can_send_full && !want_fin {
            can_send = false;
        }

        // Can we actually send the FIN? We can send it if:
        // 1. We have unsent data that fits in the remote window.
        // 2. We have no unsent data.
        // This condition matches only if #2, because #1 is already covered by can_data and we're ORing them.
        let can_fin = want_fin && self.remote_last_seq == self.local_seq_no + self.tx_buffer.len();

        can_send || can_fin
    }

    /// dpwarp: loss seen in the peer's SACK blocks (RFC 2018), which smoltcp 0.12 did not
    /// read. Two cases that otherwise wait for the retransmission timeout:
    /// - more than two segments' worth held above SND.UNA: the segment at SND.UNA is lost
    ///   (RFC 6675 section 4, `IsLost` with DupThresh 3). This covers a hole that only
    ///   comes to the front when recovery ends (NewReno's full ACK), when no further
    ///   duplicate ACK will come because the peer already holds everything after it;
    /// - octets sent after our fast retransmission of SND.UNA held while SND.UNA is still
    ///   asked for: on a path that keeps order, that retransmission was lost (what RACK,
    ///   RFC 8985 section 6.2, finds by time).
    ///
    /// Either way the segment at SND.UNA goes again at once. Only the blocks of this ACK
    /// are looked at (no scoreboard).
    fn note_sack(&mut self, now: Instant, repr: &TcpRepr) {
        let una = self.local_seq_no;
        if self.pending_fast_retransmit
            || self.remote_last_seq <= una
            || !self.fast_retransmit_state()
        {
            return;
        }
        // Blocks count only within what was sent: a peer cannot make us retransmit by
        // claiming octets we never sent.
        let end = self.remote_last_seq;
        let mut held = 0;
        let mut highest = una;
        for &(left, right) in repr.sack_ranges.iter().flatten() {
            let (left, right) = (TcpSeqNumber(left as i32), TcpSeqNumber(right as i32));
            if left > una && right > left && right <= end {
                held += right - left;
                if right > highest {
                    highest = right;
                }
            }
        }
        if held == 0 {
            return;
        }
        let lost = match self.rexmit_at {
            Some((at, sent_up_to)) if at == una => highest > sent_up_to,
            _ => held > 2 * self.remote_mss,
        };
        if lost {
            net_debug!("SACK: {} octets held above seq {}: retransmitting", held, una);
            self.pending_fast_retransmit = true;
            if !self.in_recovery {
                self.enter_recovery(now);
            }
        }
    }

    /// dpwarp: fast recovery until what was sent so far is acknowledged: "recover" becomes
    /// SND.NXT, or stays where a timeout left it if that is higher (RFC 6582 sections 3.2
    /// and 4: after a timeout SND.NXT was rewound below what had been sent).
    ///
    /// The congestion controller takes the loss (ssthresh and its window after recovery,
    /// RFC 5681 section 3.2 step 2); the window during recovery starts at that plus the
    /// three segments the duplicate ACKs say have left the network (step 3).
    fn enter_recovery(&mut self, now: Instant) {
        let flight = self.flight();
        self.congestion_controller
            .inner_mut()
            .on_congestion(now, flight);
        self.recovery_window = self
            .congestion_controller
            .inner()
            .window()
            .saturating_add(3 * self.remote_mss);
        self.in_recovery = true;
        self.raise_recover(self.remote_last_seq);
        // RFC 8985 section 7.4: fast recovery takes over from the probe.
        self.cancel_tlp();
    }

    /// dpwarp: "recover" becomes `seq`, unless it is already higher.
    /// dpwarp: the persist timer (RFC 9293 section 3.8.6.1, MUST-36: a sender probes a
    /// zero window, or a lost window update leaves both ends waiting for good; SHLD-29: at
    /// exponentially growing intervals). Runs while the peer's window is zero with octets
    /// to send and none in flight (after a retransmission timeout too, which takes back
    /// what was in flight); armed one retransmission timeout after that began, doubled
    /// after each probe, at most `PERSIST_MAX`. Returns whether a probe is due now.
    /// Upstream smoltcp sends no probes.
    fn persist(&mut self, now: Instant) -> bool {
        let shut = self.remote_win_len == 0
            && self.remote_last_seq == self.local_seq_no
            && !self.tx_buffer.is_empty()
            && matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait1 | State::LastAck
            );
        if !shut {
            if self.zwp_at.is_some() {
                self.zwp_at = None;
                self.zwp_probes = 0;
                self.zwp_unanswered = None;
            }
            return false;
        }
        match self.zwp_at {
            None => {
                self.zwp_at = Some(now + self.persist_interval());
                false
            }
            Some(at) => now >= at,
        }
    }

    /// dpwarp: the next persist interval: the retransmission timeout, doubled for each
    /// probe sent since the window shut, at most `PERSIST_MAX`.
    fn persist_interval(&self) -> Duration {
        let rto = self.rtte.retransmission_timeout().total_micros();
        let doubled = rto.saturating_mul(1 << self.zwp_probes.min(16));
        Duration::from_micros(doubled).min(PERSIST_MAX)
    }

    /// dpwarp: zero-window probes sent since the socket was created.
    pub fn window_probes(&self) -> u64 {
        self.window_probes
    }

    fn raise_recover(&mut self, seq: TcpSeqNumber) {
        if self.recover.is_none_or(|r| seq > r) {
            self.recover = Some(seq);
        }
    }

    /// dpwarp: whether the state lets a pending fast retransmit carry data.
    fn fast_retransmit_state(&self) -> bool {
        !self.tx_buffer.is_empty()
            && matches!(
                self.state,
                State::Established
                    | State::FinWait1
                    | State::Closing
                    | State::CloseWait
                    | State::LastAck
            )
    }

    fn delayed_ack_expired(&self, timestamp: Instant) -> bool {
        match self.ack_delay_timer {
            AckDelayTimer::Idle => true,
            AckDelayTimer::Waiting(t) => t <= timestamp,
            AckDelayTimer::Immediate => true,
        }
    }

    fn ack_to_transmit(&self) -> bool {
        if let Some(remote_last_ack) = self.remote_last_ack {
            remote_last_ack < self.remote_seq_no + self.rx_buffer.len()
        } else {
            false
        }
    }

    /// Return whether to send ACK immediately due to the amount of unacknowledged data.
    ///
    /// RFC 9293 states "An ACK SHOULD be generated for at least every second full-sized segment or
    /// 2*RMSS bytes of new data (where RMSS is the MSS specified by the TCP endpoint receiving the
    /// segments to be acknowledged, or the default value if not specified) (SHLD-19)."
    ///
    /// Note that the RFC above only says "at least 2*RMSS bytes", which is not a hard requirement.
    /// In practice, we follow the Linux kernel's empirical value of sending an ACK for every RMSS
    /// byte of new data. For details, see
    /// <https://elixir.bootlin.com/linux/v6.11.4/source/net/ipv4/tcp_input.c#L5747>.
    fn immediate_ack_to_transmit(&self) -> bool {
        if let Some(remote_last_ack) = self.remote_last_ack {
            remote_last_ack + self.remote_mss < self.remote_seq_no + self.rx_buffer.len()
        } else {
            false
        }
    }

    /// Return whether we should send ACK immediately due to significant window updates.
    ///
    /// ACKs with significant window updates should be sent immediately to let the sender know that
    /// more data can be sent. According to the Linux kernel implementation, "significant" means
    /// doubling the receive window. The Linux kernel implementation can be found at
    /// <https://elixir.bootlin.com/linux/v6.9.9/source/net/ipv4/tcp.c#L1472>.
    fn window_to_update(&self) -> bool {
        match self.state {
            State::SynSent
            | State::SynReceived
            | State::Established
            | State::FinWait1
            | State::FinWait2 => {
                let new_win = self.scaled_window();
                if let Some(last_win) = self.last_scaled_window() {
                    new_win > 0 && new_win / 2 >= last_win
                } else {
                    false
                }
            }
            _ => false,
        }
    }

    pub(crate) fn dispatch<F, E>(&mut self, cx: &mut Context, emit: F) -> Result<(), E>
    where
        F: FnOnce(&mut Context, (IpRepr, TcpRepr)) -> Result<(), E>,
    {
        if self.tuple.is_none() {
            return Ok(());
        }

        if self.remote_last_ts.is_none() {
            // We get here in exactly two cases:
            //  1) This socket just transitioned into SYN-SENT.
            //  2) This socket had an empty transmit buffer and some data was added there.
            // Both are similar in that the socket has been quiet for an indefinite
            // period of time, it isn't anymore, and the local endpoint is talking.
            // So, we start counting the timeout not from the last received packet
            // but from the first transmitted one.
            self.remote_last_ts = Some(cx.now());
        }

        // Check if any state needs to be changed because of a timer.
        if self.timed_out(cx.now()) {
            // If a timeout expires, we should abort the connection.
            net_debug!("timeout exceeded");
            self.set_state(State::Closed);
        } else if self.user_timed_out(cx.now()) {
            // dpwarp: RFC 9293 section 3.8.3 (MUST-20): the peer took nothing for R2.
            net_debug!("user timeout: octets unacknowledged for {:?}", self.user_timeout);
            self.user_timeouts += 1;
            self.set_state(State::Closed);
        } else if self.keep_alive_gave_up(cx.now()) {
            // dpwarp: RFC 9293 section 3.8.4: an idle peer answered none of the last
            // keep-alives.
            net_debug!(
                "keep-alive: {} unanswered; giving up",
                self.keep_alive_unanswered
            );
            self.keep_alive_timeouts += 1;
            self.set_state(State::Closed);
        } else if let Some(retransmit_delta) = self.timer.should_retransmit(cx.now()) {
            // dpwarp: an expired timer retransmits even while new data waits (upstream
            // d84a8980; 0.12 waited until nothing new could be sent).
            // If a retransmit timer expired, we should resend data starting at the last ACK.
            net_debug!("retransmitting at t+{}", retransmit_delta);

            // Rewind "last sequence number sent", as if we never
            // had sent them. This will cause all data in the queue
            // to be sent again.
            let sent_up_to = self.remote_last_seq;
            let flight = self.flight();
            self.remote_last_seq = self.local_seq_no;
            // dpwarp: a timeout ends fast recovery, and none starts again for what was
            // sent before it (RFC 6582 section 4: "recover" is the highest sent).
            self.raise_recover(sent_up_to);
            self.pending_fast_retransmit = false;
            self.in_recovery = false;
            self.rexmit_at = None;
            self.cancel_tlp();
            self.timeout_retransmits += 1;
            // dpwarp: the user timeout counts from here (`user_timed_out`), while SND.UNA
            // stays where it is now.
            if self.rto_stall_since.is_none() || self.una_seen != self.local_seq_no {
                self.rto_stall_since = Some(cx.now());
                self.una_seen = self.local_seq_no;
            }

            // Clear the `should_retransmit` state. If we can't retransmit right
            // now for whatever reason (like zero window), this avoids an
            // infinite polling loop where `poll_at` returns `Now` but `dispatch`
            // can't actually do anything.
            self.timer.set_for_idle(cx.now(), self.keep_alive);

            // Inform RTTE, so that it can avoid bogus measurements.
            let repeated = self.rtte.backoff > 0;
            self.rtte.on_rto();

            // dpwarp: the loss window (RFC 5681 section 3.1), from what was in flight.
            self.congestion_controller
                .inner_mut()
                .on_timeout(cx.now(), flight, repeated);
        }

        // dpwarp: the tail loss probe's timeout (RFC 8985 section 7.3).
        if self.tlp_at.is_some_and(|at| at <= cx.now()) {
            self.tlp_at = None;
            self.fire_tlp();
        }

        let probe_due = self.persist(cx.now());

        // Decide whether we're sending a packet.
        if self.seq_to_transmit(cx) {
            // If we have data to transmit and it fits into partner's window, do it.
            tcp_trace!("outgoing segment will send data or flags");
        } else if self.ack_to_transmit() && self.delayed_ack_expired(cx.now()) {
            // If we have data to acknowledge, do it.
            tcp_trace!("outgoing segment will acknowledge");
        } else if self.window_to_update() {
            // If we have window length increase to advertise, do it.
            tcp_trace!("outgoing segment will update window");
        } else if self.state == State::Closed {
            // If we need to abort the connection, do it.
            tcp_trace!("outgoing segment will abort connection");
        } else if probe_due {
            // dpwarp: the peer's window has been shut for a persist interval.
            tcp_trace!("persist timer expired");
        } else if self.timer.should_keep_alive(cx.now()) {
            // If we need to transmit a keep-alive packet, do it.
            tcp_trace!("keep-alive timer expired");
        } else if self.timer.should_close(cx.now()) {
            // If we have spent enough time in the TIME-WAIT state, close the socket.
            tcp_trace!("TIME-WAIT timer expired");
            self.reset();
            return Ok(());
        } else {
            return Ok(());
        }

        // NOTE(unwrap): we check tuple is not None the first thing in this function.
        let tuple = self.tuple.unwrap();

        // Construct the lowered IP representation.
        // We might need this to calculate the MSS, so do it early.
        let mut ip_repr = IpRepr::new(
            tuple.local.addr,
            tuple.remote.addr,
            IpProtocol::Tcp,
            0,
            self.hop_limit.unwrap_or(64),
        );

        // dpwarp: whether this segment is a pending fast retransmit.
        let mut is_fast_retransmit = false;
        let mut is_probe = false;

        // Construct the basic TCP representation, an empty ACK packet.
        // We'll adjust this to be more specific as needed.
        let mut repr = TcpRepr {
            src_port: tuple.local.port,
            dst_port: tuple.remote.port,
            control: TcpControl::None,
            seq_number: self.remote_last_seq,
            ack_number: Some(self.remote_seq_no + self.rx_buffer.len()),
            window_len: self.scaled_window(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None, None, None],
            timestamp: TcpTimestampRepr::generate_reply_with_tsval(
                self.tsval_generator,
                self.last_remote_tsval,
            ),
            payload: &[],
        };

        match self.state {
            // We transmit an RST in the CLOSED state. If we ended up in the CLOSED state
            // with a specified endpoint, it means that the socket was aborted.
            State::Closed => {
                repr.control = TcpControl::Rst;
            }

            // We never transmit anything in the LISTEN state.
            State::Listen => return Ok(()),

            // We transmit a SYN in the SYN-SENT state.
            // We transmit a SYN|ACK in the SYN-RECEIVED state.
            State::SynSent | State::SynReceived => {
                repr.control = TcpControl::Syn;
                repr.seq_number = self.local_seq_no;
                // window len must NOT be scaled in SYNs.
                repr.window_len = u16::try_from(self.rx_buffer.window()).unwrap_or(u16::MAX);
                if self.state == State::SynSent {
                    repr.ack_number = None;
                    repr.window_scale = Some(self.remote_win_shift);
                    repr.sack_permitted = true;
                } else {
                    repr.sack_permitted = self.remote_has_sack;
                    repr.window_scale = self.remote_win_scale.map(|_| self.remote_win_shift);
                }
            }

            // We transmit data in all states where we may have data in the buffer,
            // or the transmit half of the connection is still open.
            State::Established
            | State::FinWait1
            | State::Closing
            | State::CloseWait
            | State::LastAck => {
                // Extract as much data as the remote side can receive in this packet
                // from the transmit buffer.

                // Max amount of octets we're allowed to send according to the remote window
                // (dpwarp: and the congestion window). It is 0 if we've sent some data and
                // later the remote side has shrunk its window so that data is no longer
                // inside the window. This should be very rare and is strongly discouraged by
                // the RFCs, but it does happen in practice.
                // http://www.tcpipguide.com/free/t_TCPWindowManagementIssues.htm
                let win_limit = self.send_window_left();

                // Maximum size we're allowed to send. This can be limited by 3 factors:
                // 1. remote window
                // 2. MSS the remote is willing to accept, probably determined by their MTU
                // 3. MSS we can send, determined by our MTU.
                let frame = self
                    .remote_mss
                    .min(cx.ip_mtu() - ip_repr.header_len() - TCP_HEADER_LEN);
                let (offset, size) = if self.pending_fast_retransmit {
                    // dpwarp: a fast retransmit is the one segment at SND.UNA (RFC 5681
                    // section 3.2 step 4), cut at a record end like the segment it repeats;
                    // where the next new segment is cut is left as it was.
                    is_fast_retransmit = true;
                    repr.seq_number = self.local_seq_no;
                    let next = self.tx_record_next;
                    let size = self
                        .cut_at_record_from(self.local_seq_no, frame.min(self.tx_buffer.len()));
                    self.tx_record_next = next;
                    (0, size)
                } else if let Some(TlpProbe::Retransmit(seq)) = self.tlp_pending {
                    // dpwarp: a tail loss probe resends the last segment sent (RFC 8985
                    // section 7.3), from `seq` to SND.NXT; SND.NXT stays.
                    is_probe = true;
                    let seq = seq.max(self.local_seq_no);
                    repr.seq_number = seq;
                    let offset = seq - self.local_seq_no;
                    (offset, (self.remote_last_seq - seq).min(frame))
                } else {
                    let size = win_limit.min(frame);
                    // dpwarp: end the segment on a record boundary when the sender marks them.
                    let size = self.cut_at_record(size);

                    let offset = self.remote_last_seq - self.local_seq_no;
                    // dpwarp: several frames' worth in one segment where the device cuts it
                    // (`Device::tcp_gso_frames`); the IPv4 total length must still hold it.
                    let max_len = 65535 - ip_repr.header_len() - 60;
                    let gso = self.gso_extend(
                        cx.tcp_gso_frames,
                        offset,
                        size,
                        frame,
                        win_limit,
                        max_len,
                    );
                    let size = if gso > size {
                        cx.tcp_gso_size = frame;
                        gso
                    } else {
                        size
                    };
                    (offset, size)
                };
                // dpwarp: a segment whose octets wrap around the end of the transmit ring is
                // sent whole (gathered into `tx_linear`), not cut at the wrap: a sender that
                // hands the socket one segment of whole records at a time (RFC 5044 App. A)
                // then gets every segment starting on a record boundary.
                let avail = self.tx_buffer.len().saturating_sub(offset).min(size);
                let first = self.tx_buffer.get_allocated(offset, size);
                if first.len() < avail {
                    self.tx_linear.clear();
                    self.tx_linear.extend_from_slice(first);
                    let rest = self
                        .tx_buffer
                        .get_allocated(offset + first.len(), avail - first.len());
                    self.tx_linear.extend_from_slice(rest);
                    repr.payload = &self.tx_linear;
                } else {
                    repr.payload = first;
                }

                // If we've sent everything we had in the buffer, follow it with the PSH or FIN
                // flags, depending on whether the transmit half of the connection is open.
                if offset + repr.payload.len() == self.tx_buffer.len() {
                    match self.state {
                        State::FinWait1 | State::LastAck | State::Closing => {
                            repr.control = TcpControl::Fin
                        }
                        State::Established | State::CloseWait if !repr.payload.is_empty() => {
                            repr.control = TcpControl::Psh
                        }
                        _ => (),
                    }
                }
            }

            // In FIN-WAIT-2 and TIME-WAIT states we may only transmit ACKs for incoming data or FIN
            State::FinWait2 | State::TimeWait => {}
        }

        // There might be more than one reason to send a packet. E.g. the keep-alive timer
        // has expired, and we also have data in transmit buffer. Since any packet that occupies
        // sequence space will elicit an ACK, we only need to send an explicit packet if we
        // couldn't fill the sequence space with anything.
        let is_keep_alive;
        let is_window_probe = probe_due && repr.is_empty();
        if is_window_probe {
            // dpwarp: a zero-window probe, as Linux sends one: no octet, one below SND.UNA
            // (nothing is in flight, so SND.NXT is SND.UNA). The peer answers an old
            // segment with an ACK that carries its window (RFC 9293 section 3.10.7.4), and
            // smoltcp takes one this shape as a probe.
            repr.seq_number = repr.seq_number - 1;
            is_keep_alive = true;
        } else if self.timer.should_keep_alive(cx.now()) && repr.is_empty() {
            repr.seq_number = repr.seq_number - 1;
            repr.payload = b"\x00"; // RFC 1122 says we should do this
            is_keep_alive = true;
        } else {
            is_keep_alive = false;
        }

        // Trace a summary of what will be sent.
        if is_keep_alive {
            tcp_trace!("sending a keep-alive");
        } else if !repr.payload.is_empty() {
            tcp_trace!(
                "tx buffer: sending {} octets at offset {}",
                repr.payload.len(),
                self.remote_last_seq - self.local_seq_no
            );
        }
        if repr.control != TcpControl::None || repr.payload.is_empty() {
            let flags = match (repr.control, repr.ack_number) {
                (TcpControl::Syn, None) => "SYN",
                (TcpControl::Syn, Some(_)) => "SYN|ACK",
                (TcpControl::Fin, Some(_)) => "FIN|ACK",
                (TcpControl::Rst, Some(_)) => "RST|ACK",
                (TcpControl::Psh, Some(_)) => "PSH|ACK",
                (TcpControl::None, Some(_)) => "ACK",
                _ => "<unreachable>",
            };
            tcp_trace!("sending {}", flags);
        }

        if repr.control == TcpControl::Syn {
            // Fill the MSS option. See RFC 6691 for an explanation of this calculation.
            let max_segment_size = cx.ip_mtu() - ip_repr.header_len() - TCP_HEADER_LEN;
            repr.max_seg_size = Some(max_segment_size as u16);
        }

        // Actually send the packet. If this succeeds, it means the packet is in
        // the device buffer, and its transmission is imminent. If not, we might have
        // a number of problems, e.g. we need neighbor discovery.
        //
        // Bailing out if the packet isn't placed in the device buffer allows us
        // to not waste time waiting for the retransmit timer on packets that we know
        // for sure will not be successfully transmitted.
        ip_repr.set_payload_len(repr.buffer_len());
        emit(cx, (ip_repr, repr))?;

        // We've sent something, whether useful data or a keep-alive packet, so rewind
        // the keep-alive timer.
        // dpwarp: except after a keep-alive armed by `keep_alive_now`, which goes back to the
        // timer's own deadline: those come as often as the worker's warm path wants (every
        // 20 us of idle) and would otherwise keep the timer's from ever falling due, and an
        // idle peer that vanished from ever being given up on.
        let forced_sent = is_keep_alive && !is_window_probe && self.keep_alive_forced;
        if forced_sent {
            if let Timer::Idle { keep_alive_at } = &mut self.timer {
                *keep_alive_at = self.keep_alive_due;
            }
        } else {
            self.timer.rewind_keep_alive(cx.now(), self.keep_alive);
            if is_keep_alive && !is_window_probe {
                // The timer's own: one more the peer has to answer.
                self.keep_alive_unanswered = self.keep_alive_unanswered.saturating_add(1);
            }
        }
        // Whatever went, an arming by `keep_alive_now` is used up (a segment sent in its
        // place rewound the timer as any does).
        self.keep_alive_forced = false;
        self.keep_alive_due = None;

        // Reset delayed-ack timer
        match self.ack_delay_timer {
            AckDelayTimer::Idle => {}
            AckDelayTimer::Waiting(_) => {
                tcp_trace!("stop delayed ack timer")
            }
            AckDelayTimer::Immediate => {
                tcp_trace!("stop delayed ack timer (was force-expired)")
            }
        }
        self.ack_delay_timer = AckDelayTimer::Idle;

        // Leave the rest of the state intact if sending a keep-alive packet, since those
        // carry a fake segment.
        if is_window_probe {
            if self.zwp_unanswered.is_none() {
                self.zwp_unanswered = Some(cx.now());
            }
            self.zwp_probes = self.zwp_probes.saturating_add(1);
            self.zwp_at = Some(cx.now() + self.persist_interval());
            self.window_probes += 1;
        }
        if is_keep_alive {
            return Ok(());
        }

        if is_fast_retransmit {
            net_debug!(
                "fast retransmit: {} octets at seq {}",
                repr.payload.len(),
                repr.seq_number
            );
            self.pending_fast_retransmit = false;
            self.fast_retransmits += 1;
            self.rexmit_at = Some((repr.seq_number, self.remote_last_seq));
            self.rtte.on_retransmit();
        }

        // We've sent a packet successfully, so we can update the internal state now.
        // dpwarp: a fast retransmit (behind SND.NXT) leaves SND.NXT where it was (upstream
        // d84a8980).
        let sent_up_to = repr.seq_number + repr.segment_len();
        let new_data = sent_up_to > self.remote_last_seq && !repr.payload.is_empty();
        if sent_up_to > self.remote_last_seq {
            self.remote_last_seq = sent_up_to;
        }
        if sent_up_to > self.snd_max {
            self.snd_max = sent_up_to;
        }
        // dpwarp: a tail loss probe went (the last segment again, or new data while one was
        // due): it is outstanding until SND.NXT now is acknowledged, and the retransmission
        // timer starts afresh (RFC 8985 section 7.3). Other new data (re)arms the probe.
        let probe_new_data = new_data && self.tlp_pending == Some(TlpProbe::NewData);
        if is_probe || probe_new_data {
            net_debug!(
                "tail loss probe: {} octets at seq {}",
                repr.payload.len(),
                repr.seq_number
            );
            self.tlp_pending = None;
            self.tlp_out = Some(self.remote_last_seq);
            self.tail_loss_probes += 1;
            // The RTT sample running (if any) is kept: it was started by the original
            // segment, so an ACK of the probe can only lengthen it, never shorten it (Karn's
            // concern), and a probe that fires because the round trip grew (a stall, a
            // queue) then teaches the estimator so, where dropping the sample left SRTT, and
            // so the probe timeout, short, and every round trip drew a probe.
            self.timer
                .restart_retransmit(cx.now(), self.rtte.retransmission_timeout());
        }
        self.remote_last_ack = repr.ack_number;
        self.remote_last_win = repr.window_len;

        if repr.segment_len() > 0 {
            self.rtte
                .on_send(cx.now(), repr.seq_number + repr.segment_len());
        }

        // dpwarp: a bare ACK never winds the timer, so it does not ask `seq_to_transmit`
        // (about 100 instructions), and neither does a segment after which nothing is left
        // (`sent_everything`: every 64 B Send, the last segment of a burst).
        if repr.segment_len() > 0 && (self.sent_everything(cx) || !self.seq_to_transmit(cx)) {
            // If we've transmitted all data we could (and there was something at all,
            // data or flag, to transmit, not just an ACK), wind up the retransmit timer.
            self.timer
                .set_for_retransmit(cx.now(), self.rtte.retransmission_timeout());
        }
        if new_data && !is_probe && !probe_new_data {
            self.arm_tlp(cx.now());
        }

        if self.state == State::Closed {
            // When aborting a connection, forget about it after sending a single RST packet.
            self.tuple = None;
            #[cfg(feature = "async")]
            {
                // Wake tx now so that async users can wait for the RST to be sent
                self.tx_waker.wake();
            }
        }

        Ok(())
    }

    #[allow(clippy::if_same_then_else)]
    pub(crate) fn poll_at(&self, cx: &mut Context) -> PollAt {
        // The logic here mirrors the beginning of dispatch() closely.
        if self.tuple.is_none() {
            // No one to talk to, nothing to transmit.
            PollAt::Ingress
        } else if self.remote_last_ts.is_none() {
            // Socket stopped being quiet recently, we need to acquire a timestamp.
            PollAt::Now
        } else if self.state == State::Closed {
            // Socket was aborted, we have an RST packet to transmit.
            PollAt::Now
        } else if self.seq_to_transmit(cx) {
            // We have a data or flag packet to transmit.
            PollAt::Now
        } else if self.window_to_update() {
            // The receive window has been raised significantly.
            PollAt::Now
        } else {
            let want_ack = self.ack_to_transmit();

            let delayed_ack_poll_at = match (want_ack, self.ack_delay_timer) {
                (false, _) => PollAt::Ingress,
                (true, AckDelayTimer::Idle) => PollAt::Now,
                (true, AckDelayTimer::Waiting(t)) => PollAt::Time(t),
                (true, AckDelayTimer::Immediate) => PollAt::Now,
            };

            let timeout_poll_at = match (self.remote_last_ts, self.timeout) {
                // If we're transmitting or retransmitting data, we need to poll at the moment
                // when the timeout would expire.
                (Some(remote_last_ts), Some(timeout)) => PollAt::Time(remote_last_ts + timeout),
                // Otherwise we have no timeout.
                (_, _) => PollAt::Ingress,
            };

            // dpwarp: and the tail loss probe's, and the persist timer's (set by the
            // `dispatch` after the ACK that shut the window; every egress runs it).
            let tlp_poll_at = self.tlp_at.map_or(PollAt::Ingress, PollAt::Time);
            let zwp_poll_at = self.zwp_at.map_or(PollAt::Ingress, PollAt::Time);

            // We wait for the earliest of our timers to fire.
            *[
                self.timer.poll_at(),
                timeout_poll_at,
                delayed_ack_poll_at,
                tlp_poll_at,
                zwp_poll_at,
            ]
            .iter()
            .min()
            .unwrap_or(&PollAt::Ingress)
        }
    }
}

impl<'a> fmt::Write for Socket<'a> {
    fn write_str(&mut self, slice: &str) -> fmt::Result {
        let slice = slice.as_bytes();
        if self.send_slice(slice) == Ok(slice.len()) {
            Ok(())
        } else {
            Err(fmt::Error)
        }
    }
}

// TODO: TCP should work for all features. For now, we only test with the IP feature. We could do
// it for other features as well with rstest, however, this means we have to modify a lot of the
// tests in here, which I didn't had the time for at the moment.
#[cfg(all(test, feature = "medium-ip"))]
mod test {
    use super::*;
    use crate::wire::IpRepr;
    use std::ops::{Deref, DerefMut};
    use std::vec::Vec;

    // =========================================================================================//
    // Constants
    // =========================================================================================//

    const LOCAL_PORT: u16 = 80;
    const REMOTE_PORT: u16 = 49500;
    const LISTEN_END: IpListenEndpoint = IpListenEndpoint {
        addr: None,
        port: LOCAL_PORT,
    };
    const TUPLE: Tuple = Tuple {
        local: LOCAL_END,
        remote: REMOTE_END,
    };
    const LOCAL_SEQ: TcpSeqNumber = TcpSeqNumber(10000);
    const REMOTE_SEQ: TcpSeqNumber = TcpSeqNumber(-10001);

    cfg_if::cfg_if! {
        if #[cfg(feature = "proto-ipv4")] {
            use crate::wire::Ipv4Address as IpvXAddress;
            use crate::wire::Ipv4Repr as IpvXRepr;
            use IpRepr::Ipv4 as IpReprIpvX;

            const LOCAL_ADDR: IpvXAddress = IpvXAddress::new(192, 168, 1, 1);
            const REMOTE_ADDR: IpvXAddress = IpvXAddress::new(192, 168, 1, 2);
            const OTHER_ADDR: IpvXAddress = IpvXAddress::new(192, 168, 1, 3);

            const BASE_MSS: u16 = 1460;

            const LOCAL_END: IpEndpoint = IpEndpoint {
                addr: IpAddress::Ipv4(LOCAL_ADDR),
                port: LOCAL_PORT,
            };
            const REMOTE_END: IpEndpoint = IpEndpoint {
                addr: IpAddress::Ipv4(REMOTE_ADDR),
                port: REMOTE_PORT,
            };
        } else {
            use crate::wire::Ipv6Address as IpvXAddress;
            use crate::wire::Ipv6Repr as IpvXRepr;
            use IpRepr::Ipv6 as IpReprIpvX;

            const LOCAL_ADDR: IpvXAddress = IpvXAddress::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
            const REMOTE_ADDR: IpvXAddress = IpvXAddress::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
            const OTHER_ADDR: IpvXAddress = IpvXAddress::new(0xfe80, 0, 0, 0, 0, 0, 0, 3);

            const BASE_MSS: u16 = 1440;

            const LOCAL_END: IpEndpoint = IpEndpoint {
                addr: IpAddress::Ipv6(LOCAL_ADDR),
                port: LOCAL_PORT,
            };
            const REMOTE_END: IpEndpoint = IpEndpoint {
                addr: IpAddress::Ipv6(REMOTE_ADDR),
                port: REMOTE_PORT,
            };
        }
    }

    const SEND_IP_TEMPL: IpRepr = IpReprIpvX(IpvXRepr {
        src_addr: LOCAL_ADDR,
        dst_addr: REMOTE_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: 20,
        hop_limit: 64,
    });
    const SEND_TEMPL: TcpRepr<'static> = TcpRepr {
        src_port: REMOTE_PORT,
        dst_port: LOCAL_PORT,
        control: TcpControl::None,
        seq_number: TcpSeqNumber(0),
        ack_number: Some(TcpSeqNumber(0)),
        window_len: 256,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None, None, None],
        timestamp: None,
        payload: &[],
    };
    const _RECV_IP_TEMPL: IpRepr = IpReprIpvX(IpvXRepr {
        src_addr: LOCAL_ADDR,
        dst_addr: REMOTE_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: 20,
        hop_limit: 64,
    });
    const RECV_TEMPL: TcpRepr<'static> = TcpRepr {
        src_port: LOCAL_PORT,
        dst_port: REMOTE_PORT,
        control: TcpControl::None,
        seq_number: TcpSeqNumber(0),
        ack_number: Some(TcpSeqNumber(0)),
        window_len: 64,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None, None, None],
        timestamp: None,
        payload: &[],
    };

    // =========================================================================================//
    // Helper functions
    // =========================================================================================//

    struct TestSocket {
        socket: Socket<'static>,
        cx: Context,
    }

    impl Deref for TestSocket {
        type Target = Socket<'static>;
        fn deref(&self) -> &Self::Target {
            &self.socket
        }
    }

    impl DerefMut for TestSocket {
        fn deref_mut(&mut self) -> &mut Self::Target {
            &mut self.socket
        }
    }

    fn send(
        socket: &mut TestSocket,
        timestamp: Instant,
        repr: &TcpRepr,
    ) -> Option<TcpRepr<'static>> {
        socket.cx.set_now(timestamp);

        let ip_repr = IpReprIpvX(IpvXRepr {
            src_addr: REMOTE_ADDR,
            dst_addr: LOCAL_ADDR,
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: 64,
        });
        net_trace!("send: {}", repr);

        assert!(socket.socket.accepts(&mut socket.cx, &ip_repr, repr));

        match socket.socket.process(&mut socket.cx, &ip_repr, repr) {
            Some((ip_reply, repr)) => {
                net_trace!("recv: {}", repr);
                // dpwarp: the IP payload length of a reply must be what its TCP header and
                // payload take, or emitting it writes past its buffer.
                assert_eq!(ip_reply.payload_len(), repr.buffer_len(), "reply {repr}");
                Some(repr)
            }
            None => None,
        }
    }

    fn recv<F>(socket: &mut TestSocket, timestamp: Instant, mut f: F)
    where
        F: FnMut(Result<TcpRepr, ()>),
    {
        socket.cx.set_now(timestamp);

        let mut sent = 0;
        let result = socket
            .socket
            .dispatch(&mut socket.cx, |_, (ip_repr, tcp_repr)| {
                assert_eq!(ip_repr.next_header(), IpProtocol::Tcp);
                assert_eq!(ip_repr.src_addr(), LOCAL_ADDR.into());
                assert_eq!(ip_repr.dst_addr(), REMOTE_ADDR.into());
                assert_eq!(ip_repr.payload_len(), tcp_repr.buffer_len());

                net_trace!("recv: {}", tcp_repr);
                sent += 1;
                Ok(f(Ok(tcp_repr)))
            });
        match result {
            Ok(()) => assert_eq!(sent, 1, "Exactly one packet should be sent"),
            Err(e) => f(Err(e)),
        }
    }

    fn recv_nothing(socket: &mut TestSocket, timestamp: Instant) {
        socket.cx.set_now(timestamp);

        let result: Result<(), ()> = socket
            .socket
            .dispatch(&mut socket.cx, |_, (_ip_repr, _tcp_repr)| {
                panic!("Should not send a packet")
            });

        assert_eq!(result, Ok(()))
    }

    macro_rules! send {
        ($socket:ident, $repr:expr) =>
            (send!($socket, time 0, $repr));
        ($socket:ident, $repr:expr, $result:expr) =>
            (send!($socket, time 0, $repr, $result));
        ($socket:ident, time $time:expr, $repr:expr) =>
            (send!($socket, time $time, $repr, None));
        ($socket:ident, time $time:expr, $repr:expr, $result:expr) =>
            (assert_eq!(send(&mut $socket, Instant::from_millis($time), &$repr), $result));
    }

    macro_rules! recv {
        ($socket:ident, [$( $repr:expr ),*]) => ({
            $( recv!($socket, Ok($repr)); )*
            recv_nothing!($socket)
        });
        ($socket:ident, $result:expr) =>
            (recv!($socket, time 0, $result));
        ($socket:ident, time $time:expr, $result:expr) =>
            (recv(&mut $socket, Instant::from_millis($time), |result| {
                // Most of the time we don't care about the PSH flag.
                let result = result.map(|mut repr| {
                    repr.control = repr.control.quash_psh();
                    repr
                });
                assert_eq!(result, $result)
            }));
        ($socket:ident, time $time:expr, $result:expr, exact) =>
            (recv(&mut $socket, Instant::from_millis($time), |repr| assert_eq!(repr, $result)));
    }

    macro_rules! recv_nothing {
        ($socket:ident) => (recv_nothing!($socket, time 0));
        ($socket:ident, time $time:expr) => (recv_nothing(&mut $socket, Instant::from_millis($time)));
    }

    macro_rules! sanity {
        ($socket1:expr, $socket2:expr) => {{
            let (s1, s2) = ($socket1, $socket2);
            assert_eq!(s1.state, s2.state, "state");
            assert_eq!(s1.tuple, s2.tuple, "tuple");
            assert_eq!(s1.local_seq_no, s2.local_seq_no, "local_seq_no");
            assert_eq!(s1.remote_seq_no, s2.remote_seq_no, "remote_seq_no");
            assert_eq!(s1.remote_last_seq, s2.remote_last_seq, "remote_last_seq");
            assert_eq!(s1.remote_last_ack, s2.remote_last_ack, "remote_last_ack");
            assert_eq!(s1.remote_last_win, s2.remote_last_win, "remote_last_win");
            assert_eq!(s1.remote_win_len, s2.remote_win_len, "remote_win_len");
            assert_eq!(s1.timer, s2.timer, "timer");
        }};
    }

    fn socket() -> TestSocket {
        socket_with_buffer_sizes(64, 64)
    }

    fn socket_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
        let (iface, _, _) = crate::tests::setup(crate::phy::Medium::Ip);

        let rx_buffer = SocketBuffer::new(vec![0; rx_len]);
        let tx_buffer = SocketBuffer::new(vec![0; tx_len]);
        let mut socket = Socket::new(rx_buffer, tx_buffer);
        socket.set_ack_delay(None);
        TestSocket {
            socket,
            cx: iface.inner,
        }
    }

    fn socket_syn_received_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
        let mut s = socket_with_buffer_sizes(tx_len, rx_len);
        s.state = State::SynReceived;
        s.tuple = Some(TUPLE);
        s.local_seq_no = LOCAL_SEQ;
        s.remote_seq_no = REMOTE_SEQ + 1;
        s.remote_last_seq = LOCAL_SEQ;
        s.remote_win_len = 256;
        s
    }

    fn socket_syn_received() -> TestSocket {
        socket_syn_received_with_buffer_sizes(64, 64)
    }

    fn socket_syn_sent_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
        let mut s = socket_with_buffer_sizes(tx_len, rx_len);
        s.state = State::SynSent;
        s.tuple = Some(TUPLE);
        s.local_seq_no = LOCAL_SEQ;
        s.remote_last_seq = LOCAL_SEQ;
        s
    }

    fn socket_syn_sent() -> TestSocket {
        socket_syn_sent_with_buffer_sizes(64, 64)
    }

    fn socket_established_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
        let mut s = socket_syn_received_with_buffer_sizes(tx_len, rx_len);
        s.state = State::Established;
        s.local_seq_no = LOCAL_SEQ + 1;
        s.remote_last_seq = LOCAL_SEQ + 1;
        s.remote_last_ack = Some(REMOTE_SEQ + 1);
        s.remote_last_win = s.scaled_window();
        s
    }

    fn socket_established() -> TestSocket {
        socket_established_with_buffer_sizes(64, 64)
    }

    /// dpwarp: a peer that sends past the right edge of the window we last advertised, into
    /// room lending freed since (the socket accepts up to its buffer's capacity),
    /// must not make the next `dispatch` panic: the window left of the last advertisement
    /// is 0, not a negative sequence-number difference (found by the test below).
    #[test]
    fn test_data_past_the_advertised_window_does_not_panic_dispatch() {
        let mut s = socket_established_with_buffer_sizes(64, 64);
        s.set_rx_lend(true);
        // With the ACK delayed, `dispatch` looks at the window instead (`window_to_update`).
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        // Advertised: 64 octets from REMOTE_SEQ + 1. Each segment is lent and taken at once,
        // so RCV.NXT moves on and the socket accepts 64 octets past it each time.
        let data = [7u8; 60];
        for i in 0..3 {
            send(
                &mut s,
                Instant::from_millis(0),
                &TcpRepr {
                    seq_number: REMOTE_SEQ + 1 + i * 60,
                    ack_number: Some(LOCAL_SEQ + 1),
                    payload: &data,
                    ..SEND_TEMPL
                },
            );
            let lent = s.take_rx_lent().expect("in order, nothing buffered: lent");
            assert_eq!(lent.within(&data), Some(&data[..]));
        }
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1 + 180);
        // Before the delayed ACK is due: a window update (the window reopened), not a panic.
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 180),
            window_len: 64,
            ..RECV_TEMPL
        }));
    }

    /// dpwarp: the header-predicted path of `process` leaves the socket exactly as the full
    /// path does. Two established sockets take the same random run of events (segments in
    /// order, duplicated, out of order, overlapping or past the window, acknowledging new data
    /// of ours or not, with SACK blocks, PSH or FIN; our sends, dispatches, reads and the
    /// clock), one with the predicted path off; after every event their replies, what they
    /// send, what they deliver and their whole state (`Debug`) must be equal. With and
    /// without lending and a delayed ACK.
    #[test]
    fn test_predicted_path_equals_the_full_path() {
        let mut taken = 0;
        for variant in 0..4 {
            let (lending, delay) = (variant & 1 == 1, variant & 2 == 2);
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ variant;
            let mut rnd = move |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            let mut socks = [
                socket_established_with_buffer_sizes(2048, 1024),
                socket_established_with_buffer_sizes(2048, 1024),
            ];
            // The second takes every segment down the full path.
            socks[1].cx.header_prediction = false;
            let mut sunk: [Vec<u8>; 2] = Default::default();
            for s in socks.iter_mut() {
                s.set_ack_delay(delay.then(|| Duration::from_millis(10)));
                s.set_rx_lend(lending);
            }
            let mut now = Instant::from_millis(0);
            // The peer's view: the next octet it sends, and what of ours it acknowledges.
            let mut remote_next = REMOTE_SEQ + 1;
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
            let mut finished = false;
            for step in 0..3000 {
                let event = rnd(100);
                let before = taken;
                if event < 55 && !finished {
                    // A segment from the peer.
                    let len = 1 + rnd(300) as usize;
                    let start = match rnd(10) {
                        0 => remote_next - rnd(200) as usize,
                        1 => remote_next + rnd(400) as usize,
                        _ => remote_next,
                    };
                    let una = socks[0].local_seq_no;
                    let sent_end = socks[0].remote_last_seq;
                    let ack = match rnd(6) {
                        0 if sent_end > una => una + rnd((sent_end - una) as u64 + 1) as usize,
                        1 => una - rnd(3) as usize,
                        _ => una,
                    };
                    let off = (start.0.wrapping_sub((REMOTE_SEQ + 1).0) as u32 % 3000) as usize;
                    let mut repr = TcpRepr {
                        seq_number: start,
                        ack_number: Some(ack),
                        window_len: [256u16, 512, 1024, 64][rnd(4) as usize],
                        control: [TcpControl::None, TcpControl::Psh][rnd(2) as usize],
                        payload: &data[off..off + len],
                        ..SEND_TEMPL
                    };
                    if rnd(20) == 0 {
                        repr.sack_ranges[0] = Some((una.0 as u32, una.0 as u32 + 10));
                    }
                    if rnd(1500) == 0 {
                        repr.control = TcpControl::Fin;
                        finished = true;
                    }
                    let replies: Vec<_> = (0..2)
                        .map(|i| {
                            let s = &mut socks[i];
                            let TestSocket { socket, cx } = &mut *s;
                            let ip = IpReprIpvX(IpvXRepr {
                                src_addr: REMOTE_ADDR,
                                dst_addr: LOCAL_ADDR,
                                next_header: IpProtocol::Tcp,
                                payload_len: repr.buffer_len(),
                                hop_limit: 64,
                            });
                            if !socket.accepts(cx, &ip, &repr) {
                                return None;
                            }
                            send(s, now, &repr)
                        })
                        .collect();
                    assert_eq!(replies[0], replies[1], "step {step}: replies to {repr}");
                    for (s, out) in socks.iter_mut().zip(sunk.iter_mut()) {
                        if let Some(lent) = s.take_rx_lent() {
                            out.extend_from_slice(lent.within(&data).expect("lent from data"));
                        }
                    }
                    taken = FAST_PATH_TAKEN.with(|c| c.get());
                    if start == remote_next && repr.control != TcpControl::Fin {
                        remote_next = remote_next + len;
                    }
                    // The peer learns what went through from our ACKs; keep it near.
                    if rnd(4) == 0 {
                        remote_next = socks[0].remote_seq_no + socks[0].rx_buffer.len();
                    }
                } else if event < 70 {
                    let n = rnd(600) as usize;
                    for s in socks.iter_mut() {
                        let _ = s.send_slice(&data[..n]);
                    }
                } else if event < 85 {
                    let mut got = Vec::new();
                    for s in socks.iter_mut() {
                        let mut r = None;
                        s.cx.set_now(now);
                        let _ = s.socket.dispatch(&mut s.cx, |_, (_, tcp)| {
                            r = Some((tcp.seq_number, tcp.ack_number, tcp.payload.len(), tcp.control));
                            Ok::<(), ()>(())
                        });
                        got.push(r);
                    }
                    assert_eq!(got[0], got[1], "step {step}: dispatch");
                } else if event < 95 {
                    let mut got = Vec::new();
                    let want = rnd(512) as usize + 1;
                    for s in socks.iter_mut() {
                        let mut buf = [0u8; 512];
                        let n = s.recv_slice(&mut buf[..want]).unwrap_or(0);
                        got.push(buf[..n].to_vec());
                    }
                    assert_eq!(got[0], got[1], "step {step}: read");
                    // Lending off for a while (a consumer that takes the buffered path).
                    let lend = lending && rnd(3) != 0;
                    for s in socks.iter_mut() {
                        s.set_rx_lend(lend);
                    }
                } else {
                    now += Duration::from_millis(rnd(30));
                }
                assert_eq!(
                    format!("{:?}", socks[0].socket),
                    format!("{:?}", socks[1].socket),
                    "step {step}, event {event}, predicted {}",
                    taken > before
                );
                assert_eq!(sunk[0], sunk[1], "step {step}");
            }
        }
        // (421 with these seeds: segments past a full window, out of order or acknowledging
        // new data take the full path.)
        assert!(taken > 300, "the predicted path was taken {taken} times");
    }

    /// dpwarp: the cut from the remembered position equals a search of every record end, as
    /// segments go out in order, go back for a retransmission, and records are acknowledged.
    #[test]
    fn test_cut_at_record_matches_a_full_search() {
        let mut s = socket_established();
        s.set_tx_records(true);
        let base = s.local_seq_no;
        // Records of 1 to 200 octets (many to a segment) and some larger than one.
        let mut end = 0usize;
        let mut x = 7u32;
        for _ in 0..4000 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            end += if x % 10 == 0 { 3000 } else { 1 + (x >> 8) as usize % 200 };
            s.tx_records.as_mut().unwrap().push_back(base + end);
        }
        let reference = |s: &Socket, size: usize| {
            let (una, start) = (s.local_seq_no, s.remote_last_seq);
            let r = s.tx_records.as_ref().unwrap();
            let i = r.partition_point(|&e| e <= start + size);
            match i.checked_sub(1).map(|i| r[i]) {
                Some(e) if e > start && e > una => e - start,
                _ => size,
            }
        };
        let mut sent = 0usize;
        let mut step = 0u32;
        while sent < end {
            step += 1;
            let size = [1448usize, 8948, 64, 300][step as usize % 4];
            let want = reference(&s, size);
            let got = s.cut_at_record(size);
            assert_eq!(got, want, "step {step}: start {sent}, size {size}");
            sent += got.min(end - sent);
            s.remote_last_seq = base + sent;
            if step % 7 == 0 {
                // Half of what is in flight acknowledged.
                let acked = (s.remote_last_seq - s.local_seq_no) / 2;
                s.local_seq_no = s.local_seq_no + acked;
            }
            if step % 23 == 0 {
                // Go back: retransmit from the oldest unacknowledged octet.
                s.remote_last_seq = s.local_seq_no;
                sent = s.local_seq_no - base;
            }
        }
    }

    /// dpwarp: a segment the device cuts (`gso_extend`) is the run of frames the per-segment
    /// path would send, each ending on a record end where one falls in it: it stops after a
    /// short frame, at the window (cutting as the per-segment path cuts), and before a frame
    /// the IPv4 length limit, the frame count or the ring's wrap would cut elsewhere.
    #[test]
    fn test_gso_extend_ends_frames_where_segments_end() {
        const F: usize = 100;
        let setup = |records: &[usize]| {
            let mut s = socket_established_with_buffer_sizes(4096, 64);
            s.set_tx_records(true);
            s.remote_win_len = 4096;
            for &r in records {
                s.send_slice(&vec![7u8; r]).unwrap();
                s.push_tx_record_end();
            }
            s
        };
        // Three full frames, a short one: four frames, ending with the short record.
        let mut s = setup(&[F, F, F, 30, F, F]);
        assert_eq!(s.gso_extend(64, 0, F, F, 4096, 65000), 3 * F + 30);
        // Records of half a frame: every frame holds two.
        let mut s = setup(&[F / 2; 12]);
        assert_eq!(s.gso_extend(64, 0, F, F, 4096, 65000), 6 * F);
        // At most `frames` frames.
        let mut s = setup(&[F; 8]);
        assert_eq!(s.gso_extend(3, 0, F, F, 4096, 65000), 3 * F);
        // The window: the last frame is cut as the per-segment path cuts it (at the window,
        // no record end falling inside).
        let mut s = setup(&[F; 8]);
        assert_eq!(s.gso_extend(64, 0, F, F, 2 * F + 40, 65000), 2 * F + 40);
        // The length limit never cuts a frame short: the frame that does not fit is left out.
        let mut s = setup(&[F; 8]);
        assert_eq!(s.gso_extend(64, 0, F, F, 4096, 2 * F + 40), 2 * F);
        // A first frame that is not full, or one frame allowed: no extension.
        let mut s = setup(&[30, F, F]);
        assert_eq!(s.gso_extend(64, 0, 30, F, 4096, 65000), 30);
        let mut s = setup(&[F; 4]);
        assert_eq!(s.gso_extend(1, 0, F, F, 4096, 65000), F);
        // A record larger than a frame is split at the frame size, as the per-segment path
        // splits it; its short end is the segment's last frame.
        let mut s = setup(&[3 * F + 50, F]);
        assert_eq!(s.gso_extend(64, 0, F, F, 4096, 65000), 3 * F + 50);
        // The ring's wrap: frames up to it, none across it.
        let mut s = socket_established_with_buffer_sizes(4 * F, 64);
        s.set_tx_records(true);
        s.remote_win_len = 4096;
        s.send_slice(&[1u8; 3 * F]).unwrap();
        s.push_tx_record_end();
        // The first two frames acknowledged, the third in flight: what is unsent starts at
        // the ring's last frame and wraps after it.
        let _ = s.tx_buffer.dequeue_allocated(2 * F);
        s.local_seq_no = s.local_seq_no + 2 * F;
        s.remote_last_seq = s.local_seq_no + F;
        for _ in 0..3 {
            s.send_slice(&[2u8; F]).unwrap();
            s.push_tx_record_end();
        }
        assert_eq!(s.tx_buffer.get_allocated(F, 3 * F).len(), F, "the data wraps");
        assert_eq!(s.gso_extend(64, F, F, F, 4096, 65000), F);
    }

    fn socket_fin_wait_1() -> TestSocket {
        let mut s = socket_established();
        s.state = State::FinWait1;
        s
    }

    fn socket_fin_wait_2() -> TestSocket {
        let mut s = socket_fin_wait_1();
        s.state = State::FinWait2;
        s.local_seq_no = LOCAL_SEQ + 1 + 1;
        s.remote_last_seq = LOCAL_SEQ + 1 + 1;
        s
    }

    fn socket_closing() -> TestSocket {
        let mut s = socket_fin_wait_1();
        s.state = State::Closing;
        s.remote_last_seq = LOCAL_SEQ + 1 + 1;
        s.remote_seq_no = REMOTE_SEQ + 1 + 1;
        s
    }

    fn socket_time_wait(from_closing: bool) -> TestSocket {
        let mut s = socket_fin_wait_2();
        s.state = State::TimeWait;
        s.remote_seq_no = REMOTE_SEQ + 1 + 1;
        if from_closing {
            s.remote_last_ack = Some(REMOTE_SEQ + 1 + 1);
        }
        s.timer = Timer::Close {
            expires_at: Instant::from_secs(1) + CLOSE_DELAY,
        };
        s
    }

    fn socket_close_wait() -> TestSocket {
        let mut s = socket_established();
        s.state = State::CloseWait;
        s.remote_seq_no = REMOTE_SEQ + 1 + 1;
        s.remote_last_ack = Some(REMOTE_SEQ + 1 + 1);
        s
    }

    fn socket_last_ack() -> TestSocket {
        let mut s = socket_close_wait();
        s.state = State::LastAck;
        s
    }

    fn socket_recved() -> TestSocket {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            }]
        );
        s
    }

    // =========================================================================================//
    // Tests for the CLOSED state.
    // =========================================================================================//
    #[test]
    fn test_closed_reject() {
        let mut s = socket();
        assert_eq!(s.state, State::Closed);

        let tcp_repr = TcpRepr {
            control: TcpControl::Syn,
            ..SEND_TEMPL
        };
        assert!(!s.socket.accepts(&mut s.cx, &SEND_IP_TEMPL, &tcp_repr));
    }

    #[test]
    fn test_closed_reject_after_listen() {
        let mut s = socket();
        s.listen(LOCAL_END).unwrap();
        s.close();

        let tcp_repr = TcpRepr {
            control: TcpControl::Syn,
            ..SEND_TEMPL
        };
        assert!(!s.socket.accepts(&mut s.cx, &SEND_IP_TEMPL, &tcp_repr));
    }

    #[test]
    fn test_closed_close() {
        let mut s = socket();
        s.close();
        assert_eq!(s.state, State::Closed);
    }

    // =========================================================================================//
    // Tests for the LISTEN state.
    // =========================================================================================//
    fn socket_listen() -> TestSocket {
        let mut s = socket();
        s.state = State::Listen;
        s.listen_endpoint = LISTEN_END;
        s
    }

    #[test]
    fn test_listen_sack_option() {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                sack_permitted: false,
                ..SEND_TEMPL
            }
        );
        assert!(!s.remote_has_sack);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );

        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                sack_permitted: true,
                ..SEND_TEMPL
            }
        );
        assert!(s.remote_has_sack);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_listen_syn_win_scale_buffers() {
        for (buffer_size, shift_amt) in &[
            (64, 0),
            (128, 0),
            (1024, 0),
            (65535, 0),
            (65536, 1),
            (65537, 1),
            (131071, 1),
            (131072, 2),
            (524287, 3),
            (524288, 4),
            (655350, 4),
            (1048576, 5),
        ] {
            let mut s = socket_with_buffer_sizes(64, *buffer_size);
            s.state = State::Listen;
            s.listen_endpoint = LISTEN_END;
            assert_eq!(s.remote_win_shift, *shift_amt);
            send!(
                s,
                TcpRepr {
                    control: TcpControl::Syn,
                    seq_number: REMOTE_SEQ,
                    ack_number: None,
                    window_scale: Some(0),
                    ..SEND_TEMPL
                }
            );
            assert_eq!(s.remote_win_shift, *shift_amt);
            recv!(
                s,
                [TcpRepr {
                    control: TcpControl::Syn,
                    seq_number: LOCAL_SEQ,
                    ack_number: Some(REMOTE_SEQ + 1),
                    max_seg_size: Some(BASE_MSS),
                    window_scale: Some(*shift_amt),
                    window_len: u16::try_from(*buffer_size).unwrap_or(u16::MAX),
                    ..RECV_TEMPL
                }]
            );
        }
    }

    #[test]
    fn test_listen_sanity() {
        let mut s = socket();
        s.listen(LOCAL_PORT).unwrap();
        sanity!(s, socket_listen());
    }

    #[test]
    fn test_listen_validation() {
        let mut s = socket();
        assert_eq!(s.listen(0), Err(ListenError::Unaddressable));
    }

    #[test]
    fn test_listen_twice() {
        let mut s = socket();
        assert_eq!(s.listen(80), Ok(()));
        // multiple calls to listen are okay if its the same local endpoint and the state is still in listening
        assert_eq!(s.listen(80), Ok(()));
        s.set_state(State::SynReceived); // state change, simulate incoming connection
        assert_eq!(s.listen(80), Err(ListenError::InvalidState));
    }

    #[test]
    fn test_listen_syn() {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        sanity!(s, socket_syn_received());
    }

    #[test]
    fn test_listen_syn_reject_ack() {
        let mut s = socket_listen();

        let tcp_repr = TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ),
            ..SEND_TEMPL
        };
        assert!(!s.socket.accepts(&mut s.cx, &SEND_IP_TEMPL, &tcp_repr));

        assert_eq!(s.state, State::Listen);
    }

    #[test]
    fn test_listen_rst() {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Listen);
    }

    #[test]
    fn test_listen_close() {
        let mut s = socket_listen();
        s.close();
        assert_eq!(s.state, State::Closed);
    }

    // =========================================================================================//
    // Tests for the SYN-RECEIVED state.
    // =========================================================================================//

    #[test]
    fn test_syn_received_ack() {
        let mut s = socket_syn_received();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Established);
        sanity!(s, socket_established());
    }

    #[test]
    fn test_syn_received_ack_too_low() {
        let mut s = socket_syn_received();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ), // wrong
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                window_len: 0,
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.state, State::SynReceived);
    }

    #[test]
    fn test_syn_received_ack_too_high() {
        let mut s = socket_syn_received();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 2), // wrong
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ + 2,
                ack_number: None,
                window_len: 0,
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.state, State::SynReceived);
    }

    #[test]
    fn test_syn_received_fin() {
        let mut s = socket_syn_received();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6 + 1),
                window_len: 58,
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::CloseWait);

        let mut s2 = socket_close_wait();
        s2.remote_last_ack = Some(REMOTE_SEQ + 1 + 6 + 1);
        s2.remote_last_win = 58;
        sanity!(s, s2);
    }

    #[test]
    fn test_syn_received_rst() {
        let mut s = socket_syn_received();
        s.listen_endpoint = LISTEN_END;
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Listen);
        assert_eq!(s.listen_endpoint, LISTEN_END);
        assert_eq!(s.tuple, None);
    }

    #[test]
    fn test_syn_received_no_window_scaling() {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::SynReceived);
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                window_scale: None,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                window_scale: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.remote_win_shift, 0);
        assert_eq!(s.remote_win_scale, None);
    }

    #[test]
    fn test_syn_received_window_scaling() {
        for scale in 0..14 {
            let mut s = socket_listen();
            send!(
                s,
                TcpRepr {
                    control: TcpControl::Syn,
                    seq_number: REMOTE_SEQ,
                    ack_number: None,
                    window_scale: Some(scale),
                    ..SEND_TEMPL
                }
            );
            assert_eq!(s.state(), State::SynReceived);
            assert_eq!(s.tuple, Some(TUPLE));
            recv!(
                s,
                [TcpRepr {
                    control: TcpControl::Syn,
                    seq_number: LOCAL_SEQ,
                    ack_number: Some(REMOTE_SEQ + 1),
                    max_seg_size: Some(BASE_MSS),
                    window_scale: Some(0),
                    ..RECV_TEMPL
                }]
            );
            send!(
                s,
                TcpRepr {
                    seq_number: REMOTE_SEQ + 1,
                    ack_number: Some(LOCAL_SEQ + 1),
                    window_scale: None,
                    ..SEND_TEMPL
                }
            );
            assert_eq!(s.remote_win_scale, Some(scale));
        }
    }

    #[test]
    fn test_syn_received_close() {
        let mut s = socket_syn_received();
        s.close();
        assert_eq!(s.state, State::FinWait1);
    }

    // =========================================================================================//
    // Tests for the SYN-SENT state.
    // =========================================================================================//

    #[test]
    fn test_connect_validation() {
        let mut s = socket();
        assert_eq!(
            s.socket
                .connect(&mut s.cx, REMOTE_END, (IpvXAddress::UNSPECIFIED, 0)),
            Err(ConnectError::Unaddressable)
        );
        assert_eq!(
            s.socket
                .connect(&mut s.cx, REMOTE_END, (IpvXAddress::UNSPECIFIED, 1024)),
            Err(ConnectError::Unaddressable)
        );
        assert_eq!(
            s.socket
                .connect(&mut s.cx, (IpvXAddress::UNSPECIFIED, 0), LOCAL_END),
            Err(ConnectError::Unaddressable)
        );
        s.socket
            .connect(&mut s.cx, REMOTE_END, LOCAL_END)
            .expect("Connect failed with valid parameters");
        assert_eq!(s.tuple, Some(TUPLE));
    }

    #[test]
    fn test_connect() {
        let mut s = socket();
        s.local_seq_no = LOCAL_SEQ;
        s.socket
            .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
            .unwrap();
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tuple, Some(TUPLE));
    }

    #[test]
    fn test_connect_unspecified_local() {
        let mut s = socket();
        assert_eq!(s.socket.connect(&mut s.cx, REMOTE_END, 80), Ok(()));
    }

    #[test]
    fn test_connect_specified_local() {
        let mut s = socket();
        assert_eq!(
            s.socket.connect(&mut s.cx, REMOTE_END, (REMOTE_ADDR, 80)),
            Ok(())
        );
    }

    #[test]
    fn test_connect_twice() {
        let mut s = socket();
        assert_eq!(s.socket.connect(&mut s.cx, REMOTE_END, 80), Ok(()));
        assert_eq!(
            s.socket.connect(&mut s.cx, REMOTE_END, 80),
            Err(ConnectError::InvalidState)
        );
    }

    #[test]
    fn test_syn_sent_sanity() {
        let mut s = socket();
        s.local_seq_no = LOCAL_SEQ;
        s.socket.connect(&mut s.cx, REMOTE_END, LOCAL_END).unwrap();
        sanity!(s, socket_syn_sent());
    }

    #[test]
    fn test_syn_sent_syn_ack() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        recv_nothing!(s, time 1000);
        assert_eq!(s.state, State::Established);
        sanity!(s, socket_established());
    }

    #[test]
    fn test_syn_sent_syn_received_ack() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );

        // A SYN packet changes the SYN-SENT state to SYN-RECEIVED.
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::SynReceived);

        // The socket will then send a SYN|ACK packet.
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                ..RECV_TEMPL
            }]
        );
        recv_nothing!(s);

        // The socket may retransmit the SYN|ACK packet.
        recv!(
            s,
            time 1001,
            Ok(TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                ..RECV_TEMPL
            })
        );

        // An ACK packet changes the SYN-RECEIVED state to ESTABLISHED.
        send!(
            s,
            TcpRepr {
                control: TcpControl::None,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Established);
        sanity!(s, socket_established());
    }

    #[test]
    fn test_syn_sent_syn_ack_not_incremented() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ), // WRONG
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                window_len: 0,
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_syn_received_rst() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );

        // A SYN packet changes the SYN-SENT state to SYN-RECEIVED.
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::SynReceived);

        // A RST packet changes the SYN-RECEIVED state to CLOSED.
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_syn_sent_rst() {
        let mut s = socket_syn_sent();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_syn_sent_rst_no_ack() {
        let mut s = socket_syn_sent();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_rst_bad_ack() {
        let mut s = socket_syn_sent();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ,
                ack_number: Some(TcpSeqNumber(1234)),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_bad_ack() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::None, // Unexpected
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1), // Correct
                ..SEND_TEMPL
            }
        );

        // It should trigger no response and change no state
        recv!(s, []);
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_bad_ack_seq_1() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::None,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ), // WRONG
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ, // matching the ack_number of the unexpected ack
                ack_number: None,
                window_len: 0,
                ..RECV_TEMPL
            })
        );

        // It should trigger a RST, and change no state
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_bad_ack_seq_2() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::None,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 123456), // WRONG
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ + 123456, // matching the ack_number of the unexpected ack
                ack_number: None,
                window_len: 0,
                ..RECV_TEMPL
            })
        );

        // It should trigger a RST, and change no state
        assert_eq!(s.state, State::SynSent);
    }

    #[test]
    fn test_syn_sent_close() {
        let mut s = socket();
        s.close();
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_syn_sent_sack_option() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                sack_permitted: true,
                ..SEND_TEMPL
            }
        );
        assert!(s.remote_has_sack);

        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                sack_permitted: false,
                ..SEND_TEMPL
            }
        );
        assert!(!s.remote_has_sack);
    }

    #[test]
    fn test_syn_sent_win_scale_buffers() {
        for (buffer_size, shift_amt) in &[
            (64, 0),
            (128, 0),
            (1024, 0),
            (65535, 0),
            (65536, 1),
            (65537, 1),
            (131071, 1),
            (131072, 2),
            (524287, 3),
            (524288, 4),
            (655350, 4),
            (1048576, 5),
        ] {
            let mut s = socket_with_buffer_sizes(64, *buffer_size);
            s.local_seq_no = LOCAL_SEQ;
            assert_eq!(s.remote_win_shift, *shift_amt);
            s.socket.connect(&mut s.cx, REMOTE_END, LOCAL_END).unwrap();
            recv!(
                s,
                [TcpRepr {
                    control: TcpControl::Syn,
                    seq_number: LOCAL_SEQ,
                    ack_number: None,
                    max_seg_size: Some(BASE_MSS),
                    window_scale: Some(*shift_amt),
                    window_len: u16::try_from(*buffer_size).unwrap_or(u16::MAX),
                    sack_permitted: true,
                    ..RECV_TEMPL
                }]
            );
        }
    }

    #[test]
    fn test_syn_sent_syn_ack_no_window_scaling() {
        let mut s = socket_syn_sent_with_buffer_sizes(1048576, 1048576);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                // scaling does NOT apply to the window value in SYN packets
                window_len: 65535,
                window_scale: Some(5),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.remote_win_shift, 5);
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: None,
                window_len: 42,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Established);
        assert_eq!(s.remote_win_shift, 0);
        assert_eq!(s.remote_win_scale, None);
        assert_eq!(s.remote_win_len, 42);
    }

    #[test]
    fn test_syn_sent_syn_ack_window_scaling() {
        let mut s = socket_syn_sent();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(7),
                window_len: 42,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Established);
        assert_eq!(s.remote_win_scale, Some(7));
        // scaling does NOT apply to the window value in SYN packets
        assert_eq!(s.remote_win_len, 42);
    }

    // =========================================================================================//
    // Tests for the ESTABLISHED state.
    // =========================================================================================//

    #[test]
    fn test_established_recv() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.rx_buffer.dequeue_many(6), &b"abcdef"[..]);
    }

    #[test]
    fn test_peek_slice() {
        const BUF_SIZE: usize = 10;

        let send_buf = b"0123456";

        let mut s = socket_established_with_buffer_sizes(BUF_SIZE, BUF_SIZE);

        // Populate the recv buffer
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &send_buf[..],
                ..SEND_TEMPL
            }
        );

        // Peek into the recv buffer
        let mut peeked_buf = [0u8; BUF_SIZE];
        let actually_peeked = s.peek_slice(&mut peeked_buf[..]).unwrap();
        let mut recv_buf = [0u8; BUF_SIZE];
        let actually_recvd = s.recv_slice(&mut recv_buf[..]).unwrap();
        assert_eq!(
            &mut peeked_buf[..actually_peeked],
            &mut recv_buf[..actually_recvd]
        );
    }

    #[test]
    fn test_peek_slice_buffer_wrap() {
        const BUF_SIZE: usize = 10;

        let send_buf = b"0123456789";

        let mut s = socket_established_with_buffer_sizes(BUF_SIZE, BUF_SIZE);

        let _ = s.rx_buffer.enqueue_slice(&send_buf[..8]);
        let _ = s.rx_buffer.dequeue_many(6);
        let _ = s.rx_buffer.enqueue_slice(&send_buf[..5]);

        let mut peeked_buf = [0u8; BUF_SIZE];
        let actually_peeked = s.peek_slice(&mut peeked_buf[..]).unwrap();
        let mut recv_buf = [0u8; BUF_SIZE];
        let actually_recvd = s.recv_slice(&mut recv_buf[..]).unwrap();
        assert_eq!(
            &mut peeked_buf[..actually_peeked],
            &mut recv_buf[..actually_recvd]
        );
    }

    fn setup_rfc2018_cases() -> (TestSocket, Vec<u8>) {
        // This is a utility function used by the tests for RFC 2018 cases. It configures a socket
        // in a particular way suitable for those cases.
        //
        // RFC 2018: Assume the left window edge is 5000 and that the data transmitter sends [...]
        // segments, each containing 500 data bytes.
        let mut s = socket_established_with_buffer_sizes(4000, 4000);
        s.remote_has_sack = true;

        // create a segment that is 500 bytes long
        let mut segment: Vec<u8> = Vec::with_capacity(500);

        // move the last ack to 5000 by sending ten of them
        for _ in 0..50 {
            segment.extend_from_slice(b"abcdefghij")
        }
        for offset in (0..5000).step_by(500) {
            send!(
                s,
                TcpRepr {
                    seq_number: REMOTE_SEQ + 1 + offset,
                    ack_number: Some(LOCAL_SEQ + 1),
                    payload: &segment,
                    ..SEND_TEMPL
                }
            );
            recv!(
                s,
                [TcpRepr {
                    seq_number: LOCAL_SEQ + 1,
                    ack_number: Some(REMOTE_SEQ + 1 + offset + 500),
                    window_len: 3500,
                    ..RECV_TEMPL
                }]
            );
            s.recv(|data| {
                assert_eq!(data.len(), 500);
                assert_eq!(data, segment.as_slice());
                (500, ())
            })
            .unwrap();
        }
        assert_eq!(s.remote_last_win, 3500);
        (s, segment)
    }

    #[test]
    fn test_established_rfc2018_cases() {
        // This test case verifies the exact scenarios described on pages 8-9 of RFC 2018. Please
        // ensure its behavior does not deviate from those scenarios.

        let (mut s, segment) = setup_rfc2018_cases();
        // RFC 2018:
        //
        // Case 2: The first segment is dropped but the remaining 7 are received.
        //
        // Upon receiving each of the last seven packets, the data receiver will return a TCP ACK
        // segment that acknowledges sequence number 5000 and contains a SACK option specifying one
        // block of queued data:
        //
        //   Triggering   ACK      Left Edge  Right Edge
        //   Segment
        //
        //   5000         (lost)
        //   5500         5000     5500       6000
        //   6000         5000     5500       6500
        //   6500         5000     5500       7000
        //   7000         5000     5500       7500
        //   7500         5000     5500       8000
        //   8000         5000     5500       8500
        //   8500         5000     5500       9000
        //
        for offset in (500..3500).step_by(500) {
            send!(
                s,
                TcpRepr {
                    seq_number: REMOTE_SEQ + 1 + offset + 5000,
                    ack_number: Some(LOCAL_SEQ + 1),
                    payload: &segment,
                    ..SEND_TEMPL
                },
                Some(TcpRepr {
                    seq_number: LOCAL_SEQ + 1,
                    ack_number: Some(REMOTE_SEQ + 1 + 5000),
                    window_len: 4000,
                    sack_ranges: [
                        Some((
                            REMOTE_SEQ.0 as u32 + 1 + 5500,
                            REMOTE_SEQ.0 as u32 + 1 + 5500 + offset as u32
                        )),
                        None,
                        None
                    ],
                    ..RECV_TEMPL
                })
            );
        }
    }

    #[test]
    fn test_established_sliding_window_recv() {
        let mut s = socket_established();
        // Update our scaling parameters for a TCP with a scaled buffer.
        assert_eq!(s.rx_buffer.len(), 0);
        s.rx_buffer = SocketBuffer::new(vec![0; 262143]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        s.remote_win_scale = Some(0);
        s.remote_last_win = 65535;
        s.remote_win_shift = 2;

        // Create a TCP segment that will mostly fill an IP frame.
        let mut segment: Vec<u8> = Vec::with_capacity(1400);
        for _ in 0..100 {
            segment.extend_from_slice(b"abcdefghijklmn")
        }
        assert_eq!(segment.len(), 1400);

        // Send the frame
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &segment,
                ..SEND_TEMPL
            }
        );

        // Ensure that the received window size is shifted right by 2.
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1400),
                window_len: 65185,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_send() {
        let mut s = socket_established();
        // First roundtrip after establishing.
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.tx_buffer.len(), 6);
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tx_buffer.len(), 0);
        // Second roundtrip.
        s.send_slice(b"foobar").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"foobar"[..],
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tx_buffer.len(), 0);
    }

    #[test]
    fn test_established_send_no_ack_send() {
        let mut s = socket_established();
        s.set_nagle_enabled(false);
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        s.send_slice(b"foobar").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"foobar"[..],
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_send_buf_gt_win() {
        let mut data = [0; 32];
        for (i, elem) in data.iter_mut().enumerate() {
            *elem = i as u8
        }

        let mut s = socket_established();
        s.remote_win_len = 16;
        s.send_slice(&data[..]).unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &data[0..16],
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_send_window_shrink() {
        let mut s = socket_established();

        // 6 octets fit on the remote side's window, so we send them.
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.tx_buffer.len(), 6);

        println!(
            "local_seq_no={} remote_win_len={} remote_last_seq={}",
            s.local_seq_no, s.remote_win_len, s.remote_last_seq
        );

        // - Peer doesn't ack them yet
        // - Sends data so we need to reply with an ACK
        // - ...AND and sends a window announcement that SHRINKS the window, so data we've
        //   previously sent is now outside the window. Yes, this is allowed by TCP.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                window_len: 3,
                payload: &b"xyzxyz"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tx_buffer.len(), 6);

        println!(
            "local_seq_no={} remote_win_len={} remote_last_seq={}",
            s.local_seq_no, s.remote_win_len, s.remote_last_seq
        );

        // More data should not get sent since it doesn't fit in the window
        s.send_slice(b"foobar").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 64 - 6,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_receive_partially_outside_window() {
        let mut s = socket_established();

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );

        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();

        // Peer decides to retransmit (perhaps because the ACK was lost)
        // and also pushed data.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );

        s.recv(|data| {
            assert_eq!(data, b"def");
            (3, ())
        })
        .unwrap();
    }

    #[test]
    fn test_established_receive_partially_outside_window_fin() {
        let mut s = socket_established();

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );

        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();

        // Peer decides to retransmit (perhaps because the ACK was lost)
        // and also pushed data, and sent a FIN.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                control: TcpControl::Fin,
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );

        s.recv(|data| {
            assert_eq!(data, b"def");
            (3, ())
        })
        .unwrap();

        // We should accept the FIN, because even though the last packet was partially
        // outside the receive window, there is no hole after adding its data to the assembler.
        assert_eq!(s.state, State::CloseWait);
    }

    #[test]
    fn test_established_send_wrap() {
        let mut s = socket_established();
        let local_seq_start = TcpSeqNumber(i32::MAX - 1);
        s.local_seq_no = local_seq_start + 1;
        s.remote_last_seq = local_seq_start + 1;
        s.send_slice(b"abc").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: local_seq_start + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_established_no_ack() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
    }

    #[test]
    fn test_established_bad_ack() {
        let mut s = socket_established();
        // Already acknowledged data.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(TcpSeqNumber(LOCAL_SEQ.0 - 1)),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
        // Data not yet transmitted.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 10),
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    }

    /// dpwarp: an ACK of octets queued but never sent is an ACK of something not yet sent
    /// (RFC 9293 section 3.10.7.4): a challenge ACK, the segment and its text dropped, the
    /// octets kept. Upstream took the ACK (and the text) when the buffer held that much;
    /// tests/dpdk_hostile_peer.rs found it on the wire.
    #[test]
    fn test_ack_of_queued_unsent_data_is_not_taken() {
        let mut s = socket_established();
        s.send_slice(b"abcdefghij").unwrap();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 4),
                payload: &b"xyz"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
        assert_eq!(s.send_queue(), 10);
        assert_eq!(s.recv_queue(), 0);
        // Once sent, the same ACK is taken.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdefghij"[..],
                ..RECV_TEMPL
            })
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 4),
                payload: &b"xyz"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 4);
        assert_eq!(s.recv_queue(), 3);
    }

    /// dpwarp: after a retransmission timeout SND.NXT goes back, but an ACK of what was sent
    /// before it is still an ACK of sent data (SND.MAX bounds the acceptable ACKs).
    #[test]
    fn test_ack_of_data_sent_before_a_timeout_is_taken() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef012345").unwrap();
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control: TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"012345"[..],
            ..RECV_TEMPL
        }), exact);
        // The timeout sends the first segment again and SND.NXT is behind the second.
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        assert_eq!(s.remote_last_seq, LOCAL_SEQ + 1 + 6);
        // The originals arrived: the ACK of both is taken.
        send!(s, time 1010, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 12),
            ..SEND_TEMPL
        });
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 12);
        assert_eq!(s.send_queue(), 0);
    }

    #[test]
    fn test_established_bad_seq() {
        let mut s = socket_established();
        // Data outside of receive window.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 256,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);

        // Challenge ACKs are rate-limited, we don't get a second one immediately.
        send!(
            s,
            time 100,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 256,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );

        // If we wait a bit, we do get a new one.
        send!(
            s,
            time 2000,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 256,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
    }

    #[test]
    fn test_established_fin() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::CloseWait);
        sanity!(s, socket_close_wait());
    }

    /// dpwarp: a lent payload resolves only within the buffer it came in; while one waits
    /// to be taken, the next in-order segment is buffered behind it (so a consumer that
    /// takes the lent octets first and then reads sees the stream in order).
    #[test]
    fn test_lent_payload_in_its_frame_and_later_segments_behind_it() {
        let mut s = socket_established();
        s.set_rx_lend(true);
        let frame = *b"..abcdef..";
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &frame[2..8],
                ..SEND_TEMPL
            }
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"gh"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1 + 6);
        assert_eq!(s.rx_buffer.len(), 2);
        let lent = s.take_rx_lent().expect("lent");
        assert_eq!(lent.len(), 6);
        assert_eq!(lent.within(&frame), Some(&b"abcdef"[..]));
        assert_eq!(lent.within(&frame[3..]), None, "starts before the buffer");
        assert_eq!(lent.within(&frame[..7]), None, "ends past the buffer");
        assert_eq!(lent.within(&[0u8; 64]), None, "another buffer");
        assert_eq!(s.take_rx_lent(), None);
        let mut buf = [0u8; 8];
        assert_eq!(s.recv_slice(&mut buf), Ok(2));
        assert_eq!(&buf[..2], b"gh");
    }

    /// dpwarp: an out-of-order segment's payload is handed over before it is buffered, with
    /// how far ahead of the next octet `recv` returns it lies (octets buffered in order, then
    /// the hole); settling buffers the octets the consumer did not take (the taken ones'
    /// place keeps what the buffer held); in-order payload and peeking turned off record
    /// nothing, and a record never settled aborts the connection at the next segment.
    #[test]
    fn test_out_of_order_payload_is_handed_over_then_settled() {
        let mut s = socket_established();
        s.set_rx_peek_ahead(true);
        // In order: buffered, not recorded.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"ab"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.take_rx_ahead(), None);
        assert!(!s.settle_rx_ahead(b""), "nothing to settle");
        // Three octets missing, then "fghij" (acknowledged with a duplicate ACK).
        let frame = *b"..fghij..";
        let _ = send(
            &mut s,
            Instant::from_millis(0),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 5,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &frame[2..7],
                ..SEND_TEMPL
            },
        );
        let ahead = s.take_rx_ahead().expect("out of order: handed over");
        assert_eq!(ahead.ahead, 2 + 3, "two buffered in order, then a three-octet hole");
        let payload = ahead.payload.within(&frame).unwrap();
        assert_eq!(payload, b"fghij");
        assert_eq!(s.take_rx_ahead(), None);
        assert!(!s.settle_rx_ahead(b"too long a tail"), "longer than the payload");
        // The consumer took "fg"; "hij" is buffered.
        assert!(s.settle_rx_ahead(&payload[2..]));
        // The hole filled (acknowledged at once, RFC 5681 section 4.2).
        let _ = send(
            &mut s,
            Instant::from_millis(0),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 2,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"cde"[..],
                ..SEND_TEMPL
            },
        );
        assert_eq!(s.take_rx_ahead(), None, "in order again");
        let mut buf = [0u8; 16];
        assert_eq!(s.recv_slice(&mut buf), Ok(10));
        assert_eq!(&buf[..5], b"abcde");
        assert_eq!(&buf[7..10], b"hij");
        // Turned off: buffered at once, nothing recorded.
        s.set_rx_peek_ahead(false);
        let _ = send(
            &mut s,
            Instant::from_millis(0),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 12,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"xy"[..],
                ..SEND_TEMPL
            },
        );
        assert_eq!(s.take_rx_ahead(), None);
        assert!(!s.settle_rx_ahead(b""));
        // On again, and a record left unsettled: the next segment aborts the connection.
        s.set_rx_peek_ahead(true);
        let _ = send(
            &mut s,
            Instant::from_millis(0),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 20,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"zz"[..],
                ..SEND_TEMPL
            },
        );
        assert!(s.take_rx_ahead().is_some());
        let _ = send(
            &mut s,
            Instant::from_millis(0),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 10,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"k"[..],
                ..SEND_TEMPL
            },
        );
        assert_eq!(s.state(), State::Closed);
    }

    #[test]
    fn test_data_after_fin_is_ignored() {
        // dpwarp: RFC 9293 section 3.10.7.4, seventh step: after the peer's FIN, its data is
        // not received (neither by `recv` nor lent), in every state that
        // follows a received FIN.
        for state in [
            State::CloseWait,
            State::LastAck,
            State::Closing,
            State::TimeWait,
        ] {
            let mut s = socket_established();
            send!(
                s,
                TcpRepr {
                    control: TcpControl::Fin,
                    seq_number: REMOTE_SEQ + 1,
                    ack_number: Some(LOCAL_SEQ + 1),
                    payload: &b"abc"[..],
                    ..SEND_TEMPL
                }
            );
            assert_eq!(s.state, State::CloseWait);
            s.state = state;
            s.set_rx_lend(true);
            s.recv_slice(&mut [0; 3]).unwrap();
            s.socket.process(
                &mut s.cx,
                &IpReprIpvX(IpvXRepr {
                    src_addr: REMOTE_ADDR,
                    dst_addr: LOCAL_ADDR,
                    next_header: IpProtocol::Tcp,
                    payload_len: 20 + 3,
                    hop_limit: 64,
                }),
                &TcpRepr {
                    seq_number: REMOTE_SEQ + 1 + 3 + 1,
                    ack_number: Some(LOCAL_SEQ + 1),
                    payload: &b"xyz"[..],
                    ..SEND_TEMPL
                },
            );
            assert_eq!(s.recv_queue(), 0, "{state}");
            assert_eq!(s.take_rx_lent(), None, "{state}");
            assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1 + 3 + 1, "{state}");
        }
    }

    #[test]
    fn test_established_fin_after_missing() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"123456"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.state, State::Established);
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6 + 6),
                window_len: 52,
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.state, State::Established);
    }

    #[test]
    fn test_established_send_fin() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::CloseWait);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_rst() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_established_rst_no_ack() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_established_close() {
        let mut s = socket_established();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        sanity!(s, socket_fin_wait_1());
    }

    #[test]
    fn test_established_abort() {
        let mut s = socket_established();
        s.abort();
        assert_eq!(s.state, State::Closed);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Rst,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_established_rst_bad_seq() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ, // Wrong seq
                ack_number: None,
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );

        assert_eq!(s.state, State::Established);

        // Send something to advance seq by 1
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1, // correct seq
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"a"[..],
                ..SEND_TEMPL
            }
        );

        // Send wrong rst again, check that the challenge ack is correctly updated
        // The ack number must be updated even if we don't call dispatch on the socket
        // See https://github.com/smoltcp-rs/smoltcp/issues/338
        send!(
            s,
            time 2000,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ, // Wrong seq
                ack_number: None,
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 2), // this has changed
                window_len: 63,
                ..RECV_TEMPL
            })
        );
    }

    // =========================================================================================//
    // Tests for the FIN-WAIT-1 state.
    // =========================================================================================//

    #[test]
    fn test_fin_wait_1_fin_ack() {
        let mut s = socket_fin_wait_1();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait2);
        sanity!(s, socket_fin_wait_2());
    }

    #[test]
    fn test_fin_wait_1_fin_fin() {
        let mut s = socket_fin_wait_1();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closing);
        sanity!(s, socket_closing());
    }

    #[test]
    fn test_fin_wait_1_fin_with_data_queued() {
        let mut s = socket_established();
        s.remote_win_len = 6;
        s.send_slice(b"abcdef123456").unwrap();
        s.close();
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            })
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait1);
    }

    #[test]
    fn test_fin_wait_1_recv() {
        let mut s = socket_fin_wait_1();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait1);
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
    }

    #[test]
    fn test_fin_wait_1_close() {
        let mut s = socket_fin_wait_1();
        s.close();
        assert_eq!(s.state, State::FinWait1);
    }

    // =========================================================================================//
    // Tests for the FIN-WAIT-2 state.
    // =========================================================================================//

    #[test]
    fn test_fin_wait_2_fin() {
        let mut s = socket_fin_wait_2();
        send!(s, time 1_000, TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        });
        assert_eq!(s.state, State::TimeWait);
        sanity!(s, socket_time_wait(false));
    }

    /// dpwarp: with delayed ACKs on, the FIN that ends our close is still acknowledged at
    /// once (from FIN-WAIT-2 and from FIN-WAIT-1), not after the delayed-ACK timer.
    #[test]
    fn test_fin_ending_our_close_is_acked_at_once() {
        // Data first: its ACK waits for the delayed-ACK timer, which then runs when the FIN
        // comes (a bare FIN on an idle timer was acknowledged at once anyway).
        let mut s = socket_fin_wait_2();
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(s, time 1_000, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 1_000);
        send!(s, time 1_001, TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        });
        assert_eq!(s.state, State::TimeWait);
        recv!(s, time 1_001, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3 + 1),
            window_len: 61,
            ..RECV_TEMPL
        }));

        // FIN-WAIT-1, our FIN sent: data, then the peer's FIN acknowledging ours (straight
        // to TIME-WAIT).
        let mut s = socket_fin_wait_1();
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        recv!(s, time 1_000, Ok(TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        send!(s, time 1_000, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 1_000);
        send!(s, time 1_001, TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        });
        assert_eq!(s.state, State::TimeWait);
        recv!(s, time 1_001, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3 + 1),
            window_len: 61,
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_fin_wait_2_recv() {
        let mut s = socket_fin_wait_2();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait2);
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_fin_wait_2_close() {
        let mut s = socket_fin_wait_2();
        s.close();
        assert_eq!(s.state, State::FinWait2);
    }

    // =========================================================================================//
    // Tests for the CLOSING state.
    // =========================================================================================//

    #[test]
    fn test_closing_ack_fin() {
        let mut s = socket_closing();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        send!(s, time 1_000, TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        });
        assert_eq!(s.state, State::TimeWait);
        sanity!(s, socket_time_wait(true));
    }

    #[test]
    fn test_closing_close() {
        let mut s = socket_closing();
        s.close();
        assert_eq!(s.state, State::Closing);
    }

    // =========================================================================================//
    // Tests for the TIME-WAIT state.
    // =========================================================================================//

    #[test]
    fn test_time_wait_from_fin_wait_2_ack() {
        let mut s = socket_time_wait(false);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_time_wait_from_closing_no_ack() {
        let mut s = socket_time_wait(true);
        recv!(s, []);
    }

    #[test]
    fn test_time_wait_close() {
        let mut s = socket_time_wait(false);
        s.close();
        assert_eq!(s.state, State::TimeWait);
    }

    #[test]
    fn test_time_wait_retransmit() {
        let mut s = socket_time_wait(false);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        send!(s, time 5_000, TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }, Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }));
        assert_eq!(
            s.timer,
            Timer::Close {
                expires_at: Instant::from_secs(5) + CLOSE_DELAY
            }
        );
    }

    #[test]
    fn test_time_wait_timeout() {
        let mut s = socket_time_wait(false);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::TimeWait);
        recv_nothing!(s, time 60_000);
        assert_eq!(s.state, State::Closed);
    }

    // =========================================================================================//
    // Tests for the CLOSE-WAIT state.
    // =========================================================================================//

    #[test]
    fn test_close_wait_ack() {
        let mut s = socket_close_wait();
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6),
                ..SEND_TEMPL
            }
        );
    }

    #[test]
    fn test_close_wait_close() {
        let mut s = socket_close_wait();
        s.close();
        assert_eq!(s.state, State::LastAck);
        sanity!(s, socket_last_ack());
    }

    // =========================================================================================//
    // Tests for the LAST-ACK state.
    // =========================================================================================//
    #[test]
    fn test_last_ack_fin_ack() {
        let mut s = socket_last_ack();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::LastAck);
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_last_ack_ack_not_of_fin() {
        let mut s = socket_last_ack();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::LastAck);

        // ACK received that doesn't ack the FIN: socket should stay in LastAck.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::LastAck);

        // ACK received of fin: socket should change to Closed.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_last_ack_close() {
        let mut s = socket_last_ack();
        s.close();
        assert_eq!(s.state, State::LastAck);
    }

    // =========================================================================================//
    // Tests for transitioning through multiple states.
    // =========================================================================================//

    #[test]
    fn test_listen() {
        let mut s = socket();
        s.listen(LISTEN_END).unwrap();
        assert_eq!(s.state, State::Listen);
    }

    #[test]
    fn test_three_way_handshake() {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::SynReceived);
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::Established);
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
    }

    #[test]
    fn test_remote_close() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::CloseWait);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        s.close();
        assert_eq!(s.state, State::LastAck);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_local_close() {
        let mut s = socket_established();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait2);
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_simultaneous_close() {
        let mut s = socket_established();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        recv!(
            s,
            [TcpRepr {
                // due to reordering, this is logically located...
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closing);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        // ... at this point
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        recv!(s, []);
    }

    #[test]
    fn test_simultaneous_close_combined_fin_ack() {
        let mut s = socket_established();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_simultaneous_close_raced() {
        let mut s = socket_established();
        s.close();
        assert_eq!(s.state, State::FinWait1);

        // Socket receives FIN before it has a chance to send its own FIN
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closing);

        // FIN + ack-of-FIN
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::Closing);

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        recv!(s, []);
    }

    #[test]
    fn test_simultaneous_close_raced_with_data() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        s.close();
        assert_eq!(s.state, State::FinWait1);

        // Socket receives FIN before it has a chance to send its own data+FIN
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closing);

        // data + FIN + ack-of-FIN
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::Closing);

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        recv!(s, []);
    }

    #[test]
    fn test_fin_with_data() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        s.close();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        )
    }

    #[test]
    fn test_mutual_close_with_data_1() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
                ..SEND_TEMPL
            }
        );
    }

    #[test]
    fn test_mutual_close_with_data_2() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        s.close();
        assert_eq!(s.state, State::FinWait1);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Fin,
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::FinWait2);
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6 + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 1),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.state, State::TimeWait);
    }

    // =========================================================================================//
    // Tests for retransmission on packet loss.
    // =========================================================================================//

    #[test]
    fn test_duplicate_seq_ack() {
        let mut s = socket_recved();
        // remote retransmission
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_data_retransmit() {
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1050);
        recv!(s, time 2000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_data_retransmit_bursts() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef012345").unwrap();

        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);
        recv_nothing!(s, time 0);

        recv_nothing!(s, time 50);

        recv!(s, time 1000, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 1500, Ok(TcpRepr {
            control:    TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);
        recv_nothing!(s, time 1550);
    }

    #[test]
    fn test_data_retransmit_bursts_half_ack() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef012345").unwrap();

        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);
        // Acknowledge the first packet
        send!(s, time 5, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        // The second packet should be re-sent.
        recv!(s, time 1500, Ok(TcpRepr {
            control:    TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);

        recv_nothing!(s, time 1550);
    }

    #[test]
    fn test_data_retransmit_bursts_half_ack_close() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef012345").unwrap();
        s.close();

        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);
        // Acknowledge the first packet
        send!(s, time 5, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        // The second packet should be re-sent.
        recv!(s, time 1500, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }), exact);

        recv_nothing!(s, time 1550);
    }

    #[test]
    fn test_send_data_after_syn_ack_retransmit() {
        let mut s = socket_syn_received();
        recv!(s, time 50, Ok(TcpRepr {
            control:    TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }));
        recv!(s, time 750, Ok(TcpRepr { // retransmit
            control:    TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::Established);
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        )
    }

    #[test]
    fn test_established_retransmit_for_dup_ack() {
        let mut s = socket_established();
        // Duplicate ACKs do not replace the retransmission timer
        s.send_slice(b"abc").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));
        // Retransmit timer is on because all data was sent
        assert_eq!(s.tx_buffer.len(), 3);
        // ACK nothing new
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // Retransmit
        recv!(s, time 4000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_established_retransmit_reset_after_ack() {
        let mut s = socket_established();
        s.remote_win_len = 6;
        s.send_slice(b"abcdef").unwrap();
        s.send_slice(b"123456").unwrap();
        s.send_slice(b"ABCDEF").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1005, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"123456"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1015, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1020, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"ABCDEF"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_established_queue_during_retransmission() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef123456ABCDEF").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        })); // this one is dropped
        recv!(s, time 1005, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"123456"[..],
            ..RECV_TEMPL
        })); // this one is received
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"ABCDEF"[..],
            ..RECV_TEMPL
        })); // also dropped
        recv!(s, time 2000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        })); // retransmission
        send!(s, time 2005, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            ..SEND_TEMPL
        }); // acknowledgement of both segments
        recv!(s, time 2010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"ABCDEF"[..],
            ..RECV_TEMPL
        })); // retransmission of only unacknowledged data
    }

    #[test]
    fn test_close_wait_retransmit_reset_after_ack() {
        let mut s = socket_close_wait();
        s.remote_win_len = 6;
        s.send_slice(b"abcdef").unwrap();
        s.send_slice(b"123456").unwrap();
        s.send_slice(b"ABCDEF").unwrap();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1005, TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload:    &b"123456"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1015, TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1020, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload:    &b"ABCDEF"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_fin_wait_1_retransmit_reset_after_ack() {
        let mut s = socket_established();
        s.remote_win_len = 6;
        s.send_slice(b"abcdef").unwrap();
        s.send_slice(b"123456").unwrap();
        s.send_slice(b"ABCDEF").unwrap();
        s.close();
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1005, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"123456"[..],
            ..RECV_TEMPL
        }));
        send!(s, time 1015, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            window_len: 6,
            ..SEND_TEMPL
        });
        recv!(s, time 1020, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"ABCDEF"[..],
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_fast_retransmit_after_triple_duplicate_ack() {
        let mut s = socket_established();
        s.remote_mss = 6;

        // Normal ACK of previously received segment
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });

        // Send a long string of text divided into several packets
        // because of previously received "window_len"
        s.send_slice(b"xxxxxxyyyyyywwwwwwzzzzzz").unwrap();
        // This packet is lost
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"xxxxxx"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1005, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"yyyyyy"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + (6 * 2),
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"wwwwww"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1015, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + (6 * 3),
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"zzzzzz"[..],
            ..RECV_TEMPL
        }));

        // Three duplicate ACKs
        for t in [1050, 1055, 1060] {
            send!(s, time t, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            });
        }

        // dpwarp: the fast retransmit is the lost segment alone (upstream d84a8980; 0.12
        // resent everything in flight after it).
        recv!(s, time 1100, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"xxxxxx"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1105);
        assert_eq!(s.retransmissions(), (1, 0));

        // The retransmission timer still runs for what is in flight.
        assert!(matches!(s.timer, Timer::Retransmit { .. }));

        // ACK all received segments: recovery is over.
        send!(s, time 1120, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + (6 * 4)),
            ..SEND_TEMPL
        });
        assert!(!s.in_recovery);
        recv_nothing!(s, time 1125);
    }

    /// dpwarp: the fast retransmit goes out ahead of new data waiting to be sent, and the new
    /// data follows (0.12 waited until nothing new could be sent, and the next new segment
    /// then turned the fast retransmit into a full timeout).
    #[test]
    fn test_fast_retransmit_goes_before_new_data() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 3;
        s.send_slice(b"aaaBBBcccDDDeeeFFF").unwrap();
        for (i, p) in [b"aaa", b"BBB", b"ccc", b"DDD"].iter().enumerate() {
            recv!(s, time 1000, Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 3 * i,
                ack_number: Some(REMOTE_SEQ + 1),
                payload:    &p[..],
                ..RECV_TEMPL
            }));
        }
        // "aaa" was lost: three duplicate ACKs.
        for t in [1050, 1055, 1060] {
            send!(s, time t, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            });
        }
        recv!(s, time 1100, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"aaa"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1105, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 12,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"eee"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1110, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 15,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"FFF"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1115);
        assert_eq!(s.retransmissions(), (1, 0));
    }

    /// dpwarp: in recovery, an ACK that covers the retransmitted segment but not all that was
    /// sent (a partial ACK) retransmits the next missing segment at once (RFC 6582 section
    /// 3.2 step 5), without waiting for three more duplicate ACKs.
    #[test]
    fn test_partial_ack_retransmits_the_next_hole() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 3;
        s.send_slice(b"aaaBBBcccDDDeeeFFF").unwrap();
        for i in 0..6 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| assert_eq!(
                r.unwrap().seq_number,
                LOCAL_SEQ + 1 + 3 * i
            ));
        }
        // "aaa" and "ccc" were lost.
        for t in [1050, 1055, 1060] {
            send!(s, time t, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            });
        }
        recv!(s, time 1100, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"aaa"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1101);
        // The peer now has "aaaBBB": a partial ACK.
        send!(s, time 1150, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        });
        recv!(s, time 1151, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"ccc"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1152);
        // All acknowledged: recovery ends, nothing more is sent.
        send!(s, time 1200, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 18),
            ..SEND_TEMPL
        });
        assert!(!s.in_recovery);
        recv_nothing!(s, time 1201);
        assert_eq!(s.retransmissions(), (2, 0));
    }

    /// The peer's first ACK: the window it announces, and the ACK later duplicates repeat.
    fn established_ack(s: &mut TestSocket) {
        let ack = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        };
        assert_eq!(send(s, Instant::from_millis(0), &ack), None);
    }

    /// dpwarp (upstream #1162): data the socket already holds, sent again because our ACK
    /// was lost, is ACKed each time it comes, not once a second like a challenge ACK.
    #[test]
    fn test_retransmitted_data_is_acked_every_time() {
        let mut s = socket_established();
        let data = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        };
        send(&mut s, Instant::from_millis(0), &data);
        assert_eq!(s.recv_queue(), 6);
        for t in [100, 101, 102] {
            let reply = send(&mut s, Instant::from_millis(t), &data);
            assert_eq!(
                reply.map(|r| r.ack_number),
                Some(Some(REMOTE_SEQ + 1 + 6)),
                "an ACK for the copy at {t} ms"
            );
        }
        // An empty segment outside the window still draws at most one ACK a second.
        let stale = TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1000,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        };
        assert!(send(&mut s, Instant::from_millis(200), &stale).is_some());
        assert!(send(&mut s, Instant::from_millis(201), &stale).is_none());
    }

    /// dpwarp: the ACK of a segment received before carries it as the first SACK block, a
    /// D-SACK (RFC 2883 section 4), ahead of the blocks of data held out of order; without
    /// SACK permitted, no block.
    #[test]
    fn test_duplicate_segment_reported_by_dsack() {
        let mut s = socket_established();
        s.remote_has_sack = true;
        let data = |offset: usize, payload: &'static [u8]| TcpRepr {
            seq_number: REMOTE_SEQ + 1 + offset,
            ack_number: Some(LOCAL_SEQ + 1),
            payload,
            ..SEND_TEMPL
        };
        send(&mut s, Instant::from_millis(0), &data(0, b"abcdef"));
        // Held out of order: 10..13.
        send(&mut s, Instant::from_millis(1), &data(10, b"klm"));
        let reply = send(&mut s, Instant::from_millis(2), &data(0, b"abcdef")).unwrap();
        let wire = |l: usize, r: usize| {
            Some(((REMOTE_SEQ + 1 + l).0 as u32, (REMOTE_SEQ + 1 + r).0 as u32))
        };
        assert_eq!(reply.ack_number, Some(REMOTE_SEQ + 1 + 6));
        assert_eq!(reply.sack_ranges, [wire(0, 6), wire(10, 13), None]);

        let mut s = socket_established();
        send(&mut s, Instant::from_millis(0), &data(0, b"abcdef"));
        let reply = send(&mut s, Instant::from_millis(2), &data(0, b"abcdef")).unwrap();
        assert_eq!(reply.sack_ranges, [None, None, None]);
    }

    /// dpwarp: what one dispatch round at `t` ms sends: the offsets after LOCAL_SEQ + 1 of
    /// the segments, until the socket sends nothing more.
    fn sent_offsets(s: &mut TestSocket, t: i64) -> Vec<usize> {
        let mut seqs = Vec::new();
        loop {
            s.cx.set_now(Instant::from_millis(t));
            let mut seq = None;
            s.socket
                .dispatch(&mut s.cx, |_, (_, repr)| {
                    seq = Some(repr.seq_number - (LOCAL_SEQ + 1));
                    Ok::<(), ()>(())
                })
                .unwrap();
            match seq {
                Some(seq) => seqs.push(seq),
                None => return seqs,
            }
        }
    }

    /// dpwarp: an established socket with Reno, 10-octet segments and 300 octets queued.
    fn socket_reno() -> TestSocket {
        let mut s = socket_established_with_buffer_sizes(1024, 1024);
        established_ack(&mut s);
        s.remote_mss = 10;
        s.set_congestion_control(CongestionControl::Reno);
        s.send_slice(&[b'x'; 300]).unwrap();
        s
    }

    fn ack_at(s: &mut TestSocket, t: i64, offset: usize) {
        send(
            s,
            Instant::from_millis(t),
            &TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + offset),
                ..SEND_TEMPL
            },
        );
    }

    /// dpwarp: the congestion window limits what is in flight from SND.UNA (0.12 compared it
    /// with what one dispatch could add, so it limited nothing): the initial window of ten
    /// segments (RFC 6928), then slow start (RFC 5681 section 3.1) by what each ACK covers.
    #[test]
    fn test_congestion_window_limits_what_is_in_flight() {
        let mut s = socket_reno();
        assert_eq!(s.congestion_window(), 100);
        let first: Vec<usize> = (0..10).map(|i| i * 10).collect();
        assert_eq!(sent_offsets(&mut s, 1000), first);
        ack_at(&mut s, 1010, 50);
        assert_eq!(s.congestion_window(), 150);
        let next: Vec<usize> = (10..20).map(|i| i * 10).collect();
        assert_eq!(sent_offsets(&mut s, 1010), next);
        // Without congestion control the receive window (256) alone limits (25 full
        // segments; Nagle holds the last 6 octets).
        let mut s = socket_reno();
        s.set_congestion_control(CongestionControl::None);
        assert_eq!(sent_offsets(&mut s, 1000).len(), 25);
    }

    /// dpwarp: a fast retransmit halves the window once (RFC 5681 equation (4)); during
    /// recovery each further duplicate ACK lets one new segment go (RFC 6582 section 3.2
    /// steps 3-4), and the full ACK leaves the window at min(ssthresh, flight + 1 segment)
    /// (step 6), not a burst of ssthresh.
    #[test]
    fn test_fast_recovery_window() {
        let mut s = socket_reno();
        assert_eq!(sent_offsets(&mut s, 1000).len(), 10);
        // The first segment was lost: three duplicate ACKs retransmit it, and nothing new
        // goes while the 100 octets in flight exceed ssthresh (50) + 3 segments.
        for t in [1050, 1051, 1052] {
            ack_at(&mut s, t, 0);
        }
        assert_eq!(sent_offsets(&mut s, 1053), vec![0]);
        assert_eq!(s.congestion_window(), 80);
        ack_at(&mut s, 1054, 0);
        ack_at(&mut s, 1055, 0);
        assert_eq!(sent_offsets(&mut s, 1056), vec![]);
        ack_at(&mut s, 1057, 0);
        assert_eq!(sent_offsets(&mut s, 1058), vec![100]);
        // All that was sent before the loss is acknowledged: recovery ends with 10 octets
        // in flight, so the window is 20 and one more segment goes.
        ack_at(&mut s, 1060, 100);
        assert_eq!(s.congestion_window(), 20);
        assert_eq!(sent_offsets(&mut s, 1061), vec![110]);
    }

    /// dpwarp: the first two duplicate ACKs each send one new segment beyond a full
    /// congestion window (Limited Transmit, RFC 3042); the third retransmits.
    #[test]
    fn test_limited_transmit() {
        let mut s = socket_reno();
        assert_eq!(sent_offsets(&mut s, 1000).len(), 10);
        ack_at(&mut s, 1050, 0);
        assert_eq!(sent_offsets(&mut s, 1051), vec![100]);
        ack_at(&mut s, 1052, 0);
        assert_eq!(sent_offsets(&mut s, 1053), vec![110]);
        ack_at(&mut s, 1054, 0);
        assert_eq!(sent_offsets(&mut s, 1055), vec![0]);
        assert_eq!(s.retransmissions(), (1, 0));
    }

    /// dpwarp: with three segments outstanding and nothing more to send, two duplicate ACKs
    /// retransmit (Early Retransmit, RFC 5827); with more to send, three are needed.
    #[test]
    fn test_early_retransmit() {
        let mut s = socket_established_with_buffer_sizes(1024, 1024);
        established_ack(&mut s);
        s.remote_mss = 10;
        s.send_slice(&[b'x'; 30]).unwrap();
        assert_eq!(sent_offsets(&mut s, 1000), vec![0, 10, 20]);
        ack_at(&mut s, 1050, 0);
        assert_eq!(sent_offsets(&mut s, 1051), vec![]);
        ack_at(&mut s, 1052, 0);
        assert_eq!(sent_offsets(&mut s, 1053), vec![0]);
        assert_eq!(s.retransmissions(), (1, 0));

        let mut s = socket_established_with_buffer_sizes(1024, 1024);
        established_ack(&mut s);
        s.remote_mss = 10;
        s.send_slice(&[b'x'; 30]).unwrap();
        assert_eq!(sent_offsets(&mut s, 1000), vec![0, 10, 20]);
        s.send_slice(&[b'y'; 10]).unwrap();
        ack_at(&mut s, 1050, 0);
        ack_at(&mut s, 1052, 0);
        assert_eq!(sent_offsets(&mut s, 1053), vec![30], "new data, not a retransmission");
        assert_eq!(s.retransmissions(), (0, 0));
    }

    /// dpwarp: an established socket with 10-octet segments and an RTT sample of 1 ms (so
    /// the probe timeout is `TLP_MIN_PTO`, 2 ms), nothing in flight at 1001 ms.
    fn socket_sampled() -> TestSocket {
        let mut s = socket_established_with_buffer_sizes(1024, 1024);
        established_ack(&mut s);
        s.remote_mss = 10;
        s.set_nagle_enabled(false);
        s.send_slice(&[b'a'; 10]).unwrap();
        assert_eq!(sent_offsets(&mut s, 1000), vec![0]);
        ack_at(&mut s, 1001, 10);
        assert!(s.rtte.have_measurement);
        s
    }

    /// dpwarp: the last segments of a burst lost with nothing after them: 2 x SRTT (at
    /// least 2 ms) after the last ACK the last segment goes again (a tail loss probe, RFC
    /// 8985 section 7), where before only the retransmission timeout (at least 50 ms) came.
    /// One probe per episode; its ACK leaves the window as it was (no D-SACK to tell a
    /// repaired loss from a spurious probe) and keeps the RTT sample the original started.
    #[test]
    fn test_tail_loss_probe_resends_the_last_segment() {
        let mut s = socket_sampled();
        s.set_congestion_control(CongestionControl::Reno);
        s.send_slice(&[b'b'; 30]).unwrap();
        assert_eq!(sent_offsets(&mut s, 1001), vec![10, 20, 30]);
        assert_eq!(sent_offsets(&mut s, 1002), vec![]);
        assert_eq!(sent_offsets(&mut s, 1003), vec![30]);
        assert_eq!(s.loss_probes(), 1);
        assert_eq!(s.retransmissions(), (0, 0));
        // One probe per episode: nothing more until the timeout.
        assert_eq!(sent_offsets(&mut s, 1010), vec![]);
        let cwnd = s.congestion_window();
        ack_at(&mut s, 1012, 40);
        assert_eq!(s.tlp_out, None);
        assert_eq!(s.congestion_window(), cwnd);
        // The sample started at 1001 ms ended at 1012 ms: SRTT = (7 x 1 + 11) / 8 ms.
        assert_eq!(s.rtte.srtt_us(), (7 * 1000 + 11_000 + 7) / 8);
    }

    /// dpwarp: with new data waiting behind a full congestion window, the probe is one new
    /// segment beyond the window (RFC 8985 section 7.3).
    #[test]
    fn test_tail_loss_probe_sends_new_data() {
        let mut s = socket_reno();
        assert_eq!(sent_offsets(&mut s, 1000).len(), 10);
        ack_at(&mut s, 1001, 10);
        assert_eq!(sent_offsets(&mut s, 1001), vec![100, 110]);
        assert_eq!(sent_offsets(&mut s, 1002), vec![]);
        assert_eq!(sent_offsets(&mut s, 1003), vec![120]);
        assert_eq!(s.loss_probes(), 1);
        assert_eq!(sent_offsets(&mut s, 1004), vec![]);
    }

    /// dpwarp: one segment in flight gets no probe (RFC 8985 section 7.2 would wait for the
    /// peer's delayed ACK, 200 ms, past the retransmission timeout): the timeout resends it.
    #[test]
    fn test_no_tail_loss_probe_for_one_segment() {
        let mut s = socket_sampled();
        s.send_slice(&[b'b'; 10]).unwrap();
        assert_eq!(sent_offsets(&mut s, 1001), vec![10]);
        assert_eq!(sent_offsets(&mut s, 1040), vec![]);
        assert_eq!(s.loss_probes(), 0);
        assert_eq!(sent_offsets(&mut s, 1060), vec![10]);
        assert_eq!(s.retransmissions(), (0, 1));
    }

    /// dpwarp: a retransmission timeout leaves a window of one segment (RFC 5681 section
    /// 3.1, the loss window): one segment goes, then slow start from what its ACK covers.
    #[test]
    fn test_timeout_sends_one_segment_then_slow_start() {
        let mut s = socket_reno();
        assert_eq!(sent_offsets(&mut s, 1000).len(), 10);
        assert_eq!(sent_offsets(&mut s, 5000), vec![0]);
        assert_eq!(s.congestion_window(), 10);
        assert_eq!(s.retransmissions(), (0, 1));
        ack_at(&mut s, 5010, 10);
        assert_eq!(sent_offsets(&mut s, 5011), vec![10, 20]);
    }

    /// The SACK option of an ACK from the peer, for octets `left..right` after LOCAL_SEQ.
    fn sack_block(left: usize, right: usize) -> [Option<(u32, u32)>; 3] {
        [
            Some(((LOCAL_SEQ + left).0 as u32, (LOCAL_SEQ + right).0 as u32)),
            None,
            None,
        ]
    }

    /// dpwarp: a SACK block holding more than two segments above SND.UNA marks the segment
    /// at SND.UNA lost (RFC 6675 section 4, IsLost): it is retransmitted on that ACK, with
    /// no wait for the third duplicate. A block holding less does not.
    #[test]
    fn test_sack_shows_the_loss() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 3;
        s.send_slice(b"aaaBBBcccDDD").unwrap();
        for i in 0..4 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| assert_eq!(
                r.unwrap().seq_number,
                LOCAL_SEQ + 1 + 3 * i
            ));
        }
        // "BBB" held above the hole: two segments' worth or less is not yet a loss.
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 7),
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 1051);
        // "BBBcccDDD" held: the next ACK (only the second duplicate) retransmits "aaa".
        send!(s, time 1060, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 13),
            ..SEND_TEMPL
        });
        recv!(s, time 1061, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"aaa"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1062);
        // The same blocks again ask for nothing more: "aaa" is on its way.
        send!(s, time 1063, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 13),
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 1064);
        assert_eq!(s.retransmissions(), (1, 0));
    }

    /// dpwarp: SACK blocks about octets never sent (past SND.NXT, or at or below SND.UNA)
    /// are ignored: a peer cannot make us retransmit with them.
    #[test]
    fn test_sack_blocks_outside_what_was_sent_are_ignored() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 2;
        s.set_nagle_enabled(false);
        s.send_slice(b"aaBBccDDeeFF").unwrap();
        for _ in 0..4 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| assert!(r.is_ok()));
        }
        // Sent: up to LOCAL_SEQ + 9; "eeFF" queued. Blocks reaching past what was sent (into
        // the queued octets, or beyond), or starting at or below SND.UNA, would each claim
        // more than two segments held above SND.UNA; what goes next is new data. (Two ACKs:
        // a third duplicate would start a fast retransmit by itself.)
        for (block, next, payload) in [
            (sack_block(3, 13), 9, &b"ee"[..]),
            (sack_block(0, 9), 11, &b"FF"[..]),
        ] {
            send!(s, time 1050, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                sack_ranges: block,
                ..SEND_TEMPL
            });
            recv!(s, time 1051, Ok(TcpRepr {
                seq_number: LOCAL_SEQ + next,
                ack_number: Some(REMOTE_SEQ + 1),
                payload,
                ..RECV_TEMPL
            }));
        }
        assert_eq!(s.retransmissions(), (0, 0));
    }

    /// dpwarp: a hole that comes to the front only as recovery ends (the ACK reaches the
    /// recovery point) is retransmitted on that ACK when its SACK block shows the octets
    /// after it held; no duplicate ACK would follow, as the peer has everything else.
    #[test]
    fn test_sack_finds_the_hole_left_when_recovery_ends() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 3;
        s.send_slice(b"aaaBBBcccDDD").unwrap();
        for i in 0..4 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| assert!(r.is_ok()));
            let _ = i;
        }
        // "aaa" lost: recovery up to LOCAL_SEQ + 13.
        for t in [1050, 1055, 1060] {
            send!(s, time t, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            });
        }
        recv(&mut s, Instant::from_millis(1061), |r: Result<TcpRepr, ()>| assert_eq!(
            r.unwrap().payload,
            &b"aaa"[..]
        ));
        // New data sent during recovery; its first segment is lost.
        s.send_slice(b"eeeFFFgggHHH").unwrap();
        for _ in 0..4 {
            recv(&mut s, Instant::from_millis(1062), |r: Result<TcpRepr, ()>| assert!(r.is_ok()));
        }
        // The ACK reaches the recovery point (LOCAL_SEQ + 13) and SACKs "FFFgggHHH".
        send!(s, time 1100, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 13),
            sack_ranges: sack_block(16, 25),
            ..SEND_TEMPL
        });
        recv!(s, time 1101, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 13,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"eee"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1102);
        assert_eq!(s.retransmissions(), (2, 0));
    }

    /// dpwarp: octets sent after a fast retransmission are SACKed while SND.UNA is still
    /// asked for: the retransmission was lost, and goes again at once (instead of waiting
    /// for the retransmission timeout).
    #[test]
    fn test_lost_fast_retransmission_goes_again() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.remote_mss = 3;
        s.send_slice(b"aaaBBBcccDDD").unwrap();
        for _ in 0..4 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| assert!(r.is_ok()));
        }
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 13),
            ..SEND_TEMPL
        });
        recv(&mut s, Instant::from_millis(1051), |r: Result<TcpRepr, ()>| assert_eq!(
            r.unwrap().payload,
            &b"aaa"[..]
        ));
        // New data after the retransmission.
        s.send_slice(b"eee").unwrap();
        recv!(s, time 1052, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 13,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"eee"[..],
            ..RECV_TEMPL
        }));
        // The peer holds only what it held before: no news.
        send!(s, time 1060, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 13),
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 1061);
        // It holds "eee", sent after the retransmission, and still asks for "aaa".
        send!(s, time 1070, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            sack_ranges: sack_block(4, 16),
            ..SEND_TEMPL
        });
        recv!(s, time 1071, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"aaa"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1072);
        assert_eq!(s.retransmissions(), (2, 0));
    }

    /// dpwarp: a fast retransmission ends where the segment it repeats ended, at a record
    /// end (RFC 5044 Appendix A), not at the MSS.
    #[test]
    fn test_fast_retransmit_cut_at_record_end() {
        let mut s = socket_established();
        established_ack(&mut s);
        s.set_tx_records(true);
        s.set_nagle_enabled(false);
        s.remote_mss = 6;
        for r in [&b"abcd"[..], b"efgh", b"ij", b"klmn"] {
            s.send_slice(r).unwrap();
            s.push_tx_record_end();
        }
        let mut sent = vec![];
        for _ in 0..3 {
            recv(&mut s, Instant::from_millis(1000), |r: Result<TcpRepr, ()>| sent.push(r.unwrap().payload.to_vec()));
        }
        assert_eq!(sent, [&b"abcd"[..], b"efghij", b"klmn"]);
        for t in [1050, 1055, 1060] {
            send!(s, time t, TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            });
        }
        recv!(s, time 1061, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcd"[..],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1062);
    }

    /// dpwarp: an ACK of some new data restarts the retransmission timer (RFC 6298 (5.3),
    /// upstream 13774ff2); 0.12 left it running from the first segment.
    #[test]
    fn test_retransmit_timer_restart_on_partial_ack() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef012345").unwrap();
        recv(&mut s, Instant::from_millis(0), |r: Result<TcpRepr, ()>| assert_eq!(r.unwrap().payload, &b"abcdef"[..]));
        recv(&mut s, Instant::from_millis(0), |r: Result<TcpRepr, ()>| assert_eq!(r.unwrap().payload, &b"012345"[..]));
        let first_rto = s.rtte.retransmission_timeout().total_millis() as i64;
        // Acknowledge the first segment shortly before the timer would fire.
        let t_ack = first_rto - 100;
        send!(s, time t_ack, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        });
        let rto = s.rtte.retransmission_timeout().total_millis() as i64;
        // Nothing when the first timer would have fired, nor just before the new one.
        recv_nothing!(s, time first_rto + 1);
        recv_nothing!(s, time t_ack + rto - 1);
        recv!(s, time t_ack + rto, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"012345"[..],
            ..RECV_TEMPL
        }));
        assert_eq!(s.retransmissions(), (0, 1));
    }

    /// Upstream 25d4f7c5's test: SACK blocks near the top of the sequence space (the
    /// assembler's offsets were added to the ACK number taken as an unsigned integer, which
    /// overflowed there).
    #[test]
    fn test_established_sack_no_overflow_on_near_max_seqnumber() {
        let mut s = socket_established();
        s.remote_has_sack = true;
        s.remote_seq_no = TcpSeqNumber(-4);
        s.remote_last_ack = Some(TcpSeqNumber(-4));
        let r = send(&mut s, Instant::from_millis(0), &TcpRepr {
            seq_number: TcpSeqNumber(-4 + 10),
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"AAAAAAAAAA"[..],
            ..SEND_TEMPL
        })
        .expect("an immediate ACK");
        assert_eq!(r.ack_number, Some(TcpSeqNumber(-4)));
        assert_eq!(
            r.sack_ranges,
            [Some(((-4_i32 + 10) as u32, (-4_i32 + 20) as u32)), None, None]
        );
    }

    /// dpwarp: an ACK for an out-of-order segment reports up to three SACK blocks: first the
    /// one holding that segment (RFC 2018 section 4), then the lowest others.
    #[test]
    fn test_sack_reports_three_blocks() {
        let mut s = socket_established();
        s.remote_has_sack = true;
        let seg = |off: usize| TcpRepr {
            seq_number: REMOTE_SEQ + 1 + off,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"xy"[..],
            ..SEND_TEMPL
        };
        let block = |l: usize, r: usize| {
            Some(((REMOTE_SEQ + 1 + l).0 as u32, (REMOTE_SEQ + 1 + r).0 as u32))
        };
        for off in [2, 6, 10] {
            let _ = send(&mut s, Instant::from_millis(0), &seg(off));
        }
        // The segment at 14 makes a fourth run: its block first, then the two lowest.
        let r = send(&mut s, Instant::from_millis(0), &seg(14)).expect("an immediate ACK");
        assert_eq!(r.ack_number, Some(REMOTE_SEQ + 1));
        assert_eq!(r.sack_ranges, [block(14, 16), block(2, 4), block(6, 8)]);
        // One holding the segment at 6 first.
        let r = send(&mut s, Instant::from_millis(0), &seg(6)).expect("an immediate ACK");
        assert_eq!(r.sack_ranges, [block(6, 8), block(2, 4), block(10, 12)]);
    }

    /// dpwarp: a segment the receiver cannot hold (more holes than its assembler tracks) is
    /// still acknowledged at once, as any out-of-order segment (RFC 5681 section 4.2), so
    /// the sender hears of the hole; 0.12 answered nothing.
    #[test]
    fn test_segment_refused_for_holes_is_acknowledged() {
        let n = crate::config::ASSEMBLER_MAX_SEGMENT_COUNT;
        let mut s = socket_established_with_buffer_sizes(64, 4 * n + 64);
        // n one-octet segments, each after a one-octet hole: the assembler is full.
        for i in 0..n {
            let r = send(&mut s, Instant::from_millis(0), &TcpRepr {
                seq_number: REMOTE_SEQ + 1 + (2 * i + 1),
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"x"[..],
                ..SEND_TEMPL
            });
            assert_eq!(r.map(|a| a.ack_number), Some(Some(REMOTE_SEQ + 1)));
        }
        // One more after another hole is refused, and acknowledged.
        let r = send(&mut s, Instant::from_millis(0), &TcpRepr {
            seq_number: REMOTE_SEQ + 1 + (2 * n + 1),
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"y"[..],
            ..SEND_TEMPL
        });
        assert_eq!(r.map(|a| a.ack_number), Some(Some(REMOTE_SEQ + 1)));
        assert_eq!(s.recv_queue(), 0);
    }

    #[test]
    fn test_fast_retransmit_duplicate_detection_with_data() {
        let mut s = socket_established();

        s.send_slice(b"abc").unwrap(); // This is lost
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));

        // Normal ACK of previously received segment
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // First duplicate
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // Second duplicate
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );

        assert_eq!(s.local_rx_dup_acks, 2, "duplicate ACK counter is not set");

        // This packet has content, hence should not be detected
        // as a duplicate ACK and should reset the duplicate ACK count
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"xxxxxx"[..],
                ..SEND_TEMPL
            }
        );

        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 3,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            }]
        );

        assert_eq!(
            s.local_rx_dup_acks, 0,
            "duplicate ACK counter is not reset when receiving data"
        );
    }

    #[test]
    fn test_fast_retransmit_duplicate_detection_with_window_update() {
        let mut s = socket_established();

        s.send_slice(b"abc").unwrap(); // This is lost
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));

        // Normal ACK of previously received segment
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // First duplicate
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // Second duplicate
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );

        assert_eq!(s.local_rx_dup_acks, 2, "duplicate ACK counter is not set");

        // This packet has a window update, hence should not be detected
        // as a duplicate ACK and should reset the duplicate ACK count
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                window_len: 400,
                ..SEND_TEMPL
            }
        );

        assert_eq!(
            s.local_rx_dup_acks, 0,
            "duplicate ACK counter is not reset when receiving a window update"
        );
    }

    #[test]
    fn test_fast_retransmit_duplicate_detection() {
        let mut s = socket_established();
        s.remote_mss = 6;

        // Normal ACK of previously received segment
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });

        // First duplicate, should not be counted as there is nothing to resend
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });

        assert_eq!(
            s.local_rx_dup_acks, 0,
            "duplicate ACK counter is set but wound not transmit data"
        );

        // Send a long string of text divided into several packets
        // because of small remote_mss
        s.send_slice(b"xxxxxxyyyyyywwwwwwzzzzzz").unwrap();

        // This packet is reordered in network
        recv!(s, time 1000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"xxxxxx"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1005, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"yyyyyy"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1010, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + (6 * 2),
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"wwwwww"[..],
            ..RECV_TEMPL
        }));
        recv!(s, time 1015, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + (6 * 3),
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"zzzzzz"[..],
            ..RECV_TEMPL
        }));

        // First duplicate ACK
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        // Second duplicate ACK
        send!(s, time 1055, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        // Reordered packet arrives which should reset duplicate ACK count
        send!(s, time 1060, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + (6 * 3)),
            ..SEND_TEMPL
        });

        assert_eq!(
            s.local_rx_dup_acks, 0,
            "duplicate ACK counter is not reset when receiving ACK which updates send window"
        );

        // ACK all received segments
        send!(s, time 1120, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + (6 * 4)),
            ..SEND_TEMPL
        });
    }

    #[test]
    fn test_fast_retransmit_dup_acks_counter() {
        let mut s = socket_established();

        s.send_slice(b"abc").unwrap(); // This is lost
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));

        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });

        // A lot of retransmits happen here
        s.local_rx_dup_acks = u8::MAX - 1;

        // Send 3 more ACKs, which could overflow local_rx_dup_acks,
        // but intended behaviour is that we saturate the bounds
        // of local_rx_dup_acks
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        assert_eq!(
            s.local_rx_dup_acks,
            u8::MAX,
            "duplicate ACK count should not overflow but saturate"
        );
    }

    #[test]
    fn test_fast_retransmit_zero_window() {
        let mut s = socket_established();

        send!(s, time 1000, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });

        s.send_slice(b"abc").unwrap();

        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));

        // 3 dup acks
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        send!(s, time 1050, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0, // boom
            ..SEND_TEMPL
        });

        // even though we're in "fast retransmit", we shouldn't
        // force-send anything because the remote's window is full.
        recv_nothing!(s);
    }

    // =========================================================================================//
    // Tests for window management.
    // =========================================================================================//

    #[test]
    fn test_maximum_segment_size() {
        let mut s = socket_listen();
        s.tx_buffer = SocketBuffer::new(vec![0; 32767]);
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                max_seg_size: Some(1000),
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                window_len: 32767,
                ..SEND_TEMPL
            }
        );
        s.send_slice(&[0; 1200][..]).unwrap();
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &[0; 1000][..],
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_close_wait_no_window_update() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &[1, 2, 3, 4],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::CloseWait);

        // we ack the FIN, with the reduced window size.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 6),
                window_len: 60,
                ..RECV_TEMPL
            })
        );

        let rx_buf = &mut [0; 32];
        assert_eq!(s.recv_slice(rx_buf), Ok(4));

        // check that we do NOT send a window update even if it has changed.
        recv_nothing!(s);
    }

    #[test]
    fn test_time_wait_no_window_update() {
        let mut s = socket_fin_wait_2();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 2),
                payload: &[1, 2, 3, 4],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);

        // we ack the FIN, with the reduced window size.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 2,
                ack_number: Some(REMOTE_SEQ + 6),
                window_len: 60,
                ..RECV_TEMPL
            })
        );

        let rx_buf = &mut [0; 32];
        assert_eq!(s.recv_slice(rx_buf), Ok(4));

        // check that we do NOT send a window update even if it has changed.
        recv_nothing!(s);
    }

    // =========================================================================================//
    // Tests for flow control.
    // =========================================================================================//

    #[test]
    fn test_psh_transmit() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef").unwrap();
        s.send_slice(b"123456").unwrap();
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"123456"[..],
            ..RECV_TEMPL
        }), exact);
    }

    #[test]
    fn test_psh_receive() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Psh,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_zero_window_ack() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 0,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"123456"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 0,
                ..RECV_TEMPL
            })
        );
    }

    /// dpwarp: a peer's window shut with octets waiting: zero-window probes (RFC 9293
    /// section 3.8.6.1) at doubling intervals, each an empty segment one below SND.UNA;
    /// the ACK that opens the window lets the octets go. Without them a lost window update
    /// left both ends waiting for good (tests/dpdk_hostile_peer.rs on the wire).
    #[test]
    fn test_zero_window_is_probed() {
        let mut s = socket_established();
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        });
        s.send_slice(b"abcdef").unwrap();
        recv_nothing!(s, time 0);
        let rto = s.rtte.retransmission_timeout().total_millis() as i64;
        recv_nothing!(s, time rto - 1);
        let probe = TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        };
        recv!(s, time rto, Ok(probe), exact);
        assert_eq!(s.window_probes(), 1);
        // Still shut: the next probe after twice the interval.
        send!(s, time rto + 1, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 3 * rto - 1);
        recv!(s, time 3 * rto, Ok(probe), exact);
        // The window opens: the octets go, and no probe follows.
        send!(s, time 3 * rto + 1, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 64,
            ..SEND_TEMPL
        });
        recv!(s, time 3 * rto + 1, Ok(TcpRepr {
            control: TcpControl::Psh,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        assert_eq!(s.window_probes(), 2);
        assert_eq!(s.zwp_at, None);
    }

    /// dpwarp: nothing waiting behind a shut window, nothing to probe.
    #[test]
    fn test_zero_window_with_nothing_to_send_is_not_probed() {
        let mut s = socket_established();
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        });
        recv_nothing!(s, time 100_000);
        assert_eq!(s.window_probes(), 0);
    }

    /// dpwarp: step a socket's clock by `step_ms` from `from_ms` to `to_ms`, taking every
    /// segment it sends: (time, control, sequence number, payload length).
    fn segments_sent(
        s: &mut TestSocket,
        from_ms: i64,
        to_ms: i64,
        step_ms: i64,
        mut peer: impl FnMut(&mut TestSocket, i64, &TcpRepr),
    ) -> Vec<(i64, TcpControl, TcpSeqNumber, usize)> {
        let mut out = Vec::new();
        let mut t = from_ms;
        while t <= to_ms {
            loop {
                let mut got = None;
                s.cx.set_now(Instant::from_millis(t));
                let _ = s.socket.dispatch(&mut s.cx, |_, (_, r)| {
                    got = Some((r.control, r.seq_number, r.payload.len(), r.ack_number));
                    Ok::<(), ()>(())
                });
                let Some((control, seq, len, ack)) = got else {
                    break;
                };
                out.push((t, control, seq, len));
                let r = TcpRepr {
                    control,
                    seq_number: seq,
                    ack_number: ack,
                    ..RECV_TEMPL
                };
                peer(s, t, &r);
            }
            t += step_ms;
        }
        out
    }

    /// dpwarp: octets the peer never acknowledges are given up on at the user timeout (RFC
    /// 9293 section 3.8.3, R2): retransmissions back off until the first one past the
    /// timeout, counted from the first retransmission, aborts the connection with a RST.
    #[test]
    fn test_user_timeout_gives_up_on_a_silent_peer() {
        let mut s = socket_established();
        s.set_user_timeout(Some(Duration::from_secs(3)));
        s.send_slice(b"abcdef").unwrap();
        let sent = segments_sent(&mut s, 0, 30_000, 10, |_, _, _| {});
        let rst = sent
            .iter()
            .find(|x| x.1 == TcpControl::Rst)
            .expect("a RST");
        let first_rto = sent.iter().find(|x| x.0 > 0).expect("a retransmission").0;
        assert!(rst.0 >= first_rto + 3_000, "{sent:?}");
        assert!(rst.0 <= first_rto + 3_000 + 10_000, "{sent:?}");
        assert_eq!(s.state, State::Closed);
        assert_eq!(s.user_timeouts(), 1);
        // Without a user timeout, the retransmissions go on.
        let mut s = socket_established();
        s.send_slice(b"abcdef").unwrap();
        let sent = segments_sent(&mut s, 0, 30_000, 10, |_, _, _| {});
        assert!(sent.iter().all(|x| x.1 != TcpControl::Rst), "{sent:?}");
        assert_eq!(s.state, State::Established);
    }

    /// dpwarp: a connection with nothing to send is never given up on, however long the
    /// peer is quiet.
    #[test]
    fn test_user_timeout_spares_an_idle_connection() {
        let mut s = socket_established();
        s.set_user_timeout(Some(Duration::from_secs(1)));
        recv_nothing!(s, time 100_000);
        assert_eq!(s.state, State::Established);
        // Octets sent after the long quiet are not given up on at once.
        s.send_slice(b"abcdef").unwrap();
        let sent = segments_sent(&mut s, 100_001, 100_500, 10, |_, _, _| {});
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(s.state, State::Established);
    }

    /// dpwarp: a peer that answers the zero-window probes is never given up on (RFC 9293
    /// section 3.8.6.1, MUST-37); one that stops answering is, a user timeout later.
    #[test]
    fn test_user_timeout_spares_a_peer_answering_probes() {
        let mut s = socket_established();
        s.set_user_timeout(Some(Duration::from_secs(3)));
        send!(s, time 0, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        });
        s.send_slice(b"abcdef").unwrap();
        let answer = |s: &mut TestSocket, t: i64, _: &TcpRepr| {
            send(
                s,
                Instant::from_millis(t),
                &TcpRepr {
                    seq_number: REMOTE_SEQ + 1,
                    ack_number: Some(LOCAL_SEQ + 1),
                    window_len: 0,
                    ..SEND_TEMPL
                },
            );
        };
        let sent = segments_sent(&mut s, 0, 200_000, 50, answer);
        assert!(sent.len() >= 5, "{sent:?}");
        assert!(sent.iter().all(|x| x.1 != TcpControl::Rst), "{sent:?}");
        assert_eq!(s.state, State::Established);
        // The peer goes quiet: given up on at the first probe a user timeout later.
        let sent = segments_sent(&mut s, 200_050, 400_000, 50, |_, _, _| {});
        let rst = sent.iter().find(|x| x.1 == TcpControl::Rst).expect("a RST");
        assert!(rst.0 >= 200_000 + 3_000, "{sent:?}");
        assert_eq!(s.state, State::Closed);
    }

    /// dpwarp: an idle connection whose peer answers no keep-alive is given up on (a RST)
    /// when a keep-alive falls due with `probes` unanswered; one whose peer answers is not,
    /// however long it is idle; without a limit the keep-alives go on for good.
    #[test]
    fn test_keep_alive_probes_give_up_on_a_silent_idle_peer() {
        let mut s = socket_established();
        s.set_keep_alive(Some(Duration::from_millis(1000)));
        s.set_keep_alive_probes(Some(3));
        let answer = |s: &mut TestSocket, t: i64, _: &TcpRepr| {
            send(
                s,
                Instant::from_millis(t),
                &TcpRepr {
                    seq_number: REMOTE_SEQ + 1,
                    ack_number: Some(LOCAL_SEQ + 1),
                    ..SEND_TEMPL
                },
            );
        };
        let sent = segments_sent(&mut s, 0, 60_000, 50, answer);
        assert!(sent.len() >= 50, "{sent:?}");
        assert!(sent.iter().all(|x| x.1 != TcpControl::Rst), "{sent:?}");
        assert_eq!(s.state, State::Established);
        assert_eq!(s.keep_alive_timeouts(), 0);
        // Silence: three keep-alives a second apart, then the RST when the fourth is due.
        let sent = segments_sent(&mut s, 60_050, 70_000, 50, |_, _, _| {});
        let rst = sent.iter().position(|x| x.1 == TcpControl::Rst).expect("a RST");
        assert_eq!(rst, 3, "{sent:?}");
        assert!(sent[..3].iter().all(|x| x.3 == 1), "keep-alives: {sent:?}");
        let first = sent[0].0;
        assert!((63_000..=63_100).contains(&(sent[rst].0 - first + 60_000)), "{sent:?}");
        assert_eq!(s.state, State::Closed);
        assert_eq!(s.keep_alive_timeouts(), 1);
        // No limit: keep-alives for good.
        let mut s = socket_established();
        s.set_keep_alive(Some(Duration::from_millis(1000)));
        let sent = segments_sent(&mut s, 0, 30_000, 50, |_, _, _| {});
        assert!(sent.len() >= 25, "{sent:?}");
        assert!(sent.iter().all(|x| x.1 != TcpControl::Rst), "{sent:?}");
        assert_eq!(s.state, State::Established);
    }

    /// dpwarp: keep-alives armed by `keep_alive_now` (the worker's warm path) are not counted
    /// against the limit, nor do they postpone the timer's own: sent every 10 ms to a peer
    /// that answers none, they leave the timer's keep-alives a second apart and the give-up
    /// where it would be without them.
    #[test]
    fn test_forced_keep_alives_are_not_counted() {
        let mut s = socket_established();
        s.set_keep_alive(Some(Duration::from_millis(1000)));
        s.set_keep_alive_probes(Some(2));
        let mut counted = Vec::new();
        let mut rst = None;
        for t in (0..10_000).step_by(10) {
            // The timer's own first (if due), then the forced one.
            let own = segments_sent(&mut s, t, t, 1, |_, _, _| {});
            if own.iter().any(|x| x.1 == TcpControl::Rst) {
                rst = Some(t);
                break;
            }
            counted.extend(own.iter().map(|x| x.0));
            assert!(s.keep_alive_now());
            let forced = segments_sent(&mut s, t, t, 1, |_, _, _| {});
            assert_eq!(forced.len(), 1, "at {t}: {forced:?}");
            assert_ne!(forced[0].1, TcpControl::Rst, "at {t}: {forced:?}");
        }
        // The timer's: at 0 (armed by set_keep_alive) and 1000; at 2000 the third falls due
        // with two unanswered: the RST.
        assert_eq!(counted, [0, 1000], "the timer's own keep-alives");
        assert_eq!(rst, Some(2000));
        assert_eq!(s.state, State::Closed);
        assert_eq!(s.keep_alive_timeouts(), 1);
    }

    #[test]
    fn test_zero_window_fin() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        s.ack_delay = None;

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 0,
                ..RECV_TEMPL
            }]
        );

        // Even though the sequence space for the FIN itself is outside the window,
        // it is not data, so FIN must be accepted when window full.
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &[],
                control: TcpControl::Fin,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::CloseWait);

        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 7),
                window_len: 0,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_zero_window_ack_on_window_growth() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 0,
                ..RECV_TEMPL
            }]
        );
        recv_nothing!(s, time 0);
        s.recv(|buffer| {
            assert_eq!(&buffer[..3], b"abc");
            (3, ())
        })
        .unwrap();
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 3,
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 0);
        s.recv(|buffer| {
            assert_eq!(buffer, b"def");
            (buffer.len(), ())
        })
        .unwrap();
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 6,
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_window_update_with_delay_ack() {
        let mut s = socket_established_with_buffer_sizes(6, 6);
        s.ack_delay = Some(Duration::from_millis(10));

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );

        recv_nothing!(s, time 5);

        s.recv(|buffer| {
            assert_eq!(&buffer[..2], b"ab");
            (2, ())
        })
        .unwrap();
        recv!(
            s,
            time 5,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 2,
                ..RECV_TEMPL
            })
        );

        s.recv(|buffer| {
            assert_eq!(&buffer[..1], b"c");
            (1, ())
        })
        .unwrap();
        recv_nothing!(s, time 5);

        s.recv(|buffer| {
            assert_eq!(&buffer[..1], b"d");
            (1, ())
        })
        .unwrap();
        recv!(
            s,
            time 5,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 4,
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_fill_peer_window() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef123456!@#$%^").unwrap();
        recv!(
            s,
            [
                TcpRepr {
                    seq_number: LOCAL_SEQ + 1,
                    ack_number: Some(REMOTE_SEQ + 1),
                    payload: &b"abcdef"[..],
                    ..RECV_TEMPL
                },
                TcpRepr {
                    seq_number: LOCAL_SEQ + 1 + 6,
                    ack_number: Some(REMOTE_SEQ + 1),
                    payload: &b"123456"[..],
                    ..RECV_TEMPL
                },
                TcpRepr {
                    seq_number: LOCAL_SEQ + 1 + 6 + 6,
                    ack_number: Some(REMOTE_SEQ + 1),
                    payload: &b"!@#$%^"[..],
                    ..RECV_TEMPL
                }
            ]
        );
    }

    #[test]
    fn test_announce_window_after_read() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                window_len: 3,
                ..RECV_TEMPL
            }]
        );
        // Test that `dispatch` updates `remote_last_win`
        assert_eq!(s.remote_last_win, s.rx_buffer.window() as u16);
        s.recv(|buffer| (buffer.len(), ())).unwrap();
        assert!(s.window_to_update());
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                window_len: 6,
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.remote_last_win, s.rx_buffer.window() as u16);
        // Provoke immediate ACK to test that `process` updates `remote_last_win`
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"def"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                window_len: 6,
                ..RECV_TEMPL
            })
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 3,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 9),
                window_len: 0,
                ..RECV_TEMPL
            })
        );
        assert_eq!(s.remote_last_win, s.rx_buffer.window() as u16);
        s.recv(|buffer| (buffer.len(), ())).unwrap();
        assert!(s.window_to_update());
    }

    // =========================================================================================//
    // Tests for timeouts.
    // =========================================================================================//

    #[test]
    fn test_listen_timeout() {
        let mut s = socket_listen();
        s.set_timeout(Some(Duration::from_millis(100)));
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
    }

    #[test]
    fn test_connect_timeout() {
        let mut s = socket();
        s.local_seq_no = LOCAL_SEQ;
        s.socket
            .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
            .unwrap();
        s.set_timeout(Some(Duration::from_millis(100)));
        recv!(s, time 150, Ok(TcpRepr {
            control:    TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }));
        assert_eq!(s.state, State::SynSent);
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(250))
        );
        recv!(s, time 250, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(TcpSeqNumber(0)),
            window_scale: None,
            ..RECV_TEMPL
        }));
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_established_timeout() {
        let mut s = socket_established();
        s.set_timeout(Some(Duration::from_millis(1000)));
        recv_nothing!(s, time 250);
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(1250))
        );
        s.send_slice(b"abcdef").unwrap();
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Now);
        recv!(s, time 255, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(955))
        );
        recv!(s, time 955, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }));
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(1255))
        );
        recv!(s, time 1255, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_established_keep_alive_timeout() {
        let mut s = socket_established();
        s.set_keep_alive(Some(Duration::from_millis(50)));
        s.set_timeout(Some(Duration::from_millis(100)));
        recv!(s, time 100, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 100);
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(150))
        );
        send!(s, time 105, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(155))
        );
        recv!(s, time 155, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 155);
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(205))
        );
        recv_nothing!(s, time 200);
        recv!(s, time 205, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 205);
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_fin_wait_1_timeout() {
        let mut s = socket_fin_wait_1();
        s.set_timeout(Some(Duration::from_millis(1000)));
        recv!(s, time 100, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        recv!(s, time 1100, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_last_ack_timeout() {
        let mut s = socket_last_ack();
        s.set_timeout(Some(Duration::from_millis(1000)));
        recv!(s, time 100, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }));
        recv!(s, time 1100, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }));
        assert_eq!(s.state, State::Closed);
    }

    #[test]
    fn test_closed_timeout() {
        let mut s = socket_established();
        s.set_timeout(Some(Duration::from_millis(200)));
        s.remote_last_ts = Some(Instant::from_millis(100));
        s.abort();
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Now);
        recv!(s, time 100, Ok(TcpRepr {
            control:    TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }));
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
    }

    // =========================================================================================//
    // Tests for keep-alive.
    // =========================================================================================//

    #[test]
    fn test_responds_to_keep_alive() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_keep_alive_now() {
        // dpwarp: one keep-alive on demand, no interval set and none after it.
        let mut s = socket_established();
        recv_nothing!(s, time 0);
        assert!(s.keep_alive_now());
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Time(Instant::from_millis(0)));
        recv!(s, time 1, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));
        recv_nothing!(s, time 1_000);
        assert_eq!(s.keep_alive(), None);

        // Data in flight (the retransmission timer runs): no keep-alive.
        s.send_slice(b"abc").unwrap();
        recv!(s, time 1_000, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abc"[..],
            ..RECV_TEMPL
        }));
        assert!(!s.keep_alive_now());
        recv_nothing!(s, time 1_001);

        // Not established: none.
        let mut s = socket_syn_received();
        assert!(!s.keep_alive_now());
    }

    #[test]
    fn test_sends_keep_alive() {
        let mut s = socket_established();
        s.set_keep_alive(Some(Duration::from_millis(100)));

        // drain the forced keep-alive packet
        assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Now);
        recv!(s, time 0, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));

        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(100))
        );
        recv_nothing!(s, time 95);
        recv!(s, time 100, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));

        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(200))
        );
        recv_nothing!(s, time 195);
        recv!(s, time 200, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &[0],
            ..RECV_TEMPL
        }));

        send!(s, time 250, TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        });
        assert_eq!(
            s.socket.poll_at(&mut s.cx),
            PollAt::Time(Instant::from_millis(350))
        );
        recv_nothing!(s, time 345);
        recv!(s, time 350, Ok(TcpRepr {
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"\x00"[..],
            ..RECV_TEMPL
        }));
    }

    // =========================================================================================//
    // Tests for time-to-live configuration.
    // =========================================================================================//

    #[test]
    fn test_set_hop_limit() {
        let mut s = socket_syn_received();

        s.set_hop_limit(Some(0x2a));
        assert_eq!(
            s.socket.dispatch(&mut s.cx, |_, (ip_repr, _)| {
                assert_eq!(ip_repr.hop_limit(), 0x2a);
                Ok::<_, ()>(())
            }),
            Ok(())
        );

        // assert that user-configurable settings are kept,
        // see https://github.com/smoltcp-rs/smoltcp/issues/601.
        s.reset();
        assert_eq!(s.hop_limit(), Some(0x2a));
    }

    #[test]
    #[should_panic(expected = "the time-to-live value of a packet must not be zero")]
    fn test_set_hop_limit_zero() {
        let mut s = socket_syn_received();
        s.set_hop_limit(Some(0));
    }

    // =========================================================================================//
    // Tests for reassembly.
    // =========================================================================================//

    #[test]
    fn test_out_of_order() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 3,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"def"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                ..RECV_TEMPL
            })
        );
        s.recv(|buffer| {
            assert_eq!(buffer, b"");
            (buffer.len(), ())
        })
        .unwrap();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 6),
                window_len: 58,
                ..RECV_TEMPL
            })
        );
        s.recv(|buffer| {
            assert_eq!(buffer, b"abcdef");
            (buffer.len(), ())
        })
        .unwrap();
    }

    #[test]
    fn test_buffer_wraparound_rx() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        s.recv(|buffer| {
            assert_eq!(buffer, b"abc");
            (buffer.len(), ())
        })
        .unwrap();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 3,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"defghi"[..],
                ..SEND_TEMPL
            }
        );
        let mut data = [0; 6];
        assert_eq!(s.recv_slice(&mut data[..]), Ok(6));
        assert_eq!(data, &b"defghi"[..]);
    }

    #[test]
    fn test_buffer_wraparound_tx() {
        let mut s = socket_established();
        s.set_nagle_enabled(false);

        s.tx_buffer = SocketBuffer::new(vec![b'.'; 9]);
        assert_eq!(s.send_slice(b"xxxyyy"), Ok(6));
        assert_eq!(s.tx_buffer.dequeue_many(3), &b"xxx"[..]);
        assert_eq!(s.tx_buffer.len(), 3);

        // "abcdef" not contiguous in tx buffer. dpwarp: a segment across the ring's wrap is
        // gathered (`tx_linear`), not cut at the wrap (upstream sent "yyyabc" then "def").
        assert_eq!(s.send_slice(b"abcdef"), Ok(6));
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"yyyabcdef"[..],
                ..RECV_TEMPL
            })
        );
    }

    // =========================================================================================//
    // Tests for graceful vs ungraceful rx close
    // =========================================================================================//

    #[test]
    fn test_rx_close_fin() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
    }

    #[test]
    fn test_rx_close_fin_in_fin_wait_1() {
        let mut s = socket_fin_wait_1();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::Closing);
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
    }

    #[test]
    fn test_rx_close_fin_in_fin_wait_2() {
        let mut s = socket_fin_wait_2();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state, State::TimeWait);
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
    }

    #[test]
    fn test_rx_close_fin_with_hole() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Fin,
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"ghi"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                window_len: 61,
                ..RECV_TEMPL
            })
        );
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        s.recv(|data| {
            assert_eq!(data, b"");
            (0, ())
        })
        .unwrap();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1 + 9,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        // Error must be `Illegal` even if we've received a FIN,
        // because we are missing data.
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
    }

    #[test]
    fn test_rx_close_rst() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1 + 3,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
    }

    #[test]
    fn test_rx_close_rst_with_hole() {
        let mut s = socket_established();
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"ghi"[..],
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                window_len: 61,
                ..RECV_TEMPL
            })
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Rst,
                seq_number: REMOTE_SEQ + 1 + 9,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();
        assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
    }

    // =========================================================================================//
    // Tests for delayed ACK
    // =========================================================================================//

    #[test]
    fn test_delayed_ack() {
        let mut s = socket_established();
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );

        // No ACK is immediately sent.
        recv_nothing!(s);

        // After 10ms, it is sent.
        recv!(s, time 11, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 61,
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_delayed_ack_win() {
        let mut s = socket_established();
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );

        // Reading the data off the buffer should cause a window update.
        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();

        // However, no ACK or window update is immediately sent.
        recv_nothing!(s);

        // After 10ms, it is sent.
        recv!(s, time 11, Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            ..RECV_TEMPL
        }));
    }

    #[test]
    fn test_delayed_ack_reply() {
        let mut s = socket_established();
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abc"[..],
                ..SEND_TEMPL
            }
        );

        s.recv(|data| {
            assert_eq!(data, b"abc");
            (3, ())
        })
        .unwrap();

        s.send_slice(&b"xyz"[..]).unwrap();

        // Writing data to the socket causes ACK to not be delayed,
        // because it is immediately sent with the data.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 3),
                payload: &b"xyz"[..],
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_delayed_ack_every_rmss() {
        let mut s = socket_established_with_buffer_sizes(DEFAULT_MSS * 2, DEFAULT_MSS * 2);
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &[0; DEFAULT_MSS - 1],
                ..SEND_TEMPL
            }
        );

        // No ACK is immediately sent.
        recv_nothing!(s);

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + (DEFAULT_MSS - 1),
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"a"[..],
                ..SEND_TEMPL
            }
        );

        // No ACK is immediately sent.
        recv_nothing!(s);

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + DEFAULT_MSS,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"a"[..],
                ..SEND_TEMPL
            }
        );

        // RMSS+1 bytes of data has been received, so ACK is sent without delay.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + (DEFAULT_MSS + 1)),
                window_len: (DEFAULT_MSS - 1) as u16,
                ..RECV_TEMPL
            })
        );
    }

    #[test]
    fn test_delayed_ack_every_rmss_or_more() {
        let mut s = socket_established_with_buffer_sizes(DEFAULT_MSS * 2, DEFAULT_MSS * 2);
        s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &[0; DEFAULT_MSS],
                ..SEND_TEMPL
            }
        );

        // No ACK is immediately sent.
        recv_nothing!(s);

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + DEFAULT_MSS,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"a"[..],
                ..SEND_TEMPL
            }
        );

        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + (DEFAULT_MSS + 1),
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"b"[..],
                ..SEND_TEMPL
            }
        );

        // RMSS+2 bytes of data has been received, so ACK is sent without delay.
        recv!(
            s,
            Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + (DEFAULT_MSS + 2)),
                window_len: (DEFAULT_MSS - 2) as u16,
                ..RECV_TEMPL
            })
        );
    }

    // =========================================================================================//
    // Tests for Nagle's Algorithm
    // =========================================================================================//

    #[test]
    fn test_nagle() {
        let mut s = socket_established();
        s.remote_mss = 6;

        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            }]
        );

        // If there's data in flight, full segments get sent.
        s.send_slice(b"foobar").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"foobar"[..],
                ..RECV_TEMPL
            }]
        );

        s.send_slice(b"aaabbbccc").unwrap();
        // If there's data in flight, not-full segments don't get sent.
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"aaabbb"[..],
                ..RECV_TEMPL
            }]
        );

        // Data gets ACKd, so there's no longer data in flight
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 6 + 6),
                ..SEND_TEMPL
            }
        );

        // Now non-full segment gets sent.
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6 + 6 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"ccc"[..],
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_final_packet_in_stream_doesnt_wait_for_nagle() {
        let mut s = socket_established();
        s.remote_mss = 6;
        s.send_slice(b"abcdef0").unwrap();
        s.socket.close();

        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::None,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"abcdef"[..],
            ..RECV_TEMPL
        }), exact);
        recv!(s, time 0, Ok(TcpRepr {
            control:    TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload:    &b"0"[..],
            ..RECV_TEMPL
        }), exact);
    }

    // =========================================================================================//
    // Tests for packet filtering.
    // =========================================================================================//

    #[test]
    fn test_doesnt_accept_wrong_port() {
        let mut s = socket_established();
        s.rx_buffer = SocketBuffer::new(vec![0; 6]);
        s.assembler = alloc::boxed::Box::new(Assembler::new());

        let tcp_repr = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            dst_port: LOCAL_PORT + 1,
            ..SEND_TEMPL
        };
        assert!(!s.socket.accepts(&mut s.cx, &SEND_IP_TEMPL, &tcp_repr));

        let tcp_repr = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            src_port: REMOTE_PORT + 1,
            ..SEND_TEMPL
        };
        assert!(!s.socket.accepts(&mut s.cx, &SEND_IP_TEMPL, &tcp_repr));
    }

    #[test]
    fn test_doesnt_accept_wrong_ip() {
        let mut s = socket_established();

        let tcp_repr = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        };

        let ip_repr = IpReprIpvX(IpvXRepr {
            src_addr: REMOTE_ADDR,
            dst_addr: LOCAL_ADDR,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_repr.buffer_len(),
            hop_limit: 64,
        });
        assert!(s.socket.accepts(&mut s.cx, &ip_repr, &tcp_repr));

        let ip_repr_wrong_src = IpReprIpvX(IpvXRepr {
            src_addr: OTHER_ADDR,
            dst_addr: LOCAL_ADDR,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_repr.buffer_len(),
            hop_limit: 64,
        });
        assert!(!s.socket.accepts(&mut s.cx, &ip_repr_wrong_src, &tcp_repr));

        let ip_repr_wrong_dst = IpReprIpvX(IpvXRepr {
            src_addr: REMOTE_ADDR,
            dst_addr: OTHER_ADDR,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_repr.buffer_len(),
            hop_limit: 64,
        });
        assert!(!s.socket.accepts(&mut s.cx, &ip_repr_wrong_dst, &tcp_repr));
    }

    // =========================================================================================//
    // Timer tests
    // =========================================================================================//

    #[test]
    fn test_timer_retransmit() {
        const RTO: Duration = Duration::from_millis(100);
        let mut r = Timer::new();
        assert_eq!(r.should_retransmit(Instant::from_secs(1)), None);
        r.set_for_retransmit(Instant::from_millis(1000), RTO);
        assert_eq!(r.should_retransmit(Instant::from_millis(1000)), None);
        assert_eq!(r.should_retransmit(Instant::from_millis(1050)), None);
        assert_eq!(
            r.should_retransmit(Instant::from_millis(1101)),
            Some(Duration::from_millis(101))
        );
        r.set_for_retransmit(Instant::from_millis(1101), RTO);
        assert_eq!(r.should_retransmit(Instant::from_millis(1101)), None);
        assert_eq!(r.should_retransmit(Instant::from_millis(1150)), None);
        assert_eq!(r.should_retransmit(Instant::from_millis(1200)), None);
        assert_eq!(
            r.should_retransmit(Instant::from_millis(1301)),
            Some(Duration::from_millis(300))
        );
        r.set_for_idle(Instant::from_millis(1301), None);
        assert_eq!(r.should_retransmit(Instant::from_millis(1350)), None);
    }

    #[test]
    fn test_rtt_estimator() {
        let mut r = RttEstimator::default();

        // dpwarp: microseconds, and the first sample taken as the estimate (RFC 6298 (2.2));
        // upstream 0.12, in milliseconds, averaging from its 300 ms guess: 751, 766, 755, 731,
        // 697, 656, 613, 567, 523, 484, 445, 411, 378, 350, 322, 299, 280, 261, 243, 229,
        // 215, 206, 197, 188.
        let rtos = &[
            300000, 250000, 212500, 184376, 163284, 147464, 135600, 126700, 120028, 115024,
            111268, 108452, 106340, 105000, 105000, 105000, 105000, 105000, 105000, 105000,
            105000, 105000, 105000, 105000,
        ];

        for &rto in rtos {
            r.sample(100_000);
            assert_eq!(r.retransmission_timeout(), Duration::from_micros(rto));
        }
    }

    /// dpwarp: `set_rto_min` lowers (or raises) the floor, and `reset` keeps it.
    #[test]
    fn test_rto_min_is_set_and_kept() {
        let mut s = socket_established();
        s.set_rto_min(Duration::from_millis(10));
        s.rtte.sample(50);
        assert_eq!(s.rtte.retransmission_timeout(), Duration::from_millis(10));
        s.reset();
        s.rtte.sample(50);
        assert_eq!(s.rtte.retransmission_timeout(), Duration::from_millis(10));
        // Below 1 ms it is 1 ms; here the estimate's own 5 ms margin is above that.
        s.set_rto_min(Duration::from_micros(10));
        assert_eq!(s.rtte.min_rto, 1_000);
        assert_eq!(s.rtte.retransmission_timeout(), Duration::from_micros(5_050));
    }

    /// dpwarp: each retransmission timeout doubles the RTO until an RTT sample comes
    /// (RFC 6298 (5.5)): a silent peer is retried after 50, 100, 200, 400 ms, not at the
    /// minimum each time.
    #[test]
    fn test_retransmission_timeouts_back_off() {
        let mut s = socket_established();
        s.rtte.sample(50); // a fast link: RTO at its 50 ms minimum
        s.send_slice(b"abcdef").unwrap();
        recv(&mut s, Instant::from_millis(0), |r: Result<TcpRepr, ()>| assert!(r.is_ok()));
        let mut t = 0;
        for rto in [50, 100, 200, 400] {
            recv_nothing!(s, time t + rto - 1);
            t += rto;
            recv!(s, time t, Ok(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload:    &b"abcdef"[..],
                ..RECV_TEMPL
            }));
        }
        assert_eq!(s.retransmissions(), (0, 4));
        // An RTT sample ends the back-off.
        s.rtte.sample(50);
        assert_eq!(s.rtte.retransmission_timeout(), Duration::from_millis(50));
    }

    /// dpwarp: on a link with round trips of tens of microseconds the RTO is at its 50 ms
    /// minimum from the first sample on and stays there (averaging from the 300 ms guess took
    /// some 40 samples to get near it).
    #[test]
    fn test_rtt_estimator_reaches_the_minimum_on_a_fast_link() {
        let mut r = RttEstimator::default();
        assert_eq!(r.retransmission_timeout(), Duration::from_millis(700));
        for _ in 0..200 {
            r.sample(50);
            assert_eq!(r.retransmission_timeout(), Duration::from_millis(50));
        }
    }

    #[test]
    fn test_set_get_congestion_control() {
        let mut s = socket_established();

        #[cfg(feature = "socket-tcp-reno")]
        {
            s.set_congestion_control(CongestionControl::Reno);
            assert_eq!(s.congestion_control(), CongestionControl::Reno);
        }

        #[cfg(feature = "socket-tcp-cubic")]
        {
            s.set_congestion_control(CongestionControl::Cubic);
            assert_eq!(s.congestion_control(), CongestionControl::Cubic);
        }

        s.set_congestion_control(CongestionControl::None);
        assert_eq!(s.congestion_control(), CongestionControl::None);
    }

    // =========================================================================================//
    // Timestamp tests
    // =========================================================================================//

    #[test]
    fn test_tsval_established_connection() {
        let mut s = socket_established();
        s.set_tsval_generator(Some(|| 1));

        assert!(s.timestamp_enabled());

        // First roundtrip after establishing.
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                timestamp: Some(TcpTimestampRepr::new(1, 0)),
                ..RECV_TEMPL
            }]
        );
        assert_eq!(s.tx_buffer.len(), 6);
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6),
                timestamp: Some(TcpTimestampRepr::new(500, 1)),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tx_buffer.len(), 0);
        // Second roundtrip.
        s.send_slice(b"foobar").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"foobar"[..],
                timestamp: Some(TcpTimestampRepr::new(1, 500)),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.tx_buffer.len(), 0);
    }

    #[test]
    fn test_tsval_disabled_in_remote_client() {
        let mut s = socket_listen();
        s.set_tsval_generator(Some(|| 1));
        assert!(s.timestamp_enabled());
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::SynReceived);
        assert_eq!(s.tuple, Some(TUPLE));
        assert!(!s.timestamp_enabled());
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::Established);
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
    }

    #[test]
    fn test_tsval_disabled_in_local_server() {
        let mut s = socket_listen();
        // s.set_timestamp(false); // commented to alert if the default state changes
        assert!(!s.timestamp_enabled());
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                timestamp: Some(TcpTimestampRepr::new(500, 0)),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::SynReceived);
        assert_eq!(s.tuple, Some(TUPLE));
        assert!(!s.timestamp_enabled());
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::Established);
        assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
    }

    #[test]
    fn test_tsval_disabled_in_remote_server() {
        let mut s = socket();
        s.set_tsval_generator(Some(|| 1));
        assert!(s.timestamp_enabled());
        s.local_seq_no = LOCAL_SEQ;
        s.socket
            .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
            .unwrap();
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                timestamp: Some(TcpTimestampRepr::new(1, 0)),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                timestamp: None,
                ..SEND_TEMPL
            }
        );
        assert!(!s.timestamp_enabled());
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                timestamp: None,
                ..RECV_TEMPL
            }]
        );
    }

    #[test]
    fn test_tsval_disabled_in_local_client() {
        let mut s = socket();
        // s.set_timestamp(false); // commented to alert if the default state changes
        assert!(!s.timestamp_enabled());
        s.local_seq_no = LOCAL_SEQ;
        s.socket
            .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
            .unwrap();
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: Some(LOCAL_SEQ + 1),
                max_seg_size: Some(BASE_MSS - 80),
                window_scale: Some(0),
                timestamp: Some(TcpTimestampRepr::new(500, 0)),
                ..SEND_TEMPL
            }
        );
        assert!(!s.timestamp_enabled());
        s.send_slice(b"abcdef").unwrap();
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                timestamp: None,
                ..RECV_TEMPL
            }]
        );
    }
}
