"""The producer's record accumulator: per-partition queues of batches, shared by both flavours.

A batch stays open for appends until it reaches ``batch_size`` bytes (its uncompressed v2 size,
computed exactly as the encoder will lay it out), or is drained. A partition's head batch is
*ready* to send when it is closed, when ``linger_s`` has passed since it was created, or while a
flush is in progress; a batch put back for a retry is ready again after its backoff. Draining
takes at most one batch per partition, because a produce request may carry only one batch per
partition.

Futures are light: the outcome (base offset, append time, or the error) is stored once per batch,
and what ``send()`` returns is a handle, (batch, index), whose RecordMetadata is built only when
asked for. Completing a batch is O(1) plus its callbacks, not a RecordMetadata per record.

This module is a compiled-core module (``triolog.core``): the same source runs as is,
or compiled by Cython (``triolog.client._accumulator_c``); users get it with
``core.load("client.accumulator")``. ``append``/``try_append``/``append_many`` are the per-record
path of ``Producer.send`` and ``send_many``.

Thread-safe (one re-entrant lock): the sync producer appends from user threads and drains from
its sender thread; under trio the lock is simply never contended.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from collections.abc import Callable

try:
    import cython
except ModuleNotFoundError:  # Cython is a build-time dependency only
    from triolog.protocol import _cython_shim as cython

import structlog
from crc32c import crc32c

from triolog import core
from triolog.protocol.record_batch import CRC_OFFSET, CRC_START, HEADER_SIZE, PRODUCER_FIELDS, PRODUCER_ID_OFFSET

from .partitioner import StickyPartitioner
from .types import RecordMetadata, TopicPartition

#: Where a user callback's exception goes (Kafka's producer logs it and goes on).
_log = structlog.get_logger("triolog.client.producer")

__all__ = ["ProducerBatch", "RecordAccumulator", "RecordFuture", "RecordFutures", "varint_size"]

_monotonic = time.monotonic
_INT64_MAX = 2**63 - 1
_time = time.time
_Batch_HEADER = HEADER_SIZE
#: A batch's CRC-32C (at CRC_OFFSET, covering CRC_START to the end), rewritten with its producer fields.
_CRC = struct.Struct(">I")

# Aliases for the annotations of cclass attributes that Cython must leave plain Python objects, as
# they have always been: it compiles an attribute annotated with a builtin type (or a cclass) into
# a slot of exactly that type, checked on every assignment (a str subclass refused), but takes a
# name it cannot resolve to a type, such as these, for an object. mypy reads the aliased type.
_Str = str
_Int = int
_Bytes = bytes
_List = list
_BaseException = BaseException


@cython.cfunc
@cython.inline
@cython.locals(value=cython.longlong, u=cython.ulonglong, n=cython.Py_ssize_t)
def _vsize(value) -> cython.Py_ssize_t:
    if cython.compiled:
        u = (value << 1) ^ (value >> 63)
        n = 1
        while u >= 0x80:
            u >>= 7
            n += 1
        return n
    return ((((value << 1) ^ (value >> 63)).bit_length() + 6) // 7) or 1


def varint_size(value: int) -> int:
    """Bytes of the zig-zag varint/varlong of ``value``."""
    return _vsize(value)


@cython.cfunc
@cython.inline
@cython.locals(n=cython.Py_ssize_t)
def _bytes_size(data) -> cython.Py_ssize_t:
    if data is None:
        return 1
    n = len(data)
    return n + _vsize(n)


@cython.cfunc
@cython.locals(body=cython.Py_ssize_t, count=cython.Py_ssize_t, delta=cython.longlong)
def _record_size(count, delta, key, value, headers) -> cython.Py_ssize_t:
    """Bytes one record adds to a batch (Kafka's DefaultRecord.sizeInBytes): ``count`` records
    already in it, ``delta`` its timestamp minus the batch's first."""
    body = 1 + _vsize(delta) + _vsize(count) + _bytes_size(key) + _bytes_size(value)
    if headers:
        body += _vsize(len(headers))
        for header_key, header_value in headers:
            body += _bytes_size(header_key.encode("utf-8")) + _bytes_size(header_value)
    else:
        body += 1
    return _vsize(body) + body


@cython.cclass
class ProducerBatch:
    """Records bound for one partition, sent together as one RecordBatch, and their outcome."""

    _tp: TopicPartition
    _topic: _Str
    _partition: _Int
    _created: cython.double
    _records: list
    _size: cython.Py_ssize_t
    _base_timestamp: cython.longlong
    closed: cython.bint
    _finished: cython.bint
    _attempts: cython.int
    #: Creation order within the accumulator: where a retried batch goes back in its queue.
    _sequence: cython.longlong
    retry_at: cython.double
    _encoded: _Bytes | None
    # idempotence (Kafka's producer id, epoch and base sequence; -1 when not idempotent)
    _producer_id: cython.longlong
    _producer_epoch: cython.int
    _base_sequence: cython.longlong
    _sequence_reset: cython.bint
    #: A transactional producer's batch (the header's transactional bit).
    _transactional: cython.bint
    #: drain's can_send refused it: next_deadline waits for a wakeup instead (no busy loop).
    _blocked: cython.bint
    # outcome
    _completed: cython.bint
    _base_offset: cython.longlong
    _log_append_time: cython.longlong
    _exception: _BaseException | None
    _callbacks: _List[Callable[[], object]] | None
    _waiter: threading.Condition | None  # the sync producer's (None under trio)

    def __init__(self, tp, created: float, waiter=None) -> None:
        self._tp = tp
        self._topic = tp[0]
        self._partition = tp[1]
        self._created = created
        self._records = []
        self._size = _Batch_HEADER
        self._base_timestamp = 0
        self.closed = False
        self._finished = False
        self._attempts = 0
        self._sequence = 0
        self.retry_at = 0.0
        self._encoded = None
        self._producer_id = -1
        self._producer_epoch = -1
        self._base_sequence = -1
        self._sequence_reset = False
        self._transactional = False
        self._blocked = False
        self._completed = False
        self._base_offset = -1
        self._log_append_time = -1
        self._exception = None
        self._callbacks = None
        self._waiter = waiter

    # Read-only views, for the sender and tests.
    @property
    def tp(self):
        return self._tp

    @property
    def created(self) -> float:
        return self._created

    @property
    def records(self) -> list:
        """(key, value, timestamp, headers) tuples, in offset order; once the batch is settled,
        only each record's timestamp (what its futures still need)."""
        return self._records

    @property
    def size(self) -> int:
        """The batch's exact uncompressed v2 size in bytes."""
        return self._size

    @property
    def attempts(self) -> int:
        return self._attempts

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer_epoch

    @property
    def base_sequence(self) -> int:
        """-1 until the idempotent sender first drains the batch; kept on retries."""
        return self._base_sequence

    @property
    def sequence_reset(self) -> bool:
        """True once the batch was renumbered after an epoch bump (Kafka's sequenceHasBeenReset)."""
        return self._sequence_reset

    @property
    def record_count(self) -> int:
        return len(self._records)

    def set_producer_state(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        reset: bool = False,
        transactional: bool = False,
    ) -> None:
        """Stamp the batch with its producer id, epoch and base sequence (and, for a transactional
        producer, the transactional bit). Already encoded (a renumbered retry), its header is
        patched and its CRC recomputed, not the records re-encoded."""
        if transactional:
            self._transactional = True
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        if reset:
            self._sequence_reset = True
        if self._encoded is not None:
            data = bytearray(self._encoded)
            PRODUCER_FIELDS.pack_into(data, PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence)
            _CRC.pack_into(data, CRC_OFFSET, crc32c(memoryview(data)[CRC_START:]))
            self._encoded = bytes(data)

    def record_size(self, key, value, timestamp: int, headers) -> int:
        """Bytes the record would add to this batch (Kafka's DefaultRecord.sizeInBytes)."""
        count = len(self._records)
        delta = timestamp - self._base_timestamp if count else 0
        return _record_size(count, delta, key, value, headers)

    @cython.locals(size=cython.Py_ssize_t)
    def add(self, key, value, timestamp, headers, size) -> int:
        """Append a record of ``size`` bytes (see record_size); returns its index in the batch."""
        records = self._records
        if not records:
            self._base_timestamp = timestamp
        records.append((key, value, timestamp, headers))
        self._size += size
        return len(records) - 1

    def encode(self, compression, level) -> bytes:
        """The batch bytes, built once: a retry sends exactly what the first attempt sent."""
        if self._encoded is None:
            # Imported here: the record codec loads the compiled core, which imports this module
            # (a top-level import would be circular while triolog.core chooses its modules).
            from triolog.protocol.records import build_batch

            self._encoded = build_batch(
                self._records,
                compression=compression,
                compression_level=level,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                base_sequence=self._base_sequence,
                is_transactional=self._transactional,
                size_hint=self._size,
            )
        return self._encoded

    # -- outcome -------------------------------------------------------------------------------

    def complete(self, base_offset: int, log_append_time: int) -> None:
        self._settle(base_offset, log_append_time, None)

    def fail(self, exception: BaseException) -> None:
        self._settle(-1, -1, exception)

    def _settle(self, base_offset, log_append_time, exception) -> None:
        if self._completed:
            return
        self._base_offset = base_offset
        self._log_append_time = log_append_time
        self._exception = exception
        # Futures keep their batch: once settled it holds only what metadata_of reads (each
        # record's timestamp), not the keys, values and encoded bytes a user's kept futures would
        # otherwise pin beyond buffer_memory.
        self._encoded = None
        self._records = [record[2] for record in self._records]
        self._completed = True
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for fn in callbacks:
                try:
                    fn()
                except Exception:  # a user callback must not stop the producer: Kafka logs and goes on
                    _log.exception("producer_callback_failed", topic=self._topic, partition=self._partition)

    def is_done(self) -> bool:
        return self._completed

    def add_callback(self, fn) -> None:
        """Call ``fn()`` once the batch's outcome is known (at once if it is)."""
        if self._completed:
            fn()
        else:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(fn)

    def wait(self, timeout=None) -> bool:
        """Block until the outcome is known (sync producer only); False on timeout."""
        if self._completed:
            return True
        waiter = self._waiter
        if waiter is None:
            raise RuntimeError("this batch has no waiter: await it (trio producer) instead")
        with waiter:
            return waiter.wait_for(self.is_done, timeout)

    def exception_of(self, index) -> BaseException | None:
        if not self._completed:
            raise RuntimeError("the record has not been acknowledged yet")
        return self._exception

    def metadata_of(self, index) -> RecordMetadata:
        """Record ``index``'s RecordMetadata (its typed error raised if the batch failed)."""
        if not self._completed:
            raise RuntimeError("the record has not been acknowledged yet")
        if self._exception is not None:
            raise self._exception
        offset = -1 if self._base_offset < 0 else self._base_offset + index
        stamp = self._log_append_time if self._log_append_time >= 0 else self._records[index]
        return RecordMetadata(self._topic, self._partition, offset, stamp)


#: ProducerBatch for annotations that Cython must leave plain Python objects (see _Str above).
_ProducerBatch = ProducerBatch


@cython.cclass
class RecordFuture:
    """The outcome of one send(): a handle into its batch, a RecordMetadata or an exception once
    the batch is acknowledged.

    ``get(timeout)`` blocks (the sync producer); :class:`triolog.client.aio.AsyncRecordFuture`
    is awaited instead. ``add_done_callback(fn)`` calls ``fn(future)`` on the producer's sender.
    """

    _batch: ProducerBatch
    _index: cython.Py_ssize_t

    def __init__(self, batch=None, index: int = 0) -> None:
        self._batch = batch
        self._index = index

    @property
    def batch(self):
        return self._batch

    @property
    def index(self) -> int:
        return self._index

    def done(self) -> bool:
        return self._batch is not None and self._batch._completed

    def exception(self) -> BaseException | None:
        """The failure of a done future (None on success); for callbacks, which must not block."""
        if self._batch is None:
            raise RuntimeError("the record has not been acknowledged yet")
        return self._batch.exception_of(self._index)

    def result(self) -> RecordMetadata:
        """The RecordMetadata of a done future, or its exception raised."""
        if self._batch is None:
            raise RuntimeError("the record has not been acknowledged yet")
        return self._batch.metadata_of(self._index)

    def add_done_callback(self, fn) -> None:
        """Call ``fn(future)`` on completion (at once if done); runs on the producer's sender."""
        self._batch.add_callback(lambda: fn(self))

    def wait(self, timeout=None) -> bool:
        """Block until acknowledged or failed (sync producer); False on timeout."""
        return self._batch.wait(timeout)

    def get(self, timeout=None) -> RecordMetadata:
        """The record's (topic, partition, offset, timestamp); raises its typed error if it failed."""
        if not self._batch.wait(timeout):
            from .errors import ClientTimeoutError

            raise ClientTimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.metadata_of(self._index)


class RecordFutures:
    """What ``send_many`` returns: the outcome of many records, held as (batch, first, count) runs.

    ``get(timeout)`` waits for all and returns their RecordMetadata in input order (built only
    then), raising the first failed record's error; ``wait(timeout)`` just waits; ``errors()``
    lists ``(index, exception)`` per failed record; ``future(i)`` / ``[i]`` is record i's own
    :class:`RecordFuture`. ``add_done_callback(fn)`` calls ``fn(self)`` once all are done.
    """

    __slots__ = ("_runs", "_count", "_callbacks")

    def __init__(self, runs: list, count: int) -> None:
        self._runs = runs  # [(batch, first index in batch, count)]
        self._count = count
        self._callbacks = None

    def __len__(self) -> int:
        return self._count

    def batches(self) -> list:
        return [run[0] for run in self._runs]

    def done(self) -> bool:
        return all(run[0].is_done() for run in self._runs)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else _monotonic() + timeout
        for batch, _, _ in self._runs:
            remaining = None if deadline is None else max(0.0, deadline - _monotonic())
            if not batch.wait(remaining):
                return False
        return True

    def errors(self) -> list:
        """``(index, exception)`` for every failed record of a done call, in input order."""
        out: list[tuple[int, BaseException]] = []
        position = 0
        for batch, _, count in self._runs:
            error = batch.exception_of(0)
            if error is not None:
                out.extend((position + i, error) for i in range(count))
            position += count
        return out

    def exception(self) -> BaseException | None:
        """The first failed record's error (None if every record was acknowledged)."""
        for batch, _, _ in self._runs:
            error = batch.exception_of(0)
            if error is not None:
                return error
        return None

    def results(self) -> list:
        """Every record's RecordMetadata (the first error raised), for a done call."""
        return [batch.metadata_of(first + i) for batch, first, count in self._runs for i in range(count)]

    def get(self, timeout: float | None = None) -> list:
        if not self.wait(timeout):
            from .errors import ClientTimeoutError

            raise ClientTimeoutError(f"records not acknowledged within {timeout} s")
        return self.results()

    def future(self, index: int) -> RecordFuture:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("record index out of range")
        for batch, first, count in self._runs:
            if index < count:
                return RecordFuture(batch, first + index)
            index -= count
        raise IndexError("record index out of range")

    __getitem__ = future

    def add_done_callback(self, fn) -> None:
        """Call ``fn(self)`` once every record is acknowledged or failed (on the sender)."""
        pending = [len(self._runs)]

        def one_done() -> None:
            pending[0] -= 1
            if pending[0] == 0:
                fn(self)

        if not self._runs:
            fn(self)
        for batch, _, _ in self._runs:
            batch.add_callback(one_done)


@cython.cclass
class RecordAccumulator:
    """Batches per partition. ``wakeup``: called (no arguments) when the sender should wake up:
    a batch was created (a new linger deadline) or became full. ``waiter``: the Condition the
    sync producer notifies on completions (futures wait on it); None under trio.
    ``future_type``: the RecordFuture class ``append`` hands out."""

    _lock: threading.RLock
    _queues: dict
    _incomplete: set
    _sticky: StickyPartitioner
    _flushes: cython.Py_ssize_t
    _buffered: cython.Py_ssize_t
    _batch_size: cython.Py_ssize_t
    _linger_s: cython.double
    _wakeup: Callable[[], object] | None
    _waiter: threading.Condition | None
    _future_type: type[RecordFuture]
    _plain_future: cython.bint
    # try_append's fast path: set by configure_fast_path
    _fast: cython.bint
    _buffer_memory: cython.Py_ssize_t
    _known: dict
    _acks0: cython.bint
    _partition_for_key: Callable[[bytes, int], int]
    # the batch the last append went to, to skip the queue lookup; the record's index; wake?
    _last: _ProducerBatch | None
    _last_index: cython.Py_ssize_t
    _last_wake: cython.bint
    # send(): what fast_send calls when _try declines (set by bind_send)
    _slow_send: Callable[..., object] | None
    _next_sequence: cython.longlong

    def __init__(
        self, *, batch_size: int, linger_s: float, rng=None, wakeup=None, waiter=None, future_type=None
    ) -> None:
        self._batch_size = batch_size
        self._linger_s = linger_s
        self._lock = threading.RLock()
        self._queues = {}
        self._incomplete = set()
        self._sticky = StickyPartitioner(rng)
        # Looked up here, not at import: triolog.core imports this module while choosing.
        self._partition_for_key = core.load("client.partitioner").partition_for_key
        self._flushes = 0
        self._buffered = 0
        self._wakeup = wakeup
        self._waiter = waiter
        self._future_type = RecordFuture if future_type is None else future_type
        self._plain_future = self._future_type is RecordFuture
        self._fast = False
        self._buffer_memory = 0
        self._known = {}
        self._acks0 = False
        self._last = None
        self._last_index = 0
        self._last_wake = False
        self._slow_send = None
        self._next_sequence = 0

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def linger_s(self) -> float:
        return self._linger_s

    @property
    def buffered_bytes(self) -> int:
        """Bytes held by batches not yet acknowledged: what ``buffer_memory`` bounds."""
        return self._buffered

    def set_wakeup(self, wakeup, waiter=None, future_type=None) -> None:
        self._wakeup = wakeup
        self._waiter = waiter
        if future_type is not None:
            self._future_type = future_type
            self._plain_future = future_type is RecordFuture

    def configure_fast_path(self, enabled: bool, buffer_memory: int, acks: int) -> None:
        """Let try_append take records itself (no serializers configured)."""
        self._fast = enabled
        self._buffer_memory = buffer_memory
        self._acks0 = acks == 0

    def learn(self, topic: str, num_partitions: int, expires_at: float) -> None:
        """The partition count of ``topic``, valid until ``expires_at`` (monotonic)."""
        self._known[topic] = (num_partitions, expires_at)

    def forget(self, topic: str) -> None:
        self._known.pop(topic, None)

    # -- appending -----------------------------------------------------------------------------

    @cython.cfunc
    def _new_future(self, batch: ProducerBatch, index: cython.Py_ssize_t):
        future: RecordFuture
        if self._plain_future:
            future = RecordFuture.__new__(RecordFuture)
        else:
            future = self._future_type.__new__(self._future_type)
        future._batch = batch
        future._index = index
        return future

    def append(self, topic, partition, num_partitions, key, value, timestamp, headers, now):
        """Add one record; ``partition`` None means keyless (sticky); returns its RecordFuture.
        Calls ``wakeup`` when the sender should wake up."""
        wake = False
        with self._lock:
            batch = self._append_one(topic, partition, num_partitions, key, value, timestamp, headers, now)
            future = self._new_future(batch, self._last_index)
            wake = self._last_wake  # read under the lock: another thread's append rewrites it
        if wake and self._wakeup is not None:
            self._wakeup()
        return future

    @cython.cfunc
    @cython.locals(
        size=cython.Py_ssize_t, count=cython.Py_ssize_t, ts=cython.longlong, wake=cython.bint, batch=ProducerBatch
    )
    def _append_one(self, topic, partition, num_partitions, key, value, timestamp, headers, now) -> ProducerBatch:
        """The body of append, under the lock: the batch the record went to; its index in
        ``_last_index``, whether to wake the sender in ``_last_wake``."""
        wake = False
        ts = timestamp
        size = -1
        if partition is None:  # sticky: stay while the partition's open batch takes the record
            partition = self._sticky.current(topic, num_partitions)
            batch = self._open_batch_for(topic, partition)
            if batch is not None:
                size = self._size_in(batch, key, value, ts, headers)
            if size < 0:
                partition = self._sticky.next(topic, num_partitions)
                batch = self._open_batch_for(topic, partition)
                if batch is not None:
                    size = self._size_in(batch, key, value, ts, headers)
        else:
            batch = self._open_batch_for(topic, partition)
            if batch is not None:
                size = self._size_in(batch, key, value, ts, headers)
        if size < 0:
            batch = self._new_batch(topic, partition, now)
            wake = True
            size = _record_size(0, 0, key, value, headers)
        count = len(batch._records)
        if not count:
            batch._base_timestamp = ts
            self._buffered += _Batch_HEADER
        batch._records.append((key, value, timestamp, headers))
        batch._size += size
        self._buffered += size
        if batch._size >= self._batch_size:
            batch.closed = True
            wake = True
        self._last = batch
        self._last_index = count
        self._last_wake = wake
        return batch

    @cython.cfunc
    def _open_batch_for(self, topic, partition) -> ProducerBatch | None:
        last: ProducerBatch | None = self._last
        if last is not None and not last.closed and last._partition == partition and last._topic == topic:
            return last
        queue = self._queues.get((topic, partition))
        if not queue:
            return None
        batch: ProducerBatch = queue[-1]
        if batch.closed:
            return None
        return batch

    @cython.cfunc
    @cython.locals(count=cython.Py_ssize_t, ts=cython.longlong, size=cython.Py_ssize_t)
    def _size_in(self, batch: ProducerBatch, key, value, ts, headers) -> cython.Py_ssize_t:
        """The record's size in ``batch``, or -1 if it does not fit."""
        count = len(batch._records)
        size = _record_size(count, (ts - batch._base_timestamp) if count else 0, key, value, headers)
        if count and batch._size + size > self._batch_size:
            return -1
        return size

    @cython.cfunc
    def _new_batch(self, topic, partition, now: cython.double) -> ProducerBatch:
        tp = TopicPartition(topic, partition)
        queue = self._queues.get(tp)
        tail: ProducerBatch
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue:
            tail = queue[-1]
            tail.closed = True
        batch = ProducerBatch(tp, _monotonic() if now < 0 else now, self._waiter)
        self._next_sequence += 1
        batch._sequence = self._next_sequence
        queue.append(batch)
        self._incomplete.add(batch)
        return batch

    def try_append(self, topic, value, key, headers, partition, timestamp_ms):
        """send()'s fast path: the RecordFuture, or None when the record needs the full path
        (serializers, headers, a str/bytearray key or value, an unknown topic, a full buffer,
        a bad argument: the full path checks and reports it)."""
        return self._try(topic, value, key, headers, partition, timestamp_ms)

    def bind_send(self, slow):
        """``fast_send``, with ``slow`` (same arguments) called for what the fast path declines:
        a producer's whole send() as one compiled call in the common case."""
        self._slow_send = slow
        return self.fast_send

    def fast_send(self, topic, value=None, key=None, headers=(), partition=None, timestamp_ms=None):
        """try_append, else the slow send given to bind_send."""
        future = self._try(topic, value, key, headers, partition, timestamp_ms)
        if future is None:
            assert self._slow_send is not None  # (set by bind_send, which hands out fast_send)
            return self._slow_send(topic, value, key, headers, partition, timestamp_ms)
        return future

    @cython.cfunc
    @cython.locals(
        n=cython.Py_ssize_t,
        ts=cython.longlong,
        size=cython.Py_ssize_t,
        vlen=cython.Py_ssize_t,
        klen=cython.Py_ssize_t,
        count=cython.Py_ssize_t,
        batch=ProducerBatch,
        now=cython.double,
        held=cython.Py_ssize_t,
        wall=cython.double,
    )
    def _try(self, topic, value, key, headers, partition, timestamp_ms):
        if not self._fast or headers:
            return None
        if value is None:
            vlen = 0
        elif type(value) is bytes:
            vlen = len(value)
        else:
            return None
        if key is None:
            klen = 0
        elif type(key) is bytes:
            klen = len(key)
        else:
            return None
        if type(topic) is not str or not topic:
            return None
        if timestamp_ms is None:
            if cython.compiled:  # the same truncation as int(), without the Python float and int
                wall = _time()
                ts = cython.cast(cython.longlong, wall * 1000.0)
            else:
                ts = int(_time() * 1000)
        elif type(timestamp_ms) is int and 0 <= timestamp_ms <= _INT64_MAX:  # else send's checks refuse it
            ts = timestamp_ms
        else:
            return None
        n = 0
        # Like Kafka's producer, a record waits for its topic's metadata also when its partition
        # is given: a send to a topic being auto-created is not refused and retried.
        now = _monotonic()
        entry = self._known.get(topic)
        if entry is None or now > entry[1]:
            return None
        n = entry[0]
        if partition is None:
            if key is not None:
                partition = self._partition_for_key(key, n)
        elif type(partition) is not int or partition < 0:
            return None
        held = self._buffered
        if held and held + 80 + klen + vlen > self._buffer_memory:
            return None
        lock = self._lock
        lock.acquire()
        try:
            batch = self._append_one(topic, partition, n, key, value, ts, (), now)
            future = self._new_future(batch, self._last_index)
            wake = self._last_wake  # read under the lock: another thread's append rewrites it
        finally:
            lock.release()
        if wake and self._wakeup is not None:
            self._wakeup()
        return future

    @cython.locals(
        i=cython.Py_ssize_t,
        end=cython.Py_ssize_t,
        count=cython.Py_ssize_t,
        run=cython.Py_ssize_t,
        first=cython.Py_ssize_t,
        batch=ProducerBatch,
        wake=cython.bint,
    )
    def append_many(self, topic, values, keys, headers, partition, timestamps, num_partitions, now):
        """Append every record (checked by the caller: bytes or None, headers normalised or
        None, timestamps ints or None); returns a RecordFutures."""
        runs = []
        count = len(values)
        default_ts = int(_time() * 1000)
        no_headers = ()
        last = None
        first = 0
        run = 0
        lock = self._lock
        wakeup = self._wakeup
        partition_for_key = self._partition_for_key
        i = 0
        while i < count:
            # The lock is taken per slice of records, not per record, nor for the whole call (the
            # sender must be able to drain full batches meanwhile).
            wake = False
            lock.acquire()
            try:
                end = min(count, i + 512)
                while i < end:
                    key = None if keys is None else keys[i]
                    p = partition
                    if p is None and key is not None:
                        p = partition_for_key(key, num_partitions)
                    batch = self._append_one(
                        topic,
                        p,
                        num_partitions,
                        key,
                        values[i],
                        default_ts if timestamps is None else timestamps[i],
                        no_headers if headers is None else headers[i],
                        now,
                    )
                    if self._last_wake:
                        wake = True
                    if batch is last:
                        run += 1
                    else:
                        if last is not None:
                            runs.append((last, first, run))
                        last, first, run = batch, self._last_index, 1
                    i += 1
            finally:
                lock.release()
            if wake and wakeup is not None:
                wakeup()
        if last is not None:
            runs.append((last, first, run))
        return RecordFutures(runs, count)

    # -- the sender's side ---------------------------------------------------------------------

    @cython.cfunc
    def _ready(self, queue, now: cython.double) -> cython.bint:
        head: ProducerBatch = queue[0]
        if head.retry_at > now:
            return False
        return head.closed or len(queue) > 1 or self._flushes > 0 or now >= head._created + self._linger_s

    def drain(self, now: float, can_send=None) -> list:
        """The ready head batches, one per partition, removed from their queues and closed.
        ``can_send(batch)``, if given, is asked (under the lock) about each ready head batch: False
        leaves it queued (the idempotent producer's ordering rules; it may stamp the batch)."""
        head: ProducerBatch
        batch: ProducerBatch
        with self._lock:
            out = []
            for tp in list(self._queues):
                queue = self._queues[tp]
                while queue:
                    head = queue[0]
                    if not head._finished:
                        break
                    queue.popleft()  # failed while queued for a retry: never resend
                if queue and self._ready(queue, now):
                    head = queue[0]
                    head._blocked = can_send is not None and not can_send(head)
                    if not head._blocked:
                        batch = queue.popleft()
                        batch.closed = True
                        out.append(batch)
                if not queue:
                    del self._queues[tp]
            return out

    def next_deadline(self) -> float | None:
        """When the earliest not-yet-ready head batch becomes ready (None: nothing is queued)."""
        head: ProducerBatch
        with self._lock:
            deadlines = []
            for queue in self._queues.values():
                head = queue[0]
                if head._blocked:
                    continue  # until a response unblocks it (the sender is woken then)
                if head.retry_at:
                    deadlines.append(head.retry_at)
                elif head.closed or len(queue) > 1 or self._flushes:
                    deadlines.append(0.0)
                else:
                    deadlines.append(head._created + self._linger_s)
            return min(deadlines, default=None)

    @cython.locals(i=cython.Py_ssize_t, queued=ProducerBatch)
    def requeue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch back in its partition's queue where its creation order puts it: ahead of
        every newer batch (with several requests in flight, batches put back in any order are
        resent in the order they were made)."""
        with self._lock:
            batch._attempts += 1
            batch.retry_at = retry_at
            batch.closed = True
            queue = self._queues.get(batch._tp)
            if queue is None:
                queue = self._queues[batch._tp] = deque()
            i = 0
            for queued in queue:
                if queued._sequence > batch._sequence:
                    break
                i += 1
            queue.insert(i, batch)

    def finish(self, batch: ProducerBatch) -> bool:
        """Forget a batch whose outcome is known; False if it was already finished."""
        with self._lock:
            if batch._finished:
                return False
            batch._finished = True
            self._incomplete.discard(batch)
            self._buffered -= batch._size
            return True

    def begin_flush(self) -> list:
        """Make every queued batch ready; returns the batches incomplete right now."""
        with self._lock:
            self._flushes += 1
            return [batch for batch in self._incomplete if batch.records]

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def take_all(self) -> list:
        """Every queued (not in-flight) batch, removed: what close() fails when it gives up."""
        with self._lock:
            out = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
            self._last = None
            return out

    def has_queued(self) -> bool:
        with self._lock:
            return bool(self._queues)
