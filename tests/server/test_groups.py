"""Consumer groups through real clients against `txlog serve`: kafka-python and librdkafka's classic
protocol, librdkafka's KIP-848 protocol, commits, and Kafka's own kafka-consumer-groups.sh.

These tests check membership, assignment and commits without reading records: every
partition has a committed offset before the consumers start, so no consumer needs ListOffsets
to find a starting position.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata

import txlog
from tests.server.serve_process import ServeProcess
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

DEADLINE_S = 120.0
TOPIC = "t4"


@pytest.fixture
def server(tmp_path):
    # the real-broker rig's setting: a group forms as soon as its members have joined
    server = ServeProcess(str(tmp_path / "store"), args=["--config", "group.initial.rebalance.delay.ms=0"]).start()
    with txlog.Admin(server.data_dir) as admin:
        admin.create_topic(TOPIC, 4)
        for group in ("kp", "classic", "kip848"):
            admin.alter_consumer_group_offsets(group, {TopicPartition(TOPIC, p): 0 for p in range(4)})
    yield server
    server.kill()


def _settle(consumers, poll, assignment, partitions: int = 4):
    """Poll every consumer until each holds some partitions and together they hold all of them."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for consumer in consumers:
            poll(consumer)
        held = [set(assignment(c)) for c in consumers]
        if all(held) and len(set().union(*held)) == partitions == sum(map(len, held)):
            return held
        assert time.monotonic() < deadline, f"no stable assignment: {held}"


def _kafka_python(server, group: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    )
    # The topic's metadata first: a kafka-python 3.0 leader that assigns before it knows the topic
    # rejoins when the metadata arrives, and if that join completes between two of its polls, its
    # poll never takes the result (need_rejoin() is false again once the leader has assigned with
    # the new metadata): it stays rebalancing, without heartbeats, until the group drops it. The
    # real Kafka 4.4 broker gives the same [no partitions, all four] in about one run of four.
    consumer.partitions_for_topic(TOPIC)
    consumer.subscribe([TOPIC])
    return consumer


def test_kafka_python_consumers_share_a_topic_and_the_survivor_takes_everything(server):
    first, second = _kafka_python(server, "kp"), _kafka_python(server, "kp")
    poll, assignment = (lambda c: c.poll(timeout_ms=100)), (lambda c: c.assignment())
    held = _settle([first, second], poll, assignment)
    assert [len(h) for h in held] == [2, 2]
    tp = sorted(first.assignment())[0]
    first.commit({tp: KOffsetAndMetadata(7, "m", -1)})
    assert first.committed(tp) == second.committed(tp) == 7
    with txlog.Admin(server.data_dir) as admin:  # the embedded view of the same commit
        assert admin.list_consumer_group_offsets("kp")[TopicPartition(tp.topic, tp.partition)].offset == 7
    second.close()
    assert len(_settle([first], poll, assignment)[0]) == 4
    first.close()


def _librdkafka(server, group: str, protocol: str) -> Consumer:
    conf = {
        "bootstrap.servers": server.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "group.protocol": protocol,
    }
    if protocol == "classic":
        conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    consumer = Consumer(conf)
    consumer.subscribe([TOPIC])
    return consumer


def _rd_assignment(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


@pytest.mark.parametrize(("group", "protocol"), [("classic", "classic"), ("kip848", "consumer")])
def test_librdkafka_groups_share_partitions_commit_and_hand_over(server, group, protocol):
    first, second = _librdkafka(server, group, protocol), _librdkafka(server, group, protocol)
    held = _settle([first, second], lambda c: c.poll(0.1), _rd_assignment)
    assert [len(h) for h in held] == [2, 2]
    topic, partition = sorted(held[0])[0]
    first.commit(offsets=[CTopicPartition(topic, partition, 11)], asynchronous=False)
    [committed] = second.committed([CTopicPartition(topic, partition)], timeout=30)
    assert committed.offset == 11
    if protocol == "consumer":  # a KIP-848 group is txlog's own: the embedded Admin sees its wire members
        with txlog.Admin(server.data_dir) as admin:
            description = admin.describe_consumer_group_members(group)
            assert description is not None and len(description.members) == 2
    second.close()
    assert len(_settle([first], lambda c: c.poll(0.1), _rd_assignment)[0]) == 4
    first.close()


def test_a_wire_kip848_member_shares_a_group_with_an_embedded_consumer(server):
    wire = _librdkafka(server, "kip848", "consumer")
    embedded = txlog.Consumer(server.data_dir, group_id="kip848", enable_auto_commit=False)
    embedded.subscribe([TOPIC])

    def poll(c):
        if c is embedded:
            embedded.poll(timeout_ms=100)
        else:
            c.poll(0.1)

    def assignment(c):
        if c is embedded:
            return {(tp.topic, tp.partition) for tp in embedded.assignment()}
        return _rd_assignment(c)

    held = _settle([wire, embedded], poll, assignment)
    assert len(held[0]) + len(held[1]) == 4 and held[0].isdisjoint(held[1])
    embedded.close()
    assert len(_settle([wire], poll, assignment)[0]) == 4
    wire.close()


def _consumer_groups(server, *args: str) -> str:
    from tests.kafka_rig.kafka_dist import run_tool

    result = run_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", server.bootstrap, *args
    )
    return result.stdout


def test_kafka_consumer_groups_lists_describes_and_deletes_groups(server):
    classic = _librdkafka(server, "classic", "classic")
    kip848 = _librdkafka(server, "kip848", "consumer")
    _settle([classic], lambda c: c.poll(0.1), _rd_assignment)
    _settle([kip848], lambda c: c.poll(0.1), _rd_assignment)
    listed = _consumer_groups(server, "--list", "--state")
    rows = {line.split()[0]: line.split()[1] for line in listed.splitlines()[1:] if line.strip()}
    assert rows == {"classic": "Stable", "kip848": "Stable", "kp": "Empty"}
    state = _consumer_groups(server, "--describe", "--all-groups", "--state")
    assert "range" in state and "uniform" in state  # each group's assignor: the client's, the server's
    members = _consumer_groups(server, "--describe", "--group", "kip848", "--members")
    assert "rdkafka" in members and " 4 " in members.splitlines()[-1] + " "
    refused = _consumer_groups(server, "--delete", "--group", "classic")
    assert "not empty" in refused.lower() or "NonEmptyGroup" in refused
    classic.close()
    kip848.close()
    deleted = _consumer_groups(server, "--delete", "--group", "classic", "--group", "kp")
    assert "successful" in deleted
    assert {line.strip() for line in _consumer_groups(server, "--list").splitlines() if line.strip()} == {"kip848"}
    with txlog.Admin(server.data_dir) as admin:
        assert admin.list_consumer_group_offsets("kp") == {}
        assert admin.list_consumer_group_offsets("kip848") == {
            TopicPartition(TOPIC, p): OffsetAndMetadata(0) for p in range(4)
        }
