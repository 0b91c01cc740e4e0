//! Synchronize: split requests gathered, the handler run, and, for a plugin that returns no
//! updates, the answer given before any of that.
//!
//! The runtime registers no other plugin and creates no container until Synchronize is
//! answered, and its request carries every pod and container on the node (405 KiB for
//! 1,000 containers). A plugin that promises no updates
//! ([`NriPlugin::synchronize_updates`]) is answered for as soon as a chunk is read whole
//! (`inline` finds its `more` flag without decoding it); the chunks are decoded and handed
//! to the handler after the answer, on a task of its own. What the runtime could have been
//! told by an error reply it learns by the connection ending instead: a chunk that does not
//! decode or a handler that fails ends the session, and the runtime synchronizes afresh on
//! the next one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use graft_proto::nri;
use protobuf::Message as _;
use ttrpc::{Code, Error as TtrpcError};

use super::Dispatcher;
use crate::guard::{guarded, spawn_logged};
use crate::plugin::{ConnectionState, NriPlugin, Request};

/// Synchronize may take as long as the runtime allows; this only bounds a hung handler.
const SYNCHRONIZE_DEADLINE: Duration = Duration::from_secs(3600);

/// Every pod and container of the chunks in order.
type Gathered = (Vec<nri::PodSandbox>, Vec<nri::Container>);

/// Decodes raw chunks read on the inline path, in order.
fn decode(chunks: Vec<Vec<u8>>) -> Result<Gathered, protobuf::Error> {
    let (mut pods, mut containers) = (Vec::new(), Vec::new());
    for chunk in chunks {
        let req = nri::SynchronizeRequest::parse_from_bytes(&chunk)?;
        pods.extend(req.pods);
        containers.extend(req.containers);
    }
    Ok((pods, containers))
}

impl<P: NriPlugin> Dispatcher<P> {
    /// Synchronize through ttrpc: the handler's answer is the reply.
    pub(super) async fn synchronize_now(
        &self,
        req: nri::SynchronizeRequest,
    ) -> ttrpc::Result<nri::SynchronizeResponse> {
        let (raw, mut pods, mut containers) = {
            let mut st = self.state();
            st.pending_pods.extend(req.pods);
            st.pending_containers.extend(req.containers);
            if req.more {
                return Ok(nri::SynchronizeResponse {
                    more: true,
                    ..Default::default()
                });
            }
            (
                std::mem::take(&mut st.pending_raw),
                std::mem::take(&mut st.pending_pods),
                std::mem::take(&mut st.pending_containers),
            )
        };
        // Chunks the inline path took before this one came this way come first.
        if !raw.is_empty() {
            let (p, c) = decode(raw).map_err(|e| {
                TtrpcError::RpcStatus(ttrpc::get_status(
                    Code::INVALID_ARGUMENT,
                    format!("an earlier Synchronize chunk does not decode: {e}"),
                ))
            })?;
            pods.splice(0..0, p);
            containers.splice(0..0, c);
        }
        let update = self.handle(pods, containers, Instant::now()).await?;
        self.synced.send_replace(true);
        self.plugin.connection_state(ConnectionState::Synchronized);
        Ok(nri::SynchronizeResponse {
            update,
            ..Default::default()
        })
    }

    /// The plugin's handler, told of as answered. No deadline below the runtime's: a slow
    /// Synchronize only delays readiness. A panic still becomes an error rather than a
    /// dropped connection.
    async fn handle(
        &self,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
        started: Instant,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let result = guarded(
            "Synchronize",
            SYNCHRONIZE_DEADLINE,
            self.plugin.synchronize(self.runtime(), pods, containers),
        )
        .await;
        self.answered(Request::Synchronize, started, &result);
        result
    }

    /// Whether Synchronize may be answered before it is decoded.
    pub(crate) fn answers_synchronize_first(&self) -> bool {
        !self.plugin.synchronize_updates()
    }

    /// One chunk read whole on the inline path, `payload` still encoded: the answer to
    /// send now. After the last chunk the handler runs on a task of its own.
    pub(crate) fn synchronize_first(
        self: &Arc<Self>,
        payload: Vec<u8>,
        more: bool,
    ) -> nri::SynchronizeResponse {
        let started = Instant::now();
        let (chunks, pods, containers) = {
            let mut st = self.state();
            st.pending_raw.push(payload);
            if more {
                return nri::SynchronizeResponse {
                    more: true,
                    ..Default::default()
                };
            }
            // Chunks ttrpc took (any the inline path passed on) are already decoded.
            (
                std::mem::take(&mut st.pending_raw),
                std::mem::take(&mut st.pending_pods),
                std::mem::take(&mut st.pending_containers),
            )
        };
        self.synced.send_replace(true);
        let this = self.clone();
        // The plugin hears of it off the answer's path too (graft-nri writes a file).
        spawn_logged("NRI Synchronize after its answer", async move {
            this.plugin.connection_state(ConnectionState::Synchronized);
            this.synchronize_after(chunks, (pods, containers), started)
                .await;
        });
        nri::SynchronizeResponse::default()
    }

    /// Decodes the chunks off the runtime's threads and runs the handler; a failure ends
    /// the connection.
    async fn synchronize_after(&self, chunks: Vec<Vec<u8>>, earlier: Gathered, started: Instant) {
        let decoded = tokio::task::spawn_blocking(move || decode(chunks)).await;
        let (mut pods, mut containers) = earlier;
        match decoded {
            Ok(Ok((p, c))) => {
                pods.extend(p);
                containers.extend(c);
            }
            Ok(Err(e)) => {
                return self.fail(format!("Synchronize, answered, does not decode: {e}"));
            }
            Err(e) => return self.fail(format!("decoding Synchronize failed: {e}")),
        }
        match self.handle(pods, containers, started).await {
            Ok(updates) if updates.is_empty() => {}
            Ok(updates) => tracing::error!(
                updates = updates.len(),
                "the plugin promised Synchronize returns no updates (synchronize_updates) but \
                 returned some; they were dropped"
            ),
            Err(e) => self.fail(format!("Synchronize, answered, failed in the plugin: {e}")),
        }
    }
}
