"""Scan.to_duckdb: the same rows as DuckDB over to_arrow() for every query, with the query's
projection and filters reaching the plan (fewer segment bytes read)."""

from __future__ import annotations

import sys

import pytest

duckdb = pytest.importorskip("duckdb")

import txlog  # noqa: E402
from tests.scan.engine_stores import (  # noqa: E402
    BASE_MS,
    REAL_DIRS,
    SPREAD_PARTITIONS,
    SPREAD_RECORDS,
    LogReads,
    real_broker_dir,
    spread_store,
)
from tests.spark.spark_stores import mixed_store, no_fsync  # noqa: E402

ISOLATIONS = ("read_committed", "read_uncommitted")

#: name -> SQL over the view `records`; `{t}` is a timestamp in the middle of the data.
QUERIES = {
    "all": "SELECT * FROM records",
    "projection": 'SELECT partition, "offset", value FROM records',
    "partition": "SELECT * FROM records WHERE partition = 1",
    "topic": "SELECT * FROM records WHERE topic = 'audit'",
    "partition in": "SELECT * FROM records WHERE partition IN (0, 2)",
    "topic or partition": "SELECT * FROM records WHERE topic = 'audit' OR partition = 2",
    "offset range": 'SELECT * FROM records WHERE "offset" >= 10 AND "offset" < 25',
    "offset between": 'SELECT * FROM records WHERE "offset" BETWEEN 5 AND 9',
    "offset equal": 'SELECT topic, partition, value FROM records WHERE "offset" = 12',
    "timestamp from": "SELECT * FROM records WHERE timestamp >= TIMESTAMPTZ '{t}'",
    "timestamp after": "SELECT * FROM records WHERE timestamp > TIMESTAMPTZ '{t}'",
    "timestamp before": "SELECT * FROM records WHERE timestamp < TIMESTAMPTZ '{t}'",
    "not a partition": "SELECT * FROM records WHERE NOT (partition = 1)",
    "offset not equal": 'SELECT * FROM records WHERE "offset" <> 5',
    "offset or (not pushed)": 'SELECT * FROM records WHERE "offset" < 3 OR "offset" > 40',
    "no partition matches": "SELECT * FROM records WHERE partition = 99",
    "value (applied by the source)": "SELECT * FROM records WHERE value >= 'c-'::BLOB AND value < 'c.'::BLOB",
    "value (applied by DuckDB)": "SELECT * FROM records WHERE CAST(value AS VARCHAR) LIKE 'c-%'",
    "null key": 'SELECT partition, "offset" FROM records WHERE key IS NULL',
    "across columns (not pushed)": 'SELECT * FROM records WHERE partition = 1 OR "offset" < 3',
    "all pushable and value": ('SELECT * FROM records WHERE partition = 0 AND "offset" >= 4 AND value IS NOT NULL'),
    "headers": 'SELECT "offset", headers FROM records WHERE headers IS NOT NULL AND partition = 0',
    "count": "SELECT count(*) FROM records",
    "group by": ("SELECT topic, partition, count(*) AS n, sum(octet_length(value)) AS bytes FROM records GROUP BY ALL"),
}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("mixed") / "store"), segment_bytes=1024)


@pytest.fixture(scope="module")
def spread(tmp_path_factory) -> str:
    return spread_store(str(tmp_path_factory.mktemp("spread") / "store"))


def rows(con, sql: str) -> list[tuple]:
    return sorted(con.sql(sql).fetchall(), key=repr)


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", QUERIES)
def test_same_rows_as_to_arrow(mixed, isolation, name):
    scan = txlog.scan(mixed, isolation_level=isolation)
    pushed, plain = duckdb.connect(), duckdb.connect()
    scan.to_duckdb(pushed).create_view("records")
    plain.register("records", scan.to_arrow())
    middle = plain.sql("SELECT timestamp FROM records ORDER BY timestamp").fetchall()
    sql = QUERIES[name].format(t=middle[len(middle) // 2][0].isoformat())
    expected = rows(plain, sql)
    assert bool(expected) != (name == "no partition matches"), "a query that keeps nothing proves nothing"
    assert rows(pushed, sql) == expected


def test_without_duckdbs_source_module_the_scan_is_a_plain_arrow_stream_with_the_same_rows(mixed, monkeypatch):
    """Another DuckDB line may lack the underscored `duckdb._sources`: no pushdown, same rows."""
    from txlog.scan import duckdb_source

    monkeypatch.setattr(duckdb_source, "_SOURCE_CLASS", None)
    monkeypatch.setitem(sys.modules, "duckdb._sources", None)  # its import now fails
    assert duckdb_source._source_class() is None
    scan = txlog.scan(mixed)
    fallback, plain = duckdb.connect(), duckdb.connect()
    scan.to_duckdb(fallback).create_view("records")
    plain.register("records", scan.to_arrow())
    for name in ("all", "partition", "offset range", "group by"):
        assert rows(fallback, QUERIES[name]) == rows(plain, QUERIES[name])


def test_default_connection_and_relation_api(mixed):
    scan = txlog.scan(mixed)
    relation = scan.to_duckdb()
    got = relation.filter("partition = 2").project('"offset"').fetchall()
    table = scan.to_arrow()
    pairs = zip(table["offset"].to_pylist(), table["partition"].to_pylist(), strict=True)
    expected = [(o,) for o, p in pairs if p == 2]
    assert sorted(got) == sorted(expected)


def test_aborted_and_open_transactions_follow_the_isolation_level(mixed):
    con = duckdb.connect()
    txlog.scan(mixed).to_duckdb(con).create_view("committed")
    txlog.scan(mixed, isolation_level="read_uncommitted").to_duckdb(con).create_view("everything")
    hidden = "SELECT count(*) FROM committed WHERE CAST(value AS VARCHAR) LIKE 'a-%' OR value = 'open-0'"
    assert con.sql(hidden).fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM everything WHERE value = 'open-0'").fetchall() == [(1,)]
    assert con.sql("SELECT count(*) FROM everything WHERE CAST(value AS VARCHAR) LIKE 'a-%'").fetchall()[0][0] > 0


# ---- pushdown: what is read, counted at the segment files ----------------------------------------------


def bytes_read(monkeypatch, con, sql: str) -> tuple[int, list[tuple]]:
    reads = LogReads(monkeypatch)
    got = con.sql(sql).fetchall()
    return reads.take(), got


@pytest.fixture
def spread_con(spread):
    con = duckdb.connect()
    txlog.scan(spread).to_duckdb(con).create_view("records")
    return con


def test_partition_and_offset_filters_read_less(spread_con, monkeypatch):
    everything, _ = bytes_read(monkeypatch, spread_con, "SELECT count(*) FROM records")
    start = SPREAD_RECORDS * 3 // 4
    narrow, got = bytes_read(
        monkeypatch, spread_con, f'SELECT count(*) FROM records WHERE partition = 1 AND "offset" >= {start}'
    )
    assert got == [(SPREAD_RECORDS - start,)]
    # one partition of three, its last quarter: about 1/12 of the bytes; well under 1/4 whatever the segment cuts
    assert 0 < narrow < everything / 4, (narrow, everything)


def test_topic_and_partition_expressions_prune_partitions(spread_con, monkeypatch):
    everything, _ = bytes_read(monkeypatch, spread_con, "SELECT count(*) FROM records")
    one, got = bytes_read(
        monkeypatch, spread_con, "SELECT DISTINCT partition FROM records WHERE topic = 'spread' AND partition IN (2)"
    )
    assert got == [(2,)]
    assert one < everything * 0.5, (one, everything)


def test_timestamp_lower_bound_reads_less(spread_con, monkeypatch):
    everything, _ = bytes_read(monkeypatch, spread_con, "SELECT count(*) FROM records")
    since_ms = BASE_MS + (SPREAD_RECORDS - 10) * 1000
    late, got = bytes_read(
        monkeypatch, spread_con, f"SELECT count(*) FROM records WHERE timestamp >= make_timestamptz({since_ms * 1000})"
    )
    assert got == [(10 * SPREAD_PARTITIONS,)]
    # the lookup of the first offset at that time reads the headers of the batches before it
    # (storage skips no segment on the time index's word alone), the read only the last few batches
    assert late < everything / 2, (late, everything)


def test_filter_that_cannot_be_pushed_reads_everything_and_is_exact(spread_con, monkeypatch):
    everything, _ = bytes_read(monkeypatch, spread_con, "SELECT count(*) FROM records")
    sql = "SELECT \"offset\" FROM records WHERE CAST(value AS VARCHAR) LIKE '%-1-7'"
    read, got = bytes_read(monkeypatch, spread_con, sql)
    assert read == everything
    assert got == [(7,)]


@pytest.mark.parametrize("name", REAL_DIRS)
def test_real_broker_directories(tmp_path, name):
    root = real_broker_dir(tmp_path, name)
    scan = txlog.scan(root)
    pushed, plain = duckdb.connect(), duckdb.connect()
    scan.to_duckdb(pushed).create_view("records")
    plain.register("records", scan.to_arrow())
    topic, partition = plain.sql("SELECT topic, partition FROM records LIMIT 1").fetchall()[0]
    for sql in ("SELECT * FROM records", f"SELECT * FROM records WHERE topic = '{topic}' AND partition = {partition}"):
        expected = rows(plain, sql)
        assert expected
        assert rows(pushed, sql) == expected
