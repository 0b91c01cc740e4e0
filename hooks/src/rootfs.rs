//! The container's root directory and id, from the OCI state the runtime writes on stdin.
//! The state and the bundle's config.json are written by the runtime, so they are trusted;
//! only what lies inside the root comes from the image.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};

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

pub fn from_state(input: impl Read) -> anyhow::Result<Container> {
    let mut text = Vec::new();
    input.take(MAX_STATE + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_STATE {
        bail!("OCI state is larger than {MAX_STATE} bytes");
    }
    let state: serde_json::Value =
        serde_json::from_slice(&text).context("OCI state is not JSON")?;
    let id = state.get("id").and_then(|i| i.as_str()).map(str::to_string);
    // Some runtimes put the root in the state; the bundle's config always has it.
    let state_root = state.get("root").and_then(|r| r.as_str());
    let Some(bundle) = state.get("bundle").and_then(|b| b.as_str()) else {
        let Some(root) = state_root else {
            bail!("OCI state has neither root nor bundle");
        };
        return Ok(Container {
            rootfs: PathBuf::from(root),
            id,
            ld_library_path: None,
        });
    };
    let bundle = PathBuf::from(bundle);
    let config_path = bundle.join("config.json");
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&config_path).with_context(|| format!("{}", config_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", config_path.display()))?;
    let ld_library_path = config
        .pointer("/process/env")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.strip_prefix("LD_LIBRARY_PATH="))
        .next_back()
        .map(str::to_string);
    let root = match (
        state_root,
        config.pointer("/root/path").and_then(|p| p.as_str()),
    ) {
        (Some(r), _) => PathBuf::from(r),
        (None, Some(r)) => bundle.join(r),
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
    fn an_endless_state_is_refused() {
        let endless = std::io::repeat(b' ');
        let err = from_state(endless).unwrap_err();
        assert!(format!("{err:#}").contains("larger"), "{err:#}");
    }
}
