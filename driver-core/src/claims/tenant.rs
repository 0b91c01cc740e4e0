//! What a claim's author is told when it fails: the text the kubelet puts on the pod's
//! Events and graft-driver on the claim's. It names only objects of the claim's own
//! namespace (its request and device names, which its own status shows; a claim of the same
//! namespace that holds the device) and no host path, tool output or claim of another
//! namespace: those stay in graft-driver's log on the node, which an operator reads.

use super::input::ClaimError;
use crate::claims::setup_port::SetupError;

/// Where the rest of a redacted error is.
const SEE_LOG: &str = "graft-driver's log on the node says why";

impl ClaimError {
    /// This error as the author of a claim in `namespace` may see it (the node's log keeps
    /// the full text): another namespace's claim is not named, and every absolute path is
    /// left out, whatever the error.
    pub fn for_tenant(&self, namespace: &str) -> String {
        let text = match self {
            ClaimError::AlreadyPrepared { device, holder, .. } => {
                format!(
                    "device {device} is already prepared for {}",
                    claim(holder, namespace)
                )
            }
            ClaimError::Setup { device, source } => {
                format!("device {device}: {}", setup(source, namespace))
            }
            ClaimError::SetupRefused { request, source } => {
                format!("request {request}: {}", setup(source, namespace))
            }
            _ => self.to_string(),
        };
        without_paths(&text)
    }
}

/// `holder` (`namespace/name`, maybe a ` (uid)` after it) as the author of a claim in
/// `namespace` may see it: named when it is of the same namespace.
fn claim(holder: &str, namespace: &str) -> String {
    match holder.split_once('/') {
        Some((ns, name)) if ns == namespace => {
            let name = name.split_once(' ').map_or(name, |(n, _)| n);
            format!("claim {ns}/{name}")
        }
        _ => "a claim of another namespace".into(),
    }
}

/// A device setup's failure as the author of a claim in `namespace` may see it.
fn setup(e: &SetupError, namespace: &str) -> String {
    match e {
        SetupError::FunctionHeld {
            function, holder, ..
        } => format!(
            "PCI function {function} is held by {}, and passthrough takes a GPU's whole IOMMU \
             group; retried until that claim is gone",
            claim(holder, namespace)
        ),
        // A family's error whose text may say anything about the node (a tool's output).
        SetupError::Family(f) => match f.withheld() {
            Some(told) => format!("{told} ({SEE_LOG})"),
            None => e.to_string(),
        },
        _ => e.to_string(),
    }
}

/// `text` with each absolute path (a word that starts with `/`) replaced by `<path>`; a
/// colon, full stop or comma that ends the word stays.
pub fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('/') {
        let starts_word = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "([{\"'=`".contains(c));
        if !starts_word {
            out.push_str(&rest[..=i]);
            rest = &rest[i + 1..];
            continue;
        }
        out.push_str(&rest[..i]);
        let word = &rest[i..];
        let end = word
            .find(|c: char| c.is_whitespace() || "\"'`)]},;".contains(c))
            .unwrap_or(word.len());
        let kept = word[..end].len() - word[..end].trim_end_matches([':', '.']).len();
        out.push_str("<path>");
        out.push_str(&word[end - kept..end]);
        rest = &word[end..];
    }
    out.push_str(rest);
    if out != text {
        out.push_str(&format!(" ({SEE_LOG})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::claims::seams::NotReady;
    use crate::error::DriverError;

    /// Another namespace's claim, host paths and tool output never reach the tenant's text;
    /// the device and request it asked for do.
    #[test]
    fn tenant_text_names_only_the_claims_own_objects() {
        let secret = [
            "other-ns",
            "their-claim",
            "uid-1234",
            "/var/lib",
            "/sys/",
            "/dev/",
        ];
        let cases = [
            ClaimError::AlreadyPrepared {
                device: "gpu-0".into(),
                holder: "other-ns/their-claim".into(),
                holder_uid: "uid-1234".into(),
            },
            ClaimError::Setup {
                device: "vfio-0000-01-00-0".into(),
                source: SetupError::FunctionHeld {
                    function: "0000:01:00.1".into(),
                    holder: "other-ns/their-claim (uid-1234)".into(),
                    holder_device: "gpu-1".into(),
                },
            },
            ClaimError::Setup {
                device: "gpu-0".into(),
                source: SetupError::Io {
                    op: "write".into(),
                    path: PathBuf::from("/sys/bus/pci/drivers/nvidia/unbind"),
                    source: std::io::Error::other("busy"),
                },
            },
            ClaimError::SetupRefused {
                request: "gpu".into(),
                source: SetupError::NotCharDevice {
                    path: PathBuf::from("/dev/vfio/7"),
                },
            },
            ClaimError::Setup {
                device: "licence-3".into(),
                source: SetupError::EntryChanged {
                    device: "licence-3".into(),
                    reason: "/var/lib/graft-files/licences/3 is now a symlink".into(),
                },
            },
            ClaimError::Local {
                claim: "mine/claim".into(),
                source: DriverError::Config {
                    path: PathBuf::from("/var/lib/graft/claims/x.json"),
                    reason: "read-only file system".into(),
                },
            },
            ClaimError::NriNotReady(NotReady::Status(
                "status file /var/lib/graft/nri.status: stale".into(),
            )),
        ];
        for e in &cases {
            let full = e.to_string();
            let told = e.for_tenant("mine");
            assert!(
                secret.iter().any(|s| full.contains(s)),
                "the case shows nothing: {full}"
            );
            for s in secret {
                assert!(!told.contains(s), "{s:?} in {told:?} (from {full:?})");
            }
        }
        assert_eq!(
            cases[0].for_tenant("mine"),
            "device gpu-0 is already prepared for a claim of another namespace"
        );
        assert!(cases[1]
            .for_tenant("mine")
            .contains("0000:01:00.1 is held by a claim of"));
        assert_eq!(
            cases[3].for_tenant("mine"),
            format!("request gpu: <path> is not a character device ({SEE_LOG})")
        );
        // The cause stays: the tenant can tell a full disk from a bug.
        assert!(cases[5]
            .for_tenant("mine")
            .contains("<path>: read-only file system"));
        // A holder of the claim's own namespace is named (without its uid).
        assert_eq!(
            cases[0].for_tenant("other-ns"),
            "device gpu-0 is already prepared for claim other-ns/their-claim"
        );
        assert!(cases[1]
            .for_tenant("other-ns")
            .contains("held by claim other-ns/their-claim, and"));
        // What is the tenant's own stays as it was.
        let own = ClaimError::CannotShare {
            request: "gpu".into(),
            device: "fuse-0".into(),
            sharing: crate::opaque::Applies {
                setting: "sharing",
                to: "full GPUs",
            },
        };
        assert_eq!(own.for_tenant("mine"), own.to_string());
        for (text, want) in [
            ("write /sys/x/unbind: busy", "write <path>: busy"),
            ("at \"/dev/vfio/7\".", "at \"<path>\"."),
            ("(/a/b, /c)", "(<path>, <path>)"),
            (
                "claim ns/name and graft.dev/fuse",
                "claim ns/name and graft.dev/fuse",
            ),
            ("/", "<path>"),
        ] {
            let got = without_paths(text);
            let got = got.strip_suffix(&format!(" ({SEE_LOG})")).unwrap_or(&got);
            assert_eq!(got, want, "{text}");
        }
    }
}
