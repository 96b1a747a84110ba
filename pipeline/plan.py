"""Driver-side planning: which partitions a query reads and which offset range of each.

Spark runs this in the driver's Python planner (batch) or in its long-lived Python stream
runner (streaming); nothing here runs in a task. Offsets are resolved with the broker's
``list_offsets`` (earliest, latest, or the first offset whose timestamp is >= a time), many
partitions per request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from triolog.client.connection import ClusterConnection
from triolog.client.consumer_core import ConsumerConfig, list_offsets_op
from triolog.client.metadata import MetadataCache
from triolog.client.ops import run_sync
from triolog.client.types import EARLIEST, LATEST, TopicPartition

from .options import OffsetSpec, OptionError, Subscription

__all__ = ["BrokerView", "PartitionRange", "rate_limit", "split_ranges"]


@dataclass(frozen=True)
class PartitionRange:
    """Offsets [start, end) of one topic partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class BrokerView:
    """Metadata and offset queries over one lazily opened connection.

    The connection is dropped when the object is pickled (Spark ships readers to workers).
    """

    def __init__(self, bootstrap: str, config: ConsumerConfig, security=None) -> None:
        self.bootstrap = bootstrap
        self.config = config
        self.security = security
        self._conn: ClusterConnection | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_conn": None}

    def _run(self, op):
        if self._conn is None:
            self._conn = ClusterConnection(self.bootstrap, client_id=self.config.client_id, security=self.security)
        return run_sync(op, self._conn)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- partitions ---------------------------------------------------------------------------

    def partitions(self, subscription: Subscription, *, must_exist: bool) -> list[TopicPartition]:
        """The subscription's partitions now, sorted. A metadata request for *all* topics never
        auto-creates one. ``must_exist`` (batch): a named topic or assigned partition that is not
        there is an error naming the option; a stream instead waits for it to appear."""
        cache = MetadataCache(max_age_s=0, request_timeout_s=self.config.request_timeout_ms / 1000)
        topics = self._run(cache.all_topics_op())
        found: list[TopicPartition] = []
        if subscription.kind == "assign":
            for tp in subscription.partitions:
                description = topics.get(tp.topic)
                if description is not None and any(p.partition == tp.partition for p in description.partitions):
                    found.append(tp)
                elif must_exist:
                    raise OptionError("assign", f"partition {tp.partition} of topic {tp.topic!r} does not exist")
        else:
            for name in sorted(topics):
                if subscription.matches(name) and not topics[name].internal:
                    found.extend(TopicPartition(name, p.partition) for p in topics[name].partitions)
            if must_exist and subscription.kind == "subscribe":
                missing = [t for t in subscription.topics if t not in topics]
                if missing:
                    raise OptionError("subscribe", f"topic {missing[0]!r} does not exist")
        return sorted(set(found))

    # -- offsets ------------------------------------------------------------------------------

    def list_offsets(self, queries: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, timestamp) per partition; (-1, -1) for a time no record reaches."""
        if not queries:
            return {}
        found = self._run(list_offsets_op(queries, self.config.request_timeout_ms / 1000))
        return {tp: (answer.offset, answer.timestamp) for tp, answer in found.items()}

    def earliest(self, tps) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self.list_offsets({tp: EARLIEST for tp in tps}).items()}

    def latest(self, tps) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self.list_offsets({tp: LATEST for tp in tps}).items()}

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, starting: bool, strategy: str = "error"
    ) -> dict[TopicPartition, int]:
        """Concrete offsets of ``tps`` for a starting or ending option.

        Per-partition JSON must name every partition (Spark's rule): a silent default for a
        forgotten partition would read the wrong data. A time with no record at or after it
        resolves to latest for an ending option, and for a starting one fails unless
        ``startingOffsetsByTimestampStrategy`` is ``latest``.
        """
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        queries: dict[TopicPartition, int]
        if spec.kind == "timestamp":
            timestamp = spec.timestamp
            assert timestamp is not None  # (set with the kind)
            queries = {tp: timestamp for tp in tps}
        else:
            given = spec.per_partition
            missing = [tp for tp in tps if tp not in given]
            if missing:
                names = ", ".join(f"{t}-{p}" for t, p in missing)
                raise OptionError(
                    spec.option, f"must give every partition read; missing {names} (use -2 for earliest, -1 for latest)"
                )
            unknown = sorted(set(given) - set(tps))
            if unknown:
                raise OptionError(
                    spec.option,
                    f"names {', '.join(f'{t}-{p}' for t, p in unknown)}, "
                    "which the query does not read (no such partition, or not subscribed)",
                )
            queries = {tp: given[tp] for tp in tps}
        if spec.kind == "offsets":
            special = {tp: o for tp, o in queries.items() if o in (EARLIEST, LATEST)}
            resolved = {tp: o for tp, (o, _) in self.list_offsets(special).items()}
            return {tp: resolved.get(tp, o) for tp, o in queries.items()}
        answers = self.list_offsets(queries)
        out: dict[TopicPartition, int] = {}
        unmatched = []
        for tp in tps:
            offset, _ = answers[tp]
            if offset < 0:
                unmatched.append(tp)
            else:
                out[tp] = offset
        if unmatched and starting and strategy == "error":
            tp = unmatched[0]
            raise OptionError(
                spec.option,
                f"no record in {tp.topic}-{tp.partition} has a timestamp at or after "
                f"{queries[tp]} ms (set startingOffsetsByTimestampStrategy=latest "
                "to start at the end of such partitions)",
            )
        out.update(self.latest(unmatched))
        return out


def split_ranges(ranges: list[PartitionRange], min_partitions: int | None) -> list[PartitionRange]:
    """Spark's KafkaOffsetRangeCalculator: with fewer ranges than ``minPartitions``, split each
    range into pieces in proportion to its share of all offsets (at least one piece each)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[PartitionRange] = []
    for r in ranges:
        parts = max(1, round(r.size / total * min_partitions))
        step = r.size / parts
        bounds = [r.start + math.floor(step * i) for i in range(parts)] + [r.end]
        out.extend(PartitionRange(r.topic, r.partition, lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo)
    return out


def rate_limit(
    start: dict[TopicPartition, int], end: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Spark's Kafka rate limit: ``limit`` offsets shared among partitions in proportion to what
    each has available, never starving a small one (a share below 1 rounds up)."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if e - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    out = {}
    for tp, e in end.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = e
            continue
        share = limit * (size / total)
        out[tp] = min(e, start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return out
