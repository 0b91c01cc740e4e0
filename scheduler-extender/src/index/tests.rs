use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;

use super::*;

const DRIVER: &str = "graft.dev";

/// A tiny seeded generator (xorshift64): the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn slice(
    name: &str,
    driver: &str,
    node: Option<&str>,
    pool: &str,
    generation: i64,
    devices: serde_json::Value,
) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices}
    }))
    .unwrap()
}

fn claim(name: &str, results: &[(&str, String, String)]) -> ResourceClaim {
    let results: Vec<_> = results
        .iter()
        .map(|(driver, pool, device)| json!({"request": "g", "driver": driver, "pool": pool, "device": device}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}}
    }))
    .unwrap()
}

fn random_slice(r: &mut Rng) -> ResourceSlice {
    let name = format!("s{}", r.below(8));
    let node = (r.below(10) > 0).then(|| format!("n{}", r.below(4)));
    let pool = format!("p{}", r.below(4));
    let driver = if r.below(10) == 0 {
        "other.dev"
    } else {
        DRIVER
    };
    let devices: Vec<_> = (0..r.below(5))
        .map(|_| {
            let d = r.below(6);
            match r.below(8) {
                0 => json!({"name": format!("gpu-{d}-mig"), "attributes": {"type": {"string": "mig"}}}),
                1 => json!({"name": format!("gpu-{d}"), "attributes": {"type": {"string": "gpu"}, "migEnabled": {"bool": true}}}),
                2 => json!({"name": format!("gpu-{d}"), "attributes": {"type": {"string": "gpu"}}}),
                _ => json!({"name": format!("gpu-{d}"), "attributes": {"type": {"string": "gpu"},
                            "nvlinkIsland": {"string": format!("i{}", r.below(2))}}}),
            }
        })
        .collect();
    slice(
        &name,
        driver,
        node.as_deref(),
        &pool,
        1 + r.below(3) as i64,
        json!(devices),
    )
}

fn random_claim(r: &mut Rng) -> ResourceClaim {
    let name = format!("c{}", r.below(10));
    let results: Vec<_> = (0..r.below(4))
        .map(|_| {
            let driver = if r.below(8) == 0 { "other.dev" } else { DRIVER };
            (
                driver,
                format!("p{}", r.below(4)),
                format!("gpu-{}", r.below(6)),
            )
        })
        .collect();
    claim(&name, &results)
}

fn feed_slice(
    index: &Index,
    pending: &mut Option<Vec<(String, Option<Slice>)>>,
    ev: watcher::Event<ResourceSlice>,
) {
    let name = |s: &ResourceSlice| s.metadata.name.clone().unwrap_or_default();
    if let Some(c) = step(pending, &ev, name, |s| Slice::of(DRIVER, s)) {
        index.slices(c);
    }
}

fn feed_claim(
    index: &Index,
    pending: &mut Option<Vec<(String, Held)>>,
    ev: watcher::Event<ResourceClaim>,
) {
    if let Some(c) = step(pending, &ev, claim_key, |c| held(DRIVER, c)) {
        index.claims(c);
    }
}

/// Random applies, deletes and relistings (some after changes the watch missed) of
/// slices and claims: after each, the index's view is the full rebuild's.
#[test]
fn index_matches_full_rebuild() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let index = Index::new(DRIVER);
    let (mut slices, mut claims) = (BTreeMap::new(), BTreeMap::new());
    let (mut ps, mut pc) = (None, None);
    for i in 0..5000 {
        match r.below(20) {
            0..=6 => {
                let s = random_slice(&mut r);
                slices.insert(s.metadata.name.clone().unwrap(), s.clone());
                feed_slice(&index, &mut ps, watcher::Event::Apply(s));
            }
            7..=8 => {
                let name = format!("s{}", r.below(8));
                if let Some(s) = slices.remove(&name) {
                    feed_slice(&index, &mut ps, watcher::Event::Delete(s));
                }
            }
            9..=15 => {
                let c = random_claim(&mut r);
                claims.insert(c.metadata.name.clone().unwrap(), c.clone());
                feed_claim(&index, &mut pc, watcher::Event::Apply(c));
            }
            16..=17 => {
                let name = format!("c{}", r.below(10));
                if let Some(c) = claims.remove(&name) {
                    feed_claim(&index, &mut pc, watcher::Event::Delete(c));
                }
            }
            _ => {
                // The watch was down: some objects changed unseen; then it relists.
                for _ in 0..r.below(3) {
                    let s = random_slice(&mut r);
                    slices.insert(s.metadata.name.clone().unwrap(), s);
                    slices.remove(&format!("s{}", r.below(8)));
                    let c = random_claim(&mut r);
                    claims.insert(c.metadata.name.clone().unwrap(), c);
                    claims.remove(&format!("c{}", r.below(10)));
                }
                feed_slice(&index, &mut ps, watcher::Event::Init);
                for s in slices.values() {
                    feed_slice(&index, &mut ps, watcher::Event::InitApply(s.clone()));
                }
                feed_slice(&index, &mut ps, watcher::Event::InitDone);
                feed_claim(&index, &mut pc, watcher::Event::Init);
                for c in claims.values() {
                    feed_claim(&index, &mut pc, watcher::Event::InitApply(c.clone()));
                }
                feed_claim(&index, &mut pc, watcher::Event::InitDone);
            }
        }
        let want = state::nodes(DRIVER, slices.values(), claims.values());
        assert_eq!(index.all(), want, "step {i}");
        let names: Vec<String> = (0..5).map(|n| format!("n{n}")).collect();
        let got = index.nodes(&names);
        for (n, g) in names.iter().zip(got) {
            assert_eq!(g, want.get(n).cloned().unwrap_or_default(), "step {i}, {n}");
        }
    }
    // Everything deleted: nothing is left behind, use counts included.
    for s in std::mem::take(&mut slices).into_values() {
        feed_slice(&index, &mut ps, watcher::Event::Delete(s));
    }
    for c in std::mem::take(&mut claims).into_values() {
        feed_claim(&index, &mut pc, watcher::Event::Delete(c));
    }
    let g = index.read();
    assert!(g.slices.is_empty() && g.generations.is_empty() && g.by_node.is_empty());
    assert!(g.claims.is_empty() && g.used.is_empty(), "{:?}", g.used);
}

fn eight(node: &str) -> ResourceSlice {
    let devices: Vec<_> = (0..8)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"type": {"string": "gpu"},
                        "nvlinkIsland": {"string": if i < 4 { "0000:18:00.0" } else { "0000:9a:00.0" }}}}))
        .collect();
    slice(
        &format!("{node}-gpus"),
        DRIVER,
        Some(node),
        node,
        1,
        json!(devices),
    )
}

/// Two claims holding the same GPU (one being replaced): it stays used until both go.
#[test]
fn a_gpu_two_claims_hold_is_used_until_both_let_go() {
    let index = Index::new(DRIVER);
    index.slices(Change::Apply(
        "a-gpus".into(),
        Slice::of(DRIVER, &eight("a")),
    ));
    let pair = vec![("a".to_string(), "gpu-0".to_string())];
    index.claims(Change::Apply("ns/x".into(), pair.clone()));
    index.claims(Change::Apply("ns/y".into(), pair));
    let free = |i: &Index| i.nodes(&["a".into()])[0].free();
    assert_eq!(free(&index), 7);
    index.claims(Change::Delete("ns/x".into()));
    assert_eq!(free(&index), 7);
    // Updated to hold nothing: what it added goes.
    index.claims(Change::Apply("ns/y".into(), vec![]));
    assert_eq!(free(&index), 8);
}

#[test]
fn pools_count_free_and_stranded_gpus() {
    let index = Index::new(DRIVER);
    for n in ["a", "b", "c", "d"] {
        index.slices(Change::Apply(
            format!("{n}-gpus"),
            Slice::of(DRIVER, &eight(n)),
        ));
    }
    index.node_pools(Change::Replace(vec![
        ("a".into(), "h100".into()),
        ("b".into(), "h100".into()),
        ("c".into(), "a100".into()),
    ]));
    let held = |node: &str, n: usize| {
        (0..n)
            .map(|i| (node.to_string(), format!("gpu-{i}")))
            .collect()
    };
    index.claims(Change::Apply("ns/1".into(), held("a", 2)));
    index.claims(Change::Apply("ns/2".into(), held("c", 8)));
    let pools = index.pools();
    // a: 6 free, stranded; b: 8 free, usable whole.
    assert_eq!(
        pools["h100"],
        PoolGpus {
            gpus: 16,
            free: 14,
            stranded: 6
        }
    );
    assert!((pools["h100"].fragmentation() - 6.0 / 14.0).abs() < 1e-9);
    // c is full: nothing free, nothing stranded.
    assert_eq!(
        pools["a100"],
        PoolGpus {
            gpus: 8,
            free: 0,
            stranded: 0
        }
    );
    assert_eq!(pools["a100"].fragmentation(), 0.0);
    // d has no node entry (or no pool label): pool "none".
    assert_eq!(
        pools[NO_POOL],
        PoolGpus {
            gpus: 8,
            free: 8,
            stranded: 0
        }
    );
}

/// What the index keeps per eight-GPU node and per claim holding two GPUs: the figures
/// the module and docs/placement.md give.
#[test]
fn what_the_index_keeps() {
    use crate::slim::tests::counting::held as bytes;
    const N: usize = 1000;
    let slices: Vec<_> = (0..N).map(|i| eight(&format!("node-{i:04}"))).collect();
    let claims: Vec<_> = (0..N)
        .map(|i| {
            let pool = format!("node-{:04}", i % N);
            claim(
                &format!("trainer-{i:05}-gpus-x7k2p"),
                &[
                    (DRIVER, pool.clone(), "gpu-0".into()),
                    (DRIVER, pool, "gpu-1".into()),
                ],
            )
        })
        .collect();
    let index = Index::new(DRIVER);
    let before = bytes();
    for s in &slices {
        index.slices(Change::Apply(
            s.metadata.name.clone().unwrap(),
            Slice::of(DRIVER, s),
        ));
    }
    let per_node = (bytes() - before) / N as isize;
    let before = bytes();
    for c in &claims {
        index.claims(Change::Apply(claim_key(c), held(DRIVER, c)));
    }
    let per_claim = (bytes() - before) / N as isize;
    eprintln!("index keeps per eight-GPU node: {per_node} B; per two-GPU claim: {per_claim} B");
    assert!(per_node < 4096, "a node keeps {per_node} B");
    assert!(per_claim < 1024, "a claim keeps {per_claim} B");
}

/// Scoring's read of 100 candidates from a 5,000-node, 40,000-GPU, 100,000-claim index,
/// against the full rebuild it replaces (`cargo test -p graft-scheduler-extender --release
/// -- --ignored --nocapture per_call_cost`).
#[test]
#[ignore]
fn per_call_cost() {
    const NODES: usize = 5000;
    let slices: Vec<_> = (0..NODES).map(|i| eight(&format!("node-{i:04}"))).collect();
    // 100,000 claims: a fifth of them hold a GPU each (20,000 GPUs, half the fleet).
    let claims: Vec<_> = (0..100_000)
        .map(|i| {
            let held = if i % 5 == 0 {
                let g = i / 5;
                vec![(
                    DRIVER,
                    format!("node-{:04}", g / 4),
                    format!("gpu-{}", g % 4),
                )]
            } else {
                vec![]
            };
            claim(&format!("c{i}"), &held)
        })
        .collect();
    let index = Index::new(DRIVER);
    index.slices(Change::Replace(
        slices
            .iter()
            .map(|s| (s.metadata.name.clone().unwrap(), Slice::of(DRIVER, s)))
            .collect(),
    ));
    index.claims(Change::Replace(
        claims
            .iter()
            .map(|c| (claim_key(c), held(DRIVER, c)))
            .collect(),
    ));
    let candidates: Vec<String> = (0..100).map(|i| format!("node-{:04}", i * 37)).collect();
    let runs = 50;
    let t = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(index.nodes(&candidates));
    }
    let indexed = t.elapsed() / runs;
    let t = Instant::now();
    for _ in 0..5 {
        std::hint::black_box(state::nodes(DRIVER, &slices, &claims));
    }
    let rebuilt = t.elapsed() / 5;
    eprintln!(
        "100 candidates of {NODES} nodes: index {indexed:?} per call; full rebuild {rebuilt:?}"
    );
    assert_eq!(index.nodes(&candidates), {
        let all = state::nodes(DRIVER, &slices, &claims);
        candidates
            .iter()
            .map(|c| all[c].clone())
            .collect::<Vec<_>>()
    });
}
