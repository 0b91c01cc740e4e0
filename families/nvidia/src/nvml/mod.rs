//! NVML inventory: the GPUs, their MIG devices, MIG layouts and NVLink islands as NVML reports them, in
//! plain data ([`Inventory`]); the MIG management calls dynamic MIG makes; and [`open()`], the
//! one place that loads NVML, used by discovery, the MIG and persistence setups and the
//! health monitor alike.

mod inventory;
mod layout;
mod mig;
mod names;
mod open;
mod raw;
mod selection;
mod topology;

pub use inventory::{read_inventory, FailedGpu, Gpu, Inventory, Mig};
pub use layout::{GiInstance, GiProfile, MigLayout};
pub use mig::{create_gi, destroy_gi, find_gi, full_compute_instance, gi_placement, MigCallError};
pub use names::{profile_name, sysfs_bus_id};
pub use open::open;
pub use selection::{GpuSelection, SelectionError};
pub use topology::{island_order, Island};
