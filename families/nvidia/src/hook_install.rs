//! Installs graft-hook at the host path the NVIDIA edits name, where the container runtime
//! runs it as root for every GPU container.
//!
//! On every start: the source must be a static executable (no ELF interpreter, so no
//! `LD_PRELOAD` or library search path can reach it); the directory must be root's alone
//! (every ancestor owned by root and not writable by others unless sticky, the directory
//! itself 0700), in the host's view as well as the container's: the runtime resolves the
//! path on the host, where the directory's ancestors are the host's, not the container
//! image's; the installed file is replaced atomically (temp file, fsync, rename) only
//! when its SHA-256 differs, is mode 0500, and is read back and checked after installing.

use std::fs::{self, DirBuilder};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use object::elf::{PT_INTERP, PT_LOAD};
use object::read::elf::{ElfFile64, ProgramHeader};
use sha2::{Digest, Sha256};

/// Mode of the installed hook: read and execute, root only.
pub const HOOK_MODE: u32 = 0o500;
/// Mode of the directory that holds it.
pub const DIR_MODE: u32 = 0o700;

/// Why graft-hook could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file or directory could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// The step.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The atomic replacement (temporary file, fsync, rename, directory fsync) failed.
    #[error("installing graft-hook: {0}")]
    Write(#[source] graft_record::RecordError),
    /// The binary to install is not a static executable, so it could not run in every
    /// container.
    #[error("graft-hook {path} is not a static executable: {reason}")]
    NotStatic {
        /// The binary.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The install path, or a directory above it, is not safe to run from as root.
    #[error("{path} is not a safe place for graft-hook: {reason}")]
    UnsafeLocation {
        /// The path found unsafe.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The installed file is not the one that was written.
    #[error("graft-hook at {path} has sha256 {found} after installing, expected {expected}")]
    Mismatch {
        /// The installed file.
        path: PathBuf,
        /// Its digest.
        found: String,
        /// The digest of the one written.
        expected: String,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// What [`install`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Where graft-hook is.
    pub path: PathBuf,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Whether the file was (re)written; false when the installed one already matched.
    pub changed: bool,
}

/// Installs `source` at `dest` (see the module documentation). `dest` is a host path,
/// written through the same path in this container (the state directory's mount);
/// `host_root` is where the host's root is visible here (`/`: this is the host's view).
pub fn install(source: &Path, dest: &Path, host_root: &Path) -> Result<Installed, InstallError> {
    let data = fs::read(source).map_err(io("read", source))?;
    check_static(source, &data)?;
    let sha256 = hex(&Sha256::digest(&data));
    let dir = dest.parent().ok_or_else(|| InstallError::UnsafeLocation {
        path: dest.to_path_buf(),
        reason: "no parent directory".into(),
    })?;
    prepare_dir(dir)?;
    check_host_view(dir, host_root)?;

    match fs::symlink_metadata(dest) {
        Ok(m) if !m.file_type().is_file() => {
            return Err(InstallError::UnsafeLocation {
                path: dest.to_path_buf(),
                reason: "exists and is not a regular file".into(),
            })
        }
        Ok(m) => {
            let current = fs::read(dest).map_err(io("read", dest))?;
            if hex(&Sha256::digest(&current)) == sha256 && m.uid() == euid() {
                if m.mode() & 0o7777 != HOOK_MODE {
                    fs::set_permissions(dest, fs::Permissions::from_mode(HOOK_MODE))
                        .map_err(io("chmod", dest))?;
                }
                return Ok(Installed {
                    path: dest.to_path_buf(),
                    sha256,
                    changed: false,
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("stat", dest)(e)),
    }

    graft_record::atomic::write_file_mode(dest, &data, HOOK_MODE).map_err(InstallError::Write)?;
    let found = hex(&Sha256::digest(fs::read(dest).map_err(io("read", dest))?));
    if found != sha256 {
        return Err(InstallError::Mismatch {
            path: dest.to_path_buf(),
            found,
            expected: sha256,
        });
    }
    Ok(Installed {
        path: dest.to_path_buf(),
        sha256,
        changed: true,
    })
}

/// A 64-bit ELF executable with loadable segments and no interpreter.
pub fn check_static(path: &Path, data: &[u8]) -> Result<(), InstallError> {
    let not = |reason: String| InstallError::NotStatic {
        path: path.to_path_buf(),
        reason,
    };
    let elf = ElfFile64::<object::Endianness>::parse(data)
        .map_err(|e| not(format!("not a 64-bit ELF file ({e})")))?;
    let endian = elf.endian();
    let mut loads = 0;
    for ph in elf.elf_program_headers() {
        match ph.p_type(endian) {
            PT_INTERP => {
                let interp = ph
                    .data(endian, data)
                    .ok()
                    .map(|d| {
                        String::from_utf8_lossy(d)
                            .trim_end_matches('\0')
                            .to_string()
                    })
                    .unwrap_or_default();
                return Err(not(format!(
                    "it is dynamically linked (interpreter {interp}); graft runs only a \
                     static graft-hook as root"
                )));
            }
            PT_LOAD => loads += 1,
            _ => {}
        }
    }
    if loads == 0 {
        return Err(not("it has no loadable segments".into()));
    }
    Ok(())
}

/// Creates `dir` 0700 if needed, makes it 0700, and checks that neither it nor an ancestor
/// can be replaced or written by anyone but root.
fn prepare_dir(dir: &Path) -> Result<(), InstallError> {
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(io("mkdir", dir))?;
    }
    let m = fs::symlink_metadata(dir).map_err(io("stat", dir))?;
    if m.file_type().is_dir() && m.uid() == euid() && m.mode() & 0o7777 != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(io("chmod", dir))?;
    }
    check_ancestors(dir.ancestors())
}

/// The host's view of `dir` (below `host_root`) is the directory written here, and its
/// ancestors on the host are as safe as [`prepare_dir`] requires of the container's. The
/// host root itself is configuration, not checked.
fn check_host_view(dir: &Path, host_root: &Path) -> Result<(), InstallError> {
    if host_root == Path::new("/") {
        return Ok(());
    }
    let on_host = |a: &Path| host_root.join(a.strip_prefix("/").unwrap_or(a));
    let host_dir = on_host(dir);
    let here = fs::symlink_metadata(dir).map_err(io("stat", dir))?;
    let there = fs::symlink_metadata(&host_dir).map_err(io("stat", &host_dir))?;
    if (here.dev(), here.ino()) != (there.dev(), there.ino()) {
        return Err(InstallError::UnsafeLocation {
            path: host_dir,
            reason: format!(
                "not the directory {} that graft-driver writes (the host's view differs)",
                dir.display()
            ),
        });
    }
    let below_root: Vec<PathBuf> = dir
        .ancestors()
        .filter(|a| *a != Path::new("/") && !a.as_os_str().is_empty())
        .map(on_host)
        .collect();
    check_ancestors(below_root.iter().map(PathBuf::as_path))
}

/// Each of `dirs` is a directory (not a symlink) owned by root and not writable by group or
/// others unless sticky.
fn check_ancestors<'a>(dirs: impl Iterator<Item = &'a Path>) -> Result<(), InstallError> {
    for a in dirs {
        let m = fs::symlink_metadata(a).map_err(io("stat", a))?;
        let unsafe_because = if !m.file_type().is_dir() {
            Some("not a directory (a symlink?)".to_string())
        } else if m.uid() != 0 && m.uid() != euid() {
            Some(format!("owned by uid {}", m.uid()))
        } else if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            Some(format!("writable by others (mode {:o})", m.mode() & 0o7777))
        } else {
            None
        };
        if let Some(reason) = unsafe_because {
            return Err(InstallError::UnsafeLocation {
                path: a.to_path_buf(),
                reason,
            });
        }
    }
    Ok(())
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary itself is dynamically linked; /bin/busybox (busybox-static) is not.
    #[test]
    fn only_static_executables_are_accepted() {
        let me = std::env::current_exe().unwrap();
        let e = check_static(&me, &fs::read(&me).unwrap()).unwrap_err();
        assert!(e.to_string().contains("dynamically linked"), "{e}");
        let e = check_static(Path::new("x"), b"#!/bin/sh\nexit 0\n").unwrap_err();
        assert!(e.to_string().contains("not a 64-bit ELF"), "{e}");
        if Path::new("/bin/busybox").is_file() {
            check_static(
                Path::new("/bin/busybox"),
                &fs::read("/bin/busybox").unwrap(),
            )
            .unwrap();
        }
    }

    #[test]
    fn installs_atomically_verifies_and_keeps_a_matching_copy() {
        let Ok(busybox) = fs::read("/bin/busybox") else {
            eprintln!("skipped: no /bin/busybox (busybox-static) to stand in for graft-hook");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("graft-hook");
        fs::write(&src, &busybox).unwrap();
        let dest = d.path().join("state/bin/graft-hook");
        let first = install(&src, &dest, Path::new("/")).unwrap();
        assert!(first.changed);
        assert_eq!(first.sha256.len(), 64);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dest), HOOK_MODE);
        assert_eq!(mode(dest.parent().unwrap()), DIR_MODE);
        assert!(!install(&src, &dest, Path::new("/")).unwrap().changed);

        // A tampered copy is replaced; so is a wrong mode.
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(&dest, b"tampered").unwrap();
        let again = install(&src, &dest, Path::new("/")).unwrap();
        assert!(again.changed);
        assert_eq!(fs::read(&dest).unwrap(), busybox);
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o755)).unwrap();
        install(&src, &dest, Path::new("/")).unwrap();
        assert_eq!(mode(&dest), HOOK_MODE);

        // Unsafe places are refused: a world-writable directory, a symlink at the name.
        let open = d.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = install(&src, &open.join("bin/graft-hook"), Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("writable by others"), "{e}");
        fs::remove_file(&dest).unwrap();
        std::os::unix::fs::symlink("/bin/sh", &dest).unwrap();
        let e = install(&src, &dest, Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    /// The runtime resolves the hook path on the host: an ancestor that is safe in this
    /// container's view (its image's /var/lib) but writable by others on the host is refused,
    /// naming the host's path; so is a host view that is not the directory written here.
    /// Views that differ take a bind mount: a private mount namespace of this test's thread.
    #[test]
    fn ancestors_are_checked_in_the_hosts_view() {
        let Ok(busybox) = fs::read("/bin/busybox") else {
            eprintln!("skipped: no /bin/busybox (busybox-static) to stand in for graft-hook");
            return;
        };
        std::thread::spawn(move || {
            use nix::mount::{mount, umount, MsFlags};
            use nix::sched::{unshare, CloneFlags};
            if unshare(CloneFlags::CLONE_NEWNS).is_err()
                || mount(
                    None::<&str>,
                    "/",
                    None::<&str>,
                    MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                    None::<&str>,
                )
                .is_err()
            {
                eprintln!("skipped: cannot make a private mount namespace (not root?)");
                return;
            }
            let d = tempfile::tempdir().unwrap();
            let src = d.path().join("graft-hook");
            fs::write(&src, &busybox).unwrap();
            // This container's view: d/ctr/graft/bin, every ancestor safe.
            let ctr_state = d.path().join("ctr/graft");
            fs::create_dir_all(&ctr_state).unwrap();
            let dest = ctr_state.join("bin/graft-hook");
            // The host's: the same directory, below a parent others can write.
            let host_root = d.path().join("host");
            let on_host = |p: &Path| host_root.join(p.strip_prefix("/").unwrap());
            let host_state = on_host(&ctr_state);
            fs::create_dir_all(&host_state).unwrap();
            let open = host_state.parent().unwrap().to_path_buf();
            fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
            mount(
                Some(&host_state),
                &ctr_state,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .unwrap();

            // The container's view alone (the old check) sees nothing wrong.
            install(&src, &dest, Path::new("/")).unwrap();
            let e = install(&src, &dest, &host_root).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("{} is not a safe place", open.display()))
                    && e.to_string().contains("writable by others"),
                "{e}"
            );
            fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
            assert!(!install(&src, &dest, &host_root).unwrap().changed);

            // A host view that is another directory: refused, not checked in its place.
            umount(&ctr_state).unwrap();
            let e = install(&src, &dest, &host_root).unwrap_err();
            assert!(e.to_string().contains("the host's view differs"), "{e}");
        })
        .join()
        .unwrap();
    }
}
