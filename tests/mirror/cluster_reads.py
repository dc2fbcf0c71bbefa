"""What the rig's broker holds after a mirror: read back with librdkafka's read_committed consumer."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from tests.mirror.store_data import Row

#: How long a read back may wait for records still on their way (a bound for a hang, not a speed check).
READ_DEADLINE_S = 180.0


def cluster_rows(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Row]]:
    """Every record read_committed shows of `topic`, per partition in order, read up to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        # the end read_committed may see (the LSO): nothing of the topic's is open once the mirror has stopped
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        rows: dict[int, list[Row]] = {p: [] for p in range(partitions)}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + READ_DEADLINE_S
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().name() == "_PARTITION_EOF" and msg.offset() >= ends[msg.partition()]:
                    done.add(msg.partition())
                continue
            rows[msg.partition()].append((msg.key(), msg.value(), list(msg.headers() or []), msg.timestamp()[1]))
        assert len(done) == partitions, f"read back stopped early: {ends}, {done}"
        return rows
    finally:
        consumer.close()


def mirror_positions(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The source offsets a mirror's committed transactions left in its group on the cluster (-1001: none yet).

    read_uncommitted, so the look does not wait (require_stable) for the transaction a killed mirror
    left open: that one's offsets are pending and not returned, which is what "committed" means here.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()
