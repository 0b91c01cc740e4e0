//! One replica acts at a time: a standby waits while the Lease is renewed, takes over once
//! it runs out, and at once when it is given up.

use std::time::Duration;

use anyhow::ensure;
use graft_compute_domain::lease::Elector;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::Api;

use super::harness::{client, controller, domain, namespaces, wait};
use super::status_of;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_instance_waits_for_the_lease() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-lease").await?;
    // Another replica holds the lease and keeps renewing it.
    let first = Elector::new(
        c.clone(),
        &daemons,
        "lease",
        "first",
        Duration::from_secs(4),
    );
    ensure!(
        first.try_acquire_or_renew().await?,
        "the first replica could not take the lease"
    );
    let holder = tokio::spawn(async move { first.hold(Duration::from_secs(1)).await });
    let _second = controller(&c, "cd-lease", "lease", "second");
    domain(&c, "cd-lease", "d", 1, "work").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rcts = Api::<ResourceClaimTemplate>::namespaced(c.clone(), "cd-lease");
    ensure!(
        rcts.get_opt("work").await?.is_none(),
        "the second replica acted while the first led"
    );
    ensure!(status_of(&c, "cd-lease", "d").await?.is_none());
    // The first stops renewing: the second takes over once the lease runs out.
    holder.abort();
    wait(|| async { Ok(rcts.get_opt("work").await?.is_some()) }).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_given_up_is_taken_at_once() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-release").await?;
    let long = Duration::from_secs(300);
    let a = Elector::new(c.clone(), &daemons, "lease", "a", long);
    let b = Elector::new(c.clone(), &daemons, "lease", "b", long);
    ensure!(
        a.try_acquire_or_renew().await?,
        "a could not take a free lease"
    );
    ensure!(
        a.try_acquire_or_renew().await?,
        "a could not renew its lease"
    );
    ensure!(!b.try_acquire_or_renew().await?, "b took a held lease");
    // b giving up a lease it does not hold changes nothing.
    b.release().await?;
    ensure!(!b.try_acquire_or_renew().await?, "b took a held lease");
    a.release().await?;
    ensure!(
        b.try_acquire_or_renew().await?,
        "b could not take a released lease"
    );
    ensure!(!a.try_acquire_or_renew().await?, "a took b's lease back");
    Ok(())
}
