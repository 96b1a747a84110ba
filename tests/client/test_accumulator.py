"""The accumulator's batching rules, on the pure object (the broker tests show them end to end)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from triolog.client.accumulator import ProducerBatch, RecordAccumulator, RecordFuture
from triolog.client.types import TopicPartition
from triolog.protocol.records import build_batch

TP = TopicPartition("t", 0)

records = st.lists(
    st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=3000),
              st.integers(0, 2**41),
              st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)),
    min_size=1, max_size=20)


@given(records)
def test_accumulator_batch_size_estimate_is_the_exact_encoded_size(values):
    batch = ProducerBatch(TP, 0.0)
    for key, value, timestamp, headers in values:
        headers = tuple(headers)
        batch.add(key, value, timestamp, headers, RecordFuture(), batch.record_size(key, value, timestamp, headers))
    assert batch.size == len(build_batch([(k, v, t, tuple(h)) for k, v, t, h in values]))


def _append(acc, n, now=0.0, size=10, partition=0):
    wakes = [acc.append("t", partition, 1, None, b"x" * size, 1000, (), RecordFuture(), now) for _ in range(n)]
    return wakes


def test_accumulator_closes_a_batch_at_batch_size_and_starts_another():
    acc = RecordAccumulator(batch_size=200, linger_s=60)
    _append(acc, 20)
    batches = []
    while drained := acc.drain(0.0):  # closed batches are ready at once, one per partition per drain
        batches += drained
    # a 10-byte keyless record takes 17 bytes: 61 + 8 * 17 = 197 <= 200 < 61 + 9 * 17
    assert [len(b.records) for b in batches] == [8, 8]
    assert all(b.size == 197 for b in batches)
    assert [len(b.records) for b in acc.drain(60.0)] == [4]  # the open batch waited for linger


def test_accumulator_holds_an_open_batch_until_linger_or_flush():
    acc = RecordAccumulator(batch_size=10_000, linger_s=0.5)
    assert _append(acc, 3, now=10.0) == [True, False, False]  # only the new batch wakes the sender
    assert acc.drain(10.4) == [] and acc.next_deadline() == 10.5
    acc.begin_flush()
    assert [len(b.records) for b in acc.drain(10.4)] == [3]
    acc.end_flush()


def test_accumulator_requeued_batch_goes_back_ahead_of_newer_ones():
    acc = RecordAccumulator(batch_size=10_000, linger_s=0)
    _append(acc, 1)
    (first,) = acc.drain(0.0)
    _append(acc, 1)
    acc.requeue(first, retry_at=5.0)
    assert acc.drain(1.0) == []  # the head is backing off, and the newer batch must not overtake it
    assert acc.drain(5.0) == [first]
    assert first.attempts == 1


def test_accumulator_keyless_records_move_partition_when_a_new_batch_starts():
    acc = RecordAccumulator(batch_size=300, linger_s=60)
    futures = [RecordFuture() for _ in range(40)]
    for future in futures:
        acc.append("t", None, 4, None, b"y" * 20, 1000, (), future, 0.0)
    partition_of = {}
    while drained := acc.drain(60.0):
        for batch in drained:
            partition_of.update({id(f): (batch.tp.partition, id(batch)) for f in batch.futures})
    sequence = [partition_of[id(f)] for f in futures]
    runs = [sequence[0]]
    for item in sequence[1:]:
        if item != runs[-1]:
            runs.append(item)
    assert len(runs) == len({batch for _, batch in runs})  # each batch's records are contiguous
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))  # and the next batch is elsewhere
    assert all(sequence.count(run) == sequence.count(runs[0]) for run in runs[:-1])  # full batches
