//! The driver's prepared directory: its bind and graft-hook's flags that link into it.

use super::tests::policy;
use super::*;
use crate::format::Mount;

fn bind(source: &str, options: &[&str]) -> ContainerEdits {
    ContainerEdits {
        mounts: vec![Mount {
            source: source.into(),
            destination: crate::driver_dir::IN_CONTAINER.into(),
            kind: "bind".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
        }],
        ..Default::default()
    }
}

fn hook(extra: &[&str]) -> ContainerEdits {
    let mut args = super::tests::NVIDIA_BASE.to_vec();
    args.extend_from_slice(extra);
    ContainerEdits {
        hooks: vec![super::tests::hook(&args)],
        ..Default::default()
    }
}

#[test]
fn a_prepared_directory_is_served_read_only_and_nothing_else_of_its_base() {
    let p = policy();
    let ro = ["ro", "nosuid", "nodev", "rbind", "rprivate"];
    let dir = "/var/lib/graft/nvidia/driver/580.95.05-0123456789abcdef";
    assert!(p.check_edits("e", &bind(dir, &ro)).is_ok());
    let cases: &[(&str, &[&str], &str)] = &[
        (dir, &["nosuid", "nodev", "rbind"], "lacks ro"),
        (dir, &["rw", "nosuid", "nodev", "rbind"], "lacks ro"),
        (
            "/var/lib/graft/nvidia/driver",
            &ro,
            "not a directory graft serves",
        ),
        (
            "/var/lib/graft/nvidia/driver/.staging-1",
            &ro,
            "not a directory graft serves",
        ),
        (
            "/var/lib/graft/nvidia/driver/580/usr",
            &ro,
            "not a directory graft serves",
        ),
        (
            "/var/lib/graft/nvidia/params",
            &ro,
            "not a directory graft serves",
        ),
    ];
    for (src, options, want) in cases {
        let e = p.check_edits("e", &bind(src, options)).unwrap_err();
        assert!(e.to_string().contains(want), "{src}: {e} lacks {want}");
    }
}

#[test]
fn graft_hook_links_only_paths_a_mount_could_replace_into_the_fixed_directory() {
    let p = policy();
    let ok = hook(&[
        "--driver-dir",
        "/usr/lib/graft-nvidia",
        "--driver-file",
        "/usr/bin/nvidia-smi",
        "--driver-file",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
    ]);
    assert!(p.check_edits("e", &ok).is_ok());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--driver-dir", "/tmp"],
            "where the driver's prepared directory is",
        ),
        (
            &[
                "--driver-dir",
                "/usr/lib/graft-nvidia",
                "--driver-dir",
                "/usr/lib/graft-nvidia",
            ],
            "twice",
        ),
        (&["--driver-file", "/etc/passwd"], "identity or credentials"),
        (&["--driver-file", "/etc"], "identity or credentials"),
        (&["--driver-file", "/proc/self/exe"], "kernel's views"),
        (&["--driver-file", "/"], "root"),
        (&["--driver-file", "/usr/lib/../../x"], "clean"),
        (
            &["--driver-file", "/usr/lib/graft-nvidia/usr/bin/x"],
            "prepared directory",
        ),
        (&["--driver-file", "/usr/lib"], "prepared directory"),
    ];
    for (extra, want) in cases {
        let e = p.check_edits("e", &hook(extra)).unwrap_err().to_string();
        assert!(e.contains(want), "{extra:?}: {e} lacks {want}");
    }
}
