//! The container `explain` is asked about, in the forms operators copy from kubectl and
//! crictl: `containerd://<id>` (a pod's `status.containerStatuses[].containerID`), a bare id
//! or a unique prefix of one (crictl), or `namespace/pod[/container]`.

use graft_record::names::{is_dns_label, is_dns_subdomain};
use std::path::Path;

use anyhow::bail;
use graft_record::containers::{entry_ids, find_entry, read_entry, ContainerEntry, Lookup};

use crate::claims::{self, Loaded};
use crate::table::clean;

/// A parsed container argument.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// A runtime id, or a prefix of one.
    Id(String),
    /// A pod by namespace and name, and one of its containers by name.
    Pod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        pod: String,
        /// The container's name; `None` when the pod has one.
        container: Option<String>,
    },
}

/// The container found, and the ids of its earlier instances (restarts) still recorded.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The newest matching container's id.
    pub id: String,
    /// Older instances of the same container, newest first.
    pub earlier: Vec<String>,
}

/// How many candidates an error lists before it says how many more there are.
const LISTED: usize = 20;

/// Parses `arg`; an error names the argument and the forms accepted.
pub fn parse(arg: &str) -> anyhow::Result<Target> {
    if let Some((scheme, id)) = arg.split_once("://") {
        if scheme != "containerd" {
            bail!(
                "container {arg:?}: graft works with containerd, so a runtime id is \
                 containerd://<id>, not {scheme}://"
            );
        }
        // kubectl shows the full id: 64 lowercase hex digits.
        if id.len() != 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            bail!(
                "container {arg:?}: expected containerd://<64 hex digits>, as a pod's \
                 status.containerStatuses[].containerID shows it"
            );
        }
        return Ok(Target::Id(id.to_string()));
    }
    if !arg.contains('/') {
        return Ok(Target::Id(arg.to_string()));
    }
    let parts: Vec<&str> = arg.split('/').collect();
    let ok = matches!(parts.len(), 2 | 3)
        && is_dns_label(parts[0])
        && is_dns_subdomain(parts[1])
        && parts.get(2).is_none_or(|c| is_dns_label(c));
    if !ok {
        bail!(
            "container {arg:?} is not a valid container reference: expected \
             namespace/pod[/container] with Kubernetes names \
             (lowercase letters, digits, '-'; '.' in a pod's name), containerd://<id>, or a \
             container id or prefix"
        );
    }
    Ok(Target::Pod {
        namespace: parts[0].into(),
        pod: parts[1].into(),
        container: parts.get(2).map(|c| c.to_string()),
    })
}

/// The container `target` names among graft-nri's entries in `root`; `arg` is the argument
/// as given, for errors.
pub fn resolve(root: &Path, target: &Target, arg: &str) -> anyhow::Result<Resolved> {
    let (namespace, pod, container) = match target {
        Target::Id(id) => return by_id(root, id, arg),
        Target::Pod {
            namespace,
            pod,
            container,
        } => (namespace, pod, container),
    };
    let (entries, unreadable) = all_entries(root)?;
    let in_pod: Vec<&ContainerEntry> = entries
        .iter()
        .filter(|e| &e.pod.namespace == namespace && &e.pod.name == pod)
        .collect();
    if in_pod.is_empty() {
        return Err(no_pod(root, namespace, pod, &entries, unreadable));
    }
    let mut names: Vec<&str> = in_pod.iter().map(|e| e.container.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let name = match container {
        Some(c) if names.contains(&c.as_str()) => c.as_str(),
        Some(c) => bail!(
            "container {arg:?}: pod {namespace}/{pod} has no container {c:?} that graft injected into; \
             its containers with graft's devices: {}",
            clean(&names.join(", "))
        ),
        None if names.len() == 1 => names[0],
        None => bail!(
            "container {arg:?}: pod {namespace}/{pod} has {} containers with graft's devices ({}); \
             name one: {namespace}/{pod}/<container>",
            names.len(),
            clean(&names.join(", "))
        ),
    };
    // Several entries for one name: a restarted container (the kubelet keeps the last dead
    // one) or a pod made again under the same name. The newest is the one running.
    let mut same: Vec<&ContainerEntry> =
        in_pod.into_iter().filter(|e| e.container == name).collect();
    same.sort_by(|a, b| b.injected_ms.cmp(&a.injected_ms).then(a.id.cmp(&b.id)));
    let mut ids = same.into_iter().map(|e| e.id.clone());
    let id = ids.next().unwrap_or_default();
    Ok(Resolved {
        id,
        earlier: ids.collect(),
    })
}

fn by_id(root: &Path, id: &str, arg: &str) -> anyhow::Result<Resolved> {
    let id = match find_entry(root, id)? {
        Lookup::Found(id) => id,
        Lookup::None => bail!(
            "no container {arg:?} in {}: graft injected nothing into it, or it was removed",
            root.join("containers").display()
        ),
        Lookup::Ambiguous(ids) => bail!(
            "container id prefix {arg:?} is ambiguous: {}",
            ids.join(", ")
        ),
    };
    Ok(Resolved {
        id,
        earlier: Vec::new(),
    })
}

/// Every entry that can be read, and how many could not (a planted or oversized file must
/// not stop the lookup of another pod).
fn all_entries(root: &Path) -> anyhow::Result<(Vec<ContainerEntry>, usize)> {
    let mut out = Vec::new();
    let mut unreadable = 0;
    for id in entry_ids(root)? {
        match read_entry(root, &id) {
            Ok(Some(e)) => out.push(e),
            // Removed while listing: the container is gone.
            Ok(None) => {}
            Err(_) => unreadable += 1,
        }
    }
    Ok((out, unreadable))
}

/// No entry for the pod: say whether graft's claim records know it, and which pods it has
/// entries for.
fn no_pod(
    root: &Path,
    namespace: &str,
    pod: &str,
    entries: &[ContainerEntry],
    unreadable: usize,
) -> anyhow::Error {
    let held: Vec<String> = claims::load(root)
        .unwrap_or_default()
        .iter()
        .filter_map(|l| match l {
            Loaded::Ok(rec) => rec
                .pods
                .iter()
                .any(|p| p.namespace == namespace && p.name == pod)
                .then(|| format!("{}/{}", rec.claim.namespace, rec.claim.name)),
            Loaded::Unreadable { .. } => None,
        })
        .collect();
    if !held.is_empty() {
        return anyhow::anyhow!(
            "pod {namespace}/{pod} holds claim {} on this node, but graft injected into none \
             of its containers yet (is graft-nri running? graftctl status)",
            clean(&held.join(", "))
        );
    }
    let mut pods: Vec<String> = entries
        .iter()
        .map(|e| format!("{}/{}", e.pod.namespace, e.pod.name))
        .collect();
    pods.sort_unstable();
    pods.dedup();
    let pods: Vec<String> = pods.iter().map(|p| clean(p)).collect();
    let listed = if pods.is_empty() {
        "none".to_string()
    } else if pods.len() > LISTED {
        format!(
            "{}, and {} more",
            pods[..LISTED].join(", "),
            pods.len() - LISTED
        )
    } else {
        pods.join(", ")
    };
    let skipped = if unreadable > 0 {
        format!(" ({unreadable} entries unreadable)")
    } else {
        String::new()
    };
    anyhow::anyhow!(
        "no pod {namespace}/{pod} among the containers graft injected into on this node; \
         pods here: {listed}{skipped}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::record;
    use graft_record::containers::{write_entry, AppliedEdits, PodRef, CONTAINER_ENTRY_VERSION};
    use graft_record::RecordStore;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn entry(id: &str, ns: &str, pod: &str, container: &str, at: u64) -> ContainerEntry {
        ContainerEntry {
            version: CONTAINER_ENTRY_VERSION,
            id: id.into(),
            pod: PodRef {
                uid: format!("uid-{pod}"),
                namespace: ns.into(),
                name: pod.into(),
            },
            container: container.into(),
            injected_ms: at,
            records: Vec::new(),
            edits: AppliedEdits::default(),
        }
    }

    fn pod(ns: &str, pod: &str, container: Option<&str>) -> Target {
        Target::Pod {
            namespace: ns.into(),
            pod: pod.into(),
            container: container.map(str::to_string),
        }
    }

    #[test]
    fn forms_kubectl_and_crictl_show() {
        assert_eq!(
            parse(&format!("containerd://{ID}")).unwrap(),
            Target::Id(ID.into())
        );
        assert_eq!(parse("0123ab").unwrap(), Target::Id("0123ab".into()));
        assert_eq!(parse("demo/web").unwrap(), pod("demo", "web", None));
        assert_eq!(
            parse("demo/web-0.x/app").unwrap(),
            pod("demo", "web-0.x", Some("app"))
        );
        for (bad, needle) in [
            ("docker://abc", "not docker://"),
            ("containerd://0123", "64 hex digits"),
            (
                &format!("containerd://{}", ID.to_uppercase()),
                "64 hex digits",
            ),
            ("demo/", "not a valid"),
            ("/web", "not a valid"),
            ("Demo/web", "not a valid"),
            ("demo/web/app/x", "not a valid"),
            ("demo/web/a.b", "not a valid"),
            ("../x", "not a valid"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(needle) && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn pods_and_containers_by_name() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let at = |e: &ContainerEntry| write_entry(root, e).unwrap();
        at(&entry("aaa1", "demo", "one", "app", 5));
        at(&entry("bbb1", "demo", "two", "app", 5));
        at(&entry("bbb2", "demo", "two", "side", 5));
        // A restart: the kubelet keeps the dead instance, graft its entry.
        at(&entry("ccc-old", "demo", "three", "app", 1));
        at(&entry("ccc-new", "demo", "three", "app", 9));
        let r = |t: Target| resolve(root, &t, "arg");

        assert_eq!(r(pod("demo", "one", None)).unwrap().id, "aaa1");
        assert_eq!(r(pod("demo", "two", Some("side"))).unwrap().id, "bbb2");
        let three = r(pod("demo", "three", None)).unwrap();
        assert_eq!(
            (three.id.as_str(), three.earlier),
            ("ccc-new", vec!["ccc-old".into()])
        );
        assert_eq!(r(Target::Id("ccc-o".into())).unwrap().id, "ccc-old");

        let e = r(pod("demo", "two", None)).unwrap_err().to_string();
        assert!(e.contains("2 containers") && e.contains("app, side"), "{e}");
        let e = r(pod("demo", "two", Some("db"))).unwrap_err().to_string();
        assert!(
            e.contains("no container \"db\"") && e.contains("app, side"),
            "{e}"
        );
        let e = r(pod("demo", "four", None)).unwrap_err().to_string();
        assert!(
            e.contains("no pod demo/four") && e.contains("demo/one, demo/three, demo/two"),
            "{e}"
        );
        let e = r(Target::Id("bbb".into())).unwrap_err().to_string();
        assert!(e.contains("ambiguous") && e.contains("bbb1, bbb2"), "{e}");

        // A pod graft's records hold but no container entry names (graft-nri down).
        RecordStore::open(root)
            .unwrap()
            .put_claim(&record())
            .unwrap();
        let e = r(pod("demo", "web", None)).unwrap_err().to_string();
        assert!(
            e.contains("holds claim demo/fuse-claim") && e.contains("graftctl status"),
            "{e}"
        );
    }
}
