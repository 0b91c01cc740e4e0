# The extra nodes of a multi-node testbed (GRAFT_CLUSTER_NODES=N, N >= 2), sourced by
# cluster.sh after the first node is up: node i (2..N) is `graft-node-i`, a kubelet and a
# containerd (NRI on) of its own in
#   - a network namespace `graft-n<i>` (ip netns) with a veth pair into the host bridge
#     `graftnodes` (10.201.0.1/24; the node is 10.201.0.<i>). Nothing is routed or
#     masqueraded: the node's only routes beyond the bridge are to the service IP that the
#     first node put on the host's loopback (the API server) and to the first node's
#     InternalIP, both delivered locally on the host; the host (API server, the first
#     node's pods) reaches the node over the bridge;
#   - a mount namespace (unshare --mount, private) held by a `sleep` process, in which the
#     places graft's DaemonSet and the kubelet use at fixed paths are bind mounts of the
#     node's own directories under $D/nodes/<i>: /var/lib/kubelet, /var/lib/graft, /run/nri,
#     the chart's filesRoot, /var/log/pods, /var/log/containers, /var/lib/cni, /run/netns
#     (containerd pins pod network namespaces there), /run/containerd (runc's state) and
#     $D/fake-nvidia (each node's own fake NVIDIA node at the one driver root the chart
#     names). Those mounts exist only in that namespace: they go with its last process;
#   - a cgroup root /graft-node-<i> (in every hierarchy on cgroup v1; kubelet `cgroupRoot`),
#     so that the kubelets' QoS cgroups (<root>/kubepods) stay apart.
# containerd's socket is $R/n<i>/containerd.sock (a path socket: reachable from the host).
# `down` kills the node's processes (the namespaces' last holders), deletes the veth pair,
# the netns, the bridge, the cgroups and what `up` created.
# shellcheck shell=bash

NODES_NET=10.201.0
NODES_BRIDGE=graftnodes
# What each extra node gets its own copy of (mount points, made on the host where missing).
NODE_MOUNTS=(/var/lib/kubelet /var/lib/graft /run/nri /var/lib/graft-files /var/log/pods
             /var/log/containers /var/lib/cni /run/netns /run/containerd "$D/fake-nvidia")

node_dir() { echo "$D/nodes/$1"; }
node_pid() { # i, name (comm)
  local p
  p=$(cat "$(node_dir "$1")/run/$2.pid" 2>/dev/null) || return 1
  kill -0 "$p" 2>/dev/null && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "${2:0:15}" ] && echo "$p"
}
node_start() { # i, name, command...: runs in the node's namespaces
  local i=$1 name=$2 holder nd
  shift 2
  nd=$(node_dir "$i")
  if node_pid "$i" "$name" >/dev/null; then return 0; fi
  holder=$(node_pid "$i" sleep) || { log "graft-node-$i has no namespace holder"; return 1; }
  log "starting $name on graft-node-$i"
  setsid nsenter -t "$holder" -m -n -- "$@" >"$nd/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$nd/run/$name.pid"
}
node_stop() { # i, name
  local p
  if p=$(node_pid "$1" "$2"); then
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    # A loaded host takes a moment to end it: gone before what needs it gone goes on.
    for _ in $(seq 50); do node_pid "$1" "$2" >/dev/null || break; sleep 0.1; done
  fi
  rm -f "$(node_dir "$1")/run/$2.pid"
}
node_cgroups() { # i: the node's cgroup root, in each v1 hierarchy (runc makes it in all)
  local h
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "/sys/fs/cgroup/graft-node-$1"
    return
  fi
  for h in /sys/fs/cgroup/*/; do
    if mountpoint -q "$h"; then echo "${h}graft-node-$1"; fi
  done
}

# The host side: bridge, netns, veth, cgroups, the namespace holder.
node_up_ns() { # i
  local i=$1 nd ns=graft-n$1 m src c
  nd=$(node_dir "$i")
  mkdir -p "$nd"/{logs,run,cni/net.d} "$R/n$i"
  if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
    ip netns add "$ns"
    ip link add "gn${i}h" type veth peer name "gn${i}p"
    ip link set "gn${i}p" netns "$ns"
    ip link set "gn${i}h" master "$NODES_BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "gn${i}p" name eth0
    ip -n "$ns" addr add "$NODES_NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    # No default route: the node reaches the bridge's subnet and the API server's service
    # IP on the host, nothing beyond (the host may forward what it is sent).
    ip -n "$ns" route add "${SERVICE_IP%/*}/32" via "$NODES_NET.1"
    # The first node's address too (its hostNetwork pods listen there): local on the host.
    if [ -n "${FIRST_NODE_IP:-}" ]; then
      ip -n "$ns" route add "$FIRST_NODE_IP/32" via "$NODES_NET.1"
    fi
  fi
  for c in $(node_cgroups "$i"); do
    [ -d "$c" ] && continue
    mkdir "$c"
    # cpuset v1: a child has no CPUs or memory nodes until given its parent's.
    case "$c" in */cpuset/*)
      cat "$(dirname "$c")/cpuset.cpus" >"$c/cpuset.cpus"
      cat "$(dirname "$c")/cpuset.mems" >"$c/cpuset.mems" ;;
    esac
  done
  if node_pid "$i" sleep >/dev/null; then return 0; fi
  local script="set -e"
  for m in "${NODE_MOUNTS[@]}"; do
    src="$nd/mnt${m//\//_}"
    mkdir -p "$src"
    script+="; mount --bind '$src' '$m'"
  done
  rm -f "$nd/run/mounted"
  script+="; touch '$nd/run/mounted'; exec sleep infinity"
  setsid nsenter --net="/run/netns/$ns" unshare --mount -- bash -c "$script" \
    >"$nd/logs/holder.log" 2>&1 </dev/null &
  echo $! >"$nd/run/sleep.pid"
  wait_for "graft-node-$i's mounts" 10 test -e "$nd/run/mounted"
}

node_up() { # i
  local i=$1 nd sock
  nd=$(node_dir "$i")
  sock=$R/n$i/containerd.sock
  node_up_ns "$i"
  cat >"$nd/cni/net.d/10-graft-bridge.conflist" <<CNI
{"cniVersion":"1.0.0","name":"graft-bridge","plugins":[
  {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.$i.0/24"}]],"dataDir":"$nd/cni/ipam"}},
  {"type":"loopback"}]}
CNI
  # The first node's containerd configuration with this node's root, state and CNI.
  sed -e "s|^root = .*|root = \"$nd/containerd\"|" -e "s|^state = .*|state = \"$R/n$i/state\"|" \
      -e "s|address = \"$R/containerd.sock|address = \"$sock|" \
      -e "s|conf_dir = .*|conf_dir = \"$nd/cni/net.d\"|" "$D/containerd.toml" >"$nd/containerd.toml"
  node_start "$i" containerd containerd --config "$nd/containerd.toml"
  wait_for "graft-node-$i's containerd" 30 ctr -a "$sock" version
  local img
  for img in "$GRAFT_IMAGES"/*.tar "$D/graft-image.tar"; do
    [ -f "$img" ] && ctr -a "$sock" -n k8s.io images import "$img" >/dev/null 2>&1
  done
  sed -e "s|server: https://localhost:443|server: https://${SERVICE_IP%/*}:443|" \
    "$D/admin.kubeconfig" >"$nd/kubelet.kubeconfig"
  sed -e "s|^containerRuntimeEndpoint: .*|containerRuntimeEndpoint: unix://$sock|" \
    "$D/kubelet.yaml" >"$nd/kubelet.yaml"
  echo "cgroupRoot: /graft-node-$i" >>"$nd/kubelet.yaml"
  node_kubelet "$i"
}
node_kubelet() { # i
  local nd
  nd=$(node_dir "$1")
  node_start "$1" kubelet kubelet --kubeconfig="$nd/kubelet.kubeconfig" \
    --config="$nd/kubelet.yaml" --hostname-override="graft-node-$1" --node-ip="$NODES_NET.$1"
}

nodes_up() {
  local n=${GRAFT_CLUSTER_NODES:-1} i m
  case "$n" in ''|*[!0-9]*) log "GRAFT_CLUSTER_NODES=$n is not a number"; return 2 ;; esac
  [ "$n" -le 1 ] && return 0
  [ "$n" -le 200 ] || { log "at most 200 nodes"; return 2; }
  for m in "${NODE_MOUNTS[@]}"; do
    [ -e "$m" ] || { note "dir $m"; mkdir -p "$m"; }
  done
  if ! ip link show "$NODES_BRIDGE" >/dev/null 2>&1; then
    note "link $NODES_BRIDGE"
    ip link add "$NODES_BRIDGE" type bridge
    ip addr add "$NODES_NET.1/24" dev "$NODES_BRIDGE"
    ip link set "$NODES_BRIDGE" up
  fi
  FIRST_NODE_IP=$(kc get node "$NODE" \
    -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}' 2>/dev/null || true)
  for i in $(seq 2 "$n"); do node_up "$i"; done
  for i in $(seq 2 "$n"); do
    wait_for "node graft-node-$i Ready" 180 sh -c \
      "kubectl --kubeconfig '$D/admin.kubeconfig' get node graft-node-$i -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  done
  log "$n nodes are Ready"
}

node_down() { # i
  local i=$1 nd sock c shim
  nd=$(node_dir "$i")
  sock=$R/n$i/containerd.sock
  node_stop "$i" kubelet
  if [ -S "$sock" ] && node_pid "$i" containerd >/dev/null; then
    local cri=(crictl --runtime-endpoint "unix://$sock" --timeout 30s)
    for id in $("${cri[@]}" pods -q 2>/dev/null); do
      "${cri[@]}" stopp "$id" >/dev/null 2>&1 || true
      "${cri[@]}" rmp -f "$id" >/dev/null 2>&1 || true
    done
  fi
  node_stop "$i" containerd
  for shim in $(pgrep -f -- "-address $sock( |$)" || true); do
    pkill -9 -P "$shim" 2>/dev/null || true
    kill -9 "$shim" 2>/dev/null || true
  done
  # The holder is the mount namespace's last process: its mounts go with it.
  node_stop "$i" sleep
  # The veth pair first: a netns's devices go asynchronously after `ip netns del`.
  ip link del "gn${i}h" 2>/dev/null || true
  ip netns del "graft-n$i" 2>/dev/null || true
  for c in $(node_cgroups "$i"); do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

nodes_down() {
  local nd i d
  [ -d "$D/nodes" ] || return 0
  if ls "$R"/n*/containerd.sock >/dev/null 2>&1; then load_env; fi
  # Each node is its own processes, netns and cgroups: they go down side by side (each
  # waits about 2 s for its kubelet and containerd to exit).
  local downs=()
  for nd in "$D"/nodes/*/; do
    i=$(basename "$nd")
    node_down "$i" &
    downs+=($!)
  done
  wait "${downs[@]}" || true
  if created "link $NODES_BRIDGE"; then ip link del "$NODES_BRIDGE" 2>/dev/null || true; fi
  for d in "${NODE_MOUNTS[@]}"; do
    created "dir $d" || continue
    case " ${SHARED_DIRS[*]} " in *" $d "*) continue ;; esac
    # ip netns makes /run/netns a mount point of itself; a directory of ours goes whole.
    if [ "$d" = /run/netns ]; then umount /run/netns 2>/dev/null || true; fi
    if awk -v d="$d" '$2 == d || index($2, d "/") == 1 {found=1} END {exit !found}' /proc/mounts; then
      log "$d still has mounts; left in place"
    else
      rm -rf -- "$d"
    fi
  done
  rm -rf -- "$D/nodes"
}

# cluster.sh node NAME stop-kubelet|start-kubelet
node_cmd() {
  local name=$1 what=$2 i
  i=${name#graft-node-}
  case "$i" in ''|*[!0-9]*) log "no extra node $name"; return 2 ;; esac
  [ -d "$(node_dir "$i")" ] || { log "no extra node $name"; return 2; }
  case "$what" in
    stop-kubelet) node_stop "$i" kubelet ;;
    start-kubelet) load_env; node_kubelet "$i" ;;
    *) echo "usage: cluster.sh node NAME stop-kubelet|start-kubelet" >&2; return 2 ;;
  esac
}
