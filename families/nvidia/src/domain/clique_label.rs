//! The node's NVLink clique as a node label, `resource.graft.dev/clique=<uuid>.<id>`, so
//! that pods and tools can select nodes of one clique without reading ResourceSlices (the
//! IMEX channels carry it as their `cliqueID` attribute too). Follows every scan: set when
//! the node's channels name a clique, changed when it changes, removed when they go.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use graft_driver_core::model::{Attribute, Device, Kind};

pub use graft_api::attributes::CLIQUE_ID as CLIQUE_ATTRIBUTE;
pub use graft_api::compute_domain::CLIQUE_LABEL;

/// The clique the node's IMEX channels name, when it can be a label value.
pub fn clique_of(devices: &[Device]) -> Option<String> {
    let clique = devices
        .iter()
        .filter(|d| d.kind == Kind::Channel)
        .find_map(|d| match d.attributes.get(CLIQUE_ATTRIBUTE) {
            Some(Attribute::String(s)) => Some(s.clone()),
            _ => None,
        })?;
    let valid = clique.len() <= 63
        && clique.starts_with(|c: char| c.is_ascii_alphanumeric())
        && clique.ends_with(|c: char| c.is_ascii_alphanumeric())
        && clique
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !valid {
        tracing::warn!(%clique, "the clique id cannot be a label value; the node is not labelled");
        return None;
    }
    Some(clique)
}

/// Keeps the label in step with the inventory until the inventory's sender goes. A failed
/// patch is retried on the next change or after a minute.
pub async fn run(client: kube::Client, node: String, mut inventory: watch::Receiver<Vec<Device>>) {
    let nodes: Api<Node> = Api::all(client);
    let mut applied: Option<Option<String>> = None;
    loop {
        let want = clique_of(&inventory.borrow_and_update());
        if applied.is_none() {
            // What the node has: no write when it is already right (most nodes have no
            // clique, and graft-driver may not patch nodes unless ComputeDomains are on).
            match nodes.get(&node).await {
                Ok(n) => {
                    let labels = n.metadata.labels.unwrap_or_default();
                    applied = Some(labels.get(CLIQUE_LABEL).cloned());
                }
                Err(e) => tracing::warn!(error = %e, "reading this node's clique label"),
            }
        }
        if applied.is_some() && applied.as_ref() != Some(&want) {
            let patch = serde_json::json!({"metadata": {"labels": {CLIQUE_LABEL: want}}});
            match nodes
                .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(clique = ?want, "node clique label");
                    applied = Some(want);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "labelling the node with its clique");
                    applied = None;
                }
            }
        }
        let retry = applied.is_none();
        tokio::select! {
            changed = inventory.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(60)), if retry => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(clique: &str) -> Device {
        let mut d = Device::new("imex-channel-0", Kind::Channel);
        d.attributes
            .insert(CLIQUE_ATTRIBUTE.into(), Attribute::String(clique.into()));
        d
    }

    #[test]
    fn the_channels_clique_when_it_is_a_label_value() {
        assert_eq!(clique_of(&[]), None);
        let c = "0b6f7c1e5d1a4f7e9a432f1c1d7b2a10.3";
        assert_eq!(clique_of(&[channel(c)]).as_deref(), Some(c));
        assert_eq!(clique_of(&[channel("a/b")]), None);
        assert_eq!(clique_of(&[channel(&"a".repeat(64))]), None);
    }
}
