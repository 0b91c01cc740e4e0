//! A MIG-enabled GPU's GPU instance profiles, their placements, and the instances that
//! exist, as NVML reports them (dynamic MIG).

/// A GPU instance profile the GPU supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfile {
    /// NVML's profile id (what create takes).
    pub id: u32,
    /// Without NVML's `MIG ` prefix: `3g.40gb`, `1g.10gb+me`.
    pub name: String,
    /// Compute slices an instance takes.
    pub slices: u32,
    /// How many instances of it fit.
    pub instance_count: u32,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Copy engines.
    pub copy_engines: u32,
    /// Video decoders.
    pub decoders: u32,
    /// Video encoders.
    pub encoders: u32,
    /// JPEG engines.
    pub jpeg_engines: u32,
    /// Optical-flow engines.
    pub ofa_engines: u32,
    /// Memory of an instance.
    pub memory_mib: u64,
    /// Where an instance of it can go: `(start, size)` in memory slices.
    pub placements: Vec<(u32, u32)>,
}

/// A GPU instance that exists now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiInstance {
    /// NVML's GPU instance id.
    pub id: u32,
    /// Its profile id.
    pub profile: u32,
    /// First memory slice.
    pub start: u32,
    /// Memory slices it spans.
    pub size: u32,
}

/// A MIG-enabled GPU's profiles and instances.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigLayout {
    /// The profiles the GPU supports.
    pub profiles: Vec<GiProfile>,
    /// Its GPU instances, by placement.
    pub instances: Vec<GiInstance>,
}
