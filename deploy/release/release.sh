#!/usr/bin/env bash
# Builds a graft release into dist/: the image for linux/amd64 and linux/arm64 as one OCI
# image index (an OCI image-layout tar), the Helm chart, kubectl-graft for both
# architectures, and SHA256SUMS. With --push it pushes the image index and the chart to a
# registry (oci://); without, it stops there and prints what it would push.
#
#   release.sh VERSION [--arch amd64|arm64] [--push REGISTRY_PREFIX] [--clean]
#
# VERSION is semver with or without a leading v (0.2.0, v0.2.0, 0.0.0-ci). The chart gets
# version 0.2.0 and appVersion v0.2.0; the image is <prefix>/graft:v0.2.0 and the chart
# oci://<prefix>/charts/graft:0.2.0. The prefix is REGISTRY_PREFIX (any registry and path,
# registry.example.com/team), else values.yaml's image.repository without /graft (what a
# tagged release publishes). The packaged chart pulls that image by the digest of the index
# built here (values: image.repository and image.digest), not only by its tag, which a
# registry lets anyone with push rights move. A Chart.yaml whose version or appVersion
# differ from VERSION is reported; the packaged chart carries VERSION either way.
#
# --arch builds one architecture only (the image index then names one platform): half the
# build, for clusters of one architecture.
#
# Logins are the caller's: crane reads the Docker credentials (docker login), helm its own
# (helm registry login). Compiled code lives in ${GRAFT_CACHE:-~/.cache/graft-testbed}/
# release-target, reused across clean clones (never the test build's CARGO_TARGET_DIR).
# --clean is what a tagged release is built with: from nothing, a fresh target directory and
# fresh tools (helm, crane built from source), so that nothing a test run left in a shared
# cache goes into it; it also refuses a Chart.yaml that differs from VERSION, so that a
# tag's tree and what it publishes agree.
set -euo pipefail
usage() { echo "usage: release.sh VERSION [--arch amd64|arm64] [--push REGISTRY_PREFIX] [--clean]" >&2; exit 2; }
[ $# -ge 1 ] || usage
given=$1 version=${1#v}
shift
push="" clean="" triples=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
while [ $# -gt 0 ]; do
  case "$1" in
    --push) [ $# -ge 2 ] || usage; push=${2%/}; shift 2 ;;
    --clean) clean=1; shift ;;
    --arch)
      [ $# -ge 2 ] || usage
      case "$2" in
        amd64) triples=(x86_64-unknown-linux-gnu) ;;
        arm64) triples=(aarch64-unknown-linux-gnu) ;;
        *) echo "release.sh: --arch $2: amd64 or arm64" >&2; exit 2 ;;
      esac
      shift 2 ;;
    *) usage ;;
  esac
done
# A registry name, then path components: what an image reference allows (lowercase).
if [ -n "$push" ] && ! [[ "$push" =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]]; then
  echo "release.sh: --push $push is not a registry prefix (registry.example.com/team)" >&2
  exit 2
fi
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
[[ "$version" =~ $semver ]] || { echo "release.sh: $given is not a semver version" >&2; exit 2; }
app_version=v$version
# A registry tag cannot hold '+': the image tag drops build metadata, as helm does for charts.
image_tag=${app_version%%+*}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/deploy/release
chart_dir=$repo/deploy/helm/graft
dist=$repo/dist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
if [ -n "$clean" ]; then
  cache=$work/cache
  export GRAFT_CACHE=$cache GRAFT_RELEASE_TARGET_DIR=$work/target
  mkdir -p "$cache"
  GRAFT_HELM=""
fi
[ -z "${GRAFT_HELM:-}" ] && [ -f "$cache/env" ] && GRAFT_HELM=$(sed -n 's/^GRAFT_HELM=//p' "$cache/env")
[ -x "${GRAFT_HELM:-}" ] || GRAFT_HELM=""
# shellcheck source=tools.sh
source "$here/tools.sh"

# The image: <prefix>/graft, the prefix --push's or that of the chart's default image.
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' "$chart_dir/values.yaml" | tr -d '"')
[ -n "$repository" ] || { echo "release.sh: no image.repository in values.yaml" >&2; exit 1; }
prefix=${push:-${repository%/graft}}
repository=$prefix/graft
image_ref=$repository:$image_tag
chart_version=$(sed -n 's/^version: *//p' "$chart_dir/Chart.yaml" | tr -d '"')
chart_app=$(sed -n 's/^appVersion: *//p' "$chart_dir/Chart.yaml" | tr -d '"')
if [ "$chart_version" != "$version" ] || [ "$chart_app" != "$app_version" ]; then
  msg="Chart.yaml says version $chart_version, appVersion $chart_app; the release is $version, $app_version"
  if [ -n "$clean" ]; then echo "release.sh: $msg" >&2; exit 1; fi
  release_log "$msg (the packaged chart carries the release's)"
fi

release_tools "${triples[@]}"
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
source_url=$(sed -n 's/^repository *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")

rm -rf "$dist"
mkdir -p "$dist"

start=$SECONDS
release_log "building ${triples[*]}"
# GRAFT_VERSION: what the daemons report (build_info, their logs, kubectl graft status).
GRAFT_VERSION=$app_version bash "$here/build.sh" "$work/bin" "${triples[@]}"
release_log "built in $((SECONDS - start)) s"

for t in "${triples[@]}"; do
  case "$t" in x86_64-*) a=amd64 ;; aarch64-*) a=arm64 ;; esac
  install -m 0755 "$work/bin/$t/kubectl-graft" "$dist/kubectl-graft-$app_version-linux-$a"
done
image_tar=$dist/graft-image-$app_version.oci.tar
index_digest=$(VERSION=$app_version REVISION=$revision SOURCE=$source_url \
  bash "$here/image.sh" "$work/bin" "$image_tar" "$image_ref")
# The chart with image.repository and image.digest set (a copy: the tree stays as tagged).
mkdir -p "$work/chart"
cp -r "$chart_dir" "$work/chart/graft"
sed -i -e '/^image:/,/^[^ ]/s|^  digest: ""$|  digest: "'"$index_digest"'"|' \
  -e '/^image:/,/^[^ ]/s|^  repository: .*$|  repository: '"$repository"'|' "$work/chart/graft/values.yaml"
grep -qx "  digest: \"$index_digest\"" "$work/chart/graft/values.yaml" &&
  grep -qx "  repository: $repository" "$work/chart/graft/values.yaml" || {
  echo "release.sh: could not set image.repository and image.digest in the packaged chart's values.yaml" >&2
  exit 1
}
"$HELM" package "$work/chart/graft" --version "$version" --app-version "$app_version" -d "$dist" >&2
chart_tgz=$dist/graft-$version.tgz
(cd "$dist" && sha256sum -- * >SHA256SUMS)
release_log "dist/ in $((SECONDS - start)) s:"
(cd "$dist" && ls -l) >&2

chart_ref=oci://$prefix/charts
if [ -z "$push" ]; then
  echo "would push image index $image_ref ($index_digest: ${triples[*]}) from $(basename "$image_tar")"
  echo "would push chart $chart_ref/graft:$version from $(basename "$chart_tgz")"
  exit 0
fi
release_crane
mkdir -p "$work/layout"
tar -xf "$image_tar" -C "$work/layout"
# index.json's one entry is the image index: crane pushes it under one tag.
"$CRANE" push "$work/layout" "$image_ref"
"$HELM" push "$chart_tgz" "$chart_ref"
echo "pushed image index $image_ref ($index_digest) and chart $chart_ref/graft:$version"
