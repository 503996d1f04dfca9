//! Credit management (draft-ietf-nfsv4-rpcrdma-01 §3.3, RFC 8166 §3.3.1).
//!
//! A credit is one posted receive buffer at the server. The server owns a budget of receive
//! buffers ([`CreditPool`]) shared by all its connections; each connection holds a slice of it
//! ([`ConnCredits`]) and posts that many receive buffers.
//!
//! Rules, and why they are safe:
//! - A connection holds `bound + 1` buffers: `bound` for calls (the largest grant that may still
//!   be in force at the client) and one for an RDMA_DONE, which consumes a buffer at the server
//!   without ever being answered (draft §3.8). The server re-posts every buffer as soon as the
//!   message in it is taken (before answering), so a DONE's credit is replenished at once.
//! - The grant is never 0: a new connection gets 1 (plus the DONE slot) before its first reply,
//!   as the client may always send one call (RFC 8166 §3.3.1). If the pool cannot give a new
//!   connection those 2 buffers, the connection is refused at accept time.
//! - Growing: buffers are taken from the pool and posted before the larger grant is announced.
//! - Shrinking: the smaller grant is announced at once, but the buffers go back to the pool only
//!   after `bound` replies carrying it were sent. Replies leave in call order, so by then every
//!   call sent under the old grant was answered, and the client (which only sends while its
//!   outstanding calls are below the latest grant) cannot have more than the new grant in flight.
//! - A client that sends more than its grant overruns its connection's posted receives: the RNIC
//!   answers with a TERMINATE (DDP untagged buffer error, RFC 5041 §7.2) and that connection
//!   closes. Other connections' buffers are their own, so they are untouched.
//! - Growth never takes the last 2 free buffers, so a new connection can be admitted at once;
//!   the others shrink towards the new fair share at their next replies.
//! - Load: a connection's target is `min(requested, max_per_conn)` while the pool covers what
//!   every connection asks for (each one's `min(requested, max_per_conn)` plus its DONE slot):
//!   many quiet connections asking for 1 leave the busy ones their full request. Only when the
//!   requests add up to more than the pool is the target also capped at the fair share, the
//!   pool divided by the number of connections. More connections shrink everyone's target;
//!   departures let the others grow at their next reply.
//! - Several connections arriving together: the reserve admits the first; the next ones wait
//!   a bounded time ([`CreditPool::join_within`]) and count in the fair share while waiting, so
//!   the connections already in shrink towards a share that leaves room for them, and return
//!   the buffers once their replies show the old grant is over. Growth leaves a waiter's 2
//!   buffers alone. Only when that does not free 2 buffers in time (e.g. the other clients are
//!   idle and send no calls to answer) is the connection refused.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Buffers growth never takes, so that a new connection can always be admitted while the pool
/// is shared by connections that have not shrunk yet.
const JOIN_RESERVE: u32 = 2;

#[derive(Debug)]
struct PoolState {
    total: u32,
    reserved: u32,
    conns: u32,
    /// Connections waiting in [`CreditPool::join_within`] for buffers to come back.
    waiting: u32,
    max_per_conn: u32,
    /// Buffers every connection would hold with its whole request: the sum of
    /// `min(requested, max_per_conn) + 1`.
    demand: u64,
}

/// Buffers a connection asking for `requested` credits would hold with its whole request (its
/// part of the pool's demand): the grant it may get, plus the DONE slot.
fn want(requested: u32, max_per_conn: u32) -> u64 {
    u64::from(requested.min(max_per_conn)) + 1
}

/// The server-wide budget of receive buffers.
#[derive(Debug, Clone)]
pub struct CreditPool {
    inner: Arc<(Mutex<PoolState>, Condvar)>,
}

impl CreditPool {
    /// A pool of `total` buffers; no connection is granted more than `max_per_conn` credits.
    pub fn new(total: u32, max_per_conn: u32) -> Self {
        CreditPool {
            inner: Arc::new((
                Mutex::new(PoolState {
                    total,
                    reserved: 0,
                    conns: 0,
                    waiting: 0,
                    max_per_conn: max_per_conn.max(1),
                    demand: 0,
                }),
                Condvar::new(),
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give `n` buffers back and wake the connections waiting to join; a leaving connection
    /// (its last request given) also takes its part out of the demand.
    fn give_back(&self, n: u32, leaving: Option<u32>) {
        let mut s = self.lock();
        s.reserved = s.reserved.saturating_sub(n);
        if let Some(requested) = leaving {
            s.conns = s.conns.saturating_sub(1);
            s.demand = s.demand.saturating_sub(want(requested, s.max_per_conn));
        }
        drop(s);
        self.inner.1.notify_all();
    }

    /// Buffers currently held by connections.
    pub fn reserved(&self) -> u32 {
        self.lock().reserved
    }

    /// Pool size.
    pub fn total(&self) -> u32 {
        self.lock().total
    }

    /// Connections holding credits.
    pub fn connections(&self) -> u32 {
        self.lock().conns
    }

    /// Admit a connection with grant 1 and its DONE slot, or `None` if the pool is exhausted.
    pub fn join(&self) -> Option<ConnCredits> {
        self.join_within(Duration::ZERO)
    }

    /// Admit a connection with grant 1 and its DONE slot, waiting up to `wait` for other
    /// connections to return buffers (they shrink towards a fair share that counts this one);
    /// `None` if the pool still cannot give 2 buffers by then.
    pub fn join_within(&self, wait: Duration) -> Option<ConnCredits> {
        let deadline = Instant::now() + wait;
        let mut s = self.lock();
        let mut counted = false;
        let admitted = loop {
            if s.total - s.reserved >= 2 {
                break true;
            }
            let now = Instant::now();
            if now >= deadline || s.conns == 0 {
                break false;
            }
            if !counted {
                s.waiting += 1;
                counted = true;
            }
            s = self
                .inner
                .1
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        if counted {
            s.waiting -= 1;
        }
        if !admitted {
            return None;
        }
        s.reserved += 2;
        s.conns += 1;
        s.demand += 2;
        Some(ConnCredits {
            pool: self.clone(),
            bound: 1,
            announced: 1,
            requested: 1,
            shrink_replies: 0,
            shrink_from: 0,
            retire: 0,
        })
    }
}

/// What to do before sending a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantStep {
    /// Post this many new receive buffers before sending the reply.
    pub post: u32,
    /// The credit value to put in the reply.
    pub credits: u32,
}

/// One connection's share of the pool.
#[derive(Debug)]
pub struct ConnCredits {
    pool: CreditPool,
    /// Largest grant that may still be in force at the client; `bound + 1` buffers are held.
    bound: u32,
    /// Grant carried by replies now.
    announced: u32,
    /// The client's latest request.
    requested: u32,
    /// Replies sent with `announced < bound` since the last decrease, to calls received after
    /// the one whose reply announced it.
    shrink_replies: u32,
    /// Arrival number of the call whose reply first carried the decreased grant.
    shrink_from: u64,
    /// Buffers given back to the pool but still posted: do not re-post this many.
    retire: u32,
}

impl ConnCredits {
    /// Record the credit value a call carried (the client's request).
    pub fn on_request(&mut self, requested: u32) {
        let requested = requested.max(1);
        if requested == self.requested {
            return;
        }
        let mut s = self.pool.lock();
        let (old, new) = (
            want(self.requested, s.max_per_conn),
            want(requested, s.max_per_conn),
        );
        s.demand = (s.demand + new).saturating_sub(old);
        drop(s);
        self.requested = requested;
    }

    /// The grant now in force for replies.
    pub fn grant(&self) -> u32 {
        self.announced
    }

    /// Buffers this connection holds (calls + DONE slot).
    pub fn held(&self) -> u32 {
        self.bound + 1
    }

    /// A message was taken from a receive buffer: re-post it (true) or let it go (false)?
    pub fn repost(&mut self) -> bool {
        if self.retire > 0 {
            self.retire -= 1;
            false
        } else {
            true
        }
    }

    fn target(&self) -> u32 {
        let s = self.pool.lock();
        let asked = self.requested.min(s.max_per_conn).max(1);
        // Every connection's whole request fits (a waiter wants its 2): no need to share.
        if s.demand + 2 * u64::from(s.waiting) <= u64::from(s.total) {
            return asked;
        }
        let fair = (s.total / (s.conns + s.waiting).max(1))
            .saturating_sub(1)
            .max(1);
        asked.min(fair)
    }

    /// Decide the grant for the next reply (call once per reply sent); `call` is the arrival
    /// number of the message it answers (counted per connection from 1, in receive order).
    ///
    /// Shrinking: the buffers beyond the new grant go back once `bound` replies have answered
    /// calls that arrived after the call whose reply announced it. Messages arrive in the
    /// order they were sent, and the client had at most `bound` calls in flight before it saw
    /// that reply, so by then every call sent under the old grant has arrived. (Replies may
    /// leave out of order: a call parked while its read chunks are pulled is answered after
    /// later ones, so a reply to an older call does not count.)
    pub fn next_reply(&mut self, call: u64) -> GrantStep {
        let target = self.target();
        let mut post = 0;
        if target > self.bound {
            let mut s = self.pool.lock();
            // Keep room for one more connection to join (grant 1 + DONE slot), and for those
            // already waiting.
            let keep = JOIN_RESERVE + 2 * s.waiting;
            let free = (s.total - s.reserved).saturating_sub(keep);
            let got = (target - self.bound).min(free);
            s.reserved += got;
            drop(s);
            self.bound += got;
            post = got;
            self.announced = self.bound;
            self.shrink_replies = 0;
        } else if target < self.announced {
            self.announced = target;
            self.shrink_replies = 0;
            self.shrink_from = call;
            let credits = self.announced;
            return GrantStep { post, credits };
        } else if target > self.announced {
            // Within the buffers already held: safe to raise at once.
            self.announced = target;
        }
        let credits = self.announced;
        if self.announced < self.bound && call > self.shrink_from {
            self.shrink_replies += 1;
            if self.shrink_replies >= self.bound {
                let give = self.bound - self.announced;
                self.bound = self.announced;
                self.retire += give;
                self.shrink_replies = 0;
                self.pool.give_back(give, None);
            }
        }
        GrantStep { post, credits }
    }
}

impl Drop for ConnCredits {
    fn drop(&mut self) {
        self.pool.give_back(self.bound + 1, Some(self.requested));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_request_and_fair_share() {
        let pool = CreditPool::new(68, 32);
        let mut a = pool.join().unwrap();
        a.on_request(64);
        let s = a.next_reply(1);
        assert_eq!(
            s,
            GrantStep {
                post: 31,
                credits: 32
            }
        );
        assert_eq!(pool.reserved(), 33);
        let mut b = pool.join().unwrap();
        b.on_request(64);
        // Fair share is now 68/2 - 1 = 33, capped at 32; 68-35 = 33 free, 2 kept in reserve.
        let s = b.next_reply(1);
        assert_eq!(s.credits, 32);
        assert_eq!(pool.reserved(), 66);
        let c = pool.join().expect("the reserve admits one more");
        assert!(pool.join().is_none(), "exhausted pool refuses a connection");
        drop(c);
        assert_eq!(pool.reserved(), 66);
    }

    /// Quiet connections asking for 1 leave a busy one its whole request while the pool
    /// covers every request; once the requests exceed the pool, the fair share caps them.
    #[test]
    fn quiet_connections_leave_a_busy_one_its_request_until_the_pool_is_oversubscribed() {
        let pool = CreditPool::new(40, 32);
        let quiet: Vec<_> = (0..10).map(|_| pool.join().unwrap()).collect();
        let mut busy = pool.join().unwrap();
        busy.on_request(16);
        // Demand 10 x 2 + 17 = 37 of 40: no sharing (the fair share would be 40/11 - 1 = 2).
        assert_eq!(busy.next_reply(1).credits, 16);
        assert_eq!(pool.reserved(), 20 + 17);
        let mut other = pool.join().unwrap();
        other.on_request(16);
        // Demand 37 + 17 = 54 > 40: both are held to the fair share, 40/12 - 1 = 2; the
        // newcomer stays at 1 until the busy one's buffers come back (1 free, 2 kept).
        assert_eq!(other.next_reply(1).credits, 1);
        assert_eq!(busy.next_reply(2).credits, 2, "shrinks at its next reply");
        drop(other);
        // Demand back to 37: the busy one may have its request again.
        assert_eq!(busy.next_reply(3).credits, 16);
        drop(quiet);
    }

    #[test]
    fn shrink_waits_for_bound_replies_and_never_hits_zero() {
        let pool = CreditPool::new(100, 16);
        let mut a = pool.join().unwrap();
        a.on_request(16);
        assert_eq!(a.next_reply(1).credits, 16);
        let held = pool.reserved();
        a.on_request(0);
        // The reply to call 2 announces 1; the next 15 replies to later calls keep the buffers.
        assert_eq!(a.next_reply(2).credits, 1);
        for i in 1..16 {
            assert_eq!(a.next_reply(2 + i).credits, 1);
            assert_eq!(
                pool.reserved(),
                held,
                "reply {i}: buffers kept while old grant may live"
            );
            assert!(a.repost());
        }
        assert_eq!(a.next_reply(18).credits, 1);
        assert_eq!(pool.reserved(), 2);
        for _ in 0..15 {
            assert!(!a.repost());
        }
        assert!(a.repost());
        drop(a);
        assert_eq!(pool.reserved(), 0);
        assert_eq!(pool.connections(), 0);
    }

    #[test]
    fn shrink_counts_only_replies_to_later_calls() {
        let pool = CreditPool::new(100, 8);
        let mut a = pool.join().unwrap();
        a.on_request(8);
        assert_eq!(a.next_reply(1).credits, 8);
        let held = pool.reserved();
        a.on_request(1);
        // Call 10's reply announces 1; calls 2..=9 were parked (read chunks) and are answered
        // now, out of order: the client may still have calls under the old grant on the way,
        // so none of these replies counts.
        assert_eq!(a.next_reply(10).credits, 1);
        for call in 2..10 {
            assert_eq!(a.next_reply(call).credits, 1);
        }
        assert_eq!(
            pool.reserved(),
            held,
            "buffers kept: old-grant calls may be in flight"
        );
        for call in 11..19 {
            assert_eq!(a.next_reply(call).credits, 1);
        }
        assert_eq!(
            pool.reserved(),
            2,
            "eight later calls answered: the grant of 8 is over"
        );
    }

    #[test]
    fn a_waiting_join_is_admitted_once_others_shrink() {
        // 40 buffers: a takes 33, b 5, c the reserve; d must wait for a to shrink.
        let pool = CreditPool::new(40, 32);
        let mut a = pool.join().unwrap();
        a.on_request(32);
        assert_eq!(a.next_reply(1).credits, 32);
        let mut b = pool.join().unwrap();
        b.on_request(32);
        b.next_reply(1);
        let _c = pool.join().unwrap();
        assert_eq!(pool.reserved(), 40);
        assert!(pool.join().is_none(), "no buffer free and no wait");
        let p = pool.clone();
        let d = std::thread::spawn(move || p.join_within(Duration::from_secs(30)));
        while pool.lock().waiting == 0 {
            std::thread::yield_now();
        }
        // The waiter counts: fair share 40/4 - 1 = 9, and growth leaves its 2 buffers alone.
        assert_eq!(a.next_reply(2).credits, 9);
        assert_eq!(b.next_reply(2).post, 0, "growth keeps the waiter's buffers");
        for call in 3..=34 {
            a.next_reply(call);
        }
        let d = d
            .join()
            .unwrap()
            .expect("admitted once a returned its buffers");
        assert_eq!(d.held(), 2);
        assert_eq!(pool.connections(), 4);
        assert_eq!(pool.lock().waiting, 0);
    }

    #[test]
    fn a_waiting_join_gives_up_when_nothing_comes_back() {
        let pool = CreditPool::new(4, 4);
        let _a = pool.join().unwrap();
        let _b = pool.join().unwrap();
        assert!(pool.join_within(Duration::from_millis(20)).is_none());
        assert_eq!(pool.lock().waiting, 0, "the waiter is no longer counted");
    }
}
