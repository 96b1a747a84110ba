"""A leader's appends as a request handler answers them: per partition, appended (the log's
LogAppendInfo) or refused (the error), with what an acks=all wait needs. Produce fills them, and
so does WriteTxnMarkers; each listener encodes them its own way."""

from __future__ import annotations

from dataclasses import dataclass

from triolog.broker.storage.log import Log, LogAppendInfo

from .error_mapping import ApiError


@dataclass(slots=True)
class PartitionAppend:
    """One partition's outcome of a produce: appended (``info``), or refused (``error``)."""

    partition: int
    info: LogAppendInfo | None = None
    error: ApiError | None = None
    #: An error's log start offset, as Kafka's ReplicaManager answers it (-1: unknown).
    log_start_offset: int = -1
    #: The log an acks=all answer waits to see fsynced: below ``info``'s end, or, for an error
    #: (DUPLICATE_SEQUENCE_NUMBER), below ``flush_before``, where the original batch lies.
    log: Log | None = None
    flush_before: int = 0
    #: The leader epoch the batch was appended in (a cluster's acks=all checks leadership since).
    leader_epoch: int = -1


@dataclass(slots=True)
class TopicAppends:
    name: str
    partitions: list[PartitionAppend]
