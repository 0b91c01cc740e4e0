//! The simulated nodes' kubelet, as kwok's fake one: a pod bound to a simulated node is
//! written Running and Ready (its IP the node's, as for a host-network pod), and a pod
//! being deleted is removed at once (a kubelet does so once its containers are gone).
//! One watch of bound pods for the whole fleet; writes run a bounded number at a time.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use tokio::task::JoinSet;

use super::nodes::address_of;

/// Writes in flight.
const IN_FLIGHT: usize = 32;

/// The running fake kubelet; stopped on drop.
pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    /// Starts it against `client`.
    pub fn start(client: kube::Client) -> Self {
        Kubelet {
            task: tokio::spawn(run(client)),
        }
    }

    /// Whether it still runs (it only ends if its watch does).
    pub fn running(&self) -> bool {
        !self.task.is_finished()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

async fn act(client: kube::Client, p: Pod) {
    let (Some(ns), Some(name)) = (p.metadata.namespace.clone(), p.metadata.name.clone()) else {
        return;
    };
    let Some(ip) = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .and_then(address_of)
    else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let r = if p.metadata.deletion_timestamp.is_some() {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: p.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        pods.delete(&name, &dp).await.map(|_| ())
    } else if !running(&p) {
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        let status = json!({"status": {
            "phase": "Running",
            "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
            "hostIP": ip.to_string(), "podIP": ip.to_string(),
            "podIPs": [{"ip": ip.to_string()}], "hostIPs": [{"ip": ip.to_string()}],
            "startTime": now,
        }});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map(|_| ())
    } else {
        return;
    };
    if let Err(e) = r {
        // A pod deleted meanwhile: nothing to do.
        tracing::debug!(namespace = ns, pod = name, error = %e, "fake kubelet write");
    }
}

async fn run(client: kube::Client) {
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().fields("spec.nodeName!=");
    let stream = watcher(pods, config).default_backoff().applied_objects();
    let mut stream = std::pin::pin!(stream);
    // The writes in flight, owned here and reaped as they end.
    let mut writes = JoinSet::new();
    while let Some(ev) = stream.next().await {
        let Ok(p) = ev else { continue };
        if running(&p) && p.metadata.deletion_timestamp.is_none() {
            continue;
        }
        while writes.try_join_next().is_some() {}
        if writes.len() >= IN_FLIGHT {
            writes.join_next().await;
        }
        writes.spawn(act(client.clone(), p));
    }
}
