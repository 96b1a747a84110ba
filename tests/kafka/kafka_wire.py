"""Kafka requests by hand, over a plain socket, encoded with kio: for what no client library
sends on purpose (an unknown version, a truncated frame)."""

from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def encode_request(api_key: int, version: int, correlation_id: int, body, client_id: str = "test") -> bytes:
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    fields = {"request_api_key": api_key, "request_api_version": version, "correlation_id": correlation_id,
              "client_id": client_id}
    entity_writer(header_cls)(buffer, header_cls(**fields))
    entity_writer(cls)(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame's body, or None if the broker closed the connection."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def decode_response(api_key: int, version: int, frame: bytes):
    """(correlation_id, body) of a response frame."""
    cls = load_response_schema(api_key, version)
    header, size = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, size)
    return header.correlation_id, body


def connect(address: str, timeout_s: float = 20.0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    return sock
