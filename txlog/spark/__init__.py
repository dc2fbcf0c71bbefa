"""txlog logs as Spark DataFrames: the `txlog` data source and a local session to use it.

    import txlog.spark
    txlog.spark.register(spark)
    df = spark.read.format("txlog").option("subscribe", "orders").load("/path/to/store")

Registering is all a session needs for the Python source: its classes are pickled by
reference and found by module name on the executors, so the txlog package installed there
is the whole deployment (no files shipped with addPyFile). Batch reads of the records go to
the JVM reader instead when the session has its jar on spark.jars (local_session() builds
and adds it; txlog/spark/jvm_reader.py routes, txlog/spark/jvm_build.py builds).

Needs the `spark` extra (pyspark ≥ 4.2, pyarrow); nothing else in txlog imports Spark,
and importing this package does not import it either (it is imported when a session is
built or the source registered).

This package only names its public entry points; no module of it imports the package
back (the source takes FORMAT from `options`), so there is no import cycle through it.
"""

from __future__ import annotations

from txlog.spark.options import FORMAT
from txlog.spark.session import local_session, register

__all__ = ["FORMAT", "register", "local_session"]
