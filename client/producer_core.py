"""The producer's logic, shared by :class:`triolog.client.Producer` and :class:`triolog.client.aio.AsyncProducer`.

The flavours only decide *when* to run these operations (a sender thread, or a trio task).

Retry rule
----------
A batch is sent again only when the broker cannot have appended it:

* :class:`triolog.client.errors.RequestNotSentError`: the connection failed (or could not be opened)
  before the whole request frame was written. The broker acts on whole frames only.
* ``UNKNOWN_TOPIC_OR_PARTITION`` for the partition: the broker refused it before appending. The
  metadata is refreshed first (which also asks the broker to auto-create the topic, as Kafka's
  producer does: produce itself never creates one); if the topic exists but has no such
  partition the batch fails at once, since waiting cannot make the partition appear.

Retries wait ``retry_backoff_ms`` and stop after ``retries`` attempts or once the batch is older
than ``delivery_timeout_ms``; the batch then fails with the last error. Everything else fails the
batch's futures without a retry, in particular a connection lost after the request was written
(:class:`ResponseLostError`: every request outstanding on that connection) and
``REQUEST_TIMED_OUT`` (appended, fsync unconfirmed): the records may be in the log, and sending
them again could store them twice. Records are never silently duplicated.

In flight
---------
Up to ``max_in_flight_requests_per_connection`` produce requests (Kafka's setting) are
outstanding at once. The default is 1 until the producer is idempotent: Kafka's default of 5 is
safe there because sequence numbers keep order, and without them the common first send to a
topic that is being auto-created (refused, retried after a later batch landed) reordered
records. Up to that many requests are outstanding; their responses are handled in the order the requests were sent. A
retried batch goes back to its partition's queue ahead of every batch never sent, behind the
batches already put back (so a wave of failures is resent in its order). The ordering caveat is
Kafka's own for a non-idempotent producer: with more than one request in flight and retries
allowed, a batch retried after a *later* batch of its partition was appended lands after it.
Only the two retriable cases above can cause that (a frame that never left, an unknown partition
that then appears). With ``max_in_flight_requests_per_connection=1`` records keep their order
whatever happens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import CompressionType

from triolog import core

from .errors import InvalidResponseError, ProducerClosedError, SerializationError, TriologClientError, error_for
from .metadata import MetadataCache
from .ops import Call, Op, check_response, now
from .serde import Serializer, as_topic_function

#: The accumulator this process runs: compiled when built (see :mod:`triolog.core`).
accumulator_module = core.load("client.accumulator")
ProducerBatch = accumulator_module.ProducerBatch
RecordAccumulator = accumulator_module.RecordAccumulator
RecordFuture = accumulator_module.RecordFuture
RecordFutures = accumulator_module.RecordFutures
partition_for_key = core.load("client.partitioner").partition_for_key

Headers = tuple[tuple[str, bytes | None], ...]

#: How long send()'s fast path trusts a topic's partition count before asking the metadata cache
#: again (which applies ``metadata_max_age_ms``).
KNOWN_TOPIC_S = 1.0

__all__ = ["ProducerConfig", "ProducerCore", "parse_compression"]


def check_timestamp(value, what: str) -> int:
    """A record's timestamp as the batch will carry it: epoch milliseconds, 0 .. 2^63-1 (Kafka's
    producer refuses a negative one; a larger one does not fit the batch's int64)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be an int (epoch ms) or None, got {type(value).__name__}")
    stamp = int(value)
    if not 0 <= stamp <= 2**63 - 1:
        raise ValueError(f"{what} must be between 0 and 2^63-1 (epoch ms), got {value!r}")
    return stamp


def parse_compression(value: str | int | CompressionType | None) -> CompressionType:
    """``none``/``gzip``/``snappy``/``lz4``/``zstd`` (Kafka's ``compression.type`` names)."""
    if value is None:
        return CompressionType.NONE
    if isinstance(value, str):
        try:
            return CompressionType[value.strip().upper()]
        except KeyError:
            names = ", ".join(c.kafka_name for c in CompressionType)
            raise ValueError(f"compression must be one of {names}, got {value!r}") from None
    return CompressionType(value)


@dataclass(frozen=True)
class ProducerConfig:
    """Kafka's producer settings, with Kafka's defaults (``linger_ms`` as in Kafka 4.0)."""

    acks: int = -1
    linger_ms: float = 5
    batch_size: int = 16384
    compression: CompressionType | str = CompressionType.NONE
    compression_level: int | None = None
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    #: How long send() may wait for metadata or buffer space before raising.
    max_block_ms: int = 60_000
    buffer_memory: int = 32 * 1024 * 1024
    metadata_max_age_ms: int = 300_000
    client_id: str = "triolog-producer"
    #: Produce requests outstanding at once on the connection (see "In flight" above); 1 keeps
    #: records in order whatever happens.
    max_in_flight_requests_per_connection: int = 1

    def __post_init__(self) -> None:
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(self.acks, self.acks) if isinstance(self.acks, str) else self.acks
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 ('all'), got {self.acks!r}")
        object.__setattr__(self, "acks", acks)
        object.__setattr__(self, "compression", parse_compression(self.compression))
        if self.batch_size < 0 or self.linger_ms < 0:
            raise ValueError("batch_size and linger_ms cannot be negative")
        in_flight = self.max_in_flight_requests_per_connection
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"max_in_flight_requests_per_connection must be an int >= 1, got {in_flight!r}")


class PreparedRecord(NamedTuple):
    """A record checked and partition-resolved by prepare_op, ready for the accumulator."""

    topic: str
    partition: int | None  # None: keyless, the accumulator picks the sticky partition
    num_partitions: int | None
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers
    size: int


class ProducerCore:
    """``key_serializer``/``value_serializer``: called with every non-None key/value given to
    send(), as kafka-python's; they return bytes (or str, sent as UTF-8). None is never passed
    to them: it stays a null key or a tombstone."""

    def __init__(self, config: ProducerConfig, *, key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None) -> None:
        self.config = config
        self.key_serializer = as_topic_function("key_serializer", key_serializer, "serialize")
        self.value_serializer = as_topic_function("value_serializer", value_serializer, "serialize")
        self.metadata = MetadataCache(max_age_s=config.metadata_max_age_ms / 1000,
                                      request_timeout_s=config.request_timeout_ms / 1000,
                                      retry_backoff_s=config.retry_backoff_ms / 1000,
                                      allow_auto_create=True)
        self.accumulator = RecordAccumulator(batch_size=config.batch_size, linger_s=config.linger_ms / 1000)
        self.accumulator.configure_fast_path(self.key_serializer is None and self.value_serializer is None,
                                             config.buffer_memory, config.acks)

    # -- send() ------------------------------------------------------------------------------

    def prepare_cached(self, topic: str, value, key=None, headers=(), partition: int | None = None,
                       timestamp_ms: int | None = None) -> PreparedRecord | None:
        """prepare_op without I/O (send()'s fast path): the record, or None when the topic's
        metadata must be fetched first."""
        description = None
        if partition is None:
            description = self.metadata.get(topic)
            if description is None:
                return None
        elif self.config.acks == 0 and self.metadata.get(topic) is None:
            return None  # no response will tell us the topic is missing: look it up (and create it) first
        return self._prepare(topic, value, key, headers, partition, timestamp_ms, description)

    def prepare_op(self, topic: str, value, key=None, headers=(), partition: int | None = None,
                   timestamp_ms: int | None = None) -> Op[PreparedRecord]:
        """Check and encode one record and resolve its partition (metadata only when needed)."""
        description = None
        if partition is None or self.config.acks == 0:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, got {topic!r}")
            found = yield from self.metadata.topic_op(topic, self.config.max_block_ms / 1000)
            if partition is None:
                description = found
        return self._prepare(topic, value, key, headers, partition, timestamp_ms, description)

    def _prepare(self, topic, value, key, headers, partition, timestamp_ms, description) -> PreparedRecord:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if self.key_serializer is not None and key is not None:
            key = self._serialize(self.key_serializer, topic, headers, key, "key")
        if self.value_serializer is not None and value is not None:
            value = self._serialize(self.value_serializer, topic, headers, value, "value")
        key, value = to_bytes(key, "key"), to_bytes(value, "value")
        headers = normalize_headers(headers)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else check_timestamp(timestamp_ms, "timestamp_ms")
        num_partitions = None
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise ValueError(f"partition must be an int >= 0, got {partition!r}")
        else:
            num_partitions = len(description.partitions)
            self.accumulator.learn(topic, num_partitions, now() + KNOWN_TOPIC_S)
            if key is not None:
                partition = partition_for_key(key, num_partitions)
        size = 80 + len(key or b"") + len(value or b"")
        if headers:
            size += sum(len(k) + len(v or b"") for k, v in headers)
        return PreparedRecord(topic, partition, num_partitions, key, value, timestamp, headers, size)

    @staticmethod
    def _serialize(serializer, topic: str, headers, data, what: str):
        try:
            out = serializer(topic, list(headers), data)
        except Exception as exc:
            raise SerializationError(f"{what}_serializer failed on {type(data).__name__}: "
                                     f"{type(exc).__name__}: {exc}", topic=topic) from exc
        if out is not None and not isinstance(out, (bytes, str, bytearray, memoryview)):
            raise SerializationError(f"{what}_serializer must return bytes, str or None, "
                                     f"got {type(out).__name__}", topic=topic)
        return out

    def append(self, record: PreparedRecord) -> RecordFuture:
        """Accumulate; the record's future (the accumulator wakes the sender when needed)."""
        return self.accumulator.append(record.topic, record.partition, record.num_partitions, record.key,
                                       record.value, record.timestamp, record.headers, now())

    # -- send_many() ---------------------------------------------------------------------------

    def check_many(self, topic, values, keys, headers, partition, timestamps):
        """send_many's arguments checked and converted, before any record is appended: a bad one
        raises (naming its index) and nothing is queued. Returns (values, keys, headers,
        timestamps, estimated bytes), each list or None."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
            raise ValueError(f"partition must be an int >= 0, got {partition!r}")
        if not isinstance(values, list):
            values = list(values)
        count = len(values)

        def column(given, what):
            if given is None:
                return None
            given = given if isinstance(given, list) else list(given)
            if len(given) != count:
                raise ValueError(f"{what} has {len(given)} items for {count} values")
            return given

        keys, headers, timestamps = column(keys, "keys"), column(headers, "headers"), column(timestamps, "timestamps")
        key_serializer, value_serializer = self.key_serializer, self.value_serializer
        if headers is not None:
            headers = [normalize_headers_at(h, i) for i, h in enumerate(headers)]
            if not any(headers):
                headers = None
        if value_serializer is not None:
            values = [None if v is None else self._serialize(value_serializer, topic, headers[i] if headers else (), v, "value")
                      for i, v in enumerate(values)]
        if keys is not None and key_serializer is not None:
            keys = [None if k is None else self._serialize(key_serializer, topic, headers[i] if headers else (), k, "key")
                    for i, k in enumerate(keys)]
        total = 80 * count + _bytes_in_place(values, "value")
        if keys is not None:
            total += _bytes_in_place(keys, "key")
            if set(map(type, keys)) <= _NONE:
                keys = None
        if timestamps is not None:
            for i, stamp in enumerate(timestamps):
                if stamp is None:
                    timestamps[i] = int(time.time() * 1000)
                elif isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
                    raise TypeError(f"timestamps[{i}] must be an int (epoch ms) or None, got {type(stamp).__name__}")
                else:
                    timestamps[i] = check_timestamp(stamp, f"timestamps[{i}]")
        if headers is not None:
            total += sum(len(k) + len(v or b"") for h in headers for k, v in h)
        return values, keys, headers, timestamps, total

    def num_partitions_cached(self, topic: str) -> int | None:
        description = self.metadata.get(topic)
        return None if description is None else len(description.partitions)

    def topic_op(self, topic: str) -> Op[int]:
        description = yield from self.metadata.topic_op(topic, self.config.max_block_ms / 1000)
        return len(description.partitions)

    def append_many(self, topic, values, keys, headers, partition, timestamps, num_partitions) -> RecordFutures:
        return self.accumulator.append_many(topic, values, keys, headers, partition, timestamps, num_partitions, now())

    # -- the sender ----------------------------------------------------------------------------

    def produce_request(self, batches: list[ProducerBatch]) -> m.ProduceRequest:
        by_topic: dict[str, list[m.ProducePartition]] = {}
        config = self.config
        for batch in batches:
            records = batch.encode(config.compression, config.compression_level)
            # Framed without a copy: the connection sends the batch's own bytes (see prepare_parts).
            by_topic.setdefault(batch.tp.topic, []).append(m.ProducePartition(
                partition=batch.tp.partition, records=m.ExternalBin(len(records), records)))
        topics = tuple(m.ProduceTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
        return m.ProduceRequest(id=0, acks=config.acks, timeout_ms=config.request_timeout_ms, topics=topics)

    def send_op(self, batches: list[ProducerBatch]) -> Op[None]:
        """One produce round trip for ``batches`` (one per partition): every batch ends completed,
        failed, or put back for a retry. Never raises: errors go to the records' futures."""
        try:
            yield from self._send_op(batches)
        except GeneratorExit:  # the driver was cancelled mid-request: the outcome is unknown
            self.fail_unfinished(batches, ProducerClosedError(
                "the producer stopped before the broker answered; the records may or may not be in the log"))
            raise
        except BaseException as exc:
            self.fail_unfinished(batches, exc)
            if not isinstance(exc, Exception):
                raise

    def _send_op(self, batches: list[ProducerBatch]) -> Op[None]:
        request = self.produce_request(batches)
        timeout_s = self.config.request_timeout_ms / 1000 + 5.0  # the broker's own wait, plus slack
        try:
            doc = yield Call(request, timeout_s)
        except TriologClientError as exc:  # RequestNotSentError is retriable; ResponseLostError is not
            for batch in batches:
                self._retry_or_fail(batch, exc)
            return
        if doc is None:  # acks=0: no response, no offsets (Kafka reports -1)
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        try:
            check_response(doc)
        except TriologClientError as exc:
            self.fail_unfinished(batches, exc)
            return
        results = {(t["name"], p["partition"]): p for t in doc["topics"] for p in t["partitions"]}
        unknown: list[tuple[ProducerBatch, TriologClientError]] = []
        for batch in batches:
            result = results.get(batch.tp)
            if result is None:
                self._fail(batch, InvalidResponseError("the produce response has no result for this partition",
                                                       topic=batch.tp.topic, partition=batch.tp.partition))
            elif result["error_code"] == ErrorCode.NONE:
                self._complete(batch, result["base_offset"], result["log_append_time"])
            else:
                error = error_for(result["error_code"], result.get("error_message"),
                                  topic=batch.tp.topic, partition=batch.tp.partition)
                if result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    unknown.append((batch, error))
                else:
                    self._fail(batch, error)
        if unknown:
            yield from self._handle_unknown_op(unknown)

    def _handle_unknown_op(self, unknown: list[tuple[ProducerBatch, TriologClientError]]) -> Op[None]:
        topics = sorted({batch.tp.topic for batch, _ in unknown})
        for topic in topics:
            self.metadata.invalidate(topic)
            self.accumulator.forget(topic)
        try:
            entries = yield from self.metadata.fetch_op(topics)
        except TriologClientError:
            entries = {}
        for batch, error in unknown:
            entry = entries.get(batch.tp.topic)
            if entry is not None and entry["error_code"] == ErrorCode.NONE:
                if batch.tp.partition not in {p["partition"] for p in entry["partitions"]}:
                    self._fail(batch, error)  # the topic exists without this partition: waiting cannot help
                    continue
            self._retry_or_fail(batch, error)

    def _retry_or_fail(self, batch: ProducerBatch, error: TriologClientError) -> None:
        config = self.config
        retry_at = now() + config.retry_backoff_ms / 1000
        if (error.retriable and batch.attempts < config.retries
                and retry_at < batch.created + config.delivery_timeout_ms / 1000):
            self.accumulator.requeue(batch, retry_at)
        else:
            self._fail(batch, error)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self.accumulator.finish(batch):
            batch.complete(base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self.accumulator.finish(batch):
            batch.fail(error)

    def fail_unfinished(self, batches: list[ProducerBatch], error: BaseException) -> None:
        for batch in batches:
            self._fail(batch, error)

    def abort_queued(self, reason: str) -> None:
        """Fail every batch not yet sent (close() gave up waiting)."""
        for batch in self.accumulator.take_all():
            self._fail(batch, ProducerClosedError(reason, topic=batch.tp.topic, partition=batch.tp.partition))



_BYTES = frozenset((bytes,))
_NONE = frozenset((type(None),))


def normalize_headers(headers) -> Headers:
    """Headers as Kafka allows them: ordered (str, bytes|None) pairs, duplicates kept."""
    if not headers:
        return ()
    items = list(headers.items()) if hasattr(headers, "items") else list(headers)
    out = []
    for item in items:
        header_key, header_value = item
        if not isinstance(header_key, str):
            raise TypeError(f"header keys are str, got {type(header_key).__name__}")
        out.append((header_key, to_bytes(header_value, "header value")))
    return tuple(out)


def to_bytes(data, what: str) -> bytes | None:
    """bytes as given; str as UTF-8; None stays None (a null key, or a tombstone value)."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, got {type(data).__name__}")


def _bytes_in_place(items: list, what: str) -> int:
    """Turn every item of ``items`` (a list of values or of keys) into bytes or None, in place, and
    return their total length. The common case (all bytes) is checked and summed at C speed, not
    item by item in Python."""
    if set(map(type, items)) <= _BYTES:
        return sum(map(len, items))
    total = 0
    for i, item in enumerate(items):
        if item is not None and type(item) is not bytes:
            items[i] = item = _to_bytes_at(item, what, i)
        total += 0 if item is None else len(item)
    return total


def _to_bytes_at(data, what: str, index: int) -> bytes | None:
    try:
        return to_bytes(data, what)
    except TypeError as exc:
        raise TypeError(f"{what}s[{index}]: {exc}") from None


def normalize_headers_at(headers, index: int) -> Headers:
    try:
        return normalize_headers(headers)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"headers[{index}]: {exc}") from None
