"""The blocking producer: send() from any thread, a background sender thread for linger and I/O.

All decisions (partitioning, batching, retries) live in :mod:`triolog.client.producer_core`; this module
only adds threads and waiting.
"""

from __future__ import annotations

import threading
import time

from .accumulator import RecordFuture
from .connection import DEFAULT_BOOTSTRAP, SyncConnection
from .errors import ClientTimeoutError, ProducerClosedError
from .ops import run_sync
from .producer_core import ProducerConfig, ProducerCore
from .types import RecordMetadata

__all__ = ["FutureRecordMetadata", "Producer"]


class FutureRecordMetadata(RecordFuture):
    """What :meth:`Producer.send` returns; ``.get(timeout)`` blocks for the RecordMetadata.

    Waiting uses the producer's one condition, notified once per completed produce request, not
    an Event per record: an Event costs more than the rest of send() for small records.
    """

    __slots__ = ("_completed",)

    def __init__(self, completed: threading.Condition) -> None:
        super().__init__()
        self._completed = completed

    def wait(self, timeout: float | None = None) -> bool:
        if self._done:
            return True
        with self._completed:
            return self._completed.wait_for(self.done, timeout)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's (topic, partition, offset, timestamp); raises its typed error if it failed."""
        if not self.wait(timeout):
            raise ClientTimeoutError(f"record not acknowledged within {timeout} s")
        return self.result()


class Producer:
    """``Producer("host:port", linger_ms=5, batch_size=16384, compression="zstd", acks=-1)``.

    ``bootstrap_servers``: ``"host:port"``, ``"h1:9092,h2:9092"`` or a list of them, tried in
    order until one answers. ``key_serializer``/``value_serializer``: functions turning each
    non-None key/value given to :meth:`send` into bytes (kafka-python's options). Other keyword
    arguments are :class:`triolog.client.producer_core.ProducerConfig` fields. Use as a context
    manager, or call :meth:`close`, so that buffered records are sent.
    """

    def __init__(self, bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP, *, key_serializer=None,
                 value_serializer=None, **config) -> None:
        self.config = ProducerConfig(**config)
        self._core = ProducerCore(self.config, key_serializer=key_serializer, value_serializer=value_serializer)
        self._conn = SyncConnection(bootstrap_servers, client_id=self.config.client_id)
        self._wakeup = threading.Event()
        #: Notified whenever records complete (which also frees buffer space).
        self._space = threading.Condition()
        self._closed = False
        self._stopping = False
        self._sender = threading.Thread(target=self._run, name="triolog-producer-sender", daemon=True)
        self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def send(self, topic: str, value=None, key=None, headers=(), partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns at once (after metadata, if the topic is new to us).

        ``key``/``value``: bytes, str (UTF-8) or None, or what the serializers take.
        ``headers``: (str, bytes|None) pairs.
        ``partition`` None: murmur2 of the key, or the sticky partition for a keyless record.
        """
        if self._closed:
            raise ProducerClosedError("send() after close()", topic=topic)
        record = self._core.prepare_cached(topic, value, key, headers, partition, timestamp_ms)
        if record is None:  # the topic's metadata is not cached yet: ask the broker
            record = run_sync(self._core.prepare_op(topic, value, key, headers, partition, timestamp_ms), self._conn)
        if not self._core.has_space(record):
            with self._space:
                if not self._space.wait_for(lambda: self._core.has_space(record), self.config.max_block_ms / 1000):
                    raise ClientTimeoutError(
                        f"buffer_memory ({self.config.buffer_memory} bytes) still full after {self.config.max_block_ms} ms",
                        topic=topic)
        future = FutureRecordMetadata(self._space)
        if self._core.append(record, future):
            self._wakeup.set()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without waiting for linger; wait until each is acknowledged
        (or failed: flush does not raise record errors, the futures hold them)."""
        futures = self._core.accumulator.begin_flush()
        self._wakeup.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for future in futures:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not future.wait(remaining):
                    raise ClientTimeoutError(f"flush did not complete within {timeout} s")
        finally:
            self._core.accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender and disconnect. Records still unsent after ``timeout`` seconds
        fail with ProducerClosedError."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout)
        except ClientTimeoutError:
            pass
        finally:
            self._stopping = True
            self._wakeup.set()
            self._sender.join(timeout)
            self._core.abort_queued("the producer was closed before the record was sent")
            with self._space:
                self._space.notify_all()
            self._conn.close()

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        finally:
            if not self._stopping:
                # The sender died of a bug (send_op itself never raises): fail what it would have
                # sent, so no get(), flush() or close() waits forever, and refuse new records.
                self._closed = True
                self._core.abort_queued("the producer's sender thread stopped unexpectedly")
            with self._space:
                self._space.notify_all()

    def _send_until_stopped(self) -> None:
        accumulator = self._core.accumulator
        while not self._stopping:
            self._wakeup.clear()
            batches = accumulator.drain(time.monotonic())
            if batches:
                run_sync(self._core.send_op(batches), self._conn)
                with self._space:
                    self._space.notify_all()
                continue
            deadline = accumulator.next_deadline()
            self._wakeup.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
