//! A tenancy's limits under MPS v3 (NVIDIA's MPS guide from release 615 on, "MPS v3
//! Interface" and "Common Tasks"): each UID that connects is served by a server of its own,
//! `uid_<uid>`, beside the others, so pods of several UIDs in one namespace no longer take
//! turns. v3 names no defaults for servers made later, so graft-mps lists the servers on
//! every pass and sets the tenancy's limits (`server set NAME --active-thread-percentage=..
//! --pinned-memory-limit=..`, on the server's default namespace) on each one it has not
//! set yet, and on all of them when the limits change or at the resync.
//!
//! `server list` is the daemon's answer, and a tenant can make servers through the control
//! socket: names are checked (the guide's charset, 64 characters) and at most
//! [`MAX_SERVERS`] are handled a pass.

use std::collections::BTreeSet;
use std::time::Duration;

use super::daemon::{control_args, until_ready, DaemonError};
use super::protocol::Protocol;

/// Servers handled in one pass: a namespace's UIDs, with room.
pub const MAX_SERVERS: usize = 64;

/// A server as `server list --format=csv,noheader` gives it: (name, pid).
fn servers(listed: &str) -> Result<Vec<(String, String)>, DaemonError> {
    let mut out = Vec::new();
    for line in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut cols = line.split(',');
        let (Some(name), Some(_uid), Some(pid)) = (cols.next(), cols.next(), cols.next()) else {
            return Err(DaemonError::Answer(line.chars().take(200).collect()));
        };
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid || pid.parse::<u32>().is_err() {
            return Err(DaemonError::Answer(line.chars().take(200).collect()));
        }
        out.push((name.to_string(), pid.to_string()));
        if out.len() == MAX_SERVERS {
            tracing::warn!(
                max = MAX_SERVERS,
                "more MPS v3 servers than graft-mps sets limits on in one pass"
            );
            break;
        }
    }
    Ok(out)
}

/// Sets the tenancy's limits on the daemon's servers: on those not in `done` (name and
/// pid: a server made again is new), or on all of them when `all`. `done` is left holding
/// the servers running now that have the limits.
pub fn apply_limits(
    pid: i32,
    compute: u32,
    memory_mib: Option<u64>,
    ready_within: Duration,
    done: &mut BTreeSet<String>,
    all: bool,
) -> Result<(), DaemonError> {
    let list = ["server", "list", "--format=csv,noheader"];
    let listed = until_ready(pid, Protocol::V3, ready_within, || control_args(pid, &list))?;
    let running = servers(&listed)?;
    let atp = format!("--active-thread-percentage={compute}");
    let pinned = memory_mib.map(|m| format!("--pinned-memory-limit={m}M"));
    let mut now = BTreeSet::new();
    for (name, server_pid) in running {
        let key = format!("{name}/{server_pid}");
        if all || !done.contains(&key) {
            let mut args = vec!["server", "set", name.as_str(), atp.as_str()];
            args.extend(pinned.as_deref());
            control_args(pid, &args)?;
            tracing::info!(server = %name, pid = %server_pid, compute, memory_mib, "MPS v3 server limits set");
        }
        now.insert(key);
    }
    *done = now;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_gives_names_and_pids() {
        let got = servers("uid_0,0,41,Ready,/tmp/nvidia-mps/uid_0,GPU-1,-\n\nuid_1000,1000,42,Starting,/tmp/nvidia-mps/uid_1000,GPU-1,-\n").unwrap();
        assert_eq!(
            got,
            vec![
                ("uid_0".to_string(), "41".to_string()),
                ("uid_1000".to_string(), "42".to_string())
            ]
        );
        assert!(servers("").unwrap().is_empty());
    }

    #[test]
    fn a_name_or_line_out_of_form_is_refused() {
        for bad in [
            "uid_0",
            "../x,0,41,Ready",
            "Uid,0,41,Ready",
            "uid_0,0,x41,Ready",
            &format!("{},0,41,Ready", "a".repeat(65)),
            "uid 0,0,41,Ready",
        ] {
            assert!(servers(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn at_most_max_servers_a_pass() {
        let many: String = (0..100)
            .map(|i| format!("uid_{i},{i},{},Ready,/p,GPU,-\n", 1000 + i))
            .collect();
        assert_eq!(servers(&many).unwrap().len(), MAX_SERVERS);
    }
}
