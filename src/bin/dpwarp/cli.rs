//! What every tool shares on the command line: the transport options (`--transport`, `--config`
//! with their `$DPWARP_TRANSPORT`/`$DPWARP_CONFIG` fallbacks), `-v` log verbosity and the
//! progress line on stderr.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The byte-stream backend of the RDMA side.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportArg {
    /// The DPDK dataplane of --config (smoltcp on a DPDK port).
    Dpdk,
    /// Kernel TCP sockets.
    Kernel,
}

impl TransportArg {
    /// The name on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            TransportArg::Dpdk => "dpdk",
            TransportArg::Kernel => "kernel",
        }
    }
}

/// `--transport`, `--config` and `--port-index` of `perf`, `rping` and `dpperf`.
#[derive(clap::Args, Debug, Clone)]
pub struct NetArgs {
    /// Byte-stream backend: `dpdk` (the DPDK dataplane of --config; a server listens on the
    /// port's own address) or `kernel` (kernel TCP).
    #[arg(long, value_enum, env = "DPWARP_TRANSPORT", default_value_t = TransportArg::Dpdk)]
    pub transport: TransportArg,
    /// Dataplane config (TOML, see configs/) for --transport dpdk.
    #[arg(long, env = "DPWARP_CONFIG")]
    pub config: Option<PathBuf>,
    /// Which configured DPDK port to use (--transport dpdk).
    #[arg(long, default_value_t = 0)]
    pub port_index: usize,
    /// Whether `config` came from `$DPWARP_CONFIG` rather than `--config` (set by `main`).
    #[arg(skip)]
    pub config_from_env: bool,
}

/// `-v`: more log output (warn by default; -v info, -vv debug; `RUST_LOG` overrides).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Verbosity {
    /// More log output on stderr: -v info, -vv debug (default: warnings only; RUST_LOG, when
    /// set, overrides).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Start the logger: `RUST_LOG` when set, else warn / info (-v) / debug (-vv and more).
pub fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp_micros()
        .init();
}

/// One progress line on stderr for long runs: rewritten in place (`\r`) when stderr is a
/// terminal, one plain line per phase otherwise (logs and CI output stay readable). Nothing is
/// shown for a phase until it has run `delay`. Call [`Progress::clear`] before printing results
/// on stdout, so a terminal never shows the two mixed on one line.
pub struct Progress {
    tty: bool,
    delay: Duration,
    phase: String,
    started: Instant,
    last: Option<Instant>,
    /// A `\r` line is on the terminal.
    drawn: bool,
    /// The current phase's plain line was printed.
    announced: bool,
}

impl Progress {
    /// Progress shown for phases that last longer than `delay`.
    pub fn new(delay: Duration) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            delay,
            phase: String::new(),
            started: Instant::now(),
            last: None,
            drawn: false,
            announced: false,
        }
    }

    /// Start a phase (`what`: e.g. "rdma NULL, 3 s"); with no delay it is shown at once.
    pub fn phase(&mut self, what: impl Into<String>) {
        self.phase = what.into();
        self.started = Instant::now();
        self.last = None;
        self.announced = false;
        if self.delay.is_zero() {
            self.tick(String::new);
        }
    }

    /// Show `detail` (e.g. "1200/5000") once the phase has run `delay`: on a terminal at most
    /// four times a second; otherwise the phase's one plain line.
    pub fn tick(&mut self, detail: impl FnOnce() -> String) {
        let now = Instant::now();
        // No phase, nothing to say (e.g. the demo's short perf run).
        if self.phase.is_empty() || now.duration_since(self.started) < self.delay {
            return;
        }
        if self.tty {
            if self
                .last
                .is_some_and(|t| now.duration_since(t) < Duration::from_millis(250))
            {
                return;
            }
            let d = detail();
            let sep = if d.is_empty() { "" } else { ": " };
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K{}{sep}{d}", self.phase);
            let _ = e.flush();
            self.drawn = true;
        } else if !self.announced {
            eprintln!("{}", self.phase);
        }
        self.last = Some(now);
        self.announced = true;
    }

    /// Remove the terminal line (before results go to stdout).
    pub fn clear(&mut self) {
        if self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

thread_local! {
    /// This thread's progress line for runs longer than 2 s.
    static PROGRESS: std::cell::RefCell<Progress> =
        std::cell::RefCell::new(Progress::new(Duration::from_secs(2)));
}

/// Start a phase of this thread's 2-second-delayed progress line ([`Progress::phase`]).
pub fn progress_phase(what: String) {
    PROGRESS.with(|p| p.borrow_mut().phase(what));
}

/// Progress within the phase: `done` of `of` iterations (`u64::MAX`: open-ended). Call it every
/// few hundred iterations, not on every one.
pub fn progress_tick(done: u64, of: u64) {
    PROGRESS.with(|p| {
        p.borrow_mut().tick(|| {
            if of == u64::MAX {
                format!("{done} iterations")
            } else {
                format!("{done}/{of} iterations")
            }
        })
    });
}

/// Clear this thread's progress line (before results go to stdout).
pub fn progress_clear() {
    PROGRESS.with(|p| p.borrow_mut().clear());
}
