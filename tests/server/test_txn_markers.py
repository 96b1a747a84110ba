"""The transaction coordinator's marker sender on a single broker: every partition of a
transaction gets its marker through the broker's own WriteTxnMarkers path, many transactions'
markers share one write, and a partition that does not exist is answered as done."""

from __future__ import annotations

import time

import trio

from triolog.broker.server.txn_markers import TxnMarkerSender
from triolog.broker.storage.log import FetchIsolation
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .inprocess import Client, running_broker


async def produce_txn(client: Client, topic: str, partition: int, pid: int, value: bytes, sequence: int = 0) -> None:
    batch = build_batch([(b"k", value, int(time.time() * 1000), ())], producer_id=pid, producer_epoch=0,
                        base_sequence=sequence, is_transactional=True)
    doc = await client.call(m.ProduceRequest(id=client.next_id(), acks=-1, timeout_ms=30_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),),
        transactional_id="tx"))
    assert doc["topics"][0]["partitions"][0]["error_code"] == 0


async def producer_id(client: Client) -> int:
    """(These tests send markers themselves: the batches have no coordinator to verify them with.)"""
    return (await client.call(m.InitProducerIdRequest(id=client.next_id())))["producer_id"]


async def test_markers_reach_every_partition_and_missing_ones_are_done(tmp_path):
    async with running_broker(tmp_path, transaction_partition_verification_enable="false") as (server, port):
        client = await Client.connect(port)
        await client.create("t", partitions=3)
        pids = [await producer_id(client) for _ in range(8)]
        for n, pid in enumerate(pids):
            for partition in (0, 1, 2):
                await produce_txn(client, "t", partition, pid, b"%d" % n)
        log = server.log_manager.get_log("t", 0)
        assert log.last_stable_offset == 0
        writes = []

        async def write_local(markers):
            writes.append(len(markers))
            return await server.handler.txn_partitions.write_markers(markers)

        answers: dict[int, dict] = {}
        async with trio.open_nursery() as nursery:
            sender = TxnMarkerSender(write_local=write_local, node_id=server.config.node_id)
            sender.start(nursery)
            for n, pid in enumerate(pids):
                partitions = [("t", 0), ("t", 1), ("t", 2)] + ([("t", 9), ("gone", 0)] if n == 0 else [])
                sender.send(pid, 0, 0, n % 2 == 0, partitions, lambda codes, pid=pid: answers.__setitem__(pid, codes))
            with trio.fail_after(10):
                while len(answers) < len(pids):
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert answers[pids[0]] == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE, ("t", 2): ErrorCode.NONE,
                                    ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert all(set(codes.values()) == {ErrorCode.NONE} for pid, codes in answers.items() if pid != pids[0])
        assert sender.in_flight == 0
        for partition in (0, 1, 2):
            log = server.log_manager.get_log("t", partition)
            assert log.last_stable_offset == log.log_end_offset == 16  # 8 records, 8 markers
            assert len(log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED).aborted_transactions) == 4
        # Queued while the first write waited for its fsync: later markers share writes.
        assert sum(writes) == len(pids) and len(writes) < len(pids)
