//! The `[rdma]` section of a server's TOML configuration: the RPC-over-RDMA server's settings
//! as an administrator writes them (`rpc-server` and `nfs-server` share it; configs/README.md
//! lists the keys), turned into a [`ServerConfig`] by [`RdmaSection::server_config`].

use std::time::Duration;

use serde::Deserialize;

use super::server::ServerConfig;
use crate::cm::{ConnParam, ListenConfig};
use crate::wire::xdr::Padding;

/// `[rdma]`: every key optional, [`ServerConfig`]'s defaults where left out.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaSection {
    /// Largest inline call accepted (receive buffer size; at least 1024).
    pub inline_recv: u32,
    /// Largest inline reply sent (at least 1024).
    pub inline_send: u32,
    /// Alignment of bulk data in a reply (RFC 8166 §3.4.6 padding; 0: none).
    pub align: u32,
    /// Bulk data of at least this many octets is padded to `align` (needs `align` >= 4).
    pub reply_padding_thresh: Option<u32>,
    /// Receive buffers shared by all connections.
    pub credit_pool: u32,
    /// Largest credit grant per connection (RFC 8166 §3.3).
    pub max_credits: u32,
    /// How long a reply's read chunk waits for RDMA_DONE (the draft's; milliseconds).
    pub done_timeout_ms: u64,
    /// Largest read chunk pulled or reply exposed (octets).
    pub max_chunk: usize,
    /// IRD offered in MPA (RFC 6581 §9.1).
    pub ird: u16,
    /// ORD offered in MPA (RFC 6581 §9.1).
    pub ord: u16,
    /// Ask for MPA CRCs (RFC 5044 §7.1.2).
    pub crc: bool,
    /// How long a connection's thread spins on its CQ before it sleeps (microseconds).
    pub poll_spin_us: u64,
    /// Kernel TCP: an incoming connection's whole MPA Request within this many ms, else it is
    /// closed (RFC 5044 §7.1.2 item 10; default 5000).
    pub mpa_timeout_ms: u64,
    /// Kernel TCP: MPA startups in progress at most (default 256).
    pub max_startups: usize,
    /// Kernel TCP: keep-alives on accepted connections after this many ms idle, and between
    /// them; the connection is reset after `keepalive_probes` unanswered (a client that
    /// vanished while idle). 0 (default): off. Over DPDK: the dataplane config's `[tcp]
    /// keepalive_ms`.
    pub keepalive_ms: u64,
    /// Kernel TCP: unanswered keep-alives before giving up (default 3).
    pub keepalive_probes: u32,
    /// RFC 5044 App. C: "refuse" (default: an MPA Rev 0 Request is closed without a reply,
    /// RFC 5044 §7.1.1) or "permissive" (RDMA Consortium peers get a Rev 0 Reply and DDP/RDMAP
    /// version 0 with markers and CRC both ways).
    pub mpa_rev0: String,
    /// Threads running blocking procedures (the file store's READ/WRITE, NFS) for connections
    /// served to completion on a driven dataplane worker or a kernel-TCP QP's driver thread
    /// (default 2), shared by all connections.
    pub handler_threads: usize,
    /// CPUs of those threads (default: the process's; on a server whose clients are
    /// elsewhere, CPUs no dataplane worker is pinned to; docs/rpc.md "How a call is served").
    pub handler_cpus: Option<Vec<usize>>,
}

impl Default for RdmaSection {
    fn default() -> Self {
        let s = ServerConfig::default();
        RdmaSection {
            inline_recv: s.inline_recv,
            inline_send: s.inline_send,
            align: 0,
            reply_padding_thresh: None,
            credit_pool: s.credit_pool,
            max_credits: s.max_credits,
            done_timeout_ms: s.done_timeout.as_millis() as u64,
            max_chunk: s.max_chunk,
            ird: 16,
            ord: 16,
            crc: true,
            poll_spin_us: s.poll_spin.as_micros() as u64,
            mpa_timeout_ms: ListenConfig::default().mpa_timeout.as_millis() as u64,
            max_startups: ListenConfig::default().max_startups,
            keepalive_ms: 0,
            keepalive_probes: ListenConfig::default().keepalive_probes,
            mpa_rev0: "refuse".into(),
            handler_threads: s.handler_threads,
            handler_cpus: None,
        }
    }
}

/// Read a server's TOML configuration file of type `T` and check its `[rdma]` section
/// (`rdma` picks it out): the one loader of `rpc-server` and `nfs-server` files.
pub fn load_server_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    rdma: impl Fn(&T) -> &RdmaSection,
) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let c: T = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    rdma(&c)
        .check()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(c)
}

impl RdmaSection {
    /// Values serde cannot check: `mpa_rev0` is "refuse" or "permissive".
    pub fn check(&self) -> Result<(), String> {
        if matches!(self.mpa_rev0.as_str(), "refuse" | "permissive") {
            Ok(())
        } else {
            Err(format!(
                "[rdma] mpa_rev0 = {:?}: \"refuse\" or \"permissive\"",
                self.mpa_rev0
            ))
        }
    }

    /// The server settings this section describes (kernel TCP's listener settings included;
    /// on DPDK the dataplane config's `[tcp]` ones apply instead).
    pub fn server_config(&self) -> ServerConfig {
        ServerConfig {
            inline_recv: self.inline_recv.max(1024),
            inline_send: self.inline_send.max(1024),
            align: self.align,
            reply_padding: match (self.reply_padding_thresh, self.align) {
                (Some(thresh), align) if align >= 4 => Some(Padding { align, thresh }),
                _ => None,
            },
            max_chunk: self.max_chunk,
            done_timeout: Duration::from_millis(self.done_timeout_ms),
            credit_pool: self.credit_pool,
            max_credits: self.max_credits,
            conn: ConnParam {
                responder_resources: self.ird,
                initiator_depth: self.ord,
                crc: self.crc,
                ..ConnParam::default()
            },
            poll_spin: Duration::from_micros(self.poll_spin_us),
            handler_threads: self.handler_threads.max(1),
            handler_cpus: self.handler_cpus.clone(),
            // Kernel TCP's; on DPDK the dataplane config's `[tcp]` values apply.
            listen: Some(ListenConfig {
                mpa_timeout: Duration::from_millis(self.mpa_timeout_ms),
                max_startups: self.max_startups,
                keepalive_ms: self.keepalive_ms,
                keepalive_probes: self.keepalive_probes.max(1),
                mpa_rev0_permissive: self.mpa_rev0 == "permissive",
                ..ListenConfig::default()
            }),
            admit: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_section_takes_the_server_defaults_for_the_rest() {
        let s: RdmaSection = toml::from_str("max_credits = 32\ncrc = false\n").unwrap();
        let c = s.server_config();
        let d = ServerConfig::default();
        assert_eq!((c.max_credits, c.conn.crc), (32, false));
        assert_eq!(
            (c.inline_recv, c.credit_pool),
            (d.inline_recv, d.credit_pool)
        );
        assert!(toml::from_str::<RdmaSection>("bogus = 1\n").is_err());
    }
}
