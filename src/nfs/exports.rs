//! Who may use an export, and as whom: the client list of an export written as in Linux's
//! exports(5), e.g. `["192.0.2.0/24(rw,no_root_squash)", "198.51.100.7", "*(ro)"]`.
//!
//! A client is matched by the address of the connection its call arrived on (the RDMA
//! connection for NFS, the TCP connection for MOUNT): an exact address first, then networks in
//! the order written, then `*` (exports(5) "Machine Name Formats": the first match in that
//! order wins). A client that matches nothing is refused: MOUNT answers MNT3ERR_ACCES (RFC 1813
//! App. I §5.1.5), an RDMA connection is rejected in MPA (RFC 5044 §7.1.4), a call is
//! NFS3ERR_ACCES; each with a log line.
//!
//! Options (knfsd's defaults where one is left out): `ro` (default) / `rw`; `root_squash`
//! (default) / `no_root_squash`: uid 0 becomes `anonuid` and gid 0 `anongid`, in the group
//! list too; `all_squash` / `no_all_squash` (default): every caller becomes
//! `anonuid`/`anongid`; `anonuid=N`, `anongid=N` (default 65534); `secure` (default) /
//! `insecure`: MOUNT must come from a port below 1024. RDMA connections are not held to
//! `secure`, as knfsd's svcrdma does not (rdma_cm chooses the initiator's port). `sync`,
//! `wdelay`, `no_wdelay`, `no_subtree_check` are accepted: they describe what the server does
//! anyway. Anything else (`async`, `subtree_check`, host names, netgroups, wildcards other
//! than `*`) is refused when the configuration is read, with the entry named.

use std::net::{IpAddr, SocketAddr};

use crate::wire::oncrpc::{Auth, Gids};

/// uid and gid of an anonymous caller unless `anonuid` / `anongid` say otherwise
/// (`nobody` / `nogroup` on Linux).
pub const ANON_ID: u32 = 65534;

/// What one client entry allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// `rw`: changes are allowed (else NFS3ERR_ROFS).
    pub rw: bool,
    /// `root_squash`: uid/gid 0 become the anonymous ids.
    pub root_squash: bool,
    /// `all_squash`: every caller becomes the anonymous ids.
    pub all_squash: bool,
    /// `anonuid=`.
    pub anonuid: u32,
    /// `anongid=`.
    pub anongid: u32,
    /// `secure`: MOUNT from a reserved port (below 1024) only.
    pub secure: bool,
}

impl Default for ExportOptions {
    /// knfsd's defaults: `ro,root_squash,no_all_squash,secure`, anonymous 65534.
    fn default() -> Self {
        ExportOptions {
            rw: false,
            root_squash: true,
            all_squash: false,
            anonuid: ANON_ID,
            anongid: ANON_ID,
            secure: true,
        }
    }
}

/// The identity a call's file-system work runs as, after squashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// fsuid.
    pub uid: u32,
    /// fsgid.
    pub gid: u32,
    /// Supplementary groups.
    pub gids: Gids,
}

impl ExportOptions {
    /// The identity a call with credential `auth` runs as (RFC 5531 App. A: AUTH_SYS names
    /// the caller; AUTH_NONE is anonymous).
    pub fn identity(&self, auth: &Auth) -> Identity {
        let anon = Identity {
            uid: self.anonuid,
            gid: self.anongid,
            gids: Gids::new(),
        };
        let s = match auth {
            Auth::Sys(s) if !self.all_squash => s,
            _ => return anon,
        };
        let sq = |id: u32, to: u32| if self.root_squash && id == 0 { to } else { id };
        Identity {
            uid: sq(s.uid, self.anonuid),
            gid: sq(s.gid, self.anongid),
            gids: s.gids.iter().map(|g| sq(*g, self.anongid)).collect(),
        }
    }

    fn apply(&mut self, opt: &str) -> Result<(), String> {
        let num = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("option {opt:?}: not a number"))
        };
        match opt.split_once('=') {
            Some(("anonuid", v)) => self.anonuid = num(v)?,
            Some(("anongid", v)) => self.anongid = num(v)?,
            Some(_) => return Err(format!("unknown option {opt:?}")),
            None => match opt {
                "rw" => self.rw = true,
                "ro" => self.rw = false,
                "root_squash" => self.root_squash = true,
                "no_root_squash" => self.root_squash = false,
                "all_squash" => self.all_squash = true,
                "no_all_squash" => self.all_squash = false,
                "secure" => self.secure = true,
                "insecure" => self.secure = false,
                "sync" | "wdelay" | "no_wdelay" | "no_subtree_check" => {}
                "async" => {
                    return Err(
                        "option \"async\" is not offered: WRITE FILE_SYNC and COMMIT \
                                always reach stable storage (RFC 1813 §3.3.7)"
                            .into(),
                    )
                }
                "subtree_check" => {
                    return Err(
                        "option \"subtree_check\" is not offered (handles are checked \
                                as with no_subtree_check; docs/nfs.md)"
                            .into(),
                    )
                }
                _ => return Err(format!("unknown option {opt:?}")),
            },
        }
        Ok(())
    }
}

/// Which clients an entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// One address.
    Host(IpAddr),
    /// A network: address and prefix length.
    Net(IpAddr, u8),
    /// `*`: every client.
    Any,
}

impl Who {
    fn parse(s: &str) -> Result<Who, String> {
        if s == "*" {
            return Ok(Who::Any);
        }
        let bad = || {
            format!(
                "client {s:?}: give an IP address, a network (192.0.2.0/24 or \
                 192.0.2.0/255.255.255.0) or *; host names, netgroups and wildcards are not \
                 offered"
            )
        };
        let (a, len) = match s.split_once('/') {
            None => return s.parse().map(Who::Host).map_err(|_| bad()),
            Some(x) => x,
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len.parse::<u8>() {
            Ok(p) if p <= max => p,
            Ok(_) => return Err(bad()),
            Err(_) => match len.parse::<IpAddr>() {
                Ok(IpAddr::V4(m)) if addr.is_ipv4() => {
                    let m = u32::from(m);
                    if m.leading_ones() + m.trailing_zeros() != 32 {
                        return Err(bad());
                    }
                    m.leading_ones() as u8
                }
                _ => return Err(bad()),
            },
        };
        Ok(Who::Net(addr, prefix))
    }

    fn matches(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match *self {
            Who::Any => true,
            Who::Host(a) => canonical(a) == ip,
            Who::Net(a, p) => match (canonical(a), ip) {
                (IpAddr::V4(n), IpAddr::V4(x)) => {
                    let m = u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0);
                    u32::from(n) & m == u32::from(x) & m
                }
                (IpAddr::V6(n), IpAddr::V6(x)) => {
                    let m = u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0);
                    u128::from(n) & m == u128::from(x) & m
                }
                _ => false,
            },
        }
    }

    /// exports(5) order: a single host, then networks, then `*`.
    fn rank(&self) -> u8 {
        match self {
            Who::Host(_) => 0,
            Who::Net(..) => 1,
            Who::Any => 2,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// One entry: who, and with which options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    who: Who,
    /// The options of the entry.
    pub options: ExportOptions,
    /// The entry as written (for log lines).
    pub text: String,
}

/// The client list of an export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientList {
    rules: Vec<ClientRule>,
}

impl ClientList {
    /// Parse exports(5)-style entries: `WHO` or `WHO(opt,opt,...)`.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<ClientList, String> {
        let mut rules = Vec::new();
        for e in entries {
            let text = e.as_ref().trim();
            let (who, opts) = match text.split_once('(') {
                None => (text, ""),
                Some((w, rest)) => {
                    let opts = rest
                        .strip_suffix(')')
                        .ok_or_else(|| format!("client {text:?}: options must end with ')'"))?;
                    (w, opts)
                }
            };
            let mut options = ExportOptions::default();
            for o in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                options
                    .apply(o)
                    .map_err(|m| format!("client {text:?}: {m}"))?;
            }
            rules.push(ClientRule {
                who: Who::parse(who.trim())?,
                options,
                text: text.to_string(),
            });
        }
        // Stable: entries of one kind keep the order they were written in.
        rules.sort_by_key(|r| r.who.rank());
        Ok(ClientList { rules })
    }

    /// Every client, with these options (a program embedding the server, tests).
    pub fn everyone(options: ExportOptions) -> ClientList {
        ClientList {
            rules: vec![ClientRule {
                who: Who::Any,
                options,
                text: "*".into(),
            }],
        }
    }

    /// The entries, in the order they are matched.
    pub fn rules(&self) -> &[ClientRule] {
        &self.rules
    }

    /// Whether there are no entries (nobody may use the export).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The entry a client at `peer` falls under; `None`: refused. A caller whose address is
    /// unknown (an in-memory link) matches only `*`.
    pub fn rule_for(&self, peer: Option<SocketAddr>) -> Option<&ClientRule> {
        self.rules.iter().find(|r| match peer {
            Some(p) => r.who.matches(p.ip()),
            None => r.who == Who::Any,
        })
    }

    /// Every rule refuses writes (a read-only export).
    pub fn set_read_only(&mut self) {
        for r in &mut self.rules {
            r.options.rw = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::oncrpc::AuthSys;

    fn at(ip: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().unwrap(), 700))
    }

    #[test]
    fn exports5_entries_parse_and_match_in_its_order() {
        let l = ClientList::parse(&[
            "*(ro)",
            "192.0.2.0/24(rw,no_root_squash,insecure)",
            "192.0.2.7(rw,all_squash,anonuid=1000,anongid=100)",
            "10.0.0.0/255.0.0.0",
            "2001:db8::/32(rw)",
        ])
        .unwrap();
        let o = |ip| l.rule_for(at(ip)).unwrap().options;
        assert_eq!(
            o("192.0.2.7"),
            ExportOptions {
                rw: true,
                root_squash: true,
                all_squash: true,
                anonuid: 1000,
                anongid: 100,
                secure: true
            }
        );
        assert!(o("192.0.2.8").rw && !o("192.0.2.8").root_squash && !o("192.0.2.8").secure);
        assert_eq!(o("10.1.2.3"), ExportOptions::default());
        assert!(o("2001:db8::1").rw);
        assert!(!o("203.0.113.1").rw);
        assert!(
            o("::ffff:192.0.2.9").rw,
            "IPv4-mapped addresses match IPv4 rules"
        );
        assert_eq!(l.rule_for(None).unwrap().text, "*(ro)");
        let only = ClientList::parse(&["192.0.2.0/24"]).unwrap();
        assert!(only.rule_for(at("198.51.100.1")).is_none());
        assert!(only.rule_for(None).is_none());
    }

    #[test]
    fn what_exports5_has_but_dpwarp_does_not_offer_is_refused() {
        for bad in [
            "host.example(rw)",
            "@netgroup",
            "192.0.2.*",
            "192.0.2.0/33",
            "192.0.2.0/255.0.255.0",
            "*(rw,async)",
            "*(subtree_check)",
            "*(bogus)",
            "*(anonuid=x)",
            "*(rw",
        ] {
            assert!(ClientList::parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn squashing_maps_root_or_everyone_to_the_anonymous_ids() {
        let sys = |uid, gid, gids: &[u32]| {
            Auth::Sys(AuthSys {
                stamp: 0,
                machinename: Default::default(),
                uid,
                gid,
                gids: gids.into(),
            })
        };
        let d = ExportOptions::default();
        assert_eq!(
            d.identity(&sys(0, 0, &[0, 5])),
            Identity {
                uid: ANON_ID,
                gid: ANON_ID,
                gids: Gids::from_slice(&[ANON_ID, 5])
            }
        );
        assert_eq!(d.identity(&sys(1000, 1000, &[])).uid, 1000);
        assert_eq!(d.identity(&Auth::None).uid, ANON_ID);
        let no = ExportOptions {
            root_squash: false,
            ..d
        };
        assert_eq!(no.identity(&sys(0, 0, &[])).uid, 0);
        let all = ExportOptions {
            all_squash: true,
            anonuid: 7,
            anongid: 8,
            ..d
        };
        assert_eq!(
            all.identity(&sys(1000, 1000, &[1])),
            Identity {
                uid: 7,
                gid: 8,
                gids: Gids::new()
            }
        );
    }
}
