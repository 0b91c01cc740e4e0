//! `Runtime::unconnected`: a handle for driving a plugin's handlers outside a connection.

use graft_nri_sdk::Runtime;

#[tokio::test]
async fn an_unconnected_runtime_fails_every_call() {
    let rt = Runtime::unconnected().unwrap();
    let e = rt.update_containers(Vec::new(), Vec::new()).await;
    assert!(e.is_err(), "{e:?}");
}
