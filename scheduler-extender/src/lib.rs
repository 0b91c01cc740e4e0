//! graft-scheduler-extender: scores nodes for pods that ask graft for whole GPUs, through
//! kube-scheduler's extender interface (`prioritize`), so that placements fragment the
//! fleet less: partly used nodes fill first (or load spreads, as configured), and a
//! multi-GPU claim goes where one NVLink island holds it. It never decides alone: the
//! scheduler's DRA plugin still allocates, and an `ignorable` extender that is down or
//! slow changes nothing. See docs/placement.md.

pub mod demand;
pub mod events;
pub mod index;
pub mod intake;
pub mod listen;
pub mod metrics;
pub mod prioritize;
pub mod score;
pub mod server;
pub mod slim;
pub mod state;
pub mod tls;
pub mod watch;
pub use graft_api::extender as wire;

pub use prioritize::{prioritize, Config, Scored, View};
pub use score::Mode;
