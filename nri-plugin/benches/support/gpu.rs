//! A GPU claim's record as graft-driver writes it for the fake NVIDIA node, with the
//! driver's files bound one by one or as the prepared directory: what `inject::plan`
//! checks on every CreateContainer of a container holding it.

use graft_record::policy::{DEFAULT_HOOK_PATH, HOOK_ENV};
use graft_record::*;

const LIB: &str = "/usr/lib/x86_64-linux-gnu";
const V: &str = "580.95.05";

/// The files every GPU container gets on the fake node.
fn files() -> Vec<String> {
    let fw = format!("/lib/firmware/nvidia/{V}");
    let mut f: Vec<String> = [
        "libcuda",
        "libnvidia-nvvm",
        "libnvidia-ptxjitcompiler",
        "libnvidia-ml",
    ]
    .iter()
    .map(|l| format!("{LIB}/{l}.so.{V}"))
    .collect();
    for b in [
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
        "nvidia-imex",
        "nvidia-imex-ctl",
        "nvidia-smi",
    ] {
        f.push(format!("/usr/bin/{b}"));
    }
    f.push(format!("{fw}/gsp_ga10x.bin"));
    f.push(format!("{fw}/gsp_tu10x.bin"));
    f
}

fn bind(source: String, destination: String, ro: bool) -> Mount {
    let opts: &[&str] = if ro {
        &["ro", "nosuid", "nodev", "rbind", "rprivate"]
    } else {
        &["nosuid", "nodev", "rbind", "rprivate", "noexec"]
    };
    Mount {
        source,
        destination,
        kind: "bind".into(),
        options: opts.iter().map(|s| s.to_string()).collect(),
    }
}

/// The policy graft-nri has for that node (driver root `/run/nvidia/driver`).
pub fn policy(state: &str) -> InjectionPolicy {
    InjectionPolicy::new(
        std::path::Path::new(state),
        DEFAULT_HOOK_PATH,
        &["/run/nvidia/driver".into()],
    )
    .expect("policy")
    .with_ldconfig("/sbin/ldconfig")
    .expect("ldconfig")
}

/// The record's device edits, prepared or one by one.
pub fn edits(state: &str, prepared: bool) -> ContainerEdits {
    let socket = "/run/nvidia-persistenced/socket".to_string();
    let mut args: Vec<String> = ["graft-hook", "nvidia-container"]
        .map(String::from)
        .to_vec();
    let mut mounts = Vec::new();
    if prepared {
        mounts.push(bind(
            format!("{state}/{}/{V}-0123456789abcdef", driver_dir::BELOW_STATE),
            driver_dir::IN_CONTAINER.into(),
            true,
        ));
        args.extend(["--driver-dir".into(), driver_dir::IN_CONTAINER.into()]);
        for f in files() {
            args.extend(["--driver-file".into(), f]);
        }
    } else {
        for f in files() {
            mounts.push(bind(format!("/run/nvidia/driver{f}"), f, true));
        }
    }
    mounts.push(bind(format!("/run/nvidia/driver{socket}"), socket, false));
    for (t, l) in [
        (format!("libcuda.so.{V}"), "libcuda.so.1"),
        ("libcuda.so.1".into(), "libcuda.so"),
        (format!("libnvidia-ml.so.{V}"), "libnvidia-ml.so.1"),
    ] {
        args.extend(["--link".into(), format!("{t}::{LIB}/{l}")]);
    }
    args.extend([
        "--folder".into(),
        LIB.into(),
        "--ldconfig".into(),
        "/sbin/ldconfig".into(),
        "--params-copy".into(),
        format!("{state}/nvidia/params"),
        "--driver-version".into(),
        V.into(),
    ]);
    ContainerEdits {
        device_nodes: vec![
            DeviceNode::char("/dev/nvidia2", 195, 2, 0o666),
            DeviceNode::char("/dev/nvidiactl", 195, 255, 0o666),
            DeviceNode::char("/dev/nvidia-uvm", 510, 0, 0o666),
            DeviceNode::char("/dev/nvidia-uvm-tools", 510, 1, 0o666),
        ],
        mounts,
        env: vec![EnvVar {
            name: "NVIDIA_VISIBLE_DEVICES".into(),
            value: "void".into(),
        }],
        hooks: vec![Hook {
            stage: HookStage::CreateContainer,
            path: DEFAULT_HOOK_PATH.into(),
            args,
            env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
            timeout: Some(30),
        }],
    }
}

/// A claim giving that device to container `app` of `pod_uid`.
pub fn claim(pod_uid: &str, edits: ContainerEdits) -> ClaimRecord {
    let mut c = super::fixtures::claim(0, pod_uid);
    c.devices[0].edits = edits;
    c
}
