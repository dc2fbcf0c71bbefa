"""Sessions set up for txlog: registering the source in one, and the local session that
`txlog sql`, the samples and the tests start.

Spark's Python workers are started with `PYSPARK_PYTHON` (default: whatever `python3`
is on PATH), which may lack txlog; pointing it at this interpreter makes the workers
see the same installed packages as the driver.
"""

from __future__ import annotations

import os
import sys

#: Errors only, on stderr: without it the JVM prints a screenful of start-up warnings.
LOG4J2_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def register(spark) -> None:
    """Make format "txlog" (the Python source) available in `spark` (a SparkSession); safe to call twice.

    Nothing of PySpark is changed: `txlog.spark.read` is what sends record reads to the JVM
    reader (format "txlog_jvm", txlog/spark/jvm_reader.py) when its jar is on the session's
    classpath (local_session puts it there; elsewhere spark.jars, see docs/spark.md). Without
    the jar, one warning says so here, when the session is set up.
    """
    from txlog.spark.jvm_reader import jvm_available  # imports pyspark: only when a session exists
    from txlog.spark.source import TxlogDataSource

    spark.dataSource.register(TxlogDataSource)
    jvm_available(spark)  # for its one warning when the jar is missing: said at set-up, not at the first read


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "txlog",
    log_level: str = "ERROR",
    extra_conf: dict[str, str] | None = None,
):
    """Get or create a local session: UI off, UTC session time zone, txlog registered.

    The JVM reader's jar is built on first use (txlog/spark/jvm_build.py) and put on spark.jars,
    so `txlog.spark.read` reads records with it; with no JDK to build it, the Python source
    reads, and one warning says so.
    """
    from txlog.spark.jvm_reader import READER_CONF, try_jar_path

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J2_CONFIG}")
    )
    conf = dict(extra_conf or {})
    jar = try_jar_path() if conf.get(READER_CONF, "").lower() != "python" else None
    if jar is not None:
        conf["spark.jars"] = ",".join(filter(None, (conf.get("spark.jars"), jar)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
