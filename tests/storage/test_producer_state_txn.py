"""The transaction rules of the producer state (Kafka's ProducerAppendInfo and ProducerStateManager),
as a state machine against a model: open transactions by first offset, completed ones until the
high watermark passes their marker, the LSO an aborted transaction's index entry records, the
epoch checks of markers, and snapshots that carry the open transactions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.producer_state import (
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
    check_end_txn_marker,
    check_txn_state,
    decode_snapshot,
    encode_snapshot,
)
from triolog.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)

TS = 1_700_000_000_000


def test_marker_checks_follow_kafka():
    entry = ProducerStateEntry(1, producer_epoch=3, coordinator_epoch=7)
    check_end_txn_marker(entry, 1, 3, 7)
    check_end_txn_marker(entry, 1, 4, 8)  # newer epochs are fine
    check_end_txn_marker(None, 1, 0, 0)  # a producer the partition does not know: nothing to check
    with pytest.raises(InvalidProducerEpochError, match="older than its current epoch 3"):
        check_end_txn_marker(entry, 1, 2, 7)
    with pytest.raises(TransactionCoordinatorFencedError, match="6 \\(zombie\\), 7 \\(current\\)"):
        check_end_txn_marker(entry, 1, 3, 6)


def test_a_plain_batch_inside_an_open_transaction_is_invalid_txn_state():
    entry = ProducerStateEntry(1, producer_epoch=0, current_txn_first_offset=10)
    check_txn_state(entry, 1, True)
    check_txn_state(ProducerStateEntry(1), 1, False)
    with pytest.raises(InvalidTxnStateError, match="from offset 10 is open"):
        check_txn_state(entry, 1, False)


@given(st.lists(st.tuples(st.integers(0, 2**40 - 1), st.booleans()), max_size=30, unique_by=lambda t: t[0]))
def test_a_snapshot_carries_each_open_transaction_and_loading_orders_them(tmp_path_factory, drawn):
    directory = tmp_path_factory.mktemp("psm")
    # Open transactions start at distinct offsets (a bijection of the id), in no particular order.
    entries = [(pid, (pid * 7919) % 2**40 if is_open else -1) for pid, is_open in drawn]
    producers = [ProducerStateEntry(pid, 0, 0, TS, first) for pid, first in entries]
    decoded = decode_snapshot(encode_snapshot(producers))
    assert [(e.producer_id, e.current_txn_first_offset) for e in decoded] == entries
    manager = ProducerStateManager(directory, 86_400_000)
    manager.set_producers(decoded)
    open_txns = sorted((first, pid) for pid, first in entries if first >= 0)
    assert [(first, txn.producer_id) for first, txn in manager.ongoing_txns.items()] == open_txns
    assert manager.first_undecided_offset() == (open_txns[0][0] if open_txns else None)


# -- the state machine against a model --------------------------------------------------------

steps = st.lists(st.tuples(st.sampled_from(["data", "txn", "commit", "abort", "hw"]), st.integers(0, 3)),
                 max_size=60)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
def test_open_and_unreplicated_transactions_match_a_model(tmp_path, steps):
    manager = ProducerStateManager(tmp_path, 86_400_000)
    offset, high_watermark = 0, 0
    model_open: dict[int, int] = {}  # producer -> first offset
    model_unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (producer, marker offset)
    sequence = dict.fromkeys(range(4), -1)
    for step, pid in steps:
        if step in ("data", "txn"):
            if step == "data" and pid in model_open:
                with pytest.raises(InvalidTxnStateError):
                    check_txn_state(manager.last_entry(pid), pid, False)
                continue
            sequence[pid] += 1
            manager.update(pid, 0, sequence[pid], offset, 0, TS, step == "txn")
            if step == "txn":
                model_open.setdefault(pid, offset)
            offset += 1
        elif step in ("commit", "abort"):
            completed = manager.end_txn(pid, 0, 0, offset, TS, step == "abort")
            first = model_open.pop(pid, None)
            if first is None:
                assert completed is None, "a marker without a transaction completes nothing"
            else:
                assert completed == CompletedTxn(pid, first, offset, step == "abort")
                others = sorted(f for p, f in model_open.items())
                assert manager.last_stable_offset(completed) == (others[0] if others else offset + 1)
                manager.complete_txn(completed)
                model_unreplicated[first] = (pid, offset)
            offset += 1
        else:  # the high watermark moves part of the way to the end (pid picks how far)
            high_watermark += (offset - high_watermark) * pid // 3
            manager.on_high_watermark_updated(high_watermark)
            model_unreplicated = {f: v for f, v in model_unreplicated.items() if v[1] >= high_watermark}
        assert {t.producer_id: f for f, t in manager.ongoing_txns.items()} == model_open
        assert list(manager.ongoing_txns) == sorted(manager.ongoing_txns), "kept in first-offset order"
        assert set(manager.unreplicated_txns) == set(model_unreplicated)
        candidates = list(model_open.values()) + list(model_unreplicated)
        assert manager.first_unstable_offset() == (min(candidates) if candidates else None)
        assert manager.first_undecided_offset() == (min(model_open.values()) if model_open else None)
