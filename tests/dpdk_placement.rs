//! Thread placement on the DPDK dataplane (background workers): `rte_eal_init` pins the thread
//! that calls it to the main lcore (`-l 0` in every shipped config), and threads created later
//! inherit that mask. The dataplane must undo that: the initialising thread and application
//! threads keep the process's CPUs, each worker thread sits alone on its own CPU (distinct
//! CPUs for the two workers of a two-port setup when the machine has two), and each worker is
//! a registered lcore (so its mbuf allocations use the mempool's per-lcore cache).
//! One EAL per process: the only EAL test of this binary.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

mod dp_common;
use dp_common::{pattern, shipped_config, unique};

/// `Cpus_allowed_list` of every thread of this process, by thread name.
fn thread_cpus() -> Vec<(String, Vec<usize>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = e.unwrap().path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let name = std::fs::read_to_string(dir.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        v.push((name, parse_list(&list)));
    }
    v
}

/// `0-1,3` -> [0, 1, 3].
fn parse_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

#[test]
fn workers_sit_on_distinct_cores_and_application_threads_keep_the_process_mask() {
    let before = dpwarp::dpdk::thread_cpus();
    assert!(!before.is_empty());
    let ring = unique("dpwplace");
    let cfg = shipped_config("net_ring.toml", &[("dpwring", &ring)]);
    assert!(cfg.eal.args.windows(2).any(|w| w == ["-l", "0"]));
    let dp = Dataplane::start(&cfg).expect("dataplane");

    // The thread that ran rte_eal_init (this one) got its CPUs back.
    assert_eq!(
        dpwarp::dpdk::thread_cpus(),
        before,
        "main thread mask after EAL init"
    );
    // An application thread created afterwards inherits the process mask, not CPU 0.
    let app = thread::spawn(dpwarp::dpdk::thread_cpus).join().unwrap();
    assert_eq!(app, before, "application thread mask");

    // Traffic, so the workers have been through their loops.
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    const N: usize = 64 * 1024;
    let listener = server_ep.listen(4795).unwrap();
    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(16);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let mr = spd.reg_mr(N, Access::LOCAL_WRITE);
        qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&mr, 0, N)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &ConnParam::default()).unwrap();
        let wc = cq.wait(Duration::from_secs(10)).expect("recv completion");
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(mr.to_vec(), pattern(5, N));
        qp.wait_closed(Duration::from_secs(10));
    });
    let cq = Cq::new(16);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(N, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(5, N));
    client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4795),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, N)],
        signaled: true,
    })
    .unwrap();
    assert_eq!(
        cq.wait(Duration::from_secs(10)).unwrap().status,
        WcStatus::Success
    );

    // Each worker thread may run on exactly one CPU, the one the dataplane reports.
    let threads = thread_cpus();
    let cpus = dp.worker_cpus();
    assert_eq!(cpus.len(), 2);
    for (i, cpu) in cpus.iter().enumerate() {
        let cpu = cpu.expect("worker placed");
        let name = format!("dpwarp-w{i}");
        let (_, mask) = threads
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no thread {name} in {threads:?}"));
        assert_eq!(mask, &vec![cpu], "{name} mask");
        assert!(before.contains(&cpu));
    }
    if before.len() >= 2 {
        assert_ne!(
            cpus[0], cpus[1],
            "two workers on one CPU with {before:?} available"
        );
    }
    let stats = dp.stats();
    assert_eq!(stats.len(), 2);
    for (i, s) in stats.iter().enumerate() {
        assert!(s.pinned, "worker {i} not pinned: {s:?}");
        assert!(s.lcore.is_some(), "worker {i} has no lcore id: {s:?}");
        assert_eq!(Some(s.ran_on), s.cpu);
    }
    qp.disconnect();
    server.join().unwrap();
}
