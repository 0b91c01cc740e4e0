# Builds OCI image-layout tars by hand: one uncompressed layer from a root directory, with
# the image named in the index annotations that `ctr images import` and CRI resolve. Sourced
# by deploy/image/build.sh and the testbed's build-images.sh; needs `work` set to a scratch
# directory.

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# The OCI (Go) name of the build host's architecture: the binaries in the image are its.
oci_arch() {
  local m
  m=$(uname -m)
  case "$m" in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    armv7l | armv6l) echo arm ;;
    i?86) echo 386 ;;
    ppc64le | s390x | riscv64) echo "$m" ;;
    *) echo "oci-layout.sh: no OCI architecture name for $m" >&2; return 1 ;;
  esac
}

# make_image REF ROOTFS_DIR CONFIG_JSON_FRAGMENT OUT_TAR
make_image() {
  local ref=$1 rootfs=$2 cfg=$3 tarout=$4
  local d="$work/layout-$(basename "$tarout" .tar)"
  local arch; arch=$(oci_arch) || return 1
  mkdir -p "$d/blobs/sha256"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$d/layer.tar" .
  local ld ls; ld=$(sha "$d/layer.tar"); ls=$(size "$d/layer.tar")
  mv "$d/layer.tar" "$d/blobs/sha256/$ld"
  printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$cfg" "$ld" >"$d/config.json"
  local cd cs; cd=$(sha "$d/config.json"); cs=$(size "$d/config.json")
  mv "$d/config.json" "$d/blobs/sha256/$cd"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$cd" "$cs" "$ld" "$ls" >"$d/manifest.json"
  local md ms; md=$(sha "$d/manifest.json"); ms=$(size "$d/manifest.json")
  mv "$d/manifest.json" "$d/blobs/sha256/$md"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$md" "$ms" "$arch" "$ref" "${ref##*:}" >"$d/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$d" -cf "$tarout.tmp" oci-layout index.json blobs
  mv "$tarout.tmp" "$tarout"
}

