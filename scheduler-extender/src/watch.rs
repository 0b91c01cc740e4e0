//! The watches the extender scores from: graft's ResourceSlices (a field selector on
//! `spec.driver`, which the API serves for ResourceSlices), every ResourceClaim, and the
//! Nodes' metadata (for the node-pool label the fleet gauges group by). Each event goes
//! into the [`Index`] as it arrives, so a call reads only its candidates; the claims are
//! also kept, reduced ([`crate::slim`], which says the memory it takes), in a reflector
//! store, because a pod's demand reads its own claims' requests. A pod's claim the watch
//! has not brought yet is read with a GET, so a pod scheduled right after its claim was
//! made is still scored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;

use crate::index::{self, Change, Index, Slice, NO_POOL};
use crate::prioritize::View;
use crate::slim;
use crate::state::NodeGpus;

/// How long a claim the cache lacks may take to GET.
const GET_TIMEOUT: Duration = Duration::from_secs(1);
/// Objects per page of the initial lists (and relists).
const SLICE_PAGE: u32 = 50;
const CLAIM_PAGE: u32 = 10;
const NODE_PAGE: u32 = 500;

/// The index and the claims, readable while the watches run.
#[derive(Clone)]
pub struct Caches {
    index: Arc<Index>,
    claims: Store<ResourceClaim>,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    ready: [Arc<AtomicBool>; 3],
}

/// Runs one watch's events into `apply` until dropped (the stream retries with backoff);
/// a relisting replaces what the index had (see [`index::step`]). Each event then goes to
/// `store`. `ready` turns true once the first listing is complete.
async fn keep<K, E>(
    kind: &'static str,
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    key: impl Fn(&K) -> String,
    entry: impl Fn(&K) -> E,
    apply: impl Fn(Change<E>),
    mut store: impl FnMut(watcher::Event<K>),
    ready: Arc<AtomicBool>,
) {
    let mut stream = std::pin::pin!(stream);
    let mut pending = None;
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => {
                failing = false;
                let done = matches!(ev, watcher::Event::InitDone);
                if let Some(change) = index::step(&mut pending, &ev, &key, &entry) {
                    apply(change);
                }
                store(ev);
                if done {
                    ready.store(true, Ordering::Release);
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(kind, error = %e, "watch failed; scoring from the cache as it was until it is back");
            }
            Err(e) => tracing::debug!(kind, error = %e, "watch still failing"),
        }
    }
}

fn name_of(m: &kube::api::ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

impl Caches {
    /// The index of `driver`'s GPUs and the claims, and the task that keeps them (it runs
    /// until dropped). `pool_label` is the Node label naming a node's pool.
    pub fn watch(
        client: kube::Client,
        driver: &str,
        pool_label: &str,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let (claims, claim_writer) = reflector::store();
        let index = Arc::new(Index::new(driver));
        let caches = Caches {
            index: index.clone(),
            claims,
            client: client.clone(),
            runtime: tokio::runtime::Handle::current(),
            ready: Default::default(),
        };
        let [r_slices, r_claims, r_nodes] = caches.ready.clone();
        let driver = driver.to_string();
        let label = pool_label.to_string();
        let run = async move {
            let (i1, i2, i3) = (index.clone(), index.clone(), index);
            // Small pages, so that the initial list's transient memory is a page's, not
            // the cluster's: graft's slices hold at most 128 devices each; a claim may be
            // as large as the API server takes (about 1.5 MiB).
            let graft = watcher::Config::default()
                .fields(&format!("spec.driver={driver}"))
                .page_size(SLICE_PAGE);
            let slices =
                watcher(Api::<ResourceSlice>::all(client.clone()), graft).default_backoff();
            let d = driver.clone();
            let claims = watcher(
                Api::<ResourceClaim>::all(client.clone()),
                watcher::Config::default().page_size(CLAIM_PAGE),
            )
            .default_backoff()
            .modify(move |c| slim::claim(&d, c));
            let mut claim_writer = claim_writer;
            // Metadata only: a node's pool is a label; its status is large and changes often.
            let nodes = watcher(
                Api::<PartialObjectMeta<Node>>::all(client),
                watcher::Config::default().page_size(NODE_PAGE),
            )
            .default_backoff();
            tokio::join!(
                keep(
                    "ResourceSlice",
                    slices,
                    |s: &ResourceSlice| name_of(&s.metadata),
                    |s| Slice::of(&driver, s),
                    move |c| i1.slices(c),
                    |_| (),
                    r_slices,
                ),
                keep(
                    "ResourceClaim",
                    claims,
                    index::claim_key,
                    |c| index::held(i2.driver(), c),
                    |c| i2.claims(c),
                    // The index has what an allocated claim holds: the store keeps less.
                    move |ev| claim_writer.apply_watcher_event(&ev.modify(slim::settled)),
                    r_claims,
                ),
                keep(
                    "Node",
                    nodes,
                    |n: &PartialObjectMeta<Node>| name_of(&n.metadata),
                    |n| {
                        let labels = n.metadata.labels.as_ref();
                        let pool = labels.and_then(|l| l.get(&label));
                        pool.map_or(NO_POOL, String::as_str).to_string()
                    },
                    move |c| i3.node_pools(c),
                    |_| (),
                    r_nodes,
                ),
            );
        };
        (caches, run)
    }

    /// The index, for the fleet gauges.
    pub fn index(&self) -> Arc<Index> {
        self.index.clone()
    }
}

impl View for Caches {
    fn ready(&self) -> bool {
        self.ready.iter().all(|r| r.load(Ordering::Acquire))
    }

    fn nodes(&self, names: &[String]) -> Vec<NodeGpus> {
        self.index.nodes(names)
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
