//! The clone install_as_documented runs the docs' commands in, and its release build.
//!
//! The clone is a fixed folder in the testbed's cache (`install-clone/graft`, its target
//! directory `install-clone/target`), brought to the
//! work tree's files before each use: a file whose bytes are the same is left alone, mtime
//! included, so cargo finds what it built last time still fresh (its fingerprints compare
//! source mtimes with their outputs'), and only a changed crate, or what depends on one, is
//! compiled again. test-all.sh starts `warm_the_release_build` beside the tiers, at the
//! lowest priority: it runs the docs' `release.sh` line in the clone, so that when
//! install_as_documented runs the same line the release is already built. Whoever uses
//! the clone holds its lock (`install-clone.lock`) throughout.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use graft_integration::cluster::run;
use graft_integration::Testbed;
use nix::fcntl::{Flock, FlockArg};

/// release.sh's target directory (GRAFT_RELEASE_TARGET_DIR) for the clone: its own, since
/// cargo takes outputs newer than their sources as fresh, and another tree built there
/// with the same layout would pass for the clone's.
pub fn target_dir() -> PathBuf {
    Testbed::cache_dir().join("install-clone/target")
}

/// The clone, held: dropped, the lock goes.
pub struct Clone {
    pub dir: PathBuf,
    _lock: Flock<File>,
}

impl Clone {
    /// Waits for the clone's lock, then brings the clone to `top`'s files (tracked, and new
    /// ones not ignored: what a clone of this work tree would hold).
    pub fn take(top: &Path) -> anyhow::Result<Clone> {
        let cache = Testbed::cache_dir();
        std::fs::create_dir_all(&cache)?;
        let lock_path = cache.join("install-clone.lock");
        let file = File::create(&lock_path).with_context(|| format!("{}", lock_path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .with_context(|| format!("locking {}", lock_path.display()))?;
        let dir = cache.join("install-clone/graft");
        sync_tree(top, &dir)?;
        Ok(Clone { dir, _lock: lock })
    }
}

/// The files a clone of `top` would hold, relative to it.
fn tree_files(top: &Path) -> anyhow::Result<BTreeSet<PathBuf>> {
    let files = run(Command::new("git").current_dir(top).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]))?;
    Ok(files
        .split('\0')
        .filter(|f| !f.is_empty() && top.join(f).is_file()) // not deleted in the work tree
        .map(PathBuf::from)
        .collect())
}

/// Makes `to` hold exactly `top`'s tree files (`dist/`, release.sh's output, apart):
/// copies a file only when its bytes differ, and removes what the tree no longer has.
pub fn sync_tree(top: &Path, to: &Path) -> anyhow::Result<()> {
    let files = tree_files(top)?;
    for f in &files {
        let (src, dst) = (top.join(f), to.join(f));
        let same = match (std::fs::read(&src), std::fs::read(&dst)) {
            (Ok(a), Ok(b)) => a == b,
            (Err(e), _) => return Err(e).with_context(|| format!("reading {}", src.display())),
            _ => false,
        };
        if same {
            continue;
        }
        std::fs::create_dir_all(dst.parent().context("parent")?)?;
        // A fresh file, so that the new mtime tells cargo it changed.
        let _ = std::fs::remove_file(&dst);
        std::fs::copy(&src, &dst).with_context(|| format!("copying {}", f.display()))?;
    }
    remove_others(to, to, &files)
}

/// Removes the files below `dir` that are not in `keep` (relative to `root`), and the
/// folders that leaves empty; `dist/` is release.sh's and stays.
fn remove_others(root: &Path, dir: &Path, keep: &BTreeSet<PathBuf>) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let e = e?;
        let path = e.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        if rel == Path::new("dist") {
            continue;
        }
        if e.file_type()?.is_dir() {
            remove_others(root, &path, keep)?;
            if std::fs::read_dir(&path)?.next().is_none() {
                std::fs::remove_dir(&path)?;
            }
        } else if !keep.contains(&rel) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

#[test]
fn the_clone_holds_the_tree_and_keeps_unchanged_files() -> anyhow::Result<()> {
    let d = tempfile::tempdir()?;
    let (top, to) = (d.path().join("top"), d.path().join("to"));
    std::fs::create_dir_all(top.join("src"))?;
    run(Command::new("git").arg("init").arg("-q").arg(&top))?;
    std::fs::write(top.join("src/a.rs"), "a")?;
    std::fs::write(top.join("b.md"), "b")?;
    std::fs::write(top.join(".gitignore"), "ignored\n")?;
    std::fs::write(top.join("ignored"), "x")?;
    sync_tree(&top, &to)?;
    assert_eq!(std::fs::read_to_string(to.join("src/a.rs"))?, "a");
    assert!(!to.join("ignored").exists());
    let before = std::fs::metadata(to.join("src/a.rs"))?.modified()?;
    std::fs::create_dir_all(to.join("dist"))?;
    std::fs::write(to.join("dist/x.tgz"), "chart")?;
    std::fs::write(to.join("stale.rs"), "gone from the tree")?;
    std::fs::write(top.join("b.md"), "b2")?;
    std::thread::sleep(std::time::Duration::from_millis(20));
    sync_tree(&top, &to)?;
    assert_eq!(std::fs::metadata(to.join("src/a.rs"))?.modified()?, before);
    assert_eq!(std::fs::read_to_string(to.join("b.md"))?, "b2");
    assert!(!to.join("stale.rs").exists());
    assert!(to.join("dist/x.tgz").exists());
    Ok(())
}
