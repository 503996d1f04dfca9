//! The streaming scenario of tests/dpdk_align.rs (software checksums: smoltcp cuts every
//! segment) and tests/dpdk_gso.rs (a trusted link: the device cuts segments smoltcp builds
//! several frames long, `[tcp] gso`): RFC 5044 Appendix A under streaming.

use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::capture::Alignment;
use dpwarp::cm::ConnParam;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::{Dataplane, WorkerStats};
use dpwarp::verbs::smallvec;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

use super::{advertise, advertised, pattern, shipped_config, unique};

const REGION: usize = 1 << 20;
/// Write sizes cycled through: none is a multiple of MULPDU, so every message ends in a short
/// FPDU; 100 B fits a segment with others (packing).
const SIZES: [usize; 4] = [65536, 10000, 100, 33333];
const WRITES: usize = 96;

/// configs/net_pcap.toml (a net_ring pair, every frame of port a captured) with its rings and
/// capture named uniquely from `tag`, edited by `edit`: a client streams RDMA Writes of
/// several sizes (each message's last FPDU is short) and small Sends back to back to a server
/// on TCP port `port`; the target region must hold every Write. Returns the capture's
/// analysis (the ports stopped, the pcap flushed), both workers' counters taken before the
/// stop, and the config.
pub fn stream_writes(
    tag: &str,
    port: u16,
    edit: impl Fn(&mut DataplaneConfig),
) -> (Alignment, Vec<WorkerStats>, DataplaneConfig) {
    let dir = std::env::temp_dir().join(format!("dpwarp-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("align.pcap");
    let mut cfg = shipped_config(
        "net_pcap.toml",
        &[
            ("target/demo/dpdk.pcap", pcap.to_str().unwrap()),
            ("dpwpcap", &unique(tag)),
        ],
    );
    edit(&mut cfg);
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(port).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let recv_mr = spd.reg_mr(64, Access::LOCAL_WRITE);
        let target = spd.reg_mr(REGION, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&recv_mr, 0, 64)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        let adv = advertise(&target);
        let param = ConnParam {
            private_data: adv,
            ..ConnParam::default()
        };
        req.accept(&qp, &param).unwrap();
        // The client's final Send follows every Write on the stream.
        let wc = cq.wait(Duration::from_secs(30)).expect("final send");
        assert_eq!(wc.status, WcStatus::Success);
        let got = target.to_vec();
        assert!(
            qp.wait_closed(Duration::from_secs(20)),
            "client did not disconnect"
        );
        got
    });

    let cq = Cq::new(256);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(REGION, Access::LOCAL_WRITE);
    let neg = client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), port),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    let pdata = neg.peer_private_data.clone();
    let (raddr, rkey) = advertised(&pdata);

    // The expected final image of the target region, built as the Writes are posted.
    let mut expect = vec![0u8; REGION];
    let mut off = 0;
    let mut posted = 0;
    let mut done = 0;
    for i in 0..WRITES {
        let n = SIZES[i % SIZES.len()];
        if off + n > REGION {
            off = 0;
        }
        // Each Write has its own source range so that posting ahead never rewrites bytes a
        // queued Write has yet to send.
        // Keep at most 8 Writes outstanding (one per source slot).
        while posted - done >= 8 {
            let wc = cq.wait(Duration::from_secs(10)).expect("write completion");
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
        let sbase = (i % 8) * (REGION / 8);
        let n_src = n;
        let data = pattern(i as u8, n_src);
        src.write_at(sbase, &data);
        expect[off..off + n_src].copy_from_slice(&data);
        qp.post_send(SendWr {
            wr_id: i as u64,
            opcode: Opcode::Write {
                remote_addr: raddr + off as u64,
                rkey,
            },
            sg_list: smallvec![sge(&src, sbase, n_src)],
            signaled: true,
        })
        .unwrap();
        posted += 1;
        off += n_src;
    }
    while done < posted {
        let wc = cq.wait(Duration::from_secs(10)).expect("write completion");
        assert_eq!(wc.status, WcStatus::Success);
        done += 1;
    }
    qp.post_send(SendWr {
        wr_id: 999,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 8)],
        signaled: true,
    })
    .unwrap();
    let wc = cq.wait(Duration::from_secs(10)).expect("send completion");
    assert_eq!(wc.status, WcStatus::Success);
    thread::sleep(Duration::from_millis(200));
    qp.disconnect();
    let got = server.join().unwrap();
    if let Some(i) = (0..REGION).find(|&i| got[i] != expect[i]) {
        panic!(
            "the target region differs from the Writes at {i}: got {:?} expected {:?}",
            &got[i..(i + 16).min(REGION)],
            &expect[i..(i + 16).min(REGION)]
        );
    }
    let stats = dp.stats();
    drop(dp); // stops the ports: the pcap PMD flushes and closes its file

    let bytes = std::fs::read(&pcap).expect("the capture was written");
    let a = dpwarp::capture::analyse(&bytes, 1 << 28).unwrap();
    eprintln!(
        "{} of {} data segments begin with an FPDU header ({:.2} %); longest frame {} octets",
        a.aligned,
        a.data_segments,
        100.0 * a.fraction(),
        a.max_frame
    );
    let _ = std::fs::remove_dir_all(&dir);
    (a, stats, cfg)
}

/// What both scenarios assert of the capture: many data segments, every flow followed to
/// its end (no gap, no unparsable frame), a stream several times the transmit ring (so
/// segments across its wrap are among them), and every data segment beginning with an FPDU.
pub fn assert_all_aligned(a: &Alignment, cfg: &DataplaneConfig) {
    assert!(a.data_segments > 1000, "{a:?}");
    assert_eq!(a.skipped_flows, 0, "{a:?}");
    let streamed: usize = (0..WRITES).map(|i| SIZES[i % SIZES.len()]).sum();
    assert!(
        streamed > 2 * cfg.tcp.tx_buffer,
        "the stream must wrap the ring"
    );
    assert_eq!(a.aligned, a.data_segments, "{a:?}");
}
