"""Producer state: sequence arithmetic, the append-time rules, and .snapshot files (Kafka's bytes)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.storage import filenames
from triolog.broker.storage.producer_state import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    check_append,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    in_sequence,
    increment_sequence,
    read_snapshot,
)
from triolog.protocol.errors import (
    DuplicateSequenceNumberError,
    ErrorCode,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)

TS = 1_700_000_000_000
sequences = st.integers(0, INT32_MAX)


# -- sequences -------------------------------------------------------------------------------


def test_sequences_wrap_past_int_max_to_zero():
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 2) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert in_sequence(INT32_MAX, 0) and in_sequence(4, 5)
    assert not in_sequence(4, 6) and not in_sequence(INT32_MAX, 1)


@given(sequences, st.integers(0, INT32_MAX))
def test_decrement_undoes_increment(sequence, step):
    after = increment_sequence(sequence, step)
    assert 0 <= after <= INT32_MAX
    assert decrement_sequence(after, step) == sequence
    assert after == (sequence + step) % (INT32_MAX + 1)


# -- the append rules ------------------------------------------------------------------------


def entry_with(producer_id=1, epoch=0, batches=((0, 4),), offset=100, timestamp=TS) -> ProducerStateEntry:
    """An entry whose batches have the given (first_seq, last_seq), placed at consecutive offsets."""
    entry = ProducerStateEntry(producer_id)
    for first, last in batches:
        delta = (last - first) % (INT32_MAX + 1)
        entry.add_batch(epoch, last, offset + delta, delta, timestamp)
        offset += delta + 1
    return entry


def test_unknown_producer_starting_at_zero_is_accepted():
    assert check_append(None, 7, 0, 0, 4) is None


def test_unknown_producer_not_starting_at_zero_gets_unknown_producer_id():
    with pytest.raises(UnknownProducerIdError, match="producer 7 on t-0 is unknown") as info:
        check_append(None, 7, 0, 5, 9, "t-0")
    assert info.value.code == ErrorCode.UNKNOWN_PRODUCER_ID == 59


def test_an_unknown_producer_with_epoch_minus_one_has_no_last_sequence():
    """Used to raise AttributeError (no entry, epochs both -1): UNKNOWN_SERVER_ERROR per request."""
    assert check_append(None, 7, -1, 0, 4) is None
    with pytest.raises(UnknownProducerIdError):
        check_append(None, 7, -1, 5, 9)


def test_exact_duplicate_returns_the_cached_batch_with_its_original_offsets():
    entry = entry_with(batches=((0, 4), (5, 9), (10, 10)))
    duplicate = check_append(entry, 1, 0, 5, 9)
    assert duplicate == BatchMetadata(9, 109, 4, TS)
    assert (duplicate.first_offset, duplicate.last_offset, duplicate.first_seq) == (105, 109, 5)


def test_the_next_batch_in_sequence_is_accepted_and_a_gap_is_out_of_order():
    entry = entry_with(batches=((0, 4),))
    assert check_append(entry, 1, 0, 5, 7) is None
    with pytest.raises(OutOfOrderSequenceNumberError, match=r"6 \(incoming batch's first sequence\), 4") as info:
        check_append(entry, 1, 0, 6, 7)
    assert info.value.code == 45


def test_a_batch_overlapping_the_cached_ones_differently_is_out_of_order():
    entry = entry_with(batches=((0, 4), (5, 9)))
    with pytest.raises(OutOfOrderSequenceNumberError):
        check_append(entry, 1, 0, 3, 6)


def test_a_batch_older_than_the_window_gets_duplicate_sequence_number():
    entry = entry_with(batches=[(i * 2, i * 2 + 1) for i in range(7)])  # 7 batches, 5 kept: seqs 4..13
    assert len(entry.batch_metadata) == NUM_BATCHES_TO_RETAIN and entry.first_seq == 4
    assert check_append(entry, 1, 0, 4, 5) is not None  # oldest kept: exact duplicate
    with pytest.raises(DuplicateSequenceNumberError) as info:
        check_append(entry, 1, 0, 2, 3)
    assert info.value.code == 46


def test_a_batch_too_far_behind_to_be_in_the_log_is_out_of_order_not_a_duplicate():
    """Sequences oldest-1000..oldest-1 would need 1000 offsets below the oldest remembered batch
    (at offset 100 here): such a batch was never appended."""
    entry = entry_with(batches=((2000, 2004),), offset=100)
    with pytest.raises(DuplicateSequenceNumberError):
        check_append(entry, 1, 0, 1900, 1904)  # 96 records behind: may be at offsets 4..99
    with pytest.raises(OutOfOrderSequenceNumberError):
        check_append(entry, 1, 0, 1000, 1004)


def test_after_a_wrap_the_next_batch_is_not_mistaken_for_an_old_one():
    """Kafka 1.0 compared the integers (a batch at 0..4 after one ending at Int.MAX would be
    'older'); the window here spans the wrap."""
    entry = entry_with(batches=((INT32_MAX - 9, INT32_MAX - 5), (INT32_MAX - 4, INT32_MAX)))
    assert check_append(entry, 1, 0, 0, 4) is None
    with pytest.raises(DuplicateSequenceNumberError):
        check_append(entry, 1, 0, INT32_MAX - 14, INT32_MAX - 10)
    entry.add_batch(0, 4, 200, 4, TS)
    assert check_append(entry, 1, 0, 0, 4).last_offset == 200  # duplicate across the wrap


def test_an_older_epoch_is_fenced_and_a_newer_one_must_start_at_zero():
    entry = entry_with(epoch=3)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2, older than its current epoch 3") as info:
        check_append(entry, 1, 2, 5, 5)
    assert info.value.code == 47
    with pytest.raises(InvalidProducerEpochError):
        check_append(entry, 1, 2, 0, 4)  # even a batch the older epoch wrote: fenced, not a duplicate
    with pytest.raises(OutOfOrderSequenceNumberError, match="a new epoch must start at 0"):
        check_append(entry, 1, 4, 5, 5)
    assert check_append(entry, 1, 4, 0, 0) is None  # the idempotent producer's epoch bump


def test_a_new_epoch_forgets_the_old_epochs_batches():
    entry = entry_with(epoch=0, batches=((0, 4), (5, 9)))
    entry.add_batch(1, 2, 200, 2, TS)
    assert entry.producer_epoch == 1 and list(entry.batch_metadata) == [BatchMetadata(2, 200, 2, TS)]
    assert check_append(entry, 1, 1, 0, 2) is not None
    with pytest.raises(OutOfOrderSequenceNumberError):
        check_append(entry, 1, 1, 5, 9)  # the old epoch's sequences mean nothing now
    assert check_append(entry, 1, 1, 3, 3) is None


def test_known_epoch_without_batches_needs_sequence_zero():
    entry = ProducerStateEntry(1, producer_epoch=0)  # e.g. a snapshot entry whose batch is unknown
    assert check_append(entry, 1, 0, 0, 3) is None
    with pytest.raises(UnknownProducerIdError):
        check_append(entry, 1, 0, 4, 5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=30), sequences)
def test_window_keeps_the_last_five_batches_and_every_one_of_them_dedupes(sizes, start):
    """A producer's stream from any sequence (wrapping as it goes): each of the last 5 batches is
    recognised with its offsets, the next in sequence is accepted, older ones are 46."""
    entry = ProducerStateEntry(9)
    sent = []
    sequence, offset = start, 0
    for size in sizes:
        first, last = sequence, increment_sequence(sequence, size - 1)
        if entry.batch_metadata or first == 0:  # (an unknown producer must start at 0: seeded otherwise)
            assert check_append(entry if entry.batch_metadata else None, 9, 0, first, last) is None
        entry.add_batch(0, last, offset + size - 1, size - 1, TS)
        sent.append((first, last, offset, offset + size - 1))
        sequence, offset = increment_sequence(last, 1), offset + size
    for first, last, first_offset, last_offset in sent[-NUM_BATCHES_TO_RETAIN:]:
        duplicate = check_append(entry, 9, 0, first, last)
        assert (duplicate.first_offset, duplicate.last_offset) == (first_offset, last_offset)
    for first, last, _, _ in sent[:-NUM_BATCHES_TO_RETAIN]:
        with pytest.raises(DuplicateSequenceNumberError):
            check_append(entry, 9, 0, first, last)
    assert check_append(entry, 9, 0, sequence, sequence) is None


# -- snapshot bytes --------------------------------------------------------------------------


def test_empty_snapshot_golden_bytes():
    assert bytes(encode_snapshot([])).hex() == "000148674bc700000000"


def test_one_entry_snapshot_golden_bytes_and_file_name(tmp_path):
    entry = ProducerStateEntry(1000, 0, batches=[BatchMetadata(9, 41, 9, 1_700_000_000_000)])
    entry.last_timestamp = 1_700_000_000_000
    expected = ("0001" "eefd49ba" "00000001" "00000000000003e8" "0000" "00000009" "0000000000000029" "00000009"
                "0000018bcfe56800" "ffffffff" "ffffffffffffffff")
    assert bytes(encode_snapshot([entry])).hex() == expected
    manager = ProducerStateManager(tmp_path, 86_400_000)
    manager.producers[1000] = entry
    manager.update_map_end_offset(42)
    path = manager.take_snapshot()
    assert path.name == "00000000000000000042.snapshot" == filenames.producer_snapshot_file(tmp_path, 42).name
    assert path.read_bytes().hex() == expected
    assert not list(tmp_path.glob("*.tmp"))


snapshot_entries = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), sequences, st.integers(-1, 2**62),
              st.integers(0, 1000), st.integers(-1, 2**62)),
    max_size=30, unique_by=lambda t: t[0])


@given(snapshot_entries)
def test_snapshot_round_trip_keeps_each_producers_newest_batch(rows):
    entries = []
    for pid, epoch, last_seq, last_offset, delta, ts in rows:
        entry = ProducerStateEntry(pid, epoch, last_timestamp=ts)
        if last_offset >= 0:
            entry.batch_metadata.append(BatchMetadata(0, max(last_offset - 5, 0), 0, ts))
            entry.batch_metadata.append(BatchMetadata(last_seq, last_offset, delta, ts))
        entries.append(entry)
    data = bytes(encode_snapshot(entries))
    assert len(data) == 10 + 46 * len(entries)
    decoded = decode_snapshot(data)
    assert [(e.producer_id, e.producer_epoch, e.last_timestamp, list(e.batch_metadata)) for e in decoded] == [
        (e.producer_id, e.producer_epoch, e.last_timestamp, list(e.batch_metadata)[-1:]) for e in entries]


def test_corrupt_or_unknown_version_snapshots_are_refused():
    data = bytearray(encode_snapshot([ProducerStateEntry(5, 0, batches=[BatchMetadata(0, 0, 0, TS)])]))
    flipped = bytearray(data)
    flipped[20] ^= 1
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(flipped)
    wrong_version = bytearray(data)
    struct.pack_into(">h", wrong_version, 0, 2)
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        decode_snapshot(wrong_version)
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:-3])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:5])


# -- the manager's files ---------------------------------------------------------------------


def manager_with_snapshots(tmp_path, offsets, expiration_ms=86_400_000) -> ProducerStateManager:
    manager = ProducerStateManager(tmp_path, expiration_ms)
    for i, offset in enumerate(offsets):
        manager.update(100 + i, 0, i, offset - 1, 0, TS)
        manager.update_map_end_offset(offset)
        manager.take_snapshot()
    return ProducerStateManager(tmp_path, expiration_ms)  # as a restart finds them


def test_load_takes_the_newest_snapshot(tmp_path):
    manager = manager_with_snapshots(tmp_path, [10, 20, 30])
    assert manager.load_from_snapshot(0, TS) == 30
    assert sorted(manager.producers) == [100, 101, 102]
    assert manager.producers[102].last_data_offset == 29 and manager.last_map_offset == 30


def test_a_corrupt_snapshot_is_deleted_and_the_older_one_loaded(tmp_path):
    manager = manager_with_snapshots(tmp_path, [10, 20, 30])
    newest = tmp_path / "00000000000000000030.snapshot"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    (tmp_path / "00000000000000000020.snapshot").write_bytes(b"\x00\x01")  # cut short
    assert manager.load_from_snapshot(0, TS) == 10
    assert sorted(manager.producers) == [100]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000010.snapshot"]


def test_no_valid_snapshot_starts_empty_at_the_log_start(tmp_path):
    manager = manager_with_snapshots(tmp_path, [10])
    (tmp_path / "00000000000000000010.snapshot").write_bytes(b"garbage!!!!")
    assert manager.load_from_snapshot(3, TS) is None
    assert manager.producers == {} and manager.last_map_offset == 3


def test_expired_producers_are_dropped_at_load_and_on_demand(tmp_path):
    manager = ProducerStateManager(tmp_path, 1000)
    manager.update(1, 0, 0, 0, 0, TS)
    manager.update(2, 0, 0, 1, 0, TS + 500)
    manager.update_map_end_offset(2)
    manager.take_snapshot()
    loaded = ProducerStateManager(tmp_path, 1000)
    loaded.load_from_snapshot(0, TS + 1000)
    assert sorted(loaded.producers) == [2]  # 1 is exactly expiration.ms old: expired (Kafka's >=)
    assert loaded.remove_expired_producers(TS + 1499) == 0
    assert loaded.remove_expired_producers(TS + 1500) == 1 and loaded.producers == {}


def test_stray_snapshots_are_removed_except_the_newest_past_the_last_segment(tmp_path):
    manager = manager_with_snapshots(tmp_path, [5, 10, 15, 20, 27])
    (tmp_path / "00000000000000000031.snapshot.tmp").write_bytes(b"half written")
    manager = ProducerStateManager(tmp_path, 86_400_000)
    assert not (tmp_path / "00000000000000000031.snapshot.tmp").exists()
    manager.remove_stray_snapshots([0, 10, 20])
    assert manager.snapshot_offsets == [10, 20, 27]  # 27: the clean shutdown's, past base 20
    manager.remove_stray_snapshots([0, 10, 30])
    assert manager.snapshot_offsets == [10]  # 20 and 27 are strays below the last base 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000010.snapshot"]


def test_snapshot_for_deletion_is_renamed_deleted(tmp_path):
    manager = manager_with_snapshots(tmp_path, [10, 20])
    path = manager.remove_and_mark_snapshot_for_deletion(10)
    assert path.name == "00000000000000000010.snapshot.deleted" and path.exists()
    assert manager.snapshot_offsets == [20]
    assert manager.remove_and_mark_snapshot_for_deletion(15) is None


def test_snapshot_is_only_taken_when_the_map_end_moved(tmp_path):
    manager = ProducerStateManager(tmp_path, 86_400_000)
    assert manager.take_snapshot() is None  # 0: nothing covered
    manager.update_map_end_offset(7)
    assert manager.take_snapshot(sync=False).name == "00000000000000000007.snapshot"
    assert manager.unsynced_snapshots == {7}
    assert manager.take_snapshot() is None
    manager.fsync_snapshots()
    assert manager.unsynced_snapshots == set()
    assert read_snapshot(tmp_path / "00000000000000000007.snapshot") == []
