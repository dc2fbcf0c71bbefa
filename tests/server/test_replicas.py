"""The admin APIs of a cluster's shape through kafka-python's admin client (docs/serve.md §7): leader
elections, reassignments and log-dir moves, which a one-node store answers as a Kafka broker
answers them when there is nothing to do; DescribeTopicPartitions' paging; ListConfigResources."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import (
    ElectionNotNeededError,
    InvalidReplicationAssignmentError,
    KafkaError,
    LogDirNotFoundError,
    NoError,
    NoReassignmentInProgressError,
)
from kafka.structs import TopicPartition, TopicPartitionReplica

from tests.server.raw_client import RawClient
from tests.server.serve_process import ServeProcess

ELECT_LEADERS = 43
NODE = 0  # not the default (1): the answers must follow node.id


@pytest.fixture
def admin(tmp_path):
    server = ServeProcess(str(tmp_path / "store"), args=["--config", f"node.id={NODE}"]).start()
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    client.create_topics([NewTopic("a", 3, 1), NewTopic("b", 2, 1)])
    client.server = server
    yield client
    client.close()
    server.kill()


def test_elections_are_never_needed_and_unknown_partitions_are_named(admin):
    response = admin.elect_leaders(0, {"a": [0, 1, 2]})
    ((topic, results),) = [(r[0], r[1]) for r in response.replica_election_results]
    assert topic == "a"
    assert sorted((p[0], p[1]) for p in results) == [(p, ElectionNotNeededError.errno) for p in range(3)]
    with pytest.raises(KafkaError, match="No such partition as a-7"):
        admin.elect_leaders(0, {"a": [7]})


def test_an_election_at_v0_asks_for_the_preferred_leader(admin):
    """ElectLeaders v0 has no election type: the preferred leader is implied, as Kafka reads it."""
    with RawClient(admin.server.bootstrap) as client:
        topic = client.nested(ELECT_LEADERS, 0, "TopicPartitions", topic="a", partitions=(0,))
        answer = client.send(ELECT_LEADERS, 0, topic_partitions=(topic,), timeout=1000)
    ((result,),) = [r.partition_result for r in answer.replica_election_results]
    assert (result.partition_id, result.error_code) == (0, ElectionNotNeededError.errno)


def test_reassignments_to_this_node_are_done_and_none_is_ever_in_progress(admin):
    tp = TopicPartition("a", 0)
    assert admin.alter_partition_reassignments({tp: [NODE]}) == {tp: None}
    assert admin.alter_partition_reassignments({tp: [NODE + 1]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments([tp]) == {}


def test_a_replica_moves_only_to_the_store_directory_where_it_is(admin):
    ((broker,),) = [[(r["broker"], r["log_dirs"][0]["log_dir"])] for r in admin.describe_log_dirs()]
    node, store_dir = broker
    assert node == NODE
    here, elsewhere = TopicPartitionReplica("b", 1, NODE), TopicPartitionReplica("b", 0, NODE)
    assert admin.alter_replica_log_dirs({here: store_dir}) == {here: NoError}
    assert admin.alter_replica_log_dirs({elsewhere: store_dir + "-other"}) == {elsewhere: LogDirNotFoundError}


def test_describe_topic_partitions_pages_through_the_topics_by_cursor(admin):
    first = admin.describe_topic_partitions(["b", "a"], response_partition_limit=2)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [("a", [0, 1])]
    assert first["next_cursor"] == {"topic_name": "a", "partition_index": 2}
    rest = admin.describe_topic_partitions(["a", "b"], response_partition_limit=10, cursor=first["next_cursor"])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in rest["topics"]] == [
        ("a", [2]),
        ("b", [0, 1]),
    ]
    assert rest["next_cursor"] is None
    assert {(p["leader_id"], tuple(p["replica_nodes"])) for t in rest["topics"] for p in t["partitions"]} == {
        (NODE, (NODE,))
    }
    (missing,) = admin.describe_topic_partitions(["absent"])["topics"]
    assert missing["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_config_resources_are_the_topics_and_this_broker(admin):
    assert admin.list_config_resources() == {"topic": ["a", "b"], "broker": [str(NODE)]}


def test_kafka_python_infers_the_newest_broker_it_knows(admin):
    # kafka-python 3.0 reads a 4.3+ broker from DescribeLogDirs v5 (KIP-1066's is_cordoned)
    consumer = KafkaConsumer(bootstrap_servers=admin.server.bootstrap, api_version=None)
    try:
        assert consumer.config["api_version"] >= (4, 3)
    finally:
        consumer.close()


def test_the_metadata_quorum_is_this_node_alone_with_an_empty_metadata_log(admin):
    result = admin.describe_metadata_quorum()
    (topic,) = result["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (partition,) = topic["partitions"]
    assert (partition["partition_index"], partition["error"]) == (0, None)
    assert (partition["leader_id"], partition["leader_epoch"], partition["high_watermark"]) == (NODE, 0, 0)
    assert [v["replica_id"] for v in partition["current_voters"]] == [NODE]
    assert partition["observers"] == []
