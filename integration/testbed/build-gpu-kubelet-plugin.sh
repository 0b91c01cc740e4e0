#!/usr/bin/env bash
# Builds NVIDIA's DRA kubelet plugin (gpu-kubelet-plugin of NVIDIA/k8s-dra-driver-gpu) into
# the testbed cache, for the memory comparison with graft-driver
# (integration/benches/driver_memory_vs_nvidia.rs). Prints the binary's path on success.
#
# The module is not served by the Go module proxy, so the source comes from a git
# repository of NVIDIA/k8s-dra-driver-gpu, and the build uses that release's vendor
# directory (no network). It needs cgo: go-nvml binds libnvidia-ml at run time, with the
# unresolved-symbol linker flag the project's Makefile passes.
#
#   GRAFT_CACHE      cache directory (default: $HOME/.cache/graft-testbed)
#   DRA_GPU_REF      git ref to build (default: v0.4.0)
#   DRA_GPU_GIT      a clone (bare or not) of NVIDIA/k8s-dra-driver-gpu (default: clone
#                    https://github.com/NVIDIA/k8s-dra-driver-gpu into the cache)
set -euo pipefail

CACHE=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
DRA_GPU_REF=${DRA_GPU_REF:-v0.4.0}
log() { echo "[build-gpu-kubelet-plugin] $*" >&2; }
if ! command -v go >/dev/null; then export PATH="/usr/local/go/bin:$PATH"; fi
export GOPATH="$CACHE/go" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-mod=vendor GOPROXY=off

out="$CACHE/bin/gpu-kubelet-plugin-$DRA_GPU_REF"
if [ -x "$out/gpu-kubelet-plugin" ]; then
  echo "$out/gpu-kubelet-plugin"
  exit 0
fi

git_dir=${DRA_GPU_GIT:-}
if [ -z "$git_dir" ]; then
  git_dir="$CACHE/src/k8s-dra-driver-gpu.git"
  if [ ! -d "$git_dir" ]; then
    log "cloning NVIDIA/k8s-dra-driver-gpu"
    mkdir -p "$CACHE/src"
    git clone --bare --quiet https://github.com/NVIDIA/k8s-dra-driver-gpu "$git_dir"
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
commit=$(git -C "$git_dir" rev-parse "$DRA_GPU_REF^{commit}")
log "building gpu-kubelet-plugin $DRA_GPU_REF ($commit) from its vendor directory"
git -C "$git_dir" archive "$commit" | tar -x -C "$work"
cd "$work"
module=$(awk '$1 == "module" {print $2; exit}' go.mod)
mkdir -p "$out"
CGO_ENABLED=1 CGO_LDFLAGS_ALLOW='-Wl,--unresolved-symbols=ignore-in-object-files' \
  go build -trimpath -ldflags "-s -w -X $module/internal/info.version=$DRA_GPU_REF -X $module/internal/info.gitCommit=$commit" \
  -o "$out/gpu-kubelet-plugin" "./cmd/gpu-kubelet-plugin" >&2
echo "$DRA_GPU_REF $commit" >"$out/.source"
echo "$out/gpu-kubelet-plugin"
