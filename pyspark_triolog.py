"""Found by PySpark itself: it imports every top-level ``pyspark_*`` module and registers its
``DefaultSource``, so ``spark.read.format("triolog")`` works without a register call."""

from triolog.pipeline.source import TriologDataSource as DefaultSource

__all__ = ["DefaultSource"]
