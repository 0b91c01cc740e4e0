//! The ComputeDomain custom resource (a set of nodes that share GPU memory over NVLink
//! through IMEX, named by the workload ResourceClaimTemplate its pods use) and the names the
//! controller, graft-driver and graft-imex-daemon share about a domain: its node label, its
//! objects' labels and annotations, and its record in graft's namespace.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of graft's own resources.
pub const GROUP: &str = "resource.graft.dev";
/// The CRD's one version.
pub const VERSION: &str = "v1alpha1";
/// Its kind.
pub const KIND: &str = "ComputeDomain";
/// Its plural, the resource name RBAC rules name.
pub const PLURAL: &str = "computedomains";

/// The label every object of a domain carries, with the domain's uid as value; graft's
/// namespace holds objects of many domains, found by it.
pub const DOMAIN_LABEL: &str = "resource.graft.dev/computeDomain";
/// Annotation on the daemon pods naming their domain, for the controller's watch.
pub const NAME_ANNOTATION: &str = "resource.graft.dev/computeDomainName";
/// See [`NAME_ANNOTATION`].
pub const NAMESPACE_ANNOTATION: &str = "resource.graft.dev/computeDomainNamespace";
/// The node label naming the node's NVLink clique (`<cluster uuid>.<clique id>`), which
/// graft-driver sets from its IMEX channels' `cliqueID`.
pub const CLIQUE_LABEL: &str = "resource.graft.dev/clique";

/// The binding condition of an IMEX channel with ComputeDomains on: the scheduler binds a
/// pod allocated the channel once the controller sets it True on the claim's device status,
/// which it does when the domain's IMEX daemon on the claim's node is Ready.
pub const READY_CONDITION: &str = "resource.graft.dev/ComputeDomainReady";
/// The binding failure condition: the controller sets it True when the domain cannot become
/// Ready on the node in time, and the scheduler then undoes the allocation and tries again.
pub const FAILED_CONDITION: &str = "resource.graft.dev/ComputeDomainFailed";

/// The node label graft-driver sets (`true`) on a node where it prepares a workload claim
/// of domain `uid`, and the controller removes from nodes that hold none: one key per
/// domain.
pub fn node_label(uid: &str) -> String {
    format!("{DOMAIN_LABEL}.{uid}")
}

/// The name of domain `uid`'s objects in graft's namespace: its IMEX DaemonSet, its daemon
/// ResourceClaimTemplate and its record.
pub fn daemon_name(uid: &str) -> String {
    format!("imex-{uid}")
}

/// The controller's record of a domain: a ConfigMap [`daemon_name`] in graft's namespace,
/// which tenants cannot write, and these its keys. graft-driver and graft-imex-daemon
/// decide from it, never from the domain's status, which whoever may write the domain may
/// also write.
pub mod record {
    /// The domain's namespace.
    pub const NAMESPACE: &str = "namespace";
    /// The domain's name.
    pub const NAME: &str = "name";
    /// Its workload ResourceClaimTemplate's name.
    pub const TEMPLATE: &str = "template";
    /// The clique it was placed in.
    pub const CLIQUE: &str = "clique";
    /// Its slot in the clique.
    pub const SLOT: &str = "slot";
    /// Since when it has held no workload claim.
    pub const IDLE_SINCE: &str = "idleSince";
    /// Why it lost its slot.
    pub const RELEASED: &str = "released";
    /// Its members (JSON, a list of [`super::NodeStatus`]).
    pub const NODES: &str = "nodes";
}

/// How many IMEX channels a workload claim of the domain gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AllocationMode {
    /// One channel per claim (the default).
    #[default]
    Single,
    /// Every channel of the node's clique.
    All,
}

/// The workload ResourceClaimTemplate the controller creates in the domain's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceClaimTemplateRef {
    /// Its name; the workload's pods name it in `resourceClaims`.
    pub name: String,
}

/// The channel part of a domain: which template, and how many channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelSpec {
    /// The workload ResourceClaimTemplate to create.
    pub resource_claim_template: ResourceClaimTemplateRef,
    /// One channel per claim, or all of them.
    #[serde(default)]
    pub allocation_mode: AllocationMode,
}

/// A ComputeDomain: `numNodes` nodes of one NVLink clique, with an IMEX daemon on each.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "resource.graft.dev",
    version = "v1alpha1",
    kind = "ComputeDomain",
    plural = "computedomains",
    namespaced,
    status = "ComputeDomainStatus",
    shortname = "cd",
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".spec.numNodes"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"Clique","type":"string","jsonPath":".status.clique"}"#,
    printcolumn = r#"{"name":"Slot","type":"integer","jsonPath":".status.slot"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ComputeDomainSpec {
    /// How many nodes the domain spans; it is Ready when that many are. 0: elastic, the
    /// nodes its pods land on, Ready with at least one (docs/compute-domains.md).
    #[schemars(range(min = 0, max = 1024))]
    pub num_nodes: u32,
    /// The workload's channels.
    pub channel: ChannelSpec,
}

impl ComputeDomainSpec {
    /// Whether the domain is elastic (`numNodes: 0`).
    pub fn elastic(&self) -> bool {
        self.num_nodes == 0
    }

    /// The fewest nodes the domain is Ready with, and places its clique needs room for:
    /// `numNodes`, or one for an elastic domain.
    pub fn min_nodes(&self) -> usize {
        self.num_nodes.max(1) as usize
    }
}

/// Ready or not, for the domain and for each of its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Readiness {
    /// Every node's IMEX daemon is ready (for the domain: `numNodes` nodes, one clique).
    Ready,
    /// Not yet, or no longer.
    #[default]
    NotReady,
}

/// One node of a domain, as its IMEX daemon pod reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node's name.
    pub name: String,
    /// The daemon's address, which its peers connect to.
    #[serde(default)]
    pub ip_address: String,
    /// The node's clique (`<cluster UUID>.<clique id>`), from graft's ResourceSlices.
    #[serde(default, rename = "cliqueID")]
    pub clique_id: String,
    /// Whether the node's daemon is ready.
    pub status: Readiness,
    /// The node's place in the domain's IMEX node list (`0..numNodes`): its daemon is
    /// listed under the name of that place, which keeps its place while the node is a
    /// member, so that a member replaced changes one name's address, not the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

/// What the controller observed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputeDomainStatus {
    /// Ready once `numNodes` nodes of the chosen clique are.
    #[serde(default)]
    pub status: Readiness,
    /// The clique chosen for the domain; kept once chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clique: Option<String>,
    /// The domain's slot N in its clique, kept once chosen: its IMEX channel in Single mode
    /// (`channel == N` on every node) and its IMEX ports (50000 + 10 N, 50005 + 10 N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The nodes where the domain's daemons run.
    #[serde(default)]
    pub nodes: Vec<NodeStatus>,
    /// Why the domain is not Ready, when the controller knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The CRD as the chart installs it (templates/70-compute-domain-crd.yaml): JSON, which is
/// also YAML, so that no YAML serializer is needed.
pub fn crd_json() -> Result<String, serde_json::Error> {
    use kube::CustomResourceExt;
    serde_json::to_string_pretty(&ComputeDomain::crd())
}

/// The chart's template of the CRD: [`crd_json`] behind `computeDomains.enabled`, kept by
/// helm when the release is uninstalled or the value turned off: deleting a CRD deletes every
/// object of it, and a user's ComputeDomains must not go with a chart operation
/// (docs/install.md says how to delete it by hand, and when).
pub fn crd_template() -> Result<String, serde_json::Error> {
    use kube::CustomResourceExt;
    let mut crd = serde_json::to_value(ComputeDomain::crd())?;
    crd["metadata"]["annotations"] = serde_json::json!({"helm.sh/resource-policy": "keep"});
    Ok(format!(
        "{{{{- if .Values.computeDomains.enabled }}}}\n\
         # Generated from graft-compute-domain's types: \
         cargo run -p graft-compute-domain -- --print-crd\n{}\n{{{{- end }}}}\n",
        serde_json::to_string_pretty(&crd)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derive_says_what_the_constants_say() {
        use kube::Resource;
        assert_eq!(ComputeDomain::group(&()), GROUP);
        assert_eq!(ComputeDomain::version(&()), VERSION);
        assert_eq!(ComputeDomain::kind(&()), KIND);
        assert_eq!(ComputeDomain::plural(&()), PLURAL);
    }

    #[test]
    fn spec_reads_the_documented_shape() {
        let spec: ComputeDomainSpec = serde_json::from_value(serde_json::json!({
            "numNodes": 2,
            "channel": {"resourceClaimTemplate": {"name": "w"}, "allocationMode": "All"}
        }))
        .unwrap();
        assert_eq!(spec.num_nodes, 2);
        assert_eq!(spec.channel.allocation_mode, AllocationMode::All);
        let status = serde_json::to_value(NodeStatus {
            name: "n".into(),
            ip_address: "10.0.0.1".into(),
            clique_id: "u.1".into(),
            status: Readiness::Ready,
            index: None,
        })
        .unwrap();
        assert_eq!(status[crate::attributes::CLIQUE_ID], "u.1");
        assert_eq!(status["ipAddress"], "10.0.0.1");
    }

    #[test]
    fn crd_is_namespaced_v1alpha1() {
        let crd: serde_json::Value = serde_json::from_str(&crd_json().unwrap()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
        assert_eq!(crd["metadata"]["name"], "computedomains.resource.graft.dev");
    }
}
