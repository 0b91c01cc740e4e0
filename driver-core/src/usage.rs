//! What a family measures of the devices it serves, for the metrics that name the pod
//! using each (`metrics::usage`): a family reports per device, and the core, which holds
//! the claim records, says whose it is. A family knows devices; the core knows claims.

/// One round of a family's measurements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageReport {
    /// The devices measured, by their published name.
    pub devices: Vec<DeviceUsage>,
}

/// What was measured of one device; `None` where the device does not report it (NVML has
/// no utilisation or power for a MIG device).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceUsage {
    /// The device's name in the node's ResourceSlice.
    pub device: String,
    /// The GPU's UUID as monitoring tools label it: a whole GPU's own, a MIG device's
    /// parent's (dcgm-exporter's `UUID`).
    pub gpu_uuid: String,
    /// A MIG device's GPU instance id (dcgm-exporter's `GPU_I_ID`); empty for a whole GPU.
    pub gpu_instance: String,
    /// Time busy over the last sample period, 0 to 1.
    pub utilization: Option<f64>,
    /// Memory in use, in bytes.
    pub memory_used_bytes: Option<u64>,
    /// Power drawn, in watts.
    pub power_watts: Option<f64>,
    /// A device several claims share, measured per process (an MPS GPU's clients): only
    /// `processes` are anyone's, never the device's own figures.
    pub per_process: bool,
    /// Those processes, each with the container it runs in.
    pub processes: Vec<ProcessUsage>,
}

/// One process on a shared device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessUsage {
    /// The runtime's id of the container the process runs in.
    pub container_id: String,
    /// Device memory the process uses, in bytes.
    pub memory_used_bytes: u64,
}
