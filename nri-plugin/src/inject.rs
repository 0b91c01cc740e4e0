//! Turns the records of a pod into the edits for one of its containers.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use graft_proto::nri;
use graft_record::env::is_graft_owned;
use graft_record::{
    ClaimRecord, ContainerEdits, DeviceNode, EnvVar, HookStage, InjectionPolicy, InvalidRecord,
    INJECTED_ANNOTATION,
};
use serde::Serialize;

/// What one container receives from all the claims its pod holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The merged edits of every claim.
    pub edits: ContainerEdits,
    /// One per claim that contributed, in record order.
    pub grants: Vec<Grant>,
    /// Which claim (`namespace/name`) set each variable of `edits.env`.
    pub env_owners: BTreeMap<String, String>,
}

/// One claim's contribution, as listed in the `graft.dev/injected` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The claim as `namespace/name`.
    pub claim: String,
    /// The claim's UID.
    pub uid: String,
    /// The devices of the claim this container receives, by name.
    pub devices: Vec<String>,
}

/// Two claims asked for incompatible things in one container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {key:?} is requested differently by claims {first} and {second}")]
pub struct Conflict {
    /// The kind of thing both claims set (`device node`, `mount destination`, ...).
    pub what: &'static str,
    /// Which one: a path or a variable name.
    pub key: String,
    /// The claim that set it first (`namespace/name`).
    pub first: String,
    /// The claim that set it differently.
    pub second: String,
}

/// Why a container cannot be given what its pod's records say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Two claims disagree.
    #[error(transparent)]
    Conflict(#[from] Conflict),
    /// A claim sets a variable the container's own spec sets; values unnamed: they may be secret.
    #[error(
        "claim {claim} sets environment variable {name}, which the container's own spec (its \
         pod or image) already sets; a claim may add variables but not replace the \
         container's own"
    )]
    Overrides {
        /// The claim that sets it (`namespace/name`).
        claim: String,
        /// The variable.
        name: String,
    },
    /// A record asks for something the node's injection policy does not allow.
    #[error("claim {claim}: its record breaks graft's injection policy: {source}")]
    Policy {
        /// The claim whose record it is (`namespace/name`).
        claim: String,
        /// What the policy refused.
        #[source]
        source: InvalidRecord,
    },
}

/// Merges what `container` of pod `pod_uid` receives from `claims`; `None` when nothing. Equal
/// repeats merge, differing ones conflict. Every device the container receives must pass `policy`.
pub fn plan<R: Borrow<ClaimRecord>>(
    claims: &[R],
    pod_uid: &str,
    container: &str,
    policy: &InjectionPolicy,
) -> Result<Option<Plan>, PlanError> {
    let mut plan = Plan::default();
    let mut nodes: BTreeMap<&str, (&DeviceNode, String)> = BTreeMap::new();
    let mut mounts: BTreeMap<&str, String> = BTreeMap::new();
    let mut env: BTreeMap<&str, (&str, String)> = BTreeMap::new();

    for rec in claims {
        let rec = rec.borrow();
        let devices = rec.devices_for(pod_uid, container);
        if devices.is_empty() {
            continue;
        }
        let owner = format!("{}/{}", rec.claim.namespace, rec.claim.name);
        // The claim's own variables (record version 2) come before its devices' own.
        add_env(&mut plan, &mut env, &rec.env, &owner)?;
        for dev in &devices {
            let e = &dev.edits;
            policy
                .check_edits(&format!("devices({}).edits", dev.name), e)
                .map_err(|source| PlanError::Policy {
                    claim: rec.claim.to_string(),
                    source,
                })?;
            for node in &e.device_nodes {
                match nodes.get(node.path.as_str()) {
                    Some((prev, _)) if *prev == node => continue,
                    Some((_, first)) => {
                        return Err(PlanError::Conflict(Conflict {
                            what: "device node",
                            key: node.path.clone(),
                            first: first.clone(),
                            second: owner,
                        }))
                    }
                    None => {
                        nodes.insert(&node.path, (node, owner.clone()));
                        plan.edits.device_nodes.push(node.clone());
                    }
                }
            }
            for m in &e.mounts {
                match mounts.get(m.destination.as_str()) {
                    Some(_) if plan.edits.mounts.iter().any(|x| x == m) => continue,
                    Some(first) => {
                        return Err(PlanError::Conflict(Conflict {
                            what: "mount destination",
                            key: m.destination.clone(),
                            first: first.clone(),
                            second: owner,
                        }))
                    }
                    None => {
                        mounts.insert(&m.destination, owner.clone());
                        plan.edits.mounts.push(m.clone());
                    }
                }
            }
            add_env(&mut plan, &mut env, &e.env, &owner)?;
            for h in &e.hooks {
                if !plan.edits.hooks.contains(h) {
                    plan.edits.hooks.push(h.clone());
                }
            }
        }
        plan.grants.push(Grant {
            claim: owner,
            uid: rec.claim.uid.clone(),
            devices: devices.iter().map(|d| d.name.clone()).collect(),
        });
    }
    Ok(if plan.grants.is_empty() {
        None
    } else {
        Some(plan)
    })
}

/// Adds `vars` (from claim `owner`) to the plan; `seen` holds each variable's value and
/// claim so far. The same value twice is merged; another value is a conflict.
fn add_env<'a>(
    plan: &mut Plan,
    seen: &mut BTreeMap<&'a str, (&'a str, String)>,
    vars: &'a [EnvVar],
    owner: &str,
) -> Result<(), PlanError> {
    for v in vars {
        match seen.get(v.name.as_str()) {
            Some((value, _)) if *value == v.value => continue,
            Some((_, first)) => {
                return Err(PlanError::Conflict(Conflict {
                    what: "environment variable",
                    key: v.name.clone(),
                    first: first.clone(),
                    second: owner.to_string(),
                }))
            }
            None => {
                seen.insert(&v.name, (&v.value, owner.to_string()));
                plan.env_owners.insert(v.name.clone(), owner.to_string());
                plan.edits.env.push(v.clone());
            }
        }
    }
    Ok(())
}

impl Plan {
    /// Refuses a variable of the plan that `container_env` (the container's spec as the
    /// runtime built it, `NAME=value` entries) already sets to another value: NRI would
    /// replace it, and whoever wrote the claim need not be whoever wrote the pod
    /// (`HTTPS_PROXY`, `NODE_OPTIONS`, `KUBERNETES_SERVICE_HOST`). Variables graft owns are
    /// exempt: graft must win over an image that sets them (CUDA images set
    /// `NVIDIA_VISIBLE_DEVICES=all`), and claim configuration cannot set them.
    pub fn check_container_env(&self, container_env: &[String]) -> Result<(), PlanError> {
        if self.edits.env.is_empty() {
            return Ok(());
        }
        // A plan sets a few variables: a scan per variable beats building a map of the
        // container's whole environment. The last entry of a name is the one in force.
        let value_of = |name: &str| {
            container_env
                .iter()
                .rev()
                .map(|kv| kv.split_once('=').unwrap_or((kv.as_str(), "")))
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
        };
        for v in &self.edits.env {
            match value_of(&v.name) {
                Some(value) if value != v.value && !is_graft_owned(&v.name) => {
                    return Err(PlanError::Overrides {
                        claim: self.env_owners.get(&v.name).cloned().unwrap_or_default(),
                        name: v.name.clone(),
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The annotation value: a JSON list of claims and their device names.
    pub fn annotation(&self) -> String {
        serde_json::to_string(&self.grants).unwrap_or_else(|_| "[]".into())
    }

    /// The NRI adjustment for this plan.
    pub fn adjustment(&self) -> nri::ContainerAdjustment {
        self.adjustment_with(self.annotation())
    }

    /// The NRI adjustment for this plan, whose [`Plan::annotation`] the caller already has.
    pub fn adjustment_with(&self, annotation: String) -> nri::ContainerAdjustment {
        let mut adj = nri::ContainerAdjustment::new();
        adj.annotations
            .insert(INJECTED_ANNOTATION.to_string(), annotation);

        let mut linux = nri::LinuxContainerAdjustment::new();
        for n in &self.edits.device_nodes {
            linux.devices.push(device(n));
        }
        if !linux.devices.is_empty() {
            adj.linux = Some(linux).into();
        }
        for m in &self.edits.mounts {
            let mut options = m.options.clone();
            // runc bind-mounts only when told to by an option; a bind without one fails.
            if m.kind == "bind" && !options.iter().any(|o| o == "bind" || o == "rbind") {
                options.push("rbind".into());
            }
            adj.mounts.push(nri::Mount {
                destination: m.destination.clone(),
                type_: m.kind.clone(),
                source: m.source.clone(),
                options,
                ..Default::default()
            });
        }
        for v in &self.edits.env {
            adj.env.push(nri::KeyValue {
                key: v.name.clone(),
                value: v.value.clone(),
                ..Default::default()
            });
        }
        if !self.edits.hooks.is_empty() {
            let mut hooks = nri::Hooks::new();
            for h in &self.edits.hooks {
                let hook = nri::Hook {
                    path: h.path.clone(),
                    args: h.args.clone(),
                    env: h.env.clone(),
                    timeout: h
                        .timeout
                        .map(|t| nri::OptionalInt {
                            value: t,
                            ..Default::default()
                        })
                        .into(),
                    ..Default::default()
                };
                match h.stage {
                    HookStage::Prestart => hooks.prestart.push(hook),
                    HookStage::CreateRuntime => hooks.create_runtime.push(hook),
                    HookStage::CreateContainer => hooks.create_container.push(hook),
                    HookStage::StartContainer => hooks.start_container.push(hook),
                    HookStage::Poststart => hooks.poststart.push(hook),
                    HookStage::Poststop => hooks.poststop.push(hook),
                }
            }
            adj.hooks = Some(hooks).into();
        }
        adj
    }

    /// Why a running container does not carry this plan, or `None` if it does. Device
    /// nodes and the annotation are what the runtime keeps in the stored spec.
    pub fn missing_from(&self, ctr: &nri::Container) -> Option<String> {
        let have = ctr
            .linux
            .as_ref()
            .map(|l| l.devices.as_slice())
            .unwrap_or(&[]);
        self.missing(have, &ctr.annotations)
    }

    /// Why a pending adjustment (what every plugin asked for, before the container is
    /// made) does not carry this plan, or `None` if it does.
    pub fn missing_from_adjustment(&self, adj: &nri::ContainerAdjustment) -> Option<String> {
        let have = adj
            .linux
            .as_ref()
            .map(|l| l.devices.as_slice())
            .unwrap_or(&[]);
        self.missing(have, &adj.annotations)
    }

    fn missing(
        &self,
        have: &[nri::LinuxDevice],
        annotations: &std::collections::HashMap<String, String>,
    ) -> Option<String> {
        for n in &self.edits.device_nodes {
            let found = have.iter().any(|d| {
                d.path == n.path
                    && d.type_ == n.kind.as_str()
                    && d.major == n.major
                    && d.minor == n.minor
            });
            if !found {
                return Some(format!(
                    "device {} ({} {}:{}) is not in its spec",
                    n.path,
                    n.kind.as_str(),
                    n.major,
                    n.minor
                ));
            }
        }
        if !annotations.contains_key(INJECTED_ANNOTATION) {
            return Some(format!("annotation {INJECTED_ANNOTATION} is missing"));
        }
        None
    }
}

fn device(n: &DeviceNode) -> nri::LinuxDevice {
    nri::LinuxDevice {
        path: n.path.clone(),
        type_: n.kind.as_str().to_string(),
        major: n.major,
        minor: n.minor,
        file_mode: n
            .file_mode
            .map(|v| nri::OptionalFileMode {
                value: v,
                ..Default::default()
            })
            .into(),
        uid: n
            .uid
            .map(|v| nri::OptionalUInt32 {
                value: v,
                ..Default::default()
            })
            .into(),
        gid: n
            .gid
            .map(|v| nri::OptionalUInt32 {
                value: v,
                ..Default::default()
            })
            .into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
