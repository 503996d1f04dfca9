//! Connection-manager behaviour end to end: reject with private data, IRD/ORD reaching the ULP,
//! peer-to-peer RTR kinds, fallback to MPA rev 1, startup timeout.

mod common;

use dpwarp::verbs::smallvec;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::Duration;

use common::*;
use dpwarp::cm::{self, CmError, ConnParam, ConnRequest, ListenConfig, Listener, Net};
use dpwarp::mpa::{RtrSet, StartupError};
use dpwarp::rdma::RtrKind;
use dpwarp::transport::kernel::KernelTcp;
use dpwarp::transport::memlink::LinkFaults;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, QpInitAttr, RecvWr, SendWr};

/// After connecting, prove the QP works both ways: a Send each way and an RDMA Read.
fn prove_data_flows(c: &Side, s: &Side) {
    let sbuf = s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ);
    sbuf.write_at(0, &pattern(5, 4096));
    let cbuf = c.pd.reg_mr(4096, Access::LOCAL_WRITE);
    c.qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![sge(&cbuf, 0, 4096)],
    })
    .unwrap();
    s.qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&sbuf, 0, 100)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&s.cq);
    assert_eq!(wc_ok(&c.cq).byte_len, 100);
    assert_eq!(&cbuf.to_vec()[..100], &pattern(5, 100)[..]);
    c.qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Read {
            remote_addr: sbuf.addr(),
            rkey: sbuf.stag(),
        },
        sg_list: smallvec![sge(&cbuf, 0, 4096)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    assert_eq!(cbuf.to_vec(), pattern(5, 4096));
}

fn p2p(kind: RtrKind) {
    let offer = RtrSet {
        send: kind == RtrKind::Send,
        write: kind == RtrKind::Write,
        read: kind == RtrKind::Read,
    };
    let client = ConnParam {
        p2p: Some(offer),
        ..ConnParam::default()
    };
    let server = ConnParam {
        p2p: Some(RtrSet {
            send: true,
            write: true,
            read: true,
        }),
        ..ConnParam::default()
    };
    let (c, s) = connect_pair(Link::Mem(LinkFaults::default()), client, server).unwrap();
    assert_eq!(c.negotiated().rtr, Some(kind));
    assert_eq!(s.negotiated().rtr, Some(kind));
    prove_data_flows(&c, &s);
}

#[test]
fn rfc6581_s9_2_p2p_write_rtr() {
    p2p(RtrKind::Write);
}

#[test]
fn rfc6581_s9_2_p2p_read_rtr() {
    p2p(RtrKind::Read);
}

#[test]
fn rfc6581_s9_2_p2p_send_rtr() {
    p2p(RtrKind::Send);
}

#[test]
fn rfc6581_s9_1_ird_ord_and_peer_values_reach_the_ulp() {
    let client = ConnParam {
        responder_resources: 3,
        initiator_depth: 5,
        ..ConnParam::default()
    };
    let server = ConnParam {
        responder_resources: 8,
        initiator_depth: 2,
        ..ConnParam::default()
    };
    let (c, s) = connect_pair(Link::Kernel, client, server).unwrap();
    // Responder: IRD >= initiator ORD (it may raise it), ORD <= initiator IRD.
    assert!(s.negotiated().ord <= 3);
    assert_eq!(s.negotiated().peer_ird, Some(3));
    assert_eq!(s.negotiated().peer_ord, Some(5));
    // Initiator: ORD at most the responder IRD, IRD at least the responder ORD.
    assert!(c.negotiated().ord <= s.negotiated().ird);
    assert!(c.negotiated().ird >= s.negotiated().ord);
    assert_eq!(c.negotiated().peer_ird, Some(s.negotiated().ird));
    assert_eq!(c.negotiated().peer_ord, Some(s.negotiated().ord));
    prove_data_flows(&c, &s);
}

#[test]
fn rfc5044_s7_1_2_reject_carries_private_data() {
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        assert_eq!(req.peer.private_data, b"hello, may I?");
        req.reject(b"no, go away").unwrap();
    });
    let client = Side::new();
    let r = cm::connect_tcp(
        addr,
        &client.qp,
        &ConnParam {
            private_data: b"hello, may I?".to_vec(),
            ..ConnParam::default()
        },
    );
    server.join().unwrap();
    match r {
        Err(CmError::Rejected { private_data, .. }) => assert_eq!(private_data, b"no, go away"),
        Err(e) => panic!("expected a reject, got {e}"),
        Ok(_) => panic!("expected a reject, got a connection"),
    }
}

#[test]
fn rfc6581_s10_initiator_falls_back_to_rev1_when_enhanced_refused() {
    // A responder that does not know enhanced MPA closes on S=1 requests (RFC 6581 §10); this
    // one does that for the first connection, then answers the retry with a real dpwarp responder.
    let raw = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut first, _) = raw.accept().unwrap();
        let mut hdr = [0u8; 20];
        first.read_exact(&mut hdr).unwrap();
        assert_eq!(&hdr[..16], b"MPA ID Req Frame");
        assert_eq!(hdr[16] & 0x10, 0x10, "first request is enhanced");
        drop(first);
        let (second, _) = raw.accept().unwrap();
        let t = KernelTcp::from_stream(second, true).unwrap();
        let req = ConnRequest::read(Box::new(t), Duration::from_secs(10)).unwrap();
        assert_eq!(req.peer.revision, 1);
        assert!(!req.peer.enhanced);
        let side = Side::new();
        let n = req.accept(&side.qp, &ConnParam::default()).unwrap();
        assert_eq!(n.revision, 1);
        side.qp.wait_closed(Duration::from_secs(5));
    });
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(16);
    let (qp, n) = cm::connect_tcp_with_fallback(
        addr,
        &pd,
        &QpInitAttr::new(&cq),
        &ConnParam {
            fallback_rev1: true,
            ..ConnParam::default()
        },
    )
    .expect("fallback connection");
    assert_eq!(n.revision, 1);
    assert!(!n.enhanced);
    qp.disconnect();
    server.join().unwrap();
}

#[test]
fn startup_timeout_when_responder_never_answers() {
    let raw = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap();
    let hold = thread::spawn(move || {
        let (mut s, _) = raw.accept().unwrap();
        let mut sink = [0u8; 64];
        let _ = s.read(&mut sink);
        thread::sleep(Duration::from_millis(1500));
        let _ = s.write_all(b"x");
    });
    let client = Side::new();
    let r = cm::connect_tcp(
        addr,
        &client.qp,
        &ConnParam {
            timeout: Duration::from_millis(300),
            ..ConnParam::default()
        },
    );
    assert!(
        matches!(r, Err(CmError::Startup(StartupError::Timeout))),
        "{:?}",
        r.err()
    );
    hold.join().unwrap();
}

#[test]
fn memlink_pair_connects_with_default_params() {
    let (c, s) = connect_pair(
        Link::Mem(LinkFaults::default()),
        ConnParam::default(),
        ConnParam::default(),
    )
    .unwrap();
    assert!(c.negotiated().crc_tx && s.negotiated().crc_rx);
    prove_data_flows(&c, &s);
}

/// The one connection API (`cm::Net`) over kernel TCP: listen, a request carrying the
/// initiator's private data and address, accept with data flowing both ways, a second
/// request rejected with private data, and a QP handed to connect twice refused.
#[test]
fn net_api_listen_accept_reject_over_kernel_tcp() {
    let net = Net::kernel();
    assert!(net.is_kernel() && !net.is_driven() && !net.poll());
    let l = net
        .listen_with(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &ListenConfig {
                mpa_timeout: Duration::from_secs(2),
                ..ListenConfig::default()
            },
        )
        .unwrap();
    let addr = l.local_addr().unwrap();
    // Nobody has connected yet.
    assert!(matches!(
        l.get_request(Duration::from_millis(50)),
        Err(CmError::Timeout)
    ));
    let server = thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        assert_eq!(req.private_data(), b"first");
        assert!(req.remote_addr().unwrap().ip().is_loopback());
        let s = Side::new();
        req.accept(&s.qp, &ConnParam::default()).unwrap();
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        assert_eq!(req.private_data(), b"second");
        req.reject(b"not you").unwrap();
        s
    });
    let c = Side::new();
    let p = |d: &[u8]| ConnParam {
        private_data: d.to_vec(),
        ..ConnParam::default()
    };
    net.connect(addr, &c.qp, &p(b"first")).unwrap();
    assert!(matches!(
        net.connect(addr, &c.qp, &p(b"again")),
        Err(CmError::QpInUse)
    ));
    let c2 = Side::new();
    match net.connect(addr, &c2.qp, &p(b"second")) {
        Err(CmError::Rejected { private_data, .. }) => assert_eq!(private_data, b"not you"),
        Err(e) => panic!("expected a reject, got {e}"),
        Ok(_) => panic!("expected a reject, got a connection"),
    }
    let s = server.join().unwrap();
    prove_data_flows(&c, &s);
}
