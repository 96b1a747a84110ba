"""The follower's SASL requests and responses (protocol/kafka/sasl_client.py), checked against kio's
codec of Kafka's SaslHandshake v1 and SaslAuthenticate v1."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from triolog.protocol.frames import RemoteProtocolError
from triolog.protocol.kafka.sasl_client import (
    decode_sasl_authenticate_response,
    decode_sasl_handshake_response,
    encode_sasl_authenticate,
    encode_sasl_handshake,
)


def _kio_request(frame: bytes, api_key: int, version: int):
    cls = load_request_schema(api_key, version)
    body = frame[4:]
    header, size = entity_reader(cls.__header_schema__)(body, 0)
    request, read = entity_reader(cls)(body, size)
    assert size + read == len(body)  # (kio's reader answers the bytes it read)
    return header, request


def _kio_response(api_key: int, version: int, correlation_id: int, **fields) -> bytes:
    cls = load_response_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(cls.__header_schema__)(buffer, cls.__header_schema__(correlation_id=correlation_id))
    entity_writer(cls)(buffer, cls(**fields))
    return buffer.getvalue()


@given(st.integers(0, 2**31 - 1), st.text(max_size=30), st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]))
def test_handshake_request_is_kafkas(correlation_id, client_id, mechanism):
    header, request = _kio_request(encode_sasl_handshake(correlation_id, client_id, mechanism), 17, 1)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        17, 1, correlation_id, client_id)
    assert request.mechanism == mechanism


@given(st.integers(0, 2**31 - 1), st.binary(max_size=300))
def test_authenticate_request_is_kafkas(correlation_id, auth_bytes):
    header, request = _kio_request(encode_sasl_authenticate(correlation_id, "broker-1", auth_bytes), 36, 1)
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (36, 1, correlation_id)
    assert request.auth_bytes == auth_bytes


@given(st.integers(0, 2**31 - 1), st.lists(st.text(max_size=20), max_size=4), st.sampled_from([0, 33]))
def test_handshake_response_decodes_kafkas(correlation_id, mechanisms, error):
    from kio.schema.errors import ErrorCode

    frame = _kio_response(17, 1, correlation_id, error_code=ErrorCode(error), mechanisms=tuple(mechanisms))
    answer = decode_sasl_handshake_response(frame)
    assert (answer.correlation_id, answer.error_code, answer.mechanisms) == (correlation_id, error, tuple(mechanisms))


@given(st.integers(0, 2**31 - 1), st.binary(max_size=300), st.none() | st.text(max_size=40),
       st.integers(0, 2**40))
def test_authenticate_response_decodes_kafkas(correlation_id, auth_bytes, message, lifetime):
    import datetime

    from kio.schema.errors import ErrorCode

    frame = _kio_response(36, 1, correlation_id, error_code=ErrorCode(58 if message else 0), error_message=message,
                          auth_bytes=auth_bytes, session_lifetime=datetime.timedelta(milliseconds=lifetime))
    answer = decode_sasl_authenticate_response(frame)
    assert (answer.correlation_id, answer.error_code, answer.error_message, answer.auth_bytes,
            answer.session_lifetime_ms) == (correlation_id, 58 if message else 0, message, auth_bytes, lifetime)


@pytest.mark.parametrize("frame", [b"", b"\x00\x00\x00\x01\x00", b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x05"])
def test_truncated_responses_are_protocol_errors(frame):
    with pytest.raises(RemoteProtocolError):
        decode_sasl_handshake_response(frame)
    with pytest.raises(RemoteProtocolError):
        decode_sasl_authenticate_response(frame)
