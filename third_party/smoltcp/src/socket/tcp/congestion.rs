//! dpwarp: congestion control (RFC 5681, RFC 6582, RFC 9438), rewritten. 0.12's controllers
//! sized only what the next dispatch could add beyond SND.NXT (not what may be in flight),
//! cut the window on every duplicate ACK or retransmission, grew it by a full segment per
//! ACK in congestion avoidance, and computed CUBIC's curve in octets where RFC 9438's
//! constants are in segments; dpwarp built smoltcp without any of them. Here the socket
//! limits what is in flight (SND.NXT - SND.UNA) to `min(receive window, window())`, and
//! tells the controller of four events: new data acknowledged outside recovery, a loss found
//! by ACKs (entering fast recovery, once per window of data), the end of that recovery, and a
//! retransmission timeout. Fast recovery's own window (RFC 6582 section 3.2: inflated by
//! duplicate ACKs, deflated by partial ACKs) is kept by the socket.

use crate::time::Instant;

use super::RttEstimator;

pub(super) mod no_control;

#[cfg(feature = "socket-tcp-cubic")]
pub(super) mod cubic;

#[cfg(feature = "socket-tcp-reno")]
pub(super) mod reno;

#[allow(unused_variables)]
pub(super) trait Controller {
    /// The congestion window: the octets that may be in flight.
    fn window(&self) -> usize;

    /// The peer's receive window: the congestion window grows no further than the largest
    /// seen (a window the peer never offers cannot be used).
    fn set_remote_window(&mut self, remote_window: usize) {}

    /// `acked` octets of new data acknowledged outside fast recovery, with `flight` octets
    /// in flight before this ACK.
    fn on_ack(&mut self, now: Instant, acked: usize, flight: usize, rtt: &RttEstimator) {}

    /// A loss found by ACKs (fast retransmit, RFC 5681 section 3.2), with `flight` octets in
    /// flight: the multiplicative decrease.
    fn on_congestion(&mut self, now: Instant, flight: usize) {}

    /// Fast recovery ended (RFC 6582 section 3.2 step 6), `flight` octets still in flight.
    fn on_recovery_end(&mut self, flight: usize) {}

    /// A retransmission timeout, with `flight` octets in flight when it fired; `repeated`
    /// when the data at SND.UNA had already been resent by a timeout.
    fn on_timeout(&mut self, now: Instant, flight: usize, repeated: bool) {}

    /// Set the maximum segment size.
    fn set_mss(&mut self, mss: usize) {}
}

#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) enum AnyController {
    None(no_control::NoControl),

    #[cfg(feature = "socket-tcp-reno")]
    Reno(reno::Reno),

    #[cfg(feature = "socket-tcp-cubic")]
    Cubic(cubic::Cubic),
}

impl AnyController {
    /// dpwarp: a new socket has no congestion control whatever the features (0.12 picked
    /// CUBIC when it was built in); the owner picks one with
    /// [`super::Socket::set_congestion_control()`]. Upstream's tests assume none.
    #[inline]
    pub fn new() -> Self {
        AnyController::None(no_control::NoControl)
    }

    #[inline]
    pub fn inner_mut(&mut self) -> &mut dyn Controller {
        match self {
            AnyController::None(n) => n,

            #[cfg(feature = "socket-tcp-reno")]
            AnyController::Reno(r) => r,

            #[cfg(feature = "socket-tcp-cubic")]
            AnyController::Cubic(c) => c,
        }
    }

    #[inline]
    pub fn inner(&self) -> &dyn Controller {
        match self {
            AnyController::None(n) => n,

            #[cfg(feature = "socket-tcp-reno")]
            AnyController::Reno(r) => r,

            #[cfg(feature = "socket-tcp-cubic")]
            AnyController::Cubic(c) => c,
        }
    }
}

/// The state every window-based controller keeps: the congestion window, the slow start
/// threshold and the segment size, with slow start and the loss reactions that RFC 5681
/// and RFC 9438 share.
#[cfg(any(feature = "socket-tcp-reno", feature = "socket-tcp-cubic"))]
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) struct Window {
    pub cwnd: usize,
    pub ssthresh: usize,
    pub mss: usize,
    /// The largest receive window the peer offered (at least the initial window).
    pub rwnd: usize,
    /// Whether anything was acknowledged or lost yet (until then a new MSS resets the
    /// initial window).
    pub started: bool,
}

#[cfg(any(feature = "socket-tcp-reno", feature = "socket-tcp-cubic"))]
impl Window {
    /// The default MSS until the handshake tells (RFC 9293 section 3.7.1).
    const DEFAULT_MSS: usize = 536;

    pub fn new() -> Self {
        Window {
            cwnd: Self::initial(Self::DEFAULT_MSS),
            ssthresh: usize::MAX,
            mss: Self::DEFAULT_MSS,
            rwnd: 0,
            started: false,
        }
    }

    /// RFC 6928 section 2: IW = min(10 * MSS, max(2 * MSS, 14600)).
    pub fn initial(mss: usize) -> usize {
        (10 * mss).min((2 * mss).max(14600))
    }

    pub fn set_mss(&mut self, mss: usize) {
        self.mss = mss.max(1);
        if !self.started {
            self.cwnd = Self::initial(self.mss);
        }
    }

    pub fn set_remote_window(&mut self, remote_window: usize) {
        self.rwnd = self.rwnd.max(remote_window);
    }

    /// The most the window may grow to: the largest receive window seen.
    pub fn ceiling(&self) -> usize {
        self.rwnd.max(Self::initial(self.mss))
    }

    /// Whether the sender used the window (RFC 7661's "validated" window, as Linux's
    /// `tcp_is_cwnd_limited` does it in slow start): a window that limits nothing must not
    /// grow, or an application sending small messages would build one it never tested.
    fn limited(&self, flight: usize) -> bool {
        flight.saturating_mul(2) >= self.cwnd
    }

    /// Slow start (RFC 5681 section 3.1, counting every octet acknowledged as Linux does,
    /// since an ACK may cover many segments here): grows the window by `acked` up to
    /// ssthresh, and returns what is left over for congestion avoidance; nothing grows (0
    /// is returned) unless the sender used the window (`limited`, with `flight` octets in
    /// flight before the ACK).
    pub fn slow_start(&mut self, acked: usize, flight: usize) -> usize {
        if !self.limited(flight) {
            return 0;
        }
        self.started = true;
        if self.cwnd >= self.ssthresh {
            return acked;
        }
        let grown = self.cwnd.saturating_add(acked).min(self.ssthresh);
        let used = grown - self.cwnd;
        self.cwnd = grown.min(self.ceiling()).max(self.cwnd);
        acked - used
    }

    /// The window after a loss: `factor` of what was in flight, at least two segments
    /// (RFC 5681 equation (4); RFC 9438 section 4.6).
    pub fn reduced(&self, flight: usize, factor: f64) -> usize {
        ((flight as f64 * factor) as usize).max(2 * self.mss)
    }

    /// RFC 6582 section 3.2 step 6, option 1: cwnd = min(ssthresh, max(FlightSize, SMSS) +
    /// SMSS), so that the end of recovery sends no burst of a whole window at once.
    pub fn recovery_end(&mut self, flight: usize) {
        self.cwnd = self.ssthresh.min(flight.max(self.mss) + self.mss);
    }

    /// RFC 5681 section 3.1: after a timeout the window is one segment (the loss window),
    /// and ssthresh is set from the flight unless it had been set by a timeout for this
    /// data already (equation (4)'s note).
    pub fn timeout(&mut self, ssthresh: Option<usize>) {
        self.started = true;
        if let Some(ssthresh) = ssthresh {
            self.ssthresh = ssthresh;
        }
        self.cwnd = self.mss;
    }
}
