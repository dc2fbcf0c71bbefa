"""The `txlog` Spark source without Spark: its options, its planner and its range reader.

Everything here is pure Python (pyarrow for the reader), so it is fast and can sweep many
offset ranges: what a planned range reads must be exactly what txlog.Consumer returns for
those offsets under the same isolation level. tests/spark/test_spark_source.py checks the same
through a SparkSession.
"""

from __future__ import annotations

import itertools
import pickle

import pyarrow as pa
import pytest
from spark_stores import (
    add_empty_topic,
    consumer_rows,
    log_bounds,
    mixed_store,
    no_fsync,
    record_tuple,
    retention_store,
    spanning_store,
)

import txlog
from storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from txlog.errors import IllegalArgumentError
from txlog.fetch import IsolationLevel
from txlog.scan.range_reader import read_range
from txlog.spark.options import DEFAULT_MAX_BYTES_PER_PARTITION, parse_options, plan_batch

RC, RU = "read_committed", "read_uncommitted"
MIXED_TPS = [("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)]

#: The record view's full schema as Arrow (what Spark hands the reader for includeHeaders and
#: includeTransactionColumns both true).
FULL_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("producerId", pa.int64()),
        ("producerEpoch", pa.int32()),
        ("sequence", pa.int32()),
        ("isTransactional", pa.bool_()),
    ]
)


# ---- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    with no_fsync():
        return add_empty_topic(mixed_store(str(tmp_path_factory.mktemp("plan") / "mixed")))


@pytest.fixture(scope="module")
def segmented(tmp_path_factory) -> str:
    """The mixed store with 1 KiB segments: every partition has several segment files."""
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("plan") / "segmented"), segment_bytes=1024)


@pytest.fixture(scope="module")
def retained(tmp_path_factory) -> str:
    with no_fsync():
        return retention_store(str(tmp_path_factory.mktemp("plan") / "retained"))


@pytest.fixture(scope="module")
def consumer_view(mixed, segmented):
    """Everything the Consumer returns per store and isolation level, as full record tuples."""
    return {
        (path, iso): [record_tuple(r) for r in consumer_rows(path, MIXED_TPS, iso)]
        for path in (mixed, segmented)
        for iso in (RC, RU)
    }


def opts(path: str, **options):
    return parse_options({"path": path, **options})


def read_plan(ranges) -> list[tuple]:
    """Read every planned range with the executor's reader; rows as record tuples, sorted."""
    rows = []
    for r in ranges:
        for batch in read_range(r, FULL_ARROW_SCHEMA):
            for row in batch.to_pylist():
                ts = row["timestamp"]
                rows.append(
                    (
                        row["topic"],
                        row["partition"],
                        row["offset"],
                        row["key"],
                        row["value"],
                        None if ts is None else _ms(ts),
                        row["timestampType"],
                        tuple((h["key"], h["value"]) for h in row["headers"] or ()),
                        row["producerId"],
                        row["producerEpoch"],
                        row["sequence"],
                        row["isTransactional"],
                    )
                )
    return sorted(rows, key=lambda t: (t[0], t[1], t[2]))


def _ms(ts) -> int:
    """A timezone-aware datetime from Arrow as epoch milliseconds, exactly (no float rounding)."""
    import datetime as dt

    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


def by_partition(ranges) -> dict[tuple[str, int], list]:
    out: dict[tuple[str, int], list] = {}
    for r in ranges:
        out.setdefault((r.topic, r.partition), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.start)
    return out


def spans(ranges) -> dict[tuple[str, int], tuple[int, int]]:
    """(first start, last end) per partition of a plan."""
    return {tp: (rs[0].start, rs[-1].end) for tp, rs in by_partition(ranges).items()}


# ---- options -----------------------------------------------------------------------------------------------


def test_defaults_are_spark_kafka_defaults(mixed):
    o = opts(mixed, subscribe="orders")
    assert o.subscribe == ("orders",) and o.subscribe_pattern is None and o.assign is None
    assert o.starting_offsets == "earliest" and o.ending_offsets == "latest"
    assert o.isolation is IsolationLevel.READ_COMMITTED and o.committed_only
    assert o.min_partitions is None and o.max_records_per_partition is None
    assert o.max_bytes_per_partition == DEFAULT_MAX_BYTES_PER_PARTITION == 128 << 20
    assert o.fail_on_data_loss is True
    assert o.include_headers is False and o.include_transaction_columns is False
    assert o.view == "records"


def test_option_names_are_case_insensitive_and_kafka_prefix_accepted(mixed):
    o = parse_options(
        {
            "PATH": mixed,
            "SubscribePattern": "ord.*",
            "STARTINGOFFSETS": "earliest",
            "kafka.isolation.level": RU,
            "includeheaders": "TRUE",
            "minpartitions": "3",
            "MaxRecordsPerPartition": "7",
            "maxBytesPerPartition": "4096",
            "failondataloss": "False",
        }
    )
    assert o.subscribe_pattern == "ord.*"
    assert o.isolation is IsolationLevel.READ_UNCOMMITTED
    assert o.include_headers is True
    assert (o.min_partitions, o.max_records_per_partition, o.max_bytes_per_partition) == (3, 7, 4096)
    assert o.fail_on_data_loss is False
    assert (
        opts(mixed, subscribe="orders", **{"isolation.level": RU, "kafka.isolation.level": RU}).isolation
        is IsolationLevel.READ_UNCOMMITTED
    )


def test_subscribe_list_and_assign_json_are_parsed(mixed):
    assert opts(mixed, subscribe=" orders , audit,").subscribe == ("orders", "audit")
    assert opts(mixed, assign='{"orders":[2,0,0],"audit":[0]}').assign == {"orders": (0, 2), "audit": (0,)}
    o = opts(
        mixed,
        subscribe="orders",
        startingOffsets='{"orders":{"0":5,"1":-2,"2":0}}',
        endingOffsets='{"orders":{"0":-1,"1":9,"2":3}}',
    )
    assert o.starting_offsets == {"orders": {0: 5, 1: -2, 2: 0}}
    assert o.ending_offsets == {"orders": {0: -1, 1: 9, 2: 3}}


@pytest.mark.parametrize(
    "options, needle",
    [
        ({}, "subscribe"),  # no topic selection at all
        ({"subscribe": "orders", "assign": '{"orders":[0]}'}, "subscribe"),
        ({"subscribe": "orders", "subscribePattern": "o.*"}, "subscribePattern"),
        ({"subscribe": " , "}, "subscribe"),
        ({"subscribePattern": "orders["}, "subscribePattern"),
        ({"assign": "orders-0"}, "assign"),
        ({"assign": '{"orders":[-1]}'}, "assign"),
        ({"assign": '{"orders":0}'}, "assign"),
        ({"subscribe": "orders", "startingOffsets": "{not json"}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": "first"}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders":[0,1]}'}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders":{"0":-3}}'}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders":{"x":0}}'}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders":{"0":true}}'}, "startingOffsets"),
        ({"subscribe": "orders", "endingOffsets": '{"orders":{"0":"5"}}'}, "endingOffsets"),
        ({"subscribe": "orders", "endingOffsets": "[]"}, "endingOffsets"),
        ({"subscribe": "orders", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders":{"0":-1}}'}, "startingOffsets"),
        ({"subscribe": "orders", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"subscribe": "orders", "endingOffsets": '{"orders":{"0":-2}}'}, "endingOffsets"),
        ({"subscribe": "orders", "minPartitions": "-1"}, "minPartitions"),
        ({"subscribe": "orders", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "orders", "minPartitions": "ten"}, "minPartitions"),
        ({"subscribe": "orders", "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition"),
        ({"subscribe": "orders", "maxBytesPerPartition": "-5"}, "maxBytesPerPartition"),
        ({"subscribe": "orders", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "orders", "includeHeaders": "yes"}, "includeHeaders"),
        ({"subscribe": "orders", "includeTransactionColumns": "1"}, "includeTransactionColumns"),
        ({"subscribe": "orders", "isolation.level": "read_committed", "kafka.isolation.level": RU}, "isolation.level"),
        ({"subscribe": "orders", "view": "rows"}, "view"),
    ],
)
def test_bad_options_fail_naming_the_option(mixed, options, needle):
    with pytest.raises(IllegalArgumentError) as info:
        opts(mixed, **options)
    assert needle in str(info.value), f"the message should name option {needle!r}: {info.value}"


@pytest.mark.parametrize("key", ["isolation.level", "kafka.isolation.level"])
def test_bad_isolation_level_fails_naming_the_option(mixed, key):
    with pytest.raises(IllegalArgumentError) as info:
        opts(mixed, subscribe="orders", **{key: "read_everything"})
    message = str(info.value)
    assert "read_everything" in message and "read_committed" in message
    assert "isolation.level" in message, (
        f"a bad {key} must fail with a message naming the option 'isolation.level' "
        f"(options.py promises 'a message naming the option'); got: {message!r}"
    )


def test_missing_path_fails():
    with pytest.raises(IllegalArgumentError, match="path"):
        parse_options({"subscribe": "orders"})


def test_streaming_defaults_and_rules(mixed):
    assert parse_options({"path": mixed, "subscribe": "orders"}, streaming=True).starting_offsets == "latest"
    with pytest.raises(IllegalArgumentError, match="endingOffsets"):
        parse_options({"path": mixed, "subscribe": "orders", "endingOffsets": "latest"}, streaming=True)
    # the schema-only check (streaming=None) does not apply the batch bounds rule
    parse_options({"path": mixed, "subscribe": "orders", "startingOffsets": "latest"}, streaming=None)


# ---- planning: which partitions, which offsets -------------------------------------------------------------


def test_unsplit_plan_is_one_range_per_partition_from_log_start_to_latest(mixed):
    for iso in (RC, RU):
        plan = plan_batch(opts(mixed, subscribe="orders,audit", **{"isolation.level": iso}))
        assert [(r.topic, r.partition) for r in plan] == MIXED_TPS  # sorted, one each, no empty topic
        for r in plan:
            start, lso, end = log_bounds(mixed, r.topic, r.partition)
            assert (r.start, r.end) == (start, lso if iso == RC else end), (iso, r)
            assert r.committed_only is (iso == RC)
            assert r.extents and r.extents[0].base_offset <= r.start
            if iso == RU:
                assert r.aborted == (), "read_uncommitted ranges carry no aborted transactions"
            else:
                assert r.aborted, f"{r.topic}-{r.partition} has aborted transactions to carry"
                assert all(a.last_offset >= r.start and a.first_offset < r.end for a in r.aborted)


def test_read_committed_end_is_the_lso_below_the_open_transaction(mixed):
    """orders-1 and audit-0 hold a transaction left open: RC stops at its first offset, RU does not."""
    for topic, partition in (("orders", 1), ("audit", 0)):
        start, lso, end = log_bounds(mixed, topic, partition)
        assert lso < end, "the mixed store leaves a transaction open here"
        rc = spans(plan_batch(opts(mixed, assign=f'{{"{topic}":[{partition}]}}')))
        assert rc == {(topic, partition): (start, lso)}
        # 'latest' given as -1 in JSON is the LSO too
        rc_json = spans(
            plan_batch(
                opts(mixed, assign=f'{{"{topic}":[{partition}]}}', endingOffsets=f'{{"{topic}":{{"{partition}":-1}}}}')
            )
        )
        assert rc_json == rc
        # an explicit end past the LSO is held at the LSO under read_committed
        rc_past = spans(
            plan_batch(
                opts(
                    mixed, assign=f'{{"{topic}":[{partition}]}}', endingOffsets=f'{{"{topic}":{{"{partition}":{end}}}}}'
                )
            )
        )
        assert rc_past == rc
        ru = spans(plan_batch(opts(mixed, assign=f'{{"{topic}":[{partition}]}}', **{"isolation.level": RU})))
        assert ru == {(topic, partition): (start, end)}


def test_subscribe_pattern_matches_whole_user_topic_names(mixed):
    def tps(pattern):
        return sorted({(r.topic, r.partition) for r in plan_batch(opts(mixed, subscribePattern=pattern))})

    assert tps("ord.*") == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert tps("orders|audit") == MIXED_TPS
    assert tps("ord") == []  # a full match, as Kafka's pattern subscription
    assert tps("__.*") == []  # internal topics are never matched


def test_assign_selects_exactly_its_partitions(mixed):
    plan = plan_batch(opts(mixed, assign='{"orders":[2,0],"audit":[0]}'))
    assert [(r.topic, r.partition) for r in plan] == [("audit", 0), ("orders", 0), ("orders", 2)]


def test_json_offsets_with_sentinels(mixed):
    o = opts(
        mixed,
        subscribe="orders",
        startingOffsets='{"orders":{"0":6,"1":-2,"2":8}}',
        endingOffsets='{"orders":{"0":18,"1":-1,"2":-1}}',
        **{"isolation.level": RU},
    )
    got = spans(plan_batch(o))
    assert got == {
        ("orders", 0): (6, 18),
        ("orders", 1): (log_bounds(mixed, "orders", 1)[0], log_bounds(mixed, "orders", 1)[2]),
        ("orders", 2): (8, log_bounds(mixed, "orders", 2)[2]),
    }


@pytest.mark.parametrize(
    "options, error, needles",
    [
        ({"subscribe": "nope"}, UnknownTopicOrPartitionError, ["nope"]),
        ({"subscribe": "orders,nope"}, UnknownTopicOrPartitionError, ["nope"]),
        ({"assign": '{"nope":[0]}'}, UnknownTopicOrPartitionError, ["nope"]),
        ({"assign": '{"orders":[3]}'}, UnknownTopicOrPartitionError, ["orders", "3"]),
        (
            {"subscribe": "orders", "startingOffsets": '{"orders":{"0":0,"1":0}}'},
            IllegalArgumentError,
            ["startingOffsets", "orders-2"],
        ),
        (
            {"subscribe": "orders", "endingOffsets": '{"orders":{"0":5,"1":5}}'},
            IllegalArgumentError,
            ["endingOffsets", "orders-2"],
        ),
        (
            {"assign": '{"orders":[0]}', "startingOffsets": '{"orders":{"0":0,"1":0}}'},
            IllegalArgumentError,
            ["startingOffsets", "orders-1"],
        ),
        (
            {
                "assign": '{"orders":[0]}',
                "startingOffsets": '{"orders":{"0":9}}',
                "endingOffsets": '{"orders":{"0":4}}',
            },
            IllegalArgumentError,
            ["orders-0", "9", "4"],
        ),
    ],
)
def test_planning_errors(mixed, options, error, needles):
    with pytest.raises(error) as info:
        plan_batch(opts(mixed, **options))
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} missing from: {info.value}"


def test_empty_topic_and_empty_span_plan_nothing(mixed):
    assert plan_batch(opts(mixed, subscribe="empty")) == []
    assert (
        plan_batch(
            opts(
                mixed,
                assign='{"orders":[0]}',
                startingOffsets='{"orders":{"0":10}}',
                endingOffsets='{"orders":{"0":10}}',
            )
        )
        == []
    )


def test_plan_is_picklable(mixed):
    plan = plan_batch(opts(mixed, subscribe="orders,audit", maxRecordsPerPartition="9"))
    assert pickle.loads(pickle.dumps(plan)) == plan


# ---- planning: cutting ranges into input partitions --------------------------------------------------------


def _assert_tiles(split, whole):
    """Every partition's split ranges are non-empty and tile its unsplit [start, end) exactly."""
    assert set(by_partition(split)) == set(by_partition(whole))
    for tp, (start, end) in spans(whole).items():
        rs = by_partition(split)[tp]
        assert rs[0].start == start and rs[-1].end == end, tp
        for a, b in itertools.pairwise(rs):
            assert a.end == b.start, f"gap or overlap in {tp}: {a.start}..{a.end} then {b.start}..{b.end}"
        assert all(r.size > 0 for r in rs), tp


@pytest.mark.parametrize("iso", [RC, RU])
@pytest.mark.parametrize(
    "split",
    [
        {"maxRecordsPerPartition": "7"},
        {"maxRecordsPerPartition": "1"},
        {"minPartitions": "10"},
        {"minPartitions": "200"},
        {"minPartitions": "3"},  # fewer than there are partitions: nothing to split
        {"maxBytesPerPartition": "1"},
        {"maxBytesPerPartition": "2500"},
        {"maxBytesPerPartition": "2500", "maxRecordsPerPartition": "5", "minPartitions": "40"},
    ],
)
def test_split_ranges_tile_the_unsplit_ranges(mixed, segmented, iso, split):
    for path in (mixed, segmented):
        base = {"subscribe": "orders,audit", "isolation.level": iso}
        whole = plan_batch(opts(path, **base))
        cut = plan_batch(opts(path, **base, **split))
        _assert_tiles(cut, whole)
        if "maxRecordsPerPartition" in split:
            limit = int(split["maxRecordsPerPartition"])
            assert all(r.size <= limit for r in cut)
        if split == {"minPartitions": "3"}:
            assert cut == whole
        if "minPartitions" in split and int(split["minPartitions"]) > len(whole):
            assert len(cut) > len(whole)
        for r in cut:  # each piece carries just what it needs
            assert r.extents and r.extents[0].base_offset <= r.start
            assert all(e.base_offset < r.end for e in r.extents)
            if iso == RC:
                assert all(a.last_offset >= r.start and a.first_offset < r.end for a in r.aborted)


def test_max_records_gives_ceil_size_over_limit_pieces(mixed):
    whole = plan_batch(opts(mixed, subscribe="orders,audit"))
    cut = by_partition(plan_batch(opts(mixed, subscribe="orders,audit", maxRecordsPerPartition="7")))
    for r in whole:
        assert len(cut[(r.topic, r.partition)]) == -(-r.size // 7)


def test_max_bytes_cuts_at_segment_boundaries(segmented):
    whole = plan_batch(opts(segmented, subscribe="orders,audit"))
    assert all(len(r.extents) >= 3 for r in whole), "the segmented store needs several segments per partition"
    cut = plan_batch(opts(segmented, subscribe="orders,audit", maxBytesPerPartition="1"))
    _assert_tiles(cut, whole)
    for r in cut:  # one segment per piece, starting at its segment's base offset (or the range start)
        assert len(r.extents) == 1, r
    segment_bases = {(r.topic, r.partition): {e.base_offset for e in r.extents} for r in whole}
    for tp, rs in by_partition(cut).items():
        assert {r.start for r in rs[1:]} <= segment_bases[tp]
    # the default (128 MiB) keeps each partition whole
    assert len(plan_batch(opts(segmented, subscribe="orders,audit"))) == len(whole) == 4


def test_min_partitions_spreads_in_proportion(mixed):
    whole = plan_batch(opts(mixed, subscribe="orders,audit"))
    cut = plan_batch(opts(mixed, subscribe="orders,audit", minPartitions="10"))
    assert len(cut) >= len(whole)
    counts = {tp: len(rs) for tp, rs in by_partition(cut).items()}
    sizes = {(r.topic, r.partition): r.size for r in whole}
    biggest, smallest = max(sizes, key=sizes.get), min(sizes, key=sizes.get)
    assert counts[biggest] >= counts[smallest]
    assert len(cut) >= 9, f"minPartitions=10 gave only {len(cut)} input partitions"


# ---- the executor's reader over planned ranges equals the Consumer -----------------------------------------


@pytest.mark.parametrize("iso", [RC, RU])
@pytest.mark.parametrize(
    "split",
    [
        {},
        {"maxRecordsPerPartition": "7"},
        {"maxRecordsPerPartition": "1"},
        {"minPartitions": "10"},
        {"maxBytesPerPartition": "1"},
    ],
)
def test_reading_a_plan_equals_the_consumer(mixed, segmented, consumer_view, iso, split):
    for path in (mixed, segmented):
        plan = plan_batch(opts(path, subscribe="orders,audit", **{"isolation.level": iso}, **split))
        got = read_plan(plan)
        want = consumer_view[(path, iso)]
        assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("iso", [RC, RU])
def test_every_start_and_end_offset_reads_what_the_consumer_reads(segmented, consumer_view, iso):
    """A sweep of [start, end) over each partition: ranges starting and ending inside batches,
    inside aborted and committed transactions, at segment boundaries."""
    everything = consumer_view[(segmented, iso)]
    for topic, partition in MIXED_TPS:
        log_start, lso, log_end = log_bounds(segmented, topic, partition)
        limit = lso if iso == RC else log_end
        for start in range(log_start, limit + 1, 2):
            for end in sorted(e for e in {start, start + 1, start + 5, (start + limit) // 2, limit} if e <= limit):
                o = opts(
                    segmented,
                    assign=f'{{"{topic}":[{partition}]}}',
                    **{"isolation.level": iso},
                    startingOffsets=f'{{"{topic}":{{"{partition}":{start}}}}}',
                    endingOffsets=f'{{"{topic}":{{"{partition}":{end}}}}}',
                    maxRecordsPerPartition="4",
                )
                got = read_plan(plan_batch(o))
                want = [t for t in everything if (t[0], t[1]) == (topic, partition) and start <= t[2] < end]
                assert got == want, (topic, partition, start, end, _first_difference(got, want))


@pytest.fixture(scope="module")
def spanning(tmp_path_factory) -> str:
    with no_fsync():
        return spanning_store(str(tmp_path_factory.mktemp("plan") / "spanning"))


@pytest.mark.parametrize("iso", [RC, RU])
def test_transactions_across_segments_read_as_the_consumer(spanning, iso):
    """Aborted transactions whose data, marker and index entry lie in different segments, read
    through ranges cut at every segment (maxBytesPerPartition=1) and from every start offset."""
    everything = [record_tuple(r) for r in consumer_rows(spanning, [("span", 0)], iso)]
    assert any(t[4].startswith(b"a-") for t in everything) is (iso == RU)
    log_start, lso, log_end = log_bounds(spanning, "span", 0)
    assert lso == log_end
    whole = plan_batch(opts(spanning, subscribe="span", maxBytesPerPartition="1", **{"isolation.level": iso}))
    assert len(whole) >= 10
    assert read_plan(whole) == everything
    for start in range(log_start, log_end):
        for end in sorted({start + 1, start + 9, log_end} & set(range(start + 1, log_end + 1))):
            o = opts(
                spanning,
                subscribe="span",
                maxBytesPerPartition="1",
                **{"isolation.level": iso},
                startingOffsets=f'{{"span":{{"0":{start}}}}}',
                endingOffsets=f'{{"span":{{"0":{end}}}}}',
            )
            got = read_plan(plan_batch(o))
            assert got == [t for t in everything if start <= t[2] < end], (start, end)


def test_consumer_started_mid_transaction_agrees_with_the_filtered_full_read(mixed):
    """The sweep above compares with the full read cut to [start, end); check that is what a
    Consumer seeking to `start` returns, for starts inside an aborted and a committed transaction."""
    starts = {("orders", 0): 6, ("orders", 1): 2, ("orders", 2): 8, ("audit", 0): 1}
    ends = {("orders", 0): 18, ("orders", 1): 30, ("orders", 2): 31, ("audit", 0): 9}
    for iso in (RC, RU):
        seeked = [record_tuple(r) for r in consumer_rows(mixed, MIXED_TPS, iso, starts=starts, ends=ends)]
        full = [record_tuple(r) for r in consumer_rows(mixed, MIXED_TPS, iso)]
        assert seeked == [t for t in full if starts[(t[0], t[1])] <= t[2] < ends[(t[0], t[1])]]
        o = opts(
            mixed,
            subscribe="orders,audit",
            **{"isolation.level": iso},
            startingOffsets='{"orders":{"0":6,"1":2,"2":8},"audit":{"0":1}}',
            endingOffsets='{"orders":{"0":18,"1":30,"2":31},"audit":{"0":9}}',
        )
        assert read_plan(plan_batch(o)) == seeked


def test_plan_fixes_the_end_against_later_writes(tmp_path):
    """Ends are decided when planning: records appended afterwards are not read by that plan."""
    path = str(tmp_path / "grow")
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1)
    # batch_size=1: a batch per record (the next send seals the last), the layout these tests assume
    producer = txlog.Producer(path, batch_size=1)
    for i in range(5):
        producer.send("t", f"v{i}".encode(), partition=0)
    producer.flush()
    plan = plan_batch(opts(path, subscribe="t"))
    before = read_plan(plan)
    for i in range(5, 9):
        producer.send("t", f"v{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    assert [row[4] for row in before] == [f"v{i}".encode() for i in range(5)]
    assert read_plan(plan) == before
    assert len(read_plan(plan_batch(opts(path, subscribe="t")))) == 9


# ---- failOnDataLoss ------------------------------------------------------------------------------------------


def test_start_below_the_log_start_is_data_loss(retained):
    log_start, _, log_end = log_bounds(retained, "ret", 0)
    assert log_start > 0
    below = {"subscribe": "ret", "startingOffsets": '{"ret":{"0":0}}'}
    with pytest.raises(OffsetOutOfRangeError) as info:
        plan_batch(opts(retained, **below))
    assert "failOnDataLoss" in str(info.value) and "ret-0" in str(info.value)
    assert spans(plan_batch(opts(retained, **below, failOnDataLoss="false"))) == {("ret", 0): (log_start, log_end)}
    assert spans(plan_batch(opts(retained, subscribe="ret"))) == {("ret", 0): (log_start, log_end)}  # earliest
    rows = read_plan(plan_batch(opts(retained, **below, failOnDataLoss="false")))
    assert [t[2] for t in rows] == list(range(log_start, log_end))
    want = [record_tuple(r) for r in consumer_rows(retained, [("ret", 0)], RC)]
    assert rows == want


def test_segments_deleted_after_planning(tmp_path):
    """Retention between planning and reading: data loss unless failOnDataLoss=false, which skips it."""
    path = str(tmp_path / "shrinking")
    with no_fsync():
        with txlog.Admin(path) as admin:
            admin.create_topic("s", 1, {"segment.bytes": 300})
        # batch_size=1: a batch per record (the next send seals the last), the layout these tests assume
        producer = txlog.Producer(path, enable_idempotence=False, batch_size=1)
        for i in range(30):
            producer.send("s", f"s-{i}".encode() * 3, partition=0)
            producer.flush()
        producer.close()
    plan = plan_batch(opts(path, subscribe="s"))
    assert len(plan) == 1 and len(plan[0].extents) >= 3
    full = read_plan(plan)
    with no_fsync():
        with txlog.Admin(path) as admin:
            admin.alter_topic_config("s", {"retention.bytes": 600})
        from storage import Store

        with Store.open(path) as store:
            assert store.enforce_retention() > 0
    new_start = log_bounds(path, "s", 0)[0]
    assert new_start > 0
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        list(read_range(plan[0], FULL_ARROW_SCHEMA))
    kept = [
        row for batch in read_range(plan[0], FULL_ARROW_SCHEMA, fail_on_data_loss=False) for row in batch.to_pylist()
    ]
    assert [row["offset"] for row in kept] == [t[2] for t in full if t[2] >= new_start]


def test_small_arrow_batches_keep_every_row(mixed, consumer_view, monkeypatch):
    """A range longer than ROWS_PER_ARROW_BATCH comes out as several Arrow batches, nothing lost."""
    import txlog.scan.range_reader as range_reader

    monkeypatch.setattr(range_reader, "ROWS_PER_ARROW_BATCH", 4)
    for iso in (RC, RU):
        plan = plan_batch(opts(mixed, subscribe="orders,audit", **{"isolation.level": iso}))
        sizes = [batch.num_rows for r in plan for batch in read_range(r, FULL_ARROW_SCHEMA)]
        assert max(sizes) <= 4 + 4 and len(sizes) > len(plan)  # a batch is flushed once it reaches the limit
        assert read_plan(plan) == consumer_view[(mixed, iso)]


def test_store_path_that_is_not_a_store_fails(tmp_path):
    with pytest.raises(Exception, match="not a txlog store"):
        plan_batch(opts(str(tmp_path / "nothing-here"), subscribe="orders"))


def _first_difference(got: list, want: list) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):  # the lists may differ in length
        if a != b:
            return f"row {i}: got {a} want {b}"
    return f"lengths differ: got {len(got)} rows, want {len(want)}"


@pytest.mark.parametrize("shutdown", ["clean", "crashed"])
def test_a_plan_over_damage_reaches_the_log_end_and_its_read_fails_at_the_damage(tmp_path, shutdown):
    """Issue 23: the planner's view of a log with a corrupt batch before valid ones is the file's
    whole log, not the part before the damage; reading the range raises at the damaged batch."""
    from storage.errors import CorruptRecordError
    from tests.txlog.test_damage_views import RECORDS, drop_snapshots, flip_crc, write_store

    store = write_store(str(tmp_path / "store"))
    path, victim = flip_crc(store)
    if shutdown == "crashed":
        drop_snapshots(store)
    for iso in (RC, RU):
        (r,) = plan_batch(opts(store, subscribe="t", **{"isolation.level": iso}))
        assert (r.start, r.end) == (0, RECORDS)
        with pytest.raises(CorruptRecordError) as err:
            read_plan([r])
        assert (err.value.path, err.value.position) == (path, victim.position)


# ---- timestamp options (Spark's Kafka source), planned without Spark ------------------------------------------


def _timed(path: str) -> str:
    """Topic t, 2 partitions, records 0..5 with timestamps 1000 + 100 * i."""
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 2)
    producer = txlog.Producer(path, batch_size=1)
    for i in range(6):
        for p in (0, 1):
            producer.send("t", b"v", partition=p, timestamp_ms=1000 + 100 * i)
    producer.close()
    return path


def _spans(path: str, **options: str) -> dict:
    ranges = plan_batch(parse_options({"path": path, "subscribe": "t", **options}))
    return {(r.topic, r.partition): (r.start, r.end) for r in ranges}


def test_per_partition_timestamps_may_ask_for_earliest_and_latest_as_list_offsets_does(tmp_path):
    path = _timed(str(tmp_path / "s"))
    spans = _spans(
        path, startingOffsetsByTimestamp='{"t":{"0":-2,"1":1250}}', endingOffsetsByTimestamp='{"t":{"0":1150,"1":-1}}'
    )
    assert spans == {("t", 0): (0, 2), ("t", 1): (3, 6)}


def test_per_partition_timestamps_must_name_every_subscribed_partition(tmp_path):
    path = _timed(str(tmp_path / "s"))
    with pytest.raises(IllegalArgumentError, match="option 'endingOffsetsByTimestamp' .* lacks t-1"):
        _spans(path, endingOffsetsByTimestamp='{"t":{"0":1150}}')


def test_a_stream_refuses_ending_options_in_sparks_words():
    for option, words in (
        ("endingOffsets", "ending offset not valid in streaming queries"),
        ("endingTimestamp", "ending timestamp not valid in streaming queries"),
        ("endingOffsetsByTimestamp", "ending timestamp not valid in streaming queries"),
    ):
        with pytest.raises(IllegalArgumentError, match=f"option '{option}': {words}"):
            parse_options({"path": "/x", "subscribe": "t", option: "1"}, streaming=True)
