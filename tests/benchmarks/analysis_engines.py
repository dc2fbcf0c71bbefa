"""The DuckDB and Polars cases of bench_analysis.py: a group-by over txlog against the same over Parquet.

Each engine runs one aggregation per partition - the row count and the total value bytes:

  DuckDB   SELECT partition, count(*), sum(octet_length(value)) ... GROUP BY partition
           over `Scan.to_duckdb()` (txlog/scan/duckdb_source.py) and over `read_parquet`;
  Polars   group_by("partition").agg(len, value.bin.size().sum()) over `Scan.to_polars()`
           (txlog/scan/polars_source.py) and over `scan_parquet`, the default (in-memory) engine.

The txlog side includes planning (`txlog.scan` is called inside the timer, as a user's query
would) and, like the Parquet side, reads only the two columns the query uses. Each function
takes bench_analysis's `Bench` (the store, its Parquet copy) and returns the rows it counted,
which bench_analysis checks against the rows written.
"""

from __future__ import annotations

from typing import Any

import txlog

TOPIC = "bench"  # bench_analysis.TOPIC
GROUP_BY_SQL = "SELECT partition, count(*) AS n, sum(octet_length(value)) AS bytes FROM {source} GROUP BY partition"


def _rows(answer: list[tuple]) -> int:
    """The rows an answer counted, once it is checked to hold a byte total for every partition."""
    assert answer and all(n > 0 and size is not None for _, n, size in answer), answer
    return sum(n for _, n, _ in answer)


def duckdb_over_txlog(b: Any) -> int:
    import duckdb

    con = duckdb.connect()
    txlog.scan(b.store, TOPIC).to_duckdb(con).create_view("records")
    return _rows(con.sql(GROUP_BY_SQL.format(source="records")).fetchall())


def duckdb_over_parquet(b: Any) -> int:
    import duckdb

    con = duckdb.connect()
    return _rows(con.sql(GROUP_BY_SQL.format(source=f"read_parquet('{b.parquet}')")).fetchall())


def _polars_group_by(frame: Any) -> int:
    import polars as pl

    out = frame.group_by("partition").agg(pl.len().alias("n"), pl.col("value").bin.size().sum().alias("bytes"))
    return _rows([tuple(row) for row in out.collect().iter_rows()])


def polars_over_txlog(b: Any) -> int:
    return _polars_group_by(txlog.scan(b.store, TOPIC).to_polars())


def polars_over_parquet(b: Any) -> int:
    import polars as pl

    return _polars_group_by(pl.scan_parquet(b.parquet))
