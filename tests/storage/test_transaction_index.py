"""The .txnindex: Kafka's 34-byte AbortedTxn entries, lazily created files, and the lookups a
read_committed fetch makes (checked against a brute-force model of Kafka's scan)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.errors import CorruptIndexError
from triolog.broker.storage.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    decode_entries,
)

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
int64 = st.integers(-(2**63), 2**63 - 1)


def test_an_entry_is_kafkas_34_bytes():
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=150, last_stable_offset=120)
    data = txn.encode()
    assert ENTRY_SIZE == 34 and len(data) == 34
    # int16 version 0, then producer id, first offset, last offset, last stable offset (int64 each)
    assert data == struct.pack(">hqqqq", 0, 7, 100, 150, 120)
    assert str(txn) == "AbortedTxn(version=0, producerId=7, firstOffset=100, lastOffset=150, lastStableOffset=120)"


@given(st.lists(st.tuples(int64, int64, int64, int64), max_size=20))
def test_entries_round_trip_through_their_bytes(fields):
    entries = [AbortedTxn(*f) for f in fields]
    data = b"".join(e.encode() for e in entries)
    assert decode_entries(data) == entries
    # A torn last entry is left out, as Kafka's reader leaves it.
    assert decode_entries(data + b"\x00" * 10) == entries


def test_a_newer_entry_version_is_refused():
    data = struct.pack(">hqqqq", 1, 7, 1, 2, 3)
    with pytest.raises(CorruptIndexError, match="version 1"):
        decode_entries(data)


def test_the_file_is_created_by_the_first_append_only(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(0, path)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    index.reset()
    index.truncate_to(0)
    index.flush()
    assert not path.exists(), "no aborted transaction: no .txnindex file (Kafka's rule)"
    index.append(AbortedTxn(1, 0, 5, 6))
    assert path.read_bytes() == AbortedTxn(1, 0, 5, 6).encode()
    index.close()


def test_appends_must_increase_the_last_offset(tmp_path):
    index = TransactionIndex(0, tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError, match="increase"):
        index.append(AbortedTxn(2, 3, 5, 6))
    with pytest.raises(ValueError, match="increase"):
        index.append(AbortedTxn(2, 3, 4, 6))
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 5, 6)]
    index.close()


def _brute_force(entries, fetch_offset, upper_bound):
    """Kafka's collectAbortedTxns: a scan from the first entry."""
    found = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return found, True
    return found, False


@st.composite
def aborted_history(draw):
    """Entries as a log writes them: markers at rising offsets, each transaction starting before
    its marker, the LSO between the oldest open transaction's start and the marker + 1."""
    entries, offset = [], draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(0, 25))):
        offset += draw(st.integers(1, 50))
        first = offset - draw(st.integers(1, 40))
        lso = offset + 1 - draw(st.integers(0, 30))
        entries.append(AbortedTxn(draw(st.integers(0, 5)), first, offset, max(lso, 0)))
    return entries


@SETTINGS
@given(aborted_history(), st.integers(0, 2000), st.integers(0, 200))
def test_collect_finds_what_kafkas_scan_finds_also_after_a_reopen(tmp_path, entries, fetch_offset, span):
    path = tmp_path / "00000000000000000000.txnindex"
    path.unlink(missing_ok=True)
    index = TransactionIndex(0, path)
    for entry in entries:
        index.append(entry)
    index.close()
    upper = fetch_offset + span
    expected = _brute_force(entries, fetch_offset, upper)
    assert tuple(index.collect_aborted_txns(fetch_offset, upper)) == (expected[0], expected[1])
    reopened = TransactionIndex(0, path)
    assert tuple(reopened.collect_aborted_txns(fetch_offset, upper)) == (expected[0], expected[1])
    assert reopened.all_aborted_txns() == entries


@SETTINGS
@given(aborted_history(), st.integers(0, 2500))
def test_truncate_to_drops_the_markers_at_and_past_the_offset(tmp_path, entries, offset):
    path = tmp_path / "00000000000000000000.txnindex"
    path.unlink(missing_ok=True)
    index = TransactionIndex(0, path)
    for entry in entries:
        index.append(entry)
    index.truncate_to(offset)
    kept = [e for e in entries if e.last_offset < offset]
    assert index.all_aborted_txns() == kept
    if entries:
        assert path.stat().st_size == ENTRY_SIZE * len(kept)
    index.close()
    assert TransactionIndex(0, path).all_aborted_txns() == kept


def test_sanity_check_catches_entries_below_the_segment_a_torn_tail_and_disorder(tmp_path):
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(AbortedTxn(1, 90, 99, 100).encode())
    with pytest.raises(CorruptIndexError, match="less than start offset 100"):
        TransactionIndex(100, path).sanity_check()
    path.write_bytes(AbortedTxn(1, 100, 110, 111).encode() + b"\x00\x00\x00")
    with pytest.raises(CorruptIndexError, match="torn"):
        TransactionIndex(100, path).sanity_check()
    path.write_bytes(AbortedTxn(1, 100, 110, 111).encode() + AbortedTxn(2, 100, 105, 111).encode())
    with pytest.raises(CorruptIndexError, match="out of order"):
        TransactionIndex(100, path).sanity_check()
    path.write_bytes(AbortedTxn(1, 100, 110, 111).encode())
    TransactionIndex(100, path).sanity_check()


def test_an_append_after_a_torn_entry_overwrites_it(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 5, 6).encode() + b"\x01" * 20)
    index = TransactionIndex(0, path)
    index.append(AbortedTxn(2, 6, 9, 10))
    index.close()
    assert path.read_bytes() == AbortedTxn(1, 0, 5, 6).encode() + AbortedTxn(2, 6, 9, 10).encode()


def test_rename_moves_an_existing_file_and_follows_a_missing_one(tmp_path):
    index = TransactionIndex(0, tmp_path / "00000000000000000000.txnindex")
    index.rename_to(tmp_path / "00000000000000000000.txnindex.deleted")
    assert index.path.name.endswith(".deleted") and not index.path.exists()
    index.append(AbortedTxn(1, 0, 5, 6))
    assert (tmp_path / "00000000000000000000.txnindex.deleted").exists()
    index.rename_to(tmp_path / "00000000000000000000.txnindex.swap")
    assert (tmp_path / "00000000000000000000.txnindex.swap").exists()
    assert not (tmp_path / "00000000000000000000.txnindex.deleted").exists()
    assert index.delete_if_exists()
    assert not index.delete_if_exists()
