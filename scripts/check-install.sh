#!/usr/bin/env bash
# Installs the release artefacts in OUTDIR (scripts/release.sh OUTDIR) the
# way README.md's install section says, by running that section's ```sh
# blocks as they are written (so the README and this check cannot drift),
# in a fresh directory with a fresh home, then checks what they installed:
# the wheel imports in its new virtual environment, the command runs, its
# bash completions load and its man page renders, and the README's C
# example builds with pkg-config and with CMake and runs.
#
# Needs python3 with venv, cc, pkg-config, cmake, man (man-db) and bash;
# installs the missing ones with apt (as root, or through sudo).
set -euo pipefail
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 OUTDIR (where scripts/release.sh put the artefacts)" >&2
    exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
artefacts="$(cd "$1" && pwd)"
fail() {
    echo "check-install: $*" >&2
    exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
have cc || missing+=(gcc libc6-dev)
have pkg-config || missing+=(pkg-config)
have cmake || missing+=(cmake)
have man || missing+=(man-db)
if [ ${#missing[@]} -gt 0 ]; then
    have apt-get || fail "missing ${missing[*]} and no apt-get to install them"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dir="$work/install"
mkdir -p "$dir" "$work/home"
cp "$artefacts"/* "$dir/"

# The README's install section: its blocks, between the markers.
section="$(sed -n '/^<!-- install: scripts\/check-install.sh/,/^<!-- install: end -->/p' "$repo/README.md")"
[ -n "$section" ] || fail "README.md has no install section between the markers"
block() { sed -n "/^\`\`\`$1\$/,/^\`\`\`\$/{/^\`\`\`/d;p}"; }
block sh <<<"$section" >"$work/install.sh"
block cmake <<<"$section" >"$dir/CMakeLists.txt"
[ -s "$work/install.sh" ] && [ -s "$dir/CMakeLists.txt" ] || fail "README.md's install section lost its blocks"
# What its C commands build: the README's C example, which reads
# model.safetensors where it runs.
sed -n '/^```c$/,/^```$/{/^```/d;p}' "$repo/README.md" >"$dir/app.c"
cp "$repo/tests/fixtures/valid/worked_example.safetensors" "$dir/model.safetensors"

# A user's shell: a fresh home, ~/.local/bin on the PATH, nothing of the
# build's environment.
run_user() {
    (cd "$dir" && env -i HOME="$work/home" PATH="$work/home/.local/bin:/usr/local/bin:/usr/bin:/bin" \
        LANG=C.UTF-8 TERM=dumb "$@")
}
echo "check-install: running README.md's install commands in $dir"
run_user bash -euo pipefail -x "$work/install.sh" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "README.md's install commands failed (above)"; }

log="$(cat "$work/install.log")"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n 1)"
grep -qx "$version" <<<"$log" || fail "the wheel's tensorfile.__version__ is not $version: $log"
grep -qx "tensorfile $version" <<<"$log" || fail "tensorfile --version did not print 'tensorfile $version'"
grep -qi '^tensorfile(1)' <<<"$log" || fail "man tensorfile printed no page"
# The README's C example, built both ways, ran and wrote its file.
[ "$(cd "$dir" && ./app)" = "F32, 2 dims, 16 bytes" ] || fail "the pkg-config build of app.c does not run"
[ "$(run_user build/app)" = "F32, 2 dims, 16 bytes" ] || fail "the CMake build of app.c does not run"
[ -s "$dir/out.safetensors" ] || fail "app wrote no out.safetensors"

# The bash completions load (as bash-completion would load them) and
# complete a command; every man page renders.
run_user bash -c 'source ~/.local/share/bash-completion/completions/tensorfile && complete -p tensorfile' |
    grep -q 'complete .* tensorfile$' || fail "the bash completions do not load"
for page in "$work"/home/.local/share/man/man1/*.1; do
    MANWIDTH=80 man -l "$page" 2>&1 >/dev/null | grep . && fail "man -l $page warns"
    [ "$(MANWIDTH=80 man -l "$page" | wc -l)" -gt 5 ] || fail "man -l $page renders nothing"
done
[ -f "$work/home/.local/share/man/man1/tensorfile-inspect.1" ] || fail "no page for tensorfile inspect"
echo "check-install: every README install command works against $artefacts"
