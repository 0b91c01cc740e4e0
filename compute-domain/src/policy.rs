//! Who may hold a slot. A domain's slot must exist before its first claim is made (its
//! workload template pins the slot's channel, and a claim's spec is fixed when it is made),
//! so slots cannot wait for pods. Instead empty domains are kept from squatting: one
//! namespace's domains hold at most `per_namespace` slots, and a domain that has had no
//! workload claim at all (allocated or pending) for `idle_grace` gives its slot up to a
//! domain that waits for one in its clique. A domain waits for a slot an empty domain holds
//! at most about `idle_grace`; one whose pods come within `idle_grace` of its placement keeps
//! its slot for as long as it has claims. Pure functions of the controller's records.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::record::Record;

/// The limits on slots; the controller's flags set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotPolicy {
    /// The most slots the domains of one namespace hold at once (0: no limit).
    pub per_namespace: usize,
    /// How long a domain with no workload claim keeps a slot another domain waits for.
    pub idle_grace: Duration,
}

impl Default for SlotPolicy {
    /// Two slots a namespace (half of the default four IMEX channels a clique), ten minutes.
    fn default() -> Self {
        SlotPolicy {
            per_namespace: 2,
            idle_grace: Duration::from_secs(600),
        }
    }
}

impl SlotPolicy {
    /// Whether a domain of `namespace` may take one more slot; the slots held if not.
    pub fn room_in(
        &self,
        records: &BTreeMap<String, Record>,
        namespace: &str,
        except: &str,
    ) -> Result<(), usize> {
        let held = records
            .iter()
            .filter(|(uid, r)| *uid != except && r.namespace == namespace)
            .filter(|(_, r)| r.placement.is_some())
            .count();
        if self.per_namespace == 0 || held < self.per_namespace {
            Ok(())
        } else {
            Err(held)
        }
    }

    /// The domain (uid) whose slot in `clique` goes to a domain waiting for one: a domain
    /// of the clique that has had no workload claim for `idle_grace`, the longest idle
    /// first; never `except`, the waiting domain.
    pub fn idle_holder(
        &self,
        records: &BTreeMap<String, Record>,
        clique: &str,
        now: Timestamp,
        except: &str,
    ) -> Option<String> {
        let grace = k8s_openapi::jiff::SignedDuration::try_from(self.idle_grace).ok()?;
        let cutoff = now.checked_sub(grace).ok()?;
        records
            .iter()
            .filter(|(uid, _)| *uid != except)
            .filter(|(_, r)| r.placement.as_ref().is_some_and(|p| p.clique == clique))
            .filter_map(|(uid, r)| Some((r.idle_since?, uid)))
            .filter(|(since, _)| *since <= cutoff)
            .min()
            .map(|(_, uid)| uid.clone())
    }
}

/// Since when a domain has had no workload claim: kept while it has none, started now when
/// its last one went, none while it has one.
pub fn idle_since(old: Option<Timestamp>, has_claims: bool, now: Timestamp) -> Option<Timestamp> {
    if has_claims {
        None
    } else {
        Some(old.unwrap_or(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::Placement;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn rec(ns: &str, clique: Option<&str>, idle: Option<&str>) -> Record {
        Record {
            namespace: ns.into(),
            placement: clique.map(|c| Placement {
                clique: c.into(),
                slot: 0,
            }),
            idle_since: idle.map(at),
            ..Default::default()
        }
    }

    #[test]
    fn a_namespace_holds_at_most_its_cap() {
        let p = SlotPolicy::default();
        let records = BTreeMap::from([
            ("a".to_string(), rec("t", Some("u.1"), None)),
            ("b".to_string(), rec("t", Some("u.2"), None)),
            ("c".to_string(), rec("t", None, None)),
            ("d".to_string(), rec("other", Some("u.1"), None)),
        ]);
        assert_eq!(p.room_in(&records, "t", "new"), Err(2));
        // A domain's own slot does not count against it; unplaced domains hold none.
        assert_eq!(p.room_in(&records, "t", "a"), Ok(()));
        assert_eq!(p.room_in(&records, "other", "new"), Ok(()));
        let open = SlotPolicy {
            per_namespace: 0,
            ..p
        };
        assert_eq!(open.room_in(&records, "t", "new"), Ok(()));
    }

    #[test]
    fn only_a_domain_empty_for_the_grace_period_gives_its_slot_up() {
        let p = SlotPolicy::default();
        let now = at("2026-01-01T01:00:00Z");
        let records = BTreeMap::from([
            // Busy, idle too briefly, of another clique, idle longest, idle long.
            ("busy".to_string(), rec("t", Some("u.1"), None)),
            (
                "brief".to_string(),
                rec("t", Some("u.1"), Some("2026-01-01T00:55:00Z")),
            ),
            (
                "other".to_string(),
                rec("t", Some("u.2"), Some("2026-01-01T00:00:00Z")),
            ),
            (
                "oldest".to_string(),
                rec("t", Some("u.1"), Some("2026-01-01T00:10:00Z")),
            ),
            (
                "old".to_string(),
                rec("t", Some("u.1"), Some("2026-01-01T00:20:00Z")),
            ),
        ]);
        assert_eq!(
            p.idle_holder(&records, "u.1", now, "me").as_deref(),
            Some("oldest")
        );
        assert_eq!(
            p.idle_holder(&records, "u.1", now, "oldest").as_deref(),
            Some("old")
        );
        assert_eq!(p.idle_holder(&records, "u.3", now, "me"), None);
        let early = at("2026-01-01T00:15:00Z");
        assert_eq!(p.idle_holder(&records, "u.1", early, "me"), None);
    }

    #[test]
    fn idleness_starts_with_the_last_claim_gone() {
        let (t0, t1) = (at("2026-01-01T00:00:00Z"), at("2026-01-01T00:05:00Z"));
        assert_eq!(idle_since(None, false, t0), Some(t0));
        assert_eq!(idle_since(Some(t0), false, t1), Some(t0));
        assert_eq!(idle_since(Some(t0), true, t1), None);
        assert_eq!(idle_since(None, true, t1), None);
    }
}
