"""`txlog sql --engine duckdb` and `--engine spark` give the same rows for the same questions.

Each engine runs one script of every query (one Spark start-up per isolation level: two JVMs
in all), printed as jsonl; every query selects its name as column `q`, so the lines are told
apart, and each query's rows are compared as a multiset, with their column names in order.
Where the dialects differ (exploding an array), the query is written once per engine. The
same store as tests/cli/test_cli_sql.py: every codec, aborted and open transactions, headers,
nulls, binary keys, a topic with '-' in its name, and the internal topics.

Also here, in process: the Arrow schema the DuckDB engine reads from a view's Spark DDL, and
its one-line messages.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pyarrow as pa
import pytest

from cli.sql_duckdb import arrow_schema, duckdb_message
from tests.cli.test_cli_sql import DASHED, _dashed_topic, _group_commit, _sql, assert_ok
from tests.spark.spark_stores import mixed_store

#: name -> the query, or (duckdb's, spark's) where the dialects differ. Each selects `q` first.
QUERIES: dict[str, str | tuple[str, str]] = {
    "count": "SELECT 'count' AS q, count(*) AS n FROM orders",
    "by_partition": (
        "SELECT 'by_partition' AS q, partition, count(*) AS n, min(`offset`) AS lo, max(`offset`) AS hi, "
        "count(key) AS keyed FROM orders GROUP BY partition"
    ),
    "offset_and_key": (
        "SELECT 'offset_and_key' AS q, partition, `offset`, key, value FROM orders "
        "WHERE `offset` BETWEEN 3 AND 20 AND key IS NOT NULL AND key <> CAST('k7' AS BINARY)"
    ),
    "timestamp": (
        "SELECT 'timestamp' AS q, partition, `offset`, timestamp, timestampType FROM orders "
        "WHERE timestamp > (SELECT min(timestamp) FROM orders) AND timestamp >= TIMESTAMP '2020-01-01 00:00:00'"
    ),
    "hour": "SELECT 'hour' AS q, hour(timestamp) AS h, count(*) AS n FROM orders GROUP BY hour(timestamp)",
    "join": (
        "SELECT 'join' AS q, o.partition, o.offset, a.offset AS audit_offset, a.value AS audit_value "
        "FROM orders o JOIN audit a ON o.partition = a.partition AND o.offset = a.offset"
    ),
    "headers": (
        "SELECT 'headers' AS q, partition, `offset`, h.key AS hkey, h.value AS hvalue "
        "FROM (SELECT partition, `offset`, unnest(headers) AS h FROM orders) AS t",
        "SELECT 'headers' AS q, partition, `offset`, h.key AS hkey, h.value AS hvalue "
        "FROM (SELECT partition, `offset`, explode(headers) AS h FROM orders) AS t",
    ),
    "value_length": (
        "SELECT 'value_length' AS q, partition, CAST(sum(octet_length(value)) AS BIGINT) AS bytes, "
        "max(octet_length(value)) AS longest, count(value) AS non_null FROM orders GROUP BY partition"
    ),
    "transactional": (
        "SELECT 'transactional' AS q, isTransactional, producerEpoch, count(*) AS n FROM orders "
        "GROUP BY isTransactional, producerEpoch"
    ),
    "dashed_all": f"SELECT 'dashed_all' AS q, * FROM `{DASHED}`",
    "internal": "SELECT 'internal' AS q, topic, partition, `offset`, key, value FROM __transaction_state",
    "batches": "SELECT 'batches' AS q, * FROM txlog_batches",
    "transactions": "SELECT 'transactions' AS q, * FROM txlog_transactions",
}
#: What read_uncommitted must change: asked again of both engines at that level.
UNCOMMITTED = ("count", "by_partition", "value_length", "dashed_all")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("engines") / "store")
    mixed_store(path, records=30)
    _dashed_topic(path)
    _group_commit(path)
    return path


def _script(engine: str, names: tuple[str, ...] | list[str]) -> str:
    texts = (QUERIES[name] for name in names)
    return ";\n".join(text if isinstance(text, str) else text[engine == "spark"] for text in texts) + ";\n"


def _results(store: str, engine: str, isolation: str, names: tuple[str, ...] | list[str]) -> dict[str, tuple]:
    """Each query's (column names, rows sorted) from one run of `engine`."""
    proc = _sql(
        store,
        "--output",
        "jsonl",
        "--include-headers",
        "--include-transaction-columns",
        "--isolation-level",
        isolation,
        stdin=_script(engine, names),
        engine=engine,
    )
    assert_ok(proc)
    rows: dict[str, list[dict]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        rows[row["q"]].append(row)
    return {
        name: (list(found[0]), sorted(json.dumps(row, sort_keys=True) for row in found)) for name, found in rows.items()
    }


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_both_engines_give_the_same_rows(store, isolation):
    names = list(QUERIES) if isolation == "read_committed" else list(UNCOMMITTED)
    duckdb = _results(store, "duckdb", isolation, names)
    spark = _results(store, "spark", isolation, names)
    # every query answered (some rows each), and the same rows with the same columns in each engine
    assert set(duckdb) == set(names), sorted(set(names) - set(duckdb))
    for name in names:
        assert duckdb[name] == spark[name], name
    if isolation == "read_uncommitted":  # the level reached both engines: more rows than committed
        committed = _results(store, "duckdb", "read_committed", ["count"])
        assert json.loads(duckdb["count"][1][0])["n"] > json.loads(committed["count"][1][0])["n"]


# ---- in process ---------------------------------------------------------------------------------------


def test_the_arrow_schema_of_a_views_spark_ddl():
    schema = arrow_schema(
        "topic string, partition int, offset long, key binary, ok boolean, at timestamp, "
        "partitions array<struct<topic: string, partition: int>>"
    )
    assert schema == pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("ok", pa.bool_()),
            ("at", pa.timestamp("us", tz="UTC")),  # Spark's TimestampType in Arrow, as pyspark maps it
            ("partitions", pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))),
        ]
    )
    with pytest.raises(ValueError, match="decimal"):
        arrow_schema("price decimal")


def test_duckdb_messages_are_one_line():
    class Fake(Exception):
        pass

    assert duckdb_message(Fake('Catalog Error: Table with name x does not exist!\nDid you mean "y"?')) == (
        "Catalog Error: Table with name x does not exist!"
    )
    from_a_view = (
        "Invalid Input Error: reading the stream registered as 'orders' failed: Unknown error: CRC mismatch. "
        'Detail: Python exception: Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "    raise X\nstorage.errors.CorruptRecordError: CRC mismatch at byte 172\n"
    )
    assert duckdb_message(Fake(from_a_view)) == "CorruptRecordError: CRC mismatch at byte 172"
    assert duckdb_message(Fake("")) == "Fake"
    reserved = duckdb_message(Fake('Parser Error: syntax error at or near "offset"\n\nLINE 1: SELECT offset'))
    assert reserved.startswith('Parser Error: syntax error at or near "offset" (') and "`offset`" in reserved


def test_spark_topic_views_are_served_by_the_jvm_reader(store):
    """The topic views are txlog.spark.read's JVM reader (the physical plan names its scan), the
    analysis views the Python source; a query pruning the headers' struct reads through it."""
    script = (
        "EXPLAIN SELECT count(*) FROM orders;\n"
        "EXPLAIN SELECT count(*) FROM txlog_batches;\n"
        "SELECT h.key AS k, count(*) AS n FROM (SELECT explode(headers) AS h FROM orders) GROUP BY h.key;\n"
    )
    proc = _sql(store, "--output", "jsonl", "--include-headers", stdin=script, engine="spark")
    assert_ok(proc)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    plans = [row["plan"] for row in rows if "plan" in row]
    assert len(plans) == 2
    assert "txlog JVM reader" in plans[0], plans[0]
    assert "txlog JVM reader" not in plans[1], plans[1]
    counts = {row["k"]: row["n"] for row in rows if "k" in row}
    duckdb = _sql(
        store,
        "--output",
        "jsonl",
        "--include-headers",
        stdin="SELECT h.key AS k, count(*) AS n FROM (SELECT unnest(headers) AS h FROM orders) GROUP BY h.key;\n",
    )
    assert_ok(duckdb)
    assert counts == {row["k"]: row["n"] for row in map(json.loads, duckdb.stdout.splitlines())} and counts
