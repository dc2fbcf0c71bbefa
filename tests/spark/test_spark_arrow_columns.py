"""The Spark source's executor read (`read_range`) without a Spark session.

Its rows are checked against the Consumer's records of the same store, range and isolation
level (the Consumer builds ConsumerRecord tuples, the source Arrow columns: two decoders of
the same bytes), and a schema naming a subset of the columns (a user-supplied schema) must
give exactly those columns, in its order and types.
"""

from __future__ import annotations

import datetime as dt

import pytest

pa = pytest.importorskip("pyarrow")

from storage.compression import Compression  # noqa: E402
from storage.records import ControlType, TimestampType, build_batch  # noqa: E402
from storage.store import Store  # noqa: E402
from txlog.clients.consumer import Consumer  # noqa: E402
from txlog.errors import IllegalArgumentError  # noqa: E402
from txlog.scan.range_reader import read_range  # noqa: E402
from txlog.spark.options import parse_options, plan_batch  # noqa: E402
from txlog.topic_partition import TopicPartition  # noqa: E402

SPARK_TS = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
FULL = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", SPARK_TS),
        ("timestampType", pa.int32()),
        ("headers", HEADERS),
        ("producerId", pa.int64()),
        ("producerEpoch", pa.int32()),
        ("sequence", pa.int32()),
        ("isTransactional", pa.bool_()),
    ]
)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    """One partition: nulls, headers (one not UTF-8), gzip, LogAppendTime, committed and aborted transactions."""
    root = str(tmp_path_factory.mktemp("arrow") / "store")
    store = Store.open(root)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        log.append(build_batch([(b"k1", b"v1", None, 1000), (None, b"v2", None, 1001), (b"k3", None, None, 1002)]))
        log.append(
            build_batch(
                [(b"k\xff", "vé".encode(), [("h1", b"x"), (b"h\xff", None)], 1003), (b"a", b"b", None, 1004)],
                compression=Compression.GZIP,
            )
        )
        log.append(
            build_batch(
                [(b"lat", b"x", None, 1005)] * 3, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=2000
            )
        )
        pid = store.allocate_producer_id()
        for i, end in enumerate((ControlType.COMMIT, ControlType.ABORT, ControlType.COMMIT)):
            log.append(
                build_batch(
                    [(b"t%d" % i, b"tv", [("x", b"y")], 1006)] * 3,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=3 * i,
                    is_transactional=True,
                    compression=Compression.ZSTD,
                )
            )
            log.append_marker(end, pid, 0, timestamp=1010)
        log.append(build_batch([(b"plain", b"p", None, 1020)] * 5))
    finally:
        store.close()
    return root


def source_rows(root: str, schema, isolation: str, start: int, end: int) -> list[dict]:
    opts = parse_options(
        {
            "path": root,
            "subscribe": "t",
            "isolation.level": isolation,
            "startingOffsets": f'{{"t":{{"0":{start}}}}}',
            "endingOffsets": f'{{"t":{{"0":{end}}}}}',
        }
    )
    rows: list[dict] = []
    for r in plan_batch(opts):
        for chunk in read_range(r, schema):
            assert chunk.schema == schema
            rows += chunk.to_pylist()
    return rows


def consumer_rows(root: str, isolation: str, start: int, end: int) -> list[dict]:
    consumer = Consumer(root, isolation_level=isolation, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek(TopicPartition("t", 0), start)
        out = []
        while records := consumer.poll(timeout_ms=0):
            out += [r for r in records if r.offset < end]
        return [
            {
                "key": r.key,
                "value": r.value,
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000, dt.UTC),
                "timestampType": int(r.timestamp_type),
                "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
                "producerId": r.producer_id,
                "producerEpoch": r.producer_epoch,
                "sequence": r.sequence,
                "isTransactional": r.is_transactional,
            }
            for r in out
        ]
    finally:
        consumer.close(autocommit=False)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize("start,end", [(0, 24), (1, 7), (4, 22)])  # whole log; ranges starting/ending inside batches
def test_rows_are_the_consumers_records(store_dir, isolation, start, end):
    rows = source_rows(store_dir, FULL, isolation, start, end)
    assert rows == consumer_rows(store_dir, isolation, start, end)
    assert rows and all(start <= row["offset"] < end for row in rows)


def test_headers_are_null_without_headers_and_lossy_utf8(store_dir):
    rows = source_rows(store_dir, FULL, "read_committed", 0, 5)
    assert [row["headers"] for row in rows] == [
        None,
        None,
        None,
        [{"key": "h1", "value": b"x"}, {"key": "h\ufffd", "value": None}],
        None,
    ]


def test_a_user_schema_prunes_and_orders_the_columns(store_dir):
    full = source_rows(store_dir, FULL, "read_committed", 0, 24)
    pruned = pa.schema([("offset", pa.int64()), ("value", pa.binary()), ("isTransactional", pa.bool_())])
    rows = source_rows(store_dir, pruned, "read_committed", 0, 24)
    assert rows == [{name: row[name] for name in pruned.names} for row in full]


def test_a_user_schema_type_is_applied(store_dir):
    rows = source_rows(store_dir, pa.schema([("offset", pa.int32())]), "read_uncommitted", 0, 3)
    assert rows == [{"offset": 0}, {"offset": 1}, {"offset": 2}]


def test_a_column_the_view_does_not_have_is_an_error(store_dir):
    with pytest.raises(IllegalArgumentError, match="no column 'nope'"):
        source_rows(store_dir, pa.schema([("offset", pa.int64()), ("nope", pa.int32())]), "read_committed", 0, 3)
