//! CreateContainer with each `--unclaimed-gpu-requests` mode: what a container that asks
//! NVIDIA's container toolkit for every GPU gets, with and without graft's records
//! (docs/security.md, promise 14).

use graft_nri::plugin::GraftPlugin;
use graft_nri::unclaimed::Mode;
use graft_nri_sdk::NriPlugin;
use graft_proto::nri;
use graft_record::StatusPublisher;

mod support;

const POD: &str = "5e0c9a8b-1d2f-4e3a-8b7c-6d5e4f3a2b10";

/// A plugin in `mode` over a store where pod POD holds the record fixture's claim (its
/// container `app` gets `fuse` and `tun`, no GPU).
fn plugin(mode: Mode) -> (tempfile::TempDir, GraftPlugin) {
    let dir = tempfile::tempdir().unwrap();
    let (store, policy, c) = support::fixture(dir.path(), POD);
    store.put_claim(&c).unwrap();
    let status = StatusPublisher::acquire(dir.path(), "10-graft", "boot".into()).unwrap();
    let plugin = GraftPlugin::new(store, status, policy).with_unclaimed_gpu_requests(mode);
    (dir, plugin)
}

/// A CUDA image's container `name` of pod `uid`.
fn cuda(uid: &str, name: &str) -> (nri::PodSandbox, nri::Container) {
    let pod = nri::PodSandbox {
        uid: uid.into(),
        name: "p".into(),
        namespace: "t".into(),
        ..Default::default()
    };
    let ctr = nri::Container {
        id: format!("{name}-id"),
        name: name.into(),
        env: vec!["PATH=/bin".into(), "NVIDIA_VISIBLE_DEVICES=all".into()],
        ..Default::default()
    };
    (pod, ctr)
}

fn create(mode: Mode, uid: &str, name: &str) -> Result<nri::CreateContainerResponse, ttrpc::Error> {
    let (_dir, plugin) = plugin(mode);
    let (pod, ctr) = cuda(uid, name);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(plugin.create_container(pod, ctr))
}

fn env_of(resp: &nri::CreateContainerResponse) -> Vec<(String, String)> {
    resp.adjust
        .as_ref()
        .map(|a| {
            a.env
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn clear_voids_the_request_with_records_or_without() {
    let void = ("NVIDIA_VISIBLE_DEVICES".to_string(), "void".to_string());
    // A pod graft knows nothing of.
    let resp = create(Mode::Clear, "other-pod", "app").unwrap();
    assert_eq!(env_of(&resp), std::slice::from_ref(&void));
    // A container graft gives fuse and tun: their edits, and the request voided.
    let resp = create(Mode::Clear, POD, "app").unwrap();
    let env = env_of(&resp);
    assert!(env.contains(&void), "{env:?}");
    assert!(env.iter().any(|(k, _)| k == "GRAFT_FUSE"), "{env:?}");
    assert_eq!(resp.adjust.linux.devices.len(), 2);
}

#[test]
fn refuse_refuses_naming_the_request() {
    let Err(ttrpc::Error::RpcStatus(s)) = create(Mode::Refuse, "other-pod", "app") else {
        panic!("not refused");
    };
    assert_eq!(s.code(), ttrpc::Code::FAILED_PRECONDITION);
    assert!(
        s.message.contains("NVIDIA_VISIBLE_DEVICES=all"),
        "{}",
        s.message
    );
}

#[test]
fn keep_leaves_it() {
    assert!(create(Mode::Keep, "other-pod", "app")
        .unwrap()
        .adjust
        .is_none());
    let env = env_of(&create(Mode::Keep, POD, "app").unwrap());
    assert!(
        !env.iter().any(|(k, _)| k == "NVIDIA_VISIBLE_DEVICES"),
        "{env:?}"
    );
}
