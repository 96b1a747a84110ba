"""The records of __transaction_state: Kafka's TransactionLogKey v0 and TransactionLogValue v0
and v1 bytes (fixed vectors written out from Kafka's schemas), round trips of any value, and the
loading of a partition's records (last value wins, a tombstone removes)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from triolog.broker.coordinator.transaction.transaction_log import (
    TxnLogValue,
    load_transactions,
    partition_for,
    read_key,
    read_value,
    transaction_log_key,
    transaction_log_value,
)


def test_key_bytes_are_kafkas_version_0():
    # int16 version 0, then the id as an int16-length string
    assert transaction_log_key("tx") == bytes.fromhex("0000" "0002" "7478")
    assert read_key(bytes.fromhex("0000" "0002" "7478")) == "tx"
    assert read_key(bytes.fromhex("0001" "0002" "7478")) is None  # a newer key version: skipped


def test_value_v0_bytes():
    value = TxnLogValue(producer_id=5, producer_epoch=1, transaction_timeout_ms=60000, state=1,
                        partitions=frozenset({("t", 2), ("t", 0)}), last_update_ms=1000, start_ms=900)
    expected = (
        "0000"  # version 0
        "0000000000000005" "0001" "0000ea60" "01"  # producer id, epoch, timeout, Ongoing
        "00000001" "0001" "74" "00000002" "00000000" "00000002"  # [{topic "t", partition ids [0, 2]}]
        "00000000000003e8" "0000000000000384"  # last update 1000, start 900
    )
    assert transaction_log_value(value).hex() == expected
    assert read_value(bytes.fromhex(expected)) == value


def test_value_v0_of_empty_has_null_partitions():
    value = TxnLogValue(7, 0, 1000, 0, frozenset(), 5, -1)
    data = transaction_log_value(value)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == struct.pack(">i", -1)
    assert read_value(data) == value


def test_value_v1_is_flexible_with_tagged_fields():
    value = TxnLogValue(producer_id=5, producer_epoch=1, transaction_timeout_ms=60000, state=2,
                        partitions=frozenset({("t", 0)}), last_update_ms=1000, start_ms=900,
                        next_producer_id=9, client_transaction_version=2)
    expected = (
        "0001"  # version 1
        "0000000000000005" "0001" "0000ea60" "02"  # producer id, epoch, timeout, PrepareCommit
        "02" "02" "74" "02" "00000000" "00"  # compact [{compact "t", compact [0], no tags}]
        "00000000000003e8" "0000000000000384"
        "02" "01" "08" "0000000000000009" "02" "02" "0002"  # tags: 1 NextProducerId, 2 ClientTransactionVersion
    )
    assert transaction_log_value(value).hex() == expected
    assert read_value(bytes.fromhex(expected)) == value


def test_tombstone_and_bad_bytes():
    assert read_value(None) is None
    with pytest.raises(ValueError, match="version 7"):
        read_value(struct.pack(">h", 7) + bytes(40))
    good = transaction_log_value(TxnLogValue(1, 0, 10, 0, frozenset(), 1, -1))
    with pytest.raises(ValueError, match="bytes after"):
        read_value(good + b"\x00")


values = st.builds(
    TxnLogValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    transaction_timeout_ms=st.integers(1, 2**31 - 1),
    state=st.integers(0, 7),
    partitions=st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8),
    last_update_ms=st.integers(-1, 2**62),
    start_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    client_transaction_version=st.integers(0, 2),
)


@given(values)
def test_any_value_round_trips(value):
    if value.state == 0:
        value = TxnLogValue(**{**value.__dict__, "partitions": frozenset()})
    if value.client_transaction_version < 2:  # v0 (Kafka's for versions 0 and 1) carries none of these
        value = TxnLogValue(**{**value.__dict__, "previous_producer_id": -1, "next_producer_id": -1,
                               "client_transaction_version": 0})
    assert read_value(transaction_log_value(value)) == value


@given(st.text(max_size=300))
def test_any_key_round_trips(transactional_id):
    assert read_key(transaction_log_key(transactional_id)) == transactional_id


def test_loading_keeps_the_last_value_and_drops_tombstoned_ids():
    a1 = TxnLogValue(1, 0, 10, 0, frozenset(), 1, -1)
    a2 = TxnLogValue(1, 1, 10, 1, frozenset({("t", 0)}), 2, 2)
    b = TxnLogValue(2, 0, 10, 0, frozenset(), 1, -1)
    records = [
        (0, transaction_log_key("a"), transaction_log_value(a1)),
        (1, transaction_log_key("b"), transaction_log_value(b)),
        (2, transaction_log_key("a"), transaction_log_value(a2)),
        (3, transaction_log_key("b"), None),
        (4, transaction_log_key("c"), transaction_log_value(b)),
        (5, transaction_log_key("c"), None),
        (6, transaction_log_key("c"), transaction_log_value(b)),  # back after its tombstone
    ]
    assert load_transactions(records) == {"a": a2, "c": b}


def test_partition_of_an_id_is_kafkas():
    # Kafka: Utils.abs(id.hashCode()) % count. "hello".hashCode() is 99162322; the hash of
    # "polygenelubricants" is Integer.MIN_VALUE, which Kafka's abs maps to 0.
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0
