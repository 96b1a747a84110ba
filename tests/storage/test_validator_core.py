"""The validator on the compiled core and on the pure one: the same decisions, the same errors.

The validator's header checks (``check_batch_header``) and its record walk live in the record
codec (protocol/record_codec.py, one source compiled or interpreted). These properties run the
whole validator once on each implementation of the codec, in one process, on valid batches and on
batches damaged in their header, their CRC or their records, and require identical results:
the same stored bytes and offsets, or the same error type and message.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import triolog.broker.storage.validator as validator
from triolog import core
from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import CRC_START, HEADER, CompressionType
from triolog.protocol.records import Record, encode_batch

from crc32c import crc32c

PURE = core.implementation("protocol.record_codec", compiled=False)
NOW = 1_700_000_000_000

#: (byte offset, struct format) of every header field a producer controls, and values either
#: side of each rule (and of the C integer widths the compiled check reads them into)
FIELDS = {
    "base_offset": (0, ">q", [0, 1, -1, 2**63 - 1, -(2**63)]),
    "batch_length": (8, ">i", [0, -1, 49, 2**31 - 1, -(2**31)]),
    "magic": (16, ">b", [0, 1, 2, 3, -1, 127]),
    "attributes": (21, ">h", [0, 1, 4, 5, 7, 0x08, 0x10, 0x20, -1, 2**15 - 1]),
    "last_offset_delta": (23, ">i", [-1, 0, 1, 2**31 - 1, -(2**31)]),
    "producer_id": (43, ">q", [-1, 0, 7, 2**63 - 1, -(2**63)]),
    "base_sequence": (53, ">i", [-1, 0, 5, -(2**31)]),
    "records_count": (57, ">i", [0, 1, 2, -1, 2**31 - 1, -(2**31)]),
}


def _compiled():
    if not core.compiled_available("protocol.record_codec"):
        pytest.skip("the compiled core is not built here (no C compiler at install time): only the pure path runs")
    return core.implementation("protocol.record_codec", compiled=True)


@contextmanager
def _running_on(codec):
    """The validator with its codec functions taken from ``codec`` (the real implementations, both)."""
    names = ("check_batch_header", "walk_records", "renumber_records")
    saved = [getattr(validator, name) for name in names]
    for name in names:
        setattr(validator, name, getattr(codec, name))
    try:
        yield
    finally:
        for name, function in zip(names, saved):
            setattr(validator, name, function)


def _validated(codec, batch, config):
    with _running_on(codec):
        try:
            result = validator.validate_and_assign_offsets(batch, offset=1000, config=config, now_ms=NOW,
                                                           leader_epoch=3)
        except Exception as exc:  # the comparison is the point: same type, same message
            return ("raised", type(exc), str(exc))
    return ("ok", b"".join(bytes(part) for part in result.records), result[1:])


@st.composite
def batches(draw):
    count = draw(st.integers(1, 6))
    records, offset = [], 0
    for _ in range(count):  # a gap in the offsets makes the validator rebuild the batch
        records.append(Record(offset, NOW + draw(st.integers(-5, 5)), draw(st.none() | st.binary(max_size=5)),
                              draw(st.binary(max_size=300))))
        offset += draw(st.sampled_from([1, 1, 1, 2]))
    batch = encode_batch(records, compression=draw(st.sampled_from(CompressionType)),
                         producer_id=draw(st.sampled_from([-1, 9])), base_sequence=draw(st.sampled_from([-1, 0])))
    return bytearray(batch)


def _recrc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))


@st.composite
def damaged(draw):
    """A producer batch, maybe with a header field set to an edge value (CRC made right again or
    not), bytes flipped, cut or appended."""
    batch = draw(batches())
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(FIELDS)))
        offset, fmt, values = FIELDS[name]
        struct.pack_into(fmt, batch, offset, draw(st.sampled_from(values)))
        if draw(st.booleans()):
            _recrc(batch)
    edit = draw(st.sampled_from(["none", "none", "flip", "cut", "append"]))
    if edit == "flip":
        position = draw(st.integers(0, len(batch) - 1))
        batch[position] ^= draw(st.integers(1, 255))
        if position >= CRC_START and draw(st.booleans()):
            _recrc(batch)
    elif edit == "cut":
        del batch[draw(st.integers(0, len(batch) - 1)):]
    elif edit == "append":
        batch += draw(st.binary(min_size=1, max_size=70))
    return bytes(batch)


CONFIGS = st.sampled_from([
    LogConfig(),
    LogConfig().with_overrides({"max.message.bytes": "200"}),
    LogConfig().with_overrides({"segment.bytes": "150", "max.message.bytes": "100000"}),
    LogConfig().with_overrides({"cleanup.policy": "compact"}),
    LogConfig().with_overrides({"message.timestamp.type": "LogAppendTime"}),
    LogConfig().with_overrides({"compression.type": "zstd"}),
    LogConfig().with_overrides({"message.timestamp.before.max.ms": "2", "message.timestamp.after.max.ms": "2"}),
])


@settings(max_examples=400, deadline=None)
@given(batch=damaged(), limit=st.sampled_from([0, 60, 61, 100, 1 << 20, 2**31 - 1]))
def test_compiled_header_check_decides_as_the_pure_one(batch, limit):
    compiled = _compiled()
    expected = PURE.check_batch_header(batch, limit)
    assert compiled.check_batch_header(batch, limit) == expected
    assert compiled.check_batch_header(bytearray(batch), limit) == expected
    if expected is not None:  # the fields are the header's, as struct reads them
        fields = HEADER.unpack_from(batch)
        assert expected == (fields[1], fields[4], fields[5], fields[6], fields[7], fields[8], fields[12])


@settings(max_examples=400, deadline=None)
@given(batch=damaged(), config=CONFIGS)
def test_the_validator_on_the_compiled_core_decides_and_refuses_as_on_the_pure_one(batch, config):
    compiled = _compiled()
    assert _validated(compiled, batch, config) == _validated(PURE, batch, config)


def test_every_header_rule_is_refused_with_its_own_message_on_both_paths():
    """One batch per rule, so a decision that differs on one path shows by name."""
    good = bytearray(encode_batch([Record(0, NOW, b"k", b"v"), Record(1, NOW, b"k", b"w")]))
    cases = {
        "base_offset": (5, "base offset 5"),
        "last_offset_delta": (4, "last offset delta 4 but 2 records"),
        "attributes": (0x20, "control batches"),
        "magic": (1, "magic"),
    }
    codecs = [PURE] + ([core.implementation("protocol.record_codec", compiled=True)]
                       if core.compiled_available("protocol.record_codec") else [])
    for name, (value, words) in cases.items():
        batch = bytearray(good)
        offset, fmt, _ = FIELDS[name]
        struct.pack_into(fmt, batch, offset, value)
        _recrc(batch)
        outcomes = {_validated(codec, bytes(batch), LogConfig()) for codec in codecs}
        assert len(outcomes) == 1, outcomes
        (outcome,) = outcomes
        assert outcome[0] == "raised" and words in outcome[2], (name, outcome)
    assert {_validated(codec, bytes(good), LogConfig())[0] for codec in codecs} == {"ok"}
