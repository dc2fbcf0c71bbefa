"""What the end-to-end client tests share: input made, output read back under read_committed, and
the exactly-once check (every input once in the output, nothing else).

Inputs are written by librdkafka's idempotent producer, round robin over the partitions, so every
test starts from the same kind of topic whatever client it exercises. The output of a
consume-transform-produce run is `transform(input)` per input record.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

SOAK_ENV = "TXLOG_SOAK"
# a generous bound on a read that never reaches its end: a hang fails, a slow machine does not
READ_DEADLINE_S = 300.0


def record_count(small: int, big_flag: bool = False) -> int:
    """`small` by default; 50x with `--big` or TXLOG_SOAK=big (the long runs)."""
    return small * 50 if big_flag or os.environ.get(SOAK_ENV) == "big" else small


def input_values(n: int) -> list[str]:
    return [f"in-{i:06d}" for i in range(n)]


def transform(value: str) -> str:
    return "out-" + value.removeprefix("in-")


def produce_inputs(bootstrap: str, topic: str, n: int, partitions: int = 3) -> list[str]:
    """Write n input records, round robin over the partitions, acknowledged; returns their values."""
    values = input_values(n)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(str(err))

    for i, value in enumerate(values):
        producer.produce(
            topic, value=value.encode(), key=str(i).encode(), partition=i % partitions, on_delivery=delivered
        )
        producer.poll(0)
    assert producer.flush(READ_DEADLINE_S) == 0, "input records still unacknowledged"
    assert failures == [], failures
    return values


def write_aborted(bootstrap: str, topic: str, values: Iterable[str], partitions: int = 3) -> None:
    """One transaction that writes `values` (acknowledged: they are in the log) and is then aborted."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"aborter-{uuid.uuid4()}"})
    producer.init_transactions(READ_DEADLINE_S)
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(READ_DEADLINE_S) == 0
    producer.abort_transaction(READ_DEADLINE_S)


def read_values(
    bootstrap: str, topic: str, partitions: int, at_least: int, isolation: str = "read_committed"
) -> list[str]:
    """Every value of the topic from the beginning, read until at least `at_least` arrived and
    each partition reported its end (so records past `at_least`, e.g. duplicates, are seen too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while not (len(values) >= at_least and len(at_end) == partitions):
            assert time.monotonic() < deadline, f"read {len(values)} of {at_least} from {topic} ({isolation})"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            at_end.discard(msg.partition())
            values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def assert_exactly_once(expected: Iterable[str], output: Iterable[str]) -> None:
    """The output holds each expected value exactly once and nothing else."""
    want, got = Counter(expected), Counter(output)
    missing = want - got
    extra = got - want
    assert not missing and not extra, (
        f"missing {len(missing)} (e.g. {sorted(missing)[:5]}), "
        f"extra or duplicated {sum(extra.values())} (e.g. {sorted(extra)[:5]})"
    )
