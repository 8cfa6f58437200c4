#!/usr/bin/env bash
# Every test, in one command: the Rust tests and the C library's tests
# (cargo test --workspace builds and runs both), then the Python package's
# (scripts/python-tests.sh: built from ./python, or with TENSORFILE_WHEEL=PATH
# that wheel installed in a fresh environment). .ci/run runs this against
# a wheel and adds formatting, lints, docs and the C tests under valgrind
# and AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# moto's S3 server and Azurite on 127.0.0.1 for tensorfile-remote's S3 and
# Azure tests, stopped on exit (they set TENSORFILE_TEST_S3 and
# TENSORFILE_TEST_AZURE); Azurite's npm install runs while moto's installs.
source .ci/azure-server.sh
source .ci/s3-server.sh
start_azure_server
cargo test --workspace
# The GCS stand-in for the Python tests (the Rust tests run it in-process).
source .ci/gcs-server.sh
start_gcs_server
scripts/python-tests.sh
