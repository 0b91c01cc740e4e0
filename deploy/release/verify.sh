#!/usr/bin/env bash
# Checks a dist/ that release.sh built: SHA256SUMS; the image layout's one entry is an image
# index naming linux/amd64 and linux/arm64 (or the one --arch release.sh was given), each
# manifest's layer holds /usr/bin/graft-driver
# of its architecture (ELF e_machine 62, EM_X86_64, or 183, EM_AARCH64) and a graft-hook
# without a program interpreter (static), and the native daemons report VERSION; the chart
# carries VERSION and its default values render the image the layout names; kubectl-graft
# exists for each architecture.
#
#   verify.sh VERSION [--arch amd64|arm64] [DIST]     DIST defaults to the repository's dist/
set -euo pipefail
usage() { echo "usage: verify.sh VERSION [--arch amd64|arm64] [DIST]" >&2; exit 2; }
[ $# -ge 1 ] || usage
version=${1#v}
shift
arches=(amd64 arm64)
if [ "${1:-}" = --arch ]; then
  case "${2:-}" in amd64 | arm64) arches=("$2") ;; *) usage ;; esac
  shift 2
fi
app_version=v$version
dist=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/dist}
cache=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
helm=${GRAFT_HELM:-}
[ -z "$helm" ] && [ -f "$cache/env" ] && helm=$(sed -n 's/^GRAFT_HELM=//p' "$cache/env")
[ -x "$helm" ] || helm=helm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "verify.sh: $*" >&2; exit 1; }
ok() { echo "verify.sh: ok: $*"; }

(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match"
ok "SHA256SUMS"

# e_machine: the little-endian 16-bit field at offset 18 of the ELF header.
elf_machine() { od -An -tu2 -j18 -N2 --endian=little "$1" | tr -d ' '; }

tar -xf "$dist/graft-image-$app_version.oci.tar" -C "$work" || fail "no image layout for $app_version"
blob() { echo "$work/blobs/sha256/${1#sha256:}"; }
[ "$(jq '.manifests | length' "$work/index.json")" = 1 ] || fail "index.json has not exactly one entry"
top=$(jq -r '.manifests[0].mediaType' "$work/index.json")
[ "$top" = application/vnd.oci.image.index.v1+json ] || fail "index.json names $top, not an image index"
ref=$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$work/index.json")
[ "${ref##*:}" = "$app_version" ] || fail "the image is named $ref, not :$app_version"
index=$(blob "$(jq -r '.manifests[0].digest' "$work/index.json")")
[ "$(jq -r '.annotations["org.opencontainers.image.version"]' "$index")" = "$app_version" ] ||
  fail "the index's org.opencontainers.image.version is not $app_version"
platforms=$(jq -r '[.manifests[].platform | "\(.os)/\(.architecture)"] | sort | join(" ")' "$index")
want_platforms=$(printf 'linux/%s\n' "${arches[@]}" | sort | paste -sd' ')
[ "$platforms" = "$want_platforms" ] || fail "the index holds $platforms, not $want_platforms"
ok "image index $ref: $platforms"

for arch in "${arches[@]}"; do
  case $arch in amd64) want=62 ;; arm64) want=183 ;; esac
  m=$(blob "$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' "$index")")
  cfg=$(blob "$(jq -r '.config.digest' "$m")")
  [ "$(jq -r '.architecture' "$cfg")" = "$arch" ] || fail "$arch's config says $(jq -r '.architecture' "$cfg")"
  root=$work/rootfs-$arch
  mkdir -p "$root"
  for l in $(jq -r '.layers[].digest' "$m"); do tar -xzf "$(blob "$l")" -C "$root"; done
  got=$(elf_machine "$root/usr/bin/graft-driver")
  [ "$got" = "$want" ] || fail "$arch: graft-driver's e_machine is $got, not $want"
  for b in graft-mps graft-nri graftctl graft-compute-domain-controller graft-imex-daemon \
    graft-scheduler-extender graft-hook; do
    [ "$(elf_machine "$root/usr/bin/$b")" = "$want" ] || fail "$arch: $b missing or of another machine"
  done
  if readelf -l "$root/usr/bin/graft-hook" | grep -q INTERP; then fail "$arch: graft-hook has a program interpreter"; fi
  interp=$(readelf -l "$root/usr/bin/graft-driver" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
  [ -f "$root$interp" ] || fail "$arch: the loader $interp is not in the image"
  ok "$arch: graft-driver e_machine $got, graft-hook static, loader $interp"
  [ "$(elf_machine "$dist/kubectl-graft-$app_version-linux-$arch")" = "$want" ] ||
    fail "kubectl-graft-$app_version-linux-$arch missing or of another machine"
done
# The native image runs: every library its binaries load is in it.
if [ "$(id -u)" = 0 ] && [ "$(uname -m)" = x86_64 ] && [ -d "$work/rootfs-amd64" ]; then
  chroot "$work/rootfs-amd64" /usr/bin/graftctl --help >/dev/null || fail "amd64: graftctl does not run in the image"
  ok "amd64: graftctl runs in the image's root"
  # The daemons report the release's version (build_info, logs, --version), stamped at build.
  # Run, not grepped: the compiler may store a short constant string as immediates.
  for b in graft-driver graft-mps graft-nri graft-compute-domain-controller graft-imex-daemon \
    graft-scheduler-extender; do
    said=$(chroot "$work/rootfs-amd64" "/usr/bin/$b" --version) || fail "amd64: $b --version failed"
    [[ "$said" == *" $app_version" ]] || fail "amd64: $b --version says '$said', not $app_version"
  done
  ok "amd64: the daemons report $app_version"
fi

chart=$dist/graft-$version.tgz
[ -f "$chart" ] || fail "no $chart"
meta=$("$helm" show chart "$chart")
grep -qx "version: $version" <<<"$meta" || fail "the chart's version is not $version"
grep -qx "appVersion: $app_version" <<<"$meta" || fail "the chart's appVersion is not $app_version"
images=$("$helm" template graft "$chart" --namespace graft | sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | sort -u)
[ -n "$images" ] || fail "the chart renders no image"
# By tag and by the index's digest (release.sh sets image.digest).
want="$ref@$(jq -r '.manifests[0].digest' "$work/index.json")"
for i in $images; do [ "$i" = "$want" ] || fail "the chart's default image is $i, not the release's $want"; done
ok "chart $version (appVersion $app_version) renders $want"
