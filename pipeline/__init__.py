"""triolog for Spark: a PySpark data source and sink named ``triolog`` (Spark's Kafka options).

::

    from triolog.pipeline import register
    register(spark)                     # or nothing: PySpark finds pyspark_triolog by itself
    df = (spark.read.format("triolog")
          .option("triolog.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Needs the ``spark`` extra (``pip install .[spark]``: PySpark >= 4.2, pyarrow). Importing this
package does not import PySpark; :func:`register` and :data:`TriologDataSource` do.
"""

from __future__ import annotations

__all__ = ["TriologDataSource", "register"]


def register(spark) -> None:
    """Register the ``triolog`` format on ``spark`` (a SparkSession)."""
    from .source import TriologDataSource

    spark.dataSource.register(TriologDataSource)


def __getattr__(name: str):
    if name == "TriologDataSource":
        from .source import TriologDataSource

        return TriologDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
