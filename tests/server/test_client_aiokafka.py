"""aiokafka end to end: producer, a consumer in a group, and the transactional producer with
send_offsets_to_transaction in a consume-transform-produce loop."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.server.client_checks import (
    assert_exactly_once,
    input_values,
    produce_inputs,
    read_values,
    record_count,
    transform,
)
from tests.server.endpoints import topic_name

GETMANY_MS = 1000


async def _produce(bootstrap: str, topic: str, values: list[str]) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = [await producer.send(topic, v.encode(), partition=i % 3) for i, v in enumerate(values)]
        return [(m.partition, m.offset) for m in await asyncio.gather(*sent)]
    finally:
        await producer.stop()


async def _consume_in_group(bootstrap: str, topic: str, group: str, n: int) -> tuple[list[str], dict[int, int]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        values: list[str] = []
        while len(values) < n:
            batches = await consumer.getmany(timeout_ms=GETMANY_MS)
            values += [r.value.decode() for records in batches.values() for r in records]
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(3)}
        return values, committed
    finally:
        await consumer.stop()


def test_producer_and_group_consumer(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)
    offsets = asyncio.run(_produce(endpoint.bootstrap, topic, input_values(n)))
    assert sorted(offsets) == sorted((i % 3, i // 3) for i in range(n))

    values, committed = asyncio.run(_consume_in_group(endpoint.bootstrap, topic, f"{topic}-group", n))
    assert_exactly_once(input_values(n), values)
    assert committed == {p: len(range(p, n, 3)) for p in range(3)}


async def _copy_transactionally(bootstrap: str, source: str, sink: str, group: str, n: int) -> None:
    """Copy n records, one transaction per batch with the group's offsets in it; every fourth
    transaction is aborted on purpose and its batch copied again."""
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=25,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{sink}-txn")
    await consumer.start()
    await producer.start()
    try:
        copied = attempts = 0
        while copied < n:
            batches = await consumer.getmany(timeout_ms=GETMANY_MS)
            if not batches:
                continue
            attempts += 1
            await producer.begin_transaction()
            for tp, records in batches.items():
                for r in records:
                    await producer.send(sink, transform(r.value.decode()).encode(), partition=tp.partition)
            if attempts % 4 == 0:
                await producer.abort_transaction()
                for tp, records in batches.items():
                    consumer.seek(tp, records[0].offset)
                continue
            offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
            copied += sum(len(records) for records in batches.values())
    finally:
        await producer.stop()
        await consumer.stop()


def test_transactional_consume_transform_produce(endpoint, request, big):
    n = record_count(150, big)
    source, sink = (topic_name(request.node.nodeid, role) for role in ("in", "out"))
    endpoint.create_topic(source, 3)
    endpoint.create_topic(sink, 3)
    inputs = produce_inputs(endpoint.bootstrap, source, n)

    asyncio.run(_copy_transactionally(endpoint.bootstrap, source, sink, f"{sink}-group", n))
    assert_exactly_once(map(transform, inputs), read_values(endpoint.bootstrap, sink, 3, n))
    everything = read_values(endpoint.bootstrap, sink, 3, n, isolation="read_uncommitted")
    assert len(everything) > n  # the aborted transactions' records are in the log, unseen above
