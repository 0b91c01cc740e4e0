//! NRI event masks, and which events a given runtime understands.

use graft_proto::nri::Event;

/// A set of NRI events; bit `event - 1` is set for each member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventMask(pub u32);

impl EventMask {
    /// The set of `events`.
    pub fn of(events: &[Event]) -> Self {
        EventMask(events.iter().fold(0, |m, e| m | bit(*e)))
    }

    /// Whether `e` is a member.
    pub fn contains(self, e: Event) -> bool {
        self.0 & bit(e) != 0
    }

    /// Whether there are no members.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events in both sets.
    pub fn intersect(self, other: EventMask) -> EventMask {
        EventMask(self.0 & other.0)
    }
}

fn bit(e: Event) -> u32 {
    match e as i32 {
        n @ 1..=31 => 1 << (n - 1),
        _ => 0,
    }
}

/// Events of NRI before v0.10 (containerd 1.7.x, 2.0.x, 2.1.x): up to REMOVE_CONTAINER.
pub const VALID_BEFORE_NRI_0_10: EventMask = EventMask(0x7FF);
/// Events of NRI v0.10 and later (containerd 2.2+): up to VALIDATE_CONTAINER_ADJUSTMENT.
pub const VALID_FROM_NRI_0_10: EventMask = EventMask(0x3FFF);

/// The events a runtime accepts in a Configure reply. A bit it does not know makes it drop
/// the plugin, so anything not positively recognised as new enough gets the old set.
pub fn valid_events(runtime_name: &str, runtime_version: &str, nri_version: &str) -> EventMask {
    // Only NRI v0.12+ reports its own version, and all of those are past v0.10.
    if !nri_version.is_empty() {
        return VALID_FROM_NRI_0_10;
    }
    // containerd 2.0.0-2.0.3 report "v2" as their name; both are old enough for 0x7FF.
    if runtime_name != "containerd" {
        return VALID_BEFORE_NRI_0_10;
    }
    match parse_version(runtime_version) {
        Some((major, minor)) if (major, minor) >= (2, 2) => VALID_FROM_NRI_0_10,
        _ => VALID_BEFORE_NRI_0_10,
    }
}

/// `v1.7.24`, `1.7.24~ds1-6`, `2.2.7+unknown` -> (major, minor).
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let v = v.trim().trim_start_matches('v');
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_event_minus_one() {
        assert_eq!(EventMask::of(&[Event::RUN_POD_SANDBOX]).0, 0x1);
        assert_eq!(EventMask::of(&[Event::CREATE_CONTAINER]).0, 0x8);
        assert_eq!(EventMask::of(&[Event::REMOVE_CONTAINER]).0, 0x400);
        assert_eq!(
            EventMask::of(&[Event::VALIDATE_CONTAINER_ADJUSTMENT]).0,
            0x2000
        );
        assert_eq!(EventMask::of(&[Event::UNKNOWN]).0, 0);
    }

    #[test]
    fn runtime_versions_gate_the_mask() {
        let cases = [
            ("containerd", "v1.7.24", "", VALID_BEFORE_NRI_0_10),
            ("containerd", "1.7.24~ds1", "", VALID_BEFORE_NRI_0_10),
            ("v2", "v2.0.2", "", VALID_BEFORE_NRI_0_10),
            ("containerd", "v2.1.4", "", VALID_BEFORE_NRI_0_10),
            ("containerd", "v2.2.7", "", VALID_FROM_NRI_0_10),
            ("containerd", "2.2.7+unknown", "", VALID_FROM_NRI_0_10),
            ("containerd", "v2.3.1", "v0.12.0", VALID_FROM_NRI_0_10),
            ("containerd", "garbage", "", VALID_BEFORE_NRI_0_10),
            ("cri-o", "1.34.0", "", VALID_BEFORE_NRI_0_10),
        ];
        for (name, ver, nri, want) in cases {
            assert_eq!(valid_events(name, ver, nri), want, "{name} {ver} {nri}");
        }
    }
}
