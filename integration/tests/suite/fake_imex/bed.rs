//! The fake_imex suite's bed: light driver roots holding the fake IMEX programs, one per
//! daemon, each on its own loopback address, and reading what the programs say.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use graft_integration::fake_gpu::{FakeNode, ImexConfig, DRIVER_VERSION, LIB_DIR};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub const CLUSTER: &str = "7b1f0c9e2d3a4b5c8e6f00112233aabb";
const SERVER_PORT: u16 = 45_270;
const CMD_PORT: u16 = 45_275;
const WAIT: Duration = Duration::from_secs(15);

/// One fake node, built once for the whole suite: its IMEX programs are copied into each
/// daemon's light driver root, which saves rebuilding them per daemon.
pub fn template() -> &'static FakeNode {
    static NODE: OnceLock<(tempfile::TempDir, FakeNode)> = OnceLock::new();
    &NODE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let node = FakeNode::create(dir.path()).unwrap();
            (dir, node)
        })
        .1
}

/// One IMEX node of a test: a driver root holding the two programs and the fake NVML's
/// fabric file (in clique `clique`, or in none), and its config dir.
pub struct ImexNode {
    pub root: FakeNode,
    pub cfg: PathBuf,
    pub ip: String,
}

impl ImexNode {
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.cfg.parent().unwrap().join("nvidia-imex.log"))
            .unwrap_or_default()
    }

    /// Runs nvidia-imex-ctl `arg` (`-q`, `-N`) with this node's config.
    pub fn ctl(&self, arg: &str) -> Output {
        Command::new(self.root.imex_ctl_path())
            .args([arg, "-c"])
            .arg(&self.cfg)
            .output()
            .unwrap()
    }

    pub fn query(&self) -> String {
        stdout(&self.ctl("-q")).trim().to_string()
    }

    pub fn table(&self) -> String {
        let out = self.ctl("-N");
        assert!(out.status.success(), "-N: {}", text(&out));
        stdout(&out)
    }

    /// Starts the daemon in the foreground; it is stopped when the guard goes.
    pub fn start(&self) -> Daemon {
        let child = Command::new(self.root.imex_path())
            .arg("-c")
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Daemon(child)
    }

    /// Runs the daemon expecting it to refuse to start: its exit and stderr.
    pub fn refused(&self) -> Output {
        let mut child = Command::new(self.root.imex_path())
            .arg("-c")
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon started: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

/// A running daemon: SIGTERM, then SIGKILL, and reaped when dropped.
pub struct Daemon(Child);

impl Daemon {
    pub fn kill(&mut self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), sig);
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill(Signal::SIGKILL);
    }
}

/// Lays out `cliques.len()` IMEX nodes of test `test` under `dir`, node i in clique
/// `cliques[i]` (`None`: no fabric), each listing all of them.
pub fn domain(dir: &Path, test: u8, cliques: &[Option<u32>]) -> Vec<ImexNode> {
    let ips: Vec<String> = (1..=cliques.len())
        .map(|i| format!("127.27.{test}.{i}"))
        .collect();
    let t = template();
    cliques
        .iter()
        .enumerate()
        .map(|(i, clique)| {
            let root = FakeNode {
                host: dir.join(format!("node{i}/root")),
                proc: dir.join(format!("node{i}/proc")),
                sys: dir.join(format!("node{i}/sys")),
                dev: dir.join(format!("node{i}/root/dev")),
            };
            std::fs::create_dir_all(root.host.join("usr/bin")).unwrap();
            std::fs::create_dir_all(root.host.join(&LIB_DIR[1..])).unwrap();
            std::fs::copy(t.imex_path(), root.imex_path()).unwrap();
            std::fs::copy(t.imex_ctl_path(), root.imex_ctl_path()).unwrap();
            // The driver the daemon needs: the template's NVML, by the versioned name.
            let nvml = format!("{}/libnvidia-ml.so.{DRIVER_VERSION}", &LIB_DIR[1..]);
            std::os::unix::fs::symlink(t.host.join(&nvml), root.host.join(&nvml)).unwrap();
            root.set_fabric(clique.map(|c| (CLUSTER, c))).unwrap();
            let cfg = ImexConfig {
                nodes: ips.clone(),
                bind_ip: Some(ips[i].clone()),
                server_port: SERVER_PORT,
                cmd_port: CMD_PORT,
            }
            .write(&dir.join(format!("node{i}/etc")))
            .unwrap();
            ImexNode {
                root,
                cfg,
                ip: ips[i].clone(),
            }
        })
        .collect()
}

/// Waits until `node` reports `want` to `-q`.
pub fn wait_for(node: &ImexNode, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = node.query();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} still {got:?}, not {want}; log:\n{}",
            node.ip,
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `node`'s `-N` table satisfies `ok` (peers' rows reach it over the network),
/// and returns it.
pub fn wait_table(node: &ImexNode, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let table = node.table();
        if ok(&table) {
            return table;
        }
        assert!(
            Instant::now() < deadline,
            "{}: never as expected:\n{table}\nlog:\n{}",
            node.ip,
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `Node #<i> - <ip> - <state>` lines of a `-N` table, as (ip, state).
pub fn listed(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .filter(|l| l.starts_with("Node #"))
        .map(|l| {
            let f: Vec<&str> = l.split(" - ").map(str::trim).collect();
            (f[1].to_string(), f[2].to_string())
        })
        .collect()
}

/// Row `i` of the table's `Nodes From\To` matrix, as letters.
pub fn matrix_row(table: &str, i: usize) -> String {
    let mut rows = table
        .lines()
        .skip_while(|l| !l.contains("Nodes From\\To"))
        .skip(1);
    let row = rows.nth(i).unwrap_or_default();
    row.split_whitespace().skip(1).collect()
}

pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
