//! The edge itself: one kubelet call at a time turned into core work under its deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;

use super::errors::{core_error, in_progress, told, CallError, ClaimFailure, ClaimOutcome};
use super::fetch::{fetch, Fetched};
use super::pods::PodCache;
use super::reasons::{call_reason, claim_reason};
use crate::claims::input::{ClaimError, Outcome};
use crate::claims::{Core, CoreResult, PreparedDevice};
use crate::events::claims::prepare_failed;
use crate::events::Poster;
use crate::metrics::prepare::{InFlight, DEADLINE};
use crate::metrics::DriverMetrics;
use crate::model::ClaimId;

/// The kubelet gives NodePrepareResources and NodeUnprepareResources this long.
pub const KUBELET_DEADLINE: Duration = Duration::from_secs(45);
/// Answered this long before the kubelet's deadline.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(5);
/// How long the failure of a prepare that finished after its call was answered waits for
/// the kubelet's retry (which comes within seconds).
const LATE_KEPT: Duration = Duration::from_secs(300);

/// What the core answers a prepare.
type PreparedMap = BTreeMap<String, Outcome<Vec<PreparedDevice>>>;

/// A failure kept for the kubelet's retry: its text, its metrics reason, when it came.
type Late = (ClaimFailure, &'static str, Instant);

/// The kubelet's DRA calls turned into core work: claims fetched from the API server, the
/// core run on a blocking thread under the call's deadline, failures posted as Events.
pub struct Edge {
    core: Arc<Core>,
    client: kube::Client,
    /// The node's pods, where a GET of each reserved pod is not needed.
    pods: PodCache,
    /// How long a call may take, from its arrival.
    budget: Duration,
    /// Claims whose prepare failed after their call was answered "still running": the
    /// kubelet's retry gets this error rather than a new attempt that may outlast its call
    /// again (a VFIO bind timing out after 60 s would otherwise never be reported).
    late: Arc<Mutex<HashMap<String, Late>>>,
    /// Where `PrepareFailed` Events go (none in tests without an API server to post to).
    events: Option<Poster>,
    metrics: Option<Arc<DriverMetrics>>,
}

impl Edge {
    /// `budget`: the kubelet's deadline less a margin (`KUBELET_DEADLINE - DEFAULT_MARGIN`).
    pub fn new(core: Arc<Core>, client: kube::Client, budget: Duration) -> Self {
        Edge {
            core,
            client,
            pods: PodCache::default(),
            budget,
            late: Arc::default(),
            events: None,
            metrics: None,
        }
    }

    /// Reads reserved pods from `pods` where it may answer (`PodCache::pod_use`).
    pub fn with_pod_cache(mut self, pods: PodCache) -> Self {
        self.pods = pods;
        self
    }

    /// Counts each claim's prepare and unprepare into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<DriverMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Each claim of a call that took `elapsed`, with its own result.
    fn observe<T>(
        &self,
        out: &BTreeMap<String, ClaimOutcome<T>>,
        elapsed: Duration,
        record: fn(&DriverMetrics, bool, Duration),
    ) {
        if let Some(m) = &self.metrics {
            for o in out.values() {
                record(m, o.is_ok(), elapsed);
            }
            m.claims_changed();
        }
    }

    /// Counts `claims` claims' prepare failed for `reason`.
    fn count_failed(&self, reason: &'static str, claims: usize) {
        if let Some(m) = &self.metrics {
            m.prepare_failed(reason, claims);
        }
    }

    /// Posts a `PrepareFailed` Event on each claim whose prepare fails.
    pub fn with_events(mut self, events: Poster) -> Self {
        self.events = Some(events);
        self
    }

    /// Queues the claims' `PrepareFailed` Events (never waits for them).
    fn report_failed(&self, failed: &[(&ClaimId, &str)]) {
        let Some(poster) = &self.events else { return };
        for (id, error) in failed {
            let (ev, r) = prepare_failed(id, &self.core.node_name, error);
            poster.post(ev, r);
        }
    }

    /// The core it drives.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Runs `f` on the core, on a blocking thread, until `deadline`: `None` when the
    /// deadline passed first (the work goes on).
    async fn on_core<T: Send + 'static>(
        &self,
        deadline: Instant,
        f: impl FnOnce(&Core) -> T + Send + 'static,
    ) -> Result<Option<T>, CallError> {
        let core = Arc::clone(&self.core);
        let task = tokio::task::spawn_blocking(move || f(&core));
        match tokio::time::timeout_at(deadline.into(), task).await {
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(e)) => Err(CallError::Internal(e)),
            Err(_) => Ok(None),
        }
    }

    /// Prepare: one outcome per claim; a claim whose prepare outlasts the call is answered
    /// "still running", and the kubelet's retry gets its result.
    pub async fn prepare(
        &self,
        ids: &[ClaimId],
    ) -> Result<BTreeMap<String, ClaimOutcome<Vec<PreparedDevice>>>, CallError> {
        let started = Instant::now();
        let deadline = started + self.budget;
        let mut out = BTreeMap::new();
        let mut todo = Vec::with_capacity(ids.len());
        for id in ids {
            match self.take_late(&id.uid) {
                Some((e, reason)) => {
                    self.count_failed(reason, 1);
                    out.insert(id.uid.clone(), Err(e));
                }
                None => todo.push(id.clone()),
            }
        }
        let in_flight = self.metrics.as_ref().map(|m| m.prepare_started(todo.len()));
        let (inputs, pods_cached) = match self.fetch(&todo).await {
            Ok(f) => (f.claims, f.pods_cached),
            Err(e) => {
                self.count_failed(call_reason(&e), todo.len());
                return Err(e);
            }
        };
        let fetched = Instant::now();
        let core = Arc::clone(&self.core);
        let mut task = tokio::task::spawn_blocking(move || core.prepare(inputs, deadline));
        // Claims that failed for good (not "still running"): their Events.
        let mut failed: Vec<String> = out.keys().cloned().collect();
        let joined = tokio::time::timeout_at(deadline.into(), &mut task).await;
        let whole = |e: CallError| {
            self.count_failed(call_reason(&e), todo.len());
            e
        };
        match joined {
            Ok(joined) => match joined.map_err(|e| whole(CallError::Internal(e)))? {
                Ok(map) => out.extend(map.into_iter().map(|(uid, o)| {
                    if let Err(e) = &o {
                        self.count_failed(claim_reason(e), 1);
                        if !matches!(e, ClaimError::InProgress { .. }) {
                            failed.push(uid.clone());
                        }
                    }
                    let o = o.map_err(|e| told(ids, &uid, e));
                    (uid, o)
                })),
                Err(e) => return Err(whole(core_error(e))),
            },
            Err(_) => {
                self.count_failed(DEADLINE, todo.len());
                out.extend(in_progress(&todo));
                // Still under way on the core: in flight until it ends.
                self.keep_late(task, todo, in_flight);
                let times = (started, fetched, pods_cached);
                return Ok(self.answered(ids, out, &failed, times));
            }
        }
        drop(in_flight);
        Ok(self.answered(ids, out, &failed, (started, fetched, pods_cached)))
    }

    /// The end of a prepare call: Events for the failed claims, the log line, the metrics.
    /// `reads`: when the call started, when its API reads ended, and how many reserved pods
    /// the pod cache gave.
    fn answered(
        &self,
        ids: &[ClaimId],
        out: BTreeMap<String, ClaimOutcome<Vec<PreparedDevice>>>,
        failed: &[String],
        reads: (Instant, Instant, usize),
    ) -> BTreeMap<String, ClaimOutcome<Vec<PreparedDevice>>> {
        let (started, fetched, pods_cached) = reads;
        let reports: Vec<(&ClaimId, &str)> = ids
            .iter()
            .filter(|id| failed.contains(&id.uid))
            .filter_map(|id| Some((id, out.get(&id.uid)?.as_ref().err()?.0.as_str())))
            .collect();
        self.report_failed(&reports);
        // The API half and the local half (locks, fsyncs, setups), for latency tracking.
        tracing::info!(
            claims = ids.len(),
            failed = out
                .values()
                .filter(|o: &&ClaimOutcome<_>| o.is_err())
                .count(),
            fetch_us = (fetched - started).as_micros() as u64,
            pods_cached,
            local_us = fetched.elapsed().as_micros() as u64,
            "NodePrepareResources"
        );
        self.observe(&out, started.elapsed(), DriverMetrics::prepared);
        out
    }

    /// Lets a prepare that outlasted its call finish, and keeps its claims' failures for
    /// the kubelet's retry.
    fn keep_late(
        &self,
        task: tokio::task::JoinHandle<CoreResult<PreparedMap>>,
        ids: Vec<ClaimId>,
        in_flight: Option<InFlight>,
    ) {
        let late = Arc::clone(&self.late);
        tokio::spawn(async move {
            let done = task.await;
            drop(in_flight);
            let failed: Vec<(String, ClaimFailure, &'static str)> = match done {
                Ok(Ok(map)) => map
                    .into_iter()
                    .filter_map(|(uid, o)| {
                        let e = o.err()?;
                        let reason = claim_reason(&e);
                        Some((uid.clone(), told(&ids, &uid, e), reason))
                    })
                    .collect(),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "a prepare that outlasted its call failed");
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "a prepare that outlasted its call stopped");
                    return;
                }
            };
            let now = Instant::now();
            let mut late = late.lock().unwrap_or_else(|p| p.into_inner());
            late.retain(|_, (_, _, at)| now.duration_since(*at) < LATE_KEPT);
            for (uid, e, reason) in failed {
                tracing::warn!(
                    claim_uid = uid,
                    error = %e,
                    "prepare failed after its call was answered"
                );
                late.insert(uid, (e, reason, now));
            }
        });
    }

    /// The failure a prepare of `uid` met after its call was answered, once, and its reason.
    fn take_late(&self, uid: &str) -> Option<(ClaimFailure, &'static str)> {
        let mut late = self.late.lock().unwrap_or_else(|p| p.into_inner());
        let (e, reason, at) = late.remove(uid)?;
        (at.elapsed() < LATE_KEPT).then_some((e, reason))
    }

    /// Unprepare: one outcome per claim; an unknown claim is success.
    pub async fn unprepare(&self, ids: &[ClaimId]) -> BTreeMap<String, ClaimOutcome<()>> {
        let started = Instant::now();
        let out = self.unprepare_inner(ids, started + self.budget).await;
        self.observe(&out, started.elapsed(), DriverMetrics::unprepared);
        out
    }

    async fn unprepare_inner(
        &self,
        ids: &[ClaimId],
        deadline: Instant,
    ) -> BTreeMap<String, ClaimOutcome<()>> {
        let owned = ids.to_vec();
        match self
            .on_core(deadline, move |core| core.unprepare(&owned, deadline))
            .await
        {
            Ok(Some(Ok(map))) => map
                .into_iter()
                .map(|(uid, o)| {
                    let o = o.map_err(|e| told(ids, &uid, e));
                    (uid, o)
                })
                .collect(),
            Ok(Some(Err(e))) => {
                let msg = core_error(e).for_tenant();
                ids.iter()
                    .map(|id| {
                        let e = ClaimFailure(format!("unprepare {id}: {msg}"));
                        (id.uid.clone(), Err(e))
                    })
                    .collect()
            }
            Ok(None) => in_progress(ids),
            Err(e) => ids
                .iter()
                .map(|id| (id.uid.clone(), Err(ClaimFailure(e.to_string()))))
                .collect(),
        }
    }

    /// Start-up: the checkpoint settled and the records made to agree with it; `Some` when
    /// it failed its checks and was rebuilt.
    pub async fn startup(&self) -> Result<Option<crate::claims::Rebuilt>, CallError> {
        let deadline = Instant::now() + Duration::from_secs(600);
        match self.on_core(deadline, |core| core.startup()).await? {
            Some(r) => r.map_err(core_error),
            None => Err(CallError::StartupUnfinished),
        }
    }

    /// Rolls back `Started` claims whose ResourceClaim is gone or replaced. Run at start
    /// and periodically; completed claims are left for the kubelet to unprepare.
    pub async fn cleanup(&self) -> Result<usize, CallError> {
        let deadline = Instant::now() + self.budget;
        let started = match self.on_core(deadline, |core| core.started_claims()).await? {
            Some(r) => r.map_err(core_error)?,
            None => return Ok(0),
        };
        let mut gone = Vec::new();
        for id in started {
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &id.namespace);
            let found = api
                .get_opt(&id.name)
                .await
                .map_err(|source| CallError::Fetch {
                    claim: id.to_string(),
                    source,
                })?;
            if found.and_then(|c| c.metadata.uid).as_deref() != Some(id.uid.as_str()) {
                gone.push(id);
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        match self
            .on_core(deadline, move |core| core.roll_back_gone(&gone, deadline))
            .await?
        {
            Some(r) => r.map_err(core_error),
            None => Ok(0),
        }
    }

    /// Reads the claims and their pods. Any claim that is missing, replaced or not
    /// allocated fails the whole call.
    pub async fn fetch(&self, ids: &[ClaimId]) -> Result<Fetched, CallError> {
        fetch(&self.client, &self.core.driver_name, &self.pods, ids).await
    }
}
