"""The accumulator's batching rules and light futures, on the pure object (the broker tests show
them end to end), for both implementations: the pure-Python module and its compiled twin."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triolog.client.types import RecordMetadata, TopicPartition
from triolog import core
from triolog.protocol.records import build_batch

TP = TopicPartition("t", 0)
NAME = "client.accumulator"

IMPLEMENTATIONS = [pytest.param(False, id="pure")]
if core.compiled_available(NAME):
    IMPLEMENTATIONS.append(pytest.param(True, id="compiled"))


@pytest.fixture(params=IMPLEMENTATIONS)
def acc_module(request):
    return core.implementation(NAME, request.param)


records = st.lists(
    st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=3000),
              st.integers(0, 2**41),
              st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)),
    min_size=1, max_size=20)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@given(values=records)
def test_accumulator_batch_size_estimate_is_the_exact_encoded_size(compiled, values):
    module = core.implementation(NAME, compiled)
    batch = module.ProducerBatch(TP, 0.0)
    for key, value, timestamp, headers in values:
        headers = tuple(headers)
        batch.add(key, value, timestamp, headers, batch.record_size(key, value, timestamp, headers))
    assert batch.size == len(build_batch([(k, v, t, tuple(h)) for k, v, t, h in values]))


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _append(acc, wakes, n, now=0.0, size=10, partition=0):
    out = []
    for _ in range(n):
        before = wakes.count
        acc.append("t", partition, 1, None, b"x" * size, 1000, (), now)
        out.append(wakes.count > before)
    return out


def test_accumulator_closes_a_batch_at_batch_size_and_starts_another(acc_module):
    wakes = Wakes()
    acc = acc_module.RecordAccumulator(batch_size=200, linger_s=60, wakeup=wakes)
    _append(acc, wakes, 20)
    batches = []
    while drained := acc.drain(0.0):  # closed batches are ready at once, one per partition per drain
        batches += drained
    # a 10-byte keyless record takes 17 bytes: 61 + 8 * 17 = 197 <= 200 < 61 + 9 * 17
    assert [len(b.records) for b in batches] == [8, 8]
    assert all(b.size == 197 for b in batches)
    assert [len(b.records) for b in acc.drain(60.0)] == [4]  # the open batch waited for linger


def test_accumulator_holds_an_open_batch_until_linger_or_flush(acc_module):
    wakes = Wakes()
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=0.5, wakeup=wakes)
    assert _append(acc, wakes, 3, now=10.0) == [True, False, False]  # only the new batch wakes the sender
    assert acc.drain(10.4) == [] and acc.next_deadline() == 10.5
    acc.begin_flush()
    assert [len(b.records) for b in acc.drain(10.4)] == [3]
    acc.end_flush()


def test_accumulator_requeued_batch_goes_back_ahead_of_newer_ones(acc_module):
    wakes = Wakes()
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=0, wakeup=wakes)
    _append(acc, wakes, 1)
    (first,) = acc.drain(0.0)
    _append(acc, wakes, 1)
    acc.requeue(first, retry_at=5.0)
    assert acc.drain(1.0) == []  # the head is backing off, and the newer batch must not overtake it
    assert acc.drain(5.0) == [first]
    assert first.attempts == 1


def test_accumulator_keyless_records_move_partition_when_a_new_batch_starts(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=300, linger_s=60)
    futures = [acc.append("t", None, 4, None, b"y" * 20, 1000, (), 0.0) for _ in range(40)]
    sequence = [(f.batch.tp.partition, id(f.batch)) for f in futures]
    runs = [sequence[0]]
    for item in sequence[1:]:
        if item != runs[-1]:
            runs.append(item)
    assert len(runs) == len({batch for _, batch in runs})  # each batch's records are contiguous
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))  # and the next batch is elsewhere
    assert all(sequence.count(run) == sequence.count(runs[0]) for run in runs[:-1])  # full batches
    drained = []
    while batch_list := acc.drain(60.0):
        drained += batch_list
    assert sorted(id(b) for b in drained) == sorted({id(f.batch) for f in futures})


def test_futures_are_handles_whose_metadata_is_built_on_demand(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=0)
    futures = [acc.append("t", 2, 3, None, b"v", 1000 + i, (), 0.0) for i in range(3)]
    assert not any(f.done() for f in futures)
    with pytest.raises(RuntimeError):
        futures[0].result()
    seen = []
    futures[1].add_done_callback(lambda f: seen.append(f.result()))
    futures[1].add_done_callback(lambda f: 1 / 0)  # a failing callback stops nothing
    futures[2].add_done_callback(lambda f: seen.append(f.index))
    (batch,) = acc.drain(0.0)
    assert acc.finish(batch) and not acc.finish(batch)
    batch.complete(100, -1)
    assert [f.result() for f in futures] == [RecordMetadata("t", 2, 100 + i, 1000 + i) for i in range(3)]
    assert seen == [RecordMetadata("t", 2, 101, 1001), 2]
    assert futures[0].get(0) == futures[0].result() and futures[0].exception() is None
    late = []
    futures[0].add_done_callback(late.append)  # already done: called at once
    assert late == [futures[0]]
    batch.complete(999, -1)  # a second outcome is ignored
    assert futures[2].result().offset == 102


def test_futures_report_log_append_time_and_failures(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=0)
    ok = acc.append("t", 0, 1, None, b"v", 5, (), 0.0)
    (batch,) = acc.drain(0.0)
    batch.complete(7, 123)
    assert ok.result() == RecordMetadata("t", 0, 7, 123)
    bad = acc.append("t", 0, 1, None, b"v", 5, (), 0.0)
    (batch,) = acc.drain(0.0)
    error = ValueError("refused")
    batch.fail(error)
    assert bad.done() and bad.exception() is error
    with pytest.raises(ValueError, match="refused"):
        bad.get(0)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@given(sizes=st.lists(st.integers(0, 400), min_size=1, max_size=60), keys=st.booleans(),
       batch_size=st.integers(100, 2000), partition=st.sampled_from([None, 1]))
def test_append_many_batches_exactly_as_appending_one_by_one(compiled, sizes, keys, batch_size, partition):
    module = core.implementation(NAME, compiled)
    values = [b"x" * n for n in sizes]
    key_list = [str(i).encode() for i in range(len(sizes))] if keys else None
    one = module.RecordAccumulator(batch_size=batch_size, linger_s=60, rng=random.Random(7))
    many = module.RecordAccumulator(batch_size=batch_size, linger_s=60, rng=random.Random(7))
    from triolog.client.partitioner import partition_for_key

    for i, value in enumerate(values):
        p = partition if partition is not None or key_list is None else partition_for_key(key_list[i], 3)
        one.append("t", p, 3, None if key_list is None else key_list[i], value, 1000, (), 0.0)
    futures = many.append_many("t", values, key_list, None, partition, [1000] * len(values), 3, 0.0)
    assert len(futures) == len(values)

    def layout(acc):
        out = []
        while drained := acc.drain(60.0):
            out += [(b.tp, [r[:3] for r in b.records], b.size) for b in drained]
        return out

    many_batches = {id(b): b for b in futures.batches()}
    assert layout(one) == layout(many)
    assert many.buffered_bytes == one.buffered_bytes
    for offset, batch in enumerate(many_batches.values()):
        batch.complete(offset * 1000, -1)
    results = futures.get(0)
    assert [r.topic for r in results] == ["t"] * len(values)
    assert [futures[i].result() for i in range(len(values))] == results
    assert futures.errors() == [] and futures.exception() is None


def test_append_many_reports_failures_per_record(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=200, linger_s=60)
    futures = acc.append_many("t", [b"x" * 10] * 12, None, None, 0, None, 1, 0.0)
    called = []
    futures.add_done_callback(called.append)
    first, second = futures.batches()
    first.complete(0, -1)
    assert not futures.done() and called == []
    error = RuntimeError("lost")
    second.fail(error)
    assert futures.done() and called == [futures]
    assert futures.errors() == [(i, error) for i in range(8, 12)]
    assert futures.exception() is error
    assert futures[0].result().offset == 0 and futures[-1].exception() is error
    with pytest.raises(RuntimeError, match="lost"):
        futures.get(0)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@given(calls=st.lists(st.tuples(st.sampled_from(["t", "u", ""]), st.none() | st.binary(max_size=50),
                                st.none() | st.binary(max_size=5), st.sampled_from([None, 0, 1, -1, True]),
                                st.sampled_from([None, 5, 2.5])), max_size=30))
def test_try_append_takes_the_common_case_and_leaves_the_rest_to_send(compiled, calls):
    """What try_append queues is what append would; what it refuses (None) is left to send()'s
    full path, which checks and reports it."""
    module = core.implementation(NAME, compiled)
    acc = module.RecordAccumulator(batch_size=500, linger_s=60, rng=random.Random(1))
    ref = module.RecordAccumulator(batch_size=500, linger_s=60, rng=random.Random(1))
    acc.configure_fast_path(True, 1 << 30, 1)
    acc.learn("t", 2, float("inf"))
    from triolog.client.partitioner import partition_for_key

    for topic, value, key, partition, timestamp in calls:
        future = acc.try_append(topic, value, key, (), partition, timestamp)
        # Only a topic whose metadata is known, also for a given partition (Kafka's waitOnMetadata).
        common = topic == "t" and type(partition) is not bool \
            and (partition is None or partition >= 0) and type(timestamp) is not float
        assert (future is not None) == bool(common)
        if future is not None:
            p = partition
            if p is None and key is not None:
                p = partition_for_key(key, 2)
            ref.append(topic, p, 2, key, value, future.batch.records[future.index][2], (), 0.0)
            assert future.batch.records[future.index][:2] == (key, value)
    assert acc.buffered_bytes == ref.buffered_bytes
    layout = [(b.tp, [r[:2] for r in b.records]) for b in acc.take_all()]
    assert layout == [(b.tp, [r[:2] for r in b.records]) for b in ref.take_all()]


def test_try_append_leaves_serializers_headers_and_a_full_buffer_to_send(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=60)
    assert acc.try_append("t", b"v", None, (), 0, None) is None  # fast path not enabled (serializers)
    acc.configure_fast_path(True, 300, 1)
    assert acc.try_append("t", b"v", None, (("h", b"1"),), 0, None) is None
    assert acc.try_append("t", "text", None, (), 0, None) is None
    assert acc.try_append("t", b"v", None, (), None, None) is None  # partition count unknown
    assert acc.try_append("t", b"v", None, (), 0, None) is None  # also for a given partition
    acc.learn("t", 1, float("inf"))
    assert acc.try_append("t", b"v" * 200, None, (), 0, None) is not None  # an empty buffer takes anything
    assert acc.try_append("t", b"v" * 200, None, (), 0, None) is None  # now it would pass buffer_memory
    acc.learn("t", 1, -1.0)  # expired
    assert acc.try_append("t", b"v", None, (), None, None) is None


def test_bound_send_takes_the_fast_path_or_hands_the_same_arguments_to_the_slow_send(acc_module):
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=60)
    slow_calls = []

    def slow(*args):
        slow_calls.append(args)
        return "slow"

    send = acc.bind_send(slow)
    assert send("t", b"v", partition=0) == "slow"  # fast path not enabled yet (serializers)
    acc.configure_fast_path(True, 1 << 20, 1)
    acc.learn("t", 1, float("inf"))
    future = send("t", b"v", partition=0, timestamp_ms=7)
    assert future != "slow" and future.batch.records[future.index] == (None, b"v", 7, ())
    before = int(time.time() * 1000)
    stamped = send("t", b"w", None, (), 0)
    assert before <= stamped.batch.records[stamped.index][2] <= int(time.time() * 1000)
    assert send("t", b"v", b"k", (("h", b"1"),), 0, 9) == "slow"
    acc.configure_fast_path(False, 1 << 20, 1)  # what a closed producer does
    assert send("t", b"x", partition=0) == "slow"
    assert slow_calls == [("t", b"v", None, (), 0, None), ("t", b"v", b"k", (("h", b"1"),), 0, 9),
                          ("t", b"x", None, (), 0, None)]


def test_an_append_wakes_the_sender_by_its_own_decision_not_the_next_appends():
    """Whether an append wakes the sender is read under the accumulator's lock. Read after the
    lock is released, another thread's append in between (here run by the lock's release, the
    moment a thread switch can happen) hands its decision over: the full batch's wake is lost and
    the batch waits for linger. Pure module only: the compiled twin's lock is not reachable (it
    also never lets go of the GIL there)."""
    import threading

    module = core.implementation(NAME, False)
    wakes = Wakes()
    acc = module.RecordAccumulator(batch_size=1000, linger_s=60.0, wakeup=wakes)

    class SwitchOnRelease:
        """The accumulator's lock; on one release, another thread's small append runs first."""

        def __init__(self) -> None:
            self.lock = threading.RLock()
            self.interleave = False

        def __enter__(self):
            return self.lock.__enter__()

        def __exit__(self, *exc_info):
            self.lock.__exit__(*exc_info)
            if self.interleave:
                self.interleave = False
                acc.append("t", 1, 2, None, b"y", 1000, (), 0.0)  # joins partition 1's open batch: no wake

    acc.append("t", 1, 2, None, b"y", 1000, (), 0.0)  # partition 1 has an open batch
    acc._lock = SwitchOnRelease()
    before = wakes.count
    acc._lock.interleave = True
    acc.append("t", 0, 2, None, b"x" * 2000, 1000, (), 0.0)  # a new batch, full at once: must wake
    assert wakes.count - before == 1


def test_a_settled_batch_keeps_only_timestamps_not_the_records_data(acc_module):
    """Kept futures keep their batch: after the acknowledgement it must not pin the keys, values
    and encoded bytes (buffer_memory no longer counts them)."""
    acc = acc_module.RecordAccumulator(batch_size=10_000, linger_s=0.0)
    futures = [acc.append("t", 0, 1, b"k", b"v" * 1000, 1000 + i, (), 0.0) for i in range(3)]
    (batch,) = acc.drain(1.0)
    batch.encode(0, None)
    batch.complete(40, -1)
    assert batch.records == [1000, 1001, 1002]
    assert [f.get() for f in futures] == [RecordMetadata("t", 0, 40 + i, 1000 + i) for i in range(3)]
