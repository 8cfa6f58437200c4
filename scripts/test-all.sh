#!/usr/bin/env bash
# Every test, in one command: the Rust tests and the C library's tests
# (cargo test --workspace builds and runs both), then the Python package's
# (scripts/python-tests.sh). .ci/run adds formatting, lints, docs and the C
# tests under valgrind and AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
scripts/python-tests.sh
