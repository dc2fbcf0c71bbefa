"""The reader's contract: Spark's Kafka source timestamp and trigger options, and refusals in one line.

Every accepted option is checked against txlog.Consumer on the same store (the timestamps
resolved by the Consumer's own `offsets_for_times`, Kafka's ListOffsets); every refused one by
the message a user sees, which must name the option and say it in one line. Batch reads go
through both readers (txlog.spark.read's JVM reader and format "txlog", the Python source);
streams through format "txlog". One store, built once; the session is conftest's.
"""

from __future__ import annotations

import itertools

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import StructType
from spark_stores import consumer_rows, no_fsync

import txlog
import txlog.spark
from txlog.errors import IllegalArgumentError
from txlog.spark import jvm_reader
from txlog.spark.options import parse_options
from txlog.spark.stream import TxlogStreamReader, from_json_offsets
from txlog.topic_partition import TopicPartition

RC, RU = "read_committed", "read_uncommitted"
TOPIC = "t"
TPS = [(TOPIC, 0), (TOPIC, 1)]
BASE = 1_700_000_000_000
#: the open transaction's record (partition 1): above the LSO, so read_committed sees no match for it
OPEN_TS = BASE + 9_000
_queries = itertools.count()


@pytest.fixture(scope="module")
def timed(tmp_path_factory) -> str:
    """Topic t, 2 partitions, 12 records each with known timestamps (partition 1 50 ms after partition 0),
    an aborted transaction inside partition 0 and an open one at the end of partition 1."""
    path = str(tmp_path_factory.mktemp("opts") / "timed")
    with no_fsync():
        with txlog.Admin(path) as admin:
            admin.create_topic(TOPIC, 2)
        plain = txlog.Producer(path, batch_size=1)
        aborter = txlog.Producer(path, transactional_id="aborter")
        aborter.init_transactions()
        for i in range(12):
            for p in (0, 1):
                plain.send(TOPIC, f"v{p}-{i}".encode(), key=f"k{i}".encode(), partition=p, timestamp_ms=_ts(p, i))
            if i == 5:
                plain.flush()
                aborter.begin_transaction()
                aborter.send(TOPIC, b"aborted", partition=0, timestamp_ms=_ts(0, 5) + 10)
                aborter.flush()
                aborter.abort_transaction()
        plain.flush()
        opener = txlog.Producer(path, transactional_id="opener", transaction_timeout_ms=900_000)
        opener.init_transactions()
        opener.begin_transaction()
        opener.send(TOPIC, b"open", partition=1, timestamp_ms=OPEN_TS)
        opener.flush()
        for producer in (plain, aborter):
            producer.close()
    return path


def _ts(partition: int, i: int) -> int:
    return BASE + 100 * i + 50 * partition


def _resolved(path: str, timestamps: dict, isolation: str) -> dict:
    """The Consumer's offsets_for_times answer per (topic, partition): the offset, or None for no match."""
    store = txlog.Store.open(path, read_only=True)
    consumer = txlog.Consumer(store, isolation_level=isolation, enable_auto_commit=False)
    try:
        found = consumer.offsets_for_times({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {(tp.topic, tp.partition): None if hit is None else hit[0] for tp, hit in found.items()}
    finally:
        consumer.close(autocommit=False)
        store.close()


def _expected(path: str, isolation: str = RC, *, start_ts=None, end_ts=None) -> list[tuple]:
    """Consumer rows from each partition's start timestamp to its end timestamp (None: from earliest / to latest)."""
    starts = {tp: off for tp, off in _resolved(path, start_ts, isolation).items()} if start_ts else None
    ends = {tp: off for tp, off in _resolved(path, end_ts, isolation).items() if off is not None} if end_ts else None
    assert starts is None or all(v is not None for v in starts.values()), "a test start must match"
    rows = consumer_rows(path, TPS, isolation, starts=starts, ends=ends)
    return [(r.topic, r.partition, r.offset, r.key, r.value) for r in rows]


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select("topic", "partition", "offset", "key", "value").collect())


@pytest.fixture(scope="module", params=["jvm", "python"])
def read(spark, request):
    """A batch read with Spark's options: txlog.spark.read (the JVM reader) or format "txlog" (the Python source)."""
    spark.conf.unset(jvm_reader.READER_CONF)

    def jvm(path: str, **options: str):
        assert jvm_reader.jvm_available(spark)
        return txlog.spark.read(spark, path, **options)

    def python(path: str, **options: str):
        return spark.read.format("txlog").options(**options).load(path)

    return jvm if request.param == "jvm" else python


def _one_line(message: str) -> str:
    """The message a user reads, which must be one line; Spark's own ' SQLSTATE: ...' tail line set aside."""
    lines = [line for line in message.strip().splitlines() if not line.strip().startswith("SQLSTATE")]
    assert "Traceback" not in message and "UnboundLocalError" not in message, message
    assert len(lines) == 1, message
    return lines[0]


def _refused(action) -> str:
    with pytest.raises(Exception) as info:
        action()
    return _one_line(str(info.value))


# ---- batch: timestamps -------------------------------------------------------------------------------------


def test_starting_timestamp_starts_each_partition_at_its_first_record_at_or_after_it(timed, read):
    ts = _ts(0, 4) + 10  # partition 0 from record 5, partition 1 from record 4 (50 ms later)
    want = _expected(timed, start_ts=dict.fromkeys(TPS, ts))
    assert _rows(read(timed, subscribe=TOPIC, startingTimestamp=str(ts))) == want
    assert {r[1] for r in want} == {0, 1} and len(want) < 24


def test_starting_offsets_by_timestamp_per_partition(timed, read):
    per = {(TOPIC, 0): _ts(0, 8), (TOPIC, 1): _ts(1, 2)}
    json_ts = f'{{"{TOPIC}":{{"0":{per[(TOPIC, 0)]},"1":{per[(TOPIC, 1)]}}}}}'
    assert _rows(read(timed, subscribe=TOPIC, startingOffsetsByTimestamp=json_ts)) == _expected(timed, start_ts=per)


def test_ending_timestamp_and_ending_offsets_by_timestamp(timed, read):
    ts = _ts(1, 6)
    assert _rows(read(timed, subscribe=TOPIC, endingTimestamp=str(ts))) == _expected(
        timed, end_ts=dict.fromkeys(TPS, ts)
    )
    per = {(TOPIC, 0): _ts(0, 3), (TOPIC, 1): _ts(1, 10)}
    json_ts = f'{{"{TOPIC}":{{"0":{per[(TOPIC, 0)]},"1":{per[(TOPIC, 1)]}}}}}'
    assert _rows(read(timed, subscribe=TOPIC, endingOffsetsByTimestamp=json_ts)) == _expected(timed, end_ts=per)


def test_an_ending_timestamp_no_record_reaches_reads_to_the_latest_offset(timed, read):
    """Spark's rule for an end: no match is 'latest' (under read_committed the open record's time is no match)."""
    for ts in (OPEN_TS, BASE + 10**9):
        assert _rows(read(timed, subscribe=TOPIC, endingTimestamp=str(ts))) == _expected(timed)


def test_timestamps_take_precedence_over_offsets_as_in_spark(timed, read):
    """startingTimestamp over startingOffsetsByTimestamp over startingOffsets; an offset spec a timestamp
    replaces is not used, so 'latest' as a batch start is no error then."""
    ts = _ts(0, 9)
    got = read(
        timed,
        subscribe=TOPIC,
        startingTimestamp=str(ts),
        startingOffsetsByTimestamp=f'{{"{TOPIC}":{{"0":{BASE},"1":{BASE}}}}}',
        startingOffsets="latest",
        endingOffsetsByTimestamp=f'{{"{TOPIC}":{{"0":{_ts(0, 11)},"1":{_ts(1, 11)}}}}}',
        endingOffsets="earliest",
    )
    want = _expected(timed, start_ts=dict.fromkeys(TPS, ts), end_ts={(TOPIC, 0): _ts(0, 11), (TOPIC, 1): _ts(1, 11)})
    assert _rows(got) == want and want


def test_a_starting_timestamp_without_a_match_fails_by_default_and_starts_at_latest_on_request(timed, read, spark):
    message = _refused(lambda: read(timed, subscribe=TOPIC, startingTimestamp=str(OPEN_TS)).collect())
    assert "startingTimestamp" in message and "no offset matched" in message and f"topic-partition {TOPIC}-0" in message
    latest = read(timed, subscribe=TOPIC, startingTimestamp=str(OPEN_TS), startingOffsetsByTimestampStrategy="latest")
    assert _rows(latest) == []
    # read_uncommitted sees the open transaction's record: it matches there
    got = read(
        timed,
        subscribe=TOPIC,
        startingTimestamp=str(OPEN_TS),
        **{"kafka.isolation.level": RU, "startingOffsetsByTimestampStrategy": "latest"},
    )
    assert _rows(got) == [
        r for r in _expected(timed, RU) if r[2] >= _resolved(timed, {(TOPIC, 1): OPEN_TS}, RU)[(TOPIC, 1)] and r[1] == 1
    ]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
        ({"startingTimestamps": "5"}, "did you mean 'startingTimestamp'"),
        ({"kafka.isolation.levle": "read_uncommitted"}, "did you mean 'kafka.isolation.level'"),
        ({"colour": "blue"}, "unknown option 'colour'"),
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingOffsetsByTimestamp": '{"t":{"0":"x"}}'}, "startingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestamp": '{"t":{"0":5}}'}, "startingOffsetsByTimestamp"),  # lacks t-1
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}, "minOffsetsPerTrigger"),
        (
            {"startingOffsetsByTimestamp": '{"t":{"0":9,"1":9}}', "endingOffsetsByTimestamp": '{"t":{"0":5,"1":9}}'},
            "startingOffsetsByTimestamp",
        ),
    ],
)
def test_refused_options_are_one_line_naming_the_option(timed, read, options, named):
    message = _refused(lambda: read(timed, subscribe=TOPIC, **options).collect())
    assert named in message, message


def test_kafka_consumer_settings_without_a_counterpart_are_accepted(timed, read):
    """A Kafka job runs unchanged: connection, security and fetch settings (and Spark's consumer
    tuning options) have no effect on reading files; trigger options have none in a batch (as Spark)."""
    got = read(
        timed,
        subscribe=TOPIC,
        **{
            "kafka.bootstrap.servers": "localhost:9092",
            "kafka.security.protocol": "SSL",
            "fetchOffset.numRetries": "5",
            "groupIdPrefix": "x",
            "maxOffsetsPerTrigger": "1",
            "minOffsetsPerTrigger": "1",
            "maxTriggerDelay": "5m",
        },
    )
    assert _rows(got) == _expected(timed)


def test_to_pandas(timed, spark):
    """pandas comes with the spark extra: toPandas() works and holds the Consumer's rows."""
    frame = txlog.spark.read(spark, timed, subscribe=TOPIC).select("partition", "offset", "value").toPandas()
    got = sorted(zip(frame["partition"], frame["offset"], map(bytes, frame["value"]), strict=True))
    assert got == sorted((r[1], r[2], r[4]) for r in _expected(timed))


# ---- streams -----------------------------------------------------------------------------------------------


def _stream(spark, path: str, **options: str):
    return spark.readStream.format("txlog").options(subscribe=TOPIC, **options).load(path)


def _run_available_now(spark, path: str, **options: str) -> list[tuple]:
    name = f"opts_{next(_queries)}"
    query = _stream(spark, path, **options).writeStream.format("memory").queryName(name).trigger(availableNow=True)
    query.start().awaitTermination()
    return _rows(spark.table(name))


def test_a_stream_starts_at_starting_timestamp_and_by_timestamp(timed, spark):
    ts = _ts(1, 7)
    assert _run_available_now(spark, timed, startingTimestamp=str(ts)) == _expected(
        timed, start_ts=dict.fromkeys(TPS, ts)
    )
    per = {(TOPIC, 0): _ts(0, 2), (TOPIC, 1): _ts(1, 9)}
    json_ts = f'{{"{TOPIC}":{{"0":{per[(TOPIC, 0)]},"1":{per[(TOPIC, 1)]}}}}}'
    got = _run_available_now(spark, timed, startingOffsetsByTimestamp=json_ts, startingOffsets="earliest")
    assert got == _expected(timed, start_ts=per)


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("endingOffsets", "latest", "ending offset not valid in streaming queries"),
        ("endingTimestamp", "5", "ending timestamp not valid in streaming queries"),
        ("endingOffsetsByTimestamp", '{"t":{"0":5,"1":5}}', "ending timestamp not valid in streaming queries"),
        ("startingTimestamp", str(OPEN_TS), "no offset matched"),
        ("startingOfsets", "earliest", "did you mean 'startingOffsets'"),
    ],
)
def test_a_refused_stream_fails_in_one_line_naming_the_option(timed, spark, option, value, words):
    def run():
        _run_available_now(spark, timed, **{option: value})

    with pytest.raises(Exception) as info:
        run()
    text = str(info.value)
    assert "Traceback" not in text and "UnboundLocalError" not in text, text
    # Spark adds its query description below; the line with the cause is txlog's, whole
    cause = [line for line in text.splitlines() if "IllegalArgumentError" in line]
    assert len(cause) == 1 and option.lower() in cause[0].lower() and words in cause[0], text


def test_min_offsets_per_trigger_waits_for_enough_new_offsets_or_the_delay(tmp_path):
    """Spark's KafkaMicroBatchStream rule: the first trigger fires; later ones are skipped (the start
    is offered as the end) until minOffsetsPerTrigger offsets are new or maxTriggerDelay has passed."""
    path = str(tmp_path / "growing")
    with txlog.Admin(path) as admin:
        admin.create_topic(TOPIC, 2)
    producer = txlog.Producer(path)

    def add(n: int) -> None:
        for i in range(n):
            producer.send(TOPIC, b"x", partition=i % 2)
        producer.flush()

    def reader(**options: str) -> TxlogStreamReader:
        opts = {"path": path, "subscribe": TOPIC, "startingOffsets": "earliest", **options}
        return TxlogStreamReader(parse_options(opts, streaming=True), StructType())

    add(3)
    waiting = reader(minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    limit = waiting.getDefaultReadLimit()
    start = waiting.initialOffset()
    first = waiting.latestOffset(start, limit)
    assert sum(from_json_offsets(first).values()) == 3, "the first trigger fires"
    add(4)
    assert waiting.latestOffset(first, limit) == first, "4 new offsets < 5: skipped"
    add(1)
    second = waiting.latestOffset(first, limit)
    assert sum(from_json_offsets(second).values()) == 8
    assert waiting.latestOffset(second, ReadAllAvailable()) == second

    add(1)
    no_delay = reader(minOffsetsPerTrigger="100", maxTriggerDelay="0")
    begin = no_delay.initialOffset()
    assert sum(from_json_offsets(no_delay.latestOffset(begin, no_delay.getDefaultReadLimit())).values()) == 9
    capped = reader(minOffsetsPerTrigger="2", maxOffsetsPerTrigger="4")
    end = from_json_offsets(capped.latestOffset(capped.initialOffset(), capped.getDefaultReadLimit()))
    assert 0 < sum(end.values()) <= 4, "maxOffsetsPerTrigger still caps a batch the minimum lets through"
    producer.close()


def test_a_stream_with_min_offsets_per_trigger_equals_the_consumer(tmp_path, spark):
    """End to end, over triggers: the first reads what is there, the next waits for the minimum."""
    path = str(tmp_path / "growing")
    with txlog.Admin(path) as admin:
        admin.create_topic(TOPIC, 2)
    producer = txlog.Producer(path)
    for i in range(4):
        producer.send(TOPIC, f"a{i}".encode(), partition=i % 2)
    producer.flush()
    name = f"opts_{next(_queries)}"
    options = {"startingOffsets": "earliest", "minOffsetsPerTrigger": "6", "maxTriggerDelay": "1h"}
    query = _stream(spark, path, **options).writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert len(_rows(spark.table(name))) == 4
        for i in range(2):
            producer.send(TOPIC, f"b{i}".encode(), partition=i % 2)
        producer.flush()
        query.processAllAvailable()
        query.processAllAvailable()
        assert len(_rows(spark.table(name))) == 4, "2 new offsets < 6 and the delay has not passed"
        for i in range(4):
            producer.send(TOPIC, f"c{i}".encode(), partition=i % 2)
        producer.flush()
        for _ in range(50):  # processAllAvailable may return on a trigger that began before the last send
            query.processAllAvailable()
            if len(_rows(spark.table(name))) == 10:
                break
        assert _rows(spark.table(name)) == sorted(
            (r.topic, r.partition, r.offset, r.key, r.value) for r in consumer_rows(path, TPS, RC)
        )
    finally:
        query.stop()
        producer.close()


def test_trigger_available_now_reads_everything_whatever_the_minimum(timed, spark):
    """Skipping a trigger would end an AvailableNow query with data left: the minimum does not apply there."""
    got = _run_available_now(spark, timed, startingOffsets="earliest", minOffsetsPerTrigger="1000")
    assert got == _expected(timed)


def test_parse_options_refuses_without_spark():
    with pytest.raises(IllegalArgumentError, match="did you mean 'failOnDataLoss'"):
        parse_options({"path": "/x", "subscribe": "t", "failOnDataLos": "true"})
