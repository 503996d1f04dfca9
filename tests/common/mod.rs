//! Shared helpers for the end-to-end tests: two endpoints connected over the in-memory link or
//! kernel TCP loopback through the verbs/CM API.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use dpwarp::cm::{self, CmError, ConnParam, ConnRequest, Listener};
use dpwarp::mpa::Negotiated;
use dpwarp::transport::memlink::{self, LinkFaults};
use dpwarp::verbs::{Cq, Device, Pd, Qp, QpInitAttr, WcStatus, WorkCompletion};

/// Which byte stream joins the two endpoints.
#[derive(Debug, Clone)]
pub enum Link {
    Kernel,
    Mem(LinkFaults),
}

/// One endpoint: a PD, a CQ and a QP (not yet connected: post receives, then `connect_pair`).
pub struct Side {
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    /// Filled in by `connect_pair`.
    pub n: Option<Negotiated>,
}

impl Side {
    pub fn new() -> Side {
        let dev = Device::open();
        let pd = dev.alloc_pd();
        let cq = Cq::new(1024);
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        Side {
            pd,
            cq,
            qp,
            n: None,
        }
    }

    pub fn negotiated(&self) -> &Negotiated {
        self.n.as_ref().expect("connected")
    }
}

/// Connect `client` (initiator) and `server` (responder) over `link`.
pub fn connect_sides(
    link: Link,
    client: &mut Side,
    server: &mut Side,
    client_param: ConnParam,
    server_param: ConnParam,
) -> Result<(), CmError> {
    let sqp = server.qp.clone();
    let (s, c) = match link {
        Link::Kernel => {
            let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
            let addr = l.local_addr()?;
            let server = thread::spawn(move || {
                let req = l.get_request(Duration::from_secs(10))?;
                req.accept(&sqp, &server_param)
            });
            let c = cm::connect_tcp(addr, &client.qp, &client_param);
            (server.join().expect("server thread"), c)
        }
        Link::Mem(f) => {
            let (ce, se) = memlink::pair(f);
            let server = thread::spawn(move || {
                let req = ConnRequest::read(Box::new(se), Duration::from_secs(10))?;
                req.accept(&sqp, &server_param)
            });
            let c = cm::connect(Box::new(ce), &client.qp, &client_param);
            (server.join().expect("server thread"), c)
        }
    };
    client.n = Some(c?);
    server.n = Some(s?);
    Ok(())
}

/// Fresh sides connected over `link`.
pub fn connect_pair(
    link: Link,
    client_param: ConnParam,
    server_param: ConnParam,
) -> Result<(Side, Side), CmError> {
    let mut c = Side::new();
    let mut s = Side::new();
    connect_sides(link, &mut c, &mut s, client_param, server_param)?;
    Ok((c, s))
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
        .map(|i| {
            (i as u8)
                .wrapping_mul(167)
                .wrapping_add(seed ^ (i >> 8) as u8)
        })
        .collect()
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS's pick for port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Ask the kernel to drop `path`'s pages from the page cache: its data written out, then
/// `posix_fadvise(DONTNEED)` from a thread on each CPU of this process (a page that a CPU added
/// lately may sit in that CPU's LRU batch, which only that CPU drains, and then it stays).
/// Best effort: a caller that needs a page gone checks and tries again.
pub fn evict_from_page_cache(path: &std::path::Path) {
    std::fs::File::open(path).unwrap().sync_all().unwrap();
    let cpus = dpwarp::affinity::thread_cpus();
    for cpu in if cpus.is_empty() { vec![0] } else { cpus } {
        let p = path.to_path_buf();
        thread::spawn(move || {
            let _ = dpwarp::affinity::set_thread_cpus(&[cpu]);
            let f = std::fs::File::open(&p).unwrap();
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        })
        .join()
        .unwrap();
    }
}
