//! install_as_documented: README's install commands and docs/install.md's uninstall
//! commands, taken from the markdown (cluster_install/docs.rs), run as written against a
//! fresh testbed cluster: release.sh builds the image and chart in a clone of this tree
//! (what `git clone` gives a user; CI has no network; cluster_install/clone.rs). First install.md's path without a
//! registry: the image imported into the node's containerd, the packaged chart installed
//! from its file. Then README's: pushed to a registry over HTTPS
//! (cluster_install/registry.rs), helm installs the pushed chart, and README's fuse pod
//! runs with the image pulled from there by digest. Each uninstall leaves what the docs say
//! it leaves. The import goes first: the kubelet verifies an image it once pulled under
//! another name by pulling again (KubeletEnsureSecretPulledImages), which an imported
//! image's registry, ghcr.io, would refuse here; a node only ever given the file is what
//! that path is for.
//!
//! The one substitution: the docs' placeholder registry (`REGISTRY=registry.example.com/team`)
//! becomes the local one. The commands run with the cluster's kubeconfig and the testbed's
//! kubectl, helm and ctr on PATH, as a user's shell would have them.
//!
//! The release install.md's release.sh builds is checked with deploy/release/verify.sh: this
//! test is CI's amd64 release build and check.

mod clone;
mod docs;
mod registry;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::own_cluster;
use graft_integration::cluster::{run, wait_until, Cluster, Kubernetes};
use graft_integration::Testbed;

use clone::Clone;
use registry::Registry;

/// The shell a user types the docs' commands into.
struct Shell {
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Shell {
    /// Runs `lines` as one bash script (stopping at the first failure, or after 40
    /// minutes: a cold release build takes 15 on 2 vCPUs); its stdout.
    fn run(&self, what: &str, lines: &[String]) -> anyhow::Result<String> {
        let script = format!("set -euo pipefail\n{}\n", lines.join("\n"));
        let start = Instant::now();
        let out = run(Command::new("timeout")
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(["2400", "bash", "-c", &script]))
        .with_context(|| format!("{what}:\n{script}"))?;
        println!("install_as_documented: {what} in {:.0?}", start.elapsed());
        Ok(out)
    }
}

/// graft's objects of `kind` (all namespaces), by name.
fn graft_objects(c: &Cluster, kind: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "get",
        kind,
        "-A",
        "-l",
        "app.kubernetes.io/part-of=graft",
        "-o",
        "name",
    ])
}

/// What the uninstall must leave: no graft object, slice or namespace (step 3); the
/// node's state directory gone (step 5).
fn uninstalled(c: &Cluster, sh: &Shell, top: &Path) -> anyhow::Result<()> {
    // Step 1 is the user's: their pods and claims, here README's example.
    c.kubectl(&[
        "delete",
        "-f",
        &top.join("deploy/examples/fuse-pod.yaml").to_string_lossy(),
        "--ignore-not-found",
        "--wait=true",
    ])?;
    wait_until("claims still allocated after the example pod went", || {
        Ok(c.kubectl(&["get", "resourceclaims", "-A", "-o", "name"])?
            .trim()
            .is_empty())
    })?;
    let out = sh.run(
        "install.md's uninstall",
        &docs::block(top, "docs/install.md", "uninstall")?,
    )?;
    ensure!(
        !out.contains('/'),
        "the first command listed allocated claims:\n{out}"
    );
    wait_until("graft's ResourceSlices outlived the uninstall", || {
        Ok(c.kubectl(&[
            "get",
            "resourceslices",
            "--field-selector",
            "spec.driver=graft.dev",
            "-o",
            "name",
        ])?
        .trim()
        .is_empty())
    })?;
    for kind in [
        "deviceclasses",
        "validatingadmissionpolicies",
        "clusterroles",
        "daemonsets",
    ] {
        let left = graft_objects(c, kind)?;
        ensure!(left.trim().is_empty(), "left after the uninstall: {left}");
    }
    wait_until("graft-system outlived its deletion", || {
        Ok(!c
            .kubectl(&["get", "namespaces", "-o", "name"])?
            .contains("namespace/graft-system"))
    })?;
    sh.run(
        "install.md's uninstall on the node",
        &docs::block(top, "docs/install.md", "uninstall-node")?,
    )?;
    ensure!(!Path::new("/var/lib/graft").exists());
    Ok(())
}

/// The shell the docs' commands run in, in `dir`: the testbed's kubectl, helm and ctr first
/// on PATH, as a user's shell would have them, and release.sh's target directory beside the
/// clone, which CI's clean clones reuse.
fn shell(tb: &Testbed, dir: &Path) -> anyhow::Result<Shell> {
    let dir_of = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::join_paths(
        [tb.k8s.clone(), dir_of(&tb.helm), tb.containerd_24.clone()]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )?;
    let target = clone::target_dir();
    Ok(Shell {
        dir: dir.to_path_buf(),
        env: vec![
            ("PATH".into(), path.to_string_lossy().into_owned()),
            (
                "GRAFT_RELEASE_TARGET_DIR".into(),
                target.to_string_lossy().into_owned(),
            ),
        ],
    })
}

/// install.md's `release.sh` line, which install_as_documented runs first.
fn release_line(top: &Path) -> anyhow::Result<String> {
    docs::block(top, "docs/install.md", "import")?
        .into_iter()
        .find(|l| l.starts_with("bash deploy/release/release.sh "))
        .context("install.md's import block runs no release.sh")
}

/// Builds the release install_as_documented builds, in its clone, before it runs: started
/// by test-all.sh beside the tiers at the lowest priority (clone.rs says why this makes the
/// test's build a no-op). Needs no cluster.
#[test]
#[ignore = "test-all.sh starts it beside the tiers"]
fn warm_the_release_build() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let top = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let line = release_line(&top)?;
    let held = Clone::take(&top)?;
    shell(&tb, &held.dir)?.run("the release build, warmed", &[line])?;
    Ok(())
}

#[test]
fn install_as_documented() -> anyhow::Result<()> {
    let _turn = own_cluster();
    let tb = Testbed::load()?;
    let top = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let c = Cluster::up_without_graft(Kubernetes::Newest)?;
    let work = tempfile::tempdir()?;
    let held = Clone::take(&top)?;
    let clone = held.dir.clone();
    let reg_dir = work.path().join("registry");
    std::fs::create_dir_all(&reg_dir)?;
    let reg = Registry::start(&top, &reg_dir)?;
    let mut sh = shell(&tb, &clone)?;
    sh.env.extend([
        (
            "KUBECONFIG".into(),
            c.kubeconfig.to_string_lossy().into_owned(),
        ),
        (
            "SSL_CERT_FILE".into(),
            reg.ca.to_string_lossy().into_owned(),
        ),
        (
            "CONTAINERD_ADDRESS".into(),
            "/run/graft-cluster/containerd.sock".into(),
        ),
    ]);

    // Without a registry: the image imported, the chart from its file.
    sh.run(
        "install.md's install without a registry",
        &docs::block(&top, "docs/install.md", "import")?,
    )?;
    // The release that block built is checked as a tagged one is (CI's release check: this
    // is the amd64 release build of every change).
    let verified = sh.run(
        "verify.sh on the release",
        &["bash deploy/release/verify.sh 0.1.0 --arch amd64 dist".to_string()],
    )?;
    println!("{verified}");
    ensure!(
        verified.contains("verify.sh: ok: amd64: the daemons report v0.1.0"),
        "verify.sh did not run the daemons:\n{verified}"
    );
    let out = sh.run(
        "README's example (imported image)",
        &docs::block(&top, "README.md", "example")?,
    )?;
    ensure!(out.contains("FUSE_DEVICE=/dev/fuse"), "{out}");
    uninstalled(&c, &sh, &clone)?;

    // README: from the clone on (the clone is the copy above).
    let readme = docs::block(&top, "README.md", "readme")?;
    ensure!(
        readme.first().is_some_and(|l| l.starts_with("git clone ")),
        "README's install block does not start with the clone: {readme:#?}"
    );
    ensure!(
        docs::block(&top, "docs/install.md", "registry")? == readme[1..],
        "docs/install.md's registry block is not README's (after the clone)"
    );
    let prefix = format!("{}/graft-test", reg.host);
    let install = docs::with_var(&readme[1..], "REGISTRY", &prefix)?;
    let out = sh.run("README's install", &install)?;
    ensure!(
        out.contains("graft-node"),
        "no slice of the node listed:\n{out}"
    );
    // graft's pods run the pushed image, by digest.
    let images = c.kubectl(&[
        "-n",
        "graft-system",
        "get",
        "pods",
        "-o",
        "jsonpath={.items[*].spec.containers[*].image}",
    ])?;
    ensure!(
        images
            .split_whitespace()
            .all(|i| i.starts_with(&format!("{prefix}/graft:v0.1.0@sha256:"))),
        "graft's pods run {images}"
    );
    // Pulled from the registry: the node's containerd knows it by that name.
    let pulled = c.crictl(&["images", "-o", "json"])?;
    ensure!(
        pulled.contains(&format!("{prefix}/graft@sha256:")),
        "the node holds no image pulled from {prefix}: {pulled}"
    );
    let out = sh.run(
        "README's example",
        &docs::block(&top, "README.md", "example")?,
    )?;
    ensure!(
        out.contains("/dev/fuse") && out.contains("FUSE_DEVICE=/dev/fuse"),
        "the example's app did not get /dev/fuse:\n{out}"
    );
    uninstalled(&c, &sh, &clone)?;

    drop(reg);
    Ok(())
}
