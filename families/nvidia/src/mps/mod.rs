//! GPUs shared through NVIDIA MPS: what graft-driver and graft-mps agree on.
//!
//! One MPS control daemon serves one GPU for ONE NAMESPACE AT A TIME (a "tenancy"): MPS
//! cannot keep two tenants of one server apart (its clients share the server's pipe
//! directory and /dev/shm, a fatal fault of one reaches all of them, and any client can send
//! control commands), and several servers on one GPU cannot enforce limits either. So
//! graft-driver refuses a share whose GPU serves another namespace, and graft-mps (its own
//! DaemonSet, so that the daemons outlive graft-driver's restarts and rollouts) runs one
//! sandboxed daemon per tenancy with fresh directories and the tenancy's limits set on the
//! server side.
//!
//! They talk through files in graft's state directory (root-only, the same host path in
//! both pods):
//!
//! ```text
//! <state>/mps/<gpu-uuid>.lock                 flock: graft-driver's namespace check
//!                                             (a MIG device's own UUID for a share of one)
//! <state>/mps/<gpu-uuid>/shares/<id>.json     graft-driver: one per prepared share
//! <state>/mps/<gpu-uuid>/status.json          graft-mps: the tenancy it runs
//! <state>/mps/<gpu-uuid>/t-<generation>/      graft-mps: one tenancy's directories
//!     pipe/  a small tmpfs, mode 1777, tenants' /tmp/nvidia-mps (tenant-writable: never
//!            read by graft)
//!     shm/   a tmpfs, tenants' /dev/shm
//!     log/   root only, never mounted into tenants
//!     root/  the mount point of the daemon's sandbox root
//! ```

pub mod control;
pub mod daemon;
mod files;
pub mod fsops;
pub mod privileges;
pub mod protocol;
pub mod reconcile;
pub mod sandbox;
pub mod tenancy;
pub mod v3;

pub use files::{
    read_shares, read_status, root, tenancy_limits, valid_share, valid_uuid, GpuPaths, MigIds,
    Phase, ShareMarker, Status, TenancyPaths, CLIENT_PIPE_DIR, FILE_CAP,
};
