"""Kafka's SASL exchange on the Kafka listener: SaslHandshake v1 names the mechanism, then
SaslAuthenticate carries the mechanism's messages, as the msgpack protocol's sasl_handshake and
sasl_authenticate do (one connection-level authenticator answers both listeners).

SaslHandshake v0 is served too: librdkafka 2.0 (Debian's kcat) enables SASL only when ApiVersions
lists v0 (and then uses v1). A client that does send v0 follows it with the mechanism's messages
as bare frames, no Kafka header: the listener's connection reads those itself.
"""

from __future__ import annotations

from triolog.protocol import messages as m

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, response_class

# (the names the listener imports)
SASL_HANDSHAKE_KEY = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE_KEY = ApiKey.SASL_AUTHENTICATE


def _envelope(req: KafkaRequest) -> dict:
    return {"id": req.correlation_id, "client_id": req.client_id}


def handshake_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.SaslHandshakeRequest(**_envelope(req), mechanism=req.body.mechanism)


def handshake_to_kafka(response: m.SaslHandshakeResponse, req: KafkaRequest, ctx: KafkaContext):
    return build(
        response_class(req.api_key, req.version),
        {"error_code": response.error_code, "mechanisms": list(response.mechanisms)},
    )


def authenticate_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.SaslAuthenticateRequest(**_envelope(req), auth_bytes=req.body.auth_bytes)


def authenticate_to_kafka(response: m.SaslAuthenticateResponse, req: KafkaRequest, ctx: KafkaContext):
    return build(
        response_class(req.api_key, req.version),
        {
            "error_code": response.error_code,
            "error_message": response.error_message,
            "auth_bytes": response.auth_bytes,
            "session_lifetime": response.session_lifetime_ms,
        },
    )


ADAPTERS = by_key(
    Adapter(SASL_HANDSHAKE_KEY, 0, 1, handshake_to_internal, handshake_to_kafka, "sasl_handshake"),
    Adapter(SASL_AUTHENTICATE_KEY, 0, 2, authenticate_to_internal, authenticate_to_kafka, "sasl_authenticate"),
)
