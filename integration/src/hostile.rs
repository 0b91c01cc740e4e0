//! Tools for the tests that attack graft's trust boundary: decoy host directories whose every
//! byte is compared before and after, a preload library that leaves a marker when a process
//! loads it, and bare runc bundles for the control cases that show an attack path is real.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

/// Host directories an attack would write into, with known contents.
pub struct Decoy {
    /// The directory.
    pub dir: PathBuf,
}

impl Decoy {
    /// `dir/etc` (ld.so.conf, ld.so.conf.d/keep.conf, ld.so.cache), `dir/lib`
    /// (libkeep.so.1) and `dir/params`.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let files = [
            ("etc/ld.so.conf", "decoy ld.so.conf\n"),
            ("etc/ld.so.conf.d/keep.conf", "/decoy/lib\n"),
            ("etc/ld.so.cache", "decoy cache\n"),
            ("lib/libkeep.so.1", "decoy library\n"),
            ("params", "ModifyDeviceFiles: 1\n"),
        ];
        for (rel, text) in files {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().context("parent")?)?;
            std::fs::write(&p, text)?;
        }
        Ok(Decoy {
            dir: dir.to_path_buf(),
        })
    }

    /// Every entry below the decoy: type, mode, owner, and content hash or link target.
    pub fn snapshot(&self) -> anyhow::Result<BTreeMap<PathBuf, String>> {
        let mut out = BTreeMap::new();
        walk(&self.dir, &self.dir, &mut out)?;
        Ok(out)
    }

    /// Fails naming every entry that changed, appeared or vanished since `before`.
    pub fn assert_unchanged(
        &self,
        before: &BTreeMap<PathBuf, String>,
        case: &str,
    ) -> anyhow::Result<()> {
        let after = self.snapshot()?;
        if &after == before {
            return Ok(());
        }
        let mut diff = Vec::new();
        for (p, v) in &after {
            match before.get(p) {
                None => diff.push(format!("new {} ({v})", p.display())),
                Some(b) if b != v => diff.push(format!("changed {} ({b} -> {v})", p.display())),
                _ => {}
            }
        }
        for p in before.keys().filter(|p| !after.contains_key(*p)) {
            diff.push(format!("removed {}", p.display()));
        }
        bail!("case {case}: the decoy host directory changed: {diff:?}")
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        let m = std::fs::symlink_metadata(&p)?;
        let rel = p.strip_prefix(root)?.to_path_buf();
        let ft = m.file_type();
        let what = if ft.is_symlink() {
            format!("link:{}", std::fs::read_link(&p)?.display())
        } else if ft.is_dir() {
            walk(root, &p, out)?;
            "dir".to_string()
        } else if ft.is_file() {
            let data = std::fs::read(&p)?;
            format!("file:{:x}", Sha256::digest(&data))
        } else if ft.is_fifo() {
            "fifo".to_string()
        } else {
            "other".to_string()
        };
        out.insert(
            rel,
            format!("{what} mode={:o} uid={}", m.mode() & 0o7777, m.uid()),
        );
    }
    Ok(())
}

/// Compiles a shared library whose constructor appends a line to `marker` (a host path):
/// the proof that some process loaded it.
pub fn preload_library(out: &Path, marker: &Path) -> anyhow::Result<()> {
    let src = out.with_extension("c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void loaded(void) {{\n\
               FILE *f = fopen(\"{}\", \"a\");\n\
               if (f) {{ fputs(\"loaded by a hook\\n\", f); fclose(f); }}\n\
             }}\n",
            marker.display()
        ),
    )?;
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&src)
        .status()
        .context("running gcc")?;
    if !st.success() {
        bail!("gcc failed to build the preload library");
    }
    Ok(())
}

/// Runs `runc run` on a bundle whose root is `rootfs`, with the container environment
/// `env` and one createContainer hook (`hook_path` with `hook_args`, and `hook_env` unless
/// `None`, which leaves the runtime to choose). Returns runc's exit status and stderr.
pub fn runc_with_hook(
    runc: &Path,
    bundle: &Path,
    rootfs: &Path,
    env: &[&str],
    hook_path: &Path,
    hook_args: &[&str],
    hook_env: Option<&[&str]>,
) -> anyhow::Result<(bool, String)> {
    std::fs::create_dir_all(bundle)?;
    let mut hook = serde_json::json!({"path": hook_path, "args": hook_args});
    if let Some(e) = hook_env {
        hook["env"] = serde_json::json!(e);
    }
    let config = serde_json::json!({
        "ociVersion": "1.2.0",
        "process": {"terminal": false, "user": {"uid": 0, "gid": 0},
                    "args": ["/bin/true"], "env": env, "cwd": "/"},
        "root": {"path": rootfs, "readonly": false},
        "hostname": "hostile",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "hooks": {"createContainer": [hook]},
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"},
                                 {"type": "uts"}]}
    });
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&config)?,
    )?;
    let id = format!(
        "hostile-{}-{}",
        std::process::id(),
        bundle
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let out = Command::new(runc)
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(&id)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {}", runc.display()))?;
    let _ = Command::new(runc).args(["delete", "--force", &id]).output();
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
