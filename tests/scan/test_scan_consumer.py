"""`txlog.scan` row for row against `txlog.Consumer`, on the stores every reader must get right.

Stores hold every codec, committed, aborted and still-open transactions, headers (null and
empty values), null keys and values, explicit timestamps; both isolation levels, every
column, read through each of the Scan's outputs.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import txlog
from tests.spark.spark_stores import (
    CODECS,
    codec_store,
    consumer_rows,
    mixed_store,
    no_fsync,
    record_tuple,
    spanning_store,
)

RC, RU = "read_committed", "read_uncommitted"
ALL_COLUMNS = [
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
    "producerId",
    "producerEpoch",
    "sequence",
    "isTransactional",
]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("scan") / "mixed"), segment_bytes=2048)


@pytest.fixture(scope="module")
def codecs(tmp_path_factory) -> str:
    with no_fsync():
        return codec_store(str(tmp_path_factory.mktemp("scan") / "codecs"))


@pytest.fixture(scope="module")
def spanning(tmp_path_factory) -> str:
    with no_fsync():
        return spanning_store(str(tmp_path_factory.mktemp("scan") / "spanning"))


def millis(ts: dt.datetime) -> int:
    """An aware datetime from Arrow as epoch ms, exactly."""
    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


def scan_tuples(table: pa.Table) -> list[tuple]:
    """A full-column scan's rows as `record_tuple`'s shape, in (topic, partition, offset) order."""
    rows = [
        (
            row["topic"],
            row["partition"],
            row["offset"],
            row["key"],
            row["value"],
            millis(row["timestamp"]),
            row["timestampType"],
            tuple((h["key"], h["value"]) for h in row["headers"] or ()),
            row["producerId"],
            row["producerEpoch"],
            row["sequence"],
            row["isTransactional"],
        )
        for row in table.to_pylist()
    ]
    return sorted(rows, key=lambda t: t[:3])


def all_partitions(path: str) -> list[tuple[str, int]]:
    with txlog.Store.open(path, read_only=True) as store:
        return [(t, p) for t in store.list_topics(include_internal=False) for p in store.partitions(t)]


def consumer_tuples(path: str, isolation: str, tps=None) -> list[tuple]:
    return [record_tuple(r) for r in consumer_rows(path, tps or all_partitions(path), isolation)]


@pytest.mark.parametrize("isolation", [RC, RU])
@pytest.mark.parametrize("store", ["mixed", "codecs", "spanning"])
def test_scan_reads_what_the_consumer_reads(request, store, isolation):
    path = request.getfixturevalue(store)
    got = scan_tuples(txlog.scan(path, isolation_level=isolation, columns=ALL_COLUMNS).to_arrow())
    want = consumer_tuples(path, isolation)
    assert got == want
    assert want, "the store has records"


def test_the_stores_hold_what_the_comparison_needs(mixed, codecs):
    """Aborted and open transactions are really there: read_uncommitted sees more than read_committed."""
    assert len(consumer_tuples(mixed, RU)) > len(consumer_tuples(mixed, RC))
    values = {t[4] for t in consumer_tuples(codecs, RC)}
    assert None not in values and b"" in values
    assert any(t[3] is None for t in consumer_tuples(codecs, RC))
    assert any(t[7] for t in consumer_tuples(codecs, RC)), "some records have headers"
    assert {t[0] for t in consumer_tuples(codecs, RC)} == {f"codec-{c}" for c in CODECS}


@pytest.mark.parametrize("isolation", [RC, RU])
def test_every_output_gives_the_same_rows(mixed, isolation):
    s = txlog.scan(mixed, isolation_level=isolation, columns=ALL_COLUMNS)
    table = s.to_arrow()
    assert table.schema == s.schema
    assert pa.Table.from_batches(list(s.to_batches()), s.schema).equals(table)
    assert s.to_reader().read_all().equals(table)
    assert pa.RecordBatchReader.from_stream(s).read_all().equals(table)  # __arrow_c_stream__
    assert pa.table(s).equals(table)
    frame = s.to_pandas()
    assert list(frame["offset"]) == table.column("offset").to_pylist()
    assert s.to_polars().collect()["offset"].to_list() == table.column("offset").to_pylist()
    assert s.to_duckdb().arrow().read_all().column("offset").to_pylist() == table.column("offset").to_pylist()
    assert s.to_duckdb().count("*").fetchall() == [(table.num_rows,)]


def test_default_columns_and_types_are_the_spark_kafka_sources(mixed):
    s = txlog.scan(mixed, "orders")
    assert s.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    full = txlog.scan(mixed, "orders", columns=ALL_COLUMNS).schema
    assert [str(f.type) for f in full] == [
        "binary",
        "binary",
        "string",
        "int32",
        "int64",
        "timestamp[us, tz=UTC]",
        "int32",
        "list<item: struct<key: string, value: binary>>",
        "int64",
        "int16",
        "int32",
        "bool",
    ]


def test_columns_pick_and_order(mixed):
    table = txlog.scan(mixed, "orders", columns=["offset", "partition", "value"]).to_arrow()
    assert table.column_names == ["offset", "partition", "value"]
    want = consumer_tuples(mixed, RC, [("orders", p) for p in range(3)])
    got = zip(table["partition"].to_pylist(), table["offset"].to_pylist(), table["value"].to_pylist(), strict=True)
    assert sorted(got) == [(t[1], t[2], t[4]) for t in want]


def test_topics_none_reads_every_user_topic_and_no_internal_one(mixed):
    topics = set(txlog.scan(mixed, columns=["topic"]).to_arrow()["topic"].to_pylist())
    assert topics == {"orders", "audit"}
    with txlog.Store.open(mixed, read_only=True) as store:
        assert any(t.startswith("__") for t in store.list_topics()), "the store has internal topics to leave out"


def test_log_append_time_batches_read_as_the_consumer(tmp_path):
    """A broker-stamped batch: timestampType 1 and the batch's append time, as the Consumer shows them."""
    from storage.records import TimestampType, build_batch

    path = str(tmp_path / "lat")
    with txlog.Store.open(path) as store:
        store.create_topic("lat", 1, {"retention.ms": -1})
        log = store.partition("lat", 0)
        log.append(build_batch([(b"c", b"v", None, 1000)] * 2))
        stamped = build_batch(
            [(b"l", b"v", None, 1005)] * 3, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=2000
        )
        log.append(stamped)
    table = txlog.scan(path, columns=ALL_COLUMNS).to_arrow()
    assert scan_tuples(table) == consumer_tuples(path, RC)
    assert table["timestampType"].to_pylist() == [0, 0, 1, 1, 1]
