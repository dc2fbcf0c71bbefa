"""`txlog.scan` against the Spark source: the same rows, column for column, from one planner.

One test, on the session tests/conftest.py starts once per run (Spark is slow to start):
both readers, both isolation levels, a store with every codec and one with open and
aborted transactions interleaved.
"""

from __future__ import annotations

import pytest

import txlog
from tests.scan.test_scan_consumer import ALL_COLUMNS, RC, RU, scan_tuples
from tests.spark.spark_stores import codec_store, mixed_store, no_fsync

pytest.importorskip("pyspark")


def spark_tuples(spark, path: str, isolation: str) -> list[tuple]:
    """The Python source's full record view (the one the JVM reader is checked against in tests/spark)."""
    df = (
        spark.read.format("txlog")
        .option("subscribePattern", ".*")
        .option("includeHeaders", "true")
        .option("includeTransactionColumns", "true")
        .option("isolation.level", isolation)
        .load(path)
    )
    return scan_tuples(df.toArrow().select(ALL_COLUMNS))


def test_scan_and_the_spark_source_read_the_same_rows(spark, tmp_path):
    with no_fsync():
        stores = [codec_store(str(tmp_path / "codecs")), mixed_store(str(tmp_path / "mixed"), records=30)]
    for path in stores:
        for isolation in (RC, RU):
            got = scan_tuples(txlog.scan(path, isolation_level=isolation, columns=ALL_COLUMNS).to_arrow())
            want = spark_tuples(spark, path, isolation)
            assert got == want, (path, isolation)
            assert got
