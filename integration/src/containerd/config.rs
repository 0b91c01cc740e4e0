//! The config file of a testbed containerd, per version.

use std::path::Path;

use super::{Version, PAUSE_IMAGE};

/// containerd `version`'s config for an instance under `dir` (sockets, state and NRI there),
/// with CDI specs read from `cdi` only when given (2.x; containerd 1.7 is never run so).
pub(super) fn toml(version: Version, dir: &Path, cdi: Option<&Path>) -> String {
    let d = dir.display();
    let cdi = cdi
        .map(|c| {
            format!(
                "  enable_cdi = true\n  cdi_spec_dirs = [\"{}\"]\n",
                c.display()
            )
        })
        .unwrap_or_default();
    match version {
        // 2.4 reads version 3 as it is: version 4 moved only the restart monitor.
        Version::V2_2 | Version::V2_4 => format!(
            r#"version = 3
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri/plugins"
  plugin_config_path = "{d}/nri/conf.d"
# As the chart's install guide sets it: containers of pods that require a plugin are
# refused while it is not connected (pods without the annotation are not affected).
[plugins.'io.containerd.nri.v1.nri'.default_validator]
  enable = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
{cdi}[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{d}/cni/bin"]
  conf_dir = "{d}/cni/net.d"
"#
        ),
        Version::V1_7 => format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri/plugins"
  plugin_config_path = "{d}/nri/conf.d"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/net.d"
"#
        ),
    }
}
