//! `graft-hook`: createContainer hooks for containers that graft gives NVIDIA devices.
//!
//! The runtime runs it from a host path, inside the container's mount namespace before
//! pivot_root, with the OCI state on stdin; the container's root is found from the bundle.
//!
//! - `create-symlinks --link TARGET::LINK ...`: the driver's library symlinks;
//! - `update-ldcache --ldconfig PATH --folder DIR ...`: the host's ldconfig, run against
//!   the container's root, so the injected libraries are in its ld.so.cache;
//! - `disable-device-node-modification --params-copy PATH`: hides `ModifyDeviceFiles: 1`
//!   from the driver's params, so that libnvidia-ml does not try to create nodes inside.

mod ldcache;
mod params;
mod rootfs;
mod symlinks;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "graft-hook", version, about = "graft's OCI hooks")]
struct Args {
    /// The container's root; read from the OCI state on stdin when not given.
    #[arg(long, global = true)]
    rootfs: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    CreateSymlinks {
        /// `TARGET::LINK`, LINK absolute inside the container.
        #[arg(long = "link")]
        links: Vec<String>,
    },
    UpdateLdcache {
        /// Host path of ldconfig.
        #[arg(long)]
        ldconfig: PathBuf,
        /// Library directories inside the container to list first.
        #[arg(long = "folder")]
        folders: Vec<String>,
    },
    DisableDeviceNodeModification {
        /// Host path for the rewritten copy of the params file.
        #[arg(long)]
        params_copy: PathBuf,
        #[arg(long, hide = true, default_value = "/proc/driver/nvidia/params")]
        host_params: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rootfs = match args.rootfs {
        Some(r) => r,
        None => rootfs::from_state(std::io::stdin().lock()).context("reading the OCI state")?,
    };
    match args.command {
        Command::CreateSymlinks { links } => symlinks::create(&rootfs, &links),
        Command::UpdateLdcache { ldconfig, folders } => {
            ldcache::update(&rootfs, &ldconfig, &folders)
        }
        Command::DisableDeviceNodeModification {
            params_copy,
            host_params,
        } => params::disable_modification(&rootfs, &host_params, &params_copy),
    }
}
