//! The core's rule for ComputeDomains' IMEX daemon places ([`NvidiaWork::excludes`], asked
//! through [`DeviceSetup::excludes`]): while one domain's place is prepared, or planned in
//! the same call, no other domain's is; the same domain's is. It holds across a restart,
//! since it reads the checkpoint.

use super::*;

/// Plans an IMEX daemon place for the domain its request names.
struct Places;

impl DeviceSetup for Places {
    fn plan(
        &self,
        device: &Device,
        _: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        let work = (device.kind == Kind::DomainSlot).then(|| NvidiaWork::ImexDaemon {
            domain_id: alloc.request.clone(),
            domain_name: alloc.request.clone(),
            domain_namespace: "ns".into(),
            clique: "c.1".into(),
            claim_namespace: String::new(),
        });
        work.map(|w| w.record()).transpose()
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Ok(None)
    }

    fn undo(&self, _: &Setup) -> Result<(), SetupError> {
        Ok(())
    }

    fn for_claim(&self, setup: Setup, namespace: &str, uid: &str) -> Result<Setup, SetupError> {
        answers::for_claim(setup, namespace, uid)
    }

    fn excludes(&self, setup: &Setup, held: &Setup) -> Option<SetupError> {
        answers::excludes(setup, held)
    }
}

fn start(dir: &std::path::Path) -> Core {
    let core = Core::new("graft.dev", NODE, dir.to_path_buf(), BOOT)
        .unwrap()
        .with_setup(Arc::new(Places) as Arc<dyn DeviceSetup>)
        .with_opaque(graft_driver::families::opaque())
        .with_gate(Box::new(Gate(Ok(()))));
    core.set_inventory(&[
        Device::new("imex-daemon-0", Kind::DomainSlot),
        Device::new("imex-daemon-1", Kind::DomainSlot),
    ]);
    core.startup().unwrap();
    core
}

/// Claim `uid` of domain `domain`'s daemon on `place`.
fn daemon(uid: &str, domain: &str, place: &str) -> ClaimInput {
    let mut c = claim(uid, &[place]);
    c.results[0].request = domain.into();
    c
}

fn refused_for(out: &Prepared, uid: &str, place: &str) {
    match claim_error(&out[uid]) {
        ClaimError::Setup { device, source } => match source.family() {
            Some(NvidiaSetupError::ComputeDomain { reason, .. }) => assert!(
                device == place && reason.contains("held by another ComputeDomain"),
                "{device}: {reason}"
            ),
            _ => panic!("{device}: {source}"),
        },
        other => panic!("{other}"),
    }
}

#[test]
fn one_domains_daemon_place_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let core = start(dir.path());
    let out = prepare(&core, vec![daemon("a", "d1", "imex-daemon-0")]);
    assert!(out["a"].is_ok());
    let out = prepare(&core, vec![daemon("b", "d2", "imex-daemon-1")]);
    refused_for(&out, "b", "imex-daemon-1");
    // The same domain's second place (a daemon pod replaced): prepared.
    let out = prepare(&core, vec![daemon("c", "d1", "imex-daemon-1")]);
    assert!(out["c"].is_ok());
    // After a restart, from the checkpoint.
    drop(core);
    let core = start(dir.path());
    let out = prepare(&core, vec![daemon("b", "d2", "imex-daemon-1")]);
    refused_for(&out, "b", "imex-daemon-1");
    // Gone: the other domain's turn.
    assert!(unprepare(&core, &["a", "c"]).values().all(Result::is_ok));
    let out = prepare(&core, vec![daemon("b", "d2", "imex-daemon-1")]);
    assert!(out["b"].is_ok());
}

#[test]
fn two_domains_in_one_call_get_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let core = start(dir.path());
    let out = prepare(
        &core,
        vec![
            daemon("a", "d1", "imex-daemon-0"),
            daemon("b", "d2", "imex-daemon-1"),
        ],
    );
    assert!(out["a"].is_ok());
    refused_for(&out, "b", "imex-daemon-1");
}
