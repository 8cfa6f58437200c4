#!/usr/bin/env bash
# Installs the C library built by `cargo build --release -p tensorfile-ffi`
# under a prefix (it does not build: run it as root for a system prefix,
# where cargo is usually not on the PATH):
#
#   cargo build --release -p tensorfile-ffi
#   sudo scripts/install-c.sh /usr/local && sudo ldconfig
#   scripts/install-c.sh ~/.local          (any other prefix)
#
# Installs PREFIX/include/tensorfile.h, PREFIX/lib/pkgconfig/tensorfile.pc,
# PREFIX/lib/libtensorfile.a and the shared library the way ldconfig
# expects it: the file libtensorfile.so.VERSION, the link named by its
# SONAME (libtensorfile.so.0), which programs load at run time, and the
# link libtensorfile.so, which `-ltensorfile` finds when linking.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
ffi="$root/crates/tensorfile-ffi"
# Where cargo builds: cargo says, when it is on the PATH (it may not be
# under sudo); else CARGO_TARGET_DIR or target/.
target=""
if command -v cargo >/dev/null 2>&1; then
    target="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')" || target=""
fi
release="${target:-${CARGO_TARGET_DIR:-$root/target}}/release"
for built in libtensorfile.so libtensorfile.a; do
    if [ ! -f "$release/$built" ]; then
        echo "$0: no $release/$built: run 'cargo build --release -p tensorfile-ffi' first" >&2
        exit 1
    fi
done
# The SONAME the build gave the library (crates/tensorfile-ffi/build.rs):
# the name of the link programs load.
soname="$(readelf -d "$release/libtensorfile.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')"
case "$soname" in
    libtensorfile.so.[0-9]*) ;;
    *)
        echo "$0: $release/libtensorfile.so has no libtensorfile.so.N SONAME (an old build?)" >&2
        exit 1
        ;;
esac
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
prefix="$(mkdir -p "$1" && cd "$1" && pwd)"
lib="$prefix/lib"
# What a program linking libtensorfile.a also needs (rustc --print
# native-static-libs says the same for Linux targets).
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

install -d "$prefix/include" "$lib/pkgconfig"
install -m 644 "$ffi/include/tensorfile.h" "$prefix/include/tensorfile.h"
install -m 755 "$release/libtensorfile.so" "$lib/libtensorfile.so.$version"
ln -sfn "libtensorfile.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libtensorfile.so"
install -m 644 "$release/libtensorfile.a" "$lib/libtensorfile.a"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE_LIBS@|$private_libs|" \
    "$ffi/tensorfile.pc.in" >"$lib/pkgconfig/tensorfile.pc"
echo "installed libtensorfile $version ($soname) under $prefix"
