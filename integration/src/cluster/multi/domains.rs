//! ComputeDomains on the multi-node testbed: graft installed with `computeDomains.enabled`
//! (the controller, the CRD, graft-imex-daemon's RBAC) and IMEX channels on every node's
//! fake, domains and the pods of their workload template as YAML, and what the tests read:
//! a domain's status and Events, a daemon's `nvidia-imex-ctl -N` table, what a container
//! sees in /dev, and what a deleted domain may not leave behind.
//!
//! The network, as cluster.sh and nodes.sh make it: the first node is in the host's
//! namespaces, the others each in their own (bridge 10.201.0.0/24). Pods on the host network
//! (graft's DaemonSet, the IMEX daemons) reach the API server from every node and each
//! other at the nodes' InternalIPs. Pods on the pod network reach nothing beyond their
//! node's bridge (the CNI config gives them no default route), so the controller (a
//! Deployment on the pod network as the chart ships it) is moved to the host network of
//! the first node here.

use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;

use super::super::gpu::GpuValues;
use super::super::workloads::BUSYBOX;
use super::{node_mount_source, MultiCluster, FIRST_NODE};

/// graft's namespace, where the controller and the IMEX daemons run.
pub const GRAFT_NS: &str = "graft-system";
/// The label on every object of a domain (the domain's uid as value); graft-compute-domain's
/// `objects::DOMAIN_LABEL`.
pub const DOMAIN_LABEL: &str = "resource.graft.dev/computeDomain";
/// Where the daemon pod mounts the driver root and keeps its IMEX config
/// (graft-compute-domain's `DAEMON_DRIVER_ROOT`, `DAEMON_CONFIG_DIR`).
const DAEMON_CTL: &str = "/driver-root/usr/bin/nvidia-imex-ctl";
const DAEMON_CONFIG: &str = "/run/graft-imex/config.cfg";
/// Where a container sees its IMEX channels (the NVIDIA driver's device directory).
pub const CHANNEL_DIR: &str = "/dev/nvidia-caps-imex-channels";

/// A node's clique as graft-driver publishes it: the cluster UUID (32 hex digits) with
/// dashes, a dot, the clique id.
pub fn clique_id(uuid_hex: &str, clique: u32) -> String {
    let u = uuid_hex;
    format!(
        "{}-{}-{}-{}-{}.{clique}",
        &u[..8],
        &u[8..12],
        &u[12..16],
        &u[16..20],
        &u[20..]
    )
}

/// A ComputeDomain `name` in `ns` of `nodes` nodes whose workload template is `template`,
/// allocation mode `mode` (`Single` or `All`).
pub fn compute_domain(ns: &str, name: &str, nodes: u32, template: &str, mode: &str) -> String {
    format!(
        r#"---
apiVersion: resource.graft.dev/v1alpha1
kind: ComputeDomain
metadata: {{name: {name}, namespace: {ns}}}
spec:
  numNodes: {nodes}
  channel:
    resourceClaimTemplate: {{name: {template}}}
    allocationMode: {mode}
"#
    )
}

/// A busybox pod `name` in `ns` whose container `app` uses the claim template `template`
/// (a domain's workload template, or any other), on `node` when given; it lists its IMEX
/// channels, prints DONE and idles. Without a node, no two pods of the template share one
/// (required pod anti-affinity), as a user spreads a domain's pods over its `numNodes`
/// nodes: a domain's channel may be allocated to several pods of one node.
pub fn template_pod(ns: &str, name: &str, template: &str, node: Option<&str>) -> String {
    let placement = match node {
        Some(n) => format!("\n  nodeSelector: {{kubernetes.io/hostname: {n}}}"),
        None => format!(
            "\n  affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             [{{labelSelector: {{matchLabels: {{graft-test/template: {template}}}}}, \
             topologyKey: kubernetes.io/hostname}}]}}}}"
        ),
    };
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{graft-test: domains, graft-test/template: {template}}}}}
spec:
  terminationGracePeriodSeconds: 1{placement}
  resourceClaims: [{{name: imex, resourceClaimTemplateName: {template}}}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls {CHANNEL_DIR}/ 2>&1; echo DONE; sleep 3600"]
    resources: {{claims: [{{name: imex}}]}}
"#
    )
}

/// A busybox pod `name` in `ns` on `node` without any claim.
pub fn plain_pod(ns: &str, name: &str, node: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{graft-test: domains}}}}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls {CHANNEL_DIR}/ 2>&1; echo DONE; sleep 3600"]
"#
    )
}

impl MultiCluster {
    /// Installs (or upgrades) graft in GPU mode with ComputeDomains on, `channels` IMEX
    /// channels per node (`nvidia.imexChannels`, and the device nodes in each fake's /dev),
    /// node `i` in `fabrics[i]`; returns once the controller runs on the first node's host
    /// network and every node in a fabric publishes its channels.
    pub fn deploy_domains(
        &self,
        fabrics: &[Option<(&str, u32)>],
        channels: u32,
    ) -> anyhow::Result<()> {
        for fake in &self.fakes {
            fake.add_imex_channels(channels)?;
        }
        let values = GpuValues {
            // On a cluster deployed before (more channels for the next test), the controller
            // Deployment holds the patch below: helm's server-side apply takes its fields back.
            helm: [
                "--set",
                "computeDomains.enabled=true",
                "--set",
                &format!("nvidia.imexChannels={channels}"),
                "--force-conflicts",
            ]
            .map(String::from)
            .to_vec(),
            ..GpuValues::default()
        };
        self.deploy_gpu_with(fabrics, &values)?;
        // The testbed's pod network does not reach the API server (see the module's
        // header), and the chart has no value for the controller's network or placement.
        let c = &self.cluster;
        let pin = format!(
            r#"{{"spec":{{"template":{{"spec":{{"hostNetwork":true,"dnsPolicy":"ClusterFirstWithHostNet","nodeSelector":{{"kubernetes.io/hostname":"{FIRST_NODE}"}}}}}}}}}}"#
        );
        let deploy = "deployment/graft-compute-domain-controller";
        c.kubectl(&["-n", GRAFT_NS, "patch", deploy, "--type=merge", "-p", &pin])?;
        c.kubectl(&[
            "-n",
            GRAFT_NS,
            "rollout",
            "status",
            deploy,
            "--timeout=120s",
        ])?;
        for (node, fabric) in self.nodes.iter().zip(fabrics) {
            if fabric.is_none() {
                continue;
            }
            super::super::wait_until(&format!("{node} published no {channels} channels"), || {
                Ok(self.slices(node)?.matches("\"imex-channel-").count() >= channels as usize)
            })?;
        }
        Ok(())
    }

    /// Domain `ns/name` as JSON.
    pub fn domain(&self, ns: &str, name: &str) -> anyhow::Result<Value> {
        let out = self
            .cluster
            .kubectl(&["-n", ns, "get", "computedomain", name, "-o", "json"])?;
        Ok(serde_json::from_str(&out)?)
    }

    /// Waits until domain `ns/name` satisfies `done`; returns it. The error shows it.
    pub fn wait_domain(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        mut done: impl FnMut(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let mut last = Value::Null;
        super::super::wait_until(&format!("domain {ns}/{name}: {what}"), || {
            last = self.domain(ns, name).unwrap_or(Value::Null);
            Ok(done(&last))
        })
        .with_context(|| format!("the domain: {last:#}\n{}", self.domain_state(ns)))?;
        Ok(last)
    }

    /// The names of the nodes of domain `ns/name`'s status whose `status` is `Ready`.
    pub fn ready_members(&self, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
        let d = self.domain(ns, name)?;
        Ok(ready_nodes(&d))
    }

    /// The IMEX daemon pod of domain `uid` on `node`, if one is there.
    pub fn daemon_pod(&self, uid: &str, node: &str) -> anyhow::Result<Option<String>> {
        let label = format!("{DOMAIN_LABEL}={uid}");
        let field = format!("spec.nodeName={node}");
        let out = self.cluster.kubectl(&[
            "-n",
            GRAFT_NS,
            "get",
            "pods",
            "-l",
            &label,
            "--field-selector",
            &field,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])?;
        Ok(out.split_whitespace().next().map(str::to_string))
    }

    /// `nvidia-imex-ctl -N` in domain `uid`'s daemon pod on `node`: its node table.
    pub fn imex_table(&self, uid: &str, node: &str) -> anyhow::Result<String> {
        let pod = self
            .daemon_pod(uid, node)?
            .with_context(|| format!("no IMEX daemon of {uid} on {node}"))?;
        self.exec(
            GRAFT_NS,
            &pod,
            "imex",
            &[DAEMON_CTL, "-N", "-c", DAEMON_CONFIG],
        )
    }

    /// Runs `argv` in container `ctr` of pod `ns/pod` (kubectl exec); its stdout.
    pub fn exec(&self, ns: &str, pod: &str, ctr: &str, argv: &[&str]) -> anyhow::Result<String> {
        let mut args = vec!["-n", ns, "exec", pod, "-c", ctr, "--"];
        args.extend_from_slice(argv);
        self.cluster.kubectl(&args)
    }

    /// The IMEX channel nodes container `app` of pod `ns/pod` has, sorted.
    pub fn channels_in(&self, ns: &str, pod: &str) -> anyhow::Result<Vec<String>> {
        let script = format!("ls {CHANNEL_DIR}/ 2>/dev/null; true");
        let out = self.exec(ns, pod, "app", &["/bin/sh", "-c", &script])?;
        let mut v: Vec<String> = out.split_whitespace().map(str::to_string).collect();
        v.sort();
        Ok(v)
    }

    /// A node's InternalIP.
    pub fn node_ip(&self, node: &str) -> anyhow::Result<String> {
        let ip = self.cluster.kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
        ])?;
        ensure!(!ip.trim().is_empty(), "{node} has no InternalIP");
        Ok(ip.trim().to_string())
    }

    /// The Events of domain `ns/name`, one `reason: message` a line.
    pub fn domain_events(&self, ns: &str, name: &str) -> anyhow::Result<String> {
        let field = format!("involvedObject.kind=ComputeDomain,involvedObject.name={name}");
        self.cluster.kubectl(&[
            "-n",
            ns,
            "get",
            "events",
            "--field-selector",
            &field,
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ])
    }

    /// How many claim records graft keeps on `node` (prepared claims).
    pub fn claim_records(&self, node: &str) -> usize {
        let dir = match node.strip_prefix("graft-node-") {
            Some(i) => node_mount_source(i.parse().unwrap_or(0), "/var/lib/graft").join("claims"),
            None => "/var/lib/graft/claims".into(),
        };
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    /// What domain `uid` (deleted, its pods gone) left: the domain, node labels, claims,
    /// claim templates, DaemonSets and daemon pods labelled for it, graft's claim records on
    /// any node. Empty when nothing.
    pub fn domain_leftovers(&self, ns: &str, name: &str, uid: &str) -> anyhow::Result<Vec<String>> {
        let c = &self.cluster;
        let mut left = Vec::new();
        let mut add = |what: &str, out: String| {
            left.extend(out.split_whitespace().map(|o| format!("{what} {o}")));
        };
        add(
            "domain",
            c.kubectl(&[
                "-n",
                ns,
                "get",
                "computedomain",
                name,
                "--ignore-not-found",
                "-o",
                "name",
            ])?,
        );
        let key = format!("{DOMAIN_LABEL}.{uid}");
        add(
            "label on",
            c.kubectl(&["get", "nodes", "-l", &key, "-o", "name"])?,
        );
        let label = format!("{DOMAIN_LABEL}={uid}");
        for kind in [
            "resourceclaims",
            "resourceclaimtemplates",
            "daemonsets",
            "pods",
        ] {
            add(
                "labelled",
                c.kubectl(&["get", kind, "-A", "-l", &label, "-o", "name"])?,
            );
        }
        for node in &self.nodes {
            let n = self.claim_records(node);
            if n > 0 {
                left.push(format!("{n} claim records on {node}"));
            }
        }
        Ok(left)
    }

    /// Waits until domain `uid` left nothing (see [`MultiCluster::domain_leftovers`]).
    pub fn wait_domain_gone(&self, ns: &str, name: &str, uid: &str) -> anyhow::Result<()> {
        let mut left = Vec::new();
        super::super::wait_until(&format!("domain {ns}/{name} left things behind"), || {
            left = self.domain_leftovers(ns, name, uid)?;
            Ok(left.is_empty())
        })
        .with_context(|| format!("{left:?}"))?;
        Ok(())
    }

    /// Waits until no claim is left in `ns` and graft keeps no claim record on any node.
    pub fn wait_unprepared(&self, ns: &str) -> anyhow::Result<()> {
        super::super::wait_until(&format!("claims of {ns} left prepared"), || {
            let claims =
                self.cluster
                    .kubectl(&["-n", ns, "get", "resourceclaims", "-o", "name"])?;
            Ok(claims.trim().is_empty() && self.nodes.iter().all(|n| self.claim_records(n) == 0))
        })?;
        Ok(())
    }

    /// What a failed domain test needs explained: domains, claims, graft's pods and the
    /// controller's and daemons' last log lines.
    pub fn domain_state(&self, ns: &str) -> String {
        let get = |args: &[&str]| {
            self.cluster
                .kubectl(args)
                .unwrap_or_else(|e| format!("kubectl {}: {e:#}\n", args.join(" ")))
        };
        format!(
            "--- domains\n{}--- pods\n{}--- claims\n{}--- events\n{}--- controller\n{}--- daemons\n{}",
            get(&["-n", ns, "get", "computedomains", "-o", "yaml"]),
            get(&["get", "pods", "-A", "-o", "wide"]),
            get(&["get", "resourceclaims", "-A", "-o", "yaml"]),
            get(&["get", "events", "-A", "--sort-by=.lastTimestamp"]),
            get(&["-n", GRAFT_NS, "logs", "deployment/graft-compute-domain-controller", "--tail", "40"]),
            get(&["-n", GRAFT_NS, "logs", "-l", DOMAIN_LABEL, "--prefix", "--tail", "20"]),
        )
    }
}

/// The Ready members of a domain (JSON), by name.
pub fn ready_nodes(domain: &Value) -> Vec<String> {
    domain["status"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["status"] == "Ready")
        .filter_map(|n| n["name"].as_str().map(str::to_string))
        .collect()
}

/// Whether a domain (JSON) says Ready.
pub fn is_ready(domain: &Value) -> bool {
    domain["status"]["status"] == "Ready"
}

/// How long the tests watch a Pending pod to see that it stays so.
pub const STAYS: Duration = Duration::from_secs(15);
