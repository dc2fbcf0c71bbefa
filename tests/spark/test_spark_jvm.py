"""The JVM reader's own parts: the jar built from the sources, its format name and txlog.spark.read,
pruning, pushed filters, real brokers' directories, damage and data loss after planning.

The equality matrix against txlog.Consumer (isolation levels, ranges, splits, codecs, headers,
transaction columns) runs against both readers in tests/spark/test_spark_source.py; the queries here
are the JVM reader's additions, each still compared with the Consumer's records.
"""

from __future__ import annotations

import os
import shutil
import warnings
import zipfile

import pytest
from pyspark.sql import functions as F
from spark_stores import clean_compacted, codec_store, compacted_store, mixed_store, no_fsync
from test_spark_source import FULL, MIXED_TPS, RC, RU, collect, expected, load, same

import txlog.spark
from txlog.spark import jvm_build, jvm_reader
from txlog.spark.options import parse_options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKA_DIRS = os.path.join(ROOT, "..", "shared", "fixtures", "kafka-dirs")
#: What the JVM reader's scan says of itself in a physical plan (TxlogJvmSource.java's description()).
JVM_SCAN = "txlog JVM reader"


@pytest.fixture(scope="module")
def jvm(spark):
    """conftest's session, on which txlog.spark.read reads records with the JVM reader."""
    spark.conf.unset(jvm_reader.READER_CONF)
    assert jvm_reader.jvm_available(spark), "the JVM reader's jar must be on the test session (a JDK is needed)"
    return spark


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    with no_fsync():
        return mixed_store(str(tmp_path_factory.mktemp("jvm") / "mixed"))


def scan_text(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


# ---- the jar ------------------------------------------------------------------------------------------------


def test_jar_builds_from_the_sources_into_a_cache_keyed_by_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TXLOG_CACHE_DIR", str(tmp_path / "cache"))
    jar = jvm_build.jar_path()
    assert jar.startswith(str(tmp_path / "cache")) and os.path.isfile(jar)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    classes = {os.path.relpath(p, jvm_build.SOURCES_DIR).replace(".java", ".class") for p in jvm_build.source_files()}
    assert classes <= names, f"classes missing from the jar: {sorted(classes - names)}"
    with zipfile.ZipFile(jar) as z:  # the provider is registered under its format name
        services = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    assert services.split() == [jvm_build.PROVIDER_CLASS]
    mtime = os.stat(jar).st_mtime_ns
    assert jvm_build.jar_path() == jar and os.stat(jar).st_mtime_ns == mtime, "a cached jar is not rebuilt"
    javac = jvm_build.find_javac()
    assert jvm_build.cache_key("4.3.0", javac) != jvm_build.cache_key("4.3.1", javac), "pyspark's version is in the key"
    assert not [n for n in os.listdir(os.path.dirname(os.path.dirname(jar))) if n.startswith(".build-")]


def test_without_javac_the_python_source_reads_with_one_warning(monkeypatch):
    monkeypatch.setattr(jvm_build, "find_javac", lambda: None)
    monkeypatch.setattr(jvm_reader, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jvm_reader.try_jar_path() is None
        assert jvm_reader.try_jar_path() is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "javac" in messages[0] and "Python source" in messages[0]


def test_a_broken_source_is_a_build_error_naming_javac(tmp_path, monkeypatch):
    src = tmp_path / "src" / "org" / "txlog" / "spark"
    shutil.copytree(jvm_build.SOURCES_DIR, tmp_path / "src")
    (src / "Plan.java").write_text("package org.txlog.spark; final class Plan { oops }")
    monkeypatch.setattr(jvm_build, "SOURCES_DIR", str(tmp_path / "src"))
    monkeypatch.setenv("TXLOG_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(jvm_build.JarBuildError, match="javac failed"):
        jvm_build.jar_path()


def test_the_resources_are_in_the_cache_key(tmp_path, monkeypatch):
    javac = jvm_build.find_javac() or "javac"
    before = jvm_build.cache_key("4.3.0", javac)
    shutil.copytree(jvm_build.RESOURCES_DIR, tmp_path / "resources")
    service = tmp_path / "resources" / "META-INF" / "services" / "org.apache.spark.sql.sources.DataSourceRegister"
    service.write_text(service.read_text() + "# changed\n")
    monkeypatch.setattr(jvm_build, "RESOURCES_DIR", str(tmp_path / "resources"))
    assert jvm_build.cache_key("4.3.0", javac) != before


# ---- the two format names -----------------------------------------------------------------------------------


def test_read_gives_record_reads_to_the_jvm_reader_and_views_to_the_python_source(jvm, mixed):
    assert "txlog JVM reader" in scan_text(txlog.spark.read(jvm, mixed, subscribe="orders"))
    batches = txlog.spark.read(jvm, mixed, view="batches")
    assert "txlog JVM reader" not in scan_text(batches) and batches.count() > 0
    jvm.conf.set(jvm_reader.READER_CONF, "python")
    try:
        python = txlog.spark.read(jvm, mixed, subscribe="orders", **FULL)
        assert "txlog JVM reader" not in scan_text(python)
    finally:
        jvm.conf.unset(jvm_reader.READER_CONF)
    assert collect(python) == collect(txlog.spark.read(jvm, mixed, subscribe="orders", **FULL))


def test_format_txlog_is_the_python_source_and_pyspark_is_not_patched(jvm, mixed):
    from pyspark.sql.readwriter import DataFrameReader

    assert "txlog JVM reader" not in scan_text(jvm.read.format("txlog").option("subscribe", "orders").load(mixed))
    assert "txlog JVM reader" not in scan_text(jvm.read.load(mixed, format="txlog", subscribe="orders"))
    assert all(
        getattr(DataFrameReader, name).__module__.startswith("pyspark.")
        for name in ("format", "option", "options", "schema", "load")
    )


def test_the_jvm_format_name_loads_the_provider_with_a_plan(jvm, mixed):
    options = parse_options({"path": mixed, "subscribe": "orders"})
    df = jvm.read.format(txlog.spark.JVM_FORMAT).option(jvm_reader.PLAN_OPTION, jvm_reader.plan_json(options)).load()
    assert "txlog JVM reader" in scan_text(df)
    assert collect(df) == collect(load(jvm, mixed, subscribe="orders"))
    with pytest.raises(Exception, match="txlog.plan"):
        jvm.read.format(txlog.spark.JVM_FORMAT).load().collect()


# ---- column pruning and pushed filters ---------------------------------------------------------------------


@pytest.mark.parametrize("iso", [RC, RU])
def test_pruned_columns_equal_the_consumer(jvm, mixed, iso):
    df = load(jvm, mixed, subscribe="orders,audit", isolation=iso, **FULL).select("partition", "offset", "value")
    assert "headers" not in scan_text(df) and "producerId" not in scan_text(df), "columns are pruned in the scan"
    got = sorted(tuple(r) for r in df.collect())
    want = sorted((t[1], t[2], t[4]) for t in expected(mixed, MIXED_TPS, iso))
    assert got == want
    assert load(jvm, mixed, subscribe="orders,audit", isolation=iso).count() == len(want)


def test_some_of_the_transaction_columns_alone(jvm, mixed):
    """Pruning may keep any subset of the transaction columns (txlog sql selects producerId alone)."""
    df = load(jvm, mixed, subscribe="orders,audit", isolation=RU, **FULL).select(
        "partition", "offset", "producerId", "isTransactional"
    )
    got = sorted(tuple(r) for r in df.collect())
    want = sorted((t[1], t[2], t[8], t[11]) for t in expected(mixed, MIXED_TPS, RU))
    assert got == want
    sequences = load(jvm, mixed, subscribe="orders", isolation=RU, **FULL).select("offset", "sequence").collect()
    assert sorted(tuple(r) for r in sequences) == sorted(
        (t[2], t[10]) for t in expected(mixed, MIXED_TPS, RU) if t[0] == "orders"
    )


# ---- nested-schema pruning of the struct column (headers) -----------------------------------------------------


def _python_source(spark, path: str, **options):
    reader = spark.read.format("txlog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def _consumer_headers(path: str) -> list[tuple]:
    """(partition, offset, header key, header value) of every header the Consumer returns, read_committed."""
    return sorted((t[1], t[2], k, v) for t in expected(path, [("orders", p) for p in range(3)], RC) for k, v in t[7])


NESTED_QUERIES = {
    # Spark's nested-schema pruning hands the scan array<struct<key>> or array<struct<value>> for these
    "explode(headers)": lambda df: df.select("partition", "offset", F.explode("headers").alias("h")).select(
        "partition", "offset", "h.key", "h.value"
    ),
    "explode(headers).key": lambda df: df.select("offset", F.explode("headers").alias("h")).select("offset", "h.key"),
    "headers.key": lambda df: df.select("offset", F.col("headers.key").alias("keys")),
    "headers.value": lambda df: df.select("offset", F.col("headers.value").alias("values")),
    'select("headers.key")': lambda df: df.select("partition", "offset").join(
        df.select("partition", "offset", "headers.key"), ["partition", "offset"]
    ),
    "filter on headers.key": lambda df: df.filter(F.array_contains("headers.key", "txn")).select(
        "partition", "offset", "value"
    ),
    "filter on a header value": lambda df: df.filter(F.exists("headers", lambda h: h.value == F.lit(b"8"))).select(
        "offset", "key"
    ),
}


@pytest.mark.parametrize("name", list(NESTED_QUERIES))
def test_nested_pruning_of_headers_equals_the_python_source(jvm, mixed, name):
    """The scan is given only the headers' fields a query uses, and writes exactly those (it wrote both: a crash)."""
    query = NESTED_QUERIES[name]
    options = {"subscribe": "orders", "includeHeaders": "true"}
    df = query(txlog.spark.read(jvm, mixed, **options))
    assert JVM_SCAN in scan_text(df), "the JVM reader serves the query"
    got = sorted((tuple(r) for r in df.collect()), key=repr)  # repr: null header arrays sort too
    want = sorted((tuple(r) for r in query(_python_source(jvm, mixed, **options)).collect()), key=repr)
    assert got == want and got, name


def test_exploded_headers_equal_the_consumers(jvm, mixed):
    df = txlog.spark.read(jvm, mixed, subscribe="orders", includeHeaders="true")
    rows = df.select("partition", "offset", F.explode("headers").alias("h")).select(
        "partition", "offset", "h.key", "h.value"
    )
    assert sorted(tuple(r) for r in rows.collect()) == _consumer_headers(mixed)


def _filtered(rows, *, topic=None, partitions=None, lo=None, hi=None, min_ms=None):
    return [
        t
        for t in rows
        if (topic is None or t[0] == topic)
        and (partitions is None or t[1] in partitions)
        and (lo is None or t[2] >= lo)
        and (hi is None or t[2] < hi)
        and (min_ms is None or t[5] >= min_ms)
    ]


@pytest.mark.parametrize("iso", [RC, RU])
def test_pushed_filters_narrow_the_read_and_keep_the_consumers_rows(jvm, mixed, iso):
    base = load(jvm, mixed, subscribe="orders,audit", isolation=iso, **FULL)
    want = expected(mixed, MIXED_TPS, iso)
    times = sorted(t[5] for t in want)
    mid_ms = times[len(times) // 2]
    cases = [
        (base.where("partition = 1"), dict(partitions={1})),
        (base.where("partition in (0, 2) and topic = 'orders'"), dict(topic="orders", partitions={0, 2})),
        (base.where("offset >= 5 and offset < 17"), dict(lo=5, hi=17)),
        (base.where("offset > 4 and offset <= 16 and partition = 0"), dict(lo=5, hi=17, partitions={0})),
        (base.where("offset = 8"), dict(lo=8, hi=9)),
        (base.where(F.col("timestamp") >= F.timestamp_millis(F.lit(mid_ms))), dict(min_ms=mid_ms)),
    ]
    for df, spec in cases:
        plan = scan_text(df)
        assert "pushed filters []" not in plan, f"nothing pushed for {spec}: {plan}"
        got, wanted = collect(df), _filtered(want, **spec)
        assert got == wanted, f"{spec}: {same(got, wanted)}"
    ranges = load(jvm, mixed, subscribe="orders,audit").where("partition = 1 and topic = 'orders'")
    assert ranges.rdd.getNumPartitions() == 1, "a filter on partition drops the other ranges before reading"


# ---- real brokers' directories ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["macsakini-gzip-mixed", "lanxuage-gzip", "ravi-kraft-metadata"])
def test_real_broker_directories_read_as_the_consumer(jvm, tmp_path, name):
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    root = str(tmp_path / name)
    shutil.copytree(os.path.join(KAFKA_DIRS, name), root)
    from storage import Store

    store = Store.open(root, read_only=True)
    tps = [(t, p) for t in store.list_topics() for p in store.partitions(t)]
    store.close()
    for iso in (RC, RU):
        got = collect(load(jvm, root, subscribePattern=".*", isolation=iso, **FULL)) if tps else []
        want = expected(root, [tp for tp in tps if not tp[0].startswith("__")], iso)
        assert got == want, same(got, want)
        assert got, f"{name} has records in its user topics"


# ---- damage and loss after planning -------------------------------------------------------------------------


def _first_log(root: str, topic: str, partition: int) -> str:
    directory = os.path.join(root, f"{topic}-{partition}")
    return os.path.join(directory, sorted(n for n in os.listdir(directory) if n.endswith(".log"))[0])


def test_a_damaged_byte_fails_the_read_naming_file_and_position(jvm, tmp_path):
    with no_fsync():
        root = codec_store(str(tmp_path / "damaged"))
    df = load(jvm, root, subscribe="codec-lz4")
    path = _first_log(root, "codec-lz4", 0)
    with open(path, "r+b") as f:
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(Exception) as info:
        df.collect()
    text = str(info.value)
    assert "CorruptRecordError" in text and path in text and "CRC-32C" in text and "at byte 0" in text, text[:2000]


def test_a_decompression_bomb_fails_the_read_within_its_limit(jvm, tmp_path):
    # issue 23, item 4: 17 KB of zstd that inflates to 512 MiB; the JVM reader stops one byte
    # past the batch's inflation limit (docs/kafka-formats.md §1.4) instead of reading it all
    from storage import Store
    from storage.compression import Compression
    from tests.storage.bombs import MIB, bomb

    root = str(tmp_path / "bomb")
    store = Store.open(root)
    store.create_topic("t", 1)
    store.close()
    path = _first_log(root, "t", 0)
    with open(path, "ab") as f:
        f.write(bomb(Compression.ZSTD, 512 * MIB))
    with pytest.raises(Exception) as info:
        load(jvm, root, subscribe="t").collect()
    text = str(info.value)
    assert "CorruptRecordError" in text and path in text and "inflates past 67108864 bytes" in text, text[:2000]


def test_a_segment_deleted_after_planning_is_data_loss(jvm, tmp_path):
    with no_fsync():
        root = mixed_store(str(tmp_path / "lost"), records=30, segment_bytes=1024)
    strict = load(jvm, root, subscribe="orders", **FULL)
    lenient = load(jvm, root, subscribe="orders", failOnDataLoss="false", **FULL)
    everything = collect(lenient)
    first = _first_log(root, "orders", 0)
    os.remove(first)
    with pytest.raises(Exception) as info:
        strict.collect()
    assert "OffsetOutOfRangeError" in str(info.value) and "failOnDataLoss" in str(info.value), str(info.value)[:2000]
    rest = collect(lenient)
    lost = {t[2] for t in everything if t[:2] == ("orders", 0)} - {t[2] for t in rest if t[:2] == ("orders", 0)}
    assert lost and min(lost) == min(t[2] for t in everything if t[:2] == ("orders", 0))
    assert [t for t in rest if t[:2] != ("orders", 0)] == [t for t in everything if t[:2] != ("orders", 0)]


@pytest.mark.parametrize(("iso", "merge", "mid_swap"), [(RC, False, False), (RU, True, False), (RC, True, True)])
def test_a_read_planned_before_a_cleaning_reads_the_cleaned_partition(jvm, tmp_path, iso, merge, mid_swap):
    """txlog.spark.read fixes its plan (byte extents) when it returns; a cleaning then replaces the
    planned segments. The JVM reader notices (device, inode and first batch in the plan) and reads
    the planned offsets from the segments holding them now: the Consumer's rows of the cleaned log.
    `merge` makes the cleaning merge the segments into the first one's file; `mid_swap` reads while
    that file is still named `.log.swap` (between the swap's steps 3 and 4, docs/kafka-formats.md
    §11.4): the offsets are in it and nowhere else."""
    with no_fsync():
        root = compacted_store(str(tmp_path / "cleaned"))
    df = load(jvm, root, subscribe="c", isolation=iso, startingOffsets='{"c":{"0":7}}', **FULL)
    before = collect(df)
    clean_compacted(root, merge=merge)
    want = expected(root, [("c", 0)], iso, starts={("c", 0): 7})
    assert len(want) < len(before), "the cleaning removed records of the planned range"
    first = _first_log(root, "c", 0)
    if mid_swap:
        os.rename(first, first + ".swap")
    try:
        got = collect(df)
    finally:
        if mid_swap:
            os.rename(first + ".swap", first)
    assert got == want, same(got, want)
