#!/usr/bin/env bash
# Builds and installs the C library under a prefix:
#
#   scripts/install-c.sh PREFIX        (for example /usr/local or ~/.local)
#
# PREFIX/include/tensorfile.h, PREFIX/lib/libtensorfile.{so,a} and
# PREFIX/lib/pkgconfig/tensorfile.pc. Then:
#   cc app.c $(pkg-config --cflags --libs tensorfile)
# with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig if PREFIX is not a system one.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
ffi="$root/crates/tensorfile-ffi"
prefix="$(mkdir -p "$1" && cd "$1" && pwd)"

(cd "$root" && cargo build --release --quiet -p tensorfile-ffi)
target="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
release="${target:-$root/target}/release"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
# What a program linking libtensorfile.a also needs (rustc --print
# native-static-libs says the same for Linux targets).
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 "$ffi/include/tensorfile.h" "$prefix/include/tensorfile.h"
install -m 755 "$release/libtensorfile.so" "$prefix/lib/libtensorfile.so"
install -m 644 "$release/libtensorfile.a" "$prefix/lib/libtensorfile.a"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE_LIBS@|$private_libs|" \
    "$ffi/tensorfile.pc.in" >"$prefix/lib/pkgconfig/tensorfile.pc"
echo "installed libtensorfile $version under $prefix"
