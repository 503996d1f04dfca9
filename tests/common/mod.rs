//! Shared helpers for the end-to-end tests: two endpoints connected over the in-memory link or
//! kernel TCP loopback through the verbs/CM API.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use dpwarp::cm::{self, CmError, ConnParam, ConnRequest, Connected, Listener};
use dpwarp::transport::memlink::{self, FaultConfig};
use dpwarp::verbs::{Cq, Device, Pd, QpInitAttr, WcStatus, WorkCompletion};

/// Which byte stream joins the two endpoints.
#[derive(Debug, Clone)]
pub enum Link {
    Kernel,
    Mem(FaultConfig),
}

/// One side of a connected pair.
pub struct Side {
    pub pd: Pd,
    pub cq: Cq,
    pub conn: Connected,
}

/// Connect a client and a server over `link`. `server_setup` runs on the server before accept
/// (e.g. to post receives via the returned QP is impossible before accept, so it only sees the PD).
pub fn connect_pair(
    link: Link,
    client_param: ConnParam,
    server_param: ConnParam,
) -> Result<(Side, Side), CmError> {
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let cpd = dev.alloc_pd();
    let scq = Cq::new(1024);
    let ccq = Cq::new(1024);
    let sattr = QpInitAttr::new(&scq);
    let cattr = QpInitAttr::new(&ccq);
    let (server, client) = match link {
        Link::Kernel => {
            let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
            let addr = l.local_addr()?;
            let spd2 = spd.clone();
            let server = thread::spawn(move || {
                let req = l.get_request(Duration::from_secs(10))?;
                req.accept(&spd2, &sattr, &server_param)
            });
            let client = cm::connect_tcp(addr, &cpd, &cattr, &client_param);
            (server.join().expect("server thread"), client)
        }
        Link::Mem(f) => {
            let (c, s) = memlink::pair(f);
            let spd2 = spd.clone();
            let server = thread::spawn(move || {
                let req = ConnRequest::read(Box::new(s), Duration::from_secs(10))?;
                req.accept(&spd2, &sattr, &server_param)
            });
            let client = cm::connect(Box::new(c), &cpd, &cattr, &client_param);
            (server.join().expect("server thread"), client)
        }
    };
    Ok((
        Side {
            pd: cpd,
            cq: ccq,
            conn: client?,
        },
        Side {
            pd: spd,
            cq: scq,
            conn: server?,
        },
    ))
}

/// Wait for one completion and require success.
pub fn wc_ok(cq: &Cq) -> WorkCompletion {
    let wc = cq
        .wait(Duration::from_secs(10))
        .expect("completion within 10 s");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

/// Wait for one completion of any status.
pub fn wc_any(cq: &Cq) -> WorkCompletion {
    cq.wait(Duration::from_secs(10))
        .expect("completion within 10 s")
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(167).wrapping_add(seed ^ (i >> 8) as u8))
        .collect()
}
