//! A poll-mode worker: one per configured core, pinned, owning one port queue, a smoltcp
//! interface, its TCP sockets and the iWARP connections on them.
//!
//! Run-to-completion loop: rx burst -> smoltcp ingress -> per connection: stream bytes into the
//! sans-IO [`Connection`] (MPA/DDP/RDMAP), completions to the CQs, FPDUs out into the socket ->
//! smoltcp egress -> tx burst. Applications reach a worker through a bounded crossbeam channel
//! (connect/listen/accept/reject); posting work and reaping completions go through the QP's
//! bounded lock-free post rings and the CQs' bounded queues, as with the kernel-TCP driver.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, Ipv4Address};

use super::device::{DeviceStats, DpdkDevice};
use crate::config::{TcpConfig, WorkerConfig};
use crate::conn::ConnEvent;
use crate::mpa::{MpaConfig, PeerRequest, Startup, StartupEvent};
use crate::verbs::{QpShared, QpSlot};

/// How long an accepted TCP connection may take to deliver its MPA Request, and how long a
/// reported request may wait for accept/reject.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
const AWAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a closing socket may linger before it is aborted.
const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Bytes an incoming connection may send before its MPA Request must have been recognised.
const MAX_PROBE_BYTES: usize = 64 * 1024;
/// Egress passes per loop (each sends at most one segment per socket).
const EGRESS_PASSES: usize = 256;

/// A connection request reported to a listener.
pub(crate) struct Incoming {
    pub id: u64,
    pub peer: PeerRequest,
    pub raw: Vec<u8>,
    pub remote: SocketAddr,
    pub worker: usize,
}

/// Requests from applications to a worker.
pub(crate) enum Cmd {
    Connect {
        remote: SocketAddrV4,
        sh: Arc<QpShared>,
        events: Sender<ConnEvent>,
    },
    Listen {
        port: u16,
        requests: Sender<Incoming>,
        reply: Sender<Result<(), String>>,
    },
    Unlisten {
        port: u16,
    },
    Accept {
        id: u64,
        sh: Arc<QpShared>,
        events: Sender<ConnEvent>,
    },
    /// Send `bytes` (an MPA Reply with R=1) on the awaiting connection `id`, then close it.
    Reject {
        id: u64,
        bytes: Vec<u8>,
    },
    Stats {
        reply: Sender<WorkerStats>,
    },
    Stop,
}

/// Counters of one worker.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerStats {
    /// Counters of the worker's port queue.
    pub device: DeviceStats,
    /// Iterations of the poll loop so far.
    pub loops: u64,
    /// Connections the worker holds (connecting, established or closing) when asked.
    pub connections: usize,
    /// Incoming connections refused with a RST because the worker held `tcp.max_connections`.
    pub refused: u64,
}

enum CState {
    Connecting,
    Live,
    Closing(Instant),
}

struct Conn {
    h: SocketHandle,
    sh: Option<Arc<QpShared>>,
    events: Option<Sender<ConnEvent>>,
    /// Bytes from the connection not yet in the socket, `out[out_pos..]`.
    out: Vec<u8>,
    out_pos: usize,
    /// Offsets in `out` just past each record (FPDU, startup frames), ascending.
    ends: Vec<usize>,
    state: CState,
    /// The peer closed its direction (FIN seen and reported to the connection).
    eof: bool,
}

struct Probe {
    h: SocketHandle,
    startup: Startup,
    raw: Vec<u8>,
    since: Instant,
    requests: Sender<Incoming>,
}

struct Listening {
    requests: Sender<Incoming>,
    handles: Vec<SocketHandle>,
}

/// Everything a worker thread owns.
pub(crate) struct Worker {
    pub index: usize,
    pub dev: DpdkDevice,
    pub mac: [u8; 6],
    pub ip: (Ipv4Addr, u8),
    pub gateway: Option<Ipv4Addr>,
    pub mtu: usize,
    pub cmds: Receiver<Cmd>,
    pub wcfg: WorkerConfig,
    pub tcp: TcpConfig,
}

fn new_socket(tcp_cfg: &TcpConfig) -> tcp::Socket<'static> {
    let rx = tcp::SocketBuffer::new(vec![0u8; tcp_cfg.rx_buffer]);
    let tx = tcp::SocketBuffer::new(vec![0u8; tcp_cfg.tx_buffer]);
    let mut s = tcp::Socket::new(rx, tx);
    // RFC 5044 App. A.2: FPDUs go out at once; Nagle would hold short FPDUs back.
    s.set_nagle_enabled(false);
    s
}

fn st_now(t0: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(t0.elapsed().as_micros() as i64)
}

impl Worker {
    /// The worker loop; returns on [`Cmd::Stop`] or when every command sender is gone.
    pub fn run(mut self) {
        let t0 = Instant::now();
        let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(self.mac)));
        config.random_seed = rand::random();
        let mut iface = Interface::new(config, &mut self.dev, st_now(t0));
        iface.update_ip_addrs(|a| {
            let o = self.ip.0.octets();
            let _ = a.push(IpCidr::new(
                IpAddress::v4(o[0], o[1], o[2], o[3]),
                self.ip.1,
            ));
        });
        if let Some(g) = self.gateway {
            let o = g.octets();
            let _ = iface
                .routes_mut()
                .add_default_ipv4_route(Ipv4Address::new(o[0], o[1], o[2], o[3]));
        }
        let mut sockets = SocketSet::new(Vec::new());
        let mut conns: Vec<Conn> = Vec::new();
        let mut probes: Vec<Probe> = Vec::new();
        let mut awaiting: HashMap<u64, (SocketHandle, Instant)> = HashMap::new();
        let mut listening: HashMap<u16, Listening> = HashMap::new();
        let mut next_id: u64 = (self.index as u64) << 48;
        let mut next_port: u16 = 49152 + (rand::random::<u16>() % 8192);
        let mut stats = WorkerStats::default();
        let mut last_work = Instant::now();
        let mut last_refusal: Option<Instant> = None;
        let emss = self.mtu.saturating_sub(40);
        log::info!(
            "dataplane: worker {} up: {}/{} mac {:02x?} mtu {} emss {}",
            self.index,
            self.ip.0,
            self.ip.1,
            self.mac,
            self.mtu,
            emss
        );
        let mut rbuf = vec![0u8; 64 * 1024];

        loop {
            stats.loops += 1;
            let mut work = false;
            // --- commands -------------------------------------------------------------------
            loop {
                let cmd = match self.cmds.try_recv() {
                    Ok(c) => c,
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                };
                work = true;
                match cmd {
                    Cmd::Stop => {
                        for c in &conns {
                            if let Some(sh) = &c.sh {
                                sh.set_closed();
                            }
                        }
                        return;
                    }
                    Cmd::Stats { reply } => {
                        stats.device = self.dev.stats;
                        stats.connections = conns.len();
                        let _ = reply.try_send(stats);
                    }
                    Cmd::Connect { remote, sh, events } => {
                        if conns.len() + probes.len() + awaiting.len() >= self.tcp.max_connections {
                            log::warn!(
                                "dataplane: worker {} holds tcp.max_connections = {}; not connecting to {remote}",
                                self.index,
                                self.tcp.max_connections
                            );
                            let _ = events.try_send(ConnEvent::Closed);
                            sh.set_closed();
                            continue;
                        }
                        let mut s = new_socket(&self.tcp);
                        next_port = if next_port >= 65000 {
                            49152
                        } else {
                            next_port + 1
                        };
                        let o = remote.ip().octets();
                        let r = s.connect(
                            iface.context(),
                            (IpAddress::v4(o[0], o[1], o[2], o[3]), remote.port()),
                            next_port,
                        );
                        match r {
                            Ok(()) => {
                                let h = sockets.add(s);
                                conns.push(Conn {
                                    h,
                                    sh: Some(sh),
                                    events: Some(events),
                                    out: Vec::new(),
                                    out_pos: 0,
                                    ends: Vec::new(),
                                    state: CState::Connecting,
                                    eof: false,
                                });
                            }
                            Err(e) => {
                                log::warn!("dataplane: connect to {remote}: {e}");
                                let _ = events.try_send(ConnEvent::Closed);
                                sh.set_closed();
                            }
                        }
                    }
                    Cmd::Listen {
                        port,
                        requests,
                        reply,
                    } => {
                        if listening.contains_key(&port) {
                            let _ = reply.try_send(Err(format!("port {port} already listening")));
                            continue;
                        }
                        let mut handles = Vec::new();
                        let mut err = None;
                        for _ in 0..self.tcp.backlog.max(1) {
                            let mut s = new_socket(&self.tcp);
                            if let Err(e) = s.listen(port) {
                                err = Some(e.to_string());
                                break;
                            }
                            handles.push(sockets.add(s));
                        }
                        if let Some(e) = err {
                            for h in handles {
                                sockets.remove(h);
                            }
                            let _ = reply.try_send(Err(e));
                        } else {
                            listening.insert(port, Listening { requests, handles });
                            let _ = reply.try_send(Ok(()));
                        }
                    }
                    Cmd::Unlisten { port } => {
                        if let Some(l) = listening.remove(&port) {
                            for h in l.handles {
                                sockets.remove(h);
                            }
                        }
                    }
                    Cmd::Accept { id, sh, events } => match awaiting.remove(&id) {
                        Some((h, _)) => conns.push(Conn {
                            h,
                            sh: Some(sh),
                            events: Some(events),
                            out: Vec::new(),
                            out_pos: 0,
                            ends: Vec::new(),
                            state: CState::Live,
                            eof: false,
                        }),
                        None => {
                            let _ = events.try_send(ConnEvent::Closed);
                            sh.set_closed();
                        }
                    },
                    Cmd::Reject { id, bytes } => {
                        if let Some((h, _)) = awaiting.remove(&id) {
                            conns.push(Conn {
                                h,
                                sh: None,
                                events: None,
                                out: bytes,
                                out_pos: 0,
                                ends: Vec::new(),
                                state: CState::Live,
                                eof: false,
                            });
                        }
                    }
                }
            }

            // --- rx burst + smoltcp ---------------------------------------------------------
            let now = Instant::now();
            let ts = st_now(t0);
            if self.dev.rx_refill() > 0 {
                work = true;
            }
            iface.poll(ts, &mut self.dev, &mut sockets);

            // --- listeners: a listening socket that left LISTEN becomes a probe --------------
            let mut held = conns.len() + probes.len() + awaiting.len();
            for (port, l) in listening.iter_mut() {
                for h in l.handles.iter_mut() {
                    let s = sockets.get_mut::<tcp::Socket>(*h);
                    let st = s.state();
                    if st == tcp::State::Closed {
                        // Refused below in an earlier loop: its RST has gone out; listen again
                        // with the same socket (no new buffers).
                        let _ = s.listen(*port);
                        continue;
                    }
                    if st != tcp::State::Listen && held >= self.tcp.max_connections {
                        // Every connection costs a socket's buffers: past the limit a peer
                        // cannot make this worker allocate more; the RST tells it at once.
                        if last_refusal
                            .map_or(true, |t| now.duration_since(t) > Duration::from_secs(1))
                        {
                            log::warn!(
                                "dataplane: worker {} holds tcp.max_connections = {}; refusing connections to port {port} (RST)",
                                self.index,
                                self.tcp.max_connections
                            );
                            last_refusal = Some(now);
                        }
                        stats.refused += 1;
                        s.abort();
                        continue;
                    }
                    if st != tcp::State::Listen {
                        held += 1;
                        let mut s = new_socket(&self.tcp);
                        if s.listen(*port).is_ok() {
                            let old = std::mem::replace(h, sockets.add(s));
                            probes.push(Probe {
                                h: old,
                                startup: Startup::responder(MpaConfig::default(), now),
                                raw: Vec::new(),
                                since: now,
                                requests: l.requests.clone(),
                            });
                        }
                    }
                }
            }

            // --- probes: read the MPA Request ------------------------------------------------
            let mut i = 0;
            while i < probes.len() {
                let p = &mut probes[i];
                let s = sockets.get_mut::<tcp::Socket>(p.h);
                let mut done: Option<bool> = None; // Some(true) reported, Some(false) drop
                while s.can_recv() && done.is_none() {
                    let n = s.recv_slice(&mut rbuf).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    work = true;
                    let used = p.startup.on_bytes(&rbuf[..n], now).min(n);
                    // Bytes after the Request (forbidden before the Reply, RFC 5044 §7.1.2) are
                    // kept too: the real responder sees them and fails the startup.
                    p.raw.extend_from_slice(&rbuf[..n]);
                    let _ = used;
                    if p.raw.len() > MAX_PROBE_BYTES {
                        // An MPA Request is at most 20 + 512 bytes (RFC 5044 §7.1): this peer
                        // is not speaking MPA; never buffer without bound.
                        log::warn!(
                            "dataplane: {} bytes and no MPA Request; closing",
                            p.raw.len()
                        );
                        done = Some(false);
                        break;
                    }
                    if let Some(ev) = p.startup.poll_event() {
                        done = Some(matches!(ev, StartupEvent::Request(_)));
                        if let StartupEvent::Request(peer) = ev {
                            let remote = s
                                .remote_endpoint()
                                .map(|e| match e.addr {
                                    IpAddress::Ipv4(a) => SocketAddr::from((a.octets(), e.port)),
                                })
                                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
                            next_id += 1;
                            let inc = Incoming {
                                id: next_id,
                                peer,
                                raw: std::mem::take(&mut p.raw),
                                remote,
                                worker: self.index,
                            };
                            if p.requests.try_send(inc).is_ok() {
                                awaiting.insert(next_id, (p.h, now));
                            } else {
                                log::warn!("dataplane: listener backlog full; closing {remote}");
                                done = Some(false);
                            }
                        } else {
                            log::warn!("dataplane: MPA startup failed on an incoming connection");
                        }
                    }
                }
                // Gone, or closed its direction without a (complete) MPA Request: it never
                // will send one (RFC 5044 §7.1.2), so do not keep its buffers for PROBE_TIMEOUT.
                let gone = (!s.is_active() && s.state() != tcp::State::SynReceived)
                    || (matches!(
                        s.state(),
                        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing
                    ) && !s.can_recv());
                if done.is_none() && (gone || now.duration_since(p.since) > PROBE_TIMEOUT) {
                    done = Some(false);
                }
                match done {
                    None => i += 1,
                    Some(reported) => {
                        let p = probes.swap_remove(i);
                        if !reported {
                            sockets.get_mut::<tcp::Socket>(p.h).abort();
                            conns.push(Conn {
                                h: p.h,
                                sh: None,
                                events: None,
                                out: Vec::new(),
                                out_pos: 0,
                                ends: Vec::new(),
                                state: CState::Closing(now),
                                eof: true,
                            });
                        }
                    }
                }
            }
            // Requests nobody accepted or rejected in time: abort and free their sockets.
            let expired: Vec<u64> = awaiting
                .iter()
                .filter(|(_, (_, since))| now.duration_since(*since) > AWAIT_TIMEOUT)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if let Some((h, _)) = awaiting.remove(&id) {
                    log::warn!("dataplane: connection request {id} neither accepted nor rejected");
                    sockets.get_mut::<tcp::Socket>(h).abort();
                    conns.push(Conn {
                        h,
                        sh: None,
                        events: None,
                        out: Vec::new(),
                        out_pos: 0,
                        ends: Vec::new(),
                        state: CState::Closing(now),
                        eof: true,
                    });
                }
            }

            // --- connections ----------------------------------------------------------------
            let mut i = 0;
            while i < conns.len() {
                let c = &mut conns[i];
                let s = sockets.get_mut::<tcp::Socket>(c.h);
                let remove = match c.state {
                    // Keep a closing socket (also in TIME-WAIT, so the peer's FIN still gets
                    // its ACK) until it is closed or CLOSE_LINGER has passed.
                    CState::Closing(since) => {
                        !s.is_open() || now.duration_since(since) > CLOSE_LINGER
                    }
                    CState::Connecting => {
                        let sh = c.sh.as_ref().expect("connecting has a QP");
                        if s.state() == tcp::State::Established {
                            c.state = CState::Live;
                            work = true;
                            false
                        } else if !s.is_open() || sh.disconnect.load(Ordering::Acquire) {
                            log::warn!("dataplane: TCP connect failed");
                            finish(c);
                            true
                        } else {
                            false
                        }
                    }
                    CState::Live => {
                        let (w, close) = drive(c, s, now);
                        work |= w;
                        if close {
                            s.close();
                            finish(c);
                            c.state = CState::Closing(now);
                        }
                        false
                    }
                };
                if remove {
                    let c = conns.swap_remove(i);
                    sockets.get_mut::<tcp::Socket>(c.h).abort();
                    sockets.remove(c.h);
                } else {
                    i += 1;
                }
            }

            // --- egress + tx burst ----------------------------------------------------------
            // smoltcp emits at most one segment per socket per egress pass: repeat until
            // nothing is left to send (bounded; the device refuses when its tx queue is full).
            let ts = st_now(t0);
            iface.poll(ts, &mut self.dev, &mut sockets);
            for _ in 0..EGRESS_PASSES {
                let mut fed = false;
                for c in conns.iter_mut() {
                    if matches!(c.state, CState::Live) && c.sh.is_some() {
                        let s = sockets.get_mut::<tcp::Socket>(c.h);
                        fed |= if self.tcp.fpdu_alignment {
                            feed_segment(c, s, emss)
                        } else {
                            feed_all(c, s)
                        };
                    }
                }
                if iface.poll_egress(ts, &mut self.dev, &mut sockets) == PollResult::None && !fed {
                    break;
                }
            }
            if self.dev.flush() > 0 {
                work = true;
            }

            // --- back off when idle ---------------------------------------------------------
            if work || self.dev.rx_pending() > 0 || self.dev.tx_pending() > 0 {
                last_work = now;
            } else if self.wcfg.busy_poll {
                std::hint::spin_loop();
            } else {
                // Shared cores: spin briefly, then yield (the application thread waiting for a
                // completion may be on this core), and sleep once idle for longer (tests run in
                // parallel on two cores; docs/dataplane.md "Two cores").
                let idle = now.duration_since(last_work);
                if idle < Duration::from_micros(self.wcfg.spin_us) {
                    std::hint::spin_loop();
                } else if idle < Duration::from_millis(2) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(self.wcfg.idle_sleep_us));
                }
            }
        }
    }
}

/// The connection ended: final completions and events, then mark the QP closed.
fn finish(c: &mut Conn) {
    let Some(sh) = c.sh.as_ref() else { return };
    if let QpSlot::Live(conn) = &mut *sh.lock() {
        conn.on_eof();
        sh.reap(conn);
        while let Some(ev) = conn.poll_event() {
            sh.note_event(&ev);
            if let Some(e) = &c.events {
                let _ = e.try_send(ev);
            }
        }
    } else if let Some(e) = &c.events {
        let _ = e.try_send(ConnEvent::Closed);
    }
    sh.set_closed();
}

/// Move bytes between the socket and the connection. Returns (did work, should close).
fn drive(c: &mut Conn, s: &mut tcp::Socket<'static>, now: Instant) -> (bool, bool) {
    let mut work = false;
    let Some(sh) = c.sh.clone() else {
        // A rejecting responder: send the Reply, then close.
        while c.out_pos < c.out.len() && s.can_send() {
            match s.send_slice(&c.out[c.out_pos..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => c.out_pos += n,
            }
        }
        return (true, c.out_pos == c.out.len() || !s.may_send());
    };
    let mut guard = sh.lock();
    let QpSlot::Live(conn) = &mut *guard else {
        return (false, true);
    };
    // Posted work first, so that receive buffers are in place for the bytes below.
    sh.drain_posts(conn);
    // rx: everything smoltcp has, in at most rbuf-sized pieces (two for a wrapped buffer).
    while s.can_recv() {
        let n = s
            .recv(|b| {
                conn.on_bytes(b, now);
                (b.len(), b.len())
            })
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        work = true;
    }
    if !c.eof && !s.may_recv() && s.state() != tcp::State::Established {
        c.eof = true;
        conn.on_eof();
        work = true;
    }
    if conn.poll_timeout().is_some_and(|t| t <= now) {
        conn.handle_timeout(now);
    }
    if c.out_pos == c.out.len() {
        c.out.clear();
        c.out_pos = 0;
        c.ends.clear();
        conn.poll_transmit_records(&mut c.out, &mut c.ends);
        work |= !c.out.is_empty();
    }
    // The bytes go into the socket one segment's worth at a time in the egress passes
    // (feed_segment), so that segments start on FPDU boundaries.
    sh.reap(conn);
    while let Some(ev) = conn.poll_event() {
        sh.note_event(&ev);
        if let Some(e) = &c.events {
            let _ = e.try_send(ev);
        }
        work = true;
    }
    let orphaned = Arc::strong_count(&sh) <= 2; // ours (clone) + the Conn's
    let close = conn.should_close() || sh.disconnect.load(Ordering::Acquire) || orphaned;
    let drained = c.out_pos == c.out.len();
    drop(guard);
    (work, c.eof || (close && drained))
}

/// Without alignment (`tcp.fpdu_alignment = false`): everything the socket takes.
fn feed_all(c: &mut Conn, s: &mut tcp::Socket<'static>) -> bool {
    let mut fed = false;
    while c.out_pos < c.out.len() && s.can_send() {
        match s.send_slice(&c.out[c.out_pos..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                c.out_pos += n;
                fed = true;
            }
        }
    }
    fed
}

/// RFC 5044 Appendix A (and §4.2: an FPDU fits one segment): give smoltcp the next segment's
/// payload as whole FPDUs, so that the segment it cuts begins with an FPDU header.
///
/// smoltcp starts every segment at SND.NXT and fills it with up to min(MSS, window) queued
/// octets. So the worker writes into the socket only when nothing is unsent, and at most the
/// whole records that fit that room (several small FPDUs may share a segment: packing is
/// allowed). Returns whether bytes were written.
///
/// Exceptions, each keeping the connection moving rather than aligned: a record larger than a
/// segment (the peer announced an MSS below the EMSS MULPDU was derived from, or the MPA
/// startup frames) goes in whole and TCP splits it; a window smaller than the next FPDU with
/// nothing in flight will not grow by waiting for ACKs, so the FPDU goes in and TCP splits it.
/// Retransmissions after a timeout are cut by smoltcp from SND.UNA and need not be aligned.
fn feed_segment(c: &mut Conn, s: &mut tcp::Socket<'static>, emss: usize) -> bool {
    if c.out_pos >= c.out.len() || !s.may_send() || s.send_unsent() > 0 {
        return false;
    }
    let segment = emss.min(s.remote_mss()).max(1);
    let room = segment.min(s.send_window_left());
    // Records still to go; bytes after the last recorded end (none today) count as one more.
    let first = c.ends.partition_point(|&e| e <= c.out_pos);
    let ends = c.ends[first..]
        .iter()
        .copied()
        .chain((c.ends.last().copied().unwrap_or(0) < c.out.len()).then_some(c.out.len()));
    let mut end = c.out_pos;
    let mut next = c.out.len();
    for e in ends {
        if e - c.out_pos <= room {
            end = e;
        } else {
            next = e;
            break;
        }
    }
    if end == c.out_pos {
        if next - c.out_pos > segment || s.send_queue() == 0 {
            end = next;
        } else {
            // Wait for the ACK that opens the window.
            return false;
        }
    }
    let free = s.send_capacity() - s.send_queue();
    if end - c.out_pos > free {
        if free < s.send_capacity() {
            // Wait for ACKs to free the room rather than split a record across segments.
            return false;
        }
        // A record larger than the whole transmit buffer (a small configured tcp.tx_buffer):
        // it cannot be aligned anyway.
        end = c.out_pos + free;
    }
    match s.send_slice(&c.out[c.out_pos..end]) {
        Ok(n) if n > 0 => {
            c.out_pos += n;
            true
        }
        _ => false,
    }
}
