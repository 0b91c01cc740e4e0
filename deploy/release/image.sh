#!/usr/bin/env bash
# Builds graft's release image as one OCI image index (linux/amd64 and linux/arm64, or
# whichever triples BINS_DIR holds) in an OCI image-layout tar, without a container engine.
#
#   image.sh BINS_DIR OUT_TAR REF
#
# BINS_DIR/<triple>/ holds one triple's binaries (deploy/release/build.sh). Each platform's
# image gets them in /usr/bin plus the glibc libraries they load, taken from that
# architecture's libraries: the host's own, or the cross sysroot (/usr/<gnu>/lib, Debian's
# libc6-dev-<arch>-cross). Libraries are found from the ELF NEEDED entries (readelf), never
# ldd, which would run a foreign binary. VERSION, REVISION and SOURCE fill the
# org.opencontainers.image.* annotations.
set -euo pipefail
bins=$1 out=$2 ref=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=../image/oci-layout.sh
source "$here/../image/oci-layout.sh"

daemons=(graft-driver graft-mps graft-nri graftctl graft-compute-domain-controller graft-imex-daemon
  graft-scheduler-extender)
# graft-driver loads the node's libnvidia-ml.so.1 (and NVML loads libcuda.so.1), which need
# these from the image's glibc although graft's binaries do not name them.
extra_libs=(libpthread.so.0 libdl.so.2 libm.so.6 librt.so.1)
host_gnu=$(uname -m)-linux-gnu

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
machine() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }

# rootfs TRIPLE DIR: fills DIR with TRIPLE's binaries and the libraries they load.
rootfs() {
  local t=$1 root=$2 gnu mach
  case "$t" in
    x86_64-unknown-linux-gnu) gnu=x86_64-linux-gnu mach='Advanced Micro Devices X86-64' ;;
    aarch64-unknown-linux-gnu) gnu=aarch64-linux-gnu mach='AArch64' ;;
    *) echo "image.sh: no image platform for $t" >&2; return 1 ;;
  esac
  local sysroot=/usr/$gnu/lib
  [ "$gnu" = "$host_gnu" ] && sysroot=/lib/$gnu
  mkdir -p "$root"/{usr/bin,tmp,etc,lib/$gnu}
  local b f
  for b in "${daemons[@]}" graft-hook; do
    f=$bins/$t/$b
    # The release profile strips already; a foreign strip could not.
    install -m 0755 "$f" "$root/usr/bin/$b"
    [ "$(machine "$f")" = "$mach" ] || { echo "image.sh: $f is not $mach" >&2; return 1; }
  done
  # The runtime runs graft-hook as root on the host: it must be static (docs/security.md).
  if readelf -l "$bins/$t/graft-hook" | grep -q INTERP; then
    echo "image.sh: $bins/$t/graft-hook is dynamically linked" >&2
    return 1
  fi
  local interp
  interp=$(readelf -l "$bins/$t/graft-driver" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  [ -n "$interp" ] || { echo "image.sh: graft-driver names no program interpreter" >&2; return 1; }
  mkdir -p "$root$(dirname "$interp")"
  cp -L "$sysroot/$(basename "$interp")" "$root$interp"
  # Every library named, transitively; the loader itself is already in place.
  local queue=("${extra_libs[@]}") lib
  for b in "${daemons[@]}"; do mapfile -t -O "${#queue[@]}" queue < <(needed "$root/usr/bin/$b"); done
  while [ ${#queue[@]} -gt 0 ]; do
    lib=${queue[0]}
    queue=("${queue[@]:1}")
    [ "$lib" = "$(basename "$interp")" ] && continue
    [ -e "$root/lib/$gnu/$lib" ] && continue
    [ -e "$sysroot/$lib" ] || { echo "image.sh: $lib not in $sysroot" >&2; return 1; }
    cp -L "$sysroot/$lib" "$root/lib/$gnu/$lib"
    [ "$(machine "$root/lib/$gnu/$lib")" = "$mach" ] || { echo "image.sh: $sysroot/$lib is not $mach" >&2; return 1; }
    mapfile -t -O "${#queue[@]}" queue < <(needed "$root/lib/$gnu/$lib")
  done
  echo 'root:x:0:0:root:/:/usr/bin/graft-driver' >"$root/etc/passwd"
}

oci_platform() {
  case "$1" in
    x86_64-*) echo amd64 ;;
    aarch64-*) echo arm64 ;;
  esac
}

ann=$(printf '{"org.opencontainers.image.version":"%s","org.opencontainers.image.revision":"%s","org.opencontainers.image.source":"%s"}' \
  "${VERSION:-}" "${REVISION:-}" "${SOURCE:-}")
cfg=$(printf '{"Env":["PATH=/usr/bin"],"Entrypoint":["/usr/bin/graft-driver"],"Labels":%s}' "$ann")
layout=$work/layout
descs=""
n=0
for dir in "$bins"/*/; do
  t=$(basename "$dir")
  root=$work/rootfs-$t
  rootfs "$t" "$root"
  d=$(OCI_GZIP=1 oci_image "$layout" "$(oci_platform "$t")" "$root" "$cfg" "$ann")
  descs=${descs:+$descs,}$d
  n=$((n + 1))
done
[ $n -gt 0 ] || { echo "image.sh: no triples in $bins" >&2; exit 1; }
# The image index is a blob of its own, named by the layout's only index.json entry: a
# registry push of the layout then pushes the index as one reference.
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s],"annotations":%s}' \
  "$descs" "$ann" >"$work/index.json"
read -r idig isize < <(oci_blob "$layout" "$work/index.json")
oci_finish "$layout" "$(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:%s","size":%s,"annotations":%s}]}' \
  "$idig" "$isize" "$(oci_ref_annotations "$ref")")" "$out"
echo "sha256:$idig"
