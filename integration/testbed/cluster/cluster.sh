#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, from the testbed's cached builds:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and containerd 2.4
# (NRI on its default socket), all with cgroupfs and without systemd.
#
#   cluster.sh up      start everything (idempotent) and wait until the node is Ready
#   cluster.sh down    stop everything and remove what `up` created (safe to repeat)
#   cluster.sh env     print the KUBECONFIG and CONTAINER_RUNTIME_ENDPOINT to export
#   cluster.sh status  exit 0 when any part of the cluster is running
#   cluster.sh restart kubelet|containerd   stop one component and bring the cluster up again
#   cluster.sh node NAME stop-kubelet|start-kubelet   (multi-node) one extra node's kubelet
#
# GRAFT_CLUSTER_NODES=N (N >= 2) at `up` makes a multi-node testbed: this node as below, plus
# nodes graft-node-2..N, each a kubelet and a containerd in network and mount namespaces of
# its own (nodes.sh says how). Unset or 1: the single node only. `down` removes the extra
# nodes whatever the variable says. GRAFT_SCHEDULER_EXTENDER=URL at `up` gives kube-scheduler
# graft-scheduler-extender at URL (ignorable, as docs/placement.md configures it); with
# GRAFT_SCHEDULER_EXTENDER_TLS=DIR, over HTTPS with DIR's ca.crt, client.crt and client.key.
#
# Logs and configuration live under $GRAFT_CLUSTER_DIR (default /var/lib/graft-cluster);
# sockets under /run/graft-cluster. The kubelet uses the standard /var/lib/kubelet and
# containerd's NRI socket is the standard /var/run/nri/nri.sock, so graft's DaemonSet runs
# with its manifests unchanged. Of those shared places (and /var/lib/graft, which graft's
# DaemonSet fills), `down` removes only the ones that did not exist before `up`: `up`
# lists what it found missing in $GRAFT_CLUSTER_DIR/created. Service IP 10.0.0.1 is put
# on the loopback interface and the API server listens on 443, which stands in for
# kube-proxy for the one service pods need (the API itself).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${GRAFT_CLUSTER_DIR:-/var/lib/graft-cluster}
R=/run/graft-cluster
NODE=${GRAFT_NODE_NAME:-graft-node}
log() { echo "[cluster] $*" >&2; }

# The testbed's binaries (built on first use); `down` with nothing running needs none.
load_env() {
  local env_file
  env_file=$(bash "$here/../setup.sh")
  # shellcheck disable=SC1090
  source "$env_file"
  if [ "$K8S_MINOR" = 1.34 ]; then GRAFT_K8S=$GRAFT_K8S_134; fi
  export PATH="$GRAFT_CONTAINERD_24:$(dirname "$GRAFT_RUNC"):$GRAFT_K8S:$PATH"
}

# Shared directories the cluster uses; `down` removes only those `up` created.
SHARED_DIRS=(/var/lib/kubelet /var/lib/graft /var/run/nri)
SERVICE_IP=10.0.0.1/32
# Under pipefail, `cmd | grep -q` can fail when grep exits before cmd is done writing
# (SIGPIPE): the checks below read all of cmd's output instead.
BRIDGE=graft0
# DRA features graft uses beyond the core: device taints for unhealthy GPUs (GA in
# Kubernetes 1.37, so no gate), extended-resource mapping for pods written for device
# plugins (GA in 1.37 as well), the kubelet's resource health in pod status (API server and
# kubelet), partitionable devices for dynamic MIG (API server and scheduler) and consumable
# capacity for MPS (API server, scheduler, kubelet). Beta and on by default since 1.36; set
# anyway, so that the testbed says what graft needs. A gate that is GA and locked must not be
# set to anything but its default, and a removed one stops the component: drop them here
# when they graduate.
GATES=ResourceHealthStatus=true,DRAPartitionableDevices=true,DRAConsumableCapacity=true
KUBELET_GATES="ResourceHealthStatus: true, DRAPartitionableDevices: true, DRAConsumableCapacity: true"
# Two of the kubelet's retry periods are shortened, so that tests wait on graft and not on
# the kubelet (graft's behaviour does not depend on them; a node with the defaults retries
# later, the same way):
# - syncFrequency, 1 min by default, to 5 s: a pod whose NodePrepareResources failed (graft
#   refusing while graft-nri is down, a domain not ready) is not retried until its next
#   periodic sync, since the kubelet does not count a failed prepare as a failed sync;
# - the container restart back-off (10 s doubling to 300 s) capped at 2 s: graft-nri kept
#   down by a test crash-loops. KubeletCrashLoopBackOffMax: beta and on in 1.37, alpha in
#   1.34; maxContainerRestartPeriod may not be under 1 s.
KUBELET_GATES="KubeletCrashLoopBackOffMax: true, $KUBELET_GATES"
RUNTIME_CONFIG=admissionregistration.k8s.io/v1beta1=true
# GRAFT_CLUSTER_K8S=1.34 runs the oldest minor graft supports (setup.sh's GRAFT_K8S_134)
# with the gates README's support table says to turn on there: in 1.34 DRADeviceTaints,
# DRAExtendedResource, DRADeviceBindingConditions, ResourceHealthStatus,
# DRAPartitionableDevices and DRAConsumableCapacity are alpha (off), MutatingAdmissionPolicy is beta and off (its
# v1beta1 API is enabled above), and DeviceTaintRule is served only as resource.k8s.io
# v1alpha3, which the device-taint eviction controller watches (pkg/features at v1.34.4).
K8S_MINOR=${GRAFT_CLUSTER_K8S:-1.37}
# Gangs (docs/compute-domains.md): in 1.37 the Workload and PodGroup API
# (scheduling.k8s.io/v1beta1) and the scheduler's gang scheduling are beta and off
# (GenericWorkload). 1.34 has no such API.
if [ "$K8S_MINOR" = 1.37 ]; then
  GATES=GenericWorkload=true,$GATES
  RUNTIME_CONFIG=$RUNTIME_CONFIG,scheduling.k8s.io/v1beta1=true
fi
if [ "$K8S_MINOR" = 1.34 ]; then
  GATES=MutatingAdmissionPolicy=true,DRADeviceTaints=true,DRAExtendedResource=true,DRADeviceBindingConditions=true,$GATES
  KUBELET_GATES="DRADeviceTaints: true, DRAExtendedResource: true, $KUBELET_GATES"
  RUNTIME_CONFIG=$RUNTIME_CONFIG,resource.k8s.io/v1alpha3=true
fi

pidfile() { echo "$D/run/$1.pid"; }
# The component's pid when it runs; a pid file left from before a reboot may name someone
# else's process, so the name must match too (comm holds 15 characters).
pid_of() {
  local p
  p=$(cat "$(pidfile "$1")" 2>/dev/null) || return 1
  kill -0 "$p" 2>/dev/null && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "${1:0:15}" ] && echo "$p"
}
running() { pid_of "$1" >/dev/null; }
start() { # name, command...
  local name=$1; shift
  if running "$name"; then return 0; fi
  log "starting $name"
  setsid "$@" >"$D/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$(pidfile "$name")"
}
stop() {
  local p
  if p=$(pid_of "$1"); then
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  fi
  rm -f "$(pidfile "$1")"
}
# stop, for several components at once: each exits in about 2 s after SIGTERM, and the
# control plane's four need no order among themselves once the kubelet is gone.
stop_together() {
  local n p pids=() alive
  for n in "$@"; do
    if p=$(pid_of "$n"); then kill "$p" 2>/dev/null || true; pids+=("$p"); fi
  done
  for _ in $(seq 50); do
    alive=""
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ -n "$alive" ] || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for n in "$@"; do rm -f "$(pidfile "$n")"; done
}
# Lists in $D/created what is missing now and will be the cluster's: "dir PATH",
# "addr SERVICE_IP", "link BRIDGE" (the CNI plugin makes it for the first pod).
created() { grep -qxF "$1" "$D/created" 2>/dev/null; }
note() { created "$1" || echo "$1" >>"$D/created"; }
note_missing() {
  local d
  for d in "${SHARED_DIRS[@]}"; do
    [ -e "$d" ] || note "dir $d"
  done
  ip addr show dev lo | grep -F " $SERVICE_IP" >/dev/null || note "addr $SERVICE_IP"
  ip link show "$BRIDGE" >/dev/null 2>&1 || note "link $BRIDGE"
}
kc() { kubectl --kubeconfig "$D/admin.kubeconfig" "$@"; }
wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  log "timed out waiting for $what; logs in $D/logs"; return 1
}

# Containers that outlived this cluster's containerd (a stop that timed out) keep running
# under their shims; a hostNetwork one (graft's daemons) would hold its ports into the next
# cluster. Only shims of this cluster's socket are touched: killing a container's init ends
# its PID namespace, then the shim goes.
sweep_shims() {
  local shim n=0
  for shim in $(pgrep -f -- "-address $R/containerd.sock( |$)" || true); do
    pkill -9 -P "$shim" 2>/dev/null || true
    kill -9 "$shim" 2>/dev/null || true
    n=$((n + 1))
  done
  if [ "$n" -gt 0 ]; then log "killed $n container shim(s) left over from a cluster on $R"; fi
}

up() {
  load_env
  mkdir -p "$D"
  note_missing
  mkdir -p "$D"/{logs,run,pki,etcd,containerd,cni/net.d,cni/bin} "$R" /var/lib/kubelet /var/run/nri
  if [ ! -s "$D/pki/sa.key" ]; then
    openssl genrsa -out "$D/pki/sa.key" 2048 2>/dev/null
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$D/token"
    echo "$(cat "$D/token"),admin,admin-uid,\"system:masters\"" >"$D/tokens.csv"
  fi
  token=$(cat "$D/token")
  ip addr show dev lo | grep -F " $SERVICE_IP" >/dev/null || ip addr add "$SERVICE_IP" dev lo

  start etcd etcd --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380
  start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=443 --cert-dir="$D/pki" \
    --token-auth-file="$D/tokens.csv" --anonymous-auth=false --authorization-mode=RBAC \
    --service-cluster-ip-range=10.0.0.0/24 --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$D/pki/sa.key" --service-account-signing-key-file="$D/pki/sa.key" \
    --feature-gates="$GATES" \
    --runtime-config="$RUNTIME_CONFIG" --allow-privileged=true

  cat >"$D/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: graft-testbed
  cluster:
    server: https://localhost:443
    certificate-authority: $D/pki/apiserver.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: graft-testbed
  context: {cluster: graft-testbed, user: admin}
current-context: graft-testbed
KC
  wait_for "kube-apiserver" 120 kc get --raw /readyz

  start kube-controller-manager kube-controller-manager --kubeconfig="$D/admin.kubeconfig" \
    --leader-elect=false --controllers='*' --root-ca-file="$D/pki/apiserver.crt" \
    --service-account-private-key-file="$D/pki/sa.key" --use-service-account-credentials=false \
    --feature-gates="$GATES"
  cat >"$D/scheduler.yaml" <<SC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $D/admin.kubeconfig}
leaderElection: {leaderElect: false}
SC
  # GRAFT_SCHEDULER_EXTENDER=URL at `up`: kube-scheduler calls graft-scheduler-extender there,
  # configured as docs/placement.md tells users to. Kept in its own file so that a later `up`
  # (a restart) writes the same configuration.
  if [ -n "${GRAFT_SCHEDULER_EXTENDER:-}" ]; then
    cat >"$D/scheduler-extenders.yaml" <<EX
extenders:
  - urlPrefix: $GRAFT_SCHEDULER_EXTENDER
    prioritizeVerb: prioritize
    weight: 5
    nodeCacheCapable: true
    ignorable: true
    httpTimeout: 2s
EX
    # GRAFT_SCHEDULER_EXTENDER_TLS=DIR (with an https URL): the extender's CA and
    # kube-scheduler's client certificate, as docs/placement.md configures them.
    if [ -n "${GRAFT_SCHEDULER_EXTENDER_TLS:-}" ]; then
      cat >>"$D/scheduler-extenders.yaml" <<EX
    enableHTTPS: true
    tlsConfig:
      caFile: $GRAFT_SCHEDULER_EXTENDER_TLS/ca.crt
      certFile: $GRAFT_SCHEDULER_EXTENDER_TLS/client.crt
      keyFile: $GRAFT_SCHEDULER_EXTENDER_TLS/client.key
EX
    fi
  fi
  if [ -f "$D/scheduler-extenders.yaml" ]; then cat "$D/scheduler-extenders.yaml" >>"$D/scheduler.yaml"; fi
  start kube-scheduler kube-scheduler --config="$D/scheduler.yaml" --feature-gates="$GATES"

  # Pods that do not use the host network get an address on a local bridge: containerd
  # wants an interface in the CNI result. Nothing is routed or masqueraded; pods reach the
  # API server through the node's addresses.
  cat >"$D/cni/net.d/10-graft-bridge.conflist" <<CNI
{"cniVersion":"1.0.0","name":"graft-bridge","plugins":[
  {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]],"dataDir":"$D/cni/ipam"}},
  {"type":"loopback"}]}
CNI
  cat >"$D/containerd.toml" <<CT
version = 3
root = "$D/containerd"
state = "$R/containerd"
[grpc]
  address = "$R/containerd.sock"
[ttrpc]
  address = "$R/containerd.sock.ttrpc"
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "/var/run/nri/nri.sock"
# Honours required-plugins annotations (deploy/optional/require-graft-nri.yaml sets one
# on pods with claims), so their containers are refused while graft-nri is away.
[plugins.'io.containerd.nri.v1.nri'.default_validator]
  enable = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "registry.k8s.io/pause:3.10.2"
# Registries' hosts.toml: install_as_documented's local registry and the CA it trusts.
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "$D/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "$D/cni/net.d"
# NVIDIA's container toolkit as the GPU Operator registers it (runc stays the default, as
# with the operator's CDI on): the wrapper is written by the test that uses it
# (cluster_gpu::unclaimed_container_sees_no_gpu, through the RuntimeClass nvidia).
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
  BinaryName = "$D/nvidia-toolkit/nvidia-container-runtime"
CT
  start containerd containerd --config "$D/containerd.toml"
  wait_for "containerd" 30 ctr -a "$R/containerd.sock" version
  for img in "$GRAFT_IMAGES"/*.tar; do
    ctr -a "$R/containerd.sock" -n k8s.io images import "$img" >/dev/null 2>&1
  done

  cat >"$D/kubelet.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$R/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
oomScoreAdj: 0
maxOpenFiles: 20000
imageGCHighThresholdPercent: 100
evictionHard: {nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
featureGates: {$KUBELET_GATES}
syncFrequency: 5s
crashLoopBackOff: {maxContainerRestartPeriod: 2s}
KL
  start kubelet kubelet --kubeconfig="$D/admin.kubeconfig" --config="$D/kubelet.yaml" \
    --hostname-override="$NODE"
  wait_for "node $NODE Ready" 180 sh -c \
    "kubectl --kubeconfig '$D/admin.kubeconfig' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for "the default service account" 60 kc get serviceaccount default -n default
  log "node $NODE is Ready; KUBECONFIG=$D/admin.kubeconfig"
  if [ "${GRAFT_CLUSTER_NODES:-1}" != 1 ]; then
    # shellcheck source=nodes.sh
    source "$here/nodes.sh"
    nodes_up
  fi
}

down() {
  # Only what is running needs the binaries: with nothing up this is quick and builds nothing.
  if running kubelet || [ -S "$R/containerd.sock" ]; then load_env; fi
  # Pods first, so that their containers do not outlive the runtime.
  if running kubelet; then
    kc delete pods --all -A --grace-period=0 --force >/dev/null 2>&1 || true
  fi
  if [ -d "$D/nodes" ]; then
    # shellcheck source=nodes.sh
    source "$here/nodes.sh"
    nodes_down
  fi
  stop kubelet
  stop_together kube-scheduler kube-controller-manager kube-apiserver etcd
  if [ -S "$R/containerd.sock" ] && running containerd; then
    local cri=(crictl --runtime-endpoint "unix://$R/containerd.sock" --timeout 30s)
    for id in $("${cri[@]}" pods -q 2>/dev/null); do
      "${cri[@]}" stopp "$id" >/dev/null 2>&1 || true
      "${cri[@]}" rmp -f "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  sweep_shims
  if created "addr $SERVICE_IP"; then ip addr del "$SERVICE_IP" dev lo 2>/dev/null || true; fi
  if created "link $BRIDGE"; then ip link del "$BRIDGE" 2>/dev/null || true; fi
  # Volumes the kubelet mounted (tmpfs for service account tokens), deepest first.
  awk '$2 ~ "^/var/lib/kubelet(/|$)" {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  local d
  for d in "${SHARED_DIRS[@]}"; do
    created "dir $d" || continue
    # Never through a mount that is still there: rm would empty whatever it shows.
    if awk -v d="$d" '$2 == d || index($2, d "/") == 1 {found=1} END {exit !found}' /proc/mounts; then
      log "$d still has mounts; left in place"
    else
      rm -rf -- "$d"
    fi
  done
  case "$D" in
    /|"") log "refusing to remove GRAFT_CLUSTER_DIR=$D" ;;
    *) rm -rf -- "$D" ;;
  esac
  rm -rf -- "$R"
  log "cluster removed"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  restart)
    case "${2:-}" in
      kubelet|containerd) stop "$2"; up ;;
      *) echo "usage: $0 restart kubelet|containerd" >&2; exit 2 ;;
    esac ;;
  node)
    # shellcheck source=nodes.sh
    source "$here/nodes.sh"
    node_cmd "${2:-}" "${3:-}" ;;
  env) echo "export KUBECONFIG=$D/admin.kubeconfig CONTAINER_RUNTIME_ENDPOINT=unix://$R/containerd.sock" ;;
  status)
    for c in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet; do
      if running "$c"; then exit 0; fi
    done
    exit 1 ;;
  *) echo "usage: $0 up|down|env|status" >&2; exit 2 ;;
esac
