# Installs what a release needs on a Debian/Ubuntu machine when it is missing, and sets
# HELM (and CRANE with --push). Sourced by release.sh; needs `cache` (the testbed's cache
# directory, where go-built tools live beside the testbed's own).
#
#   release_tools TRIPLE...      the Rust targets, the cross gcc, readelf, jq and helm
#   release_crane                crane, for pushing the image index

# Versions: helm as the testbed builds it (integration/testbed/setup.sh); crane from
# github.com/google/go-containerregistry.
RELEASE_HELM_VERSION=${HELM_VERSION:-v4.3.1}
RELEASE_CRANE_VERSION=${CRANE_VERSION:-v0.22.1}

release_log() { echo "[release] $*" >&2; }

release_apt() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  release_log "apt-get install ${missing[*]}"
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# release_go_tool NAME VERSION MODULE_PATH: prints the path of the go-built tool.
release_go_tool() {
  local dir="$cache/bin/$1-$2"
  if [ ! -x "$dir/$1" ]; then
    command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
    release_log "building $1 $2"
    mkdir -p "$dir"
    GOPATH="$cache/go" GOCACHE="$cache/gocache" GOFLAGS=-modcacherw GOBIN="$dir" CGO_ENABLED=0 \
      go install "$3@$2" >&2
  fi
  echo "$dir/$1"
}

release_tools() {
  local installed t pkgs=(binutils jq protobuf-compiler)
  installed=$(rustup target list --installed)
  for t in "$@"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t" >&2
    case "$t" in
      aarch64-unknown-linux-gnu) [ "$(uname -m)" = aarch64 ] || pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross) ;;
      x86_64-unknown-linux-gnu) [ "$(uname -m)" = x86_64 ] || pkgs+=(gcc-x86-64-linux-gnu libc6-dev-amd64-cross) ;;
    esac
  done
  release_apt "${pkgs[@]}"
  if [ -n "${GRAFT_HELM:-}" ]; then HELM=$GRAFT_HELM
  elif command -v helm >/dev/null; then HELM=$(command -v helm)
  else
    HELM=$(release_go_tool helm "$RELEASE_HELM_VERSION" helm.sh/helm/v4/cmd/helm)
  fi
}

release_crane() {
  if command -v crane >/dev/null; then CRANE=$(command -v crane)
  else
    CRANE=$(release_go_tool crane "$RELEASE_CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane)
  fi
}
