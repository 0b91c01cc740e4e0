//! The core's refusals of a family's settings carry the family's words, not their own:
//! NVIDIA's read exactly as they did when the core spelled them.

use serde_json::json;

use graft_driver::claims::config_edits::ConfigRefused;
use graft_driver::claims::input::ClaimError;
use graft_driver::discovery::nvidia::opaque::NvidiaOpaque;
use graft_driver::opaque::FamilyConfig;

fn nvidia(fields: serde_json::Value) -> FamilyConfig {
    let serde_json::Value::Object(mut rest) = fields else {
        panic!("an object")
    };
    FamilyConfig::of(vec![Box::new(NvidiaOpaque::take(&mut rest).unwrap())])
}

#[test]
fn nvidia_settings_are_refused_in_nvidias_words() {
    let shared = nvidia(json!({"sharing": {"strategy": "TimeSlicing"}}));
    let e = ClaimError::CannotShare {
        request: "gpu".into(),
        device: "fuse-0".into(),
        sharing: shared.asks_sharing().unwrap(),
    };
    assert_eq!(
        e.to_string(),
        "request gpu: device fuse-0 cannot be shared (sharing applies to full NVIDIA GPUs)"
    );

    let caps = nvidia(json!({"driverCapabilities": ["video"]}));
    let asked = caps.optional_edits().unwrap();
    assert_eq!(asked.names, ["video"]);
    let e = ConfigRefused::NotApplicable {
        device: "fuse".into(),
        applies: asked.applies,
    };
    assert_eq!(
        e.to_string(),
        "driverCapabilities apply to NVIDIA GPUs and MIG devices, not to fuse"
    );
    let e = ConfigRefused::NoCapabilityFiles {
        capability: "video".into(),
        item: asked.item,
        provider: asked.provider,
    };
    assert_eq!(
        e.to_string(),
        "driver capability video was asked for, but the node's NVIDIA driver has no video files"
    );
}

#[test]
fn no_settings_ask_nothing() {
    let none = nvidia(json!({}));
    assert_eq!(none.asks_sharing(), None);
    assert_eq!(none.optional_edits(), None);
}
