"""kafka-python end to end: producer and consumer, a consumer group resuming from its commits,
and the transactional producer in a consume-transform-produce loop (kafka-python >= 2.1)."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.server.client_checks import (
    assert_exactly_once,
    input_values,
    produce_inputs,
    read_values,
    record_count,
    transform,
    write_aborted,
)
from tests.server.endpoints import topic_name

POLL_MS = 1000
IDLE_POLLS = 5  # consecutive empty polls, after the expected count, that end a read


def _drain(consumer: KafkaConsumer, at_least: int) -> list:
    """Poll until at least `at_least` records came and then a few polls came back empty."""
    records: list = []
    idle = 0
    for _ in range(600):
        batch = consumer.poll(timeout_ms=POLL_MS)
        got = [r for rs in batch.values() for r in rs]
        records += got
        idle = 0 if got else idle + 1
        if len(records) >= at_least and idle >= IDLE_POLLS:
            return records
    raise AssertionError(f"read {len(records)} of {at_least}")


def test_producer_and_consumer_round_trip(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)
    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap, acks="all", enable_idempotence=True)
    futures = [producer.send(topic, value=v.encode(), partition=i % 3) for i, v in enumerate(input_values(n))]
    offsets = [f.get(timeout=120) for f in futures]
    producer.close()
    assert sorted((m.partition, m.offset) for m in offsets) == sorted((i % 3, i // 3) for i in range(n))

    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap, isolation_level="read_committed")
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    consumer.seek_to_beginning()
    values = [r.value.decode() for r in _drain(consumer, n)]
    consumer.close()
    assert_exactly_once(input_values(n), values)


def test_a_group_member_resumes_from_the_groups_commits(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    group = f"{topic}-group"
    endpoint.create_topic(topic, 3)
    inputs = produce_inputs(endpoint.bootstrap, topic, n)

    def member() -> KafkaConsumer:
        return KafkaConsumer(
            topic,
            bootstrap_servers=endpoint.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=n // 4,
        )

    first = member()
    seen: list[str] = []
    while len(seen) < n // 2:
        seen += [r.value.decode() for rs in first.poll(timeout_ms=POLL_MS).values() for r in rs]
    first.commit()  # what it polled, and no more
    first.close()

    second = member()
    seen += [r.value.decode() for r in _drain(second, n - len(seen))]
    committed = {p: second.committed(TopicPartition(topic, p)) for p in range(3)}
    second.commit()
    second.close()
    assert_exactly_once(inputs, seen)
    assert all(offset is not None for offset in committed.values())


def test_transactional_consume_transform_produce(endpoint, request, big):
    n = record_count(150, big)
    source, sink = (topic_name(request.node.nodeid, role) for role in ("in", "out"))
    group = f"{sink}-group"
    endpoint.create_topic(source, 3)
    endpoint.create_topic(sink, 3)
    inputs = produce_inputs(endpoint.bootstrap, source, n)
    write_aborted(endpoint.bootstrap, sink, ["aborted-before"] * 3)

    consumer = KafkaConsumer(
        source,
        bootstrap_servers=endpoint.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=25,
    )
    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap, transactional_id=f"{sink}-txn")
    producer.init_transactions()
    copied = 0
    while copied < n:
        batch = consumer.poll(timeout_ms=POLL_MS)
        if not batch:
            continue
        producer.begin_transaction()
        offsets = {}
        for tp, records in batch.items():
            for r in records:
                producer.send(sink, value=transform(r.value.decode()).encode(), partition=tp.partition)
            offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
            copied += len(records)
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()
    # one transaction aborted after the copy: its records must stay invisible
    producer.begin_transaction()
    producer.send(sink, value=b"aborted-after", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    committed = {p: consumer.committed(TopicPartition(source, p)) for p in range(3)}
    consumer.close()

    assert sum(committed.values()) == n  # the group's offsets came with the transactions
    assert_exactly_once(map(transform, inputs), read_values(endpoint.bootstrap, sink, 3, n))
