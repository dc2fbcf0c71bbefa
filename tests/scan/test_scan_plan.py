"""`txlog.scan`'s plan: offsets and timestamps, narrowing (the pushdown seam), a fixed plan, errors,
and real Kafka brokers' data directories."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest

import txlog
from storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tests.scan.test_scan_consumer import ALL_COLUMNS, RC, RU, consumer_tuples, millis, scan_tuples
from tests.spark.spark_stores import mixed_store, no_fsync, retention_store
from txlog.errors import IllegalArgumentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKA_DIRS = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "kafka-dirs")


@pytest.fixture(scope="module")
def segmented(tmp_path_factory) -> str:
    """The mixed store with 1 KiB segments: every partition has several segment files."""
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("plan") / "segmented"), segment_bytes=1024)


@pytest.fixture(scope="module")
def timed(tmp_path_factory) -> str:
    """Topic `t` (2 partitions, 300-byte segments): record i of partition p has CreateTime 1000 * i + p,
    except record 25 of partition 0, which is stamped early (500): timestamps need not grow with offsets."""
    path = str(tmp_path_factory.mktemp("plan") / "timed")
    with no_fsync():
        with txlog.Admin(path) as admin:
            admin.create_topic("t", 2, {"segment.bytes": 300, "retention.ms": -1})  # 1970 stamps: kept
        producer = txlog.Producer(path, batch_size=1)
        for i in range(40):
            for p in (0, 1):
                stamp = 500 if (i, p) == (25, 0) else 1000 * i + p
                producer.send("t", f"v{i}".encode(), key=f"k{i}".encode(), partition=p, timestamp_ms=stamp)
        producer.flush()
        producer.close()
    return path


def rows(scan) -> list[tuple]:
    return scan_tuples(scan.to_arrow())


# ---- offsets and timestamps ------------------------------------------------------------------------


def test_offsets_dicts_bound_the_named_partitions_and_leave_the_others_whole(segmented):
    got = rows(
        txlog.scan(
            segmented,
            "orders",
            columns=ALL_COLUMNS,
            starting_offsets={("orders", 0): 10},
            ending_offsets={("orders", 1): 30},
        )
    )
    want = [
        t
        for t in consumer_tuples(segmented, RC, [("orders", p) for p in range(3)])
        if not (t[1] == 0 and t[2] < 10) and not (t[1] == 1 and t[2] >= 30)
    ]
    assert got == want
    assert any(t[1] == 0 for t in want) and any(t[1] == 2 for t in want)


def test_starting_and_ending_timestamps_resolve_to_the_first_offset_at_or_after_them(timed):
    s = txlog.scan(timed, "t", starting_timestamp=10_000, ending_timestamp=20_001, columns=["partition", "offset"])
    got = sorted(zip(s.to_arrow()["partition"].to_pylist(), s.to_arrow()["offset"].to_pylist(), strict=True))
    # partition 0: 10_000 at offset 10, the first >= 20_001 is 21_000 at 21;
    # partition 1: the first >= 10_000 is 10_001 at 10, the first >= 20_001 is 20_001 at 20
    assert got == [(0, o) for o in range(10, 21)] + [(1, o) for o in range(10, 20)]
    assert {(r.partition, r.start, r.end) for r in s.ranges} == {(0, 10, 21), (1, 10, 20)}


def test_a_timestamp_past_every_record_reads_nothing_and_ends_at_latest(timed):
    assert txlog.scan(timed, "t", starting_timestamp=10**12).to_arrow().num_rows == 0
    assert txlog.scan(timed, "t", ending_timestamp=10**12).to_arrow().num_rows == 80


# ---- narrowing: the pushdown seam ----------------------------------------------------------------------


def test_narrowing_partitions_and_offsets_reads_fewer_bytes_and_the_matching_rows(segmented):
    whole = txlog.scan(segmented, columns=ALL_COLUMNS)
    narrow = whole.narrowed(partitions=[("orders", 1)], offsets=(20, 40))
    want = [t for t in rows(whole) if t[:2] == ("orders", 1) and 20 <= t[2] < 40]
    assert rows(narrow) == want and want
    assert [(r.topic, r.partition, r.start, r.end) for r in narrow.ranges] == [("orders", 1, 20, 40)]
    assert 0 < narrow.planned_bytes < whole.narrowed(partitions=[("orders", 1)]).planned_bytes < whole.planned_bytes


def test_narrowing_timestamps_skips_earlier_segments_and_keeps_every_matching_row(timed):
    whole = txlog.scan(timed, "t", columns=["partition", "offset", "timestamp"])
    narrow = whole.narrowed(timestamps=(20_000, 30_000))
    table = whole.to_arrow()
    columns = (table[name].to_pylist() for name in ("partition", "offset", "timestamp"))
    want = sorted((p, o) for p, o, ts in zip(*columns, strict=True) if 20_000 <= millis(ts) < 30_000)
    got_table = narrow.to_arrow()
    got = sorted(zip(got_table["partition"].to_pylist(), got_table["offset"].to_pylist(), strict=True))
    assert got == want and len(want) == 19  # partition 0 lost record 25 (stamped 500) to the filter
    assert [(r.partition, r.start) for r in narrow.ranges] == [(0, 20), (1, 20)]  # offsets 0..19 never read
    assert narrow.planned_bytes < whole.planned_bytes * 0.6


def test_a_timestamp_filter_without_the_timestamp_column_still_filters(timed):
    narrow = txlog.scan(timed, "t", columns=["offset"]).narrowed(timestamps=(None, 1000), partitions=[("t", 0)])
    assert narrow.schema.names == ["offset"]
    assert narrow.to_arrow()["offset"].to_pylist() == [0, 25]  # stamped 0 and 500: the late one too


def test_narrowing_columns_and_limit(segmented):
    whole = txlog.scan(segmented, "orders")
    narrow = whole.narrowed(columns=["offset", "key"], limit=7)
    table = narrow.to_arrow()
    assert table.column_names == ["offset", "key"] and table.num_rows == 7
    assert table.to_pylist() == whole.to_arrow().select(["offset", "key"]).slice(0, 7).to_pylist()
    assert narrow.narrowed(limit=100).to_arrow().num_rows == 7, "a limit only ever shrinks"
    assert whole.narrowed(limit=0).to_arrow().num_rows == 0
    with pytest.raises(IllegalArgumentError, match="'producerId'"):
        whole.narrowed(columns=["producerId"])  # not a column of this scan


def test_a_scan_of_only_constant_columns_keeps_its_row_count(segmented):
    whole = txlog.scan(segmented, "orders")
    assert txlog.scan(segmented, "orders", columns=["topic", "partition"]).to_arrow().num_rows == len(whole.to_arrow())
    assert whole.narrowed(columns=[]).to_arrow().num_rows == len(whole.to_arrow())


# ---- a fixed plan ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [RC, RU])
def test_a_scan_read_twice_gives_the_same_rows_while_a_producer_appends(tmp_path, isolation):
    path = str(tmp_path / "growing")
    with txlog.Admin(path) as admin:
        admin.create_topic("g", 2)
    writer = txlog.Producer(path, transactional_id="w")
    writer.init_transactions()

    def transaction(n: int, *, commit: bool) -> None:
        writer.begin_transaction()
        for i in range(n):
            writer.send("g", f"{commit}-{i}".encode(), partition=i % 2)
        writer.flush()
        if commit:
            writer.commit_transaction()
        else:
            writer.abort_transaction()

    transaction(10, commit=True)
    writer.begin_transaction()  # left open across the first read: only read_uncommitted shows it
    writer.send("g", b"open", partition=0)
    writer.flush()
    s = txlog.scan(path, "g", isolation_level=isolation, columns=ALL_COLUMNS)
    first = rows(s)
    writer.commit_transaction()
    transaction(6, commit=True)
    transaction(4, commit=False)
    second = rows(s)
    writer.close()
    assert second == first
    assert len(first) == (11 if isolation == RU else 10)
    assert len(rows(txlog.scan(path, "g", isolation_level=isolation, columns=ALL_COLUMNS))) > len(first), (
        "a new scan sees the appends"
    )


# ---- errors ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, needle",
    [
        ({"topics": "nope"}, UnknownTopicOrPartitionError, "'nope'"),
        ({"topics": ["orders", "nope"]}, UnknownTopicOrPartitionError, "'nope'"),
        ({"columns": ["key", "nope"]}, IllegalArgumentError, "'nope'"),
        ({"columns": "key"}, IllegalArgumentError, "'key'"),
        ({"columns": ["key", "key"]}, IllegalArgumentError, "'key' is named twice"),
        ({"isolation_level": "read_dirty"}, IllegalArgumentError, "'read_dirty'"),
        ({"starting_offsets": "middle"}, IllegalArgumentError, "starting_offsets"),
        ({"starting_offsets": {("orders", 0): -5}}, IllegalArgumentError, "starting_offsets"),
        ({"ending_offsets": {"orders": 3}}, IllegalArgumentError, "ending_offsets"),
        ({"starting_offsets": {("nope", 0): 1}}, IllegalArgumentError, "nope-0"),
        ({"starting_offsets": {("orders", 0): 10**6}}, OffsetOutOfRangeError, "1000000 of orders-0 is past"),
        ({"starting_timestamp": "yesterday"}, IllegalArgumentError, "starting_timestamp"),
        ({"starting_timestamp": 10, "ending_timestamp": 5}, IllegalArgumentError, "before"),
    ],
)
def test_bad_arguments_fail_naming_the_bad_thing(segmented, kwargs, error, needle):
    kwargs = {"topics": "orders", **kwargs}
    with pytest.raises(error, match=needle):
        txlog.scan(segmented, **kwargs)


def test_an_offset_deleted_by_retention_is_out_of_range(tmp_path):
    with no_fsync():
        path = retention_store(str(tmp_path / "retained"))
    with pytest.raises(OffsetOutOfRangeError, match="were deleted") as info:
        txlog.scan(path, "ret", starting_offsets={("ret", 0): 0})
    assert "failOnDataLoss" not in str(info.value), "a Spark option means nothing to a scan"
    assert txlog.scan(path, "ret").to_arrow().num_rows > 0  # 'earliest' is the log start


def test_a_path_that_is_no_store_fails(tmp_path):
    with pytest.raises(Exception, match=str(tmp_path / "none")):
        txlog.scan(str(tmp_path / "none"))


def test_importing_txlog_imports_no_analysis_library():
    code = (
        "import sys, txlog, txlog.scan, txlog.scan.planning; txlog.scan; "
        "print(sorted(m for m in ('pyarrow', 'pandas', 'polars', 'duckdb', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_txlog_scan_stays_callable_once_its_modules_are_imported(segmented):
    import txlog.scan.planning  # sets the package as txlog's attribute `scan`

    assert isinstance(txlog.scan(segmented, "orders"), txlog.scan.Scan)


# ---- real Kafka data directories ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["macsakini-gzip-mixed", "lanxuage-gzip", "ravi-kraft-metadata"])
def test_real_broker_directories_read_as_the_consumer(tmp_path, name):
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    root = str(tmp_path / name)
    shutil.copytree(os.path.join(KAFKA_DIRS, name), root)
    for isolation in (RC, RU):
        got = rows(txlog.scan(root, isolation_level=isolation, columns=ALL_COLUMNS))
        assert got == consumer_tuples(root, isolation)
        assert got, f"{name} has records in its user topics"
    assert isinstance(pa.table(txlog.scan(root)), pa.Table)


def test_a_reader_streams_lazily_range_by_range(segmented, monkeypatch):
    """to_reader / __arrow_c_stream__ never materialise the log: files are read as batches are taken,
    so a segment deleted after the first batch was taken is only noticed when its turn comes."""
    import txlog.scan.range_reader as range_reader

    monkeypatch.setattr(range_reader, "ROWS_PER_ARROW_BATCH", 8)
    s = txlog.scan(segmented, "orders")
    reader = s.to_reader()
    first = reader.read_next_batch()
    assert 8 <= first.num_rows < 40 and set(first["partition"].to_pylist()) == {0}
    last = s.ranges[-1]
    doomed = os.path.join(last.extents[-1].directory, f"{last.extents[-1].base_offset:020d}.log")
    saved = doomed + ".saved"
    os.rename(doomed, saved)
    try:
        with pytest.raises(OffsetOutOfRangeError, match="deleted after the query was planned"):
            reader.read_all()
    finally:
        os.rename(saved, doomed)


def test_an_open_store_object_is_scanned_and_left_open(segmented):
    with txlog.Store.open(segmented, read_only=True) as store:
        s = txlog.scan(store, "orders")
        narrow = s.narrowed(offsets=(0, 5))
        assert narrow.to_arrow().num_rows == sum(o < 5 for o in s.to_arrow()["offset"].to_pylist()) > 0
        assert store.partition("orders", 0).log_end_offset > 0  # still open
    with pytest.raises(IllegalArgumentError, match="store must be a path"):
        txlog.scan(42)
