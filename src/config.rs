//! Dataplane configuration files (`configs/*.toml`): EAL arguments, ports with their IPv4
//! address, worker cores, queue sizes, TCP buffer sizes. See docs/dataplane.md.

use std::path::Path;

use serde::Deserialize;

/// One dataplane setup.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Free text shown in logs.
    #[serde(default)]
    pub description: String,
    /// EAL arguments (`[eal]` table).
    pub eal: EalConfig,
    /// Ports this process drives; each gets its own workers.
    #[serde(rename = "port")]
    pub ports: Vec<PortConfig>,
    /// Poll-mode worker behaviour (`[worker]` table), shared by all ports.
    #[serde(default)]
    pub worker: WorkerConfig,
    /// smoltcp TCP socket sizing (`[tcp]` table).
    #[serde(default)]
    pub tcp: TcpConfig,
}

/// EAL arguments, passed verbatim to `rte_eal_init` (without the program name).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EalConfig {
    /// Arguments such as `-l 0`, `--no-huge`, `--no-pci`, `--vdev=net_memif0,...`.
    pub args: Vec<String>,
}

/// A port: a `--vdev` by its device name, or one side of an in-process ring pair
/// (`ring:NAME:a` / `ring:NAME:b`, made with `rte_eth_from_rings`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Device name as looked up with `rte_eth_dev_get_port_by_name` (e.g. `net_memif0`), or
    /// `ring:NAME:a|b` for one side of an in-process `net_ring` pair.
    pub device: String,
    /// IPv4 address with prefix, e.g. `10.90.0.1/24`.
    pub ip: String,
    /// Default gateway, if any.
    #[serde(default)]
    pub gateway: Option<String>,
    /// Override the port's MAC (`02:00:00:00:00:01`).
    #[serde(default)]
    pub mac: Option<String>,
    /// Worker cores (one worker and one rx/tx queue pair each). Empty: one unpinned worker.
    #[serde(default)]
    pub cores: Vec<usize>,
    /// Descriptors per rx queue (`nb_rx_desc` of `rte_eth_rx_queue_setup`; default 1024).
    #[serde(default = "d_desc")]
    pub rx_desc: u16,
    /// Descriptors per tx queue (`nb_tx_desc` of `rte_eth_tx_queue_setup`; default 1024).
    #[serde(default = "d_desc")]
    pub tx_desc: u16,
    /// IP MTU; 0 = the device default (1500). Up to [`MAX_MTU`] where the vdev allows (its
    /// `max_mtu`; net_ring has none, net_memif needs `bsize` >= MTU + 14).
    #[serde(default)]
    pub mtu: u16,
    /// Mbufs in the port's pool.
    #[serde(default = "d_mbufs")]
    pub mbufs: u32,
    /// A capture port (e.g. `net_pcap0` created with `--vdev=net_pcap0,tx_pcap=FILE`) that gets
    /// a copy of every frame this port's (single) worker receives and sends.
    #[serde(default)]
    pub capture: Option<String>,
    /// IPv4/TCP checksums: "auto" (default: the PMD computes and verifies those it offers to,
    /// smoltcp the rest), "offload" (as auto, but an error unless the PMD offers IPv4 and TCP
    /// checksum offload both ways), "software" (smoltcp computes and verifies them) or
    /// "trusted-link" (neither computed nor verified; only for net_ring/net_memif between dpwarp
    /// processes, where frames move through shared memory and cannot be corrupted in flight -
    /// MPA's CRC32c still covers every FPDU). Never use it towards a kernel or a real NIC.
    /// "tx-only": computed on tx, not verified on rx - for AF_PACKET/tap links to virtio guests
    /// whose frames arrive with only partial (offloaded) checksums.
    #[serde(default = "d_checksum")]
    pub checksum: String,
    /// Transmit by reference: "auto" (default: on where the PMD takes chained mbufs and reads
    /// them in software - net_ring, net_memif, net_af_packet - and no transmit checksum is
    /// offloaded), "on" (an error where auto would not), "off" (every segment's payload is
    /// copied into its mbuf). On, a segment is a header mbuf chained to an external mbuf
    /// pointing into the socket's transmit ring (docs/datapath.md "Copies").
    #[serde(default = "d_checksum")]
    pub tx_zero_copy: String,
    /// TCP segmentation offload: "auto" (default: where the PMD offers `TCP_TSO` with
    /// `MULTI_SEGS` and TCP checksums are offloaded to it, a segment smoltcp builds of several
    /// frames (`[tcp] gso`) goes to the PMD whole, as one mbuf chain, and the NIC cuts it) or
    /// "off" (the device cuts it in software). Never with faults or a capture port
    /// (docs/dataplane.md "TCP segmentation offload").
    #[serde(default = "d_checksum")]
    pub tso: String,
    /// Packet fault injection under smoltcp (`[port.faults]`, for soak tests; absent by
    /// default, and then the data path does not look at it beyond one branch). A port with
    /// faults always computes and verifies IPv4/TCP checksums in software, whatever
    /// `checksum` says (docs/testing.md "Fault injection and the soak").
    #[serde(default)]
    pub faults: Option<FaultConfig>,
}

/// TCP congestion control of the DPDK connections (`[tcp] congestion_control`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    /// CUBIC (RFC 9438), as Linux (default).
    #[default]
    Cubic,
    /// Reno (RFC 5681) with NewReno's recovery (RFC 6582).
    Reno,
    /// None: only the peer's receive window limits what is in flight (for a dedicated
    /// point-to-point link, never a shared network).
    None,
}

/// Which frames a [`FaultConfig`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultDirection {
    /// Frames received from the port, before smoltcp sees them (default).
    #[default]
    Rx,
    /// Frames smoltcp built, before the port sends them (the peer must verify checksums).
    Tx,
    /// Both.
    Both,
}

/// Seeded packet faults on one port: each probability (0.0..=1.0) is drawn independently per
/// frame from a generator seeded with `seed`, so a run can be repeated.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Seed of the fault generator (each worker queue adds its index).
    #[serde(default)]
    pub seed: u64,
    /// Drop the frame.
    #[serde(default)]
    pub drop: f64,
    /// Pass the frame twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Hold the frame back and pass it after the next one (or on the next poll if no other
    /// comes).
    #[serde(default)]
    pub reorder: f64,
    /// Flip `corrupt_bytes` octets at random positions anywhere in the Ethernet frame of an
    /// IPv4 frame (ARP is left alone: it has no checksum and a real link's FCS protects it).
    #[serde(default)]
    pub corrupt: f64,
    /// Octets flipped per corruption (1..=16, default 1). A single flipped octet is always
    /// detected by the IPv4/TCP checksum when it lands in IP or TCP octets (RFC 1071); several
    /// can cancel out.
    #[serde(default = "d_corrupt_bytes")]
    pub corrupt_bytes: u8,
    /// Corrupt a TCP payload octet and fix up the TCP checksum: a corruption no checksum
    /// catches, left to MPA's CRC32c (RFC 5044 §4.4; that terminates the connection, RFC 5044
    /// §8). For tests of the CRC path.
    #[serde(default)]
    pub corrupt_neutral: f64,
    /// Drop a TCP segment that carries FIN (a peer whose every FIN is lost, for tests of how
    /// a close ends then).
    #[serde(default)]
    pub drop_fin: f64,
    /// Received frames, sent frames or both.
    #[serde(default)]
    pub direction: FaultDirection,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 0,
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            corrupt_bytes: d_corrupt_bytes(),
            corrupt_neutral: 0.0,
            drop_fin: 0.0,
            direction: FaultDirection::Rx,
        }
    }
}

impl FaultConfig {
    /// Probabilities in 0..=1, `corrupt_bytes` in 1..=16.
    pub fn validate(&self) -> Result<(), String> {
        for (k, v) in [
            ("drop", self.drop),
            ("drop_fin", self.drop_fin),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
            ("corrupt_neutral", self.corrupt_neutral),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("faults.{k} = {v}: a probability in 0.0..=1.0"));
            }
        }
        if !(1..=16).contains(&self.corrupt_bytes) {
            return Err(format!(
                "faults.corrupt_bytes = {}: 1..=16",
                self.corrupt_bytes
            ));
        }
        Ok(())
    }
}

/// Poll-mode worker behaviour.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Packets per rx/tx burst.
    #[serde(default = "d_batch")]
    pub batch: usize,
    /// Busy-poll without ever sleeping or yielding (one dedicated core per worker). When false
    /// the worker spins `spin_us` after the last work, then yields its core (`sched_yield`) on
    /// every idle loop for 2 ms, then sleeps `idle_sleep_us` per idle loop (shared cores).
    #[serde(default)]
    pub busy_poll: bool,
    /// Microseconds to keep spinning after the last work before yielding (default 0: on two
    /// shared cores every microsecond a worker keeps the core is one the application thread
    /// waiting for its completion does not get; docs/workers.md "Two cores").
    #[serde(default = "d_spin")]
    pub spin_us: u64,
    /// Microseconds to sleep per idle loop once `spin_us` has passed (default 50).
    #[serde(default = "d_sleep")]
    pub idle_sleep_us: u64,
    /// Microseconds between sweeps, for what no frame or post announces (smoltcp's
    /// retransmission, delayed-ACK, keep-alive and close timers of quiet connections; a post
    /// that raced with its QP's adoption). One sweep in 64 visits every connection the worker
    /// holds; the others only those whose socket timers are due, those closing and the
    /// active ones. Other passes cost what the busy connections need (docs/workers.md
    /// "Workers"). Default 1000; larger values make timers of quiet connections late by up
    /// to that much. A sweep is also followed by at least ten times its own length without
    /// one, so that with thousands of connections not every pass is a sweep.
    #[serde(default = "d_sweep")]
    pub sweep_us: u64,
    /// Driven mode (no worker thread; the application's thread runs the passes): microseconds
    /// without work after which the passes yield the core (`sched_yield`, once every 16 idle
    /// passes) until work comes again. Unset: 50 (more than a round trip between two pinned
    /// processes, so a ping-pong or a stream on cores of its own never yields), or 2 for a
    /// worker that shares its CPU with another worker of the process (more workers than
    /// CPUs). Two driven processes on one core cannot know of each other: set a few
    /// microseconds there, so that the one waiting lets the other run instead of spinning out
    /// its time slice, or turn on `detect_shared_cpu` (docs/workers.md "Workers").
    /// `busy_poll = true` never yields.
    #[serde(default)]
    pub driven_spin_us: Option<u64>,
    /// With `driven_spin_us` unset, a driven worker watches whether its thread takes turns on
    /// its CPU with another process's (its run delay, `/proc/thread-self/schedstat`, read once
    /// per 100 ms of idle passes) and while it does yields after 2 us instead of 50: for two
    /// driven processes placed on one core, where neither can see the other's placement (a
    /// 64 B ping-pong: about 56 us one way with the 50 us spin, 5 with 2). Off by default: a
    /// worker on a core of its own gains nothing from it, and a CPU shared with a thread
    /// that keeps it busy is not detected as shared (docs/workers.md "Two cores").
    #[serde(default)]
    pub detect_shared_cpu: bool,
    /// Keep the send and receive paths warm while the application is quiet: a worker idle
    /// for this many microseconds runs a 64 B Send through a private pair of QPs (the verbs
    /// and engine code: posts, framing, CRC, placement, completions) and sends a TCP
    /// keep-alive on the connection
    /// it last sent data on (RFC 1122 §4.2.3.6), which the peer answers with an ACK, so that
    /// both ends run their packet paths again (smoltcp, the PMD, the mempool). For as long as
    /// one second after the connection last sent data; 0 (the default) never. On the hosts
    /// measured a core loses what it has not touched for 20-50 us, and a request after such a
    /// gap took 2-5 times as long (docs/workers.md "Keeping the path warm"). It costs a frame each
    /// way per interval (50 000 a second at 20), so it is for links whose both ends poll
    /// (memif, net_ring, a NIC to a poll-mode peer), on cores of their own: a driven worker
    /// that finds its CPU shared does not warm. 0 or 5..=1000000.
    #[serde(default)]
    pub warm_us: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch: d_batch(),
            busy_poll: false,
            spin_us: d_spin(),
            idle_sleep_us: d_sleep(),
            sweep_us: d_sweep(),
            driven_spin_us: None,
            detect_shared_cpu: false,
            warm_us: 0,
        }
    }
}

/// smoltcp TCP socket sizing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    /// Receive buffer per socket; > 64 KiB turns on window scaling (RFC 7323).
    #[serde(default = "d_buf")]
    pub rx_buffer: usize,
    /// Send buffer per socket (default 1 MiB).
    #[serde(default = "d_buf")]
    pub tx_buffer: usize,
    /// Listening sockets kept open per listener (smoltcp has no accept queue).
    #[serde(default = "d_backlog")]
    pub backlog: usize,
    /// RFC 5044 Appendix A: hand smoltcp one segment of whole FPDUs at a time so that every
    /// segment begins with an FPDU header (default true). `false` writes whatever the socket
    /// takes and lets smoltcp cut segments anywhere (kept to measure the difference).
    #[serde(default = "d_true")]
    pub fpdu_alignment: bool,
    /// Segmentation offload in software: smoltcp builds one TCP segment of up to 64 frames'
    /// worth, the device cuts it into frames (default true). Used only where smoltcp computes
    /// no checksum (`checksum = "trusted-link"`, or a PMD that offloads both) and no faults
    /// are injected; `false` keeps one smoltcp pass per frame (to measure the difference).
    #[serde(default = "d_true")]
    pub gso: bool,
    /// Receive header prediction in smoltcp (default true): a frame whose headers match the
    /// last one's of a connection goes to that connection's socket without being parsed
    /// again, and an in-order data segment that acknowledges nothing new skips the socket's
    /// state tables. Applies only where smoltcp verifies no checksum (as `gso`); `false`
    /// sends every frame down the full path (to measure the difference, or to rule it out).
    #[serde(default = "d_true")]
    pub header_prediction: bool,
    /// Out-of-order placement (RFC 5044 App. A.3, default true): the tagged FPDUs (RDMA
    /// Write, Read Response) at the front of a segment that arrives behind a hole in the TCP
    /// stream are checked (CRC, STag, rights, bounds) and placed at once instead of waiting
    /// in the receive buffer for the retransmission; completions and every untagged message
    /// stay in order. Needs CRCs on and markers off (otherwise nothing is placed ahead);
    /// docs/datapath.md "Out-of-order placement".
    #[serde(default = "d_true")]
    pub ooo_placement: bool,
    /// TCP connections one worker holds at most (incoming ones still in MPA startup, awaiting
    /// accept, live or closing; and outgoing). Each has `rx_buffer + tx_buffer` of memory, so
    /// this bounds what peers can make a worker allocate; connections beyond it are refused
    /// with a TCP RST (default 256).
    #[serde(default = "d_max_conns")]
    pub max_connections: usize,
    /// How long (ms) an incoming connection may take to deliver its whole MPA Request before
    /// it is closed with a RST (RFC 5044 §7.1.2 item 10; default 5000, as Linux siw).
    #[serde(default = "d_mpa_timeout_ms")]
    pub mpa_timeout_ms: u64,
    /// MPA startups in progress per listener at most; a connection beyond it is refused with a
    /// RST and a log line (default 256).
    #[serde(default = "d_max_startups")]
    pub max_startups: usize,
    /// The smallest TCP retransmission timeout, in ms (default 50; 1..=10000). It must
    /// outlast the peer's delayed ACK (Linux: at least 40 ms; dpwarp: 10 ms) and the stalls of
    /// the hosts on the path, or timeouts fire early and resend everything in flight. On a
    /// link of dedicated cores and peers that ACK promptly, a lower one repairs a loss with
    /// nothing sent after it sooner (docs/datapath.md "Loss recovery").
    #[serde(default = "d_rto_min_ms")]
    pub rto_min_ms: u64,
    /// How long (ms) octets may wait unacknowledged before the connection is given up on
    /// with a RST and its QP closes (RFC 9293 3.8.3, R2, "at least 100 seconds"; Linux's
    /// TCP_USER_TIMEOUT). Counted from the first retransmission timeout since the peer last
    /// acknowledged anything, or, while its window is shut, from the first zero-window probe
    /// it left unanswered: an idle connection, or a peer that answers the probes, is never
    /// given up on. Default 120000; 0 retransmits for good.
    #[serde(default = "d_user_timeout_ms")]
    pub user_timeout_ms: u64,
    /// TCP keep-alives (RFC 9293 3.8.4): after this many ms with nothing received or sent,
    /// and this many between them, an idle connection's peer is asked for an ACK; after
    /// `keepalive_probes` unanswered the connection is given up on with a RST and its QP
    /// closes (a peer that vanished while nothing waited on it). Default 0: off, as RFC 9293
    /// (MUST-24) asks; a storage target that must notice clients that went away sets it.
    #[serde(default)]
    pub keepalive_ms: u64,
    /// Unanswered keep-alives before an idle connection is given up on (Linux's
    /// TCP_KEEPCNT; default 3, at least 1). With `keepalive_ms` K the peer is given up on
    /// about K x (keepalive_probes + 1) after it last sent anything.
    #[serde(default = "d_keepalive_probes")]
    pub keepalive_probes: u32,
    /// TCP congestion control: "cubic" (the default), "reno" or "none".
    #[serde(default)]
    pub congestion_control: CongestionControl,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            rx_buffer: d_buf(),
            tx_buffer: d_buf(),
            backlog: d_backlog(),
            fpdu_alignment: true,
            gso: true,
            header_prediction: true,
            ooo_placement: true,
            max_connections: d_max_conns(),
            mpa_timeout_ms: d_mpa_timeout_ms(),
            max_startups: d_max_startups(),
            rto_min_ms: d_rto_min_ms(),
            user_timeout_ms: d_user_timeout_ms(),
            keepalive_ms: 0,
            keepalive_probes: d_keepalive_probes(),
            congestion_control: CongestionControl::default(),
        }
    }
}

fn d_corrupt_bytes() -> u8 {
    1
}

fn d_user_timeout_ms() -> u64 {
    120_000
}

fn d_keepalive_probes() -> u32 {
    3
}

fn d_mpa_timeout_ms() -> u64 {
    5000
}
fn d_rto_min_ms() -> u64 {
    50
}
fn d_max_startups() -> usize {
    256
}
fn d_max_conns() -> usize {
    256
}
fn d_true() -> bool {
    true
}
fn d_checksum() -> String {
    "auto".into()
}
fn d_desc() -> u16 {
    1024
}
fn d_mbufs() -> u32 {
    8191
}
fn d_batch() -> usize {
    32
}
fn d_spin() -> u64 {
    0
}
fn d_sleep() -> u64 {
    50
}
fn d_sweep() -> u64 {
    1000
}
fn d_buf() -> usize {
    1 << 20
}
fn d_backlog() -> usize {
    4
}

impl DataplaneConfig {
    /// Whether `device` is a net_memif client in memif's zero-copy mode (`zero-copy=yes` in
    /// its `--vdev` arguments, `role=client`; DPDK ignores the flag on a server, and `role`
    /// defaults to server). Its transmit descriptors then point into the client's own EAL
    /// memory by offset (DPDK 22.11 `eth_memif_tx_zc`: always region 1, the first memory
    /// segment list), so every transmitted octet must lie in an mbuf from a pool, not in
    /// memory outside EAL such as a TCP transmit ring.
    pub fn memif_zero_copy_client(&self, device: &str) -> bool {
        self.memif_zero_copy_asked(device) && self.memif_client(device)
    }

    /// Whether `device` is a net_memif client (`role=client` among its `--vdev` arguments;
    /// the role defaults to server).
    pub fn memif_client(&self, device: &str) -> bool {
        device.starts_with("net_memif")
            && vdev_arg(&self.eal.args, device, "role") == Some("client")
    }

    /// Both ends of one memif link in this process (same `socket` and `id`): the server must
    /// come first, in the `--vdev` arguments and in the `[[port]]`s. DPDK 22.11 probes vdevs in
    /// their listed order, and a client probed first claims the socket, so the server cannot
    /// listen on it and every start of the client fails ("Failed to connect socket"; seen:
    /// 10 s of retries, then the dataplane's start failed). Ports start in their listed order,
    /// and a client port started before its server gets no link until its retries run out
    /// (seen: 10.7 s to start, against 0.3 s in server-first order).
    fn check_memif_start_order(&self) -> Result<(), String> {
        // DPDK 22.11's memif defaults: socket /run/memif.sock, id 0, role server.
        let end = |device: &str| {
            let arg = |k, d| vdev_arg(&self.eal.args, device, k).unwrap_or(d);
            (arg("socket", "/run/memif.sock"), arg("id", "0"))
        };
        let is_memif_server = |d: &str| d.starts_with("net_memif") && !self.memif_client(d);
        let order_error = |what: &str, client: &str, server: &str| {
            let (socket, id) = end(client);
            Err(format!(
                "{client}: this memif client is listed before its server {server} (socket \
                 {socket}, id {id}) in {what}; in one process the server comes first: DPDK \
                 probes vdevs and dpwarp starts ports in their listed order, and a memif client \
                 connects to its server at start"
            ))
        };
        // The first memif client in `devices` listed before the server of its link, by index.
        let out_of_order = |devices: &[&str]| {
            devices.iter().enumerate().find_map(|(i, client)| {
                if !self.memif_client(client) {
                    return None;
                }
                let link = end(client);
                let j = devices[i + 1..]
                    .iter()
                    .position(|d| is_memif_server(d) && end(d) == link)?;
                Some((i, i + 1 + j))
            })
        };
        let vdevs = vdev_names(&self.eal.args);
        if let Some((c, s)) = out_of_order(&vdevs) {
            return order_error("the --vdev arguments", vdevs[c], vdevs[s]);
        }
        let ports: Vec<&str> = self.ports.iter().map(|p| p.device.as_str()).collect();
        if let Some((c, s)) = out_of_order(&ports) {
            return order_error("the [[port]]s", ports[c], ports[s]);
        }
        Ok(())
    }

    /// `zero-copy=yes` among `device`'s net_memif `--vdev` arguments (DPDK's `memif_set_zc`
    /// looks for "yes" in the value).
    fn memif_zero_copy_asked(&self, device: &str) -> bool {
        device.starts_with("net_memif")
            && vdev_arg(&self.eal.args, device, "zero-copy").is_some_and(|v| v.contains("yes"))
    }

    /// Parse a TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: DataplaneConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Check the settings as [`DataplaneConfig::parse`] does; `Dataplane::start` checks again,
    /// so a config edited in code after parsing gets the same checks as a file.
    pub fn validate(&self) -> Result<(), String> {
        if self.ports.is_empty() {
            return Err("no [[port]]".into());
        }
        if self.worker.batch == 0 || self.worker.batch > 512 {
            return Err("worker.batch must be 1..=512".into());
        }
        if self.worker.warm_us != 0 && !(5..=1_000_000).contains(&self.worker.warm_us) {
            return Err(format!(
                "worker.warm_us = {}: 0 (off) or 5..=1000000",
                self.worker.warm_us
            ));
        }
        if self.tcp.keepalive_probes == 0 {
            return Err("tcp.keepalive_probes = 0: at least 1".into());
        }
        if !(1..=10_000).contains(&self.tcp.rto_min_ms) {
            return Err(format!(
                "tcp.rto_min_ms = {}: 1..=10000",
                self.tcp.rto_min_ms
            ));
        }
        self.check_memif_start_order()?;
        for p in &self.ports {
            parse_cidr(&p.ip)?;
            if let Some(m) = &p.mac {
                parse_mac(m)?;
            }
            if !["auto", "offload", "software", "trusted-link", "tx-only"]
                .contains(&p.checksum.as_str())
            {
                return Err(format!(
                    "port {}: checksum {:?} is not auto, offload, software, trusted-link or tx-only",
                    p.device, p.checksum
                ));
            }
            if !["auto", "on", "off"].contains(&p.tx_zero_copy.as_str()) {
                return Err(format!(
                    "port {}: tx_zero_copy {:?} is not auto, on or off",
                    p.device, p.tx_zero_copy
                ));
            }
            if !["auto", "off"].contains(&p.tso.as_str()) {
                return Err(format!(
                    "port {}: tso {:?} is not auto or off",
                    p.device, p.tso
                ));
            }
            if let Some(f) = &p.faults {
                f.validate()
                    .map_err(|e| format!("port {}: {e}", p.device))?;
            }
            if p.mtu != 0 && !(576..=MAX_MTU).contains(&p.mtu) {
                return Err(format!(
                    "port {}: mtu {} not in 576..={MAX_MTU} (a frame is one mbuf, whose data \
                     room, 128 octets of headroom included, is at most 65535)",
                    p.device, p.mtu
                ));
            }
            if self.memif_zero_copy_asked(&p.device)
                && !self.eal.args.iter().any(|a| a == "--single-file-segments")
            {
                // DPDK 22.11 `memif_set_zc` refuses the devarg then ("Zero-copy doesn't support
                // multi-file segments") and the port does not exist.
                return Err(format!(
                    "port {}: memif's zero-copy=yes needs the EAL option --single-file-segments \
                     (its shared memory is this process's EAL memory, one file per segment list)",
                    p.device
                ));
            }
            if p.tx_zero_copy == "on" && self.memif_zero_copy_client(&p.device) {
                return Err(format!(
                    "port {}: tx_zero_copy = \"on\" with memif's zero-copy=yes: memif describes \
                     each frame to its peer by offset into this process's EAL memory, and a \
                     payload sent by reference lies outside it (in a TCP transmit ring); use \
                     \"auto\" (payloads are then copied into the mbufs, and memif copies nothing \
                     on this side) or drop zero-copy=yes",
                    p.device
                ));
            }
            if p.device.starts_with("net_memif") && p.mtu > 1500 {
                let need = usize::from(p.mtu) + 14;
                let bsize = vdev_arg(&self.eal.args, &p.device, "bsize")
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(MEMIF_DEFAULT_BSIZE);
                if bsize < need {
                    return Err(format!(
                        "port {}: mtu {} over net_memif needs bsize={need} or more in its \
                         --vdev arguments (it has {bsize}): a frame must fit one memif buffer \
                         (frames chained across buffers arrived merged with the next ones, \
                         DPDK 22.11)",
                        p.device, p.mtu
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The largest `mtu` a port takes: a received frame is one mbuf, and an mbuf's data room (a
/// 16-bit field) holds DPDK's 128-octet headroom, the Ethernet header, the IP packet and 4
/// octets for a CRC: 128 + 14 + 65389 + 4 = 65535. That also keeps an IPv4 packet within its
/// 16-bit total length and a net_memif buffer (`bsize`, 16 bits) able to hold the frame.
pub const MAX_MTU: u16 = 65535 - 128 - 14 - 4;

/// net_memif's packet buffer size when its `bsize` devarg is not given.
const MEMIF_DEFAULT_BSIZE: usize = 2048;

/// The `--vdev` specs among the EAL `args`, in their order (`--vdev=net_memif0,role=server`
/// or `--vdev net_memif0,role=server`: `net_memif0,role=server`).
fn vdev_specs(args: &[String]) -> impl Iterator<Item = &str> {
    let mut it = args.iter();
    std::iter::from_fn(move || loop {
        let a = it.next()?;
        match a.strip_prefix("--vdev") {
            Some(rest) if rest.starts_with('=') => return Some(&rest[1..]),
            Some("") => return Some(it.next().map(String::as_str).unwrap_or("")),
            _ => continue,
        }
    })
}

/// The devices of the `--vdev` arguments among the EAL `args`, in their order.
fn vdev_names(args: &[String]) -> Vec<&str> {
    vdev_specs(args)
        .filter_map(|spec| spec.split(',').next().filter(|n| !n.is_empty()))
        .collect()
}

/// The value of `key` in the `--vdev` arguments of `device` among the EAL `args`
/// (`--vdev=net_memif0,role=server,bsize=9216` or `--vdev net_memif0,...`).
fn vdev_arg<'a>(args: &'a [String], device: &str, key: &str) -> Option<&'a str> {
    vdev_specs(args).find_map(|spec| {
        let mut parts = spec.split(',');
        if parts.next() != Some(device) {
            return None;
        }
        parts.find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == key).then(|| v.trim())
        })
    })
}

/// `a.b.c.d/len`.
pub fn parse_cidr(s: &str) -> Result<(std::net::Ipv4Addr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected a.b.c.d/len"))?;
    let a = a.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let l: u8 = l.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if l > 32 {
        return Err(format!("{s:?}: prefix > 32"));
    }
    Ok((a, l))
}

/// `xx:xx:xx:xx:xx:xx`.
/// A MAC as `02:00:00:90:00:01`.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Parse a MAC written `02:00:00:90:00:01`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?}: expected 6 hex bytes"));
    }
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|e| format!("{s:?}: {e}"))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_config_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            // configs/net_*.toml are dataplane setups; rpc-*.toml are rpc-server configs (their
            // own test parses them).
            let dataplane = p
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("net_"));
            if dataplane && p.extension().is_some_and(|x| x == "toml") {
                let c = DataplaneConfig::load(&p).unwrap();
                // Fault injection is for tests only: never on in a shipped config.
                assert!(
                    c.ports.iter().all(|p| p.faults.is_none()),
                    "{}",
                    p.display()
                );
                n += 1;
            }
        }
        assert!(n >= 1);
    }

    #[test]
    fn mtu_goes_up_to_what_one_mbuf_holds() {
        let cfg = |dev: &str, mtu: u16| {
            DataplaneConfig::parse(&format!(
                "[eal]\nargs=['-l', '0', '--vdev={dev},role=server,bsize=65535']\n[[port]]\n\
                 device='{dev}'\nip='10.0.0.1/24'\nmtu={mtu}\n"
            ))
        };
        for dev in ["net_ring0", "net_memif0"] {
            assert!(cfg(dev, MAX_MTU).is_ok(), "{dev}");
            assert!(cfg(dev, 575).is_err(), "{dev}");
            let e = cfg(dev, MAX_MTU + 1).unwrap_err();
            assert!(e.contains("not in 576..=65389"), "{e}");
        }
        // A config changed in code after parsing is checked again (Dataplane::start).
        let mut c = cfg("net_ring0", 9000).unwrap();
        c.ports[0].mtu = MAX_MTU + 1;
        assert!(c.validate().is_err());
    }

    #[test]
    fn memif_jumbo_mtu_needs_a_buffer_per_frame() {
        let cfg = |vdev: &str, mtu: u16| {
            DataplaneConfig::parse(&format!(
                "[eal]\nargs=['-l', '0', '{vdev}']\n[[port]]\ndevice='net_memif0'\n\
                 ip='10.0.0.1/24'\nmtu={mtu}\n"
            ))
        };
        let e = cfg("--vdev=net_memif0,role=server,socket=/tmp/s", 9000).unwrap_err();
        assert!(e.contains("bsize=9014"), "{e}");
        assert!(cfg("--vdev=net_memif0,role=server,bsize=4096", 9000).is_err());
        assert!(cfg("--vdev=net_memif0,role=server,bsize=9216", 9000).is_ok());
        assert!(cfg("--vdev=net_memif0,role=server", 1500).is_ok());
        // Another device's bsize does not count.
        assert!(cfg("--vdev=net_memif1,bsize=9216", 9000).is_err());
        let args: Vec<String> = ["--vdev", "net_memif0,bsize=9216,role=client"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(vdev_arg(&args, "net_memif0", "bsize"), Some("9216"));
        assert_eq!(vdev_arg(&args, "net_memif0", "id"), None);
    }

    #[test]
    fn memif_client_listed_before_its_server_is_refused() {
        let cfg_vdevs = |vdevs: [&str; 2], order: [&str; 2], client_args: &str| {
            let port = |d: &str, n: u8| format!("[[port]]\ndevice='{d}'\nip='10.0.0.{n}/24'\n");
            let vdev = |d: &str| {
                if d == "net_memif0" {
                    "'--vdev=net_memif0,role=server,socket=/tmp/x.sock'".to_string()
                } else {
                    format!("'--vdev', 'net_memif1,role=client{client_args}'")
                }
            };
            DataplaneConfig::parse(&format!(
                "[eal]\nargs=['-l', '0', {}, {}]\n{}{}",
                vdev(vdevs[0]),
                vdev(vdevs[1]),
                port(order[0], 1),
                port(order[1], 2)
            ))
        };
        let cfg = |order, client_args| cfg_vdevs(["net_memif0", "net_memif1"], order, client_args);
        let same = ",socket=/tmp/x.sock";
        let e = cfg(["net_memif1", "net_memif0"], same).unwrap_err();
        assert!(e.contains("listed before its server net_memif0"), "{e}");
        assert!(e.contains("[[port]]s"), "{e}");
        cfg(["net_memif0", "net_memif1"], same).unwrap();
        let e = cfg_vdevs(
            ["net_memif1", "net_memif0"],
            ["net_memif0", "net_memif1"],
            same,
        )
        .unwrap_err();
        assert!(e.contains("--vdev arguments"), "{e}");
        // Another link (a different id, or another socket): no order to keep.
        cfg(["net_memif1", "net_memif0"], ",socket=/tmp/x.sock,id=1").unwrap();
        cfg(["net_memif1", "net_memif0"], ",socket=/tmp/y.sock").unwrap();
        cfg(["net_memif1", "net_memif0"], "").unwrap();
    }

    #[test]
    fn memif_zero_copy_client_refuses_transmit_by_reference() {
        let cfg = |vdev: &str, zc: &str| {
            DataplaneConfig::parse(&format!(
                "[eal]\nargs=['-l', '0', '--single-file-segments', '{vdev}']\n[[port]]\n\
                 device='net_memif0'\nip='10.0.0.1/24'\ntx_zero_copy='{zc}'\n"
            ))
        };
        let client = "--vdev=net_memif0,role=client,zero-copy=yes";
        let e = cfg(client, "on").unwrap_err();
        assert!(e.contains("zero-copy=yes"), "{e}");
        let c = cfg(client, "auto").unwrap();
        assert!(c.memif_zero_copy_client("net_memif0"));
        // DPDK refuses zero-copy=yes without --single-file-segments: so does the config.
        let e = DataplaneConfig::parse(&format!(
            "[eal]\nargs=['-l', '0', '{client}']\n[[port]]\ndevice='net_memif0'\nip='10.0.0.1/24'\n"
        ))
        .unwrap_err();
        assert!(e.contains("--single-file-segments"), "{e}");
        assert!(!c.memif_zero_copy_client("net_memif1"));
        // DPDK ignores zero-copy on a server (its default role), and "no" is no.
        for v in [
            "--vdev=net_memif0,role=server,zero-copy=yes",
            "--vdev=net_memif0,zero-copy=yes",
            "--vdev=net_memif0,role=client,zero-copy=no",
        ] {
            let c = cfg(v, "on").unwrap();
            assert!(!c.memif_zero_copy_client("net_memif0"), "{v}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\n";
        assert!(DataplaneConfig::parse(&format!("{base}ip='1.2.3.4/24'\n")).is_ok());
        assert!(DataplaneConfig::parse(&format!("{base}ip='1.2.3.4'\n")).is_err());
        assert!(DataplaneConfig::parse(&format!("{base}ip='1.2.3.4/24'\nmtu=65390\n")).is_err());
        assert!(DataplaneConfig::parse(&format!("{base}ip='1.2.3.4/24'\nmac='zz'\n")).is_err());
        assert!(
            DataplaneConfig::parse(&format!("{base}ip='1.2.3.4/24'\nchecksum='off'\n")).is_err()
        );
        let c =
            DataplaneConfig::parse(&format!("{base}ip='1.2.3.4/24'\nchecksum='trusted-link'\n"));
        assert_eq!(c.unwrap().ports[0].checksum, "trusted-link");
        assert_eq!(parse_mac("02:00:00:00:00:0a").unwrap()[5], 10);
    }

    #[test]
    fn rto_min_defaults_to_50_ms_and_is_checked() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        assert_eq!(DataplaneConfig::parse(base).unwrap().tcp.rto_min_ms, 50);
        let c = DataplaneConfig::parse(&format!("{base}[tcp]\nrto_min_ms=10\n")).unwrap();
        assert_eq!(c.tcp.rto_min_ms, 10);
        for bad in ["rto_min_ms=0", "rto_min_ms=10001"] {
            assert!(DataplaneConfig::parse(&format!("{base}[tcp]\n{bad}\n")).is_err());
        }
    }

    #[test]
    fn keepalives_default_off_with_three_probes() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        let c = DataplaneConfig::parse(base).unwrap();
        assert_eq!((c.tcp.keepalive_ms, c.tcp.keepalive_probes), (0, 3));
        let c = DataplaneConfig::parse(&format!(
            "{base}[tcp]\nkeepalive_ms=30000\nkeepalive_probes=5\n"
        ))
        .unwrap();
        assert_eq!((c.tcp.keepalive_ms, c.tcp.keepalive_probes), (30_000, 5));
        assert!(DataplaneConfig::parse(&format!("{base}[tcp]\nkeepalive_probes=0\n")).is_err());
    }

    #[test]
    fn user_timeout_defaults_to_120_s_and_0_turns_it_off() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        assert_eq!(
            DataplaneConfig::parse(base).unwrap().tcp.user_timeout_ms,
            120_000
        );
        for v in [0, 2000] {
            let c = DataplaneConfig::parse(&format!("{base}[tcp]\nuser_timeout_ms={v}\n"));
            assert_eq!(c.unwrap().tcp.user_timeout_ms, v);
        }
        assert!(DataplaneConfig::parse(&format!("{base}[tcp]\nuser_timeout_ms=-1\n")).is_err());
    }

    #[test]
    fn driven_spin_is_left_to_the_placement_unless_set() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        assert_eq!(
            DataplaneConfig::parse(base).unwrap().worker.driven_spin_us,
            None
        );
        let c = DataplaneConfig::parse(&format!("{base}[worker]\ndriven_spin_us=5\n")).unwrap();
        assert_eq!(c.worker.driven_spin_us, Some(5));
        assert!(DataplaneConfig::parse(&format!("{base}[worker]\ndriven_spin_us=-1\n")).is_err());
    }

    #[test]
    fn warm_is_off_unless_set_and_is_checked() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        assert_eq!(DataplaneConfig::parse(base).unwrap().worker.warm_us, 0);
        for (v, ok) in [
            (0, true),
            (4, false),
            (5, true),
            (20, true),
            (1_000_000, true),
            (1_000_001, false),
        ] {
            let c = DataplaneConfig::parse(&format!("{base}[worker]\nwarm_us={v}\n"));
            assert_eq!(c.is_ok(), ok, "warm_us = {v}: {c:?}");
        }
    }

    #[test]
    fn congestion_control_defaults_to_cubic_and_is_checked() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        let c = DataplaneConfig::parse(base).unwrap();
        assert_eq!(c.tcp.congestion_control, CongestionControl::Cubic);
        for (ok, cc) in [
            ("cubic", CongestionControl::Cubic),
            ("reno", CongestionControl::Reno),
            ("none", CongestionControl::None),
        ] {
            let c = DataplaneConfig::parse(&format!("{base}[tcp]\ncongestion_control='{ok}'\n"))
                .unwrap();
            assert_eq!(c.tcp.congestion_control, cc);
        }
        let bad = format!("{base}[tcp]\ncongestion_control='bbr'\n");
        assert!(DataplaneConfig::parse(&bad).is_err());
    }

    #[test]
    fn faults_are_off_by_default_and_checked() {
        let base = "[eal]\nargs=[]\n[[port]]\ndevice='x'\nip='1.2.3.4/24'\n";
        assert_eq!(DataplaneConfig::parse(base).unwrap().ports[0].faults, None);
        let c = DataplaneConfig::parse(&format!(
            "{base}[port.faults]\nseed=7\ndrop=0.01\nduplicate=0.005\nreorder=0.005\n\
             corrupt=0.005\ndirection='both'\n"
        ))
        .unwrap();
        let f = c.ports[0].faults.clone().unwrap();
        assert_eq!((f.seed, f.drop, f.corrupt_bytes), (7, 0.01, 1));
        assert_eq!(f.direction, FaultDirection::Both);
        assert_eq!(f.corrupt_neutral, 0.0);
        for bad in [
            "drop=1.5",
            "corrupt=-0.1",
            "corrupt_bytes=0",
            "corrupt_bytes=17",
            "direction='sideways'",
            "dorp=0.1",
        ] {
            assert!(
                DataplaneConfig::parse(&format!("{base}[port.faults]\n{bad}\n")).is_err(),
                "{bad}"
            );
        }
        // NaN is not a probability.
        let f = FaultConfig {
            drop: f64::NAN,
            ..FaultConfig::default()
        };
        assert!(f.validate().is_err());
    }
}
