"""The cleaner's compiled core against its pure-Python twin, in one process (triolog/core.py).

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
from triolog import core
from triolog.protocol.errors import CorruptRecordError
from triolog.protocol.record_batch import DELETE_HORIZON_FLAG, CompressionType, TimestampType, compute_crc
from triolog.protocol.records import ControlRecordType, Record, encode_batch, encode_end_txn_marker, iter_batches

from .helpers import compact_config
from .test_offset_map import kafka_probe_slot

PURE = core.implementation(CORE_MODULE, compiled=False)
needs_compiled = pytest.mark.skipif(not core.compiled_available(CORE_MODULE),
                                    reason="the compiled cleaner core is not built (python setup.py build_ext --inplace)")
NOW = 1_700_000_000_000
MAX_BASE = 2**63 - 1 - 2**31  # the largest base offset the cores take (cleaner_core._MAX_BASE)
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


# -- corrupt records ---------------------------------------------------------------------------
# The cleaner does not re-check a batch's CRC (nor does Kafka's), so bit rot on disk reaches both
# passes. On any bytes the two implementations must agree: the same map and counters, or the same
# error, message included; and no read outside the batch's bytes (the compiled loops hash keys
# through a C pointer: before the checks a negative record length sent it before the buffer).

corrupt_record_strategy = st.tuples(
    st.one_of(st.sampled_from(KEYS), st.none(), st.binary(max_size=8)),
    st.one_of(st.none(), st.binary(max_size=8), st.just(b"v" * 70), st.just(b"w" * 8200)),  # 1-, 2-, 3-byte lengths
    st.sampled_from([0, 1, -5, 100, 20_000, 2**40]),
    st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=70)), max_size=2),
)


def _outcome(function, *args):
    try:
        return ("ok", function(*args))
    except Exception as exc:  # the comparison is the point: any exception, same type and message
        return ("raised", type(exc), str(exc))


def _corrupted(data, payload: bytes) -> bytes:
    """``payload`` with one to three random edits: bit flips, deletions, insertions (runs of
    0xff among them: long varints), or cut short."""
    out = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        position = data.draw(st.integers(0, len(out)), label="position")
        edit = data.draw(st.sampled_from(["flip", "flip", "delete", "insert", "truncate"]), label="edit")
        if edit == "flip" and position < len(out):
            out[position] ^= data.draw(st.integers(1, 255), label="xor")
        elif edit == "delete":
            del out[position:position + data.draw(st.integers(1, 3), label="length")]
        elif edit == "insert":
            out[position:position] = data.draw(st.binary(min_size=1, max_size=3) | st.just(b"\xff" * 11),
                                               label="inserted")
        elif edit == "truncate":
            del out[position:]
    return bytes(out)


def _map_outcome(implementation, payload, count, base, start, slots, entries_limit, bit_limit):
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    bitmap = bytearray(bit_limit // 8 + 1)
    result = _outcome(implementation.map_records, payload, count, base, start, offset_map._words, slots, 0,
                      entries_limit, bitmap, base, bit_limit)
    if result[0] == "raised":
        return result
    return result + (bytes(offset_map._buf), bytes(bitmap))


def _filter_outcome(implementation, payload, count, base, latest, retain_deletes, map_buffer, slots, bitmap,
                    bit_limit):
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    offset_map._buf[:] = map_buffer
    result = _outcome(implementation.filter_records, payload, count, base, latest, retain_deletes,
                      offset_map._words, slots, bitmap, base, bit_limit)
    if result[0] == "raised":
        return result
    spans, kept, *rest = result[1]
    rebuilt = ()
    if kept:  # the cleaner rebuilds a batch only when it keeps a record
        rebuilt = tuple(_outcome(implementation.rebuild_records, payload, spans, kept, NOW, new_base, append_time,
                                 NOW + 5)
                        for new_base, append_time in ((NOW, False), (NOW - 3000, False), (NOW - 3000, True)))
    return "ok", list(spans[:4 * kept]), kept, tuple(rest), rebuilt


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(corrupt_record_strategy, min_size=1, max_size=10), slots=st.sampled_from([3, 7, 64]),
       data=st.data())
def test_compiled_and_pure_passes_agree_on_corrupt_records(md5_route, items, slots, data):
    records = [Record(i, NOW + delta, key, value, tuple(headers))
               for i, (key, value, delta, headers) in enumerate(items)]
    batch = encode_batch(records)
    payload, count = batch[61:], len(records)
    corrupt = _corrupted(data, payload)
    # base offsets at the edges: past _MAX_BASE base + delta would leave int64 (C wraps, Python not)
    base = data.draw(st.sampled_from([0, 0, 0, 2**40, MAX_BASE, MAX_BASE + 1, 2**63 - 1, -1]), label="base")
    start = min(base + data.draw(st.sampled_from([0, 0, 2]), label="start"), 2**63 - 1)  # the caller's: int64
    entries_limit = data.draw(st.sampled_from([slots, 2]), label="entries limit")
    bit_limit = data.draw(st.sampled_from([0, count, 4]), label="bit limit")

    expected = _map_outcome(PURE, corrupt, count, base, start, slots, entries_limit, bit_limit)
    assert _map_outcome(compiled(), corrupt, count, base, start, slots, entries_limit, bit_limit) == expected

    # pass 2 against the map the intact batch gives (pass 1 over the corrupt one may have raised)
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    bitmap = bytearray(count // 8 + 1)
    if 0 <= base <= MAX_BASE:
        PURE.map_records(payload, count, base, base, offset_map._words, slots, 0, slots, bitmap, base, bit_limit)
    latest = min(base + data.draw(st.sampled_from([count - 1, count // 2, -1]), label="latest"), 2**63 - 1)
    retain_deletes = data.draw(st.booleans(), label="retain deletes")
    arguments = (corrupt, count, base, latest, retain_deletes, bytes(offset_map._buf), slots, bytes(bitmap), bit_limit)
    assert _filter_outcome(compiled(), *arguments) == _filter_outcome(PURE, *arguments)


@pytest.mark.parametrize("base", [-1, MAX_BASE + 1, 2**63 - 1])
def test_a_base_offset_out_of_range_is_refused(base):
    """A bit flip in a batch's base offset (outside the CRC's cover): its records' offsets would
    leave int64, where C wraps and Python does not; both paths refuse it alike."""
    payload = encode_batch([Record(0, NOW, b"k", b"v")])[61:]
    implementations = [PURE] + ([compiled()] if core.compiled_available(CORE_MODULE) else [])
    for implementation in implementations:
        offset_map = SkimpyOffsetMap(BYTES_PER_ENTRY * 4)
        for call in (lambda: implementation.map_records(payload, 1, base, 0, offset_map._words, 4, 0, 4,
                                                        bytearray(1), 0, 1),
                     lambda: implementation.filter_records(payload, 1, base, base, True, offset_map._words, 4,
                                                           bytearray(1), 0, 1)):
            with pytest.raises(CorruptRecordError, match=f"batch base offset {base} is out of range"):
                call()
    offset_map = SkimpyOffsetMap(BYTES_PER_ENTRY * 4)  # the edge itself is an offset like any other
    for implementation in implementations:
        assert implementation.map_records(payload, 1, MAX_BASE, 0, offset_map._words, 4, 0, 4, bytearray(1), 0,
                                          0)[2] == MAX_BASE


def _record_bytes(body: bytes) -> bytes:
    """One record: its length prefix (zig-zag varint) and ``body``."""
    from triolog.protocol.record_codec import encode_varint
    return encode_varint(len(body)) + body


#: attributes 0, timestamp delta 0, offset delta 0, key "k" (length 1), value "v", no headers
GOOD_BODY = b"\x00\x00\x00\x02k\x02v\x00"


@pytest.mark.parametrize("payload, message", [
    (b"\x7f" + GOOD_BODY, "record 0 of 1 at position 0 declares -64 bytes but 8 remain"),  # negative length
    (_record_bytes(GOOD_BODY)[:-1], "record 0 of 1 at position 0 declares 8 bytes but 7 remain"),  # cut short
    # a key or value past the record's end (into the next record: Kafka's size check says so)
    (_record_bytes(b"\x00\x00\x00\x0ck\x02v\x00") + _record_bytes(GOOD_BODY),
     "invalid record size: record 0 should take 8 bytes but its fields take 12"),
    (_record_bytes(b"\x00\x00\x00\x02k\x0cv\x00") + _record_bytes(GOOD_BODY),
     "invalid record size: record 0 should take 8 bytes but its fields take 13"),
    (_record_bytes(b"\x00\x00\x00\x0ck\x02v\x00"), "record 0 of 1 runs past the end of the batch's records"),
    (_record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x02h\x0a"), "record 0: header 0 runs past the record's end"),
    (_record_bytes(b"\x00\x00\x00\x02k\x02v\x03"), "record 0 has an invalid number of headers -2"),
    (_record_bytes(GOOD_BODY + b"\x00"), "invalid record size: record 0 should take 9 bytes but its fields take 8"),
    (_record_bytes(GOOD_BODY) + b"\x00\x00", "incorrect declared batch size, records still remaining: 2 bytes after "
                                             "1 records"),
])
def test_a_corrupt_record_is_refused_before_it_is_used(payload, message):
    """Each rule of the record check (Kafka's DefaultRecord.readFrom), on both paths and passes;
    a bad record reaches nothing in the map."""
    implementations = [PURE] + ([compiled()] if core.compiled_available(CORE_MODULE) else [])
    assert PURE.map_records(_record_bytes(GOOD_BODY), 1, 0, 0, SkimpyOffsetMap(BYTES_PER_ENTRY * 4)._words, 4, 0,
                            4, bytearray(1), 0, 1)[1] == 1  # the intact record maps
    for implementation in implementations:
        offset_map = SkimpyOffsetMap(BYTES_PER_ENTRY * 4)
        with pytest.raises(CorruptRecordError) as raised:
            implementation.map_records(payload, 1, 0, 0, offset_map._words, 4, 0, 4, bytearray(1), 0, 1)
        assert str(raised.value) == message
        if "still remaining" not in message:  # (bytes after the last record: found once the records are read)
            assert offset_map._buf == bytearray(len(offset_map._buf))
        with pytest.raises(CorruptRecordError) as raised:
            implementation.filter_records(payload, 1, 0, 0, True, offset_map._words, 4, bytearray(1), 0, 1)
        assert str(raised.value) == message


def test_the_pure_core_runs_only_pure_code():
    """The properties compare the compiled loops with an interpreted twin: that twin must read its
    long varints with the pure codec (not with whatever ``core.load`` picks, which is compiled
    code when built), and both share the codec's one zig-zag table."""
    pure_codec = core.implementation("protocol.record_codec", compiled=False)
    assert PURE.record_codec is pure_codec
    assert (PURE._read_varint32, PURE._read_varint64) == (pure_codec.read_varint32, pure_codec.read_varint64)
    assert PURE._ZZ2 is pure_codec._ZIGZAG_TWO
    payload = encode_batch([Record(0, NOW, b"k" * 300, b"v" * 9000)])[61:]  # two- and three-byte varints
    offset_map = SkimpyOffsetMap(BYTES_PER_ENTRY * 4)
    assert PURE.map_records(payload, 1, 0, 0, offset_map._words, 4, 0, 4, bytearray(1), 0, 1)[:4] == (False, 1, 0, 1)
    assert offset_map.get(b"k" * 300) == 0
