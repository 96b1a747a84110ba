"""The idempotent producer (Kafka's enable.idempotence): its settings, what its batches carry, and
exactly-once appends with lost responses for the trio client and the Spark sink too (the sync
client's long runs are in tests/e2e/test_idempotence.py)."""

from __future__ import annotations

import time
from collections import defaultdict

import pyarrow as pa
import pytest
import trio

from tests.e2e.broker_process import InProcessBroker
from tests.e2e.fault_proxy import FaultProxy
from triolog import core
from triolog.client import Consumer, MessageTooLargeError, NewTopic, Producer
from triolog.client.aio import AsyncProducer
from triolog.client.producer_core import ProducerConfig, increment_sequence
from triolog.pipeline.options import parse_write_options
from triolog.pipeline.write import produce_batches
from triolog.protocol.records import build_batch

IMPLEMENTATIONS = [pytest.param(False, id="pure"), pytest.param(True, id="compiled")]


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        deadline, count = time.monotonic() + 30, 0
        while count < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(200).items():
                out[tp.partition] += [(r.offset, r.value) for r in records]
                count += len(records)
        for tp, records in consumer.poll(300).items():  # a duplicate would show up here
            out[tp.partition] += [(r.offset, r.value) for r in records]
    return out


# -- settings (Kafka's postProcessAndValidateIdempotenceConfigs) ------------------------------------

def test_idempotence_is_on_by_default_with_five_requests_in_flight():
    config = ProducerConfig()
    assert config.enable_idempotence is True and config.max_in_flight_requests_per_connection == 5
    assert ProducerConfig(max_in_flight_requests_per_connection=3).enable_idempotence is True


@pytest.mark.parametrize("setting", [{"acks": 1}, {"acks": 0}, {"retries": 0},
                                     {"max_in_flight_requests_per_connection": 6}])
def test_a_conflicting_setting_turns_the_default_off_and_an_explicit_true_refuses_it(setting):
    config = ProducerConfig(**setting)
    assert config.enable_idempotence is False
    assert config.max_in_flight_requests_per_connection == setting.get("max_in_flight_requests_per_connection", 1)
    with pytest.raises(ValueError, match="enable_idempotence=True conflicts with"):
        ProducerConfig(enable_idempotence=True, **setting)


def test_sequences_wrap_as_kafkas_int32_sequences():
    assert increment_sequence(5, 10) == 15
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 5, 10) == 5


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_a_renumbered_batch_is_the_batch_encoded_with_its_new_numbers(compiled):
    """An epoch bump re-stamps an already encoded batch: header patched and CRC recomputed, the
    same bytes as encoding it afresh."""
    module = core.implementation("client.accumulator", compiled)
    from triolog.client.types import TopicPartition

    batch = module.ProducerBatch(TopicPartition("t", 0), 0.0)
    records = [(b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, ()) for i in range(3)]
    for key, value, stamp, headers in records:
        batch.add(key, value, stamp, headers, batch.record_size(key, value, stamp, headers))
    batch.set_producer_state(77, 0, 40)
    first = batch.encode(0, None)
    assert first == build_batch(records, producer_id=77, producer_epoch=0, base_sequence=40)
    batch.set_producer_state(77, 1, 0, True)
    assert batch.sequence_reset and (batch.producer_epoch, batch.base_sequence) == (1, 0)
    assert batch.encode(0, None) == build_batch(records, producer_id=77, producer_epoch=1, base_sequence=0)


def test_last_acked_sequence_only_moves_forward():
    """A late acknowledgement of an earlier batch does not move the partition's last
    acknowledged sequence back (it decides when an OUT_OF_ORDER answer means a real gap)."""
    from triolog.client.producer_core import IdempotentState
    from triolog.client.types import TopicPartition

    module = core.implementation("client.accumulator", False)
    tp = TopicPartition("t", 0)
    state = IdempotentState()
    state.set_producer_id(5, 0)
    batches = []
    for i in range(2):
        batch = module.ProducerBatch(tp, 0.0)
        batch.add(None, b"v%d" % i, 1, (), batch.record_size(None, b"v%d" % i, 1, ()))
        assert state.can_send(batch)
        batches.append(batch)
    state.acknowledged(batches[1])
    state.acknowledged(batches[0])
    assert state.partitions[tp].last_acked_sequence == 1


# -- against the real broker ---------------------------------------------------------------------

def test_batches_carry_the_producer_id_epoch_and_per_partition_sequences(bootstrap, admin, topic, raw_batches):
    admin.create_topics([NewTopic(topic, 2)])
    with Producer(bootstrap, linger_ms=0, batch_size=300) as producer:
        futures = [producer.send(topic, b"value-%03d" % i, partition=i % 2) for i in range(200)]
        producer.flush(30)
        producer_id = producer.metrics()["producer-id"]
    assert producer_id >= 0 and all(f.get(0).offset >= 0 for f in futures)
    for partition in range(2):
        batches = raw_batches(topic, partition)
        assert len(batches) > 5
        expected = 0
        for batch in batches:
            assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (producer_id, 0, expected)
            expected += len(batch.records)
        assert expected == 100


def test_a_batch_refused_for_good_gives_its_sequences_to_the_next_batch(bootstrap, admin, topic, raw_batches):
    """MESSAGE_TOO_LARGE fails a batch that already had its sequences, before any append: the
    batches after it take them (Kafka's adjustSequencesDueToFailedBatch), no epoch bump."""
    admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "1000"})])
    with Producer(bootstrap, linger_ms=0) as producer:
        assert producer.send(topic, b"small-1", partition=0).get(10).offset == 0
        with pytest.raises(MessageTooLargeError):
            producer.send(topic, b"x" * 5000, partition=0).get(10)
        assert producer.send(topic, b"small-2", partition=0).get(10).offset == 1
        assert producer.metrics()["epoch-bump-total"] == 0
    assert [(b.producer_epoch, b.base_sequence, [r.value for r in b.records]) for b in raw_batches(topic)] == [
        (0, 0, [b"small-1"]), (0, 1, [b"small-2"])]


class _DrivenProducer:
    """A ProducerCore driven by hand against the real broker: each request is written and
    answered for real; the test decides which answers the core sees and which it "loses"."""

    def __init__(self, bootstrap: str, **config) -> None:
        from triolog.client.connection import SyncConnection
        from triolog.client.ops import run_sync
        from triolog.client.producer_core import ProducerCore

        self._run_sync = run_sync
        self.core = ProducerCore(ProducerConfig(linger_ms=0, **config))
        self.conn = SyncConnection(bootstrap)
        run_sync(self.core.init_producer_id_op(), self.conn)

    def send(self, topic: str, value: bytes):
        record = self._run_sync(self.core.prepare_op(topic, value, None, (), 0, None), self.conn)
        return self.core.append(record)

    def write(self):
        """Drain the partition's ready batch and write its request: (operation, real response)."""
        batches = self.core.accumulator.drain(time.monotonic() + 3600, self.core.can_send)
        assert len(batches) == 1
        op = self.core.send_op(batches)
        call = next(op)
        return op, self.conn.call(call.request, call.timeout_s)

    def answer(self, sent) -> None:
        self._run_sync(sent[0], self.conn, sent[1])

    def lose(self, sent) -> None:
        from triolog.client.errors import ResponseLostError

        self._run_sync(sent[0], self.conn, None, ResponseLostError("lost on purpose"))

    def close(self) -> None:
        self.conn.close()


def _stored(raw_batches, topic):
    return [(b.producer_epoch, b.base_sequence, [r.value for r in b.records]) for b in raw_batches(topic)]


def test_a_batch_out_of_retries_after_lost_responses_never_gets_its_sequence_reused(
        bootstrap, admin, topic, raw_batches):
    """b1 and b2 appended, both responses lost; b1 runs out of retries (its second answer lost
    too). b1 may be in the log: b2 keeps its sequence (no epoch bump renumbering it from 0 under
    a new epoch, which the broker would store a second time) and gets its original offset."""
    admin.create_topics([NewTopic(topic, 1)])
    producer = _DrivenProducer(bootstrap, retries=1, retry_backoff_ms=1)
    try:
        f1, f2 = producer.send(topic, b"b1"), None
        first = producer.write()
        f2 = producer.send(topic, b"b2")
        second = producer.write()
        producer.lose(first)
        producer.lose(second)
        producer.lose(producer.write())  # b1's retry (a duplicate answer, lost): out of retries
        assert f1.done() and f1.exception() is not None
        producer.answer(producer.write())  # b2's retry
        assert f2.get(0).offset == 1
        f3 = producer.send(topic, b"b3")
        producer.answer(producer.write())
        assert f3.get(0).offset == 2
        assert producer.core.metrics()["epoch-bump-total"] == 0
    finally:
        producer.close()
    assert _stored(raw_batches, topic) == [(0, 0, [b"b1"]), (0, 1, [b"b2"]), (0, 2, [b"b3"])]


def test_a_definite_failure_does_not_renumber_an_earlier_batch_that_may_be_in_the_log(
        bootstrap, admin, topic, raw_batches):
    """b1 appended, its response lost (requeued); b2 in flight meanwhile refused for good
    (MESSAGE_TOO_LARGE). Only what comes after b2 may take its sequences: b1 is resent with its
    own numbers and answered as the duplicate it is."""
    admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "1000"})])
    producer = _DrivenProducer(bootstrap, retry_backoff_ms=1)
    try:
        f1 = producer.send(topic, b"b1")
        first = producer.write()
        f2 = producer.send(topic, b"x" * 5000)
        second = producer.write()
        producer.lose(first)
        producer.answer(second)
        with pytest.raises(MessageTooLargeError):
            f2.get(0)
        producer.answer(producer.write())  # b1's retry
        assert f1.get(0).offset == 0
        f3 = producer.send(topic, b"b3")
        producer.answer(producer.write())
        assert f3.get(0).offset == 1
    finally:
        producer.close()
    assert _stored(raw_batches, topic) == [(0, 0, [b"b1"]), (0, 1, [b"b3"])]


def test_an_unresolved_batch_not_in_the_log_is_closed_by_an_epoch_bump(bootstrap, admin, topic, raw_batches):
    """b1 fails after an ambiguous attempt but never reached the log (its request is not
    written): b2 keeps its numbers, is refused OUT_OF_ORDER_SEQUENCE_NUMBER at b1.last + 1, and
    only then the partition bumps its epoch and b2 starts again at sequence 0."""
    admin.create_topics([NewTopic(topic, 1)])
    producer = _DrivenProducer(bootstrap, retries=1, retry_backoff_ms=1)
    try:
        f1 = producer.send(topic, b"b1")
        for _attempt in range(2):  # its first try and its one retry
            batches = producer.core.accumulator.drain(time.monotonic() + 3600, producer.core.can_send)
            op = producer.core.send_op(batches)
            next(op)  # never written
            producer.lose((op, None))
        assert f1.exception() is not None
        f2 = producer.send(topic, b"b2")
        producer.answer(producer.write())  # OUT_OF_ORDER_SEQUENCE_NUMBER: bump requested, retried
        assert not f2.done()
        producer.answer(producer.write())
        assert f2.get(0).offset == 0
        assert producer.core.metrics()["epoch-bump-total"] == 1
    finally:
        producer.close()
    assert _stored(raw_batches, topic) == [(1, 0, [b"b2"])]


def test_without_idempotence_batches_carry_no_producer_id(bootstrap, admin, topic, raw_batches):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, enable_idempotence=False) as producer:
        producer.send(topic, b"x", partition=0).get(10)
        assert producer.metrics()["producer-id"] == -1
    (batch,) = raw_batches(topic)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)


def test_the_trio_producer_retries_lost_responses_and_stores_each_record_once(broker, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    values = [(i % 3, b"p%d-%05d" % (i % 3, i // 3)) for i in range(3000)]

    async def main(port: int):
        async with AsyncProducer(f"127.0.0.1:{port}", linger_ms=1, batch_size=512, retry_backoff_ms=10) as producer:
            futures = [await producer.send(topic, value, partition=partition) for partition, value in values]
            await producer.flush()
            return [await future for future in futures], producer.metrics()

    with FaultProxy(broker.port, drop_every=3) as proxy:
        metadata, counters = trio.run(main, proxy.port)
        assert proxy.produce_responses_dropped >= 8
    assert counters["batch-retry-total"] >= proxy.produce_responses_dropped
    log = _consume(f"127.0.0.1:{broker.port}", topic, 3, len(values))
    for partition in range(3):
        assert log[partition] == list(enumerate(v for p, v in values if p == partition))
    # Every future has the record's original offset, also when its retry was a duplicate.
    positions = defaultdict(int)
    for (partition, _), md in zip(values, metadata):
        assert (md.partition, md.offset) == (partition, positions[partition])
        positions[partition] += 1


def test_the_spark_sink_option_turns_idempotence_off_or_insists_on_it():
    base = {"triolog.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    assert parse_write_options(base).client == {}
    assert parse_write_options({**base, "triolog.enable.idempotence": "false"}).client == {"enable_idempotence": False}
    assert parse_write_options({**base, "triolog.enable.idempotence": "true"}).client == {"enable_idempotence": True}


def test_the_spark_sink_writes_each_row_once_despite_lost_responses(broker, admin, topic):
    """pipeline/write.py's producer is idempotent by default: a task's retries after a lost
    response store nothing twice."""
    admin.create_topics([NewTopic(topic, 2)])
    rows = 2000
    batches = [pa.RecordBatch.from_pydict({
        "value": [b"row-%05d" % i for i in range(start, start + 500)],
        "partition": [i % 2 for i in range(start, start + 500)],
    }) for start in range(0, rows, 500)]
    with FaultProxy(broker.port, drop_every=3) as proxy:
        options = parse_write_options({"triolog.bootstrap.servers": f"127.0.0.1:{proxy.port}", "topic": topic,
                                       "triolog.batch.size": "256", "triolog.retry.backoff.ms": "10"})
        assert produce_batches(options, iter(batches)) == rows
        assert proxy.produce_responses_dropped >= 5
    log = _consume(f"127.0.0.1:{broker.port}", topic, 2, rows)
    for partition in range(2):
        assert log[partition] == list(enumerate(b"row-%05d" % i for i in range(rows) if i % 2 == partition))


def test_a_producer_the_broker_forgot_bumps_its_epoch_and_starts_again_at_sequence_0(tmp_path):
    """The broker drops a producer whose last batch is older than producer.id.expiration.ms
    (here when it loads its snapshot after a restart): the next batch, sequence > 0, gets
    UNKNOWN_PRODUCER_ID; Kafka's client bumps its epoch locally and renumbers from 0."""
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        with Producer(bootstrap, linger_ms=0, retry_backoff_ms=20, request_timeout_ms=5000) as producer:
            old = int(time.time() * 1000) - 3 * 86_400_000  # older than the default expiration (1 day)
            first = producer.send("forgotten", b"first", partition=0, timestamp_ms=old)
            assert first.get(10).offset == 0
            broker.stop()
            broker.start()  # the snapshot is loaded, the producer found expired
            second = producer.send("forgotten", b"second", partition=0)
            assert second.get(30).offset == 1
            counters = producer.metrics()
        assert counters["epoch-bump-total"] == 1
        wire = broker.client()
        from triolog.protocol import messages as m
        from triolog.protocol.records import iter_batches

        response = wire.call(m.FetchRequest(id=wire.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=(
            m.FetchTopic(name="forgotten", partitions=(
                m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),)))
        stored = list(iter_batches(response["topics"][0]["partitions"][0]["records"]))
        assert [(b.producer_epoch, b.base_sequence, [r.value for r in b.records]) for b in stored] == [
            (0, 0, [b"first"]), (1, 0, [b"second"])]
    finally:
        broker.stop()
