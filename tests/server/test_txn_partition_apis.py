"""The partition leader's side of transactions on the real broker: write_txn_markers (the
coordinator's COMMIT and ABORT markers), describe_producers, and txn_offset_commit (offsets in a
producer's transaction, the group's only once its COMMIT marker reaches the group's partition)."""

from __future__ import annotations

import time

import trio

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch, iter_batches

from .inprocess import Client, running_broker


def values_of(records: bytes) -> list[bytes]:
    """The data records' values (markers are control batches, no data)."""
    return [r.value for b in iter_batches(records) if not b.header.is_control for r in b.records]


#: These tests write markers themselves, with no transaction coordinator behind the batches.
NO_VERIFICATION = {"transaction_partition_verification_enable": "false"}

async def _producer_id(client: Client) -> int:
    answer = await client.call(m.InitProducerIdRequest(id=client.next_id()))
    assert answer["error_code"] == 0
    return answer["producer_id"]


async def _produce_txn(client: Client, topic: str, partition: int, values, pid: int, sequence: int,
                       epoch: int = 0) -> dict:
    now = int(time.time() * 1000)
    batch = build_batch([(b"k", v, now, ()) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=sequence, is_transactional=True)
    doc = await client.call(m.ProduceRequest(id=client.next_id(), acks=-1, timeout_ms=30_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),),
        transactional_id="tx"))
    return doc["topics"][0]["partitions"][0]


async def _markers(client: Client, *markers: m.TxnMarker) -> list[dict]:
    doc = await client.call(m.WriteTxnMarkersRequest(id=client.next_id(), markers=markers))
    assert doc["error_code"] == 0
    return doc["markers"]


def _marker(pid: int, committed: bool, topic: str, partitions, *, epoch: int = 0, coordinator_epoch: int = 0):
    return m.TxnMarker(producer_id=pid, producer_epoch=epoch, committed=committed,
                       topics=(m.TxnTopic(name=topic, partitions=tuple(partitions)),),
                       coordinator_epoch=coordinator_epoch)


def _codes(result: dict) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition"]): p["error_code"] for t in result["topics"] for p in t["partitions"]}


async def _read_committed(client: Client, topic: str, partition: int) -> dict:
    request = m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                             topics=(m.FetchTopic(name=topic, partitions=(
                                 m.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20),)),))
    return (await client.call(request))["topics"][0]["partitions"][0]


async def test_markers_decide_a_transaction_on_every_partition_named(tmp_path):
    async with running_broker(tmp_path, **NO_VERIFICATION) as (_, port):
        client = await Client.connect(port)
        await client.create("t", partitions=2)
        a, b = await _producer_id(client), await _producer_id(client)
        for partition in (0, 1):
            assert (await _produce_txn(client, "t", partition, [b"a%d" % partition], a, 0))["error_code"] == 0
        assert (await _produce_txn(client, "t", 0, [b"b0"], b, 0))["error_code"] == 0
        before = await _read_committed(client, "t", 0)
        assert before["last_stable_offset"] == 0 and values_of(before["records"]) == []

        (result,) = await _markers(client, _marker(a, True, "t", (0, 1)))
        assert result["producer_id"] == a and _codes(result) == {("t", 0): 0, ("t", 1): 0}
        (result,) = await _markers(client, _marker(b, False, "t", (0,)))
        assert _codes(result) == {("t", 0): 0}

        p0, p1 = await _read_committed(client, "t", 0), await _read_committed(client, "t", 1)
        # p0: a0 (0), b0 (1), a's COMMIT (2), b's ABORT (3): everything decided.
        assert p0["last_stable_offset"] == p0["high_watermark"] == 4
        assert p0["aborted_transactions"] == [{"producer_id": b, "first_offset": 1}]
        assert values_of(p0["records"]) == [b"a0", b"b0"]  # b0 is the consumer's to drop, as Kafka's
        assert p1["last_stable_offset"] == 2 and values_of(p1["records"]) == [b"a1"]
        assert p1["aborted_transactions"] == []


async def test_a_refused_marker_fails_its_partition_only(tmp_path):
    async with running_broker(tmp_path, **NO_VERIFICATION) as (_, port):
        client = await Client.connect(port)
        await client.create("t", partitions=3)
        a = await _producer_id(client)
        for partition in (0, 1, 2):
            await _produce_txn(client, "t", partition, [b"x"], a, 0, epoch=2)
        # The partitions learn coordinator epoch 5 from a first transaction's marker on 0 and 1.
        await _markers(client, _marker(a, True, "t", (0, 1), epoch=2, coordinator_epoch=5))
        for partition in (0, 1):
            await _produce_txn(client, "t", partition, [b"y"], a, 1, epoch=2)
        (result,) = await _markers(
            client,
            m.TxnMarker(producer_id=a, producer_epoch=2, committed=False, coordinator_epoch=4, topics=(
                m.TxnTopic(name="t", partitions=(0, 2, 7)), m.TxnTopic(name="missing", partitions=(0,)))),
        )
        assert _codes(result) == {
            ("t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED,  # a zombie coordinator
            ("t", 2): 0,  # never saw epoch 5
            ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        (result,) = await _markers(client, _marker(a, True, "t", (1,), epoch=1, coordinator_epoch=5))
        assert _codes(result) == {("t", 1): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert (await _read_committed(client, "t", 0))["last_stable_offset"] == 2, "the fenced marker wrote nothing"
        assert (await _read_committed(client, "t", 1))["last_stable_offset"] == 2


async def test_describe_producers_shows_an_open_transaction(tmp_path):
    async with running_broker(tmp_path, **NO_VERIFICATION) as (_, port):
        client = await Client.connect(port)
        await client.create("t")
        await client.produce("t", [b"plain"])
        a = await _producer_id(client)
        await _produce_txn(client, "t", 0, [b"1", b"2"], a, 0, epoch=3)
        request = m.DescribeProducersRequest(id=client.next_id(), topics=(m.TxnTopic(name="t", partitions=(0, 4)),))
        doc = await client.call(request)
        p0, p4 = doc["topics"][0]["partitions"]
        (state,) = p0["active_producers"]
        assert (state["producer_id"], state["producer_epoch"], state["last_sequence"]) == (a, 3, 1)
        assert state["current_txn_start_offset"] == 1
        assert p4["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await _markers(client, _marker(a, True, "t", (0,), epoch=3))
        doc = await client.call(request)
        (state,) = doc["topics"][0]["partitions"][0]["active_producers"]
        assert state["current_txn_start_offset"] == -1


async def _txn_commit(client: Client, group: str, pid: int, offset: int) -> dict:
    request = m.TxnOffsetCommitRequest(
        id=client.next_id(), transactional_id="tx", group_id=group, producer_id=pid, producer_epoch=0,
        topics=(m.OffsetCommitTopic(name="in", partitions=(m.OffsetCommitPartition(partition=0, committed_offset=offset),)),),
    )
    return (await client.call(request))["topics"][0]["partitions"][0]


async def _fetch_offset(client: Client, group: str, *, require_stable: bool) -> dict:
    request = m.OffsetFetchRequest(id=client.next_id(), group_id=group, require_stable=require_stable,
                                   topics=(m.OffsetFetchTopic(name="in", partitions=(0,)),))
    for _ in range(500):  # (after a restart: until __consumer_offsets is loaded)
        doc = await client.call(request)
        if doc["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            break
        await trio.sleep(0.01)
    assert doc["error_code"] == 0
    return doc["topics"][0]["partitions"][0]


async def test_txn_offsets_become_the_groups_at_the_commit_marker_and_survive_a_restart(tmp_path):
    props = {"offsets_topic_num_partitions": "1"}
    async with running_broker(tmp_path, **props) as (_, port):
        client = await Client.connect(port)
        await client.create("in")
        committer, aborter = await _producer_id(client), await _producer_id(client)
        assert (await _txn_commit(client, "g", committer, 42))["error_code"] == 0
        unstable = await _fetch_offset(client, "g", require_stable=True)
        assert unstable["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert (await _fetch_offset(client, "g", require_stable=False))["committed_offset"] == -1
        (result,) = await _markers(client, _marker(committer, True, "__consumer_offsets", (0,)))
        assert _codes(result) == {("__consumer_offsets", 0): 0}
        assert (await _fetch_offset(client, "g", require_stable=True))["committed_offset"] == 42

        assert (await _txn_commit(client, "g", aborter, 99))["error_code"] == 0
        await _markers(client, _marker(aborter, False, "__consumer_offsets", (0,)))
        assert (await _fetch_offset(client, "g", require_stable=True))["committed_offset"] == 42
        # One more left open across the restart: still pending (not the group's) after it.
        assert (await _txn_commit(client, "g", await _producer_id(client), 7))["error_code"] == 0

    async with running_broker(tmp_path, **props) as (_, port):
        client = await Client.connect(port)
        answer = await _fetch_offset(client, "g", require_stable=False)
        assert answer["committed_offset"] == 42, "replayed: the commit kept, the abort dropped, the open one pending"
        assert (await _fetch_offset(client, "g", require_stable=True))["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
