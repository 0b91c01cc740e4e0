use super::*;

fn env(vars: &[&str]) -> Vec<String> {
    vars.iter().map(|s| s.to_string()).collect()
}

fn found(vars: &[&str], planned: &[&str]) -> Requests {
    find(&env(vars), &[], &HashMap::new(), planned)
}

#[test]
fn a_cuda_image_asking_every_gpu_is_voided() {
    let r = found(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"], &[]);
    assert!(r.void_gpus && r.blank_env.is_empty(), "{r:?}");
    assert_eq!(r.describe(), "NVIDIA_VISIBLE_DEVICES=all");
    let mut adj = nri::ContainerAdjustment::new();
    r.clear(&mut adj);
    assert_eq!(
        (adj.env[0].key.as_str(), adj.env[0].value.as_str()),
        ("NVIDIA_VISIBLE_DEVICES", "void")
    );
    // The last entry of a name is the one in force.
    assert!(
        found(
            &["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=0"],
            &[]
        )
        .void_gpus
    );
    assert!(
        !found(
            &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=void"],
            &[]
        )
        .void_gpus
    );
}

#[test]
fn nothing_asked_is_left_alone() {
    for vars in [
        &[][..],
        &["NVIDIA_VISIBLE_DEVICES="],
        &["NVIDIA_VISIBLE_DEVICES=void"],
        &["NVIDIA_VISIBLE_DEVICES= , "],
        &["NVIDIA_VISIBLE_DEVICES=0,void"],
        // A CUDA image that says which CUDA it needs is no legacy image.
        &["CUDA_VERSION=12.4", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
        &[
            "NVIDIA_IMEX_CHANNELS=void",
            "NVIDIA_DRIVER_CAPABILITIES=all",
        ],
    ] {
        assert!(found(vars, &[]).is_empty(), "{vars:?}");
    }
}

#[test]
fn a_legacy_cuda_image_asks_every_gpu_by_leaving_the_variable_out() {
    let r = found(&["CUDA_VERSION=9.0"], &[]);
    assert!(r.void_gpus);
    assert!(r.describe().contains("legacy"), "{}", r.describe());
}

#[test]
fn other_request_variables_are_emptied() {
    let r = found(
        &["NVIDIA_IMEX_CHANNELS=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        &[],
    );
    assert_eq!(
        r.blank_env,
        ["NVIDIA_IMEX_CHANNELS", "NVIDIA_MIG_CONFIG_DEVICES"]
    );
    let mut adj = nri::ContainerAdjustment::new();
    r.clear(&mut adj);
    let env: Vec<(&str, &str)> = adj
        .env
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(
        env,
        [
            ("NVIDIA_IMEX_CHANNELS", ""),
            ("NVIDIA_MIG_CONFIG_DEVICES", "")
        ]
    );
}

#[test]
fn what_the_plan_sets_is_not_touched() {
    let vars = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0"];
    let r = found(&vars, &["NVIDIA_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS"]);
    assert!(r.is_empty(), "{r:?}");
}

#[test]
fn request_mounts_and_cdi_annotations_are_removed() {
    let mount = |dest: &str, src: &str| nri::Mount {
        destination: dest.into(),
        source: src.into(),
        ..Default::default()
    };
    let mounts = [
        mount("/var/run/nvidia-container-devices/all", "/dev/null"),
        mount("/var/run/x/../nvidia-container-devices/imex/0", "/dev/null"),
        mount("/var/run/nvidia-container-devices-not", "/dev/null"),
        mount("/data", "/var/lib/x"),
    ];
    let annotations: HashMap<String, String> = [
        ("cdi.k8s.io/gpu", "nvidia.com/gpu=all"),
        ("io.kubernetes.cri.container-type", "container"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = find(&[], &mounts, &annotations, &[]);
    assert_eq!(
        r.mounts,
        [
            "/var/run/nvidia-container-devices/all",
            "/var/run/x/../nvidia-container-devices/imex/0"
        ]
    );
    assert_eq!(r.annotations, ["cdi.k8s.io/gpu"]);
    let mut adj = nri::ContainerAdjustment::new();
    r.clear(&mut adj);
    assert_eq!(
        adj.mounts[0].destination,
        "-/var/run/nvidia-container-devices/all"
    );
    assert!(adj.annotations.contains_key("-cdi.k8s.io/gpu"));
}
