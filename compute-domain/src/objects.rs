//! The objects a domain owns: the workload ResourceClaimTemplate in the domain's namespace,
//! and the IMEX daemon DaemonSet and its ResourceClaimTemplate in graft's namespace.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::Resource;
use serde_json::json;

use crate::clique::{CLIQUE_ATTRIBUTE, DRIVER};
use crate::crd::{AllocationMode, ComputeDomain};
use crate::Error;

/// The label every object of a domain carries, with the domain's uid as value; graft's
/// namespace holds objects of many domains, found by it.
pub const DOMAIN_LABEL: &str = "resource.graft.dev/computeDomain";
/// Annotations on the daemon pods naming their domain, for the controller's watch.
pub const NAME_ANNOTATION: &str = "resource.graft.dev/computeDomainName";
/// See [`NAME_ANNOTATION`].
pub const NAMESPACE_ANNOTATION: &str = "resource.graft.dev/computeDomainNamespace";
/// The opaque configuration's apiVersion, as graft-driver reads it.
pub const CONFIG_API_VERSION: &str = "graft.dev/v1alpha1";

/// The node label that puts a node in a domain (the node plugin sets it when it prepares a
/// workload claim of the domain). One key per domain, so that a node can be in two.
pub fn node_label(uid: &str) -> String {
    format!("{DOMAIN_LABEL}.{uid}")
}

/// The name of the domain's DaemonSet and daemon ResourceClaimTemplate in graft's namespace.
pub fn daemon_name(uid: &str) -> String {
    format!("imex-{uid}")
}

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
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            namespace: "graft-system".into(),
            image: "ghcr.io/graft-dev/graft:latest".into(),
            command: vec!["graft-imex-daemon".into()],
            service_account: None,
            driver_root: "/".into(),
            device_class: "graft.dev".into(),
            device_selector: "device.attributes['graft.dev'].?type.orValue('') == 'imex-daemon'"
                .into(),
            channel_class: "imex-channel.graft.dev".into(),
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

fn opaque(kind: &str, uid: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut params = json!({"apiVersion": CONFIG_API_VERSION, "kind": kind, "domainID": uid});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({"driver": DRIVER, "parameters": params})
}

/// The CEL expression that selects devices of `clique` only.
pub fn clique_selector(clique: &str) -> String {
    // Clique ids are `<uuid>.<number>`; a quote would end the literal, so it is refused
    // before (see `valid_clique`).
    format!("device.attributes['{DRIVER}'].?{CLIQUE_ATTRIBUTE}.orValue('') == '{clique}'")
}

/// Whether a clique id can go into a CEL string literal as it is.
pub fn valid_clique(clique: &str) -> bool {
    !clique.is_empty()
        && clique
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The workload ResourceClaimTemplate: IMEX channels of `clique` only, all of one clique
/// (matchAttribute), with the domain's uid in graft's opaque config; owned by the domain.
pub fn workload_template(
    cd: &ComputeDomain,
    cfg: &DaemonConfig,
    clique: &str,
) -> Result<ResourceClaimTemplate, Error> {
    let (name, ns, uid) = identity(cd)?;
    let owner = cd.controller_owner_ref(&()).ok_or_else(|| Error::Invalid {
        domain: format!("{ns}/{name}"),
        why: "no owner reference can be made".into(),
    })?;
    let mode = cd.spec.channel.allocation_mode;
    let mut request = json!({
        "deviceClassName": cfg.channel_class,
        "selectors": [{"cel": {"expression": clique_selector(clique)}}],
    });
    match mode {
        AllocationMode::Single => request["allocationMode"] = json!("ExactCount"),
        AllocationMode::All => request["allocationMode"] = json!("All"),
    }
    let mode_name = match mode {
        AllocationMode::Single => "Single",
        AllocationMode::All => "All",
    };
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
            "metadata": {"labels": {DOMAIN_LABEL: uid}},
            "spec": {"devices": {
                "requests": [{"name": "channel", "exactly": request}],
                "constraints": [{"requests": ["channel"],
                                 "matchAttribute": format!("{DRIVER}/{CLIQUE_ATTRIBUTE}")}],
                "config": [{"requests": ["channel"], "opaque": opaque(
                    "ComputeDomainChannelConfig", &uid,
                    json!({"domainName": name, "domainNamespace": ns, "allocationMode": mode_name}))}],
            }},
        },
    });
    serde_json::from_value(t).map_err(|e| Error::Build {
        what: "workload ResourceClaimTemplate",
        source: e,
    })
}

/// The IMEX daemon's ResourceClaimTemplate in graft's namespace.
pub fn daemon_template(
    cd: &ComputeDomain,
    cfg: &DaemonConfig,
    clique: &str,
) -> Result<ResourceClaimTemplate, Error> {
    let (name, ns, uid) = identity(cd)?;
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
                    "selectors": [{"cel": {"expression": cfg.device_selector}}],
                }}],
                "config": [{"requests": ["daemon"], "opaque": opaque(
                    "ComputeDomainDaemonConfig", &uid,
                    json!({"domainName": name, "domainNamespace": ns, "cliqueID": clique,
                           "numNodes": cd.spec.num_nodes}))}],
            }},
        },
    });
    serde_json::from_value(t).map_err(|e| Error::Build {
        what: "daemon ResourceClaimTemplate",
        source: e,
    })
}

/// The DaemonSet of the domain's IMEX daemons: on the nodes labelled for the domain.
pub fn daemonset(cd: &ComputeDomain, cfg: &DaemonConfig, clique: &str) -> Result<DaemonSet, Error> {
    let (name, ns, uid) = identity(cd)?;
    let env = json!([
        {"name": "COMPUTE_DOMAIN_UID", "value": uid},
        {"name": "COMPUTE_DOMAIN_NAME", "value": name},
        {"name": "COMPUTE_DOMAIN_NAMESPACE", "value": ns},
        {"name": "COMPUTE_DOMAIN_NUM_NODES", "value": cd.spec.num_nodes.to_string()},
        {"name": "COMPUTE_DOMAIN_CLIQUE", "value": clique},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]);
    let mut probe = cfg.command.clone();
    probe.push("--check".into());
    // hostNetwork, so that POD_IP is the node's address, which the peers connect to;
    // ClusterFirstWithHostNet keeps cluster DNS for the API server's name.
    let mut pod_spec = json!({
        "nodeSelector": {node_label(&uid): "true"},
        "hostNetwork": true,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": daemon_name(&uid)}],
        "containers": [{
            "name": "imex",
            "image": cfg.image,
            "command": cfg.command,
            "env": env,
            "resources": {"claims": [{"name": "imex"}]},
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
mod tests {
    use super::*;

    fn cd(mode: &str) -> ComputeDomain {
        serde_json::from_value(json!({
            "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
            "metadata": {"name": "d", "namespace": "ns", "uid": "0000-1111"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "w"},
                                                "allocationMode": mode}},
        }))
        .unwrap()
    }

    #[test]
    fn all_mode_asks_every_channel_of_the_clique() {
        let t = workload_template(&cd("All"), &DaemonConfig::default(), "u.1").unwrap();
        let spec = serde_json::to_value(&t.spec.spec).unwrap();
        let req = &spec["devices"]["requests"][0]["exactly"];
        assert_eq!(req["allocationMode"], "All");
        assert_eq!(req.get("count"), None);
        assert_eq!(
            req["selectors"][0]["cel"]["expression"],
            "device.attributes['graft.dev'].?cliqueID.orValue('') == 'u.1'"
        );
        let p = &spec["devices"]["config"][0]["opaque"]["parameters"];
        assert_eq!(p["allocationMode"], "All");
        assert_eq!(p["apiVersion"], CONFIG_API_VERSION);
        assert_eq!(t.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn daemons_run_where_the_domain_label_is() {
        let ds = daemonset(&cd("Single"), &DaemonConfig::default(), "u.1").unwrap();
        let pod = ds.spec.unwrap().template.spec.unwrap();
        let sel = pod.node_selector.unwrap();
        assert_eq!(
            sel.get("resource.graft.dev/computeDomain.0000-1111")
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(ds.metadata.name.as_deref(), Some("imex-0000-1111"));
    }

    #[test]
    fn daemon_pods_use_the_node_network_the_driver_root_and_a_readiness_check() {
        let cfg = DaemonConfig {
            driver_root: "/run/nvidia/driver".into(),
            service_account: Some("graft-imex-daemon".into()),
            command: vec!["/usr/bin/graft-imex-daemon".into()],
            ..Default::default()
        };
        let ds = daemonset(&cd("Single"), &cfg, "u.1").unwrap();
        let pod = serde_json::to_value(ds.spec.unwrap().template.spec.unwrap()).unwrap();
        assert_eq!(pod["hostNetwork"], true);
        assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
        assert_eq!(pod["serviceAccountName"], "graft-imex-daemon");
        let c = &pod["containers"][0];
        assert_eq!(
            c["readinessProbe"]["exec"]["command"],
            json!(["/usr/bin/graft-imex-daemon", "--check"])
        );
        let mount = &c["volumeMounts"][0];
        assert_eq!(mount["mountPath"], DAEMON_DRIVER_ROOT);
        assert_eq!(mount["readOnly"], true);
        assert_eq!(pod["volumes"][0]["hostPath"]["path"], "/run/nvidia/driver");
    }

    #[test]
    fn clique_ids_that_could_break_cel_are_refused() {
        assert!(valid_clique("5f1c3f7e-1b2a-4c3d-9e8f-000000000000.7"));
        assert!(!valid_clique("u.1' || true || '"));
        assert!(!valid_clique(""));
    }

    #[test]
    fn a_domain_without_uid_is_refused() {
        let mut d = cd("Single");
        d.metadata.uid = None;
        let e = identity(&d).unwrap_err().to_string();
        assert!(e.contains("ns/d"), "{e}");
    }
}
