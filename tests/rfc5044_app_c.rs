//! RFC 5044 Appendix C: interoperation with RDMA Consortium (RDMAC) RNICs, which send MPA
//! Rev 0 with M=1 and C=1 and speak DDP/RDMAP version 0. dpwarp is a non-permissive IETF RNIC
//! by default (a Rev 0 Request is closed without a reply, RFC 5044 §7.1.1 "Rev"); with
//! `rev0_permissive` it is the appendix's Permissive IETF RNIC:
//!
//! - responder (App. C.2.4): a Rev 0 Request with M=1, C=1, S=0 gets a Rev 0 Reply (or Reject)
//!   with M=1, C=1; markers and CRC both ways; DDP/RDMAP version 0 (Figure 16, V=0 M=1/1);
//! - initiator (App. C.2.5): after an unenhanced Request, a Rev 0 Reply with M=1, C=1 is
//!   accepted the same way;
//! - refused (closed without a reply, as by default): Rev 0 with S=1 (RFC 6581 §6: enhanced data
//!   needs Rev >= 2), Rev 0 without M=1 and C=1 (not what an RDMAC RNIC sends), a Rev 0 Reply to
//!   an enhanced Request or with M=0 or C=0, and any Rev above 2.
//!
//! Sans-IO through `Startup`, then end to end over kernel TCP with a hand-written RDMAC peer
//! (the crate's own wire types over a std `TcpStream`), and through `dpwarp rping -s`.

use dpwarp::verbs::smallvec;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam, ListenConfig, Listener};
use dpwarp::mpa::{Deframer, Framer, MpaConfig, Role, Startup, StartupError, StartupEvent};
use dpwarp::rdma::{Access, Opcode, RecvWr, SendWr, Sge, WcOpcode, WcStatus};
use dpwarp::verbs::{Cq, Device, Qp, QpInitAttr};
use dpwarp::wire::ddp::{BufferRepr, HeaderRepr, Segment, QN_SEND};
use dpwarp::wire::mpa::{EnhancedData, Frame, FrameKind, FrameRepr, HEADER_LEN};
use dpwarp::wire::rdmap::{control_opcode, control_version, RdmapOpcode};

fn now() -> Instant {
    Instant::now()
}

fn frame(kind: FrameKind, rev: u8, m: bool, c: bool, r: bool, e: Option<EnhancedData>) -> Vec<u8> {
    let mut out = Vec::new();
    FrameRepr {
        kind,
        markers: m,
        crc: c,
        rejected: r,
        rev,
        enhanced: e,
        private_data: b"rdmac".to_vec(),
    }
    .emit_to_vec(&mut out);
    out
}

fn rdmac_request() -> Vec<u8> {
    frame(FrameKind::Request, 0, true, true, false, None)
}

fn permissive() -> MpaConfig {
    MpaConfig {
        rev0_permissive: true,
        ..MpaConfig::default()
    }
}

fn events(s: &mut Startup) -> Vec<StartupEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn parse(bytes: &[u8]) -> FrameRepr {
    FrameRepr::parse(&Frame::new_checked(bytes).unwrap()).unwrap()
}

/// Feed `req` to a responder with `cfg`; returns the events and whatever it would transmit.
fn respond_to(cfg: MpaConfig, req: &[u8]) -> (Startup, Vec<StartupEvent>, Vec<u8>) {
    let mut s = Startup::responder(cfg, now());
    assert_eq!(s.on_bytes(req, now()), req.len());
    let ev = events(&mut s);
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    (s, ev, out)
}

fn closed_without_reply(ev: &[StartupEvent], out: &[u8]) -> bool {
    out.is_empty() && matches!(ev, [StartupEvent::Failed(StartupError::Malformed(_))])
}

#[test]
fn rfc5044_s7_1_1_default_closes_rev0_request_without_reply() {
    let (_, ev, out) = respond_to(MpaConfig::default(), &rdmac_request());
    assert!(closed_without_reply(&ev, &out), "{ev:?} {out:?}");
}

#[test]
fn app_c_2_4_permissive_responder_answers_rev0_with_m1_c1() {
    // Our own preferences (no markers, no CRC) give way to what the RDMAC peer needs.
    let cfg = MpaConfig {
        markers: false,
        crc: false,
        ..permissive()
    };
    let (mut s, ev, out) = respond_to(cfg, &rdmac_request());
    assert!(out.is_empty(), "nothing before the ULP accepts");
    let peer = match &ev[..] {
        [StartupEvent::Request(p)] => p.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(
        (peer.revision, peer.enhanced, peer.markers, peer.crc),
        (0, false, true, true)
    );
    assert_eq!(peer.private_data, b"rdmac");
    s.accept(Some(b"ietf".to_vec()));
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    let rep = parse(&out);
    assert_eq!(rep.kind, FrameKind::Reply);
    assert_eq!(rep.rev, 0, "the Reply says Rev 0 (App. C.2.4)");
    assert!(rep.markers && rep.crc && !rep.rejected);
    assert_eq!(rep.enhanced, None, "no RFC 6581 enhanced data at Rev 0");
    assert_eq!(rep.private_data, b"ietf");
    let n = match &events(&mut s)[..] {
        [StartupEvent::Established(n)] => n.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(n.role, Role::Responder);
    assert_eq!(n.revision, 0, "tells the ULP: version 0 DDP/RDMAP");
    assert!(!n.enhanced);
    assert!(n.crc_tx && n.crc_rx, "CRC both ways (App. C.1)");
    assert!(
        n.markers_tx && n.markers_rx,
        "markers both ways (Figure 16: M=1/1)"
    );
    assert_eq!(n.rtr, None);
}

#[test]
fn app_c_2_4_permissive_responder_rejects_with_rev0() {
    let (mut s, ev, _) = respond_to(permissive(), &rdmac_request());
    assert!(matches!(&ev[..], [StartupEvent::Request(_)]));
    s.reject(b"no".to_vec());
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    let rep = parse(&out);
    assert_eq!(
        (rep.rev, rep.rejected, rep.markers, rep.crc),
        (0, true, true, true)
    );
    assert_eq!(rep.enhanced, None);
    assert_eq!(rep.private_data, b"no");
}

#[test]
fn app_c_permissive_responder_refuses_what_no_rdmac_rnic_sends() {
    let cases = [
        // RFC 6581 §6: S=1 needs Rev >= 2.
        frame(
            FrameKind::Request,
            0,
            true,
            true,
            false,
            Some(EnhancedData::default()),
        ),
        // App. C.2.4: an RDMAC RNIC sets M=1 and C=1.
        frame(FrameKind::Request, 0, false, true, false, None),
        frame(FrameKind::Request, 0, true, false, false, None),
        // Revisions above 2 stay unsupported (RFC 5044 §7.1.1).
        frame(FrameKind::Request, 3, true, true, false, None),
    ];
    for req in cases {
        let (_, ev, out) = respond_to(permissive(), &req);
        assert!(
            closed_without_reply(&ev, &out),
            "{req:02x?}: {ev:?} {out:?}"
        );
    }
}

#[test]
fn app_c_permissive_responder_still_speaks_rev1_and_rev2() {
    for (rev, e) in [
        (1, None),
        (
            2,
            Some(EnhancedData {
                ird: 4,
                ord: 4,
                ..EnhancedData::default()
            }),
        ),
    ] {
        let (mut s, ev, _) = respond_to(
            permissive(),
            &frame(FrameKind::Request, rev, false, true, false, e),
        );
        assert!(matches!(&ev[..], [StartupEvent::Request(p)] if p.revision == rev));
        s.accept(None);
        let mut out = Vec::new();
        s.poll_transmit(&mut out);
        let rep = parse(&out);
        assert_eq!(rep.rev, rev);
        assert!(
            !rep.markers,
            "no markers unless asked (only Rev 0 forces them)"
        );
    }
}

/// Initiator with `cfg` (its Request is discarded), fed `reply`.
fn initiate(cfg: MpaConfig, reply: &[u8]) -> Vec<StartupEvent> {
    let mut s = Startup::initiator(cfg, now());
    let mut req = Vec::new();
    s.poll_transmit(&mut req);
    assert!(!req.is_empty());
    s.on_bytes(reply, now());
    events(&mut s)
}

fn rev1_initiator(permissive: bool) -> MpaConfig {
    MpaConfig {
        revision: 1,
        enhanced: false,
        markers: false,
        rev0_permissive: permissive,
        ..MpaConfig::default()
    }
}

#[test]
fn app_c_2_5_permissive_initiator_accepts_rdmac_reply() {
    let ev = initiate(
        rev1_initiator(true),
        &frame(FrameKind::Reply, 0, true, true, false, None),
    );
    let n = match &ev[..] {
        [StartupEvent::Established(n)] => n.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(n.revision, 0);
    assert!(n.crc_tx && n.crc_rx && n.markers_tx && n.markers_rx);
    assert_eq!(n.peer_private_data, b"rdmac");
    // An RDMAC Reject is a Reject.
    let ev = initiate(
        rev1_initiator(true),
        &frame(FrameKind::Reply, 0, true, true, true, None),
    );
    assert!(
        matches!(&ev[..], [StartupEvent::Rejected { private_data, .. }] if private_data == b"rdmac")
    );
}

#[test]
fn app_c_2_5_initiator_refusals() {
    let rdmac_reply = frame(FrameKind::Reply, 0, true, true, false, None);
    // Default (non-permissive): App. C.2.2, close on the incompatible Rev.
    let ev = initiate(rev1_initiator(false), &rdmac_reply);
    assert!(
        matches!(&ev[..], [StartupEvent::Failed(StartupError::Malformed(_))]),
        "{ev:?}"
    );
    // A Rev 0 Reply with M=0 or C=0 is no RDMAC RNIC's.
    for (m, c) in [(false, true), (true, false)] {
        let ev = initiate(
            rev1_initiator(true),
            &frame(FrameKind::Reply, 0, m, c, false, None),
        );
        assert!(
            matches!(&ev[..], [StartupEvent::Failed(StartupError::Malformed(_))]),
            "{ev:?}"
        );
    }
    // After an enhanced (Rev 2, S=1) Request the peer's view of our private data is unknown.
    let ev = initiate(permissive(), &rdmac_reply);
    assert!(
        matches!(&ev[..], [StartupEvent::Failed(StartupError::Malformed(_))]),
        "{ev:?}"
    );
}

// ------------------------------------------------------------------ over kernel TCP

/// DDP/RDMAP version of a received ULPDU.
fn versions(u: &[u8]) -> (u8, u8) {
    let seg = Segment::new_checked(u).unwrap();
    (seg.ddp_version(), control_version(seg.rdmap_control()))
}

/// An untagged Send ULPDU with DDP/RDMAP version `v`.
fn send_ulpdu(v: u8, msn: u32, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    HeaderRepr {
        last: true,
        ddp_version: v,
        rdmap_control: (v << 6) | RdmapOpcode::Send as u8,
        buffer: BufferRepr::Untagged {
            inv_stag: 0,
            qn: QN_SEND,
            msn,
            mo: 0,
        },
    }
    .emit_to_vec(&mut u);
    u.extend_from_slice(payload);
    u
}

fn read_frame(s: &mut TcpStream) -> FrameRepr {
    let mut buf = vec![0u8; HEADER_LEN];
    s.read_exact(&mut buf).expect("MPA frame header");
    let pd = usize::from(Frame::new_unchecked(&buf[..]).pd_length());
    buf.resize(HEADER_LEN + pd, 0);
    s.read_exact(&mut buf[HEADER_LEN..]).unwrap();
    parse(&buf)
}

/// Read ULPDUs (markers and CRC on, as with an RDMAC peer) until `want` arrived.
fn read_ulpdus(s: &mut TcpStream, d: &mut Deframer, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while got.len() < want {
        assert!(Instant::now() < end, "only {} ULPDUs arrived", got.len());
        match s.read(&mut buf) {
            Ok(0) => panic!("EOF after {} ULPDUs", got.len()),
            Ok(n) => d.push(&buf[..n], &mut |u| got.push(u.to_vec())).unwrap(),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

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

fn post_recv(e: &End, mr: &dpwarp::verbs::Mr) {
    e.qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![Sge {
            addr: mr.addr(),
            length: mr.len() as u32,
            lkey: mr.stag(),
        }],
    })
    .unwrap();
}

fn post_send(e: &End, mr: &dpwarp::verbs::Mr, len: usize) {
    e.qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![Sge {
            addr: mr.addr(),
            length: len as u32,
            lkey: mr.stag(),
        }],
        signaled: true,
    })
    .unwrap();
}

/// A permissive listener and an RDMAC initiator: Rev 0 Reply with M=1 C=1, then version 0
/// FPDUs with markers and CRC in both directions, data verified.
#[test]
fn app_c_rdmac_initiator_against_permissive_listener_over_tcp() {
    let l = Listener::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        ListenConfig {
            mpa_rev0_permissive: true,
            ..ListenConfig::default()
        },
    )
    .unwrap();
    let addr = l.local_addr().unwrap();
    let srv = end();
    let rb = srv.pd.reg_mr(64, Access::LOCAL_WRITE);
    post_recv(&srv, &rb);
    let sqp = srv.qp.clone();
    let t = std::thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(10)).unwrap();
        assert_eq!(req.peer.revision, 0);
        // The application's parameters need nothing RDMAC-specific.
        req.accept(&sqp, &ConnParam::default()).unwrap()
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&rdmac_request()).unwrap();
    let rep = read_frame(&mut s);
    assert_eq!(
        (rep.rev, rep.markers, rep.crc, rep.rejected),
        (0, true, true, false)
    );
    let n = t.join().unwrap();
    assert_eq!(n.revision, 0);
    assert!(n.markers_tx && n.markers_rx && n.crc_tx && n.crc_rx);
    // RFC 5044 §7.1.2 rule 4: the initiator's FPDU first (markers, CRC, version 0).
    let mut framer = Framer::new(true, true);
    let mut out = Vec::new();
    framer.emit_ulpdu(&send_ulpdu(0, 1, b"hello from RDMAC"), &mut out);
    s.write_all(&out).unwrap();
    let wc = srv
        .cq
        .wait(Duration::from_secs(10))
        .expect("the v0 Send arrives");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (1, WcStatus::Success, WcOpcode::Recv, 16)
    );
    assert_eq!(&rb.to_vec()[..16], b"hello from RDMAC");
    // Our Send goes out as DDP/RDMAP version 0, with markers and CRC.
    let sb = srv.pd.reg_mr(16, Access::LOCAL_WRITE);
    sb.write_at(0, b"hello from IETF!");
    post_send(&srv, &sb, 16);
    let mut d = Deframer::new(true, true, 1 << 16);
    let got = read_ulpdus(&mut s, &mut d, 1);
    assert_eq!(
        versions(&got[0]),
        (0, 0),
        "DDP/RDMAP version 0 to an RDMAC peer"
    );
    let seg = Segment::new_checked(&got[0][..]).unwrap();
    assert_eq!(control_opcode(seg.rdmap_control()), RdmapOpcode::Send as u8);
    assert_eq!(seg.payload(), b"hello from IETF!");
    // App. C.1: no mixing. A version 1 segment on this connection is an invalid DDP version.
    framer.emit_ulpdu(&send_ulpdu(1, 2, b"ietf on rdmac"), &mut out);
    s.write_all(&out).unwrap();
    let got = read_ulpdus(&mut s, &mut d, 1);
    let seg = Segment::new_checked(&got[0][..]).unwrap();
    assert_eq!(
        control_opcode(seg.rdmap_control()),
        RdmapOpcode::Terminate as u8
    );
    assert_eq!(
        versions(&got[0]),
        (0, 0),
        "the TERMINATE speaks version 0 too"
    );
    assert!(srv.qp.wait_closed(Duration::from_secs(10)));
}

/// Default listener: the Rev 0 Request is closed without any reply (RFC 5044 §7.1.1; the
/// listener logs why) and never reaches `get_request`; `ConnRequest::read` reports why.
#[test]
fn rfc5044_s7_1_1_default_listener_closes_rev0_without_reply() {
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&rdmac_request()).unwrap();
    let mut buf = [0u8; 64];
    let n = match s.read(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
        Err(e) => panic!("read: {e}"),
    };
    assert_eq!(n, 0, "no reply, just the close: {:02x?}", &buf[..n]);
    assert!(
        matches!(
            l.get_request(Duration::from_millis(300)),
            Err(cm::CmError::Timeout)
        ),
        "a Rev 0 request was reported"
    );
    // The same through ConnRequest::read on a stream of our own, which returns the error.
    let ls = TcpListener::bind("127.0.0.1:0").unwrap();
    let a2 = ls.local_addr().unwrap();
    let mut c = TcpStream::connect(a2).unwrap();
    let (srv, _) = ls.accept().unwrap();
    c.write_all(&rdmac_request()).unwrap();
    let t = dpwarp::transport::kernel::KernelTcp::from_stream(srv, true).unwrap();
    match cm::ConnRequest::read(Box::new(t), Duration::from_secs(10)) {
        Err(cm::CmError::Startup(StartupError::Malformed(why))) => {
            assert!(why.contains("revision"), "{why}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a Rev 0 request was reported"),
    }
}

/// Permissive initiator (`ConnParam::mpa_rev0_permissive`, MPA rev 1) against an RDMAC
/// responder: Rev 0 Reply with M=1, C=1 although our Request said M=0; then version 0 FPDUs with
/// markers and CRC both ways.
#[test]
fn app_c_2_5_permissive_initiator_against_rdmac_responder_over_tcp() {
    let ls = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ls.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = ls.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = read_frame(&mut s);
        assert_eq!(
            (req.kind, req.rev, req.enhanced),
            (FrameKind::Request, 1, None)
        );
        s.write_all(&frame(FrameKind::Reply, 0, true, true, false, None))
            .unwrap();
        // Our initiator sends first (a Send), with markers: the RDMAC peer always expects them.
        let mut d = Deframer::new(true, true, 1 << 16);
        let got = read_ulpdus(&mut s, &mut d, 1);
        let mut framer = Framer::new(true, true);
        let mut out = Vec::new();
        framer.emit_ulpdu(&send_ulpdu(0, 1, b"rdmac answers..."), &mut out);
        s.write_all(&out).unwrap();
        let mut rest = [0u8; 16];
        let _ = s.read(&mut rest);
        got
    });
    let c = end();
    let rb = c.pd.reg_mr(64, Access::LOCAL_WRITE);
    post_recv(&c, &rb);
    let p = ConnParam {
        revision: 1,
        enhanced: false,
        mpa_rev0_permissive: true,
        ..ConnParam::default()
    };
    let n = cm::connect_tcp(addr, &c.qp, &p).unwrap();
    assert_eq!(n.revision, 0);
    assert!(n.markers_tx && n.markers_rx && n.crc_tx && n.crc_rx);
    let sb = c.pd.reg_mr(16, Access::LOCAL_WRITE);
    sb.write_at(0, b"ietf initiator..");
    post_send(&c, &sb, 16);
    let mut wcs = Vec::new();
    while wcs.len() < 2 {
        wcs.push(c.cq.wait(Duration::from_secs(10)).expect("completions"));
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(&rb.to_vec()[..16], b"rdmac answers...");
    c.qp.disconnect();
    let got = peer.join().unwrap();
    assert_eq!(versions(&got[0]), (0, 0));
    assert_eq!(
        Segment::new_checked(&got[0][..]).unwrap().payload(),
        b"ietf initiator.."
    );
}

// ------------------------------------------------------------------ dpwarp rping -s

const BIN: &str = env!("CARGO_BIN_EXE_dpwarp");

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rping_server(extra: &[&str]) -> (Server, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(BIN)
        .args(["rping", "-s", "--transport", "kernel", "-a", "127.0.0.1"])
        .args(["-p", &port.to_string()])
        .args(extra)
        .env_remove("DPWARP_TRANSPORT")
        .env_remove("DPWARP_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::from(File::create("/dev/null").unwrap()))
        .spawn()
        .unwrap();
    (Server(child), port)
}

fn connect(port: u16) -> TcpStream {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{addr}: {e}"),
        }
    }
}

#[test]
fn rping_mpa_rev0_permissive_option() {
    // With the option the server answers the RDMAC Request with a Rev 0 Reply ...
    let (_srv, port) = rping_server(&["--mpa-rev0-permissive"]);
    let mut s = connect(port);
    s.write_all(&rdmac_request()).unwrap();
    let rep = read_frame(&mut s);
    assert_eq!(
        (rep.rev, rep.markers, rep.crc, rep.rejected),
        (0, true, true, false)
    );
    drop(s);
    // ... without it, it closes without a reply (and keeps listening: rping -s is one-shot
    // per connection, so start a new one).
    let (_srv, port) = rping_server(&[]);
    let mut s = connect(port);
    s.write_all(&rdmac_request()).unwrap();
    let mut buf = [0u8; 64];
    let n = match s.read(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
        Err(e) => panic!("read: {e}"),
    };
    assert_eq!(n, 0, "no reply by default: {:02x?}", &buf[..n]);
}
