//! The passive side's MPA startup before the application decides, as both listeners run it
//! (the kernel-TCP acceptor thread, `cm::listen`, and each DPDK worker): sans-IO, so the
//! policy lives here once and each listener only moves bytes and closes sockets.
//!
//! - **Deadline** ([`ListenConfig::mpa_timeout`]): a connection whose whole MPA Request has not
//!   arrived by then is closed. RFC 5044 §7.1.2 item 10: "MPA implementations SHOULD implement
//!   a reasonable timeout while waiting for the entire set of startup frames; this prevents
//!   certain denial-of-service attacks."
//! - **Cap** ([`ListenConfig::max_startups`]): with that many startups in progress a new
//!   connection is refused at once ([`admit`]).
//! - **Bound**: a probe never holds more than an MPA Request (20 + 512 octets, RFC 5044 §7.1)
//!   plus one read; a peer that sends more without a Request is not speaking MPA.
//! - **Rev 0** ([`ListenConfig::mpa_rev0_permissive`]): RFC 5044 App. C; off, a Rev 0 Request
//!   fails the startup (RFC 5044 §7.1.1).
//! - Every connection dropped for one of these reasons, or for a malformed Request, gets one
//!   `warn` line from [`log_refusal`], in the same words from either listener.

use std::net::SocketAddr;
use std::time::Instant;

use super::ListenConfig;
use crate::mpa::{MpaConfig, PeerRequest, Startup, StartupEvent};

/// The largest MPA Request frame: 20 octets of header and 512 of private data (RFC 5044 §7.1).
pub(crate) const MAX_REQUEST: usize = 20 + 512;
/// What a probe may hold beyond a Request: one read's worth (bytes after the Request are
/// kept so the real responder sees them and fails the startup, RFC 5044 §7.1.2).
pub(crate) const READ_SLACK: usize = 1024;

/// Whether a new connection may start its MPA startup with `in_progress` startups running;
/// else why not (for [`log_refusal`]).
pub(crate) fn admit(in_progress: usize, cfg: &ListenConfig) -> Result<(), String> {
    if in_progress >= cfg.max_startups {
        Err(format!(
            "{in_progress} MPA startups in progress (max_startups)"
        ))
    } else {
        Ok(())
    }
}

/// The one log line of a connection a listener closes before the application saw it.
pub(crate) fn log_refusal(listener: &str, remote: impl std::fmt::Display, why: &str) {
    log::warn!("{listener}: closing {remote} during MPA startup: {why}");
}

/// What became of a probe.
#[derive(Debug)]
pub(crate) enum ProbeOutcome {
    /// Still reading the Request.
    Pending,
    /// A valid Request: hand `raw` (every octet received, the Request first) to the
    /// application as a connection request; the real responder is built at accept time.
    Request { peer: PeerRequest, raw: Vec<u8> },
    /// Close the connection, for this reason (log it with [`log_refusal`]).
    Drop(String),
}

/// One accepted TCP connection's MPA startup until its Request is complete.
pub(crate) struct MpaProbe {
    startup: Startup,
    raw: Vec<u8>,
    deadline: Instant,
    done: bool,
}

impl MpaProbe {
    /// A probe for a connection accepted at `now` under `cfg`.
    pub(crate) fn new(cfg: &ListenConfig, now: Instant) -> MpaProbe {
        let mpa = MpaConfig {
            timeout: cfg.mpa_timeout,
            rev0_permissive: cfg.mpa_rev0_permissive,
            ..MpaConfig::default()
        };
        MpaProbe {
            startup: Startup::responder(mpa, now),
            raw: Vec::new(),
            deadline: now + cfg.mpa_timeout,
            done: false,
        }
    }

    /// When the Request must be complete.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How many octets the listener may read for this probe now (0: it is done, or it holds
    /// all it ever will).
    pub(crate) fn room(&self) -> usize {
        if self.done {
            0
        } else {
            (MAX_REQUEST + READ_SLACK).saturating_sub(self.raw.len())
        }
    }

    /// Octets read from the connection at `now`.
    pub(crate) fn on_bytes(&mut self, bytes: &[u8], now: Instant) -> ProbeOutcome {
        if self.done {
            return ProbeOutcome::Pending;
        }
        if self.raw.len() + bytes.len() > MAX_REQUEST + READ_SLACK {
            self.done = true;
            return ProbeOutcome::Drop(format!(
                "{} octets and no MPA Request (at most {MAX_REQUEST}, RFC 5044 §7.1)",
                self.raw.len() + bytes.len()
            ));
        }
        let _ = self.startup.on_bytes(bytes, now);
        self.raw.extend_from_slice(bytes);
        self.outcome(now)
    }

    /// The peer closed its direction (or the connection is gone) at `now`: it never will send
    /// the rest of its Request (RFC 5044 §7.1.2).
    pub(crate) fn on_closed(&mut self) -> ProbeOutcome {
        if self.done {
            return ProbeOutcome::Pending;
        }
        self.done = true;
        ProbeOutcome::Drop(format!(
            "peer closed before its MPA Request was complete ({} octets received)",
            self.raw.len()
        ))
    }

    /// The clock at `now`: the deadline's outcome, if it passed.
    pub(crate) fn on_time(&mut self, now: Instant) -> ProbeOutcome {
        if self.done || now < self.deadline {
            return ProbeOutcome::Pending;
        }
        self.done = true;
        ProbeOutcome::Drop(format!(
            "no complete MPA Request within the deadline ({} octets received)",
            self.raw.len()
        ))
    }

    fn outcome(&mut self, now: Instant) -> ProbeOutcome {
        match self.startup.poll_event() {
            Some(StartupEvent::Request(peer)) => {
                self.done = true;
                ProbeOutcome::Request {
                    peer,
                    raw: std::mem::take(&mut self.raw),
                }
            }
            Some(StartupEvent::Failed(e)) => {
                self.done = true;
                ProbeOutcome::Drop(format!("malformed MPA Request: {e}"))
            }
            Some(_) => {
                self.done = true;
                ProbeOutcome::Drop("unexpected startup event".into())
            }
            None => self.on_time(now),
        }
    }
}

/// A listener's address for its log lines.
pub(crate) fn listener_name(prefix: &str, local: Option<SocketAddr>) -> String {
    match local {
        Some(a) => format!("{prefix} {a}"),
        None => prefix.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::{MpaConfig as Cfg, Startup as S};
    use std::time::Duration;

    fn request() -> Vec<u8> {
        let mut init = S::initiator(
            Cfg {
                private_data: b"hello".to_vec(),
                ..Cfg::default()
            },
            Instant::now(),
        );
        let mut out = Vec::new();
        init.poll_transmit(&mut out);
        out
    }

    fn cfg() -> ListenConfig {
        ListenConfig {
            mpa_timeout: Duration::from_millis(100),
            max_startups: 2,
            ..ListenConfig::default()
        }
    }

    #[test]
    fn a_request_byte_by_byte_completes_with_every_octet() {
        let now = Instant::now();
        let mut p = MpaProbe::new(&cfg(), now);
        let req = request();
        for (i, b) in req.iter().enumerate() {
            match p.on_bytes(std::slice::from_ref(b), now) {
                ProbeOutcome::Pending => assert!(i + 1 < req.len(), "no request at the end"),
                ProbeOutcome::Request { peer, raw } => {
                    assert_eq!(i + 1, req.len());
                    assert_eq!(raw, req);
                    assert_eq!(peer.private_data, b"hello");
                }
                ProbeOutcome::Drop(why) => panic!("dropped: {why}"),
            }
        }
    }

    #[test]
    fn deadline_close_bound_and_malformed_are_drops() {
        let now = Instant::now();
        let c = cfg();
        let mut p = MpaProbe::new(&c, now);
        assert!(matches!(
            p.on_bytes(&request()[..10], now),
            ProbeOutcome::Pending
        ));
        assert!(matches!(
            p.on_time(now + Duration::from_millis(50)),
            ProbeOutcome::Pending
        ));
        match p.on_time(now + Duration::from_millis(100)) {
            ProbeOutcome::Drop(why) => assert!(why.contains("deadline (10 octets"), "{why}"),
            o => panic!("{o:?}"),
        }
        let mut p = MpaProbe::new(&c, now);
        match p.on_closed() {
            ProbeOutcome::Drop(why) => assert!(why.contains("peer closed"), "{why}"),
            o => panic!("{o:?}"),
        }
        let mut p = MpaProbe::new(&c, now);
        match p.on_bytes(&[0u8; MAX_REQUEST + READ_SLACK + 1], now) {
            ProbeOutcome::Drop(why) => assert!(why.contains("no MPA Request"), "{why}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(p.room(), 0);
        let mut p = MpaProbe::new(&c, now);
        match p.on_bytes(&[0x55u8; 40], now) {
            ProbeOutcome::Drop(why) => assert!(why.starts_with("malformed MPA Request"), "{why}"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn the_cap_counts_startups_in_progress() {
        let c = cfg();
        assert!(admit(0, &c).is_ok() && admit(1, &c).is_ok());
        assert!(admit(2, &c).unwrap_err().contains("max_startups"));
    }
}
