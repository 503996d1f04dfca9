//! perftest's result table, shared by `perf` (perftest-compatible) and `dpperf`/`tcp-baseline`/
//! the demo: one header and one row format per kind, so every tool's table reads the same
//! (scripts/interop reads perf's rows by their column positions).

use dpwarp::latency::Summary;

/// The rule above and below a table.
pub const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Bandwidth columns; `unit` is `MB/sec` (MiB/s, as perftest) or `Gb/sec`.
pub fn bw_header(unit: &str) -> String {
    format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
}

/// One bandwidth row (a peak that was not measured is 0.00, as perftest prints for send_bw).
pub fn bw_row(size: u64, iters: u64, peak: f64, avg: f64, mpps: f64) -> String {
    format!(" {size:<10} {iters:<10}       {peak:<7.2}            {avg:<7.2}\t\t   {mpps:<7.6}")
}

/// Latency columns (microseconds; t_typical is the median).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// One latency row from a [`Summary`] (its definitions: `dpwarp::latency`).
pub fn lat_row(size: usize, s: &Summary) -> String {
    format!(
        " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size,
        s.count,
        s.min_us,
        s.max_us,
        s.p50_us,
        s.mean_us,
        s.stdev_us,
        s.p99_us,
        s.p999_us
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// scripts/interop's `perf_row`/`lat_row` and tests/interop_perf.rs split rows on
    /// whitespace: 5 fields for bandwidth, 9 for latency, t_typical fifth.
    #[test]
    fn rows_split_into_perftests_columns() {
        let b: Vec<String> = bw_row(4096, 200, 1.5, 1.25, 0.5)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert_eq!(b, ["4096", "200", "1.50", "1.25", "0.500000"]);
        let s = Summary {
            count: 199,
            min_us: 1.0,
            max_us: 9.0,
            mean_us: 3.0,
            stdev_us: 0.5,
            p50_us: 2.0,
            p99_us: 8.0,
            p999_us: 9.0,
        };
        let row = lat_row(64, &s);
        let l: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            l,
            ["64", "199", "1.00", "9.00", "2.00", "3.00", "0.50", "8.00", "9.00"]
        );
    }
}
