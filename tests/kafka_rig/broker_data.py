"""A data set a real Kafka 4.4 broker wrote, for the differential tests (issue 21, item 2).

Three clients write to one dedicated broker (`write_dataset`):

- the Java client 4.4 (tests/kafka_rig/java/BrokerDataWriter.java): transactions protocol v2,
  one committed and one aborted transaction per codec (none, gzip, snappy, lz4, zstd), an
  idempotent producer, a KIP-848 consumer (group.protocol=consumer) that copies the input in
  transactions with sendOffsetsToTransaction and then commits plainly;
- confluent-kafka (librdkafka, transactions protocol v1): the same per codec, and a
  transactional offset commit for a classic group;
- kafka-python: plain and idempotent producers with headers, null keys and values, and a
  classic group's offset commit.

A compacted topic gets several rolled segments with overwritten keys and tombstones, and the
data set is ready only once the log cleaner has cleaned it (its offset is in the log dir's
`cleaner-offset-checkpoint`). What the broker's own consumer returned (read_committed and
read_uncommitted) is written next to the data as JSON lines (`consumed_file`) for other tests.
`BrokerDataset` is what the fixture hands out: the stopped broker's log directory, copied.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_rig.broker import KafkaBroker
from tests.kafka_rig.kafka_dist import KafkaDistError, classpath, compiled_classes, java

JAVA_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "BrokerDataWriter.java")

JAVA_TXN_TOPIC = "java-txn"
JAVA_OUT_TOPIC = "java-ctp-out"
JAVA_IDEMPOTENT_TOPIC = "java-idempotent"
RDKAFKA_TXN_TOPIC = "rdkafka-txn"
RDKAFKA_OUT_TOPIC = "rdkafka-ctp-out"
KAFKA_PYTHON_TOPIC = "kafka-python-plain"
COMPACTED_TOPIC = "compacted"

#: name -> (partitions, topic configs)
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    JAVA_TXN_TOPIC: (2, {}),
    JAVA_OUT_TOPIC: (2, {}),
    JAVA_IDEMPOTENT_TOPIC: (2, {}),
    RDKAFKA_TXN_TOPIC: (2, {}),
    RDKAFKA_OUT_TOPIC: (1, {}),
    KAFKA_PYTHON_TOPIC: (1, {"index.interval.bytes": "100"}),  # several index entries
    COMPACTED_TOPIC: (
        1,
        {
            "cleanup.policy": "compact",
            "segment.ms": "300",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "index.interval.bytes": "64",
            # the cleaner's replaced segments are deleted at once, not a minute later (wait_for_cleaner)
            "file.delete.delay.ms": "0",
        },
    ),
}

RDKAFKA_CODECS = ("gzip", "snappy", "lz4", "zstd")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
CLEANER_TIMEOUT_S = 120.0
LOG_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".txnindex", ".checkpoint")


@dataclass
class BrokerDataset:
    """A stopped broker's log directory, copied: `log_dir` is the copy the tests read."""

    log_dir: str
    records_dir: str

    def consumed_file(self, isolation_level: str) -> str:
        """JSON lines of what the broker's consumer returned at this isolation level."""
        return os.path.join(self.records_dir, f"consumed-{isolation_level}.jsonl")

    def files(self) -> list[str]:
        """Every file of the copy that kafka-dump-log reads, sorted."""
        found = []
        for directory, _, names in os.walk(self.log_dir):
            found += [os.path.join(directory, n) for n in names if n.endswith(LOG_SUFFIXES)]
        return sorted(found)


def writer_classes() -> str:
    """The compiled BrokerDataWriter, built into the cache beside Kafka's jars (keyed by the source)."""
    return compiled_classes(JAVA_SOURCE, "BrokerDataWriter")


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=configs) for name, (partitions, configs) in TOPICS.items()]
    )
    for future in futures.values():
        future.result(60)


def write_java(bootstrap: str) -> None:
    command = [
        java(),
        "-Xmx256m",
        "-cp",
        writer_classes() + os.pathsep + classpath(),
        "BrokerDataWriter",
        bootstrap,
        JAVA_TXN_TOPIC,
        JAVA_OUT_TOPIC,
        JAVA_IDEMPOTENT_TOPIC,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise KafkaDistError(f"BrokerDataWriter exited {result.returncode}:\n{result.stdout}{result.stderr}")


def _records(tag: str) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """(partition, key, value, headers): a null key, a null value, an empty value and headers."""
    out = []
    for i in range(6):
        key = None if i == 1 else f"{tag}-k{i}".encode()
        value = None if i == 2 else b"" if i == 3 else f"{tag}-v{i}-{'y' * 30 * i}".encode()
        headers = [(f"h{i}", f"hv{i}".encode()), ("nullvalue", None)] if i % 2 == 0 else []
        out.append((i % 2, key, value, headers))
    return out


def write_rdkafka(bootstrap: str) -> None:
    """librdkafka's transactions (protocol v1), one committed and one aborted per codec, then a
    consume-transform-produce round with a classic group's transactional offset commit."""

    def delivered(err, msg) -> None:
        if err is not None:
            raise KafkaDistError(f"librdkafka delivery failed: {err}")

    for codec in RDKAFKA_CODECS:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"rdkafka-txn-{codec}",
                "compression.type": codec,
                "linger.ms": 20,
            }
        )
        producer.init_transactions(60)
        for outcome in ("committed", "aborted"):
            producer.begin_transaction()
            for partition, key, value, headers in _records(f"rdkafka-{codec}-{outcome}"):
                producer.produce(RDKAFKA_TXN_TOPIC, value, key, partition, on_delivery=delivered, headers=headers)
            producer.flush(60)
            if outcome == "committed":
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
    _rdkafka_consume_transform_produce(bootstrap)


def _rdkafka_consume_transform_produce(bootstrap: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rdkafka-classic-group",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rdkafka-ctp"})
    producer.init_transactions(60)
    consumer.subscribe([RDKAFKA_TXN_TOPIC])
    expected = 6 * len(RDKAFKA_CODECS)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < expected:
        if time.monotonic() > deadline:
            raise KafkaDistError(f"the classic group read {seen} of {expected} committed records")
        messages = consumer.consume(100, 1.0)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(RDKAFKA_OUT_TOPIC, m.value(), m.key(), 0, headers=m.headers())
        seen += len(messages)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
        producer.commit_transaction(60)
    consumer.close()


def write_kafka_python(bootstrap: str) -> None:
    """kafka-python: a plain gzip producer and an idempotent one, then a classic group's commit."""
    from kafka import KafkaConsumer, KafkaProducer

    for idempotent in (False, True):
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type="gzip" if not idempotent else None,
            enable_idempotence=idempotent,
            acks="all",
            linger_ms=5,
        )
        for round_ in range(4):
            for _, key, value, headers in _records(f"kafka-python-{idempotent}-{round_}"):
                # kafka-python refuses a header without a value
                headers = [(k, v) for k, v in headers if v is not None]
                producer.send(KAFKA_PYTHON_TOPIC, value=value, key=key, headers=headers, partition=0)
            producer.flush()
        producer.close()
    consumer = KafkaConsumer(
        KAFKA_PYTHON_TOPIC,
        bootstrap_servers=bootstrap,
        group_id="kafka-python-classic-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()


def write_compacted(bootstrap: str) -> None:
    """Overwritten keys and tombstones over several segments (segment.ms rolls them), then one
    more record so the last of them is no longer the active segment the cleaner skips."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for round_ in range(4):
        for k in range(8):
            # tombstones in the last round survive the cleaning (for delete.retention.ms, a day)
            value = None if (round_ == 3 and k % 3 == 0) else f"round{round_}-value{k}".encode()
            producer.produce(COMPACTED_TOPIC, value, f"key{k}".encode(), 0)
        producer.flush(60)
        time.sleep(0.5)  # past segment.ms: the next append rolls a new segment
    producer.produce(COMPACTED_TOPIC, b"last", b"key-last", 0)
    producer.flush(60)


def wait_for_cleaner(log_dir: str) -> None:
    """Until the cleaner's checkpoint records an offset for the compacted topic (it has cleaned)
    and the segments it replaced are gone (`.deleted` files are removed asynchronously)."""
    checkpoint = os.path.join(log_dir, "cleaner-offset-checkpoint")
    deadline = time.monotonic() + CLEANER_TIMEOUT_S
    while time.monotonic() < deadline:
        if glob.glob(os.path.join(log_dir, f"{COMPACTED_TOPIC}-0", "*.deleted")):
            time.sleep(0.5)
            continue
        try:
            with open(checkpoint) as f:
                lines = f.read().splitlines()[2:]
        except FileNotFoundError:
            lines = []
        for line in lines:
            topic, _, offset = line.split(" ")
            if topic == COMPACTED_TOPIC and int(offset) > 0:
                return
        time.sleep(0.5)
    raise KafkaDistError(f"the log cleaner did not clean {COMPACTED_TOPIC} within {CLEANER_TIMEOUT_S:.0f} s")


def record_consumed(bootstrap: str, path: str, isolation_level: str) -> None:
    """Every user topic from the start to its end, as the broker's consumer returned it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"recorder-{isolation_level}",
            "isolation.level": isolation_level,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    partitions = [TopicPartition(t, p, 0) for t, (n, _) in sorted(TOPICS.items()) for p in range(n)]
    consumer.assign(partitions)
    pending = {(tp.topic, tp.partition) for tp in partitions}
    rows = []
    deadline = time.monotonic() + 120
    while pending:
        if time.monotonic() > deadline:
            raise KafkaDistError(f"the recording consumer did not reach the end of {sorted(pending)}")
        m = consumer.poll(1.0)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == KafkaError._PARTITION_EOF:
                pending.discard((m.topic(), m.partition()))
                continue
            raise KafkaDistError(f"recording consumer: {m.error()}")
        rows.append(
            {
                "topic": m.topic(),
                "partition": m.partition(),
                "offset": m.offset(),
                "timestamp": m.timestamp()[1],
                "key": None if m.key() is None else m.key().hex(),
                "value": None if m.value() is None else m.value().hex(),
                "headers": [[k, None if v is None else v.hex()] for k, v in (m.headers() or [])],
            }
        )
    consumer.close()
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def write_dataset(work_dir: str) -> BrokerDataset:
    """Start a broker of its own, write everything, record its consumers' answers, stop it
    (controlled shutdown) and copy its log directory: the copy is what tests read."""
    broker = KafkaBroker(os.path.join(work_dir, "broker")).start()
    records_dir = os.path.join(work_dir, "consumed")
    os.makedirs(records_dir)
    try:
        create_topics(broker.bootstrap)
        write_compacted(broker.bootstrap)
        write_java(broker.bootstrap)
        write_rdkafka(broker.bootstrap)
        write_kafka_python(broker.bootstrap)
        wait_for_cleaner(broker.log_dir)
        for level in ISOLATION_LEVELS:
            record_consumed(broker.bootstrap, os.path.join(records_dir, f"consumed-{level}.jsonl"), level)
    finally:
        broker.stop()
    copy = os.path.join(work_dir, "log-dir-copy")
    shutil.copytree(broker.log_dir, copy)
    return BrokerDataset(log_dir=copy, records_dir=records_dir)


if __name__ == "__main__":  # build a data set by hand: python3 -m tests.kafka_rig.broker_data DIR
    import sys

    dataset = write_dataset(sys.argv[1])
    print(dataset.log_dir)
