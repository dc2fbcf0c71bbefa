"""The rig itself: the broker starts, serves a real client, and Kafka's tools read what it wrote."""

from __future__ import annotations

import os

from kafka import KafkaConsumer, KafkaProducer

from tests.kafka_rig.broker import KafkaBroker
from tests.kafka_rig.kafka_dist import run_tool


def test_broker_round_trips_records_through_kafka_python(kafka_broker: KafkaBroker, kafka_topic) -> None:
    topic = kafka_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(10):
        producer.send(topic, key=str(i % 2).encode(), value=f"v{i}".encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10_000
    )
    values = sorted(record.value for record in consumer)
    consumer.close()
    assert values == sorted(f"v{i}".encode() for i in range(10))


def test_dump_log_segments_reads_the_brokers_segment(kafka_broker: KafkaBroker, kafka_topic) -> None:
    topic = kafka_topic()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    producer.send(topic, value=b"hello").get(timeout=30)
    producer.close()
    segment = os.path.join(kafka_broker.partition_dir(topic), "00000000000000000000.log")
    out = run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", segment, "--print-data-log").stdout
    assert "payload: hello" in out
