"""The broker's side of TLS: the server context built from Kafka's ``ssl.*`` keys, and the
principal a verified client certificate stands for.

Read once at startup, so that a missing file or a wrong key password stops the broker with a
message naming the key, instead of failing every handshake later.
"""

from __future__ import annotations

import ssl

from triolog.config.broker_config import BrokerConfig
from triolog.config.principal_rules import NoMatchingRule, PrincipalMappingRules

__all__ = ["NoMatchingRule", "TlsConfigError", "certificate_principal", "inter_broker_context", "server_context"]

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(Exception):
    """The ssl.* keys name files that cannot be used; the message says which and why."""


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_VERSIONS[name] for name in config.ssl_enabled_protocols]
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    location = config.ssl_keystore_location
    assert location is not None, "BrokerConfig requires ssl.keystore.location for a TLS listener"
    try:
        context.load_cert_chain(location, password=config.ssl_key_password)
    except FileNotFoundError:
        raise TlsConfigError(f"ssl.keystore.location={location}: no such file") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"ssl.keystore.location={location}: not one PEM file holding a private key and its certificate "
            f"chain, or the key's password (ssl.key.password) is wrong: {exc.reason or exc}"
        ) from None
    except OSError as exc:
        raise TlsConfigError(f"ssl.keystore.location={location}: {exc.strerror or exc}") from None
    context.verify_mode = _CLIENT_AUTH[config.ssl_client_auth]
    if config.ssl_truststore_location is not None:
        try:
            context.load_verify_locations(cafile=config.ssl_truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"ssl.truststore.location={config.ssl_truststore_location}: "
                f"not a readable PEM file of CA certificates: {exc}"
            ) from None
    if config.ssl_cipher_suites:
        try:
            context.set_ciphers(":".join(config.ssl_cipher_suites))
        except ssl.SSLError:
            raise TlsConfigError(
                f"ssl.cipher.suites={','.join(config.ssl_cipher_suites)}: OpenSSL knows none of these cipher names"
            ) from None
    return context


def inter_broker_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context a follower connects to its leaders' TLS listener with, from the same ``ssl.*``
    keys as the broker's own listener (as Kafka's inter-broker client uses them): the leader's
    certificate verified against ssl.truststore.location (the system's CAs without one) and its
    host name checked, the broker's own certificate offered for ssl.client.auth."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = [_VERSIONS[name] for name in config.ssl_enabled_protocols]
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        if config.ssl_truststore_location is not None:
            context.load_verify_locations(cafile=config.ssl_truststore_location)
        else:
            context.load_default_certs()
        if config.ssl_keystore_location is not None:
            context.load_cert_chain(config.ssl_keystore_location, password=config.ssl_key_password)
    except (OSError, ssl.SSLError) as exc:  # (server_context, read first, names the culprit)
        raise TlsConfigError(f"the inter-broker TLS context cannot be made: {exc}") from None
    if config.ssl_cipher_suites:
        context.set_ciphers(":".join(config.ssl_cipher_suites))
    return context


# RFC 2253's short names for the attributes Python's ssl reports; others keep ssl's name.
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def certificate_principal(peer_certificate: dict | None, rules: PrincipalMappingRules | None = None) -> str | None:
    """``User:<name>`` for a verified client certificate, None without one. The name is what
    ``rules`` (ssl.principal.mapping.rules) make of the subject written as RFC 2253, most specific
    attribute first (``CN=alice,OU=eng,O=acme``), as Kafka's default principal builder does; the
    subject itself without rules. Raises NoMatchingRule when no rule applies."""
    if not peer_certificate or not peer_certificate.get("subject"):
        return None
    rdns = []
    for rdn in reversed(peer_certificate["subject"]):
        rdns.append("+".join(f"{_SHORT_NAMES.get(kind, kind)}={_escape(value)}" for kind, value in rdn))
    subject = ",".join(rdns)
    return "User:" + (subject if rules is None else rules.name(subject))


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in ',+"\\<>;' or (char == "#" and i == 0) or (char == " " and i in (0, len(value) - 1)):
            out.append("\\")
        out.append(char)
    return "".join(out)
