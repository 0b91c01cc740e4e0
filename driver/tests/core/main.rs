//! The core's tests that need real families: the claims' state machine driven with
//! NVIDIA's node-side setups, the checkpoint's schema versions NVIDIA's records need, the
//! opaque configuration parsed with every family's part, and the router. They live beside
//! the assembled driver because graft-driver-core names no family.

mod checkpoint;
mod claims;
mod opaque;
mod router;
