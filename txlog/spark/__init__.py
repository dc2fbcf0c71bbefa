"""txlog logs as Spark DataFrames: `read`, the `txlog` data source, and a local session to use them.

    import txlog.spark
    spark = txlog.spark.local_session()        # or your session, then txlog.spark.register(spark)
    df = txlog.spark.read(spark, "/path/to/store", subscribe="orders")
    df.write.format("txlog").option("topic", "out").mode("append").save("/path/to/store")  # exactly once

Two format names, two readers, chosen explicitly (nothing of PySpark is patched):

* `txlog.spark.read(spark, path, **options)`: batch reads. The record view goes to the JVM
  reader, format "txlog_jvm" (JVM_FORMAT), when the session has its jar on spark.jars
  (local_session() builds and adds it); the views, and sessions without the jar, to the Python
  source (txlog/spark/jvm_reader.py plans and chooses, txlog/spark/jvm_build.py builds).
* `spark.read.format("txlog")` / `spark.readStream.format("txlog")` (FORMAT): the Python data
  source, for every view, batch and streaming.
* `df.write.format("txlog")` / `df.writeStream.format("txlog")`, and `write_batch` for
  `foreachBatch`: the exactly-once sink (txlog/spark/writer.py).

Registering is all a session needs for the Python source: its classes are pickled by
reference and found by module name on the executors, so the txlog package installed there
is the whole deployment (no files shipped with addPyFile).

Needs the `spark` extra (pyspark ≥ 4.2, pyarrow); nothing else in txlog imports Spark,
and importing this package does not import it either (it is imported when a session is
built, the source registered or a read made).

This package only names its public entry points; no module of it imports the package
back (the source takes FORMAT from `options`), so there is no import cycle through it.
"""

from __future__ import annotations

from txlog.spark.foreach_batch import write_batch
from txlog.spark.jvm_build import JVM_FORMAT
from txlog.spark.jvm_reader import read
from txlog.spark.options import FORMAT
from txlog.spark.session import local_session, register

__all__ = ["FORMAT", "JVM_FORMAT", "local_session", "read", "register", "write_batch"]
