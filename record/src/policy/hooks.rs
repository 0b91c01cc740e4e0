//! The one hook a record may carry: graft-hook at its installed path, run at
//! createContainer with a fixed environment, and given exactly the arguments graft-driver
//! emits. graft-hook runs as root on the host, so each argument it would act on there is
//! pinned: `--ldconfig` is the node's ldconfig, `--params-copy` the state directory's
//! params path, `--driver-dir` the prepared directory's fixed place in the container,
//! `--driver-file` a path a mount could replace; and the flags that name a host root or host file (`--rootfs`,
//! `--host-params`) are never accepted.

use std::path::Path;

use super::mounts::check_destination;
use super::InjectionPolicy;
use crate::driver_dir;
use crate::error::InvalidRecord;
use crate::format::{Hook, HookStage};
use crate::paths::{is_clean_absolute, is_under};

/// `argv[0]` of every hook graft emits.
pub const HOOK_NAME: &str = "graft-hook";
/// The whole environment of every hook graft emits. Explicit, so that no runtime passes the
/// container's own environment (`LD_PRELOAD`...) to a process that runs as root on the host.
pub const HOOK_ENV: &[&str] = &["PATH=/usr/sbin:/usr/bin:/sbin:/bin"];
/// The subcommands graft-hook has.
pub const HOOK_SUBCOMMANDS: &[&str] = &[
    "nvidia-container",
    "create-symlinks",
    "update-ldcache",
    "disable-device-node-modification",
];
/// Longest hook timeout accepted, in seconds.
pub const MAX_HOOK_TIMEOUT_S: i64 = 60;
/// The ldconfig graft-driver runs when none is configured, first found wins, each below the
/// driver root first (`{root}`), then on the host. Ubuntu's `/sbin/ldconfig` is a shell
/// wrapper around `ldconfig.real`.
pub const LDCONFIG_CANDIDATES: &[&str] = &[
    "{root}/sbin/ldconfig.real",
    "{root}/sbin/ldconfig",
    "/sbin/ldconfig.real",
    "/sbin/ldconfig",
];

/// What each value of a flag must be.
#[derive(Clone, Copy)]
enum Value {
    /// `TARGET::LINK`: a link inside the container to a file name or relative target.
    Link,
    /// A clean absolute path inside the container.
    InContainer,
    /// The node's ldconfig.
    Ldconfig,
    /// The state directory's params path.
    ParamsCopy,
    /// A driver version: letters, digits, dots, dashes.
    Version,
    /// Where the driver's prepared directory is in the container (`driver_dir`).
    DriverDir,
    /// A driver file's usual path, which graft-hook links to its copy: a path a mount
    /// could have as its destination, outside the prepared directory.
    DriverFile,
}

/// The flags graft-driver emits per subcommand, each with whether it may repeat.
fn flags(subcommand: &str) -> &'static [(&'static str, Value, bool)] {
    const LINK: (&str, Value, bool) = ("--link", Value::Link, true);
    const FOLDER: (&str, Value, bool) = ("--folder", Value::InContainer, true);
    const LDCONFIG: (&str, Value, bool) = ("--ldconfig", Value::Ldconfig, false);
    const PARAMS: (&str, Value, bool) = ("--params-copy", Value::ParamsCopy, false);
    match subcommand {
        "nvidia-container" => &[
            LINK,
            FOLDER,
            LDCONFIG,
            PARAMS,
            ("--driver-version", Value::Version, false),
            ("--driver-dir", Value::DriverDir, false),
            ("--driver-file", Value::DriverFile, true),
        ],
        "create-symlinks" => &[LINK],
        "update-ldcache" => &[LDCONFIG, FOLDER],
        "disable-device-node-modification" => &[PARAMS],
        _ => &[],
    }
}

/// The ldconfig graft-driver picks when none is configured: the first of
/// [`LDCONFIG_CANDIDATES`] that `is_file` says exists (host paths; the caller looks where
/// it sees the host), else `/sbin/ldconfig`. graft-nri picks the same way, so both agree.
pub fn default_ldconfig(driver_root: &Path, is_file: impl Fn(&Path) -> bool) -> String {
    let root = driver_root.to_string_lossy();
    let root = root.trim_end_matches('/');
    LDCONFIG_CANDIDATES
        .iter()
        .map(|c| c.replace("{root}", root))
        .find(|p| is_file(Path::new(p)))
        .unwrap_or_else(|| "/sbin/ldconfig".into())
}

pub(super) fn check(p: &InjectionPolicy, f: &str, h: &Hook) -> Result<(), InvalidRecord> {
    let bad = |field: String, reason: String| Err(InvalidRecord { field, reason });
    if h.path != p.hook_path {
        return bad(
            format!("{f}.path"),
            format!(
                "hook {:?} is not graft-hook at its installed path {:?}",
                h.path, p.hook_path
            ),
        );
    }
    if h.args.first().map(String::as_str) != Some(HOOK_NAME) {
        return bad(
            format!("{f}.args"),
            format!("argv[0] must be {HOOK_NAME:?}"),
        );
    }
    match h.args.get(1) {
        Some(cmd) if HOOK_SUBCOMMANDS.contains(&cmd.as_str()) => {
            check_args(p, &format!("{f}.args"), cmd, &h.args[2..])?
        }
        other => {
            return bad(
                format!("{f}.args"),
                format!("subcommand {other:?} is not one of {HOOK_SUBCOMMANDS:?}"),
            )
        }
    }
    if h.env
        .iter()
        .map(String::as_str)
        .ne(HOOK_ENV.iter().copied())
    {
        return bad(
            format!("{f}.env"),
            format!("hook environment must be exactly {HOOK_ENV:?}"),
        );
    }
    if h.stage != HookStage::CreateContainer {
        return bad(
            format!("{f}.stage"),
            format!("stage {:?}: graft-hook runs at createContainer", h.stage),
        );
    }
    match h.timeout {
        Some(t) if (1..=MAX_HOOK_TIMEOUT_S).contains(&t) => Ok(()),
        other => bad(
            format!("{f}.timeout"),
            format!("timeout {other:?} must be 1 to {MAX_HOOK_TIMEOUT_S} seconds"),
        ),
    }
}

/// `--flag VALUE` pairs only (no `--flag=value`, no global flags, nothing positional), each
/// flag one the subcommand's records carry, each value of its kind.
fn check_args(
    p: &InjectionPolicy,
    f: &str,
    subcommand: &str,
    args: &[String],
) -> Result<(), InvalidRecord> {
    let known = flags(subcommand);
    let mut seen: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let err = |reason: String| InvalidRecord {
            field: f.to_string(),
            reason: format!("graft-hook {subcommand}: {reason}"),
        };
        let Some(&(name, kind, repeats)) = known.iter().find(|(n, _, _)| n == flag) else {
            let names: Vec<&str> = known.iter().map(|(n, _, _)| *n).collect();
            return Err(err(format!(
                "argument {flag:?} is not one graft-driver gives it (only {names:?})"
            )));
        };
        if !repeats && seen.contains(&name) {
            return Err(err(format!("{name} given twice")));
        }
        seen.push(name);
        let Some(value) = it.next() else {
            return Err(err(format!("{name} has no value")));
        };
        check_value(p, kind, value).map_err(|r| err(format!("{name} {value:?}: {r}")))?;
    }
    Ok(())
}

/// Why a flag's value is refused; the message follows "graft-hook SUBCOMMAND: FLAG VALUE: ".
#[derive(Debug, thiserror::Error)]
enum BadValue {
    #[error("empty, starts with '-' or holds a control character")]
    Malformed,
    #[error("is not TARGET::LINK")]
    NotALink,
    #[error("needs a target without '..' and a clean absolute link")]
    BadLink,
    #[error("is not a clean absolute path")]
    Unclean,
    #[error("no ldconfig is configured on this node")]
    NoLdconfig,
    #[error("is not the node's ldconfig {0:?}")]
    NotTheLdconfig(String),
    #[error("is not one of the node's ldconfigs {0:?}")]
    NotAnLdconfig(Vec<String>),
    #[error("is not graft's params path {0:?}")]
    NotTheParamsCopy(String),
    #[error("is not a driver version")]
    NotAVersion,
    #[error("is not {0:?}, where the driver's prepared directory is")]
    NotTheDriverDir(&'static str),
    #[error("is not a path graft-hook may link: {0}")]
    BadDriverFile(String),
}

fn check_value(p: &InjectionPolicy, kind: Value, v: &str) -> Result<(), BadValue> {
    if v.is_empty() || v.starts_with('-') || v.chars().any(char::is_control) {
        return Err(BadValue::Malformed);
    }
    match kind {
        Value::Link => {
            let (target, link) = v.split_once("::").ok_or(BadValue::NotALink)?;
            let target_ok = !target.is_empty()
                && target.split('/').all(|c| c != "..")
                && !target.contains("::");
            if !target_ok || !is_clean_absolute(link) {
                return Err(BadValue::BadLink);
            }
            Ok(())
        }
        Value::InContainer => is_clean_absolute(v).then_some(()).ok_or(BadValue::Unclean),
        Value::Ldconfig => match p.ldconfigs.as_slice() {
            [] => Err(BadValue::NoLdconfig),
            l if l.iter().any(|l| l == v) => Ok(()),
            [one] => Err(BadValue::NotTheLdconfig(one.clone())),
            l => Err(BadValue::NotAnLdconfig(l.to_vec())),
        },
        Value::ParamsCopy => {
            let want = p.params_copy();
            (v == want)
                .then_some(())
                .ok_or(BadValue::NotTheParamsCopy(want))
        }
        Value::DriverDir => (v == driver_dir::IN_CONTAINER)
            .then_some(())
            .ok_or(BadValue::NotTheDriverDir(driver_dir::IN_CONTAINER)),
        Value::DriverFile => {
            check_destination(v).map_err(|e| BadValue::BadDriverFile(e.to_string()))?;
            if is_under(v, driver_dir::IN_CONTAINER) || is_under(driver_dir::IN_CONTAINER, v) {
                return Err(BadValue::BadDriverFile(
                    "it is, or holds, the prepared directory".into(),
                ));
            }
            Ok(())
        }
        Value::Version => (v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
        .then_some(())
        .ok_or(BadValue::NotAVersion),
    }
}
