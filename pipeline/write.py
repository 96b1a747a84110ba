"""Task-side writing: produce the rows of Arrow batches with our Producer, acks=all.

Columns as Spark's Kafka sink: ``value`` (required), ``key``, ``headers``, ``topic`` (the
``topic`` option overrides it) and ``partition`` (absent or null: the producer's partitioner,
murmur2 of the key as Kafka's default, sticky for keyless records). Any record the broker does
not acknowledge fails the task, so Spark retries it or fails the job: a write is at least once,
never silently short. The producer is idempotent (Kafka 3.0+'s default, which Spark's Kafka sink
inherits): within a task, a batch resent after a lost response or a broker restart is stored
once. A task Spark runs again is a new producer, and may store some records twice (as with
Spark's Kafka sink); the exactly-once mode (:mod:`triolog.pipeline.transactional`) prevents that.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from triolog.client.errors import TriologClientError
from triolog.client.producer import Producer

from .options import WriteOptions

__all__ = ["WriteError", "first_topic", "produce_batches", "send_batches"]


class WriteError(RuntimeError):
    """A record could not be written; the task fails with it."""


def _column(batch: pa.RecordBatch, name: str, rows: int) -> list:
    for index, field_name in enumerate(batch.schema.names):  # Spark resolves columns case-insensitively
        if field_name.lower() == name:
            return batch.column(index).to_pylist()
    return [None] * rows


def _row_headers(row_headers):
    return [(h["key"], h["value"]) for h in row_headers] if row_headers else ()


def _runs(topics: list, partitions: list) -> list[tuple[int, int]]:
    """(start, end) row ranges of one topic and one partition value each: one send_many call per
    range (a whole Arrow batch when the topic option is set and no partition column varies)."""
    runs, start = [], 0
    for i in range(1, len(topics)):
        if topics[i] != topics[start] or partitions[i] != partitions[start]:
            runs.append((start, i))
            start = i
    if topics:
        runs.append((start, len(topics)))
    return runs


def produce_batches(options: WriteOptions, batches: Iterable[pa.RecordBatch]) -> int:
    """Produce every row, at least once; returns how many."""
    with Producer(options.bootstrap, **{**options.client, "acks": -1}, security=options.security) as producer:
        return send_batches(producer, options, batches)


def first_topic(options: WriteOptions, batch: pa.RecordBatch) -> str:
    """The topic of the batch's first row (the ``topic`` option, else its column)."""
    topic = options.topic or _column(batch, "topic", batch.num_rows)[0]
    if topic is None:
        raise WriteError("a row has a null 'topic' and no 'topic' option is set")
    return topic


def send_batches(producer: Producer, options: WriteOptions, batches: Iterable[pa.RecordBatch]) -> int:
    """Send every row with ``producer``; returns how many. Each Arrow batch is flushed and
    checked before the next is read, so a failure stops the task early and memory stays
    bounded. Rows go through ``Producer.send_many``, one call per run of rows with the same
    topic and partition."""
    written = 0
    for batch in batches:
        rows = batch.num_rows
        if not rows:
            continue
        values = _column(batch, "value", rows)
        keys = _column(batch, "key", rows)
        partitions = _column(batch, "partition", rows)
        headers = _column(batch, "headers", rows)
        topics = [options.topic] * rows if options.topic else _column(batch, "topic", rows)
        if None in topics:
            raise WriteError("a row has a null 'topic' and no 'topic' option is set")
        results = []
        for start, end in _runs(topics, partitions):
            topic = topics[start]
            run_keys = keys[start:end]
            run_headers = headers[start:end]
            try:
                results.append(
                    producer.send_many(
                        topic,
                        values[start:end],
                        keys=run_keys if any(k is not None for k in run_keys) else None,
                        headers=[_row_headers(h) for h in run_headers] if any(run_headers) else None,
                        partition=partitions[start],
                    )
                )
            except (TriologClientError, TypeError, ValueError) as exc:
                raise WriteError(f"cannot produce to topic {topic!r}: {exc}") from exc
        producer.flush()
        errors = [error for futures in results for _, error in futures.errors()]
        if errors:
            raise WriteError(
                f"{len(errors)} of {rows} records were not acknowledged by the broker; first error: {errors[0]}"
            ) from errors[0]
        written += rows
    return written
