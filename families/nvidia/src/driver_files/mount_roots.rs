//! Driver files that graft's injection policy will not mount. With driver root `/` the
//! policy allows only the driver's usual host directories ([`NVIDIA_HOST_ROOTS`]) and the
//! node's `GRAFT_ALLOWED_MOUNT_ROOTS`; a driver installed elsewhere (`/opt/nvidia/lib`) is
//! still discovered, but every claim that would mount it is refused at prepare. One warning
//! per scan says so before a claim fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use graft_record::paths::is_under;
use graft_record::policy::NVIDIA_HOST_ROOTS;

use super::capabilities::Capability;
use super::files::DriverFiles;
use super::roots::Roots;

/// The variable (and `--allowed-mount-roots` flag) that adds mount roots, comma-separated.
pub const ALLOWED_ROOTS_ENV: &str = "GRAFT_ALLOWED_MOUNT_ROOTS";

/// The directories holding mount sources outside the allowed roots, each with the
/// capabilities that mount from it; a directory below another listed one is left out.
/// Empty when the driver root is not `/` (the policy then allows the whole driver root).
pub fn outside(
    roots: &Roots,
    files: &DriverFiles,
    extra_roots: &[String],
) -> BTreeMap<String, BTreeSet<Capability>> {
    if roots.driver != Path::new("/") {
        return BTreeMap::new();
    }
    let allowed = |p: &str| {
        NVIDIA_HOST_ROOTS.iter().any(|r| is_under(p, r))
            || extra_roots.iter().any(|r| is_under(p, r))
    };
    // Firmware and sockets go with every GPU claim: count them as compute.
    let always = files
        .firmware
        .iter()
        .chain(&files.sockets)
        .map(|p| (Capability::Compute, p.as_str()));
    let mounted = files
        .libraries
        .iter()
        .chain(&files.binaries)
        .chain(&files.configs)
        .map(|f| (f.capability, f.path.as_str()));
    let mut dirs: BTreeMap<String, BTreeSet<Capability>> = BTreeMap::new();
    for (cap, path) in always.chain(mounted) {
        if allowed(path) {
            continue;
        }
        let dir = Path::new(path)
            .parent()
            .and_then(Path::to_str)
            .unwrap_or(path);
        dirs.entry(dir.to_string()).or_default().insert(cap);
    }
    // `/opt/nvidia/lib` covers `/opt/nvidia/lib/vdpau`.
    let listed: Vec<String> = dirs.keys().cloned().collect();
    for d in &listed {
        if let Some(parent) = listed.iter().find(|p| *p != d && is_under(d, p)) {
            if let Some(caps) = dirs.remove(d) {
                dirs.entry(parent.clone()).or_default().extend(caps);
            }
        }
    }
    dirs
}

/// The extra roots this process was given through [`ALLOWED_ROOTS_ENV`] (graft-nri reads
/// the same variable); a root given only as a flag is not seen here.
pub fn extra_roots_from_env() -> Vec<String> {
    std::env::var(ALLOWED_ROOTS_ENV)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Logs one warning naming every directory `outside` finds, if any.
pub fn warn_outside(roots: &Roots, files: &DriverFiles, extra_roots: &[String]) {
    if let Some(w) = warning(&outside(roots, files, extra_roots)) {
        tracing::warn!("{w}");
    }
}

/// The warning for the directories [`outside`] found; `None` for none.
fn warning(dirs: &BTreeMap<String, BTreeSet<Capability>>) -> Option<String> {
    if dirs.is_empty() {
        return None;
    }
    let listed: Vec<String> = dirs
        .iter()
        .map(|(d, caps)| {
            let caps: Vec<&str> = caps.iter().map(|c| c.name()).collect();
            format!("{d} ({})", caps.join(", "))
        })
        .collect();
    let every_claim = dirs.values().flatten().any(|c| c.is_default());
    let who = if every_claim {
        "GPU claims"
    } else {
        "claims asking for those driver capabilities"
    };
    Some(format!(
        "NVIDIA driver files in {} are outside graft's allowed mount roots: {who} will be \
         refused until {ALLOWED_ROOTS_ENV} (of graft-driver and graft-nri) lists {}",
        listed.join(", "),
        if dirs.len() == 1 { "it" } else { "them" },
    ))
}

#[cfg(test)]
mod tests {
    use super::super::files::DriverFile;
    use super::*;

    fn file(capability: Capability, path: &str) -> DriverFile {
        DriverFile {
            capability,
            path: path.into(),
            destination: path.into(),
        }
    }

    fn files() -> DriverFiles {
        DriverFiles {
            libraries: vec![
                file(Capability::Compute, "/opt/nvidia/lib/libcuda.so.1.2"),
                file(
                    Capability::Video,
                    "/opt/nvidia/lib/vdpau/libvdpau_nvidia.so.1.2",
                ),
                file(Capability::Utility, "/usr/lib64/libnvidia-ml.so.1.2"),
            ],
            configs: vec![file(Capability::Graphics, "/srv/icd/nvidia_icd.json")],
            sockets: vec!["/run/nvidia-persistenced/socket".into()],
            ..Default::default()
        }
    }

    #[test]
    fn directories_outside_the_roots_with_their_capabilities() {
        let roots = Roots {
            host: "/".into(),
            driver: "/".into(),
        };
        let got = outside(&roots, &files(), &[]);
        assert_eq!(
            got,
            BTreeMap::from([
                (
                    "/opt/nvidia/lib".to_string(),
                    BTreeSet::from([Capability::Compute, Capability::Video])
                ),
                (
                    "/srv/icd".to_string(),
                    BTreeSet::from([Capability::Graphics])
                ),
            ])
        );
        assert_eq!(
            warning(&got).unwrap(),
            "NVIDIA driver files in /opt/nvidia/lib (compute, video), /srv/icd (graphics) are \
             outside graft's allowed mount roots: GPU claims will be refused until \
             GRAFT_ALLOWED_MOUNT_ROOTS (of graft-driver and graft-nri) lists them"
        );
        let got = outside(&roots, &files(), &["/opt/nvidia".into()]);
        assert!(warning(&got).unwrap().contains(
            "in /srv/icd (graphics) are outside graft's allowed mount roots: claims asking for \
             those driver capabilities will be refused until GRAFT_ALLOWED_MOUNT_ROOTS"
        ));
        assert_eq!(got.keys().collect::<Vec<_>>(), ["/srv/icd"]);
    }

    #[test]
    fn a_driver_container_root_is_allowed_whole() {
        let roots = Roots {
            host: "/".into(),
            driver: "/run/nvidia/driver".into(),
        };
        assert!(outside(&roots, &files(), &[]).is_empty());
    }
}
