#!/bin/sh
# Makes the certificates the TLS tests and the TLS benchmark use, into DIR
# (made at run time, never committed): a CA (ca.pem), a node certificate
# for 127.0.0.1 and localhost (node.pem, node.key), a client certificate
# (client.pem, client.key), both from the CA, and a certificate from another
# CA (rogue.pem, rogue.key; rogue-ca.pem) that tally must refuse.
# EC P-256 keys: quick to make. Usage: make_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
ca() {  # ca NAME: a self-signed CA
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$1.key" -out "$1.pem" 2>/dev/null
}
leaf() {  # leaf NAME CA: a certificate for 127.0.0.1 and localhost from CA
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=tally-$1" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
    > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca
ca rogue-ca
leaf node ca
leaf client ca
leaf rogue rogue-ca
chmod 600 ./*.key
