//! The container's root directory, from the OCI state the runtime writes on stdin.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};

pub fn from_state(mut input: impl Read) -> anyhow::Result<PathBuf> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    let state: serde_json::Value = serde_json::from_str(&text).context("OCI state is not JSON")?;
    // Some runtimes put the root in the state; the bundle's config always has it.
    if let Some(root) = state.get("root").and_then(|r| r.as_str()) {
        return Ok(PathBuf::from(root));
    }
    let Some(bundle) = state.get("bundle").and_then(|b| b.as_str()) else {
        bail!("OCI state has neither root nor bundle");
    };
    let bundle = PathBuf::from(bundle);
    let config_path = bundle.join("config.json");
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&config_path).with_context(|| format!("{}", config_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", config_path.display()))?;
    let Some(root) = config.pointer("/root/path").and_then(|p| p.as_str()) else {
        bail!("{} has no root.path", config_path.display());
    };
    Ok(bundle.join(root))
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
        let state = format!(r#"{{"id":"c","bundle":"{}"}}"#, b.path().display());
        assert_eq!(
            from_state(state.as_bytes()).unwrap(),
            b.path().join("rootfs")
        );
        std::fs::write(
            b.path().join("config.json"),
            r#"{"root":{"path":"/abs/root"}}"#,
        )
        .unwrap();
        assert_eq!(
            from_state(state.as_bytes()).unwrap(),
            PathBuf::from("/abs/root")
        );
        assert!(from_state(&b"{}"[..]).is_err());
        assert!(from_state(&b"not json"[..]).is_err());
    }
}
