#!/usr/bin/env bash
# Builds NVIDIA's container toolkit (github.com/NVIDIA/nvidia-container-toolkit) from its Go
# source into the testbed cache: nvidia-container-runtime (the OCI runtime wrapper the GPU
# Operator registers with containerd), nvidia-ctk (which generates its CDI specs) and
# nvidia-cdi-hook (the hooks those specs run). For cluster_gpu::unclaimed_container_sees_no_gpu.
# Prints the directory holding the three binaries on success.
#
# The module has no replace directives, so `go install pkg@version` builds it from the
# module proxy. cgo is required (go-nvml); NVML itself is loaded at run time, and only from
# the driver root. The legacy mode's nvidia-container-runtime-hook and libnvidia-container
# (C) are not built: the GPU Operator configures the CDI mode since v25.10.
#
#   GRAFT_CACHE          cache directory (default: $HOME/.cache/graft-testbed)
#   NVIDIA_CTK_VERSION   the module's version (default: v1.20.2)
set -euo pipefail

CACHE=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
VERSION=${NVIDIA_CTK_VERSION:-v1.20.2}
log() { echo "[build-nvidia-toolkit] $*" >&2; }

export GOPATH="$CACHE/go" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=1

out="$CACHE/bin/nvidia-container-toolkit-$VERSION"
mkdir -p "$CACHE/bin"
# The node and cluster tiers may both ask at once: one builds, the other waits for it.
exec 9>"$out.lock"
flock 9
tools=(nvidia-container-runtime nvidia-ctk nvidia-cdi-hook)
done=1
for t in "${tools[@]}"; do [ -x "$out/$t" ] || done=0; done
if [ "$done" = 1 ]; then
  echo "$out"
  exit 0
fi
log "building nvidia-container-toolkit $VERSION"
mkdir -p "$out.tmp"
pkgs=()
for t in "${tools[@]}"; do pkgs+=("github.com/NVIDIA/nvidia-container-toolkit/cmd/$t@$VERSION"); done
GOBIN="$out.tmp" go install -ldflags "-X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${VERSION#v}" "${pkgs[@]}" >&2
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
