#!/usr/bin/env bash
# Sourced by scripts/test-all.sh: the GCS stand-in (tensorfile-testkit's
# `gcs-stand-in`, the one the Rust tests run in-process) for the Python
# tests, which cannot. `start_gcs_server` builds and starts it on
# 127.0.0.1 with the buckets the tests use and sets TENSORFILE_TEST_GCS
# (its URL) and TENSORFILE_TEST_GCS_KEY (its service account's key file).
# An EXIT trap (chained with the one before) stops it; it also ends by
# itself when this shell does.

gcs_dir="$(mktemp -d)"
gcs_pid=""
stop_gcs_server() {
    if [ -n "$gcs_pid" ]; then
        kill "$gcs_pid" 2>/dev/null || true
        wait "$gcs_pid" 2>/dev/null || true
    fi
    rm -rf "$gcs_dir"
}
gcs_prev_trap="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
trap "stop_gcs_server; ${gcs_prev_trap}" EXIT

start_gcs_server() {
    cargo build --quiet -p tensorfile-testkit --bin gcs-stand-in
    local bin
    bin="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/gcs-stand-in"
    mkfifo "$gcs_dir/url"
    "$bin" "$gcs_dir/key.json" tf-python tf-python-public+public >"$gcs_dir/url" &
    gcs_pid=$!
    local url
    if ! read -r -t 30 url <"$gcs_dir/url"; then
        echo "gcs-server.sh: the GCS stand-in did not start" >&2
        return 1
    fi
    export TENSORFILE_TEST_GCS="$url"
    export TENSORFILE_TEST_GCS_KEY="$gcs_dir/key.json"
}
