#!/usr/bin/env bash
# Builds a graft release into dist/: the image for linux/amd64 and linux/arm64 as one OCI
# image index (an OCI image-layout tar), the Helm chart, kubectl-graft for both
# architectures, and SHA256SUMS. With --push it pushes the image index and the chart
# (oci://); without, it stops there and prints what it would push.
#
#   release.sh VERSION [--push REGISTRY_PREFIX]
#
# VERSION is semver with or without a leading v (0.2.0, v0.2.0, 0.0.0-ci). The chart gets
# version 0.2.0 and appVersion v0.2.0; the image is <prefix>/graft:v0.2.0, the tag the
# chart's values.yaml pulls by default (image.tag empty means appVersion). The prefix is
# values.yaml's image.repository without /graft; --push refuses another one, and refuses a
# Chart.yaml whose version or appVersion differ from VERSION, so that a tag's tree and what
# it publishes agree. Without --push a differing Chart.yaml is only reported: the packaged
# chart carries VERSION either way. The chart goes to oci://<prefix>/charts/graft.
#
# Logins are the caller's: crane reads the Docker credentials (docker login), helm its own
# (helm registry login). Without --push, compiled code lives in
# ${GRAFT_CACHE:-~/.cache/graft-testbed}/release-target, reused across clean clones (never the
# test build's CARGO_TARGET_DIR). With --push, what is published is built from nothing: a
# fresh target directory and fresh tools (helm, crane built from source), so that nothing a
# test run left in a shared cache goes into a release.
#
# The packaged chart pulls the image by the digest of the index built here (values:
# image.digest), not only by its tag, which a registry lets anyone with push rights move.
set -euo pipefail
usage() { echo "usage: release.sh VERSION [--push REGISTRY_PREFIX]" >&2; exit 2; }
[ $# -ge 1 ] || usage
version=${1#v}
push=""
if [ $# -ge 2 ]; then
  [ "$2" = --push ] && [ $# -eq 3 ] || usage
  push=${3%/}
fi
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
[[ "$version" =~ $semver ]] || { echo "release.sh: $1 is not a semver version" >&2; exit 2; }
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
if [ -n "$push" ]; then
  cache=$work/cache
  export GRAFT_CACHE=$cache GRAFT_RELEASE_TARGET_DIR=$work/target
  mkdir -p "$cache"
  GRAFT_HELM=""
fi
[ -z "${GRAFT_HELM:-}" ] && [ -f "$cache/env" ] && GRAFT_HELM=$(sed -n 's/^GRAFT_HELM=//p' "$cache/env")
[ -x "${GRAFT_HELM:-}" ] || GRAFT_HELM=""
triples=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
# shellcheck source=tools.sh
source "$here/tools.sh"

# The chart's default image, which the release must be.
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' "$chart_dir/values.yaml" | tr -d '"')
[ -n "$repository" ] || { echo "release.sh: no image.repository in values.yaml" >&2; exit 1; }
prefix=${repository%/graft}
image_ref=$repository:$image_tag
if [ -n "$push" ] && [ "$push" != "$prefix" ]; then
  echo "release.sh: values.yaml pulls $repository; pushing to $push/graft would leave that unpublished" >&2
  exit 1
fi
chart_version=$(sed -n 's/^version: *//p' "$chart_dir/Chart.yaml" | tr -d '"')
chart_app=$(sed -n 's/^appVersion: *//p' "$chart_dir/Chart.yaml" | tr -d '"')
if [ "$chart_version" != "$version" ] || [ "$chart_app" != "$app_version" ]; then
  msg="Chart.yaml says version $chart_version, appVersion $chart_app; the release is $version, $app_version"
  if [ -n "$push" ]; then echo "release.sh: $msg" >&2; exit 1; fi
  release_log "$msg (the packaged chart carries the release's)"
fi

release_tools "${triples[@]}"
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
source_url=$(sed -n 's/^repository *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")

rm -rf "$dist"
mkdir -p "$dist"

start=$SECONDS
release_log "building ${triples[*]}"
bash "$here/build.sh" "$work/bin" "${triples[@]}"
release_log "built in $((SECONDS - start)) s"

for t in "${triples[@]}"; do
  case "$t" in x86_64-*) a=amd64 ;; aarch64-*) a=arm64 ;; esac
  install -m 0755 "$work/bin/$t/kubectl-graft" "$dist/kubectl-graft-$app_version-linux-$a"
done
image_tar=$dist/graft-image-$app_version.oci.tar
index_digest=$(VERSION=$app_version REVISION=$revision SOURCE=$source_url \
  bash "$here/image.sh" "$work/bin" "$image_tar" "$image_ref")
# The chart with image.digest set (a copy: the tree stays as tagged).
mkdir -p "$work/chart"
cp -r "$chart_dir" "$work/chart/graft"
sed -i '/^image:/,/^[^ ]/s/^  digest: ""$/  digest: "'"$index_digest"'"/' "$work/chart/graft/values.yaml"
grep -qx "  digest: \"$index_digest\"" "$work/chart/graft/values.yaml" || {
  echo "release.sh: could not set image.digest in the packaged chart's values.yaml" >&2
  exit 1
}
"$HELM" package "$work/chart/graft" --version "$version" --app-version "$app_version" -d "$dist" >&2
chart_tgz=$dist/graft-$version.tgz
(cd "$dist" && sha256sum -- * >SHA256SUMS)
release_log "dist/ in $((SECONDS - start)) s:"
(cd "$dist" && ls -l) >&2

chart_ref=oci://$prefix/charts
if [ -z "$push" ]; then
  echo "would push image index $image_ref ($index_digest: linux/amd64, linux/arm64) from $(basename "$image_tar")"
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
