//! NVML's numbers and strings in the forms graft publishes: profile names, sysfs bus ids,
//! brand and architecture names.

/// NVML's MIG profile naming: `<G>g.<GB>gb`, or `<C>c.<G>g.<GB>gb` when the compute
/// instance is smaller than its GPU instance. GB rounds the memory share up to eighths of
/// the parent's memory in whole GiB.
pub fn profile_name(gi_slices: u32, ci_slices: u32, memory_mb: u64, parent_bytes: u64) -> String {
    let parent_gib = parent_bytes.div_ceil(1 << 30).max(1);
    let eighths = (memory_mb << 20)
        .saturating_mul(8)
        .div_ceil(parent_bytes.max(1));
    let gb = (eighths * parent_gib + 4) / 8;
    if ci_slices != 0 && ci_slices != gi_slices {
        format!("{ci_slices}c.{gi_slices}g.{gb}gb")
    } else {
        format!("{gi_slices}g.{gb}gb")
    }
}

/// `00000000:18:00.0` → `0000:18:00.0`, the form sysfs uses.
pub fn sysfs_bus_id(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// NVML's brand numbers (`nvmlBrandType_t`) as names.
pub fn brand_name(b: u32) -> &'static str {
    match b {
        1 => "Quadro",
        2 => "Tesla",
        3 => "NVS",
        4 => "GRID",
        5 => "GeForce",
        6 => "Titan",
        7 => "NvidiaVApps",
        8 => "NvidiaVPC",
        9 => "NvidiaVCS",
        10 => "NvidiaVWS",
        11 => "NvidiaCloudGaming",
        12 => "QuadroRTX",
        13 => "NvidiaRTX",
        14 => "Nvidia",
        15 => "GeForceRTX",
        16 => "TitanRTX",
        _ => "Unknown",
    }
}

/// NVML's architecture numbers (`nvmlDeviceArchitecture_t`) as names.
pub fn architecture_name(a: u32) -> &'static str {
    match a {
        2 => "Kepler",
        3 => "Maxwell",
        4 => "Pascal",
        5 => "Volta",
        6 => "Turing",
        7 => "Ampere",
        8 => "Ada Lovelace",
        9 => "Hopper",
        10 => "Blackwell",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_follow_nvml() {
        let h100 = 85_520_809_984;
        assert_eq!(profile_name(1, 1, 9_856, h100), "1g.10gb");
        assert_eq!(profile_name(2, 2, 19_968, h100), "2g.20gb");
        assert_eq!(profile_name(3, 3, 40_192, h100), "3g.40gb");
        assert_eq!(profile_name(4, 4, 40_192, h100), "4g.40gb");
        assert_eq!(profile_name(7, 7, 80_896, h100), "7g.80gb");
        assert_eq!(profile_name(3, 1, 40_192, h100), "1c.3g.40gb");
        let a100_40 = 42_949_672_960;
        assert_eq!(profile_name(1, 1, 4_864, a100_40), "1g.5gb");
    }

    #[test]
    fn bus_ids_in_sysfs_form() {
        assert_eq!(sysfs_bus_id("00000000:1A:00.0"), "0000:1a:00.0");
        assert_eq!(sysfs_bus_id("0000:1a:00.0"), "0000:1a:00.0");
    }
}
