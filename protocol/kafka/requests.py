"""Kafka request frames in, response frames out: the sans-IO codec of the Kafka listener.

A frame body (the int32 size already taken off by the frame decoder, which is the same for
both protocols) starts with Kafka's request header; the header's version and the body's layout
follow from (api_key, api_version) through kio's classes. Nothing here reads a socket: the
connection feeds frames in and writes the parts out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .schema import UnknownSchema, build, reader, request_class, response_class, write_parts

__all__ = [
    "KafkaRequest",
    "MalformedRequest",
    "UnsupportedVersion",
    "decode_request",
    "encode_response",
]

_START = struct.Struct(">hhi")  # api_key, api_version, correlation_id: the same in every header version


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    #: The kio request instance of (api_key, version).
    body: Any


class MalformedRequest(Exception):
    """A frame that is no readable Kafka request: Kafka closes the connection (with a log line).

    ``api_key``/``version``/``correlation_id`` are None when even the header's start is missing."""

    def __init__(
        self, reason: str, api_key: int | None = None, version: int | None = None, correlation_id: int | None = None
    ):
        super().__init__(reason)
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class UnsupportedVersion(Exception):
    """An API this listener does not serve, or a version of it outside the served range."""

    def __init__(self, api_key: int, version: int, correlation_id: int, served: tuple[int, int] | None):
        if served is None:
            reason = f"api_key {api_key} is not served by this listener"
        else:
            reason = f"api_key {api_key} version {version} is outside the served versions {served[0]}..{served[1]}"
        super().__init__(reason)
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.served = served


def decode_request(frame: bytes | bytearray | memoryview, served: Mapping[int, tuple[int, int]]) -> KafkaRequest:
    """The request in ``frame``; UnsupportedVersion for an API or version outside ``served``
    (api_key -> (min, max)), MalformedRequest for bytes that do not parse."""
    if len(frame) < _START.size:
        raise MalformedRequest(f"a request of {len(frame)} bytes is shorter than Kafka's request header")
    api_key, version, correlation_id = _START.unpack_from(frame)
    versions = served.get(api_key)
    if versions is None or not versions[0] <= version <= versions[1]:
        raise UnsupportedVersion(api_key, version, correlation_id, versions)
    try:
        body_class = request_class(api_key, version)
    except UnknownSchema as exc:  # a served range kio lacks: a bug of the table, refused as unsupported
        raise UnsupportedVersion(api_key, version, correlation_id, versions) from exc
    data = bytes(frame) if type(frame) is not bytes else frame
    try:
        # `type`: mypy refuses a type[...] (here a union of two) to a functools.cache (python/mypy#11470)
        header_class: type = body_class.__header_schema__
        header, offset = reader(header_class)(data, 0)  # kio gives the size read
        body, _ = reader(body_class)(data, offset)
    except Exception as exc:
        raise MalformedRequest(
            f"cannot read {body_class.__name__} v{version}: {type(exc).__name__}: {exc}",
            api_key,
            version,
            correlation_id,
        ) from None
    # Bytes after what the schema names are ignored, as Kafka ignores them: librdkafka's
    # Metadata v12 carries 3 bytes past the schema's end.
    return KafkaRequest(api_key, version, correlation_id, header.client_id, body)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> list:
    """The response frame's body as parts: bytes, and the RecordsRegions its records leave out."""
    header = build(body.__header_schema__, correlation_id=correlation_id)
    return write_parts([header, body])


def response_body_class(api_key: int, version: int) -> type:
    return response_class(api_key, version)
