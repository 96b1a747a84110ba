"""The crash loop's checker can fail: each kind of damage it counts, shown to it on purpose.

Unit tests over hand-made ledgers and partition contents (no broker), and one run of the real
loop whose log is damaged between a kill and the next start, as a broker that lost acknowledged
data would leave it.
"""

from __future__ import annotations

import pytest

from .crash_harness import (
    ACKED,
    NOT_APPENDED,
    UNKNOWN,
    FoundRecord,
    PartitionContents,
    ProducerLedger,
    ProducerSpec,
    all_partitions,
    check,
    decode_value,
    encode_value,
    run_crash_loop,
)

PLAIN0 = all_partitions().index(("plain", 0))
COMPACTED0 = all_partitions().index(("compacted", 0))
RETAINED0 = all_partitions().index(("retained", 0))


def ledger(acks: int, rows: list[tuple[int, int, int, int]], index: int = 0) -> ProducerLedger:
    """rows: (target, key number, status, offset) by seq."""
    out = ProducerLedger(index, ProducerSpec(acks, "none", ("plain", "compacted", "retained")))
    for target, key, status, offset in rows:
        out.target.append(target)
        out.key.append(key)
        out.status.append(status)
        out.offset.append(offset)
    return out


def contents(**found: list[tuple[int, int, int]]) -> dict:
    """found: partition name ("plain0") -> [(offset, producer, seq)]."""
    out = {tp: PartitionContents() for tp in all_partitions()}
    for name, rows in found.items():
        tp = (name[:-1], int(name[-1]))
        out[tp].records = [FoundRecord(offset, producer, seq, None) for offset, producer, seq in rows]
        out[tp].high_watermark = max((r[0] for r in rows), default=-1) + 1
    return out


def test_value_codec_round_trips_and_refuses_damage():
    value = encode_value(3, 12345, b"payload")
    assert decode_value(value) == (3, 12345)
    assert decode_value(value[:-1] + bytes([value[-1] ^ 1])) is None
    assert decode_value(value[:10] + b"X" + value[11:]) is None
    assert decode_value(None) is None and decode_value(b"short") is None


def test_an_intact_log_has_no_violations():
    ledgers = [ledger(-1, [(PLAIN0, -1, ACKED, 0), (PLAIN0, -1, ACKED, 1), (PLAIN0, -1, UNKNOWN, -1)])]
    counts = check(ledgers, contents(plain0=[(0, 0, 0), (1, 0, 1)]))
    assert counts.violations() == {}
    assert (counts.acknowledged, counts.unknown_outcome, counts.unknown_present) == (2, 1, 0)


@pytest.mark.parametrize("acks, field", [(-1, "lost"), (1, "lost_acks_1")])
def test_a_missing_acknowledged_record_is_lost(acks, field):
    ledgers = [ledger(acks, [(PLAIN0, -1, ACKED, 0), (PLAIN0, -1, ACKED, 1)])]
    counts = check(ledgers, contents(plain0=[(0, 0, 0)]))
    assert counts.violations() == {field: 1}


def test_a_record_found_twice_is_duplicated():
    ledgers = [ledger(-1, [(PLAIN0, -1, ACKED, 0), (PLAIN0, -1, UNKNOWN, -1)])]
    counts = check(ledgers, contents(plain0=[(0, 0, 0), (1, 0, 1), (2, 0, 1)]))
    assert counts.violations() == {"duplicated": 1}


def test_a_record_at_another_offset_or_partition_is_misplaced():
    ledgers = [ledger(-1, [(PLAIN0, -1, ACKED, 0), (PLAIN0, -1, ACKED, 1)])]
    assert check(ledgers, contents(plain0=[(0, 0, 0), (5, 0, 1)])).violations() == {"misplaced": 1}
    moved = contents(plain0=[(0, 0, 0)], plain1=[(1, 0, 1)])
    assert check(ledgers, moved).violations() == {"misplaced": 1}


def test_a_record_whose_request_never_left_must_not_be_in_the_log():
    ledgers = [ledger(-1, [(PLAIN0, -1, NOT_APPENDED, -1)])]
    assert check(ledgers, contents(plain0=[(0, 0, 0)])).violations() == {"not_appended_present": 1}


def test_an_intact_value_never_sent_is_corrupt():
    ledgers = [ledger(-1, [(PLAIN0, -1, ACKED, 0)])]
    assert check(ledgers, contents(plain0=[(0, 0, 0), (1, 0, 7)])).violations() == {"corrupted": 1}


def test_compaction_may_remove_a_record_only_after_a_later_one_of_its_key():
    rows = [(COMPACTED0, 1, ACKED, 0), (COMPACTED0, 1, ACKED, 1), (COMPACTED0, 2, ACKED, 2)]
    ledgers = [ledger(-1, rows)]
    superseded = check(ledgers, contents(compacted0=[(1, 0, 1), (2, 0, 2)]))
    assert superseded.violations() == {} and superseded.superseded == 1
    # Key 2's only (latest) record removed: lost. Key 1's latest removed, its older one kept: lost.
    assert check(ledgers, contents(compacted0=[(1, 0, 1)])).violations() == {"lost": 1}
    assert check(ledgers, contents(compacted0=[(0, 0, 0), (2, 0, 2)])).violations() == {"lost": 1}


def test_records_below_the_log_start_of_a_retention_topic_expired():
    ledgers = [ledger(-1, [(RETAINED0, -1, ACKED, 0), (RETAINED0, -1, ACKED, 1)])]
    found = contents(retained0=[(1, 0, 1)])
    found[("retained", 0)].log_start_offset = 1
    counts = check(ledgers, found)
    assert counts.violations() == {} and counts.expired == 1


def test_partition_level_damage_is_counted():
    found = contents()
    found[("plain", 2)].gaps = 3
    found[("plain", 2)].corrupted = 1
    found[("plain", 1)].complete = False
    found[("plain", 1)].problem = "no progress"
    assert check([], found).violations() == {"gaps": 3, "corrupted": 1, "unreadable": 1}


def test_the_loop_sees_acknowledged_records_cut_from_the_log(tmp_path):
    """Between a kill and the restart, empty plain-0's segment files once they hold 64 KB: what a
    broker that acknowledged without writing would leave (more than the in-flight, unacknowledged
    batches could explain). The loop must report lost records."""
    cut = []

    def damage(cycle: int, data_dir):
        segments = list((data_dir / "plain-0").glob("*.log"))
        size = sum(p.stat().st_size for p in segments)
        if cut or size < 65536:
            return
        for segment in segments:
            with open(segment, "r+b") as f:
                f.truncate(0)
        cut.append(size)

    result = run_crash_loop(tmp_path / "data", cycles=5, seed=5, max_serve_s=0.8, after_kill=damage)
    assert cut, "plain-0 never reached 64 KB"
    assert result.counts.lost + result.counts.lost_acks_1 > 100, result.counts
