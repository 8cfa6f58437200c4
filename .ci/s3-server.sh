#!/usr/bin/env bash
# Sourced by .ci/run: a real S3 implementation for tensorfile-remote's
# tests (tests/s3.rs), moto's server, installed into a fresh venv and
# started on 127.0.0.1; TENSORFILE_TEST_S3 names it. An EXIT trap stops it
# and removes the venv, whatever fails (chained with the trap before).

s3_dir="$(mktemp -d)"
s3_pid=""
stop_s3_server() {
    if [ -n "$s3_pid" ]; then
        kill "$s3_pid" 2>/dev/null || true
        wait "$s3_pid" 2>/dev/null || true
    fi
    rm -rf "$s3_dir"
}
s3_prev_trap="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
trap "stop_s3_server; ${s3_prev_trap}" EXIT

python3 -m venv "$s3_dir/venv"
"$s3_dir/venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==5.2.5"
s3_port="$("$s3_dir/venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$s3_dir/venv/bin/moto_server" -H 127.0.0.1 -p "$s3_port" >"$s3_dir/server.log" 2>&1 &
s3_pid=$!

# Wait until it answers (at most 30 s).
for _ in $(seq 1 150); do
    if "$s3_dir/venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$s3_port/')" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
export TENSORFILE_TEST_S3="http://127.0.0.1:$s3_port"
# The tests' credentials come from their own stand-ins: never from a real
# instance metadata service of the machine they run on.
export AWS_EC2_METADATA_DISABLED=true
