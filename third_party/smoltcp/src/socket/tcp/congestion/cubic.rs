//! dpwarp: CUBIC (RFC 9438), in segments as the RFC's constants are; slow start and the
//! loss reactions are [`Window`]'s, fast recovery's window is the socket's.

use crate::{socket::tcp::RttEstimator, time::Instant};

use super::{Controller, Window};

/// RFC 9438 section 4.6: the multiplicative decrease factor.
const BETA_CUBIC: f64 = 0.7;
/// RFC 9438 section 5: segments per second cubed.
const C: f64 = 0.4;

#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Cubic {
    w: Window,
    /// W_max, segments: the window before the last reduction (section 4.2).
    w_max: f64,
    /// cwnd_prior, segments: the window when the last congestion event struck.
    cwnd_prior: f64,
    /// The current congestion avoidance epoch: when it started and K, in seconds.
    epoch: Option<(Instant, f64)>,
    /// W_est, segments: the Reno-friendly estimate (section 4.3).
    w_est: f64,
}

impl Cubic {
    pub fn new() -> Cubic {
        Cubic {
            w: Window::new(),
            w_max: 0.0,
            cwnd_prior: 0.0,
            epoch: None,
            w_est: 0.0,
        }
    }

    fn segments(&self) -> f64 {
        self.w.cwnd as f64 / self.w.mss as f64
    }

    /// W_cubic(t), segments (RFC 9438 equation (1)).
    fn w_cubic(&self, t: f64, k: f64) -> f64 {
        let d = t - k;
        C * d * d * d + self.w_max
    }

    /// A congestion event (section 4.6) or a timeout (4.8): remember the window, with fast
    /// convergence (4.7), and end the epoch.
    fn note_loss(&mut self) {
        let cwnd = self.segments();
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA_CUBIC) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        self.epoch = None;
    }
}

impl Controller for Cubic {
    fn window(&self) -> usize {
        self.w.cwnd
    }

    fn set_remote_window(&mut self, remote_window: usize) {
        self.w.set_remote_window(remote_window);
    }

    fn on_ack(&mut self, now: Instant, acked: usize, flight: usize, rtt: &RttEstimator) {
        let acked = self.w.slow_start(acked, flight);
        if acked == 0 {
            return;
        }
        let cwnd = self.segments();
        if self.epoch.is_none() {
            // Section 4.2: K = cubic_root((W_max - cwnd_epoch) / C); an epoch that starts
            // above W_max (slow start went past it) starts at the curve's plateau. W_est
            // starts at cwnd_epoch (section 4.3).
            let k = if cwnd < self.w_max {
                cube_root((self.w_max - cwnd) / C)
            } else {
                self.w_max = cwnd;
                0.0
            };
            self.epoch = Some((now, k));
            self.w_est = cwnd;
        }
        let Some((start, k)) = self.epoch else {
            return;
        };
        let t = (now - start).total_micros() as f64 / 1e6;
        let rtt_s = rtt.srtt_us() as f64 / 1e6;
        let acked_segments = acked as f64 / self.w.mss as f64;

        // Section 4.3: the Reno-friendly region, alpha_cubic until W_est reaches the window
        // before the reduction, then 1 (Reno's own increase).
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            3.0 * (1.0 - BETA_CUBIC) / (1.0 + BETA_CUBIC)
        };
        self.w_est += alpha * acked_segments / cwnd;

        let next = if self.w_cubic(t, k) < self.w_est {
            self.w_est
        } else {
            // Sections 4.4 and 4.5: towards W_cubic one RTT ahead, at most half the window
            // more per window acknowledged.
            let target = self.w_cubic(t + rtt_s, k).clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) / cwnd * acked_segments
        };
        let next = (next * self.w.mss as f64) as usize;
        self.w.cwnd = next.min(self.w.ceiling()).max(self.w.cwnd);
    }

    fn on_congestion(&mut self, _now: Instant, flight: usize) {
        self.note_loss();
        self.w.started = true;
        self.w.ssthresh = self.w.reduced(flight, BETA_CUBIC);
        self.w.cwnd = self.w.ssthresh;
    }

    fn on_recovery_end(&mut self, flight: usize) {
        self.w.recovery_end(flight);
    }

    fn on_timeout(&mut self, _now: Instant, flight: usize, repeated: bool) {
        if !repeated {
            self.note_loss();
        }
        let ssthresh = (!repeated).then(|| self.w.reduced(flight, BETA_CUBIC));
        self.w.timeout(ssthresh);
    }

    fn set_mss(&mut self, mss: usize) {
        self.w.set_mss(mss);
    }
}

/// The cube root by Newton's method (no `libm` in a `no_std` build); `a` >= 0.
fn cube_root(a: f64) -> f64 {
    if a <= 0.0 {
        return 0.0;
    }
    let mut x = if a > 1.0 { a / 3.0 } else { 1.0 };
    for _ in 0..100 {
        let next = (2.0 * x + a / (x * x)) / 3.0;
        if (next - x).abs() <= 1e-9 * next {
            return next;
        }
        x = next;
    }
    x
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::time::Duration;

    const MSS: usize = 1000;

    fn cubic() -> Cubic {
        let mut c = Cubic::new();
        c.set_mss(MSS);
        c.set_remote_window(1 << 30);
        c
    }

    #[test]
    fn test_cube_root() {
        for a in [0.001, 1.0, 8.0, 75.0, 1e6, 1e12] {
            let r = cube_root(a);
            assert!((r * r * r - a).abs() <= 1e-6 * a, "cbrt({a}) = {r}");
        }
        assert_eq!(cube_root(0.0), 0.0);
    }

    #[test]
    fn test_cubic_reduces_to_beta() {
        let mut c = cubic();
        c.on_congestion(Instant::from_millis(0), 100 * MSS);
        assert_eq!(c.window(), 70 * MSS);
    }

    #[test]
    fn test_cubic_fast_convergence() {
        let mut c = cubic();
        c.w.cwnd = 100 * MSS;
        c.on_congestion(Instant::from_millis(0), 100 * MSS);
        assert_eq!(c.w_max, 100.0);
        // A second loss below W_max: W_max = cwnd * (1 + beta) / 2 (section 4.7).
        c.on_congestion(Instant::from_millis(0), 70 * MSS);
        assert!((c.w_max - 70.0 * 1.7 / 2.0).abs() < 1e-9, "{}", c.w_max);
    }

    /// After a reduction, the window follows the curve: concave up to W_max at t = K,
    /// then convex beyond it (section 4.2), with a round trip long enough that the
    /// curve, not the Reno-friendly estimate, governs.
    #[test]
    fn test_cubic_follows_the_curve() {
        let mut c = cubic();
        let mut rtt = RttEstimator::default();
        rtt.sample(100_000);
        c.w.cwnd = 1000 * MSS;
        c.on_congestion(Instant::from_millis(0), 1000 * MSS);
        assert_eq!(c.window(), 700 * MSS);
        let k = cube_root(1000.0 * (1.0 - BETA_CUBIC) / C);
        // A window's worth of ACKs each round trip of 100 ms.
        let mut now = Instant::from_millis(0);
        let mut at_k = None;
        let mut last = c.window();
        while now < Instant::from_secs(20) {
            let cwnd = c.window();
            for _ in 0..cwnd / MSS {
                c.on_ack(now, MSS, cwnd, &rtt);
            }
            assert!(c.window() >= last, "the window only grows between losses");
            last = c.window();
            now += Duration::from_millis(100);
            if at_k.is_none() && now.total_micros() as f64 / 1e6 >= k {
                at_k = Some(c.window() / MSS);
            }
        }
        let at_k = at_k.unwrap();
        assert!(
            (990..=1010).contains(&at_k),
            "at K ({k} s) the window is W_max: {at_k}"
        );
        assert!(
            c.window() / MSS > 1500,
            "convex beyond K: {}",
            c.window() / MSS
        );
    }

    /// On a short round trip the Reno-friendly estimate governs: about alpha_cubic (0.53)
    /// segments per round trip, where the curve would add almost nothing in that time.
    #[test]
    fn test_cubic_reno_friendly_on_short_round_trips() {
        let mut c = cubic();
        let mut rtt = RttEstimator::default();
        rtt.sample(50);
        c.w.cwnd = 100 * MSS;
        c.on_congestion(Instant::from_millis(0), 100 * MSS);
        let mut now = Instant::from_millis(0);
        for _ in 0..20 {
            let cwnd = c.window();
            for _ in 0..cwnd / MSS {
                c.on_ack(now, MSS, cwnd, &rtt);
            }
            now += Duration::from_micros(50);
        }
        let grown = (c.window() - 70 * MSS) as f64 / MSS as f64;
        assert!(
            (9.0..=12.0).contains(&grown),
            "20 round trips: {grown} segments"
        );
    }

    #[test]
    fn test_cubic_timeout_is_one_segment() {
        let mut c = cubic();
        c.on_timeout(Instant::from_millis(0), 100 * MSS, false);
        assert_eq!(c.window(), MSS);
        assert_eq!(c.w.ssthresh, 70 * MSS);
        c.on_timeout(Instant::from_millis(0), MSS, true);
        assert_eq!(c.w.ssthresh, 70 * MSS, "held for a repeated timeout");
    }

    #[test]
    fn test_cubic_does_not_grow_when_not_limited() {
        let mut c = cubic();
        let rtt = RttEstimator::default();
        c.on_ack(Instant::from_millis(0), MSS, MSS, &rtt);
        assert_eq!(c.window(), 10 * MSS);
    }
}
