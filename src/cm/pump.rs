//! The per-connection pump step every driver runs, whatever moves the bytes: the kernel
//! transport's driver thread (`super::kernel`) and the DPDK dataplane's poll-mode worker. Both
//! feed received bytes into the sans-IO [`Connection`] and write what it produces their own way;
//! what happens between is here, once:
//!
//! 1. [`timers`]: the engine's timer (MPA startup deadline) fires when due.
//! 2. [`events`]: completions go to the CQs (`QpShared::reap`), each connection event is noted on
//!    the QP (state, TERMINATE cause) and passed to whoever waits for it (the connection
//!    manager's startup wait).
//! 3. [`close_wanted`]: whether the connection should close once its queued bytes are out.
//! 4. [`finish`], when the stream ended: the engine sees the end (pending work completes in
//!    error, RFC 5040 §5.5) and the last completions and events go out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::conn::{ConnEvent, Connection};
use crate::verbs::QpShared;

/// Fire the engine's timer if it is due.
#[inline]
pub(crate) fn timers(conn: &mut Connection, now: Instant) {
    if conn.poll_timeout().is_some_and(|t| t <= now) {
        conn.handle_timeout(now);
    }
}

/// Completions to the CQs, events noted on the QP and handed to `sink`. True if any
/// completion or event came.
pub(crate) fn events(
    sh: &QpShared,
    conn: &mut Connection,
    mut sink: impl FnMut(ConnEvent),
) -> bool {
    let mut any = sh.reap(conn);
    while let Some(ev) = conn.poll_event() {
        sh.note_event(&ev);
        sink(ev);
        any = true;
    }
    any
}

/// Whether the connection should close once its queued bytes are out: the engine is done
/// (TERMINATE sent or received, startup failed, the peer closed), the application asked to
/// disconnect, or no application handle is left (nobody can post or reap any more;
/// `driver_refs` is the number of references to `sh` the driver itself holds).
#[inline]
pub(crate) fn close_wanted(sh: &Arc<QpShared>, conn: &Connection, driver_refs: usize) -> bool {
    conn.should_close()
        || sh.disconnect.load(Ordering::Acquire)
        || Arc::strong_count(sh) <= driver_refs
}

/// The stream ended: the engine sees the end of stream, then the last completions and events.
pub(crate) fn finish(sh: &QpShared, conn: &mut Connection, sink: impl FnMut(ConnEvent)) {
    conn.on_eof();
    events(sh, conn, sink);
}
