//! RFC 5044 App. C permissive mode on the DPDK listener (`Endpoint::listen_with`,
//! `ListenConfig::mpa_rev0_permissive`): a kernel-TCP
//! RDMAC peer (MPA Rev 0, M=1, C=1; hand-written with the crate's wire types) gets a Rev 0
//! Reply and then speaks DDP/RDMAP version 0 with markers and CRC both ways; the default
//! listener closes the same Request without a reply (RFC 5044 §7.1.1). DPDK net_tap inside a
//! network namespace this test makes (and deletes); the test thread enters it. Needs root.

use dpwarp::verbs::smallvec;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dpwarp::cm::{ConnParam, ListenConfig};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::mpa::{Deframer, Framer};
use dpwarp::rdma::{Access, Opcode, RecvWr, SendWr, Sge, WcStatus};
use dpwarp::verbs::{Cq, Device, Qp, QpInitAttr};
use dpwarp::wire::ddp::{BufferRepr, HeaderRepr, Segment, QN_SEND};
use dpwarp::wire::mpa::{Frame, FrameKind, FrameRepr, HEADER_LEN};
use dpwarp::wire::rdmap::{control_version, RdmapOpcode};

mod netns_common;
use netns_common::{ip, Netns};

fn rdmac_request() -> Vec<u8> {
    let mut out = Vec::new();
    FrameRepr {
        kind: FrameKind::Request,
        markers: true,
        crc: true,
        rejected: false,
        rev: 0,
        enhanced: None,
        private_data: b"rdmac".to_vec(),
    }
    .emit_to_vec(&mut out);
    out
}

/// Read retrying on EINTR (net_tap's signals interrupt blocking calls of this process).
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

fn read_exact(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        let n = read_some(s, &mut buf[got..]).expect("read");
        assert!(n > 0, "EOF");
        got += n;
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let t0 = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

#[test]
fn app_c_dpdk_listener_rev0_permissive_and_default() {
    let pid = std::process::id();
    let ns = Netns::new("dpwr0");
    ns.enter();
    let tap = format!("dpwr{pid}");
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_tap0,iface={tap}"]
[[port]]
device = "net_tap0"
ip = "10.98.0.2/24"
mac = "02:00:00:98:00:02"
mbufs = 4095
[worker]
spin_us = 5
[tcp]
rx_buffer = 65536
tx_buffer = 65536
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.98.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();

    // Permissive: Rev 0 Reply, then version 0 FPDUs with markers and CRC.
    let listener = ep
        .listen_with(
            7110,
            &ListenConfig {
                mpa_rev0_permissive: true,
                ..ListenConfig::default()
            },
        )
        .unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(16);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let rb = pd.reg_mr(64, Access::LOCAL_WRITE);
    qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![Sge {
            addr: rb.addr(),
            length: 64,
            lkey: rb.stag(),
        }],
    })
    .unwrap();
    let sqp = qp.clone();
    let srv = std::thread::spawn(move || {
        let req = listener.get_request(Duration::from_secs(20)).unwrap();
        assert_eq!(req.peer.revision, 0);
        req.accept(&sqp, &ConnParam::default()).unwrap()
    });
    let mut s = connect("10.98.0.2:7110".parse().unwrap());
    s.write_all(&rdmac_request()).unwrap();
    let mut hdr = vec![0u8; HEADER_LEN];
    read_exact(&mut s, &mut hdr);
    let pd_len = usize::from(Frame::new_unchecked(&hdr[..]).pd_length());
    hdr.resize(HEADER_LEN + pd_len, 0);
    read_exact(&mut s, &mut hdr[HEADER_LEN..]);
    let rep = FrameRepr::parse(&Frame::new_checked(&hdr[..]).unwrap()).unwrap();
    assert_eq!(
        (rep.rev, rep.markers, rep.crc, rep.rejected),
        (0, true, true, false)
    );
    let n = srv.join().unwrap();
    assert_eq!(n.revision, 0);
    let mut ulpdu = Vec::new();
    HeaderRepr {
        last: true,
        ddp_version: 0,
        rdmap_control: RdmapOpcode::Send as u8,
        buffer: BufferRepr::Untagged {
            inv_stag: 0,
            qn: QN_SEND,
            msn: 1,
            mo: 0,
        },
    }
    .emit_to_vec(&mut ulpdu);
    ulpdu.extend_from_slice(b"v0 over the tap!");
    let mut out = Vec::new();
    Framer::new(true, true).emit_ulpdu(&ulpdu, &mut out);
    s.write_all(&out).unwrap();
    let wc = cq
        .wait(Duration::from_secs(10))
        .expect("the v0 Send arrives");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 16)
    );
    assert_eq!(&rb.to_vec()[..16], b"v0 over the tap!");
    let sb = pd.reg_mr(16, Access::LOCAL_WRITE);
    sb.write_at(0, b"v0 from DPDK....");
    qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![Sge {
            addr: sb.addr(),
            length: 16,
            lkey: sb.stag(),
        }],
        signaled: true,
    })
    .unwrap();
    let mut d = Deframer::new(true, true, 1 << 16);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let t0 = Instant::now();
    let mut buf = [0u8; 2048];
    while got.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no FPDU from the dataplane"
        );
        match read_some(&mut s, &mut buf) {
            Ok(0) => panic!("EOF"),
            Ok(k) => d.push(&buf[..k], &mut |u| got.push(u.to_vec())).unwrap(),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    let seg = Segment::new_checked(&got[0][..]).unwrap();
    assert_eq!(seg.ddp_version(), 0);
    assert_eq!(control_version(seg.rdmap_control()), 0);
    assert_eq!(seg.payload(), b"v0 from DPDK....");
    qp.disconnect();
    drop(s);

    // Default listener: closed without a reply.
    let _plain = ep.listen(7111).unwrap();
    let mut s = connect("10.98.0.2:7111".parse().unwrap());
    s.write_all(&rdmac_request()).unwrap();
    let mut b = [0u8; 64];
    let k = match read_some(&mut s, &mut b) {
        Ok(k) => k,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
        Err(e) => panic!("read: {e}"),
    };
    assert_eq!(k, 0, "no reply by default: {:02x?}", &b[..k]);
    drop(dp);
}
