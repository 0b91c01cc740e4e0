#!/usr/bin/env bash
# Deploys graft onto the testbed cluster the way a user would: builds the image from the
# workspace binaries (deploy/image/build.sh), imports it into the node's containerd, and
# applies deploy/graft/ (kubectl kustomize) unchanged except for the image reference, then
# deploy/optional/. Waits until graft-driver has published the node's ResourceSlice.
#
#   deploy-graft.sh [BIN_DIR]      default: target/debug
#
# GRAFT_GPU_FAKE=DIR deploys deploy/gpu/ instead, on a node without a GPU: DIR holds a fake
# NVIDIA node (integration/src/fake_gpu.rs: DIR/host the driver root, DIR/proc and DIR/sys
# what the kernel would show). Only values change, as a user's overlay would change them:
# the driver root in both containers, and graft-driver's /proc and /sys (a real node's
# come from its kernel). GRAFT_GPU_DYNAMIC_MIG and GRAFT_GPU_MPS set GRAFT_NVIDIA_DYNAMIC_MIG
# and GRAFT_NVIDIA_MPS (default none).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
bin=${1:-$top/target/debug}
IMAGE=localhost/graft:testbed
D=${GRAFT_CLUSTER_DIR:-/var/lib/graft-cluster}
env_file=$(bash "$here/../setup.sh")
# shellcheck disable=SC1090
source "$env_file"
export PATH="$GRAFT_CONTAINERD_2:$GRAFT_K8S:$PATH" KUBECONFIG="$D/admin.kubeconfig"
log() { echo "[deploy-graft] $*" >&2; }

tar="$D/graft-image.tar"
# graft-hook goes into the image statically linked, as the shipped image has it.
case "$bin" in */release) hook=$(bash "$top/hooks/build-static.sh" --release) ;; *) hook=$(bash "$top/hooks/build-static.sh") ;; esac
HOOK_BIN=$hook bash "$top/deploy/image/build.sh" "$bin" "$tar" "$IMAGE" >/dev/null
ctr -a /run/graft-cluster/containerd.sock -n k8s.io images import "$tar" >/dev/null 2>&1
if [ -n "${GRAFT_GPU_FAKE:-}" ]; then
  k=$(mktemp -d)
  trap 'rm -rf "$k"' EXIT
  # A kustomization of our own on top of deploy/gpu, as a user would write one.
  cat >"$k/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$k" "$top/deploy/gpu")
patches:
  - target: {kind: DaemonSet, name: graft}
    patch: |-
      - {op: replace, path: /spec/template/spec/containers/0/env/1/value, value: "$GRAFT_GPU_FAKE/host"}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: GRAFT_PROC_ROOT, value: "/host$GRAFT_GPU_FAKE/proc"}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: GRAFT_SYSFS_ROOT, value: "/host$GRAFT_GPU_FAKE/sys"}}
      - {op: replace, path: /spec/template/spec/containers/1/env/0/value, value: "$GRAFT_GPU_FAKE/host"}
      - {op: test, path: /spec/template/spec/containers/0/env/4/name, value: GRAFT_NVIDIA_DYNAMIC_MIG}
      - {op: replace, path: /spec/template/spec/containers/0/env/4/value, value: "${GRAFT_GPU_DYNAMIC_MIG:-none}"}
      - {op: test, path: /spec/template/spec/containers/0/env/5/name, value: GRAFT_NVIDIA_MPS}
      - {op: replace, path: /spec/template/spec/containers/0/env/5/value, value: "${GRAFT_GPU_MPS:-none}"}
KUST
  source_dir=$k
else
  source_dir=$top/deploy/graft
fi
kubectl kustomize "$source_dir" | sed "s#image: ghcr.io/graft-dev/graft:.*#image: $IMAGE#" \
  | kubectl apply -f - >&2
# The testbed serves the MutatingAdmissionPolicy API and runs NRI's default validator.
kubectl apply -f "$top/deploy/optional/" >&2
# A new image under the same tag: restart the pods so they run it.
kubectl -n graft-system rollout restart daemonset/graft >&2
kubectl -n graft-system rollout status daemonset/graft --timeout=120s >&2
for _ in $(seq 120); do
  if kubectl get resourceslices --field-selector spec.driver=graft.dev -o name | grep . >/dev/null; then
    log "graft is running; its ResourceSlices:"
    kubectl get resourceslices >&2
    exit 0
  fi
  sleep 0.5
done
log "graft-driver published no ResourceSlice"; exit 1
