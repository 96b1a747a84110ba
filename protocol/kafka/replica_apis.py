"""A follower's Fetch (Kafka's Fetch with ReplicaId >= 0), as the broker's handler sees it.

Served on the Kafka listener only: the msgpack protocol has no replica fetch, so these shapes are
not messages of its table. They extend the consumer's fetch with what Kafka's replication
carries: the follower's id, the leader epoch it believes current, the epoch of its last fetched
batch (truncate-on-fetch, Fetch v12+), its log start; and in the answer, the diverging epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from triolog.protocol import messages as m

#: No leader epoch named, or no divergence (Kafka's -1).
NO_EPOCH = -1


@dataclass(frozen=True, kw_only=True)
class ReplicaFetchPartition(m.FetchPartition):
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = -1


@dataclass(frozen=True, kw_only=True)
class ReplicaFetchRequest(m.FetchRequest):
    """Its ``topics`` hold ReplicaFetchPartitions."""

    replica_id: int


@dataclass(frozen=True, kw_only=True)
class ReplicaFetchPartitionResult(m.FetchPartitionResult):
    #: The largest epoch of the leader's log not above the follower's last fetched one, and where
    #: it ends, when the follower's log diverges from the leader's (no records then); else -1.
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = -1
