//! Device capacity names under the [`crate::DRIVER`] domain: what claims request
//! (`capacity.requests`) and selectors compare (`device.capacity['graft.dev'].memory`).
//! Only graft-driver writes and reads them today, but users name them, so a rename breaks
//! their claims as surely as an attribute's.
//!
//! The dynamic-MIG counters (`compute-slices`, `memory-slice-<n>`...) are not here: no
//! claim, selector or other component can name them; the scheduler only sums them.

/// Memory, in bytes as a quantity (`81559Mi`): a GPU's, a MIG device's, and on an MPS GPU
/// the share a claim consumes.
pub const MEMORY: &str = "memory";
/// On an MPS GPU: the compute percentage (1 to 100) a claim consumes.
pub const COMPUTE: &str = "compute";
/// On a time-sliced GPU or MIG device: the replicas it is offered as; a claim consumes one
/// unless it asks for more.
pub const SHARES: &str = "shares";
/// A MIG device's streaming multiprocessors.
pub const MULTIPROCESSORS: &str = "multiprocessors";
/// A MIG device's copy engines.
pub const COPY_ENGINES: &str = "copyEngines";
/// A MIG device's video decoders.
pub const DECODERS: &str = "decoders";
/// A MIG device's video encoders.
pub const ENCODERS: &str = "encoders";
/// A MIG device's JPEG engines.
pub const JPEG_ENGINES: &str = "jpegEngines";
/// A MIG device's optical flow accelerators.
pub const OFA_ENGINES: &str = "ofaEngines";
/// A served file's size in bytes (a directory's: its regular files').
pub const SIZE: &str = "size";

/// Every name above.
pub const ALL: &[&str] = &[
    MEMORY,
    COMPUTE,
    SHARES,
    MULTIPROCESSORS,
    COPY_ENGINES,
    DECODERS,
    ENCODERS,
    JPEG_ENGINES,
    OFA_ENGINES,
    SIZE,
];
