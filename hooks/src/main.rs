//! `graft-hook`: OCI hooks for injected containers. The NVIDIA hooks (create-symlinks,
//! update-ldcache, disable-device-node-modification) land with the NVIDIA work; until then
//! every subcommand is refused, so a record that names one fails loudly instead of silently.

use anyhow::bail;

fn main() -> anyhow::Result<()> {
    let sub = std::env::args().nth(1).unwrap_or_default();
    bail!("graft-hook: unknown subcommand {sub:?}: no hooks are implemented in this build")
}
