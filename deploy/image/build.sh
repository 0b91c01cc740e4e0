#!/usr/bin/env bash
# Builds graft's container image as an OCI image-layout tar, without a registry or a
# container engine: graft-driver, graft-mps, graft-nri, graftctl, graft-hook,
# graft-compute-domain-controller, graft-imex-daemon and graft-scheduler-extender in /usr/bin plus the shared
# libraries they load (glibc, libgcc_s), taken from this machine. The Dockerfile beside this script builds the same
# image with a container engine.
#
#   build.sh BIN_DIR OUT_TAR [REF]       REF defaults to localhost/graft:dev
#
# graft-hook must be the static build (hooks/build-static.sh): HOOK_BIN names it, default
# BIN_DIR/graft-hook. A dynamically linked one is refused here, as graft-driver would.
set -euo pipefail
bin=$1 out=$2 ref=${3:-localhost/graft:dev}
hook=${HOOK_BIN:-$bin/graft-hook}
if readelf -l "$hook" | grep INTERP >/dev/null; then
  echo "build.sh: $hook is dynamically linked; build it with hooks/build-static.sh" >&2
  exit 1
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=oci-layout.sh
source "$here/oci-layout.sh"

root="$work/rootfs"
mkdir -p "$root"/{usr/bin,tmp,etc}
install -m 0755 -s "$hook" "$root/usr/bin/graft-hook"
for b in graft-driver graft-mps graft-nri graftctl graft-compute-domain-controller graft-imex-daemon \
  graft-scheduler-extender; do
  # Stripped: debug info is no use in the image and makes it ten times larger.
  install -m 0755 -s "$bin/$b" "$root/usr/bin/$b"
  # Every library the loader resolves, at the same path, plus the loader itself.
  ldd "$bin/$b" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
# graft-driver loads the node's libnvidia-ml.so.1 (and NVML loads libcuda.so.1), which need
# these from the image's glibc: without them NVML cannot load on a real GPU node.
libdir=$(dirname "$(ldd "$bin/graft-driver" | awk '$1 == "libc.so.6" {print $3}')")
for lib in libpthread.so.0 libdl.so.2 libm.so.6 librt.so.1; do
  [ -e "$libdir/$lib" ] || { echo "build.sh: $libdir/$lib missing" >&2; exit 1; }
  mkdir -p "$root$libdir"
  cp -L "$libdir/$lib" "$root$libdir/$lib"
done
echo 'root:x:0:0:root:/:/usr/bin/graft-driver' >"$root/etc/passwd"
make_image "$ref" "$root" '{"Env":["PATH=/usr/bin"],"Entrypoint":["/usr/bin/graft-driver"]}' "$out"
echo "$out ($ref)"
