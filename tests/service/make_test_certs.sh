#!/bin/sh
# Writes test certificates into DIR with openssl (made at test time; nothing secret is committed):
#   ca.pem/ca.key              CA 1
#   server.pem/server.key      server cert from CA 1, subjectAltName IP:127.0.0.1, DNS:localhost
#   client.pem/client.key      client cert from CA 1 (extendedKeyUsage clientAuth)
#   other-ca.pem/other-ca.key  CA 2 (unrelated)
#   other-client.pem/.key      client cert from CA 2
#   wrong.key                  a key that belongs to no certificate above
# EC P-256 keys: quick to make on a loaded machine.
#   make_test_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
q() { "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@"; exit 1; }; }

ca() {  # name subject
  q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days 2 -subj "/CN=$2" \
    -keyout "$1.key" -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # name ca subject extfile-lines
  q openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -subj "/CN=$3" -keyout "$1.key" -out "$1.csr"
  printf '%s\n' "$4" >"$1.ext"
  q openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 -sha256 \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}

ca ca "mha-serve test CA"
ca other-ca "mha-serve other test CA"
leaf server ca localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature"
leaf client ca mha-test-client "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
leaf other-client other-ca mha-other-client "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out wrong.key
chmod 600 ./*.key
