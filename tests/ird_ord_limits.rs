//! IRD/ORD are hard limits (RFC 6581 §9.1, RFC 5040 §6.1 and §6.5): never more RDMA Read
//! Requests outstanding than the peer's IRD allows, and an inbound Read beyond our IRD answered
//! by the RFC TERMINATE.
//!
//! - `dpwarp rping -s` (kernel TCP) against a hand-written initiator (the crate's own MPA wire
//!   types over a std `TcpStream`) that offers IRD = ORD = 0: the server must never send an RDMA
//!   Read Request on that stream.
//! - The verbs/cm API over kernel TCP: a Read posted on a connection whose negotiated ORD is 0
//!   fails locally with `PostError::ZeroOrd`, before and after establishment, and nothing reaches
//!   the wire; with ORD 2 five Reads complete and at most two are ever outstanding.
//! - The QP engine: ORD 0 refuses Reads at post time, IRD 0 answers any Read Request with
//!   TERMINATE (DDP, untagged, code 2 "no buffer"), IRD n serves n and refuses n + 1.

use dpwarp::verbs::smallvec;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam, Listener};
use dpwarp::mpa::{Deframer, Framer};
use dpwarp::rdma::{
    Access, MemoryTable, Opcode, PostError, QpConfig, QpEngine, QpEvent, RecvWr, SendWr, Sge,
    WcOpcode, WcStatus,
};
use dpwarp::verbs::{Cq, Device, Qp, QpInitAttr};
use dpwarp::wire::ddp::{BufferRepr, HeaderRepr, Segment, QN_READ_REQUEST, QN_SEND};
use dpwarp::wire::mpa::{EnhancedData, Frame, FrameKind, FrameRepr, HEADER_LEN};
use dpwarp::wire::rdmap::{control_opcode, RdmapOpcode, ReadRequestRepr};
use dpwarp::wire::terminate::TermCause;

mod common;
use common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

struct Server {
    child: Child,
    err: PathBuf,
}

impl Server {
    fn rping(port: u16, extra: &[&str]) -> Server {
        let err =
            std::env::temp_dir().join(format!("dpwarp-ird-ord-{}-{port}.err", std::process::id()));
        let child = Command::new(BIN)
            .args(["rping", "-s", "--transport", "kernel", "-a", "127.0.0.1"])
            .args(["-p", &port.to_string()])
            .args(extra)
            .env_remove("DPWARP_TRANSPORT")
            .env_remove("DPWARP_CONFIG")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(File::create(&err).unwrap()))
            .spawn()
            .expect("run dpwarp rping -s");
        Server { child, err }
    }

    /// Wait for the process to exit (kill it and fail after `limit`); returns its stderr.
    fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let err = std::fs::read_to_string(&self.err).unwrap_or_default();
                return (st, err);
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = std::fs::read_to_string(&self.err).unwrap_or_default();
                panic!("rping server still running after {limit:?}; stderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.err);
    }
}

fn connect(port: u16) -> TcpStream {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(e) if Instant::now() < end => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("connect to rping server on {addr}: {e}"),
        }
    }
}

/// Read one MPA Reply frame (header, then PD_Length octets).
fn read_reply(s: &mut TcpStream) -> FrameRepr {
    let mut buf = vec![0u8; HEADER_LEN];
    s.read_exact(&mut buf).expect("MPA Reply header");
    let pd = usize::from(Frame::new_unchecked(&buf[..]).pd_length());
    buf.resize(HEADER_LEN + pd, 0);
    s.read_exact(&mut buf[HEADER_LEN..])
        .expect("MPA Reply private data");
    let f = FrameRepr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(f.kind, FrameKind::Reply);
    f
}

/// Read FPDUs until EOF (or `limit`, or an RDMA Read Request: the peer then waits for our
/// answer) and return the RDMAP opcodes of the ULPDUs received, with their DDP queue numbers.
fn read_until_eof(s: &mut TcpStream, crc: bool, limit: Duration) -> Vec<(u8, Option<u32>)> {
    let mut d = Deframer::new(crc, false, 1 << 16);
    let mut got = Vec::new();
    let end = Instant::now() + limit;
    let mut buf = vec![0u8; 65536];
    loop {
        assert!(Instant::now() < end, "no EOF from the rping server");
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => {
                let mut r = Ok(());
                r = r.and(d.push(&buf[..n], &mut |u| {
                    let seg = Segment::new_checked(u).expect("a DDP segment");
                    let op = control_opcode(seg.rdmap_control());
                    let qn = (!seg.tagged()).then(|| seg.qn());
                    got.push((op, qn));
                }));
                r.expect("well-formed FPDUs from the server");
                if got
                    .iter()
                    .any(|(op, _)| *op == RdmapOpcode::ReadRequest as u8)
                {
                    return got;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// The first message of rping's client: a Send advertising its source buffer (address, rkey,
/// length, big-endian), as one FPDU.
fn rping_advertisement(crc: bool) -> Vec<u8> {
    let mut ulpdu = Vec::new();
    HeaderRepr {
        last: true,
        ddp_version: 1,
        rdmap_control: RdmapOpcode::Send.control(),
        buffer: BufferRepr::Untagged {
            inv_stag: 0,
            qn: QN_SEND,
            msn: 1,
            mo: 0,
        },
    }
    .emit_to_vec(&mut ulpdu);
    ulpdu.extend_from_slice(&0x10_0000u64.to_be_bytes());
    ulpdu.extend_from_slice(&0x0123_4500u32.to_be_bytes());
    ulpdu.extend_from_slice(&64u32.to_be_bytes());
    let mut out = Vec::new();
    Framer::new(crc, false).emit_ulpdu(&ulpdu, &mut out);
    out
}

/// RFC 6581 §9.1: an initiator IRD of 0 leaves the responder no outbound Reads (responder ORD
/// at most the initiator IRD), and RFC 5040 §6.1 forbids more outstanding Reads than negotiated.
/// rping's server needs one RDMA Read per ping, so it rejects the request (naming the ORD it
/// needs in the Reject, as §9.1 allows) or, had it accepted, must still never send a Read.
#[test]
fn rping_server_never_reads_when_initiator_ird_is_zero() {
    let port = free_port();
    let server = Server::rping(port, &["-v"]);
    let mut s = connect(port);
    let req = FrameRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        rejected: false,
        rev: 2,
        enhanced: Some(EnhancedData {
            ird: 0,
            ord: 0,
            ..EnhancedData::default()
        }),
        private_data: Vec::new(),
    };
    let mut out = Vec::new();
    req.emit_to_vec(&mut out);
    s.write_all(&out).unwrap();
    let rep = read_reply(&mut s);
    let e = rep
        .enhanced
        .expect("an enhanced Reply to an enhanced Request (RFC 6581 §10)");
    let got = if rep.rejected {
        // §9.1: the Reject's responder ORD is the ORD the ULP requires.
        assert!(e.ord >= 1, "the Reject names the ORD rping needs: {e:?}");
        read_until_eof(&mut s, rep.crc, Duration::from_secs(10))
    } else {
        assert_eq!(
            e.ord, 0,
            "responder ORD at most the initiator IRD 0 (RFC 6581 §9.1)"
        );
        s.write_all(&rping_advertisement(rep.crc)).unwrap();
        read_until_eof(&mut s, rep.crc, Duration::from_secs(10))
    };
    let reads: Vec<_> = got
        .iter()
        .filter(|(op, qn)| *op == RdmapOpcode::ReadRequest as u8 || *qn == Some(QN_READ_REQUEST))
        .collect();
    assert!(
        reads.is_empty(),
        "the server sent an RDMA Read Request beyond the negotiated ORD 0: {got:?}"
    );
    drop(s);
    let (status, err) = server.finish(Duration::from_secs(15));
    eprintln!("rping server ({status}):\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("ORD"),
        "the server says why it stopped (ORD): status {status}, stderr:\n{err}"
    );
}

/// What the Reply says to an enhanced Request with IRD = ORD = 0 (RFC 6581 §9.1): responder
/// ORD at most the initiator IRD, so 0; responder IRD at least the initiator ORD (its own, here
/// 1, is fine: "MAY be increased"). The negotiation was right before; the engine treating ORD 0
/// as 1 was not.
#[test]
fn rfc6581_s9_1_reply_to_ird_ord_zero() {
    use dpwarp::mpa::{MpaConfig, Startup, StartupEvent};
    let mut s = Startup::responder(
        MpaConfig {
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        },
        Instant::now(),
    );
    let mut req = Vec::new();
    FrameRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        rejected: false,
        rev: 2,
        enhanced: Some(EnhancedData::default()),
        private_data: Vec::new(),
    }
    .emit_to_vec(&mut req);
    s.on_bytes(&req, Instant::now());
    assert!(
        matches!(s.poll_event(), Some(StartupEvent::Request(p)) if p.ird == Some(0) && p.ord == Some(0))
    );
    s.accept(None);
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    let rep = FrameRepr::parse(&Frame::new_checked(&out[..]).unwrap()).unwrap();
    let e = rep.enhanced.unwrap();
    assert_eq!((e.ird, e.ord), (1, 0));
    match s.poll_event() {
        Some(StartupEvent::Established(n)) => {
            assert_eq!((n.ird, n.ord), (1, 0));
            assert_eq!((n.peer_ird, n.peer_ord), (Some(0), Some(0)));
        }
        e => panic!("{e:?}"),
    }
}

// ------------------------------------------------------------------ verbs / cm

struct End {
    _dev: Device,
    pd: dpwarp::verbs::Pd,
    cq: Cq,
    qp: Qp,
}

fn end() -> End {
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(64);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    End {
        _dev: dev,
        pd,
        cq,
        qp,
    }
}

/// Connect `c` (initiator, `ci`) to `s` (responder, `si`) over kernel TCP loopback.
fn connect_pair(c: &End, ci: ConnParam, s: &End, si: ConnParam) {
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let sqp = s.qp.clone();
    let t = std::thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&sqp, &si).unwrap()
    });
    cm::connect_tcp(addr, &c.qp, &ci).unwrap();
    t.join().unwrap();
}

fn read_wr(id: u64, sink: &dpwarp::verbs::Mr, src: &dpwarp::verbs::Mr, len: u32) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: Opcode::Read {
            remote_addr: src.addr(),
            rkey: src.stag(),
        },
        sg_list: smallvec![Sge {
            addr: sink.addr(),
            length: len,
            lkey: sink.stag(),
        }],
        signaled: true,
    }
}

/// RFC 6581 §9.1: the responder's ORD is at most the initiator's IRD. With an initiator IRD of 0
/// the responder's Read fails at post time with a clear error, and the connection carries on.
#[test]
fn read_posted_with_negotiated_ord_zero_fails_locally() {
    let c = end();
    let s = end();
    let src = c.pd.reg_mr(64, Access(7));
    let sink = s.pd.reg_mr(64, Access(7));
    let ci = ConnParam {
        responder_resources: 0,
        initiator_depth: 0,
        ..ConnParam::default()
    };
    let si = ConnParam {
        responder_resources: 4,
        initiator_depth: 4,
        ..ConnParam::default()
    };
    // The responder accepts; its negotiated ORD is min(4, initiator IRD 0) = 0.
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let sqp = s.qp.clone();
    let t = std::thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&sqp, &si).unwrap()
    });
    let nc = cm::connect_tcp(addr, &c.qp, &ci).unwrap();
    let ns = t.join().unwrap();
    assert_eq!((nc.ird, nc.ord), (0, 0));
    assert_eq!(ns.ord, 0, "responder ORD <= initiator IRD 0");
    let err = s.qp.post_send(read_wr(7, &sink, &src, 64)).unwrap_err();
    assert_eq!(err, PostError::ZeroOrd);
    assert!(err.to_string().contains("ORD"), "{err}");
    // Nothing reached the wire: the initiator is still connected and a Send still works.
    let rb = c.pd.reg_mr(16, Access::LOCAL_WRITE);
    c.qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![Sge {
            addr: rb.addr(),
            length: 16,
            lkey: rb.stag(),
        }],
    })
    .unwrap();
    let sb = s.pd.reg_mr(16, Access::LOCAL_WRITE);
    sb.write_at(0, b"still connected!");
    s.qp.post_send(SendWr {
        wr_id: 8,
        opcode: Opcode::Send,
        sg_list: smallvec![Sge {
            addr: sb.addr(),
            length: 16,
            lkey: sb.stag(),
        }],
        signaled: true,
    })
    .unwrap();
    let wc =
        c.cq.wait(Duration::from_secs(10))
            .expect("the Send arrives");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(rb.to_vec(), b"still connected!");
    assert!(c.qp.terminate_cause().is_none());
    assert!(s.qp.terminate_cause().is_none());
}

/// A Read posted before the connection is established, on a connection that then negotiates
/// ORD 0, completes with an error instead of going out (or vanishing).
#[test]
fn read_posted_before_establishment_with_ord_zero_completes_in_error() {
    let c = end();
    let s = end();
    let src = s.pd.reg_mr(64, Access(7));
    let sink = c.pd.reg_mr(64, Access(7));
    // The initiator asks for ORD 4, but the responder's IRD... is at least the initiator's ORD
    // (§9.1), so make the initiator's own configured ORD 0.
    let ci = ConnParam {
        responder_resources: 4,
        initiator_depth: 0,
        ..ConnParam::default()
    };
    c.qp.post_send(read_wr(5, &sink, &src, 64)).unwrap();
    connect_pair(&c, ci, &s, ConnParam::default());
    let wc =
        c.cq.wait(Duration::from_secs(10))
            .expect("a completion for the Read");
    assert_eq!(wc.wr_id, 5);
    assert_eq!(wc.opcode, WcOpcode::Read);
    assert_eq!(wc.status, WcStatus::LocQpOpErr);
    assert!(c.qp.terminate_cause().is_none());
    assert!(s.qp.terminate_cause().is_none());
}

// ------------------------------------------------------------------ QP engine

fn engine(ird: u32, ord: u32) -> (QpEngine, MemoryTable, dpwarp::rdma::PdId) {
    let mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let qp = QpEngine::new(
        QpConfig {
            mulpdu: 1024,
            pd,
            ird,
            ord,
            sq_depth: 64,
            rq_depth: 64,
            rtr: None,
        },
        mem.clone(),
    );
    (qp, mem, pd)
}

#[test]
fn engine_ord_zero_refuses_reads_at_post_time() {
    let (mut qp, mem, pd) = engine(4, 0);
    let sink = mem.register(pd, 64, Access::LOCAL_WRITE);
    let wr = SendWr {
        wr_id: 1,
        opcode: Opcode::Read {
            remote_addr: 0x1000,
            rkey: 0x1234_5600,
        },
        sg_list: smallvec![Sge {
            addr: sink.addr(),
            length: 64,
            lkey: sink.stag(),
        }],
        signaled: true,
    };
    assert_eq!(qp.post_send(wr), Err(PostError::ZeroOrd));
    let mut out = Vec::new();
    assert!(!qp.poll_ulpdu(&mut out), "nothing to send: {out:?}");
    assert!(qp.poll_completion().is_none());
}

fn read_request_ulpdu(msn: u32, src_stag: u32, src_to: u64) -> Vec<u8> {
    let mut u = Vec::new();
    HeaderRepr {
        last: true,
        ddp_version: 1,
        rdmap_control: RdmapOpcode::ReadRequest.control(),
        buffer: BufferRepr::Untagged {
            inv_stag: 0,
            qn: QN_READ_REQUEST,
            msn,
            mo: 0,
        },
    }
    .emit_to_vec(&mut u);
    ReadRequestRepr {
        sink_stag: 0x4400,
        sink_to: 0,
        size: 8,
        src_stag,
        src_to,
    }
    .emit_to_vec(&mut u);
    u
}

fn sent_terminate(qp: &mut QpEngine) -> Option<TermCause> {
    std::iter::from_fn(|| qp.poll_event()).find_map(|e| match e {
        QpEvent::TerminateSent(c) => Some(c),
        _ => None,
    })
}

/// RFC 5040 §6.5 / RFC 5041 §7.2: a Read Request beyond IRD is "no buffer" on QN 1. With IRD 0
/// (the peer was told it has no Reads) the very first one is refused.
#[test]
fn engine_ird_is_a_hard_limit() {
    for ird in [0u32, 1, 3] {
        let (mut qp, mem, pd) = engine(ird, 4);
        let src = mem.register(pd, 64, Access(7));
        for i in 0..ird {
            qp.on_ulpdu(&read_request_ulpdu(i + 1, src.stag(), src.addr()));
            assert_eq!(sent_terminate(&mut qp), None, "Read {} of IRD {ird}", i + 1);
        }
        qp.on_ulpdu(&read_request_ulpdu(ird + 1, src.stag(), src.addr()));
        assert_eq!(
            sent_terminate(&mut qp),
            Some(TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER),
            "Read {} beyond IRD {ird}",
            ird + 1
        );
    }
}

/// ORD n > 0: further Reads wait on the send queue (bounded by its depth, as siw does) and go
/// out as responses complete; never more than n Read Requests outstanding.
#[test]
fn engine_ord_bounds_outstanding_reads() {
    let (mut a, amem, apd) = engine(4, 2);
    let (mut b, bmem, bpd) = engine(4, 4);
    let src = bmem.register(bpd, 64, Access(7));
    src.write_at(0, &[0x5a; 64]);
    let sink = amem.register(apd, 5 * 64, Access::LOCAL_WRITE);
    for i in 0..5u64 {
        a.post_send(SendWr {
            wr_id: i,
            opcode: Opcode::Read {
                remote_addr: src.addr(),
                rkey: src.stag(),
            },
            sg_list: smallvec![Sge {
                addr: sink.addr() + i * 64,
                length: 64,
                lkey: sink.stag(),
            }],
            signaled: true,
        })
        .unwrap();
    }
    // Each round A sends everything it may, then B answers everything it got.
    let mut outstanding = 0usize;
    let mut max_out = 0usize;
    for _ in 0..100 {
        let mut moved = false;
        let mut u = Vec::new();
        while a.poll_ulpdu(&mut u) {
            let seg = Segment::new_checked(&u[..]).unwrap();
            if control_opcode(seg.rdmap_control()) == RdmapOpcode::ReadRequest as u8 {
                outstanding += 1;
                max_out = max_out.max(outstanding);
            }
            b.on_ulpdu(&u);
            u.clear();
            moved = true;
        }
        while b.poll_ulpdu(&mut u) {
            let seg = Segment::new_checked(&u[..]).unwrap();
            if control_opcode(seg.rdmap_control()) == RdmapOpcode::ReadResponse as u8 && seg.last()
            {
                outstanding -= 1;
            }
            a.on_ulpdu(&u);
            u.clear();
            moved = true;
        }
        if !moved {
            break;
        }
    }
    let wcs: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
    assert_eq!(wcs.len(), 5);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(max_out, 2, "ORD 2: at most two Read Requests outstanding");
    assert_eq!(sink.to_vec(), vec![0x5a; 5 * 64]);
}
