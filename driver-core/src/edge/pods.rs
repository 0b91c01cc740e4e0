//! The pods bound to this node, kept from one watch, so that a prepare need not GET every
//! pod its claims are reserved for.
//!
//! A cached pod stands in for a GET only where the two cannot differ in what the claim
//! mapping (`mapping::pod_use`) reads:
//! - the UID is the one the claim is reserved under (a pod made again under the same name
//!   is another pod, and misses);
//! - the pod references the claim. Its containers, their `resources.claims` and
//!   `spec.resourceClaims` cannot change once the pod exists (API validation of pod
//!   updates). The claim names in `status.resourceClaimStatuses` and
//!   `status.extendedResourceClaimStatus` are written before the pod may be bound (the
//!   resource claim controller and the scheduler), and this watch sees only bound pods.
//!
//! Anything else misses and is read with a GET as before. The same rule ([`stands_in`]) lets
//! a GET the API server answers from its watch cache (`resourceVersion=0`, no etcd read)
//! stand in for a quorum GET: `fetch` reads a pod that way first, and again with a quorum
//! GET when the answer misses (a version older than the UID, or than the pod's claim
//! statuses). The claims themselves are always
//! read fresh: they decide which pods may have the devices at all, and an allocation can be
//! cleared and made again under the same UID. A pod deleted since it was cached may still
//! hit; it never runs a container again, so its entries in the record grant nothing.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};

use crate::mapping::{pod_use, PodUse};

/// The node's pods as the watch last saw them, reduced to what the claim mapping reads.
#[derive(Clone)]
pub struct PodCache {
    store: Store<Pod>,
}

impl Default for PodCache {
    /// An empty cache that no watch feeds: every lookup misses.
    fn default() -> Self {
        PodCache {
            store: reflector::store().0,
        }
    }
}

impl PodCache {
    /// A cache of the pods bound to `node`, and the task that keeps it: it runs until
    /// dropped, retrying the watch with backoff. While the watch fails (the role lacks
    /// `list` and `watch` on pods, the API server is away) every lookup misses.
    pub fn watch(
        client: kube::Client,
        node: &str,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let api: Api<Pod> = Api::all(client);
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let (store, writer) = reflector::store();
        let run = async move {
            let stream = watcher(api, cfg)
                .default_backoff()
                .modify(reduce)
                .reflect(writer);
            let mut stream = std::pin::pin!(stream);
            let mut failing = false;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(_) => failing = false,
                    // Once per outage: the backoff retries, and GETs serve meanwhile.
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "pod watch failed; pods are read with GETs until it is back");
                    }
                    Err(e) => tracing::debug!(error = %e, "pod watch still failing"),
                }
            }
        };
        (PodCache { store }, run)
    }

    /// How the cached pod `namespace/name` with `uid` uses `claim`, if the cache may answer
    /// for it (see the module's rule); `None` is a miss.
    pub fn pod_use(&self, namespace: &str, name: &str, uid: &str, claim: &str) -> Option<PodUse> {
        let pod = self.store.get(&ObjectRef::new(name).within(namespace))?;
        stands_in(&pod, uid, claim)
    }

    /// Puts `pod` in the cache as the watch would. For tests.
    #[cfg(test)]
    pub fn with(pods: Vec<Pod>) -> Self {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for mut p in pods {
            reduce(&mut p);
            writer.apply_watcher_event(&watcher::Event::InitApply(p));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        PodCache { store }
    }
}

/// How `pod`, read from a cache, uses `claim`, where it may stand in for a quorum GET: it
/// is the pod with `uid` and it references the claim (the module's rule); `None` is a miss.
pub fn stands_in(pod: &Pod, uid: &str, claim: &str) -> Option<PodUse> {
    if pod.metadata.uid.as_deref() != Some(uid) {
        return None;
    }
    pod_use(pod, claim)
}

/// The pod less everything the claim mapping does not read: a node's pods cost a few
/// hundred bytes each rather than their whole spec and status.
fn reduce(pod: &mut Pod) {
    let meta = std::mem::take(&mut pod.metadata);
    pod.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    };
    let spec = pod.spec.take().unwrap_or_default();
    let keep = |c: Container| Container {
        name: c.name,
        resources: c.resources.map(|r| ResourceRequirements {
            claims: r.claims,
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    pod.spec = Some(PodSpec {
        containers: spec.containers.into_iter().map(keep).collect(),
        init_containers: spec
            .init_containers
            .map(|v| v.into_iter().map(keep).collect()),
        resource_claims: spec.resource_claims,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus {
        resource_claim_statuses: s.resource_claim_statuses,
        extended_resource_claim_status: s.extended_resource_claim_status,
        ..PodStatus::default()
    });
}
