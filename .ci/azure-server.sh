#!/usr/bin/env bash
# Sourced by scripts/test-all.sh: Azurite (Azure Blob Storage's emulator,
# from npm) for tensorfile-remote's Azure tests (tests/it/azure.rs).
# Sourcing starts the npm install in the background (it overlaps moto's pip
# install); `start_azure_server` then waits for it and starts two
# azurite-blob servers on 127.0.0.1 from it, side by side: a plain one
# (TENSORFILE_TEST_AZURE), and an HTTPS one with the test kit's
# certificate that takes Azure AD bearer tokens (`--oauth basic`;
# TENSORFILE_TEST_AZURE_OAUTH: the Azure AD credential tests). An EXIT trap
# (chained with the one before) stops them and removes the install,
# whatever fails.

azure_dir="$(mktemp -d)"
azure_pid=""
azure_oauth_pid=""
stop_azure_server() {
    local pid
    # Azurite's own shutdown (SIGTERM) can take minutes (measured here:
    # from 5 s to 145 s): 3 s at most for both, then SIGKILL (their
    # storage is in memory).
    for pid in $azure_pid $azure_oauth_pid; do
        kill "$pid" 2>/dev/null || true
    done
    for _ in $(seq 1 30); do
        kill -0 $azure_pid $azure_oauth_pid 2>/dev/null || break
        sleep 0.1
    done
    for pid in $azure_pid $azure_oauth_pid; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
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
    local port oauth_port tls
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    oauth_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    tls="crates/tensorfile-testkit/src/tls"
    "$azure_dir/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
        --inMemoryPersistence --skipApiVersionCheck --silent >"$azure_dir/server.log" 2>&1 &
    azure_pid=$!
    "$azure_dir/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$oauth_port" \
        --inMemoryPersistence --skipApiVersionCheck --silent --oauth basic \
        --cert "$tls/server.pem" --key "$tls/server.key.pem" >"$azure_dir/oauth.log" 2>&1 &
    azure_oauth_pid=$!
    # Wait until both answer (at most 30 s each): any HTTP status will do.
    python3 - "$port" "$oauth_port" "$tls/ca.pem" <<'PY' || true
import ssl, sys, time, urllib.error, urllib.request
plain, oauth, ca = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
for url, c in ((f"http://127.0.0.1:{plain}/", None), (f"https://127.0.0.1:{oauth}/", ctx)):
    for _ in range(150):
        try:
            urllib.request.urlopen(url, context=c)
            break
        except urllib.error.HTTPError:
            break
        except Exception:
            time.sleep(0.2)
PY
    export TENSORFILE_TEST_AZURE="http://127.0.0.1:$port"
    export TENSORFILE_TEST_AZURE_OAUTH="https://127.0.0.1:$oauth_port"
    # The tests' credentials are their own: never an instance's managed
    # identity on the machine they run on.
    export AZURE_MSI_ENDPOINT="http://127.0.0.1:9/"
}
