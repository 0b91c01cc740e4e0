//! Every way start-up fails: each ends `run` with an error naming what failed, told on the
//! Node first when it is one an operator fixes there, and nothing of start-up done after it.

use super::*;

/// A way start-up fails, and how it must end.
struct Failure {
    /// Flags, as [`Fixture::args`] takes them.
    flags: &'static [&'static str],
    /// What the one family (`char`) does.
    script: Script,
    /// No client configuration.
    no_client: bool,
    /// The kubelet plugin cannot be served.
    plugin_fails: bool,
    /// What the error says, in its chain.
    error: &'static [&'static str],
    /// The Event posted on the Node before the process ends, by reason.
    told: Option<&'static str>,
    /// The last thing start-up did (before telling); `None`: nothing.
    last: Option<&'static str>,
}

const FINE: Failure = Failure {
    flags: &[],
    script: Script {
        open: None,
        before_scan: None,
        start: None,
        ldconfig: None,
        restart_when_up: false,
    },
    no_client: false,
    plugin_fails: false,
    error: &[],
    told: None,
    last: None,
};

/// A kubelet directory too deep for a socket path.
const DEEP: &str = "@kubelet/a-directory-name-long-enough-that-no-socket-name-below-it-fits-in-the-kernels-limit-of-108-bytes";

const FAILURES: &[Failure] = &[
    Failure {
        flags: &["--driver-name", "Not_A.Name!"],
        error: &[r#"--driver-name "Not_A.Name!": "#],
        ..FINE
    },
    Failure {
        flags: &["--metrics-addr", "not-an-address"],
        error: &[r#"metrics address "not-an-address""#],
        ..FINE
    },
    Failure {
        flags: &["--boot-id-path", "@no_boot_id"],
        error: &["read ", "no_boot_id"],
        last: Some("probes served"),
        ..FINE
    },
    // Nothing to tell the Node with.
    Failure {
        no_client: true,
        error: &["no Kubernetes client configuration"],
        last: Some("client"),
        ..FINE
    },
    Failure {
        script: Script {
            open: Some(Fault::DevicesToml),
            ..FINE.script
        },
        error: &["device config /etc/graft/devices.toml: devices[0]: no path"],
        told: Some("DeviceConfigInvalid"),
        last: Some("open char"),
        ..FINE
    },
    Failure {
        script: Script {
            open: Some(Fault::Other),
            ..FINE.script
        },
        error: &["loading NVML: library not found"],
        last: Some("open char"),
        ..FINE
    },
    Failure {
        script: Script {
            ldconfig: Some("sbin/ldconfig"),
            ..FINE.script
        },
        error: &[
            "the injection policy (--nvidia-hook-path, --allowed-mount-roots, --nvidia-ldconfig)",
            "sbin/ldconfig",
        ],
        last: Some("injection char"),
        ..FINE
    },
    Failure {
        script: Script {
            before_scan: Some(Fault::HookInstall),
            ..FINE.script
        },
        error: &["installing graft-hook: read-only file system"],
        told: Some("HookInstallFailed"),
        last: Some("before_scan char (checkpoint not settled)"),
        ..FINE
    },
    Failure {
        script: Script {
            before_scan: Some(Fault::Other),
            ..FINE.script
        },
        error: &["loading NVML: library not found"],
        last: Some("before_scan char (checkpoint not settled)"),
        ..FINE
    },
    Failure {
        flags: &["--deadline-margin-seconds", "45"],
        error: &["--deadline-margin-seconds 45: must be below the kubelet's 45 s"],
        last: Some("route char"),
        ..FINE
    },
    Failure {
        script: Script {
            start: Some(Fault::Other),
            ..FINE.script
        },
        error: &["loading NVML: library not found"],
        last: Some("start char"),
        ..FINE
    },
    Failure {
        flags: &["--kubelet-dir", DEEP],
        error: &["plugin socket ", "use a shorter kubelet directory"],
        last: Some("task writeback-check"),
        ..FINE
    },
    // Once the tasks are stopped.
    Failure {
        plugin_fails: true,
        error: &["plugin socket dra.sock: address in use"],
        last: Some("plugin serving"),
        ..FINE
    },
];

#[tokio::test]
async fn every_failure_ends_start_up_naming_what_failed_told_first() {
    for (i, case) in FAILURES.iter().enumerate() {
        let mut f = Fixture::new().scripted("char", case.script);
        f.world.no_client = case.no_client;
        f.world.plugin_fails = case.plugin_fails;
        let signal = std::future::pending();
        let err = match f.run(case.flags, signal).await {
            Ok(()) => panic!("case {i}: start-up went on"),
            Err(e) => format!("{e:#}"),
        };
        for want in case.error {
            assert!(err.contains(want), "case {i}: {err:?} lacks {want:?}");
        }
        let mut trail = f.world.trail.lines();
        let told: Vec<String> = trail
            .iter()
            .filter(|l| l.starts_with("told "))
            .cloned()
            .collect();
        match case.told {
            Some(reason) => {
                assert_eq!(told, [format!("told {reason}")], "case {i}");
                assert_eq!(trail.pop(), Some(format!("told {reason}")), "case {i}");
            }
            None => assert!(told.is_empty(), "case {i}: {told:?}"),
        }
        assert_eq!(
            trail.last().map(String::as_str),
            case.last,
            "case {i}: {trail:?}"
        );
    }
}
