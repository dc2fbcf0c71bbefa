"""txlog logs as Spark DataFrames: the `txlog` data source and a local session to use it.

    import txlog.spark
    txlog.spark.register(spark)
    df = spark.read.format("txlog").option("subscribe", "orders").load("/path/to/store")

Registering is all a session needs: the source's classes are pickled by reference and
found by module name on the executors, so the txlog package installed there is the
whole deployment (no files shipped with addPyFile, no JVM jar).

Needs the `spark` extra (pyspark ≥ 4.2, pyarrow); nothing else in txlog imports Spark.
"""

from __future__ import annotations

FORMAT = "txlog"

__all__ = ["FORMAT", "register", "local_session"]


def register(spark) -> None:
    """Make `format("txlog")` available in `spark` (a SparkSession); safe to call twice."""
    from txlog.spark.source import TxlogDataSource

    spark.dataSource.register(TxlogDataSource)


def local_session(*args, **kwargs):
    """A local SparkSession with the source registered; see `txlog.spark.session.local_session`."""
    from txlog.spark.session import local_session as build

    return build(*args, **kwargs)
