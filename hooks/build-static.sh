#!/usr/bin/env bash
# Builds graft-hook statically linked and prints the binary's path.
#
# The runtime runs graft-hook as root on the host; a static binary has no dynamic loader,
# so no LD_PRELOAD or LD_LIBRARY_PATH from any environment is ever honoured. The explicit
# --target keeps RUSTFLAGS off build scripts and proc-macros, which must stay dynamic.
#
#   bash hooks/build-static.sh [--release] [--target TRIPLE] [more cargo build arguments]
#
# TRIPLE defaults to the host's. A cross triple needs its linker and C compiler named the
# usual way (CARGO_TARGET_<TRIPLE>_LINKER, CC_<triple>), as deploy/release/release.sh does.
set -euo pipefail
# The integration suite runs under RUSTC_BOOTSTRAP=1 (test-all.sh, for libtest's per-test
# times), and its cluster tests run this script. Cargo keeps that variable in every
# fingerprint, so a build under it rebuilds the build scripts and proc-macros that the
# workspace's own builds share in target/debug, and every later workspace build then
# compiles most of its dependencies again.
unset RUSTC_BOOTSTRAP

cd "$(dirname "$0")/.."
profile=debug
args=()
if [[ "${1:-}" == "--release" ]]; then
    profile=release
    args+=(--release)
    shift
fi
triple="$(rustc -vV | sed -n 's/^host: //p')"
if [[ "${1:-}" == "--target" ]]; then
    triple=${2:?build-static.sh: --target needs a triple}
    shift 2
fi
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
    cargo build -p graft-hook ${args[@]+"${args[@]}"} --target "$triple" "$@" >&2
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
bin="${target_dir:-target}/$triple/$profile/graft-hook"
# A static binary has no program interpreter.
if ! command -v readelf >/dev/null; then
    echo "build-static.sh: no readelf; $bin not checked" >&2
elif readelf -l "$bin" | grep -q 'INTERP'; then
    echo "build-static.sh: $bin is dynamically linked" >&2
    exit 1
fi
echo "$bin"
