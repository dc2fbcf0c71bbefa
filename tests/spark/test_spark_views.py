"""The `batches` and `transactions` views of the txlog Spark source, checked against `txlog inspect`.

`txlog inspect` (kafka-dump-log) is the oracle: the batches view must list the batches
it lists for the same files, and the transactions view the records its
`--transaction-log-decoder` decodes, in the same order. A hand-written
`__transaction_state` with fixed timestamps gives the analysis queries exact answers.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys

import pytest
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from spark_stores import mixed_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TXN_TOPIC = "__transaction_state"
T0 = 1_700_000_000_000

BATCH_FIELDS = {  # view column -> inspect's batch key
    "baseOffset": "baseOffset",
    "lastOffset": "lastOffset",
    "recordCount": "count",
    "producerId": "producerId",
    "producerEpoch": "producerEpoch",
    "baseSequence": "baseSequence",
    "lastSequence": "lastSequence",
    "isTransactional": "isTransactional",
    "isControl": "isControl",
    "compression": "compresscodec",
    "sizeBytes": "size",
    "crc": "crc",
    "magic": "magic",
    "partitionLeaderEpoch": "partitionLeaderEpoch",
}


# ---- stores ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    """Plain, idempotent, committed, aborted and open transactions; small segments, so partitions roll."""
    return mixed_store(str(tmp_path_factory.mktemp("views") / "mixed"), records=30, segment_bytes=2048)


def _txn_value(pid: int, epoch: int, state: str, start: int, update: int, partitions=(), **tags):
    from txlog.schemas.transaction_log import TxnLogValue, TxnState

    return TxnLogValue(
        producer_id=pid,
        producer_epoch=epoch,
        timeout_ms=60_000,
        state=TxnState[state],
        partitions=tuple(partitions),
        last_update_ms=update,
        start_ms=start,
        **tags,
    )


#: (log partition, transactional id, value or None, value version, timestamp); ids with known open times:
#: t-a commits after 1000 ms then aborts after 4000 ms (v1 values), t-b commits after 250 ms (v0) and expires.
HISTORY = [
    (0, "t-a", _txn_value(10, 0, "EMPTY", -1, T0), 1, T0),
    (0, "t-a", _txn_value(10, 0, "ONGOING", T0 + 2000, T0 + 2000, [("orders", 1), ("orders", 0)]), 1, T0 + 2000),
    (0, "t-a", _txn_value(10, 0, "PREPARE_COMMIT", T0 + 2000, T0 + 2500, [("orders", 0), ("orders", 1)]), 1, T0 + 2500),
    (0, "t-a", _txn_value(10, 0, "COMPLETE_COMMIT", T0 + 2000, T0 + 3000), 1, T0 + 3000),
    (0, "t-a", _txn_value(10, 0, "ONGOING", T0 + 5000, T0 + 5000, [("audit", 0)]), 1, T0 + 5000),
    (
        0,
        "t-a",
        _txn_value(
            10,
            1,
            "PREPARE_ABORT",
            T0 + 5000,
            T0 + 5100,
            [("audit", 0)],
            previous_producer_id=7,
            next_producer_id=11,
            next_producer_epoch=0,
        ),
        1,
        T0 + 5100,
    ),
    (0, "t-a", _txn_value(10, 1, "COMPLETE_ABORT", T0 + 5000, T0 + 9000, client_transaction_version=1), 1, T0 + 9000),
    (1, "t-b", _txn_value(20, 0, "EMPTY", -1, T0 + 100, client_transaction_version=0), 0, T0 + 100),
    (
        1,
        "t-b",
        _txn_value(20, 0, "ONGOING", T0 + 10_000, T0 + 10_000, [("orders", 2)], client_transaction_version=0),
        0,
        T0 + 10_000,
    ),
    (
        1,
        "t-b",
        _txn_value(20, 0, "COMPLETE_COMMIT", T0 + 10_000, T0 + 10_250, client_transaction_version=0),
        0,
        T0 + 10_250,
    ),
    (1, "t-b", None, None, T0 + 20_000),
]
UNKNOWN_KEY = struct.pack(">h", 1) + b"future record type"


@pytest.fixture(scope="module")
def handmade(tmp_path_factory) -> str:
    """`__transaction_state` written record by record (HISTORY, then a key of a future version); an empty topic."""
    from storage import Store
    from storage.records import build_batch
    from txlog.schemas.transaction_log import encode_key, encode_value

    root = str(tmp_path_factory.mktemp("views") / "handmade")
    store = Store.open(root)
    try:
        store.create_topic(TXN_TOPIC, 2, internal=True)
        store.create_topic("idle", 2)
        for log_partition, txn_id, value, version, timestamp in HISTORY:
            payload = None if value is None else encode_value(value, version)
            store.partition(TXN_TOPIC, log_partition).append(
                build_batch([(encode_key(txn_id), payload, None, timestamp)])
            )
        store.partition(TXN_TOPIC, 1).append(build_batch([(UNKNOWN_KEY, b"?", None, T0 + 30_000)]))
    finally:
        store.close()
    return root


@pytest.fixture(scope="module")
def no_transactions(tmp_path_factory) -> str:
    """A txlog store that no transactional producer ever used: it has no `__transaction_state`."""
    from storage import Store
    from storage.records import build_batch

    root = str(tmp_path_factory.mktemp("views") / "plain")
    with Store.open(root) as store:
        store.create_topic("plain", 1)
        store.partition("plain", 0).append(build_batch([(b"k", b"v", None, T0)]))
    return root


# ---- the oracle: txlog inspect ---------------------------------------------------------------------


def inspect_json(*args: str) -> list[dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env.pop("TXLOG_DATA_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "inspect", "--output", "json", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr)
    return json.loads(proc.stdout)


def _log_files(docs: list[dict]):
    """(topic, partition, segment, batch) for every batch of every `.log` inspect dumped."""
    for doc in docs:
        if doc["type"] != "log":
            continue
        topic, partition = os.path.basename(os.path.dirname(doc["file"])).rsplit("-", 1)
        segment = int(os.path.basename(doc["file"]).split(".")[0])
        for batch in doc["batches"]:
            yield topic, int(partition), segment, batch


def inspect_batches(directory: str) -> dict[tuple, dict]:
    """inspect's batches keyed by (topic, partition, segment, position), as the view's columns."""
    out = {}
    for topic, partition, segment, batch in _log_files(inspect_json("--deep-iteration", directory)):
        row = {column: batch[key] for column, key in BATCH_FIELDS.items()}
        records = batch.get("records") or [{}]
        row["controlType"] = records[0].get("controlType") if batch["isControl"] else None
        row["coordinatorEpoch"] = records[0].get("coordinatorEpoch") if batch["isControl"] else None
        row["timestampType"] = 1 if batch["timestampType"] == "LogAppendTime" else 0
        row["maxTimestamp"] = None if batch["maxTimestamp"] == -1 else batch["maxTimestamp"]
        out[(topic, partition, segment, batch["position"])] = row
    return out


def inspect_transactions(directory: str) -> list[tuple]:
    """Every `__transaction_state` record as inspect decodes it, in (log partition, offset) order."""
    paths = sorted(os.path.join(directory, d) for d in os.listdir(directory) if d.startswith(TXN_TOPIC + "-"))
    rows = []
    for _, partition, _, batch in _log_files(inspect_json("--transaction-log-decoder", *paths)):
        for record in batch.get("records", []):
            key, payload = record.get("key"), record.get("payload")
            # Kafka 4's JSON lines: key {"type":"0","data":{"transactionalId":…}}, payload {"version":…,"data":{…}}
            txn_id = json.loads(key)["data"]["transactionalId"] if key and key.startswith("{") else None
            value = None
            if payload not in (None, "<DELETE>"):
                data = json.loads(payload)["data"]
                value = (
                    data["producerId"],
                    data["producerEpoch"],
                    data["transactionStatus"],
                    sorted(
                        (entry["topic"], str(p))
                        for entry in data["transactionPartitions"] or []
                        for p in entry["partitionIds"]
                    ),
                    data["transactionLastUpdateTimestampMs"],
                    data["transactionTimeoutMs"],
                )
            rows.append((partition, record["offset"], record["timestamp"], txn_id, value))
    return sorted(rows, key=lambda r: (r[0], r[1]))


# ---- the views, collected -------------------------------------------------------------------------


def load(spark, path: str, view: str, **options):
    reader = spark.read.format("txlog").option("view", view)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def millis(df, *columns: str):
    """Timestamps as epoch ms: collected datetimes would depend on the Python side's time zone."""
    return df.select(*[F.unix_millis(c).alias(c) if c in columns else F.col(c) for c in df.columns])


def view_batches(spark, path: str, **options) -> dict[tuple, dict]:
    df = millis(load(spark, path, "batches", **options), "maxTimestamp", "baseTimestamp")
    return {(r.topic, r.partition, r.segment, r.position): r.asDict() for r in df.collect()}


def view_transactions(spark, path: str, **options) -> list[tuple]:
    df = millis(
        load(spark, path, "transactions", **options),
        "transactionLastUpdateTimestamp",
        "logTimestamp",
        "transactionStartTimestamp",
    )
    rows = []
    for r in df.orderBy("logPartition", "logOffset").collect():
        value = None
        if r.state is not None:
            value = (
                r.producerId,
                r.producerEpoch,
                r.state,
                sorted((p.topic, str(p.partition)) for p in r.partitions),
                r.transactionLastUpdateTimestamp,
                r.transactionTimeoutMs,
            )
        rows.append((r.logPartition, r.logOffset, r.logTimestamp, r.transactionalId, value))
    return rows


@pytest.fixture(scope="module")
def mixed_inspected(mixed) -> dict[tuple, dict]:
    return inspect_batches(mixed)


def assert_batches_match_inspect(
    spark, path: str, expected: dict[tuple, dict] | None = None, **options
) -> dict[tuple, dict]:
    expected = inspect_batches(path) if expected is None else expected
    got = view_batches(spark, path, **options)
    assert sorted(got) == sorted(expected)
    for key, row in expected.items():
        assert {column: got[key][column] for column in row} == row, key
    return got


# ---- view=batches ---------------------------------------------------------------------------------


def test_batches_are_what_inspect_lists(spark, mixed, mixed_inspected):
    got = assert_batches_match_inspect(spark, mixed, mixed_inspected)
    topics = {topic for topic, *_ in got}
    assert topics == {"orders", "audit", TXN_TOPIC}  # no selection: internal topics too
    assert len({(t, p, s) for t, p, s, _ in got if t == "orders"}) > 3  # small segments: several per partition
    assert {row["compression"] for row in got.values()} >= {"none", "gzip", "lz4"}
    assert {row["controlType"] for row in got.values() if row["isControl"]} == {"COMMIT", "ABORT"}


def test_batches_whole_log_whatever_the_isolation(spark, mixed):
    """Aborted data, markers and the open transaction all have rows: isolation and offsets do not apply."""
    everything = load(spark, mixed, "batches").count()
    assert (
        load(spark, mixed, "batches", **{"isolation.level": "read_committed", "startingOffsets": "earliest"}).count()
        == everything
    )
    opener = load(spark, mixed, "transactions").where("transactionalId = 'opener'").first().producerId
    open_txn = load(spark, mixed, "batches").where(F.col("producerId") == opener)
    # "opener" wrote to orders-1 and audit-0 and never ended: its batches are there, with no marker.
    assert sorted((r.topic, r.isControl) for r in open_txn.collect()) == [("audit", False), ("orders", False)]


def test_abort_rate_per_producer_is_one_query(spark, mixed):
    rates = (
        load(spark, mixed, "batches")
        .where("isControl")
        .groupBy("producerId")
        .agg(
            (F.sum((F.col("controlType") == "ABORT").cast("int")) / F.count("*")).alias("abortRate"),
            F.count("*").alias("markers"),
        )
        .collect()
    )
    by_id = {r.producerId: (r.abortRate, r.markers) for r in rates}
    ids = {
        r.transactionalId: r.producerId
        for r in load(spark, mixed, "transactions").select("transactionalId", "producerId").distinct().collect()
    }
    # 3 committed (i = 0, 10, 20) + 1 final commit; 3 aborted; each transaction touches 4 partitions.
    assert by_id == {ids["committer"]: (0.0, 16), ids["aborter"]: (1.0, 12)}


def test_batches_subscribe_selects_topics(spark, mixed, mixed_inspected):
    audit = {key: row for key, row in mixed_inspected.items() if key[0] == "audit"}
    assert_batches_match_inspect(spark, mixed, audit, subscribe="audit")
    pattern = load(spark, mixed, "batches", subscribePattern="ord.*").select("topic").distinct().collect()
    assert [r.topic for r in pattern] == ["orders"]  # a pattern never matches internal topics
    assigned = load(spark, mixed, "batches", assign='{"orders":[2]}').select("topic", "partition").distinct()
    assert [tuple(r) for r in assigned.collect()] == [("orders", 2)]


def test_batches_of_an_empty_selection(spark, handmade):
    assert load(spark, handmade, "batches", subscribe="idle").count() == 0


def test_batches_of_a_real_kafka_data_directory(spark, kafka_real_copy):
    got = assert_batches_match_inspect(spark, kafka_real_copy)
    assert [(k[0], k[1], v["baseOffset"], v["recordCount"]) for k, v in sorted(got.items())] == [
        ("__cluster_metadata", 0, 1, 1),
        ("__cluster_metadata", 0, 2, 2),
    ]


def test_a_bad_view_name_names_the_option(spark, mixed):
    with pytest.raises(Exception, match="option 'view'"):
        load(spark, mixed, "nonsense")  # the schema is asked for at load: the error comes before any job


# ---- view=transactions ------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["mixed", "handmade"])
def test_transactions_are_what_inspect_decodes(spark, store, request):
    path = request.getfixturevalue(store)
    expected = inspect_transactions(path)
    assert expected and view_transactions(spark, path) == expected


def test_transactions_columns_of_each_value(spark, handmade):
    df = millis(load(spark, handmade, "transactions"), "transactionStartTimestamp", "transactionLastUpdateTimestamp")
    rows = [r.asDict(recursive=True) for r in df.orderBy("logPartition", "logOffset").collect()]
    assert len(rows) == len(HISTORY) + 1
    for row, (log_partition, txn_id, value, version, _) in zip(rows[: len(HISTORY)], HISTORY, strict=True):
        assert (row["logPartition"], row["transactionalId"]) == (log_partition, txn_id)
        if value is None:  # a tombstone: the id, and nothing else
            assert {k for k, v in row.items() if v is not None} == {
                "transactionalId",
                "logPartition",
                "logOffset",
                "logTimestamp",
            }
            continue
        assert row["clientTransactionVersion"] == (value.client_transaction_version if version else None)
        assert row["transactionStartTimestamp"] == (None if value.start_ms < 0 else value.start_ms)
        assert (row["previousProducerId"], row["nextProducerId"], row["nextProducerEpoch"]) == (
            value.previous_producer_id,
            value.next_producer_id,
            value.next_producer_epoch,
        )
        assert row["partitions"] == [{"topic": t, "partition": p} for t, p in sorted(value.partitions)]
    unknown = rows[-1]
    assert unknown["transactionalId"] is None and unknown["state"] is None and unknown["logOffset"] == 4
    assert [r["state"] for r in rows[:7]] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "CompleteCommit",
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
    ]


def test_how_long_transactions_stay_open_is_one_query(spark, handmade):
    open_ms = F.unix_millis("transactionLastUpdateTimestamp") - F.unix_millis("transactionStartTimestamp")
    stats = (
        load(spark, handmade, "transactions")
        .where(F.col("state").isin("CompleteCommit", "CompleteAbort"))
        .groupBy("transactionalId")
        .agg(F.count("*").alias("n"), F.min(open_ms).alias("shortest"), F.max(open_ms).alias("longest"))
        .collect()
    )
    assert {r.transactionalId: (r.n, r.shortest, r.longest) for r in stats} == {
        "t-a": (2, 1000, 4000),
        "t-b": (1, 250, 250),
    }


def test_transactions_of_a_live_store_complete_in_order(spark, mixed):
    finished = load(spark, mixed, "transactions").where(F.col("state").isin("CompleteCommit", "CompleteAbort"))
    counts = {
        (r.transactionalId, r.state): r["count"] for r in finished.groupBy("transactionalId", "state").count().collect()
    }
    assert counts == {("committer", "CompleteCommit"): 4, ("aborter", "CompleteAbort"): 3}
    assert finished.where("transactionLastUpdateTimestamp < transactionStartTimestamp").count() == 0


def test_transactions_without_the_topic_are_empty(spark, no_transactions, kafka_real_copy):
    for path in (no_transactions, kafka_real_copy):
        df = load(spark, path, "transactions")
        assert df.count() == 0
        assert "transactionalId" in df.columns


def test_transactions_topic_selection(spark, handmade):
    chosen = load(spark, handmade, "transactions", assign=json.dumps({TXN_TOPIC: [1]}))
    assert {r.logPartition for r in chosen.select("logPartition").collect()} == {1}
    with pytest.raises(Exception, match="reads only __transaction_state"):
        load(spark, handmade, "transactions", subscribe="idle").collect()


# ---- the executor side, without Spark's scheduling -----------------------------------------------------


def _arrow_schema(spark, ddl: str):
    return to_arrow_schema(spark.createDataFrame([], ddl).schema, timezone="UTC")


@pytest.mark.parametrize("view", ["batches", "transactions"])
def test_parts_pickle_and_reads_are_chunked(spark, mixed, view, monkeypatch):
    from txlog.spark import batches_view, transactions_view
    from txlog.spark.options import parse_options

    module = batches_view if view == "batches" else transactions_view
    parts = pickle.loads(pickle.dumps(module.plan(parse_options({"path": mixed, "view": view}))))
    schema = _arrow_schema(spark, module.SCHEMA)
    monkeypatch.setattr(module, "ROWS_PER_ARROW_BATCH", 7)
    batches = [b for part in parts for b in module.read(part, schema)]
    assert all(b.schema.equals(schema) for b in batches)  # what Spark checks of every batch
    sizes = [b.num_rows for b in batches]
    assert max(sizes) <= 7 < sum(sizes) == load(spark, mixed, view).count()
    assert list(module.read(None, schema)) == []  # Spark's stand-in partition of an empty plan


def test_control_batches_that_are_not_markers_or_are_emptied():
    from storage.records import RecordBatch, build_control_batch
    from txlog.spark.batches_view import control_fields

    leader_change = RecordBatch.parse(build_control_batch(2, producer_id=-1, producer_epoch=-1, timestamp=T0))
    assert control_fields(leader_change) == ("LEADER_CHANGE", None)
    commit = build_control_batch(1, producer_id=5, producer_epoch=0, coordinator_epoch=9, timestamp=T0)
    assert control_fields(RecordBatch.parse(commit)) == ("COMMIT", 9)
    header = bytearray(commit[:61])  # compaction empties a marker batch down to its header
    struct.pack_into(">i", header, 8, 61 - 12)
    struct.pack_into(">i", header, 57, 0)
    assert control_fields(RecordBatch.parse(bytes(header), verify_crc=False)) == (None, None)
