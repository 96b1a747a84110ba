"""A test CA and the PEM files the broker's ssl.* keys and the clients take, made at test time."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass
class TlsFiles:
    ca: trustme.CA
    #: ssl.keystore.location: the broker's key and certificate chain, one PEM file.
    keystore: Path
    #: The CA certificate: ssl.truststore.location of the broker, the clients' trust.
    ca_pem: Path
    #: A client certificate and key (CN=alice, O=triolog tests) for mutual TLS.
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_certificate: bool = False, ca: trustme.CA | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        (ca or self.ca).configure_trust(context)
        if with_certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def make_tls_files(directory: Path, *, key_password: bytes | None = None) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    keystore = directory / "broker.pem"
    if key_password is None:
        server.private_key_and_cert_chain_pem.write_to_path(keystore)
    else:
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
        encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(key_password))
        keystore.write_bytes(encrypted + b"".join(blob.bytes() for blob in server.cert_chain_pems))
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(ca_pem)
    client = ca.issue_cert("alice@example.com", common_name="alice", organization_name="triolog tests")
    client_cert, client_key = directory / "alice.pem", directory / "alice.key"
    for blob in client.cert_chain_pems:
        blob.write_to_path(client_cert, append=True)
    client.private_key_pem.write_to_path(client_key)
    return TlsFiles(ca, keystore, ca_pem, client_cert, client_key)
