"""The fault harness (tests/cluster/fault_harness.py) in CI: its checker on hand-made histories,
a short safe run (RF=3, min.insync.replicas=2, acks=all, unclean election off) that must lose,
duplicate and contradict nothing over a dozen faults of every kind, and the acks=1 run that must
show Kafka's documented loss (the checker sees a loss when there is one). bench/cluster_faults.py
runs the same harness for hundreds of faults."""

from __future__ import annotations

import os

from .fault_harness import SAFE, History, check, format_result, run_acks1_loss, run_faults

CI_FAULTS = int(os.environ.get("TRIOLOG_FAULTS", "12"))
CI_SEED = int(os.environ.get("TRIOLOG_FAULT_SEED", "25"))


def _history(acknowledged, reads, attempted=None, writers=None):
    if attempted is None:
        attempted = {v for _, _, v in acknowledged} | {v for obs in reads.values() for _, _, v in obs}
    return History(acknowledged, attempted, reads, "final", writers or {})


def test_checker_passes_a_clean_history():
    acked = [(0, 0, b"a"), (0, 1, b"b"), (1, 0, b"c")]
    verdict = check(
        _history(
            acked,
            {"final": [*acked, (1, 1, b"d")], "replica-1": acked, "along": acked[:1]},
            attempted={b"a", b"b", b"c", b"d", b"never-acked"},
        )
    )
    assert verdict.ok and verdict.acknowledged == 3, verdict


def test_checker_sees_a_lost_record():
    acked = [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c")]
    verdict = check(_history(acked, {"final": [(0, 0, b"a"), (0, 1, b"b")]}))
    assert verdict.lost == [(0, 2, b"c")] and not verdict.duplicated and not verdict.inconsistent


def test_checker_sees_an_acknowledged_offset_taken_by_another_value():
    acked = [(0, 0, b"a"), (0, 1, b"b")]
    verdict = check(_history(acked, {"final": [(0, 0, b"a"), (0, 1, b"x"), (0, 2, b"b")]}))
    assert verdict.lost == [(0, 1, b"b")]


def test_checker_sees_a_duplicated_value():
    acked = [(0, 0, b"a"), (0, 1, b"b")]
    verdict = check(_history(acked, {"final": [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"b")]}))
    assert not verdict.lost and list(verdict.duplicated) == [b"b"]
    assert sorted(verdict.duplicated[b"b"]) == [("final", 0, 1), ("final", 0, 2)]


def test_checker_tells_a_clients_resend_in_a_new_producer_epoch_from_a_broker_duplicate():
    acked = [(0, 1, b"b")]
    reads = {"final": [(0, 0, b"b"), (0, 1, b"b")]}
    # Producer 7 wrote b in epoch 1, then again in epoch 2 (seq 0): the client's re-send.
    resent = check(_history(acked, reads, writers={(0, 0): (7, 1), (0, 1): (7, 2)}))
    assert resent.ok and list(resent.resent) == [b"b"] and not resent.duplicated
    # Twice in one producer epoch: the brokers failed to deduplicate.
    duplicate = check(_history(acked, reads, writers={(0, 0): (7, 2), (0, 1): (7, 2)}))
    assert not duplicate.ok and list(duplicate.duplicated) == [b"b"] and not duplicate.resent
    # Unknown writers (the copy is in no replica's files) count against the brokers.
    assert list(check(_history(acked, reads)).duplicated) == [b"b"]


def test_checker_sees_a_value_at_two_offsets_across_sources():
    acked = [(0, 0, b"a")]
    verdict = check(_history(acked, {"final": [(0, 0, b"a")], "replica-2": [(1, 0, b"a")]}))
    assert list(verdict.duplicated) == [b"a"] and not verdict.lost


def test_checker_sees_replicas_disagreeing_on_an_offset():
    acked = [(0, 0, b"a"), (0, 1, b"b")]
    verdict = check(_history(acked, {"final": acked, "replica-1": acked, "replica-3": [(0, 0, b"a"), (0, 1, b"z")]}))
    assert not verdict.lost and list(verdict.inconsistent) == [(0, 1)]
    assert verdict.inconsistent[(0, 1)] == {b"b": ["final", "replica-1"], b"z": ["replica-3"]}


def test_checker_sees_a_value_never_sent():
    acked = [(0, 0, b"a")]
    verdict = check(_history(acked, {"final": [(0, 0, b"a"), (0, 1, b"ghost")]}, attempted={b"a"}))
    assert verdict.unexpected == [("final", 0, 1, b"ghost")] and not verdict.ok


def test_safe_setting_loses_nothing_over_faults_of_every_kind(tmp_path):
    result = run_faults(tmp_path, SAFE, faults=CI_FAULTS, seed=CI_SEED, log=print)
    print(format_result(result))
    assert not result.unhealed, f"seed {CI_SEED}: the cluster did not heal after {result.unhealed}"
    assert len(result.faults) == CI_FAULTS
    verdict = result.verdict
    assert verdict.acknowledged > 1000, f"too little acknowledged to mean anything: {verdict.summary()}"
    assert verdict.ok, f"seed {CI_SEED}: {format_result(result)}"


def test_acks_1_loses_what_the_leader_alone_acknowledged(tmp_path):
    result = run_acks1_loss(tmp_path, log=print)
    print(format_result(result))
    verdict = result.verdict
    assert not result.unhealed
    # Every record acknowledged by the leader alone is gone: the checker sees the loss.
    lost = {value for _, _, value in verdict.lost}
    assert lost and all(value.startswith(b"leader-only-") for value in lost), format_result(result)
    assert len(lost) == 200
    assert not verdict.duplicated and not verdict.inconsistent and not verdict.unexpected
