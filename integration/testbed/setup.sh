#!/usr/bin/env bash
# Installs the testbed's real components into a cache directory outside the repo and
# reuses them on later runs. Nothing here is a stand-in: containerd, runc, crictl, helm,
# Kubernetes and etcd are built from the Go module proxy; busybox and the older containerd
# come from Debian.
#
#   GRAFT_CACHE   cache directory (default: $HOME/.cache/graft-testbed)
#
# Prints the cache directory's env file path on success; source it to get the paths.
set -euo pipefail

CACHE=${GRAFT_CACHE:-$HOME/.cache/graft-testbed}
CONTAINERD2_VERSION=${CONTAINERD2_VERSION:-v2.2.7}
# The newest containerd line: the cluster's runtime, and a third line for the NRI tests.
CONTAINERD24_VERSION=${CONTAINERD24_VERSION:-v2.4.2}
CONTAINERD17_DEB_VERSION=${CONTAINERD17_DEB_VERSION:-1.7.24~ds1-6+deb13u1}
RUNC_VERSION=${RUNC_VERSION:-v1.3.6}
# The newest runc whose createContainer hooks inherit the container's environment when the
# hook sets none (fixed in 1.3.0): the hostile-image tests run graft against it too.
RUNC_OLD_VERSION=${RUNC_OLD_VERSION:-v1.2.7}
CRICTL_VERSION=${CRICTL_VERSION:-v1.36.0}
# Installs graft on the testbed's cluster from deploy/helm/graft, and renders the plain
# manifests in deploy/ from it (deploy/helm/generate.sh).
HELM_VERSION=${HELM_VERSION:-v4.3.1}
# Checks the chart's PrometheusRule (promtool check rules, and its unit tests:
# helm_chart::alerts). Prometheus' Go module versions are v0.<major><minor>.<patch> of its
# release: v0.316.0 is Prometheus 3.16.0.
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$CACHE"/{bin,go,gocache,images,deb,stamps}
log() { echo "[testbed-setup] $*" >&2; }

export GOPATH="$CACHE/go" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-modcacherw

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated -eq 0 ]; then apt-get update -qq >&2; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Host packages from the machine's own suite: build deps for runc (cgo + seccomp), a static
# busybox for the test image, a static libc to link the pause binary, protoc for the CRI
# client crate, jq for the demo output, openssl for the API server's service-account key
# and the extender's certificates, curl to play kube-scheduler against the extender, the
# CNI loopback plugin for the cluster's pods that do not use the host network, socat for
# the HTTPS in front of install_as_documented's registry.
apt_install libseccomp-dev pkg-config busybox-static libc6-dev gcc protobuf-compiler jq openssl curl \
  containernetworking-plugins socat

# containerd 2.2.x and 2.4.x: plain `go install` works from v2.2.1 on (no replace/exclude
# in go.mod).
build_containerd() { # version
  local dir="$CACHE/bin/containerd-$1"
  [ -x "$dir/containerd-shim-runc-v2" ] && return 0
  log "building containerd $1 (takes a few minutes on a cold cache)"
  mkdir -p "$dir"
  GOBIN="$dir" CGO_ENABLED=1 go install -tags urfave_cli_no_docs \
    -ldflags "-X github.com/containerd/containerd/v2/version.Version=$1" \
    "github.com/containerd/containerd/v2/cmd/containerd@$1" \
    "github.com/containerd/containerd/v2/cmd/ctr@$1"
  GOBIN="$dir" CGO_ENABLED=0 go install -tags "urfave_cli_no_docs no_grpc" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$1"
}
c2="$CACHE/bin/containerd-$CONTAINERD2_VERSION"
c24="$CACHE/bin/containerd-$CONTAINERD24_VERSION"
build_containerd "$CONTAINERD2_VERSION"
build_containerd "$CONTAINERD24_VERSION"

# runc with seccomp, as containerd's Makefile builds it.
if [ ! -x "$CACHE/bin/runc" ]; then
  log "building runc $RUNC_VERSION"
  GOBIN="$CACHE/bin" CGO_ENABLED=1 go install -tags "seccomp urfave_cli_no_docs" \
    "github.com/opencontainers/runc@$RUNC_VERSION"
fi

runc_old="$CACHE/bin/runc-$RUNC_OLD_VERSION"
if [ ! -x "$runc_old/runc" ]; then
  log "building runc $RUNC_OLD_VERSION (the hostile-image tests)"
  mkdir -p "$runc_old"
  GOBIN="$runc_old" CGO_ENABLED=1 go install -tags "seccomp urfave_cli_no_docs" \
    "github.com/opencontainers/runc@$RUNC_OLD_VERSION"
fi

if [ ! -x "$CACHE/bin/crictl" ]; then
  log "building crictl $CRICTL_VERSION"
  # `go install .../cmd/crictl@v` first probes cmd/crictl as a module path, which this
  # proxy answers with 403 rather than 404; build from the downloaded module instead.
  crisrc=$(go mod download -json "sigs.k8s.io/cri-tools@$CRICTL_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  (cd "$crisrc" && CGO_ENABLED=0 go build -mod=mod -trimpath \
    -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
    -o "$CACHE/bin/crictl" ./cmd/crictl)
fi

helm="$CACHE/bin/helm-$HELM_VERSION"
if [ ! -x "$helm/helm" ]; then
  log "building helm $HELM_VERSION"
  mkdir -p "$helm"
  GOBIN="$helm" CGO_ENABLED=0 go install \
    -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
fi

promtool="$CACHE/bin/promtool-$PROMTOOL_VERSION"
if [ ! -x "$promtool/promtool" ]; then
  log "building promtool $PROMTOOL_VERSION (a few minutes on a cold cache)"
  mkdir -p "$promtool"
  prom_release=${PROMTOOL_VERSION#v0.}
  GOBIN="$promtool" CGO_ENABLED=0 go install \
    -ldflags "-X github.com/prometheus/common/version.Version=${prom_release:0:1}.${prom_release:1}" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
fi

# containerd 1.7.24 from Debian trixie, downloaded and unpacked only: installing it would
# pull trixie's libc6 onto this bookworm machine. A private apt state keeps the machine's
# own sources untouched.
c17="$CACHE/bin/containerd-1.7.24"
if [ ! -x "$c17/containerd" ]; then
  log "fetching containerd $CONTAINERD17_DEB_VERSION from Debian trixie"
  aptdir="$CACHE/deb/apt"
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb / && $3 ~ /bookworm/ {print $2; exit}' /etc/apt/sources.list)
  cat >"$aptdir/trixie.sources" <<EOF
Types: deb
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  aopts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$aptdir/none"
         -o "Dir::Etc::sourcelist=$aptdir/trixie.sources"
         -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache"
         -o "Dir::State::status=/var/lib/dpkg/status")
  mkdir -p "$aptdir/none"
  apt-get "${aopts[@]}" -o "Dir::Etc::SourceList=$aptdir/trixie.sources" update -qq >&2
  (cd "$CACHE/deb" && apt-get "${aopts[@]}" -o "Dir::Etc::SourceList=$aptdir/trixie.sources" \
     download "containerd=$CONTAINERD17_DEB_VERSION" >&2)
  rm -rf "$CACHE/deb/containerd-1.7"
  dpkg -x "$CACHE"/deb/containerd_*.deb "$CACHE/deb/containerd-1.7"
  mkdir -p "$c17"
  for b in containerd containerd-shim-runc-v2 ctr; do
    cp "$CACHE/deb/containerd-1.7/usr/bin/$b" "$c17/$b"
  done
fi
# A trixie binary runs here only if it needs no newer glibc than the machine's.
maxglibc=$(objdump -T "$c17/containerd" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1 || true)
log "containerd 1.7.24 needs ${maxglibc:-no glibc symbols}"

# Kubernetes (kube-apiserver, controller-manager, scheduler, kubelet, kubectl) and etcd,
# through the wrapper modules: k8s/ (the newest release the testbed runs) and k8s-1.34/
# (the oldest minor graft supports; it reuses k8s/'s etcd). Each pins every staging module
# to its release, which k8s.io/kubernetes itself cannot do from its module zip. A stamp of
# go.mod and go.sum rebuilds a set when its wrapper changes.
build_k8s() { # wrapper dir, extra packages (etcd); prints the binary dir
  local mod="$here/$1" version dir stamp minor ldf pkg
  shift
  version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")
  [ -n "$version" ] || { log "no k8s.io/kubernetes version in $mod/go.mod"; return 1; }
  dir="$CACHE/bin/k8s-$version"
  stamp=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    log "building Kubernetes $version $* (10-20 minutes on a cold cache)"
    mkdir -p "$dir"
    minor=$(echo "$version" | cut -d. -f2)
    ldf="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldf="$ldf -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldf" -o "$dir/" "$@" \
       k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
       k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl) >&2
    echo "$stamp" >"$dir/.stamp"
  fi
  echo "$dir"
}
k8s=$(build_k8s k8s ./cmd/etcd)
k8s134=$(build_k8s k8s-1.34)
# The 1.34 set runs the etcd built beside the newest one.
ln -sf "$k8s/etcd" "$k8s134/etcd"

# OCI images built by hand from the static busybox and a tiny pause binary.
# The pause tar is named after its tag (build-images.sh), so a tag change builds a new one.
pause_tag=$(sed -n 's/^PAUSE_TAG=\${PAUSE_TAG:-\(.*\)}$/\1/p' "$here/build-images.sh")
if [ ! -s "$CACHE/images/busybox.tar" ] || [ ! -s "$CACHE/images/pause-$pause_tag.tar" ] \
   || [ "$here/build-images.sh" -nt "$CACHE/images/busybox.tar" ]; then
  log "building OCI image tars"
  bash "$here/build-images.sh" "$CACHE/images"
fi

# Written to a temp file and moved, so a reader never sees half an env file.
cat >"$CACHE/env.tmp.$$" <<EOF
GRAFT_CACHE=$CACHE
GRAFT_RUNC=$CACHE/bin/runc
GRAFT_RUNC_OLD=$runc_old/runc
GRAFT_CRICTL=$CACHE/bin/crictl
GRAFT_HELM=$helm/helm
GRAFT_PROMTOOL=$promtool/promtool
GRAFT_CONTAINERD_2=$c2
GRAFT_CONTAINERD_24=$c24
GRAFT_CONTAINERD_17=$c17
GRAFT_IMAGES=$CACHE/images
GRAFT_K8S=$k8s
GRAFT_K8S_134=$k8s134
EOF
mv -f "$CACHE/env.tmp.$$" "$CACHE/env"
log "testbed installed in $CACHE"
echo "$CACHE/env"
