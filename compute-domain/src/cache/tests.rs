use super::*;
use crate::clique::{allocated, channel_slice};
use crate::members::{allocation_nodes, domain_claims};
use std::sync::Arc;

fn big_claim(uid: &str) -> ResourceClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "c", "namespace": "t",
                     "labels": {DOMAIN_LABEL: uid, "junk": "x".repeat(60)},
                     "annotations": {"junk": "x".repeat(100_000)},
                     "managedFields": [{"manager": "m", "operation": "Apply"}]},
        "spec": {"devices": {"requests": [{"name": "r",
                  "exactly": {"deviceClassName": "x".repeat(200)}}]}},
        "status": {"allocation": {
            "devices": {"results": [
                {"request": "r", "driver": DRIVER, "pool": "a", "device": "imex-channel-1"},
                {"request": "r", "driver": "other.dev", "pool": "a", "device": "gpu-0"}],
                "config": [{"source": "FromClaim", "requests": ["r"],
                            "opaque": {"driver": "other.dev", "parameters": {"k": "x".repeat(10_000)}}}]},
            "nodeSelector": {"nodeSelectorTerms": [{
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}],
                "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "1"}]},
    }))
    .unwrap()
}

#[test]
fn a_claim_keeps_only_what_the_controller_reads() {
    let full = big_claim("u1");
    let mut c = full.clone();
    trim_claim(&mut c);
    let size = serde_json::to_string(&c).unwrap().len();
    assert!(size < 600, "{size} bytes: {c:?}");
    assert!(c.metadata.annotations.is_none() && c.metadata.managed_fields.is_none());
    // What the reconciles read of it is as before.
    assert_eq!(allocation_nodes(&c), Some(vec!["a".to_string()]));
    let graft_only = allocated([&full]);
    assert_eq!(allocated([&c]), graft_only);
    assert_eq!(domain_claims(&[Arc::new(c)], "t", "u1").len(), 1);
    // A claim with no allocation stays one.
    let mut pending = full;
    pending.status = None;
    trim_claim(&mut pending);
    assert_eq!(allocation_nodes(&pending), None);
}

#[test]
fn a_pod_keeps_its_node_address_and_readiness() {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "d", "namespace": "g", "labels": {DOMAIN_LABEL: "u1"},
                     "annotations": {"a": "x".repeat(10_000)}},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "i"}]},
        "status": {"podIP": "10.0.0.1", "conditions": [
            {"type": "Ready", "status": "True", "message": "x".repeat(1000)},
            {"type": "PodScheduled", "status": "True"}]}
    }))
    .unwrap();
    trim_pod(&mut p);
    assert!(serde_json::to_string(&p).unwrap().len() < 300, "{p:?}");
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("a"));
    let st = p.status.unwrap();
    assert_eq!(st.pod_ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(st.conditions.unwrap().len(), 1);
}

/// Feeds `events` through [`only`] into a store; what it holds, by name.
fn stored<K>(keep: fn(&K) -> bool, events: Vec<watcher::Event<K>>) -> Vec<String>
where
    K: reflector::Lookup<DynamicType = ()> + Clone + 'static,
{
    let (store, mut w) = reflector::store::<K>();
    for ev in events {
        if let Some(ev) = only(keep, ev) {
            w.apply_watcher_event(&ev);
        }
    }
    let mut names: Vec<String> = store
        .state()
        .iter()
        .map(|o| o.name().unwrap_or_default().into_owned())
        .collect();
    names.sort();
    names
}

fn trimmed_slice(node: &str, channels: usize) -> SliceDevices {
    let mut s = channel_slice(node, "u.1", channels);
    if channels == 0 {
        s.spec.devices = serde_json::from_value(serde_json::json!([{"name": "gpu-0",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}}}]))
        .ok();
    }
    SliceDevices::of(&s)
}

#[test]
fn only_slices_with_channels_are_stored_and_one_that_loses_them_leaves() {
    use watcher::Event::*;
    let (a, b) = (trimmed_slice("a", 2), trimmed_slice("b", 0));
    assert_eq!(
        stored(
            keep_slice,
            vec![Init, InitApply(a.clone()), InitApply(b.clone()), InitDone]
        ),
        ["a-graft.dev-imex"]
    );
    // Node a's slice republished without channels: it leaves; b's update stays out.
    let a_without = trimmed_slice("a", 0);
    let events = vec![Init, InitApply(a), InitDone, Apply(a_without), Apply(b)];
    assert!(stored(keep_slice, events).is_empty());
    // And one that gains channels comes in.
    let events = vec![
        Init,
        InitDone,
        Apply(trimmed_slice("c", 0)),
        Apply(trimmed_slice("c", 1)),
    ];
    assert_eq!(stored(keep_slice, events), ["c-graft.dev-imex"]);
}

#[test]
fn only_claims_of_domains_or_with_graft_devices_are_stored() {
    use watcher::Event::*;
    let mut domain = big_claim("u1");
    domain.metadata.name = Some("domain".into());
    domain.status = None;
    let mut graft = big_claim("u1");
    graft.metadata.name = Some("graft".into());
    graft.metadata.labels = None;
    let mut other = graft.clone();
    other.metadata.name = Some("other".into());
    if let Some(r) = other
        .status
        .as_mut()
        .and_then(|s| s.allocation.as_mut())
        .and_then(|a| a.devices.as_mut())
        .and_then(|d| d.results.as_mut())
    {
        r.retain(|r| r.driver != DRIVER);
    }
    let mut at_rest = graft.clone();
    at_rest.metadata.name = Some("at-rest".into());
    at_rest.status = None;
    let events: Vec<_> = [domain, graft.clone(), other, at_rest]
        .into_iter()
        .map(|mut c| {
            trim_claim(&mut c);
            InitApply(c)
        })
        .collect();
    let events = [vec![Init], events, vec![InitDone]].concat();
    assert_eq!(stored(keep_claim, events.clone()), ["domain", "graft"]);
    // Deallocated: graft's claim leaves.
    let mut freed = graft;
    freed.status = None;
    trim_claim(&mut freed);
    let events = [events, vec![Apply(freed)]].concat();
    assert_eq!(stored(keep_claim, events), ["domain"]);
}

#[test]
fn only_nodes_with_a_domain_label_are_stored() {
    use watcher::Event::*;
    let node = |name: &str, label: Option<&str>| {
        let mut n: PartialObjectMeta<Node> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        }))
        .unwrap();
        if let Some(l) = label {
            n.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(format!("{DOMAIN_LABEL}.{l}"), "true".into());
        }
        trim_node(&mut n);
        n
    };
    let events = vec![
        Init,
        InitApply(node("a", Some("u1"))),
        InitApply(node("b", None)),
        InitDone,
    ];
    assert_eq!(stored(keep_node, events.clone()), ["a"]);
    let events = [
        events,
        vec![Apply(node("a", None)), Apply(node("b", Some("u2")))],
    ]
    .concat();
    assert_eq!(stored(keep_node, events), ["b"]);
}
