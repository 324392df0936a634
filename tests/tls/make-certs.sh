#!/bin/sh
# SPDX-License-Identifier: MIT
# Makes the TLS tests' certificates in DIR, at run time (no key is ever
# committed), all P-256:
#   ca.pem ca.key            the test CA
#   server.pem server.key    localhost, 127.0.0.1 and ::1, from the CA
#   server2.pem other.key    the same names, another key (a reload's new identity)
#   expired.pem              server.key's certificate, expired yesterday
#   wronghost.pem            server.key's certificate for wrong.example only
#   selfsigned.pem           server.key's certificate, signed by itself
#   bundle.pem               server.pem then ca.pem (a chain)
#   broken.pem               not a certificate
set -eu
dir=$1
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
key server.key
key other.key
openssl req -new -x509 -key ca.key -subj /CN=treadle-test-ca -days 30 \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out ca.pem 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth,clientAuth\n' >ok.ext
printf 'subjectAltName=DNS:wrong.example\nextendedKeyUsage=serverAuth\n' >wrong.ext
# sign KEY CN EXTFILE DAYS OUT
sign() {
  openssl req -new -key "$1" -subj "/CN=$2" -out "$5.csr" 2>/dev/null
  openssl x509 -req -in "$5.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
    -extfile "$3" -days "$4" -out "$5" 2>/dev/null
  rm -f "$5.csr"
}
sign server.key localhost ok.ext 30 server.pem
sign other.key localhost-2 ok.ext 30 server2.pem
sign server.key localhost ok.ext -1 expired.pem
sign server.key wrong.example wrong.ext 30 wronghost.pem
openssl req -new -x509 -key server.key -subj /CN=localhost -days 30 \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -out selfsigned.pem 2>/dev/null
cat server.pem ca.pem >bundle.pem
echo "not a certificate" >broken.pem
rm -f ok.ext wrong.ext
