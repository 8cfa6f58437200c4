#!/usr/bin/env bash
# Builds the release artefacts into OUTDIR (made if missing):
#
#   tensorfile-VERSION-cp310-abi3-manylinux_2_17_x86_64.whl   the Python package
#   tensorfile-VERSION.tar.gz                                  its sdist
#   tensorfile-VERSION-TRIPLE.tar.gz      the command, its completions, its man pages
#   libtensorfile-VERSION-TRIPLE.tar.gz   the C library: .so (with its SONAME link),
#                                         .a, header, pkg-config file, CMake package
#   SHA256SUMS                            of each of them, checked at the end
#
# The command and the C library come from one `cargo build --profile dist`
# (Cargo.toml: release without debug info, stripped); the wheel and the
# sdist from maturin (scripts/wheel.sh: linked by zig for glibc 2.17, in
# its own target directory, target/TRIPLE/dist). Each archive holds one
# folder, laid out as a prefix (bin/, share/, lib/, include/): README.md
# says how to install each.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
cd "$root"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
triple="$(rustc -vV | sed -n 's/^host: //p')"
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
# Archives made the same way on every run: names sorted, no owners, the
# times of the last commit.
epoch="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
export SOURCE_DATE_EPOCH="$epoch"
pack() { # pack ARCHIVE DIR FOLDER
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$2" -cf - "$3" | gzip -n -9 >"$1"
}
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
artefacts=()

echo "release: the command and the C library (cargo build --profile dist)"
cargo build --locked --profile dist -p tensorfile-cli -p tensorfile-ffi
dist="$target/dist"

name="tensorfile-$version-$triple"
dir="$stage/$name"
install -d "$dir/bin" "$dir/share/man/man1" "$dir/share/bash-completion/completions" \
    "$dir/share/zsh/site-functions" "$dir/share/fish/vendor_completions.d" "$dir/share/doc/tensorfile"
install -m 755 "$dist/tensorfile" "$dir/bin/tensorfile"
"$dir/bin/tensorfile" generate completions "$stage/completions" >/dev/null
install -m 644 "$stage/completions/tensorfile.bash" "$dir/share/bash-completion/completions/tensorfile"
install -m 644 "$stage/completions/_tensorfile" "$dir/share/zsh/site-functions/_tensorfile"
install -m 644 "$stage/completions/tensorfile.fish" "$dir/share/fish/vendor_completions.d/tensorfile.fish"
"$dir/bin/tensorfile" generate man "$dir/share/man/man1" >/dev/null
install -m 644 README.md LICENSE-MIT LICENSE-APACHE CHANGELOG.md "$dir/share/doc/tensorfile/"
pack "$out/$name.tar.gz" "$stage" "$name"
artefacts+=("$name.tar.gz")

name="libtensorfile-$version-$triple"
dir="$stage/$name"
scripts/install-c.sh --profile dist --relocatable "$dir" >/dev/null
# The profile strips what it links; the static library also carries the
# standard library's objects with their debug info (52 MB -> 41 MB).
strip --strip-debug "$dir/lib/libtensorfile.a"
install -d "$dir/share/doc/libtensorfile"
install -m 644 docs/c-library.md LICENSE-MIT LICENSE-APACHE "$dir/share/doc/libtensorfile/"
pack "$out/$name.tar.gz" "$stage" "$name"
artefacts+=("$name.tar.gz")

echo "release: the wheel and the sdist"
wheels="$stage/wheels"
scripts/wheel.sh dist "$wheels"
PATH="$target/release-tools/bin:$PATH" maturin sdist --manifest-path python/Cargo.toml --out "$wheels"
for file in "$wheels"/*; do
    install -m 644 "$file" "$out/"
    artefacts+=("$(basename "$file")")
done

(cd "$out" && sha256sum "${artefacts[@]}" >SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
echo "release: in $out:"
(cd "$out" && ls -l "${artefacts[@]}" SHA256SUMS)
