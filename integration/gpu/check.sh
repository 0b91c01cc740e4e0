#!/usr/bin/env bash
# graft on a node with an NVIDIA GPU, end to end, repeatably. Run as root:
#
#   bash integration/gpu/check.sh [--driver-root /] [--report FILE] [--rounds 30]
#                                 [--bin-dir DIR] [--keep] [--no-cluster]
#
# (--proc-root, --sys-root and --dev-root point discovery elsewhere, for a fake node.)
#
# It installs the testbed if needed (integration/testbed/setup.sh: containerd 2.2, runc,
# crictl, ...; the first run builds them from the Go module proxy), builds graft (or takes
# graft-gpu-check, graft-nri and the static graft-hook from --bin-dir), compiles the CUDA
# probe (integration/gpu/probe.c) with the host's C compiler, and runs graft-gpu-check:
# graft-driver's discovery on the node; a private containerd with graft-nri; a pod whose
# container `gpu` is given the first full GPU and whose container `sibling` gets nothing;
# nvidia-smi -L / -q, the probe and /dev in each; and the start-up cost of the GPU. Then
# (unless --no-cluster) the cluster stage, as users deploy graft: the testbed's single-node
# Kubernetes on this node, graft installed from deploy/helm/graft with values-gpu.yaml and
# this driver root, a pod whose claimed container runs the probe beside a sibling without
# the claim, graft-driver's NVML health registration, and two MPS shares of the GPU
# running the probe side by side with their limits (NVIDIA's nvidia-cuda-mps-control).
# The markdown report goes to --report, or stdout. Exit status: 0 every check passed,
# 1 a check failed, 2 the check could not run.
#
# It only reads the GPU: no MIG, clock, persistence or compute-mode changes, no reset,
# no nvidia-smi command other than -L and -q (run inside the container).
set -euo pipefail

usage() {
  sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
die() {
  echo "check.sh: $*" >&2
  exit 2
}
log() { echo "== $*" >&2; }

driver_root=/
report=
rounds=30
bin_dir=
keep=
cluster=--cluster
roots=()
while [ $# -gt 0 ]; do
  case "$1" in
    --driver-root) driver_root=${2:?--driver-root needs a directory}; shift 2 ;;
    --report) report=${2:?--report needs a file}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    --no-cluster) cluster=; shift ;;
    --proc-root | --sys-root | --dev-root) roots+=("$1" "${2:?$1 needs a directory}"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root (containerd, runc and device nodes need it)"
[[ "$rounds" =~ ^[0-9]+$ ]] || die "--rounds: not a number: $rounds"
# Paths the caller gave are relative to where they ran this.
case "$report" in "" | /*) ;; *) report="$PWD/$report" ;; esac
case "$bin_dir" in "" | /*) ;; *) bin_dir="$PWD/$bin_dir" ;; esac
[ -d "$driver_root" ] || die "--driver-root $driver_root is not a directory"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log "testbed (integration/testbed/setup.sh; the first run builds it, about 10 minutes)"
bash integration/testbed/setup.sh >/dev/null

if [ -n "$bin_dir" ]; then
  bins=$bin_dir
  hook=$bin_dir/graft-hook
  for b in graft-gpu-check graft-nri graft-hook; do
    [ -x "$bins/$b" ] || die "$bins/$b missing (--bin-dir needs graft-gpu-check, graft-nri and the static graft-hook)"
  done
else
  log "building graft (cargo build --release --workspace --bins, hooks/build-static.sh --release)"
  cargo build --release --workspace --bins >&2
  hook=$(bash hooks/build-static.sh --release | tail -n 1)
  bins=$PWD/target/release
fi

work=$(mktemp -d /tmp/graft-gpu-probe.XXXXXX)
trap 'rm -rf "$work"' EXIT
log "compiling the CUDA probe with $(cc --version | head -n 1)"
cc -O2 -Wall -o "$work/graft-cuda-probe" integration/gpu/probe.c -ldl

args=(--driver-root "$driver_root" --hook "$hook" --probe "$work/graft-cuda-probe" --rounds "$rounds")
[ -z "$report" ] || args+=(--report "$report")
[ -z "$keep" ] || args+=(--keep)
if [ -n "$cluster" ]; then
  [ -z "$bin_dir" ] || die "the cluster stage installs graft's image from the release build: drop --bin-dir, or add --no-cluster"
  args+=("$cluster")
fi
args+=(${roots[@]+"${roots[@]}"})
log "graft-gpu-check ${args[*]}"
set +e
"$bins/graft-gpu-check" "${args[@]}"
rc=$?
set -e
exit "$rc"
