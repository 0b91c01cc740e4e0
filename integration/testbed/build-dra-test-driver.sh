#!/usr/bin/env bash
# Builds the DRA test driver that Kubernetes uses in its own end-to-end tests
# (k8s.io/kubernetes/test/e2e/dra/test-driver: a kubelet plugin that injects through CDI)
# at the testbed's Kubernetes version, into the testbed cache, for the side-by-side start-up
# benchmark (integration/benches/cluster_startup.rs). Prints the binary's path on success.
#
# It builds in a copy of the wrapper module k8s/ (which pins every staging module to its
# release), so that the test driver's extra dependencies never touch the wrapper's go.sum:
# setup.sh rebuilds all of Kubernetes when that changes.
#
#   GRAFT_CACHE   cache directory (default: $HOME/.cache/graft-testbed)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
log() { echo "[build-dra-test-driver] $*" >&2; }
if ! command -v go >/dev/null; then export PATH="/usr/local/go/bin:$PATH"; fi
export GOPATH="$CACHE/go" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-modcacherw

K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/k8s/go.mod")
out="$CACHE/bin/dra-test-driver-$K8S_VERSION"
if [ -x "$out/dra-test-driver" ]; then
  echo "$out/dra-test-driver"
  exit 0
fi

log "building k8s.io/kubernetes/test/e2e/dra/test-driver $K8S_VERSION (a few minutes on a cold cache)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/k8s/go.mod" "$here/k8s/go.sum" "$work/"
mkdir -p "$out"
(cd "$work" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" \
   -o "$out/dra-test-driver" k8s.io/kubernetes/test/e2e/dra/test-driver) >&2
echo "$out/dra-test-driver"
