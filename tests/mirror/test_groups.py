"""Group positions carried to the cluster (`txlog mirror --to ... --carry-group G`, docs/mirror.md §3).

Against the rig's real Kafka broker: a store group's committed positions become the cluster
group's, so that a Kafka consumer subscribing in that group reads next exactly the records the
store consumer had not read, none twice and none missed, although the offsets differ on the two
sides (aborted transactions are not copied, markers and plain batches shift the offsets, and the
mirror's own aborted transactions on the cluster take offsets too).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from typer.testing import CliRunner

import txlog
from cli.main import app
from storage.store import Store
from tests.kafka_rig.broker import KafkaBroker
from txlog.errors import ClusterError, GroupIdNotFoundError, GroupNotEmptyError
from txlog.mirror.groups import carry_groups
from txlog.mirror.to_cluster import mirror_to
from txlog.topic_partition import TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTITIONS = 4
MIRROR = "txlog-mirror-to"


@pytest.fixture(autouse=True)
def _group_coordinator_ready(kafka_broker: KafkaBroker) -> None:
    """Group requests on a fresh broker answer NOT_COORDINATOR until `__consumer_offsets` has a
    leader; these tests are about translation, so they start once a group commit goes through."""
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "warm-up", "enable.auto.commit": False}
    )
    topic = "mirror-groups-warm-up"
    if topic not in consumer.list_topics(timeout=30).topics:
        kafka_broker.create_topic(topic)
    for _ in range(120):
        try:
            consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 0)], asynchronous=False)
            break
        except KafkaException:
            time.sleep(0.5)
    consumer.close()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _fill(store_dir: str, topic: str, rounds: int, first: int = 0) -> None:
    """Committed and aborted transactions (every third aborted) in every partition, then plain
    (non-transactional) records: the store's offsets and the cluster's differ after mirroring."""
    with txlog.Admin(store_dir) as admin:
        if topic not in admin.list_topics():
            admin.create_topic(topic, PARTITIONS)
    with txlog.Producer(store_dir, transactional_id=f"app-{topic}") as producer:
        producer.init_transactions()
        for i in range(first, first + rounds):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                for j in range(3):
                    producer.send(
                        topic,
                        value=b"v%d-%d-%d" % (i, p, j),
                        key=b"k%d" % j,
                        partition=p,
                        headers=[("round", b"%d" % i)],
                    )
            if i % 3 == 1:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    with txlog.Producer(store_dir) as producer:
        for p in range(PARTITIONS):
            producer.send(topic, value=b"plain-%d-%d" % (first, p), key=None, partition=p)
        producer.flush()


def _visible(store_dir: str, topic: str) -> dict[int, list]:
    """Every partition's committed records, as a read_committed store consumer sees them."""
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    with txlog.Consumer(store_dir, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while True:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                break
            for r in batch:
                out[r.partition].append(r)
    return out


def _commit(store_dir: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    with txlog.Consumer(store_dir, group_id=group, enable_auto_commit=False) as consumer:
        consumer.commit(offsets)


def _kafka_group_reads(bootstrap: str, group: str, topic: str) -> dict[int, list[tuple]]:
    """What a Kafka consumer that subscribes in `group` reads until every partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",  # a position not carried would read from the start: seen as duplicates
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    # One message per poll: a deadline, not a poll count, bounds the read (up to ~1,200 records remain).
    deadline = time.monotonic() + 180
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
            continue
        at_end.discard(message.partition())
        seen[message.partition()].append(_kafka_row(message))
    consumer.close()
    assert len(at_end) == PARTITIONS, "the Kafka consumer did not reach the end of every partition"
    return seen


def _kafka_row(message) -> tuple:
    return message.key(), message.value(), [(k, v) for k, v in message.headers() or []]


def _store_row(record) -> tuple:
    return record.key, record.value, [(k, v) for k, v in record.headers or []]


def _leave_an_aborted_mirror_transaction(bootstrap: str, topic: str) -> None:
    """What a mirror killed mid-transaction leaves once the next run fences it: records and an
    ABORT marker on the cluster, taking offsets but never read."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": MIRROR})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, b"never-seen", partition=p)
    producer.flush(30)
    producer.abort_transaction(30)


def test_a_kafka_consumer_resumes_exactly_where_the_store_group_stopped(kafka_broker: KafkaBroker, tmp_path) -> None:
    store_dir, topic, group = str(tmp_path / "store"), _unique("orders"), _unique("billing")
    _fill(store_dir, topic, rounds=4)
    mirror_to(store_dir, kafka_broker.bootstrap, [topic])
    _leave_an_aborted_mirror_transaction(kafka_broker.bootstrap, topic)
    _fill(store_dir, topic, rounds=4, first=4)
    mirror_to(store_dir, kafka_broker.bootstrap, [topic])

    visible = _visible(store_dir, topic)
    # where the store group stopped: mid-transaction, on a commit marker (an aborted transaction
    # follows), at the very start, and past the last record
    read = {0: 7, 1: 9, 2: 0, 3: len(visible[3])}
    positions = {
        TopicPartition(topic, 0): visible[0][read[0]].offset,
        TopicPartition(topic, 1): visible[1][read[1] - 1].offset + 1,
        TopicPartition(topic, 2): 0,
        TopicPartition(topic, 3): visible[3][-1].offset + 1,
    }
    _commit(store_dir, group, positions)

    with Store.open(store_dir) as store:
        [carried] = carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)
    assert set(carried.offsets) == {(topic, p) for p in range(PARTITIONS)}
    assert carried.offsets[(topic, 0)][0] == positions[TopicPartition(topic, 0)]

    seen = _kafka_group_reads(kafka_broker.bootstrap, group, topic)
    for p in range(PARTITIONS):
        assert seen[p] == [_store_row(r) for r in visible[p][read[p] :]], f"partition {p}"
    # the offsets differ on the two sides, or this test would prove nothing
    assert any(source != target for source, target in carried.offsets.values())


def test_carrying_again_is_a_no_op_and_a_moved_cluster_group_is_refused(kafka_broker: KafkaBroker, tmp_path) -> None:
    store_dir, topic, group = str(tmp_path / "store"), _unique("orders"), _unique("billing")
    _fill(store_dir, topic, rounds=3)
    mirror_to(store_dir, kafka_broker.bootstrap, [topic])
    visible = _visible(store_dir, topic)
    _commit(store_dir, group, {TopicPartition(topic, p): visible[p][2].offset for p in range(PARTITIONS)})
    with Store.open(store_dir) as store:
        first = carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)
        again = carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)
    assert first[0].offsets == again[0].offsets

    _kafka_group_reads(kafka_broker.bootstrap, group, topic)  # reads on and commits nothing...
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[KafkaTopicPartition(topic, 0, first[0].offsets[(topic, 0)][1] + 1)], asynchronous=False)
    consumer.close()  # ...until one of its consumers commits a later position
    with Store.open(store_dir) as store, pytest.raises(ClusterError, match="already has position"):
        carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)


def test_a_group_ahead_of_the_mirror_or_still_running_is_refused(kafka_broker: KafkaBroker, tmp_path) -> None:
    store_dir, topic, group = str(tmp_path / "store"), _unique("orders"), _unique("billing")
    _fill(store_dir, topic, rounds=2)
    mirror_to(store_dir, kafka_broker.bootstrap, [topic])
    _fill(store_dir, topic, rounds=2, first=2)  # not mirrored yet
    visible = _visible(store_dir, topic)
    _commit(store_dir, group, {TopicPartition(topic, 0): visible[0][-1].offset + 1})
    with Store.open(store_dir) as store:
        with pytest.raises(ClusterError, match="past the mirror's"):
            carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)
        with pytest.raises(GroupIdNotFoundError, match="no committed positions"):
            carry_groups(store, kafka_broker.bootstrap, ["never-committed"], client_config={}, mirror_group=MIRROR)
        live = txlog.Consumer(store, group_id=group)
        live.subscribe([topic])
        live.poll(timeout_ms=100)
        try:
            with pytest.raises(GroupNotEmptyError, match="live members"):
                carry_groups(store, kafka_broker.bootstrap, [group], client_config={}, mirror_group=MIRROR)
        finally:
            live.close()


def test_cli_carries_groups_after_the_copy(kafka_broker: KafkaBroker, tmp_path) -> None:
    store_dir, topic, group = str(tmp_path / "store"), _unique("orders"), _unique("billing")
    _fill(store_dir, topic, rounds=2)
    visible = _visible(store_dir, topic)
    _commit(store_dir, group, {TopicPartition(topic, 1): visible[1][1].offset})
    result = CliRunner().invoke(
        app,
        ["--data-dir", store_dir, "mirror", "--to", kafka_broker.bootstrap, "--topic", topic, "--carry-group", group],
    )
    assert result.exit_code == 0, result.output
    assert f"Carried group {group}: {topic} [1: {visible[1][1].offset} -> " in result.output
    seen = _kafka_group_reads(kafka_broker.bootstrap, group, topic)
    assert seen[1] == [_store_row(r) for r in visible[1][1:]]


def test_cli_refuses_carry_group_with_follow_or_from(kafka_broker: KafkaBroker, tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    for direction in (["--to", kafka_broker.bootstrap, "--follow"], ["--from", kafka_broker.bootstrap]):
        result = CliRunner().invoke(app, ["--data-dir", store_dir, "mirror", *direction, "--all", "--carry-group", "g"])
        assert result.exit_code != 0
        assert result.output.strip().splitlines() == [
            "Error: --carry-group goes with --to and without --follow: it runs once the copy has caught up"
        ]


def test_positions_carry_exactly_after_the_mirror_was_killed_mid_copy(
    kafka_broker: KafkaBroker, tmp_path, big: bool
) -> None:
    """A real `txlog mirror --to` killed (-9) at random moments, rerun, then --carry-group: the
    killed runs' open transactions are aborted on the cluster, and the count still comes out exact."""
    store_dir, topic, group = str(tmp_path / "store"), _unique("orders"), _unique("billing")
    _fill(store_dir, topic, rounds=150 if not big else 600)  # about 100 cluster transactions: kills land mid-copy
    visible = _visible(store_dir, topic)
    read = {p: random.randrange(len(visible[p]) + 1) for p in range(PARTITIONS)}
    _commit(
        store_dir,
        group,
        {
            TopicPartition(topic, p): visible[p][n].offset if n < len(visible[p]) else visible[p][-1].offset + 1
            for p, n in read.items()
        },
    )
    command = [sys.executable, "-m", "cli.main", "--data-dir", store_dir, "mirror", "--to", kafka_broker.bootstrap]
    command += ["--topic", topic, "--transaction-bytes", "200"]  # many small cluster transactions
    env = {**os.environ, "PYTHONPATH": ROOT}
    for _ in range(3 if not big else 15):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(random.uniform(0.5, 4.0))  # a random moment: start-up, mid-copy or done
        process.kill()
        process.wait()
    finished = subprocess.run([*command, "--carry-group", group], env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr

    seen = _kafka_group_reads(kafka_broker.bootstrap, group, topic)
    for p in range(PARTITIONS):
        assert seen[p] == [_store_row(r) for r in visible[p][read[p] :]], f"partition {p} (read {read[p]})"
