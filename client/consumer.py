"""The blocking consumer: a thin shell running :mod:`triolog.client.consumer_core` operations on a socket."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from .address import format_address
from .connection import DEFAULT_BOOTSTRAP, ClusterConnection, SyncConnection
from .consumer_coordinator import COORDINATOR_APIS, CommitFailedError, RebalanceListener
from .consumer_core import ConsumerConfig, ConsumerCore, Polled, PolledColumns
from .ops import run_sync
from .security import split_security
from .transactions import ConsumerGroupMetadata
from .types import EARLIEST, LATEST, ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = ["CommitFailedError", "Consumer", "RebalanceListener"]

log = logging.getLogger(__name__)


class _GroupConnections:
    """What the consumer's operations run on: the bootstrap connection, and for the group
    requests (join, sync, heartbeat, commits...) a connection to the group's coordinator, at
    the address find_coordinator gave (see :mod:`triolog.client.consumer_coordinator`).
    Thread-safe: the heartbeat thread shares it."""

    def __init__(self, main: ClusterConnection, group, client_id: str) -> None:
        self.main, self.group, self.client_id = main, group, client_id
        self._coordinator: SyncConnection | None = None
        self._address = None
        self._lock = threading.Lock()

    def _for(self, request) -> SyncConnection | ClusterConnection:
        if self.group is None or request.api not in COORDINATOR_APIS:
            return self.main
        address = self.group.coordinator or self._address
        if address is None:
            return self.main
        with self._lock:
            if self._coordinator is None or address != self._address:
                if self._coordinator is not None:
                    self._coordinator.close()
                self._coordinator = SyncConnection(
                    format_address(address), client_id=self.client_id, security=self.main.security
                )
                self._address = address
            return self._coordinator

    def call(self, request, timeout_s: float):
        return self._for(request).call(request, timeout_s)

    def send(self, request, timeout_s: float):
        conn = self._for(request)
        handle = conn.send(request, timeout_s)
        return None if handle is None else (conn, handle)

    def receive(self, handle, timeout_s: float, give_up: bool = True):
        conn, waiting = handle
        return conn.receive(waiting, timeout_s, give_up=give_up)

    def close(self) -> None:
        with self._lock:
            if self._coordinator is not None:
                self._coordinator.close()
        self.main.close()


class Consumer:
    """``Consumer("host:port", auto_offset_reset="earliest")``, then assign() or subscribe().

    ``bootstrap_servers``: ``"host:port"``, ``"h1:9092,h2:9092"`` or a list of them, tried in
    order until one answers; on a cluster, every partition's requests then go to its leader (see
    :mod:`triolog.client.cluster`). ``key_deserializer``/``value_deserializer``: functions turning each
    non-null key/value's bytes into what the records carry (kafka-python's options). Other
    keyword arguments are :class:`triolog.client.consumer_core.ConsumerConfig` fields, or the
    TLS/SASL settings of :mod:`triolog.client.security` (``security_protocol``, ``sasl_mechanism``,
    ``sasl_username``, ``sasl_password``, ``ssl_cafile``...). Not
    thread-safe (like Kafka's consumer): use it from one thread.

    With ``group_id``, subscribe() joins that consumer group (see
    :mod:`triolog.client.consumer_coordinator`): commit(), committed(), auto-commit, a
    heartbeat thread, and close() commits and leaves the group.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        key_deserializer=None,
        value_deserializer=None,
        **config,
    ) -> None:
        self.security, config = split_security(config)
        self.config = ConsumerConfig(**config)
        self._core = ConsumerCore(self.config, key_deserializer=key_deserializer, value_deserializer=value_deserializer)
        self._conn = _GroupConnections(
            ClusterConnection(
                bootstrap_servers,
                client_id=self.config.client_id,
                security=self.security,
                retry_backoff_s=self.config.retry_backoff_ms / 1000,
                metadata_timeout_s=self.config.request_timeout_ms / 1000,
            ),
            self._core.group,
            self.config.client_id,
        )
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """With a group: commit the positions (enable_auto_commit) and leave the group
        (leave_group), as Kafka's close() does; then close the connections."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        try:
            if self._core.group is not None:
                try:
                    run_sync(self._core.close_op(), self._conn)
                except Exception as exc:  # closing goes on: the session timeout removes the member
                    log.warning("consumer close: group commit/leave failed: %s", exc)
        finally:
            self._conn.close()

    def _heartbeat_loop(self) -> None:
        core = self._core
        group = core.group
        assert group is not None  # (the thread runs for a group member only)
        while not self._stop.wait(min(group.heartbeat_due(), 1.0)):
            try:
                run_sync(core.heartbeat_op(), self._conn)
            except Exception as exc:  # the next beat tries again; poll() sees what matters
                log.warning("heartbeat of group %s failed: %s", group.group_id, exc)

    def assign(self, partitions) -> None:
        self._core.assign(partitions)

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """``topics`` (a name or a list); with a ``group_id``, or a ``pattern`` (regular
        expression over whole topic names) and a ``listener`` (:class:`RebalanceListener`):
        the group shares the partitions out at the next poll, which joins it; a background thread
        heartbeats while the consumer is a member."""
        self._core.subscribe(topics, pattern=pattern, listener=listener)
        if self._core.group is not None and self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="triolog-heartbeat", daemon=True)
            self._heartbeat.start()

    def unsubscribe(self) -> None:
        """Drop the subscription; a group member commits (auto-commit on) and leaves the group."""
        run_sync(self._core.unsubscribe_op(), self._conn)

    def subscription(self) -> set[str]:
        return self._core.subscription()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group, generation and member id, for a transactional producer's
        send_offsets_to_transaction (Kafka's groupMetadata(): the broker refuses the offsets of a
        member the group has since replaced)."""
        group = self._core.group
        if group is None:
            raise ValueError("this consumer has no group_id: no group metadata")
        return ConsumerGroupMetadata(
            group.group_id, group.generation, group.member_id, self._core.config.group_instance_id
        )

    def commit(self, offsets: dict | None = None) -> None:
        """Commit to the group, synchronously: ``offsets`` ({tp: next offset to read}) or every
        assigned partition's position (what poll() has returned). Raises CommitFailedError when
        the group has rebalanced since (the records may be processed by another member)."""
        run_sync(self._core.commit_op(offsets), self._conn)

    def committed(self, tp) -> int | None:
        """The group's committed offset for ``tp`` (None if it has none)."""
        return run_sync(self._core.committed_op(tp), self._conn)

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
            wait_ms: float = self.config.fetch_max_wait_ms
            if idle_limit is not None:
                wait_ms = max(0.0, min(wait_ms, idle_limit - (time.monotonic() - last) * 1000))
            polled = self.poll(wait_ms)
            if polled:
                for records in polled.values():
                    yield from records
                last = time.monotonic()
            elif idle_limit is not None and (time.monotonic() - last) * 1000 >= idle_limit:
                return
