"""The ``triolog`` PySpark data source: Spark's Kafka connector, spoken to a triolog broker.

Spark pickles the data source, its readers and writers to Python workers, so they carry only
parsed options; connections are opened where the work happens (``partitions()``/offset calls on
the driver, ``read()``/``write()`` in tasks).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

try:  # PySpark 4.2 added admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError as exc:
    import pyspark

    raise ImportError(
        f"the triolog data source needs PySpark >= 4.2, found {pyspark.__version__}: pip install '.[spark]'"
    ) from exc
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from triolog.client.types import TopicPartition

from .fetch import data_loss, read_range
from .options import OptionError, ReadOptions, WriteOptions, parse_read_options, parse_write_options
from .plan import BrokerView, PartitionRange, rate_limit, split_ranges
from .transactional import PreparedTransaction, end_transactions, prepare_transaction
from .write import WriteError, produce_batches

__all__ = ["SCHEMA", "SCHEMA_WITH_HEADERS", "TriologDataSource"]

#: Exactly Spark's Kafka source schema.
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key string, value binary>>"


class TriologDataSource(DataSource):
    """``spark.read.format("triolog")`` / ``readStream`` / ``write`` / ``writeStream``.

    Options are those of Spark's Kafka connector (see :mod:`triolog.pipeline.options`), with
    ``triolog.`` in place of ``kafka.``.
    """

    @classmethod
    def name(cls) -> str:
        return "triolog"

    def schema(self) -> str:
        # Called when a read is defined: checking options here reports a bad one at load().
        options = parse_read_options(self.options)
        return SCHEMA_WITH_HEADERS if options.include_headers else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TriologBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TriologStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> TriologBatchWriter:
        options = parse_write_options(self.options)
        if overwrite:  # Spark's Kafka sink refuses it too: a log cannot be replaced, only appended to
            raise OptionError(
                "mode", "overwrite is not supported: records are appended to the topic; use mode('append')"
            )
        if options.exactly_once:  # (a batch job has no batch id to recognise its own replay by)
            raise OptionError("deliveryGuarantee", "exactly-once is for streaming writes (writeStream)")
        check_write_schema(schema, options)
        return TriologBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TriologStreamWriter:
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return TriologStreamWriter(options)


# -- reading -----------------------------------------------------------------------------------


class OffsetRangePartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic partition."""

    def __init__(self, r: PartitionRange) -> None:
        super().__init__(None)
        self.topic, self.partition, self.start, self.end = r.topic, r.partition, r.start, r.end


def _read(options: ReadOptions, partition: InputPartition):
    if not isinstance(partition, OffsetRangePartition):  # Spark's placeholder when nothing to read
        return iter(())
    return read_range(
        options.bootstrap,
        options.consumer_config(),
        partition.topic,
        partition.partition,
        partition.start,
        partition.end,
        fail_on_data_loss=options.fail_on_data_loss,
        include_headers=options.include_headers,
        security=options.security,
    )


def _ranges(options: ReadOptions, start: dict[TopicPartition, int], end: dict[TopicPartition, int]) -> list:
    ranges = [PartitionRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end) if tp in start]
    return [OffsetRangePartition(r) for r in split_ranges(ranges, options.min_partitions)]


class TriologBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        view = BrokerView(options.bootstrap, options.consumer_config(), options.security)
        try:
            tps = view.partitions(options.subscription, must_exist=True)
            start = view.resolve(options.starting, tps, starting=True, strategy=options.timestamp_strategy)
            end = view.resolve(options.ending, tps, starting=False)
            if options.ending.kind == "offsets":  # an end past the log would wait for records forever
                latest = view.latest(tps)
                for tp in tps:
                    if end[tp] > latest[tp]:
                        raise OptionError(
                            "endingOffsets",
                            f"offset {end[tp]} for {tp.topic}-{tp.partition} is past the end of its log ({latest[tp]})",
                        )
        finally:
            view.close()
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(
                    options.starting.option,
                    f"resolves to offset {start[tp]} in {tp.topic}-{tp.partition}, "
                    f"after the end offset {end[tp]} from {options.ending.option!r}",
                )
        return _ranges(options, start, end)

    def read(self, partition: InputPartition):
        return _read(self.options, partition)


def offsets_to_json(offsets: dict[TopicPartition, int]) -> dict:
    """Kafka's offset JSON, topics and partitions in order (Spark compares offsets as JSON text)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(doc: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


class TriologStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; the offset is ``{"topic": {"partition": next offset}}``.

    Partitions that appear after the query started (new partitions, or new topics matching
    ``subscribePattern``) are read from their earliest offset, as Spark's Kafka source does.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._view = BrokerView(options.bootstrap, options.consumer_config(), options.security)
        #: Trigger.AvailableNow: the latest offsets when the query started; never read past them.
        self._target: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> dict:
        options = self.options
        tps = self._view.partitions(options.subscription, must_exist=False)
        return offsets_to_json(
            self._view.resolve(options.starting, tps, starting=True, strategy=options.timestamp_strategy)
        )

    def getDefaultReadLimit(self):
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._view.partitions(self.options.subscription, must_exist=False)
        self._target = self._view.latest(tps)

    def _available(self) -> dict[TopicPartition, int]:
        if self._target is not None:
            return dict(self._target)
        return self._view.latest(self._view.partitions(self.options.subscription, must_exist=False))

    def latestOffset(self, start: dict, limit) -> dict:
        begin = offsets_from_json(start)
        end = self._available()
        new = [tp for tp in end if tp not in begin]
        from_ = {**begin, **self._view.earliest(new)}
        for tp, offset in begin.items():  # vanished (or past the AvailableNow target): stay put
            end.setdefault(tp, offset)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(from_, end, limit.max_rows)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._view.latest(self._view.partitions(self.options.subscription, must_exist=False)))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        begin.update(self._view.earliest([tp for tp in until if tp not in begin]))
        for tp in sorted(until):
            if until[tp] < begin[tp]:  # the log went backwards: deleted and recreated
                data_loss(
                    tp.topic,
                    tp.partition,
                    until[tp],
                    begin[tp] - 1,
                    f"the partition's offsets went back from {begin[tp]} to {until[tp]}",
                    self.options.fail_on_data_loss,
                )
                until[tp] = begin[tp]
        return _ranges(self.options, begin, until)

    def read(self, partition: InputPartition):
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """The micro-batch ending at ``end`` is complete. As with Spark's Kafka source the
        checkpoint is the record of progress; with commitOffsetsToGroup the end offsets are also
        committed to ``triolog.group.id`` (a failed commit is logged: the query goes on)."""
        group = self.options.commit_group
        if group is None:
            return
        from triolog.client.admin import AdminClient
        from triolog.client.errors import TriologClientError

        try:
            with AdminClient(self.options.bootstrap, security=self.options.security) as admin:
                admin.alter_consumer_group_offsets(group, offsets_from_json(end))
        except TriologClientError as exc:
            logging.getLogger(__name__).warning(
                "committing the micro-batch's end offsets to group %r failed: %s", group, exc
            )

    def stop(self) -> None:
        self._view.close()


# -- writing -----------------------------------------------------------------------------------


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """The column rules of Spark's Kafka sink; each error names the column."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    binary_or_string = (BinaryType(), StringType())
    if "value" not in fields:
        raise OptionError("value", "the DataFrame to write needs a 'value' column (string or binary)")
    for name in ("value", "key"):
        if name in fields and fields[name] not in binary_or_string:
            raise OptionError(name, f"column type must be string or binary, got {fields[name].simpleString()}")
    if "topic" in fields and fields["topic"] != StringType():
        raise OptionError("topic", f"column type must be string, got {fields['topic'].simpleString()}")
    if "topic" not in fields and options.topic is None:
        raise OptionError("topic", "no 'topic' option and no 'topic' column: where should rows go?")
    if "partition" in fields and fields["partition"] != IntegerType():
        raise OptionError("partition", f"column type must be int, got {fields['partition'].simpleString()}")
    expected_headers = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
    if "headers" in fields:
        got = fields["headers"]
        if not (
            isinstance(got, ArrayType)
            and isinstance(got.elementType, StructType)
            and [(f.name, f.dataType) for f in got.elementType.fields]
            == [("key", StringType()), ("value", BinaryType())]
        ):
            raise OptionError(
                "headers", f"column type must be {expected_headers.simpleString()}, got {got.simpleString()}"
            )


@dataclass
class WriteCommitMessage(WriterCommitMessage):
    records: int
    #: exactly-once: the task's open transaction (None: nothing to commit).
    transaction: PreparedTransaction | None = None


class TriologBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator) -> WriteCommitMessage:
        return WriteCommitMessage(produce_batches(self.options, iterator))


#: The local property Spark's micro-batch execution sets on every task of a batch.
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


class TriologStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator) -> WriteCommitMessage:
        if not self.options.exactly_once:
            return WriteCommitMessage(produce_batches(self.options, iterator))
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = None if context is None else context.getLocalProperty(_BATCH_ID_PROPERTY)
        if context is None or batch_id is None:
            raise WriteError("exactly-once writes run in a micro-batch task, which names its batch id")
        records, transaction = prepare_transaction(self.options, iterator, int(batch_id), context.partitionId())
        return WriteCommitMessage(records, transaction)

    def commit(self, messages, batchId: int) -> None:
        """At least once: nothing to do (every record was acknowledged before its task ended).
        Exactly once: the tasks' transactions are committed now."""
        if self.options.exactly_once:
            end_transactions(self.options, _transactions(messages), committed=True)

    def abort(self, messages, batchId: int) -> None:
        """At least once: nothing to undo (records of failed tasks may stay). Exactly once: the
        transactions of the tasks that finished are aborted (those of failed tasks are ended by
        their retry's fencing or the transaction timeout)."""
        if self.options.exactly_once:
            end_transactions(self.options, _transactions(messages), committed=False)


def _transactions(messages) -> list[PreparedTransaction]:
    return [m.transaction for m in messages if m is not None and m.transaction is not None]
