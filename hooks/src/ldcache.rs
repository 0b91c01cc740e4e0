//! The container's linker cache: the injected library directories listed in its
//! `/etc/ld.so.conf.d` (so an ldconfig run later inside the container keeps them), and its
//! `/etc/ld.so.cache` rebuilt, by graft-hook itself where it can ([`refresh`], see
//! `cache_build`) or by the host's ldconfig (`update-ldcache`, and the fallback).

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use graft_record::paths::is_clean_absolute;

use crate::cache_build::{self, Outcome};
use crate::inroot;

pub const CONF_DIR: &str = "/etc/ld.so.conf.d";
pub const CONF_NAME: &str = "00-graft-nvidia.conf";
pub const MAIN_CONF: &str = "/etc/ld.so.conf";
pub const INCLUDE: &str = "include /etc/ld.so.conf.d/*.conf";
/// ldconfig's whole environment: nothing of the container's or the runtime's.
pub const LDCONFIG_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

pub fn update(rootfs: &Path, ldconfig: &Path, folders: &[String]) -> anyhow::Result<()> {
    if !ldconfig.is_absolute() {
        bail!(
            "--ldconfig {}: must be an absolute host path",
            ldconfig.display()
        );
    }
    check_ldconfig(ldconfig)?;
    write_config(rootfs, folders)?;
    run_ldconfig(rootfs, ldconfig)
}

/// As [`update`], but the cache is merged by graft-hook without running ldconfig; ldconfig
/// runs only when the image's cache is one graft-hook does not merge. Returns that reason
/// when it ran.
pub fn refresh(
    rootfs: &Path,
    ldconfig: &Path,
    folders: &[String],
    copies: Option<&str>,
) -> anyhow::Result<Option<String>> {
    if !ldconfig.is_absolute() {
        bail!(
            "--ldconfig {}: must be an absolute host path",
            ldconfig.display()
        );
    }
    write_config(rootfs, folders)?;
    let root = inroot::open_root(rootfs)?;
    match cache_build::rebuild(&root, folders, copies)? {
        Outcome::Written { .. } => Ok(None),
        Outcome::Fallback(why) => {
            run_ldconfig(rootfs, ldconfig)?;
            Ok(Some(why))
        }
    }
}

/// ldconfig runs as root on the host: only a regular file that root owns and nobody else
/// may write is run. Checked on the file itself, not through a symlink (`O_NOFOLLOW`), by
/// `fstat` on the descriptor that names it.
pub fn check_ldconfig(ldconfig: &Path) -> anyhow::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    let at = ldconfig.display();
    let fd = rustix::fs::open(
        ldconfig,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("--ldconfig {at}: cannot open it"))?;
    let st = rustix::fs::fstat(&fd).with_context(|| format!("--ldconfig {at}: fstat"))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == FileType::Symlink {
        bail!("--ldconfig {at}: is a symlink, which graft-hook does not follow; name the file");
    }
    if kind != FileType::RegularFile {
        bail!("--ldconfig {at}: not a regular file; graft-hook runs only a regular ldconfig");
    }
    if st.st_uid != 0 {
        bail!(
            "--ldconfig {at}: owned by uid {}, not root; graft-hook runs it as root on the \
             host, so only a root-owned ldconfig is run",
            st.st_uid
        );
    }
    if st.st_mode & 0o022 != 0 {
        bail!(
            "--ldconfig {at}: mode {:o} lets group or others write it; graft-hook runs it as \
             root on the host, so it must be writable by root alone",
            st.st_mode & 0o7777
        );
    }
    Ok(())
}

/// The two configuration files, written inside the root.
pub fn write_config(rootfs: &Path, folders: &[String]) -> anyhow::Result<()> {
    for f in folders {
        // A newline would add a line of our choosing to the image's configuration.
        if !is_clean_absolute(f) || f.chars().any(char::is_control) {
            bail!("--folder {f:?}: must be a clean absolute path");
        }
    }
    let root = inroot::open_root(rootfs)?;
    let mut text = String::from("# Written by graft-hook: the NVIDIA driver's libraries.\n");
    for f in folders {
        text.push_str(f);
        text.push('\n');
    }
    let conf_d = inroot::mkdir_all(&root, CONF_DIR)?;
    inroot::write_atomic(conf_d.as_fd(), CONF_NAME, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {CONF_DIR}/{CONF_NAME} in the container"))?;

    // Read through the in-root resolution (a symlinked ld.so.conf is followed inside the
    // root), written back as a regular file in /etc.
    let current = inroot::read_regular(&root, MAIN_CONF, inroot::MAX_FILE)?.unwrap_or_default();
    let included = current
        .split(|&b| b == b'\n')
        .any(|l| l.trim_ascii() == INCLUDE.as_bytes());
    if !included {
        let mut new = format!("{INCLUDE}\n").into_bytes();
        new.extend_from_slice(&current);
        let etc = inroot::mkdir_all(&root, "/etc")?;
        inroot::write_atomic(etc.as_fd(), "ld.so.conf", &new, 0o644)
            .with_context(|| format!("writing {MAIN_CONF} in the container"))?;
    }
    Ok(())
}

/// `-r`: glibc's ldconfig chroots into the root, so its own file work (the cache, its
/// temporary file) stays inside, and its cache describes the container's files.
fn run_ldconfig(rootfs: &Path, ldconfig: &Path) -> anyhow::Result<()> {
    let out = Command::new(ldconfig)
        .arg("-r")
        .arg(rootfs)
        .env_clear()
        .env("PATH", LDCONFIG_PATH)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", ldconfig.display()))?;
    if !out.status.success() {
        bail!(
            "{} -r {} failed ({}): {}",
            ldconfig.display(),
            rootfs.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn writes_the_conf_and_runs_ldconfig_in_the_root_with_only_path() {
        if !crate::testutil::is_root() {
            eprintln!("skipped: needs root (graft-hook runs only a root-owned ldconfig)");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/ld.so.conf"), "/opt/lib").unwrap();
        let bin = tempfile::tempdir().unwrap();
        let args = bin.path().join("args");
        let env = bin.path().join("env");
        // The shell's initial environment, as exec'd (no variables of its own).
        let fake = script(
            bin.path(),
            "ldconfig",
            &format!(
                "for a in \"$@\"; do printf '%s\\n' \"$a\"; done > {}\n\
                 tr '\\0' '\\n' < /proc/$$/environ > {}",
                args.display(),
                env.display()
            ),
        );
        update(root.path(), &fake, &["/usr/lib/x86_64-linux-gnu".into()]).unwrap();
        let conf = std::fs::read_to_string(root.path().join("etc/ld.so.conf.d").join(CONF_NAME));
        assert!(conf.unwrap().contains("\n/usr/lib/x86_64-linux-gnu\n"));
        let main = std::fs::read_to_string(root.path().join("etc/ld.so.conf")).unwrap();
        assert_eq!(main, format!("{INCLUDE}\n/opt/lib"));
        let got = std::fs::read_to_string(&args).unwrap();
        assert_eq!(got, format!("-r\n{}\n", root.path().display()));
        let got = std::fs::read_to_string(&env).unwrap();
        assert_eq!(got, format!("PATH={LDCONFIG_PATH}\n"));
        // Already included: left as it is.
        update(root.path(), &fake, &[]).unwrap();
        let again = std::fs::read_to_string(root.path().join("etc/ld.so.conf")).unwrap();
        assert_eq!(again, main);
    }

    #[test]
    fn ldconfig_failures_are_reported() {
        if !crate::testutil::is_root() {
            eprintln!("skipped: needs root (graft-hook runs only a root-owned ldconfig)");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let failing = script(bin.path(), "ldconfig", "echo 'cache is broken' >&2; exit 3");
        let err = format!("{:#}", update(root.path(), &failing, &[]).unwrap_err());
        assert!(
            err.contains("cache is broken") && err.contains("exit status: 3"),
            "{err}"
        );
        let err = update(root.path(), Path::new("/nonexistent/ldconfig"), &[]).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/ldconfig"));
        assert!(update(root.path(), Path::new("ldconfig"), &[]).is_err());
    }

    #[test]
    fn bad_folders_are_refused_before_anything_is_written() {
        let root = tempfile::tempdir().unwrap();
        for bad in [
            "relative",
            "lib/x",
            "",
            "/usr/../etc",
            "/usr/./lib",
            "/../../etc",
            "/a//b",
            "/a\0b",
            "/a\ninclude /evil/*.conf",
        ] {
            let folders = ["/ok".to_string(), bad.to_string()];
            assert!(write_config(root.path(), &folders).is_err(), "{bad:?}");
        }
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
