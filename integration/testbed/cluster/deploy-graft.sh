#!/usr/bin/env bash
# Deploys graft onto the testbed cluster the way a user would: builds the image from the
# workspace binaries (deploy/image/build.sh), imports it into the node's containerd, and
# installs the chart deploy/helm/graft (helm upgrade --install) with values only: the image,
# and the optional admission policy on. Waits until graft-driver has published the node's
# ResourceSlice.
#
#   deploy-graft.sh [BIN_DIR]      default: target/debug
#
# GRAFT_GPU_FAKE=DIR installs it with values-gpu.yaml instead (deploy/gpu), on a node
# without a GPU: DIR holds a fake NVIDIA node (integration/src/fake_gpu.rs: DIR/host the
# driver root, DIR/proc and DIR/sys what the kernel would show). Only values change, as a
# user's would: the driver root, and graft-driver's /proc and /sys (a real node's come from
# its kernel). GRAFT_GPU_DYNAMIC_MIG and GRAFT_GPU_MPS set nvidia.dynamicMig and nvidia.mps
# (default none). GRAFT_GPU_DRIVER_ROOT=DIR installs it with values-gpu.yaml on this node's
# real NVIDIA driver at DIR (`/`, `/run/nvidia/driver`): integration/gpu/check.sh on a GPU
# node. GRAFT_DEVICES_TOML=FILE sets the devicesToml value from FILE (the
# benchmarks' many devices). GRAFT_HELM_ARGS: more helm arguments, one per line, after
# those (a test's own values).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
bin=${1:-$top/target/debug}
IMAGE=localhost/graft:testbed
D=${GRAFT_CLUSTER_DIR:-/var/lib/graft-cluster}
env_file=$(bash "$here/../setup.sh")
# shellcheck disable=SC1090
source "$env_file"
# cluster.sh's choice of Kubernetes: its kubectl.
if [ "${GRAFT_CLUSTER_K8S:-}" = 1.34 ]; then GRAFT_K8S=$GRAFT_K8S_134; fi
export PATH="$GRAFT_CONTAINERD_24:$GRAFT_K8S:$(dirname "$GRAFT_HELM"):$PATH" KUBECONFIG="$D/admin.kubeconfig"
log() { echo "[deploy-graft] $*" >&2; }

tar="$D/graft-image.tar"
# graft-hook goes into the image statically linked, as the shipped image has it.
case "$bin" in */release) hook=$(bash "$top/hooks/build-static.sh" --release) ;; *) hook=$(bash "$top/hooks/build-static.sh") ;; esac
# The image is built again only when what goes into it changed (the tests deploy the same
# binaries dozens of times): the key is each input's path, size and modification time.
key=$(cd "$top" && stat -c '%n %s %Y' "$bin"/graft-{driver,mps,nri,compute-domain-controller,imex-daemon,scheduler-extender} \
  "$bin/graftctl" "$hook" deploy/image/build.sh deploy/image/oci-layout.sh)
if [ ! -s "$tar" ] || [ "$(cat "$tar.key" 2>/dev/null)" != "$key" ]; then
  rm -f "$tar.key"
  HOOK_BIN=$hook bash "$top/deploy/image/build.sh" "$bin" "$tar" "$IMAGE" >/dev/null ||
    { log "building the image from $bin failed"; exit 1; }
  printf '%s\n' "$key" >"$tar.key"
fi
# The layout is reproducible: the same binaries make the same manifest digest.
digest=$(tar -xOf "$tar" index.json | jq -r '.manifests[0].digest')
imported=""
# import SOCK: the image into one node's containerd unless it holds it already, saying why
# when it cannot.
import_image() {
  local out
  if ctr -a "$1" -n k8s.io images ls "name==$IMAGE" 2>/dev/null | grep -F "$digest" >/dev/null; then
    return 0
  fi
  out=$(ctr -a "$1" -n k8s.io images import "$tar" 2>&1) ||
    { log "importing $tar into $1 failed: $out"; df -h "$D" >&2; exit 1; }
  imported=1
}
import_image /run/graft-cluster/containerd.sock
# A multi-node testbed's other nodes (cluster.sh, GRAFT_CLUSTER_NODES) have a containerd each.
for sock in /run/graft-cluster/n*/containerd.sock; do
  if [ -S "$sock" ]; then import_image "$sock"; fi
done
chart=$top/deploy/helm/graft
# GPU lists ("4,5") as one --set value: helm splits --set at unescaped commas.
mps=${GRAFT_GPU_MPS:-none}; mps=${mps//,/\\,}
dynamic_mig=${GRAFT_GPU_DYNAMIC_MIG:-none}; dynamic_mig=${dynamic_mig//,/\\,}
# The testbed serves the MutatingAdmissionPolicy API and runs NRI's default validator.
values=(--set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}"
        --set requireGraftNri.enabled=true)
if [ -n "${GRAFT_GPU_FAKE:-}" ]; then
  values+=(-f "$chart/values-gpu.yaml" --set nvidia.driverRoot="$GRAFT_GPU_FAKE/host"
           --set nvidia.dynamicMig="$dynamic_mig"
           --set nvidia.mps="$mps"
           --set-json "driverExtraEnv=[{\"name\":\"GRAFT_PROC_ROOT\",\"value\":\"/host$GRAFT_GPU_FAKE/proc\"},{\"name\":\"GRAFT_SYSFS_ROOT\",\"value\":\"/host$GRAFT_GPU_FAKE/sys\"}]"
           --set-json "mpsExtraEnv=[{\"name\":\"GRAFT_PROC_ROOT\",\"value\":\"$GRAFT_GPU_FAKE/proc\"}]")
fi
if [ -n "${GRAFT_GPU_DRIVER_ROOT:-}" ]; then
  values+=(-f "$chart/values-gpu.yaml" --set nvidia.driverRoot="$GRAFT_GPU_DRIVER_ROOT"
           --set nvidia.dynamicMig="$dynamic_mig"
           --set nvidia.mps="$mps")
fi
if [ -n "${GRAFT_GPU_FAKE:-}${GRAFT_GPU_DRIVER_ROOT:-}" ]; then
  # The label NVIDIA's GPU feature discovery puts on GPU nodes, which values-gpu.yaml's
  # nvidia.gpuNodeLabels names: the testbed runs no GPU feature discovery.
  kubectl label node --all nvidia.com/gpu.present=true --overwrite >&2
fi
if [ -n "${GRAFT_DEVICES_TOML:-}" ]; then
  values+=(--set-file devicesToml="$GRAFT_DEVICES_TOML")
fi
if [ -n "${GRAFT_HELM_ARGS:-}" ]; then
  while IFS= read -r arg; do
    [ -n "$arg" ] && values+=("$arg")
  done <<<"$GRAFT_HELM_ARGS"
fi
installed=""
if helm status graft --namespace graft-system >/dev/null 2>&1; then installed=1; fi
# --reset-values: each deployment says all of its values (a GPU one after a plain one, and
# back).
helm upgrade --install graft "$chart" --namespace graft-system --create-namespace \
  --reset-values "${values[@]}" >&2
# A new image under the same tag: restart the pods of a release that was there so they run
# it (graft's DaemonSets: the GPU nodes' one too). A new release's pods start from it already,
# and restarting them would only replace them half-started; with the image unchanged, helm
# has rolled whatever its values changed.
if [ -n "$installed" ] && [ -n "$imported" ]; then
  kubectl -n graft-system rollout restart daemonset -l app.kubernetes.io/name=graft >&2
fi
kubectl -n graft-system rollout status daemonset -l app.kubernetes.io/name=graft --timeout=120s >&2
for _ in $(seq 120); do
  if kubectl get resourceslices --field-selector spec.driver=graft.dev -o name | grep . >/dev/null; then
    log "graft is running; its ResourceSlices:"
    kubectl get resourceslices >&2
    exit 0
  fi
  sleep 0.5
done
log "graft-driver published no ResourceSlice"; exit 1
