"""How offsets are shared out among Spark tasks and micro-batches (no Spark or broker needed)."""

from __future__ import annotations

from triolog.client.types import TopicPartition
from triolog.pipeline.plan import PartitionRange, rate_limit, split_ranges

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def test_min_partitions_splits_in_proportion_and_covers_every_offset_once():
    ranges = [PartitionRange("t", 0, 0, 900), PartitionRange("t", 1, 100, 200), PartitionRange("t", 2, 5, 5)]
    pieces = split_ranges(ranges, 10)
    assert [p for p in pieces if p.partition == 0] == [PartitionRange("t", 0, i * 100, i * 100 + 100) for i in range(9)]
    assert [p for p in pieces if p.partition == 1] == [PartitionRange("t", 1, 100, 200)]
    assert all(p.partition != 2 for p in pieces)  # nothing to read: no task
    # enough ranges already: one task per partition, as without the option
    assert split_ranges(ranges, 2) == ranges[:2]


def test_max_offsets_per_trigger_is_shared_by_what_each_partition_has_and_never_starves_one():
    start = {A: 0, B: 1000, C: 50}
    end = {A: 9000, B: 1010, C: 50}
    limited = rate_limit(start, end, 1000)
    assert limited == {A: 998, B: 1001, C: 50}  # shares 1000*9000/9010 = 998.9 and 1000*10/9010 = 1.1, floored
    assert sum(limited[tp] - start[tp] for tp in start) <= 1000
    tiny = rate_limit({A: 0, B: 0}, {A: 10_000, B: 1}, 100)
    assert tiny[B] == 1  # a share below one offset rounds up, so a small partition still moves
    assert rate_limit(start, start, 10) == start
