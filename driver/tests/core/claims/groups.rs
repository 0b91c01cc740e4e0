//! Passthrough takes a GPU's whole IOMMU group: no function of it goes to another claim
//! while it is prepared, whichever came first.

use super::*;
use graft_driver::claims::lifecycle::Stage;

/// The refusal's text, which the kubelet puts in the pod's Event.
fn refusal(out: &Prepared, uid: &str) -> String {
    claim_error(&out[uid]).to_string()
}

#[test]
fn a_group_held_by_another_claim_is_refused_naming_the_function_and_holder() {
    let node = Node::new();
    let core = node.start();
    assert!(prepare(&core, vec![claim("a", &["gpu-4"])])["a"].is_ok());

    // GPU 3's group holds GPU 4, which claim a has.
    let out = prepare(&core, vec![claim("b", &["vfio-3"])]);
    let e = refusal(&out, "b");
    assert!(
        e.contains("device vfio-3: PCI function 0000:04:00.0 is held by claim ns/claim-a (a) through device gpu-4"),
        "{e}"
    );
    assert!(matches!(
        claim_error(&out["b"]),
        ClaimError::Setup {
            source: SetupError::FunctionHeld { .. },
            ..
        }
    ));
    assert_eq!(core.stage("b").unwrap(), Stage::Absent);
    assert_eq!(node.setup.kernel().applies, 0);

    // Free once a is gone; then the group is b's.
    unprepare(&core, &["a"]);
    assert!(prepare(&core, vec![claim("b", &["vfio-3"])])["b"].is_ok());
    let out = prepare(&core, vec![claim("c", &["gpu-4"])]);
    let e = refusal(&out, "c");
    assert!(
        e.contains("device gpu-4: PCI function 0000:04:00.0 is held by claim ns/claim-b (b) through device vfio-3"),
        "{e}"
    );
    let out = prepare(&core, vec![claim("d", &["vfio-4"])]);
    assert!(refusal(&out, "d").contains("through device vfio-3"));
    // Another group is not touched.
    assert!(prepare(&core, vec![claim("e", &["gpu-0"])])["e"].is_ok());

    // Nor can one claim take the group and one of its GPUs.
    unprepare(&core, &["b"]);
    let out = prepare(&core, vec![claim("f", &["vfio-3", "gpu-4"])]);
    assert!(refusal(&out, "f").contains("PCI function 0000:04:00.0"));
    assert_eq!(node.setup.kernel().applies, 1);
}

#[test]
fn two_claims_of_one_call_cannot_share_a_group() {
    let node = Node::new();
    let core = node.start();
    let out = prepare(
        &core,
        vec![claim("a", &["vfio-3"]), claim("b", &["vfio-4"])],
    );
    assert!(out["a"].is_ok());
    assert!(refusal(&out, "b").contains("held by claim ns/claim-a (a) through device vfio-3"));
}
