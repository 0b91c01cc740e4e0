//! `graft-hook`: createContainer hooks for containers that graft gives NVIDIA devices.
//!
//! The runtime runs it as root from a host path, inside the container's mount namespace
//! before pivot_root, with the OCI state on stdin; the container's root is found from the
//! bundle. Everything inside that root comes from the image and is hostile: all work there
//! is resolved inside the root (see `inroot`). Linked statically (`build-static.sh`), so
//! no dynamic loader runs and no `LD_PRELOAD` applies.
//!
//! - `create-symlinks --link TARGET::LINK ...`: the driver's library symlinks;
//! - `update-ldcache --ldconfig PATH --folder DIR ...`: the host's ldconfig, run against
//!   the container's root, so the injected libraries are in its ld.so.cache;
//! - `disable-device-node-modification --params-copy PATH`: hides `ModifyDeviceFiles: 1`
//!   from the driver's params, so that libnvidia-ml does not try to create nodes inside.

#[cfg(test)]
mod hostile_tests;
mod inroot;
mod ldcache;
mod mount;
mod params;
mod rootfs;
mod symlinks;
#[cfg(test)]
mod testutil;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "graft-hook", version, about = "graft's OCI hooks")]
struct Args {
    /// The container's root; read from the OCI state on stdin when not given (then stdin
    /// is not read).
    #[arg(long, global = true)]
    rootfs: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    CreateSymlinks {
        /// `TARGET::LINK`, LINK a clean absolute path inside the container.
        #[arg(long = "link")]
        links: Vec<String>,
    },
    UpdateLdcache {
        /// Absolute host path of ldconfig.
        #[arg(long)]
        ldconfig: PathBuf,
        /// Library directories inside the container to list first.
        #[arg(long = "folder")]
        folders: Vec<String>,
    },
    DisableDeviceNodeModification {
        /// Absolute host path the per-container copy is named after
        /// (`<params-copy>.<container id>`); its directory is created 0700.
        #[arg(long)]
        params_copy: PathBuf,
        /// The container's id; needed with --rootfs, else the OCI state's `id`.
        #[arg(long)]
        container_id: Option<String>,
        #[arg(long, hide = true, default_value = "/proc/driver/nvidia/params")]
        host_params: PathBuf,
    },
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("graft-hook: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let container = match args.rootfs {
        Some(rootfs) => rootfs::Container { rootfs, id: None },
        None => rootfs::from_state(std::io::stdin().lock()).context("reading the OCI state")?,
    };
    let rootfs = &container.rootfs;
    match args.command {
        Command::CreateSymlinks { links } => symlinks::create(rootfs, &links),
        Command::UpdateLdcache { ldconfig, folders } => {
            ldcache::update(rootfs, &ldconfig, &folders)
        }
        Command::DisableDeviceNodeModification {
            params_copy,
            container_id,
            host_params,
        } => {
            let id = match (container_id, container.id) {
                (Some(given), Some(state)) if given != state => {
                    bail!("--container-id {given:?} differs from the OCI state's id {state:?}")
                }
                (Some(id), _) | (None, Some(id)) => id,
                (None, None) => bail!("no container id: pass --container-id with --rootfs"),
            };
            params::disable_modification(rootfs, &host_params, &params_copy, &id)
        }
    }
}
