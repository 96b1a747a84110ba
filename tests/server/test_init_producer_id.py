"""init_producer_id against the real broker, and the producer-id blocks behind it."""

from __future__ import annotations

import threading

import pytest

from triolog.broker.coordinator.producer_id_manager import (BLOCK_SIZE, FILE_NAME, ProducerIdBlockError,
                                                           ProducerIdManager)
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .inprocess import Client, running_broker


async def _init(client: Client, **fields) -> dict:
    return await client.call(m.InitProducerIdRequest(id=client.next_id(), **fields))


async def test_each_call_gets_a_new_producer_id_with_epoch_0(tmp_path):
    async with running_broker(tmp_path) as (_, port):
        client = await Client.connect(port)
        answers = [await _init(client) for _ in range(5)]
        assert all(a["error_code"] == ErrorCode.NONE for a in answers)
        assert [a["producer_epoch"] for a in answers] == [0] * 5
        ids = [a["producer_id"] for a in answers]
        assert len(set(ids)) == 5 and all(i >= 0 for i in ids)
        # A producer asking again with its old id (an epoch overflow) gets a new id as well.
        again = await _init(client, producer_id=ids[0], producer_epoch=32767)
        assert again["error_code"] == ErrorCode.NONE and again["producer_id"] not in ids
        await client.aclose()


async def test_a_transactional_id_gets_one_id_with_a_new_epoch_each_time(tmp_path):
    async with running_broker(tmp_path, transaction_state_log_num_partitions="1") as (_, port):
        client = await Client.connect(port)
        first = await _init(client, transactional_id="tx-1", transaction_timeout_ms=60000)
        second = await _init(client, transactional_id="tx-1", transaction_timeout_ms=60000)
        assert first["error_code"] == second["error_code"] == ErrorCode.NONE
        assert second["producer_id"] == first["producer_id"] and second["producer_epoch"] == first["producer_epoch"] + 1
        # Bad input is refused and the connection stays usable.
        refused = await _init(client, transactional_id="", transaction_timeout_ms=60000)
        assert refused["error_code"] == ErrorCode.INVALID_REQUEST
        assert (await _init(client, transactional_id="tx-2"))["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await _init(client))["error_code"] == ErrorCode.NONE
        await client.aclose()


async def test_ids_stay_unique_across_broker_restarts(tmp_path):
    seen: list[int] = []
    for _ in range(3):
        async with running_broker(tmp_path) as (_, port):
            client = await Client.connect(port)
            for _ in range(3):
                seen.append((await _init(client))["producer_id"])
            await client.aclose()
    assert len(set(seen)) == len(seen)
    # Each run reserved a fresh block: a restart skips the unused rest of the previous one.
    assert seen[3] >= BLOCK_SIZE and seen[6] >= 2 * BLOCK_SIZE
    assert (tmp_path / FILE_NAME).read_text() == f"1\n{3 * BLOCK_SIZE}\n"


def test_a_crashed_manager_loses_at_most_the_rest_of_its_block(tmp_path):
    first = ProducerIdManager(tmp_path, block_size=10)
    ids = [first.generate_producer_id() for _ in range(12)]  # two blocks reserved
    assert ids == list(range(12))
    # No shutdown step exists: a new manager on the same directory is what a restart after kill -9 sees.
    second = ProducerIdManager(tmp_path, block_size=10)
    assert second.generate_producer_id() == 20
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_ids_are_unique_across_threads(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=7)
    out: list[list[int]] = [[] for _ in range(8)]

    def take(slot: list[int]) -> None:
        for _ in range(200):
            slot.append(manager.generate_producer_id())

    threads = [threading.Thread(target=take, args=(slot,)) for slot in out]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for slot in out for i in slot]
    assert sorted(every) == list(range(1600))


def test_a_damaged_block_file_is_refused_not_guessed(tmp_path):
    (tmp_path / FILE_NAME).write_text("1\nnot-a-number\n")
    with pytest.raises(ProducerIdBlockError, match="not a producer id block file"):
        ProducerIdManager(tmp_path).generate_producer_id()
