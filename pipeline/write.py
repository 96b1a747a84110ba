"""Task-side writing: produce the rows of Arrow batches with our Producer, acks=all.

Columns as Spark's Kafka sink: ``value`` (required), ``key``, ``headers``, ``topic`` (the
``topic`` option overrides it) and ``partition`` (absent or null: the producer's partitioner,
murmur2 of the key as Kafka's default, sticky for keyless records). Any record the broker does
not acknowledge fails the task, so Spark retries it or fails the job: a write is at least once
(a retried task may produce some records twice), never silently short.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from triolog.client.errors import TriologClientError
from triolog.client.producer import Producer

from .options import WriteOptions

__all__ = ["WriteError", "produce_batches"]


class WriteError(RuntimeError):
    """A record could not be written; the task fails with it."""


def _column(batch: pa.RecordBatch, name: str, rows: int) -> list:
    for index, field_name in enumerate(batch.schema.names):  # Spark resolves columns case-insensitively
        if field_name.lower() == name:
            return batch.column(index).to_pylist()
    return [None] * rows


def produce_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row; returns how many. Each Arrow batch is flushed and checked before the
    next is read, so a failure stops the task early and memory stays bounded."""
    written = 0
    with Producer(options.bootstrap, **{**options.client, "acks": -1}) as producer:
        for batch in batches:
            rows = batch.num_rows
            if not rows:
                continue
            values = _column(batch, "value", rows)
            keys = _column(batch, "key", rows)
            partitions = _column(batch, "partition", rows)
            headers = _column(batch, "headers", rows)
            topics = [options.topic] * rows if options.topic else _column(batch, "topic", rows)
            futures = []
            send = producer.send
            for i in range(rows):
                topic = topics[i]
                if topic is None:
                    raise WriteError("a row has a null 'topic' and no 'topic' option is set")
                row_headers = headers[i]
                if row_headers:
                    row_headers = [(h["key"], h["value"]) for h in row_headers]
                try:
                    futures.append(send(topic, values[i], key=keys[i], headers=row_headers or (),
                                        partition=partitions[i]))
                except (TriologClientError, TypeError, ValueError) as exc:
                    raise WriteError(f"cannot produce to topic {topic!r}: {exc}") from exc
            producer.flush()
            for future in futures:
                error = future.exception()
                if error is not None:
                    failed = sum(1 for f in futures if f.exception() is not None)
                    raise WriteError(f"{failed} of {rows} records were not acknowledged by the broker; "
                                     f"first error: {error}") from error
            written += rows
    return written
