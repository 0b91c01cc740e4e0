//! What graft-nri says when it refuses a container: the error the runtime gets (which the
//! kubelet shows on the pod as a `Failed` event), and an entry in the refusal journal,
//! which graft-driver turns into a `DeviceInjectionRefused` Event on the pod.

use std::path::PathBuf;

use graft_proto::nri;
use graft_record::refusals::{self, PodRef, Refusal};

/// The runtime's error text: the container, its pod, the pod's graft claims (when they
/// could be read) and the reason.
pub fn message(pod: &nri::PodSandbox, ctr: &str, claims: &[String], why: &str) -> String {
    let claims = match claims {
        [] => String::new(),
        [one] => format!(" with claim {one}"),
        many => format!(" with claims {}", many.join(", ")),
    };
    format!(
        "graft: refusing to create container {ctr:?} of pod {}/{} ({}){claims}: {why}",
        pod.namespace, pod.name, pod.uid
    )
}

/// Journals the refusal from a blocking thread of its own: the CreateContainer answer never
/// waits for it, and a failure is only logged.
pub fn journal(
    state_dir: PathBuf,
    pod: &nri::PodSandbox,
    ctr: &nri::Container,
    claims: &[String],
    why: &str,
) {
    let entry = Refusal::new(
        PodRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        },
        &ctr.name,
        &ctr.id,
        claims,
        why,
    );
    tokio::task::spawn_blocking(move || {
        if let Err(e) = refusals::append(&state_dir, &entry) {
            tracing::warn!(error = %e, "cannot journal the refusal; no Event on the pod");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_pod_claims_and_reason() {
        let pod = nri::PodSandbox {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        assert_eq!(
            message(&pod, "c", &["ns/gpu".into()], "device gpu-0 is absent"),
            "graft: refusing to create container \"c\" of pod ns/p (u1) with claim ns/gpu: \
             device gpu-0 is absent"
        );
        assert!(message(&pod, "c", &["ns/a".into(), "ns/b".into()], "x")
            .contains("with claims ns/a, ns/b: x"));
        assert!(message(&pod, "c", &[], "x").ends_with("(u1): x"));
    }
}
