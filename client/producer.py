"""The blocking producer: send() from any thread; a sender thread drains ready batches and writes
produce requests, a receiver thread handles their responses in order, so that up to
``max_in_flight_requests_per_connection`` requests are outstanding while new batches are encoded.

All decisions (partitioning, batching, retries) live in :mod:`triolog.client.producer_core`; this module
only adds threads and waiting.
"""

from __future__ import annotations

import queue
import threading
import time

from .address import format_address
from .connection import DEFAULT_BOOTSTRAP, ClusterConnection, SyncConnection
from .errors import BrokerConnectionError, ClientTimeoutError, ProducerClosedError, TransactionStateError
from .ops import Call, run_sync
from .producer_core import ProducerConfig, ProducerCore, RecordFuture, RecordFutures
from .security import split_security
from .transactions import as_group_metadata, normalize_offsets, routing_key

__all__ = ["FutureRecordMetadata", "Producer", "RecordFutures"]

#: What :meth:`Producer.send` returns: ``.get(timeout)`` blocks for the RecordMetadata, ``.done()``,
#: ``.exception()``, ``.result()``, ``.add_done_callback(fn)`` as Kafka's / kafka-python's future.
#: A light handle (its batch, its index): the outcome is stored once per batch and the
#: RecordMetadata built only when asked for; waiting uses the producer's one condition, notified
#: once per completed produce request.
FutureRecordMetadata = RecordFuture

#: send_many() appends records in slices of this many, each waiting for buffer space on its own.
SEND_MANY_SLICE = 4096


def _values_size(values: list) -> int:
    """Bytes of the values (None counts 0), summed at C speed when none is None."""
    try:
        return sum(map(len, values))
    except TypeError:
        return sum(len(v) for v in values if v is not None)


class CoordinatorConnections:
    """A transactional producer's requests to its transaction coordinator and to groups'
    coordinators, each on a connection of its own at the address find_coordinator gave; the rest
    (find_coordinator itself) on the producer's connection. Thread-safe: the sender thread adds
    partitions while the application's thread commits."""

    def __init__(self, main: ClusterConnection, manager, client_id: str) -> None:
        self.main, self.manager, self.client_id = main, manager, client_id
        self._lock = threading.Lock()
        self._conns: dict[tuple[str, int], tuple[SyncConnection, threading.Lock]] = {}

    def call(self, request, timeout_s: float):
        address = routing_key(request, self.manager)
        if address is None:
            return self.main.call(request, timeout_s)
        with self._lock:
            entry = self._conns.get(address)
            if entry is None:
                conn = SyncConnection(format_address(address), client_id=self.client_id, security=self.main.security)
                entry = self._conns[address] = (conn, threading.Lock())
        conn, lock = entry
        with lock:
            try:
                return conn.call(request, timeout_s)
            except BrokerConnectionError:
                with self._lock:
                    if self._conns.get(address) is entry:
                        del self._conns[address]
                conn.close()
                raise

    def send(self, request, timeout_s: float):
        raise NotImplementedError("coordinator requests are calls")  # (no pipelined requests here)

    def receive(self, handle, timeout_s: float, give_up: bool = True):
        raise NotImplementedError("coordinator requests are calls")

    def close(self) -> None:
        with self._lock:
            entries, self._conns = list(self._conns.values()), {}
        for conn, _ in entries:
            conn.close()


class Producer:
    """``Producer("host:port", linger_ms=5, batch_size=16384, compression="zstd", acks=-1)``.

    ``bootstrap_servers``: ``"host:port"``, ``"h1:9092,h2:9092"`` or a list of them, tried in
    order until one answers; on a cluster, every partition's requests then go to its leader (see
    :mod:`triolog.client.cluster`). ``key_serializer``/``value_serializer``: functions turning each
    non-None key/value given to :meth:`send` into bytes (kafka-python's options). Other keyword
    arguments are :class:`triolog.client.producer_core.ProducerConfig` fields. Use as a context
    manager, or call :meth:`close`, so that buffered records are sent.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        key_serializer=None,
        value_serializer=None,
        **config,
    ) -> None:
        self.security, config = split_security(config)
        self.config = ProducerConfig(**config)
        self._core = ProducerCore(self.config, key_serializer=key_serializer, value_serializer=value_serializer)
        self._conn = ClusterConnection(
            bootstrap_servers,
            client_id=self.config.client_id,
            security=self.security,
            retry_backoff_s=self.config.retry_backoff_ms / 1000,
            metadata_timeout_s=self.config.request_timeout_ms / 1000,
        )
        self._wakeup = threading.Event()
        #: Notified whenever records complete (which also frees buffer space).
        self._space = threading.Condition()
        self._closed = False
        self._stopping = False
        self._core.accumulator.set_wakeup(self._wakeup.set, self._space)
        self._try_append = self._core.accumulator.try_append
        self._txn = self._core.txn
        #: A transactional producer's requests to its coordinators (None otherwise).
        self._txn_conn = (
            None if self._txn is None else CoordinatorConnections(self._conn, self._txn, self.config.client_id)
        )
        if type(self).send is Producer.send and self._txn is None:
            # send() in the common case is one compiled call, not a Python frame around one (the
            # accumulator calls _send_slow for what its fast path declines, closed included).
            self.send = self._core.accumulator.bind_send(self._send_slow)  # type: ignore[method-assign]
        #: One slot per produce request that may be outstanding; the receiver frees it.
        in_flight = self.config.max_in_flight_requests_per_connection
        assert in_flight is not None  # (ProducerConfig resolves it)
        self._slots = threading.Semaphore(in_flight)
        #: (operation, InFlight handle or None, timeout, error) per request written, in order.
        self._in_flight: queue.SimpleQueue = queue.SimpleQueue()
        self._receiver = threading.Thread(target=self._run_receiver, name="triolog-producer-receiver", daemon=True)
        self._sender = threading.Thread(target=self._run, name="triolog-producer-sender", daemon=True)
        self._receiver.start()
        self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def send(
        self,
        topic: str,
        value=None,
        key=None,
        headers=(),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns at once (after metadata, if the topic is new to us).

        ``key``/``value``: bytes, str (UTF-8) or None, or what the serializers take.
        ``headers``: (str, bytes|None) pairs.
        ``partition`` None: murmur2 of the key, or the sticky partition for a keyless record.
        """
        if self._txn is not None:
            self._txn.check_send()
        if not self._closed:
            future = self._try_append(topic, value, key, headers, partition, timestamp_ms)
            if future is not None:  # the common case: known topic, bytes, no serializers, room
                return future
        return self._send_slow(topic, value, key, headers, partition, timestamp_ms)

    def _send_slow(self, topic, value, key, headers, partition, timestamp_ms) -> FutureRecordMetadata:
        """send() when the accumulator's fast path declined the record."""
        if self._closed:
            raise ProducerClosedError("send() after close()", topic=topic)
        record = self._core.prepare_cached(topic, value, key, headers, partition, timestamp_ms)
        if record is None:  # the topic's metadata is not cached yet: ask the broker
            record = run_sync(self._core.prepare_op(topic, value, key, headers, partition, timestamp_ms), self._conn)
        self._wait_for_space(record.size, topic)
        return self._core.append(record)

    def send_many(
        self, topic: str, values, keys=None, headers=None, partition: int | None = None, timestamps=None
    ) -> RecordFutures:
        """Queue many records of one topic in one call; returns one :class:`RecordFutures` for all.

        ``values``: a sequence of bytes/str/None (or what the value serializer takes);
        ``keys``, ``headers`` (each item as send()'s ``headers``), ``timestamps`` (epoch ms or
        None): None, or sequences as long as ``values``. ``partition``: one partition for
        all, or None for send()'s partitioner (murmur2 of each key, sticky for keyless records).

        Every argument is checked before anything is queued: a bad one raises (TypeError,
        ValueError, SerializationError naming its index) and no record of the call is sent.
        Records are then queued in order, exactly as the same send() calls would (same batches,
        same partitions; records without a timestamp all get the call's time), waiting for buffer space as send() does (at most ``max_block_ms`` per
        slice; a ClientTimeoutError then leaves the records queued so far queued, unreported).

        The returned RecordFutures completes when every record is acknowledged or failed:
        ``.get(timeout)`` gives the list of RecordMetadata (raising the first failed record's
        error), ``.wait(timeout)`` only waits, ``.errors()`` lists (index, exception) per failed
        record, ``[i]`` is record i's own future, ``add_done_callback(fn)`` calls ``fn(futures)``.
        """
        if self._closed:
            raise ProducerClosedError("send_many() after close()", topic=topic)
        if self._txn is not None:
            self._txn.check_send()
        core = self._core
        values, keys, headers, timestamps, total = core.check_many(topic, values, keys, headers, partition, timestamps)
        # The topic's metadata first, also for a given partition (Kafka's waitOnMetadata).
        num_partitions = core.num_partitions_cached(topic)
        if num_partitions is None:
            num_partitions = run_sync(core.topic_op(topic), self._conn)
        count = len(values)
        if count <= SEND_MANY_SLICE and core.accumulator.buffered_bytes + total <= core.config.buffer_memory:
            return core.append_many(topic, values, keys, headers, partition, timestamps, num_partitions)
        runs = []
        for start in range(0, count, SEND_MANY_SLICE):
            end = start + SEND_MANY_SLICE
            part = values[start:end]
            self._wait_for_space(80 * len(part) + _values_size(part), topic)
            futures = core.append_many(
                topic,
                part,
                None if keys is None else keys[start:end],
                None if headers is None else headers[start:end],
                partition,
                None if timestamps is None else timestamps[start:end],
                num_partitions,
            )
            runs.extend(futures._runs)
        return RecordFutures(runs, count)

    def _wait_for_space(self, size: int, topic: str) -> None:
        core = self._core
        accumulator, limit = core.accumulator, self.config.buffer_memory

        def has_space() -> bool:
            held = accumulator.buffered_bytes
            return held == 0 or held + size <= limit

        if not has_space():
            with self._space:
                if not self._space.wait_for(has_space, self.config.max_block_ms / 1000):
                    raise ClientTimeoutError(
                        f"buffer_memory ({self.config.buffer_memory} bytes) still full after {self.config.max_block_ms} ms",
                        topic=topic,
                    )

    # -- transactions ------------------------------------------------------------------------

    def _transactions(self):
        if self._txn is None:
            raise TransactionStateError("this producer has no transactional_id: transactions need one")
        assert self._txn_conn is not None
        return self._txn, self._txn_conn

    def init_transactions(self) -> None:
        """Find the transaction coordinator and take over the transactional id: a new epoch,
        which fences every older producer with the id (its open transaction is aborted)."""
        txn, conn = self._transactions()
        run_sync(txn.init_op(), conn)

    def producer_id_and_epoch(self) -> tuple[int, int]:
        """The producer id and epoch the open transaction is written with: what
        :meth:`resume_transaction` needs to end it from another process."""
        idempotence = self._core.idempotence
        if idempotence is None:
            raise TransactionStateError("this producer is not idempotent: it has no producer id")
        return idempotence.producer_id, idempotence.producer_epoch

    def resume_transaction(self, producer_id: int, producer_epoch: int) -> None:
        """Instead of init_transactions: take over the transaction that a producer with this
        transactional id prepared (sent and flushed) and left open, to commit_transaction or
        abort_transaction it here; sending in it is refused. A two-phase sink's tasks prepare,
        its coordinator ends (the Spark sink's exactly-once mode does this)."""
        self._transactions()[0].resume(producer_id, producer_epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: every record sent until commit_transaction or abort_transaction
        is in it (the partitions are added to it as their first batches are sent)."""
        self._transactions()[0].begin()

    def send_offsets_to_transaction(self, offsets, group_metadata) -> None:
        """Commit a consumer group's offsets in the transaction (the consume-transform-produce
        loop): ``offsets`` maps TopicPartition to the next offset to consume (or (offset,
        metadata)), or is a list of objects with ``topic``, ``partition`` and ``offset``
        (confluent-kafka's TopicPartition); ``group_metadata`` is ``consumer.group_metadata()``
        (or a group id)."""
        txn, conn = self._transactions()
        run_sync(txn.send_offsets_op(normalize_offsets(offsets), as_group_metadata(group_metadata)), conn)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send everything of the transaction, then commit it. A record that failed makes the
        transaction abortable: this raises TransactionStateError (abort_transaction next)."""
        txn, conn = self._transactions()
        txn.check_commit()
        self.flush(timeout)
        run_sync(txn.end_op(True), conn)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the transaction's records not sent yet (their futures fail with
        TransactionAbortedError), wait for those in flight, and abort it: nothing of it is
        ever read by a read_committed consumer."""
        txn, conn = self._transactions()
        txn.begin_abort()
        self._core.drop_transaction()
        with self._space:
            self._space.notify_all()
        self.flush(timeout)  # (only what is in flight is left)
        run_sync(txn.end_op(False), conn)

    def metrics(self) -> dict[str, int]:
        """The producer's counters: ``record-retry-total``, ``batch-retry-total`` (Kafka's names),
        ``epoch-bump-total`` and its ``producer-id`` (-1 without idempotence)."""
        return self._core.metrics()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without waiting for linger; wait until each is acknowledged
        (or failed: flush does not raise record errors, the futures hold them)."""
        batches = self._core.accumulator.begin_flush()
        self._wakeup.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for batch in batches:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.wait(remaining):
                    raise ClientTimeoutError(f"flush did not complete within {timeout} s")
        finally:
            self._core.accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender and disconnect. Records still unsent after ``timeout`` seconds
        fail with ProducerClosedError."""
        if self._closed:
            return
        self._closed = True
        self._stop_fast_path()
        try:
            self.flush(timeout)
        except ClientTimeoutError:
            pass
        finally:
            self._stopping = True
            self._wakeup.set()
            self._sender.join(timeout)
            self._in_flight.put(None)  # after every request the sender wrote
            self._receiver.join(timeout)
            self._core.abort_queued("the producer was closed before the record was sent")
            self._conn.close()  # a receiver still waiting gets ResponseLostError at once
            if self._txn_conn is not None:
                self._txn_conn.close()
            self._receiver.join(timeout)
            self._core.abort_queued("the producer was closed before the record was sent")
            with self._space:
                self._space.notify_all()

    def _stop_fast_path(self) -> None:
        """Every later send() takes the full path, which refuses it (the producer is closed)."""
        self._core.accumulator.configure_fast_path(False, self.config.buffer_memory, self.config.acks)

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        finally:
            if not self._stopping:
                self._died("the producer's sender thread stopped unexpectedly")
            with self._space:
                self._space.notify_all()

    def _died(self, reason: str) -> None:
        """A thread of ours died of a bug (send_op itself never raises): fail what it would have
        sent, so no get(), flush() or close() waits forever, and refuse new records."""
        self._closed = True
        self._stop_fast_path()
        self._core.abort_queued(reason)

    def _send_until_stopped(self) -> None:
        core = self._core
        accumulator, slots, conn, txn = core.accumulator, self._slots, self._conn, core.txn
        while not self._stopping:
            self._wakeup.clear()
            if core.needs_producer_id and accumulator.has_queued() and not self._init_producer_id():
                continue
            if txn is not None and txn.has_pending:
                self._add_partitions()
                continue
            if not slots.acquire(timeout=0.1):  # every slot taken: the receiver frees one and wakes us
                continue
            batches = core.drain(time.monotonic(), conn.view.leader)
            if not batches:
                slots.release()
                if txn is not None and txn.has_pending:
                    continue  # drain found partitions to add to the transaction first
                deadline = accumulator.next_deadline()
                self._wakeup.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                continue
            op = self._core.send_op(batches)
            try:
                effect = next(op)  # send_op's first effect is its produce request...
            except StopIteration:  # ...unless building it failed: the batches failed with the error
                slots.release()
                with self._space:
                    self._space.notify_all()
                continue
            assert type(effect) is Call
            try:
                handle, error = conn.send(effect.request, effect.timeout_s), None
            except Exception as exc:  # handed to the operation by the receiver, in order
                handle, error = None, exc
            self._in_flight.put((op, handle, effect.timeout_s, error))
            if error is not None:
                # The batches may be sent again: let the receiver put them back before anything
                # newer is written (on a fresh connection a newer batch would overtake them).
                self._wait_until_idle()

    def _add_partitions(self) -> None:
        """A transaction's new partitions added before their batches go (add_partitions_to_txn);
        refused, the transaction's queued records fail and it can only be aborted."""
        assert self._txn is not None and self._txn_conn is not None
        try:
            run_sync(self._txn.add_partitions_op(), self._txn_conn)
        except Exception as exc:
            self._core.fail_queued(exc)
            with self._space:
                self._space.notify_all()

    def _init_producer_id(self) -> bool:
        """An idempotent producer's id, before its first batch; False (the queued batches failed
        with the error, after a backoff) if the broker did not give one."""
        try:
            run_sync(self._core.init_producer_id_op(), self._conn)
            return True
        except Exception as exc:
            self._core.fail_queued(exc)
            with self._space:
                self._space.notify_all()
            self._wakeup.wait(self.config.retry_backoff_ms / 1000)
            return False

    def _wait_until_idle(self) -> None:
        """Until every written request has been handled (every slot free), or the producer stops."""
        limit, slots, held = self.config.max_in_flight_requests_per_connection, self._slots, 0
        assert limit is not None  # (ProducerConfig resolves it)
        try:
            while held < limit and not self._stopping:
                if slots.acquire(timeout=0.1):
                    held += 1
        finally:
            for _ in range(held):
                slots.release()

    def _run_receiver(self) -> None:
        """Handle each written request's response, in the order the requests were written."""
        conn, in_flight = self._conn, self._in_flight
        try:
            while True:
                item = in_flight.get()
                if item is None:
                    return
                op, handle, timeout_s, error = item
                value = None
                if handle is not None:
                    try:
                        value = conn.receive(handle, timeout_s)
                    except Exception as exc:
                        error = exc
                try:
                    run_sync(op, conn, value, error)  # completes, fails or requeues its batches
                finally:
                    self._slots.release()
                    self._wakeup.set()  # a slot is free (and a retry may be due)
                    with self._space:
                        self._space.notify_all()
        except BaseException:
            self._died("the producer's receiver thread stopped unexpectedly")
            raise
