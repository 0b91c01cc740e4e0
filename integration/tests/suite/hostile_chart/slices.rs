//! ResourceSlices: only graft.dev's, only of the node's own.

use anyhow::ensure;
use graft_integration::apiserver::ControlPlane;
use graft_integration::Testbed;

use super::{install_policies, kubectl_file, refused_by, until_active, GRAFT_SA};

fn slice(name: &str, driver: &str, node: Option<&str>) -> String {
    let placement = match node {
        Some(n) => format!("nodeName: {n}"),
        None => "allNodes: true".into(),
    };
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: {name}\n\
         spec:\n  driver: {driver}\n  {placement}\n\
         \x20 pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n\
         \x20 devices: [{{name: dev0}}]\n"
    )
}

/// kubectl as graft-driver's service account on `node`, as a pod-bound token makes it.
fn as_node(cp: &ControlPlane, node: &str, args: &[&str]) -> anyhow::Result<String> {
    let extra = format!("--as-user-extra=authentication.kubernetes.io/node-name={node}");
    let mut all = vec!["--as", GRAFT_SA, &extra];
    all.extend(args);
    cp.kubectl(&all)
}

/// A PUT of `yaml` (labelled `taken=yes`) as node-a's graft-driver, which may not get
/// slices (kubectl label would).
fn update(cp: &ControlPlane, yaml: String) -> anyhow::Result<String> {
    let yaml = yaml.replacen("metadata:\n", "metadata:\n  labels: {taken: \"yes\"}\n", 1);
    kubectl_file(
        cp,
        "update.yaml",
        &yaml,
        &[
            "--as",
            GRAFT_SA,
            "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
            "replace",
        ],
    )
}

fn refused(r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    refused_by("graft-resourceslices-own-node", r, why)
}

/// A compromised node's graft-driver tries to write slices it must not: another driver's
/// (new, or one that exists on its node: update and delete), another node's, one for all
/// nodes. Every attempt is refused; its own graft.dev slices it writes as before.
#[test]
fn a_node_writes_only_graft_slices_of_its_own_node() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    install_policies(&tb, cp)?;

    // Active once another node's slice is refused (RBAC and the policy both arrive late).
    let probe = slice("probe-node-b", "graft.dev", Some("node-b"));
    until_active(|| {
        match kubectl_file(
            cp,
            "probe.yaml",
            &probe,
            &[
                "--as",
                GRAFT_SA,
                "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
                "create",
            ],
        ) {
            Ok(_) => {
                cp.kubectl(&["delete", "resourceslice", "probe-node-b"])?;
                Ok(false)
            }
            Err(e) => Ok(format!("{e:#}").contains("may not write ResourceSlices of node node-b")),
        }
    })?;

    // Placed by the other driver (admin here), on node-a and node-b.
    kubectl_file(
        cp,
        "theirs.yaml",
        &(slice("theirs-node-a", "gpu.example.com", Some("node-a"))
            + "---\n"
            + &slice("graft-node-b", "graft.dev", Some("node-b"))),
        &["create"],
    )?;

    let mut attacks = 0;
    let attack = |name: &str, yaml: String| {
        kubectl_file(
            cp,
            &format!("{name}.yaml"),
            &yaml,
            &[
                "--as",
                GRAFT_SA,
                "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
                "create",
            ],
        )
    };
    refused(
        attack(
            "foreign-driver",
            slice("foreign-driver", "gpu.example.com", Some("node-a")),
        ),
        "another driver's name on its own node",
    )?;
    attacks += 1;
    refused(
        attack("all-nodes", slice("all-nodes", "graft.dev", None)),
        "a slice for all nodes",
    )?;
    attacks += 1;
    refused(
        update(
            cp,
            slice("theirs-node-a", "gpu.example.com", Some("node-a")),
        ),
        "updating another driver's slice on its own node",
    )?;
    attacks += 1;
    refused(
        as_node(
            cp,
            "node-a",
            &["delete", "--wait=false", "resourceslice", "theirs-node-a"],
        ),
        "deleting another driver's slice on its own node",
    )?;
    attacks += 1;
    refused(
        update(cp, slice("graft-node-b", "graft.dev", Some("node-b"))),
        "updating another node's slice",
    )?;
    attacks += 1;
    refused(
        as_node(
            cp,
            "node-a",
            &["delete", "--wait=false", "resourceslice", "graft-node-b"],
        ),
        "deleting another node's slice",
    )?;
    attacks += 1;
    // None of them changed anything.
    let theirs = cp.kubectl(&[
        "get",
        "resourceslice",
        "theirs-node-a",
        "graft-node-b",
        "-o",
        "jsonpath={.items[*].metadata.labels}",
    ])?;
    ensure!(!theirs.contains("taken"), "{theirs}");
    ensure!(
        cp.kubectl(&["get", "resourceslice", "foreign-driver"])
            .is_err()
            && cp.kubectl(&["get", "resourceslice", "all-nodes"]).is_err()
    );
    eprintln!("{attacks} slice attacks, 0 accepted");

    // graft-driver's own work goes on: create, update, delete its node's graft.dev slice.
    attack("own", slice("own-node-a", "graft.dev", Some("node-a")))?;
    update(cp, slice("own-node-a", "graft.dev", Some("node-a")))?;
    as_node(
        cp,
        "node-a",
        &["delete", "--wait=false", "resourceslice", "own-node-a"],
    )?;
    Ok(())
}
