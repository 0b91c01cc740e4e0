//! Pod start-up timed from the API server's watch, for the cluster benchmarks: when each
//! pod (selected by a label) was first seen, and when its Ready condition first turned
//! True, both as the watch events arrived here. Sub-millisecond clock, no polling: unlike
//! the pods' own timestamps (whole seconds), the figures can tell 300 ms from 800 ms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::ResourceExt;

/// When the watch first showed a pod, and first showed it Ready.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    /// When the watch first showed the pod.
    pub added: Option<Instant>,
    /// When it first showed it Ready.
    pub ready: Option<Instant>,
}

impl Seen {
    /// Creation (first watch event) to Ready.
    pub fn startup(&self) -> Option<Duration> {
        Some(self.ready?.saturating_duration_since(self.added?))
    }
}

/// A watch of pods that notes when each was first seen and first Ready.
pub struct PodClock {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl PodClock {
    /// Starts watching the pods labelled `label` in `ns`; returns once the watch is
    /// established, so that no later pod's first event is missed.
    pub async fn start(client: kube::Client, ns: &str, label: &str) -> anyhow::Result<Self> {
        let api: Api<Pod> = Api::namespaced(client, ns);
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let map = seen.clone();
        let mut stream = Box::pin(watcher(api, watcher::Config::default().labels(label)));
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            loop {
                match stream.try_next().await {
                    Ok(Some(ev)) => {
                        let now = Instant::now();
                        match ev {
                            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                                let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
                                let s = m.entry(p.name_any()).or_default();
                                s.added.get_or_insert(now);
                                if is_ready(&p) {
                                    s.ready.get_or_insert(now);
                                }
                            }
                            watcher::Event::InitDone => {
                                if let Some(tx) = ready_tx.take() {
                                    let _ = tx.send(());
                                }
                            }
                            _ => {}
                        }
                    }
                    Ok(None) => return,
                    // The watcher re-lists on its own; a gap shows as a missing pod.
                    Err(e) => eprintln!("pod watch: {e}"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .context("the pod watch did not start in 30 s")?
            .context("the pod watch ended")?;
        Ok(Self { seen, task })
    }

    /// What was seen of pod `name`.
    pub fn get(&self, name: &str) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .copied()
    }

    /// Waits (up to `limit`) until `name` has been seen Ready; returns creation to Ready.
    pub async fn wait_ready(&self, name: &str, limit: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            if let Some(d) = self.get(name).and_then(|s| s.startup()) {
                return Ok(d);
            }
            if start.elapsed() > limit {
                bail!("pod {name} not Ready after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for PodClock {
    fn drop(&mut self) {
        self.task.abort();
    }
}
