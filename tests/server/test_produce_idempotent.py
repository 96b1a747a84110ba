"""Idempotent produce over the wire: a retried batch gets its original base offset (and, with
acks=all, only once the original is fsynced); the producer-state errors are per-partition codes
with a message. The real broker in-process over a real socket."""

from __future__ import annotations

import time

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .inprocess import Client, metric, running_broker, values_of, wait_until

PID = 31


def request(client: Client, topic: str, values, *, sequence: int, epoch: int = 0, pid: int = PID,
            acks: int = 1) -> m.ProduceRequest:
    now = int(time.time() * 1000)
    batch = build_batch([(b"k", v, now, ()) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=sequence)
    return m.ProduceRequest(id=client.next_id(), acks=acks, timeout_ms=30_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),))


async def produce(client: Client, *args, **kwargs) -> dict:
    return (await client.call(request(client, *args, **kwargs)))["topics"][0]["partitions"][0]


async def test_a_retried_batch_gets_its_original_offset_and_acks_all_waits_for_the_originals_fsync(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        server.producer_ids.generate_producer_id()  # ids below 1000 handed out: PID is one of them
        log = server.log_manager.get_log("idem", 0)
        await client.produce("idem", [b"plain"])
        first = await produce(client, "idem", [b"a", b"b"], sequence=0)
        assert (first["error_code"], first["base_offset"]) == (0, 1)
        assert log.recovery_point == 0  # acks=1: not fsynced
        retry = await produce(client, "idem", [b"a", b"b"], sequence=0, acks=-1)
        assert (retry["error_code"], retry["base_offset"], retry["log_append_time"]) == (0, 1, -1)
        assert log.recovery_point >= 3, "the duplicate was acknowledged before the original was on disk"
        assert server.handler.produce_duplicates == 1 and log.duplicate_batches == 1
        assert metric(server, "triolog_log_duplicate_batches_total", topic="idem", partition="0") == 1
        assert metric(server, "triolog_log_producer_ids", topic="idem", partition="0") == 1
        assert values_of((await client.fetch("idem"))["records"]) == [b"plain", b"a", b"b"]
        await client.aclose()


async def test_producer_state_errors_are_partition_error_codes_with_messages(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        server.producer_ids.generate_producer_id()  # ids below 1000 handed out: PID is one of them
        for sequence in range(0, 14, 2):
            assert (await produce(client, "idem", [b"x", b"y"], sequence=sequence, epoch=1))["error_code"] == 0
        cases = [
            (dict(sequence=20, epoch=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "out of order sequence number"),
            (dict(sequence=2, epoch=1), ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "older than the 5 batches"),
            (dict(sequence=14, epoch=0), ErrorCode.INVALID_PRODUCER_EPOCH, "older than its current epoch 1"),
            (dict(sequence=5, pid=PID + 1), ErrorCode.UNKNOWN_PRODUCER_ID, "is unknown"),
        ]
        for kwargs, code, message in cases:
            result = await produce(client, "idem", [b"z"], **kwargs)
            assert result["error_code"] == code, (kwargs, result)
            assert message in result["error_message"] and result["base_offset"] == -1
        assert server.log_manager.get_log("idem", 0).log_end_offset == 14
        await client.aclose()


async def test_acks_all_answers_duplicate_sequence_number_only_once_the_original_is_fsynced(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        server.producer_ids.generate_producer_id()  # ids below 1000 handed out: PID is one of them
        log = server.log_manager.get_log("idem", 0)
        for sequence in range(0, 14, 2):  # acks=1: appended, not fsynced
            assert (await produce(client, "idem", [b"x", b"y"], sequence=sequence))["error_code"] == 0
        assert log.recovery_point == 0
        old = await produce(client, "idem", [b"x", b"y"], sequence=2, acks=-1)  # older than the 5 remembered
        assert old["error_code"] == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
        # The original (offsets 2-3) lies below the oldest remembered batch (first offset 4).
        assert log.recovery_point >= 4, "DUPLICATE_SEQUENCE_NUMBER answered before the original was on disk"
        await client.aclose()


async def test_a_producer_id_the_broker_never_handed_out_is_unknown_producer_id(tmp_path):
    """Any client could otherwise make each partition keep state for unboundedly many ids."""
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        log = server.log_manager.get_log("idem", 0)
        refused = await produce(client, "idem", [b"a"], sequence=0, pid=PID)  # no id handed out yet
        assert refused["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
        assert "producer id 31 was never handed out by this broker" in refused["error_message"]
        issued = server.producer_ids.generate_producer_id()
        for pid in (issued, PID):  # below the reserved block's end: Kafka's rules
            assert (await produce(client, "idem", [b"a"], sequence=0, pid=pid))["error_code"] == 0
        beyond = await produce(client, "idem", [b"a"], sequence=0, pid=1000, acks=-1)
        assert beyond["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
        assert log.log_end_offset == 2 and set(log.producer_state_manager.producers) == {issued, PID}
        await client.aclose()


async def test_ids_found_in_the_logs_are_accepted_and_never_handed_out_again_without_the_block_file(tmp_path):
    """A data directory without producer-id-block (lost, or copied without it): the partition
    still accepts the ids its log holds, and init_producer_id starts past them (a warning)."""
    from triolog.broker.coordinator.producer_id_manager import FILE_NAME

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        log = server.log_manager.get_log("idem", 0)
        now = int(time.time() * 1000)
        log.append_as_leader(build_batch([(b"k", b"old", now, ())], producer_id=1500, producer_epoch=0,
                                         base_sequence=0))  # written by an earlier life of the broker
        await client.aclose()
    (tmp_path / FILE_NAME).unlink(missing_ok=True)
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("other")
        # Known since startup, before any init_producer_id: also on a partition that never saw it.
        assert (await produce(client, "other", [b"elsewhere"], sequence=0, pid=1400))["error_code"] == 0
        assert (await produce(client, "idem", [b"next"], sequence=1, pid=1500))["error_code"] == 0
        answer = await client.call(m.InitProducerIdRequest(id=client.next_id()))
        assert answer["error_code"] == 0 and answer["producer_id"] == 2000
        await client.aclose()


async def test_the_broker_forgets_producer_ids_after_producer_id_expiration_ms(tmp_path):
    """The expiry task runs every producer.id.expiration.check.interval.ms: an id idle past
    producer.id.expiration.ms is forgotten, so its next batch must start again at sequence 0."""
    async with running_broker(tmp_path, producer_id_expiration_ms="300",
                              producer_id_expiration_check_interval_ms="50") as (server, port):
        client = await Client.connect(port)
        await client.create("idem")
        server.producer_ids.generate_producer_id()  # ids below 1000 handed out: PID is one of them
        log = server.log_manager.get_log("idem", 0)
        assert (await produce(client, "idem", [b"a"], sequence=0))["error_code"] == 0
        assert PID in log.producer_state_manager.producers
        await wait_until(lambda: PID not in log.producer_state_manager.producers, what="the id to expire")
        late = await produce(client, "idem", [b"b"], sequence=1)
        assert late["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
        assert (await produce(client, "idem", [b"b"], sequence=0))["error_code"] == 0
        await client.aclose()
