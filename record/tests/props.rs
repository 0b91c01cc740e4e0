//! Property tests for the record decoder: `parse_record` and `RecordStore::pod_claims` take
//! bytes from disk that graft-nri (running as root) turns into OCI spec edits, so they must
//! never panic, must fail with a typed error, and a record that parses must be valid and
//! survive a round trip unchanged.
//!
//! Inputs: arbitrary bytes, byte-level mutations of the v1 fixture (flips, inserted JSON
//! tokens, deletions, duplicated ranges, truncation), value-level mutations of the fixture's
//! JSON tree (a node replaced, removed or duplicated), and generated records, valid or not.

use std::path::Path;

use graft_record::*;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::Value;

#[path = "support/mutate.rs"]
mod mutate;
use mutate::Mutation;

const POD: &str = "5e0c9a8b-1d2f-4e3a-8b7c-6d5e4f3a2b10";

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claim-v1.json"))
        .expect("fixture")
}

// ---------------------------------------------------------------------------------------
// Byte-level mutation of a valid input.

/// JSON fragments and values that reach the deeper checks.
const TOKENS: &[&str] = &[
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1",
    "2",
    "1.5",
    "1e999",
    "-0",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551616",
    "-9223372036854775809",
    "\"\"",
    "[]",
    "{}",
    "\"c\"",
    "\"b\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"/dev/../etc/shadow\"",
    "\"/dev//x\"",
    "\"LD_PRELOAD\"",
    "\"PATH\"",
    "\"A=B\"",
    "\"../x\"",
    "\".hidden\"",
    "\"version\"",
    "\"devices\"",
    "\"pods\"",
    "\"containers\"",
    "\"fuse\"",
    "\"tun\"",
    "\"createContainer\"",
    "\"poststop\"",
    "[[[[[[[[",
    "]]]]]]]]",
    "\u{feff}",
    "\\",
    "\u{0}",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    mutate::mutation(
        TOKENS.len(),
        mutate::Mix {
            flip: 1,
            set: 1,
            token: 3,
            delete_max: 64,
            duplicate_max: 128,
        },
    )
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    mutate::apply(data, m, TOKENS)
}

// ---------------------------------------------------------------------------------------
// Value-level mutation of the fixture's JSON tree.

fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("/dev/fuse".to_string()),
        Just("/dev/../etc/shadow".to_string()),
        Just("/dev//fuse".to_string()),
        Just("/dev/fuse/".to_string()),
        Just("relative".to_string()),
        Just("LD_PRELOAD".to_string()),
        Just("PATH".to_string()),
        Just("A=B".to_string()),
        Just("a\0b".to_string()),
        Just("..".to_string()),
        Just(".x".to_string()),
        Just("a/b".to_string()),
        Just(POD.to_string()),
        Just("fuse".to_string()),
        Just("tun".to_string()),
        Just("app".to_string()),
        Just("c".to_string()),
        Just("b".to_string()),
        Just("bind".to_string()),
        Just("x".repeat(200)),
        Just("x".repeat(40_000)),
        "[a-zA-Z0-9_./=-]{0,16}",
        any::<String>(),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1000i64..5000).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        tricky_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(tricky_string(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Edit {
    /// Replace node `k` (pre-order) with a value.
    Replace(usize, Value),
    /// Remove node `k` from its parent.
    Remove(usize),
    /// Append a copy of node `k` to its parent (arrays) or re-insert it under a new key.
    Duplicate(usize, String),
    /// Replace node `k` by a copy of node `j`.
    Copy(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<usize>(), arb_json()).prop_map(|(k, v)| Edit::Replace(k, v)),
        2 => any::<usize>().prop_map(Edit::Remove),
        2 => (any::<usize>(), tricky_string()).prop_map(|(k, s)| Edit::Duplicate(k, s)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(k, j)| Edit::Copy(k, j)),
    ]
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

fn node(v: &Value, k: usize) -> Option<&Value> {
    if k == 0 {
        return Some(v);
    }
    let mut k = k - 1;
    let children: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o.values().collect(),
        _ => return None,
    };
    for c in children {
        let n = count(c);
        if k < n {
            return node(c, k);
        }
        k -= n;
    }
    None
}

/// Applies `f` to the parent of node `k` (k >= 1) with the child's position in it.
fn with_parent(v: &mut Value, k: usize, f: &mut dyn FnMut(&mut Value, usize)) -> bool {
    let mut k = k - 1;
    let n_children = match v {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => return false,
    };
    for i in 0..n_children {
        let c = match v {
            Value::Array(a) => &a[i],
            Value::Object(o) => o.values().nth(i).unwrap(),
            _ => unreachable!(),
        };
        let n = count(c);
        if k == 0 {
            f(v, i);
            return true;
        }
        if k < n {
            let c = match v {
                Value::Array(a) => &mut a[i],
                Value::Object(o) => o.values_mut().nth(i).unwrap(),
                _ => unreachable!(),
            };
            return with_parent(c, k, f);
        }
        k -= n;
    }
    false
}

fn apply_edit(v: &mut Value, e: &Edit) {
    let total = count(v);
    match e {
        Edit::Replace(k, new) => {
            let k = k % total;
            if k == 0 {
                *v = new.clone();
            } else {
                with_parent(v, k, &mut |p, i| match p {
                    Value::Array(a) => a[i] = new.clone(),
                    Value::Object(o) => *o.values_mut().nth(i).unwrap() = new.clone(),
                    _ => {}
                });
            }
        }
        Edit::Remove(k) => {
            let k = k % total;
            if k > 0 {
                with_parent(v, k, &mut |p, i| match p {
                    Value::Array(a) => {
                        a.remove(i);
                    }
                    Value::Object(o) => {
                        let key = o.keys().nth(i).unwrap().clone();
                        o.remove(&key);
                    }
                    _ => {}
                });
            }
        }
        Edit::Duplicate(k, key) => {
            let k = k % total;
            if k > 0 {
                with_parent(v, k, &mut |p, i| match p {
                    Value::Array(a) => {
                        let c = a[i].clone();
                        a.push(c);
                    }
                    Value::Object(o) => {
                        let c = o.values().nth(i).unwrap().clone();
                        o.insert(key.clone(), c);
                    }
                    _ => {}
                });
            }
        }
        Edit::Copy(k, j) => {
            let src = node(v, j % total).cloned();
            if let Some(src) = src {
                apply_edit(v, &Edit::Replace(*k, src));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Generated records.

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9][a-z0-9._-]{0,12}",
        1 => Just(POD.to_string()),
        1 => tricky_string(),
    ]
}

fn abs_path(under: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9]{1,6}(/[a-z0-9._-]{1,6}){0,2}".prop_map(move |p| format!("{under}{p}")),
        1 => tricky_string(),
    ]
}

fn device_node() -> impl Strategy<Value = DeviceNode> {
    (
        abs_path("/dev/"),
        prop_oneof![Just(DeviceKind::Char), Just(DeviceKind::Block)],
        prop_oneof![8 => 0i64..512, 1 => any::<i64>()],
        prop_oneof![8 => 0i64..512, 1 => any::<i64>()],
        prop::option::of(prop_oneof![8 => 0u32..0o7777, 1 => any::<u32>()]),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
    )
        .prop_map(
            |(path, kind, major, minor, file_mode, uid, gid)| DeviceNode {
                path,
                kind,
                major,
                minor,
                file_mode,
                uid,
                gid,
            },
        )
}

fn mount() -> impl Strategy<Value = Mount> {
    (
        abs_path("/"),
        abs_path("/"),
        prop_oneof![
            Just("bind".to_string()),
            Just("tmpfs".to_string()),
            tricky_string()
        ],
        prop::collection::vec(tricky_string(), 0..3),
    )
        .prop_map(|(source, destination, kind, options)| Mount {
            source,
            destination,
            kind,
            options,
        })
}

fn env_var() -> impl Strategy<Value = EnvVar> {
    (
        prop_oneof![8 => "[A-Z_][A-Z0-9_]{0,8}", 1 => tricky_string()],
        prop_oneof![8 => "[ -~]{0,12}", 1 => tricky_string()],
    )
        .prop_map(|(name, value)| EnvVar { name, value })
}

fn hook() -> impl Strategy<Value = Hook> {
    (
        prop_oneof![
            Just(HookStage::Prestart),
            Just(HookStage::CreateRuntime),
            Just(HookStage::CreateContainer),
            Just(HookStage::StartContainer),
            Just(HookStage::Poststart),
            Just(HookStage::Poststop),
        ],
        abs_path("/usr/"),
        prop::collection::vec(tricky_string(), 0..3),
        prop::collection::vec(tricky_string(), 0..2),
        prop::option::of(prop_oneof![8 => 1i64..60, 1 => any::<i64>()]),
    )
        .prop_map(|(stage, path, args, env, timeout)| Hook {
            stage,
            path,
            args,
            env,
            timeout,
        })
}

fn edits() -> impl Strategy<Value = ContainerEdits> {
    (
        prop::collection::vec(device_node(), 0..3),
        prop::collection::vec(mount(), 0..2),
        prop::collection::vec(env_var(), 0..3),
        prop::collection::vec(hook(), 0..2),
    )
        .prop_map(|(device_nodes, mounts, env, hooks)| ContainerEdits {
            device_nodes,
            mounts,
            env,
            hooks,
        })
}

/// Device names come from a small alphabet so that containers often name real devices.
fn dev_name() -> impl Strategy<Value = String> {
    prop_oneof![10 => "[a-c]{1,2}", 1 => Just(String::new())]
}

fn record() -> impl Strategy<Value = ClaimRecord> {
    let device = (
        dev_name(),
        "[a-z0-9-]{0,8}",
        prop::collection::vec("[a-z]{1,4}", 0..2),
        edits(),
    )
        .prop_map(|(name, pool, requests, edits)| DeviceRecord {
            name,
            pool,
            requests,
            edits,
        });
    let container = ("[a-z-]{0,6}", prop::collection::vec(dev_name(), 0..3))
        .prop_map(|(name, devices)| ContainerRecord { name, devices });
    let pod = (
        id(),
        "[a-z]{0,6}",
        "[a-z-]{0,8}",
        prop::collection::vec(container, 0..3),
    )
        .prop_map(|(uid, namespace, name, containers)| PodRecord {
            uid,
            namespace,
            name,
            containers,
        });
    (
        prop_oneof![10 => Just(FORMAT_VERSION), 5 => Just(RECORD_VERSION), 1 => any::<u32>()],
        (id(), "[a-z]{0,8}", "[a-z0-9-]{0,12}"),
        prop::collection::vec(device, 0..4),
        prop::collection::vec(pod, 0..3),
        prop::collection::vec(env_var(), 0..2),
    )
        .prop_map(
            |(version, (uid, namespace, name), devices, pods, env)| ClaimRecord {
                version,
                claim: ClaimRef {
                    uid,
                    namespace,
                    name,
                },
                devices,
                env,
                pods,
            },
        )
}

// ---------------------------------------------------------------------------------------

/// The contract of `parse_record` on any input: no panic, a typed error, or a record that
/// validates and survives a round trip (compact and pretty) unchanged.
fn check_parse(data: &[u8]) -> Result<Option<ClaimRecord>, TestCaseError> {
    match parse_record(Path::new("claims/x.json"), data) {
        Ok(rec) => {
            prop_assert!((OLDEST_RECORD_VERSION..=RECORD_VERSION).contains(&rec.version));
            prop_assert!(validate_record(&rec).is_ok(), "parsed but invalid: {rec:?}");
            for bytes in [
                serde_json::to_vec(&rec).unwrap(),
                serde_json::to_vec_pretty(&rec).unwrap(),
            ] {
                let again = parse_record(Path::new("again"), &bytes);
                prop_assert!(
                    matches!(&again, Ok(r) if *r == rec),
                    "round trip changed the record: {again:?}"
                );
            }
            Ok(Some(rec))
        }
        Err(
            RecordError::Corrupt { .. }
            | RecordError::UnknownVersion { .. }
            | RecordError::Invalid { .. },
        ) => Ok(None),
        Err(e) => Err(TestCaseError::fail(format!("unexpected error kind: {e:?}"))),
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn parse_record_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        check_parse(&data)?;
    }

    #[test]
    fn parse_record_arbitrary_json(v in arb_json()) {
        check_parse(&serde_json::to_vec(&v).unwrap())?;
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn parse_record_mutated_fixture_bytes(muts in prop::collection::vec(mutation(), 1..6)) {
        let mut data = fixture();
        for m in &muts {
            apply(&mut data, m);
        }
        check_parse(&data)?;
    }
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn parse_record_mutated_fixture_tree(edits in prop::collection::vec(edit(), 1..4)) {
        let mut v: Value = serde_json::from_slice(&fixture()).unwrap();
        for e in &edits {
            apply_edit(&mut v, e);
        }
        check_parse(&serde_json::to_vec(&v).unwrap())?;
        check_parse(&serde_json::to_vec_pretty(&v).unwrap())?;
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Any record, valid or not: written out and read back it is returned unchanged exactly
    /// when it validates, refused as Invalid (or UnknownVersion) otherwise.
    #[test]
    fn generated_records_round_trip_iff_valid(rec in record()) {
        let valid = validate_record(&rec);
        let bytes = serde_json::to_vec(&rec).unwrap();
        let parsed = parse_record(Path::new("x"), &bytes);
        match (&valid, &parsed) {
            (Ok(()), Ok(r)) => prop_assert_eq!(r, &rec),
            (Err(_), Err(RecordError::Invalid { .. })) => {}
            (Err(_), Err(RecordError::UnknownVersion { version, .. })) => {
                prop_assert!(!(OLDEST_RECORD_VERSION..=RECORD_VERSION).contains(&rec.version));
                prop_assert_eq!(*version, rec.version as u64);
            }
            _ => prop_assert!(false, "validate {valid:?} but parse {parsed:?}"),
        }
        check_parse(&bytes)?;
    }
}

// ---------------------------------------------------------------------------------------
// The store: markers lead to record files whose bytes were damaged.

/// Three valid records held by POD, each naming the pod's container "app".
fn store_records() -> Vec<ClaimRecord> {
    let base: ClaimRecord = parse_record(Path::new("fixture"), &fixture()).unwrap();
    ["c1", "c2", "c3"]
        .iter()
        .map(|uid| {
            let mut r = base.clone();
            r.claim.uid = uid.to_string();
            r.claim.name = format!("claim-{uid}");
            r
        })
        .collect()
}

#[derive(Debug, Clone)]
enum FileDamage {
    Keep,
    Mutate(Vec<Mutation>),
    Replace(Vec<u8>),
    Tree(Vec<Edit>),
    Remove,
}

fn damage() -> impl Strategy<Value = FileDamage> {
    prop_oneof![
        2 => Just(FileDamage::Keep),
        4 => prop::collection::vec(mutation(), 1..4).prop_map(FileDamage::Mutate),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(FileDamage::Replace),
        3 => prop::collection::vec(edit(), 1..3).prop_map(FileDamage::Tree),
        1 => Just(FileDamage::Remove),
    ]
}

proptest! {
    #![proptest_config(config(150))]

    /// `pod_claims` never panics, fails closed (an error whenever a marker leads to a
    /// record file that does not parse), and returns only valid records that hold the pod,
    /// sorted by claim uid.
    #[test]
    fn pod_claims_over_damaged_files(
        damages in prop::collection::vec(damage(), 3),
        extra_markers in prop::collection::vec("[a-zA-Z0-9._-]{1,12}", 0..3),
        query in prop_oneof![4 => Just(POD.to_string()), 1 => tricky_string()],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        let claims = dir.path().join("claims");
        let pod_dir = dir.path().join("pods").join(POD);
        std::fs::create_dir_all(&pod_dir).unwrap();
        let mut expect_err = false;
        for (rec, dmg) in store_records().iter().zip(&damages) {
            let path = claims.join(format!("{}.json", rec.claim.uid));
            let mut data = serde_json::to_vec_pretty(rec).unwrap();
            match dmg {
                FileDamage::Keep => {}
                FileDamage::Mutate(ms) => ms.iter().for_each(|m| apply(&mut data, m)),
                FileDamage::Replace(b) => data = b.clone(),
                FileDamage::Tree(es) => {
                    let mut v = serde_json::to_value(rec).unwrap();
                    es.iter().for_each(|e| apply_edit(&mut v, e));
                    data = serde_json::to_vec(&v).unwrap();
                }
                FileDamage::Remove => {}
            }
            std::fs::write(pod_dir.join(&rec.claim.uid), b"").unwrap();
            if matches!(dmg, FileDamage::Remove) {
                continue;
            }
            // The store also refuses a record filed under another claim's uid.
            match parse_record(&path, &data) {
                Ok(r) if r.claim.uid == rec.claim.uid => {}
                _ => expect_err = true,
            }
            std::fs::write(&path, &data).unwrap();
        }
        for m in &extra_markers {
            // Markers whose record does not exist (a removal in progress) are skipped.
            let _ = std::fs::write(pod_dir.join(m), b"");
        }
        match store.pod_claims(&query) {
            Ok(recs) => {
                if query == POD {
                    prop_assert!(!expect_err, "a corrupt record of the pod was not reported");
                }
                let mut sorted = recs.clone();
                sorted.sort_by(|a, b| a.claim.uid.cmp(&b.claim.uid));
                prop_assert_eq!(&sorted, &recs);
                for r in &recs {
                    prop_assert!(r.holds_pod(&query));
                    prop_assert!(validate_record(r).is_ok());
                }
            }
            Err(e) => {
                prop_assert!(query == POD && expect_err, "unexpected error: {e}");
                prop_assert!(
                    matches!(
                        e,
                        RecordError::Corrupt { .. }
                            | RecordError::UnknownVersion { .. }
                            | RecordError::Invalid { .. }
                    ),
                    "unexpected error kind: {e:?}"
                );
            }
        }
    }
}

/// Deep nesting does not overflow the stack (serde_json's recursion limit answers first).
#[test]
fn deeply_nested_input_is_refused() {
    for open in [b'[', b'{'] {
        let mut data = br#"{"version":1,"claim":"#.to_vec();
        data.extend(std::iter::repeat_n(open, 100_000));
        assert!(matches!(
            parse_record(Path::new("x"), &data),
            Err(RecordError::Corrupt { .. })
        ));
    }
    let mut data = b"[".repeat(100_000);
    data.extend(b"]".repeat(100_000));
    assert!(parse_record(Path::new("x"), &data).is_err());
}
