"""The broker's own process freezes what startup made (gc.freeze), so a full collection does not
rescan the loaded logs, config and modules on the event loop; an embedding process is left alone."""

from __future__ import annotations

import gc

import trio

from triolog.broker.server.app import BrokerServer

from .inprocess import Client, broker_config


async def _started(server: BrokerServer, check) -> None:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.run)
        try:
            client = await Client.connect(address.port)
            assert (await client.api_versions())["error_code"] == 0
            check()
        finally:
            server.shutdown()


async def test_a_broker_process_freezes_its_startup_objects(tmp_path):
    assert gc.get_freeze_count() == 0

    def frozen() -> None:  # modules, config, the logs: tens of thousands of objects
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()

    try:
        await _started(BrokerServer(broker_config(tmp_path), freeze_gc=True), frozen)
    finally:
        gc.unfreeze()


async def test_an_embedded_broker_leaves_the_collector_alone(tmp_path):
    assert gc.get_freeze_count() == 0
    await _started(BrokerServer(broker_config(tmp_path)), lambda: None)
    assert gc.get_freeze_count() == 0
