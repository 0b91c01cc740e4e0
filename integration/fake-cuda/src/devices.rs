//! Which of the fake node's GPUs this process can use: like the real driver, only those
//! whose device nodes exist and may be opened (a devices cgroup that denies them makes
//! open fail with EPERM; on a machine without the nvidia module an allowed node fails with
//! ENXIO instead, which counts as usable).

use std::io::ErrorKind;
use std::path::Path;

/// NVML index to minor number, as the fake NVML (integration/fake-nvml) reports them.
const MINORS: [u32; 8] = [2, 3, 0, 1, 6, 7, 4, 5];

pub const NAME: &str = "NVIDIA H100 80GB HBM3 (fake)";
pub const TOTAL_MEMORY: usize = 85_520_809_984;

fn usable(path: &Path) -> bool {
    if std::fs::symlink_metadata(path).is_err() {
        return false;
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::PermissionDenied,
    }
}

/// The NVML indices of the usable GPUs, in index order; empty without `/dev/nvidiactl`.
pub fn visible() -> Vec<usize> {
    if !usable(Path::new("/dev/nvidiactl")) {
        return Vec::new();
    }
    (0..MINORS.len())
        .filter(|&i| usable(Path::new(&format!("/dev/nvidia{}", MINORS[i]))))
        .collect()
}
