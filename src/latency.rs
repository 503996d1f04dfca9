//! Latency summaries for the tools (`dpwarp perf`, `dpperf`, `tcp-baseline`, `rpc-bench`): one
//! recorder and one percentile definition, so the same samples give the same figures in every
//! table and JSON line.
//!
//! # Definition
//!
//! Samples are recorded in nanoseconds into an HDR histogram with 3 significant decimal digits
//! (`hdrhistogram`, auto-resizing: any `u64` fits), alongside the exact count, minimum, maximum,
//! sum and sum of squares.
//!
//! - **min, max, mean, stdev** are exact: the smallest and largest sample, the arithmetic mean,
//!   and the population standard deviation (divided by n, as perftest's `t_stdev`).
//! - **The p-quantile** (p50 = median = perftest's `t_typical`, p99, p99.9) is the
//!   *nearest-rank* percentile: the sample of rank `max(1, ceil(p * n))` in ascending order,
//!   reported as the highest value of its histogram bucket (at most 0.1 % above the sample)
//!   and then clamped to `[min, max]`. For p = 0.5 and n = 4 that is the 2nd smallest sample;
//!   for p = 0.99 and n = 1000 the 990th.
//!
//! Every sample counts: no warm-up is dropped (perftest drops none either).

use std::time::Duration;

use hdrhistogram::Histogram;

/// Records latency samples; [`Recorder::summary`] gives the figures.
#[derive(Debug, Clone)]
pub struct Recorder {
    hist: Histogram<u64>,
    min: u64,
    max: u64,
    sum: f64,
    sum_sq: f64,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder {
            // 3 significant digits is within hdrhistogram's supported 0..=5: cannot fail.
            hist: Histogram::new(3).expect("3 significant digits"),
            min: u64::MAX,
            max: 0,
            sum: 0.0,
            sum_sq: 0.0,
        }
    }

    /// Record one sample.
    pub fn record(&mut self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Record one sample given in microseconds (negative and NaN count as 0).
    pub fn record_us(&mut self, us: f64) {
        let ns = (us * 1000.0).round();
        self.record_ns(if ns.is_nan() || ns <= 0.0 {
            0
        } else if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        });
    }

    /// Record one sample in nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        // The histogram auto-resizes; a value beyond what it can ever track (near u64::MAX)
        // lands in its top bucket instead of failing.
        if self.hist.record(ns).is_err() {
            self.hist.saturating_record(ns);
        }
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        let v = ns as f64;
        self.sum += v;
        self.sum_sq += v * v;
    }

    /// Add `other`'s samples (e.g. each thread's recorder into one summary).
    pub fn merge(&mut self, other: &Recorder) {
        if other.is_empty() {
            return;
        }
        // Both auto-resize; `add` fails only for a histogram that cannot grow.
        let _ = self.hist.add(&other.hist);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The p-quantile in microseconds (module docs: nearest rank, clamped to [min, max]); 0
    /// without samples.
    pub fn quantile_us(&self, p: f64) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        let v = self
            .hist
            .value_at_quantile(p.clamp(0.0, 1.0))
            .clamp(self.min, self.max);
        v as f64 / 1000.0
    }

    /// Every figure, in microseconds (all 0 without samples).
    pub fn summary(&self) -> Summary {
        let n = self.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = self.sum / n as f64;
        let var = (self.sum_sq / n as f64 - mean * mean).max(0.0);
        Summary {
            count: n,
            min_us: self.min as f64 / 1000.0,
            max_us: self.max as f64 / 1000.0,
            mean_us: mean / 1000.0,
            stdev_us: var.sqrt() / 1000.0,
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
        }
    }
}

/// A latency summary in microseconds ([`Recorder::summary`]; definitions in the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Smallest sample.
    pub min_us: f64,
    /// Largest sample.
    pub max_us: f64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Population standard deviation.
    pub stdev_us: f64,
    /// Median (nearest rank).
    pub p50_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// 99.9th percentile (nearest rank).
    pub p999_us: f64,
}

impl Summary {
    /// The summary of `samples`.
    pub fn of(samples: impl IntoIterator<Item = Duration>) -> Summary {
        let mut r = Recorder::new();
        for d in samples {
            r.record(d);
        }
        r.summary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Summary {
        Summary::of(v.iter().map(|&u| Duration::from_micros(u)))
    }

    /// Equal within the histogram's resolution (0.1 %).
    fn near(got: f64, want: f64) -> bool {
        (got - want).abs() <= want * 0.001
    }

    /// Nearest rank: the sample of rank ceil(p * n). The three definitions the tools used to
    /// have (floor(n*p), round((n-1)*p), hdrhistogram) disagreed on these; now there is one.
    #[test]
    fn percentiles_are_nearest_rank() {
        let s = us(&[10, 20, 30, 40]);
        assert!(near(s.p50_us, 20.0), "{s:?}"); // rank 2 (floor(4*0.5) indexes the 3rd: 30)
        assert_eq!(s.p99_us, 40.0); // clamped to the maximum
        assert_eq!(
            (s.min_us, s.max_us, s.mean_us, s.count),
            (10.0, 40.0, 25.0, 4)
        );
        assert!((s.stdev_us - 125f64.sqrt()).abs() < 1e-9);
        let s = us(&(1..=1000).collect::<Vec<_>>());
        assert!(near(s.p50_us, 500.0), "{s:?}");
        assert!(near(s.p99_us, 990.0), "{s:?}"); // round((n-1)*p) would give the 991st
        assert!(near(s.p999_us, 999.0), "{s:?}");
        // One sample: every percentile is it.
        let s = us(&[7]);
        assert_eq!((s.p50_us, s.p99_us, s.p999_us), (7.0, 7.0, 7.0));
        assert_eq!(Recorder::new().summary(), Summary::default());
    }

    /// Bucketed values within 0.1 % and never outside [min, max].
    #[test]
    fn large_values_are_within_a_tenth_of_a_percent_and_clamped() {
        let s = us(&[123_457, 123_457, 999_999]);
        assert!((s.p50_us - 123_457.0).abs() <= 123.5, "{}", s.p50_us);
        assert!(s.p999_us <= s.max_us && s.p50_us >= s.min_us);
        let mut r = Recorder::new();
        r.record_us(f64::NAN);
        r.record_us(-3.0);
        r.record_ns(u64::MAX);
        assert_eq!(r.len(), 3);
        assert_eq!(r.summary().min_us, 0.0);
    }
}
