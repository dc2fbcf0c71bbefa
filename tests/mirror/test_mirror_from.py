"""`txlog mirror --from` against a real Kafka broker (tests/kafka_rig): a cluster's committed
records land in the store exactly once, in order per partition, with nothing of an aborted
cluster transaction, across kill -9 of the mirror at random moments and while a producer keeps
writing to the cluster (docs/mirror.md §2)."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ClusterConsumer
from confluent_kafka import KafkaError as ClusterError
from confluent_kafka import Producer as ClusterProducer
from confluent_kafka import TopicPartition as ClusterTP

from storage.store import Store
from tests.kafka_rig.broker import KafkaBroker
from txlog.clients.admin import Admin
from txlog.clients.consumer import Consumer
from txlog.mirror.from_cluster import mirror_from
from txlog.topic_partition import TopicPartition

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3
ABORTED = b"ABORTED-"
# Record timestamps an hour back: explicit (they must arrive as set) yet inside the 7-day
# retention both the broker and the store apply by timestamp.
BASE_TS = (
    int(time.time() * 1000) - 3_600_000
)  # every record of an aborted cluster transaction starts so; none may arrive
# Liveness bound for "the mirror has caught up" (not a speed check: it only ends a hung test).
CATCH_UP_S = 300.0

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def kill_rounds(big: bool) -> int:
    """kill -9 rounds: a few in CI, many with --big or TXLOG_MIRROR_KILLS."""
    return int(os.environ.get("TXLOG_MIRROR_KILLS", 20 if big else 3))


def _cluster_producer(bootstrap: str, codec: str, txn_id: str) -> ClusterProducer:
    producer = ClusterProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    return producer


def _write_transaction(producer: ClusterProducer, topic: str, n: int, seq: int, commit: bool) -> None:
    """One cluster transaction of `n` records over the topic's partitions: null keys, null values,
    headers (one with a null value) and explicit timestamps among them."""
    producer.begin_transaction()
    tag = b"" if commit else ABORTED
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i % 11}".encode()
        value = None if i % 13 == 5 else tag + f"{topic}/{seq}/{i}".encode() * (1 + i % 5)
        headers = [("h", f"{seq}".encode()), ("empty", None)] if i % 3 == 0 else None
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=(seq + i) % PARTITIONS,
            headers=headers,
            timestamp=BASE_TS + seq * 1000 + i,
        )
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _fill(bootstrap: str, topics_by_codec: dict[str, str], transactions: int, per_txn: int) -> None:
    """Every third transaction aborted; one codec per topic (the producer compresses with it)."""
    for codec, topic in topics_by_codec.items():
        producer = _cluster_producer(bootstrap, codec, f"fill-{topic}")
        for seq in range(transactions):
            _write_transaction(producer, topic, per_txn, seq, commit=seq % 3 != 2)
        # and one non-transactional record per partition, after the transactions
        plain = ClusterProducer({"bootstrap.servers": bootstrap, "compression.type": codec})
        for p in range(PARTITIONS):
            plain.produce(topic, value=b"plain", key=None, partition=p, timestamp=BASE_TS - 1000 + p)
        plain.flush(30)


def _cluster_committed(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], list[Row]]:
    """Every partition's records as the broker's own read_committed consumer sees them (the oracle)."""
    consumer = ClusterConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oracle",
            "isolation.level": "read_committed",
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
        }
    )
    parts = [ClusterTP(t, p, -2) for t in topics for p in range(PARTITIONS)]
    consumer.assign(parts)
    out: dict[tuple[str, int], list[Row]] = {(t.topic, t.partition): [] for t in parts}
    waiting = set(out)
    while waiting:
        for m in consumer.consume(1000, 1.0):
            if m.error() is not None:
                assert m.error().code() == ClusterError._PARTITION_EOF, m.error()
                waiting.discard((m.topic(), m.partition()))
                continue
            out[(m.topic(), m.partition())].append((m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]))
    consumer.close()
    return out


def _store_committed(store: str, topics: list[str]) -> dict[tuple[str, int], list[Row]]:
    """Every partition's records as the store's read_committed consumer sees them."""
    consumer = Consumer(store, isolation_level="read_committed", enable_auto_commit=False)
    parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    out: dict[tuple[str, int], list[Row]] = {(t.topic, t.partition): [] for t in parts}
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        for r in consumer.poll(timeout_ms=100, max_records=5000):
            out[(r.topic, r.partition)].append((r.key, r.value, list(r.headers), r.timestamp))
    consumer.close()
    return out


def _check_store(store: str, bootstrap: str, topics: list[str]) -> int:
    """The store holds exactly the cluster's committed records, nothing aborted, nothing hanging."""
    expected = _cluster_committed(bootstrap, topics)
    got = _store_committed(store, topics)
    for where, rows in expected.items():
        assert got[where] == rows, f"{where}: {len(got[where])} records in the store, {len(rows)} on the cluster"
    assert not any(v is not None and v.startswith(ABORTED) for rows in got.values() for _, v, _, _ in rows)
    with Admin(store) as admin:
        assert admin.find_hanging_transactions() == []
    return sum(len(rows) for rows in expected.values())


def _start_mirror(store: str, bootstrap: str, topics: list[str], *, follow: bool) -> subprocess.Popen:
    """`txlog mirror --from` as its own process, so that kill -9 is a real crash."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *sys.path])}
    command = [sys.executable, "-m", "cli.main", "--data-dir", store, "mirror", "--from", bootstrap]
    command += [arg for topic in topics for arg in ("-t", topic)] + (["--follow"] if follow else [])
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _written(store: str, topics: list[str]) -> int:
    """How far the store's copies of the topics reach (log end offsets summed)."""
    with Admin(store, read_only=True) as admin:
        have = set(admin.list_topics())
        return sum(p.log_end_offset for t in topics if t in have for p in admin.describe_topic(t).partitions)


def _kill_mid_copy(store: str, bootstrap: str, topics: list[str], rng: random.Random) -> bool:
    """Start a mirror and kill -9 it at a random moment: before its first commit in one round of
    four, else shortly after it began writing. True if it was still running."""
    before = _written(store, topics)
    mirror = _start_mirror(store, bootstrap, topics, follow=False)
    if rng.random() < 0.25:
        time.sleep(rng.uniform(0.0, 1.0))
    else:
        while mirror.poll() is None and _written(store, topics) == before:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
    alive = mirror.poll() is None
    mirror.send_signal(signal.SIGKILL)
    mirror.wait()
    return alive


@pytest.fixture
def codec_topics(kafka_topic: Any) -> dict[str, str]:
    return {codec: kafka_topic(PARTITIONS) for codec in CODECS}


def test_every_committed_record_once_across_kill_9(
    kafka_broker: KafkaBroker, codec_topics: dict[str, str], tmp_path: Any, big: bool
) -> None:
    """kill -9 of the mirror at random moments, then a run to the end: the store has the
    cluster's committed records exactly once per partition, in order, with keys, values,
    headers and timestamps as they were, and no record of an aborted transaction."""
    topics = list(codec_topics.values())
    _fill(kafka_broker.bootstrap, codec_topics, transactions=60, per_txn=200)
    store = str(tmp_path / "store")
    Store.open(store).close()
    rng = random.Random(os.environ.get("TXLOG_MIRROR_SEED", "mirror-from"))
    crashed = 0
    for _ in range(kill_rounds(big)):
        crashed += _kill_mid_copy(store, kafka_broker.bootstrap, topics, rng)
    assert crashed > 0, "no kill -9 landed while the mirror was copying: more data needed"
    summary = mirror_from(store, kafka_broker.bootstrap, topics)
    total = _check_store(store, kafka_broker.bootstrap, topics)
    assert 0 < summary.records < total  # the killed runs had copied part of it
    # a rerun finds everything copied already
    again = mirror_from(store, kafka_broker.bootstrap, topics)
    assert again.records == 0
    _check_store(store, kafka_broker.bootstrap, topics)


def test_topics_created_with_partition_counts_and_configs(kafka_broker: KafkaBroker, tmp_path: Any) -> None:
    """The store's topics get the cluster's partition counts and the configs set on them that the
    store knows; a topic the cluster set nothing on gets the store's defaults."""
    kafka_broker.create_topic("cfg-a", 4, {"retention.ms": "123456789", "segment.bytes": "1048576"})
    kafka_broker.create_topic("cfg-b", 2)
    store = str(tmp_path / "store")
    mirror_from(
        store,
        kafka_broker.bootstrap,
        ["cfg-a", "cfg-b"],
        all_topics=False,
        follow=False,
        client_config={},
        group=None,
        progress=None,
        stop=None,
    )
    with Admin(store) as admin:
        a, b = admin.describe_topic("cfg-a"), admin.describe_topic("cfg-b")
    assert len(a.partitions) == 4 and len(b.partitions) == 2
    assert a.config["retention.ms"] == 123456789 and a.config["segment.bytes"] == 1048576
    assert b.config["retention.ms"] == 604800000


def test_follow_while_a_producer_writes(kafka_broker: KafkaBroker, kafka_topic: Any, tmp_path: Any, big: bool) -> None:
    """--follow copies what a producer writes meanwhile, committed and aborted transactions
    interleaved, across kill -9 of the follower; stopped at the end, the store matches."""
    topics = [kafka_topic(PARTITIONS), kafka_topic(PARTITIONS)]
    store = str(tmp_path / "store")
    Store.open(store).close()
    done = threading.Event()

    def produce() -> None:
        producers = [_cluster_producer(kafka_broker.bootstrap, "lz4", f"follow-{t}") for t in topics]
        for seq in range(40 if not big else 200):
            for producer, topic in zip(producers, topics, strict=True):
                _write_transaction(producer, topic, 25, seq, commit=seq % 4 != 1)
            time.sleep(0.05)
        done.set()

    writer = threading.Thread(target=produce)
    writer.start()
    rng = random.Random(os.environ.get("TXLOG_MIRROR_SEED", "mirror-follow"))
    for _ in range(kill_rounds(big)):
        mirror = _start_mirror(store, kafka_broker.bootstrap, topics, follow=True)
        time.sleep(rng.uniform(0.5, 4.0))
        mirror.send_signal(signal.SIGKILL)
        mirror.wait()
    mirror = _start_mirror(store, kafka_broker.bootstrap, topics, follow=True)
    writer.join()
    assert done.is_set()
    expected = sum(len(r) for r in _cluster_committed(kafka_broker.bootstrap, topics).values())
    for _ in _until(lambda: sum(len(r) for r in _store_committed(store, topics).values()) >= expected):
        assert mirror.poll() is None, mirror.communicate()[1]
    mirror.send_signal(signal.SIGTERM)
    _, err = mirror.communicate(timeout=120)
    assert mirror.returncode == 130, err  # stopped between transactions (docs/cli-conventions.md)
    assert err.strip().splitlines()[-1].startswith("Mirrored ") and "(stopped)" in err
    assert _check_store(store, kafka_broker.bootstrap, topics) == expected


def _until(condition: Any) -> Iterator[None]:
    """Yield until `condition()` holds; a bound on hanging only, not a speed check."""
    deadline = time.monotonic() + CATCH_UP_S
    while not condition():
        assert time.monotonic() < deadline, "the mirror did not catch up"
        yield
        time.sleep(0.5)


def test_unknown_cluster_topic_is_a_typed_error(kafka_broker: KafkaBroker, tmp_path: Any) -> None:
    from txlog.errors import UnknownTopicOrPartitionError

    with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic"):
        mirror_from(str(tmp_path / "store"), kafka_broker.bootstrap, ["no-such-topic"])


def test_cli_summary_and_error_lines(kafka_broker: KafkaBroker, kafka_topic: Any, tmp_path: Any) -> None:
    """`txlog mirror --from` ends with one summary line naming the offsets reached; a topic the
    cluster lacks is one `Error:` line naming it, exit 1, no traceback."""
    topic = kafka_topic(PARTITIONS)
    producer = _cluster_producer(kafka_broker.bootstrap, "zstd", f"cli-{topic}")
    _write_transaction(producer, topic, 9, 0, commit=True)
    store = str(tmp_path / "store")
    ok = _start_mirror(store, kafka_broker.bootstrap, [topic], follow=False)
    _, err = ok.communicate(timeout=300)
    assert ok.returncode == 0, err
    last = err.strip().splitlines()[-1]
    # one poll may or may not see every partition's first fetch: the transaction count is the client's
    assert re.match(
        rf"Mirrored 9 records in \d+ transactions? from {re.escape(kafka_broker.bootstrap)}: {topic} \[0: 0\.\.", last
    )
    assert f"(created {topic})" in last
    bad = _start_mirror(store, kafka_broker.bootstrap, ["no-such-topic"], follow=False)
    _, err = bad.communicate(timeout=300)
    lines = [line for line in err.splitlines() if not line.startswith("%")]  # librdkafka's own log lines
    assert bad.returncode == 1 and lines == [
        f"Error: topic 'no-such-topic' does not exist on the cluster {kafka_broker.bootstrap}"
    ], err
