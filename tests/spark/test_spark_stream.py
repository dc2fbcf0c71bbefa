"""The streaming source: Kafka JSON offsets, the LSO as "latest", maxOffsetsPerTrigger, exactly-once restarts.

Exactly-once is checked end to end the way a user relies on it: a query writes to
Spark's file sink with a checkpoint, is stopped (or SIGKILLed in another process)
mid-stream while transactions commit and abort, and is restarted from the checkpoint;
the sink must then hold every committed record exactly once and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StructType
from spark_stores import consumer_rows, mixed_store

import txlog
from txlog.spark.options import parse_options
from txlog.spark.stream import TxlogStreamReader, from_json_offsets

ORDERS = [("orders", 0), ("orders", 1), ("orders", 2)]


def _reader(path: str, **options: str) -> TxlogStreamReader:
    return TxlogStreamReader(
        parse_options({"path": path, "subscribe": "orders", **options}, streaming=True), StructType()
    )


def _bounds(path: str) -> dict:
    store = txlog.Store.open(path, read_only=True)
    try:
        return {tp: store.partition(*tp).bounds() for tp in ORDERS}
    finally:
        store.close()


# ---- offsets, without running a query --------------------------------------------------------------


def test_latest_is_the_lso_under_read_committed_and_the_log_end_otherwise(tmp_path):
    path = mixed_store(str(tmp_path / "store"))
    bounds = _bounds(path)
    start = _reader(path, startingOffsets="earliest").initialOffset()
    assert start == {"orders": {str(p): bounds[("orders", p)][0] for p in range(3)}}

    committed = from_json_offsets(_reader(path).latestOffset(start, ReadAllAvailable()))
    uncommitted = from_json_offsets(
        _reader(path, **{"kafka.isolation.level": "read_uncommitted"}).latestOffset(start, ReadAllAvailable())
    )
    assert committed == {tp: b[1] for tp, b in bounds.items()}
    assert uncommitted == {tp: b[2] for tp, b in bounds.items()}
    assert committed[("orders", 1)] < uncommitted[("orders", 1)], "orders-1 has an open transaction"


def test_starting_offsets_default_to_latest_for_a_stream(tmp_path):
    path = mixed_store(str(tmp_path / "store"))
    assert from_json_offsets(_reader(path).initialOffset()) == {tp: b[1] for tp, b in _bounds(path).items()}


def test_max_offsets_per_trigger_shares_the_budget_by_backlog(tmp_path):
    path = mixed_store(str(tmp_path / "store"))
    reader = _reader(path, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    assert reader.getDefaultReadLimit() == ReadMaxRows(30)
    start = reader.initialOffset()
    end = from_json_offsets(reader.latestOffset(start, reader.getDefaultReadLimit()))
    begin = from_json_offsets(start)
    steps = [end[tp] - begin[tp] for tp in ORDERS]
    assert all(step > 0 for step in steps) and sum(steps) <= 30
    # ReadAllAvailable (what the engine passes for some triggers) ignores the option
    assert from_json_offsets(reader.latestOffset(start, ReadAllAvailable())) == {
        tp: b[1] for tp, b in _bounds(path).items()
    }


def test_a_micro_batch_never_splits_an_undecided_transaction(tmp_path):
    """Ends stop at the LSO, so a batch planned now reads the same rows when re-planned later."""
    path = mixed_store(str(tmp_path / "store"))
    reader = _reader(path, startingOffsets="earliest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    before = [
        (r.topic, r.partition, r.start, r.end, r.aborted) for r in (p.value for p in reader.partitions(start, end))
    ]
    with txlog.Admin(path) as admin:
        admin.end_transaction("opener", commit=True)
    after = [
        (r.topic, r.partition, r.start, r.end, r.aborted) for r in (p.value for p in reader.partitions(start, end))
    ]
    assert before == after


# ---- queries ---------------------------------------------------------------------------------------


def _start(spark, path: str, out: str, checkpoint: str, *, trigger: dict, max_offsets: int | None = None):
    reader = spark.readStream.format("txlog").option("subscribe", "orders").option("startingOffsets", "earliest")
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return (
        reader.load(path)
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def _sink_rows(spark, out: str) -> list[tuple]:
    return sorted(
        (r.partition, r.offset, bytes(r.value) if r.value is not None else None)
        for r in spark.read.parquet(out).collect()
    )


def _expected(path: str) -> list[tuple]:
    return [(r.partition, r.offset, r.value) for r in consumer_rows(path, ORDERS, "read_committed")]


def _more_transactions(path: str, tag: str) -> None:
    """A committed and an aborted transaction, plus the decision of the one left open."""
    committer = txlog.Producer(path, transactional_id=f"committer-{tag}")
    aborter = txlog.Producer(path, transactional_id=f"aborter-{tag}")
    for producer, commit in ((committer, True), (aborter, False)):
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(9):
            producer.send("orders", f"{tag}-{commit}-{i}".encode(), partition=i % 3)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
        producer.close()


def _restart_and_check(spark, path: str, out: str, checkpoint: str) -> list[tuple]:
    """Decide the open transaction, run the query again from its checkpoint to the end, check the sink."""
    with txlog.Admin(path) as admin:
        admin.end_transaction("opener", commit=True)  # the open transaction's rows become visible
    query = _start(spark, path, out, checkpoint, trigger={"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None
    rows = _sink_rows(spark, out)
    assert len(rows) == len(set(rows)), "a record was delivered twice"
    assert rows == _expected(path), "the sink differs from what a read_committed Consumer reads"
    return rows


def test_stopped_mid_stream_and_restarted_from_the_checkpoint_reads_each_committed_record_once(spark, tmp_path):
    path = mixed_store(str(tmp_path / "store"))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    query = _start(spark, path, out, checkpoint, trigger={"processingTime": "0 seconds"}, max_offsets=100)
    deadline = time.monotonic() + 120
    while len([p for p in query.recentProgress if p["numInputRows"] > 0]) < 2:
        assert time.monotonic() < deadline, "the stream made no progress"
        assert query.exception() is None, query.exception()
        time.sleep(0.2)
    query.stop()
    first = _sink_rows(spark, out)
    assert 0 < len(first) < len(_expected(path)), "stopped mid-stream"

    _more_transactions(path, "a")
    rows = _restart_and_check(spark, path, out, checkpoint)
    assert any(value == b"open-0" for _, _, value in rows)
    assert not any(value and value.startswith(b"a-False") for _, _, value in rows)


_STREAM_WORKER = textwrap.dedent("""
    import sys, time
    import txlog.spark
    path, out, checkpoint = sys.argv[1:4]
    spark = txlog.spark.local_session("local[2]", app_name="txlog-stream-kill")
    query = (spark.readStream.format("txlog").option("subscribe", "orders").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "60").load(path).selectExpr("partition", "offset", "value")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    print("started", flush=True)
    query.awaitTermination()
""")


def test_killed_mid_stream_with_sigkill_and_restarted_reads_each_committed_record_once(spark, tmp_path):
    """A real kill -9 of the process running the query, while transactions keep committing and aborting."""
    path = mixed_store(str(tmp_path / "store"))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    worker = subprocess.Popen(
        [sys.executable, "-c", _STREAM_WORKER, path, out, checkpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert worker.stdout.readline().strip() == b"started"
        commits = os.path.join(checkpoint, "commits")
        deadline = time.monotonic() + 120
        while not (os.path.isdir(commits) and len(os.listdir(commits)) >= 2):
            assert worker.poll() is None, "the streaming process died on its own"
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.1)
        _more_transactions(path, "b")  # written while the query runs
        time.sleep(0.3)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the JVM too: the whole process group
        worker.wait()
    _restart_and_check(spark, path, out, checkpoint)


def test_stream_rows_equal_a_batch_read_of_the_same_offsets(spark, tmp_path):
    path = mixed_store(str(tmp_path / "store"))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = _start(spark, path, out, checkpoint, trigger={"availableNow": True}, max_offsets=60)
    query.awaitTermination(180)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) > 2, "maxOffsetsPerTrigger splits the backlog into several micro-batches"
    end = batches[-1]["sources"][0]["endOffset"]
    end = end if isinstance(end, str) else json.dumps(end)
    batch_rows = (
        spark.read.format("txlog")
        .option("subscribe", "orders")
        .option("endingOffsets", end)
        .load(path)
        .selectExpr("partition", "offset", "value")
        .collect()
    )
    assert _sink_rows(spark, out) == sorted(
        (r.partition, r.offset, bytes(r.value) if r.value is not None else None) for r in batch_rows
    )


@pytest.mark.parametrize("bad", [{"endingOffsets": "latest"}, {"maxOffsetsPerTrigger": "0"}])
def test_stream_only_options_are_checked(tmp_path, bad):
    path = mixed_store(str(tmp_path / "store"), records=10)
    with pytest.raises(txlog.errors.IllegalArgumentError):
        _reader(path, **bad)
