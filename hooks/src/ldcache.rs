//! update-ldcache: lists the injected library directories in the container's
//! `/etc/ld.so.conf.d` and rebuilds its `/etc/ld.so.cache` with the host's ldconfig.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

const CONF: &str = "etc/ld.so.conf.d/00-graft-nvidia.conf";

pub fn update(rootfs: &Path, ldconfig: &Path, folders: &[String]) -> anyhow::Result<()> {
    for f in folders {
        if !f.starts_with('/') || f.contains('\n') {
            bail!("--folder {f:?}: must be an absolute path");
        }
    }
    let conf_d = rootfs.join("etc/ld.so.conf.d");
    std::fs::create_dir_all(&conf_d).with_context(|| format!("creating {}", conf_d.display()))?;
    let main_conf = rootfs.join("etc/ld.so.conf");
    let include = "include /etc/ld.so.conf.d/*.conf";
    let current = std::fs::read_to_string(&main_conf).unwrap_or_default();
    if !current.lines().any(|l| l.trim() == include) {
        let mut text = format!("{include}\n");
        text.push_str(&current);
        std::fs::write(&main_conf, text).with_context(|| format!("{}", main_conf.display()))?;
    }
    let mut text = String::from("# Written by graft-hook: the NVIDIA driver's libraries.\n");
    for f in folders {
        text.push_str(f);
        text.push('\n');
    }
    let conf = rootfs.join(CONF);
    std::fs::write(&conf, text).with_context(|| format!("{}", conf.display()))?;
    // -r: ldconfig chroots into the container's root, so its cache describes the
    // container's files, not the host's.
    let out = Command::new(ldconfig)
        .arg("-r")
        .arg(rootfs)
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

    #[test]
    fn writes_the_conf_and_runs_ldconfig_in_the_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/ld.so.conf"), "/opt/lib\n").unwrap();
        // A stand-in ldconfig that records its arguments.
        let bin = tempfile::tempdir().unwrap();
        let fake = bin.path().join("ldconfig");
        let log = bin.path().join("args");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$@\" > {}\n", log.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        update(root.path(), &fake, &["/usr/lib/x86_64-linux-gnu".into()]).unwrap();
        let conf = std::fs::read_to_string(root.path().join(CONF)).unwrap();
        assert!(conf.contains("/usr/lib/x86_64-linux-gnu\n"));
        let main = std::fs::read_to_string(root.path().join("etc/ld.so.conf")).unwrap();
        assert!(main.starts_with("include /etc/ld.so.conf.d/*.conf\n/opt/lib"));
        let args = std::fs::read_to_string(&log).unwrap();
        assert_eq!(args.trim(), format!("-r {}", root.path().display()));
        assert!(update(root.path(), &fake, &["relative".into()]).is_err());
        let err = update(root.path(), Path::new("/nonexistent/ldconfig"), &[]).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/ldconfig"));
    }
}
