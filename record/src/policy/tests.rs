use super::*;
use crate::format::{Hook, HookStage, Mount};

pub(super) fn policy() -> InjectionPolicy {
    InjectionPolicy::new(
        Path::new("/var/lib/graft"),
        DEFAULT_HOOK_PATH,
        &["/run/nvidia/driver".into()],
    )
    .unwrap()
    .with_ldconfig("/sbin/ldconfig")
    .unwrap()
}

fn mount(source: &str, dest: &str, options: &[&str]) -> ContainerEdits {
    ContainerEdits {
        mounts: vec![Mount {
            source: source.into(),
            destination: dest.into(),
            kind: "bind".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
        }],
        ..Default::default()
    }
}

/// graft-hook nvidia-container with only the pinned flags.
pub(super) const NVIDIA_BASE: [&str; 6] = [
    "graft-hook",
    "nvidia-container",
    "--ldconfig",
    "/sbin/ldconfig",
    "--params-copy",
    "/var/lib/graft/nvidia/params",
];

pub(super) fn hook(args: &[&str]) -> Hook {
    Hook {
        stage: HookStage::CreateContainer,
        path: DEFAULT_HOOK_PATH.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
        timeout: Some(30),
    }
}

const LIB: &str = "/run/nvidia/driver/usr/lib/libcuda.so.1";

#[test]
fn mounts_inside_the_roots_with_safe_options_pass() {
    let p = policy();
    let ro = ["ro", "nosuid", "nodev", "rbind", "rprivate"];
    let lib = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.1";
    assert!(p
        .check_edits("e", &mount(lib, "/usr/lib/libcuda.so.1", &ro))
        .is_ok());
    let mps = "/var/lib/graft/mps/GPU-0a1b/t-3/pipe";
    let rw = ["nosuid", "nodev", "rbind", "rprivate", "noexec"];
    assert!(p
        .check_edits("e", &mount(mps, "/tmp/nvidia-mps", &rw))
        .is_ok());
    let shm = "/var/lib/graft/mps/GPU-0a1b/t-3/shm";
    assert!(p.check_edits("e", &mount(shm, "/dev/shm", &rw)).is_ok());
    // A share of a MIG device: its own UUID.
    let mig = "/var/lib/graft/mps/MIG-0d2b/t-1/pipe";
    assert!(p
        .check_edits("e", &mount(mig, "/tmp/nvidia-mps", &rw))
        .is_ok());
}

#[test]
fn mounts_that_break_a_rule_name_it() {
    let p = policy();
    let ro = ["ro", "nosuid", "nodev", "rbind"];
    let cases: &[(ContainerEdits, &str)] = &[
        (mount("/etc/shadow", "/x", &ro), "outside the allowed roots"),
        // A sibling that only shares the prefix is outside too.
        (mount("/run/nvidia/driverx/lib", "/x", &ro), "outside"),
        (mount("/run/nvidia/driver/../../etc", "/x", &ro), "clean"),
        (mount(LIB, "/proc/x", &ro), "destination"),
        (mount(LIB, "/", &ro), "destination"),
        (mount(LIB, "/sys/fs", &ro), "destination"),
        (mount(LIB, "/x", &["rbind", "nodev"]), "nosuid"),
        (mount(LIB, "/x", &["nosuid", "rbind"]), "nodev"),
        (mount(LIB, "/x", &["nosuid", "nodev", "suid"]), "\"suid\""),
        (mount(LIB, "/x", &["nosuid", "nodev", "ro", "rw"]), "both"),
        // graft never mounts from /dev: no root, and no nodev exemption, for it.
        (mount("/dev/sda", "/x", &["nosuid", "rbind"]), "outside"),
        (mount("/dev/fuse", "/x", &ro), "outside"),
        // Of the state directory, only an MPS tenancy's pipe and shm.
        (
            mount("/var/lib/graft/bin/graft-hook", "/x", &ro),
            "holds graft-hook",
        ),
        (
            mount("/var/lib/graft/claims", "/x", &ro),
            "not a directory graft serves",
        ),
        (
            mount("/var/lib/graft", "/x", &ro),
            "holds graft's state directory",
        ),
        (
            mount("/var/lib/graft/mps/GPU-1/t-1/x", "/x", &ro),
            "not a directory",
        ),
        (
            mount("/var/lib/graft/mps/GPU-1/t-x/shm", "/x", &ro),
            "not a directory",
        ),
        (
            mount("/var/lib/graft/mps/MIG-../t-1/shm", "/x", &ro),
            "not a directory",
        ),
        (
            mount("/var/lib/graft/mps/claims/t-1/shm", "/x", &ro),
            "not a directory",
        ),
        (mount("/var/lib/graft/mps/../bin/shm", "/x", &ro), "clean"),
        (mount(LIB, "/dev", &ro), "device directory"),
        (mount(LIB, "/etc/passwd", &ro), "/etc/passwd"),
        (mount(LIB, "/etc/shadow", &ro), "/etc/shadow"),
        (mount(LIB, "/etc/group", &ro), "/etc/group"),
        (mount(LIB, "/etc/hosts", &ro), "/etc/hosts"),
        (mount(LIB, "/etc/hostname", &ro), "/etc/hostname"),
        (mount(LIB, "/etc/resolv.conf", &ro), "/etc/resolv.conf"),
        (mount(LIB, "/etc", &ro), "/etc/passwd"),
        (
            mount(LIB, "/var/run/secrets/kubernetes.io/serviceaccount", &ro),
            "credentials",
        ),
        (
            mount(LIB, "/run/secrets/kubernetes.io/serviceaccount/token", &ro),
            "credentials",
        ),
        (mount(LIB, "/var/run/secrets", &ro), "credentials"),
        (mount(LIB, "/etc/../etc/passwd", &ro), "clean"),
    ];
    for (edits, want) in cases {
        let e = p.check_edits("d(x).edits", edits).unwrap_err();
        assert!(e.to_string().contains(want), "{e} lacks {want}");
        assert!(e.field.starts_with("d(x).edits.mounts[0]"), "{e}");
    }
    let mut proc_mount = mount(LIB, "/x", &["nosuid", "nodev"]);
    proc_mount.mounts[0].kind = "proc".into();
    assert!(p.check_edits("e", &proc_mount).is_err());
}

#[test]
fn only_graft_hook_at_its_path_with_the_fixed_env() {
    let p = policy();
    let ok = ContainerEdits {
        hooks: vec![hook(&[
            "graft-hook",
            "nvidia-container",
            "--link",
            "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--ldconfig",
            "/sbin/ldconfig",
            "--params-copy",
            "/var/lib/graft/nvidia/params",
            "--driver-version",
            "550.54.15",
        ])],
        ..Default::default()
    };
    assert!(p.check_edits("e", &ok).is_ok());
    type Mutation = Box<dyn Fn(&mut Hook)>;
    let mutations: Vec<(Mutation, &str)> = vec![
        (Box::new(|h| h.path = "/tmp/evil".into()), "installed path"),
        (Box::new(|h| h.args[0] = "sh".into()), "argv[0]"),
        (
            Box::new(|h| h.args[1] = "run-anything".into()),
            "subcommand",
        ),
        (Box::new(|h| h.args.truncate(1)), "subcommand"),
        (Box::new(|h| h.env.clear()), "environment"),
        (
            Box::new(|h| h.env.push("LD_PRELOAD=/x.so".into())),
            "environment",
        ),
        (Box::new(|h| h.stage = HookStage::Poststop), "stage"),
        (Box::new(|h| h.timeout = None), "timeout"),
        (Box::new(|h| h.timeout = Some(3600)), "timeout"),
    ];
    for (m, want) in mutations {
        let mut e = ok.clone();
        m(&mut e.hooks[0]);
        let err = p.check_edits("e", &e).unwrap_err();
        assert!(err.to_string().contains(want), "{err} lacks {want}");
    }
}

#[test]
fn policy_roots_must_be_clean() {
    assert!(InjectionPolicy::new(Path::new("/var/lib/graft"), "rel", &[]).is_err());
    assert!(InjectionPolicy::new(Path::new("/s"), DEFAULT_HOOK_PATH, &["x/..".into()]).is_err());
    assert_eq!(policy().mount_roots(), ["/run/nvidia/driver"]);
}

#[test]
fn node_policy_narrows_a_host_driver_root_to_the_driver_directories() {
    let s = Path::new("/var/lib/graft");
    let host = InjectionPolicy::for_node(
        s,
        DEFAULT_HOOK_PATH,
        &nvidia_mount_roots(Path::new("/")),
        &[],
    )
    .unwrap();
    let ro = ["ro", "nosuid", "nodev", "rbind"];
    let ok = mount("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/x", &ro);
    assert!(host.check_edits("e", &ok).is_ok());
    for secret in [
        "/etc/shadow",
        "/var/lib/kubelet/pods",
        "/root/.ssh/id_rsa",
        "/home/x",
    ] {
        assert!(
            host.check_edits("e", &mount(secret, "/x", &ro)).is_err(),
            "{secret}"
        );
    }
    let container = InjectionPolicy::for_node(
        s,
        DEFAULT_HOOK_PATH,
        &nvidia_mount_roots(Path::new("/run/nvidia/driver")),
        &[],
    )
    .unwrap();
    assert!(container
        .check_edits(
            "e",
            &mount("/run/nvidia/driver/usr/bin/nvidia-smi", "/x", &ro)
        )
        .is_ok());
    assert!(container.check_edits("e", &ok).is_err());
    let none = InjectionPolicy::for_node(
        s,
        DEFAULT_HOOK_PATH,
        &[],
        &[" /srv/licences".into(), "".into()],
    )
    .unwrap();
    assert_eq!(none.mount_roots(), ["/srv/licences"]);
}

#[test]
fn params_copies_are_per_container() {
    let s = Path::new("/var/lib/graft");
    assert_eq!(
        params_copy_path(s, "abc123").unwrap(),
        Path::new("/var/lib/graft/nvidia/params.abc123")
    );
    assert!(params_copy_path(s, "../x").is_none());
    assert!(params_copy_path(s, "").is_none());
    assert!(params_copy_path(s, "a/b").is_none());
}

#[test]
fn served_entries_are_the_operators_roots_only() {
    let p = InjectionPolicy::for_node(
        Path::new("/var/lib/graft"),
        DEFAULT_HOOK_PATH,
        &nvidia_mount_roots(Path::new("/")),
        &[" /srv/files ".into(), "/".into(), String::new()],
    )
    .unwrap();
    assert!(p.is_served("/srv/files/seat-a"));
    assert!(p.is_served("/home/x"));
    // What graft provides itself is not a served entry, even below an operator's `/`.
    for own in ["/dev/fuse", "/var/lib/graft/x", "/usr/lib/libcuda.so.1"] {
        assert!(!p.is_served(own), "{own}");
    }
    assert!(!policy().is_served("/run/nvidia/driver/usr/lib/x"));
}

#[test]
fn hook_arguments_are_exactly_what_graft_driver_emits() {
    let p = policy();
    let base = NVIDIA_BASE;
    let with = |extra: &[&str]| ContainerEdits {
        hooks: vec![hook(&[&base[..], extra].concat())],
        ..Default::default()
    };
    assert!(p.check_edits("e", &with(&[])).is_ok());
    let cases: &[(&[&str], &str)] = &[
        (&["--rootfs", "/"], "\"--rootfs\""),
        (&["--host-params", "/etc/shadow"], "\"--host-params\""),
        (&["--container-id", "x"], "\"--container-id\""),
        (&["--ldconfig=/tmp/x"], "not one graft-driver gives"),
        (&["--folder"], "no value"),
        (&["--folder", "--rootfs"], "starts with '-'"),
        (&["--folder", "/usr/../etc"], "clean absolute"),
        (&["--folder", "/a\0b"], "control"),
        (&["--link", "../../etc/x::/usr/lib/x"], "'..'"),
        (&["--link", "x::/usr/lib/../../x"], "clean absolute link"),
        (&["--driver-version", "5;rm"], "driver version"),
        (&["-h"], "not one graft-driver gives"),
        (&["positional"], "not one graft-driver gives"),
    ];
    for (extra, want) in cases {
        let e = p.check_edits("e", &with(extra)).unwrap_err().to_string();
        assert!(e.contains(want), "{extra:?}: {e} lacks {want}");
    }
    let mut foreign = with(&[]);
    foreign.hooks[0].args[3] = "/tmp/evil-ldconfig".into();
    let e = p.check_edits("e", &foreign).unwrap_err().to_string();
    assert!(
        e.contains("is not the node's ldconfig \"/sbin/ldconfig\""),
        "{e}"
    );
    let mut twice = with(&["--ldconfig", "/sbin/ldconfig"]);
    let e = p.check_edits("e", &twice).unwrap_err().to_string();
    assert!(e.contains("given twice"), "{e}");
    twice.hooks[0].args[5] = "/tmp/params".into();
    let e = p.check_edits("e", &with(&[]).clone()).map(|_| ());
    assert!(e.is_ok());
    let mut params = with(&[]);
    params.hooks[0].args[5] = "/var/lib/graft/../../etc/shadow".into();
    let e = p.check_edits("e", &params).unwrap_err().to_string();
    assert!(e.contains("is not graft's params path"), "{e}");
    // Each subcommand has its own flags: create-symlinks takes links only.
    let e = p
        .check_edits(
            "e",
            &ContainerEdits {
                hooks: vec![hook(&[
                    "graft-hook",
                    "create-symlinks",
                    "--ldconfig",
                    "/sbin/ldconfig",
                ])],
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("only [\"--link\"]"), "{e}");
    // graft-nri, without one configured: any graft-driver picks from, no other.
    let any = InjectionPolicy::new(Path::new("/var/lib/graft"), DEFAULT_HOOK_PATH, &[])
        .unwrap()
        .with_ldconfig_candidates(Path::new("/run/nvidia/driver"))
        .unwrap();
    let mut picked = with(&[]);
    for l in [
        "/run/nvidia/driver/sbin/ldconfig.real",
        "/sbin/ldconfig.real",
        "/sbin/ldconfig",
    ] {
        picked.hooks[0].args[3] = l.into();
        assert!(any.check_edits("e", &picked).is_ok(), "{l}");
    }
    picked.hooks[0].args[3] = "/usr/local/bin/ldconfig".into();
    let e = any.check_edits("e", &picked).unwrap_err().to_string();
    assert!(e.contains("is not one of the node's ldconfigs"), "{e}");
    // A policy without an ldconfig accepts none.
    let none = InjectionPolicy::new(Path::new("/var/lib/graft"), DEFAULT_HOOK_PATH, &[]).unwrap();
    let e = none.check_edits("e", &with(&[])).unwrap_err().to_string();
    assert!(e.contains("no ldconfig is configured"), "{e}");
}

#[test]
fn the_default_ldconfig_is_the_driver_roots_then_the_hosts() {
    let have =
        |list: &'static [&'static str]| move |p: &Path| list.iter().any(|l| Path::new(l) == p);
    let root = Path::new("/run/nvidia/driver");
    assert_eq!(
        default_ldconfig(
            root,
            have(&["/run/nvidia/driver/sbin/ldconfig", "/sbin/ldconfig.real"])
        ),
        "/run/nvidia/driver/sbin/ldconfig"
    );
    assert_eq!(
        default_ldconfig(Path::new("/"), have(&["/sbin/ldconfig.real"])),
        "/sbin/ldconfig.real"
    );
    assert_eq!(default_ldconfig(root, have(&[])), "/sbin/ldconfig");
}

#[test]
fn kernel_memory_port_and_log_nodes_are_never_given() {
    use crate::format::{DeviceKind, DeviceNode};
    let p = policy();
    let node = |path: &str, kind: DeviceKind, major: i64, minor: i64| ContainerEdits {
        device_nodes: vec![DeviceNode {
            kind,
            ..DeviceNode::char(path, major, minor, 0o666)
        }],
        ..Default::default()
    };
    assert!(p
        .check_edits("e", &node("/dev/nvidia0", DeviceKind::Char, 195, 0))
        .is_ok());
    for (edits, want) in [
        (node("/dev/mem", DeviceKind::Char, 1, 1), "/dev/mem"),
        (node("/dev/kmsg", DeviceKind::Char, 1, 11), "/dev/kmsg"),
        (node("/dev/port", DeviceKind::Char, 1, 4), "/dev/port"),
        // A harmless name does not make the kernel's memory harmless.
        (node("/dev/nvidia0", DeviceKind::Char, 1, 1), "char 1:1"),
        (node("/dev/nvidia0", DeviceKind::Char, 1, 2), "kmem"),
        (
            node("/dev/../etc/x", DeviceKind::Char, 10, 229),
            "below /dev",
        ),
        (node("/etc/x", DeviceKind::Char, 10, 229), "below /dev"),
    ] {
        let e = p.check_edits("d", &edits).unwrap_err();
        assert!(e.to_string().contains(want), "{e} lacks {want}");
        assert!(e.field.starts_with("d.device_nodes[0]"), "{e}");
    }
}
