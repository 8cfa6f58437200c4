#!/usr/bin/env bash
# Makes the test TLS files of tensorfile-testkit (src/tls/): a private CA
# and a server certificate it signed, for 127.0.0.1, ::1 and localhost,
# valid from 2000 to 2125 (a clock set wrong does not break the tests).
# Public test material, committed (like gcs_test_key.pem): the TLS
# stand-in (tensorfile_testkit::tls) and the HTTPS Azurite of
# .ci/azure-server.sh serve the leaf; the tests trust the CA through
# SSL_CERT_FILE. Rerun only to replace them (needs openssl).
set -euo pipefail
cd "$(dirname "$0")/../crates/tensorfile-testkit/src/tls"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/certs"
: >"$work/index.txt"
echo 1000 >"$work/serial"
cat >"$work/ca.cnf" <<CNF
[ca]
default_ca = test
[test]
dir = $work
database = $work/index.txt
serial = $work/serial
new_certs_dir = $work/certs
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1,IP:::1,DNS:localhost
CNF
dates=(-startdate 20000101000000Z -enddate 21250101000000Z)
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca.key"
openssl req -new -key "$work/ca.key" -subj "/CN=tensorfile test CA" -out "$work/ca.csr"
openssl ca -batch -notext -config "$work/ca.cnf" -selfsign -keyfile "$work/ca.key" \
    -extensions ca_ext "${dates[@]}" -in "$work/ca.csr" -out ca.pem
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key.pem
openssl req -new -key server.key.pem -subj "/CN=localhost" -out "$work/server.csr"
openssl ca -batch -notext -config "$work/ca.cnf" -cert ca.pem -keyfile "$work/ca.key" \
    -extensions server_ext "${dates[@]}" -in "$work/server.csr" -out server.pem
chmod 644 server.key.pem
# The CA's key is dropped: nothing else is ever signed with it.
openssl verify -CAfile ca.pem server.pem
