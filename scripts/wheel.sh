#!/usr/bin/env bash
# Builds the Python package's wheel into OUTDIR: abi3 (CPython 3.10+),
# linked by zig against glibc 2.17 and tagged manylinux2014
# (manylinux_2_17), so that pip installs it on any x86-64 Linux with glibc
# 2.17 or newer. PROFILE is cargo's: dist for a release (scripts/release.sh),
# dev for CI's tests (unoptimized: the tests check behaviour, not speed).
#
#   scripts/wheel.sh PROFILE OUTDIR
#   scripts/wheel.sh --tools        (only the tools below; CI, ahead of time)
#
# maturin and zig (the ziglang package) come from PyPI, at the versions
# below, into a private environment, target/release-tools. The build goes
# to target/x86_64-unknown-linux-gnu/PROFILE (maturin names the target to
# link with zig), apart from cargo's own builds.
set -euo pipefail
tools_only=false
if [ $# -eq 1 ] && [ "$1" = --tools ]; then
    tools_only=true
elif [ $# -ne 2 ] || [ -z "$1" ] || [ -z "$2" ]; then
    echo "usage: $0 PROFILE OUTDIR | $0 --tools" >&2
    exit 2
else
    profile="$1"
    mkdir -p "$2"
    out="$(cd "$2" && pwd)"
fi
cd "$(dirname "$0")/.."

maturin_version=1.16.0
ziglang_version=0.17.1
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
tools="${target:-target}/release-tools"
if [ "$("$tools/bin/maturin" --version 2>/dev/null)" != "maturin $maturin_version" ] ||
    [ "$("$tools/bin/python" -m ziglang version 2>/dev/null)" != "$ziglang_version" ]; then
    rm -rf "$tools"
    "${PYTHON:-python3}" -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet "maturin==$maturin_version" "ziglang==$ziglang_version"
fi
if $tools_only; then
    exit 0
fi
# maturin runs zig as `python -m ziglang`, with the first python on PATH.
PATH="$tools/bin:$PATH" maturin build --locked --profile "$profile" --zig --compatibility manylinux2014 \
    --manifest-path python/Cargo.toml --out "$out"
