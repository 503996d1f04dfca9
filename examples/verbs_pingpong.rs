//! A minimal verbs program: a server and a client over kernel TCP loopback; the client advertises
//! a buffer in the MPA private data, the server RDMA Reads it and answers with a Send.
//!
//! Run: `cargo run --example verbs_pingpong`

use dpwarp::verbs::smallvec;
use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use dpwarp::cm::{self, ConnParam, Listener};
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = listener.local_addr()?;
    let dev = Device::open();

    let sdev = dev.clone();
    let server = thread::spawn(move || -> Result<(), String> {
        let pd = sdev.alloc_pd();
        let cq = Cq::new(16);
        let req = listener
            .get_request(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        // The client put (addr, rkey, len) of its buffer in the private data.
        let pdata = &req.peer.private_data;
        let raddr = u64::from_be_bytes(pdata[0..8].try_into().unwrap());
        let rkey = u32::from_be_bytes(pdata[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(pdata[12..16].try_into().unwrap()) as usize;
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        req.accept(&qp, &ConnParam::default())
            .map_err(|e| e.to_string())?;
        let buf = pd.reg_mr(len, Access::LOCAL_WRITE);
        qp.post_send(SendWr {
            wr_id: 1,
            opcode: Opcode::Read {
                remote_addr: raddr,
                rkey,
            },
            sg_list: smallvec![sge(&buf, 0, len)],
            signaled: true,
        })
        .map_err(|e| e.to_string())?;
        let wc = cq
            .wait(Duration::from_secs(5))
            .ok_or("no Read completion")?;
        assert_eq!(wc.status, WcStatus::Success);
        println!(
            "server: RDMA Read got {:?}",
            String::from_utf8_lossy(&buf.to_vec())
        );
        qp.post_send(SendWr {
            wr_id: 2,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&buf, 0, len)],
            signaled: true,
        })
        .map_err(|e| e.to_string())?;
        cq.wait(Duration::from_secs(5))
            .ok_or("no Send completion")?;
        Ok(())
    });

    let pd = dev.alloc_pd();
    let cq = Cq::new(16);
    let msg = b"hello over iWARP";
    let mine = pd.reg_mr(msg.len(), Access::LOCAL_WRITE | Access::REMOTE_READ);
    mine.write_at(0, msg);
    let echo = pd.reg_mr(msg.len(), Access::LOCAL_WRITE);
    let mut adv = mine.addr().to_be_bytes().to_vec();
    adv.extend_from_slice(&mine.stag().to_be_bytes());
    adv.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    let param = ConnParam {
        private_data: adv,
        ..ConnParam::default()
    };
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    // Post the receive before connecting: the server's Send may come right after its Read.
    qp.post_recv(RecvWr {
        wr_id: 7,
        sg_list: smallvec![sge(&echo, 0, msg.len())],
    })?;
    cm::connect_tcp(addr, &qp, &param)?;
    let wc = cq
        .wait(Duration::from_secs(5))
        .ok_or("no Recv completion")?;
    println!(
        "client: {:?} received {:?}",
        wc.status,
        String::from_utf8_lossy(&echo.to_vec())
    );
    server.join().expect("server thread")?;
    qp.disconnect();
    Ok(())
}
