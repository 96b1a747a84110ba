#!/bin/sh
# Makes the certificates of the compose file's "secure" profile: a throwaway CA (ca.pem, the
# clients' trust) and the broker's key and certificate (broker.pem: key, then the chain, which is
# what ssl.keystore.location takes). Run once from anywhere; writes deploy/secure/certs/ (git
# ignores it). For production use your own CA, and make broker.pem readable by uid 10001 only.
set -eu
cd "$(dirname "$0")"
mkdir -p certs
cd certs
days=825
openssl req -x509 -newkey rsa:3072 -nodes -days "$days" -subj "/CN=triolog compose CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,DNS:secure-broker,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile broker.ext -out broker.crt 2>/dev/null
cat broker.key broker.crt ca.pem > broker.pem
rm -f broker.csr broker.ext broker.key broker.crt ca.srl
# The broker runs as uid 10001 in the container: it must be able to read its key.
chmod 644 broker.pem ca.pem
chmod 600 ca.key
echo "wrote $(pwd)/ca.pem (trust this in clients) and $(pwd)/broker.pem (the broker's key and chain)"
