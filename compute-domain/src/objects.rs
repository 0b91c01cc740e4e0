//! The objects a domain owns: the workload ResourceClaimTemplate in the domain's namespace,
//! and the IMEX daemon DaemonSet and its ResourceClaimTemplate in graft's namespace.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::Resource;
use serde_json::json;

use crate::clique::{CLIQUE_ATTRIBUTE, DRIVER};

use crate::crd::{AllocationMode, ComputeDomain};
use crate::members::member_affinity;
use crate::slot::{self, Placement};
use crate::Error;
pub use graft_api::attributes::CHANNEL as CHANNEL_ATTRIBUTE;
pub use graft_api::compute_domain::{
    daemon_name, node_label, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION,
};
use graft_api::opaque::{self, ChannelConfig, Domain};

/// Where the daemon pod sees the driver root (graft-imex-daemon's default).
pub const DAEMON_DRIVER_ROOT: &str = "/driver-root";
/// The daemon's private directory for the IMEX config (graft-imex-daemon's default).
pub const DAEMON_CONFIG_DIR: &str = "/run/graft-imex";

/// What the daemon objects are made of; the chart sets it.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// graft's namespace, where the daemons run.
    pub namespace: String,
    /// The IMEX daemon's image.
    pub image: String,
    /// Its command.
    pub command: Vec<String>,
    /// Its service account, if any (it reads its domain: get, list, watch).
    pub service_account: Option<String>,
    /// The NVIDIA driver installation's root on the host (`nvidia.driverRoot`); mounted
    /// read-only at [`DAEMON_DRIVER_ROOT`] for its `nvidia-imex`.
    pub driver_root: String,
    /// The DeviceClass of the daemon's claim.
    pub device_class: String,
    /// The CEL selector of the daemon's device.
    pub device_selector: String,
    /// The DeviceClass of workload channels.
    pub channel_class: String,
    /// The daemon pods' tolerations (`computeDomains.daemonTolerations`): GPU node pools
    /// are often tainted.
    pub tolerations: Vec<Toleration>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            namespace: "graft-system".into(),
            image: "ghcr.io/graft-dev/graft:latest".into(),
            command: vec!["graft-imex-daemon".into()],
            service_account: None,
            driver_root: "/".into(),
            device_class: graft_api::classes::ANY.name.into(),
            device_selector: format!(
                "device.attributes['{DRIVER}'].?{}.orValue('') == '{}'",
                graft_api::attributes::TYPE,
                graft_api::types::IMEX_DAEMON
            ),
            channel_class: graft_api::classes::IMEX_CHANNEL.name.into(),
            tolerations: vec![Toleration {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
        }
    }
}

/// The domain's identity, or an error naming what it lacks.
pub fn identity(cd: &ComputeDomain) -> Result<(String, String, String), Error> {
    let name = cd.metadata.name.clone().unwrap_or_default();
    let ns = cd.metadata.namespace.clone().unwrap_or_default();
    let uid = cd.metadata.uid.clone().unwrap_or_default();
    if name.is_empty() || ns.is_empty() || uid.is_empty() {
        return Err(Error::Invalid {
            domain: format!("{ns}/{name}"),
            why: "no name, namespace or uid".into(),
        });
    }
    Ok((name, ns, uid))
}

fn opaque<T: serde::Serialize>(params: &T) -> Result<serde_json::Value, Error> {
    let params = serde_json::to_value(params).map_err(|e| Error::Build {
        what: "opaque configuration",
        source: e,
    })?;
    Ok(json!({"driver": DRIVER, "parameters": params}))
}

fn domain(name: &str, ns: &str, uid: &str) -> Domain {
    Domain {
        id: uid.into(),
        name: name.into(),
        namespace: ns.into(),
    }
}

/// The CEL expression that selects devices of `clique` only.
pub fn clique_selector(clique: &str) -> String {
    // Clique ids are `<uuid>.<number>`; a quote would end the literal, so it is refused
    // before (see `valid_clique`).
    format!("device.attributes['{DRIVER}'].?{CLIQUE_ATTRIBUTE}.orValue('') == '{clique}'")
}

/// The CEL expression that selects channel `slot` only (Single mode: a domain's channel
/// number is its slot on every node).
pub fn channel_selector(slot: u32) -> String {
    format!("device.attributes['{DRIVER}'].?{CHANNEL_ATTRIBUTE}.orValue(-1) == {slot}")
}

/// Whether a clique id can go into a CEL string literal as it is.
pub fn valid_clique(clique: &str) -> bool {
    !clique.is_empty()
        && clique
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The workload ResourceClaimTemplate: IMEX channels of the placement's clique only, all of
/// one clique (matchAttribute), in Single mode channel number `slot` only, with the
/// domain's uid in graft's opaque config; owned by the domain. Its claims carry the
/// domain's label and name, so that the controller sees them change.
pub fn workload_template(
    cd: &ComputeDomain,
    cfg: &DaemonConfig,
    place: &Placement,
) -> Result<ResourceClaimTemplate, Error> {
    let (name, ns, uid) = identity(cd)?;
    let owner = cd.controller_owner_ref(&()).ok_or_else(|| Error::Invalid {
        domain: format!("{ns}/{name}"),
        why: "no owner reference can be made".into(),
    })?;
    let mode = cd.spec.channel.allocation_mode;
    let mut selectors = vec![json!({"cel": {"expression": clique_selector(&place.clique)}})];
    // All mode takes every channel of the node's clique: no pin.
    if mode == AllocationMode::Single {
        selectors.push(json!({"cel": {"expression": channel_selector(place.slot)}}));
    }
    let mut request = json!({"deviceClassName": cfg.channel_class, "selectors": selectors});
    match mode {
        AllocationMode::Single => request["allocationMode"] = json!("ExactCount"),
        AllocationMode::All => request["allocationMode"] = json!("All"),
    }
    let config = ChannelConfig::new(
        &domain(&name, &ns, &uid),
        match mode {
            AllocationMode::Single => opaque::AllocationMode::Single,
            AllocationMode::All => opaque::AllocationMode::All,
        },
    );
    let t = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": cd.spec.channel.resource_claim_template.name,
            "namespace": ns,
            "labels": {DOMAIN_LABEL: uid},
            "ownerReferences": [owner],
        },
        "spec": {
            "metadata": {"labels": {DOMAIN_LABEL: uid},
                         "annotations": {NAME_ANNOTATION: name, NAMESPACE_ANNOTATION: ns}},
            "spec": {"devices": {
                "requests": [{"name": "channel", "exactly": request}],
                "constraints": [{"requests": ["channel"],
                                 "matchAttribute": graft_api::attributes::qualified(CLIQUE_ATTRIBUTE)}],
                "config": [{"requests": ["channel"], "opaque": opaque(&config)?}],
            }},
        },
    });
    serde_json::from_value(t).map_err(|e| Error::Build {
        what: "workload ResourceClaimTemplate",
        source: e,
    })
}

/// The IMEX daemon's ResourceClaimTemplate in graft's namespace: an `imex-daemon` device
/// of the domain's clique.
pub fn daemon_template(
    cd: &ComputeDomain,
    cfg: &DaemonConfig,
    place: &Placement,
) -> Result<ResourceClaimTemplate, Error> {
    let (name, ns, uid) = identity(cd)?;
    let clique = place.clique.as_str();
    let config = opaque::DaemonConfig::new(&domain(&name, &ns, &uid), clique, cd.spec.num_nodes);
    let t = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": daemon_name(&uid), "namespace": cfg.namespace,
                     "labels": {DOMAIN_LABEL: uid}},
        "spec": {
            "metadata": {"labels": {DOMAIN_LABEL: uid}},
            "spec": {"devices": {
                "requests": [{"name": "daemon", "exactly": {
                    "deviceClassName": cfg.device_class,
                    "selectors": [{"cel": {"expression": cfg.device_selector}},
                                  {"cel": {"expression": clique_selector(clique)}}],
                }}],
                "config": [{"requests": ["daemon"], "opaque": opaque(&config)?}],
            }},
        },
    });
    serde_json::from_value(t).map_err(|e| Error::Build {
        what: "daemon ResourceClaimTemplate",
        source: e,
    })
}

/// The DaemonSet of the domain's IMEX daemons: on its `members` only, on the slot's IMEX
/// ports.
pub fn daemonset(
    cd: &ComputeDomain,
    cfg: &DaemonConfig,
    place: &Placement,
    members: &BTreeSet<String>,
) -> Result<DaemonSet, Error> {
    let (name, ns, uid) = identity(cd)?;
    let clique = place.clique.as_str();
    let (server_port, cmd_port) = slot::ports(place.slot).ok_or_else(|| Error::Invalid {
        domain: format!("{ns}/{name}"),
        why: format!("slot {} has no IMEX ports", place.slot),
    })?;
    let env = json!([
        {"name": "COMPUTE_DOMAIN_UID", "value": uid},
        {"name": "COMPUTE_DOMAIN_NAME", "value": name},
        {"name": "COMPUTE_DOMAIN_NAMESPACE", "value": ns},
        {"name": "COMPUTE_DOMAIN_NUM_NODES", "value": cd.spec.num_nodes.to_string()},
        {"name": "COMPUTE_DOMAIN_CLIQUE", "value": clique},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GRAFT_IMEX_SERVER_PORT", "value": server_port.to_string()},
        {"name": "GRAFT_IMEX_CMD_PORT", "value": cmd_port.to_string()},
    ]);
    let mut probe = cfg.command.clone();
    probe.push("--check".into());
    // hostNetwork, so that POD_IP is the node's address, which the peers connect to;
    // ClusterFirstWithHostNet keeps cluster DNS for the API server's name.
    let mut pod_spec = json!({
        "affinity": member_affinity(members),
        "hostNetwork": true,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": daemon_name(&uid)}],
        "tolerations": cfg.tolerations,
        // Root (nvidia-imex opens root's device nodes) but with no capability, no
        // escalation and the runtime's seccomp profile; the chart's admission policy
        // (graft-compute-domain-daemonsets) refuses any DaemonSet of the controller without them.
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "imex",
            "image": cfg.image,
            "command": cfg.command,
            "env": env,
            "resources": {"claims": [{"name": "imex"}]},
            "securityContext": {"allowPrivilegeEscalation": false,
                                "capabilities": {"drop": ["ALL"]}},
            "readinessProbe": {"exec": {"command": probe},
                               "periodSeconds": 5, "timeoutSeconds": 10},
            "volumeMounts": [
                {"name": "driver-root", "mountPath": DAEMON_DRIVER_ROOT, "readOnly": true},
                {"name": "imex-config", "mountPath": DAEMON_CONFIG_DIR},
            ],
        }],
        "volumes": [
            {"name": "driver-root", "hostPath": {"path": cfg.driver_root, "type": "Directory"}},
            {"name": "imex-config", "emptyDir": {"medium": "Memory"}},
        ],
    });
    if let Some(sa) = &cfg.service_account {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    let ds = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": daemon_name(&uid), "namespace": cfg.namespace,
                     "labels": {DOMAIN_LABEL: uid}},
        "spec": {
            "selector": {"matchLabels": {DOMAIN_LABEL: uid}},
            // A member joining changes the template (its affinity); OnDelete keeps that
            // from replacing the other members' daemons (each a restart of the domain).
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {
                    "labels": {DOMAIN_LABEL: uid},
                    "annotations": {NAME_ANNOTATION: name, NAMESPACE_ANNOTATION: ns},
                },
                "spec": pod_spec,
            },
        },
    });
    serde_json::from_value(ds).map_err(|e| Error::Build {
        what: "DaemonSet",
        source: e,
    })
}

#[cfg(test)]
mod tests;
