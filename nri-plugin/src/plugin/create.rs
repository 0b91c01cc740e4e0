//! CreateContainer: the pod's records are read and checked on a blocking thread with a
//! deadline, and the container gets what they grant it, or is refused with the reason.

use std::sync::atomic::Ordering;

use graft_nri_sdk::panic_message;
use graft_proto::nri;
use graft_record::containers::ContainerEntry;

use super::GraftPlugin;
use crate::entries;
use crate::inject::{plan, Plan};
use crate::metrics::Refusal;
use crate::sources::{check_present, check_served};
use crate::unclaimed::{self, Mode, Requests};

impl GraftPlugin {
    /// [`graft_nri_sdk::NriPlugin::create_container`], inside the container's span.
    pub(super) async fn create_in_span(
        &self,
        pod: nri::PodSandbox,
        ctr: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        // Reading and checking records is file I/O: it runs on a blocking thread with a
        // deadline (`reads`), so that a hung read refuses only this pod's containers, and
        // so that a panic in it comes back as an error for this container only.
        let store = self.store.clone();
        let policy = self.policy.clone();
        let host_root = self.host_root.clone();
        let (pod_uid, ctr_name, ctr_env) = (pod.uid.clone(), ctr.name.clone(), ctr.env.clone());
        let (ctr_id, pod_ns, pod_name) = (ctr.id.clone(), pod.namespace.clone(), pod.name.clone());
        #[cfg(feature = "fault-injection")]
        let fault = self.fault.clone();
        let span = tracing::Span::current();
        // Err: why it is refused (the metric's reason), the pod's claims (`namespace/name`,
        // when readable) and the reason in words.
        type Refused = (Refusal, Vec<String>, String);
        // Ok: the plan, with graftctl's entry for it (written after the answer, below).
        let work = self.reads.run(
            &pod.uid,
            self.reads.limit(),
            move || -> Result<Option<(Plan, ContainerEntry)>, Refused> {
                let _span = span.enter();
                #[cfg(feature = "fault-injection")]
                fault.strike();
                let claims = store
                    .pod_claims_shared(&pod_uid)
                    .map_err(|e| (Refusal::RecordUnreadable, Vec::new(), e.to_string()))?;
                if claims.is_empty() {
                    return Ok(None);
                }
                let names = || {
                    claims
                        .iter()
                        .map(|c| format!("{}/{}", c.claim.namespace, c.claim.name))
                        .collect()
                };
                let planned = plan(&claims, &pod_uid, &ctr_name, &policy)
                    .map_err(|e| (Refusal::RecordRejected, names(), e.to_string()))?;
                let Some(p) = planned else { return Ok(None) };
                p.check_container_env(&ctr_env)
                    .map_err(|e| (Refusal::RecordRejected, names(), e.to_string()))?;
                check_served(&p, &policy, &host_root)
                    .map_err(|e| (Refusal::SourceNotServed, names(), e.to_string()))?;
                crate::published::check(&claims, &pod_uid, &ctr_name, store.root())
                    .map_err(|e| (Refusal::RecordRejected, names(), e.to_string()))?;
                check_present(&p, store.root())
                    .map_err(|e| (Refusal::DeviceAbsent, names(), e.to_string()))?;
                let target = entries::Target {
                    container_id: &ctr_id,
                    container: &ctr_name,
                    pod_uid: &pod_uid,
                    pod_namespace: &pod_ns,
                    pod_name: &pod_name,
                };
                let entry = entries::entry(&target, &p, &claims);
                Ok(Some((p, entry)))
            },
        );
        let planned = match work.await {
            Err(e) => {
                let why = e.to_string();
                return Err(self.refuse(&pod, &ctr, &[], Refusal::RecordUnreadable, why));
            }
            Ok(Ok(r)) => {
                r.map_err(|(kind, claims, why)| self.refuse(&pod, &ctr, &claims, kind, why))?
            }
            Ok(Err(e)) if e.is_panic() => {
                let why = format!(
                    "graft-nri failed internally ({}); refused rather than started without \
                     its devices",
                    panic_message(&*e.into_panic())
                );
                return Err(self.refuse(&pod, &ctr, &[], Refusal::Internal, why));
            }
            Ok(Err(e)) => {
                return Err(self.refuse(
                    &pod,
                    &ctr,
                    &[],
                    Refusal::Internal,
                    format!("graft-nri: {e}"),
                ))
            }
        };
        let mut resp = nri::CreateContainerResponse::new();
        // The toolkit's device requests that graft's plan does not override.
        let planned_env: Vec<&str> = planned
            .iter()
            .flat_map(|(p, _)| p.edits.env.iter().map(|v| v.name.as_str()))
            .collect();
        let requests = match self.unclaimed {
            Mode::Keep => Requests::default(),
            _ => unclaimed::find(&ctr.env, &ctr.mounts, &ctr.annotations, &planned_env),
        };
        if !requests.is_empty() {
            if self.unclaimed == Mode::Refuse {
                let why = format!(
                    "the container asks NVIDIA's container toolkit for devices graft did not \
                     give it ({}); this node refuses GPU requests outside a claim \
                     (--unclaimed-gpu-requests=refuse): ask for GPUs with a ResourceClaim",
                    requests.describe()
                );
                return Err(self.refuse(&pod, &ctr, &[], Refusal::UnclaimedGpuRequest, why));
            }
            tracing::info!(
                requests = %requests.describe(),
                "cleared the container's requests to NVIDIA's container toolkit"
            );
            self.metrics.gpu_requests_cleared();
        }
        let Some((plan, entry)) = planned else {
            if requests.is_empty() {
                self.metrics.skipped();
            } else {
                let mut adj = nri::ContainerAdjustment::new();
                requests.clear(&mut adj);
                resp.adjust = Some(adj).into();
            }
            return Ok(resp);
        };
        self.stats.injected.fetch_add(1, Ordering::Relaxed);
        self.metrics.injected();
        let annotation = plan.annotation();
        tracing::info!(
            devices = plan.edits.device_nodes.len(), injected = %annotation,
            "injecting recorded devices"
        );
        let mut adj = plan.adjustment_with(annotation);
        requests.clear(&mut adj);
        resp.adjust = Some(adj).into();
        // graftctl's entry is diagnostics: written after the answer, with others.
        self.entries.push(self.store.root().to_path_buf(), entry);
        Ok(resp)
    }
}
