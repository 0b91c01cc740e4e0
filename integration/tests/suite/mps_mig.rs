//! MPS on static MIG devices, as discovery publishes them on the fake node: listing a GPU in
//! MIG mode for MPS (`--nvidia-mps 7`) shares each of its MIG devices (compute in percent,
//! the device's own memory), and leaves its engines undivided; the other MIG GPU's devices
//! stay whole. The daemon's side: cluster_gpu::mps_on_a_mig_device.

use crate::common;

use graft_driver::discovery::nvidia::nvml::GpuSelection;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;

#[test]
fn an_mps_gpu_in_mig_mode_shares_each_mig_device() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = graft_integration::fake_gpu::FakeNode::create(dir.path())?;
    let mut config = common::discovery_config(&node, common::as_host_root(&node), 0, "/bin/true");
    // NVML index 7 is minor 5: gpu-5; index 6 (gpu-4) is in MIG mode too, not listed.
    config.mps = GpuSelection::parse("7").map_err(anyhow::Error::msg)?;
    let devices = NvidiaDiscovery::new(config)?.discover()?;
    let migs = |prefix: &str| {
        devices
            .iter()
            .filter(|d| d.name.starts_with(prefix))
            .collect::<Vec<_>>()
    };
    let shared = migs("gpu-5-mig-");
    anyhow::ensure!(shared.len() == 3, "gpu-5's MIG devices: {}", shared.len());
    for d in shared {
        anyhow::ensure!(d.string_attribute("sharing") == Some("mps"), "{}", d.name);
        anyhow::ensure!(d.capacity["compute"] == "100", "{}", d.name);
        let p = d.shared.as_ref().expect("an MPS device has policies");
        anyhow::ensure!(
            p["memory"].max == d.capacity["memory"] && p["memory"].default == d.capacity["memory"],
            "{}: its own memory, all by default: {:?} of {}",
            d.name,
            p["memory"],
            d.capacity["memory"]
        );
        anyhow::ensure!(p["multiprocessors"].default == "0", "{}: {p:?}", d.name);
        anyhow::ensure!(!p.contains_key("encoders"), "{}: {p:?}", d.name);
        let api = graft_driver::slices::api_device(d);
        anyhow::ensure!(api.allow_multiple_allocations == Some(true), "{}", d.name);
    }
    for d in migs("gpu-4-mig-") {
        anyhow::ensure!(
            d.shared.is_none() && d.string_attribute("sharing").is_none(),
            "{}",
            d.name
        );
    }
    Ok(())
}
