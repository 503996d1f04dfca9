//! `dpwarp rpc-bench`: NULL and READ/WRITE calls with N credits over RPC-over-RDMA or ONC RPC
//! on kernel TCP; prints calls/s, latency percentiles and bandwidth. `--compare` runs both
//! transports (and a raw verbs RDMA Write reference) in one invocation; `--json` prints JSON.
//!
//! Without `--server` / `--tcp-server` it starts the servers in-process on loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam, Listener};
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig};
use dpwarp::rpc::tcp::{self, TcpClient};
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpCap, QpInitAttr, SendWr, WcStatus};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// kernel (iWARP over kernel TCP) or dpdk.
    #[arg(long, default_value = "kernel")]
    transport: String,
    /// rdma (RPC-over-RDMA) or tcp (ONC RPC over kernel TCP).
    #[arg(long, default_value = "rdma")]
    proto: String,
    /// null, read or write.
    #[arg(long, default_value = "null")]
    op: String,
    /// Bytes per READ/WRITE.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Credits (calls in flight).
    #[arg(long, default_value_t = 32)]
    credits: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// An RPC-over-RDMA server to use instead of an in-process one.
    #[arg(long)]
    server: Option<SocketAddr>,
    /// An ONC RPC/TCP server to use instead of an in-process one.
    #[arg(long)]
    tcp_server: Option<SocketAddr>,
    /// Run NULL and 1 MiB READ over both protocols (and a verbs RDMA Write reference).
    #[arg(long)]
    compare: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Busy-poll receive CQs this many microseconds before sleeping (client and in-process server).
    #[arg(long, default_value_t = dpwarp::rpc::server::POLL_SPIN_US)]
    poll_spin_us: u64,
}

#[derive(Debug, Clone, Default)]
struct Stats {
    calls: u64,
    secs: f64,
    bytes: u64,
    lat_us: Vec<f64>,
}

impl Stats {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs / 1e9
    }
    fn pct(&mut self, p: f64) -> f64 {
        if self.lat_us.is_empty() {
            return 0.0;
        }
        self.lat_us.sort_by(|a, b| a.total_cmp(b));
        let i = ((self.lat_us.len() as f64 - 1.0) * p).round() as usize;
        self.lat_us[i]
    }
    fn line(&mut self, what: &str) -> String {
        let (p50, p99, p999) = (self.pct(0.5), self.pct(0.99), self.pct(0.999));
        format!(
            "{what}: {} calls in {:.2} s = {:.0} calls/s, latency p50 {:.1} us p99 {:.1} us \
             p99.9 {:.1} us, {:.3} Gbit/s",
            self.calls,
            self.secs,
            self.rate(),
            p50,
            p99,
            p999,
            self.gbps()
        )
    }
}

struct Servers {
    rdma: SocketAddr,
    tcp: SocketAddr,
    _keep: Vec<Box<dyn std::any::Any>>,
}

fn start_servers(a: &Args) -> Result<Servers, String> {
    let store = Arc::new(BlockStore::memory((a.size.max(4096) * 2).max(1 << 21)));
    store
        .write(0, &(0..a.size).map(|i| (i % 251) as u8).collect::<Vec<_>>())
        .map_err(|e| format!("store: {e}"))?;
    let mut reg = Registry::new();
    block::register(&mut reg, store);
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let rdma = match a.server {
        Some(s) => s,
        None => {
            let srv = RdmaServer::new(
                reg.clone(),
                ServerConfig {
                    poll_spin: Duration::from_micros(a.poll_spin_us),
                    ..ServerConfig::default()
                },
            );
            let h = srv
                .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
                .map_err(|e| e.to_string())?;
            let addr = h.addr;
            keep.push(Box::new(h));
            addr
        }
    };
    let tcp = match a.tcp_server {
        Some(s) => s,
        None => {
            let h = tcp::serve(SocketAddr::from(([127, 0, 0, 1], 0)), reg)
                .map_err(|e| e.to_string())?;
            let addr = h.addr;
            keep.push(Box::new(h));
            addr
        }
    };
    Ok(Servers {
        rdma,
        tcp,
        _keep: keep,
    })
}

fn args_for(op: &str, size: usize) -> (u32, Body, CallOpts, u64) {
    match op {
        "read" => (
            block::PROC_READ,
            block::read_args(0, size as u32),
            CallOpts {
                write_chunks: vec![size],
                reply_chunk: None,
                segments: 0,
            },
            size as u64,
        ),
        "write" => (
            block::PROC_WRITE,
            block::write_args(0, vec![0x5a; size]),
            CallOpts::default(),
            size as u64,
        ),
        _ => (block::PROC_NULL, Body::new(), CallOpts::default(), 0),
    }
}

fn check_reply(
    op: &str,
    size: usize,
    r: &mut dpwarp::rpc::client::ReplyReader<'_>,
) -> Result<(), String> {
    match op {
        "read" => {
            // Decoded in place (no copy of the data): the status, then the bulk item.
            let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
            if st != block::BLK_OK {
                return Err(format!("READ status {st}"));
            }
            let d = r.get_bulk(block::MAX_IO).map_err(|e| e.to_string())?;
            if d.len() != size || d.last() != Some(&(((size - 1) % 251) as u8)) {
                return Err("READ returned the wrong data".into());
            }
        }
        "write" => {
            let n = block::decode_write(r)
                .map_err(|e| e.to_string())?
                .map_err(|s| format!("WRITE status {s}"))?;
            if n as usize != size {
                return Err("WRITE count wrong".into());
            }
        }
        _ => {}
    }
    Ok(())
}

fn bench_rdma(
    addr: SocketAddr,
    op: &str,
    size: usize,
    credits: u32,
    secs: f64,
    spin_us: u64,
) -> Result<Stats, String> {
    let mut c = RdmaClient::connect_tcp(
        addr,
        ClientConfig {
            credits,
            poll_spin: Duration::from_micros(spin_us),
            ..ClientConfig::default()
        },
    )
    .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut st = Stats::default();
    let mut started: HashMap<u32, Instant> = HashMap::new();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    loop {
        let running = t0.elapsed() < dur;
        while running && c.in_flight() < c.grant().min(credits) {
            let (p, body, opts, _) = args_for(op, size);
            let x = c
                .submit(BLOCK_PROG, BLOCK_VERS, p, body, &opts)
                .map_err(|e| e.to_string())?;
            started.insert(x, Instant::now());
        }
        if c.in_flight() == 0 && !running {
            break;
        }
        let (x, r) = c.wait_any().map_err(|e| e.to_string())?;
        let rep = r.map_err(|e| e.to_string())?;
        let mut rr = rep.results().map_err(|s| format!("call failed: {s:?}"))?;
        check_reply(op, size, &mut rr)?;
        if let Some(t) = started.remove(&x) {
            st.lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        st.calls += 1;
        if op != "null" {
            st.bytes += size as u64;
        }
    }
    st.secs = t0.elapsed().as_secs_f64();
    Ok(st)
}

fn bench_tcp(
    addr: SocketAddr,
    op: &str,
    size: usize,
    credits: u32,
    secs: f64,
) -> Result<Stats, String> {
    let mut c =
        TcpClient::connect(addr, credits as usize).map_err(|e| format!("connect {addr}: {e}"))?;
    let mut st = Stats::default();
    let mut started = std::collections::VecDeque::new();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let account = |st: &mut Stats, t: Instant, rep: tcp::TcpReply| -> Result<(), String> {
        let mut rr = rep.results().map_err(|s| format!("call failed: {s:?}"))?;
        check_reply(op, size, &mut rr)?;
        st.lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        st.calls += 1;
        if op != "null" {
            st.bytes += size as u64;
        }
        Ok(())
    };
    while t0.elapsed() < dur {
        let (p, body, _, _) = args_for(op, size);
        let (_, earlier) = c
            .submit(BLOCK_PROG, BLOCK_VERS, p, &body)
            .map_err(|e| e.to_string())?;
        started.push_back(Instant::now());
        if let Some(rep) = earlier {
            let t = started.pop_front().expect("started");
            account(&mut st, t, rep)?;
        }
    }
    while c.in_flight() > 0 {
        let rep = c.wait_next().map_err(|e| e.to_string())?;
        let t = started.pop_front().expect("started");
        account(&mut st, t, rep)?;
    }
    st.secs = t0.elapsed().as_secs_f64();
    Ok(st)
}

/// Reference: raw verbs RDMA Write of `size` bytes with `depth` outstanding, over the same
/// kernel TCP transport (what a READ through write chunks is compared against).
fn bench_verbs_write(size: usize, depth: usize, secs: f64) -> Result<f64, String> {
    let l = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let sdev = Device::open();
    let spd = sdev.alloc_pd();
    let target = spd.reg_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (addr_tx, rkey) = (target.addr(), target.stag());
    let scq = Cq::new(16);
    let sqp = Qp::new(&spd, &QpInitAttr::new(&scq));
    let server = thread::spawn(move || -> Result<(), String> {
        let req = l
            .get_request(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        req.accept(&sqp, &ConnParam::default())
            .map_err(|e| e.to_string())?;
        sqp.wait_closed(Duration::from_secs_f64(secs + 30.0));
        Ok(())
    });
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(4096);
    let attr = QpInitAttr {
        cap: QpCap {
            max_send_wr: 1024,
            max_recv_wr: 16,
        },
        ..QpInitAttr::new(&cq)
    };
    let qp = Qp::new(&pd, &attr);
    cm::connect_tcp(addr, &qp, &ConnParam::default()).map_err(|e| e.to_string())?;
    let src = pd.reg_mr(size, Access::LOCAL_WRITE);
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let mut inflight = 0usize;
    let mut done = 0u64;
    let mut id = 0u64;
    while t0.elapsed() < dur || inflight > 0 {
        while t0.elapsed() < dur && inflight < depth {
            id += 1;
            qp.post_send(SendWr {
                wr_id: id,
                opcode: Opcode::Write {
                    remote_addr: addr_tx,
                    rkey,
                },
                sg_list: vec![sge(&src, 0, size)],
                signaled: true,
            })
            .map_err(|e| e.to_string())?;
            inflight += 1;
        }
        let wc = cq
            .wait(Duration::from_secs(10))
            .ok_or("RDMA Write completion timed out")?;
        if wc.status != WcStatus::Success {
            return Err(format!("RDMA Write failed: {:?}", wc.status));
        }
        inflight -= 1;
        done += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    qp.disconnect();
    let _ = server.join();
    Ok(done as f64 * size as f64 * 8.0 / secs / 1e9)
}

pub fn run(a: Args) -> Result<(), String> {
    super::rpc_server::check_transport(&a.transport)?;
    let servers = start_servers(&a)?;
    if a.compare {
        let mib = 1 << 20;
        let a1 = Args {
            size: mib,
            ..a.clone()
        };
        let s = if a.server.is_none() && a.tcp_server.is_none() && a.size != mib {
            start_servers(&a1)?
        } else {
            servers
        };
        let secs = a.seconds;
        let mut nr = bench_rdma(s.rdma, "null", 0, a.credits, secs, a.poll_spin_us)?;
        let mut nt = bench_tcp(s.tcp, "null", 0, a.credits, secs)?;
        let mut rr = bench_rdma(s.rdma, "read", mib, a.credits, secs, a.poll_spin_us)?;
        let mut rt = bench_tcp(s.tcp, "read", mib, a.credits, secs)?;
        let wv = bench_verbs_write(mib, a.credits as usize, secs)?;
        if a.json {
            let j = serde_json::json!({
                "transport": a.transport,
                "credits": a.credits,
                "seconds_per_run": secs,
                "null_calls_per_s_rdma": nr.rate(),
                "null_calls_per_s_tcp": nt.rate(),
                "null_calls_ratio": nr.rate() / nt.rate(),
                "read_1m_gbps_rdma": rr.gbps(),
                "read_1m_gbps_tcp": rt.gbps(),
                "write_1m_gbps_verbs": wv,
                "read_1m_vs_verbs_write_ratio": rr.gbps() / wv,
                "null_p50_us_rdma": nr.pct(0.5),
                "null_p99_us_rdma": nr.pct(0.99),
                "null_p50_us_tcp": nt.pct(0.5),
                "null_p99_us_tcp": nt.pct(0.99),
                "dpdk": "not wired: the DPDK dataplane is not in dpwarp yet; numbers are iWARP over kernel TCP",
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?
            );
        } else {
            println!("{}", nr.line("rdma NULL"));
            println!("{}", nt.line("tcp  NULL"));
            println!("{}", rr.line("rdma READ 1 MiB (write chunks)"));
            println!("{}", rt.line("tcp  READ 1 MiB"));
            println!("verbs RDMA Write 1 MiB x{}: {wv:.3} Gbit/s", a.credits);
            println!(
                "NULL ratio rdma/tcp {:.2}; READ 1 MiB / verbs Write {:.2}",
                nr.rate() / nt.rate(),
                rr.gbps() / wv
            );
        }
        return Ok(());
    }
    let mut st = match a.proto.as_str() {
        "rdma" => bench_rdma(
            servers.rdma,
            &a.op,
            a.size,
            a.credits,
            a.seconds,
            a.poll_spin_us,
        )?,
        "tcp" => bench_tcp(servers.tcp, &a.op, a.size, a.credits, a.seconds)?,
        p => return Err(format!("--proto {p:?}: expected rdma or tcp")),
    };
    if a.json {
        let j = serde_json::json!({
            "proto": a.proto, "op": a.op, "size": a.size, "credits": a.credits,
            "calls": st.calls, "seconds": st.secs, "calls_per_s": st.rate(),
            "p50_us": st.pct(0.5), "p99_us": st.pct(0.99), "p999_us": st.pct(0.999),
            "gbps": st.gbps(),
        });
        println!("{j}");
    } else {
        let what = format!(
            "{} {} {}",
            a.proto,
            a.op,
            if a.op == "null" {
                String::new()
            } else {
                format!("{} B", a.size)
            }
        );
        println!("{}", st.line(&what));
    }
    Ok(())
}
