//! The controller writes a domain's DaemonSet only when it changed, and writes it again when
//! someone else deleted it or changed what it set.

use anyhow::{ensure, Context as _};
use graft_compute_domain::objects::daemon_name;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use super::harness::{client, controller, domain, namespaces, wait};

fn image(ds: &DaemonSet) -> Option<String> {
    ds.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

/// A change to the domain that wakes its reconcile without changing what it writes.
async fn touch(c: &kube::Client, n: u32) -> anyhow::Result<()> {
    let api: Api<graft_compute_domain::ComputeDomain> = Api::namespaced(c.clone(), "cd-writes");
    let patch = json!({"metadata": {"annotations": {"test/touch": n.to_string()}}});
    api.patch("d", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_deleted_or_changed_by_another_is_written_again() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-writes").await?;
    let _ctl = controller(&c, "cd-writes", "lease", "one");
    let cd = domain(&c, "cd-writes", "d", 2, "work").await?;
    let uid = cd.uid().context("uid")?;
    let name = daemon_name(&uid);
    let dss = Api::<DaemonSet>::namespaced(c.clone(), &daemons);
    wait(|| async { Ok(dss.get_opt(&name).await?.is_some()) }).await?;
    let first = dss.get(&name).await?;
    let want = image(&first).context("image")?;

    // Reconciles that change nothing leave it as it was.
    for n in 0..3 {
        touch(&c, n).await?;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let same = dss.get(&name).await?;
    ensure!(
        same.resource_version() == first.resource_version(),
        "rewritten: {:?} then {:?}",
        first.resource_version(),
        same.resource_version()
    );

    // Another changes the image the controller set: the next reconcile puts it back.
    let patch = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                        "value": "registry.invalid/other:1"}]);
    dss.patch(
        &name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch)?),
    )
    .await?;
    let mut n = 10;
    wait(|| {
        n += 1;
        let (c, dss, name, want) = (c.clone(), dss.clone(), name.clone(), want.clone());
        async move {
            touch(&c, n).await?;
            Ok(dss.get_opt(&name).await?.and_then(|d| image(&d)) == Some(want))
        }
    })
    .await?;

    // Another deletes it: it comes back.
    dss.delete(&name, &DeleteParams::default()).await?;
    wait(|| async {
        Ok(dss
            .get_opt(&name)
            .await?
            .is_none_or(|d| d.uid() != first.uid()))
    })
    .await?;
    let mut n = 100;
    wait(|| {
        n += 1;
        let (c, dss, name) = (c.clone(), dss.clone(), name.clone());
        async move {
            touch(&c, n).await?;
            Ok(dss.get_opt(&name).await?.is_some())
        }
    })
    .await?;
    Ok(())
}
