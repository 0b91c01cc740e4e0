//! The fake node's `nvidia-imex` and `nvidia-imex-ctl` (integration/fake-nvml/nvidia-imex.c,
//! nvidia-imex-ctl.c): daemons are READY once started (the IMEX guide: no quorum), form a
//! domain over TCP with the peers of their clique, whose `-N` table shows UP only with every
//! listed peer connected, never join a peer of another clique, show a lost peer as
//! recovering, and refuse a malformed config or a node outside any fabric; the fake node holds
//! IMEX channel device nodes; graft's binary discovery accepts both programs.
//!
//! No cluster: each daemon listens on its own loopback address (127.27.<test>.<node>),
//! with its files in a temp dir. Needs gcc and the static glibc (FakeNode builds the
//! fakes) and root for the channel nodes (mknod).

mod bed;

use crate::common;
use bed::*;

use graft_driver::discovery::nvidia::driver_files;
use graft_driver::discovery::nvidia::driver_files::Capability;
use graft_integration::fake_gpu::{FabricState, FakeNode, DRIVER_VERSION, IMEX_MAJOR, LIB_DIR};
use nix::sys::signal::Signal;
use std::time::Duration;

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
fn a_missing_peer_leaves_the_domain_degraded_until_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 2, &[Some(1), Some(1), Some(1)]);
    let _first: Vec<Daemon> = nodes[..2].iter().map(ImexNode::start).collect();
    // Each is READY at once (no quorum); the table shows the third never connected.
    wait_for(&nodes[0], "READY");
    std::thread::sleep(Duration::from_secs(2));
    for n in &nodes[..2] {
        assert_eq!(n.query(), "READY", "{}", n.log());
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
        wait_table(n, |t| t.contains("Domain State: UP"));
    }
}

#[test]
fn a_peer_of_another_clique_is_never_joined() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 3, &[Some(1), Some(1), Some(2)]);
    let _daemons: Vec<Daemon> = nodes.iter().map(ImexNode::start).collect();
    std::thread::sleep(Duration::from_secs(3));
    for n in &nodes {
        assert_eq!(n.query(), "READY", "{}", n.log());
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
fn a_killed_daemon_shows_as_recovering_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = domain(dir.path(), 4, &[Some(1), Some(1), Some(1)]);
    let mut daemons: Vec<Daemon> = nodes.iter().map(ImexNode::start).collect();
    // READY comes at once; the domain is whole once every table is all C.
    for n in &nodes {
        wait_for(n, "READY");
        wait_table(n, |t| {
            (0..3).all(|i| matrix_row(t, i) == "CCC") && t.contains("Domain State: UP")
        });
    }
    daemons[2].kill(Signal::SIGKILL);
    for n in &nodes[..2] {
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
    // The survivors stay READY: a lost peer is a connection to recover, not the daemon's
    // state.
    for n in &nodes[..2] {
        assert_eq!(n.query(), "READY", "{}", n.log());
    }
    daemons[2] = nodes[2].start();
    for n in &nodes {
        wait_for(n, "READY");
        wait_table(n, |t| {
            (0..3).all(|i| matrix_row(t, i) == "CCC") && t.contains("Domain State: UP")
        });
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
            "127.27.5.1\nimex node b\n",
            "line 2: not an IP address or host name",
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
