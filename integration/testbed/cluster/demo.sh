#!/usr/bin/env bash
# README command one: builds graft, brings the single-node testbed cluster up, installs
# graft from its Helm chart (deploy/helm/graft) as a DaemonSet, runs the example pod
# (deploy/examples/fuse-pod.yaml), and shows what its containers see and what graft
# injected. The cluster stays up; see the last lines for kubectl and tear-down.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
cd "$top"
say() { printf '\n== %s\n' "$*"; }

say "building graft"
# The testbed first: it installs what the build needs (protoc) on a fresh machine.
bash integration/testbed/setup.sh >/dev/null
cargo build --workspace --bins --quiet
bash hooks/build-static.sh >/dev/null
say "bringing the cluster up (etcd, kube-apiserver, controller-manager, scheduler, kubelet, containerd)"
bash "$here/cluster.sh" up
eval "$(bash "$here/cluster.sh" env)"
env_file=$(bash integration/testbed/setup.sh)
# shellcheck disable=SC1090
source "$env_file"
export PATH="$GRAFT_K8S:$PATH"
say "installing graft from deploy/helm/graft (helm upgrade --install)"
bash "$here/deploy-graft.sh"

say "running deploy/examples/fuse-pod.yaml"
kubectl delete -f deploy/examples/fuse-pod.yaml --ignore-not-found --wait=true >/dev/null
kubectl apply -f deploy/examples/fuse-pod.yaml
kubectl wait --for=condition=Ready pod/fuse-demo --timeout=120s
kubectl get resourceclaims
sleep 1
say "container app says (it lists the claim):"
kubectl logs fuse-demo -c app
say "container sidecar says (it does not):"
kubectl logs fuse-demo -c sidecar

id=$("$GRAFT_CRICTL" ps --name app -q --label io.kubernetes.pod.name=fuse-demo 2>/dev/null | head -1)
say "what graft injected: crictl inspect $id | jq .info.runtimeSpec (graft's part)"
"$GRAFT_CRICTL" inspect "$id" 2>/dev/null | jq '.info.runtimeSpec | {
  annotations: {"graft.dev/injected": .annotations["graft.dev/injected"]},
  "linux.devices": .linux.devices,
  "linux.resources.devices": [.linux.resources.devices[] | select(.major == 10 or .allow == false)],
  "process.env": [.process.env[] | select(startswith("FUSE"))]
}'

cat <<MSG

The cluster is still running. To use it:
  eval "\$(bash integration/testbed/cluster/cluster.sh env)"
  export PATH="$GRAFT_K8S:\$PATH"
  kubectl get pods -A; kubectl get resourceslices; crictl ps
Tear it down with:
  bash integration/testbed/cluster/cluster.sh down
MSG
