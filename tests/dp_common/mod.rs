//! Shared pieces of the in-process dataplane tests (dpdk_ring, dpdk_align, dpdk_jumbo,
//! dpdk_jumbo_max, dpdk_multi): a shipped config with test-specific edits, the target advertisement the server
//! puts in its MPA private data (addr then STag, big endian, like rping's `rping_rdma_info`),
//! and a data pattern.

#![allow(dead_code)]

pub mod align;
pub mod jumbo;

use std::net::SocketAddrV4;
use std::time::Duration;

use dpwarp::cm::{ConnParam, Listener};
use dpwarp::config::{DataplaneConfig, PortConfig};
use dpwarp::dataplane::Endpoint;
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Mr, Opcode, Pd, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};

/// `configs/<file>` with each `(from, to)` replaced (unique ring names, MTU, cores, ...).
pub fn shipped_config(file: &str, edits: &[(&str, &str)]) -> DataplaneConfig {
    let path = format!("{}/configs/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{path} has no {from:?}");
        text = text.replace(from, to);
    }
    DataplaneConfig::parse(&text).unwrap()
}

/// `configs/net_ring.toml` with its rings named uniquely for this process (`tag`) and `edit`
/// applied to both ports (software checksums for fault injection, `tx_zero_copy`, ...).
pub fn ring_config(tag: &str, edit: impl Fn(&mut PortConfig)) -> DataplaneConfig {
    let mut cfg = shipped_config("net_ring.toml", &[("dpwring", &unique(tag))]);
    cfg.ports.iter_mut().for_each(edit);
    cfg
}

/// A ring name unique to this test process (tests run in parallel, each with its own EAL).
pub fn unique(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100000)
}

/// The server's advertisement of `mr` in its MPA private data.
pub fn advertise(mr: &Mr) -> Vec<u8> {
    let mut adv = mr.addr().to_be_bytes().to_vec();
    adv.extend_from_slice(&mr.stag().to_be_bytes());
    adv
}

/// Listen on `port` of `ep`, take the first connection request (within 10 s) and accept it on
/// `qp`, advertising `target` in the MPA private data. The listener is returned, to keep.
pub fn accept_advertising(ep: &Endpoint, port: u16, qp: &Qp, target: &Mr) -> Listener {
    accept_advertising_then(ep, port, qp, target, || {})
}

/// [`accept_advertising`], calling `listening` once the port listens: a client on another
/// thread must not connect before that (its SYN would be answered with a RST).
pub fn accept_advertising_then(
    ep: &Endpoint,
    port: u16,
    qp: &Qp,
    target: &Mr,
    listening: impl FnOnce(),
) -> Listener {
    let listener = ep.listen(port).unwrap();
    listening();
    let req = listener.get_request(Duration::from_secs(10)).unwrap();
    req.accept(
        qp,
        &ConnParam {
            private_data: advertise(target),
            ..ConnParam::default()
        },
    )
    .unwrap();
    listener
}

/// Connect `qp` from `ep` to `server` (with the default parameters) and read the target the
/// server advertised in its MPA private data ([`accept_advertising`]): (address, rkey).
pub fn connect_to_advertiser(ep: &Endpoint, server: SocketAddrV4, qp: &Qp) -> (u64, u32) {
    let neg = ep.connect(server, qp, &ConnParam::default()).unwrap();
    advertised(&neg.peer_private_data)
}

/// A receive WR for the first `len` octets of `mr`.
pub fn recv_wr(mr: &Mr, len: usize) -> RecvWr {
    RecvWr {
        wr_id: 0,
        sg_list: smallvec![sge(mr, 0, len)],
    }
}

/// The client's reading of an [`advertise`]ment: (address, rkey).
pub fn advertised(pdata: &[u8]) -> (u64, u32) {
    (
        u64::from_be_bytes(pdata[0..8].try_into().unwrap()),
        u32::from_be_bytes(pdata[8..12].try_into().unwrap()),
    )
}

/// A byte pattern that differs per seed and per position.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// One end of a 64-octet Send ping-pong: a QP, its CQ and a 64-octet buffer.
pub struct End {
    pub qp: Qp,
    pub cq: Cq,
    pub buf: Mr,
}

impl End {
    pub fn new(pd: &Pd) -> End {
        let cq = Cq::new(64);
        let qp = Qp::new(pd, &QpInitAttr::new(&cq));
        let buf = pd.reg_mr(64, Access::LOCAL_WRITE);
        End { qp, cq, buf }
    }

    pub fn post_recv(&self) {
        self.qp
            .post_recv(RecvWr {
                wr_id: 0,
                sg_list: smallvec![sge(&self.buf, 0, 64)],
            })
            .unwrap();
    }

    pub fn send(&self, seed: u8) {
        self.buf.write_at(0, &pattern(seed, 64));
        self.qp
            .post_send(SendWr {
                wr_id: 1,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.buf, 0, 64)],
                signaled: true,
            })
            .unwrap();
    }

    /// The next receive (Send completions on the way are taken too); checks its bytes.
    pub fn recv(&self, seed: u8) {
        loop {
            let wc = self.cq.wait(Duration::from_secs(20)).expect("a completion");
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(self.buf.to_vec(), pattern(seed, 64));
                return;
            }
        }
    }
}
