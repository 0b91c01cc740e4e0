//! The two caches the extender scores from: graft's ResourceSlices (a field selector on
//! `spec.driver`, which the API serves for ResourceSlices) and every ResourceClaim, kept by
//! watches (kube-rs reflectors), each object reduced as it arrives to what is read
//! ([`crate::slim`], which says the memory it takes). A pod's claim the watch has not
//! brought yet is read with a GET, so a pod scheduled right after its claim was made is
//! still scored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};

use crate::prioritize::View;
use crate::slim;

/// How long a claim the cache lacks may take to GET.
const GET_TIMEOUT: Duration = Duration::from_secs(1);

/// The caches, readable while the watches run.
#[derive(Clone)]
pub struct Caches {
    slices: Store<ResourceSlice>,
    claims: Store<ResourceClaim>,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    slices_ready: Arc<AtomicBool>,
    claims_ready: Arc<AtomicBool>,
}

/// Runs one watch into `writer` until dropped, retrying with backoff; `ready` turns true
/// once its first listing is complete.
async fn keep<K>(
    api: Api<K>,
    config: watcher::Config,
    reduce: impl FnMut(&mut K) + Send,
    writer: reflector::store::Writer<K>,
    ready: Arc<AtomicBool>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(reduce)
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::InitDone) => {
                ready.store(true, Ordering::Release);
                failing = false;
            }
            Ok(_) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(kind, error = %e, "watch failed; scoring from the cache as it was until it is back");
            }
            Err(e) => tracing::debug!(kind, error = %e, "watch still failing"),
        }
    }
}

impl Caches {
    /// The caches of `driver`'s slices and every claim, and the task that keeps them (it
    /// runs until dropped).
    pub fn watch(
        client: kube::Client,
        driver: &str,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let (slices, slice_writer) = reflector::store();
        let (claims, claim_writer) = reflector::store();
        let caches = Caches {
            slices,
            claims,
            client: client.clone(),
            runtime: tokio::runtime::Handle::current(),
            slices_ready: Arc::default(),
            claims_ready: Arc::default(),
        };
        let run = {
            let (a, b) = (caches.slices_ready.clone(), caches.claims_ready.clone());
            let graft = watcher::Config::default().fields(&format!("spec.driver={driver}"));
            let (d1, d2) = (driver.to_string(), driver.to_string());
            async move {
                tokio::join!(
                    keep(
                        Api::<ResourceSlice>::all(client.clone()),
                        graft,
                        move |s| slim::slice(&d1, s),
                        slice_writer,
                        a
                    ),
                    keep(
                        Api::<ResourceClaim>::all(client),
                        watcher::Config::default(),
                        move |c| slim::claim(&d2, c),
                        claim_writer,
                        b
                    ),
                );
            }
        };
        (caches, run)
    }
}

impl View for Caches {
    fn ready(&self) -> bool {
        self.slices_ready.load(Ordering::Acquire) && self.claims_ready.load(Ordering::Acquire)
    }

    fn slices(&self) -> Vec<Arc<ResourceSlice>> {
        self.slices.state()
    }

    fn claims(&self) -> Vec<Arc<ResourceClaim>> {
        self.claims.state()
    }

    /// From the cache, or, for a claim made just now that the watch has not brought yet,
    /// with a GET (scoring runs on a blocking thread, so it may wait for it).
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        if let Some(c) = self.claims.get(&ObjectRef::new(name).within(namespace)) {
            return Some(c);
        }
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let got = self
            .runtime
            .block_on(async { tokio::time::timeout(GET_TIMEOUT, api.get_opt(name)).await });
        match got {
            Ok(Ok(c)) => c.map(Arc::new),
            Ok(Err(e)) => {
                tracing::debug!(namespace, name, error = %e, "claim GET failed");
                None
            }
            Err(_) => None,
        }
    }
}
