//! The first program on the DPDK dataplane: a server and a client in one process, each on its
//! own `net_ring` port (configs/net_ring.toml: no hugepages, no NIC, no kernel setup), smoltcp
//! TCP under the iWARP engine on poll-mode worker threads. The client advertises a buffer in
//! the MPA private data (as rping does), the server RDMA Reads it and answers with a Send.
//! The verbs calls are the same as over kernel TCP (`examples/verbs_pingpong.rs`); only the
//! `Net` the connections are made on differs.
//!
//! Run (root: DPDK): `cargo run --example dpdk_pingpong`

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use dpwarp::cm::{ConnParam, Net};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The EAL, the two ports and their workers, from the config (as `dpwarp demo` does).
    let cfg = DataplaneConfig::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/net_ring.toml"),
    )?;
    let dp = Dataplane::start(&cfg)?;
    let server_net = Net::from(dp.endpoint(0).ok_or("no port 0")?);
    let client_net = Net::from(dp.endpoint(1).ok_or("no port 1")?);
    // Port 0's address (10.90.0.1 in the config) and a TCP port of our choosing (on DPDK the
    // listener takes the port asked; 0 does not pick one as on kernel TCP).
    let listener = server_net.listen(SocketAddr::from(([10, 90, 0, 1], 7174)))?;
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
        let pdata = req.private_data();
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
        // A Send's completion says it left, not that it arrived: the QP stays up (it drops,
        // and disconnects, when this thread returns) until the client has received it.
        thread::sleep(Duration::from_millis(100));
        Ok(())
    });

    let pd = dev.alloc_pd();
    let cq = Cq::new(16);
    let msg = b"hello over iWARP on DPDK";
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
    client_net.connect(addr, &qp, &param)?;
    let wc = cq
        .wait(Duration::from_secs(5))
        .ok_or("no Recv completion")?;
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(echo.to_vec(), msg);
    println!(
        "client: {:?} received {:?}",
        wc.status,
        String::from_utf8_lossy(&echo.to_vec())
    );
    server.join().expect("server thread")?;
    qp.disconnect();
    Ok(())
}
