use super::*;
use crate::format::{Hook, Mount};

fn policy() -> InjectionPolicy {
    InjectionPolicy::new(
        Path::new("/var/lib/graft"),
        DEFAULT_HOOK_PATH,
        &["/run/nvidia/driver".into()],
    )
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

fn hook(args: &[&str]) -> Hook {
    Hook {
        stage: HookStage::CreateContainer,
        path: DEFAULT_HOOK_PATH.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
        timeout: Some(30),
    }
}

#[test]
fn mounts_inside_the_roots_with_safe_options_pass() {
    let p = policy();
    let ro = ["ro", "nosuid", "nodev", "rbind", "rprivate"];
    let lib = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.1";
    assert!(p
        .check_edits("e", &mount(lib, "/usr/lib/libcuda.so.1", &ro))
        .is_ok());
    assert!(p
        .check_edits(
            "e",
            &mount("/dev/vfio/1", "/dev/vfio/1", &["nosuid", "rbind"])
        )
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
        (mount("/run/nvidia/driver/../../etc", "/x", &ro), "outside"),
        (mount("/dev/fuse", "/proc/x", &ro), "destination"),
        (mount("/dev/fuse", "/", &ro), "destination"),
        (mount("/dev/fuse", "/sys/fs", &ro), "destination"),
        (mount("/dev/fuse", "/x", &["rbind"]), "nosuid"),
        (
            mount("/run/nvidia/driver/lib", "/x", &["nosuid", "rbind"]),
            "nodev",
        ),
        (mount("/dev/fuse", "/x", &["nosuid", "suid"]), "\"suid\""),
        (mount("/dev/fuse", "/x", &["nosuid", "ro", "rw"]), "both"),
    ];
    for (edits, want) in cases {
        let e = p.check_edits("d(x).edits", edits).unwrap_err();
        assert!(e.to_string().contains(want), "{e} lacks {want}");
        assert!(e.field.starts_with("d(x).edits.mounts[0]"), "{e}");
    }
    let mut proc_mount = mount("/dev/fuse", "/x", &["nosuid"]);
    proc_mount.mounts[0].kind = "proc".into();
    assert!(p.check_edits("e", &proc_mount).is_err());
}

#[test]
fn only_graft_hook_at_its_path_with_the_fixed_env() {
    let p = policy();
    let ok = ContainerEdits {
        hooks: vec![hook(&[
            "graft-hook",
            "update-ldcache",
            "--ldconfig",
            "/sbin/ldconfig",
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
    assert_eq!(
        policy().mount_roots(),
        ["/dev", "/run/nvidia/driver", "/var/lib/graft"]
    );
}

#[test]
fn node_policy_narrows_a_host_driver_root_to_the_driver_directories() {
    let s = Path::new("/var/lib/graft");
    let host = InjectionPolicy::for_node(s, DEFAULT_HOOK_PATH, Some(Path::new("/")), &[]).unwrap();
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
        Some(Path::new("/run/nvidia/driver")),
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
        None,
        &[" /srv/licences".into(), "".into()],
    )
    .unwrap();
    assert_eq!(
        none.mount_roots(),
        ["/dev", "/srv/licences", "/var/lib/graft"]
    );
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
        Some(Path::new("/")),
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
