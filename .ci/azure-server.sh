#!/usr/bin/env bash
# Sourced by scripts/test-all.sh: Azurite (Azure Blob Storage's emulator,
# from npm) for tensorfile-remote's Azure tests (tests/it/azure.rs).
# Sourcing starts the npm install in the background (it overlaps moto's pip
# install); `start_azure_server` then waits for it, starts azurite-blob on
# 127.0.0.1 and sets TENSORFILE_TEST_AZURE. An EXIT trap (chained with the
# one before) stops it and removes the install, whatever fails.

azure_dir="$(mktemp -d)"
azure_pid=""
stop_azure_server() {
    if [ -n "$azure_pid" ]; then
        kill "$azure_pid" 2>/dev/null || true
        wait "$azure_pid" 2>/dev/null || true
    fi
    if [ -n "${azure_install_pid:-}" ]; then
        kill "$azure_install_pid" 2>/dev/null || true
        wait "$azure_install_pid" 2>/dev/null || true
    fi
    rm -rf "$azure_dir"
}
azure_prev_trap="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
trap "stop_azure_server; ${azure_prev_trap}" EXIT

(cd "$azure_dir" && npm install --silent --no-audit --no-fund azurite@3.37.0 >install.log 2>&1) &
azure_install_pid=$!

start_azure_server() {
    if ! wait "$azure_install_pid"; then
        cat "$azure_dir/install.log" >&2
        echo "azure-server.sh: npm install azurite failed" >&2
        return 1
    fi
    azure_install_pid=""
    local port
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "$azure_dir/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
        --inMemoryPersistence --skipApiVersionCheck --silent >"$azure_dir/server.log" 2>&1 &
    azure_pid=$!
    # Wait until it answers (at most 30 s): any HTTP status will do.
    for _ in $(seq 1 150); do
        if python3 -c "import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://127.0.0.1:$port/')
except urllib.error.HTTPError:
    pass" 2>/dev/null; then
            break
        fi
        sleep 0.2
    done
    export TENSORFILE_TEST_AZURE="http://127.0.0.1:$port"
    # The tests' credentials are their own: never an instance's managed
    # identity on the machine they run on.
    export AZURE_MSI_ENDPOINT="http://127.0.0.1:9/"
}
