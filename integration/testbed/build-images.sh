#!/usr/bin/env bash
# Builds two OCI image-layout tars without any registry: a busybox test image and a pause
# image, named with the fully qualified references CRI resolves. The busybox image is also
# named EXAMPLE_REF, the public image deploy/examples/ use, so that the examples run on the
# testbed, which has no network.
#   build-images.sh OUTDIR
set -euo pipefail
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUSYBOX_REF=${BUSYBOX_REF:-docker.io/library/busybox:test}
EXAMPLE_REF=docker.io/library/busybox:1.37
# The sandbox image of Kubernetes 1.37 (kubeadm) and containerd 2.4's default. The kubelet
# names none; every containerd config in the testbed pins this one. The tar carries the tag
# in its name so that a cache built for another tag keeps working beside it.
PAUSE_TAG=${PAUSE_TAG:-3.10.2}
PAUSE_REF=registry.k8s.io/pause:$PAUSE_TAG
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=../../deploy/image/oci-layout.sh
source "$here/../../deploy/image/oci-layout.sh"

# busybox: the static binary plus one symlink per applet.
bb="$work/busybox-root"
mkdir -p "$bb"/{bin,tmp,etc,proc,sys,dev,root,var}
cp /bin/busybox "$bb/bin/busybox"
for applet in $("$bb/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$bb/bin/$applet"
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$bb/etc/passwd"
echo 'root:x:0:' >"$bb/etc/group"
make_image "$BUSYBOX_REF" "$bb" '{"Env":["PATH=/bin"],"Cmd":["/bin/sh"]}' "$out/busybox.tar" "$EXAMPLE_REF"

pr="$work/pause-root"
mkdir -p "$pr"
gcc -static -Os -o "$pr/pause" "$here/pause.c"
strip "$pr/pause"
make_image "$PAUSE_REF" "$pr" '{"Entrypoint":["/pause"]}' "$out/pause-$PAUSE_TAG.tar"
echo "$BUSYBOX_REF $EXAMPLE_REF $PAUSE_REF" >"$out/refs"
