//! graft-driver's claims core ([`Core`]): the claims this node has prepared, and every
//! change to them, as a synchronous state machine (see [`lifecycle`]) over the checkpoint,
//! the records graft-nri reads and the devices' node-side setups, which the device families
//! provide through the port in [`setup_port`].
//!
//! It knows no Kubernetes client and no async runtime: the async edge (`edge.rs`) reads
//! claims and pods from the API server, turns them into [`input::ClaimInput`]s and calls
//! the core on a blocking thread, under the kubelet's deadline. Unit tests drive it
//! directly (`tests`).
//!
//! Concurrency: the checkpoint is changed in short transactions under its lock; device
//! setups (which can take long: a GPU to be freed for VFIO) run outside it, each claim with
//! its devices locked ([`keylocks`]), so claims on other devices go on in parallel and a
//! slow setup delays only claims that share its device. One operation runs per claim at a
//! time: a prepare the kubelet retries while the first one still runs waits for it (until
//! the deadline) and then finds it done.

pub mod checkpoint;
pub mod config_edits;
mod engine;
pub mod input;
pub mod keylocks;
pub mod lifecycle;
mod plan;
mod prepare;
pub mod seams;
pub mod setup_error;
pub mod setup_port;
pub mod setup_record;
mod startup;
pub mod tenant;
mod unprepare;

pub use checkpoint::PreparedDevice;
pub use engine::{claim_span, Core, CoreError, CoreResult};
pub use startup::Rebuilt;
