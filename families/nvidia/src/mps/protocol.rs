//! The MPS control daemon's protocol, a leaf the daemon, its sandbox and graft-mps share.

/// The control daemon's protocol (NVIDIA's MPS guide: `-p`/`--protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// The legacy protocol (v2), every driver's and the default: one server at a time,
    /// clients of another UID wait until its clients are done.
    #[default]
    Legacy,
    /// MPS v3 (documented from release 615 on): a server per UID (`uid_<uid>`), side by
    /// side, and limits set per server.
    V3,
}

impl Protocol {
    /// `2` or `3`, as `-p` takes it.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "2" => Some(Protocol::Legacy),
            "3" => Some(Protocol::V3),
            _ => None,
        }
    }

    /// The daemon's arguments besides `-f`.
    pub fn daemon_args(self) -> &'static [&'static str] {
        match self {
            Protocol::Legacy => &[],
            Protocol::V3 => &["-p", "3"],
        }
    }

    /// What to add when a daemon of this protocol exits as it starts.
    pub(super) fn exit_hint(self) -> &'static str {
        match self {
            Protocol::Legacy => "",
            Protocol::V3 => {
                " (MPS v3, -p 3, needs driver 615 or later: see the daemon's log, or run \
                 graft-mps with --mps-protocol 2)"
            }
        }
    }
}
