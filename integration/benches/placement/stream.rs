//! The churn stream of benches/placement.rs: seeded, so that every variant and every run
//! sees the same pods, and the pods' objects.

use std::time::Duration;

use graft_integration::cluster::workloads::BUSYBOX;

/// What a pod asks for.
#[derive(Clone, Copy, Debug)]
pub enum Ask {
    Gpus(u32),
    Mig(&'static str),
}

/// One pod of the stream.
pub struct Job {
    pub name: String,
    pub ask: Ask,
    pub arrive: Duration,
    pub run: Duration,
}

/// A small seeded generator (SplitMix64): the same stream for every variant and run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn stream(seed: u64, pods: usize, gap: Duration, run: Duration) -> Vec<Job> {
    let mut rng = Rng(seed);
    let mut at = Duration::ZERO;
    (0..pods)
        .map(|i| {
            // Exponential gaps: arrivals as a Poisson stream.
            at += gap.mul_f64(-(1.0 - rng.next()).ln());
            let r = rng.next();
            let ask = match r {
                r if r < 0.40 => Ask::Gpus(1),
                r if r < 0.60 => Ask::Gpus(2),
                r if r < 0.72 => Ask::Gpus(4),
                r if r < 0.82 => Ask::Gpus(8),
                r if r < 0.90 => Ask::Mig("1g.10gb"),
                r if r < 0.95 => Ask::Mig("2g.20gb"),
                r if r < 0.98 => Ask::Mig("3g.40gb"),
                _ => Ask::Mig("4g.40gb"),
            };
            Job {
                name: format!("p{i:03}"),
                ask,
                arrive: at,
                run: run.mul_f64(1.0 + rng.next()),
            }
        })
        .collect()
}

pub fn pod_yaml(j: &Job) -> String {
    let request = match j.ask {
        Ask::Gpus(n) => format!("{{deviceClassName: gpu.graft.dev, allocationMode: ExactCount, count: {n}}}"),
        Ask::Mig(p) => format!(
            "{{deviceClassName: mig.graft.dev, selectors: [{{cel: {{expression: 'device.attributes[\"graft.dev\"].profile == \"{p}\"'}}}}]}}"
        ),
    };
    let (name, secs) = (&j.name, j.run.as_secs());
    format!(
        r#"---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: default, labels: {{graft-bench: placement}}}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {request}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{graft-bench: placement}}}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims: [{{name: dev, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "sleep {secs}"]
    resources: {{claims: [{{name: dev}}]}}
"#
    )
}
