//! The peer of the TERMINATE-at-close tests: a raw iWARP initiator (the sans-IO engine over a
//! kernel TCP socket whose reading it controls) that provokes a TERMINATE while the server's
//! RDMA Writes fill its send buffer.
#![allow(dead_code)]

use dpwarp::verbs::smallvec;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dpwarp::conn::{ConnConfig, ConnEvent, Connection};
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{MemoryTable, PdId};
use dpwarp::verbs::{Access, Opcode, SendWr, Sge};

/// What the server writes into the peer's region (its address and STag are the private data
/// of the peer's MPA Request: 8 + 4 octets, big-endian).
pub const LEN: usize = 32 << 20;

/// The peer: the sans-IO engine over a socket whose reading it controls. It takes the first
/// 64 KiB of the server's Writes, stops reading, sends an RDMA Write to a bogus STag, waits,
/// then reads to the end of the stream. Returns the connection events seen.
pub fn peer(addr: SocketAddr) -> Vec<ConnEvent> {
    let mem = MemoryTable::new();
    let sink = mem.register(PdId(0), LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let mut pd = sink.addr().to_be_bytes().to_vec();
    pd.extend_from_slice(&sink.stag().to_be_bytes());
    let cfg = ConnConfig {
        mpa: MpaConfig {
            private_data: pd,
            ..MpaConfig::default()
        },
        ..ConnConfig::default()
    };
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut conn = Connection::initiator(cfg, mem.clone(), Instant::now());
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    conn.poll_transmit(&mut out);
    write_retry(&mut sock, &out);
    while !conn.is_established() {
        let n = read_retry(&mut sock, &mut buf).unwrap();
        assert!(n > 0, "EOF during startup");
        conn.on_bytes(&buf[..n], Instant::now());
    }
    let mut first = 0usize;
    while first < 64 * 1024 {
        let n = read_retry(&mut sock, &mut buf).unwrap();
        assert!(n > 0, "EOF before the server's Writes");
        first += n;
        conn.on_bytes(&buf[..n], Instant::now());
    }
    // Stop reading: the server's send buffer fills. Then an RDMA Write to an STag the server
    // never advertised (RFC 5040 §7.1 case 2: it answers with a TERMINATE).
    std::thread::sleep(Duration::from_millis(200));
    conn.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: 0,
            rkey: 0x5eed_0000,
        },
        sg_list: smallvec![Sge {
            addr: sink.addr(),
            length: 64,
            lkey: sink.stag(),
        }],
        signaled: true,
    })
    .unwrap();
    out.clear();
    conn.poll_transmit(&mut out);
    write_retry(&mut sock, &out);
    std::thread::sleep(Duration::from_millis(300));
    // Read until the TERMINATE or the end of the stream.
    let terminated = |ev: &[ConnEvent]| {
        ev.iter()
            .any(|e| matches!(e, ConnEvent::TerminateReceived(_)))
    };
    while !terminated(&events) {
        match read_retry(&mut sock, &mut buf) {
            Ok(0) => break,
            Ok(n) => conn.on_bytes(&buf[..n], Instant::now()),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}"),
        }
        while let Some(ev) = conn.poll_event() {
            events.push(ev);
        }
    }
    while let Some(ev) = conn.poll_event() {
        events.push(ev);
    }
    events
}

pub fn assert_terminated(events: &[ConnEvent], what: &str) {
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ConnEvent::TerminateReceived(_))),
        "{what}: the stream ended without the server's TERMINATE: {events:?}"
    );
}

/// `read`, retried when a signal interrupts it (net_tap signals the process).
fn read_retry(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// `write_all`, retried likewise.
fn write_retry(s: &mut TcpStream, mut b: &[u8]) {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("write: {e}"),
        }
    }
}
