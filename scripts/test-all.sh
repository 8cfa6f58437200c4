#!/usr/bin/env bash
# Every test, in one command: the Rust tests and the C library's tests
# (cargo test --workspace builds and runs both), then the Python package's
# (scripts/python-tests.sh: built from ./python, or with TENSORFILE_WHEEL=PATH
# that wheel installed in a fresh environment). .ci/run runs this against
# a wheel and adds formatting, lints, docs and the C tests under valgrind
# and AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# moto's S3 server on 127.0.0.1 for tensorfile-remote's S3 tests, stopped
# on exit (it sets TENSORFILE_TEST_S3).
source .ci/s3-server.sh
cargo test --workspace
scripts/python-tests.sh
