//! A device family as one piece: its discovery, its node-side setup, what it adds to
//! graft-nri's policy, its start-up work and its long-running tasks. graft-driver's
//! assembly asks each [`Backend`] for these at the right point of its start-up, and
//! [`router::Router`] sends each setup call to the family that owns the device or setup.
//! A family is chosen with `--discovery` (graft-driver's `families::Family`); see the checklist in
//! [`crate::discovery`] for what a new one touches.

mod port;
pub mod router;
pub mod scan;

pub use port::{Backend, BackendError, Injection, Node, Running};
pub use scan::{Discovery, Unavailable};
