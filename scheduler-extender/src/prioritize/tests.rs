use serde_json::json;

use super::*;

/// A view that must not be read.
struct Untouchable;

impl View for Untouchable {
    fn ready(&self) -> bool {
        true
    }
    fn nodes(&self, _: &[String]) -> Vec<state::NodeGpus> {
        panic!("the nodes were read for a pod without claims")
    }
    fn claim(&self, _: &str, _: &str) -> Option<Arc<ResourceClaim>> {
        panic!("a claim was read for a pod without claims")
    }
}

fn config() -> Config {
    Config {
        driver: "graft.dev".into(),
        classes: vec!["gpu.graft.dev".into()],
        mode: Mode::Pack,
    }
}

/// A pod with no `spec.resourceClaims` (absent or empty) is answered with zeros, and
/// neither the index nor the claims are looked at.
#[test]
fn a_pod_without_claims_reads_nothing() {
    for spec in [
        json!({"containers": []}),
        json!({"containers": [], "resourceClaims": []}),
    ] {
        let args: ExtenderArgs = serde_json::from_value(json!({
            "Pod": {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec},
            "NodeNames": ["a", "b"]
        }))
        .unwrap();
        let got = prioritize(&Untouchable, &config(), &args);
        assert_eq!(got.demand, Demand::default());
        assert_eq!(
            got.hosts,
            vec![
                HostPriority {
                    host: "a".into(),
                    score: 0
                },
                HostPriority {
                    host: "b".into(),
                    score: 0
                }
            ]
        );
    }
}
