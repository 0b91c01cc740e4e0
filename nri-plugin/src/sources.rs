//! The last look at served entries before a container gets them: a mount whose source is
//! an entry of a served directory ([`InjectionPolicy::is_served`]) must still be there and
//! be reached without a symlink ([`graft_record::nofollow`]). A symlink planted since
//! prepare, or an entry deleted from the host, refuses the container with the path and the
//! reason instead of mounting whatever the path leads to now. So is one whose directories
//! another account than root could write now (it could swap the entry after this look), or
//! a read-write one no longer below a directory closed to group and others.

use std::path::Path;

use graft_record::absent::AbsentCache;
use graft_record::nofollow::{
    is_driver_socket, open_served, open_socket, EntryError, DRIVER_SOCKETS,
};
use graft_record::InjectionPolicy;

use crate::inject::Plan;

/// Why a plan's sources do not pass the last look.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A served entry (or driver socket) is gone, or reached through a symlink, or open to
    /// change by others than root.
    #[error("the served entry for {destination} (claim {claims}) cannot be mounted: {source}")]
    NotServed {
        /// Where the container would see it.
        destination: String,
        /// The plan's claims, comma separated.
        claims: String,
        /// What is wrong with it.
        source: EntryError,
    },
    /// A device of the plan is gone from the node.
    #[error(
        "device {device} of claim {claim} is gone from the node (graft-driver no longer finds \
         it); the container would start without it"
    )]
    Absent {
        /// The record's device name.
        device: String,
        /// The claim that grants it.
        claim: String,
    },
}

/// Checks every served mount source of `plan`, as seen below `host_root`.
pub fn check_served(
    plan: &Plan,
    policy: &InjectionPolicy,
    host_root: &Path,
) -> Result<(), SourceError> {
    for m in &plan.edits.mounts {
        let checked = if is_driver_socket(&m.source) {
            check_driver_socket(host_root, &m.source)
        } else if policy.is_served(&m.source) {
            let rw = m.options.iter().any(|o| o == "rw");
            open_served(host_root, &m.source, rw).map(drop)
        } else {
            continue;
        };
        if let Err(e) = checked {
            let claims: Vec<String> = plan.grants.iter().map(|g| g.claim.clone()).collect();
            return Err(SourceError::NotServed {
                destination: m.destination.clone(),
                claims: claims.join(", "),
                source: e,
            });
        }
    }
    Ok(())
}

/// One of the NVIDIA driver's sockets, from the driver root the source names: still a
/// socket, reached with no symlink through directories only root can change. Where this
/// process does not see the socket's directory at all (a DaemonSet that mounts only the
/// served directories below its host root), it cannot look: graft-driver's look at
/// discovery stands, and that is logged.
fn check_driver_socket(host_root: &Path, source: &str) -> Result<(), EntryError> {
    let Some((driver, socket)) = DRIVER_SOCKETS
        .iter()
        .find_map(|s| source.strip_suffix(s).map(|d| (d, *s)))
    else {
        return Ok(());
    };
    let root = host_root.join(driver.trim_start_matches('/'));
    let dir = Path::new(socket.trim_start_matches('/'))
        .parent()
        .unwrap_or(Path::new(""));
    if let Err(e) = root.join(dir).symlink_metadata() {
        if e.kind() == std::io::ErrorKind::NotFound {
            tracing::debug!(
                source,
                "driver socket's directory not visible here; not checked"
            );
            return Ok(());
        }
    }
    open_socket(&root, socket).map(drop)
}

/// The absent-device list as last read: one `lstat` per container, a read only when
/// graft-driver has replaced the file (as `published` keeps the device snapshot).
static ABSENT: AbsentCache = AbsentCache::new();

/// Refuses a plan that needs a device graft-driver found gone from the node since its claim
/// was prepared (`graft_record::absent`, in the state directory `root`). An unreadable list
/// is logged and not held against the container: it only adds to what the records allow.
pub fn check_present(plan: &Plan, root: &Path) -> Result<(), SourceError> {
    let absent = match ABSENT.read(root) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "the list of absent devices is unreadable; not checked");
            return Ok(());
        }
    };
    for g in &plan.grants {
        if let Some(d) = g.devices.iter().find(|d| absent.contains(*d)) {
            return Err(SourceError::Absent {
                device: d.clone(),
                claim: g.claim.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::Grant;
    use graft_record::Mount;

    fn plan(source: &str) -> Plan {
        let mut p = Plan::default();
        p.edits.mounts.push(Mount {
            source: source.into(),
            destination: "/etc/app/licence".into(),
            kind: "bind".into(),
            options: vec!["bind".into(), "ro".into(), "nosuid".into(), "nodev".into()],
        });
        p.grants.push(Grant {
            claim: "default/lic".into(),
            uid: "u".into(),
            devices: vec!["seat-a".into()],
        });
        p
    }

    #[test]
    fn symlinks_and_missing_entries_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let lic = root.path().join("srv/lic");
        std::fs::create_dir_all(&lic).unwrap();
        std::fs::write(lic.join("seat-a"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", lic.join("seat-b")).unwrap();
        let policy = InjectionPolicy::for_node(
            Path::new("/var/lib/graft"),
            graft_record::policy::DEFAULT_HOOK_PATH,
            &[],
            &["/srv".into()],
        )
        .unwrap();
        check_served(&plan("/srv/lic/seat-a"), &policy, root.path()).unwrap();
        let err = check_served(&plan("/srv/lic/seat-b"), &policy, root.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/app/licence")
                && err.contains("default/lic")
                && err.contains("symlink"),
            "{err}"
        );
        let err = check_served(&plan("/srv/lic/gone"), &policy, root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("/srv/lic/gone"), "{err}");
        // Sources graft provides itself are not looked at here.
        check_served(&plan("/dev/not-here"), &policy, root.path()).unwrap();
    }

    #[test]
    fn a_driver_socket_swapped_for_a_symlink_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let drv = root.path().join("drv/run/nvidia-persistenced");
        std::fs::create_dir_all(&drv).unwrap();
        drop(std::os::unix::net::UnixListener::bind(drv.join("socket")).unwrap());
        let policy = InjectionPolicy::for_node(
            Path::new("/var/lib/graft"),
            graft_record::policy::DEFAULT_HOOK_PATH,
            &graft_record::policy::nvidia_mount_roots(Path::new("/drv")),
            &[],
        )
        .unwrap();
        let src = "/drv/run/nvidia-persistenced/socket";
        check_served(&plan(src), &policy, root.path()).unwrap();
        std::fs::remove_file(drv.join("socket")).unwrap();
        std::os::unix::fs::symlink("/run/containerd/containerd.sock", drv.join("socket")).unwrap();
        let err = check_served(&plan(src), &policy, root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("symlink"), "{err}");
        std::fs::remove_file(drv.join("socket")).unwrap();
        std::fs::write(drv.join("socket"), "").unwrap();
        let err = check_served(&plan(src), &policy, root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a socket"), "{err}");
        // The directory swapped for a symlink: refused too.
        std::fs::remove_dir_all(&drv).unwrap();
        std::os::unix::fs::symlink("/run/containerd", &drv).unwrap();
        let err = check_served(&plan(src), &policy, root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("symlink"), "{err}");
        // Not visible to this process at all (the DaemonSet mounts only served
        // directories): not checkable here; graft-driver's look at discovery stands.
        std::fs::remove_dir_all(root.path().join("drv")).unwrap();
        check_served(&plan(src), &policy, root.path()).unwrap();
    }

    #[test]
    fn a_device_gone_from_the_node_refuses_the_container() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Plan::default();
        p.grants.push(Grant {
            claim: "default/serial".into(),
            uid: "u1".into(),
            devices: vec!["serial-0".into()],
        });
        check_present(&p, dir.path()).unwrap();
        let absent = std::collections::BTreeSet::from(["serial-0".to_string()]);
        graft_record::absent::write_absent(dir.path(), &absent).unwrap();
        let e = check_present(&p, dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("device serial-0 of claim default/serial is gone"),
            "{e}"
        );
        // Unreadable: logged, not held against the container.
        std::fs::write(dir.path().join("absent-devices.json"), b"garbage").unwrap();
        check_present(&p, dir.path()).unwrap();
    }
}
