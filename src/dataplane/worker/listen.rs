//! A worker's listeners: its listening sockets, the incoming connections in their MPA startup
//! (`cm::acceptor`'s probe each), and the completed requests waiting for the application's
//! accept or reject. The worker calls in at two points of a pass: [`Listeners::relisten`]
//! after a frame with a SYN and on every pass, [`Listeners::advance`] once a pass; the
//! connections given up on come back to it to close.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;

use super::{new_socket, remote_of, retire_socket, Incoming, AWAIT_TIMEOUT};
use crate::cm::acceptor::{self, MpaProbe, ProbeOutcome};
use crate::cm::ListenConfig;
use crate::config::TcpConfig;
use crate::dataplane::device::DpdkDevice;

/// An incoming connection in its MPA startup (reading its Request).
struct Probe {
    h: SocketHandle,
    probe: MpaProbe,
    port: u16,
    remote: SocketAddr,
    requests: Sender<Incoming>,
}

/// One listening port.
struct Listening {
    requests: Sender<Incoming>,
    handles: Vec<SocketHandle>,
    /// Its MPA startups' deadline, cap and Rev 0 policy (RFC 5044 §7.1.2, App. C).
    policy: ListenConfig,
}

pub(super) struct Listeners {
    index: usize,
    listening: HashMap<u16, Listening>,
    probes: Vec<Probe>,
    /// Requests handed to the application, by id, with when.
    awaiting: HashMap<u64, (SocketHandle, Instant)>,
    next_id: u64,
    last_refusal: Option<Instant>,
}

impl Listeners {
    /// Worker `index`'s (its request ids start at `index << 48`, unique in the process).
    pub(super) fn new(index: usize) -> Listeners {
        Listeners {
            index,
            listening: HashMap::new(),
            probes: Vec::new(),
            awaiting: HashMap::new(),
            next_id: (index as u64) << 48,
            last_refusal: None,
        }
    }

    fn name(&self) -> String {
        format!("dataplane: worker {}", self.index)
    }

    #[inline]
    pub(super) fn is_listening(&self) -> bool {
        !self.listening.is_empty()
    }

    /// Connections in startup or waiting for the application: an egress must visit every
    /// socket while there are any (their SYN-ACK, Reply or RST).
    #[inline]
    pub(super) fn in_startup(&self) -> bool {
        !self.probes.is_empty() || !self.awaiting.is_empty()
    }

    /// Connections these hold (startups and requests), towards `tcp.max_connections`.
    pub(super) fn held(&self) -> usize {
        self.probes.len() + self.awaiting.len()
    }

    /// The socket of request `id`, no longer awaiting.
    pub(super) fn take_request(&mut self, id: u64) -> Option<SocketHandle> {
        self.awaiting.remove(&id).map(|(h, _)| h)
    }

    /// Listen on `port` with `tcp.backlog` sockets.
    pub(super) fn listen(
        &mut self,
        port: u16,
        requests: Sender<Incoming>,
        policy: ListenConfig,
        sockets: &mut SocketSet<'static>,
        dev: &mut DpdkDevice,
        tcp_cfg: &TcpConfig,
    ) -> Result<(), String> {
        if self.listening.contains_key(&port) {
            return Err(format!("port {port} already listening"));
        }
        let mut handles = Vec::new();
        for _ in 0..tcp_cfg.backlog.max(1) {
            let mut s = new_socket(tcp_cfg);
            if let Err(e) = s.listen(port) {
                let mut done = (0, 0, 0, 0);
                for h in handles {
                    retire_socket(dev, &mut done, sockets.remove(h));
                }
                return Err(e.to_string());
            }
            dev.zc_register(&s);
            handles.push(sockets.add(s));
        }
        self.listening.insert(
            port,
            Listening {
                requests,
                handles,
                policy,
            },
        );
        Ok(())
    }

    /// Stop listening on `port`: its listening sockets, for the worker to retire.
    pub(super) fn unlisten(&mut self, port: u16) -> Vec<SocketHandle> {
        self.listening
            .remove(&port)
            .map(|l| l.handles)
            .unwrap_or_default()
    }

    /// Every listening socket that left LISTEN (a SYN took it, RFC 9293 3.5) becomes a probe,
    /// with a fresh listening socket in its place, so the next SYN finds one: smoltcp has no
    /// accept queue and answers a SYN nobody listens for with a RST. `conns`: the worker's
    /// other connections, towards `tcp.max_connections`.
    ///
    /// Past a capacity (`tcp.max_connections` held, or `max_startups` MPA startups of the
    /// listener) the SYN is forgotten, not answered: the socket listens again before its
    /// SYN-ACK is sent, and the client retransmits its SYN (RFC 9293 3.8.1) until there is
    /// room, as with a kernel listener whose backlog is full. Each one is counted in
    /// `refused` and logged (at most once a second).
    pub(super) fn relisten(
        &mut self,
        sockets: &mut SocketSet<'static>,
        dev: &mut DpdkDevice,
        tcp_cfg: &TcpConfig,
        conns: usize,
        refused: &mut u64,
        now: Instant,
    ) -> bool {
        let mut work = false;
        let mut held = conns + self.held();
        for (port, l) in self.listening.iter_mut() {
            for h in l.handles.iter_mut() {
                let s = sockets.get_mut::<tcp::Socket>(*h);
                let st = s.state();
                if st == tcp::State::Listen {
                    continue;
                }
                if st == tcp::State::Closed {
                    let _ = s.listen(*port);
                    continue;
                }
                let remote = remote_of(s);
                let starting = self.probes.iter().filter(|p| p.port == *port).count();
                let full = if held >= tcp_cfg.max_connections {
                    Some(format!(
                        "the worker holds tcp.max_connections = {}",
                        tcp_cfg.max_connections
                    ))
                } else {
                    acceptor::admit(starting, &l.policy).err()
                };
                if let Some(why) = full {
                    // Forget the SYN: abort and listen again in the same pass, before any
                    // egress could send the SYN-ACK or a RST.
                    s.abort();
                    let _ = s.listen(*port);
                    *refused += 1;
                    if self
                        .last_refusal
                        .is_none_or(|t| now.duration_since(t) > Duration::from_secs(1))
                    {
                        log::warn!(
                            "dataplane: worker {}: dropping the SYN of {remote} to port {port}: \
                             {why} (it will retransmit; {refused} dropped so far)",
                            self.index
                        );
                        self.last_refusal = Some(now);
                    }
                    continue;
                }
                held += 1;
                work = true;
                let mut s = new_socket(tcp_cfg);
                if s.listen(*port).is_ok() {
                    dev.zc_register(&s);
                    let old = std::mem::replace(h, sockets.add(s));
                    self.probes.push(Probe {
                        h: old,
                        probe: MpaProbe::new(&l.policy, now),
                        port: *port,
                        remote,
                        requests: l.requests.clone(),
                    });
                }
            }
        }
        work
    }

    /// Read the probes' MPA Requests and hand the complete ones out; expire requests nobody
    /// accepted or rejected. Each progresses on its own: a stalled or slow peer holds up
    /// nobody else, and is closed at its deadline. The sockets given up on are aborted (a
    /// RST) and pushed to `closing`, for the worker to close; a complete Request the
    /// application's hand-off had no room for is counted in `requests_refused`.
    pub(super) fn advance(
        &mut self,
        sockets: &mut SocketSet<'static>,
        rbuf: &mut [u8],
        now: Instant,
        closing: &mut Vec<SocketHandle>,
        requests_refused: &mut u64,
    ) -> bool {
        let mut work = false;
        let mut i = 0;
        while i < self.probes.len() {
            let p = &mut self.probes[i];
            let s = sockets.get_mut::<tcp::Socket>(p.h);
            let mut outcome = ProbeOutcome::Pending;
            while matches!(outcome, ProbeOutcome::Pending) && s.can_recv() {
                let room = p.probe.room().clamp(1, rbuf.len());
                let n = s.recv_slice(&mut rbuf[..room]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                work = true;
                outcome = p.probe.on_bytes(&rbuf[..n], now);
            }
            if matches!(outcome, ProbeOutcome::Pending) {
                // Gone, or closed its direction without a (complete) MPA Request: it never
                // will send one (RFC 5044 §7.1.2), so do not keep its buffers to the deadline.
                let gone = (!s.is_active() && s.state() != tcp::State::SynReceived)
                    || (matches!(
                        s.state(),
                        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing
                    ) && !s.can_recv());
                outcome = if gone {
                    p.probe.on_closed()
                } else {
                    p.probe.on_time(now)
                };
            }
            let refused = match outcome {
                ProbeOutcome::Pending => {
                    i += 1;
                    continue;
                }
                ProbeOutcome::Request { peer, raw } => {
                    self.next_id += 1;
                    let inc = Incoming {
                        id: self.next_id,
                        peer,
                        raw,
                        remote: p.remote,
                        worker: self.index,
                    };
                    if p.requests.try_send(inc).is_ok() {
                        self.awaiting.insert(self.next_id, (p.h, now));
                        None
                    } else {
                        *requests_refused += 1;
                        Some(format!(
                            "the listener's backlog is full ({} refused so far)",
                            *requests_refused
                        ))
                    }
                }
                ProbeOutcome::Drop(why) => Some(why),
            };
            let p = self.probes.swap_remove(i);
            if let Some(why) = refused {
                acceptor::log_refusal(&self.name(), p.remote, &why);
                sockets.get_mut::<tcp::Socket>(p.h).abort();
                closing.push(p.h);
            }
        }
        // Requests nobody accepted or rejected in time: abort and free their sockets.
        if !self.awaiting.is_empty() {
            let expired: Vec<u64> = self
                .awaiting
                .iter()
                .filter(|(_, (_, since))| now.duration_since(*since) > AWAIT_TIMEOUT)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if let Some((h, _)) = self.awaiting.remove(&id) {
                    log::warn!(
                        "{}: connection request {id} neither accepted nor rejected",
                        self.name()
                    );
                    sockets.get_mut::<tcp::Socket>(h).abort();
                    closing.push(h);
                }
            }
        }
        work
    }
}
