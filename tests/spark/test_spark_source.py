"""The `txlog` Spark source's record view, through Spark: a DataFrame must be txlog.Consumer's view.

Every test compares the rows of one `collect()` with what txlog.Consumer returns for the
same store, partitions, offsets and isolation level, record for record and field for
field. Stores are built once per module and kept small; the session is conftest's.
Each test runs twice: through txlog.spark.read on a session with the JVM reader's jar (format
"txlog_jvm") and through spark.read.format("txlog") (the Python source, also what `read` falls
back to on a session without a JDK).
tests/spark/test_spark_planning.py covers the options and the planner without Spark;
tests/spark/test_spark_jvm.py the JVM reader's own parts (the jar, pruning, pushed filters).
"""

from __future__ import annotations

import hashlib
import os

import pytest
from pyspark.sql import functions as F  # pyspark is a test dependency: a missing one must fail
from spark_stores import (
    CODECS,
    EXPLICIT_TIMESTAMPS,
    add_empty_topic,
    codec_store,
    consumer_rows,
    log_bounds,
    mixed_store,
    no_fsync,
    record_tuple,
    retention_store,
)

import txlog
from txlog.spark import jvm_reader
from txlog.spark.options import parse_options, plan_batch

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RC, RU = "read_committed", "read_uncommitted"
MIXED_TPS = [("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)]
KAFKA_COLUMNS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]
HEADERS_COLUMN = [("headers", "array<struct<key:string,value:binary>>")]
TRANSACTION_COLUMNS = [
    ("producerId", "bigint"),
    ("producerEpoch", "int"),
    ("sequence", "int"),
    ("isTransactional", "boolean"),
]
FULL = {"includeHeaders": "true", "includeTransactionColumns": "true"}


# ---- fixtures and helpers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["jvm", "python"])
def spark(spark, request):
    """conftest's session, on which `load` reads with the JVM reader or with the Python source."""
    saved = spark.conf.get(jvm_reader.READER_CONF, None)
    spark.conf.unset(jvm_reader.READER_CONF)
    if request.param == "jvm":
        assert jvm_reader.jvm_available(spark), "the JVM reader's jar must be on the test session (a JDK is needed)"
    else:
        spark.conf.set(jvm_reader.READER_CONF, "python")
    yield spark
    spark.conf.unset(jvm_reader.READER_CONF)
    if saved is not None:
        spark.conf.set(jvm_reader.READER_CONF, saved)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    """The mixed store (left unchanged by every test), plus a topic with no records."""
    with no_fsync():
        return add_empty_topic(mixed_store(str(tmp_path_factory.mktemp("src") / "mixed")))


@pytest.fixture(scope="module")
def segmented(tmp_path_factory) -> str:
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("src") / "segmented"), records=30, segment_bytes=1024)


@pytest.fixture(scope="module")
def codecs(tmp_path_factory) -> str:
    with no_fsync():
        return codec_store(str(tmp_path_factory.mktemp("src") / "codecs"))


@pytest.fixture(scope="module")
def retained(tmp_path_factory) -> str:
    with no_fsync():
        return retention_store(str(tmp_path_factory.mktemp("src") / "retained"))


@pytest.fixture(scope="module")
def full_reads(spark, mixed) -> dict[str, list[tuple]]:
    """The whole mixed store with every column, once per isolation level (several tests compare with it).

    read_committed is asked for by not naming an isolation level (it is the default), and
    read_uncommitted through the `kafka.`-prefixed spelling of the option.
    """
    return {
        RC: collect(load(spark, mixed, subscribe="orders,audit", **FULL)),
        RU: collect(load(spark, mixed, subscribe="orders,audit", **{"kafka.isolation.level": RU}, **FULL)),
    }


def load(spark, path: str, *, isolation: str | None = None, **options):
    """A batch read of `path`: txlog.spark.read (the JVM reader) on the "jvm" session, and
    spark.read.format("txlog") (the Python source) on the "python" one."""
    if isolation is not None:
        options["isolation.level"] = isolation
    if spark.conf.get(jvm_reader.READER_CONF, None) != "python":
        return jvm_reader.read(spark, path, **options)  # txlog.spark.read
    reader = spark.read.format("txlog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def collect(df) -> list[tuple]:
    """The rows as `record_tuple`s (missing optional columns as None), sorted by (topic, partition, offset).

    The timestamp is compared as epoch milliseconds, computed by Spark (no Python time zone in between).
    A null headers array compares as an empty one: Spark's Kafka source gives null for a record
    without headers, the Consumer an empty list, and either is accepted here.
    """
    names = set(df.columns)
    cols = [c for c, _ in KAFKA_COLUMNS] + [c for c, _ in HEADERS_COLUMN + TRANSACTION_COLUMNS if c in names]
    rows = df.select(*cols, F.unix_millis("timestamp").alias("__ms")).collect()
    out = []
    for r in rows:
        d = r.asDict()
        headers = d.get("headers")
        out.append(
            (
                d["topic"],
                d["partition"],
                d["offset"],
                d["key"],
                d["value"],
                d["__ms"],
                d["timestampType"],
                None if "headers" not in names else tuple((h["key"], h["value"]) for h in headers or ()),
                d.get("producerId"),
                d.get("producerEpoch"),
                d.get("sequence"),
                d.get("isTransactional"),
            )
        )
    return sorted(out, key=lambda t: (t[0], t[1], t[2]))


def expected(path: str, tps, isolation: str, *, starts=None, ends=None, headers=True, txn_columns=True) -> list[tuple]:
    """Consumer's records as `collect` gives them for the same columns."""
    out = []
    for t in map(record_tuple, consumer_rows(path, tps, isolation, starts=starts, ends=ends)):
        out.append(t[:7] + (t[7] if headers else None,) + (t[8:] if txn_columns else (None,) * 4))
    return out


def collect_or_fail(df, what: str) -> list:
    """df.collect(), failing the test with a readable message (not a JVM stack) when the read raises."""
    try:
        return df.collect()
    except Exception as exc:  # noqa: BLE001 - any failure of an empty read is the bug reported
        lines = [line for line in str(exc).splitlines() if "Error" in line or "Exception" in line]
        pytest.fail(
            f"{what}: reading must give an empty DataFrame, but the read failed "
            f"(a plan without input partitions makes Spark read one InputPartition(None)): "
            f"{lines[-1] if lines else str(exc)[:300]}",
            pytrace=False,
        )


def same(got: list[tuple], want: list[tuple]) -> str:
    """'' when equal, else the first difference (for assertion messages)."""
    if got == want:
        return ""
    for i, (a, b) in enumerate(zip(got, want, strict=False)):  # the lists may differ in length
        if a != b:
            return f"row {i}: DataFrame {a} != Consumer {b}"
    return f"DataFrame has {len(got)} rows, Consumer {len(want)}"


# ---- schema --------------------------------------------------------------------------------------------------


def test_default_schema_is_sparks_kafka_schema(spark, mixed):
    df = load(spark, mixed, subscribe="orders")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == KAFKA_COLUMNS


def test_optional_columns_follow_in_order(spark, mixed):
    def columns(**options):
        return [(f.name, f.dataType.simpleString()) for f in load(spark, mixed, subscribe="orders", **options).schema]

    assert columns(includeHeaders="true") == KAFKA_COLUMNS + HEADERS_COLUMN
    assert columns(includeTransactionColumns="true") == KAFKA_COLUMNS + TRANSACTION_COLUMNS
    assert columns(**FULL) == KAFKA_COLUMNS + HEADERS_COLUMN + TRANSACTION_COLUMNS
    assert columns(includeHeaders="false", includeTransactionColumns="false") == KAFKA_COLUMNS


# ---- the DataFrame is the Consumer's view --------------------------------------------------------------------


@pytest.mark.parametrize("iso", [RC, RU])
def test_all_offsets_equal_the_consumer(full_reads, mixed, iso):
    got = full_reads[iso]
    want = expected(mixed, MIXED_TPS, iso)
    assert got == want, same(got, want)
    values = {t[4] for t in got}
    aborted = {v for v in values if v and v.startswith(b"a-")}
    assert bool(aborted) is (iso == RU), "aborted transactions are visible under read_uncommitted only"
    assert (b"open-0" in values) is (iso == RU), "the open transaction is visible under read_uncommitted only"
    assert all(t[6] == 0 for t in got)  # CreateTime


def test_default_columns_equal_the_consumer(spark, mixed):
    got = collect(load(spark, mixed, subscribe="audit,orders"))
    want = expected(mixed, MIXED_TPS, RC, headers=False, txn_columns=False)
    assert got == want, same(got, want)


def test_headers_column_holds_the_records_headers(full_reads):
    rows = full_reads[RU]
    with_null_value = [t for t in rows if ("n", None) in t[7]]
    assert with_null_value, "the mixed store has headers with null values"
    assert all(t[7] == (("h", str(int(t[4].split(b"-")[1])).encode()), ("n", None)) for t in with_null_value)
    txn_headers = {t[7] for t in rows if t[4] and t[4][:2] in (b"c-", b"a-") and t[0] == "orders"}
    assert txn_headers == {(("txn", b"committer"),), (("txn", b"aborter"),)}


def test_a_record_without_headers_has_null_headers_as_in_sparks_kafka_source(spark, mixed):
    rows = load(spark, mixed, subscribe="orders", includeHeaders="true").select("value", "headers").collect()
    bare = [r for r in rows if r.value and r.value.startswith(b"idem-")]
    assert bare and all(r.headers is None for r in bare)
    assert all(r.headers for r in rows if r.value and r.value.startswith(b"c-"))


def test_transaction_columns_come_from_the_batch_headers(full_reads):
    rows = full_reads[RU]
    plain = [t for t in rows if t[4] and t[4].startswith(b"plain-")]
    assert plain and all(t[8:] == (-1, -1, -1, False) for t in plain)
    idem = [t for t in rows if t[4] and t[4].startswith(b"idem-")]
    assert idem and all(t[8] >= 0 and t[9] >= 0 and t[10] >= 0 and t[11] is False for t in idem)
    txn = [t for t in rows if t[4] and t[4][:2] in (b"c-", b"a-", b"op")]
    assert txn and all(t[8] >= 0 and t[9] >= 0 and t[10] >= 0 and t[11] is True for t in txn)
    # sequences count up per producer and partition, as the idempotent producer assigned them
    seqs = {}
    for t in idem:
        seqs.setdefault((t[8], t[0], t[1]), []).append(t[10])
    assert all(s == sorted(s) and len(set(s)) == len(s) for s in seqs.values())


@pytest.fixture(scope="module")
def ranges(mixed) -> dict[str, tuple[str, str]]:
    """startingOffsets / endingOffsets JSON for the range tests, found in the mixed store's layout
    (how records fall into batches depends on the producers' timing, so offsets are looked up)."""
    from storage import Store

    store = Store.open(mixed, read_only=True)
    try:
        batches = {tp: store.partition(*tp).read(0, 1 << 30) for tp in MIXED_TPS}
        aborted = store.partition("orders", 0).aborted_transactions(0, 1 << 62)
    finally:
        store.close()

    def aborted_batch(b):
        return any(t.producer_id == b.producer_id and t.first_offset <= b.base_offset <= t.last_offset for t in aborted)

    o0, o2 = batches[("orders", 0)], batches[("orders", 2)]
    aborted_data = [
        b for b in o0 if b.is_transactional and not b.is_control and aborted_batch(b) and b.records_count >= 2
    ]
    multi_plain = [b for b in o2 if not b.is_transactional and b.records_count >= 2]
    assert len(aborted_data) >= 2 and multi_plain, "precondition: the mixed store has multi-record batches"
    committed_after = [
        b for b in o2 if b.is_transactional and not b.is_control and b.base_offset > multi_plain[0].base_offset
    ]
    markers0 = [b.base_offset for b in o0 if b.is_control]
    markers2 = [b.base_offset for b in o2 if b.is_control]
    return {
        # orders-0: from inside one aborted batch to inside another; orders-1: earliest to latest;
        # orders-2: from inside a multi-record idempotent batch to just after a committed record,
        # before its marker; audit-0: from offset 1 to latest
        "mid-batch-and-mid-transaction": (
            f'{{"orders":{{"0":{aborted_data[0].base_offset + 1},"1":-2,"2":{multi_plain[0].base_offset + 1}}},'
            f'"audit":{{"0":1}}}}',
            f'{{"orders":{{"0":{aborted_data[1].base_offset + 1},"1":-1,"2":{committed_after[0].base_offset + 1}}},'
            f'"audit":{{"0":-1}}}}',
        ),
        # starting and ending on control batches, and an empty span on orders-1
        "on-markers-and-empty": (
            f'{{"orders":{{"0":{markers0[0]},"1":20,"2":-2}},"audit":{{"0":-2}}}}',
            f'{{"orders":{{"0":{markers0[-2]},"1":20,"2":{markers2[1]}}},"audit":{{"0":3}}}}',
        ),
    }


@pytest.mark.parametrize("iso", [RC, RU])
@pytest.mark.parametrize("name", ["mid-batch-and-mid-transaction", "on-markers-and-empty"])
def test_json_offset_ranges_equal_the_consumer(spark, mixed, ranges, iso, name):
    starting, ending = ranges[name]
    got = collect(
        load(
            spark,
            mixed,
            subscribe="orders,audit",
            isolation=iso,
            startingOffsets=starting,
            endingOffsets=ending,
            **FULL,
        )
    )
    starts, ends = _resolve(mixed, starting, iso), _resolve(mixed, ending, iso)
    want = expected(mixed, MIXED_TPS, iso, starts=starts, ends=ends)
    assert got == want, same(got, want)
    for t in got:
        assert starts[(t[0], t[1])] <= t[2] < ends[(t[0], t[1])]


def _resolve(path: str, spec: str, iso: str) -> dict:
    import json

    out = {}
    for topic, parts in json.loads(spec).items():
        for p, offset in parts.items():
            log_start, lso, log_end = log_bounds(path, topic, int(p))
            out[(topic, int(p))] = {-2: log_start, -1: lso if iso == RC else log_end}.get(offset, offset)
    return out


@pytest.mark.parametrize("iso", [RC, RU])
def test_subscribe_pattern_equals_the_consumer(spark, mixed, iso):
    got = collect(load(spark, mixed, subscribePattern="ord.*", isolation=iso, **FULL))
    want = expected(mixed, [("orders", 0), ("orders", 1), ("orders", 2)], iso)
    assert got == want, same(got, want)


@pytest.mark.parametrize("iso", [RC, RU])
def test_assign_equals_the_consumer(spark, mixed, iso):
    got = collect(load(spark, mixed, assign='{"orders":[0,2],"audit":[0]}', isolation=iso, **FULL))
    want = expected(mixed, [("audit", 0), ("orders", 0), ("orders", 2)], iso)
    assert got == want, same(got, want)
    assert {(t[0], t[1]) for t in got} == {("audit", 0), ("orders", 0), ("orders", 2)}


# ---- splitting into input partitions -------------------------------------------------------------------------


@pytest.mark.parametrize("split", [{"maxRecordsPerPartition": "7"}, {"minPartitions": "10"}])
def test_splitting_keeps_the_rows(spark, mixed, full_reads, split):
    cut = load(spark, mixed, subscribe="orders,audit", **FULL, **split)
    assert cut.rdd.getNumPartitions() > 4  # unsplit: one input partition per topic-partition
    if "minPartitions" in split:
        assert cut.rdd.getNumPartitions() >= 9
    got = collect(cut)
    assert got == full_reads[RC], same(got, full_reads[RC])


@pytest.mark.parametrize("iso", [RC, RU])
def test_max_bytes_per_partition_cuts_many_segment_partitions(spark, segmented, iso):
    cut = load(spark, segmented, subscribe="orders,audit", isolation=iso, maxBytesPerPartition="1500", **FULL)
    planned = plan_batch(
        parse_options(
            {"path": segmented, "subscribe": "orders,audit", "isolation.level": iso, "maxBytesPerPartition": "1500"}
        )
    )
    unsplit = plan_batch(parse_options({"path": segmented, "subscribe": "orders,audit", "isolation.level": iso}))
    assert len(unsplit) == 4 and all(len(r.extents) >= 2 for r in unsplit), "precondition: several segments"
    assert cut.rdd.getNumPartitions() == len(planned) > 4 + 3, "1 KiB segments cut at 1500 bytes: a piece each"
    got = collect(cut)
    want = expected(segmented, MIXED_TPS, iso)
    assert got == want, same(got, want)


# ---- the last stable offset ------------------------------------------------------------------------------------


def test_open_transaction_holds_read_committed_at_the_lso_until_it_commits(spark, tmp_path):
    with no_fsync():
        path = mixed_store(str(tmp_path / "lso"), records=20)
    bounds = {tp: log_bounds(path, *tp) for tp in MIXED_TPS}
    held = {tp for tp, (_, lso, end) in bounds.items() if lso < end}
    assert held == {("orders", 1), ("audit", 0)}

    rc = collect(load(spark, path, subscribe="orders,audit", **FULL))
    assert rc == expected(path, MIXED_TPS, RC), same(rc, expected(path, MIXED_TPS, RC))
    for tp, (_, lso, _end) in bounds.items():
        offsets = [t[2] for t in rc if (t[0], t[1]) == tp]
        if tp in held:
            assert max(offsets) < lso, f"{tp}: read_committed returned offsets at or past the LSO {lso}"
        else:  # the committed transaction written after the open one is there
            tail = [t[4] for t in rc if (t[0], t[1]) == tp and t[4] and t[4].startswith(b"c-20-")]
            assert tail, f"{tp}: the committed tail is missing"
    assert not any(t[4] and t[4].startswith(b"open") for t in rc)

    # 'latest' in endingOffsets JSON under read_committed is the LSO
    latest_json = collect(
        load(
            spark,
            path,
            subscribe="orders,audit",
            **FULL,
            endingOffsets='{"orders":{"0":-1,"1":-1,"2":-1},"audit":{"0":-1}}',
        )
    )
    assert latest_json == rc

    ru = collect(load(spark, path, subscribe="orders,audit", isolation=RU, **FULL))
    assert ru == expected(path, MIXED_TPS, RU), same(ru, expected(path, MIXED_TPS, RU))
    assert {b"open-0", b"open-audit"} <= {t[4] for t in ru}
    open_offsets = {(t[0], t[1]): t[2] for t in ru if t[4] in (b"open-0", b"open-audit")}
    assert open_offsets == {tp: bounds[tp][1] for tp in held}, "the LSO is the open transaction's first offset"

    with txlog.Admin(path) as admin:
        admin.end_transaction("opener", commit=True)
    after = collect(load(spark, path, subscribe="orders,audit", **FULL))
    assert after == expected(path, MIXED_TPS, RC), same(after, expected(path, MIXED_TPS, RC))
    assert {b"open-0", b"open-audit"} <= {t[4] for t in after}
    assert len(after) > len(rc)
    for tp in held:
        assert max(t[2] for t in after if (t[0], t[1]) == tp) > bounds[tp][1]


# ---- compression ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("iso", [RC, RU])
def test_every_codec_reads_as_the_consumer(spark, codecs, iso):
    got = collect(load(spark, codecs, subscribePattern="codec-.*", isolation=iso, **FULL))
    tps = [(f"codec-{c}", p) for c in sorted(CODECS) for p in (0, 1)]
    want = expected(codecs, tps, iso)
    assert got == want, same(got, want)
    for codec in CODECS:
        values = [t[4] for t in got if t[0] == f"codec-{codec}"]
        assert len(values) == (12 + 12 + (6 if iso == RU else 0)), codec
        assert f"{codec}-11".encode() * 12 in values
        assert b"" in values and None not in values, "an empty value must stay empty, not become null"


def test_timestamps_are_epoch_milliseconds_whatever_the_session_time_zone(spark, codecs):
    """CreateTime (ms) becomes a Spark timestamp holding the same instant, also in a non-UTC session."""
    saved = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        got = collect(load(spark, codecs, subscribe="codec-zstd", **FULL))
    finally:
        spark.conf.set("spark.sql.session.timeZone", saved)
    want = expected(codecs, [("codec-zstd", 0), ("codec-zstd", 1)], RC)
    assert got == want, same(got, want)
    by_value = {t[4]: t[5] for t in got}
    for i, ms in EXPLICIT_TIMESTAMPS.items():
        assert by_value[f"zstd-{i}".encode() * (i + 1)] == ms
    headers = [t[7] for t in got if t[7]]
    assert headers and all(("nil", None) in h and ("empty", b"") in h for h in headers)


# ---- a real Kafka data directory -------------------------------------------------------------------------------


def _snapshot(root: str) -> dict[str, tuple]:
    out = {}
    for directory, _, files in os.walk(root):
        out[os.path.relpath(directory, root)] = ("dir", os.stat(directory).st_mtime_ns)
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            st = os.stat(path)
            out[os.path.relpath(path, root)] = (digest, st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def test_real_kafka_directory_reads_as_the_consumer_and_is_not_modified(spark, kafka_real_copy):
    # tests/conftest.py's KAFKA_REAL: `from conftest import` may find tests/benchmarks/conftest.py
    kafka_real = os.path.join(os.path.dirname(ROOT_DIR), "shared", "fixtures", "kafka-real")
    from storage import Store

    original = _snapshot(kafka_real)
    store = Store.open(kafka_real_copy, read_only=True)
    topics = store.list_topics()
    tps = [(t, p) for t in topics for p in range(store.partition_count(t))]
    store.close()
    assert tps == [("__cluster_metadata", 0)]
    want = {iso: expected(kafka_real_copy, tps, iso) for iso in (RU, RC)}
    before = _snapshot(kafka_real_copy)  # after the Consumer's reads: what follows is the source's alone
    for iso in (RU, RC):
        got = collect(load(spark, kafka_real_copy, subscribe=",".join(topics), isolation=iso, **FULL))
        assert got == want[iso], same(got, want[iso])
        assert [t[2] for t in got] == [1, 2, 3]
    assert _snapshot(kafka_real_copy) == before, "reading a Kafka data directory changed its files"
    assert _snapshot(kafka_real) == original


# ---- errors surface through Spark -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, needle",
    [
        ({}, "subscribe"),
        ({"subscribe": "orders", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "no_such_topic"}, "no_such_topic"),
    ],
)
def test_errors_surface_with_the_options_name(spark, mixed, options, needle):
    with pytest.raises(Exception) as info:
        load(spark, mixed, **options).collect()
    assert needle in str(info.value), f"{needle!r} missing from: {str(info.value)[:2000]}"


# ---- failOnDataLoss --------------------------------------------------------------------------------------------


def test_fail_on_data_loss(spark, retained):
    log_start, _, log_end = log_bounds(retained, "ret", 0)
    below = {"subscribe": "ret", "startingOffsets": '{"ret":{"0":0}}'}
    with pytest.raises(Exception) as info:
        load(spark, retained, **below).collect()
    assert "failOnDataLoss" in str(info.value), str(info.value)[:2000]
    got = collect(load(spark, retained, **below, failOnDataLoss="false", **FULL))
    want = expected(retained, [("ret", 0)], RC)
    assert got == want, same(got, want)
    assert [t[2] for t in got] == list(range(log_start, log_end))


# ---- empty results ----------------------------------------------------------------------------------------------


def test_topic_without_records_gives_an_empty_dataframe(spark, mixed):
    df = load(spark, mixed, subscribe="empty")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == KAFKA_COLUMNS
    assert collect_or_fail(df, "a topic with no records") == []


def test_start_equal_to_end_gives_no_rows(spark, mixed):
    df = load(
        spark,
        mixed,
        assign='{"orders":[0]}',
        startingOffsets='{"orders":{"0":10}}',
        endingOffsets='{"orders":{"0":10}}',
        **FULL,
    )
    assert collect_or_fail(df, "startingOffsets == endingOffsets") == []


def test_range_of_only_aborted_records_and_markers_gives_no_rows(spark, mixed):
    """Under read_committed an input partition may hold no visible record at all."""
    from storage import Store

    store = Store.open(mixed, read_only=True)
    try:
        txn = store.partition("orders", 0).aborted_transactions(0, 1 << 62)[0]
    finally:
        store.close()
    span = {("orders", 0): txn.first_offset}, {("orders", 0): txn.last_offset + 1}
    assert expected(mixed, [("orders", 0)], RC, starts=span[0], ends=span[1]) == [], "precondition: all aborted"
    df = load(
        spark,
        mixed,
        assign='{"orders":[0]}',
        startingOffsets=f'{{"orders":{{"0":{txn.first_offset}}}}}',
        endingOffsets=f'{{"orders":{{"0":{txn.last_offset + 1}}}}}',
        **FULL,
    )
    assert df.rdd.getNumPartitions() == 1
    assert collect(df) == []


# ---- a compacted partition (issue 25) ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compacted(tmp_path_factory) -> str:
    """A topic cleaned by Store.compact: keys overwritten, tombstones, committed and aborted transactions,
    headers, several segments; its offsets have gaps wherever records were removed."""
    from storage import Store

    path = str(tmp_path_factory.mktemp("src") / "compacted")
    with no_fsync(), Store.open(path) as store:
        store.create_topic(
            "latest", 1, {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 1}
        )
        plain = txlog.Producer(store, enable_idempotence=True)
        txn = txlog.Producer(store, transactional_id="compacting")
        txn.init_transactions()
        for round_ in range(10):
            for k in range(5):
                value = None if (round_ == 9 and k % 2) else f"r{round_}-k{k}".encode()
                headers = [("round", b"%d" % round_)] if k == 0 else None
                plain.send("latest", key=f"k{k}".encode(), value=value, partition=0, headers=headers)
            plain.flush()
            txn.begin_transaction()
            txn.send("latest", key=f"k{round_ % 5}".encode(), value=f"txn{round_}".encode(), partition=0)
            txn.flush()
            txn.commit_transaction() if round_ % 2 else txn.abort_transaction()
        plain.close()
        txn.close()
        store.partition("latest", 0).roll()
        (stats,) = store.compact("latest")
        assert stats.records_retained < stats.records_read
    return path


@pytest.mark.parametrize("isolation", [RC, RU])
@pytest.mark.parametrize("split", [{}, {"minPartitions": "4"}])
def test_a_compacted_partition_reads_as_the_consumer_reads_it(spark, compacted, isolation, split):
    """Offset gaps left by the cleaner are normal: every reader gives the Consumer's records, split or not."""
    df = load(spark, compacted, subscribe="latest", isolation=isolation, **FULL, **split)
    got = collect(df)
    want = expected(compacted, [("latest", 0)], isolation)
    assert not same(got, want), same(got, want)
    offsets = [row[2] for row in want]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets))), "the cleaning should leave gaps"
    assert any(row[4] is None for row in want), "a tombstone should be read back"
