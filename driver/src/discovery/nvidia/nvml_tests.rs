use super::*;

#[test]
fn profile_names_follow_nvml() {
    let h100 = 85_520_809_984;
    assert_eq!(profile_name(1, 1, 9_856, h100), "1g.10gb");
    assert_eq!(profile_name(2, 2, 19_968, h100), "2g.20gb");
    assert_eq!(profile_name(3, 3, 40_192, h100), "3g.40gb");
    assert_eq!(profile_name(4, 4, 40_192, h100), "4g.40gb");
    assert_eq!(profile_name(7, 7, 80_896, h100), "7g.80gb");
    assert_eq!(profile_name(3, 1, 40_192, h100), "1c.3g.40gb");
    let a100_40 = 42_949_672_960;
    assert_eq!(profile_name(1, 1, 4_864, a100_40), "1g.5gb");
}

#[test]
fn bus_ids_in_sysfs_form() {
    assert_eq!(sysfs_bus_id("00000000:1A:00.0"), "0000:1a:00.0");
    assert_eq!(sysfs_bus_id("0000:1a:00.0"), "0000:1a:00.0");
}

#[test]
fn a_missing_library_is_an_error_not_a_panic() {
    let e = read_inventory(
        Path::new("/nonexistent/libnvidia-ml.so.1"),
        None,
        &GpuSelection::None,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
        "{e}"
    );
}
