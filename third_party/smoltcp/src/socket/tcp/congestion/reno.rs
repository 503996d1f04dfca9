//! dpwarp: Reno's window (RFC 5681 section 3.1) with appropriate byte counting (RFC 3465
//! section 2.1); fast recovery's window is the socket's (RFC 6582, NewReno).

use crate::{socket::tcp::RttEstimator, time::Instant};

use super::{Controller, Window};

#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Reno {
    w: Window,
    /// Octets acknowledged in congestion avoidance since the window last grew.
    bytes_acked: usize,
}

impl Reno {
    pub fn new() -> Self {
        Reno {
            w: Window::new(),
            bytes_acked: 0,
        }
    }
}

impl Controller for Reno {
    fn window(&self) -> usize {
        self.w.cwnd
    }

    fn set_remote_window(&mut self, remote_window: usize) {
        self.w.set_remote_window(remote_window);
    }

    fn on_ack(&mut self, _now: Instant, acked: usize, flight: usize, _rtt: &RttEstimator) {
        let acked = self.w.slow_start(acked, flight);
        if acked == 0 {
            return;
        }
        // Congestion avoidance: one segment per window's worth of octets acknowledged.
        self.bytes_acked += acked;
        if self.bytes_acked >= self.w.cwnd {
            self.bytes_acked -= self.w.cwnd;
            self.w.cwnd = (self.w.cwnd + self.w.mss).min(self.w.ceiling().max(self.w.cwnd));
        }
    }

    fn on_congestion(&mut self, _now: Instant, flight: usize) {
        // RFC 5681 equation (4): ssthresh = max(FlightSize / 2, 2 * SMSS); the window
        // outside recovery becomes ssthresh.
        self.w.started = true;
        self.w.ssthresh = self.w.reduced(flight, 0.5);
        self.w.cwnd = self.w.ssthresh;
        self.bytes_acked = 0;
    }

    fn on_recovery_end(&mut self, flight: usize) {
        self.w.recovery_end(flight);
    }

    fn on_timeout(&mut self, _now: Instant, flight: usize, repeated: bool) {
        let ssthresh = (!repeated).then(|| self.w.reduced(flight, 0.5));
        self.w.timeout(ssthresh);
        self.bytes_acked = 0;
    }

    fn set_mss(&mut self, mss: usize) {
        self.w.set_mss(mss);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const MSS: usize = 1000;

    fn reno() -> Reno {
        let mut r = Reno::new();
        r.set_mss(MSS);
        r.set_remote_window(1 << 20);
        r
    }

    #[test]
    fn test_reno_initial_window() {
        assert_eq!(reno().window(), 10 * MSS);
        let mut r = Reno::new();
        r.set_mss(9000);
        assert_eq!(r.window(), 18000, "RFC 6928: two segments of a jumbo MSS");
    }

    #[test]
    fn test_reno_slow_start_doubles_per_round_trip() {
        let mut r = reno();
        let rtt = RttEstimator::default();
        let now = Instant::from_millis(0);
        for _ in 0..3 {
            let cwnd = r.window();
            r.on_ack(now, cwnd, cwnd, &rtt);
            assert_eq!(r.window(), 2 * cwnd);
        }
    }

    #[test]
    fn test_reno_does_not_grow_when_not_limited() {
        let mut r = reno();
        let rtt = RttEstimator::default();
        r.on_ack(Instant::from_millis(0), MSS, MSS, &rtt);
        assert_eq!(r.window(), 10 * MSS);
    }

    #[test]
    fn test_reno_halves_and_then_grows_a_segment_per_window() {
        let mut r = reno();
        let rtt = RttEstimator::default();
        let now = Instant::from_millis(0);
        r.on_congestion(now, 40 * MSS);
        assert_eq!(r.window(), 20 * MSS);
        // A window's worth of ACKs, one segment each: one segment more.
        for _ in 0..20 {
            r.on_ack(now, MSS, 20 * MSS, &rtt);
        }
        assert_eq!(r.window(), 21 * MSS);
        for _ in 0..20 {
            r.on_ack(now, MSS, 21 * MSS, &rtt);
        }
        assert_eq!(
            r.window(),
            21 * MSS,
            "21 segments' worth needed for the next one"
        );
        r.on_ack(now, MSS, 21 * MSS, &rtt);
        assert_eq!(r.window(), 22 * MSS);
    }

    #[test]
    fn test_reno_floor_is_two_segments() {
        let mut r = reno();
        r.on_congestion(Instant::from_millis(0), MSS);
        assert_eq!(r.window(), 2 * MSS);
    }

    #[test]
    fn test_reno_recovery_end_sends_no_burst() {
        let mut r = reno();
        r.on_congestion(Instant::from_millis(0), 40 * MSS);
        r.on_recovery_end(3 * MSS);
        assert_eq!(r.window(), 4 * MSS);
        let mut r = reno();
        r.on_congestion(Instant::from_millis(0), 40 * MSS);
        r.on_recovery_end(30 * MSS);
        assert_eq!(r.window(), 20 * MSS);
    }

    #[test]
    fn test_reno_timeout_is_one_segment_then_slow_start_to_half() {
        let mut r = reno();
        let rtt = RttEstimator::default();
        let now = Instant::from_millis(0);
        r.on_timeout(now, 40 * MSS, false);
        assert_eq!(r.window(), MSS);
        // A second timeout for the same data keeps ssthresh (RFC 5681 equation (4)).
        r.on_timeout(now, MSS, true);
        for _ in 0..5 {
            let cwnd = r.window();
            r.on_ack(now, cwnd, cwnd, &rtt);
        }
        assert_eq!(r.window(), 20 * MSS, "slow start stops at ssthresh");
    }

    #[test]
    fn test_reno_grows_no_further_than_the_receive_window() {
        let mut r = Reno::new();
        r.set_mss(MSS);
        r.set_remote_window(64 * MSS);
        let rtt = RttEstimator::default();
        for _ in 0..10 {
            let cwnd = r.window();
            r.on_ack(Instant::from_millis(0), cwnd, cwnd, &rtt);
        }
        assert_eq!(r.window(), 64 * MSS);
    }
}
