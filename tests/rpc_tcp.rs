//! The ONC RPC over kernel TCP baseline (RFC 5531 §11 record marking): every block procedure
//! with the data verified, pipelining, multi-fragment records, and its error answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::tcp::{self, TcpClient, TcpServerHandle};
use dpwarp::wire::oncrpc::{record_mark, AcceptStat, Auth, CallRepr, ReplyRepr, ReplyStat};
use dpwarp::wire::xdr::{XdrReader, XdrWriter};

mod rpc_common;
use rpc_common::threads;

fn start() -> (TcpServerHandle, Arc<BlockStore>) {
    let store = Arc::new(BlockStore::memory(1 << 20));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    (
        tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), reg).unwrap(),
        store,
    )
}

#[test]
fn procedures_with_data_verified_and_pipelined() {
    let (h, store) = start();
    let mut c = TcpClient::connect(h.addr, 8).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let rep = c
        .call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_WRITE,
            &block::write_args(100, data.clone()),
        )
        .unwrap();
    assert_eq!(
        block::decode_write(&mut rep.results().unwrap()).unwrap(),
        Ok(300_000)
    );
    assert_eq!(store.read(100, 300_000).unwrap(), data);
    // 50 pipelined READs, 8 in flight, each checked.
    let mut got = 0;
    let check = |rep: tcp::TcpReply, k: u64| {
        let d = block::decode_read(&mut rep.results().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(d, data[(k * 1000) as usize..(k * 1000 + 4000) as usize]);
    };
    let mut order = std::collections::VecDeque::new();
    for k in 0..50u64 {
        let (_, earlier) = c
            .submit(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                &block::read_args(100 + k * 1000, 4000),
            )
            .unwrap();
        order.push_back(k);
        if let Some(rep) = earlier {
            check(rep, order.pop_front().unwrap());
            got += 1;
        }
    }
    while c.in_flight() > 0 {
        check(c.wait_next().unwrap(), order.pop_front().unwrap());
        got += 1;
    }
    assert_eq!(got, 50);
    let rep = c
        .call(BLOCK_PROG, BLOCK_VERS, block::PROC_GETATTR, &Body::new())
        .unwrap();
    assert_eq!(
        block::decode_getattr(&mut rep.results().unwrap())
            .unwrap()
            .unwrap()
            .size,
        1 << 20
    );
    let rep = c.call(BLOCK_PROG, 9, 0, &Body::new()).unwrap();
    assert!(matches!(
        rep.header.stat,
        ReplyStat::Accepted {
            stat: AcceptStat::ProgMismatch { low: 1, high: 1 },
            ..
        }
    ));
    h.stop();
}

fn read_record(s: &mut TcpStream) -> Vec<u8> {
    let mut hdr = [0u8; 4];
    s.read_exact(&mut hdr).unwrap();
    let n = (u32::from_be_bytes(hdr) & 0x7fff_ffff) as usize;
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).unwrap();
    v
}

#[test]
fn multi_fragment_record_and_garbage() {
    let (h, _store) = start();
    let mut s = TcpStream::connect(h.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = XdrWriter::new();
    CallRepr {
        xid: 77,
        prog: BLOCK_PROG,
        vers: BLOCK_VERS,
        proc_: block::PROC_NULL,
        cred: Auth::None,
        verf: Auth::None,
    }
    .emit(&mut w);
    let b = w.as_slice();
    // The call split over three fragments.
    let mut out = Vec::new();
    out.extend_from_slice(&record_mark(5, false));
    out.extend_from_slice(&b[..5]);
    out.extend_from_slice(&record_mark(10, false));
    out.extend_from_slice(&b[5..15]);
    out.extend_from_slice(&record_mark(b.len() - 15, true));
    out.extend_from_slice(&b[15..]);
    s.write_all(&out).unwrap();
    let rep = ReplyRepr::parse(&mut XdrReader::new(&read_record(&mut s))).unwrap();
    assert_eq!(rep, ReplyRepr::success(77));
    // A truncated call header: GARBAGE_ARGS with its xid.
    let mut g = record_mark(8, true).to_vec();
    g.extend_from_slice(&[0, 0, 0, 78, 0, 0, 0, 0]);
    s.write_all(&g).unwrap();
    let rep = ReplyRepr::parse(&mut XdrReader::new(&read_record(&mut s))).unwrap();
    assert_eq!(rep, ReplyRepr::accepted(78, AcceptStat::GarbageArgs));
    // RPC version 3: RPC_MISMATCH.
    let mut m = record_mark(12, true).to_vec();
    m.extend_from_slice(&[0, 0, 0, 79, 0, 0, 0, 0, 0, 0, 0, 3]);
    s.write_all(&m).unwrap();
    let rep = ReplyRepr::parse(&mut XdrReader::new(&read_record(&mut s))).unwrap();
    assert_eq!(rep.stat, ReplyStat::RpcMismatch { low: 2, high: 2 });
    // A record announcing more than the limit: the server closes the connection.
    s.write_all(&record_mark(tcp::MAX_RECORD + 1, true))
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "connection closed");
    h.stop();
}

/// Both ways of waiting (`TcpPoll`), client and server in every pairing: records larger than
/// the staging buffer and the direct-read threshold, odd lengths (XDR padding), pipelined, each
/// verified octet for octet.
#[test]
fn busy_polled_and_blocking_large_records_verified() {
    let store = Arc::new(BlockStore::memory(8 << 20));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let data: Vec<u8> = (0..(3 << 20) + 5u32)
        .map(|i| (i * 13 % 251) as u8)
        .collect();
    let sizes = [
        1usize,
        16383,
        16384,
        16385,
        65537,
        (1 << 20) + 3,
        data.len(),
    ];
    for server in [tcp::TcpPoll::Blocking, tcp::TcpPoll::Busy] {
        let h =
            tcp::serve_with(SocketAddr::from(([127, 0, 0, 1], 0)), reg.clone(), server).unwrap();
        for client in [tcp::TcpPoll::Blocking, tcp::TcpPoll::Busy] {
            let mut c = TcpClient::connect_with(h.addr, 4, client).unwrap();
            let rep = c
                .call(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    &block::write_args(1, data.clone()),
                )
                .unwrap();
            assert_eq!(
                block::decode_write(&mut rep.results().unwrap()).unwrap(),
                Ok(data.len() as u32)
            );
            assert_eq!(store.read(1, data.len()).unwrap(), data);
            let mut order = std::collections::VecDeque::new();
            let check = |rep: tcp::TcpReply, n: usize| {
                let d = block::decode_read(&mut rep.results().unwrap())
                    .unwrap()
                    .unwrap();
                assert!(d == data[..n], "READ of {n} ({server:?}/{client:?})");
            };
            for &n in sizes.iter().chain(sizes.iter().rev()) {
                let (_, earlier) = c
                    .submit(
                        BLOCK_PROG,
                        BLOCK_VERS,
                        block::PROC_READ,
                        &block::read_args(1, n as u32),
                    )
                    .unwrap();
                order.push_back(n);
                if let Some(rep) = earlier {
                    check(rep, order.pop_front().unwrap());
                }
            }
            while c.in_flight() > 0 {
                check(c.wait_next().unwrap(), order.pop_front().unwrap());
            }
        }
        h.stop();
    }
}

/// A READ reply is written straight from the store's memory, but never while waiting for room
/// in the socket: a client that asks for 24 MiB and reads nothing stalls only its own
/// connection; another client's WRITE into the store (which needs the store's write lock)
/// and READ go through meanwhile.
#[test]
fn a_client_that_stops_reading_stalls_only_itself() {
    let store = Arc::new(BlockStore::memory(4 << 20));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let h = tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), reg).unwrap();
    let stalled = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    stalled.set_recv_buffer_size(4096).unwrap();
    stalled.connect(&h.addr.into()).unwrap();
    let mut stalled: TcpStream = stalled.into();
    for xid in 0..12u32 {
        let mut w = XdrWriter::new();
        CallRepr {
            xid,
            prog: BLOCK_PROG,
            vers: BLOCK_VERS,
            proc_: block::PROC_READ,
            cred: Auth::None,
            verf: Auth::None,
        }
        .emit(&mut w);
        w.put_raw(&block::read_args(0, 2 << 20).to_inline());
        let mut rec = record_mark(w.len(), true).to_vec();
        rec.extend_from_slice(w.as_slice());
        stalled.write_all(&rec).unwrap();
    }
    // Let the server fill the socket and wait for room.
    std::thread::sleep(Duration::from_millis(300));
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = h.addr;
    std::thread::spawn(move || {
        let mut c = TcpClient::connect(addr, 1).unwrap();
        let data = vec![0x5a; 1 << 20];
        let rep = c
            .call(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_WRITE,
                &block::write_args(4096, data.clone()),
            )
            .unwrap();
        let w = block::decode_write(&mut rep.results().unwrap()).unwrap();
        let rep = c
            .call(
                BLOCK_PROG,
                BLOCK_VERS,
                block::PROC_READ,
                &block::read_args(4096, 1 << 20),
            )
            .unwrap();
        let r = block::decode_read(&mut rep.results().unwrap())
            .unwrap()
            .unwrap();
        let _ = tx.send((w, r == data));
    });
    let got = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        got,
        Ok((Ok(1 << 20), true)),
        "the other client's WRITE and READ while one client stalls"
    );
    drop(stalled);
    h.stop();
}

/// The baseline's threads are named (`rpc-tcp-accept`, `rpc-tcp-conn`) and run where the thread
/// that started the server was placed: rpc-bench starts it on the RDMA server's CPU so both
/// protocols get the same CPUs.
#[test]
fn server_threads_are_named_and_keep_the_starting_threads_cpus() {
    let cpu = dpwarp::affinity::thread_cpus().into_iter().max().unwrap();
    let h = std::thread::spawn(move || {
        dpwarp::affinity::set_thread_cpus(&[cpu]).unwrap();
        let mut reg = Registry::new();
        block::register(&mut reg, Arc::new(BlockStore::memory(4096)));
        tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), reg).unwrap()
    })
    .join()
    .unwrap();
    let mut c = TcpClient::connect(h.addr, 1).unwrap();
    c.call(BLOCK_PROG, BLOCK_VERS, block::PROC_NULL, &Body::new())
        .unwrap();
    let seen: Vec<_> = threads()
        .into_iter()
        .filter(|(name, _)| name.starts_with("rpc-tcp-"))
        .collect();
    // Other tests' servers run in this process too, unpinned: ours are the pinned ones.
    for name in ["rpc-tcp-accept", "rpc-tcp-conn"] {
        assert!(
            seen.contains(&(name.to_string(), cpu.to_string())),
            "no {name} thread on CPU {cpu}: {seen:?}"
        );
    }
    drop(c);
    h.stop();
}
