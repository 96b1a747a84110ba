"""The cleaner's compiled core against its pure-Python twin, in one process (protocol/core.py).

Both implementations of cleaner_core.py run the same rounds over the same random log, written
as segment files the way a Kafka broker leaves them: repeating keys, tombstones, null keys,
transactions ending in COMMIT or ABORT and some still open, control batches, batches already
carrying a delete horizon (past or future), log-append-time batches, timestamps whose deltas take
one to ten bytes, headers, every compression codec; and an offset map small enough to fill, so
the dirty section is covered in several rounds and pass 2 hashes keys of the clean section.
Every round must end identically: the same map buffer (slot for slot), the same counters and
checkpoint, and byte-identical cleaned segments. The compiled path is checked both with
libcrypto's MD5 and with its ``_md5`` fallback.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.cleaner.cleaner import CORE_MODULE, Cleaner
from triolog.broker.storage.cleaner.log_cleaner import plan_job
from triolog.broker.storage.cleaner.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap
from triolog.broker.storage.log import Log
from triolog.protocol import core
from triolog.protocol.record_batch import DELETE_HORIZON_FLAG, CompressionType, TimestampType, compute_crc
from triolog.protocol.records import ControlRecordType, Record, encode_batch, encode_end_txn_marker, iter_batches

from .helpers import compact_config
from .test_offset_map import kafka_probe_slot

PURE = core.implementation(CORE_MODULE, compiled=False)
needs_compiled = pytest.mark.skipif(not core.compiled_available(CORE_MODULE),
                                    reason="the compiled cleaner core is not built (python setup.py build_ext --inplace)")
NOW = 1_700_000_000_000
KEYS = [b"k%d" % i for i in range(10)] + [b"long-" + b"x" * 300]  # a key with a two-byte length
CODECS = list(CompressionType)


def compiled():
    return core.implementation(CORE_MODULE, compiled=True)


def _with_horizon(batch: bytes, horizon: int) -> bytes:
    """The batch as a cleaner leaves it once it stamped a delete horizon (its base timestamp)."""
    out = bytearray(batch)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, attributes | DELETE_HORIZON_FLAG)
    struct.pack_into(">q", out, 27, horizon)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


record_strategy = st.tuples(
    st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.none()),  # null keys now and then
    st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=60, max_size=200)),  # None: tombstone
    st.sampled_from([0, 0, 1, -5, 100, 20_000, 2**40, -(2**50)]),  # timestamp delta: 1..7-byte varints
    st.booleans(),  # a header
)
step_strategy = st.one_of(
    st.tuples(st.just("data"), st.lists(record_strategy, min_size=1, max_size=8), st.sampled_from([-1, -1, 7, 8]),
              st.booleans(), st.sampled_from(CODECS), st.sampled_from([None, None, NOW - 10, NOW + 10**6]),
              st.booleans()),
    st.tuples(st.just("end"), st.sampled_from([7, 8]), st.sampled_from([ControlRecordType.COMMIT,
                                                                         ControlRecordType.ABORT])),
    st.tuples(st.just("roll")),
)


def write_log(directory: Path, steps) -> Log:
    """Segment files of the steps' batches at consecutive offsets, opened (recovered) as a Log."""
    segments: list[list[bytes]] = [[]]
    offset = 0
    sequence: dict[int, int] = {}
    for step in steps:
        if step[0] == "roll":
            if segments[-1]:
                segments.append([])
            continue
        if step[0] == "end":
            _, producer, marker = step
            segments[-1].append(encode_end_txn_marker(producer, 0, marker, 0, offset, NOW))
            offset += 1
            continue
        _, items, producer, transactional, codec, horizon, log_append_time = step
        records = [Record(offset + i, NOW + delta, key, value, (("h", b"v"),) if header else ())
                   for i, (key, value, delta, header) in enumerate(items)]
        seq = -1
        if producer >= 0:
            seq = sequence.get(producer, 0)
            sequence[producer] = seq + len(records)
        batch = encode_batch(records, base_offset=offset, compression=codec, producer_id=producer,
                             producer_epoch=0 if producer >= 0 else -1, base_sequence=seq,
                             is_transactional=transactional and producer >= 0,
                             timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time
                             else TimestampType.CREATE_TIME,
                             max_timestamp=NOW + 5 if log_append_time else None)
        segments[-1].append(_with_horizon(batch, horizon) if horizon is not None else batch)
        offset += len(records)
    directory.mkdir(parents=True)
    for batches in segments:
        if batches:
            base = next(iter_batches(batches[0])).base_offset
            (directory / f"{base:020d}.log").write_bytes(b"".join(batches))
    return Log.open(directory, compact_config(segment_bytes=4096), clock=ManualClock(NOW))


def clean_rounds(log: Log, implementation, map_slots: int, rounds: int = 4) -> list:
    """Up to ``rounds`` rounds over the unchanged log, each from where the previous one's map
    ended; what each round produced, timings left out."""
    cleaner = Cleaner(map_slots * BYTES_PER_ENTRY, 0.75, core_module=implementation, clock=ManualClock(NOW))
    first_dirty = log.log_start_offset
    out = []
    for _ in range(rounds):
        job = plan_job(log, SimpleNamespace(first_dirty_offset=first_dirty, first_uncleanable_offset=log.log_end_offset),
                       NOW, 4096)
        groups = []

        def on_group(group, directory=Path(log.directory)):
            cleaned = directory / f"{group.cleaned_base_offset:020d}.log.cleaned"
            groups.append((group, cleaned.read_bytes()))
            for path in directory.glob("*.cleaned"):
                path.unlink()

        end, stats = cleaner.clean(job, on_group)
        offset_map = cleaner.offset_map
        out.append({
            "end": end, "groups": groups, "map": bytes(offset_map._buf), "entries": offset_map.entries,
            "collisions": offset_map.collisions, "latest": offset_map.latest_offset, "bitmap": bytes(cleaner._bitmap),
            "stats": (stats.map_records_read, stats.map_bytes_read, stats.records_read, stats.bytes_read,
                      stats.records_kept, stats.bytes_written, stats.invalid_records, stats.buffer_utilization),
        })
        if end >= log.log_end_offset:
            break
        first_dirty = end
    return out


@pytest.fixture(params=["libcrypto", "_md5"])
def md5_route(request, monkeypatch):
    """The compiled loops hash with libcrypto's MD5 when they find it, else with ``_md5``: both."""
    if not core.compiled_available(CORE_MODULE):
        pytest.skip("the compiled cleaner core is not built")
    module = compiled()
    if request.param == "libcrypto":
        if not module._md5_function():
            pytest.skip("no libcrypto with MD5 on this machine")
    else:
        monkeypatch.setattr(module, "_md5_address", 0)
    return request.param


@needs_compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step_strategy, min_size=1, max_size=30), map_slots=st.sampled_from([4, 9, 64, 4096]))
def test_compiled_and_pure_clean_identically(tmp_path_factory, md5_route, steps, map_slots):
    directory = tmp_path_factory.mktemp("log") / "t-0"
    log = write_log(directory, steps)
    try:
        assert clean_rounds(log, compiled(), map_slots) == clean_rounds(log, PURE, map_slots)
    finally:
        log.close()


def test_the_property_sees_what_it_claims(tmp_path):
    """One fixed log exercising every rule the property is about: the map fills up (several
    rounds), records are dropped and kept, tombstones, an aborted transaction, a null key, a
    delete horizon in the past; so the equality above compares real decisions."""
    steps = [("data", [(b"k1", b"a", 0, False), (b"k2", None, 100, True), (None, b"n", 0, False)], -1, False,
              CompressionType.NONE, None, False),
             ("data", [(b"k1", b"b", 20_000, False), (b"k3", b"c", 0, False)], 7, True, CompressionType.GZIP,
              None, False),
             ("end", 7, ControlRecordType.ABORT),
             ("roll",),
             ("data", [(b"k%d" % i, b"v", 0, False) for i in range(6)], -1, False, CompressionType.LZ4, NOW - 10,
              False),
             ("data", [(b"k1", None, 1, False), (b"k2", b"d", 0, False)], -1, False, CompressionType.NONE, None,
              True)]
    log = write_log(tmp_path / "t-0", steps)
    try:
        rounds = clean_rounds(log, PURE, map_slots=5)
        assert len(rounds) >= 2  # the map filled up
        read, kept, invalid = (sum(r["stats"][i] for r in rounds) for i in (2, 4, 6))
        assert 0 < kept < read and invalid >= 1
        if core.compiled_available(CORE_MODULE):
            assert clean_rounds(log, compiled(), map_slots=5) == rounds
    finally:
        log.close()


@needs_compiled
@given(digest=st.binary(min_size=16, max_size=16), attempt=st.integers(0, 40), slots=st.integers(1, 10_000))
def test_probe_sequence_is_kafkas_in_both(digest, attempt, slots):
    h0, h1 = struct.unpack(">qq", digest)
    expected = kafka_probe_slot(digest, attempt, slots)
    assert PURE.probe_slot(h0, h1, attempt, slots) == expected
    assert compiled().probe_slot(h0, h1, attempt, slots) == expected


@needs_compiled
@settings(max_examples=50, deadline=None)
@given(keys=st.lists(st.binary(max_size=20), min_size=1, max_size=60), slots=st.integers(60, 80))
def test_a_crowded_map_probes_identically(keys, slots):
    """Many keys in few slots: most puts take Kafka's probe sequence, in both implementations."""
    maps = []
    for implementation in (PURE, compiled()):
        offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
        data = encode_batch([Record(i, NOW, key, b"v") for i, key in enumerate(keys)])[61:]
        bitmap = bytearray(len(keys) // 8 + 1)
        result = implementation.map_records(bytes(data), len(keys), 0, 0, offset_map._words, slots, 0, slots,
                                            bitmap, 0, len(keys))
        assert not result[0]
        maps.append((result, bytes(offset_map._buf), bytes(bitmap)))
        for i, key in enumerate(keys):  # the map answers as SkimpyOffsetMap.get does
            assert offset_map.get(key) == max(j for j, k in enumerate(keys) if k == key)
    assert maps[0] == maps[1]
