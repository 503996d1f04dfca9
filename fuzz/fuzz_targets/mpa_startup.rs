//! MPA startup (RFC 5044 §7, RFC 6581) as responder and as initiator on arbitrary bytes, each
//! also in RFC 5044 App. C permissive mode (Rev 0 peers; the initiator then sends rev 1).
#![no_main]
use std::time::Instant;

use dpwarp::mpa::{MpaConfig, Startup, StartupEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    for (initiator, permissive) in [(false, false), (true, false), (false, true), (true, true)] {
        let cfg = if permissive {
            MpaConfig {
                revision: 1,
                enhanced: false,
                rev0_permissive: true,
                ..MpaConfig::default()
            }
        } else {
            MpaConfig::default()
        };
        let mut s = if initiator {
            Startup::initiator(cfg, now)
        } else {
            Startup::responder(cfg, now)
        };
        let mut out = Vec::new();
        s.poll_transmit(&mut out);
        let mut rest = data;
        while !rest.is_empty() {
            let used = s.on_bytes(rest, now);
            assert!(used <= rest.len());
            while let Some(ev) = s.poll_event() {
                if let StartupEvent::Request(_) = ev {
                    s.accept(None);
                }
            }
            s.poll_transmit(&mut out);
            if used == 0 {
                break;
            }
            rest = &rest[used..];
        }
        s.on_eof();
        while s.poll_event().is_some() {}
    }
});
