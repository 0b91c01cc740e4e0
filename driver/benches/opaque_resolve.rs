//! `opaque::resolve` alone: the configuration prepare reads for each request of a claim,
//! from a class entry (env) and a claim entry (NVIDIA's `sharing` and
//! `driverCapabilities`), and from a ComputeDomain channel's entry. CPU only (no disk), so
//! that a change to the parse or the families' registry shows; prepare itself is bound by
//! the checkpoint's fsyncs (prepare_concurrency).
//!
//! Prints the median ns per resolve of `ROUNDS` rounds of `CALLS` calls, per input.
//! Run: `cargo bench -p graft-driver --bench opaque_resolve`

use std::time::Instant;

use graft_driver::opaque::{self, API_VERSION, KIND};
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;

const CALLS: usize = 20_000;
const ROUNDS: usize = 7;

fn configs(v: serde_json::Value) -> Vec<DeviceAllocationConfiguration> {
    serde_json::from_value(v).expect("configs")
}

fn main() {
    let gpu = configs(serde_json::json!([
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "graft.dev", "parameters": {
            "apiVersion": API_VERSION, "kind": KIND,
            "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}},
            "driverCapabilities": ["graphics", "video"]}}},
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": {
            "apiVersion": API_VERSION, "kind": KIND, "env": {"A": "class", "B": "class"}}}}
    ]));
    let channel = configs(serde_json::json!([
        {"source": "FromClaim", "requests": ["channel"], "opaque": {"driver": "graft.dev", "parameters": {
            "apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig",
            "domainID": "u-1", "domainName": "d", "domainNamespace": "ns", "allocationMode": "Single"}}}
    ]));
    let families = graft_driver::families::opaque();
    for (name, input, request) in [
        ("class env + claim sharing, capabilities", &gpu, "gpu"),
        ("ComputeDomain channel", &channel, "channel"),
    ] {
        let mut per_call = Vec::new();
        for _ in 0..ROUNDS {
            let start = Instant::now();
            for _ in 0..CALLS {
                let got = opaque::resolve("graft.dev", input, request, &families);
                std::hint::black_box(got.expect("resolves"));
            }
            per_call.push(start.elapsed().as_nanos() as f64 / CALLS as f64);
        }
        per_call.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.0} ns per resolve ({ROUNDS} rounds of {CALLS}; min {:.0}, max {:.0})",
            per_call[ROUNDS / 2],
            per_call[0],
            per_call[ROUNDS - 1]
        );
    }
}
