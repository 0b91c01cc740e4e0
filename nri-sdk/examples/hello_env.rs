//! A minimal NRI plugin: logs every container creation and gives each container an
//! environment variable naming its pod.
//!
//! Run it beside containerd (as root, NRI enabled):
//!
//! ```text
//! cargo run -p graft-nri-sdk --example hello_env -- /var/run/nri/nri.sock
//! ```

use std::sync::Arc;

use graft_nri_sdk::{
    async_trait, nri, run, ttrpc, ConnectionState, Event, EventMask, NriPlugin, Options, Transport,
};

struct HelloEnv;

#[async_trait]
impl NriPlugin for HelloEnv {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    fn connection_state(&self, state: ConnectionState) {
        tracing::info!(?state, "connection");
    }

    async fn create_container(
        &self,
        pod: nri::PodSandbox,
        container: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        tracing::info!(
            pod = %format_args!("{}/{}", pod.namespace, pod.name),
            container = %container.name,
            "creating a container"
        );
        let mut adjust = nri::ContainerAdjustment::new();
        adjust.env.push(nri::KeyValue {
            key: "HELLO_FROM_POD".into(),
            value: format!("{}/{}", pod.namespace, pod.name),
            ..Default::default()
        });
        Ok(nri::CreateContainerResponse {
            adjust: Some(adjust).into(),
            ..Default::default()
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), graft_nri_sdk::SdkError> {
    tracing_subscriber::fmt::init();
    // Started by the runtime (a pre-installed plugin): it passes the connection's fd.
    let transport = match std::env::var("NRI_PLUGIN_SOCKET")
        .ok()
        .and_then(|fd| fd.parse().ok())
    {
        Some(fd) => Transport::PreInstalled(fd),
        None => Transport::External(
            std::env::args()
                .nth(1)
                .unwrap_or_else(|| "/var/run/nri/nri.sock".into())
                .into(),
        ),
    };
    run(
        Arc::new(HelloEnv),
        Options::new("hello-env", "90", transport),
    )
    .await
}
