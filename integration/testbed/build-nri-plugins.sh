#!/usr/bin/env bash
# Builds containerd's own device-injector NRI plugin (containerd/nri, plugins/device-injector)
# into the testbed cache, for the side-by-side benchmark with graft-nri
# (integration/benches/nri_vs_injector.rs). Prints the binary's path on success.
#
# The plugin is a nested Go module of the containerd/nri repository that is not published on
# the module proxy, and its go.mod replaces github.com/containerd/nri with the repository
# root. So: take the plugin's source from a git repository of containerd/nri at
# NRI_PLUGIN_REF, drop the replace, and build it against the github.com/containerd/nri module
# NRI_VERSION from the module proxy (the library a containerd of that release line talks to).
#
#   GRAFT_CACHE      cache directory (default: $HOME/.cache/graft-testbed)
#   NRI_VERSION      github.com/containerd/nri module version (default: v0.12.5)
#   NRI_PLUGIN_REF   git ref of containerd/nri whose plugins/device-injector is built
#                    (default: v0.12.2)
#   NRI_GIT          a clone (bare or not) of containerd/nri to take the source from
#                    (default: clone https://github.com/containerd/nri into the cache)
set -euo pipefail

CACHE=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
NRI_VERSION=${NRI_VERSION:-v0.12.5}
NRI_PLUGIN_REF=${NRI_PLUGIN_REF:-v0.12.2}
log() { echo "[build-nri-plugins] $*" >&2; }

export GOPATH="$CACHE/go" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-modcacherw

out="$CACHE/bin/nri-device-injector-$NRI_PLUGIN_REF-nri-$NRI_VERSION"
if [ -x "$out/device-injector" ]; then
  echo "$out/device-injector"
  exit 0
fi

git_dir=${NRI_GIT:-}
if [ -z "$git_dir" ]; then
  git_dir="$CACHE/src/containerd-nri.git"
  if [ ! -d "$git_dir" ]; then
    log "cloning containerd/nri"
    mkdir -p "$CACHE/src"
    git clone --bare --quiet https://github.com/containerd/nri "$git_dir"
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "building device-injector from containerd/nri $NRI_PLUGIN_REF against nri $NRI_VERSION"
git -C "$git_dir" archive "$NRI_PLUGIN_REF" plugins/device-injector | tar -x -C "$work"
cd "$work/plugins/device-injector"
go mod edit -dropreplace github.com/containerd/nri -require "github.com/containerd/nri@$NRI_VERSION"
go mod tidy >&2
mkdir -p "$out"
CGO_ENABLED=0 go build -mod=mod -trimpath -o "$out/device-injector" . >&2
echo "$NRI_PLUGIN_REF $NRI_VERSION $(git -C "$git_dir" rev-parse "$NRI_PLUGIN_REF^{commit}" 2>/dev/null || true)" >"$out/.source"
echo "$out/device-injector"
