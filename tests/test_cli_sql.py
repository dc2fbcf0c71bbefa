"""`txlog sql`: Spark SQL over a store, end to end through real subprocesses.

Each run starts its own JVM (several seconds), so the Spark runs are few and each checks
several things: the per-partition counts in table, csv and json against what
txlog.Consumer reads, a topic with '-' in its name, binary, header and timestamp
rendering, the isolation option, the analysis views, progress on stderr, and a syntax
error as one `Error:` line. The rendering and error-message helpers are also tested in
process, without Spark.
"""

from __future__ import annotations

import base64
import csv
import datetime
import io
import json
import math
from collections import Counter

import pytest
from spark_stores import mixed_store
from test_cli import assert_ok, assert_one_error, txlog

import txlog as api
from cli.sql import BinaryFormat, _Cells, _iso_timestamp, _unique, quoted, spark_message
from txlog.topic_partition import TopicPartition

SPARK_TIMEOUT = 600  # a JVM per run; slow on a loaded two-core machine
COUNT_QUERY = "SELECT partition, count(*) AS n FROM orders GROUP BY partition ORDER BY partition"
DASHED = "orders-eu"  # not a plain SQL identifier: queried as `orders-eu`
NOT_UTF8 = b"\xff\xfebin"


def _dashed_topic(path: str) -> None:
    """Two partitions of UTF-8 and binary keys and values, headers, nulls, and transactions."""
    with api.Admin(path) as admin:
        admin.create_topic(DASHED, 2)
    plain = api.Producer(path)
    plain.send(DASHED, "héllo".encode(), key=b"k1", partition=0, headers=[("h", b"v"), ("empty", None)])
    plain.send(DASHED, NOT_UTF8, key=b"\x00\x01", partition=0, timestamp_ms=1_700_000_000_123)
    plain.send(DASHED, None, key=None, partition=1)
    plain.flush()
    txn = api.Producer(path, transactional_id="eu-writer")
    txn.init_transactions()
    for commit in (True, False):
        txn.begin_transaction()
        txn.send(DASHED, b"committed" if commit else b"aborted", key=b"t", partition=1)
        txn.flush()
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.close()
    plain.send(DASHED, b"after", partition=1)
    plain.close()


def _group_commit(path: str) -> None:
    """A consumer group's committed offset, so that the store has __consumer_offsets too."""
    consumer = api.Consumer(path, group_id="readers", enable_auto_commit=False)
    consumer.assign([TopicPartition("audit", 0)])
    consumer.poll(max_records=10)
    consumer.commit()
    consumer.close(autocommit=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sql") / "store")
    mixed_store(path, records=30)
    _dashed_topic(path)
    _group_commit(path)
    return path


def consumer_rows(path: str, topic: str, isolation: str) -> list:
    """What txlog.Consumer reads from every partition of `topic`, in (partition, offset) order.

    The store is opened read-only: a writable consumer runs the coordinator's sweep, which would
    abort the fixture's open transaction once it is older than its timeout and change the answer.
    """
    from storage import Store

    with Store.open(path, read_only=True) as s:
        consumer = api.Consumer(s, isolation_level=isolation, enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in range(s.partition_count(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        rows = []
        while batch := consumer.poll(max_records=1000):
            rows.extend(batch)
        consumer.close(autocommit=False)
    return sorted(rows, key=lambda r: (r.partition, r.offset))


def _partition_counts(path: str, isolation: str) -> dict[int, int]:
    rows = consumer_rows(path, "orders", isolation)
    return dict(sorted(Counter(r.partition for r in rows).items()))


def _sql(store: str, *args: str, quiet: bool = False):
    return txlog(*(["-q"] if quiet else []), "sql", *args, data_dir=store, timeout=SPARK_TIMEOUT)


def _no_jvm_noise(stderr: str) -> None:
    for noise in ("WARN", "log4j", "WARNING: Using incubator", "Exception", "\tat "):
        assert noise not in stderr, stderr


# ---- end to end, one JVM per test ----------------------------------------------------------------

def test_table_counts_match_the_consumer_and_progress_goes_to_stderr(store):
    proc = _sql(store, COUNT_QUERY)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["partition", "n"]
    assert set(lines[1]) <= {"-", " "}
    got = {int(p): int(n) for p, n in (line.split() for line in lines[2:])}
    expected = _partition_counts(store, "read_committed")
    assert got == expected
    assert expected != _partition_counts(store, "read_uncommitted")  # the store has open and aborted data

    err = proc.stderr.splitlines()
    assert err[0] == "Starting Spark (local[2])..."
    views = next(line for line in err if line.startswith("Registered views: "))
    assert views.removeprefix("Registered views: ").split(", ") == [
        "__consumer_offsets", "__transaction_state", "audit", "orders", f"`{DASHED}`",
        "txlog_batches", "txlog_transactions",
    ]
    assert "Running query..." in err and err[-1] == "3 rows"
    assert "Starting Spark" not in proc.stdout and "Registered views" not in proc.stdout
    _no_jvm_noise(proc.stderr)


def test_csv_read_uncommitted_matches_the_consumer_and_quiet_silences_stderr(store):
    proc = _sql(store, COUNT_QUERY, "--output", "csv", "--isolation-level", "read_uncommitted", quiet=True)
    assert_ok(proc)
    assert proc.stderr == ""
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[0] == ["partition", "n"]
    assert {int(p): int(n) for p, n in rows[1:]} == _partition_counts(store, "read_uncommitted")


def test_json_of_a_dashed_topic_matches_the_consumer(store):
    query = (f"SELECT partition, offset, key, value, timestamp, headers, producerId, isTransactional "
             f"FROM `{DASHED}` ORDER BY partition, offset")
    proc = _sql(store, query, "--output", "json", "--include-headers", "--include-transaction-columns")
    assert_ok(proc)
    got = json.loads(proc.stdout)
    records = consumer_rows(store, DASHED, "read_committed")

    def shown(data):
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + data.hex()

    def iso(ms):
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    assert got == [{
        "partition": r.partition, "offset": r.offset, "key": shown(r.key), "value": shown(r.value),
        "timestamp": iso(r.timestamp),  # no headers: null, as Spark's Kafka source
        "headers": [{"key": k, "value": shown(v)} for k, v in r.headers] or None,
        "producerId": r.producer_id, "isTransactional": r.is_transactional,
    } for r in records]
    assert b"aborted" not in [r.value for r in records] and len(got) == 5  # read_committed by default
    assert {"value": "0x" + NOT_UTF8.hex(), "timestamp": "2023-11-14T22:13:20.123Z"}.items() <= got[1].items()
    assert "some binary values are not UTF-8" in proc.stderr  # the note about the 0x cells


def _batches(path: str):
    from storage import Store

    with Store.open(path, read_only=True) as s:
        for topic in s.list_topics():
            for p in range(s.partition_count(topic)):
                log = s.partition(topic, p)
                offset = log.log_start_offset
                while offset < log.log_end_offset:
                    batches = log.read(offset, 1 << 24)
                    if not batches:
                        break
                    for batch in batches:
                        yield topic, batch
                    offset = batches[-1].next_offset


def test_analysis_views_batches_and_transactions(store):
    query = """
        SELECT 'batches' AS what, topic AS name, count(*) AS n FROM txlog_batches GROUP BY topic
        UNION ALL
        SELECT 'aborts', topic, count_if(isControl AND controlType = 'ABORT') FROM txlog_batches GROUP BY topic
        UNION ALL
        SELECT 'state', transactionalId || '=' || max_by(state, logOffset), count(*) FROM txlog_transactions
        GROUP BY transactionalId
    """
    proc = _sql(store, query, "--output", "jsonl", quiet=True)
    assert_ok(proc)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    got = {(r["what"], r["name"]): r["n"] for r in rows if r["what"] != "state"}

    batches, aborts = Counter(), Counter()
    for topic, batch in _batches(store):
        batches[topic] += 1
        aborts[topic] += batch.is_control and batch.control_marker().is_abort
    expected = {("batches", t): n for t, n in batches.items()} | {("aborts", t): n for t, n in aborts.items()}
    assert got == expected
    assert aborts[DASHED] == 1 and aborts["orders"] > 0

    with api.Admin(store, read_only=True) as admin:
        states = {f"{d.transactional_id}={d.state.state.kafka_name}" for d in admin.list_transactions()}
    assert {r["name"] for r in rows if r["what"] == "state"} == states
    assert "opener=Ongoing" in states and "eu-writer=CompleteAbort" in states


def test_a_syntax_error_is_one_error_line(store):
    proc = _sql(store, "SELEC partition FROM orders", quiet=True)
    message = assert_one_error(proc, 1)
    assert "PARSE_SYNTAX_ERROR" in message and "SELEC" in message


def test_a_missing_store_is_one_error_line(tmp_path):
    proc = txlog("sql", "SELECT 1", data_dir=tmp_path / "nope")
    message = assert_one_error(proc, 1)
    assert "no store at" in message


# ---- in process: names, cells, messages ------------------------------------------------------------

def test_view_names_as_written_in_a_query():
    assert quoted("orders") == "orders"
    assert quoted("__transaction_state") == "__transaction_state"
    assert quoted("orders-eu") == "`orders-eu`"
    assert quoted("app.events") == "`app.events`"
    assert quoted("1st") == "`1st`"


def test_cells_render_binary_timestamps_and_nested_values():
    cells = _Cells(BinaryFormat.auto)
    assert cells.json_value(b"abc") == "abc" and not cells.hexed
    assert cells.json_value(b"\xff\x00") == "0xff00" and cells.hexed
    assert _Cells(BinaryFormat.base64).json_value(b"\xff\x00") == base64.b64encode(b"\xff\x00").decode()
    assert _Cells(BinaryFormat.hex).json_value(b"abc") == "616263"
    utc = datetime.UTC
    assert cells.json_value(datetime.datetime(2024, 5, 1, 12, 0, tzinfo=utc)) == "2024-05-01T12:00:00.000Z"
    assert _iso_timestamp(datetime.datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=utc)) == "2024-05-01T12:00:00.000001Z"
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert _iso_timestamp(datetime.datetime(2024, 5, 1, 14, 0, tzinfo=plus2)) == "2024-05-01T12:00:00.000Z"
    assert cells.json_value([("a", b"x"), ("b", None)]) == {"a": "x", "b": None}  # an Arrow map
    assert cells.json_value([{"key": "h", "value": b"v"}]) == [{"key": "h", "value": "v"}]
    assert cells.json_value(math.nan) == "NaN" and cells.json_value(-math.inf) == "-Infinity"
    assert cells.text(None, "null") == "null" and cells.text(True, "") == "true"
    assert cells.text([{"key": "h", "value": None}], "") == '[{"key":"h","value":null}]'
    assert _unique(["key", "key", "key_2", "n"]) == ["key", "key_2", "key_2_2", "n"]


def test_spark_messages_are_one_line():
    class Fake(Exception):
        pass

    first = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)"
    assert spark_message(Fake(f"\n{first}\n\n== SQL ==\nSELEC 1\n^^^\n")) == first
    wrapped = ("An error occurred while calling o42.collectToPython.\n: org.apache.spark.SparkException: "
               "Exception thrown in awaitResult:\n\tat org.apache.spark.util.X(X.scala:1)\n"
               "Caused by: java.io.IOException: disk full\n\tat y")
    assert spark_message(Fake(wrapped)) == ("org.apache.spark.SparkException: Exception thrown in awaitResult: "
                                            "java.io.IOException: disk full")
    worker = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
              '  File "x.py", line 1, in f\n    raise X\nstorage.errors.CorruptRecordError: CRC mismatch at byte 172\n'
              " SQLSTATE: 38000")
    assert spark_message(Fake(worker)) == "CorruptRecordError: CRC mismatch at byte 172"
    assert spark_message(Fake("")) == "Fake"
