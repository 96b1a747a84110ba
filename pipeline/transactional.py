"""The exactly-once sink: a transaction per micro-batch and task, committed with the batch.

Two phases, as Flink's Kafka sink:

1. **Prepare (each task).** The task's producer takes the transactional id
   ``<transactionalIdPrefix>-<Spark partition id>``; init_transactions fences every earlier
   attempt of the same task (a retried or zombie task) and aborts what it left open. The rows
   are sent in a new transaction, with one more thing in it: the batch id, committed as the
   offset of a consumer group named like the transactional id (``send_offsets_to_transaction``
   on the first row's topic, partition 0). The task flushes and leaves the transaction open;
   its commit message carries the producer id and epoch.
2. **Commit (the driver).** When Spark commits the micro-batch, the driver resumes each task's
   transaction from its message and commits it (``Producer.resume_transaction``); when Spark
   aborts the batch, it aborts them.

Replays. If the driver dies after committing some transactions but before Spark recorded the
batch, Spark runs the batch again: a task whose transaction was committed finds its group's
offset past the batch id (read as a read_committed consumer, once init_transactions has let any
ending transaction finish) and writes nothing; the others write again. This holds when the
micro-batch is deterministic (the same rows in the same Spark partitions on replay), which
Spark's own replay assumes of sinks.

Costs: a transaction per task and batch (InitProducerId, AddPartitions, TxnOffsetCommit,
EndTxn, and a marker per partition written), and the batch's records are readable by
read_committed consumers only after the driver commits. Speculative execution must stay off
(Spark's default): a speculative copy's init_transactions would abort its twin's transaction.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from triolog.client.consumer import Consumer
from triolog.client.errors import TriologClientError
from triolog.client.producer import Producer
from triolog.client.types import TopicPartition

from .options import WriteOptions
from .write import WriteError, first_topic, send_batches

__all__ = ["PreparedTransaction", "end_transactions", "prepare_transaction", "task_transactional_id"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedTransaction:
    """A task's open transaction: what the driver needs to end it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def task_transactional_id(prefix: str, partition_id: int) -> str:
    return f"{prefix}-{partition_id}"


def _producer(options: WriteOptions, transactional_id: str) -> Producer:
    return Producer(
        options.bootstrap,
        **{**options.client, "acks": -1},
        transactional_id=transactional_id,
        security=options.security,
    )


def _written_through(options: WriteOptions, transactional_id: str, progress: TopicPartition) -> int:
    """The batch id after the last one whose transaction committed for this task (0: none)."""
    consumer_settings = {k: v for k, v in options.client.items() if k in ("client_id", "request_timeout_ms")}
    with Consumer(
        options.bootstrap,
        group_id=transactional_id,
        isolation_level="read_committed",
        security=options.security,
        **consumer_settings,
    ) as consumer:
        committed = consumer.committed(progress)
    return 0 if committed is None else committed


def prepare_transaction(
    options: WriteOptions, batches: Iterable[pa.RecordBatch], batch_id: int, partition_id: int
) -> tuple[int, PreparedTransaction | None]:
    """Phase one, in a task: (rows written, the open transaction), or (0, None) when the task
    has no rows or its rows of this batch were committed before (a replay)."""
    assert options.transactional_id_prefix is not None
    batches = iter(batches)
    first = next((batch for batch in batches if batch.num_rows), None)
    if first is None:
        return 0, None
    transactional_id = task_transactional_id(options.transactional_id_prefix, partition_id)
    progress = TopicPartition(first_topic(options, first), 0)
    with _producer(options, transactional_id) as producer:
        producer.init_transactions()
        done_through = _written_through(options, transactional_id, progress)
        if done_through > batch_id:
            _log.info(
                "transactional id %s: batch %d was committed before (replay): nothing written",
                transactional_id,
                batch_id,
            )
            return 0, None
        producer.begin_transaction()
        try:
            written = send_batches(producer, options, itertools.chain([first], batches))
            producer.send_offsets_to_transaction({progress: batch_id + 1}, transactional_id)
        except BaseException:
            try:  # so read_committed consumers need not wait for the transaction timeout
                producer.abort_transaction()
            except TriologClientError as exc:
                _log.warning("transactional id %s: abort after a failed write failed: %s", transactional_id, exc)
            raise
        producer_id, epoch = producer.producer_id_and_epoch()
    return written, PreparedTransaction(transactional_id, producer_id, epoch)


def end_transactions(options: WriteOptions, prepared: Sequence[PreparedTransaction], committed: bool) -> None:
    """Phase two, on the driver: commit (or abort) every task's transaction. A commit that
    fails raises, and Spark fails the batch (a restart replays it: see the module docstring);
    an abort that fails is logged (the transaction timeout or the retry's fencing ends it)."""
    failures: list[BaseException] = []
    for txn in prepared:
        try:
            with _producer(options, txn.transactional_id) as producer:
                producer.resume_transaction(txn.producer_id, txn.producer_epoch)
                if committed:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
        except TriologClientError as exc:
            if not committed:
                _log.warning("transactional id %s: abort failed: %s", txn.transactional_id, exc)
                continue
            failures.append(exc)
    if failures:
        raise WriteError(
            f"{len(failures)} of {len(prepared)} task transactions could not be committed; first: {failures[0]}"
        ) from failures[0]
