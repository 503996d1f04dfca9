//! The DPDK dataplane: poll-mode workers running smoltcp TCP directly on DPDK port queues, with
//! the iWARP engine ([`crate::conn::Connection`]) run to completion inside each worker.
//!
//! [`Dataplane::start`] initialises the EAL from a [`DataplaneConfig`], sets up every port (one
//! rx/tx queue pair per worker core, an mbuf pool per port) and starts one pinned worker per
//! core. Applications use the same verbs objects as over kernel TCP (`Device`, `Pd`, `Mr`,
//! `Cq`, `Qp`, `post_send`/`post_recv`/`poll`) and rdma_cm-shaped entry points on an
//! [`Endpoint`], which is a backend of [`crate::cm`]'s one connection API: `Net::from(endpoint)`
//! gives the same [`cm::Net::connect`], [`cm::Net::listen`] -> [`cm::Listener::get_request`] ->
//! [`cm::ConnRequest::accept`] / [`cm::ConnRequest::reject`], [`ConnParam`] and [`CmError`] as
//! kernel TCP (the startup sequence and the pump step are `cm`'s; the worker moves the bytes).
//!
//! Multi-queue: a port of several queues has one worker per queue, each with its own sockets;
//! [`steer`] gives every connection one owner by its 4-tuple, opens connections from local
//! ports their worker owns, and hands a frame that arrived on another worker's queue (a NIC's
//! RSS, net_af_packet's fanout) to its owner. Over queue-paired vdevs (net_ring pairs,
//! net_memif) both dpwarp ends compute the same owner, so nothing is handed over there.

mod contention;
pub mod device;
pub mod fault;
mod rehearsal;
mod report;
pub mod steer;
mod worker;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::cm::{self, CmError, ConnParam, ListenConfig};
use crate::config::{parse_cidr, parse_mac, DataplaneConfig};
use crate::dpdk::{DpdkError, Eal, Mempool, Port, PortConf};
use crate::mpa::Negotiated;
use crate::verbs::Qp;

pub use report::{PortReport, PortReporter, RssReport, TsoReport};
use worker::{Cmd, CmdSender, Incoming, Worker, WorkerParts};
pub use worker::{CopyStats, WorkerStats, WARM_FOR};

/// RTE_PKTMBUF_HEADROOM in the Debian DPDK 22.11 build.
const MBUF_HEADROOM: u16 = 128;
// The largest MTU's frame fits one mbuf's 16-bit data room (`crate::config::MAX_MTU`).
const _: () =
    assert!(MBUF_HEADROOM as u32 + crate::config::MAX_MTU as u32 + 14 + 4 <= u16::MAX as u32);

/// Why the dataplane could not start.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A DPDK call failed (EAL init, port lookup/setup, mempool creation).
    #[error("DPDK: {0}")]
    Dpdk(#[from] DpdkError),
    /// The configuration is inconsistent with itself or with what the device offers (bad
    /// `ring:` name, too many queues, MTU above the driver maximum, bad address), or a worker
    /// thread could not be spawned.
    #[error("config: {0}")]
    Config(String),
}

/// How the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMode {
    /// Each worker on its own thread, pinned to its core (applications hand work over
    /// through the post rings and reap completions from the CQs).
    Background,
    /// No worker threads: the application drives each worker from its own thread with
    /// [`Driver::poll`] (run to completion: one thread per core, no hand-off). Blocking calls
    /// on an [`Endpoint`] (connect, listen, get_request, accept) poll its workers while they
    /// wait; between them nothing moves unless some thread polls.
    Driven,
}

/// A running dataplane.
pub struct Dataplane {
    endpoints: Vec<Endpoint>,
    workers: Vec<WorkerRef>,
    ports: Vec<Port>,
    /// What each configured port's PMD granted.
    reporter: PortReporter,
}

/// One worker as the rest of the process sees it.
struct WorkerRef {
    cmds: CmdSender,
    thread: Option<JoinHandle<()>>,
    /// Driven mode: the worker itself (polled by whoever holds a [`Driver`]).
    driven: Option<Arc<WorkerLock>>,
    cpu: Option<usize>,
}

/// A driven worker's lock. Drivers only ever try it (`poll_driven`): the thread that holds it
/// runs the worker, the others have nothing to wait for. A spin lock's release is a plain
/// store where std's `Mutex` swaps (an atomic read-modify-write on every pass, on the path of
/// every message: scripts/instructions counts them); the rare blocking `lock` (counters,
/// stop) yields the CPU while it waits.
pub(crate) type WorkerLock = spin::mutex::SpinMutex<Worker, spin::relax::Yield>;

/// A handle to drive one worker from an application thread ([`WorkerMode::Driven`]).
#[derive(Clone)]
pub struct Driver {
    worker: Arc<WorkerLock>,
    cpu: Option<usize>,
    index: usize,
}

impl Driver {
    /// Pin the calling thread to the worker's core and give it a DPDK lcore id (for the
    /// mempool cache): call once on the thread that will poll.
    pub fn attach(&self) {
        attach_driving_thread(self.cpu);
    }

    /// One pass of the worker's phases (rx, deliver, post, transmit, completions); true if
    /// anything happened. A thread that already polls it (another clone) makes this a no-op.
    pub fn poll(&self) -> bool {
        poll_driven(&self.worker, Worker::poll_once)
    }

    /// The send side of a pass only (`Worker::poll_transmit`): what a QP's doorbell runs
    /// (`Qp::drive_with`). A no-op while another thread polls the worker.
    pub fn poll_transmit(&self) -> bool {
        poll_driven(&self.worker, Worker::poll_transmit)
    }

    /// The worker's counters.
    pub fn stats(&self) -> WorkerStats {
        self.worker.lock().stats()
    }

    /// The CPU the worker belongs to.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// The worker's index in the dataplane.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// `pass` (a whole pass or its send side) over a driven worker, unless another thread is
/// polling it right now (a driver that panicked mid-pass released the lock as it unwound).
fn poll_driven(worker: &WorkerLock, pass: fn(&mut Worker) -> bool) -> bool {
    match worker.try_lock() {
        Some(mut w) => pass(&mut w),
        None => false,
    }
}

/// Start `port`. A net_memif client connects to its server's socket at start and fails when
/// the server is not accepting yet, e.g. still tearing down the connection of the client
/// before it (seen when one client process follows another at once: "memif_connect_client():
/// Failed to connect socket", then rte_eth_dev_start fails): such a start is tried again for
/// up to 10 s (a server process starting on a loaded machine took more than 3), with a log
/// line, before the error is returned. A client whose connection was taken while its server
/// was still starting may get no link (seen: start succeeded, the link never came up within
/// 20 s; DPDK's client does not connect again by itself): with no link 2 s after a start, it
/// is stopped and started again, within the same 10 s.
fn start_port(
    port: &crate::dpdk::Port,
    device: &str,
    memif_client: bool,
) -> Result<(), DataplaneError> {
    let retry_for = if device.starts_with("net_memif") {
        Duration::from_secs(10)
    } else {
        Duration::ZERO
    };
    let t0 = Instant::now();
    loop {
        match port.start() {
            Ok(()) if !memif_client => return Ok(()),
            Ok(()) => {
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(2) {
                    if port.link().is_ok_and(|l| l.1) {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if t0.elapsed() >= retry_for {
                    // The caller's own wait for the link decides.
                    return Ok(());
                }
                log::warn!(
                    "dataplane: {device}: started, but no link after 2 s (its server may have taken the connection while still starting); connecting again"
                );
                let _ = port.stop();
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) if t0.elapsed() < retry_for => {
                log::warn!("dataplane: {device}: start failed ({e}); trying again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Pin the calling thread to `cpu` (the worker it will drive) and give it a DPDK lcore id.
fn attach_driving_thread(cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = crate::dpdk::set_thread_cpus(&[c]) {
            log::warn!("dataplane: could not pin the driving thread to CPU {c}: {e}");
        }
    }
    crate::dpdk::register_thread();
}

/// One port's address: connect from it and listen on it.
#[derive(Clone)]
pub struct Endpoint {
    ip: Ipv4Addr,
    mtu: usize,
    workers: Arc<Vec<CmdSender>>,
    /// Driven mode: the workers to poll while a call waits.
    driven: Arc<Vec<Arc<WorkerLock>>>,
    /// The CPU of each worker (same order as `workers`).
    cpus: Arc<Vec<Option<usize>>>,
    /// The dataplane-wide index of the first worker (a port's workers are consecutive).
    base: usize,
    next: Arc<AtomicUsize>,
    /// `[tcp] max_startups`: a listener's MPA startups in progress per worker by default.
    max_startups: usize,
}

/// The CPU of the `k`-th worker: its port's `cores` entry, else the process's CPUs (as they
/// were before EAL init) round robin, so that workers sit on distinct cores when there are
/// enough of them.
fn worker_cpu(configured: Option<usize>, k: usize, cpus: &[usize]) -> Option<usize> {
    configured.or_else(|| (!cpus.is_empty()).then(|| cpus[k % cpus.len()]))
}

/// What [`plan_port`] decided for a port.
struct PortPlan {
    /// The link MTU dpwarp uses.
    mtu: u16,
    /// The MTU given to the PMD (0: its default).
    pmd_mtu: u16,
    ck_mode: device::ChecksumMode,
    ck_off: device::CksumOffload,
    /// TCP payload sent by reference (external mbufs).
    zero_copy: bool,
    /// A net_memif client in memif's zero-copy mode.
    memif_zc: bool,
    /// TCP segmentation offload (`tso`), or why not.
    tso: Result<device::Tso, String>,
}

/// The port `device` names: one side of a `ring:NAME:a|b` pair (made on first use, `nq`
/// queues), or a vdev or PCI device by name.
fn open_port(
    eal: &Eal,
    device: &str,
    nq: u16,
    rings: &mut HashMap<String, (Port, Port)>,
) -> Result<Port, DataplaneError> {
    let Some(rest) = device.strip_prefix("ring:") else {
        return Ok(Port::by_name(eal, device)?);
    };
    let (name, side) = rest
        .rsplit_once(':')
        .ok_or_else(|| DataplaneError::Config(format!("{device}: expected ring:NAME:a|b")))?;
    let pair = match rings.get(name) {
        Some(p) => *p,
        None => {
            let p = Port::ring_pair(eal, name, nq, 4096)?;
            rings.insert(name.to_string(), p);
            p
        }
    };
    match side {
        "a" => Ok(pair.0),
        "b" => Ok(pair.1),
        _ => Err(DataplaneError::Config(format!(
            "{device}: side must be a or b"
        ))),
    }
}

/// MTU, checksum offload, transmit by reference for port `pc` (`port_id`) of a PMD that
/// reports `info`: what the config asks, checked against what the PMD offers.
fn plan_port(
    cfg: &DataplaneConfig,
    pc: &crate::config::PortConfig,
    port_id: u16,
    info: &crate::dpdk::PortInfo,
) -> Result<PortPlan, DataplaneError> {
    let mtu = if pc.mtu == 0 { 1500 } else { pc.mtu };
    if pc.mtu != 0 && info.max_mtu != 0 && pc.mtu > info.max_mtu {
        return Err(DataplaneError::Config(format!(
            "{}: mtu {} above the {} maximum {}",
            pc.device, pc.mtu, info.driver, info.max_mtu
        )));
    }
    // Checksum offload where the PMD offers it (config `checksum`, device::plan); not
    // with a capture port, whose copies must carry the final checksums.
    let (ck_mode, ck_off) = if pc.capture.is_some() {
        let driver = format!("{} with a capture port", info.driver);
        device::plan(&pc.checksum, &driver, 0, 0)
    } else {
        device::plan(
            &pc.checksum,
            &info.driver,
            info.tx_offload_capa,
            info.rx_offload_capa,
        )
    }
    .map_err(|e| DataplaneError::Config(format!("{}: {e}", pc.device)))?;
    // Faults: checksums computed and verified in software whatever `checksum` says
    // (a corrupted frame must be refused, and an offloading PMD would checksum a frame
    // corrupted on tx as if it were right).
    let (ck_mode, ck_off) = match &pc.faults {
        Some(f) => {
            log::warn!(
                "dataplane: port {} ({}): FAULT INJECTION on: {f:?}; IPv4/TCP checksums \
         computed and verified in software",
                port_id,
                pc.device
            );
            (
                device::ChecksumMode::Software,
                device::CksumOffload::default(),
            )
        }
        None => (ck_mode, ck_off),
    };
    // Transmit by reference (config `tx_zero_copy`): PMDs that take chained mbufs
    // and read them in software (no IOVA is set on the external buffers), and no
    // transmit checksum offload (not tried over chains).
    // Not on memif's zero-copy client: its descriptors describe frames by offset into
    // this process's EAL memory, which a TCP transmit ring is not in (`DataplaneConfig::
    // memif_zero_copy_client`); payloads are copied into pool mbufs there instead, and
    // memif copies nothing on this side.
    let memif_zc = info.driver == "net_memif" && cfg.memif_zero_copy_client(&pc.device);
    let zc_able = ["net_ring", "net_memif", "net_af_packet"].contains(&info.driver.as_str())
        && info.tx_offload_capa & crate::dpdk::offload::TX_MULTI_SEGS != 0
        && ck_off.tx_bits() == 0
        && !memif_zc;
    let zero_copy = match pc.tx_zero_copy.as_str() {
        "off" => false,
        "on" if !zc_able => {
            return Err(DataplaneError::Config(format!(
                "{}: tx_zero_copy = \"on\": {} (tx offloads {}) cannot send chained \
         external mbufs here; use \"auto\" or \"off\"",
                pc.device,
                info.driver,
                ck_off.describe()
            )))
        }
        _ => zc_able,
    };
    // net_memif reports a 1518-octet maximum frame (DPDK 22.11 `memif_dev_info`), so
    // `rte_eth_dev_configure` refuses a larger MTU; its data path has no such limit: a
    // frame longer than a descriptor's buffer goes as a chain of descriptors
    // (MEMIF_DESC_FLAG_NEXT) and is copied into the receiving mbuf as one frame. The
    // link MTU of two dpwarp processes over memif is then what both configure; the PMD
    // keeps its default.
    let tso = plan_tso(cfg, pc, info, mtu, ck_off);
    let pmd_mtu = if info.driver == "net_tap" && tso.is_ok() {
        // net_tap (DPDK 22.11-23.11 `pmd_tx_burst`) refuses a TSO packet whose tso_segsz plus
        // l2_len, l3_len and l4_len (a whole frame, Ethernet header included) exceeds the
        // PMD's MTU: its MTU is raised by the Ethernet header so that frames of the link's
        // MTU pass (`plan_tso` checked that the PMD takes it).
        mtu + 14
    } else if info.driver == "net_memif" && pc.mtu > 1500 {
        log::info!(
            "dataplane: {}: mtu {} used by dpwarp on the link; the PMD keeps its default \
             (it reports a 1518-octet maximum frame but carries longer ones in chained \
             descriptors)",
            pc.device,
            pc.mtu
        );
        0
    } else {
        pc.mtu
    };
    Ok(PortPlan {
        mtu,
        pmd_mtu,
        ck_mode,
        ck_off,
        zero_copy,
        memif_zc,
        tso,
    })
}

/// TCP segmentation offload for port `pc` (setting `tso`) of a PMD that reports `info`, at
/// link MTU `mtu` with checksums `ck_off` offloaded: granted, or why not.
fn plan_tso(
    cfg: &DataplaneConfig,
    pc: &crate::config::PortConfig,
    info: &crate::dpdk::PortInfo,
    mtu: u16,
    ck_off: device::CksumOffload,
) -> Result<device::Tso, String> {
    use crate::dpdk::offload::{TX_MULTI_SEGS, TX_TCP_TSO};
    let needs = TX_TCP_TSO | TX_MULTI_SEGS;
    if pc.tso == "off" {
        return Err("off".into());
    }
    if info.tx_offload_capa & needs != needs {
        return Err(format!(
            "{} offers tx offloads {}, not tcp_tso with multi_segs",
            info.driver,
            crate::dpdk::offload::tx_names(info.tx_offload_capa)
        ));
    }
    // A capture port's copies and the fault injector work on the frames on the wire, and
    // both keep checksums in software: never with TSO.
    if pc.capture.is_some() {
        return Err("a capture port copies whole frames".into());
    }
    if pc.faults.is_some() {
        return Err("faults inject into whole frames".into());
    }
    // TSO implies the TCP checksum of each segment (rte_mbuf_core.h): smoltcp must leave it.
    if !ck_off.tx_tcp {
        return Err(format!(
            "TCP checksums are not offloaded on transmit (checksum = {:?})",
            pc.checksum
        ));
    }
    if !cfg.tcp.gso {
        return Err("[tcp] gso = false: smoltcp builds no segment beyond one frame".into());
    }
    // One frame of a TSO packet: the headers' mbuf and the one or two its payload lies in.
    if info.nb_mtu_seg_max < 3 {
        return Err(format!(
            "{} takes {} mbufs per frame of a TSO packet; a frame's headers and payload may lie \
             in 3",
            info.driver, info.nb_mtu_seg_max
        ));
    }
    if info.driver == "net_tap" && u32::from(mtu) + 14 > info.settable_mtu() {
        return Err(format!(
            "net_tap takes a TSO packet only if a whole frame, Ethernet header included, is \
             within its MTU (rte_eth_tap.c pmd_tx_burst), and its MTU cannot go above {} \
             (max_rx_pktlen {}) to make room for mtu {mtu} + 14: use mtu <= {}",
            info.settable_mtu(),
            info.max_rx_pktlen,
            info.settable_mtu().saturating_sub(14)
        ));
    }
    Ok(device::Tso {
        max_segs: info.nb_seg_max,
    })
}

/// A started worker: its thread (background mode) or its handle (driven mode).
type StartedWorker = (Option<std::thread::JoinHandle<()>>, Option<Arc<WorkerLock>>);

/// Start a worker from `parts` on `cpu`: its own pinned thread (background), or a handle for
/// the application's threads to drive.
fn start_worker(
    parts: WorkerParts,
    cpu: Option<usize>,
    mode: WorkerMode,
) -> Result<StartedWorker, DataplaneError> {
    let index = parts.index;
    log::info!("dataplane: worker {index} ({mode:?}) on CPU {cpu:?}");
    Ok(match mode {
        WorkerMode::Background => {
            let j = std::thread::Builder::new()
                .name(format!("dpwarp-w{index}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        if let Err(e) = crate::dpdk::set_thread_cpus(&[c]) {
                            log::warn!("dataplane: could not pin worker to CPU {c}: {e}");
                        }
                    }
                    crate::dpdk::register_thread();
                    Worker::new(parts, cpu).run()
                })
                .map_err(|e| DataplaneError::Config(format!("spawn worker: {e}")))?;
            (Some(j), None)
        }
        WorkerMode::Driven => (
            None,
            Some(Arc::new(WorkerLock::new(Worker::new(parts, cpu)))),
        ),
    })
}

impl Dataplane {
    /// Initialise the EAL (once per process), set up the ports and start one pinned worker
    /// thread per queue ([`WorkerMode::Background`]).
    pub fn start(cfg: &DataplaneConfig) -> Result<Dataplane, DataplaneError> {
        Self::start_with(cfg, WorkerMode::Background)
    }

    /// [`Dataplane::start`] in the given mode; with [`WorkerMode::Driven`] take a
    /// [`Driver`] per worker with [`Dataplane::driver`].
    pub fn start_with(
        cfg: &DataplaneConfig,
        mode: WorkerMode,
    ) -> Result<Dataplane, DataplaneError> {
        cfg.validate().map_err(DataplaneError::Config)?;
        remove_stale_memif_sockets(&cfg.eal.args);
        let eal = Eal::init(&cfg.eal.args)?;
        // Pool names are global to the EAL: a second dataplane in the process (other ports,
        // other settings) names its pools apart from the first's.
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let pools = match STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
            0 => "dpw_".to_string(),
            n => format!("dpw{n}_"),
        };
        let mut rings: HashMap<String, (Port, Port)> = HashMap::new();
        let mut endpoints = Vec::new();
        let mut workers = Vec::new();
        let mut ports = Vec::new();
        let mut reports = Vec::new();
        for (pi, pc) in cfg.ports.iter().enumerate() {
            let nq = pc.cores.len().max(1) as u16;
            let port = open_port(eal, &pc.device, nq, &mut rings)?;
            let info = port.info()?;
            if nq > info.max_rx_queues.min(info.max_tx_queues) {
                return Err(DataplaneError::Config(format!(
                    "{}: {} cores need {} queues; {} offers {}",
                    pc.device,
                    nq,
                    nq,
                    info.driver,
                    info.max_rx_queues.min(info.max_tx_queues)
                )));
            }
            let PortPlan {
                mtu,
                pmd_mtu,
                ck_mode,
                ck_off,
                zero_copy,
                memif_zc,
                tso,
            } = plan_port(cfg, pc, port.id(), &info)?;
            let room = MBUF_HEADROOM + (mtu + 14 + 4).max(2048);
            let pool = Mempool::create(eal, &format!("{pools}pool{pi}"), pc.mbufs, 256, room)?;
            port.configure(
                &PortConf {
                    queues: nq,
                    rx_desc: pc.rx_desc,
                    tx_desc: pc.tx_desc,
                    mtu: pmd_mtu,
                    rx_offloads: ck_off.rx_bits(),
                    tx_offloads: ck_off.tx_bits()
                        | if zero_copy {
                            crate::dpdk::offload::TX_MULTI_SEGS
                        } else {
                            0
                        }
                        | if tso.is_ok() {
                            crate::dpdk::offload::TX_TCP_TSO | crate::dpdk::offload::TX_MULTI_SEGS
                        } else {
                            0
                        },
                },
                pool,
            )?;
            start_port(&port, &pc.device, cfg.memif_client(&pc.device))?;
            ports.push(port);
            // Flow steering between the port's workers (steer.rs): each connection has one
            // owner by its 4-tuple, and a NIC's RSS is asked to agree (the symmetric key at
            // configure, a round-robin table here); frames landing elsewhere are handed over.
            let mut steering = if nq > 1 {
                match port.reta_round_robin(nq) {
                    Ok(()) => log::info!(
                        "dataplane: port {}: RSS table of {} entries round robin over {nq} \
                         queues, symmetric key: frames should arrive at their owners",
                        port.id(),
                        info.reta_size
                    ),
                    Err(e) => log::info!(
                        "dataplane: port {} ({}): no RSS table to set ({e}); \
                         frames arriving \
                         at a worker other than their connection's are handed to it",
                        port.id(),
                        info.driver
                    ),
                }
                steer::Steering::for_port(
                    usize::from(nq),
                    u32::from(info.reta_size),
                    usize::from(pc.rx_desc).max(256),
                )
            } else {
                Vec::new()
            }
            .into_iter();
            let mac = match &pc.mac {
                Some(m) => parse_mac(m).map_err(DataplaneError::Config)?,
                None => info.mac,
            };
            let ip = parse_cidr(&pc.ip).map_err(DataplaneError::Config)?;
            let gateway = match &pc.gateway {
                Some(g) => Some(
                    g.parse()
                        .map_err(|e| DataplaneError::Config(format!("gateway {g:?}: {e}")))?,
                ),
                None => None,
            };
            log::info!(
                "dataplane: port {} ({}, driver {}) {} mtu {} queues {} mac {}",
                port.id(),
                pc.device,
                info.driver,
                pc.ip,
                mtu,
                nq,
                crate::config::format_mac(&mac)
            );
            log::info!(
                "dataplane: port {} checksum = {:?}: offload {}; the rest {}",
                port.id(),
                pc.checksum,
                ck_off.describe(),
                ck_mode.describe()
            );
            log::info!(
                "dataplane: port {} tx_zero_copy = {:?}: TCP payload {}",
                port.id(),
                pc.tx_zero_copy,
                if zero_copy {
                    "sent by reference (external mbufs over the transmit rings)"
                } else if memif_zc {
                    "copied into each mbuf (memif zero-copy=yes: frames must lie in EAL memory; \
                     memif copies nothing on this side)"
                } else {
                    "copied into each mbuf"
                }
            );
            // What the PMD made of it all, read back now that the port runs.
            let grant = port.grant()?;
            // TSO as planned, in force only if the PMD kept the offload.
            let tso = tso.and_then(|t| {
                if grant.tx_offloads & crate::dpdk::offload::TX_TCP_TSO != 0 {
                    Ok(t)
                } else {
                    Err(format!(
                        "{} dropped tcp_tso from the tx offloads at configure",
                        info.driver
                    ))
                }
            });
            let report = report::PortReport::new(
                port,
                &info,
                &grant,
                report::Planned {
                    index: pi,
                    config_device: &pc.device,
                    link_mtu: mtu,
                    checksum: &pc.checksum,
                    checksum_offload: ck_off.describe(),
                    tso: report::TsoReport::new(&pc.tso, &tso),
                },
            );
            log::info!(
                "dataplane: port {} granted: {}",
                port.id(),
                report.describe()
            );
            log::info!(
                "dataplane: port {} tso = {:?}: {}",
                port.id(),
                pc.tso,
                match &tso {
                    Ok(t) => format!(
                        "segments of several frames go to {} whole, one mbuf chain each (at \
                         most {} mbufs), and it cuts them",
                        info.driver, t.max_segs
                    ),
                    Err(why) => format!("not used ({why}); segments are cut by the device"),
                }
            );
            reports.push((port, report));
            let capture = match &pc.capture {
                None => None,
                Some(name) => {
                    if nq != 1 {
                        return Err(DataplaneError::Config(format!(
                            "{}: capture needs exactly one worker",
                            pc.device
                        )));
                    }
                    let cp = Port::by_name(eal, name)?;
                    let cpool = Mempool::create(eal, &format!("{pools}cap{pi}"), 4095, 0, room)?;
                    cp.configure(&PortConf::default(), cpool)?;
                    cp.start()?;
                    ports.push(cp);
                    log::info!("dataplane: frames of {} copied to {name}", pc.device);
                    Some((cp, cpool))
                }
            };
            let mut senders = Vec::new();
            let mut driven = Vec::new();
            let mut cpus = Vec::new();
            let base = workers.len();
            for q in 0..nq {
                let (tx, rx) = worker::command_channel(256);
                let index = workers.len();
                // The worker owns its queue: the handle moves into its thread.
                let mut dev = device::DpdkDevice::new(
                    port.claim_queue(q)?,
                    pool,
                    cfg.worker.batch,
                    usize::from(mtu),
                );
                dev.set_checksum_mode(ck_mode);
                dev.set_checksum_offload(ck_off);
                dev.set_gso(cfg.tcp.gso);
                dev.set_tso(tso.as_ref().ok().copied());
                dev.set_mac(mac);
                if zero_copy {
                    dev.enable_zero_copy((cfg.tcp.tx_buffer / 1024).clamp(64, 4096));
                }
                dev.set_faults(pc.faults.clone())
                    .map_err(|e| DataplaneError::Config(format!("{}: {e}", pc.device)))?;
                if let Some(s) = steering.next() {
                    dev.set_steering(s);
                }
                if let Some((cp, cpool)) = capture {
                    dev.set_mirror(cp.claim_queue(0)?, cpool);
                }
                let parts = WorkerParts {
                    index,
                    dev,
                    mac,
                    ip,
                    gateway,
                    mtu: usize::from(mtu),
                    cmds: rx,
                    wcfg: cfg.worker.clone(),
                    tcp: cfg.tcp.clone(),
                };
                let cpu = worker_cpu(pc.cores.get(usize::from(q)).copied(), index, eal.cpus());
                if let Some(c) = cpu {
                    if workers.iter().any(|w: &WorkerRef| w.cpu == Some(c)) {
                        log::warn!(
                            "dataplane: worker {index} shares CPU {c} with another worker ({} CPUs: {:?})",
                            eal.cpus().len(),
                            eal.cpus()
                        );
                    }
                }
                let (thread, core) = start_worker(parts, cpu, mode)?;
                if let Some(w) = &core {
                    driven.push(w.clone());
                }
                senders.push(tx.clone());
                cpus.push(cpu);
                workers.push(WorkerRef {
                    cmds: tx,
                    thread,
                    driven: core,
                    cpu,
                });
            }
            endpoints.push(Endpoint {
                ip: ip.0,
                mtu: usize::from(mtu),
                workers: Arc::new(senders),
                driven: Arc::new(driven),
                cpus: Arc::new(cpus),
                base,
                next: Arc::new(AtomicUsize::new(0)),
                max_startups: cfg.tcp.max_startups,
            });
        }
        // Driven workers that share a CPU with another worker of this process (more workers
        // than CPUs, e.g. one CPU for all) take turns on it: each yields its core after a
        // short idle instead of `DRIVEN_SPIN_ALONE_US` (docs/workers.md "Workers").
        if cfg.worker.driven_spin_us.is_none() {
            for w in &workers {
                let (Some(c), Some(d)) = (w.cpu, &w.driven) else {
                    continue;
                };
                if workers.iter().filter(|o| o.cpu == Some(c)).count() > 1 {
                    let spin = Duration::from_micros(worker::DRIVEN_SPIN_SHARED_US);
                    d.lock().set_driven_spin(spin);
                    log::info!(
                        "dataplane: driven workers share CPU {c}: each yields it after {spin:?} idle"
                    );
                }
            }
        }
        Ok(Dataplane {
            endpoints,
            workers,
            ports,
            reporter: PortReporter::new(reports),
        })
    }

    /// What each configured port's PMD granted (config order), with the link and MTU as they
    /// are now: see [`PortReport`].
    pub fn port_reports(&self) -> Vec<PortReport> {
        self.reporter.reports()
    }

    /// [`Dataplane::port_reports`] from any thread (read after the dataplane stopped, the
    /// links show down).
    pub fn port_reporter(&self) -> PortReporter {
        self.reporter.clone()
    }

    /// The endpoint of the `i`-th configured port.
    pub fn endpoint(&self, i: usize) -> Option<Endpoint> {
        self.endpoints.get(i).cloned()
    }

    /// A handle to drive worker `i` ([`WorkerMode::Driven`]; None in background mode).
    pub fn driver(&self, i: usize) -> Option<Driver> {
        let w = self.workers.get(i)?;
        Some(Driver {
            worker: w.driven.clone()?,
            cpu: w.cpu,
            index: i,
        })
    }

    /// The drivers of every worker of port `i` ([`WorkerMode::Driven`]).
    pub fn port_drivers(&self, i: usize) -> Vec<Driver> {
        let Some(ep) = self.endpoints.get(i) else {
            return Vec::new();
        };
        self.workers
            .iter()
            .enumerate()
            .filter_map(|(k, w)| {
                let d = w.driven.as_ref()?;
                ep.driven
                    .iter()
                    .any(|e| Arc::ptr_eq(e, d))
                    .then(|| self.driver(k))
                    .flatten()
            })
            .collect()
    }

    /// The CPU each worker is pinned to, in worker order.
    pub fn worker_cpus(&self) -> Vec<Option<usize>> {
        self.workers.iter().map(|w| w.cpu).collect()
    }

    /// Counters of every worker. A driven worker's come from its lock when it is free, else
    /// from the thread driving it (a command answered in its next pass): a driver retakes
    /// the lock nanoseconds after each pass, so waiting for the lock could take seconds.
    pub fn stats(&self) -> Vec<WorkerStats> {
        let mut v = Vec::new();
        for w in &self.workers {
            if let Some(d) = &w.driven {
                v.push(driven_stats(d, &w.cmds));
                continue;
            }
            let (rtx, rrx) = crossbeam_channel::bounded(1);
            if w.cmds.send(Cmd::Stats { reply: rtx }).is_ok() {
                if let Ok(s) = rrx.recv_timeout(Duration::from_secs(1)) {
                    v.push(s);
                }
            }
        }
        v
    }

    /// Wait until every port reports link up (memif links come up when the peer process
    /// attaches); false on timeout.
    pub fn wait_link_up(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self
                .ports
                .iter()
                .all(|p| p.link().map(|(_, up)| up).unwrap_or(false))
            {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Port counters (rte_eth_stats) of every configured port.
    pub fn port_stats(&self) -> Vec<crate::dpdk::PortStats> {
        self.ports.iter().filter_map(|p| p.stats().ok()).collect()
    }
}

/// A memif server whose process died leaves its socket file behind and the next server fails
/// with "Address already in use". Remove such a file if nobody accepts connections on it.
fn remove_stale_memif_sockets(args: &[String]) {
    for a in args {
        let Some(v) = a.strip_prefix("--vdev=").or(Some(a.as_str())) else {
            continue;
        };
        if !v.starts_with("net_memif") || !v.contains("role=server") {
            continue;
        }
        if v.contains("socket-abstract=yes") {
            continue;
        }
        let Some(path) = v
            .split(',')
            .find_map(|kv| kv.strip_prefix("socket="))
            .map(std::path::PathBuf::from)
        else {
            continue;
        };
        let is_socket = std::fs::symlink_metadata(&path)
            .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            .unwrap_or(false);
        if is_socket && std::os::unix::net::UnixStream::connect(&path).is_err() {
            log::info!("dataplane: removing stale memif socket {}", path.display());
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        for w in &self.workers {
            let _ = w.cmds.send(Cmd::Stop);
        }
        for w in &mut self.workers {
            if let Some(j) = w.thread.take() {
                let _ = j.join();
            }
            if let Some(d) = &w.driven {
                // Takes the Stop sent above, then lets the closing connections finish
                // (`STOP_DRAIN` at most).
                let mut w = d.lock();
                while !w.is_stopped() {
                    if !w.poll_once() {
                        std::thread::yield_now();
                    }
                }
            }
        }
        for p in &self.ports {
            let _ = p.stop();
            let _ = p.close();
        }
    }
}

/// A driven worker's counters: by its lock if free, else asked of its driver; after 1 s
/// without either (a driver that stopped between passes, holding nothing), by waiting for
/// the lock.
fn driven_stats(d: &WorkerLock, cmds: &CmdSender) -> WorkerStats {
    if let Some(mut w) = d.try_lock() {
        return w.stats();
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    let asked = cmds.send(Cmd::Stats { reply: tx }).is_ok();
    let end = Instant::now() + Duration::from_secs(1);
    loop {
        if let Ok(s) = rx.try_recv() {
            return s;
        }
        // Nobody drives it now: read it here (the command stays for the next driver).
        if let Some(mut w) = d.try_lock() {
            return w.stats();
        }
        if !asked || Instant::now() >= end {
            return d.lock().stats();
        }
        std::thread::yield_now();
    }
}

/// Receive from `rx` within `timeout`, polling the driven workers `driven` meanwhile (a
/// plain blocking receive when there are none).
fn recv_pumping<T>(rx: &Receiver<T>, timeout: Duration, driven: &[Arc<WorkerLock>]) -> Option<T> {
    if driven.is_empty() {
        return rx.recv_timeout(timeout).ok();
    }
    let end = Instant::now() + timeout;
    loop {
        if let Ok(v) = rx.try_recv() {
            return Some(v);
        }
        let mut work = false;
        for w in driven {
            if let Some(mut w) = w.try_lock() {
                work |= w.poll_once();
            }
        }
        if Instant::now() >= end {
            return rx.try_recv().ok();
        }
        if !work {
            std::thread::yield_now();
        }
    }
}

impl Endpoint {
    /// Poll this endpoint's driven workers once ([`WorkerMode::Driven`]; nothing otherwise).
    pub fn poll(&self) -> bool {
        self.driven
            .iter()
            .fold(false, |work, w| poll_driven(w, Worker::poll_once) | work)
    }

    /// The send side of [`Endpoint::poll`] (`Worker::poll_transmit`): what a QP's doorbell
    /// runs (`cm::Net::qp_driver`). A worker another thread is polling right now is left to it.
    pub fn poll_transmit(&self) -> bool {
        self.driven.iter().fold(false, |work, w| {
            poll_driven(w, Worker::poll_transmit) | work
        })
    }

    /// Turn packet fault injection on (`Some`) or off on every queue of this port
    /// ([`fault`], docs/testing.md "Fault injection and the soak"). The port must compute and verify
    /// checksums in software: started with a `[port.faults]` table (all probabilities may be
    /// zero), or with `checksum = "software"` on a PMD without checksum offload. Counters
    /// ([`device::DeviceStats::faults`]) are kept across changes.
    pub fn set_faults(&self, faults: Option<crate::config::FaultConfig>) -> Result<(), String> {
        for w in self.workers.iter() {
            let (rtx, rrx) = crossbeam_channel::bounded(1);
            w.send(Cmd::SetFaults {
                faults: faults.clone(),
                reply: rtx,
            })
            .map_err(|_| "the worker has stopped".to_string())?;
            recv_pumping(&rrx, Duration::from_secs(5), &self.driven)
                .ok_or_else(|| "the worker did not answer".to_string())??;
        }
        Ok(())
    }

    /// Whether the workers of this endpoint are driven by the application.
    pub fn is_driven(&self) -> bool {
        !self.driven.is_empty()
    }

    /// How many workers (queues) serve this port.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Poll this endpoint's `k`-th driven worker once (false if it did nothing, is polled by
    /// another thread right now, or the workers run in the background).
    pub fn poll_worker(&self, k: usize) -> bool {
        self.driven
            .get(k)
            .is_some_and(|w| poll_driven(w, Worker::poll_once))
    }

    /// The send side of [`Endpoint::poll_worker`] (`Worker::poll_transmit`).
    pub fn poll_transmit_worker(&self, k: usize) -> bool {
        self.driven
            .get(k)
            .is_some_and(|w| poll_driven(w, Worker::poll_transmit))
    }

    /// The CPU of this endpoint's `k`-th worker.
    pub fn worker_cpu(&self, k: usize) -> Option<usize> {
        self.cpus.get(k).copied().flatten()
    }

    /// Pin the calling thread to the `k`-th worker's CPU and give it a DPDK lcore id (the
    /// thread that will drive that worker, [`Driver::attach`]).
    pub fn attach_worker(&self, k: usize) {
        attach_driving_thread(self.worker_cpu(k));
    }

    /// The endpoint's IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// EMSS of TCP on this port (IP MTU - 40: smoltcp sends no TCP options on data segments);
    /// MULPDU follows from it (RFC 5044 App. A).
    pub fn emss(&self) -> usize {
        self.mtu - 40
    }

    /// Connect `qp` to `remote` as the MPA initiator (`rdma_connect`); the same as
    /// `Net::from(endpoint).connect(...)`. Workers are used round robin.
    pub fn connect(
        &self,
        remote: SocketAddrV4,
        qp: &Qp,
        param: &ConnParam,
    ) -> Result<Negotiated, CmError> {
        cm::connect_with(qp, param, self.emss(), |qp| {
            let w = self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len();
            let (etx, erx) = crossbeam_channel::bounded(64);
            self.workers[w]
                .send(Cmd::Connect {
                    remote,
                    sh: qp.shared.clone(),
                    events: etx,
                })
                .map_err(|_| CmError::Closed)?;
            let driven = self.driven.clone();
            Ok(Box::new(move |left| recv_pumping(&erx, left, &driven)))
        })
    }

    /// Listen on `port` on every worker (`rdma_listen`; the same as
    /// `Net::from(endpoint).listen(addr)` with `addr`'s port). Every incoming connection's MPA
    /// startup progresses on its own, under the deadline and cap of the config's `[tcp]`
    /// (`mpa_timeout_ms`, `max_startups`); [`cm::Listener::get_request`] returns the next
    /// completed request.
    pub fn listen(&self, port: u16) -> Result<cm::Listener, CmError> {
        self.listen_inner(port, None, false)
    }

    /// [`Endpoint::listen`] with this listener's own MPA startup deadline and cap
    /// (`cfg.mpa_timeout`, `cfg.max_startups`; `cfg.nodelay` does not apply: smoltcp sockets
    /// never use Nagle here) and, with `cfg.mpa_rev0_permissive`, MPA Rev 0 Requests from RDMA
    /// Consortium peers taken too (RFC 5044 App. C).
    pub fn listen_with(&self, port: u16, cfg: &ListenConfig) -> Result<cm::Listener, CmError> {
        self.listen_inner(
            port,
            Some((cfg.mpa_timeout, cfg.max_startups)),
            cfg.mpa_rev0_permissive,
        )
    }

    fn listen_inner(
        &self,
        port: u16,
        startup: Option<(Duration, usize)>,
        mpa_rev0_permissive: bool,
    ) -> Result<cm::Listener, CmError> {
        // Completed MPA Requests wait here for `get_request`: as many as the workers may
        // have startups in progress, as the kernel-TCP listener sizes its own (cm::listen).
        let per_worker = startup.map_or(self.max_startups, |(_, m)| m);
        let (rtx, rrx) =
            crossbeam_channel::bounded(per_worker.max(1).saturating_mul(self.workers.len()));
        for w in self.workers.iter() {
            let (ok_tx, ok_rx) = crossbeam_channel::bounded(1);
            w.send(Cmd::Listen {
                port,
                requests: rtx.clone(),
                startup,
                reply: ok_tx,
                rev0_permissive: mpa_rev0_permissive,
            })
            .map_err(|_| CmError::Closed)?;
            match recv_pumping(&ok_rx, Duration::from_secs(5), &self.driven) {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return Err(CmError::Io(std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        e,
                    )))
                }
                None => return Err(CmError::Timeout),
            }
        }
        Ok(cm::Listener::new(Box::new(DpListener {
            port,
            ep: self.clone(),
            requests: rrx,
        })))
    }
}

/// The dataplane backend of [`cm::Net`]: `Net::from(endpoint)`.
impl cm::NetBackend for Endpoint {
    fn listen(
        &self,
        addr: SocketAddr,
        cfg: Option<&ListenConfig>,
    ) -> Result<cm::Listener, CmError> {
        match cfg {
            None => self.listen(addr.port()),
            Some(c) => self.listen_with(addr.port(), c),
        }
    }

    fn connect(&self, addr: SocketAddr, qp: &Qp, param: &ConnParam) -> Result<Negotiated, CmError> {
        match addr {
            SocketAddr::V4(a) => Endpoint::connect(self, a, qp, param),
            SocketAddr::V6(_) => Err(CmError::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the dataplane reaches IPv4 addresses only",
            ))),
        }
    }

    fn poll(&self) -> bool {
        Endpoint::poll(self)
    }

    fn is_driven(&self) -> bool {
        Endpoint::is_driven(self)
    }

    fn poll_transmit(&self) -> bool {
        Endpoint::poll_transmit(self)
    }

    fn workers(&self) -> usize {
        Endpoint::workers(self)
    }

    fn poll_worker(&self, k: usize) -> bool {
        Endpoint::poll_worker(self, k)
    }

    fn poll_transmit_worker(&self, k: usize) -> bool {
        Endpoint::poll_transmit_worker(self, k)
    }

    fn attach_worker(&self, k: usize) {
        Endpoint::attach_worker(self, k)
    }

    fn worker_cpu(&self, k: usize) -> Option<usize> {
        Endpoint::worker_cpu(self, k)
    }

    fn name(&self) -> &'static str {
        "dpdk"
    }
}

impl From<Endpoint> for cm::Net {
    fn from(ep: Endpoint) -> cm::Net {
        cm::Net::from_backend(Arc::new(ep))
    }
}

/// A dataplane listener (`rdma_listen`), behind a [`cm::Listener`].
struct DpListener {
    port: u16,
    ep: Endpoint,
    requests: Receiver<Incoming>,
}

impl cm::ListenerBackend for DpListener {
    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ep.ip, self.port))
    }

    fn get_request(&self, timeout: Duration) -> Result<cm::ConnRequest, CmError> {
        let inc = recv_pumping(&self.requests, timeout, &self.ep.driven).ok_or(CmError::Timeout)?;
        Ok(self.request(inc))
    }

    fn get_request_undriven(&self, timeout: Duration) -> Result<cm::ConnRequest, CmError> {
        let inc = recv_pumping(&self.requests, timeout, &[]).ok_or(CmError::Timeout)?;
        Ok(self.request(inc))
    }
}

impl DpListener {
    fn request(&self, inc: Incoming) -> cm::ConnRequest {
        // The request names its worker by its dataplane-wide index.
        let index = inc.worker.saturating_sub(self.ep.base) % self.ep.workers.len();
        cm::ConnRequest::new(
            inc.peer,
            inc.raw,
            Some(inc.remote),
            Box::new(DpPending {
                emss: self.ep.emss(),
                driven: self.ep.driven.clone(),
                worker: self.ep.workers[index].clone(),
                index,
                id: inc.id,
            }),
        )
    }
}

impl Drop for DpListener {
    fn drop(&mut self) {
        for w in self.ep.workers.iter() {
            let _ = w.send(Cmd::Unlisten { port: self.port });
        }
    }
}

/// An incoming dataplane connection whose MPA Request arrived, held by its worker until it is
/// accepted or rejected.
struct DpPending {
    emss: usize,
    driven: Arc<Vec<Arc<WorkerLock>>>,
    worker: CmdSender,
    /// The worker's index in the endpoint.
    index: usize,
    id: u64,
}

impl cm::Pending for DpPending {
    fn emss(&self) -> usize {
        self.emss
    }

    fn worker(&self) -> usize {
        self.index
    }

    fn start(self: Box<Self>, qp: &Qp) -> Result<cm::Events, CmError> {
        let (etx, erx) = crossbeam_channel::bounded(64);
        self.worker
            .send(Cmd::Accept {
                id: self.id,
                sh: qp.shared.clone(),
                events: etx,
            })
            .map_err(|_| CmError::Closed)?;
        let driven = self.driven;
        Ok(Box::new(move |left| recv_pumping(&erx, left, &driven)))
    }

    fn reject(self: Box<Self>, frame: Vec<u8>) -> Result<(), CmError> {
        self.worker
            .send(Cmd::Reject {
                id: self.id,
                bytes: frame,
            })
            .map_err(|_| CmError::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpdk::offload::*;

    /// What net_tap reports in DPDK 22.11 (rte_eth_tap.c `tap_dev_info`).
    fn tap() -> crate::dpdk::PortInfo {
        crate::dpdk::PortInfo {
            driver: "net_tap".into(),
            mac: [2, 0, 0, 0, 0, 1],
            max_rx_queues: 16,
            max_tx_queues: 16,
            min_mtu: 68,
            max_mtu: u16::MAX,
            tx_offload_capa: TX_IPV4_CKSUM
                | TX_UDP_CKSUM
                | TX_TCP_CKSUM
                | TX_TCP_TSO
                | TX_MULTI_SEGS,
            rx_offload_capa: RX_IPV4_CKSUM | RX_UDP_CKSUM | RX_TCP_CKSUM,
            reta_size: 0,
            hash_key_size: 40,
            max_rx_pktlen: 1522,
            nb_seg_max: u16::MAX,
            nb_mtu_seg_max: u16::MAX,
        }
    }

    fn config(port_extra: &str, tcp: &str) -> DataplaneConfig {
        DataplaneConfig::parse(&format!(
            "[eal]\nargs=[]\n[[port]]\ndevice='net_tap0'\nip='10.0.0.1/24'\n{port_extra}\n{tcp}"
        ))
        .unwrap()
    }

    /// `tso`: granted where the PMD offers TCP_TSO with MULTI_SEGS, the TCP checksum is
    /// offloaded and smoltcp builds segments of several frames; otherwise the reason.
    #[test]
    fn tso_is_planned_from_the_setting_and_what_the_pmd_offers() {
        let plan = |port_extra: &str, tcp: &str, info: &crate::dpdk::PortInfo| {
            let cfg = config(port_extra, tcp);
            plan_port(&cfg, &cfg.ports[0], 0, info).map(|p| (p.tso, p.pmd_mtu))
        };
        let ok =
            |r: Result<(Result<device::Tso, String>, u16), DataplaneError>| r.unwrap().0.unwrap();
        let why = |r: Result<(Result<device::Tso, String>, u16), DataplaneError>| {
            r.unwrap().0.unwrap_err()
        };
        // net_tap at MTU 1488: granted, and the PMD's MTU raised by the Ethernet header.
        let (t, pmd_mtu) = plan("mtu = 1488", "", &tap()).unwrap();
        assert_eq!(t.unwrap().max_segs, u16::MAX);
        assert_eq!(pmd_mtu, 1502);
        // At 1500 net_tap's MTU would have to reach 1514; it stops at 1504.
        let e = why(plan("", "", &tap()));
        assert!(e.contains("use mtu <= 1490"), "{e}");
        assert_eq!(plan("", "", &tap()).unwrap().1, 0, "the PMD keeps its MTU");
        assert_eq!(why(plan("mtu = 1488\ntso = 'off'", "", &tap())), "off");
        // Another PMD with TSO has no such limit; its chain limit is kept.
        let nic = crate::dpdk::PortInfo {
            driver: "net_x".into(),
            max_rx_pktlen: 9728,
            nb_seg_max: 40,
            ..tap()
        };
        assert_eq!(ok(plan("", "", &nic)).max_segs, 40);
        assert_eq!(plan("", "", &nic).unwrap().1, 0);
        // Whatever keeps checksums or frames in software, or builds no large segment.
        let e = why(plan("checksum = 'software'", "", &nic));
        assert!(e.contains("not offloaded"), "{e}");
        let e = why(plan("checksum = 'trusted-link'", "", &nic));
        assert!(e.contains("not offloaded"), "{e}");
        let e = why(plan("capture = 'net_pcap0'", "", &nic));
        assert!(e.contains("capture"), "{e}");
        let e = why(plan("[port.faults]\ndrop = 0.01", "", &nic));
        assert!(e.contains("faults"), "{e}");
        let e = why(plan("", "[tcp]\ngso = false", &nic));
        assert!(e.contains("gso = false"), "{e}");
        // The offer itself: TSO without MULTI_SEGS is of no use here.
        for capa in [
            TX_TCP_CKSUM | TX_IPV4_CKSUM | TX_MULTI_SEGS,
            TX_TCP_CKSUM | TX_TCP_TSO,
        ] {
            let i = crate::dpdk::PortInfo {
                tx_offload_capa: capa,
                ..nic.clone()
            };
            let e = why(plan("", "", &i));
            assert!(e.contains("not tcp_tso with multi_segs"), "{e}");
        }
        let i = crate::dpdk::PortInfo {
            nb_mtu_seg_max: 2,
            ..nic.clone()
        };
        assert!(why(plan("", "", &i)).contains("mbufs per frame"));
        // virtio offers no IPv4 checksum offload: TSO still, the TCP checksum is the PMD's.
        let virtio = crate::dpdk::PortInfo {
            driver: "net_virtio".into(),
            tx_offload_capa: TX_TCP_CKSUM | TX_UDP_CKSUM | TX_TCP_TSO | TX_MULTI_SEGS,
            ..nic.clone()
        };
        ok(plan("", "", &virtio));
        // The setting itself: auto by default, auto or off.
        assert_eq!(config("", "").ports[0].tso, "auto");
        let e = DataplaneConfig::parse(
            "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='10.0.0.1/24'\ntso='on'\n",
        )
        .unwrap_err();
        assert!(e.contains("tso \"on\" is not auto or off"), "{e}");
    }

    /// net_tap's largest settable MTU is its 1522-octet frame less the Ethernet header and
    /// CRC; a PMD's own max_mtu bounds it otherwise.
    #[test]
    fn settable_mtu_follows_ethdevs_overhead() {
        assert_eq!(tap().settable_mtu(), 1504);
        let i = crate::dpdk::PortInfo {
            max_mtu: 9000,
            max_rx_pktlen: 9018,
            ..tap()
        };
        assert_eq!(i.settable_mtu(), 9000);
    }
}
