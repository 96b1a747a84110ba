"""The blocking consumer: a thin shell running :mod:`triolog.client.consumer_core` operations on a socket."""

from __future__ import annotations

import time
from collections.abc import Iterator

from .connection import DEFAULT_BOOTSTRAP, SyncConnection
from .consumer_core import ConsumerConfig, ConsumerCore, Polled, PolledColumns
from .ops import run_sync
from .types import EARLIEST, LATEST, ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = ["Consumer"]


class Consumer:
    """``Consumer("host:port", auto_offset_reset="earliest")``, then assign() or subscribe().

    ``bootstrap_servers``: ``"host:port"``, ``"h1:9092,h2:9092"`` or a list of them, tried in
    order until one answers. ``key_deserializer``/``value_deserializer``: functions turning each
    non-null key/value's bytes into what the records carry (kafka-python's options). Other
    keyword arguments are :class:`triolog.client.consumer_core.ConsumerConfig` fields. Not
    thread-safe (like Kafka's consumer): use it from one thread.
    """

    def __init__(self, bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP, *, key_deserializer=None,
                 value_deserializer=None, **config) -> None:
        self.config = ConsumerConfig(**config)
        self._core = ConsumerCore(self.config, key_deserializer=key_deserializer,
                                  value_deserializer=value_deserializer)
        self._conn = SyncConnection(bootstrap_servers, client_id=self.config.client_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def assign(self, partitions) -> None:
        self._core.assign(partitions)

    def subscribe(self, topics) -> None:
        self._core.subscribe(topics)

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    def seek(self, tp, offset: int) -> None:
        self._core.seek(tp, offset)

    def seek_to_beginning(self, *tps) -> None:
        self._core.seek_to_beginning(tps or None)

    def seek_to_end(self, *tps) -> None:
        self._core.seek_to_end(tps or None)

    def seek_to_timestamp(self, timestamp_ms: int, *tps) -> None:
        self._core.seek_to_timestamp(timestamp_ms, tps or None)

    def position(self, tp) -> int:
        return run_sync(self._core.position_op(tp), self._conn)

    def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return run_sync(self._core.offsets_for_times_op(timestamps), self._conn)

    def beginning_offsets(self, tps) -> dict[TopicPartition, int]:
        return run_sync(self._core.offsets_op(tps, EARLIEST), self._conn)

    def end_offsets(self, tps) -> dict[TopicPartition, int]:
        return run_sync(self._core.offsets_op(tps, LATEST), self._conn)

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> Polled:
        """Up to ``max_records`` (default ``max_poll_records``) records by partition, as
        kafka-python returns them, waiting at most ``timeout_ms`` for the first; {} if none came."""
        return run_sync(self._core.poll_op(timeout_ms, max_records), self._conn)

    def poll_columns(self, timeout_ms: float = 0, max_records: int | None = None) -> PolledColumns:
        """poll(), as one :class:`triolog.client.types.RecordColumns` a partition (lists of
        offsets, timestamps, keys, values, headers; ``.to_arrow()`` for a pyarrow Table), decoded
        without an object a record. Keys and values are bytes: a consumer with deserializers
        raises ValueError. poll() and poll_columns() may be mixed; positions move the same."""
        return run_sync(self._core.poll_columns_op(timeout_ms, max_records), self._conn)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records forever, or until ``consumer_timeout_ms`` passes without one."""
        idle_limit = self.config.consumer_timeout_ms
        last = time.monotonic()
        while True:
            wait_ms = self.config.fetch_max_wait_ms
            if idle_limit is not None:
                wait_ms = max(0.0, min(wait_ms, idle_limit - (time.monotonic() - last) * 1000))
            polled = self.poll(wait_ms)
            if polled:
                for records in polled.values():
                    yield from records
                last = time.monotonic()
            elif idle_limit is not None and (time.monotonic() - last) * 1000 >= idle_limit:
                return
