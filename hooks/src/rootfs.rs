//! The container's root directory and id, from the OCI state the runtime writes on stdin.
//! The state and the bundle's config.json are written by the runtime, so they are trusted;
//! only what lies inside the root comes from the image.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use oci_spec::runtime::{Spec, State};
use serde::Deserialize;

/// Far more than any OCI state; only a guard against an endless stdin.
const MAX_STATE: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub rootfs: PathBuf,
    /// The state's `id` (the spec requires it; checked where it is used).
    pub id: Option<String>,
    /// The container process's `LD_LIBRARY_PATH` from the bundle's config, when it sets
    /// one: directories its loader searches before the system ones.
    pub ld_library_path: Option<String>,
}

/// The OCI state, with the root that some runtimes add to it.
#[derive(Deserialize)]
struct HookState {
    #[serde(flatten)]
    oci: State,
    #[serde(default)]
    root: Option<PathBuf>,
}

pub fn from_state(input: impl Read) -> anyhow::Result<Container> {
    let mut text = Vec::new();
    input.take(MAX_STATE + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_STATE {
        bail!("OCI state is larger than {MAX_STATE} bytes");
    }
    let state: HookState = serde_json::from_slice(&text).context("OCI state is not JSON")?;
    // Absent and empty are the same to the typed state.
    let id = Some(state.oci.id()).filter(|i| !i.is_empty()).cloned();
    // Some runtimes put the root in the state; the bundle's config always has it.
    let bundle = state.oci.bundle();
    if bundle.as_os_str().is_empty() {
        let Some(root) = state.root else {
            bail!("OCI state has neither root nor bundle");
        };
        return Ok(Container {
            rootfs: root,
            id,
            ld_library_path: None,
        });
    }
    let config_path = bundle.join("config.json");
    let config: Spec = serde_json::from_slice(
        &std::fs::read(&config_path).with_context(|| format!("{}", config_path.display()))?,
    )
    .with_context(|| format!("{} is not an OCI runtime spec", config_path.display()))?;
    let ld_library_path = config
        .process()
        .as_ref()
        .and_then(|p| p.env().as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| v.strip_prefix("LD_LIBRARY_PATH="))
        .next_back()
        .map(str::to_string);
    let root = match (state.root, config.root().as_ref()) {
        (Some(r), _) => r,
        (None, Some(r)) => bundle.join(r.path()),
        (None, None) => bail!("{} has no root.path", config_path.display()),
    };
    Ok(Container {
        rootfs: root,
        id,
        ld_library_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_from_the_bundle_relative_or_absolute() {
        let b = tempfile::tempdir().unwrap();
        std::fs::write(
            b.path().join("config.json"),
            r#"{"root":{"path":"rootfs"}}"#,
        )
        .unwrap();
        let state = format!(r#"{{"id":"c1","bundle":"{}"}}"#, b.path().display());
        let c = from_state(state.as_bytes()).unwrap();
        assert_eq!(c.rootfs, b.path().join("rootfs"));
        assert_eq!(c.id.as_deref(), Some("c1"));
        std::fs::write(
            b.path().join("config.json"),
            r#"{"root":{"path":"/abs/root"}}"#,
        )
        .unwrap();
        assert_eq!(
            from_state(state.as_bytes()).unwrap().rootfs,
            PathBuf::from("/abs/root")
        );
        let no_id = format!(r#"{{"bundle":"{}"}}"#, b.path().display());
        assert_eq!(from_state(no_id.as_bytes()).unwrap().id, None);
        assert!(from_state(&b"{}"[..]).is_err());
        assert!(from_state(&b"not json"[..]).is_err());
    }

    #[test]
    fn a_runtime_written_config_gives_root_and_the_last_ld_library_path() {
        let b = tempfile::tempdir().unwrap();
        std::fs::write(
            b.path().join("config.json"),
            r#"{"ociVersion":"1.2.0","root":{"path":"rootfs","readonly":true},
                "process":{"user":{"uid":0,"gid":0},"cwd":"/","args":["sh"],
                  "env":["PATH=/bin","LD_LIBRARY_PATH=/first","LD_LIBRARY_PATH=/opt/lib:/usr/lib"],
                  "capabilities":{"bounding":["CAP_CHOWN"],"effective":["CAP_CHOWN"]}},
                "linux":{"namespaces":[{"type":"mount"}]}}"#,
        )
        .unwrap();
        let state = format!(
            r#"{{"ociVersion":"1.2.0","id":"c2","status":"creating","pid":7,"bundle":"{}","annotations":{{"a":"b"}}}}"#,
            b.path().display()
        );
        let c = from_state(state.as_bytes()).unwrap();
        assert_eq!(c.rootfs, b.path().join("rootfs"));
        assert_eq!(c.ld_library_path.as_deref(), Some("/opt/lib:/usr/lib"));
        // A root in the state wins over the config's, and stands alone without a bundle.
        let with_root = format!(
            r#"{{"id":"c2","root":"/state/root","bundle":"{}"}}"#,
            b.path().display()
        );
        let c = from_state(with_root.as_bytes()).unwrap();
        assert_eq!(c.rootfs, PathBuf::from("/state/root"));
        assert_eq!(c.ld_library_path.as_deref(), Some("/opt/lib:/usr/lib"));
        let c = from_state(&br#"{"id":"c3","root":"/only/root"}"#[..]).unwrap();
        assert_eq!(c.rootfs, PathBuf::from("/only/root"));
        assert_eq!(c.ld_library_path, None);
    }

    #[test]
    fn an_endless_state_is_refused() {
        let endless = std::io::repeat(b' ');
        let err = from_state(endless).unwrap_err();
        assert!(format!("{err:#}").contains("larger"), "{err:#}");
    }
}
