#!/usr/bin/env bash
# Release-builds every binary graft ships for each target triple and copies them to
# OUTDIR/<triple>/: the daemons, graftctl and kubectl-graft, and graft-hook static.
#
#   build.sh OUTDIR TRIPLE...
#
# The target directory is GRAFT_RELEASE_TARGET_DIR, default ${GRAFT_CACHE:-~/.cache/graft-testbed}/
# release-target, outside the clone so that CI's clean clones reuse compiled dependencies;
# never an inherited CARGO_TARGET_DIR, which is the test build's (whatever ran there, a
# build script or a test, could have left objects a release would link). release.sh --push
# gives it a fresh one.
# graft-hook gets a target directory of its own below it: its RUSTFLAGS (+crt-static) differ,
# and sharing one directory would rebuild the other binaries' dependencies on every run.
set -euo pipefail
# Not a nightly build, whoever runs it (the integration suite runs under RUSTC_BOOTSTRAP=1,
# which cargo keeps in its fingerprints: a build with and one without it rebuild each
# other's dependencies).
unset RUSTC_BOOTSTRAP
out=$1
shift
[ $# -gt 0 ] || { echo "build.sh: no target triple" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
export CARGO_TARGET_DIR=${GRAFT_RELEASE_TARGET_DIR:-$cache/release-target}
host=$(rustc -vV | sed -n 's/^host: //p')

# Cross linkers and C compilers (ring builds C): Debian's cross gcc packages name them so.
for t in "$@"; do
  [ "$t" = "$host" ] && continue
  case "$t" in
    aarch64-unknown-linux-gnu) gnu=aarch64-linux-gnu ;;
    x86_64-unknown-linux-gnu) gnu=x86_64-linux-gnu ;;
    *) echo "build.sh: no cross toolchain known for $t" >&2; exit 2 ;;
  esac
  up=$(echo "$t" | tr 'a-z-' 'A-Z_')
  low=${t//-/_}
  export "CARGO_TARGET_${up}_LINKER=${gnu}-gcc" "CC_${low}=${gnu}-gcc" "AR_${low}=${gnu}-ar"
  command -v "${gnu}-gcc" >/dev/null || {
    echo "build.sh: ${gnu}-gcc missing (apt-get install gcc-${gnu//_/-} libc6-dev-${t%%-*}-cross)" >&2
    exit 1
  }
done

targets=()
for t in "$@"; do targets+=(--target "$t"); done
# One cargo run for all triples: build scripts and proc-macros are compiled once.
(cd "$repo" && cargo build --release --locked "${targets[@]}" \
  -p graft-driver -p graft-nri -p graftctl -p kubectl-graft -p graft-compute-domain \
  -p graft-scheduler-extender) >&2

for t in "$@"; do
  hook=$(cd "$repo" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR/hook-static" \
    bash hooks/build-static.sh --release --target "$t" --locked)
  mkdir -p "$out/$t"
  for b in graft-driver graft-mps graft-nri graftctl kubectl-graft \
    graft-compute-domain-controller graft-imex-daemon graft-scheduler-extender; do
    cp "$CARGO_TARGET_DIR/$t/release/$b" "$out/$t/$b"
  done
  cp "$hook" "$out/$t/graft-hook"
done
