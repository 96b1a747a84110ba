"""A follower logging in to its leader's SASL listener (SASL_PLAINTEXT or SASL_SSL) before it
fetches: Kafka's ``sasl.mechanism.inter.broker.protocol`` with the broker's own credentials.

The credentials are a user of the cluster like any other (a SCRAM credential in ZooKeeper, which
every broker follows), so a broker logs in to every other with one password. SCRAM's client side
is scramp's; the server's final message is checked, so a follower also knows it reached a broker
that holds the user's key. PLAIN sends the password itself: the configuration allows it over
SASL_SSL only, as the listeners offer it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio
from scramp import ScramClient
from scramp.utils import ScramException

from triolog.config.broker_config import BrokerConfig, uses_sasl
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import NEED_DATA, FrameDecoder, RemoteProtocolError
from triolog.protocol.kafka.sasl_client import (
    decode_sasl_authenticate_response,
    decode_sasl_handshake_response,
    encode_sasl_authenticate,
    encode_sasl_handshake,
)

__all__ = ["InterBrokerAuthenticationError", "InterBrokerSasl", "authenticate"]

#: A login's messages are small; a bigger frame is not a SASL answer.
_MAX_FRAME = 64 * 1024


class InterBrokerAuthenticationError(ConnectionError):
    """The leader refused the login; the message says why. A connection error: the fetcher logs
    it and connects again after its backoff (a user made meanwhile, a password set right)."""


@dataclass(frozen=True)
class InterBrokerSasl:
    mechanism: str
    username: str
    password: str = field(repr=False)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> InterBrokerSasl | None:
        """The follower's login, if the inter-broker (Kafka) listener uses SASL."""
        listener = config.kafka_listener
        if listener is None or not uses_sasl(listener):
            return None
        assert config.sasl_inter_broker_username and config.sasl_inter_broker_password  # the config checks it
        return cls(
            config.sasl_mechanism_inter_broker_protocol,
            config.sasl_inter_broker_username,
            config.sasl_inter_broker_password,
        )


async def authenticate(stream: trio.abc.Stream, sasl: InterBrokerSasl, client_id: str, first_id: int) -> int:
    """Log in on a new connection (SaslHandshake, then SaslAuthenticate rounds); the last
    correlation id used. InterBrokerAuthenticationError if refused."""
    decoder = FrameDecoder(_MAX_FRAME)
    correlation_id = first_id

    async def exchange(frame: bytes) -> bytes:
        await stream.send_all(frame)
        while True:
            body = decoder.next_frame()
            if body is not NEED_DATA:
                return body
            data = await stream.receive_some(4096)
            if not data:
                raise InterBrokerAuthenticationError("the leader closed the connection during the SASL login")
            decoder.receive_data(bytes(data))

    handshake = decode_sasl_handshake_response(
        await exchange(encode_sasl_handshake(correlation_id, client_id, sasl.mechanism))
    )
    _check_id(handshake.correlation_id, correlation_id)
    if handshake.error_code:
        raise InterBrokerAuthenticationError(
            f"the leader does not offer {sasl.mechanism} (it offers {', '.join(handshake.mechanisms) or 'nothing'}): "
            f"{_name(handshake.error_code)}"
        )

    async def step(message: bytes) -> bytes:
        nonlocal correlation_id
        correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        answer = decode_sasl_authenticate_response(
            await exchange(encode_sasl_authenticate(correlation_id, client_id, message))
        )
        _check_id(answer.correlation_id, correlation_id)
        if answer.error_code:
            raise InterBrokerAuthenticationError(
                f"{sasl.mechanism} login as {sasl.username} refused: {_name(answer.error_code)}"
                + (f": {answer.error_message}" if answer.error_message else "")
            )
        return answer.auth_bytes

    if sasl.mechanism == "PLAIN":
        await step(f"\0{sasl.username}\0{sasl.password}".encode())
        return correlation_id
    scram = ScramClient([sasl.mechanism], sasl.username, sasl.password)
    try:
        server_first = await step(scram.get_client_first().encode())
        scram.set_server_first(server_first.decode())
        server_final = await step(scram.get_client_final().encode())
        scram.set_server_final(server_final.decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise InterBrokerAuthenticationError(
            f"{sasl.mechanism} login: the leader's answer is invalid ({exc})"
        ) from None
    return correlation_id


def _check_id(got: int, expected: int) -> None:
    if got != expected:
        raise RemoteProtocolError(f"response to request {got}, expected {expected}")


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
