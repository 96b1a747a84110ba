"""The channel a broker sends one-off requests to the others on (the transaction coordinator's
WriteTxnMarkers): real in-process brokers of one cluster, a trio run of the test's own as the
sender."""

from __future__ import annotations

import pytest
import trio

from triolog.broker.cluster.broker_channel import BrokerChannel, BrokerUnavailableError
from triolog.protocol.kafka.apis import ApiKey

from .helpers import wait_until

HELLO = {"client_software_name": "triolog-test", "client_software_version": "1"}


def test_a_request_reaches_another_broker_and_a_stopped_one_is_reported(start_brokers):
    brokers = start_brokers((1, 2))
    cache = brokers[1].server.cluster.cache
    channel = BrokerChannel(1, cache, listener_name="PLAINTEXT", timeout_ms=5000)

    async def scenario():
        for _ in range(3):  # one connection, reused
            body = await channel.call(2, ApiKey.API_VERSIONS, 3, HELLO)
            assert int(body.error_code) == 0
            assert ApiKey.WRITE_TXN_MARKERS in {k.api_key for k in body.api_keys}
        assert len(channel._connections) == 1
        await trio.to_thread.run_sync(brokers[2].stop)
        with pytest.raises(BrokerUnavailableError, match="closed the connection"):
            await channel.call(2, ApiKey.API_VERSIONS, 3, HELLO)  # its connection broke
        assert not channel._connections
        await trio.to_thread.run_sync(wait_until, lambda: 2 not in cache.brokers)
        with pytest.raises(BrokerUnavailableError, match="no PLAINTEXT endpoint"):
            await channel.call(2, ApiKey.API_VERSIONS, 3, HELLO)  # gone from the cluster
        await channel.aclose()

    trio.run(scenario)
