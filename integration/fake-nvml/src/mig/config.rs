//! The MIG configuration: the text file `fake-nvml-mig` next to the library (as the
//! `fake-nvml-events` feed), read again on every call so that a test may change it while
//! the library is loaded. One setting a line; blank lines and `#` comments are skipped,
//! and a later line overrides an earlier one:
//!
//! ```text
//! model h100-80gb|a100-40gb   the GPUs' model (default h100-80gb)
//! mig <index> on|off          MIG mode of GPU <index> (0..=7); default on for 6 and 7 only
//! state <path>                where the GPU and compute instances persist, shared by every
//!                             process that loads a library configured so; a relative path
//!                             is taken from the configuration file's directory
//! ```
//!
//! The model sets what NVML reports of the GPUs (name, memory, architecture, compute
//! capability, PCI device id, attributes) and their MIG profiles; the rest of the fake node
//! (sysfs, the fake nvidia-smi) stays an H100's. A GPU whose MIG mode is off shows no
//! instances, but keeps those it had: they are back when its mode is on again.
//!
//! Without the file, or without a `state` line, instances live in this process's memory.
//! Any other line is an error: every MIG call then fails with `NVML_ERROR_UNKNOWN` (calls
//! that are not about MIG go on as the default model), and the reason goes to stderr once.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::*;

use super::profiles::{Model, H100_80GB, MODELS};
use crate::{beside_library, UNKNOWN};

pub(crate) const FILE_NAME: &str = "fake-nvml-mig";

#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) model: &'static Model,
    pub(crate) mig: [bool; 8],
    pub(crate) state: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        let mut mig = [false; 8];
        mig[6] = true;
        mig[7] = true;
        Config {
            model: &H100_80GB,
            mig,
            state: None,
        }
    }
}

/// A line that does not parse, in any of the fake's text files (this configuration, the
/// MIG state, persistence modes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {number}: cannot parse {text:?}")]
pub(crate) struct BadLine {
    /// Its number, from 1.
    pub(crate) number: usize,
    /// The line, its comment and surrounding blanks left out.
    pub(crate) text: String,
}

impl BadLine {
    /// Line `index` (from 0), its comment already cut off.
    pub(crate) fn at(index: usize, line: &str) -> Self {
        BadLine {
            number: index + 1,
            text: line.trim().to_string(),
        }
    }
}

/// Parses the file's text; relative state paths are taken from `dir`.
pub(crate) fn parse(text: &str, dir: &Path) -> Result<Config, BadLine> {
    let mut config = Config::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || BadLine::at(n, line);
        match words.as_slice() {
            [] => {}
            ["model", key] => {
                config.model = MODELS.into_iter().find(|m| m.key == *key).ok_or_else(bad)?;
            }
            ["mig", index, mode] => {
                let slot = index
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| config.mig.get_mut(i))
                    .ok_or_else(bad)?;
                *slot = match *mode {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad()),
                };
            }
            ["state", path] => config.state = Some(dir.join(path)),
            _ => return Err(bad()),
        }
    }
    Ok(config)
}

/// Prints `message` to stderr unless this process already did.
pub(crate) fn report(message: String) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let Ok(mut seen) = SEEN.lock() else {
        return;
    };
    if seen
        .get_or_insert_with(HashSet::new)
        .insert(message.clone())
    {
        eprintln!("fake NVML: {message}");
    }
}

/// The configuration now; an absent file (or a library whose path the loader cannot give)
/// is the default, an unreadable or malformed one an error, reported once.
pub(crate) fn load() -> Result<Config, nvmlReturn_t> {
    let Some(path) = beside_library(FILE_NAME) else {
        return Ok(Config::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(e) => {
            report(format!("{}: {e}", path.display()));
            return Err(UNKNOWN);
        }
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    parse(&text, dir).map_err(|e| {
        report(format!("{}: {e}", path.display()));
        UNKNOWN
    })
}

/// The GPUs' model for the calls that are not about MIG, which keep working (as the
/// default model) when the configuration is broken; MIG calls report it.
pub(crate) fn model() -> &'static Model {
    load().map_or(&H100_80GB, |c| c.model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::profiles::A100_40GB;

    #[test]
    fn lines() {
        let dir = Path::new("/lib");
        let c = parse("", dir).unwrap();
        assert_eq!(c.model.key, "h100-80gb");
        assert_eq!(
            c.mig,
            [false, false, false, false, false, false, true, true]
        );
        assert_eq!(c.state, None);

        let text = "# a comment\n\n model a100-40gb \nmig 5 on # why\nmig 7 off\nstate s/mig\n";
        let c = parse(text, dir).unwrap();
        assert_eq!(c.model.key, A100_40GB.key);
        assert_eq!(
            c.mig,
            [false, false, false, false, false, true, true, false]
        );
        assert_eq!(c.state.as_deref(), Some(Path::new("/lib/s/mig")));
        let c = parse("state /run/x\n", dir).unwrap();
        assert_eq!(c.state.as_deref(), Some(Path::new("/run/x")));

        for bad in [
            "model h200",
            "model",
            "mig 8 on",
            "mig -1 on",
            "mig 5 yes",
            "mig 5",
            "state",
            "state a b",
            "migs 5 on",
        ] {
            let e = parse(&format!("mig 6 on\n{bad}\n"), dir)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("line 2: "), "{bad:?}: {e}");
        }
    }
}
