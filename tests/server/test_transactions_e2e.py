"""Transactions on the real broker over the msgpack protocol, as our client speaks it: the
transaction coordinator found with key_type 1, init_producer_id with a transactional id,
add_partitions_to_txn, transactional produce, end_txn (an epoch bump per transaction), the
markers on every partition, describe/list_transactions, the state after a restart, and the
refusals a stale or unknown producer gets."""

from __future__ import annotations

import time

import trio

from tests.txn_reading import committed_values
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .inprocess import Client, metric, running_broker, wait_until


class TxnProducer:
    """The raw protocol steps of a transactional producer (what triolog.client wraps)."""

    def __init__(self, client: Client, transactional_id: str):
        self.client, self.transactional_id = client, transactional_id
        self.producer_id = self.epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}

    async def retrying(self, make, code_of):
        for _ in range(500):
            doc = await self.client.call(make())
            if code_of(doc) not in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                return doc
            await trio.sleep(0.01)
        raise AssertionError(f"still retrying: {doc}")

    async def init(self, timeout_ms: int = 60000) -> dict:
        doc = await self.retrying(lambda: m.InitProducerIdRequest(
            id=self.client.next_id(), transactional_id=self.transactional_id, transaction_timeout_ms=timeout_ms),
            lambda d: d["error_code"])
        if doc["error_code"] == 0:
            self.producer_id, self.epoch = doc["producer_id"], doc["producer_epoch"]
            self.sequences.clear()
        return doc

    async def add(self, topic: str, *partitions: int, epoch: int | None = None) -> list[int]:
        doc = await self.retrying(lambda: m.AddPartitionsToTxnRequest(
            id=self.client.next_id(), transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.epoch if epoch is None else epoch,
            topics=(m.TxnTopic(name=topic, partitions=partitions),)),
            lambda d: d["topics"][0]["partitions"][0]["error_code"])
        return [p["error_code"] for p in doc["topics"][0]["partitions"]]

    async def produce(self, topic: str, partition: int, *values: bytes) -> int:
        sequence = self.sequences.get((topic, partition), 0)
        batch = build_batch([(b"k", v, int(time.time() * 1000), ()) for v in values], producer_id=self.producer_id,
                            producer_epoch=self.epoch, base_sequence=sequence, is_transactional=True)
        doc = await self.client.call(m.ProduceRequest(id=self.client.next_id(), acks=-1, timeout_ms=30000, topics=(
            m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),),
            transactional_id=self.transactional_id))
        code = doc["topics"][0]["partitions"][0]["error_code"]
        if code == 0:
            self.sequences[(topic, partition)] = sequence + len(values)
        return code

    async def end(self, committed: bool, *, epoch: int | None = None) -> dict:
        doc = await self.retrying(lambda: m.EndTxnRequest(
            id=self.client.next_id(), transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.epoch if epoch is None else epoch, committed=committed), lambda d: d["error_code"])
        if doc["error_code"] == 0 and epoch is None:
            # A new epoch per transaction: the sequences start over.
            self.producer_id, self.epoch = doc["producer_id"], doc["producer_epoch"]
            self.sequences.clear()
        return doc


async def read_committed(client: Client, topic: str, partition: int) -> tuple[list[bytes], dict]:
    """The values a read_committed consumer keeps (aborted transactions dropped), and the answer."""
    request = m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                             topics=(m.FetchTopic(name=topic, partitions=(
                                 m.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20),)),))
    part = (await client.call(request))["topics"][0]["partitions"][0]
    return committed_values(part), part


async def until_decided(client: Client, topic: str, partition: int) -> tuple[list[bytes], dict]:
    for _ in range(500):
        values, part = await read_committed(client, topic, partition)
        if part["last_stable_offset"] == part["high_watermark"]:
            return committed_values(part), part
        await trio.sleep(0.01)
    raise AssertionError(f"{topic}-{partition} never became stable: {part}")


async def describe(client: Client, *ids: str) -> list[dict]:
    doc = await client.call(m.DescribeTransactionsRequest(id=client.next_id(), transactional_ids=ids))
    return doc["transactions"]


async def until_complete(client: Client, transactional_id: str) -> dict:
    """The markers are on the partitions before the coordinator writes Complete*: wait for it."""
    for _ in range(500):
        (state,) = await describe(client, transactional_id)
        if state["state"] in ("CompleteCommit", "CompleteAbort"):
            return state
        await trio.sleep(0.01)
    raise AssertionError(f"{transactional_id} never completed: {state}")


async def test_a_transaction_commits_and_the_next_aborts_on_every_partition(tmp_path):
    props = {"transaction_state_log_num_partitions": "3"}
    async with running_broker(tmp_path, **props) as (server, port):
        client = await Client.connect(port)
        found = await client.call(m.FindCoordinatorRequest(id=client.next_id(), key="tx", key_type=1))
        assert found["error_code"] == 0 and found["port"] == port
        await client.create("t", partitions=2)
        producer = TxnProducer(client, "tx")
        assert (await producer.init())["producer_epoch"] == 0
        assert await producer.add("t", 0, 1) == [0, 0]
        assert await producer.produce("t", 0, b"a0") == 0
        assert await producer.produce("t", 1, b"a1") == 0
        (ongoing,) = await describe(client, "tx")
        assert ongoing["state"] == "Ongoing" and ongoing["topics"] == [{"name": "t", "partitions": [0, 1]}]
        ended = await producer.end(committed=True)
        assert ended["error_code"] == 0 and ended["producer_epoch"] == 1, "our protocol bumps the epoch per end"
        assert (await until_decided(client, "t", 0))[0] == [b"a0"]
        assert (await until_decided(client, "t", 1))[0] == [b"a1"]

        assert await producer.add("t", 0) == [0]  # (retried while the commit completed)
        assert await producer.produce("t", 0, b"b0") == 0
        assert (await producer.end(committed=False))["producer_epoch"] == 2
        values, part = await until_decided(client, "t", 0)
        assert values == [b"a0"] and part["aborted_transactions"] == [{"producer_id": producer.producer_id,
                                                                       "first_offset": 2}]
        done = await until_complete(client, "tx")
        assert (done["state"], done["producer_epoch"]) == ("CompleteAbort", 2)
        listing = await client.call(m.ListTransactionsRequest(id=client.next_id()))
        assert listing["transactions"] == [{"transactional_id": "tx", "producer_id": producer.producer_id,
                                            "state": "CompleteAbort"}]

    async with running_broker(tmp_path, **props) as (server, port):
        client = await Client.connect(port)
        for _ in range(200):
            (state,) = await describe(client, "tx")
            if state["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
            await trio.sleep(0.01)
        assert (state["state"], state["producer_epoch"]) == ("CompleteAbort", 2), "loaded from __transaction_state"
        again = TxnProducer(client, "tx")
        assert (await again.init())["producer_epoch"] == 3


async def test_stale_unknown_and_out_of_order_requests_get_kafkas_errors(tmp_path):
    async with running_broker(tmp_path, transaction_state_log_num_partitions="1") as (server, port):
        client = await Client.connect(port)
        await client.create("t")
        zombie = TxnProducer(client, "tx")
        await zombie.init()
        await zombie.add("t", 0)
        assert await zombie.produce("t", 0, b"zombie") == 0
        successor = TxnProducer(client, "tx")
        assert (await successor.init())["producer_epoch"] == 2  # the zombie's transaction aborted, epoch fenced
        assert (await zombie.end(committed=True))["error_code"] == ErrorCode.PRODUCER_FENCED
        assert await zombie.add("t", 0) == [ErrorCode.PRODUCER_FENCED]
        assert await zombie.produce("t", 0, b"late") == ErrorCode.INVALID_PRODUCER_EPOCH
        values, part = await until_decided(client, "t", 0)
        assert values == [] and part["aborted_transactions"][0]["producer_id"] == zombie.producer_id

        assert (await successor.end(committed=True))["error_code"] == ErrorCode.INVALID_TXN_STATE  # none begun
        assert await successor.add("t", 5) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert await successor.add("t", 0, 7) == [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        stranger = TxnProducer(client, "never-initialised")
        stranger.producer_id, stranger.epoch = successor.producer_id, successor.epoch
        assert await stranger.add("t", 0) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
        # KIP-890 part 1: a batch for a partition its transaction never added is refused.
        refused = metric(server, "triolog_transaction_verifications_total", result="refused")
        assert await successor.produce("t", 0, b"never added") == ErrorCode.INVALID_TXN_STATE
        assert metric(server, "triolog_transaction_verifications_total", result="refused") == refused + 1
        too_long = await TxnProducer(client, "greedy").init(timeout_ms=900_001)
        assert too_long["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        # The Jepsen hazard: the previous transaction's EndTxn, delayed, meets the next one.
        await successor.add("t", 0)
        await successor.produce("t", 0, b"n")
        old_epoch = successor.epoch
        await successor.end(committed=True)
        await successor.add("t", 0)
        await successor.produce("t", 0, b"n+1")
        delayed = await successor.end(committed=False, epoch=old_epoch)
        assert delayed["error_code"] == ErrorCode.PRODUCER_FENCED
        assert (await successor.end(committed=True))["error_code"] == 0
        assert (await until_decided(client, "t", 0))[0] == [b"n", b"n+1"]


async def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(tmp_path):
    props = {"transaction_state_log_num_partitions": "1",
             "transaction_abort_timed_out_transaction_cleanup_interval_ms": "50"}
    async with running_broker(tmp_path, **props) as (server, port):
        client = await Client.connect(port)
        await client.create("t")
        producer = TxnProducer(client, "slow")
        await producer.init(timeout_ms=200)
        await producer.add("t", 0)
        assert await producer.produce("t", 0, b"never") == 0
        assert metric(server, "triolog_log_last_stable_offset", topic="t", partition="0") == 0
        assert metric(server, "triolog_transactions", state="Ongoing") == 1
        values, part = await until_decided(client, "t", 0)  # the coordinator's abort decides it
        assert values == [] and len(part["aborted_transactions"]) == 1
        assert (await producer.end(committed=True))["error_code"] == ErrorCode.PRODUCER_FENCED
        assert metric(server, "triolog_transaction_timed_out_aborts_total") == 1
        assert metric(server, "triolog_log_last_stable_offset", topic="t", partition="0") == 2
        await wait_until(lambda: metric(server, "triolog_transactions", state="CompleteAbort") == 1)
        assert metric(server, "triolog_transaction_markers_in_flight") == 0
        assert metric(server, "triolog_transaction_verifications_total", result="verified") == 1


async def test_listing_transactions_on_a_fresh_broker_creates_nothing(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        listing = await client.call(m.ListTransactionsRequest(id=client.next_id()))
        assert listing["error_code"] == 0 and listing["transactions"] == []
        assert server.topics.get("__transaction_state") is None
