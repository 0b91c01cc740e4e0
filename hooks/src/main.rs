//! `graft-hook`: createContainer hooks for containers that graft gives NVIDIA devices.
//!
//! The runtime runs it as root from a host path, inside the container's mount namespace
//! before pivot_root, with the OCI state on stdin; the container's root is found from the
//! bundle. Everything inside that root comes from the image and is hostile: all work there
//! is resolved inside the root (see `inroot`). Linked statically (`build-static.sh`), so
//! no dynamic loader runs and no `LD_PRELOAD` applies.
//!
//! - `nvidia-container --link ... --folder ... --ldconfig PATH --params-copy PATH
//!   [--driver-version V] [--driver-dir DIR --driver-file PATH ...]`: all of a GPU
//!   container's work in one process (see `container`): the driver files' links into the
//!   prepared directory (`copies`), the library links, the linker cache only when the image needs it (or CUDA
//!   forward compatibility asks for it; merged by graft-hook itself, ldconfig only as the
//!   fallback), and the device-node settings hidden;
//! - `create-symlinks --link TARGET::LINK ...`: the driver's library symlinks;
//! - `update-ldcache --ldconfig PATH --folder DIR ...`: the host's ldconfig, run against
//!   the container's root, so the injected libraries are in its ld.so.cache;
//! - `disable-device-node-modification --params-copy PATH`: hides `ModifyDeviceFiles: 1`
//!   from the driver's params, so that libnvidia-ml does not try to create nodes inside.

mod cache_build;
mod compat;
mod container;
mod copies;
#[cfg(test)]
mod hostile_tests;
mod inroot;
mod ldcache;
mod linker;
mod mount;
mod params;
#[cfg(test)]
mod recording_mounter;
mod rootfs;
mod soname;
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
    NvidiaContainer {
        /// `TARGET::LINK`, LINK a clean absolute path inside the container.
        #[arg(long = "link")]
        links: Vec<String>,
        /// Library directories inside the container (where the driver's are mounted).
        #[arg(long = "folder")]
        folders: Vec<String>,
        /// Absolute host path of ldconfig, run only when the image needs its cache rebuilt.
        #[arg(long)]
        ldconfig: PathBuf,
        /// Absolute host path the per-container copies are named after.
        #[arg(long)]
        params_copy: PathBuf,
        /// The container's id; needed with --rootfs, else the OCI state's `id`.
        #[arg(long)]
        container_id: Option<String>,
        /// The host driver's version: with it, a newer CUDA compat libcuda in the image
        /// is used (CUDA forward compatibility).
        #[arg(long)]
        driver_version: Option<String>,
        #[arg(long, default_value = compat::DEFAULT_DIR)]
        cuda_compat_dir: String,
        /// Where the driver's prepared directory is bound in the container.
        #[arg(long)]
        driver_dir: Option<String>,
        /// A driver file's usual path, made a link to its copy in --driver-dir.
        #[arg(long = "driver-file", requires = "driver_dir")]
        driver_files: Vec<String>,
        /// graft-hook's own tests only (another params file than the driver's).
        #[arg(long, hide = true)]
        host_params: Option<PathBuf>,
    },
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
        /// graft-hook's own tests only (another params file than the driver's).
        #[arg(long, hide = true)]
        host_params: Option<PathBuf>,
    },
}

/// The driver's params file, which disable-device-node-modification hides.
const HOST_PARAMS: &str = "/proc/driver/nvidia/params";

/// `--rootfs` (work on a root other than the container's, the host's included) and
/// `--host-params` (read any host file as the driver's params) exist for graft-hook's unit
/// tests; a hook the runtime runs as root never honours them, whoever wrote its record.
fn test_only(flag: &str, given: bool) -> anyhow::Result<()> {
    if given && !cfg!(test) {
        bail!(
            "{flag} is refused: it is for graft-hook's own tests, and graft-hook takes the \
             container's root from the OCI state and the params from {HOST_PARAMS}"
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("graft-hook: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    test_only("--rootfs", args.rootfs.is_some())?;
    let host_params = match &args.command {
        Command::NvidiaContainer { host_params, .. }
        | Command::DisableDeviceNodeModification { host_params, .. } => host_params.clone(),
        _ => None,
    };
    test_only("--host-params", host_params.is_some())?;
    let host_params = host_params.unwrap_or_else(|| PathBuf::from(HOST_PARAMS));
    // Refused before anything is done, whether or not this container needs it run.
    match &args.command {
        Command::NvidiaContainer { ldconfig, .. } | Command::UpdateLdcache { ldconfig, .. } => {
            ldcache::check_ldconfig(ldconfig)?
        }
        _ => {}
    }
    let container = match args.rootfs {
        Some(rootfs) => rootfs::Container {
            rootfs,
            id: None,
            ld_library_path: None,
        },
        None => rootfs::from_state(std::io::stdin().lock()).context("reading the OCI state")?,
    };
    let rootfs = &container.rootfs;
    match args.command {
        Command::NvidiaContainer {
            links,
            folders,
            ldconfig,
            params_copy,
            container_id,
            driver_version,
            cuda_compat_dir,
            driver_dir,
            driver_files,
            host_params: _,
        } => {
            let id = container_id_of(container_id, container.id.clone())?;
            let o = container::Options {
                links,
                folders,
                ldconfig,
                params_copy,
                host_params,
                container_id: id,
                driver_version,
                compat_dir: cuda_compat_dir,
                driver_dir,
                driver_files,
            };
            container::run(&container, &o).map(|_| ())
        }
        Command::CreateSymlinks { links } => symlinks::create(rootfs, &links),
        Command::UpdateLdcache { ldconfig, folders } => {
            ldcache::update(rootfs, &ldconfig, &folders)
        }
        Command::DisableDeviceNodeModification {
            params_copy,
            container_id,
            host_params: _,
        } => {
            let id = container_id_of(container_id, container.id.clone())?;
            params::disable_modification(rootfs, &host_params, &params_copy, &id)
        }
    }
}

/// The container id given on the command line or in the OCI state; both must agree.
fn container_id_of(given: Option<String>, state: Option<String>) -> anyhow::Result<String> {
    match (given, state) {
        (Some(given), Some(state)) if given != state => {
            bail!("--container-id {given:?} differs from the OCI state's id {state:?}")
        }
        (Some(id), _) | (None, Some(id)) => Ok(id),
        (None, None) => bail!("no container id: pass --container-id with --rootfs"),
    }
}
