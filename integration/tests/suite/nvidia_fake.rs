//! The nvidia backend without GPUs: graft-driver's discovery against the fake
//! libnvidia-ml.so.1 (8 x H100, MIG on two) and a fake driver root, /proc and /sys; then a
//! container in real containerd, injected by graft-nri from a record holding a fake GPU's
//! edits, shows the device nodes, the driver's files and an ld.so.cache that lists them.
//!
//! The containerd part needs root, the testbed and the workspace binaries; the README's
//! test command provides them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::model::{Attribute, Device, PCIE_ROOT_ATTRIBUTE};
use graft_integration::apiserver;
use graft_integration::claims;
use graft_integration::dra_node::{prepare, unprepare, DraNode};
use graft_integration::fake_gpu::{
    self, FakeNode, CAPS_MAJOR, DRIVER_VERSION, IMEX_MAJOR, LIB_DIR, UVM_MAJOR,
};
use graft_integration::mounts::Scratch;
use graft_integration::records::one_device_claim;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{DeviceKind, RecordStore};
use oci_spec::runtime::LinuxDeviceType;

/// The fake library reads its fabric setting from the environment: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

use crate::common;

use common::{as_driver_root, as_host_root};

/// The static graft-hook, as graft-driver installs it.
fn hook_binary() -> String {
    graft_integration::testbed::static_hook()
        .expect("static graft-hook")
        .to_string_lossy()
        .into_owned()
}

fn discovery(node: &FakeNode, roots: Roots, imex_channels: u32) -> anyhow::Result<NvidiaDiscovery> {
    common::discovery(node, roots, imex_channels, &hook_binary())
}

fn attr<'a>(d: &'a Device, k: &str) -> &'a Attribute {
    d.attributes
        .get(k)
        .unwrap_or_else(|| panic!("{} has no attribute {k}: {:?}", d.name, d.attributes))
}

fn s(v: &str) -> Attribute {
    Attribute::String(v.into())
}

#[test]
fn discovery_of_a_fake_h100_node() -> anyhow::Result<()> {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    let d = discovery(&node, as_host_root(&node), 2)?;
    // A full scan loads NVML, walks 8 GPUs and the driver root, and unloads NVML again;
    // it runs at start and every rescan interval. Printed for the record, not asserted.
    let started = std::time::Instant::now();
    let devices = d.discover()?;
    println!("discovery of the fake node: {:?}", started.elapsed());
    let by_name: BTreeMap<&str, &Device> = devices.iter().map(|d| (d.name.as_str(), d)).collect();
    let names: Vec<&str> = by_name.keys().copied().collect();
    // Full GPUs by minor (indices 0..5), none for the MIG-enabled indices 6 and 7
    // (minors 4 and 5), whose MIG devices come instead; no fabric, so no IMEX channel;
    // passthrough on, so every function with an IOMMU group is offered for VFIO too.
    let vfio: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("vfio-"))
        .collect();
    assert_eq!(vfio.len(), 8, "{names:?}");
    let v = by_name["vfio-0000-18-00-0"];
    assert_eq!(attr(v, "type"), &s("vfio"));
    assert_eq!(attr(v, "iommuGroup"), &Attribute::Int(40));
    assert_eq!(attr(v, "pciBusID"), &s("0000:18:00.0"));
    assert_eq!(attr(v, "productName"), &s("NVIDIA H100 80GB HBM3"));
    assert_eq!(v.edits.device_nodes[0].path, "/dev/vfio/vfio");
    let names: Vec<&str> = names
        .into_iter()
        .filter(|n| !n.starts_with("vfio-"))
        .collect();
    assert_eq!(
        names,
        vec![
            "gpu-0",
            "gpu-1",
            "gpu-2",
            "gpu-3",
            "gpu-4-mig-1-0",
            "gpu-4-mig-2-0",
            "gpu-5-mig-1-0",
            "gpu-5-mig-13-0",
            "gpu-5-mig-5-0",
            "gpu-6",
            "gpu-7",
        ]
    );
    for dev in &devices {
        graft_driver::limits::check_device(dev)
            .map_err(|r| anyhow::anyhow!("{} breaks the API limits: {r}", dev.name))?;
    }

    // gpu-2 is NVML index 0 (bus 0x18).
    let g = by_name["gpu-2"];
    assert_eq!(attr(g, "type"), &s("gpu"));
    assert_eq!(attr(g, "index"), &Attribute::Int(0));
    assert_eq!(attr(g, "minor"), &Attribute::Int(2));
    assert_eq!(attr(g, "productName"), &s("NVIDIA H100 80GB HBM3"));
    assert_eq!(attr(g, "brand"), &s("Nvidia"));
    assert_eq!(attr(g, "architecture"), &s("Hopper"));
    assert_eq!(
        attr(g, "cudaComputeCapability"),
        &Attribute::Version("9.0.0".into())
    );
    assert_eq!(
        attr(g, "driverVersion"),
        &Attribute::Version("580.95.5".into())
    );
    assert_eq!(
        attr(g, "cudaDriverVersion"),
        &Attribute::Version("13.0.0".into())
    );
    assert_eq!(attr(g, "pciBusID"), &s("0000:18:00.0"));
    assert_eq!(attr(g, PCIE_ROOT_ATTRIBUTE), &s("pci0000:10"));
    assert_eq!(attr(g, "numaNode"), &Attribute::Int(0));
    assert!(matches!(attr(g, "uuid"), Attribute::String(u) if u.starts_with("GPU-")));
    assert_eq!(g.capacity["memory"], "81559Mi");
    let numa_of_gpu6 = attr(by_name["gpu-6"], "numaNode");
    assert_eq!(numa_of_gpu6, &Attribute::Int(1));

    let nodes = |d: &Device| -> Vec<(String, i64, i64)> {
        d.edits
            .device_nodes
            .iter()
            .map(|n| {
                assert_eq!(n.kind, DeviceKind::Char);
                (n.path.clone(), n.major, n.minor)
            })
            .collect()
    };
    assert_eq!(
        nodes(g),
        vec![
            ("/dev/nvidia2".into(), 195, 2),
            ("/dev/nvidiactl".into(), 195, 255),
            ("/dev/nvidia-uvm".into(), UVM_MAJOR as i64, 0),
            ("/dev/nvidia-uvm-tools".into(), UVM_MAJOR as i64, 1),
        ]
    );
    // Every GPU container's driver files: the compute and utility libraries, nvidia-smi,
    // nvidia-cuda-mps-control and nvidia-imex(-ctl) (executables of the running version, at
    // /usr/bin: MPS clients may call the control program), GSP firmware and the
    // persistenced socket; the host path is the container's, the driver root being `/`.
    let mounts: Vec<(&str, &str)> = g
        .edits
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.destination.as_str()))
        .collect();
    let fw = format!("/lib/firmware/nvidia/{DRIVER_VERSION}");
    let want: Vec<String> = vec![
        format!("{LIB_DIR}/libcuda.so.{DRIVER_VERSION}"),
        format!("{LIB_DIR}/libnvidia-nvvm.so.{DRIVER_VERSION}"),
        format!("{LIB_DIR}/libnvidia-ptxjitcompiler.so.{DRIVER_VERSION}"),
        "/usr/bin/nvidia-cuda-mps-control".into(),
        "/usr/bin/nvidia-cuda-mps-server".into(),
        "/usr/bin/nvidia-imex".into(),
        "/usr/bin/nvidia-imex-ctl".into(),
        format!("{LIB_DIR}/libnvidia-ml.so.{DRIVER_VERSION}"),
        "/usr/bin/nvidia-smi".into(),
        format!("{fw}/gsp_ga10x.bin"),
        format!("{fw}/gsp_tu10x.bin"),
        "/run/nvidia-persistenced/socket".into(),
    ];
    assert_eq!(
        mounts,
        want.iter()
            .map(|p| (p.as_str(), p.as_str()))
            .collect::<Vec<_>>()
    );
    // The VDPAU library is the video capability's, added only when a claim asks for it;
    // the fake driver has nothing of graphics or display.
    let vdpau = format!("{LIB_DIR}/vdpau/libvdpau_nvidia.so.{DRIVER_VERSION}");
    let optional: Vec<(&str, Vec<(&str, &str)>)> = g
        .optional_edits
        .iter()
        .map(|(k, e)| {
            let m = e
                .mounts
                .iter()
                .map(|m| (m.source.as_str(), m.destination.as_str()))
                .collect();
            (k.as_str(), m)
        })
        .collect();
    assert_eq!(
        optional,
        [("video", vec![(vdpau.as_str(), vdpau.as_str())])]
    );
    assert_eq!(by_name["gpu-4-mig-1-0"].optional_edits, g.optional_edits);
    assert!(by_name["vfio-0000-18-00-0"].optional_edits.is_empty());
    for m in &g.edits.mounts {
        // The host path: the driver root is the host's `/`.
        assert_eq!(m.source, m.destination, "{m:?}");
        if m.destination.ends_with("/socket") {
            assert!(!m.options.contains(&"ro".to_string()));
        } else {
            assert_eq!(m.options, ["ro", "nosuid", "nodev", "rbind", "rprivate"]);
        }
    }
    assert!(g
        .edits
        .env
        .iter()
        .any(|e| e.name == "NVIDIA_VISIBLE_DEVICES" && e.value == "void"));
    let hooks: Vec<&str> = g.edits.hooks.iter().map(|h| h.args[1].as_str()).collect();
    // One graft-hook run per container (see hook_edits.rs).
    assert_eq!(
        hooks,
        [graft_driver::discovery::nvidia::devices::SUBCOMMAND]
    );
    assert!(g.edits.hooks[0].args.contains(&format!(
        "libcuda.so.{DRIVER_VERSION}::{LIB_DIR}/libcuda.so.1"
    )));
    assert!(g.edits.hooks.iter().all(|h| h.path == hook_binary()));

    // A MIG device: parent node by the parent's minor, GI and CI access caps (the GI one
    // from its capability file, the CI one from mig-minors), keyed by minor 4, not index 6.
    let m = by_name["gpu-4-mig-1-0"];
    assert_eq!(attr(m, "type"), &s("mig"));
    assert_eq!(attr(m, "profile"), &s("3g.40gb"));
    assert_eq!(attr(m, "giID"), &Attribute::Int(1));
    assert_eq!(attr(m, "ciID"), &Attribute::Int(0));
    assert_eq!(attr(m, "parentMinor"), &Attribute::Int(4));
    assert_eq!(attr(m, "parentIndex"), &Attribute::Int(6));
    assert!(matches!(attr(m, "uuid"), Attribute::String(u) if u.starts_with("MIG-")));
    assert_eq!(m.capacity["memory"], "40192Mi");
    assert_eq!(m.capacity["multiprocessors"], "60");
    let caps = CAPS_MAJOR as i64;
    assert_eq!(
        nodes(m)[..3],
        [
            ("/dev/nvidia4".into(), 195, 4),
            (
                format!(
                    "/dev/nvidia-caps/nvidia-cap{}",
                    FakeNode::gi_cap_minor(4, 1)
                ),
                caps,
                FakeNode::gi_cap_minor(4, 1) as i64
            ),
            (
                format!(
                    "/dev/nvidia-caps/nvidia-cap{}",
                    FakeNode::ci_cap_minor(4, 1, 0)
                ),
                caps,
                FakeNode::ci_cap_minor(4, 1, 0) as i64
            ),
        ]
    );
    assert_eq!(m.edits.device_nodes[1].file_mode, Some(0o444));
    assert_eq!(attr(by_name["gpu-5-mig-13-0"], "profile"), &s("1g.10gb"));
    assert_eq!(attr(by_name["gpu-5-mig-5-0"], "profile"), &s("2g.20gb"));

    // Every GPU in one NVLink fabric clique: IMEX channels appear, and every GPU says which
    // clique it is in.
    node.set_fabric(Some(("7b1f0c9e2d3a4b5c8e6f00112233aabb", 32766)))?;
    let with_fabric = d.discover();
    node.set_fabric(None)?;
    let with_fabric = with_fabric?;
    let clique = s("7b1f0c9e-2d3a-4b5c-8e6f-00112233aabb.32766");
    let imex: Vec<&Device> = with_fabric
        .iter()
        .filter(|d| d.name.starts_with("imex-channel-"))
        .collect();
    assert_eq!(imex.len(), 2);
    assert_eq!(attr(imex[1], "channel"), &Attribute::Int(1));
    assert_eq!(attr(imex[1], "cliqueID"), &clique);
    assert_eq!(
        nodes(imex[1]),
        vec![(
            "/dev/nvidia-caps-imex-channels/channel1".into(),
            IMEX_MAJOR as i64,
            1
        )]
    );
    let g = with_fabric
        .iter()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2")?;
    assert_eq!(attr(g, "cliqueID"), &clique);
    Ok(())
}

/// NVML loads libcuda by name for the CUDA version; a node where graft-driver's own loader
/// would not find it (libcuda.so.1 absent beside libnvidia-ml) still gets every device,
/// with that one attribute left out.
#[test]
fn an_unreadable_attribute_does_not_stop_discovery() -> anyhow::Result<()> {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    std::fs::remove_file(node.host.join(&LIB_DIR[1..]).join("libcuda.so.1"))?;
    let devices = discovery(&node, as_host_root(&node), 0)?.discover()?;
    let g = devices
        .iter()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2")?;
    ensure!(
        !g.attributes.contains_key("cudaDriverVersion"),
        "{:?}",
        g.attributes
    );
    ensure!(g.attributes.contains_key("driverVersion"));
    ensure!(
        devices
            .iter()
            .filter(|d| d.name.starts_with("gpu-"))
            .count()
            == 11
    );
    Ok(())
}

#[test]
fn a_missing_nvml_is_a_clear_start_error() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode {
        host: dir.path().to_path_buf(),
        proc: dir.path().join("proc"),
        sys: dir.path().join("sys"),
        dev: dir.path().join("dev"),
    };
    let err = discovery(&node, as_host_root(&node), 0)
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("libnvidia-ml.so.1 not found"), "{err}");
}

/// The container's view, then it idles.
const PROBE: &str = r#"for n in /dev/nvidia2 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
  if [ -c $n ]; then stat -c "NODE %n %t:%T" $n; else echo "MISSING $n"; fi
done
ls /usr/lib/x86_64-linux-gnu/ | sed 's/^/LIB /'
echo "LINK $(readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1)"
echo "COPY $(readlink /usr/lib/x86_64-linux-gnu/libcuda.so.[0-9]*.*)"
touch /usr/lib/graft-nvidia/x 2>/dev/null || echo COPIES_READ_ONLY
/usr/bin/nvidia-smi -L
grep -q /usr/lib/x86_64-linux-gnu/libcuda.so /etc/ld.so.cache && echo LDCACHE_LISTS_LIBCUDA
grep -q /usr/lib/x86_64-linux-gnu /etc/ld.so.conf.d/00-graft-nvidia.conf && echo LDCONF_OK
echo "ENV=$NVIDIA_VISIBLE_DEVICES"
echo DONE
exec sleep 3600"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_gpu_in_a_containerd_container() -> anyhow::Result<()> {
    // The fake node's files stay until the end: graft-nri mounts from its driver root.
    let node_dir = Scratch::new(format!("/tmp/graft-nv-{}", std::process::id()))?;
    // Before discovery: it prepares the driver's files in the state directory below.
    let dir = Scratch::new(format!("/tmp/graft-nvc-{}", std::process::id()))?;
    let (devices, driver_root) = {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let node = FakeNode::create(&node_dir)?;
        // graft-nri's state directory below, where graft-hook's params copies must go.
        let state = PathBuf::from(format!("/tmp/graft-nvc-{}/graft-state", std::process::id()));
        (
            common::discovery_in(&node, as_driver_root(&node), &hook_binary(), &state)?
                .discover()?,
            node.host.to_string_lossy().into_owned(),
        )
    };
    let gpu = devices
        .iter()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2")?;

    let tb = Testbed::load()?;
    let cd = Containerd::start(&tb, Version::V2_2, &dir)?;
    let state = dir.join("graft-state");
    let store = RecordStore::open(&state)?;
    // graft-nri with the node's policy: the fake driver root's files, graft-hook here.
    let hook = hook_binary();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-nri.log"),
        &["--hook-path", &hook, "--nvidia-driver-root", &driver_root],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;

    let pod_uid = format!("nv-pod-{}", std::process::id());
    store.put_claim(&one_device_claim(
        &format!("nv-claim-{}", std::process::id()),
        "gpu",
        &pod_uid,
        &["app"],
        "gpu-2",
        gpu.edits.clone(),
    ))?;
    let pod = cri.run_pod("nv-pod", &pod_uid).await?;
    let app = cri.create_and_start(&pod, "app", PROBE).await?;
    let log = cri
        .wait_log(&pod, "app", "DONE", Duration::from_secs(60))
        .await?;
    println!("container log:\n{log}");
    for want in [
        "NODE /dev/nvidia2 c3:2",
        "NODE /dev/nvidiactl c3:ff",
        &format!("NODE /dev/nvidia-uvm {:x}:0", UVM_MAJOR),
        &format!("NODE /dev/nvidia-uvm-tools {:x}:1", UVM_MAJOR),
        &format!("LIB libcuda.so.{DRIVER_VERSION}"),
        &format!("LIB libnvidia-ml.so.{DRIVER_VERSION}"),
        &format!("LINK libcuda.so.{DRIVER_VERSION}"),
        &format!("COPY /usr/lib/graft-nvidia{LIB_DIR}/libcuda.so.{DRIVER_VERSION}"),
        "COPIES_READ_ONLY",
        "fake nvidia-smi -L",
        "LDCACHE_LISTS_LIBCUDA",
        "LDCONF_OK",
        "ENV=void",
    ] {
        ensure!(log.contains(want), "{want:?} not in the container's log");
    }

    // crictl inspect shows exactly what was injected.
    let spec = cd.oci_spec(&app)?;
    let devs = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().as_ref())
        .context("devices")?;
    ensure!(
        devs.iter().any(|d| d.path() == Path::new("/dev/nvidia2")
            && d.typ() == LinuxDeviceType::C
            && d.major() == 195
            && d.minor() == 2),
        "{devs:?}"
    );
    // The driver's files: one read-only bind of the prepared directory, each file's usual
    // path a link into it (graft-hook), none mounted on its own.
    let m = spec
        .mounts()
        .iter()
        .flatten()
        .find(|m| m.destination() == Path::new(graft_record::driver_dir::IN_CONTAINER))
        .context("the prepared directory's mount")?;
    ensure!(
        m.options().as_deref()
            == Some(&["ro", "nosuid", "nodev", "rbind", "rprivate"].map(String::from)[..]),
        "{m:?}"
    );
    let libcuda = format!("{LIB_DIR}/libcuda.so.{DRIVER_VERSION}");
    ensure!(
        !spec
            .mounts()
            .iter()
            .flatten()
            .any(|m| m.destination() == Path::new(&libcuda)),
        "libcuda mounted on its own"
    );
    let hooks = spec
        .hooks()
        .as_ref()
        .and_then(|h| h.create_container().as_ref())
        .context("createContainer hooks")?;
    // One graft-hook process does all of it, with nothing of the container's environment.
    ensure!(
        hooks.len() == 1
            && hooks[0]
                .args()
                .as_ref()
                .and_then(|a| a.get(1))
                .map(String::as_str)
                == Some("nvidia-container")
            && hooks[0]
                .env()
                .as_deref()
                .map(|e| e.iter().map(String::as_str).collect::<Vec<_>>())
                == Some(graft_record::policy::HOOK_ENV.to_vec()),
        "{hooks:?}"
    );
    let _ = fake_gpu::MINORS;
    Ok(())
}

/// A pod `name` with one container using all of claim `name`, and the claim allocated
/// `device` on `node` with `config` (allocation config entries).
async fn claim_for(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    device: &str,
    config: serde_json::Value,
) -> anyhow::Result<k8s_openapi::api::resource::v1::ResourceClaim> {
    let p = claims::pod(client, ns, name, &[("d", name)], &[("c", &[("d", "")])]).await?;
    claims::allocated_claim(client, ns, name, node, &[("r", device)], config, &[&p]).await
}

fn time_slicing(interval: &str) -> serde_json::Value {
    serde_json::json!([{
        "source": "FromClaim",
        "requests": ["r"],
        "opaque": {"driver": "graft.dev", "parameters": {
            "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": interval}}}}
    }])
}

/// graft-driver with the nvidia backend on the fake node, against a real API server and
/// with graft-nri on a real containerd: time-slicing is set through nvidia-smi at prepare
/// and reset at unprepare; a GPU's function cannot go to VFIO while the GPU is prepared;
/// unsupported sharing is refused by name; a VFIO bind that never happens fails the claim
/// within the timeout and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_sets_gpus_up_and_refuses_what_it_must() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("gnv").tempdir_in("/tmp")?;
    let node = FakeNode::create(dir.path())?;
    let hook = dir.path().join("bin/graft-hook");
    let args = node.passthrough_driver_args(&hook, Path::new(&hook_binary()), 2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cp = apiserver::shared()?;
    let dra = DraNode::start_with(cp, "nv-node", "", &args).await?;
    ensure!(hook.is_file(), "graft-driver did not install graft-hook");
    let client = &dra.client;

    // The API server accepts what the nvidia backend publishes.
    let api: kube::Api<k8s_openapi::api::resource::v1::ResourceSlice> =
        kube::Api::all(client.clone());
    let lp = kube::api::ListParams::default().fields("spec.nodeName=nv-node");
    let started = Instant::now();
    let published = loop {
        let names: Vec<String> = api
            .list(&lp)
            .await?
            .items
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
            .collect();
        if names.len() >= 19 || started.elapsed() > Duration::from_secs(30) {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        published.len() == 19
            && published.iter().any(|n| n == "gpu-2")
            && published.iter().any(|n| n == "gpu-4-mig-1-0")
            && published.iter().any(|n| n == "vfio-0000-18-00-0"),
        "published: {published:?}"
    );
    let slice = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .next()
        .context("slice")?;
    let gpu2 = slice
        .spec
        .devices
        .iter()
        .flatten()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2 in the slice")?;
    let attrs = gpu2.attributes.as_ref().context("attributes")?;
    ensure!(
        attrs["driverVersion"].version.as_deref() == Some("580.95.5"),
        "{attrs:?}"
    );

    let ns = "nv";
    claims::namespace(client, ns).await?;

    // Time-slicing a full GPU: nvidia-smi on its PCI address, and the usual edits.
    let sliced = claim_for(
        client,
        ns,
        "sliced",
        "nv-node",
        "gpu-2",
        time_slicing("Long"),
    )
    .await?;
    let r = prepare(&dra, &[&sliced]).await?;
    let r = &r[&claims::uid(&sliced)];
    ensure!(r.error.is_empty(), "prepare failed: {}", r.error);
    let calls = node.smi_calls();
    ensure!(
        calls == "-i 0000:18:00.0 -c DEFAULT\ncompute-policy -i 0000:18:00.0 --set-timeslice 3\n",
        "nvidia-smi calls: {calls:?}"
    );
    let rec = dra.record(&claims::uid(&sliced))?.context("record")?;
    ensure!(rec.devices[0].edits.device_nodes[0].path == "/dev/nvidia2");

    // The same PCI function for passthrough, while the GPU is prepared: refused.
    let vfio = claim_for(
        client,
        ns,
        "vfio",
        "nv-node",
        "vfio-0000-18-00-0",
        serde_json::json!([]),
    )
    .await?;
    let e = &prepare(&dra, &[&vfio]).await?[&claims::uid(&vfio)].error;
    ensure!(e.contains("already prepared for claim nv/sliced"), "{e}");

    // Time-slicing a MIG device: refused, naming why.
    let mig = claim_for(
        client,
        ns,
        "mig",
        "nv-node",
        "gpu-4-mig-1-0",
        time_slicing("Short"),
    )
    .await?;
    let e = &prepare(&dra, &[&mig]).await?[&claims::uid(&mig)].error;
    ensure!(e.contains("not MIG devices"), "{e}");
    ensure!(dra.record(&claims::uid(&mig))?.is_none());

    // Driver capabilities: video (the node has vdpau) adds exactly its files; graphics,
    // which this node's driver has no files for, and any capability on a non-GPU device are
    // refused by name.
    let caps = |list: serde_json::Value| {
        serde_json::json!([{
            "source": "FromClaim", "requests": ["r"],
            "opaque": {"driver": "graft.dev", "parameters": {
                "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig",
                "driverCapabilities": list}}
        }])
    };
    let video = claim_for(
        client,
        ns,
        "video",
        "nv-node",
        "gpu-3",
        caps(serde_json::json!(["video"])),
    )
    .await?;
    let r = &prepare(&dra, &[&video]).await?[&claims::uid(&video)];
    ensure!(r.error.is_empty(), "{}", r.error);
    let rec = dra.record(&claims::uid(&video))?.context("video record")?;
    let vdpau = format!("{LIB_DIR}/vdpau/libvdpau_nvidia.so.{DRIVER_VERSION}");
    ensure!(
        rec.devices[0]
            .edits
            .mounts
            .iter()
            .any(|m| m.destination == vdpau),
        "{:?}",
        rec.devices[0].edits.mounts
    );
    let plain = dra
        .record(&claims::uid(&sliced))?
        .context("sliced record")?;
    ensure!(
        !plain.devices[0]
            .edits
            .mounts
            .iter()
            .any(|m| m.destination == vdpau),
        "a claim without driverCapabilities got the video files"
    );
    let gfx = claim_for(
        client,
        ns,
        "gfx",
        "nv-node",
        "gpu-0",
        caps(serde_json::json!(["graphics"])),
    )
    .await?;
    let e = &prepare(&dra, &[&gfx]).await?[&claims::uid(&gfx)].error;
    ensure!(e.contains("no graphics files"), "{e}");
    let vf = claim_for(
        client,
        ns,
        "vf",
        "nv-node",
        "vfio-0000-9a-00-0",
        caps(serde_json::json!(["video"])),
    )
    .await?;
    let e = &prepare(&dra, &[&vf]).await?[&claims::uid(&vf)].error;
    ensure!(e.contains("apply to NVIDIA GPUs"), "{e}");
    let u = unprepare(&dra, &[claims::claim_msg(&video)]).await?;
    ensure!(u[&claims::uid(&video)].is_empty(), "{u:?}");

    // Unprepare resets the time slice.
    let u = unprepare(&dra, &[claims::claim_msg(&sliced)]).await?;
    ensure!(u[&claims::uid(&sliced)].is_empty(), "{u:?}");
    let calls = node.smi_calls();
    ensure!(
        calls.ends_with("compute-policy -i 0000:18:00.0 --set-timeslice 0\n"),
        "{calls:?}"
    );

    // Now the function is free for VFIO, but no kernel unbinds it here: the claim fails
    // within the timeout, naming the function, and no record is left.
    let started = Instant::now();
    let e = &prepare(&dra, &[&vfio]).await?[&claims::uid(&vfio)].error;
    ensure!(
        e.contains("0000:18:00.0 still bound to nvidia after 2s"),
        "{e}"
    );
    ensure!(started.elapsed() < Duration::from_secs(20));
    ensure!(dra.record(&claims::uid(&vfio))?.is_none());
    Ok(())
}
