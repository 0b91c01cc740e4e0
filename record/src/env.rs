//! The one rule set for environment variables graft puts into containers, used by
//! graft-driver (records, opaque claim configuration, the device list), graft-nri (records
//! before they are applied) and graft-hook.
//!
//! Two levels:
//! - [`check_env`]: what any record may carry. The name is printable ASCII without `=`,
//!   the value has no NUL, both within size limits, and the name is none of the variables
//!   that steer the dynamic loader or the C library of a process ([`LOADER_VARIABLES`],
//!   every name starting with one of [`LOADER_PREFIXES`]) nor `PATH`. graft never sets them, and on runc versions whose
//!   createContainer hooks inherit the container's environment they would reach a process
//!   that runs as root on the host.
//! - [`check_user_env`]: what opaque configuration (a claim's or a class's) may add on top:
//!   additionally none of the variables graft owns ([`GRAFT_OWNED_PREFIXES`],
//!   [`GRAFT_OWNED_NAMES`]).

use crate::error::InvalidRecord;

/// Longest variable name accepted.
pub const MAX_NAME_LEN: usize = 256;
/// Longest value accepted.
pub const MAX_VALUE_LEN: usize = 32 * 1024;

/// Variables glibc removes from the environment of privileged (setuid) programs because
/// they change what the program loads or reads, plus `PATH` and `GLIBC_TUNABLES` (which
/// sets every tunable of the loader and the allocator at once). Names with one of
/// [`LOADER_PREFIXES`] are refused as well (see [`is_loader_variable`]).
pub const LOADER_VARIABLES: &[&str] = &[
    "PATH",
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// Prefixes of loader and allocator variables: `LD_*` (the dynamic loader) and `MALLOC_*`
/// (glibc's allocator tunables by their environment aliases, `MALLOC_CHECK_`,
/// `MALLOC_PERTURB_`, `MALLOC_ARENA_MAX` and the rest, and `MALLOC_TRACE`).
pub const LOADER_PREFIXES: &[&str] = &["LD_", "MALLOC_"];

/// Name prefixes graft owns: the NVIDIA container stack reads `NVIDIA_*` (graft sets
/// `NVIDIA_VISIBLE_DEVICES=void` so that no other injector acts), `CUDA_MPS_*` carries
/// per-client MPS limits, `GRAFT_*` is graft's own.
pub const GRAFT_OWNED_PREFIXES: &[&str] = &["NVIDIA_", "CUDA_MPS_", "GRAFT_"];
/// Single names graft owns.
pub const GRAFT_OWNED_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES"];

/// Whether `name` steers the dynamic loader or the C library ([`LOADER_VARIABLES`] or a
/// name with one of [`LOADER_PREFIXES`]).
pub fn is_loader_variable(name: &str) -> bool {
    LOADER_PREFIXES.iter().any(|p| name.starts_with(p)) || LOADER_VARIABLES.contains(&name)
}

/// Whether `name` is one graft sets itself and configuration may not.
pub fn is_graft_owned(name: &str) -> bool {
    GRAFT_OWNED_NAMES.contains(&name) || GRAFT_OWNED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Syntax and size of a name and value, and the loader rule: what any record may carry.
/// `field` names the variable; errors name `<field>.name` or `<field>.value`.
pub fn check_env(field: &str, name: &str, value: &str) -> Result<(), InvalidRecord> {
    let bad = |reason: String| InvalidRecord {
        field: format!("{field}.name"),
        reason,
    };
    let bad_value = |reason: String| InvalidRecord {
        field: format!("{field}.value"),
        reason,
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(bad(format!(
            "environment variable name {name:?} must be 1 to {MAX_NAME_LEN} characters"
        )));
    }
    // Printable ASCII without '=', the rule Kubernetes applies to container env names.
    if let Some(c) = name.chars().find(|c| !c.is_ascii_graphic() || *c == '=') {
        return Err(bad(format!(
            "environment variable name {name:?} contains {c:?} (printable ASCII without '=' only)"
        )));
    }
    if is_loader_variable(name) {
        return Err(bad(format!(
            "environment variable {name} is not allowed: graft never sets PATH or variables \
             that steer the dynamic loader or the C library (LD_*, MALLOC_*, GLIBC_TUNABLES, \
             GCONV_PATH, ...)"
        )));
    }
    if value.contains('\0') {
        return Err(bad_value(format!("value of {name} contains NUL")));
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(bad_value(format!(
            "value of {name} is {} bytes, more than {MAX_VALUE_LEN}",
            value.len()
        )));
    }
    Ok(())
}

/// [`check_env`] plus the variables graft owns: what opaque configuration may set.
pub fn check_user_env(field: &str, name: &str, value: &str) -> Result<(), InvalidRecord> {
    check_env(field, name, value)?;
    if is_graft_owned(name) {
        return Err(InvalidRecord {
            field: format!("{field}.name"),
            reason: format!(
                "environment variable {name} is owned by graft and cannot be set by \
                 configuration (reserved: {}, {})",
                GRAFT_OWNED_PREFIXES
                    .iter()
                    .map(|p| format!("{p}*"))
                    .collect::<Vec<_>>()
                    .join(", "),
                GRAFT_OWNED_NAMES.join(", ")
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_variables_and_path_are_refused_everywhere() {
        for n in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "LD_",
            "PATH",
            "GCONV_PATH",
            "GLIBC_TUNABLES",
            "MALLOC_CHECK_",
            "MALLOC_TOP_PAD_",
            "MALLOC_PERTURB_",
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
            "MALLOC_MMAP_MAX_",
            "MALLOC_ARENA_MAX",
            "MALLOC_ARENA_TEST",
            "MALLOC_TCACHE_COUNT",
            "MALLOC_TRACE",
        ] {
            let e = check_env("env", n, "x").unwrap_err();
            assert!(e.reason.contains(n), "{e}");
        }
        assert!(check_env("env", "LDAP_URI", "x").is_ok());
        assert!(check_env("env", "MY_PATH", "x").is_ok());
        assert!(check_env("env", "MY_MALLOC_ARENA_MAX", "x").is_ok());
        assert!(check_env("env", "GLIBC_TUNABLES_X", "x").is_ok());
    }

    #[test]
    fn syntax_and_sizes() {
        assert!(check_env("env", "", "x").is_err());
        assert!(check_env("env", "A=B", "x").is_err());
        assert!(check_env("env", "A B", "x").is_err());
        assert!(check_env("env", "Ä", "x").is_err());
        assert!(check_env("env", "A", "a\0b").is_err());
        assert!(check_env("env", &"A".repeat(MAX_NAME_LEN + 1), "x").is_err());
        assert!(check_env("env", "A", &"x".repeat(MAX_VALUE_LEN + 1)).is_err());
        assert!(check_env("env", "my.var-1", "any value = fine").is_ok());
    }

    #[test]
    fn graft_owned_names_are_refused_only_to_configuration() {
        for n in [
            "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_DRIVER_CAPABILITIES",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_MPS_PIPE_DIRECTORY",
            "GRAFT_X",
        ] {
            assert!(check_env("env", n, "void").is_ok(), "{n}");
            let e = check_user_env("env", n, "void").unwrap_err();
            assert!(e.reason.contains("owned by graft"), "{e}");
        }
        assert!(check_user_env("env", "FOO", "bar").is_ok());
        assert!(check_user_env("env", "LD_PRELOAD", "x").is_err());
    }
}
