#!/usr/bin/env bash
# The C library: install it under a prefix with the documented command,
# build the C example against it through pkg-config (shared and static) and
# run it, then run the C tests under valgrind and with AddressSanitizer.
# (cargo test --workspace already ran them plainly.) Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }
# CI runs as root; elsewhere apt goes through sudo.
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=""
apt_update_once() {
    if ! have apt-get; then
        echo "c-tests: a tool is missing and there is no apt-get to install it" >&2
        exit 1
    fi
    if [ -z "$apt_updated" ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
}
apt_install() {
    apt_update_once
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

have cc || apt_install gcc libc6-dev
have pkg-config || apt_install pkg-config
have valgrind || apt_install valgrind
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
asan_probe() { echo 'int main(void) { return 0; }' | cc -fsanitize=address -x c - -o "$work/probe" && "$work/probe"; }
if ! asan_probe 2>/dev/null; then
    # gcc's AddressSanitizer runtime lives in the libasanN package of its
    # version; the package lists must be fresh before searching them.
    apt_update_once
    asan="$(apt-cache search --names-only '^libasan[0-9]+$' | cut -d' ' -f1 | sort -V | tail -n 1)"
    if [ -z "$asan" ]; then
        echo "c-tests: no libasan package found for AddressSanitizer" >&2
        exit 1
    fi
    apt_install "$asan"
    asan_probe
fi

echo "c-tests: install and build the example"
scripts/install-c.sh "$work/prefix"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
example=crates/tensorfile-ffi/examples/print_tensors.c
# shellcheck disable=SC2046 # pkg-config output is meant to split into words
cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags --libs tensorfile) \
    -Wl,-rpath,"$work/prefix/lib" -o "$work/print_tensors"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags tensorfile) \
    "$work/prefix/lib/libtensorfile.a" $(pkg-config --static --libs-only-l tensorfile | sed 's/-ltensorfile//') \
    -o "$work/print_tensors_static"
fixture=tests/fixtures/valid/worked_example.safetensors
for exe in print_tensors print_tensors_static; do
    out="$("$work/$exe" "$fixture")"
    grep -qx 'w F32 \[2, 2\] 16 bytes, 64-byte aligned' <<<"$out" || { echo "$exe printed: $out" >&2; exit 1; }
    grep -qx 'metadata format = tinyllm' <<<"$out" || { echo "$exe printed: $out" >&2; exit 1; }
    "$work/$exe" --pytorch tests/fixtures/pytorch/zip_simple.pt | grep -qx 'b I64 \[3\] 24 bytes.*' ||
        { echo "$exe cannot read zip_simple.pt" >&2; exit 1; }
    if "$work/$exe" --mmap tests/fixtures/invalid/gap_between.safetensors 2>/dev/null; then
        echo "$exe accepted an invalid file" >&2
        exit 1
    fi
done

echo "c-tests: the C tests under valgrind"
TENSORFILE_C_RUNNER="valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=1 --suppressions=$PWD/crates/tensorfile-ffi/tests/c/valgrind.supp" \
    cargo test -q -p tensorfile-ffi --test c_tests

echo "c-tests: the C tests with AddressSanitizer"
TENSORFILE_C_CFLAGS="-fsanitize=address -fno-omit-frame-pointer" \
    cargo test -q -p tensorfile-ffi --test c_tests
