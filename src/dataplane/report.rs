//! What each port's PMD granted, read back after `rte_eth_dev_configure` and
//! `rte_eth_dev_start` (not what dpwarp planned): the device as the EAL names it, its bus and
//! driver, queues, link, MTU, offloads offered and in force, RSS. Logged once per port at
//! start (info) and carried in the tools' `--json` output as `"ports"`.

use std::sync::Arc;

use crate::dpdk::{offload, Port, PortGrant, PortInfo};

/// One configured port as its PMD set it up ([`super::Dataplane::port_reports`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PortReport {
    /// The port's `[[port]]` index in the config.
    pub index: usize,
    /// The ethdev port id.
    pub port_id: u16,
    /// `device` as the config gives it (a vdev name, a PCI address, `ring:NAME:a|b`).
    pub config_device: String,
    /// The device as the EAL names it (`rte_dev_name`): for PCI the address, e.g.
    /// `0000:00:05.0`; for a vdev its name, e.g. `net_tap0`.
    pub device: String,
    /// The device's bus (`rte_bus_name`): `pci`, `vdev`.
    pub bus: String,
    /// The PMD (`rte_eth_dev_info::driver_name`), e.g. `net_virtio`, `net_tap`.
    pub driver: String,
    /// Rx queues configured (one per worker).
    pub rx_queues: u16,
    /// Tx queues configured.
    pub tx_queues: u16,
    /// Most rx queues the device offers.
    pub max_rx_queues: u16,
    /// Most tx queues the device offers.
    pub max_tx_queues: u16,
    /// Link status when the report was read.
    pub link_up: bool,
    /// Link speed in Mbit/s when the report was read (None: the PMD does not know).
    pub link_speed_mbps: Option<u32>,
    /// The PMD's MTU (`rte_eth_dev_get_mtu`; None where it keeps none).
    pub mtu: Option<u16>,
    /// The IP MTU dpwarp uses on the link (the config's `mtu`, 1500 by default); the PMD's may
    /// differ (net_memif above 1500, docs/dataplane.md "MTU").
    pub link_mtu: u16,
    /// Rx offloads the PMD offers (`rx_offload_capa`), by DPDK's names, e.g.
    /// `ipv4_cksum,udp_cksum,tcp_cksum,scatter`.
    pub rx_offload_capa: String,
    /// Tx offloads the PMD offers (`tx_offload_capa`), e.g.
    /// `ipv4_cksum,udp_cksum,tcp_cksum,tcp_tso,multi_segs`.
    pub tx_offload_capa: String,
    /// Rx offloads in force (`rte_eth_dev_conf_get`: `rxmode.offloads`), `none` if none.
    pub rx_offloads: String,
    /// Tx offloads in force (`txmode.offloads`).
    pub tx_offloads: String,
    /// The config's `checksum` setting.
    pub checksum: String,
    /// The checksums the PMD handles as a result, e.g. `tx ipv4,tcp rx ipv4,tcp`.
    pub checksum_offload: String,
    /// Receive side scaling.
    pub rss: RssReport,
    /// TCP segmentation offload.
    pub tso: TsoReport,
}

/// A port's TCP segmentation offload (port setting `tso`, docs/dataplane.md "TCP segmentation
/// offload").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TsoReport {
    /// The setting: `auto` or `off`.
    pub setting: String,
    /// Segments of several frames go to the PMD whole.
    pub granted: bool,
    /// Most mbufs of one such segment (the PMD's `nb_seg_max`) when granted, else why not.
    pub detail: String,
}

impl TsoReport {
    pub(super) fn new(setting: &str, plan: &Result<super::device::Tso, String>) -> TsoReport {
        TsoReport {
            setting: setting.to_string(),
            granted: plan.is_ok(),
            detail: match plan {
                Ok(t) => format!("chains of at most {} mbufs", t.max_segs),
                Err(why) => why.clone(),
            },
        }
    }
}

/// A port's RSS as its PMD reports it (docs/workers.md "Flow steering between a port's
/// workers": dpwarp asks for the symmetric key and a round-robin table on ports of more than
/// one queue).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RssReport {
    /// RSS was configured (`rxmode.mq_mode`: more than one queue on a PMD with RSS).
    pub asked: bool,
    /// The hash functions in use (`rte_eth_dev_rss_hash_conf_get`), by their `RTE_ETH_RSS_*`
    /// names; `none` when 0, `unsupported` when the PMD has no RSS to report.
    pub hash_functions: String,
    /// The key read back is the symmetric one dpwarp asked for (`6d5a` repeated): false when
    /// it differs, cannot be read, or RSS was not asked for.
    pub symmetric_key: bool,
    /// Octets of the PMD's hash key (0: none).
    pub key_size: u8,
    /// Entries of the redirection table (0: none).
    pub reta_size: u16,
}

/// What the config and dpwarp's plan say of a port, which its PMD cannot.
pub(super) struct Planned<'a> {
    /// The `[[port]]` index.
    pub index: usize,
    /// Its `device`.
    pub config_device: &'a str,
    /// The IP MTU on the link.
    pub link_mtu: u16,
    /// The `checksum` setting.
    pub checksum: &'a str,
    /// The checksums offloaded as a result.
    pub checksum_offload: String,
    /// TCP segmentation offload.
    pub tso: TsoReport,
}

impl PortReport {
    /// The report of `port` from what its PMD reported back (`info`, `grant`) and what only
    /// the config and the plan know.
    pub(super) fn new(
        port: Port,
        info: &PortInfo,
        grant: &PortGrant,
        planned: Planned<'_>,
    ) -> PortReport {
        // The key csrc/shim.c `dpw_port_setup` asks for: `6d5a` over the PMD's key size
        // (`steer::SYMMETRIC_KEY` is its first 40 octets).
        let (hash_functions, symmetric_key) = match &grant.rss {
            Ok((hf, key)) => (
                offload::rss_names(*hf),
                grant.rss_asked
                    && !key.is_empty()
                    && key
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == if i % 2 == 0 { 0x6d } else { 0x5a }),
            ),
            Err(_) => ("unsupported".to_string(), false),
        };
        let mut r = PortReport {
            index: planned.index,
            port_id: port.id(),
            config_device: planned.config_device.to_string(),
            device: grant.name.clone(),
            bus: grant.bus.clone(),
            driver: info.driver.clone(),
            rx_queues: grant.rx_queues,
            tx_queues: grant.tx_queues,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            link_up: false,
            link_speed_mbps: None,
            mtu: None,
            link_mtu: planned.link_mtu,
            rx_offload_capa: offload::rx_names(info.rx_offload_capa),
            tx_offload_capa: offload::tx_names(info.tx_offload_capa),
            rx_offloads: offload::rx_names(grant.rx_offloads),
            tx_offloads: offload::tx_names(grant.tx_offloads),
            checksum: planned.checksum.to_string(),
            checksum_offload: planned.checksum_offload,
            rss: RssReport {
                asked: grant.rss_asked,
                hash_functions,
                symmetric_key,
                key_size: info.hash_key_size,
                reta_size: info.reta_size,
            },
            tso: planned.tso,
        };
        r.refresh(port);
        r
    }

    /// Read the link and the MTU again (a memif link comes up when its peer attaches).
    fn refresh(&mut self, port: Port) {
        // `RTE_ETH_SPEED_NUM_UNKNOWN` is u32::MAX, `_NONE` 0.
        (self.link_speed_mbps, self.link_up) = match port.link() {
            Ok((speed, up)) => ((speed != 0 && speed != u32::MAX).then_some(speed), up),
            Err(_) => (None, false),
        };
        self.mtu = port.mtu().ok();
    }

    /// The one log line of the report.
    pub fn describe(&self) -> String {
        let speed = self
            .link_speed_mbps
            .map_or_else(|| "speed unknown".to_string(), |s| format!("{s} Mbit/s"));
        let mtu = self
            .mtu
            .map_or_else(|| "none".to_string(), |m| m.to_string());
        let rss = if self.rss.hash_functions == "unsupported" {
            format!("unsupported (reta {})", self.rss.reta_size)
        } else {
            format!(
                "{} (key {}, reta {}{})",
                self.rss.hash_functions,
                if self.rss.symmetric_key {
                    "symmetric"
                } else {
                    "not the symmetric one"
                },
                self.rss.reta_size,
                if self.rss.asked { "" } else { "; not asked" }
            )
        };
        format!(
            "{} (bus {}, driver {}): queues rx {} tx {} (max {}/{}), link {} {speed}, mtu {mtu} \
             (dpwarp's {}); rx offloads {} of {}; tx offloads {} of {}; rss {rss}; tso {}",
            self.device,
            self.bus,
            self.driver,
            self.rx_queues,
            self.tx_queues,
            self.max_rx_queues,
            self.max_tx_queues,
            if self.link_up { "up" } else { "down" },
            self.link_mtu,
            self.rx_offloads,
            self.rx_offload_capa,
            self.tx_offloads,
            self.tx_offload_capa,
            if self.tso.granted {
                "in use"
            } else {
                "not used"
            },
        )
    }
}

/// The port reports of a running dataplane, readable from any thread
/// ([`super::Dataplane::port_reporter`]); each read refreshes the link and MTU.
#[derive(Clone, Default)]
pub struct PortReporter(Arc<Vec<(Port, PortReport)>>);

impl PortReporter {
    pub(super) fn new(v: Vec<(Port, PortReport)>) -> PortReporter {
        PortReporter(Arc::new(v))
    }

    /// Every configured port's report, in config order, with the link and MTU as they are now.
    pub fn reports(&self) -> Vec<PortReport> {
        self.0
            .iter()
            .map(|(p, r)| {
                let mut r = r.clone();
                r.refresh(*p);
                r
            })
            .collect()
    }
}
