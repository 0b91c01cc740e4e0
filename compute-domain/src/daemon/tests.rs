use super::*;
use crate::crd::Readiness;

fn node(ip: &str, clique: &str, index: Option<u32>) -> NodeStatus {
    NodeStatus {
        name: format!("n-{ip}"),
        ip_address: ip.into(),
        clique_id: clique.into(),
        status: Readiness::NotReady,
        index,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn map(pairs: &[(u32, &str)]) -> BTreeMap<u32, IpAddr> {
    pairs.iter().map(|(i, a)| (*i, ip(a))).collect()
}

#[test]
fn members_keep_their_places_and_the_unplaced_fill_the_gaps() {
    let nodes = [
        node("10.0.0.9", "u.1", Some(1)),
        node("10.0.0.10", "u.1", None),
        node("10.0.0.2", "u.2", Some(0)),
        node("10.0.0.9", "u.1", Some(3)),
        node("", "u.1", None),
        node("not-an-ip", "u.1", None),
        node("10.0.0.4", "u.1", Some(1)),
        node("10.0.0.3", "u.1", None),
    ];
    // 10.0.0.9 keeps 1; 10.0.0.4 claims 1 too and is placed anew with the unplaced, in
    // address order: 10.0.0.3 -> 0, 10.0.0.4 -> 2, 10.0.0.10 -> 3.
    assert_eq!(
        members(&nodes, "u.1"),
        map(&[
            (0, "10.0.0.3"),
            (1, "10.0.0.9"),
            (2, "10.0.0.4"),
            (3, "10.0.0.10")
        ])
    );
    assert!(members(&nodes, "u.3").is_empty());
    assert_eq!(places(&map(&[(0, "10.0.0.1")]), 2), 2);
    assert_eq!(places(&map(&[(4, "10.0.0.1")]), 2), 5);
}

#[test]
fn starts_once_the_domain_is_listed_and_a_replaced_member_only_remaps() {
    let (a, b, c) = ("10.0.0.1", "10.0.0.2", "10.0.0.3");
    assert_eq!(plan(None, &map(&[(0, b)]), ip(a), 1), Plan::Keep);
    assert_eq!(plan(None, &map(&[(0, a)]), ip(a), 2), Plan::Keep);
    let both = map(&[(0, a), (1, b)]);
    let running = Running {
        places: 2,
        own: 0,
        members: both.clone(),
    };
    assert_eq!(plan(None, &both, ip(a), 2), Plan::Run(running.clone()));
    assert_eq!(plan(Some(&running), &both, ip(a), 2), Plan::Keep);
    // b lost: its name unmapped; c in its place: remapped, never restarted.
    assert_eq!(
        plan(Some(&running), &map(&[(0, a)]), ip(a), 2),
        Plan::Remap(map(&[(0, a)]))
    );
    let replaced = map(&[(0, a), (1, c)]);
    assert_eq!(
        plan(Some(&running), &replaced, ip(a), 2),
        Plan::Remap(replaced)
    );
}

#[test]
fn a_longer_list_or_a_moved_place_restarts_a_lost_place_stops() {
    let (a, b, c) = ("10.0.0.1", "10.0.0.2", "10.0.0.3");
    let running = Running {
        places: 2,
        own: 0,
        members: map(&[(0, a), (1, b)]),
    };
    let three = map(&[(0, a), (1, b), (2, c)]);
    assert_eq!(
        plan(Some(&running), &three, ip(a), 2),
        Plan::Run(Running {
            places: 3,
            own: 0,
            members: three.clone()
        })
    );
    let moved = map(&[(1, a), (0, b)]);
    assert!(matches!(
        plan(Some(&running), &moved, ip(a), 2),
        Plan::Run(Running { own: 1, .. })
    ));
    assert_eq!(plan(Some(&running), &map(&[(1, b)]), ip(a), 2), Plan::Stop);
}

#[test]
fn the_hosts_file_keeps_its_lines_and_maps_the_names() {
    let text = "127.0.0.1\tlocalhost\n10.1.1.1 node-a\n";
    let once = render_hosts(text, &map(&[(0, "10.0.0.1"), (1, "10.0.0.2")]));
    assert_eq!(
        once,
        "127.0.0.1\tlocalhost\n10.1.1.1 node-a\n\
         # the IMEX domain's members (graft-imex-daemon)\n\
         10.0.0.1\tgraft-imex-0\n10.0.0.2\tgraft-imex-1\n"
    );
    let twice = render_hosts(&once, &map(&[(1, "10.0.0.3")]));
    assert_eq!(
        twice,
        "127.0.0.1\tlocalhost\n10.1.1.1 node-a\n\
         # the IMEX domain's members (graft-imex-daemon)\n10.0.0.3\tgraft-imex-1\n"
    );
    assert_eq!(render_hosts(&twice, &BTreeMap::new()), text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts");
    std::fs::write(&path, text).unwrap();
    write_hosts(&path, &map(&[(1, "10.0.0.3")])).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), twice);
}

#[test]
fn files_carry_the_keys_the_daemon_reads() {
    let dir = tempfile::tempdir().unwrap();
    let files = ImexFiles {
        dir: dir.path().join("imex"),
        bind_ip: ip("10.0.0.1"),
        server_port: 50000,
        cmd_port: 50005,
    };
    let cfg = files.write(2).unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap();
    for line in [
        "DAEMONIZE=0",
        "SERVER_PORT=50000",
        "BIND_INTERFACE_IP=10.0.0.1",
        "IMEX_CMD_ENABLED=1",
        "IMEX_CMD_PORT=50005",
        "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in {text}");
    }
    let nodes = format!("IMEX_NODE_CONFIG_FILE={}", files.nodes_path().display());
    assert!(text.contains(&nodes), "{text}");
    let list = std::fs::read_to_string(files.nodes_path()).unwrap();
    assert_eq!(list, "graft-imex-0\ngraft-imex-1\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&files.dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn an_elastic_domain_starts_with_its_own_node_and_lists_a_rack() {
    let (a, b) = ("10.0.0.1", "10.0.0.2");
    // Started as soon as this node is a member, with ELASTIC_PLACES names.
    let alone = map(&[(0, a)]);
    let running = Running {
        places: ELASTIC_PLACES,
        own: 0,
        members: alone.clone(),
    };
    assert_eq!(plan(None, &alone, ip(a), 0), Plan::Run(running.clone()));
    assert_eq!(plan(None, &map(&[(0, b)]), ip(a), 0), Plan::Keep);
    // A second member joins: remapped, not restarted.
    let two = map(&[(0, a), (1, b)]);
    assert_eq!(
        plan(Some(&running), &two, ip(a), 0),
        Plan::Remap(two.clone())
    );
    // Every unused place points at the multicast address; a fixed domain maps members only.
    let mapped = mapping(&two, ELASTIC_PLACES, 0);
    assert_eq!(mapped.len(), ELASTIC_PLACES);
    assert_eq!(mapped[&1], ip(b));
    assert!((2..ELASTIC_PLACES as u32).all(|i| mapped[&i] == UNUSED_PLACE));
    assert!(UNUSED_PLACE.is_multicast());
    assert_eq!(mapping(&two, 4, 2), two);
    // More members than a rack: the list grows (a restart).
    let many: BTreeMap<u32, IpAddr> = (0..=ELASTIC_PLACES as u32)
        .map(|i| (i, ip(&format!("10.0.1.{}", i + 1))))
        .collect();
    assert_eq!(places(&many, 0), ELASTIC_PLACES + 1);
}
