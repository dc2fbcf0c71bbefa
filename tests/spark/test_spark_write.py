"""The `txlog` sink: batch and streaming writes read back under read_committed, the replay guard, refusals.

Every write is checked the way a user relies on it: txlog.Consumer (read_committed) returns
exactly the rows written, in order per partition; `txlog verify`'s check finds nothing; and no
transaction is left open or prepared. The session is conftest's (one per test run).
The fault cases (driver kill, task failures, speculation, checkpoint replay after a crash, the
killed pipeline) are in their own module.
"""

from __future__ import annotations

import os
import shutil

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException, StreamingQueryException

import txlog
from txlog.schemas.transaction_log import TxnState
from txlog.spark import write_batch
from txlog.tools.store_check import check_store

OPEN_STATES = [TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT]


def _store(tmp_path, topics: dict[str, int]) -> str:
    path = str(tmp_path / "store")
    with txlog.Admin(path) as admin:
        for topic, partitions in topics.items():
            admin.create_topic(topic, partitions)
    return path


def _records(path: str, topics: dict[str, int]) -> list:
    """Every read_committed record of `topics`, as txlog.Consumer returns them (offset order per partition)."""
    store = txlog.Store.open(path, read_only=True)
    consumer = txlog.Consumer(store, isolation_level="read_committed", enable_auto_commit=False)
    tps = [txlog.TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek_to_beginning(tp)
    out = []
    while batch := consumer.poll(max_records=5000):
        out.extend(batch)
    consumer.close(autocommit=False)
    store.close()
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


def assert_settled(path: str) -> None:
    """What `txlog verify` checks finds nothing, and no transaction is open or prepared."""
    store = txlog.Store.open(path, read_only=True)
    try:
        assert list(check_store(store).findings) == []
    finally:
        store.close()
    with txlog.Admin(path) as admin:
        assert [d.transactional_id for d in admin.list_transactions(OPEN_STATES)] == []


def _values_by_partition(records) -> dict[tuple[str, int], list[bytes]]:
    out: dict[tuple[str, int], list[bytes]] = {}
    for r in records:
        out.setdefault((r.topic, r.partition), []).append(r.value)
    return out


# ---- batch writes --------------------------------------------------------------------------------------


def test_a_batch_write_reads_back_once_in_task_order_per_partition(spark, tmp_path):
    path = _store(tmp_path, {"out": 3})
    n, tasks = 4000, 4
    # spark.range gives each task a contiguous, increasing run of ids: a task's rows are in id order
    df = spark.range(0, n, numPartitions=tasks).selectExpr(
        "cast(id % 13 as string) as key", "lpad(cast(id as string), 8, '0') as value"
    )
    df.write.format("txlog").option("topic", "out").mode("append").save(path)

    records = _records(path, {"out": 3})
    assert sorted(r.value for r in records) == [f"{i:08d}".encode() for i in range(n)]
    assert all(r.key == str(int(r.value) % 13).encode() for r in records)
    for values in _values_by_partition(records).values():
        for task in range(tasks):  # each task's rows keep their order within a partition
            mine = [int(v) for v in values if int(v) * tasks // n == task]
            assert mine == sorted(mine)
    # keyed rows go where Kafka's producer puts them: every key in one partition
    partitions_of_key: dict[bytes, set[int]] = {}
    for r in records:
        partitions_of_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())
    assert_settled(path)


def test_binary_key_and_value_and_null_keys(spark, tmp_path):
    path = _store(tmp_path, {"bin": 1})
    rows = [(None if i % 3 == 0 else bytes([i, 0, 255]), bytes([255 - i]) * (i % 4)) for i in range(30)]
    df = spark.createDataFrame(rows, "key binary, value binary").coalesce(1)
    df.write.format("txlog").option("topic", "bin").mode("append").save(path)
    assert [(r.key, r.value) for r in _records(path, {"bin": 1})] == rows
    assert_settled(path)


def test_topic_partition_and_headers_columns(spark, tmp_path):
    topics = {"a": 2, "b": 3, "fallback": 1}
    path = _store(tmp_path, topics)
    rows = []
    for i in range(60):
        topic = None if i % 10 == 0 else ("a" if i % 2 else "b")
        partition = None if i % 7 == 0 or topic is None else i % topics[topic]
        headers = None if i % 4 == 0 else [("n", str(i).encode()), ("empty", None)]
        rows.append((f"k{i % 5}", f"v{i}", topic, partition, headers))
    schema = "key string, value string, topic string, partition int, headers array<struct<key:string,value:binary>>"
    df = spark.createDataFrame(rows, schema).coalesce(1)
    df.write.format("txlog").option("topic", "fallback").mode("append").save(path)

    records = _records(path, topics)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(60))
    by_value = {r.value.decode(): r for r in records}
    for key, value, topic, partition, headers in rows:
        r = by_value[value]
        assert r.topic == (topic or "fallback")
        if partition is not None:
            assert r.partition == partition
        assert r.key == key.encode()
        assert [(h[0], h[1]) for h in (r.headers or [])] == (headers or [])
    for values in _values_by_partition(records).values():  # one task: row order per partition
        assert values == sorted(values, key=lambda v: int(v[1:]))
    assert_settled(path)


def test_a_rerun_with_the_same_query_id_writes_nothing(spark, tmp_path):
    path = _store(tmp_path, {"out": 2})
    df = spark.range(0, 500, numPartitions=3).selectExpr("cast(id as string) as value")

    def write(query_id: str) -> None:
        df.write.format("txlog").option("topic", "out").option("queryId", query_id).mode("append").save(path)

    write("daily-2024-01-01")
    write("daily-2024-01-01")  # the re-run: a no-op
    assert len(_records(path, {"out": 2})) == 500
    write("daily-2024-01-02")  # another query id: a new write
    df.write.format("txlog").option("topic", "out").mode("append").save(path)  # no id: always new
    assert sorted(r.value for r in _records(path, {"out": 2})) == sorted(str(i).encode() for i in list(range(500)) * 3)
    assert_settled(path)


def test_write_batch_writes_each_query_batch_once(spark, tmp_path):
    path = _store(tmp_path, {"out": 2})

    def batch(start: int):
        return spark.range(start, start + 100, numPartitions=2).selectExpr("cast(id as string) as value")

    write_batch(batch(0), 0, query_id="fb", path=path, topic="out")
    write_batch(batch(0), 0, query_id="fb", path=path, topic="out")  # replayed by foreachBatch: no-op
    write_batch(batch(100), 1, query_id="fb", path=path, topic="out")
    write_batch(batch(0), 0, query_id="fb", path=path, topic="out")  # an older batch id: decided already
    values = sorted(int(r.value) for r in _records(path, {"out": 2}))
    assert values == list(range(200))
    assert_settled(path)


def test_a_decision_left_uncompleted_is_completed_by_the_next_run(spark, tmp_path, monkeypatch):
    """A driver that dies after recording its decision, before completing the transactions: they
    stay prepared (a two-phase-commit transaction is never timed out), and the query's next batch
    completes them from the decision before its own tasks run."""
    import pyarrow as pa

    from txlog.spark import write_guard
    from txlog.spark.writer import WritePlan, commit_batch, write_task

    path = _store(tmp_path, {"out": 1})
    # the driver's side of a write, in this process, with the completion cut out (the crash)
    plan = WritePlan(path, "out", "cut", 0, write_guard.settle(path, "cut"), ("value",))
    rows = pa.record_batch([pa.array([str(i) for i in range(50)])], names=["value"])
    messages = [write_task(plan, 0, iter([rows]))]
    monkeypatch.setattr(write_guard, "complete", lambda *a, **k: None)
    commit_batch(path, "cut", 0, messages)
    monkeypatch.undo()
    assert _records(path, {"out": 1}) == []
    with txlog.Admin(path) as admin:
        assert [d.transactional_id for d in admin.list_transactions(OPEN_STATES)] == ["txlog-spark-cut-0-0"]

    df = spark.range(0, 50, numPartitions=2).selectExpr("cast(id + 1000 as string) as value")
    write_batch(df, 1, query_id="cut", path=path, topic="out")  # the next batch: batch 0 completed first
    values = [int(r.value) for r in _records(path, {"out": 1})]
    assert values[:50] == list(range(50))  # batch 0, completed first
    # batch 1's two tasks wrote the one partition at the same time: each task's rows in its order
    assert [v for v in values[50:] if v < 1025] == list(range(1000, 1025))
    assert [v for v in values[50:] if v >= 1025] == list(range(1025, 1050))
    assert len(values) == 100
    write_batch(df, 0, query_id="cut", path=path, topic="out")  # batch 0 again: decided, writes nothing
    assert len(_records(path, {"out": 1})) == 100
    assert_settled(path)


def test_an_attempt_fenced_after_it_prepared_is_not_committed(tmp_path):
    """A later attempt of a task (a speculative copy) fenced an attempt that had prepared: the
    driver must not decide on the fenced one's state (completing with it would abort the later
    attempt's rows too, and the batch would be lost without an error)."""
    import pyarrow as pa

    from txlog.errors import InvalidTxnStateError
    from txlog.spark.writer import WritePlan, commit_batch, write_task

    path = _store(tmp_path, {"out": 1})
    plan = WritePlan(path, "out", "spec", 0, -1, ("value",))
    rows = pa.record_batch([pa.array([str(i) for i in range(20)])], names=["value"])
    first = write_task(plan, 0, iter([rows]))
    second = write_task(plan, 0, iter([rows]))  # same task, same transactional id: fences the first
    with pytest.raises(InvalidTxnStateError, match="another attempt of the task fenced it"):
        commit_batch(path, "spec", 0, [first])
    assert _records(path, {"out": 1}) == []
    commit_batch(path, "spec", 0, [second])
    assert [int(r.value) for r in _records(path, {"out": 1})] == list(range(20))
    assert_settled(path)


# ---- streaming -------------------------------------------------------------------------------------------


def _fill(path: str, topic: str, partitions: int, per_partition: int) -> None:
    with txlog.Producer(path) as producer:
        for p in range(partitions):
            producer.produce_many(
                topic,
                [f"{p}-{i}".encode() for i in range(per_partition)],
                [f"k{i}".encode() for i in range(per_partition)],
                partition=p,
            ).get()


def _stream(spark, path: str, checkpoint: str):
    """in -> out, partition for partition, in several micro-batches (maxOffsetsPerTrigger)."""
    source = (
        spark.readStream.format("txlog")
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "90")
        .load(path)
    )
    return (
        source.select("key", "value", "partition")
        .writeStream.format("txlog")
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(path)
    )


def test_a_stream_writes_every_micro_batch_once_in_order(spark, tmp_path):
    path = _store(tmp_path, {"in": 3, "out": 3})
    _fill(path, "in", 3, 100)
    checkpoint = str(tmp_path / "checkpoint")
    query = _stream(spark, path, checkpoint)
    query.awaitTermination()
    assert query.exception() is None
    assert len(os.listdir(os.path.join(checkpoint, "commits"))) >= 4  # several micro-batches

    source = _values_by_partition(_records(path, {"in": 3}))
    assert _values_by_partition(_records(path, {"out": 3})) == {("out", p): source[("in", p)] for p in range(3)}
    assert_settled(path)


def test_a_replayed_micro_batch_writes_nothing(spark, tmp_path):
    """Spark's checkpoint forgets the last batch's commit (a crash before it wrote its commit-log
    entry): a restart runs that batch again, and the sink must not write it twice."""
    path = _store(tmp_path, {"in": 3, "out": 3})
    _fill(path, "in", 3, 60)
    checkpoint = str(tmp_path / "checkpoint")
    _stream(spark, path, checkpoint).awaitTermination()
    before = _records(path, {"out": 3})
    assert len(before) == 180

    commits = os.path.join(checkpoint, "commits")
    last = max(os.listdir(commits), key=lambda name: int(name) if name.isdigit() else -1)
    os.remove(os.path.join(commits, last))
    for crc in (f".{last}.crc",):
        if os.path.exists(os.path.join(commits, crc)):
            os.remove(os.path.join(commits, crc))
    query = _stream(spark, path, checkpoint)
    query.awaitTermination()
    assert query.exception() is None
    assert os.path.exists(os.path.join(commits, last)), "the batch ran again"
    assert _records(path, {"out": 3}) == before
    assert_settled(path)


def test_a_restart_with_new_input_continues_where_it_stopped(spark, tmp_path):
    path = _store(tmp_path, {"in": 3, "out": 3})
    _fill(path, "in", 3, 40)
    checkpoint = str(tmp_path / "checkpoint")
    _stream(spark, path, checkpoint).awaitTermination()
    _fill(path, "in", 3, 40)
    _stream(spark, path, checkpoint).awaitTermination()
    source = _values_by_partition(_records(path, {"in": 3}))
    assert _values_by_partition(_records(path, {"out": 3})) == {("out", p): source[("in", p)] for p in range(3)}
    assert_settled(path)


# ---- refusals ---------------------------------------------------------------------------------------------


def _message(exc: BaseException) -> str:
    return str(exc)


def _one_line(message: str) -> str:
    """The message a user reads, which must be one line (Spark's own ' SQLSTATE: ...' tail line set aside)."""
    lines = [line for line in message.strip().splitlines() if not line.strip().startswith("SQLSTATE")]
    assert "Traceback" not in message and len(lines) == 1, message
    return lines[0]


@pytest.mark.parametrize(
    ("select", "options", "wanted"),
    [
        (["cast(id as string) as value", "id as extra"], {"topic": "out"}, "unknown column 'extra'"),
        (["cast(id as string) as key"], {"topic": "out"}, "Required attribute 'value' not found"),
        (["id as value"], {"topic": "out"}, "value attribute type must be a string or binary"),
        (
            ["id as key", "cast(id as string) as value"],
            {"topic": "out"},
            "key attribute type must be a string or binary",
        ),
        (["cast(id as string) as value"], {}, "topic option required when no 'topic' attribute is present"),
        (["cast(id as string) as value", "id as topic"], {}, "Topic type must be a string"),
        (
            ["cast(id as string) as value", "id as partition"],
            {"topic": "out"},
            "partition attribute type must be an int",
        ),
        (["cast(id as string) as value", "array('x') as headers"], {"topic": "out"}, "headers attribute type must be"),
        (["cast(id as string) as value"], {"topic": "out", "subscribe": "x"}, "unknown option 'subscribe'"),
        (["cast(id as string) as value"], {"topic": "nope"}, "topic 'nope' does not exist in store"),
        (["cast(id as string) as value"], {"topic": "out", "queryId": "a.b"}, "option 'queryId' must be"),
        (["cast(id as string) as value"], {"topic": "out", "batchId": "1"}, "option 'batchId' needs option 'queryId'"),
    ],
)
def test_a_bad_write_is_refused_at_save_in_one_line(spark, tmp_path, select, options, wanted):
    path = _store(tmp_path, {"out": 1})
    writer = spark.range(3).selectExpr(*select).write.format("txlog").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(AnalysisException) as info:
        writer.save(path)
    assert wanted in _one_line(_message(info.value))
    assert _records(path, {"out": 1}) == []


def test_a_path_without_a_store_is_refused_not_created(spark, tmp_path):
    missing = str(tmp_path / "no-store")
    with pytest.raises(AnalysisException) as info:
        spark.range(3).selectExpr("cast(id as string) as value").write.format("txlog").option("topic", "t").mode(
            "append"
        ).save(missing)
    assert f"no txlog store at {missing}" in _message(info.value)
    assert not os.path.exists(missing)


def test_modes_other_than_append_are_refused(spark, tmp_path):
    path = _store(tmp_path, {"out": 1})
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(AnalysisException) as info:
        df.write.format("txlog").option("topic", "out").mode("overwrite").save(path)
    assert "save mode Overwrite is not supported by the txlog sink: use mode('append')" in _message(info.value)
    # ErrorIfExists (Spark's default) and Ignore are refused by Spark itself, before the sink is asked
    with pytest.raises(AnalysisException) as info:
        df.write.format("txlog").option("topic", "out").save(path)
    assert "ErrorIfExists" in _message(info.value)
    assert _records(path, {"out": 1}) == []


def test_a_null_topic_without_the_topic_option_fails_the_write_and_leaves_nothing_open(spark, tmp_path):
    path = _store(tmp_path, {"out": 1})
    df = spark.createDataFrame([("v1", "out"), ("v2", None)], "value string, topic string").coalesce(1)
    with pytest.raises(PySparkException) as info:
        df.write.format("txlog").mode("append").save(path)
    assert "null topic present in the data. Use the topic option for setting a topic." in _message(info.value)
    assert _records(path, {"out": 1}) == []
    assert_settled(path)


def test_a_stream_without_a_checkpoint_or_query_id_is_refused(spark, tmp_path):
    path = _store(tmp_path, {"in": 1, "out": 1})
    source = spark.readStream.format("txlog").option("subscribe", "in").load(path)
    checkpoint = str(tmp_path / "session-checkpoint")
    spark.conf.set("spark.sql.streaming.checkpointLocation", checkpoint)
    try:
        query = source.select("value").writeStream.format("txlog").option("topic", "out").start(path)
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
        shutil.rmtree(checkpoint, ignore_errors=True)
    assert "needs option 'checkpointLocation' (or 'queryId')" in _message(info.value)


def test_a_stream_in_complete_mode_is_refused(spark, tmp_path):
    path = _store(tmp_path, {"in": 1, "out": 1})
    _fill(path, "in", 1, 3)
    counts = (
        spark.readStream.format("txlog")
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load(path)
        .groupBy("key")
        .agg(F.count("*").cast("string").alias("value"))
        .selectExpr("cast(key as string) as key", "value")
    )
    query = (
        counts.writeStream.format("txlog")
        .outputMode("complete")
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(path)
    )
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination()
    assert "output mode Complete is not supported by the txlog sink" in _message(info.value)
    assert _records(path, {"out": 1}) == []
