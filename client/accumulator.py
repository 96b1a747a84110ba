"""The producer's record accumulator: per-partition queues of batches, shared by both flavours.

A batch stays open for appends until it reaches ``batch_size`` bytes (its uncompressed v2 size,
computed exactly as the encoder will lay it out), or is drained. A partition's head batch is
*ready* to send when it is closed, when ``linger_s`` has passed since it was created, or while a
flush is in progress; a batch put back for a retry is ready again after its backoff. Draining
takes at most one batch per partition, because a produce request may carry only one batch per
partition.

Thread-safe (one re-entrant lock): the sync producer appends from user threads and drains from
its sender thread; under trio the lock is simply never contended.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

from triolog.protocol.record_batch import HEADER_SIZE, CompressionType
from triolog.protocol.records import build_batch

from .partitioner import StickyPartitioner
from .types import RecordMetadata, TopicPartition

__all__ = ["ProducerBatch", "RecordAccumulator", "RecordFuture"]

Headers = tuple[tuple[str, bytes | None], ...]


def varint_size(value: int) -> int:
    """Bytes of the zig-zag varint/varlong of ``value``."""
    return ((((value << 1) ^ (value >> 63)).bit_length() + 6) // 7) or 1


def _bytes_size(data: bytes | None) -> int:
    if data is None:
        return 1
    n = len(data)
    return n + (((n << 1).bit_length() + 6) // 7 or 1)


class RecordFuture:
    """The outcome of one send(): a RecordMetadata or an exception.

    The flavours add how to wait (:class:`triolog.client.producer.FutureRecordMetadata`: ``.get(timeout)``;
    :class:`triolog.client.aio.AsyncRecordFuture`: ``await``); completion is shared.
    """

    __slots__ = ("_callbacks", "_done", "_exception", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: RecordMetadata | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[RecordFuture], None]] = []

    def done(self) -> bool:
        return self._done

    def exception(self) -> BaseException | None:
        """The failure of a done future (None on success); for callbacks, which must not block."""
        if not self._done:
            raise RuntimeError("the record has not been acknowledged yet")
        return self._exception

    def result(self) -> RecordMetadata:
        """The RecordMetadata of a done future, or its exception raised."""
        if self.exception() is not None:
            raise self._exception
        return self._value

    def add_done_callback(self, fn: Callable[[RecordFuture], None]) -> None:
        """Call ``fn(future)`` on completion (at once if done); runs on the producer's sender."""
        if self._done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def _complete(self, value: RecordMetadata | None, exception: BaseException | None) -> None:
        if self._done:
            return
        self._value, self._exception, self._done = value, exception, True
        self._wake()
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # a user callback must not stop the producer (Kafka logs and goes on)
                pass

    def _wake(self) -> None:
        """Flavour hook: wake whoever waits on this future."""


class ProducerBatch:
    """Records bound for one partition, sent together as one RecordBatch."""

    __slots__ = ("attempts", "closed", "created", "done", "encoded", "futures", "records", "retry_at", "size", "tp")

    def __init__(self, tp: TopicPartition, created: float) -> None:
        self.tp = tp
        self.created = created
        self.records: list[tuple[bytes | None, bytes | None, int, Headers]] = []
        self.futures: list[RecordFuture] = []
        self.size = HEADER_SIZE
        self.closed = False
        self.done = False
        self.attempts = 0
        self.retry_at = 0.0
        self.encoded: bytes | None = None

    def record_size(self, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers) -> int:
        """Bytes the record would add to this batch (Kafka's DefaultRecord.sizeInBytes)."""
        base_timestamp = self.records[0][2] if self.records else timestamp
        body = (1 + varint_size(timestamp - base_timestamp) + varint_size(len(self.records))
                + _bytes_size(key) + _bytes_size(value) + varint_size(len(headers)))
        for header_key, header_value in headers:
            body += _bytes_size(header_key.encode("utf-8")) + _bytes_size(header_value)
        return varint_size(body) + body

    def add(self, key, value, timestamp, headers, future: RecordFuture, size: int) -> None:
        self.records.append((key, value, timestamp, headers))
        self.futures.append(future)
        self.size += size

    def encode(self, compression: CompressionType, level: int | None) -> bytes:
        """The batch bytes, built once: a retry sends exactly what the first attempt sent."""
        if self.encoded is None:
            self.encoded = build_batch(self.records, compression=compression, compression_level=level)
        return self.encoded

    def complete(self, base_offset: int, log_append_time: int) -> None:
        topic, partition = self.tp
        for index, ((_, _, timestamp, _), future) in enumerate(zip(self.records, self.futures)):
            offset = -1 if base_offset < 0 else base_offset + index
            stamp = log_append_time if log_append_time >= 0 else timestamp
            future._complete(RecordMetadata(topic, partition, offset, stamp), None)

    def fail(self, exception: BaseException) -> None:
        for future in self.futures:
            future._complete(None, exception)


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_s: float, rng=None) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self._lock = threading.RLock()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._sticky = StickyPartitioner(rng)
        self._flushes = 0
        #: Bytes held by batches not yet acknowledged: what ``buffer_memory`` bounds.
        self.buffered_bytes = 0

    def append(self, topic: str, partition: int | None, num_partitions: int | None, key: bytes | None,
               value: bytes | None, timestamp: int, headers: Headers, future: RecordFuture,
               now: float) -> bool:
        """Add one record; ``partition`` None means keyless (sticky). True when the sender
        should wake up: a batch was created (a new linger deadline) or became full."""
        with self._lock:
            batch = size = None
            if partition is None:
                partition = self._sticky.current(topic, num_partitions)
                batch, size = self._open_batch_for(TopicPartition(topic, partition), key, value, timestamp, headers)
                if batch is None:
                    partition = self._sticky.next(topic, num_partitions)
            tp = TopicPartition(topic, partition)
            if batch is None:
                batch, size = self._open_batch_for(tp, key, value, timestamp, headers)
            wake = False
            if batch is None:
                queue = self._queues.setdefault(tp, deque())
                if queue and not queue[-1].closed:
                    queue[-1].closed = True
                batch = ProducerBatch(tp, now)
                queue.append(batch)
                self._incomplete.add(batch)
                wake = True
                size = batch.record_size(key, value, timestamp, headers)
            batch.add(key, value, timestamp, headers, future, size)
            self.buffered_bytes += size + (HEADER_SIZE if len(batch.records) == 1 else 0)
            if batch.size >= self.batch_size:
                batch.closed = True
                wake = True
            return wake

    def _open_batch_for(self, tp, key, value, timestamp, headers) -> tuple[ProducerBatch | None, int | None]:
        """The partition's open batch and the record's size in it if the record fits, else
        (None, None): a new batch is needed."""
        queue = self._queues.get(tp)
        if not queue or queue[-1].closed:
            return None, None
        batch = queue[-1]
        size = batch.record_size(key, value, timestamp, headers)
        if batch.size + size > self.batch_size:
            return None, None
        return batch, size

    def _ready(self, queue: deque[ProducerBatch], now: float) -> bool:
        head = queue[0]
        if head.retry_at > now:
            return False
        return head.closed or len(queue) > 1 or self._flushes > 0 or now >= head.created + self.linger_s

    def drain(self, now: float) -> list[ProducerBatch]:
        """The ready head batches, one per partition, removed from their queues and closed."""
        with self._lock:
            out = []
            for tp in list(self._queues):
                queue = self._queues[tp]
                while queue and queue[0].done:  # failed while queued for a retry: never resend
                    queue.popleft()
                if queue and self._ready(queue, now):
                    batch = queue.popleft()
                    batch.closed = True
                    out.append(batch)
                if not queue:
                    del self._queues[tp]
            return out

    def next_deadline(self) -> float | None:
        """When the earliest not-yet-ready head batch becomes ready (None: nothing is queued)."""
        with self._lock:
            deadlines = []
            for queue in self._queues.values():
                head = queue[0]
                if head.retry_at:
                    deadlines.append(head.retry_at)
                elif head.closed or len(queue) > 1 or self._flushes:
                    deadlines.append(0.0)
                else:
                    deadlines.append(head.created + self.linger_s)
            return min(deadlines, default=None)

    def requeue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch back at the head of its partition's queue, ahead of newer batches."""
        with self._lock:
            batch.attempts += 1
            batch.retry_at = retry_at
            self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def finish(self, batch: ProducerBatch) -> bool:
        """Forget a batch whose outcome is known; False if it was already finished."""
        with self._lock:
            if batch.done:
                return False
            batch.done = True
            self._incomplete.discard(batch)
            self.buffered_bytes -= batch.size
            return True

    def begin_flush(self) -> list[RecordFuture]:
        """Make every queued batch ready; returns one future per batch incomplete right now."""
        with self._lock:
            self._flushes += 1
            return [batch.futures[-1] for batch in self._incomplete if batch.futures]

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def take_all(self) -> list[ProducerBatch]:
        """Every queued (not in-flight) batch, removed: what close() fails when it gives up."""
        with self._lock:
            out = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
            return out

    def has_queued(self) -> bool:
        with self._lock:
            return bool(self._queues)


def normalize_headers(headers) -> Headers:
    """Headers as Kafka allows them: ordered (str, bytes|None) pairs, duplicates kept."""
    if not headers:
        return ()
    items: Sequence = list(headers.items()) if hasattr(headers, "items") else list(headers)
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
