#!/usr/bin/env bash
# Renders the plain manifests in deploy/ from the chart, so that the chart is their one
# source: deploy/graft (default values), deploy/gpu (values-gpu.yaml) and
# deploy/optional/require-graft-nri.yaml (requireGraftNri on, at v1beta1, the version
# Kubernetes 1.34 and later all serve). Each template becomes a file of the same name.
#
#   generate.sh           rewrite them
#   generate.sh --check   exit 1, showing the difference, when they are not up to date
#
# HELM: the helm binary (default: the testbed's, from integration/testbed/setup.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deploy=$(cd "$here/.." && pwd)
chart=$here/graft
if [ -z "${HELM:-}" ]; then
  # shellcheck disable=SC1090
  source "$(bash "$deploy/../integration/testbed/setup.sh")"
  HELM=$GRAFT_HELM
fi
check=0
[ "${1:-}" = --check ] && check=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
header="# Generated from deploy/helm/graft by deploy/helm/generate.sh: change the chart, then
# run the script."

# render DIR helm-args...: one file per template that renders anything.
render() {
  local dir=$out/$1; shift
  mkdir -p "$dir"
  "$HELM" template graft "$chart" --namespace graft-system "$@" | awk -v dir="$dir" -v header="$header" '
    /^---$/ { blank = 0; next }
    /^# Source: / {
      f = $3; sub(/^.*\/templates\//, "", f); f = dir "/" f
      if (f in seen) print "---" > f; else { seen[f] = 1; print header > f }
      next
    }
    # Blank lines only between lines of one document, none at its end.
    /^[[:space:]]*$/ { blank++; next }
    { while (blank > 0) { print "" > f; blank-- } print > f }'
}
render graft --set createNamespace=true
render gpu --set createNamespace=true -f "$chart/values-gpu.yaml"
render optional --set requireGraftNri.enabled=true \
  --set requireGraftNri.apiVersion=admissionregistration.k8s.io/v1beta1 \
  --show-only templates/60-require-graft-nri.yaml
mv "$out/optional/60-require-graft-nri.yaml" "$out/optional/require-graft-nri.yaml"

kustomization() { # dir, comment
  local files
  files=$(cd "$out/$1" && ls ./*.yaml | sed 's#^\./#  - #')
  {
    echo "$header"
    echo "$2"
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "$files"
  } >"$out/$1/kustomization.yaml"
}
kustomization graft "# graft for nodes without GPUs: kubectl apply -k deploy/graft (or helm install, docs/install.md)."
kustomization gpu "# graft on GPU nodes (the nvidia backend on): kubectl apply -k deploy/gpu instead of deploy/graft."

status=0
for d in graft gpu optional; do
  if [ $check = 1 ]; then
    diff -ru "$deploy/$d" "$out/$d" || status=1
  else
    rm -f "$deploy/$d"/*.yaml
    cp "$out/$d"/*.yaml "$deploy/$d/"
  fi
done
[ $status = 0 ] || echo "deploy/ is not what the chart renders: run deploy/helm/generate.sh" >&2
exit $status
