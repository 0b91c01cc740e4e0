//! Where the testbed's components live.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Paths written by `integration/testbed/setup.sh` into `$GRAFT_CACHE/env`.
#[derive(Debug, Clone)]
pub struct Testbed {
    /// The directory holding the runc the tests run.
    pub runc_dir: PathBuf,
    /// An older runc (1.2.x) whose createContainer hooks inherit the container's
    /// environment; for the hostile-image tests.
    pub old_runc_dir: PathBuf,
    /// The crictl binary.
    pub crictl: PathBuf,
    /// helm, for the chart in deploy/helm/graft.
    pub helm: PathBuf,
    /// containerd 2.2.x.
    pub containerd_2: PathBuf,
    /// containerd 2.4.x.
    pub containerd_24: PathBuf,
    /// containerd 1.7.24.
    pub containerd_17: PathBuf,
    /// The test images' tars.
    pub images: PathBuf,
    /// Kubernetes binaries and etcd.
    pub k8s: PathBuf,
    /// The oldest Kubernetes minor graft supports (1.34), binaries and etcd.
    pub k8s_134: PathBuf,
}

impl Testbed {
    /// The testbed cache: `$GRAFT_CACHE`, or `~/.cache/graft-testbed`.
    pub fn cache_dir() -> PathBuf {
        match std::env::var_os("GRAFT_CACHE") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/graft-testbed"),
        }
    }

    /// Loads the testbed, or says how to install it.
    pub fn load() -> anyhow::Result<Self> {
        let env = Self::cache_dir().join("env");
        let text = std::fs::read_to_string(&env).with_context(|| {
            format!(
                "testbed not installed ({} missing): run integration/testbed/setup.sh",
                env.display()
            )
        })?;
        let vars: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| -> anyhow::Result<PathBuf> {
            match vars.get(k) {
                Some(v) => Ok(PathBuf::from(v)),
                None => bail!(
                    "{} lacks {k}: rerun integration/testbed/setup.sh",
                    env.display()
                ),
            }
        };
        let runc = get("GRAFT_RUNC")?;
        let old_runc = get("GRAFT_RUNC_OLD")?;
        Ok(Testbed {
            runc_dir: runc.parent().map(Path::to_path_buf).unwrap_or_default(),
            old_runc_dir: old_runc.parent().map(Path::to_path_buf).unwrap_or_default(),
            crictl: get("GRAFT_CRICTL")?,
            helm: get("GRAFT_HELM")?,
            containerd_2: get("GRAFT_CONTAINERD_2")?,
            containerd_24: get("GRAFT_CONTAINERD_24")?,
            containerd_17: get("GRAFT_CONTAINERD_17")?,
            images: get("GRAFT_IMAGES")?,
            k8s: get("GRAFT_K8S")?,
            k8s_134: get("GRAFT_K8S_134")?,
        })
    }
}

/// The Helm chart as shipped (`deploy/helm/graft`).
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/graft")
}

impl Testbed {
    /// `helm template` of the chart as shipped, release `graft` in `graft-system`, with
    /// these arguments.
    pub fn render_chart(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = std::process::Command::new(&self.helm)
            .args(["template", "graft"])
            .arg(chart_dir())
            .args(["--namespace", "graft-system"])
            .args(args)
            .output()
            .context("running helm")?;
        if !out.status.success() {
            bail!(
                "helm template {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// A workspace binary (graft-nri, ...), built by `cargo build --workspace --bins`.
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    // Test and bench executables live in target/<profile>/deps; binaries one level up.
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let candidates = [
        dir.join(name),
        dir.parent()
            .map(|p| p.join("release").join(name))
            .unwrap_or_default(),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.clone());
        }
    }
    bail!(
        "{name} not found next to {} : run `cargo build --workspace --bins` first",
        exe.display()
    )
}

/// The static graft-hook (`hooks/build-static.sh`, run by the README's test command): the
/// only kind graft-driver installs.
pub fn static_hook() -> anyhow::Result<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let triple = text
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("rustc -vV names no host")?;
    // The profile of whatever runs this (a benchmark runs from target/release).
    let release_first = std::env::current_exe()
        .map(|e| e.components().any(|c| c.as_os_str() == "release"))
        .unwrap_or(false);
    let profiles = if release_first {
        ["release", "debug"]
    } else {
        ["debug", "release"]
    };
    for profile in profiles {
        let p = top
            .join("target")
            .join(triple)
            .join(profile)
            .join("graft-hook");
        if p.is_file() {
            return Ok(std::fs::canonicalize(&p).unwrap_or(p));
        }
    }
    bail!("the static graft-hook is not built: run `bash hooks/build-static.sh` first")
}

/// Runs `integration/testbed/<script>`, which builds a peer's binary into the testbed cache
/// if needed and prints its path last, and gives that path.
pub fn build_tool(script: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testbed")
        .join(script);
    let out = std::process::Command::new("bash")
        .arg(&path)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", path.display()))?;
    anyhow::ensure!(out.status.success(), "{script} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let built = text.lines().last().context("the build printed no path")?;
    Ok(PathBuf::from(built.trim()))
}
