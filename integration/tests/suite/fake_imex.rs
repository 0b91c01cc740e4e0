//! The fake node's `nvidia-imex` and `nvidia-imex-ctl` (integration/fake-nvml/nvidia-imex.c,
//! nvidia-imex-ctl.c): daemons of one clique form a domain over TCP and turn READY only
//! with every listed peer connected, never join a peer of another clique, report a lost
//! peer, and refuse a malformed config or a node outside any fabric; the fake node holds
//! IMEX channel device nodes; graft's binary discovery accepts both programs.
//!
//! No cluster: each daemon listens on its own loopback address (127.27.<test>.<node>),
//! with its files in a temp dir. Needs gcc and the static glibc (FakeNode builds the
//! fakes) and root for the channel nodes (mknod).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use graft_driver::discovery::nvidia::driver_files;
use graft_driver::discovery::nvidia::driver_files::Capability;
use graft_integration::fake_gpu::{
    FabricState, FakeNode, ImexConfig, DRIVER_VERSION, IMEX_MAJOR, LIB_DIR,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const CLUSTER: &str = "7b1f0c9e2d3a4b5c8e6f00112233aabb";
const SERVER_PORT: u16 = 45_270;
const CMD_PORT: u16 = 45_275;
const WAIT: Duration = Duration::from_secs(15);

/// One fake node, built once for the whole suite: its IMEX programs are copied into each
/// daemon's light driver root, which saves rebuilding them per daemon.
fn template() -> &'static FakeNode {
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
struct ImexNode {
    root: FakeNode,
    cfg: PathBuf,
    ip: String,
}

impl ImexNode {
    fn log(&self) -> String {
        std::fs::read_to_string(self.cfg.parent().unwrap().join("nvidia-imex.log"))
            .unwrap_or_default()
    }

    /// Runs nvidia-imex-ctl `arg` (`-q`, `-N`) with this node's config.
    fn ctl(&self, arg: &str) -> Output {
        Command::new(self.root.imex_ctl_path())
            .args([arg, "-c"])
            .arg(&self.cfg)
            .output()
            .unwrap()
    }

    fn query(&self) -> String {
        stdout(&self.ctl("-q")).trim().to_string()
    }

    fn table(&self) -> String {
        let out = self.ctl("-N");
        assert!(out.status.success(), "-N: {}", text(&out));
        stdout(&out)
    }

    /// Starts the daemon in the foreground; it is stopped when the guard goes.
    fn start(&self) -> Daemon {
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
    fn refused(&self) -> Output {
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
struct Daemon(Child);

impl Daemon {
    fn kill(&mut self, sig: Signal) {
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
fn domain(dir: &Path, test: u8, cliques: &[Option<u32>]) -> Vec<ImexNode> {
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
fn wait_for(node: &ImexNode, want: &str) {
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
fn wait_table(node: &ImexNode, ok: impl Fn(&str) -> bool) -> String {
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
fn listed(table: &str) -> Vec<(String, String)> {
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
fn matrix_row(table: &str, i: usize) -> String {
    let mut rows = table
        .lines()
        .skip_while(|l| !l.contains("Nodes From\\To"))
        .skip(1);
    let row = rows.nth(i).unwrap_or_default();
    row.split_whitespace().skip(1).collect()
}

#[test]
fn three_daemons_of_one_clique_become_ready() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 1, &[Some(1), Some(1), Some(1)]);
    let _daemons: Vec<Daemon> = nodes.iter().map(ImexNode::start).collect();
    for n in &nodes {
        wait_for(n, "READY");
    }
    let want: Vec<(String, String)> = nodes
        .iter()
        .map(|m| (m.ip.clone(), "READY".into()))
        .collect();
    for n in &nodes {
        wait_table(n, |t| {
            listed(t) == want
                && (0..3).all(|i| matrix_row(t, i) == "CCC")
                && t.contains("Domain State: UP")
        });
    }
}

#[test]
fn a_missing_peer_keeps_the_others_waiting_until_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 2, &[Some(1), Some(1), Some(1)]);
    let _first: Vec<Daemon> = nodes[..2].iter().map(ImexNode::start).collect();
    wait_for(&nodes[0], "WAITING_FOR_PEERS");
    // Connected to each other, the two still wait: the third never answered.
    std::thread::sleep(Duration::from_secs(2));
    for n in &nodes[..2] {
        assert_eq!(n.query(), "WAITING_FOR_PEERS", "{}", n.log());
        wait_table(n, |t| {
            listed(t)[2].1 == "UNAVAILABLE"
                && matrix_row(t, 0) == "CCN"
                && matrix_row(t, 1) == "CCN"
                && t.contains("Domain State: DEGRADED")
        });
    }
    // The missing node's own ctl finds no daemon, as the real one reports it.
    let out = nodes[2].ctl("-q");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(stderr(&out).contains("error code: 14"), "{}", text(&out));
    let _third = nodes[2].start();
    for n in &nodes {
        wait_for(n, "READY");
    }
}

#[test]
fn a_peer_of_another_clique_is_never_joined() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 3, &[Some(1), Some(1), Some(2)]);
    let _daemons: Vec<Daemon> = nodes.iter().map(ImexNode::start).collect();
    std::thread::sleep(Duration::from_secs(3));
    for n in &nodes {
        assert_eq!(n.query(), "WAITING_FOR_PEERS", "{}", n.log());
    }
    wait_table(&nodes[0], |t| {
        matrix_row(t, 0) == "CCI" && matrix_row(t, 1) == "CCI" && listed(t)[2].1 == "UNAVAILABLE"
    });
    wait_table(&nodes[2], |t| matrix_row(t, 2) == "IIC");
    let clique1 = "7b1f0c9e-2d3a-4b5c-8e6f-00112233aabb.1";
    let clique2 = "7b1f0c9e-2d3a-4b5c-8e6f-00112233aabb.2";
    assert!(
        nodes[0].log().contains(&format!(
            "refused 127.27.3.3: its clique {clique2} is not ours ({clique1})"
        )),
        "{}",
        nodes[0].log()
    );
    assert!(
        nodes[2].log().contains("did not join"),
        "{}",
        nodes[2].log()
    );
    assert!(
        !nodes[0].log().contains("joined peer 127.27.3.3"),
        "{}",
        nodes[0].log()
    );
}

#[test]
fn a_killed_daemon_turns_the_others_not_ready_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 4, &[Some(1), Some(1), Some(1)]);
    let mut daemons: Vec<Daemon> = nodes.iter().map(ImexNode::start).collect();
    for n in &nodes {
        wait_for(n, "READY");
    }
    daemons[2].kill(Signal::SIGKILL);
    for n in &nodes[..2] {
        wait_for(n, "WAITING_FOR_RECOVERY");
        wait_table(n, |t| {
            listed(t)[2].1 == "UNAVAILABLE"
                && matrix_row(t, 0) == "CCR"
                && matrix_row(t, 1) == "CCR"
                && t.contains("Domain State: DEGRADED")
        });
    }
    assert!(
        nodes[0].log().contains("lost peer 127.27.4.3"),
        "{}",
        nodes[0].log()
    );
    daemons[2] = nodes[2].start();
    for n in &nodes {
        wait_for(n, "READY");
    }
}

#[test]
fn a_malformed_config_or_node_list_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 5, &[Some(1)]);
    let n = &nodes[0];
    let good = std::fs::read_to_string(&n.cfg).unwrap();
    let list = n.cfg.with_file_name("nodes_config.cfg");
    for (config, nodes_text, why) in [
        (format!("{good}SERVER_PORT\n"), "127.27.5.1\n", "no '='"),
        (
            format!("{good}SERVER_PORT=70000\n"),
            "127.27.5.1\n",
            "SERVER_PORT=70000: not a port",
        ),
        (
            format!("{good}IMEX_CMD_ENABLED=yes\n"),
            "127.27.5.1\n",
            "not 0 or 1",
        ),
        (
            format!("{good}NOT_AN_IMEX_KEY=1\n"),
            "127.27.5.1\n",
            "unknown key",
        ),
        (
            good.clone(),
            "127.27.5.1\nimex-node-b\n",
            "line 2: not an IP address",
        ),
        (good.clone(), "\n", "lists no node"),
        (
            good.clone(),
            "127.27.5.2\n",
            "BIND_INTERFACE_IP 127.27.5.1 is not in the node",
        ),
    ] {
        std::fs::write(&n.cfg, &config).unwrap();
        std::fs::write(&list, nodes_text).unwrap();
        let out = n.refused();
        assert_eq!(out.status.code(), Some(1), "{why}: {}", text(&out));
        assert!(stderr(&out).contains(why), "{why}: {}", text(&out));
    }
    std::fs::remove_file(&list).unwrap();
    std::fs::write(&n.cfg, &good).unwrap();
    let out = n.refused();
    assert!(
        stderr(&out).contains("Failed to read node configuration file"),
        "{}",
        text(&out)
    );
    // The ctl reads the same config, and refuses it as well.
    std::fs::write(&n.cfg, format!("{good}SERVER_PORT\n")).unwrap();
    let out = n.ctl("-q");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("no '='"), "{}", text(&out));
}

#[test]
fn a_node_outside_a_completed_fabric_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 6, &[None]);
    let out = nodes[0].refused();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("not registered in an NVLink fabric"),
        "{}",
        text(&out)
    );
    nodes[0]
        .root
        .set_fabric_state(CLUSTER, 1, FabricState::InProgress)
        .unwrap();
    let out = nodes[0].refused();
    assert!(
        stderr(&out).contains("registration is in-progress"),
        "{}",
        text(&out)
    );
    nodes[0]
        .root
        .set_fabric_state(CLUSTER, 1, FabricState::Completed)
        .unwrap();
    // Without its driver, the daemon does not start either.
    let nvml = nodes[0]
        .root
        .host
        .join(&LIB_DIR[1..])
        .join(format!("libnvidia-ml.so.{DRIVER_VERSION}"));
    let target = std::fs::read_link(&nvml).unwrap();
    std::fs::remove_file(&nvml).unwrap();
    let out = nodes[0].refused();
    assert!(stderr(&out).contains("NVIDIA driver"), "{}", text(&out));
    std::os::unix::fs::symlink(target, &nvml).unwrap();
    let _d = nodes[0].start();
    // Alone in its list, the node is its whole domain.
    wait_for(&nodes[0], "READY");
}

#[test]
fn the_fake_nvml_reports_the_fabric_state() {
    use nvml_wrapper_sys::bindings::*;
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .unwrap();
    let gpu = nvml.device_by_index(0).unwrap();
    let info = || {
        // SAFETY: all-zero is a valid nvmlGpuFabricInfo_t (plain numbers and bytes).
        let mut info: nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: the device handle is live (borrowed) and `info` is a live local.
        let rc = unsafe {
            nvml.lib()
                .nvmlDeviceGetGpuFabricInfo(gpu.handle(), &mut info)
        };
        (rc, info.state as u32, info.status, info.cliqueId)
    };
    assert_eq!(info().0, nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
    node.set_fabric_state(CLUSTER, 7, FabricState::InProgress)
        .unwrap();
    let (rc, state, status, clique) = info();
    assert_eq!(rc, nvmlReturn_enum_NVML_SUCCESS);
    assert_eq!(state, NVML_GPU_FABRIC_STATE_IN_PROGRESS);
    assert_ne!(status, nvmlReturn_enum_NVML_SUCCESS);
    assert_eq!(clique, 0);
    node.set_fabric_state(CLUSTER, 7, FabricState::Completed)
        .unwrap();
    assert_eq!(
        info(),
        (
            nvmlReturn_enum_NVML_SUCCESS,
            NVML_GPU_FABRIC_STATE_COMPLETED,
            nvmlReturn_enum_NVML_SUCCESS,
            7
        )
    );
}

#[test]
fn the_fake_node_holds_imex_channel_nodes() {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode {
        host: dir.path().join("host"),
        proc: dir.path().join("proc"),
        sys: dir.path().join("sys"),
        dev: dir.path().join("host/dev"),
    };
    node.add_imex_channels(2).unwrap();
    node.add_imex_channels(2).unwrap();
    let path = node.imex_channel_path(1);
    assert!(path.ends_with("dev/nvidia-caps-imex-channels/channel1"));
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_char_device());
    let rdev = meta.rdev();
    assert_eq!(
        (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev)),
        (IMEX_MAJOR.into(), 1)
    );
    // The major is the one the fake /proc/devices gives nvidia-caps-imex-channels.
    let devices = std::fs::read_to_string(template().proc.join("devices")).unwrap();
    let major = format!("{} nvidia-caps-imex-channels", IMEX_MAJOR);
    assert!(devices.contains(&major), "{devices}");
}

#[test]
fn binary_discovery_accepts_the_imex_fakes() {
    let node = template();
    for roots in [common::as_host_root(node), common::as_driver_root(node)] {
        let files = driver_files::find(&roots, DRIVER_VERSION).unwrap();
        for name in ["nvidia-imex", "nvidia-imex-ctl"] {
            let found = files
                .binary(name)
                .unwrap_or_else(|| panic!("{name}: {:?}", files.binaries));
            assert_eq!(found.path, format!("/usr/bin/{name}"));
            assert_eq!(found.capability, Capability::Compute);
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
