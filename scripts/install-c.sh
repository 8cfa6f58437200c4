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
# the CMake package PREFIX/lib/cmake/tensorfile/ (find_package(tensorfile),
# targets tensorfile::tensorfile and tensorfile::tensorfile_static),
# PREFIX/lib/libtensorfile.a and the shared library the way ldconfig
# expects it: the file libtensorfile.so.VERSION, the link named by its
# SONAME (libtensorfile.so.0), which programs load at run time, and the
# link libtensorfile.so, which `-ltensorfile` finds when linking.
#
# Options (scripts/release.sh lays out the C library's archive this way):
#   --profile NAME   install what `cargo build --profile NAME` built
#                    (default release)
#   --relocatable    the pkg-config file names its prefix relative to its
#                    own place (${pcfiledir}), so the tree can be moved
set -euo pipefail
usage() {
    echo "usage: $0 [--profile NAME] [--relocatable] PREFIX" >&2
    exit 2
}
profile=release
relocatable=""
while [ $# -gt 1 ]; do
    case "$1" in
        --profile) [ $# -gt 2 ] || usage; profile="$2"; shift 2 ;;
        --relocatable) relocatable=1; shift ;;
        *) usage ;;
    esac
done
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
    usage
fi
# The directory each profile builds into (cargo's names).
case "$profile" in
    dev | test) profile_dir=debug ;;
    release | bench) profile_dir=release ;;
    *[!A-Za-z0-9_-]* | "") usage ;;
    *) profile_dir="$profile" ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
ffi="$root/crates/tensorfile-ffi"
# Where cargo builds: cargo says, when it is on the PATH (it may not be
# under sudo); else CARGO_TARGET_DIR or target/.
target=""
if command -v cargo >/dev/null 2>&1; then
    target="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')" || target=""
fi
release="${target:-${CARGO_TARGET_DIR:-$root/target}}/$profile_dir"
for built in libtensorfile.so libtensorfile.a; do
    if [ ! -f "$release/$built" ]; then
        echo "$0: no $release/$built: run 'cargo build --profile $profile -p tensorfile-ffi' first" >&2
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

install -d "$prefix/include" "$lib/pkgconfig" "$lib/cmake/tensorfile"
install -m 644 "$ffi/include/tensorfile.h" "$prefix/include/tensorfile.h"
install -m 755 "$release/libtensorfile.so" "$lib/libtensorfile.so.$version"
ln -sfn "libtensorfile.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libtensorfile.so"
install -m 644 "$release/libtensorfile.a" "$lib/libtensorfile.a"
# shellcheck disable=SC2016 # pkg-config expands ${pcfiledir} itself
pc_prefix="$( [ -n "$relocatable" ] && echo '${pcfiledir}/../..' || echo "$prefix")"
sed -e "s|@PREFIX@|$pc_prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE_LIBS@|$private_libs|" \
    "$ffi/tensorfile.pc.in" >"$lib/pkgconfig/tensorfile.pc"
# The CMake package finds its prefix from its own place: always relocatable.
cmake_private_libs="$(echo "$private_libs" | sed -e 's/-l//g' -e 's/ c$//' -e 's/ /;/g')"
for config in tensorfileConfig tensorfileConfigVersion; do
    sed -e "s|@VERSION@|$version|g" -e "s|@SONAME@|$soname|g" -e "s|@CMAKE_PRIVATE_LIBS@|$cmake_private_libs|g" \
        "$ffi/cmake/$config.cmake.in" >"$lib/cmake/tensorfile/$config.cmake"
done
echo "installed libtensorfile $version ($soname) under $prefix"
