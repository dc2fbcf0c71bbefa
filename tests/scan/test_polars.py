"""Scan.to_polars: the same rows as to_arrow for every query, with the query's filter, projection
and limit reaching the plan (fewer segment bytes read), in both of Polars' engines."""

from __future__ import annotations

import datetime

import pytest

pl = pytest.importorskip("polars")
from polars.testing import assert_frame_equal  # noqa: E402

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

ENGINES = ("in-memory", "streaming")
ISOLATIONS = ("read_committed", "read_uncommitted")
ORDER = ["topic", "partition", "offset"]
UTC = datetime.UTC


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("mixed") / "store"), segment_bytes=1024)


@pytest.fixture(scope="module")
def spread(tmp_path_factory) -> str:
    return spread_store(str(tmp_path_factory.mktemp("spread") / "store"))


def at(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, UTC)


#: name -> (LazyFrame, a timestamp in the data -> LazyFrame); each also runs over the frame of
#: to_arrow() (in memory: nothing pushed into txlog) as the expectation.
QUERIES = {
    "all": lambda f, t: f,
    "projection": lambda f, t: f.select("partition", "offset", "value"),
    "partition": lambda f, t: f.filter(pl.col("partition") == 1),
    "topic": lambda f, t: f.filter(pl.col("topic") == "audit"),
    "partition is_in": lambda f, t: f.filter(pl.col("partition").is_in([0, 2])),
    "topic and partition or": lambda f, t: f.filter((pl.col("topic") == "audit") | (pl.col("partition") == 2)),
    "offset range": lambda f, t: f.filter((pl.col("offset") >= 10) & (pl.col("offset") < 25)),
    "offset flipped": lambda f, t: f.filter(pl.lit(30) < pl.col("offset")),
    "offset between": lambda f, t: f.filter(pl.col("offset").is_between(5, 9)),
    "offset equal": lambda f, t: f.filter(pl.col("offset") == 12),
    "timestamp from": lambda f, t: f.filter(pl.col("timestamp") >= t),
    "timestamp after": lambda f, t: f.filter(pl.col("timestamp") > t),
    "timestamp before": lambda f, t: f.filter(pl.col("timestamp") < t),
    "not a partition": lambda f, t: f.filter(~(pl.col("partition") == 1)),
    "offset not equal": lambda f, t: f.filter(pl.col("offset") != 5),
    "offset or (not pushed)": lambda f, t: f.filter((pl.col("offset") < 3) | (pl.col("offset") > 40)),
    "no partition matches": lambda f, t: f.filter(pl.col("partition") == 99),
    "value (not pushed)": lambda f, t: f.filter(pl.col("value").bin.starts_with(b"c-")),
    "null key (not pushed)": lambda f, t: f.filter(pl.col("key").is_null()).select("partition", "offset"),
    "across columns (not pushed)": lambda f, t: f.filter((pl.col("partition") == 1) | (pl.col("offset") < 3)),
    "all pushable and value": lambda f, t: f.filter(
        (pl.col("partition") == 0) & (pl.col("offset") >= 4) & pl.col("value").is_not_null()
    ),
    "group by": lambda f, t: f.group_by("topic", "partition").agg(
        pl.len().alias("n"), pl.col("value").bin.size().sum().alias("bytes")
    ),
}


def sort(frame):
    keys = [c for c in ORDER if c in frame.columns]
    return frame.sort(keys) if keys else frame


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", QUERIES)
def test_same_rows_as_to_arrow(mixed, isolation, engine, name):
    scan = txlog.scan(mixed, isolation_level=isolation)
    eager = pl.from_arrow(scan.to_arrow())
    lazy = scan.to_polars()
    query = QUERIES[name]
    middle = eager["timestamp"].sort()[eager.height // 2]
    expected = query(eager.lazy(), middle).collect()
    got = query(lazy, middle).collect(engine=engine)
    assert (expected.height > 0) != (name == "no partition matches"), "a query that keeps nothing proves nothing"
    assert_frame_equal(sort(got), sort(expected))


@pytest.mark.parametrize("engine", ENGINES)
def test_limit_gives_that_many_rows(mixed, engine):
    scan = txlog.scan(mixed)
    full = pl.from_arrow(scan.to_arrow())
    got = scan.to_polars().head(7).collect(engine=engine)
    assert got.height == 7
    # each row is one the scan holds
    assert got.join(full, on=ORDER, how="anti").height == 0
    filtered = scan.to_polars().filter(pl.col("partition") == 2).head(5).collect(engine=engine)
    assert filtered.height == 5 and filtered["partition"].to_list() == [2] * 5


def test_aborted_and_open_transactions_follow_the_isolation_level(mixed):
    """read_committed hides aborted and still-open records; read_uncommitted shows them."""
    committed = txlog.scan(mixed).to_polars().select("value").collect()["value"].to_list()
    everything = txlog.scan(mixed, isolation_level="read_uncommitted").to_polars().collect()["value"].to_list()
    assert not any(v and v.startswith(b"a-") for v in committed)
    assert b"open-0" not in committed
    assert any(v and v.startswith(b"a-") for v in everything) and b"open-0" in everything


def test_reading_twice_gives_the_same_rows(mixed):
    lazy = txlog.scan(mixed).to_polars().filter(pl.col("partition") == 0)
    assert_frame_equal(lazy.collect(), lazy.collect(engine="streaming"))


# ---- pushdown: what is read, counted at the segment files ----------------------------------------------


def bytes_read(monkeypatch, lazy, engine="in-memory") -> tuple[int, object]:
    reads = LogReads(monkeypatch)
    frame = lazy.collect(engine=engine)
    return reads.take(), frame


@pytest.mark.parametrize("engine", ENGINES)
def test_partition_and_offset_filters_read_less(spread, monkeypatch, engine):
    scan = txlog.scan(spread)
    everything, full = bytes_read(monkeypatch, scan.to_polars(), engine)
    start = SPREAD_RECORDS * 3 // 4
    narrow, got = bytes_read(
        monkeypatch, scan.to_polars().filter((pl.col("partition") == 1) & (pl.col("offset") >= start)), engine
    )
    assert got.height == SPREAD_RECORDS - start
    # one partition of three, its last quarter: about 1/12 of the bytes; well under 1/4 whatever the segment cuts
    assert 0 < narrow < everything / 4, (narrow, everything)


def test_topic_and_partition_expressions_prune_partitions(spread, monkeypatch):
    scan = txlog.scan(spread)
    everything, _ = bytes_read(monkeypatch, scan.to_polars())
    query = scan.to_polars().filter(pl.col("partition").is_in([2]) & (pl.col("topic") == "spread"))
    one, got = bytes_read(monkeypatch, query)
    assert got["partition"].unique().to_list() == [2]
    assert one < everything * 0.5, (one, everything)


def test_timestamp_lower_bound_reads_less(spread, monkeypatch):
    scan = txlog.scan(spread)
    everything, _ = bytes_read(monkeypatch, scan.to_polars())
    since = at(BASE_MS + (SPREAD_RECORDS - 10) * 1000)
    late, got = bytes_read(monkeypatch, scan.to_polars().filter(pl.col("timestamp") >= since))
    assert got.height == 10 * SPREAD_PARTITIONS
    # the lookup of the first offset at that time reads the headers of the batches before it
    # (storage skips no segment on the time index's word alone), the read only the last few batches
    assert late < everything / 2, (late, everything)


def test_limit_reads_less(spread, monkeypatch):
    scan = txlog.scan(spread)
    everything, _ = bytes_read(monkeypatch, scan.to_polars())
    few, got = bytes_read(monkeypatch, scan.to_polars().head(3), "streaming")
    assert got.height == 3
    assert few < everything / 4, (few, everything)


def test_filter_that_cannot_be_pushed_reads_everything_and_is_exact(spread, monkeypatch):
    scan = txlog.scan(spread)
    everything, _ = bytes_read(monkeypatch, scan.to_polars())
    read, got = bytes_read(monkeypatch, scan.to_polars().filter(pl.col("value").bin.ends_with(b"-1-7")))
    assert read == everything
    assert sorted(got["offset"].to_list()) == [7]


@pytest.mark.parametrize("name", REAL_DIRS)
def test_real_broker_directories(tmp_path, name):
    root = real_broker_dir(tmp_path, name)
    scan = txlog.scan(root)
    expected = pl.from_arrow(scan.to_arrow())
    assert expected.height > 0
    assert_frame_equal(sort(scan.to_polars().collect(engine="streaming")), sort(expected))
    first = expected.row(0, named=True)
    one = (pl.col("topic") == first["topic"]) & (pl.col("partition") == first["partition"])
    assert_frame_equal(sort(scan.to_polars().filter(one).collect()), sort(expected.filter(one)))
