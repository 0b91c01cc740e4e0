# Builds OCI image layouts by hand: one layer per image from a root directory, with the
# image named in the index annotations that `ctr images import` and CRI resolve. Sourced by
# deploy/image/build.sh, deploy/release/image.sh and the testbed's build-images.sh; needs
# `work` set to a scratch directory.
#
# Layout and media types: the OCI image-spec (image-layout.md, image-index.md, manifest.md,
# config.md). containerd's import names one image per index.json entry that carries
# io.containerd.image.name, so one layout may name the same manifest twice.

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

# oci_blob LAYOUT FILE: moves FILE into LAYOUT's blobs; prints "DIGEST SIZE".
oci_blob() {
  local d s
  d=$(sha "$2"); s=$(size "$2")
  mkdir -p "$1/blobs/sha256"
  mv "$2" "$1/blobs/sha256/$d"
  echo "$d $s"
}

# oci_image LAYOUT ARCH ROOTFS_DIR CONFIG_JSON_FRAGMENT [ANNOTATIONS_JSON]: adds one image
# (layer, config, manifest) to LAYOUT and prints its manifest descriptor, platform included.
# OCI_GZIP=1 compresses the layer (for registries); the default stays uncompressed.
oci_image() {
  local l=$1 arch=$2 rootfs=$3 cfg=$4 ann=${5:+,\"annotations\":$5}
  local t="$l/tmp.$$"
  mkdir -p "$t"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$t/layer.tar" .
  local diff lt=application/vnd.oci.image.layer.v1.tar
  diff=$(sha "$t/layer.tar")
  if [ "${OCI_GZIP:-0}" = 1 ]; then
    gzip -n -9 "$t/layer.tar"
    mv "$t/layer.tar.gz" "$t/layer.tar"
    lt=$lt+gzip
  fi
  local ld ls; read -r ld ls < <(oci_blob "$l" "$t/layer.tar")
  printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$cfg" "$diff" >"$t/config.json"
  local cd cs; read -r cd cs < <(oci_blob "$l" "$t/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"%s","digest":"sha256:%s","size":%s}]%s}' \
    "$cd" "$cs" "$lt" "$ld" "$ls" "$ann" >"$t/manifest.json"
  local md ms; read -r md ms < <(oci_blob "$l" "$t/manifest.json")
  rmdir "$t"
  printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"}}' \
    "$md" "$ms" "$arch"
}

# oci_ref_annotations REF: the annotations that name an index.json entry REF.
oci_ref_annotations() {
  printf '{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}' "$1" "${1##*:}"
}

# oci_finish LAYOUT INDEX_JSON OUT_TAR: writes index.json and oci-layout, then the tar.
oci_finish() {
  printf %s "$2" >"$1/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$1/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$3.tmp" oci-layout index.json blobs
  mv "$3.tmp" "$3"
}

# make_image REF ROOTFS_DIR CONFIG_JSON_FRAGMENT OUT_TAR [MORE_REF...]: a single-platform
# image of the build host's architecture, named REF and each MORE_REF.
make_image() {
  local ref=$1 rootfs=$2 cfg=$3 tarout=$4
  shift 4
  local d="$work/layout-$(basename "$tarout" .tar)"
  local arch desc; arch=$(oci_arch) || return 1
  desc=$(oci_image "$d" "$arch" "$rootfs" "$cfg") || return 1
  local entries="" r
  for r in "$ref" "$@"; do
    entries="${entries:+$entries,}${desc%\}},\"annotations\":$(oci_ref_annotations "$r")}"
  done
  oci_finish "$d" "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[$entries]}" "$tarout"
}
