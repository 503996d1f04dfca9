//! Credit invariants under load (draft §3.3): never above the grant, no deadlock at a grant of 1,
//! RDMA_DONE consuming a credit, grants shrinking as connections share the pool, and a client
//! that exceeds its grant losing only its own connection.

use dpwarp::verbs::smallvec;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam};
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient, ReplyPath};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig};
use dpwarp::transport::memlink::{self, LinkFaults};
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, QpTerminate, RecvWr, SendWr};
use dpwarp::wire::oncrpc::{Auth, CallRepr};
use dpwarp::wire::rpcrdma::{Body as RdmaBody, Chunks, HeaderRepr, Segment};
use dpwarp::wire::terminate::TermCause;
use dpwarp::wire::xdr::XdrWriter;

const SLOW_PROC: u32 = 50;

fn server(cfg: ServerConfig) -> (RdmaServer, Arc<BlockStore>) {
    let store = Arc::new(BlockStore::memory(1 << 20));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    reg.register(BLOCK_PROG, BLOCK_VERS, SLOW_PROC, |_, _| {
        thread::sleep(Duration::from_millis(100));
        Ok(Body::new())
    });
    (RdmaServer::new(reg, cfg), store)
}

fn client(s: &RdmaServer, cfg: ClientConfig) -> RdmaClient {
    let (ce, se) = memlink::pair(LinkFaults::default());
    let srv = s.clone();
    let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
    let c = RdmaClient::connect_transport(Box::new(ce), cfg).unwrap();
    h.join().unwrap().unwrap();
    c
}

/// Pipeline `n` READs of 64 bytes (inline) with as many in flight as the grant allows, checking
/// every reply's data and the in-flight count against the grant before each submit.
fn load(c: &mut RdmaClient, store: &BlockStore, n: usize, seed: u64) {
    let mut sent = 0usize;
    let mut got = 0usize;
    let mut expect = std::collections::HashMap::new();
    while got < n {
        while sent < n && c.in_flight() < c.grant().min(c.requested()) {
            let off = (seed * 4096 + (sent as u64 % 64) * 64) % ((1 << 20) - 64);
            let x = c
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_READ,
                    block::read_args(off, 64),
                    &CallOpts::default(),
                )
                .unwrap();
            assert!(
                c.in_flight() <= c.grant().max(1),
                "in flight above the grant"
            );
            expect.insert(x, off);
            sent += 1;
        }
        let (x, r) = c.wait_any().unwrap();
        let rep = r.unwrap();
        assert!(rep.credits >= 1, "a zero grant");
        let d = block::decode_read(&mut rep.results().unwrap())
            .unwrap()
            .unwrap();
        let off = expect.remove(&x).unwrap();
        assert_eq!(d, store.read(off, 64).unwrap());
        got += 1;
    }
    assert_eq!(c.stats.over_grant, 0);
}

#[test]
fn grant_follows_request_and_is_never_exceeded() {
    let (s, store) = server(ServerConfig::default());
    store.write(0, &vec![7u8; 1 << 20]).unwrap();
    let mut c = client(
        &s,
        ClientConfig {
            credits: 16,
            ..ClientConfig::default()
        },
    );
    load(&mut c, &store, 500, 1);
    assert_eq!(c.grant(), 16);
    assert!(c.stats.max_in_flight <= 16);
    assert!(c.stats.max_in_flight > 1, "pipelining happened");
}

#[test]
fn connections_share_the_pool_under_load() {
    // 40 buffers for 4 clients asking 32 each: fair share 40/4 - 1 = 9.
    let cfg = ServerConfig {
        credit_pool: 40,
        max_credits: 32,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg);
    for i in 0..(1 << 20) / 4096 {
        store.write(i * 4096, &[(i % 251) as u8; 4096]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watch = {
        let s = s.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                assert!(
                    s.pool().reserved() <= s.pool().total(),
                    "pool overcommitted"
                );
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut hs = Vec::new();
    for i in 0..4u64 {
        let mut c = client(
            &s,
            ClientConfig {
                credits: 32,
                ..ClientConfig::default()
            },
        );
        let store = store.clone();
        hs.push(thread::spawn(move || {
            load(&mut c, &store, 400, i);
            c.grant()
        }));
    }
    let grants: Vec<u32> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Release);
    watch.join().unwrap();
    for g in grants {
        assert!((1..=32).contains(&g), "grant {g}");
    }
}

#[test]
fn grant_shrinks_when_others_join_then_grows_back() {
    let cfg = ServerConfig {
        credit_pool: 36,
        max_credits: 32,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg);
    let mut a = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    load(&mut a, &store, 100, 0);
    assert_eq!(a.grant(), 32);
    let mut b = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    // With two connections the fair share is 36/2 - 1 = 17.
    load(&mut a, &store, 100, 0);
    assert_eq!(a.grant(), 17);
    load(&mut b, &store, 100, 0);
    assert!(b.grant() <= 17 && b.grant() >= 1);
    drop(b);
    let t = Instant::now();
    while s.pool().connections() != 1 {
        assert!(t.elapsed() < Duration::from_secs(5));
        thread::sleep(Duration::from_millis(10));
    }
    load(&mut a, &store, 200, 0);
    assert_eq!(a.grant(), 32, "grows back once alone");
}

#[test]
fn grant_of_one_with_dones_does_not_deadlock() {
    let cfg = ServerConfig {
        max_credits: 1,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg);
    store.write(0, &vec![3u8; 30_000]).unwrap();
    let mut c = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    // Every reply comes as a read chunk, so every call is followed by an RDMA_DONE.
    for i in 0..100 {
        let x = c
            .submit(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                block::read_args(i, 20_000),
                &CallOpts::default(),
            )
            .unwrap();
        let rep = c.wait(x).unwrap();
        assert_eq!(rep.path, ReplyPath::ReadChunk);
        assert_eq!(rep.credits, 1);
        let d = block::decode_read(&mut rep.results().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(d, store.read(i, 20_000).unwrap());
    }
    assert_eq!(c.stats.dones, 100);
    assert_eq!(c.stats.over_grant, 0);
    assert!(c.stats.max_in_flight <= 1);
}

#[test]
fn client_exceeding_its_grant_is_terminated_alone() {
    let (s, _store) = server(ServerConfig::default());
    let mut good = client(&s, ClientConfig::default());

    // A raw verbs client that ignores credits: 10 calls to a slow procedure at once, while the
    // server holds 2 receive buffers for it (grant 1 + the DONE slot). "At once": posted
    // before the connection is up, so they leave in one burst when it is, and reach the
    // server in one read. (Posted one by one on a live connection, they could trickle in
    // slower than the server re-posts its buffers, which it does as it takes each message:
    // then nothing overran, and the test failed about one run in fifteen.)
    let raw = RawClient::connect_after(&s, 16, 0, burst_beyond_the_grant);
    assert!(
        raw.qp.wait_closed(Duration::from_secs(5)),
        "over-grant connection not closed"
    );
    // DDP untagged buffer error (RFC 5041 §7.2): no buffer, or an MSN beyond the posted ones,
    // depending on how the burst was segmented.
    let cause = raw.qp.terminate_cause();
    assert!(
        cause
            == Some(QpTerminate::Received(
                TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER
            ))
            || cause
                == Some(QpTerminate::Received(
                    TermCause::DDP_UNTAGGED_INVALID_MSN_RANGE
                )),
        "{cause:?}"
    );
    // The well-behaved connection is unaffected.
    let rep = good
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_GETATTR,
            Body::new(),
            &CallOpts::default(),
        )
        .unwrap();
    assert!(block::decode_getattr(&mut rep.results().unwrap())
        .unwrap()
        .is_ok());
    let t = Instant::now();
    while s.pool().connections() != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "terminated connection kept credits"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Post 10 calls to the slow procedure, ignoring credits (for a QP not connected yet: the
/// posts wait in its send queue and leave together once it is).
fn burst_beyond_the_grant(qp: &Qp, sbuf: &dpwarp::verbs::Mr) {
    for i in 0..10u32 {
        let mut w = XdrWriter::new();
        HeaderRepr {
            xid: i,
            vers: 1,
            credits: 32,
            body: RdmaBody::Msg(Chunks::default()),
        }
        .emit(&mut w);
        CallRepr {
            xid: i,
            prog: BLOCK_PROG,
            vers: BLOCK_VERS,
            proc_: SLOW_PROC,
            cred: Auth::None,
            verf: Auth::None,
        }
        .emit(&mut w);
        sbuf.write_at(i as usize * 2048, w.as_slice());
        qp.post_send(SendWr {
            wr_id: u64::from(i),
            opcode: Opcode::Send,
            sg_list: smallvec![sge(sbuf, i as usize * 2048, w.len())],
            signaled: true,
        })
        .expect("post a call before connecting");
    }
}

#[test]
fn pipelined_read_chunk_replies_then_a_grant_drop_do_not_deadlock() {
    // Many replies as read chunks in flight at once (each wants a DONE), then the server grants
    // 1: the next calls must still go out.
    let cfg = ServerConfig {
        credit_pool: 40,
        max_credits: 32,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg);
    store.write(0, &vec![9u8; 40_000]).unwrap();
    let mut c = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    let mut xs = Vec::new();
    for _ in 0..32 {
        xs.push(
            c.submit(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                block::read_args(0, 20_000),
                &CallOpts::default(),
            )
            .unwrap(),
        );
    }
    for x in xs {
        assert_eq!(c.wait(x).unwrap().path, ReplyPath::ReadChunk);
    }
    // Two more connections take the pool: this one's fair share drops to 40/3 - 1 = 12.
    let _b = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    let _d = client(
        &s,
        ClientConfig {
            credits: 32,
            ..ClientConfig::default()
        },
    );
    for i in 0..50u64 {
        let rep = c
            .call(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                block::read_args(i, 20_000),
                &CallOpts::default(),
            )
            .unwrap();
        assert_eq!(
            block::decode_read(&mut rep.results().unwrap())
                .unwrap()
                .unwrap(),
            store.read(i, 20_000).unwrap()
        );
    }
    assert!(c.grant() <= 12);
    assert_eq!(c.stats.over_grant, 0);
}

/// A raw RPC-over-RDMA client over the in-memory link: `slots` receive buffers of [`RB`]
/// octets, a sink region of `sink_len` for write chunks, and READ calls with a write chunk of
/// `segs` segments of `seg` octets at a given sink offset.
struct RawClient {
    qp: Qp,
    cq: Cq,
    rbuf: dpwarp::verbs::Mr,
    sbuf: dpwarp::verbs::Mr,
    sink: dpwarp::verbs::Mr,
}

/// A reply echoes the write list (16 octets a segment).
const RB: usize = 2048;

impl RawClient {
    fn connect(s: &RdmaServer, slots: usize, sink_len: usize) -> RawClient {
        RawClient::connect_after(s, slots, sink_len, |_, _| {})
    }

    /// [`RawClient::connect`], with `before` run on the QP and its send buffer once its
    /// receives are posted and before it connects (work posted there leaves as soon as the
    /// connection is up).
    fn connect_after(
        s: &RdmaServer,
        slots: usize,
        sink_len: usize,
        before: impl FnOnce(&Qp, &dpwarp::verbs::Mr),
    ) -> RawClient {
        let (ce, se) = memlink::pair(LinkFaults::default());
        let srv = s.clone();
        let h = thread::spawn(move || srv.serve_transport(Box::new(se)));
        let dev = Device::open();
        let pd = dev.alloc_pd();
        let cq = Cq::new(4096);
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        let rbuf = pd.reg_mr(RB * slots, Access::LOCAL_WRITE);
        for i in 0..slots {
            qp.post_recv(RecvWr {
                wr_id: 1000 + i as u64,
                sg_list: smallvec![sge(&rbuf, i * RB, RB)],
            })
            .unwrap();
        }
        let sink = pd.reg_mr(sink_len, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let sbuf = pd.reg_mr(2048 * slots, Access::LOCAL_WRITE);
        before(&qp, &sbuf);
        cm::connect(Box::new(ce), &qp, &ConnParam::default()).unwrap();
        h.join().unwrap().unwrap();
        RawClient {
            qp,
            cq,
            rbuf,
            sbuf,
            sink,
        }
    }

    /// READ `segs * seg` octets from offset 0 of the store into the sink at `at`, through
    /// send slot `slot`.
    fn read(&self, slot: usize, xid: u32, credits: u32, at: usize, segs: usize, seg: usize) {
        let base = self.sink.addr() + at as u64;
        let seg_list: Vec<Segment> = (0..segs)
            .map(|k| Segment {
                handle: self.sink.stag(),
                length: seg as u32,
                offset: base + (k * seg) as u64,
            })
            .collect();
        let mut w = XdrWriter::new();
        HeaderRepr {
            xid,
            vers: 1,
            credits,
            body: RdmaBody::Msg(Chunks {
                writes: smallvec::smallvec![seg_list.into()],
                ..Chunks::default()
            }),
        }
        .emit(&mut w);
        CallRepr {
            xid,
            prog: BLOCK_PROG,
            vers: BLOCK_VERS,
            proc_: block::PROC_READ,
            cred: Auth::None,
            verf: Auth::None,
        }
        .emit(&mut w);
        w.put_u64(0);
        w.put_u32((segs * seg) as u32);
        self.sbuf.write_at(slot * 2048, w.as_slice());
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.sbuf, slot * 2048, w.len())],
                signaled: false,
            })
            .unwrap();
    }

    /// The next reply's transport header (it must parse), and the receive slot it used, which
    /// is posted again.
    fn next_reply(&self) -> HeaderRepr {
        loop {
            let wc = self.cq.wait(Duration::from_secs(10)).expect("a reply");
            assert_eq!(wc.status, dpwarp::verbs::WcStatus::Success, "{wc:?}");
            if wc.opcode != dpwarp::verbs::WcOpcode::Recv {
                continue;
            }
            let off = (wc.wr_id - 1000) as usize * RB;
            let mut msg = vec![0u8; wc.byte_len as usize];
            self.rbuf.read_at(off, &mut msg);
            let (h, _) = HeaderRepr::parse(&msg).expect("a reply header the client can parse");
            self.qp
                .post_recv(RecvWr {
                    wr_id: wc.wr_id,
                    sg_list: smallvec![sge(&self.rbuf, off, RB)],
                })
                .unwrap();
            return h;
        }
    }
}

/// A client within its grant whose calls each carry a write chunk of 32 segments (one RDMA
/// Write each, plus the reply's Send; the reply, which echoes the list, still fits inline): a
/// burst of such READs at a full grant of 64 asks for more work requests (64 x 33) than the
/// server's send queue takes at once. The server must pace itself (take the next call once the
/// queue has drained), not fail the connection: every READ is answered, with the data in every
/// segment.
#[test]
fn a_full_grant_of_many_segment_reads_is_paced_not_refused() {
    const GRANT: u32 = 64;
    const SEGS: usize = 32;
    const SEG: usize = 1024;
    let cfg = ServerConfig {
        credit_pool: 4 * GRANT,
        max_credits: GRANT,
        ..ServerConfig::default()
    };
    let (s, store) = server(cfg);
    let data: Vec<u8> = (0..SEGS * SEG).map(|i| (i % 253) as u8).collect();
    store.write(0, &data).unwrap();
    let n = GRANT as usize;
    let c = RawClient::connect(&s, n + 1, (n + 1) * SEGS * SEG);
    // The first call (grant 1) raises the grant to GRANT.
    c.read(n, 1, GRANT, n * SEGS * SEG, SEGS, SEG);
    let h = c.next_reply();
    assert!(h.credits >= GRANT, "grant {}", h.credits);
    // Then the whole grant at once.
    for i in 0..n {
        c.read(i, 100 + i as u32, GRANT, i * SEGS * SEG, SEGS, SEG);
    }
    for _ in 0..n {
        let h = c.next_reply();
        assert!(
            matches!(h.body, RdmaBody::Msg(_)),
            "xid {}: {:?}",
            h.xid,
            h.body
        );
    }
    assert!(!c.qp.is_closed(), "the connection survived the burst");
    let got = c.sink.to_vec();
    for i in 0..n {
        assert!(
            got[i * SEGS * SEG..(i + 1) * SEGS * SEG] == data[..],
            "call {i}: data in every segment"
        );
    }
}

/// A READ whose write list holds all 64 segments a header may carry, with a reply too long for
/// the inline threshold and no reply chunk: the draft's answer, a position-zero read chunk,
/// would make a reply header of 65 segments (which a client's parser bounded like ours
/// refuses). The server answers ERR_CHUNK instead (RFC 8166 §4.5.3), in a header that parses.
#[test]
fn a_long_reply_that_would_exceed_the_header_segment_limit_is_err_chunk() {
    const SEGS: usize = dpwarp::wire::rpcrdma::MAX_SEGMENTS;
    let (s, _store) = server(ServerConfig::default());
    let c = RawClient::connect(&s, 2, SEGS * 64);
    c.read(0, 7, 1, 0, SEGS, 64);
    let h = c.next_reply();
    assert_eq!(h.xid, 7);
    assert!(matches!(h.body, RdmaBody::ErrChunk), "{:?}", h.body);
    assert!(!c.qp.is_closed(), "an ERR_CHUNK leaves the connection up");
}
