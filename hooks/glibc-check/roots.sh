#!/usr/bin/env bash
# Builds test roots for graft-hook's ld.so.cache check against real glibc loaders:
#
#   bash hooks/glibc-check/roots.sh OUT_DIR LIBC6.deb[:LIBC-BIN.deb] ...
#
# Each root holds one Debian libc6 (its dynamic loader) and libc-bin (its ldconfig), two
# programs built without libc that need a library only the cache can find
# (/prog-gt: libgt.so.1 in /opt/gt; /prog-img: libimg.so.1 in /opt/img), and an
# /etc/ld.so.cache written by that glibc's own ldconfig naming /opt/img only. Then (root
# needed, for chroot):
#
# (a root with `ldconfig -c compat` run again in it covers the old+new layout) and
#   GRAFT_GLIBC_ROOTS=OUT_DIR cargo test -p graft-hook -- --ignored glibc_
set -euo pipefail
out=${1:?usage: roots.sh OUT_DIR LIBC6.deb[:LIBC-BIN.deb] ...}
shift
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cat > "$src/gt.c" <<'C'
int gt(void) { return 42; }
C
cat > "$src/img.c" <<'C'
int img(void) { return 43; }
C
for lib in gt img; do
    cat > "$src/prog-$lib.c" <<C
int $lib(void);
void _start(void) {
    long r = $lib();
    __asm__ volatile("syscall" :: "a"(60), "D"(r));
    for (;;) {}
}
C
    gcc -shared -fPIC -nostdlib -Wl,-soname,lib$lib.so.1 -o "$src/lib$lib.so.1.0" "$src/$lib.c"
    gcc -nostdlib -no-pie -o "$src/prog-$lib" "$src/prog-$lib.c" "$src/lib$lib.so.1.0"
done
for spec in "$@"; do
    libc6=${spec%%:*}
    name=$(basename "$libc6" .deb)
    root="$out/$name"
    rm -rf "$root"
    mkdir -p "$root"
    dpkg-deb -x "$libc6" "$root"
    [[ "$spec" == *:* ]] && dpkg-deb -x "${spec#*:}" "$root"
    # Merged /usr: the links the base system would have.
    for d in lib lib64 sbin bin; do
        if [[ -d "$root/usr/$d" && ! -e "$root/$d" ]]; then ln -s "usr/$d" "$root/$d"; fi
    done
    for lib in gt img; do
        mkdir -p "$root/opt/$lib"
        cp "$src/lib$lib.so.1.0" "$root/opt/$lib/"
        ln -sf "lib$lib.so.1.0" "$root/opt/$lib/lib$lib.so.1"
        cp "$src/prog-$lib" "$root/"
    done
    mkdir -p "$root/etc"
    echo /opt/img > "$root/etc/ld.so.conf"
    for ldconfig in /sbin/ldconfig /usr/sbin/ldconfig; do
        [[ -x "$root$ldconfig" ]] && break
    done
    chroot "$root" "$ldconfig"
    echo "$root: $(head -c 20 "$root/etc/ld.so.cache" | tr -c '[:print:]' .)"
done
