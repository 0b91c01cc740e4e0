use super::*;

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
