"""Requests one broker sends another on the Kafka listener, other than the replica fetch (whose
codec is written by hand for speed, replica_fetch.py): the transaction coordinator's
WriteTxnMarkers to partition leaders. Sans-IO, with kio's classes: a whole frame out, a frame's
body in.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from triolog.protocol.frames import RemoteProtocolError

from .schema import build, reader, request_class, response_class, writer

__all__ = ["decode_response", "encode_request"]

_SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, values: dict[str, Any]) -> bytes:
    """The whole frame (size, header, body) of a request built from plain ``values`` (see
    :func:`triolog.protocol.kafka.schema.build`)."""
    cls = request_class(api_key, version)
    header_cls: type = cls.__header_schema__  # (`type`: see schema.write_parts)
    header = build(
        header_cls,
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buffer = io.BytesIO()
    writer(header_cls)(buffer, header)
    writer(cls)(buffer, build(cls, values))
    payload = buffer.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio body) of a response frame's body; RemoteProtocolError if unreadable."""
    cls = response_class(api_key, version)
    header_cls: type = cls.__header_schema__
    try:
        header, size = reader(header_cls)(frame, 0)
        body, _ = reader(cls)(frame, size)
    except Exception as exc:  # kio raises its own errors, and struct's, for a malformed frame
        raise RemoteProtocolError(f"unreadable response to api_key {api_key} v{version}: {exc}") from exc
    return header.correlation_id, body
