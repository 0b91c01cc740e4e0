//! VFIO passthrough through the chart as shipped, turned on by its value
//! (nvidia.passthrough.enabled), on the fake node with a fake kernel for the binds
//! (integration/src/fake_sysfs.rs): every GPU has its audio function in its IOMMU group,
//! GPUs 0 and 1 share one group, and nvidia-persistenced holds every GPU (persistence mode
//! on), so the unbind lock is refused until graft turns it off.
//!
//! - A claim of class vfio.graft.dev on GPU 2 binds it and its audio function to vfio-pci;
//!   its container gets /dev/vfio/<group>; persistence mode is off while it runs, and after
//!   the pod is gone both functions are back on their drivers with persistence mode on.
//! - A claim on GPU 0, whose group holds GPU 1, which another pod's claim holds, is refused
//!   with an Event naming GPU 1's function and the holder, and nothing is rebound; it runs
//!   once the holder is gone, with the whole group on vfio-pci.
//!
//! The chart mounts the real /sys paths writable; the fake node's sysfs, procfs and the fake
//! NVML's persistence state are the test's own volumes (driverExtraVolumes), mounted at
//! their host paths so that sysfs's absolute links resolve inside graft-driver's container.

use std::time::Instant;

use anyhow::ensure;
use graft_integration::cluster::gpu::{GpuValues, FAKE_DIR};
use graft_integration::cluster::workloads::{phase, wait_pod_claim, wait_running};
use graft_integration::cluster::{workloads, Cluster, WAIT};
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::fake_sysfs::{self, bdf, FakeKernel, AUDIO_DRIVER};

/// GPU (NVML index) passed through alone with its audio function, and the two sharing a
/// group.
const ALONE: usize = 2;
const GROUPED: usize = 0;
const HELD: usize = 1;

/// The chart's values: passthrough on, the fake node's kernel interfaces for graft-driver.
pub fn values() -> GpuValues {
    // fake_sysfs::persistence_file of the node at FAKE_DIR.
    let persistence = format!("{FAKE_DIR}/host{LIB_DIR}/fake-nvml-persistence");
    let env = serde_json::json!([
        {"name": "GRAFT_SYSFS_ROOT", "value": format!("{FAKE_DIR}/sys")},
        {"name": "GRAFT_PROC_ROOT", "value": format!("{FAKE_DIR}/proc")},
        {"name": "GRAFT_DEV_ROOT", "value": format!("/host{FAKE_DIR}/host/dev")},
    ]);
    let volumes = serde_json::json!([
        {"name": "fake-sys", "hostPath": {"path": format!("{FAKE_DIR}/sys"), "type": "Directory"}},
        {"name": "fake-proc", "hostPath": {"path": format!("{FAKE_DIR}/proc"), "type": "Directory"}},
        {"name": "fake-persistence", "hostPath": {"path": persistence, "type": "File"}},
    ]);
    let mounts = serde_json::json!([
        {"name": "fake-sys", "mountPath": format!("{FAKE_DIR}/sys")},
        {"name": "fake-proc", "mountPath": format!("{FAKE_DIR}/proc")},
        {"name": "fake-persistence", "mountPath": format!("/host{persistence}")},
    ]);
    GpuValues {
        helm: vec![
            "--set".into(),
            "nvidia.passthrough.enabled=true".into(),
            "--set".into(),
            "nvidia.passthrough.timeoutSeconds=20".into(),
            "--set-json".into(),
            format!("driverExtraEnv={env}"),
            "--set-json".into(),
            format!("driverExtraVolumes={volumes}"),
            "--set-json".into(),
            format!("driverExtraVolumeMounts={mounts}"),
        ],
        ..Default::default()
    }
}

/// The fake node's topology and persistence state, before graft starts.
pub fn before_start(node: &FakeNode) -> anyhow::Result<()> {
    fake_sysfs::add_audio_functions(node)?;
    fake_sysfs::share_group(node, GROUPED, HELD)?;
    fake_sysfs::init_persistence(node)
}

/// Pod `name` in `ns` with a claim of one device of `class` on PCI function `pci`, listing
/// /dev/vfio.
fn pod(ns: &str, name: &str, class: &str, pci: &str) -> String {
    let cel = format!(r#"device.attributes["graft.dev"].pciBusID == "{pci}""#);
    workloads::claim_template_in(ns, name, class, Some(&cel), None)
        + &workloads::one_claim_pod_in(
            ns,
            name,
            "dev",
            workloads::BUSYBOX,
            "ls /dev/vfio/ 2>&1; echo DONE; sleep 3600",
        )
}

fn drivers(node: &FakeNode, functions: &[String]) -> Vec<String> {
    functions
        .iter()
        .map(|f| format!("{f}={}", fake_sysfs::driver(node, f).unwrap_or_default()))
        .collect()
}

fn expect_drivers(node: &FakeNode, want: &[(String, &str)]) -> anyhow::Result<()> {
    let functions: Vec<String> = want.iter().map(|(f, _)| f.clone()).collect();
    let have = drivers(node, &functions);
    let want: Vec<String> = want.iter().map(|(f, d)| format!("{f}={d}")).collect();
    ensure!(have == want, "drivers {have:?}, expected {want:?}");
    Ok(())
}

fn delete(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<()> {
    c.kubectl(&["-n", ns, "delete", "pod", pod, "--wait=true"])?;
    Ok(())
}

pub fn vfio(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    let _kernel = FakeKernel::start(node)?;
    let published = c.kubectl(&["get", "resourceslices", "-o", "json"])?;
    ensure!(
        published.contains(&format!(
            "\"vfio-{}\"",
            bdf(ALONE, 0).replace([':', '.'], "-")
        )),
        "no vfio device published:\n{published}"
    );
    ensure!(published.contains(&format!(
        "\"{},{},{}\"",
        bdf(GROUPED, 1),
        bdf(HELD, 0),
        bdf(HELD, 1)
    )));

    // One GPU with its audio function.
    let (gpu, audio) = (bdf(ALONE, 0), bdf(ALONE, 1));
    c.apply(&pod("a", "pass", "vfio.graft.dev", &gpu))?;
    let took = wait_running(c, "a", "pass")?;
    let log = workloads::wait_log_in(c, "a", "pass", "app", "DONE")?;
    let group = 40 + ALONE;
    ensure!(
        log.lines().any(|l| l.trim() == group.to_string()) && log.contains("vfio\n"),
        "the container lacks /dev/vfio/{group}:\n{log}"
    );
    expect_drivers(
        node,
        &[(gpu.clone(), "vfio-pci"), (audio.clone(), "vfio-pci")],
    )?;
    ensure!(
        !fake_sysfs::persistence(node)?[ALONE],
        "persistence mode on while the GPU is passed through"
    );
    delete(c, "a", "pass")?;
    workloads::wait_unprepared(c)?;
    expect_drivers(node, &[(gpu.clone(), "nvidia"), (audio, AUDIO_DRIVER)])?;
    ensure!(
        fake_sysfs::persistence(node)? == [true; 8],
        "persistence mode not restored"
    );
    ensure!(!node.dev.join(format!("vfio/{group}")).exists());
    eprintln!("vfio: GPU and audio function passed through, pod Running after {took:?}");

    // A group one of whose GPUs another claim holds.
    let held = bdf(HELD, 0);
    c.apply(&pod("a", "holder", "gpu.graft.dev", &held))?;
    wait_running(c, "a", "holder")?;
    let wanted = bdf(GROUPED, 0);
    c.apply(&pod("b", "wants", "vfio.graft.dev", &wanted))?;
    let claim = wait_pod_claim(c, "b", "wants")?;
    // The holder is of another namespace: not named to this claim's author.
    let needle = format!("PCI function {held} is held by a claim of another namespace");
    let start = Instant::now();
    let described = loop {
        let d = c.kubectl(&["-n", "b", "describe", "resourceclaim", &claim])?;
        if d.contains("PrepareFailed") && d.contains(&needle) {
            break d;
        }
        ensure!(
            start.elapsed() < WAIT,
            "no refusal naming {held}:\n{d}\n{}",
            c.dra_state()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let line = described
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_default();
    eprintln!("vfio: refused while held: {}", line.trim());
    ensure!(phase(c, "b", "wants") == "Pending");
    let group_functions = [bdf(GROUPED, 0), bdf(GROUPED, 1), held.clone(), bdf(HELD, 1)];
    let on_host = [
        (group_functions[0].clone(), "nvidia"),
        (group_functions[1].clone(), AUDIO_DRIVER),
        (group_functions[2].clone(), "nvidia"),
        (group_functions[3].clone(), AUDIO_DRIVER),
    ];
    expect_drivers(node, &on_host)?;
    ensure!(fake_sysfs::persistence(node)? == [true; 8]);

    // The holder goes: the kubelet's retry prepares the whole group.
    delete(c, "a", "holder")?;
    let took = wait_running(c, "b", "wants")?;
    let log = workloads::wait_log_in(c, "b", "wants", "app", "DONE")?;
    ensure!(log.lines().any(|l| l.trim() == "40"), "{log}");
    let passed: Vec<(String, &str)> = group_functions
        .iter()
        .map(|f| (f.clone(), "vfio-pci"))
        .collect();
    expect_drivers(node, &passed)?;
    // The PCIe port above them stays with its driver.
    let port = fake_sysfs::driver(node, "0000:10:01.0");
    ensure!(port.as_deref() == Some("pcieport"), "{port:?}");
    let modes = fake_sysfs::persistence(node)?;
    ensure!(!modes[GROUPED] && !modes[HELD], "{modes:?}");
    delete(c, "b", "wants")?;
    workloads::wait_unprepared(c)?;
    expect_drivers(node, &on_host)?;
    ensure!(fake_sysfs::persistence(node)? == [true; 8]);
    eprintln!("vfio: the group's pod Running {took:?} after the holder was deleted");
    Ok(())
}
