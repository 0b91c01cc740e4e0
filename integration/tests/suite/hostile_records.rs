//! Records that ask graft-hook, the device list or the mount list for more than graft-driver
//! ever writes, planted in the state directory beside a real fake-GPU record, through real
//! containerd 2.2 and runc: a foreign `--ldconfig`, `--rootfs`, `--host-params`, a params
//! copy outside the state directory, the kernel's memory and log devices, a disk, a node
//! graft-driver never published, graft-hook or the state directory mounted into a tenant,
//! and mounts over the container's identity files and service-account token. Each is
//! refused naming the claim and the rule; no planted program runs and the decoy host
//! directory stays the same. The static graft-hook itself refuses the test-only flags and
//! an ldconfig that anyone but root could have written.
//!
//! Needs root, the testbed and the static graft-hook; the README's test command provides
//! them.

mod records_node;

use std::os::unix::fs::PermissionsExt;

use anyhow::{ensure, Context};
use graft_integration::hostile::Decoy;
use graft_integration::mounts::Scratch;
use graft_integration::records::char_node;
use graft_integration::testbed::static_hook;
use graft_record::{ContainerEdits, DeviceKind};
use records_node::node;

/// A scratch directory under /tmp named for this process (socket paths must stay short).
fn scratch(name: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/gr-{name}-{}", std::process::id()))
}

type Edit = Box<dyn Fn(&mut ContainerEdits)>;

/// The position of `flag`'s value in the hook's arguments.
fn value_of(e: &ContainerEdits, flag: &str) -> usize {
    e.hooks[0].args.iter().position(|a| a == flag).expect(flag) + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_records_never_reach_the_host() -> anyhow::Result<()> {
    let dir = scratch("rec")?;
    let decoy = Decoy::create(&dir.join("decoy"))?;
    let n = node(&dir).await?;
    // What a rw mount of graft-hook would let a tenant overwrite.
    let own_hook = n.state.join("bin/graft-hook");
    std::fs::create_dir_all(own_hook.parent().context("bin")?)?;
    std::fs::copy(static_hook()?, &own_hook)?;
    let hook_before = std::fs::read(&own_hook)?;
    let marker = dir.join("planted-ldconfig-ran");
    let evil = dir.join("evil-ldconfig.sh");
    std::fs::write(&evil, format!("#!/bin/sh\ntouch {}\n", marker.display()))?;
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755))?;
    let before = decoy.snapshot()?;

    // The control: gpu-2's own edits are accepted.
    let control = n.try_create("control", n.gpu.edits.clone()).await?;
    ensure!(
        control.is_none(),
        "gpu-2's own record was refused: {control:?}"
    );

    let evil_s = evil.to_string_lossy().into_owned();
    let d = decoy.dir.to_string_lossy().into_owned();
    let state = n.state.to_string_lossy().into_owned();
    let node_ = |path: &str, kind: DeviceKind, major: i64, minor: i64| {
        let mut node = char_node(path, major, minor, 0o666);
        node.kind = kind;
        move |e: &mut ContainerEdits| e.device_nodes.push(node.clone())
    };
    let mount = |source: String, dest: &'static str, rw: bool| {
        move |e: &mut ContainerEdits| {
            let mut m = e.mounts[0].clone();
            m.source = source.clone();
            m.destination = dest.into();
            m.options.retain(|o| o != "ro");
            if rw {
                m.options.push("rw".into());
            }
            e.mounts.push(m);
        }
    };
    let lib = n.gpu.edits.mounts[0].source.clone();
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "foreign-ldconfig",
            Box::new(move |e| {
                let i = value_of(e, "--ldconfig");
                e.hooks[0].args[i] = evil_s.clone();
            }),
            "the node's ldconfig",
        ),
        (
            "rootfs-host",
            Box::new(|e| {
                e.hooks[0]
                    .args
                    .splice(2..2, ["--rootfs".to_string(), "/".to_string()]);
            }),
            "argument \"--rootfs\" is not one graft-driver gives it",
        ),
        (
            "rootfs-global",
            Box::new(|e| {
                e.hooks[0]
                    .args
                    .splice(1..1, ["--rootfs".to_string(), "/".to_string()]);
            }),
            "subcommand Some(\"--rootfs\")",
        ),
        (
            "host-params",
            Box::new({
                let d = d.clone();
                move |e| {
                    e.hooks[0].args.push("--host-params".into());
                    e.hooks[0].args.push(format!("{d}/params"));
                }
            }),
            "argument \"--host-params\" is not one graft-driver gives it",
        ),
        (
            "params-copy-outside",
            Box::new({
                let d = d.clone();
                move |e| {
                    let i = value_of(e, "--params-copy");
                    e.hooks[0].args[i] = format!("{d}/params");
                }
            }),
            "is not graft's params path",
        ),
        (
            "params-copy-dotdot",
            Box::new({
                let state = state.clone();
                let d = d.clone();
                move |e| {
                    let i = value_of(e, "--params-copy");
                    e.hooks[0].args[i] = format!("{state}/../../..{d}/params");
                }
            }),
            "is not graft's params path",
        ),
        (
            "dev-mem",
            Box::new(node_("/dev/mem", DeviceKind::Char, 1, 1)),
            "\"/dev/mem\" is one no container may get",
        ),
        (
            "mem-renamed",
            Box::new(node_("/dev/nvidia9", DeviceKind::Char, 1, 1)),
            "char 1:1, the kernel's /dev/mem",
        ),
        (
            "dev-kmsg",
            Box::new(node_("/dev/kmsg", DeviceKind::Char, 1, 11)),
            "\"/dev/kmsg\" is one no container may get",
        ),
        (
            "block-disk",
            Box::new(node_("/dev/sda", DeviceKind::Block, 8, 0)),
            "(b 8:0) is not a node graft-driver published for device \"gpu-2\"",
        ),
        (
            "unpublished-gpu",
            Box::new(node_("/dev/nvidia7", DeviceKind::Char, 195, 7)),
            "is not a node graft-driver published for device \"gpu-2\"",
        ),
        (
            "rw-graft-hook",
            Box::new(mount(
                own_hook.to_string_lossy().into_owned(),
                "/opt/hook",
                true,
            )),
            "not a directory graft serves from it",
        ),
        (
            "rw-state-dir",
            Box::new(mount(state.clone(), "/opt/state", true)),
            "holds graft's state directory",
        ),
        (
            "dev-source-without-nodev",
            Box::new(|e| {
                let mut m = e.mounts[0].clone();
                m.source = "/dev/fuse".into();
                m.destination = "/opt/fuse".into();
                m.options.retain(|o| o != "nodev");
                e.mounts.push(m);
            }),
            "mount source \"/dev/fuse\" is outside the allowed roots",
        ),
        (
            "over-etc-passwd",
            Box::new(mount(lib.clone(), "/etc/passwd", false)),
            "it would replace /etc/passwd",
        ),
        (
            "over-etc-resolv",
            Box::new(mount(lib.clone(), "/etc/resolv.conf", false)),
            "it would replace /etc/resolv.conf",
        ),
        (
            "over-service-account",
            Box::new(mount(
                lib.clone(),
                "/var/run/secrets/kubernetes.io/serviceaccount",
                false,
            )),
            "it would replace /var/run/secrets/kubernetes.io",
        ),
        (
            "over-dev",
            Box::new(mount(lib.clone(), "/dev", false)),
            "its device directory",
        ),
    ];
    let tried = cases.len();
    // Each case that got past graft: created, or its planted ldconfig ran.
    let mut reached = Vec::new();
    for (case, edit, rule) in cases {
        let mut edits = n.gpu.edits.clone();
        edit(&mut edits);
        let mut how = Vec::new();
        match n.try_create(case, edits).await? {
            None => how.push("the container was created"),
            Some(msg) if !(msg.contains(rule) && msg.contains(&format!("planted-{case}"))) => {
                anyhow::bail!(
                    "case {case}: refusal does not name the rule {rule:?} and the claim: {msg}"
                )
            }
            Some(_) => {}
        }
        if marker.exists() {
            how.push("the planted ldconfig ran");
            std::fs::remove_file(&marker)?;
        }
        if !how.is_empty() {
            reached.push(format!("{case}: {}", how.join(", ")));
        }
        decoy.assert_unchanged(&before, case)?;
        ensure!(
            std::fs::read(&own_hook)? == hook_before,
            "case {case}: graft-hook changed"
        );
    }
    println!(
        "{tried} planted records tried, {} reached the host",
        reached.len()
    );
    ensure!(reached.is_empty(), "{reached:?}");
    Ok(())
}

/// The static graft-hook as the runtime runs it (fixed environment, OCI state on stdin):
/// `--rootfs` pointed at the decoy, `--host-params` at a decoy file, and an ldconfig that
/// anyone may write or that is not root's are refused before it does anything.
#[test]
fn the_static_graft_hook_refuses_what_only_its_tests_may_ask() -> anyhow::Result<()> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = scratch("hook")?;
    let decoy = Decoy::create(&dir.join("decoy"))?;
    let d = decoy.dir.to_string_lossy().into_owned();
    let before = decoy.snapshot()?;
    // A container's bundle whose root is empty.
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(bundle.join("root"))?;
    std::fs::write(bundle.join("config.json"), r#"{"root":{"path":"root"}}"#)?;
    let state = format!(
        r#"{{"ociVersion":"1.2.0","id":"abc","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    );
    let marker = dir.join("ldconfig-ran");
    let script = |name: &str, mode: u32| -> anyhow::Result<String> {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {}\n", marker.display()))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        Ok(p.to_string_lossy().into_owned())
    };
    let writable = script("ldconfig-777", 0o777)?;
    let theirs = script("ldconfig-nobody", 0o755)?;
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534))?;
    let link = dir.join("ldconfig-link").to_string_lossy().into_owned();
    std::os::unix::fs::symlink(&writable, &link)?;
    let params = format!("{d}/params");
    let lib = format!("x::{d}/lib/evil");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--rootfs", &d, "create-symlinks", "--link", &lib],
            "--rootfs is refused",
        ),
        (
            vec!["--rootfs", "/", "create-symlinks", "--link", "x::/evil"],
            "--rootfs is refused",
        ),
        (
            vec![
                "disable-device-node-modification",
                "--params-copy",
                &params,
                "--host-params",
                &params,
            ],
            "--host-params is refused",
        ),
        (
            vec![
                "update-ldcache",
                "--ldconfig",
                &writable,
                "--folder",
                "/lib",
            ],
            "lets group or others write it",
        ),
        (
            vec!["update-ldcache", "--ldconfig", &theirs],
            "owned by uid 65534, not root",
        ),
        (vec!["update-ldcache", "--ldconfig", &link], "is a symlink"),
        (
            vec![
                "nvidia-container",
                "--ldconfig",
                &writable,
                "--params-copy",
                &params,
            ],
            "lets group or others write it",
        ),
    ];
    let tried = cases.len();
    let hook = static_hook()?;
    for (args, want) in cases {
        let mut child = Command::new(&hook)
            .args(&args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // Refused before the state is read: the pipe may already be closed.
        let _ = child
            .stdin
            .take()
            .context("stdin")?
            .write_all(state.as_bytes());
        let out = child.wait_with_output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(1) && err.contains(want),
            "{args:?}: wanted {want:?}, got {:?}: {err}",
            out.status
        );
        decoy.assert_unchanged(&before, &format!("{args:?}"))?;
    }
    ensure!(!marker.exists(), "a refused ldconfig ran");
    ensure!(
        std::fs::read_dir(bundle.join("root"))?.next().is_none(),
        "the container's root was written"
    );
    println!("{tried} test-only or unsafe graft-hook invocations tried, 0 reached the host");
    Ok(())
}
