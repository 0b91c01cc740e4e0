//! The pure parts of `graft-imex-daemon`, the IMEX daemon pod's entry point: which members
//! of a domain its IMEX daemon lists, when to (re)start it, and the two files it reads.
//!
//! Facts (NVIDIA's IMEX guide, "IMEX Service Config Options" and "Deployment Models"):
//! `nvidia-imex -c config.cfg` reads `KEY=VALUE` lines once at startup; the node list
//! (`IMEX_NODE_CONFIG_FILE`) is one IP address a line and must be the same on every node of
//! the domain. The guide's "Signal handling" names no signal that re-reads the node list
//! (SIGUSR1 reloads TLS credentials and reconnects, SIGHUP dumps the log buffer), so a
//! changed list means a restart of the daemon.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::crd::NodeStatus;

/// The config file's name in the daemon's directory.
pub const CONFIG_FILE: &str = "config.cfg";
/// The node list's name in the daemon's directory.
pub const NODES_FILE: &str = "nodes_config.cfg";

/// The addresses of the domain's members in `clique`: sorted, each once. Members of
/// another clique are left out (IMEX daemons only join peers of their own clique), and so
/// are members without a valid address (their pod has none yet).
pub fn members(nodes: &[NodeStatus], clique: &str) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = nodes
        .iter()
        .filter(|n| n.clique_id == clique)
        .filter_map(|n| n.ip_address.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// What to do with the IMEX daemon after the domain changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// (Re)start it with this node list.
    Run(Vec<IpAddr>),
    /// Stop it: this node is no longer a member.
    Stop,
    /// Leave it as it is (running or not).
    Keep,
}

/// Decides from the list the daemon runs with (`None`: not running), the domain's
/// `members`, this node's address and the domain's size.
///
/// The daemon starts only once this node and `num_nodes` members are listed. When members
/// leave and fewer than `num_nodes` remain, a running daemon keeps its list: the lost peers
/// show as recovering and the node stays not ready, where a restart with the shorter list
/// would report a domain that lacks nodes as ready.
pub fn plan(running: Option<&[IpAddr]>, members: &[IpAddr], own: IpAddr, num_nodes: usize) -> Plan {
    if !members.contains(&own) {
        return match running {
            Some(_) => Plan::Stop,
            None => Plan::Keep,
        };
    }
    if members.len() < num_nodes || running == Some(members) {
        return Plan::Keep;
    }
    Plan::Run(members.to_vec())
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

    /// Writes both files for `members`, each atomically (a temporary file renamed over
    /// it), in `dir`, which is created private (0700) when missing; returns the config's path.
    pub fn write(&self, members: &[IpAddr]) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        write_atomic(&self.nodes_path(), &render_nodes(members))?;
        let cfg = self.config_path();
        write_atomic(&cfg, &self.render_config())?;
        Ok(cfg)
    }
}

/// `nodes_config.cfg`: one address a line.
pub fn render_nodes(members: &[IpAddr]) -> String {
    members.iter().map(|ip| format!("{ip}\n")).collect()
}

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Readiness;

    fn node(ip: &str, clique: &str) -> NodeStatus {
        NodeStatus {
            name: format!("n-{ip}"),
            ip_address: ip.into(),
            clique_id: clique.into(),
            status: Readiness::NotReady,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn members_are_of_the_clique_sorted_and_once() {
        let nodes = [
            node("10.0.0.9", "u.1"),
            node("10.0.0.10", "u.1"),
            node("10.0.0.2", "u.2"),
            node("10.0.0.9", "u.1"),
            node("", "u.1"),
            node("not-an-ip", "u.1"),
        ];
        assert_eq!(members(&nodes, "u.1"), [ip("10.0.0.9"), ip("10.0.0.10")]);
        assert!(members(&nodes, "u.3").is_empty());
    }

    #[test]
    fn starts_once_this_node_and_enough_members_are_listed() {
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        assert_eq!(plan(None, &[b], a, 1), Plan::Keep);
        assert_eq!(plan(None, &[a], a, 2), Plan::Keep);
        assert_eq!(plan(None, &[a, b], a, 2), Plan::Run(vec![a, b]));
        assert_eq!(plan(Some(&[a, b]), &[a, b], a, 2), Plan::Keep);
    }

    #[test]
    fn a_changed_list_restarts_a_shrunk_one_keeps_a_lost_node_stops() {
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        assert_eq!(
            plan(Some(&[a, b]), &[a, b, c], a, 2),
            Plan::Run(vec![a, b, c])
        );
        assert_eq!(plan(Some(&[a, b, c]), &[a, c], a, 2), Plan::Run(vec![a, c]));
        assert_eq!(plan(Some(&[a, b]), &[a], a, 2), Plan::Keep);
        assert_eq!(plan(Some(&[a, b]), &[b], a, 2), Plan::Stop);
    }

    #[test]
    fn files_carry_the_keys_the_daemon_reads() {
        let dir = tempfile::tempdir().unwrap();
        let files = ImexFiles {
            dir: dir.path().join("imex"),
            bind_ip: ip("10.0.0.1"),
            server_port: 50000,
            cmd_port: 50005,
        };
        let cfg = files.write(&[ip("10.0.0.1"), ip("10.0.0.2")]).unwrap();
        let text = std::fs::read_to_string(&cfg).unwrap();
        for line in [
            "DAEMONIZE=0",
            "SERVER_PORT=50000",
            "BIND_INTERFACE_IP=10.0.0.1",
            "IMEX_CMD_ENABLED=1",
            "IMEX_CMD_PORT=50005",
            "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        let nodes = format!("IMEX_NODE_CONFIG_FILE={}", files.nodes_path().display());
        assert!(text.contains(&nodes), "{text}");
        let list = std::fs::read_to_string(files.nodes_path()).unwrap();
        assert_eq!(list, "10.0.0.1\n10.0.0.2\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&files.dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
