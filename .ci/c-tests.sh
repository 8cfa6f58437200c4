#!/usr/bin/env bash
# The C library: build and install it exactly as the README says, under
# /usr/local (in a private mount namespace: needs root, or sudo) and under
# another prefix, build the README's C example there through pkg-config and
# run it with no variable set; build the C example shared and static; then
# run the C tests under valgrind and with AddressSanitizer (cargo test
# --workspace already ran them plainly). Installs what it needs.
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
have readelf || apt_install binutils
have unshare || apt_install util-linux
have valgrind || apt_install valgrind
have cmake || apt_install cmake
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

# Helpers, in a file that the namespaced step (another shell, maybe
# through sudo) sources too.
cat >"$work/helpers.sh" <<'HELPERS'
# The README's commands, run as they are written: each is looked up in
# README.md as a whole line (so the README cannot change without this
# failing) and then run. `sudo` is the README's; that step runs as root.
readme() {
    if ! grep -qxF -- "$1" "$repo/README.md"; then
        echo "c-tests: README.md no longer has the line: $1" >&2
        exit 1
    fi
    echo "+ $1"
    eval "${1#sudo }"
}
# The programs run with no variable set: the loader and pkg-config find
# the library where it was installed, or through the rpath.
bare() { env -i PATH=/usr/bin:/bin "$@"; }
# The README's C example (its ```c block) is app.c; it reads w from
# model.safetensors and writes out.safetensors where it runs.
app_dir() {
    mkdir -p "$1"
    sed -n '/^```c$/,/^```$/{/^```/d;p}' "$repo/README.md" >"$1/app.c"
    cp "$repo/tests/fixtures/valid/worked_example.safetensors" "$1/model.safetensors"
}
check_app() {
    local out
    out="$(bare ./app)" || { echo "c-tests: app failed in $PWD: $out" >&2; exit 1; }
    [ "$out" = "F32, 2 dims, 16 bytes" ] || { echo "c-tests: app printed: $out" >&2; exit 1; }
    [ -s out.safetensors ] || { echo "c-tests: app wrote no out.safetensors" >&2; exit 1; }
}
HELPERS
repo="$PWD"
# shellcheck source=/dev/null
. "$work/helpers.sh"

echo "c-tests: build as the README says"
readme 'cargo build --release -p tensorfile-ffi'
soname="$(readelf -d target/release/libtensorfile.so | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')"
[ "$soname" = libtensorfile.so.0 ] || { echo "c-tests: SONAME is '$soname'" >&2; exit 1; }

echo "c-tests: install under /usr/local as the README says (in a private mount namespace)"
# /usr/local and /etc (for ldconfig's cache) are overlays that only this
# namespace sees: the machine's own are left as they are, and other jobs
# running this script at the same time do not see each other's install.
mkdir -p "$work/ns"/{local,local.work,etc,etc.work}
cat >"$work/system.sh" <<'SYSTEM'
set -euo pipefail
work="$1" repo="$2"
# shellcheck source=/dev/null
. "$work/helpers.sh"
mount -t overlay overlay -o "lowerdir=/usr/local,upperdir=$work/ns/local,workdir=$work/ns/local.work" /usr/local
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$work/ns/etc,workdir=$work/ns/etc.work" /etc
unset PKG_CONFIG_PATH LD_LIBRARY_PATH
cd "$repo"
readme 'sudo scripts/install-c.sh /usr/local'
readme 'sudo ldconfig'
test -f /usr/local/lib/libtensorfile.so.0 -a -L /usr/local/lib/libtensorfile.so
ldconfig -p | grep -q 'libtensorfile.so.0 .*/usr/local/lib/libtensorfile.so.0$'
app_dir "$work/system"
cd "$work/system"
readme 'cc app.c $(pkg-config --cflags --libs tensorfile) -o app'
check_app
SYSTEM
as_root unshare -m bash "$work/system.sh" "$work" "$repo"

echo "c-tests: install under another prefix as the README says"
(
    # ~ is a fresh home; cargo (for the install script) keeps its own.
    export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
    export HOME="$work/home"
    unset PKG_CONFIG_PATH LD_LIBRARY_PATH
    mkdir -p "$HOME"
    readme 'scripts/install-c.sh ~/.local'
    app_dir "$work/other"
    cd "$work/other"
    readme 'export PKG_CONFIG_PATH=~/.local/lib/pkgconfig'
    readme 'cc app.c $(pkg-config --cflags --libs tensorfile) -Wl,-rpath,$(pkg-config --variable=libdir tensorfile) -o app'
    check_app
)

echo "c-tests: the example, shared and static, against that prefix"
export PKG_CONFIG_PATH="$work/home/.local/lib/pkgconfig"
libdir="$(pkg-config --variable=libdir tensorfile)"
example=crates/tensorfile-ffi/examples/print_tensors.c
# shellcheck disable=SC2046 # pkg-config output is meant to split into words
cc -std=c11 -Wall -Wextra -Wcast-qual -Werror "$example" $(pkg-config --cflags --libs tensorfile) \
    -Wl,-rpath,"$libdir" -o "$work/print_tensors"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Wcast-qual -Werror "$example" $(pkg-config --cflags tensorfile) \
    "$libdir/libtensorfile.a" $(pkg-config --static --libs-only-l tensorfile | sed 's/-ltensorfile//') \
    -o "$work/print_tensors_static"
fixture=tests/fixtures/valid/worked_example.safetensors
for exe in print_tensors print_tensors_static; do
    out="$(bare "$work/$exe" "$fixture")"
    grep -qx 'w F32 \[2, 2\] 16 bytes, 64-byte aligned' <<<"$out" || { echo "$exe printed: $out" >&2; exit 1; }
    grep -qx 'metadata format = tinyllm' <<<"$out" || { echo "$exe printed: $out" >&2; exit 1; }
    bare "$work/$exe" --pytorch tests/fixtures/pytorch/zip_simple.pt | grep -qx 'b I64 \[3\] 24 bytes.*' ||
        { echo "$exe cannot read zip_simple.pt" >&2; exit 1; }
    if bare "$work/$exe" --mmap tests/fixtures/invalid/gap_between.safetensors 2>/dev/null; then
        echo "$exe accepted an invalid file" >&2
        exit 1
    fi
done
unset PKG_CONFIG_PATH

echo "c-tests: a CMake project against that prefix (find_package, both targets)"
cmake_build="$work/cmake-build"
cmake -S crates/tensorfile-ffi/tests/cmake -B "$cmake_build" -DCMAKE_PREFIX_PATH="$work/home/.local" \
    -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$cmake_build" >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 1; }
for exe in print_tensors print_tensors_static; do
    out="$(bare "$cmake_build/$exe" "$fixture")"
    grep -qx 'w F32 \[2, 2\] 16 bytes, 64-byte aligned' <<<"$out" || { echo "cmake $exe printed: $out" >&2; exit 1; }
done
# The shared one loads the installed library (CMake's rpath), the static
# one none.
readelf -d "$cmake_build/print_tensors" | grep -q 'NEEDED.*\[libtensorfile.so.0\]' ||
    { echo "c-tests: the CMake program does not load libtensorfile.so.0" >&2; exit 1; }
if readelf -d "$cmake_build/print_tensors_static" | grep -q 'libtensorfile'; then
    echo "c-tests: the static CMake program needs libtensorfile.so" >&2
    exit 1
fi

echo "c-tests: the C tests under valgrind"
TENSORFILE_C_RUNNER="valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=1 --suppressions=$PWD/crates/tensorfile-ffi/tests/c/valgrind.supp" \
    cargo test -q -p tensorfile-ffi --test c_tests

echo "c-tests: the C tests with AddressSanitizer"
TENSORFILE_C_CFLAGS="-fsanitize=address -fno-omit-frame-pointer" \
    cargo test -q -p tensorfile-ffi --test c_tests
