//! What the reconciles read, kept by watches (kube-runtime reflectors) that every reconcile
//! shares, so that no reconcile lists the cluster: graft's ResourceSlices (field selector
//! `spec.driver=graft.dev`), every ResourceClaim, the daemon pods in graft's namespace
//! (the domain label), the nodes' domain labels and the domains' DaemonSets (metadata
//! only). A slice is stored as
//! a compact record of its devices ([`SliceDevices`]); every other object is trimmed
//! to what the controller reads before it is stored (no managedFields, no spec it does not
//! read, no other drivers' results), so that memory follows the number of objects, not
//! their size; the initial lists come in small pages, so that a page of maximum-size claims
//! is all that is ever held whole.
//!
//! Of slices, claims and nodes only those the reconciles can use are stored ([`only`]): a
//! slice with a device in an NVLink clique, a claim of a domain or with graft's devices allocated, a node
//! with a domain's label. The rest of the fleet streams past, so that the controller's memory
//! follows the domains' part of the cluster, not its size (the fleet benchmark: 1.85x from
//! 1,000 to 5,000 nodes while every node's slice and metadata were kept).

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, AllocationResult, DeviceAllocationResult, ResourceClaim,
    ResourceClaimStatus, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;

use crate::clique::DRIVER;
use crate::context::Context;
use crate::devices::SliceDevices;
use crate::objects::DOMAIN_LABEL;

/// Objects a page of the initial lists holds: claims may be up to the API server's object
/// limit (about 1.5 MiB) each.
pub const PAGE: u32 = 10;

/// The shared caches of one leadership term.
#[derive(Clone)]
pub struct Caches {
    /// graft's ResourceSlices with IMEX channels, as [`SliceDevices`] records.
    pub slices: Store<SliceDevices>,
    /// The ResourceClaims of domains or with graft's devices, trimmed by [`trim_claim`].
    pub claims: Store<ResourceClaim>,
    /// The daemon pods in graft's namespace, trimmed by [`trim_pod`].
    pub pods: Store<Pod>,
    /// The name and domain labels of every node that has one ([`trim_node`]).
    pub nodes: Store<PartialObjectMeta<Node>>,
    /// The domains' DaemonSets in graft's namespace: name, uid and generation
    /// ([`trim_daemonset`]), so that a reconcile writes one only when it changed.
    pub daemonsets: Store<PartialObjectMeta<DaemonSet>>,
}

impl Caches {
    /// Waits until each cache has its initial list; `false` if a watch ended first.
    pub async fn ready(&self) -> bool {
        self.slices.wait_until_ready().await.is_ok()
            && self.claims.wait_until_ready().await.is_ok()
            && self.pods.wait_until_ready().await.is_ok()
            && self.nodes.wait_until_ready().await.is_ok()
            && self.daemonsets.wait_until_ready().await.is_ok()
    }
}

fn meta(m: &ObjectMeta, labels: &[&str]) -> ObjectMeta {
    let kept: BTreeMap<String, String> = m
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| labels.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        deletion_timestamp: m.deletion_timestamp.clone(),
        labels: (!kept.is_empty()).then_some(kept),
        ..Default::default()
    }
}

/// A slice's watch event as the cache takes it: its [`SliceDevices`] record.
pub fn slice_event(ev: watcher::Event<ResourceSlice>) -> watcher::Event<SliceDevices> {
    use watcher::Event::*;
    match ev {
        Apply(s) => Apply(SliceDevices::of(&s)),
        Delete(s) => Delete(SliceDevices::of(&s)),
        InitApply(s) => InitApply(SliceDevices::of(&s)),
        Init => Init,
        InitDone => InitDone,
    }
}

/// A claim as the controller reads it: its domain label, graft's allocated devices, and
/// the node its allocation names.
pub fn trim_claim(c: &mut ResourceClaim) {
    let status = c.status.take();
    // graft's device statuses: their binding conditions only (`binding`).
    let devices: Option<Vec<AllocatedDeviceStatus>> = status
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .map(|ds| {
            ds.iter()
                .filter(|d| d.driver == DRIVER && d.conditions.is_some())
                .map(|d| AllocatedDeviceStatus {
                    driver: d.driver.clone(),
                    pool: d.pool.clone(),
                    device: d.device.clone(),
                    share_id: d.share_id.clone(),
                    conditions: d.conditions.clone(),
                    ..Default::default()
                })
                .collect()
        })
        .filter(|v: &Vec<_>| !v.is_empty());
    let allocation = status.and_then(|s| s.allocation).map(|a| AllocationResult {
        devices: a.devices.map(|d| DeviceAllocationResult {
            results: d.results.map(|rs| {
                rs.into_iter()
                    .filter(|r| r.driver == DRIVER)
                    .map(
                        |r| k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
                            driver: r.driver,
                            pool: r.pool,
                            device: r.device,
                            request: r.request,
                            share_id: r.share_id,
                            binding_conditions: r.binding_conditions,
                            binding_failure_conditions: r.binding_failure_conditions,
                            ..Default::default()
                        },
                    )
                    .collect()
            }),
            config: None,
        }),
        node_selector: a.node_selector.map(|mut ns| {
            for t in &mut ns.node_selector_terms {
                t.match_expressions = None;
                if let Some(f) = t.match_fields.as_mut() {
                    f.retain(|r| r.key == "metadata.name");
                }
            }
            ns
        }),
        allocation_timestamp: a.allocation_timestamp,
    });
    *c = ResourceClaim {
        metadata: meta(&c.metadata, &[DOMAIN_LABEL]),
        spec: Default::default(),
        status: allocation.map(|a| ResourceClaimStatus {
            allocation: Some(a),
            devices,
            ..Default::default()
        }),
    };
}

/// A node as `labels::prune` reads it: its name and its domain labels.
pub fn trim_node(n: &mut PartialObjectMeta<Node>) {
    let prefix = format!("{DOMAIN_LABEL}.");
    let labels: BTreeMap<String, String> = n
        .metadata
        .labels
        .take()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(&prefix))
        .collect();
    n.metadata = ObjectMeta {
        labels: (!labels.is_empty()).then_some(labels),
        ..meta(&n.metadata, &[])
    };
}

/// A DaemonSet as `apply` reads it: whether it is still the one the controller last
/// wrote (its uid and generation).
pub fn trim_daemonset(d: &mut PartialObjectMeta<DaemonSet>) {
    d.metadata = ObjectMeta {
        generation: d.metadata.generation,
        ..meta(&d.metadata, &[])
    };
}

/// A daemon pod as `status::aggregate` reads it: its node, address and readiness.
pub fn trim_pod(p: &mut Pod) {
    let spec = p.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        ..Default::default()
    });
    let status = p.status.take().map(|s| PodStatus {
        pod_ip: s.pod_ip,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    });
    *p = Pod {
        metadata: meta(&p.metadata, &[DOMAIN_LABEL]),
        spec,
        status,
    };
}

/// Whether a slice's record has a use: one of a node in an NVLink clique
/// ([`SliceDevices::of`]).
pub fn keep_slice(s: &SliceDevices) -> bool {
    s.kept()
}

/// Whether a trimmed claim has a use: a domain's (`members`, `binding`, `labels`), or one
/// holding graft's devices (`clique::allocated`: a channel or GPU taken). Other claims, most
/// of a fleet's at rest, are not stored.
pub fn keep_claim(c: &ResourceClaim) -> bool {
    let domain = c
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(DOMAIN_LABEL));
    let graft = c
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .is_some_and(|r| !r.is_empty());
    domain || graft
}

/// Whether a trimmed node has a use: a domain's label to prune ([`trim_node`] keeps no
/// other).
pub fn keep_node(n: &PartialObjectMeta<Node>) -> bool {
    n.metadata.labels.is_some()
}

/// A watch event as the cache takes it, given which objects it keeps: an object it does not
/// keep is never stored, and one that stops being kept leaves it (its update is passed on as
/// a deletion, a no-op for one never stored).
pub fn only<K>(keep: fn(&K) -> bool, ev: watcher::Event<K>) -> Option<watcher::Event<K>> {
    match ev {
        watcher::Event::Apply(o) if !keep(&o) => Some(watcher::Event::Delete(o)),
        watcher::Event::InitApply(o) if !keep(&o) => None,
        ev => Some(ev),
    }
}

/// [`only`] over a watch stream's items, errors passed on.
fn kept<K>(
    keep: fn(&K) -> bool,
) -> impl FnMut(
    watcher::Result<watcher::Event<K>>,
) -> std::future::Ready<Option<watcher::Result<watcher::Event<K>>>> {
    move |r| {
        std::future::ready(match r {
            Ok(ev) => only(keep, ev).map(Ok),
            Err(e) => Some(Err(e)),
        })
    }
}

async fn report<K>(what: &'static str, r: watcher::Result<watcher::Event<K>>) {
    if let Err(e) = r {
        tracing::warn!(error = %e, "watching {what}");
    }
}

/// The caches, and the future that keeps them (it runs until dropped).
pub fn start(ctx: &Context) -> (Caches, impl std::future::Future<Output = ()>) {
    let c = ctx.client.clone();
    let (slices, slices_w) = reflector::store();
    let slice_cfg = watcher::Config::default()
        .fields(&format!("spec.driver={DRIVER}"))
        .page_size(PAGE);
    let slice_watch = reflector::reflector(
        slices_w,
        watcher(Api::<ResourceSlice>::all(c.clone()), slice_cfg)
            .default_backoff()
            .map_ok(slice_event)
            .filter_map(kept(keep_slice)),
    );
    // Every namespace's, whatever the controller's scope: a channel taken anywhere is taken.
    let (claims, claims_w) = reflector::store();
    let claim_watch = watcher(
        Api::<ResourceClaim>::all(c.clone()),
        watcher::Config::default().page_size(PAGE),
    )
    .default_backoff()
    .modify(trim_claim)
    .filter_map(kept(keep_claim))
    .reflect(claims_w);
    let (pods, pods_w) = reflector::store();
    let pods_api: Api<Pod> = Api::namespaced(c, &ctx.cfg.namespace);
    let pod_watch = watcher(pods_api, watcher::Config::default().labels(DOMAIN_LABEL))
        .default_backoff()
        .modify(trim_pod)
        .reflect(pods_w);
    let (daemonsets, daemonsets_w) = reflector::store();
    let ds_api: Api<PartialObjectMeta<DaemonSet>> =
        Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let ds_watch = watcher(ds_api, watcher::Config::default().labels(DOMAIN_LABEL))
        .default_backoff()
        .modify(trim_daemonset)
        .reflect(daemonsets_w);
    let (nodes, nodes_w) = reflector::store();
    let node_api: Api<PartialObjectMeta<Node>> = Api::all(ctx.client.clone());
    let node_watch = watcher(node_api, watcher::Config::default().page_size(PAGE * 10))
        .default_backoff()
        .modify(trim_node)
        .filter_map(kept(keep_node))
        .reflect(nodes_w);
    let drive = async move {
        tokio::join!(
            slice_watch.for_each(|r| report("ResourceSlices", r)),
            claim_watch.for_each(|r| report("ResourceClaims", r)),
            pod_watch.for_each(|r| report("daemon pods", r)),
            node_watch.for_each(|r| report("nodes", r)),
            ds_watch.for_each(|r| report("DaemonSets", r)),
        );
    };
    (
        Caches {
            slices,
            claims,
            pods,
            nodes,
            daemonsets,
        },
        drive,
    )
}

#[cfg(test)]
mod tests;
