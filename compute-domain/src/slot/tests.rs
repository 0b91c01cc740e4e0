use super::*;
use crate::clique::{channel_slice, node_channels};
use crate::record::Record;

fn nodes(spec: &[(&str, &str, usize)]) -> BTreeMap<String, NodeChannels> {
    let slices: Vec<_> = spec
        .iter()
        .map(|(n, c, count)| channel_slice(n, c, *count))
        .collect();
    node_channels(&crate::devices::records(&slices), &Default::default())
}

fn domain(uid: &str, clique: Option<&str>, slot: Option<u32>) -> (String, Record) {
    let placement = match (clique, slot) {
        (Some(c), Some(s)) => Some(Placement {
            clique: c.into(),
            slot: s,
        }),
        _ => None,
    };
    let r = Record {
        namespace: "ns".into(),
        name: uid.into(),
        placement,
        ..Default::default()
    };
    (uid.to_string(), r)
}

#[test]
fn ports_step_by_ten_and_stay_in_range() {
    assert_eq!(ports(0), Some((50000, 50005)));
    assert_eq!(ports(3), Some((50030, 50035)));
    assert_eq!(ports(MAX_SLOTS - 1), Some((65530, 65535)));
    assert_eq!(ports(MAX_SLOTS), None);
    assert_eq!(ports(u32::MAX), None);
}

#[test]
fn a_clique_has_as_many_slots_as_its_smallest_node_has_channels() {
    let n = nodes(&[("a", "u.1", 4), ("b", "u.1", 2), ("c", "u.2", 8)]);
    let b = bounds(&n);
    assert_eq!(b["u.1"], 2);
    assert_eq!(b["u.2"], 8);
    let n = nodes(&[("a", "u.1", 5000)]);
    assert_eq!(bounds(&n)["u.1"], MAX_SLOTS);
}

#[test]
fn the_lowest_slot_no_other_live_domain_of_the_clique_holds() {
    let n = nodes(&[("a", "u.1", 3), ("b", "u.1", 3)]);
    let ds = [
        domain("x", Some("u.1"), Some(0)),
        domain("y", Some("u.1"), Some(2)),
        domain("z", Some("u.2"), Some(1)),
        domain("w", None, None),
    ];
    let t = taken(&BTreeMap::from(ds.clone()), "me");
    let p = place(&n, 2, (None, None), &t).unwrap();
    assert_eq!(
        p,
        Placement {
            clique: "u.1".into(),
            slot: 1
        }
    );
    // Its own slot does not count against it.
    let t = taken(&BTreeMap::from(ds.clone()), "x");
    assert_eq!(place(&n, 1, (None, None), &t).unwrap().slot, 0);
}

#[test]
fn a_chosen_slot_is_kept_and_a_chosen_clique_gets_one() {
    let n = nodes(&[("a", "u.1", 2)]);
    let t = taken(&BTreeMap::from([domain("x", Some("u.1"), Some(0))]), "me");
    // Kept, even where another domain claims the same number (it was chosen first).
    assert_eq!(place(&n, 1, (Some("u.1"), Some(0)), &t).unwrap().slot, 0);
    assert_eq!(place(&n, 1, (Some("u.1"), None), &t).unwrap().slot, 1);
    let t = taken(
        &BTreeMap::from([
            domain("x", Some("u.1"), Some(0)),
            domain("y", Some("u.1"), Some(1)),
        ]),
        "me",
    );
    assert_eq!(
        place(&n, 1, (Some("u.1"), None), &t),
        Err(Unplaced::NoSlot {
            clique: "u.1".into(),
            slots: 2
        })
    );
}

#[test]
fn a_clique_without_a_free_slot_gives_way_or_the_domain_says_why() {
    // u.2 is smaller (chosen first for one node) but has no slot left: u.1 takes it.
    let n = nodes(&[("a", "u.1", 2), ("b", "u.1", 2), ("c", "u.2", 1)]);
    let t = taken(&BTreeMap::from([domain("x", Some("u.2"), Some(0))]), "me");
    assert_eq!(place(&n, 1, (None, None), &t).unwrap().clique, "u.1");
    // Two nodes fit only u.1, whose slots are all held.
    let t = taken(
        &BTreeMap::from([
            domain("x", Some("u.1"), Some(0)),
            domain("y", Some("u.1"), Some(1)),
        ]),
        "me",
    );
    let e = place(&n, 2, (None, None), &t).unwrap_err();
    assert_eq!(
        e,
        Unplaced::NoSlot {
            clique: "u.1".into(),
            slots: 2
        }
    );
    assert!(e.to_string().contains("no free slot"), "{e}");
    // Three nodes fit nowhere: the clique error as before.
    assert!(matches!(
        place(&n, 3, (None, None), &t),
        Err(Unplaced::NoClique(NoClique::TooSmall { wanted: 3, .. }))
    ));
}
