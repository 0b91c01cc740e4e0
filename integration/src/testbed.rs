//! Where the testbed's components live.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Paths written by `integration/testbed/setup.sh` into `$GRAFT_CACHE/env`.
#[derive(Debug, Clone)]
pub struct Testbed {
    pub runc_dir: PathBuf,
    pub crictl: PathBuf,
    pub containerd_2: PathBuf,
    pub containerd_17: PathBuf,
    pub images: PathBuf,
    /// Kubernetes binaries and etcd.
    pub k8s: PathBuf,
}

impl Testbed {
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
        Ok(Testbed {
            runc_dir: runc.parent().map(Path::to_path_buf).unwrap_or_default(),
            crictl: get("GRAFT_CRICTL")?,
            containerd_2: get("GRAFT_CONTAINERD_2")?,
            containerd_17: get("GRAFT_CONTAINERD_17")?,
            images: get("GRAFT_IMAGES")?,
            k8s: get("GRAFT_K8S")?,
        })
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
