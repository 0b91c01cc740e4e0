//! The floor any NRI plugin built on graft's SDK pays: it subscribes to CreateContainer, as
//! graft-nri does, and answers every call with an empty adjustment, without logging or
//! reading anything. The benches put it beside graft-nri and containerd's device-injector, so
//! that graft-nri's own work is what stands above this plugin's turnaround.
//!
//! Usage: graft-null-nri <containerd's NRI socket> [--via-ttrpc]
//!
//! `--via-ttrpc` answers CreateContainer through ttrpc's tasks instead of the SDK's inline
//! path, so that a bench can put the two paths side by side.

use std::sync::Arc;

use graft_nri_sdk::{
    async_trait, nri, run, ttrpc, ConnectionState, Event, EventMask, NriPlugin, Options, Transport,
};

struct Null;

#[async_trait]
impl NriPlugin for Null {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    fn synchronize_updates(&self) -> bool {
        false
    }

    fn connection_state(&self, state: ConnectionState) {
        eprintln!("graft-null-nri: {state:?}");
    }

    async fn create_container(
        &self,
        _pod: nri::PodSandbox,
        _container: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        Ok(nri::CreateContainerResponse::default())
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = || anyhow::anyhow!("usage: graft-null-nri <NRI socket> [--via-ttrpc]");
    let socket = args.next().ok_or_else(usage)?;
    let via_ttrpc = match args.next().as_deref() {
        None => false,
        Some("--via-ttrpc") => true,
        Some(_) => return Err(usage()),
    };
    let mut opts = Options::new("graft-null", "10", Transport::External(socket.into()));
    opts.inline_create_container = !via_ttrpc;
    opts.inline_synchronize = !via_ttrpc;
    // The same runtime shape as graft-nri: two workers.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(Arc::new(Null), opts))?;
    Ok(())
}
