"""Found by PySpark itself: it imports every top-level ``pyspark_*`` module and registers its
``DefaultSource``, so ``spark.read.format("triolog")`` works without a register call.

The options are Spark's Kafka connector's, with ``triolog.`` for ``kafka.`` (see
:mod:`triolog.pipeline.options`). One more for streaming reads: ``commitOffsetsToGroup`` (default
``false``, as Spark's Kafka source commits nothing) with ``triolog.group.id``: each completed
micro-batch's end offsets are committed to that consumer group (when Spark plans the next
micro-batch), so ``triolog groups --describe`` shows the query's progress and lag."""

from triolog.pipeline.source import TriologDataSource as DefaultSource

__all__ = ["DefaultSource"]
