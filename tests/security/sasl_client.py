"""A msgpack-protocol client over a plain or TLS socket that authenticates with SASL/SCRAM
(scramp's client): what the security tests drive the broker with, request by request."""

from __future__ import annotations

import socket
import ssl
import struct

import msgpack
from scramp import ScramClient

from triolog.protocol import messages as m


class MsgpackClient:
    """msgpack frames to 127.0.0.1:``port``; over TLS given an ``ssl_context`` (the handshake
    happens here, so a refused certificate raises from the constructor)."""

    def __init__(self, port: int, timeout_s: float = 10.0, *, ssl_context: ssl.SSLContext | None = None,
                 server_hostname: str = "127.0.0.1"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        if ssl_context is not None:
            try:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=server_hostname)
            except BaseException:
                self.sock.close()
                raise
        self.ids = 0

    def send(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def call(self, request_class, **fields) -> dict:
        self.request(request_class, **fields)
        return self.answer()

    def request(self, request_class, **fields) -> None:
        """Send a request under the next id, without waiting for its answer (see ``answer``)."""
        self.ids += 1
        self.send(m.encode_request(request_class(id=self.ids, **fields)))

    def answer(self) -> dict:
        """The answer to the last request sent (by ``call`` or ``request``)."""
        (length,) = struct.unpack(">I", self.exactly(4))
        doc = msgpack.unpackb(self.exactly(length), raw=False, strict_map_key=False)
        assert doc.get("id") == self.ids, doc
        return doc

    def answered(self) -> bool:
        """Whether an answer (or the end of the connection) is there to read, without waiting."""
        import select

        poller = select.poll()  # not select.select: a worker may hold more than 1024 descriptors
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(0))

    def exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("closed by the broker")
            data += chunk
        return data

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def authenticate(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict:
        assert self.call(m.SaslHandshakeRequest, mechanism=mechanism)["error_code"] == 0
        scram = ScramClient([mechanism], user, password)
        first = self.call(m.SaslAuthenticateRequest, auth_bytes=scram.get_client_first().encode())
        if first["error_code"]:
            return first
        scram.set_server_first(first["auth_bytes"].decode())
        final = self.call(m.SaslAuthenticateRequest, auth_bytes=scram.get_client_final().encode())
        if not final["error_code"]:
            scram.set_server_final(final["auth_bytes"].decode())  # the broker proved it knows the key
        return final

    def close(self) -> None:
        self.sock.close()


def logged_in(port: int, user: str, password: str) -> MsgpackClient:
    client = MsgpackClient(port)
    answer = client.authenticate(user, password)
    assert answer["error_code"] == 0, answer
    return client
