"""raftlog's PySpark data source: `spark.read.format("raftlog")` as Spark reads Kafka.

    import raftlog_spark
    spark = raftlog_spark.local_session("my-job")      # or any SparkSession (Spark 4.2+)
    raftlog_spark.register(spark)
    df = (spark.read.format("raftlog")
          .option("raftlog.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "pageviews")
          .load())

Rules this package keeps (docs/SPARK.md has the options and the guarantees):
- It reads committed records only: every range ends at or below the partition's high
  watermark, and fetches never return records past it.
- It talks to the cluster only through raftlog.client (never the broker's code).
- Its classes are pickled to Spark's Python workers: network clients are opened inside
  `read()`/`write()` or lazily on the driver, never kept in a pickled field.
"""

from __future__ import annotations

from typing import Any

from raftlog_spark.environment import check_environment, local_session

__all__ = ["check_environment", "local_session", "register"]


def register(spark: Any) -> None:
    """Make `format("raftlog")` available in this Spark session (reads and writes)."""
    from raftlog_spark.source import RaftlogDataSource

    spark.dataSource.register(RaftlogDataSource)
