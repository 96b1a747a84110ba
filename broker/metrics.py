"""Prometheus metrics: the only module that imports prometheus_client.

Two kinds of series, in one :class:`CollectorRegistry` per broker (never the global one, so that
several brokers in one process, as in tests, do not collide):

* **Storage**, per partition (labels ``topic``, ``partition``), read at scrape time from each
  :class:`triolog.broker.storage.log.Log`'s in-memory state by :class:`LogCollector`: nothing walks the
  log directories and the append path pays nothing. Offsets and segment counts are plain
  attributes; ``Log.size`` sums the segments' cached file sizes (a segment loaded at startup is
  stat'ed once, on its first scrape, and cached from then on).

  ============================== ======= ====================================================
  triolog_log_size_bytes         gauge   bytes in the partition's segment files
  triolog_log_segments           gauge   number of segments
  triolog_log_start_offset       gauge   first offset still in the log
  triolog_log_end_offset         gauge   offset the next appended record gets
  triolog_log_high_watermark     gauge   offset up to which records are acknowledged/visible
  triolog_log_recovery_point     gauge   offset up to which the log is flushed to disk
  triolog_log_producer_ids       gauge   idempotent producer ids the partition remembers
  triolog_log_last_stable_offset gauge   offset up to which read_committed consumers read
                                         (the first offset of the oldest open transaction)
  triolog_log_duplicate_batches_total
                                 counter idempotent batches answered as duplicates (retries
                                         after a lost response: nothing appended)
  triolog_log_rolls_total        counter rolls since startup, by ``reason`` (size, time,
                                         index_full, offset_overflow)
  triolog_log_segments_deleted_total
                                 counter segments deleted by retention since startup, by
                                         ``reason`` (retention_ms, retention_bytes,
                                         log_start_offset)
  triolog_log_deleted_bytes_total
                                 counter bytes of those segments, by ``reason``
  triolog_log_dir_offline        gauge   1 when the log dir (label ``log_dir``) went offline
                                         after an I/O error, else 0
  triolog_log_dir_free_bytes     gauge   bytes available to the broker on the log dir's file
                                         system (``os.statvfs`` at scrape time)
  triolog_log_dir_total_bytes    gauge   size of that file system
  ============================== ======= ====================================================

* **Log cleaner**, read from the :class:`triolog.broker.storage.cleaner.LogCleaner`'s own counters
  at scrape time by :class:`CleanerCollector` (absent when ``log.cleaner.enable=false``):

  ============================================== ======= ==========================================
  triolog_cleaner_runs_total                     counter cleaning runs completed
  triolog_cleaner_bytes_read_total               counter bytes of segments read
  triolog_cleaner_bytes_written_total            counter bytes of cleaned segments written
  triolog_cleaner_records_kept_total             counter records copied into cleaned segments
  triolog_cleaner_records_removed_total          counter records dropped (superseded, tombstones)
  triolog_cleaner_errors_total                   counter runs that failed (partition uncleanable)
  triolog_cleaner_last_run_duration_seconds      gauge   duration of the last run
  triolog_cleaner_buffer_utilization_ratio       gauge   offset map fill in the last run, 0..1
  triolog_cleaner_recopy_ratio                   gauge   written / read in the last run, 0..1
  triolog_cleaner_max_dirty_ratio                gauge   largest dirty ratio of compacted logs
  triolog_cleaner_seconds_since_last_run         gauge   since a cleaner last looked for a log
  triolog_cleaner_uncleanable_partitions         gauge   partitions given up on after an error
  triolog_cleaner_uncleanable_bytes              gauge   dirty bytes of those partitions
  triolog_cleaner_dead_threads                   gauge   cleaner threads that died
  triolog_cleaner_max_compaction_delay_seconds   gauge   most overdue log past max.compaction.lag.ms
  ============================================== ======= ==========================================

* **Server**, updated by each :class:`triolog.broker.server.connection.ClientConnection` through
  :class:`ServerMetrics` (its ``stats`` object) as requests complete. ``api`` is one of the
  protocol's API names or ``unknown`` (a frame that is not a readable request); ``error`` is
  the name of a :class:`triolog.protocol.errors.ErrorCode`. A request counts under its
  response's top-level code; when that is ``NONE`` but an entry of the response carries an
  error (MESSAGE_TOO_LARGE, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR...), under the first
  such code, so a request fails for the error-rate alert when any part of it failed. An entry is
  any nested result with an ``error_code``: a topic or partition, and for describe_log_dirs a
  log dir and a topic or partition of its ``errors``.
  ``triolog_server_partition_errors_total`` counts every failed entry (Kafka's ErrorsPerSec);
  neither has a ``topic`` label, so their series stay bounded.

  ========================================= ========= =========================================
  triolog_server_requests_total             counter   by ``api``, ``error``: one per request
  triolog_server_partition_errors_total     counter   by ``api``, ``error``: entries of responses
                                                      (topics, partitions, log dirs) with an
                                                      error code
  triolog_server_wrong_protocol_connections_total
                                            counter   by ``protocol`` (kafka, http, tls,
                                                      msgpack, plaintext): connections closed
                                                      for speaking another protocol than their
                                                      listener's
  triolog_server_tls_handshake_failures_total
                                            counter   TLS handshakes that failed (wrong CA, no
                                                      client certificate, no shared version)
  triolog_auth_failures_total               counter   failed authentications, by SASL
                                                      ``mechanism`` (an unsupported one too;
                                                      SSL: a certificate no
                                                      ssl.principal.mapping.rules rule names)
  triolog_auth_successes_total              counter   SASL authentications, by ``mechanism``
  triolog_auth_reauthentications_total      counter   SASL re-authentications of open
                                                      connections (connections.max.reauth.ms),
                                                      by ``mechanism``
  triolog_quota_bytes_total                 counter   bytes metered against a client quota, by
                                                      ``quota`` (producer_byte_rate,
                                                      consumer_byte_rate) and the quota's
                                                      entity (``user``, ``client_id``: a name,
                                                      <default>, or empty)
  triolog_quota_request_time_seconds_total  counter   request handling time metered against a
                                                      client's request_percentage, by the
                                                      quota's entity (``user``, ``client_id``)
  triolog_quota_throttle_seconds_total      counter   throttle time given to clients over their
                                                      quota, by ``quota`` (producer_byte_rate,
                                                      consumer_byte_rate, request_percentage)
                                                      and the quota's entity
  triolog_server_request_latency_seconds    histogram by ``api``: frame read to response written
  triolog_server_bytes_in_total             counter   by ``api``: request frames, prefix included
  triolog_server_bytes_out_total            counter   by ``api``: response frames, prefix included
  triolog_server_connections                gauge     open client connections
  triolog_server_connections_opened_total   counter   connections accepted
  triolog_server_connections_refused_total  counter   by ``limit`` (max.connections.per.ip,
                                                      connection_creation_rate)
  triolog_server_connections_closed_total   counter   closed by the broker, by ``limit``
                                                      (connections.max.idle.ms,
                                                      request.receive.timeout.ms,
                                                      socket.request.max.bytes,
                                                      queued.max.request.bytes,
                                                      connections.max.reauth.ms: a SASL
                                                      session expired unrenewed)
  triolog_server_accept_paused              gauge     1 while accepting waits at max.connections
  triolog_server_accept_errors_total        counter   accept() failures retried, by ``error``
                                                      (EMFILE, ENFILE, ENOMEM, ENOBUFS)
  triolog_server_connection_accept_throttle_seconds_total
                                            counter   time accepting waited for
                                                      max.connection.creation.rate (both
                                                      listeners: the limit is broker-wide)
  triolog_server_queued_request_bytes       gauge     request bytes held (queued.max.request.bytes)
  triolog_server_queued_request_waiters     gauge     connections waiting for those bytes
  triolog_server_delayed_fetches            gauge     long polls waiting for data
  ========================================= ========= =========================================

  (A counter of opened connections cannot be named ``triolog_server_connections_total``: the
  exposition format would give it the same family name as the open-connections gauge.)

* **Consumer groups**, read from the group coordinator at scrape time by :class:`GroupCollector`
  (labels ``group``, ``topic``, ``partition``; a group's series go when its offsets do), plus
  the commit latency histogram updated by the offset_commit handler:

  ========================================= ========= =========================================
  triolog_group_committed_offset            gauge     by ``group``, ``topic``, ``partition``:
                                                      the committed offset
  triolog_group_lag                         gauge     by ``group``, ``topic``, ``partition``:
                                                      log end offset minus committed offset
  triolog_group_members                     gauge     by ``group``: members now
  triolog_group_rebalances_total            counter   rebalances started (PreparingRebalance)
  triolog_group_rebalance_seconds_total     counter   time from a rebalance's start to its Stable
                                                      (or Empty) end, summed
  triolog_group_offset_commit_latency_seconds
                                            histogram offset_commit request to durable answer
  ========================================= ========= =========================================

* **Transactions**, read from the transaction coordinator at scrape time by
  :class:`TransactionMetrics`:

  ========================================= ========= =========================================
  triolog_transactions                      gauge     by ``state`` (Kafka's names: Ongoing,
                                                      PrepareCommit, CompleteAbort, ...):
                                                      transactional ids this broker coordinates
  triolog_transaction_timed_out_aborts_total
                                            counter   transactions the coordinator aborted past
                                                      their transaction_timeout_ms
  triolog_transaction_markers_in_flight     gauge     transactions whose COMMIT/ABORT markers
                                                      are being written
  triolog_transaction_verifications_total   counter   by ``result`` (verified, refused,
                                                      unavailable): a partition leader's checks
                                                      of a producer's first transactional batch
                                                      (KIP-890)
  ========================================= ========= =========================================

* **Cluster**, with ``zookeeper.connect`` (Kafka's ReplicaManager and KafkaController meters),
  read at scrape time from the broker's replica manager and controller by :class:`ClusterMetrics`
  (no series on a standalone broker):

  ========================================= ========= =========================================
  triolog_cluster_leader_partitions         gauge     partitions this broker leads (LeaderCount)
  triolog_cluster_under_replicated_partitions
                                            gauge     partitions it leads whose ISR lacks a
                                                      replica (UnderReplicatedPartitions)
  triolog_cluster_active_controller         gauge     1 on the active controller, else 0
                                                      (ActiveControllerCount)
  triolog_cluster_offline_partitions        gauge     on the active controller: partitions
                                                      without a leader (OfflinePartitionsCount)
  triolog_cluster_isr_shrinks_total         counter   ISR shrinks this broker made as leader
                                                      (IsrShrinksPerSec)
  triolog_cluster_isr_expands_total         counter   ISR expansions it made (IsrExpandsPerSec)
  triolog_cluster_elections_total           counter   leader elections the controller ran here, by
                                                      ``kind`` (clean, unclean, preferred,
                                                      controlled_shutdown)
  triolog_cluster_replica_lag               gauge     on a partition's leader, by ``topic``,
                                                      ``partition``, ``replica`` (a follower's
                                                      broker id): offsets the follower is behind
                                                      the leader's log end as of its last fetch
                                                      (all of the log before its first fetch of
                                                      this leader's term). Kafka measures it on the
                                                      follower: FetcherLagMetrics ConsumerLag; its
                                                      max, ReplicaFetcherManager MaxLag
  ========================================= ========= =========================================

Plus prometheus_client's process, platform and GC collectors (``process_*``, ``python_*``).

The HTTP endpoint (:class:`MetricsEndpoint`) is prometheus_client's own threaded WSGI server: it
serves ``/metrics`` from its own threads, so a scrape never runs on the trio event loop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from triolog.broker.cluster.controller import ElectionKind
from triolog.broker.storage.log import DELETION_REASONS, Log
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.segment import ROLL_REASONS
from triolog.protocol.errors import ErrorCode
from triolog.protocol.messages import SUPPORTED_APIS

__all__ = [
    "API_LABELS",
    "WRONG_PROTOCOLS",
    "BrokerMetrics",
    "ClusterMetrics",
    "GroupMetrics",
    "TransactionMetrics",
    "LogCollector",
    "MetricsEndpoint",
    "ServerMetrics",
]

logger = logging.getLogger(__name__)

#: The ``api`` label's values: every API of the protocol, and ``unknown`` for unreadable frames.
UNKNOWN_API = "unknown"
#: APIs only the Kafka listener serves (answered without a msgpack-protocol counterpart).
KAFKA_ONLY_APIS = ("describe_cluster",)
API_LABELS: tuple[str, ...] = (*SUPPORTED_APIS, *KAFKA_ONLY_APIS, UNKNOWN_API)
_KNOWN_APIS = frozenset(API_LABELS)

#: The ``limit`` label's values of triolog_server_connections_closed_total.
CLOSE_LIMITS = (
    "connections.max.idle.ms",
    "request.receive.timeout.ms",
    "socket.request.max.bytes",
    "queued.max.request.bytes",
    "connections.max.reauth.ms",
)
#: The ``error`` label's values of triolog_server_accept_errors_total (the errnos accept retries).
ACCEPT_ERRORS = ("EMFILE", "ENFILE", "ENOMEM", "ENOBUFS")
#: The ``protocol`` label's values of triolog_server_wrong_protocol_connections_total.
WRONG_PROTOCOLS = ("kafka", "http", "tls", "msgpack", "plaintext")

#: Request latency buckets, 0.5 ms to 30 s: produce with acks=1 is sub-millisecond, acks=all
#: waits for a group-commit fsync, a long-poll fetch waits up to its max_wait_ms.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: How often a partition that changed under a scrape is re-read before it is left out of it.
_READ_ATTEMPTS = 3


def _api_label(api: str | None) -> str:
    return api if api in _KNOWN_APIS else UNKNOWN_API


def _error_label(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:  # a code outside the enum: a bug, but the label set stays bounded
        return "UNRECOGNIZED"


# -- server ------------------------------------------------------------------------------------


class ServerMetrics:
    """The ``stats`` object of every client connection; called from the trio thread only.

    Label children are created once and cached, so counting a request is a dict lookup and two
    locked increments. Every API's series exist (at zero) from the first scrape.
    """

    def __init__(self, registry: CollectorRegistry):
        self._requests = Counter(
            "triolog_server_requests_total",
            "Requests answered, by API and error code: the response's top-level code, or when that is "
            "NONE the first error of its entries (topics, partitions, log dirs; NONE = wholly successful).",
            ("api", "error"),
            registry=registry,
        )
        self._partition_errors = Counter(
            "triolog_server_partition_errors_total",
            "Entries of responses (topics, partitions, log dirs) that carried an error code, by API and code.",
            ("api", "error"),
            registry=registry,
        )
        self._wrong_protocol = Counter(
            "triolog_server_wrong_protocol_connections_total",
            "Connections closed because the client spoke another protocol than its listener's.",
            ("protocol",),
            registry=registry,
        )
        self._tls_handshake_failures = Counter(
            "triolog_server_tls_handshake_failures_total",
            "TLS handshakes of client connections that failed.",
            registry=registry,
        )
        self._auth_failures = Counter(
            "triolog_auth_failures_total",
            "Failed authentications, by SASL mechanism (SSL: a client certificate no ssl.principal.mapping.rules rule names).",
            ("mechanism",),
            registry=registry,
        )
        self._quota_bytes = Counter(
            "triolog_quota_bytes_total",
            "Bytes metered against a client quota, by quota and its entity.",
            ("quota", "user", "client_id"),
            registry=registry,
        )
        self._quota_request_time = Counter(
            "triolog_quota_request_time_seconds_total",
            "Request handling time metered against a client's request_percentage, by its entity.",
            ("user", "client_id"),
            registry=registry,
        )
        self._quota_throttle = Counter(
            "triolog_quota_throttle_seconds_total",
            "Throttle time given to clients over their quota.",
            ("quota", "user", "client_id"),
            registry=registry,
        )
        self._auth_successes = Counter(
            "triolog_auth_successes_total",
            "SASL authentications, by mechanism.",
            ("mechanism",),
            registry=registry,
        )
        self._reauthentications = Counter(
            "triolog_auth_reauthentications_total",
            "SASL re-authentications of open connections (connections.max.reauth.ms), by mechanism; "
            "also counted in triolog_auth_successes_total.",
            ("mechanism",),
            registry=registry,
        )
        for protocol in WRONG_PROTOCOLS:
            self._wrong_protocol.labels(protocol)
        latency = Histogram(
            "triolog_server_request_latency_seconds",
            "Time from a request frame being read to its response being written, by API.",
            ("api",),
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        bytes_in = Counter(
            "triolog_server_bytes_in_total",
            "Bytes of request frames received (length prefix included), by API; bytes that never "
            "formed a whole frame count as api=unknown.",
            ("api",),
            registry=registry,
        )
        bytes_out = Counter(
            "triolog_server_bytes_out_total",
            "Bytes of response frames sent (length prefix included), by API.",
            ("api",),
            registry=registry,
        )
        self._connections = Gauge("triolog_server_connections", "Open client connections.", registry=registry)
        self._opened = Counter(
            "triolog_server_connections_opened_total", "Client connections accepted.", registry=registry
        )
        self._refused = Counter(
            "triolog_server_connections_refused_total",
            "Client connections closed at once because a limit was reached, by the limit's config key.",
            ("limit",),
            registry=registry,
        )
        self._closed = Counter(
            "triolog_server_connections_closed_total",
            "Client connections the broker closed because a limit was reached, by the limit's config key.",
            ("limit",),
            registry=registry,
        )
        for limit in CLOSE_LIMITS:
            self._closed.labels(limit)
        self._accept_errors = Counter(
            "triolog_server_accept_errors_total",
            "accept() failures for lack of descriptors or memory (retried), by errno name.",
            ("error",),
            registry=registry,
        )
        for error in ACCEPT_ERRORS:
            self._accept_errors.labels(error)
        self._accept_throttle = Counter(
            "triolog_server_connection_accept_throttle_seconds_total",
            "Time accepting waited for max.connection.creation.rate (Kafka's connection-accept-throttle-time).",
            registry=registry,
        )
        self._accept_paused = Gauge(
            "triolog_server_accept_paused",
            "1 while the broker accepts no connection because max.connections are open, else 0.",
            registry=registry,
        )
        self._queued_bytes = Gauge(
            "triolog_server_queued_request_bytes",
            "Request bytes held in memory by all connections (bounded by queued.max.request.bytes).",
            registry=registry,
        )
        self._queued_waiters = Gauge(
            "triolog_server_queued_request_waiters",
            "Connections that stopped reading until queued.max.request.bytes has room for their frame.",
            registry=registry,
        )
        self._delayed_fetches = Gauge(
            "triolog_server_delayed_fetches", "Fetches waiting for data (long polls) right now.", registry=registry
        )
        self._latency = {api: latency.labels(api) for api in API_LABELS}
        self._bytes_in = {api: bytes_in.labels(api) for api in API_LABELS}
        self._bytes_out = {api: bytes_out.labels(api) for api in API_LABELS}
        self._request_counters: dict[tuple[str, int], Counter] = {}
        self._partition_error_counters: dict[tuple[str, int], Counter] = {}
        for api in API_LABELS:
            self._request_counter(api, ErrorCode.NONE)

    def _request_counter(self, api: str, code: int) -> Counter:
        key = (api, int(code))
        counter = self._request_counters.get(key)
        if counter is None:
            counter = self._request_counters[key] = self._requests.labels(api, _error_label(code))
        return counter

    def _partition_error_counter(self, api: str, code: int) -> Counter:
        key = (api, int(code))
        counter = self._partition_error_counters.get(key)
        if counter is None:
            counter = self._partition_error_counters[key] = self._partition_errors.labels(api, _error_label(code))
        return counter

    # -- the interface ClientConnection and BrokerServer call --------------------------------

    def request_done(
        self, api: str | None, code: int, latency_s: float | None = None, entry_errors: Mapping[int, int] | None = None
    ) -> None:
        """One request answered with top-level ``code``; ``entry_errors`` counts its entries
        (topics, partitions, log dirs) by error code (errors only, in the order first met)."""
        label = _api_label(api)
        if entry_errors:
            for entry_code, count in entry_errors.items():
                self._partition_error_counter(label, entry_code).inc(count)
            if code == ErrorCode.NONE:
                code = next(iter(entry_errors))
        self._request_counter(label, code).inc()
        if latency_s is not None:
            self._latency[label].observe(latency_s)

    def wrong_protocol(self, protocol: str) -> None:
        self._wrong_protocol.labels(protocol).inc()

    def bytes_in(self, api: str | None, n: int) -> None:
        self._bytes_in[_api_label(api)].inc(n)

    def bytes_out(self, api: str | None, n: int) -> None:
        self._bytes_out[_api_label(api)].inc(n)

    def connection_opened(self) -> None:
        self._opened.inc()
        self._connections.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    def tls_handshake_failed(self) -> None:
        self._tls_handshake_failures.inc()

    def quota_recorded(self, quota: str, entity, amount: float, throttle_s: float) -> None:
        """``amount``: bytes, or for request_percentage percent-seconds (handling seconds x 100)."""
        labels = (quota, entity.label("user"), entity.label("client-id"))
        if quota == "request_percentage":
            if amount:
                self._quota_request_time.labels(*labels[1:]).inc(amount / 100)
        else:
            self._quota_bytes.labels(*labels).inc(amount)
        if throttle_s:
            self._quota_throttle.labels(*labels).inc(throttle_s)

    def authenticated(self, mechanism: str, reauthenticated: bool = False) -> None:
        self._auth_successes.labels(mechanism).inc()
        if reauthenticated:
            self._reauthentications.labels(mechanism).inc()

    def authentication_failed(self, mechanism: str) -> None:
        self._auth_failures.labels(mechanism).inc()

    def connection_refused(self, limit: str) -> None:
        self._refused.labels(limit).inc()

    def connection_closed_by_limit(self, limit: str) -> None:
        self._closed.labels(limit).inc()

    def accept_throttled(self, delay_s: float) -> None:
        self._accept_throttle.inc(delay_s)

    def accept_error(self, error: str) -> None:
        self._accept_errors.labels(error).inc()

    def watch(self, server) -> None:
        """Read the gauges of a running ``BrokerServer`` (its pool, long polls, accept state) at
        scrape time, from the scrape thread: each is one attribute read."""
        self._accept_paused.set_function(lambda: 1 if server.accept_paused else 0)
        self._queued_bytes.set_function(lambda: server.request_pool.used)
        self._queued_waiters.set_function(lambda: server.request_pool.waiting)
        self._delayed_fetches.set_function(lambda: server.handler.delayed_fetches if server.handler is not None else 0)


# -- storage -----------------------------------------------------------------------------------


class LogCollector(Collector):
    """Per-partition gauges and roll counters, read from the logs' in-memory state at scrape time.

    Runs on the HTTP server's thread while appends run on worker threads. The values read are
    each atomic under the GIL, but not a consistent snapshot of one another (the end offset may
    be one batch ahead of the size); a partition whose segment map changes in the middle of the
    read (a roll, a deletion) is re-read, and left out of this one scrape if it keeps failing.
    """

    _GAUGES = (
        ("triolog_log_size_bytes", "Bytes in the partition's segment files."),
        ("triolog_log_segments", "Number of segments of the partition."),
        ("triolog_log_start_offset", "First offset still in the partition's log."),
        ("triolog_log_end_offset", "Offset the next record appended to the partition gets."),
        ("triolog_log_high_watermark", "Offset up to which the partition's records are visible to consumers."),
        ("triolog_log_recovery_point", "Offset up to which the partition's log is flushed to disk."),
        ("triolog_log_producer_ids", "Idempotent producer ids the partition remembers (not yet expired)."),
        (
            "triolog_log_last_stable_offset",
            "Offset up to which read_committed consumers read (below the oldest open transaction).",
        ),
    )

    def __init__(self, log_manager: LogManager):
        self.log_manager = log_manager

    def describe(self) -> Iterable[Metric]:
        # The families without samples: lets the registry check names without reading any log.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        gauges = families[: len(self._GAUGES)]
        (rolls, deleted_segments, deleted_bytes, duplicates, dir_offline, dir_free, dir_total) = families[
            len(self._GAUGES) :
        ]
        for (topic, partition), log in sorted(self.log_manager.all_logs().items()):
            row = self._read(topic, partition, log)
            if row is None:
                continue
            values, roll_counts, deletions, duplicate_batches = row
            labels = [topic, str(partition)]
            duplicates.add_metric(labels, duplicate_batches)
            for family, value in zip(gauges, values):
                family.add_metric(labels, value)
            for reason, count in zip(ROLL_REASONS, roll_counts):
                rolls.add_metric([*labels, reason], count)
            for reason, (segments, size) in zip(DELETION_REASONS, deletions):
                deleted_segments.add_metric([*labels, reason], segments)
                deleted_bytes.add_metric([*labels, reason], size)
        offline = set(self.log_manager.offline_dirs())
        for log_dir in self.log_manager.log_dirs:
            dir_offline.add_metric([str(log_dir.path)], 1 if log_dir.path in offline else 0)
            try:
                fs = os.statvfs(log_dir.path)
            except OSError as exc:  # gone or unreadable (an offline disk): no space series this scrape
                logger.debug("cannot read the free space of log dir %s: %s", log_dir.path, exc)
                continue
            # f_bavail: blocks an unprivileged process may use (what df shows as available).
            dir_free.add_metric([str(log_dir.path)], fs.f_bavail * fs.f_frsize)
            dir_total.add_metric([str(log_dir.path)], fs.f_blocks * fs.f_frsize)
        return families

    def _families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["topic", "partition"]
        families: list[GaugeMetricFamily | CounterMetricFamily] = [
            GaugeMetricFamily(name, doc, labels=labels) for name, doc in self._GAUGES
        ]
        families.append(
            CounterMetricFamily(
                "triolog_log_rolls",
                "Segment rolls of the partition since startup, by reason.",
                labels=[*labels, "reason"],
            )
        )
        families.append(
            CounterMetricFamily(
                "triolog_log_segments_deleted",
                "Segments deleted by retention since startup, by reason.",
                labels=[*labels, "reason"],
            )
        )
        families.append(
            CounterMetricFamily(
                "triolog_log_deleted_bytes",
                "Bytes of the segments deleted by retention since startup, by reason.",
                labels=[*labels, "reason"],
            )
        )
        families.append(
            CounterMetricFamily(
                "triolog_log_duplicate_batches",
                "Batches of idempotent producers answered as duplicates (original offsets, nothing appended) "
                "since startup: retries after a lost response.",
                labels=labels,
            )
        )
        families.append(
            GaugeMetricFamily(
                "triolog_log_dir_offline",
                "1 when the log directory went offline after an I/O error.",
                labels=["log_dir"],
            )
        )
        families.append(
            GaugeMetricFamily(
                "triolog_log_dir_free_bytes",
                "Bytes available to the broker on the file system of the log directory (statvfs f_bavail).",
                labels=["log_dir"],
            )
        )
        families.append(
            GaugeMetricFamily(
                "triolog_log_dir_total_bytes",
                "Size of the file system of the log directory.",
                labels=["log_dir"],
            )
        )
        return families

    @staticmethod
    def _read(topic: str, partition: int, log: Log) -> tuple[tuple[int, ...], tuple[int, ...], tuple, int] | None:
        error: Exception | None = None
        for _ in range(_READ_ATTEMPTS):
            try:
                values = (
                    log.size,
                    log.num_segments,
                    log.log_start_offset,
                    log.log_end_offset,
                    log.high_watermark,
                    log.recovery_point,
                    len(log.producer_state_manager.producers),
                    log.last_stable_offset,
                )
                # .get per known reason: iterating the Counter could meet a key added concurrently.
                rolls = tuple(log.roll_counts.get(reason, 0) for reason in ROLL_REASONS)
                deletions = tuple(
                    (log.deleted_segment_counts.get(reason, 0), log.deleted_bytes.get(reason, 0))
                    for reason in DELETION_REASONS
                )
                return values, rolls, deletions, log.duplicate_batches
            except Exception as exc:  # the segment map changed under us, or the log was deleted
                error = exc
        logger.warning("partition %s-%d left out of this scrape: %r", topic, partition, error)
        return None


# -- the log cleaner ---------------------------------------------------------------------------


class CleanerCollector(Collector):
    """The log cleaner's figures, from :meth:`LogCleaner.metrics` at scrape time (Kafka's
    ``kafka.log:type=LogCleaner`` and ``LogCleanerManager`` metrics). Nothing when the cleaner
    is disabled (``log.cleaner.enable=false``)."""

    #: (metric name, CleanerMetrics field, help); counters get ``_total`` from the exposition.
    _COUNTERS = (
        ("triolog_cleaner_runs", "runs", "Cleaning runs completed since startup."),
        ("triolog_cleaner_bytes_read", "bytes_read", "Bytes of segments read by the cleaner since startup."),
        ("triolog_cleaner_bytes_written", "bytes_written", "Bytes of cleaned segments written since startup."),
        ("triolog_cleaner_records_kept", "records_kept", "Records copied into cleaned segments since startup."),
        (
            "triolog_cleaner_records_removed",
            "records_removed",
            "Records dropped by compaction (superseded keys, expired tombstones) since startup.",
        ),
        ("triolog_cleaner_errors", "errors", "Cleaning runs that failed and marked their partition uncleanable."),
    )
    _GAUGES = (
        ("triolog_cleaner_last_run_duration_seconds", "last_run_duration_s", "Duration of the last cleaning run."),
        (
            "triolog_cleaner_buffer_utilization_ratio",
            "max_buffer_utilization",
            "Fill of the offset map in the last run (0..1); Kafka's max-buffer-utilization-percent / 100.",
        ),
        (
            "triolog_cleaner_recopy_ratio",
            "max_recopy_ratio",
            "Bytes written / bytes read in the last run (0..1); Kafka's cleaner-recopy-percent / 100.",
        ),
        (
            "triolog_cleaner_max_dirty_ratio",
            "max_dirty_ratio",
            "Largest dirty ratio among the compacted logs now (Kafka's max-dirty-percent / 100).",
        ),
        (
            "triolog_cleaner_seconds_since_last_run",
            "seconds_since_last_run",
            "Seconds since a cleaner thread last looked for a log to clean (Kafka's time-since-last-run-ms / 1000).",
        ),
        (
            "triolog_cleaner_uncleanable_partitions",
            "uncleanable_partitions",
            "Partitions the cleaner gave up on after an error (Kafka's uncleanable-partitions-count).",
        ),
        ("triolog_cleaner_uncleanable_bytes", "uncleanable_bytes", "Dirty bytes of the uncleanable partitions."),
        ("triolog_cleaner_dead_threads", "dead_threads", "Cleaner threads that died (Kafka's DeadThreadCount)."),
        (
            "triolog_cleaner_max_compaction_delay_seconds",
            "max_compaction_delay_s",
            "How far past max.compaction.lag.ms the most overdue log is (Kafka's max-compaction-delay-secs).",
        ),
    )

    def __init__(self, log_manager: LogManager):
        self.log_manager = log_manager

    def describe(self) -> Iterable[Metric]:
        counters, gauges = self._families()
        return counters + gauges

    def collect(self) -> Iterable[Metric]:
        cleaner = self.log_manager.cleaner
        if cleaner is None:
            return []
        counters, gauges = self._families()
        snapshot = cleaner.metrics()
        for family, (_, field, _) in zip(counters, self._COUNTERS):
            family.add_metric([], getattr(snapshot, field))
        for gauge, (_, field, _) in zip(gauges, self._GAUGES):
            gauge.add_metric([], getattr(snapshot, field))
        return counters + gauges

    def _families(self) -> tuple[list[CounterMetricFamily], list[GaugeMetricFamily]]:
        return (
            [CounterMetricFamily(name, doc) for name, _, doc in self._COUNTERS],
            [GaugeMetricFamily(name, doc) for name, _, doc in self._GAUGES],
        )


class GroupMetrics(Collector):
    """Consumer-group series, from the coordinator's in-memory state at scrape time (a scrape runs
    in the endpoint's thread while the event loop changes the groups: a group that changes under
    the read is re-read, then left out of that scrape)."""

    def __init__(self, registry: CollectorRegistry, log_manager: LogManager):
        self.log_manager = log_manager
        self._coordinator = lambda: None
        self.commit_latency = Histogram(
            "triolog_group_offset_commit_latency_seconds",
            "offset_commit: request handled to durable answer (the record fsynced).",
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        registry.register(self)

    def watch(self, coordinator) -> None:
        """``coordinator``: () -> the GroupCoordinator, or None while there is none."""
        self._coordinator = coordinator

    def commit_done(self, seconds: float) -> None:
        self.commit_latency.observe(seconds)

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[Metric]:
        return [
            GaugeMetricFamily(
                "triolog_group_committed_offset",
                "Committed offset of a group for a partition.",
                labels=("group", "topic", "partition"),
            ),
            GaugeMetricFamily(
                "triolog_group_lag",
                "Log end offset minus the group's committed offset.",
                labels=("group", "topic", "partition"),
            ),
            GaugeMetricFamily("triolog_group_members", "Members of the group.", labels=("group",)),
            CounterMetricFamily("triolog_group_rebalances", "Rebalances started since startup."),
            CounterMetricFamily(
                "triolog_group_rebalance_seconds", "Seconds from rebalance start to its end (Stable or Empty), summed."
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        coordinator = self._coordinator()
        if coordinator is None:
            return families
        committed, lag, members, rebalances, rebalance_s = families
        for _ in range(_READ_ATTEMPTS):
            try:
                groups = list(coordinator.groups.items())
                break
            except RuntimeError:
                continue
        else:
            groups = []
        for group_id, group in groups:
            for _ in range(_READ_ATTEMPTS):
                try:
                    offsets = list(group.offsets.items())
                    count = len(group.members)
                    break
                except RuntimeError:
                    continue
            else:
                continue
            members.add_metric([group_id], count)
            for (topic, partition), entry in offsets:
                labels = [group_id, topic, str(partition)]
                committed.add_metric(labels, entry.offset)
                log = self.log_manager.get_log(topic, partition)
                if log is not None:
                    lag.add_metric(labels, max(0, log.log_end_offset - entry.offset))
        rebalances.add_metric([], coordinator.rebalances)
        rebalance_s.add_metric([], coordinator.rebalance_ms_total / 1000)
        return families


class TransactionMetrics(Collector):
    """The transaction coordinator's series, from its in-memory state at scrape time (as
    GroupMetrics reads the groups), and the partition leaders' verification counts."""

    def __init__(self, registry: CollectorRegistry):
        self._service = lambda: None
        registry.register(self)

    def watch(self, service) -> None:
        """``service``: () -> the TransactionService, or None while there is none."""
        self._service = service

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[Metric]:
        return [
            GaugeMetricFamily(
                "triolog_transactions", "Transactional ids this broker coordinates, by state.", labels=("state",)
            ),
            CounterMetricFamily(
                "triolog_transaction_timed_out_aborts", "Transactions aborted past their transaction_timeout_ms."
            ),
            GaugeMetricFamily(
                "triolog_transaction_markers_in_flight", "Transactions whose COMMIT/ABORT markers are being written."
            ),
            CounterMetricFamily(
                "triolog_transaction_verifications",
                "Partition leaders' verifications of a producer's first transactional batch (KIP-890), by result.",
                labels=("result",),
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        service = self._service()
        if service is None:
            return families
        states, timed_out, in_flight, verifications = families
        for result, count in sorted(service.verifications.items()):
            verifications.add_metric([result], count)
        in_flight.add_metric([], service.markers.in_flight)
        coordinator = service.coordinator
        if coordinator is None:
            return families
        timed_out.add_metric([], coordinator.timed_out_aborts)
        counts: dict[str, int] = {}
        for _ in range(_READ_ATTEMPTS):
            try:
                counts = {}
                for owned in list(coordinator.partitions.values()):
                    for metadata in list(owned.transactions.values()):
                        name = metadata.state.kafka_name
                        counts[name] = counts.get(name, 0) + 1
                break
            except RuntimeError:  # (changed under the read: read again)
                continue
        for state, count in sorted(counts.items()):
            states.add_metric([state], count)
        return families


class ClusterMetrics(Collector):
    """The cluster's series, from the replica manager and controller at scrape time (none until
    ``watch`` gives them: a standalone broker has neither)."""

    def __init__(self, registry: CollectorRegistry):
        self._cluster = lambda: None
        registry.register(self)

    def watch(self, cluster) -> None:
        """``cluster``: () -> (ReplicaManager, ClusterMetadataCache, KafkaController), or None."""
        self._cluster = cluster

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[Metric]:
        return [
            GaugeMetricFamily("triolog_cluster_leader_partitions", "Partitions this broker leads."),
            GaugeMetricFamily(
                "triolog_cluster_under_replicated_partitions", "Partitions it leads whose ISR lacks a replica."
            ),
            GaugeMetricFamily("triolog_cluster_active_controller", "1 on the active controller, else 0."),
            GaugeMetricFamily(
                "triolog_cluster_offline_partitions", "On the active controller: partitions without a leader."
            ),
            CounterMetricFamily("triolog_cluster_isr_shrinks", "ISR shrinks this broker made as leader."),
            CounterMetricFamily("triolog_cluster_isr_expands", "ISR expansions this broker made as leader."),
            CounterMetricFamily(
                "triolog_cluster_elections", "Leader elections the controller ran here.", labels=("kind",)
            ),
            GaugeMetricFamily(
                "triolog_cluster_replica_lag",
                "On the leader: offsets a follower is behind the leader's log end, as of its last fetch.",
                labels=("topic", "partition", "replica"),
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        parts = self._cluster()
        if parts is None:
            return families
        replicas, cache, controller = parts
        leaders, under, active, offline, shrinks, expands, elections, lag = families
        for _ in range(_READ_ATTEMPTS):
            try:
                hosted = list(replicas.hosted.values())
                states = list(cache.states.items())
                break
            except RuntimeError:  # changed by the event loop under the read: read again
                continue
        else:
            hosted, states = [], []
        led = [h for h in hosted if h.leadership is not None]
        leaders.add_metric([], len(led))
        under.add_metric([], sum(1 for h in led if len(h.leadership.isr) < len(h.leadership.replicas)))
        active.add_metric([], 1 if controller.active else 0)
        offline_count = sum(1 for _, versioned in states if versioned.state.leader < 0) if controller.active else 0
        offline.add_metric([], offline_count)
        shrinks.add_metric([], replicas.isr_shrinks)
        expands.add_metric([], replicas.isr_expands)
        for kind in ElectionKind:
            elections.add_metric([kind.value], controller.elections[kind])
        for h in led:
            log_start, log_end = h.log.log_start_offset, h.log.log_end_offset
            for replica, follower in list(h.leadership.followers.items()):
                # (UNKNOWN_OFFSET, -1, before its first fetch of this term: as far as the leader
                # knows, it has none of the log)
                behind = log_end - max(follower.log_end_offset, log_start)
                lag.add_metric([h.topic, str(h.partition), str(replica)], max(0, behind))
        return families


# -- the registry and the endpoint -------------------------------------------------------------


class MetricsEndpoint:
    """prometheus_client's HTTP server for one registry, on its own daemon threads.

    ``host`` empty means every IPv4 interface. ``port`` 0 picks a free port; :attr:`port` is the
    one bound. :meth:`close` blocks for up to the server's poll interval (0.5 s): call it from a
    worker thread, not the event loop.
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int):
        self.host = host or "0.0.0.0"
        self._server, self._thread = start_http_server(port, addr=self.host, registry=registry)
        self.port: int = self._server.server_port
        self._closed = threading.Event()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._server.shutdown()  # returns once serve_forever has returned
        self._server.server_close()
        self._thread.join()


class BrokerMetrics:
    """One broker's registry: server metrics, the storage collector, the process collectors."""

    def __init__(self, log_manager: LogManager, *, process_collectors: bool = True):
        self.registry = CollectorRegistry()
        self.server = ServerMetrics(self.registry)
        self.registry.register(LogCollector(log_manager))
        self.registry.register(CleanerCollector(log_manager))
        self.groups = GroupMetrics(self.registry, log_manager)
        self.transactions = TransactionMetrics(self.registry)
        self.cluster = ClusterMetrics(self.registry)
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self.endpoint: MetricsEndpoint | None = None

    def render(self) -> bytes:
        """The registry in Prometheus text format, as a scrape would see it."""
        return generate_latest(self.registry)

    def start_endpoint(self, host: str, port: int) -> MetricsEndpoint:
        """Serve ``/metrics`` on ``host:port`` (blocking only to bind); raises OSError if it cannot bind."""
        if self.endpoint is not None:
            raise RuntimeError(f"metrics endpoint already serving on port {self.endpoint.port}")
        self.endpoint = MetricsEndpoint(self.registry, host, port)
        return self.endpoint

    def stop_endpoint(self) -> None:
        """Stop serving (blocks up to 0.5 s: call it from a worker thread)."""
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            endpoint.close()
