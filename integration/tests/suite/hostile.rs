//! Attacks on graft's trust boundary through real containerd 2.2 and runc: hostile images
//! against graft-hook (symlinks out of the root, FIFOs, magic links), `LD_PRELOAD` against
//! the hooks on a runc that hands them the container's environment, records planted in the
//! state directory, and 50 GPU-style containers created at once. In every case the decoy
//! host directories must stay byte-for-byte the same, and the container either runs with
//! what graft gives it or fails with an error that says why.
//!
//! Needs root, the testbed and the static graft-hook; the README's test command provides
//! them.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context};
use graft_driver::discovery::Discovery;
use graft_driver::model::Device;
use graft_integration::cri::Pod;
use graft_integration::fake_gpu::{FakeNode, DRIVER_VERSION, LIB_DIR};
use graft_integration::hostile::{preload_library, runc_with_hook, Decoy};
use graft_integration::images::ImageRoot;
use graft_integration::mounts::Scratch;
use graft_integration::records::{char_node, one_device_claim, plant};
use graft_integration::testbed::static_hook;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::RecordStore;

/// A scratch directory under /tmp named for this process (socket paths must stay short),
/// gone when the test ends.
fn scratch(name: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/gh-{name}-{}", std::process::id()))
}

/// A fake GPU (gpu-2 of the fake node, driver root under `dir`) with graft-hook's edits.
fn fake_gpu(dir: &Path) -> anyhow::Result<(Device, FakeNode, String)> {
    let node = FakeNode::create(&dir.join("node"))?;
    let hook = static_hook()?.to_string_lossy().into_owned();
    let devices = common::discovery_in(
        &node,
        common::as_driver_root(&node),
        &hook,
        &dir.join("state"),
    )?
    .discover()?;
    let gpu = devices
        .into_iter()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2")?;
    Ok((gpu, node, hook))
}

/// containerd 2.2 with graft-nri holding the node's policy (fake driver root, graft-hook).
struct Node {
    cd: Containerd,
    nri: GraftNri,
    cri: Cri,
    store: RecordStore,
    state: PathBuf,
    dir: PathBuf,
}

async fn node(dir: &Path, runc_dir: &Path, fake: &FakeNode, hook: &str) -> anyhow::Result<Node> {
    let tb = Testbed::load()?;
    let cd = Containerd::start_with_runc(&tb, Version::V2_2, &dir.join("c"), runc_dir)?;
    let state = dir.join("state");
    let store = RecordStore::open(&state)?;
    let root = fake.host.to_string_lossy().into_owned();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("graft-nri.log"),
        &["--hook-path", hook, "--nvidia-driver-root", &root],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    Ok(Node {
        cd,
        nri,
        cri,
        store,
        state,
        dir: dir.to_path_buf(),
    })
}

/// What the container reports about what graft gave it, then it idles.
const PROBE: &str = r#"echo "LINK $(readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1)"
grep -q /usr/lib/x86_64-linux-gnu /etc/ld.so.conf.d/00-graft-nvidia.conf && echo CONF_OK
grep -q libcuda.so /etc/ld.so.cache && echo CACHE_OK
echo DONE
exec sleep 3600"#;

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Ran, with the driver's library link, the linker config and cache inside.
    Ran,
    /// Failed to start; the error.
    Refused(String),
}

impl Node {
    /// Records `gpu` for a new pod, runs a container of `image` in it, and reports.
    async fn run_gpu_container(
        &self,
        case: &str,
        image: &str,
        gpu: &Device,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Outcome> {
        let uid = format!("{case}-{}", std::process::id());
        self.store.put_claim(&one_device_claim(
            &format!("claim-{uid}"),
            &format!("gpu-{case}"),
            &uid,
            &["app"],
            &gpu.name,
            gpu.edits.clone(),
        ))?;
        let pod = self.cri.run_pod(case, &uid).await?;
        let id = match self.cri.create_from(&pod, "app", image, PROBE, env).await {
            Ok(id) => id,
            Err(e) => return Ok(Outcome::Refused(e.message().to_string())),
        };
        if let Err(e) = self.cri.start(&id).await {
            let msg = format!("{e:#}");
            self.cri.remove_pod(&pod).await?;
            return Ok(Outcome::Refused(msg));
        }
        let log = self
            .cri
            .wait_log(&pod, "app", "DONE", Duration::from_secs(60))
            .await?;
        self.cri.remove_pod(&pod).await?;
        let ok = log.contains(&format!("LINK libcuda.so.{DRIVER_VERSION}"))
            && log.contains("CONF_OK")
            && log.contains("CACHE_OK");
        ensure!(ok, "case {case}: ran but without what graft gives:\n{log}");
        Ok(Outcome::Ran)
    }

    fn import(&self, name: &str, root: &ImageRoot) -> anyhow::Result<String> {
        let reference = format!("docker.io/library/hostile-{name}:test");
        let tar = self.dir.join(format!("{name}.tar"));
        root.save(&reference, &tar)?;
        self.cd.import_image(&tar)?;
        Ok(reference)
    }
}

/// An image whose root `plant` fills in, on top of busybox with an `/etc` holding passwd
/// and group (containerd reads them, in the root, for every container), and with a copy of
/// the decoy's tree at the decoy's own absolute path inside the image: a symlink planted
/// towards the decoy then resolves, inside the root, to that copy, which is where graft-hook
/// must work, while a path joined naively onto the root would reach the host's decoy.
fn image(
    dir: &Path,
    name: &str,
    decoy: Option<&Decoy>,
    plant: impl FnOnce(&ImageRoot) -> anyhow::Result<()>,
) -> anyhow::Result<ImageRoot> {
    let root = ImageRoot::busybox(&dir.join("images").join(name))?;
    root.write("etc/passwd", "root:x:0:0:root:/:/bin/sh\n")?
        .write("etc/group", "root:x:0:\n")?;
    if let Some(d) = decoy {
        let inside = root.path(&d.dir.to_string_lossy());
        std::fs::create_dir_all(&inside)?;
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(d.dir.join("."))
            .arg(&inside)
            .status()?;
        ensure!(st.success(), "copying the decoy into the image");
    }
    plant(&root)?;
    Ok(root)
}

/// Replaces the image's `/etc` with a symlink to `target`.
fn etc_link(r: &ImageRoot, target: &str) -> anyhow::Result<()> {
    std::fs::remove_dir_all(r.path("etc"))?;
    r.symlink("etc", target)?;
    Ok(())
}

/// Each image plants symlinks (absolute, relative, chains, magic links) or special files
/// where graft-hook works, pointing at the decoy. The hook resolves every path inside the
/// container's root, so each either runs with the driver's files inside its own root or
/// is refused with graft-hook's reason; the decoy never changes. An image whose whole
/// `/etc` leads out of its root is refused earlier, by containerd's own in-root lookup of
/// `/etc/passwd`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_images_never_reach_the_host() -> anyhow::Result<()> {
    let dir = scratch("img")?;
    let decoy = Decoy::create(&dir.join("decoy"))?;
    let d = decoy.dir.to_string_lossy().into_owned();
    let up = "../../../../../../../../../../..";
    let (gpu, fake, hook) = fake_gpu(&dir)?;
    let tb = Testbed::load()?;
    let n = node(&dir, &tb.runc_dir, &fake, &hook).await?;
    let before = decoy.snapshot()?;

    type Plant<'a> = Box<dyn FnOnce(&ImageRoot) -> anyhow::Result<()> + 'a>;
    let link = |rel: &'static str, target: String| -> Plant {
        Box::new(move |r| r.symlink(rel, &target).map(|_| ()))
    };
    let replace = |rel: &'static str, target: String| -> Plant {
        Box::new(move |r| {
            let _ = std::fs::remove_file(r.path(rel));
            r.symlink(rel, &target).map(|_| ())
        })
    };
    let etc = |target: String| -> Plant { Box::new(move |r| etc_link(r, &target)) };
    const CONTAINERD: Option<&str> = Some("escapes");
    let dangling = format!("{d}/nowhere");
    let cases: Vec<(&str, Plant, Option<&str>)> = vec![
        // Where graft-hook writes its linker config.
        (
            "confd-absolute",
            link("etc/ld.so.conf.d", format!("{d}/etc/ld.so.conf.d")),
            None,
        ),
        (
            "confd-relative",
            link("etc/ld.so.conf.d", format!("{up}{d}/etc/ld.so.conf.d")),
            None,
        ),
        (
            "confd-chain",
            Box::new(|r| {
                r.symlink("etc/ld.so.conf.d", "/a")?
                    .symlink("a", "/b/../c")?
                    .mkdir("b")?
                    .symlink("c", &format!("{d}/etc/ld.so.conf.d"))?;
                Ok(())
            }),
            None,
        ),
        (
            "confd-magic-link",
            link(
                "etc/ld.so.conf.d",
                format!("/proc/self/root{d}/etc/ld.so.conf.d"),
            ),
            Some("graft-hook"),
        ),
        // A directory symlink that leads nowhere inside the root: not created through.
        (
            "confd-dangling",
            link("etc/ld.so.conf.d", dangling.clone()),
            Some("graft-hook"),
        ),
        (
            "ldsoconf-absolute",
            link("etc/ld.so.conf", format!("{d}/etc/ld.so.conf")),
            None,
        ),
        (
            "ldsoconf-relative",
            link("etc/ld.so.conf", format!("{up}{d}/etc/ld.so.conf")),
            None,
        ),
        (
            "ldsoconf-fifo",
            Box::new(|r| nix_mkfifo(&r.path("etc/ld.so.conf"))),
            Some("graft-hook"),
        ),
        (
            "ldsoconf-dev-zero",
            link("etc/ld.so.conf", "/dev/zero".into()),
            Some("graft-hook"),
        ),
        // Where ldconfig, run by graft-hook, writes the cache.
        (
            "ldcache-absolute",
            link("etc/ld.so.cache", format!("{d}/etc/ld.so.cache")),
            None,
        ),
        // Where graft-hook creates the driver's library links.
        (
            "libdir-absolute",
            link("usr/lib/x86_64-linux-gnu", format!("{d}/lib")),
            None,
        ),
        (
            "libdir-relative",
            link("usr/lib/x86_64-linux-gnu", format!("{up}{d}/lib")),
            None,
        ),
        // The driver's files are links graft-hook makes there (one bind of the prepared
        // directory, no mountpoint runc would make first): it does not create directories
        // through a dangling link, as for /etc/ld.so.conf.d.
        (
            "libdir-dangling",
            link("usr/lib/x86_64-linux-gnu", dangling.clone()),
            Some("creating the directory /usr/lib/x86_64-linux-gnu"),
        ),
        (
            "usr-chain",
            Box::new(|r| {
                r.symlink("usr", "lib-alias/..")?
                    .symlink("lib-alias", &format!("{d}/lib"))?;
                Ok(())
            }),
            None,
        ),
        (
            "link-points-out",
            replace(
                "usr/lib/x86_64-linux-gnu/libcuda.so.1",
                format!("{d}/lib/libkeep.so.1"),
            ),
            None,
        ),
        // /proc, where the params copy is mounted: runc refuses a symlinked /proc.
        (
            "proc-symlink",
            Box::new(|r| {
                std::fs::remove_dir(r.path("proc"))?;
                r.symlink("proc", &d)?;
                Ok(())
            }),
            Some("proc"),
        ),
        // The whole /etc out of the root: containerd refuses it first.
        ("etc-absolute", etc(format!("{d}/etc")), CONTAINERD),
        ("etc-relative", etc(format!("{up}{d}/etc")), CONTAINERD),
        (
            "etc-magic-link",
            etc(format!("/proc/self/root{d}/etc")),
            CONTAINERD,
        ),
    ];
    let total = cases.len();
    let mut table = Vec::new();
    for (name, plant, refused_with) in cases {
        let root = image(&dir, name, Some(&decoy), plant)?;
        let reference = n.import(name, &root)?;
        let outcome = n.run_gpu_container(name, &reference, &gpu, &[]).await?;
        decoy.assert_unchanged(&before, name)?;
        match (&outcome, refused_with) {
            (Outcome::Ran, None) => {}
            (Outcome::Refused(msg), Some(why)) => {
                ensure!(
                    msg.contains(why),
                    "case {name}: refused, but not for {why:?}: {msg}"
                )
            }
            (other, want) => anyhow::bail!("case {name}: {other:?}, expected refusal {want:?}"),
        }
        table.push(format!("{name}: {outcome:?}"));
    }
    println!(
        "{total} hostile images, 0 reached the host:\n{}",
        table.join("\n")
    );
    n.nri
        .wait_log("injecting recorded devices", Duration::from_secs(10))
        .context("graft-nri injected nothing")?;
    Ok(())
}

fn nix_mkfifo(p: &Path) -> anyhow::Result<()> {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644))
        .with_context(|| format!("mkfifo {}", p.display()))
}

/// runc before 1.3 hands a createContainer hook that sets no environment the container's
/// own, `LD_PRELOAD` included, with the container's root as working directory
/// (CVE-2025-23266). The control shows that path is real on runc 1.2.7: a dynamically
/// linked hook without an environment loads the image's library. graft's hooks defeat it
/// twice, each defence on its own (a static graft-hook ignores LD_PRELOAD; an explicit
/// environment never contains it), and through containerd the library is never loaded,
/// on runc 1.2.7 and on the testbed's runc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ld_preload_in_an_image_never_reaches_a_hook() -> anyhow::Result<()> {
    let dir = scratch("preload")?;
    let decoy = Decoy::create(&dir.join("decoy"))?;
    let marker = decoy.dir.join("preloaded");
    let tb = Testbed::load()?;
    let old_runc = tb.old_runc_dir.join("runc");
    let root = image(&dir, "preload", None, |r| {
        preload_library(&r.path("evil.so"), &marker)
    })?;
    let env = ["PATH=/bin", "LD_PRELOAD=./evil.so"];
    let hook = static_hook()?;
    let before = decoy.snapshot()?;

    // Control: a dynamic hook (/bin/true) with no environment of its own loads it.
    let (ok, err) = runc_with_hook(
        &old_runc,
        &dir.join("b-control"),
        &root.dir,
        &env,
        Path::new("/bin/true"),
        &["true"],
        None,
    )?;
    ensure!(ok, "control run failed: {err}");
    ensure!(
        marker.is_file(),
        "control: runc 1.2.7 did not hand LD_PRELOAD to the hook; the test proves nothing"
    );
    std::fs::remove_file(&marker)?;

    // Each defence alone: the static graft-hook with no environment, and a dynamic hook
    // with graft's explicit one.
    let (ok, err) = runc_with_hook(
        &old_runc,
        &dir.join("b-static"),
        &root.dir,
        &env,
        &hook,
        &["graft-hook", "create-symlinks"],
        None,
    )?;
    ensure!(ok, "static graft-hook run failed: {err}");
    ensure!(!marker.exists(), "the static graft-hook loaded LD_PRELOAD");
    let (ok, err) = runc_with_hook(
        &old_runc,
        &dir.join("b-env"),
        &root.dir,
        &env,
        Path::new("/bin/true"),
        &["true"],
        Some(graft_record::policy::HOOK_ENV),
    )?;
    ensure!(ok, "explicit-env run failed: {err}");
    ensure!(
        !marker.exists(),
        "a hook with graft's environment loaded LD_PRELOAD"
    );
    decoy.assert_unchanged(&before, "runc bundles")?;

    // Through containerd and graft-nri, on both runcs: the container runs, nothing loads it.
    for (label, runc_dir) in [("runc-1.2.7", &tb.old_runc_dir), ("runc", &tb.runc_dir)] {
        // Each node its own state directory, where graft-hook's params copies go.
        let (gpu, fake, hook) = fake_gpu(&dir.join(label))?;
        let n = node(&dir.join(label), runc_dir, &fake, &hook).await?;
        let reference = n.import("preload", &root)?;
        let outcome = n
            .run_gpu_container(
                &format!("preload-{label}"),
                &reference,
                &gpu,
                &[("LD_PRELOAD", "./evil.so")],
            )
            .await?;
        ensure!(outcome == Outcome::Ran, "{label}: {outcome:?}");
        ensure!(
            !marker.exists(),
            "{label}: a hook loaded the image's LD_PRELOAD"
        );
        decoy.assert_unchanged(&before, label)?;
    }
    Ok(())
}

/// 50 GPU-style containers (10 pods of 5) created and started at once: each gets its own
/// driver files, link and linker cache, and no per-container file is left in the state
/// directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_gpu_containers_at_once() -> anyhow::Result<()> {
    let dir = scratch("fifty")?;
    let (gpu, fake, hook) = fake_gpu(&dir)?;
    let tb = Testbed::load()?;
    let n = node(&dir, &tb.runc_dir, &fake, &hook).await?;
    let names: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut pods: Vec<Pod> = Vec::new();
    for p in 0..10 {
        let uid = format!("fifty-{p}-{}", std::process::id());
        n.store.put_claim(&one_device_claim(
            &format!("claim-{uid}"),
            &format!("gpu-{p}"),
            &uid,
            &refs,
            &gpu.name,
            gpu.edits.clone(),
        ))?;
        pods.push(n.cri.run_pod(&format!("fifty-{p}"), &uid).await?);
    }
    let started = std::time::Instant::now();
    let cri = &n.cri;
    let runs = pods.iter().flat_map(|pod| {
        names.iter().map(move |c| {
            let cri = cri.clone();
            async move { cri.create_and_start(pod, c, PROBE).await }
        })
    });
    let results = futures::future::join_all(runs).await;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(
        failed.is_empty(),
        "{} of 50 failed: {failed:?}",
        failed.len()
    );
    for pod in &pods {
        for c in &names {
            let log = n
                .cri
                .wait_log(pod, c, "DONE", Duration::from_secs(120))
                .await?;
            ensure!(
                log.contains(&format!("LINK libcuda.so.{DRIVER_VERSION}"))
                    && log.contains("CACHE_OK"),
                "{}/{c}: {log}",
                pod.name
            );
        }
    }
    println!(
        "50 GPU-style containers created and started in {:?}",
        started.elapsed()
    );
    // The driver's prepared directory is the node's, not a container's.
    let leftovers: Vec<_> = std::fs::read_dir(n.state.join("nvidia"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name())
                .filter(|n| n != "driver")
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        leftovers.is_empty(),
        "left in the state directory: {leftovers:?}"
    );
    let _ = LIB_DIR;
    Ok(())
}

/// Records graft-driver would never write, planted in the state directory: each container
/// is refused naming the claim and the rule, and the planted hook never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_records_are_refused() -> anyhow::Result<()> {
    let dir = scratch("planted")?;
    let (gpu, fake, hook) = fake_gpu(&dir)?;
    let tb = Testbed::load()?;
    let n = node(&dir, &tb.runc_dir, &fake, &hook).await?;
    let marker = dir.join("planted-hook-ran");
    let evil = dir.join("evil-hook.sh");
    std::fs::write(&evil, format!("#!/bin/sh\ntouch {}\n", marker.display()))?;
    std::fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;

    type Edit = Box<dyn Fn(&mut graft_record::ContainerEdits)>;
    let evil_path = evil.to_string_lossy().into_owned();
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "foreign-hook",
            Box::new(move |e| e.hooks[0].path = evil_path.clone()),
            "is not graft-hook at its installed path",
        ),
        (
            "hook-without-env",
            Box::new(|e| e.hooks[0].env.clear()),
            "hook environment must be exactly",
        ),
        (
            "hook-unknown-subcommand",
            Box::new(|e| e.hooks[0].args[1] = "exec".into()),
            "subcommand",
        ),
        (
            "mount-host-etc",
            Box::new(|e| e.mounts[0].source = "/etc".into()),
            "outside the allowed roots",
        ),
        (
            "mount-escape-dotdot",
            Box::new(|e| e.mounts[0].source = format!("{}/../../../etc", e.mounts[0].source)),
            "not a clean absolute path",
        ),
        (
            "mount-suid",
            Box::new(|e| e.mounts[0].options.retain(|o| o != "nosuid")),
            "lacks nosuid",
        ),
        (
            "mount-proc-type",
            Box::new(|e| e.mounts[0].kind = "proc".into()),
            "graft only bind-mounts",
        ),
    ];
    let total = cases.len() + 1;
    for (name, edit, rule) in cases {
        let mut edits = gpu.edits.clone();
        edit(&mut edits);
        let uid = format!("{name}-{}", std::process::id());
        plant(
            &n.state,
            &one_device_claim(
                &format!("claim-{uid}"),
                &format!("planted-{name}"),
                &uid,
                &["app"],
                "gpu-2",
                edits,
            ),
        )?;
        let pod = n.cri.run_pod(name, &uid).await?;
        let e = n
            .cri
            .create(&pod, "app", "echo should-not-run")
            .await
            .err()
            .with_context(|| format!("case {name}: the container was created"))?;
        let msg = e.message();
        ensure!(
            msg.contains(rule) && msg.contains(&format!("planted-{name}")),
            "case {name}: refusal does not name the rule {rule:?} and the claim: {msg}"
        );
        n.cri.remove_pod(&pod).await?;
    }

    // A record that asks for LD_PRELOAD cannot even be written through the store; planted
    // by hand, it is refused on read.
    let uid = format!("preload-{}", std::process::id());
    let mut rec = one_device_claim(
        &format!("claim-{uid}"),
        "planted-preload",
        &uid,
        &["app"],
        "fuse",
        graft_record::ContainerEdits {
            device_nodes: vec![char_node("/dev/fuse", 10, 229, 0o666)],
            ..Default::default()
        },
    );
    rec.devices[0].edits.env.push(graft_record::EnvVar {
        name: "LD_PRELOAD".into(),
        value: "/evil.so".into(),
    });
    ensure!(
        n.store.put_claim(&rec).is_err(),
        "the store wrote LD_PRELOAD"
    );
    plant(&n.state, &rec)?;
    let pod = n.cri.run_pod("preload", &uid).await?;
    let e = n
        .cri
        .create(&pod, "app", "echo should-not-run")
        .await
        .err()
        .context("LD_PRELOAD record: the container was created")?;
    ensure!(e.message().contains("LD_PRELOAD"), "{}", e.message());
    ensure!(!marker.exists(), "a planted hook ran");
    println!("{total} planted records, all refused");
    Ok(())
}

/// graft-nri's CreateContainer blocked past its deadline, then panicking, against real
/// containerd 2.2 (whose own timeout, 2 s, would drop the plugin and start containers
/// without devices): both containers are refused with the reason, the plugin stays
/// connected, and the next container gets its device. The fault switch exists only in test
/// builds (feature `fault-injection`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_or_panicking_graft_nri_refuses_and_stays_connected() -> anyhow::Result<()> {
    use graft_nri::fault::Fault;
    use graft_nri::plugin::GraftPlugin;
    use graft_nri_sdk::{self as sdk, Options, Transport};
    use graft_record::{nri_readiness, read_boot_id, InjectionPolicy, NriReadiness};

    let dir = scratch("fault")?;
    let tb = Testbed::load()?;
    let cd = Containerd::start(&tb, Version::V2_2, &dir.join("c"))?;
    let state = dir.join("state");
    let store = RecordStore::open(&state)?;
    let boot = read_boot_id(Path::new(graft_record::BOOT_ID_PATH))?;
    let status = graft_record::StatusPublisher::acquire(&state, "10-graft", boot.clone())?;
    let policy = InjectionPolicy::new(&state, graft_record::policy::DEFAULT_HOOK_PATH, &[])?;
    let plugin = std::sync::Arc::new(GraftPlugin::new(store.clone(), status, policy));
    let faults = plugin.fault_switch();
    let opts = Options::new("graft", "10", Transport::External(cd.nri_socket.clone()));
    ensure!(opts.handler_deadline == Duration::from_secs(1));
    let run = tokio::spawn(sdk::run(plugin.clone(), opts));
    let ready = || matches!(nri_readiness(&state, &boot), Ok(NriReadiness::Ready(_)));
    let t0 = std::time::Instant::now();
    while !ready() {
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "plugin never synchronized"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let uid = format!("fault-{}", std::process::id());
    store.put_claim(&one_device_claim(
        &format!("claim-{uid}"),
        "nullish",
        &uid,
        &[
            "late", "panics-0", "panics-1", "panics-2", "panics-3", "panics-4", "fine",
        ],
        "null",
        graft_record::ContainerEdits {
            device_nodes: vec![char_node("/dev/graft-null", 1, 3, 0o666)],
            ..Default::default()
        },
    ))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    let pod = cri.run_pod("fault", &uid).await?;

    faults.push(Fault::Sleep(Duration::from_millis(1500)));
    let t = std::time::Instant::now();
    let e = cri
        .create(&pod, "late", "sleep 60")
        .await
        .err()
        .context("a container was created past graft-nri's deadline")?;
    let took = t.elapsed();
    ensure!(
        e.message().contains("deadline") && e.message().contains("\"late\""),
        "{}",
        e.message()
    );
    ensure!(
        took < Duration::from_millis(1900),
        "refused only after {took:?}"
    );

    // A panicking handler is refused as such. The panic hook prints a backtrace, which on a
    // loaded machine can take past the 750 ms deadline: that refusal is the deadline's, so
    // the panic is tried again (every try must be refused, one way or the other).
    let mut caught = Vec::new();
    for n in 0..5 {
        faults.push(Fault::Panic);
        let e = cri
            .create(&pod, &format!("panics-{n}"), "sleep 60")
            .await
            .err()
            .context("a container was created while graft-nri panicked")?;
        let m = e.message().to_string();
        ensure!(
            m.contains("failed internally") || m.contains("deadline"),
            "{m}"
        );
        caught.push(m);
        if caught
            .last()
            .is_some_and(|m| m.contains("failed internally"))
        {
            break;
        }
    }
    ensure!(
        caught.iter().any(|m| m.contains("failed internally")),
        "the panic was never refused as one: {caught:#?}"
    );

    // Still connected: the next container is injected.
    let id = cri
        .create_and_start(&pod, "fine", "stat -c '%t:%T' /dev/graft-null; sleep 60")
        .await?;
    let spec = cd.runtime_spec(&id)?;
    ensure!(
        spec["annotations"]["graft.dev/injected"].is_string(),
        "not injected: {spec}"
    );
    ensure!(ready(), "graft-nri lost its connection");
    ensure!(!run.is_finished(), "the plugin stopped");
    let stats = plugin.stats();
    ensure!(stats.injected.load(std::sync::atomic::Ordering::Relaxed) == 1);
    run.abort();
    Ok(())
}
