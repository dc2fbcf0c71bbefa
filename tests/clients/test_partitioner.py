"""Keys land where Kafka puts them: Kafka's murmur2 by default, murmur3 (mmh3) when named.

Two independent oracles: the values Kafka's own UtilsTest.testMurmur2 asserts for
Utils.murmur2 (Java's signed ints), and kafka-python's `kafka.partitioner.default`
(its murmur2, and its DefaultPartitioner whose test table was compared with the Java
producer's choice among 1000 partitions). Placement is checked through the public
Producer and through `txlog produce` (run in-process, tests/cli/cli_helpers.py).
"""

from __future__ import annotations

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

import txlog
from storage import Store
from tests.cli.cli_helpers import CliRun, assert_ok, assert_usage_error, make_store
from tests.cli.cli_helpers import txlog as run_txlog
from txlog.clients import partitioner as partitioner_module
from txlog.clients.partitioner import murmur2, murmur2_unsigned, named_partitioner, to_positive
from txlog.errors import InvalidConfigurationError

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
JAVA_UTILS_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# kafka-python's test_partitioner.py, "compare with output from Kafka's
# org.apache.kafka.clients.producer.Partitioner": key -> partition among 1000.
JAVA_PARTITION_OF_1000 = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}


class _Cluster:
    """The two methods kafka-python's DefaultPartitioner asks of cluster metadata."""

    def __init__(self, count: int):
        self.count = count

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.count))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.count))


def kafka_python_partition(key: bytes, count: int) -> int:
    """The partition kafka-python's default partitioner gives a keyed record."""
    return DefaultPartitioner().partition("t", None, key, None, None, _Cluster(count))


# ---- the hash ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "java_value"), JAVA_UTILS_MURMUR2.items())
def test_murmur2_matches_kafka_utils_test(key, java_value):
    assert murmur2(key) == java_value
    assert murmur2_unsigned(key) == java_value & 0xFFFFFFFF


@pytest.mark.parametrize(("key", "partition"), JAVA_PARTITION_OF_1000.items())
def test_partition_matches_the_java_producer_among_1000(key, partition):
    assert named_partitioner("murmur2")(key, 1000) == partition


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=80))
def test_murmur2_matches_kafka_python_on_any_bytes(data):
    # every tail length (0-3 bytes) and high bytes (Java's signed bytes are masked with 0xff)
    assert murmur2_unsigned(data) == kafka_python_murmur2(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=5000))
def test_partition_matches_kafka_python_for_any_count(key, count):
    assert named_partitioner("murmur2")(key, count) == kafka_python_partition(key, count)


def test_to_positive_clears_the_sign_bit_as_kafka_does_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF  # abs would give 1
    assert to_positive(-(1 << 31)) == 0  # abs overflows in Java
    assert to_positive(479470107) == 479470107


def test_a_full_cache_is_cleared_and_placement_stays_right(monkeypatch):
    monkeypatch.setattr(partitioner_module, "_CACHE_LIMIT", 4)
    part = named_partitioner("murmur2")
    keys = [b"key-%d" % i for i in range(50)]
    for _ in range(3):  # misses, hits and clears interleaved
        assert [part(k, 7) for k in keys] == [kafka_python_partition(k, 7) for k in keys]


def test_keys_too_long_for_the_cache_are_placed_right():
    part = named_partitioner("murmur2")
    keys = [bytes([i]) * 300 for i in range(20)]  # longer than the cache takes
    for _ in range(2):
        assert [part(k, 11) for k in keys] == [kafka_python_partition(k, 11) for k in keys]


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="murmur2, murmur3"):
        named_partitioner("fnv1a")


# ---- the Producer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 3, 12])
def test_producer_puts_keys_where_kafka_does_by_default(store, count):
    store.create_topic("t", count)
    with txlog.Producer(store) as p:
        for i in range(60):
            key = b"user-%d" % i
            assert p.send("t", key=key, value=b"v").get().partition == kafka_python_partition(key, count)


def test_producer_murmur3_by_name_keeps_the_old_placement(store):
    store.create_topic("t", 5)
    keys = [b"k%d" % i for i in range(40)]
    with txlog.Producer(store, partitioner="murmur3") as p:
        got = [p.send("t", key=k, value=b"v").get().partition for k in keys]
    assert got == [mmh3.hash(k, signed=False) % 5 for k in keys]
    # the two rules really differ on these keys, so the test above can fail
    assert got != [kafka_python_partition(k, 5) for k in keys]


def test_producer_refuses_an_unknown_partitioner_before_opening_the_store(tmp_path):
    path = tmp_path / "never"
    with pytest.raises(InvalidConfigurationError, match="murmur2, murmur3"):
        txlog.Producer(str(path), partitioner="random")
    assert not path.exists()


def test_a_callable_partitioner_still_decides_every_record(store):
    store.create_topic("t", 4)
    with txlog.Producer(store, partitioner=lambda key, count: 3) as p:
        assert {p.send("t", key=k, value=b"v").get().partition for k in (b"a", None, b"b")} == {3}


def test_keyless_records_still_stick_to_a_partition_per_batch(store):
    store.create_topic("t", 3)
    with txlog.Producer(store, linger_ms=10_000) as p:
        assert [p.send("t", value=b"v").get().partition for _ in range(4)] == [0, 1, 2, 0]


# ---- txlog produce ----------------------------------------------------------------------------------


def _partitions_by_key(data_dir: str, topic: str, count: int) -> dict[bytes, set[int]]:
    found: dict[bytes, set[int]] = {}
    with Store.open(data_dir, read_only=True) as store:
        for partition in range(count):
            for batch in store.partition(topic, partition).read(0, 1 << 30):
                for record in batch.records():
                    found.setdefault(record.key, set()).add(partition)
    return found


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ((), kafka_python_partition),
        (("--partitioner", "murmur2"), kafka_python_partition),
        (("--partitioner", "murmur3"), lambda key, count: mmh3.hash(key, signed=False) % count),
    ],
)
def test_txlog_produce_places_keys(tmp_path, option, expected):
    data_dir = str(tmp_path / "data")
    make_store(data_dir, t=6)
    keys = [f"order-{i}" for i in range(30)]
    lines = "".join(f"{k}:value-{n}\n" for n in range(2) for k in keys)
    proc = _produce(data_dir, lines, *option)
    assert_ok(proc)
    placed = _partitions_by_key(data_dir, "t", 6)
    assert placed == {k.encode(): {expected(k.encode(), 6)} for k in keys}


def _produce(data_dir: str, stdin: str, *option: str) -> CliRun:
    """`txlog produce -t t -K :` with `stdin` piped in."""
    return run_txlog("produce", "-t", "t", "-K", ":", *option, data_dir=data_dir, input=stdin)


def test_txlog_produce_refuses_an_unknown_partitioner(tmp_path):
    data_dir = str(tmp_path / "data")
    make_store(data_dir, t=2)
    proc = _produce(data_dir, "k:v\n", "--partitioner", "crc32")
    assert_usage_error(proc)
    assert "--partitioner" in proc.stderr
    assert _partitions_by_key(data_dir, "t", 2) == {}


def test_produce_help_names_the_partitioners():
    proc = run_txlog("produce", "--help", env={"COLUMNS": "200"})
    assert_ok(proc)
    assert "--partitioner" in proc.stdout and "murmur2" in proc.stdout and "murmur3" in proc.stdout
