//! Helpers shared by the SDK's integration tests; the runtime's end is the SDK's own
//! [`graft_nri_sdk::scripted::ScriptedRuntime`].

#![allow(dead_code)]

use graft_proto::nri;
use ttrpc::Code;

pub use graft_nri_sdk::scripted::ScriptedRuntime as Harness;

pub async fn fake_runtime() -> Harness {
    Harness::start().await.unwrap()
}

pub fn message(e: &ttrpc::Error) -> String {
    match e {
        ttrpc::Error::RpcStatus(s) => s.message().to_string(),
        other => panic!("not a status: {other:?}"),
    }
}

pub fn code(e: ttrpc::Error) -> Code {
    match e {
        ttrpc::Error::RpcStatus(s) => s.code(),
        other => panic!("not a status: {other:?}"),
    }
}

pub fn pod(id: &str) -> nri::PodSandbox {
    nri::PodSandbox {
        id: id.into(),
        uid: format!("uid-{id}"),
        ..Default::default()
    }
}
