//! A disk whose writes cost what a small cloud volume's do: an ext4 file system on a loop
//! device whose write IOs the block layer throttles (blk-throttle's
//! `blkio.throttle.write_iops_device`, set in the root blkio cgroup of cgroup v1 so that it
//! also holds the journal's and the flusher's writes). Cloud block storage limits IOs per
//! second the same way (a provisioned IOPS budget), so an `fdatasync`, which costs several
//! write IOs (data, journal blocks, commit), waits for the budget under a stream of them.
//! Root only; removed (throttle, mount, loop device) on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context};

/// The root blkio cgroup's write-IOPS limits (cgroup v1).
const THROTTLE: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device";

/// A throttled loop device with an ext4 file system mounted.
pub struct SlowDisk {
    image: PathBuf,
    device: String,
    dev_t: String,
    mount: PathBuf,
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl SlowDisk {
    /// A `size_mib` image in `dir`, on a loop device limited to `write_iops` write IOs per
    /// second, mounted at `dir/mnt`.
    pub fn new(dir: &Path, size_mib: u64, write_iops: u32) -> anyhow::Result<Self> {
        if !Path::new(THROTTLE).exists() {
            bail!("{THROTTLE} is missing: the slow disk needs cgroup v1's blkio controller");
        }
        let image = dir.join("disk.img");
        std::fs::File::create(&image)?.set_len(size_mib << 20)?;
        let device = run(Command::new("losetup").args(["-f", "--show"]).arg(&image))?;
        let mut disk = SlowDisk {
            image,
            dev_t: String::new(),
            mount: dir.join("mnt"),
            device,
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F", &disk.device]))?;
        std::fs::create_dir_all(&disk.mount)?;
        run(Command::new("mount").arg(&disk.device).arg(&disk.mount))?;
        disk.dev_t = run(Command::new("lsblk").args(["-dno", "MAJ:MIN", &disk.device]))?;
        std::fs::write(THROTTLE, format!("{} {write_iops}", disk.dev_t))
            .with_context(|| format!("throttling {} in {THROTTLE}", disk.device))?;
        Ok(disk)
    }

    /// Where its file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// The loop device.
    pub fn device(&self) -> &str {
        &self.device
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        if !self.dev_t.is_empty() {
            let _ = std::fs::write(THROTTLE, format!("{} 0", self.dev_t));
        }
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}
