//! What the CreateContainer tests share: a store and policy in a temporary state directory,
//! and the record fixture's claim made to follow that policy.

use std::path::Path;

use graft_record::policy::{DEFAULT_HOOK_PATH, HOOK_ENV, HOOK_NAME, HOOK_SUBCOMMANDS};
use graft_record::{ClaimRecord, InjectionPolicy, RecordStore};

/// The store and policy of state directory `dir`, and `record/tests/fixtures/claim-v1.json`
/// (devices `fuse` and `tun`) for pod `pod`, not stored yet. Its fuse device binds a
/// directory graft serves from its state directory (an MPS tenancy's) and runs graft-hook,
/// as the node's injection policy allows.
pub fn fixture(dir: &Path, pod: &str) -> (RecordStore, InjectionPolicy, ClaimRecord) {
    let store = RecordStore::open(dir).unwrap();
    let policy = InjectionPolicy::new(dir, DEFAULT_HOOK_PATH, &[]).unwrap();
    let fixture = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../record/tests/fixtures/claim-v1.json"),
    )
    .unwrap();
    let mut c = graft_record::parse_record(Path::new("fixture"), &fixture).unwrap();
    c.pods[0].uid = pod.into();
    let fuse = &mut c.devices[0].edits;
    fuse.mounts[0].source = format!("{}/mps/GPU-0/t-1/shm", dir.display());
    fuse.mounts[0].options = vec!["ro".into(), "nosuid".into(), "nodev".into(), "rbind".into()];
    fuse.hooks[0].path = DEFAULT_HOOK_PATH.into();
    fuse.hooks[0].args = vec![HOOK_NAME.into(), HOOK_SUBCOMMANDS[0].into()];
    fuse.hooks[0].env = HOOK_ENV.iter().map(|s| s.to_string()).collect();
    policy
        .check_record(&c)
        .expect("the fixture follows the policy");
    (store, policy, c)
}
