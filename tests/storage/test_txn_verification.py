"""KIP-890 part 1 in the log: a transactional batch that opens a producer's transaction on a
partition needs the VerificationGuard the leader took before asking the coordinator, and a
marker (or another opening batch) in between makes that guard stale, so a late batch of an
ended transaction can never open a hanging one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.storage.producer_state import NO_VERIFICATION_NEEDED, VerificationGuard
from triolog.protocol.errors import InvalidTxnStateError

from .test_transactions import Producer, committed_values, open_log


def test_a_batch_opening_a_transaction_needs_its_current_guard(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(7)
    guard = log.maybe_start_txn_verification(7)
    assert isinstance(guard, VerificationGuard) and guard is not NO_VERIFICATION_NEEDED
    assert log.maybe_start_txn_verification(7) is guard, "a second request while verifying shares it"
    batch = producer.batch()
    with pytest.raises(InvalidTxnStateError, match="not verified"):
        log.append_as_leader(batch, verification=VerificationGuard())
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(batch, verification=NO_VERIFICATION_NEEDED)
    assert log.log_end_offset == 0, "nothing written"
    producer.sequence = 0
    log.append_as_leader(producer.batch(), verification=guard)
    # Open now: later batches need no verification, and the leader says so.
    assert log.maybe_start_txn_verification(7) is NO_VERIFICATION_NEEDED
    log.append_as_leader(producer.batch(), verification=NO_VERIFICATION_NEEDED)
    assert log.log_end_offset == 2


def test_a_marker_between_verification_and_append_makes_the_guard_stale(tmp_path, clock):
    """The hanging-transaction race: the leader verified a batch of transaction N, the
    coordinator ended N (its marker lands), then the batch arrives: refused, not a new open
    transaction nothing would ever end."""
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(7)
    log.append_as_leader(producer.batch(), verification=log.maybe_start_txn_verification(7))
    checked = log.maybe_start_txn_verification(7)
    assert checked is NO_VERIFICATION_NEEDED
    log.append_end_txn_marker(7, 0, 0, committed=False, leader_epoch=0)
    late = producer.batch()
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(late, verification=checked)
    stale = log.maybe_start_txn_verification(7)
    log.append_end_txn_marker(7, 0, 0, committed=False, leader_epoch=0)  # a retried marker
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(late, verification=stale)
    assert log.first_unstable_offset is None, "no transaction left open"


def test_without_verification_and_for_plain_batches_nothing_changes(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    Producer(7).batch()
    log.append_as_leader(Producer(8).batch(transactional=False), verification=VerificationGuard())
    log.append_as_leader(Producer(9).batch())  # a broker with verification off passes no guard
    assert log.log_end_offset == 2 and log.first_unstable_offset == 1


def test_a_retried_batch_is_a_duplicate_whatever_its_guard(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(7)
    batch = producer.batch()
    first = log.append_as_leader(batch, verification=log.maybe_start_txn_verification(7))
    again = log.append_as_leader(batch, verification=VerificationGuard())
    assert again.duplicate and again.first_offset == first.first_offset


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["verify", "append", "stale-append", "commit", "abort"]), max_size=25))
def test_only_verified_batches_ever_open_a_transaction(tmp_path_factory, steps):
    """Any interleaving of verifications, appends and markers: every transaction that opens was
    opened by a batch carrying the guard current at its append, and read_committed never shows
    an aborted record."""
    from tests.conftest import ManualClock

    log = open_log(tmp_path_factory.mktemp("p") / "t-0", ManualClock(1_700_000_000_000))
    producer = Producer(7)
    guard = VerificationGuard()  # (never taken: as good as none)
    opened = aborted = 0
    for step in steps:
        if step == "verify":
            guard = log.maybe_start_txn_verification(7)
        elif step in ("append", "stale-append"):
            use = guard if step == "append" else VerificationGuard()
            was_open = log.first_unstable_offset is not None
            current = log.producer_state_manager.verification_guards.get(7)
            try:
                log.append_as_leader(producer.batch(tag="x"), verification=use)
            except InvalidTxnStateError:
                producer.sequence -= 1  # (the client would resend it after verifying again)
                assert not was_open and (use is NO_VERIFICATION_NEEDED or use is not current)
            else:
                assert was_open or use is current
                opened += not was_open
        else:
            if log.first_unstable_offset is not None and step == "abort":
                aborted += 1
            log.append_end_txn_marker(7, 0, 0, committed=step == "commit", leader_epoch=0)
    assert aborted <= opened
    if log.first_unstable_offset is not None:
        log.append_end_txn_marker(7, 0, 0, committed=False, leader_epoch=0)
    assert all(v.startswith(b"x7-") for v in committed_values(log))
