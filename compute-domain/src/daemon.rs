//! The pure parts of `graft-imex-daemon`, the IMEX daemon pod's entry point: which members
//! of a domain its IMEX daemon lists and under which names, when to (re)start or only
//! re-resolve it, and the files it reads.
//!
//! Facts (NVIDIA's IMEX guide, "IMEX Service Config Options" and "Signal handling"):
//! `nvidia-imex -c config.cfg` reads `KEY=VALUE` lines and the node list
//! (`IMEX_NODE_CONFIG_FILE`, one peer a line, the same on every node) once at startup;
//! SIGUSR1 makes it reload its TLS credentials and restart its outgoing connections, at
//! most once every 5 s; a changed list discards its persisted state. NVIDIA's own
//! ComputeDomain daemon (k8s-dra-driver-gpu, cmd/compute-domain-daemon/dnsnames.go) lists
//! fixed DNS names instead of addresses, maps them in the pod's /etc/hosts and sends SIGUSR1
//! when the mapping changes. So does this: the list is `graft-imex-<index>` for every place
//! of the domain (`0..numNodes`, or more while more members are listed), each member keeps
//! its place (the controller's record, `members::places`), and a member replaced changes
//! one line of /etc/hosts and signals the daemon, never restarting it. Only a longer list
//! (more members than places) or this node's own place changing restarts it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use crate::crd::NodeStatus;

/// The config file's name in the daemon's directory.
pub const CONFIG_FILE: &str = "config.cfg";
/// The node list's name in the daemon's directory.
pub const NODES_FILE: &str = "nodes_config.cfg";
/// The prefix of the names the node list gives the domain's places.
pub const NAME_PREFIX: &str = "graft-imex-";
/// How long the IMEX daemon ignores a SIGUSR1 after one (the guide's "once every 5 s").
pub const SIGNAL_SPACING: std::time::Duration = std::time::Duration::from_secs(5);

/// Places an elastic domain (`numNodes: 0`) lists from the start: one NVL72 rack's 18
/// compute trays, as NVIDIA's driver lists by default (`maxNodesPerIMEXDomain`).
pub const ELASTIC_PLACES: usize = 18;
/// Where an elastic domain's names of places no member holds point: a multicast address, to
/// which Linux refuses a TCP connection at once (ENETUNREACH) whatever listens on the host,
/// so `nvidia-imex` neither looks the name up nor waits on it.
pub const UNUSED_PLACE: IpAddr = IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1));

/// The name of place `index` in the node list.
pub fn name(index: u32) -> String {
    format!("{NAME_PREFIX}{index}")
}

/// The domain's members in `clique` by place: those with a place keep it (the first of two
/// claiming one), the others (a record of an older controller) take the lowest free places
/// in address order. Members of another clique are left out (IMEX daemons only join peers
/// of their own clique), and so are members without a valid address (no pod yet).
pub fn members(nodes: &[NodeStatus], clique: &str) -> BTreeMap<u32, IpAddr> {
    let mut by_place = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut unplaced = Vec::new();
    for n in nodes.iter().filter(|n| n.clique_id == clique) {
        let Ok(ip) = n.ip_address.parse::<IpAddr>() else {
            continue;
        };
        if !seen.insert(ip) {
            continue;
        }
        match n.index {
            Some(i) if !by_place.contains_key(&i) => {
                by_place.insert(i, ip);
            }
            _ => unplaced.push(ip),
        }
    }
    unplaced.sort();
    let mut next = 0;
    for ip in unplaced {
        while by_place.contains_key(&next) {
            next += 1;
        }
        by_place.insert(next, ip);
    }
    by_place
}

/// How many names the list holds for these members: `num_nodes` ([`ELASTIC_PLACES`] for an
/// elastic domain, `num_nodes` 0), or more when a member's place is beyond.
pub fn places(members: &BTreeMap<u32, IpAddr>, num_nodes: usize) -> usize {
    let last = members.keys().next_back().map_or(0, |i| *i as usize + 1);
    let fixed = if num_nodes == 0 {
        ELASTIC_PLACES
    } else {
        num_nodes
    };
    last.max(fixed)
}

/// What the hosts file maps: the members, and in an elastic domain every other of the
/// `places` names to [`UNUSED_PLACE`]. (A fixed domain starts with every name held, and a
/// name whose member left stays unmapped: the domain is not Ready without it.)
pub fn mapping(
    members: &BTreeMap<u32, IpAddr>,
    places: usize,
    num_nodes: usize,
) -> BTreeMap<u32, IpAddr> {
    let mut all = members.clone();
    if num_nodes == 0 {
        for i in 0..places as u32 {
            all.entry(i).or_insert(UNUSED_PLACE);
        }
    }
    all
}

/// What the IMEX daemon runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// How many names its list holds.
    pub places: usize,
    /// This node's place.
    pub own: u32,
    /// The addresses /etc/hosts gives the names.
    pub members: BTreeMap<u32, IpAddr>,
}

/// What to do with the IMEX daemon after the domain changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// (Re)start it with these.
    Run(Running),
    /// Map the names to these addresses and signal it to re-resolve them.
    Remap(BTreeMap<u32, IpAddr>),
    /// Stop it: this node is no longer a member.
    Stop,
    /// Leave it as it is (running or not).
    Keep,
}

/// Decides from what the daemon runs with (`None`: not running), the domain's `members` by
/// place, this node's address and the domain's size.
///
/// The daemon starts once this node and `num_nodes` members are listed, so that every name
/// resolves when it first looks. IMEX itself is ready as soon as it runs (the IMEX guide's
/// "Connections, Quorum, and Clean up": no quorum to initialise), so this wait is what
/// makes a member's readiness mean its domain is whole. After that a member lost and not
/// replaced leaves its name unresolved: the peers it was connected to show it recovering
/// (`-N`), and the domain is not Ready for lack of that member.
pub fn plan(
    running: Option<&Running>,
    members: &BTreeMap<u32, IpAddr>,
    own: IpAddr,
    num_nodes: usize,
) -> Plan {
    let Some(own_place) = members.iter().find(|(_, ip)| **ip == own).map(|(i, _)| *i) else {
        return match running {
            Some(_) => Plan::Stop,
            None => Plan::Keep,
        };
    };
    let want = Running {
        places: places(members, num_nodes),
        own: own_place,
        members: members.clone(),
    };
    match running {
        Some(r) if r.places == want.places && r.own == want.own => {
            if r.members == want.members {
                Plan::Keep
            } else {
                Plan::Remap(want.members)
            }
        }
        None if members.len() < num_nodes => Plan::Keep,
        _ => Plan::Run(want),
    }
}

/// `text` (a hosts file) with graft's lines for the domain's names replaced by `members`'.
pub fn render_hosts(text: &str, members: &BTreeMap<u32, IpAddr>) -> String {
    let ours = |l: &str| {
        l.split_whitespace()
            .skip(1)
            .any(|h| h.starts_with(NAME_PREFIX))
    };
    let mut out: String = text
        .lines()
        .filter(|l| !ours(l) && l.trim() != HOSTS_MARK)
        .map(|l| format!("{l}\n"))
        .collect();
    if !members.is_empty() {
        out.push_str(HOSTS_MARK);
        out.push('\n');
        for (i, ip) in members {
            out.push_str(&format!("{ip}\t{}\n", name(*i)));
        }
    }
    out
}

/// The comment above graft's lines in a hosts file.
const HOSTS_MARK: &str = "# the IMEX domain's members (graft-imex-daemon)";

/// Rewrites the hosts file at `path` in place (the kubelet bind-mounts it: a rename over it
/// would fail) with `members` mapped.
pub fn write_hosts(path: &Path, members: &BTreeMap<u32, IpAddr>) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let new = render_hosts(&text, members);
    if new == text {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(new.as_bytes())?;
    f.sync_all()
}

/// Where and how the IMEX daemon listens, and where its files go.
#[derive(Debug, Clone)]
pub struct ImexFiles {
    /// The private directory holding the two files.
    pub dir: PathBuf,
    /// This node's address (`BIND_INTERFACE_IP`, and the command service's).
    pub bind_ip: IpAddr,
    /// `SERVER_PORT`: where peers connect.
    pub server_port: u16,
    /// `IMEX_CMD_PORT`: what `nvidia-imex-ctl -q` asks.
    pub cmd_port: u16,
}

impl ImexFiles {
    /// The config file's path.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    /// The node list's path.
    pub fn nodes_path(&self) -> PathBuf {
        self.dir.join(NODES_FILE)
    }

    /// `config.cfg`: foreground (the pod's process owns it), log on stderr (an empty
    /// LOG_FILE_NAME), the command service on this node's address so that `--check` finds it.
    pub fn render_config(&self) -> String {
        format!(
            "# written by graft-imex-daemon\n\
             DAEMONIZE=0\n\
             LOG_FILE_NAME=\n\
             SERVER_PORT={}\n\
             IMEX_NODE_CONFIG_FILE={}\n\
             BIND_INTERFACE_IP={}\n\
             IMEX_CMD_ENABLED=1\n\
             IMEX_CMD_PORT={}\n\
             IMEX_CMD_BIND_INTERFACE_IP={}\n",
            self.server_port,
            self.nodes_path().display(),
            self.bind_ip,
            self.cmd_port,
            self.bind_ip,
        )
    }

    /// Writes both files for a list of `places` names, each atomically (a temporary file
    /// renamed over it), in `dir`, which is created private (0700) when missing; returns the
    /// config's path.
    pub fn write(&self, places: usize) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        write_atomic(&self.nodes_path(), &render_nodes(places))?;
        let cfg = self.config_path();
        write_atomic(&cfg, &self.render_config())?;
        Ok(cfg)
    }
}

/// `nodes_config.cfg`: one name a line, for places `0..places`.
pub fn render_nodes(places: usize) -> String {
    (0..places as u32)
        .map(|i| format!("{}\n", name(i)))
        .collect()
}

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests;
