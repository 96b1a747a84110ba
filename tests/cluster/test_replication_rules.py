"""The leader's replication rules, as properties over random runs of appends, follower fetches,
passing time and ISR changes (hypothesis): what is committed is on every in-sync replica, the
high watermark never goes back and stands still below min.insync.replicas, a follower at the
leader's end is never dropped, one rejoins only inside the current epoch, and acks=all answers
only what is committed. Plus Kafka's own cases, one by one."""

from __future__ import annotations

from hypothesis import given, strategies as st

from triolog.broker.cluster.replication import AcksAll, LeaderPartition, follower_high_watermark

LAG_MS = 1000

_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.floats(0, 1)),
        st.tuples(st.just("tick"), st.integers(1, 800)),
        st.tuples(st.just("shrink")),
        st.tuples(st.just("expand")),
    ),
    max_size=80,
)


@given(
    _steps,
    st.integers(1, 3),  # min.insync.replicas
    st.integers(0, 20),  # the log end offset (and high watermark) when this term began
)
def test_committed_records_are_on_every_in_sync_replica_and_the_rules_hold(steps, min_isr, start):
    now = 0
    leader_leo = start
    # What each follower really has (the leader learns it only at its next fetch).
    actual = {2: start, 3: start}
    partition = LeaderPartition(
        broker_id=1,
        leader_epoch=3,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        leader_epoch_start_offset=start,
        high_watermark=start,
        min_insync_replicas=min_isr,
        lag_max_ms=LAG_MS,
        now_ms=now,
    )
    writes = []  # (end offset of an acks=all write, isr size when taken)
    for step in steps:
        kind = step[0]
        if kind == "append":
            if partition.may_append_acks_all():
                leader_leo += step[1]
                writes.append(leader_leo)
            else:
                assert len(partition.isr) < partition.effective_min_isr
        elif kind == "fetch":
            follower, share = step[1], step[2]
            # The fetch reports what the follower has; it then receives part of the rest.
            partition.update_follower(follower, actual[follower], 0, leader_leo, now)
            actual[follower] += int((leader_leo - actual[follower]) * share)
        elif kind == "tick":
            now += step[1]
        elif kind == "shrink":
            out = partition.out_of_sync_replicas(leader_leo, now)
            for r in out:
                # a follower at the leader's end is never out of sync
                assert partition.followers[r].log_end_offset != leader_leo
            partition.set_isr(partition.isr - out, now)
        elif kind == "expand":
            joining = partition.in_sync_candidates()
            for r in joining:
                known = partition.followers[r].log_end_offset
                assert known >= partition.high_watermark and known >= partition.leader_epoch_start_offset
            partition.set_isr(partition.isr | joining, now)

        before = partition.high_watermark
        moved = partition.maybe_increment_high_watermark(leader_leo, now)
        hw = partition.high_watermark
        assert hw >= before and moved == (hw > before)  # never back
        if len(partition.isr) < partition.effective_min_isr:
            assert hw == before  # frozen below min.insync.replicas
        assert hw <= leader_leo
        # Committed means on every in-sync replica: a leader failover to any of them loses nothing.
        for r in partition.isr - {1}:
            assert actual[r] >= hw, (r, actual, hw, partition.isr)
        for end in writes:
            status = partition.acks_all_status(end)
            if status is AcksAll.DONE:
                assert hw >= end and len(partition.isr) >= partition.effective_min_isr
            elif status is AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                assert hw >= end and len(partition.isr) < partition.effective_min_isr
            else:
                assert hw < end


def _partition(isr=(1, 2, 3), min_isr=2, start=10, now=0):
    return LeaderPartition(
        broker_id=1,
        leader_epoch=5,
        replicas=(1, 2, 3),
        isr=isr,
        leader_epoch_start_offset=start,
        high_watermark=start,
        min_insync_replicas=min_isr,
        lag_max_ms=LAG_MS,
        now_ms=now,
    )


def test_the_high_watermark_is_the_slowest_in_sync_replicas_end():
    p = _partition()
    assert not p.maybe_increment_high_watermark(20, 0)  # no follower has fetched in this term
    p.update_follower(2, 20, 0, 20, 1)
    assert not p.maybe_increment_high_watermark(20, 1)  # follower 3 still unknown
    p.update_follower(3, 15, 0, 20, 1)
    assert p.maybe_increment_high_watermark(20, 1) and p.high_watermark == 15
    p.update_follower(3, 20, 0, 20, 2)
    assert p.maybe_increment_high_watermark(20, 2) and p.high_watermark == 20


def test_a_stuck_follower_leaves_after_the_lag_time_and_the_leader_commits_without_it():
    p = _partition()
    p.update_follower(2, 20, 0, 20, 0)
    p.update_follower(3, 10, 0, 20, 0)  # fetched at the term's start, then went quiet
    assert p.out_of_sync_replicas(20, LAG_MS) == set()  # caught up as of the term's start, not yet late
    assert p.out_of_sync_replicas(20, LAG_MS + 1) == {3}
    p.set_isr({1, 2}, LAG_MS + 1)
    assert p.maybe_increment_high_watermark(20, LAG_MS + 1) and p.high_watermark == 20
    # It catches up and rejoins, once at the high watermark and inside this epoch.
    p.update_follower(3, 20, 0, 20, LAG_MS + 2)
    assert p.in_sync_candidates() == {3}


def test_a_follower_behind_the_epoch_start_does_not_rejoin():
    p = _partition(isr=(1, 2), start=30)
    p.high_watermark = 25  # committed before this term; the term began at 30
    p.update_follower(3, 28, 0, 40, 0)
    assert p.in_sync_candidates() == set()  # past the high watermark, but not into this epoch
    p.update_follower(3, 30, 0, 40, 1)
    assert p.in_sync_candidates() == {3}


def test_a_follower_at_the_leaders_end_is_never_out_of_sync():
    p = _partition()
    p.update_follower(2, 20, 0, 20, 0)
    p.update_follower(3, 20, 0, 20, 0)
    assert p.out_of_sync_replicas(20, 10 * LAG_MS) == set()  # idle: nothing to fetch is not lag


def test_acks_all_below_min_isr():
    p = _partition(isr=(1,), min_isr=2)
    assert not p.may_append_acks_all()  # NOT_ENOUGH_REPLICAS, nothing written
    p = _partition(isr=(1, 2), min_isr=2)
    assert p.may_append_acks_all()
    p.update_follower(2, 12, 0, 12, 0)
    p.maybe_increment_high_watermark(12, 0)
    assert p.acks_all_status(12) is AcksAll.DONE and p.acks_all_status(13) is AcksAll.WAITING
    p.set_isr({1}, 1)  # shrank after the write was taken
    assert p.acks_all_status(12) is AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # min.insync.replicas above the replication factor counts as the replication factor
    single = LeaderPartition(
        broker_id=1, leader_epoch=0, replicas=(1,), isr=(1,), leader_epoch_start_offset=0,
        high_watermark=0, min_insync_replicas=2, lag_max_ms=LAG_MS, now_ms=0,
    )  # fmt: skip
    assert single.may_append_acks_all() and single.maybe_increment_high_watermark(5, 0)


def test_a_followers_high_watermark_never_passes_its_own_end():
    assert follower_high_watermark(100, 40) == 40
    assert follower_high_watermark(30, 40) == 30
