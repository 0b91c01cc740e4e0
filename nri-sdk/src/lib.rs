//! A small SDK for [NRI](https://github.com/containerd/nri) plugins written in Rust.
//!
//! Implement [`NriPlugin`], hand it to [`run`] with [`Options`], and the SDK registers with
//! the runtime (containerd or CRI-O), answers Configure with an event mask the runtime's
//! version understands, gathers split Synchronize requests, routes both the dedicated event
//! RPCs and StateChange to [`NriPlugin::lifecycle`], answers everything else with
//! UNIMPLEMENTED, and reconnects when the runtime restarts. Every handler runs under a
//! deadline and a panic guard ([`guard`]): a late or panicking handler fails its request
//! instead of getting the plugin dropped.
//!
//! In short (the whole plugin, compiled with the workspace's tests, is
//! `examples/hello_env.rs`):
//!
//! ```ignore
//! use std::sync::Arc;
//! use graft_nri_sdk::{async_trait, nri, run, Event, EventMask, NriPlugin, Options, Transport};
//!
//! struct Hello;
//!
//! #[async_trait]
//! impl NriPlugin for Hello {
//!     fn events(&self) -> EventMask {
//!         EventMask::of(&[Event::CREATE_CONTAINER])
//!     }
//!
//!     async fn create_container(
//!         &self,
//!         _pod: nri::PodSandbox,
//!         _container: nri::Container,
//!     ) -> graft_nri_sdk::ttrpc::Result<nri::CreateContainerResponse> {
//!         Ok(nri::CreateContainerResponse::new())
//!     }
//! }
//!
//! # async fn example() -> Result<(), graft_nri_sdk::SdkError> {
//! let transport = Transport::External("/var/run/nri/nri.sock".into());
//! run(Arc::new(Hello), Options::new("hello", "50", transport)).await
//! # }
//! ```
//!
//! Inside: [`mux`] carries NRI's logical connections over one socket, [`event_mask`] knows which
//! events a runtime accepts, `options` says how to reach the runtime, `session` keeps one
//! connection alive and reconnects, `dispatcher` serves the runtime's requests, and `inline`
//! answers CreateContainer (and Synchronize, for a plugin that returns no updates) on the
//! multiplexer's reader task instead of through ttrpc's; [`scripted`] plays the runtime's
//! end for a plugin's tests and benches.

mod dispatcher;
pub mod event_mask;
pub mod guard;
mod inline;
pub mod mux;
mod options;
mod plugin;
pub mod scripted;
mod session;

pub use event_mask::{valid_events, EventMask};
pub use guard::{guarded, panic_message, spawn_logged, DEFAULT_DEADLINE};
pub use options::{Options, OptionsError, Transport};
pub use plugin::{
    unimplemented, Answered, ConnectionState, NriPlugin, Request, Runtime, RuntimeInfo,
};
pub use session::{run, ConnectionError, SdkError};

/// Implementations of [`NriPlugin`] use this attribute (`#[async_trait]`).
pub use async_trait::async_trait;
/// The NRI API's messages (pods, containers, adjustments, updates).
pub use graft_proto::nri;
/// An NRI event (`Event::CREATE_CONTAINER`, ...).
pub use graft_proto::nri::Event;
/// The RPC layer: handlers return [`ttrpc::Result`], errors are [`ttrpc::Error`].
pub use ttrpc;
