"""Topics and configs over the wire (docs/serve.md §7): the admin clients of librdkafka, kafka-python
and Kafka's own tools against `txlog serve`, each change checked where a user would see it, in
`txlog topics describe` on the same store directory."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError, InvalidReplicationFactorError, TopicAlreadyExistsError

from tests.cli.cli_helpers import txlog
from tests.kafka_rig.kafka_dist import run_tool
from tests.server.raw_client import RawClient

TOPICS_TOOL = "org.apache.kafka.tools.TopicCommand"
CONFIGS_TOOL = "org.apache.kafka.tools.ConfigCommand"


def _admin(server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _error(future) -> KafkaError | None:
    """The Kafka error a per-item admin future failed with, or None when it succeeded."""
    try:
        future.result(60)
    except KafkaException as exc:
        return exc.args[0]
    return None


def _described(server, topic: str) -> dict | None:
    """`txlog topics describe TOPIC --output json` on the server's store, None when there is no such topic."""
    run = txlog("topics", "describe", topic, "--output", "json", data_dir=server.data_dir)
    if run.returncode != 0:
        assert "does not exist" in run.stderr, run.stderr
        return None
    return json.loads(run.stdout)


def _topic_configs(admin: AdminClient, topic: str) -> dict:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return future.result(60)


# ---- confluent-kafka (librdkafka) ---------------------------------------------------------------------


def test_create_topics_makes_the_topic_with_its_configs_and_validate_only_makes_nothing(txlog_server):
    admin = _admin(txlog_server)
    futures = admin.create_topics([NewTopic("orders", 3, 1, config={"retention.ms": "5000"})])
    assert _error(futures["orders"]) is None
    described = _described(txlog_server, "orders")
    assert described is not None
    assert (described["partitionCount"], described["configs"]) == (3, {"retention.ms": 5000})

    futures = admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    assert _error(futures["dry"]) is None
    assert _described(txlog_server, "dry") is None


def test_create_topics_takes_the_broker_default_partition_count(tmp_path):
    from tests.server.serve_process import ServeProcess

    server = ServeProcess(str(tmp_path / "store"), args=["--config", "num.partitions=4"]).start()
    try:
        admin = _admin(server)  # held: a collected client fails its futures
        assert _error(admin.create_topics([NewTopic("defaulted")])["defaulted"]) is None
        assert _described(server, "defaulted")["partitionCount"] == 4
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (NewTopic("replicated", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        (NewTopic("badconfig", 1, 1, config={"compression.type": "zstd"}), KafkaError.INVALID_CONFIG),
        (NewTopic("badvalue", 1, 1, config={"segment.bytes": "abc"}), KafkaError.INVALID_CONFIG),
        (NewTopic("bad/name", 1, 1), KafkaError.TOPIC_EXCEPTION),
        (NewTopic("nopartitions", 0, 1), KafkaError.INVALID_PARTITIONS),
    ],
    ids=["replication-factor-3", "unsupported-config", "bad-value", "bad-name", "zero-partitions"],
)
def test_create_topics_refuses_what_a_one_node_store_cannot_make(txlog_server, topic, code):
    admin = _admin(txlog_server)
    error = _error(admin.create_topics([topic])[topic.topic])
    assert error is not None and error.code() == code, error
    assert error.str(), "the refusal says why"
    assert _described(txlog_server, topic.topic) is None


def test_replication_factor_cap_makes_one_replica_and_every_answer_says_so(tmp_path):
    """Opted in (docs/serve.md §7), a factor of 3 makes the topic, and no answer pretends there are 3
    replicas: CreateTopics' result and Metadata say one replica, one in sync, and the log says why."""
    from tests.server.serve_process import ServeProcess

    config = "txlog.replication.factor.cap.enable=true"
    server = ServeProcess(str(tmp_path / "store"), args=["--config", config]).start()
    try:
        with RawClient(server.bootstrap) as c:
            topic = c.nested(
                19,
                7,
                "CreatableTopic",
                name="replicated",
                num_partitions=2,
                replication_factor=3,
                assignments=(),
                configs=(),
            )
            (created,) = c.send(19, 7, topics=(topic,), timeout_ms=30000, validate_only=False).topics
            assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 1)
            wanted = (c.nested(3, 12, "MetadataRequestTopic", name="replicated", topic_id=uuid.UUID(int=0)),)
            metadata = c.send(
                3, 12, topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            )
        (described,) = metadata.topics
        assert [(p.replica_nodes, p.isr_nodes) for p in described.partitions] == [((1,), (1,))] * 2
        assert _described(server, "replicated")["partitionCount"] == 2
        assert "topic replicated created with replication factor 1, not the 3 asked for" in server.log()
    finally:
        server.kill()


def test_create_topics_answers_each_topic_on_its_own(txlog_server):
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("first", 1, 1)])["first"]) is None
    futures = admin.create_topics([NewTopic("first", 1, 1), NewTopic("second", 2, 1), NewTopic("third", 1, 2)])
    assert _error(futures["first"]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert _error(futures["second"]) is None
    assert _error(futures["third"]).code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert _described(txlog_server, "second")["partitionCount"] == 2


def test_delete_topics_removes_the_topic_but_not_internal_or_unknown_ones(txlog_server):
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("doomed", 2, 1)])["doomed"]) is None
    admin.list_topics("__consumer_offsets", timeout=30)  # nothing: internal topics are not auto-created
    txlog("topics", "create", "__consumer_offsets", "--partitions", "1", data_dir=txlog_server.data_dir)

    futures = admin.delete_topics(["doomed", "never-was", "__consumer_offsets"])
    assert _error(futures["doomed"]) is None
    assert _error(futures["never-was"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _error(futures["__consumer_offsets"]).code() == KafkaError.INVALID_REQUEST
    assert _described(txlog_server, "doomed") is None
    assert "doomed" not in admin.list_topics(timeout=30).topics


def test_create_partitions_grows_a_topic_and_refuses_shrinking_or_other_brokers(txlog_server):
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("growing", 1, 1)])["growing"]) is None
    assert _error(admin.create_partitions([NewPartitions("growing", 3)], validate_only=True)["growing"]) is None
    assert _described(txlog_server, "growing")["partitionCount"] == 1
    assert _error(admin.create_partitions([NewPartitions("growing", 3)])["growing"]) is None
    assert _described(txlog_server, "growing")["partitionCount"] == 3

    futures = admin.create_partitions([NewPartitions("growing", 2), NewPartitions("absent", 2)])
    assert _error(futures["growing"]).code() == KafkaError.INVALID_PARTITIONS
    assert _error(futures["absent"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    elsewhere = NewPartitions("growing", 4, replica_assignment=[[2]])
    assert _error(admin.create_partitions([elsewhere])["growing"]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert _described(txlog_server, "growing")["partitionCount"] == 3


def test_describe_configs_reports_overrides_and_defaults_with_their_sources(txlog_server):
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("cfg", 1, 1, config={"segment.bytes": "1048576"})])["cfg"]) is None
    configs = _topic_configs(admin, "cfg")
    assert set(_described(txlog_server, "cfg")["configs"]) <= set(configs)
    segment_bytes, retention = configs["segment.bytes"], configs["retention.ms"]
    assert (segment_bytes.value, segment_bytes.source, segment_bytes.is_default) == (
        "1048576",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        False,
    )
    # The synonyms Kafka 4.4 lists for an override: the override, then the broker default it replaces.
    assert [(s.name, s.value, s.source) for s in segment_bytes.synonyms.values()] == [
        ("segment.bytes", "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value),
    ]
    assert (retention.value, retention.source, retention.is_default) == (
        "604800000",
        ConfigSource.DEFAULT_CONFIG.value,
        True,
    )

    (missing,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "nope")]).values()
    assert _error(missing).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_of_the_broker_shows_its_start_configs_read_only(tmp_path):
    from tests.server.serve_process import ServeProcess

    server = ServeProcess(str(tmp_path / "store"), args=["--config", "num.partitions=3"]).start()
    try:
        admin = _admin(server)
        (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
        configs = future.result(60)
    finally:
        server.kill()
    partitions, auto_create = configs["num.partitions"], configs["auto.create.topics.enable"]
    assert (partitions.value, partitions.source, partitions.is_read_only) == (
        "3",
        ConfigSource.STATIC_BROKER_CONFIG.value,
        True,
    )
    assert (auto_create.value, auto_create.source) == ("true", ConfigSource.DEFAULT_CONFIG.value)


def test_node_id_config_names_the_node_in_metadata_assignments_and_broker_configs(tmp_path):
    from tests.server.serve_process import ServeProcess

    server = ServeProcess(str(tmp_path / "store"), args=["--config", "node.id=0"]).start()
    try:
        admin = _admin(server)
        assert _error(admin.create_topics([NewTopic("placed", 1, 1)])["placed"]) is None
        # kafka-python's own CreatePartitions test places the new partitions on node 0
        growth = NewPartitions("placed", 3, replica_assignment=[[0], [0]])
        assert _error(admin.create_partitions([growth])["placed"]) is None
        metadata = admin.list_topics(timeout=30)
        (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
        configs = future.result(60)
    finally:
        server.kill()
    assert list(metadata.brokers) == [0] and metadata.controller_id == 0
    assert {p.leader for p in metadata.topics["placed"].partitions.values()} == {0}
    assert (configs["node.id"].value, configs["node.id"].source) == ("0", ConfigSource.STATIC_BROKER_CONFIG.value)
    advertised = configs["advertised.listeners"]
    assert (advertised.value, advertised.source, advertised.is_read_only) == (
        f"PLAINTEXT://{server.bootstrap}",
        ConfigSource.STATIC_BROKER_CONFIG.value,
        True,
    )


def test_a_node_id_that_is_not_a_node_id_is_refused_at_start(tmp_path):
    run = txlog("serve", "--config", "node.id=-1", data_dir=str(tmp_path / "store"))
    assert run.returncode == 2 and run.stderr.strip().startswith("Error: --config: node.id must be an integer")


def test_incremental_alter_configs_sets_and_deletes_and_refuses_append_and_broker_changes(txlog_server):
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("alt", 1, 1, config={"segment.bytes": "1048576"})])["alt"]) is None

    def alter(*entries: ConfigEntry, resource_type=ResourceType.TOPIC, name="alt", validate_only=False):
        resource = ConfigResource(resource_type, name, incremental_configs=list(entries))
        (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
        return _error(future)

    set_retention = ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)
    drop_segment = ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)
    assert alter(set_retention, drop_segment, validate_only=True) is None
    assert _described(txlog_server, "alt")["configs"] == {"segment.bytes": 1048576}
    assert alter(set_retention, drop_segment) is None
    assert _described(txlog_server, "alt")["configs"] == {"retention.ms": 5000}
    assert _topic_configs(admin, "alt")["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    append = ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
    assert alter(append).code() == KafkaError.INVALID_CONFIG
    unknown = ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)
    assert alter(unknown).code() == KafkaError.INVALID_CONFIG
    too_small = ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET)
    assert alter(too_small).code() == KafkaError.INVALID_CONFIG
    assert alter(set_retention, name="absent").code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    partitions = ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
    assert alter(partitions, resource_type=ResourceType.BROKER, name="1").code() == KafkaError.INVALID_REQUEST
    assert _described(txlog_server, "alt")["configs"] == {"retention.ms": 5000}


def _described_types(server, topic: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs v4 of a topic, straight off the wire: name -> (value, config_type); no client
    library shows the type."""
    with RawClient(server.bootstrap) as c:
        resource = c.nested(
            32, 4, "DescribeConfigsResource", resource_type=2, resource_name=topic, configuration_keys=None
        )
        (result,) = c.send(32, 4, resources=(resource,), include_synonyms=False, include_documentation=False).results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_type) for c in result.configs}


def test_compaction_configs_have_kafkas_types_in_describe_configs(txlog_server):
    """cleanup.policy is Kafka's LIST (7), min.cleanable.dirty.ratio a DOUBLE (6) shown as Java prints it,
    the lags and delete.retention.ms LONGs (5): created through CreateTopics, read back by DescribeConfigs
    and in `txlog topics describe`."""
    admin = _admin(txlog_server)
    configs = {"cleanup.policy": "delete,compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"}
    assert _error(admin.create_topics([NewTopic("cmp", 1, 1, config=configs)])["cmp"]) is None
    described = _described_types(txlog_server, "cmp")
    assert described["cleanup.policy"] == ("compact,delete", 7)
    assert described["min.cleanable.dirty.ratio"] == ("0.01", 6)
    assert described["delete.retention.ms"] == ("0", 5)
    assert described["min.compaction.lag.ms"] == ("0", 5)
    assert described["max.compaction.lag.ms"] == (str(2**63 - 1), 5)
    assert described["segment.bytes"][1] == 3
    assert _described(txlog_server, "cmp")["configs"] == {
        "cleanup.policy": "compact,delete",
        "delete.retention.ms": 0,
        "min.cleanable.dirty.ratio": 0.01,
    }
    ratio = _topic_configs(admin, "cmp")["min.cleanable.dirty.ratio"]
    assert [(s.name, s.value) for s in ratio.synonyms.values()] == [
        ("min.cleanable.dirty.ratio", "0.01"),
        ("log.cleaner.min.cleanable.ratio", "0.5"),
    ]


def test_incremental_alter_configs_appends_to_and_subtracts_from_cleanup_policy(txlog_server):
    """cleanup.policy is a LIST, so IncrementalAlterConfigs' APPEND and SUBTRACT apply to it (against the
    default `delete` when the topic has no override), as Kafka's ConfigAdminManager does; a bad ratio is
    INVALID_CONFIG and changes nothing."""
    admin = _admin(txlog_server)
    assert _error(admin.create_topics([NewTopic("pol", 1, 1)])["pol"]) is None

    def alter(name: str, value: str, op: AlterConfigOpType):
        resource = ConfigResource(
            ResourceType.TOPIC, "pol", incremental_configs=[ConfigEntry(name, value, incremental_operation=op)]
        )
        (future,) = admin.incremental_alter_configs([resource]).values()
        return _error(future)

    assert alter("cleanup.policy", "compact", AlterConfigOpType.APPEND) is None
    assert _described(txlog_server, "pol")["configs"] == {"cleanup.policy": "compact,delete"}
    assert alter("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT) is None
    assert _described(txlog_server, "pol")["configs"] == {"cleanup.policy": "compact"}
    assert _described_types(txlog_server, "pol")["cleanup.policy"] == ("compact", 7)
    assert alter("min.cleanable.dirty.ratio", "1.5", AlterConfigOpType.SET).code() == KafkaError.INVALID_CONFIG
    assert alter("min.cleanable.dirty.ratio", "0.25", AlterConfigOpType.SET) is None
    assert _described(txlog_server, "pol")["configs"] == {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0.25,
    }
    assert alter("delete.retention.ms", "1", AlterConfigOpType.APPEND).code() == KafkaError.INVALID_CONFIG
    # subtracting the last item leaves Kafka 4.x's empty policy: infinite retention
    assert alter("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT) is None
    assert _described_types(txlog_server, "pol")["cleanup.policy"] == ("", 7)


# ---- kafka-python -------------------------------------------------------------------------------------


def test_kafka_python_creates_describes_and_replaces_configs(txlog_server):
    admin = KafkaAdminClient(bootstrap_servers=txlog_server.bootstrap)
    try:
        admin.create_topics([KpNewTopic("kp", 2, 1, topic_configs={"retention.ms": "7000", "segment.ms": "9000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic("kp", 2, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([KpNewTopic("kp3", 1, 3)])
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([KpNewTopic("kpbad", 1, 1, topic_configs={"compression.type": "lz4"})])
        assert _described(txlog_server, "kp")["configs"] == {"retention.ms": 7000, "segment.ms": 9000}

        # Forced to AlterConfigs (33), kafka-python sends every override it wants kept along.
        resource = KpConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "8000"})
        assert admin.alter_configs([resource], incremental=False) == {"topic": {"kp": "OK"}}
        assert _described(txlog_server, "kp")["configs"] == {"retention.ms": 8000, "segment.ms": 9000}
        # ...and by default IncrementalAlterConfigs (44).
        resource = KpConfigResource(ConfigResourceType.TOPIC, "kp", configs={"segment.ms": ("DELETE", None)})
        assert admin.alter_configs([resource]) == {"topic": {"kp": "OK"}}
        assert _described(txlog_server, "kp")["configs"] == {"retention.ms": 8000}

        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "kp")])
        retention = described["topic"]["kp"]["retention.ms"]
        assert (retention["value"], retention["config_source"]) == ("8000", "DYNAMIC_TOPIC_CONFIG")
    finally:
        admin.close()


def test_kafka_python_describes_the_log_dir(txlog_server):
    txlog("topics", "create", "sized", "--partitions", "2", data_dir=txlog_server.data_dir)
    txlog("produce", "-t", "sized", "--partition", "1", input="a-value\n", data_dir=txlog_server.data_dir)
    admin = KafkaAdminClient(bootstrap_servers=txlog_server.bootstrap)
    try:
        ((broker,),) = [answer["log_dirs"] for answer in admin.describe_log_dirs({"sized": [0, 1]})]
    finally:
        admin.close()
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in broker["topics"] for p in t["partitions"]}
    assert sizes[("sized", 0)] == 0 < sizes[("sized", 1)]
    assert broker["log_dir"] == os.path.abspath(txlog_server.data_dir)


# ---- Kafka's own tools --------------------------------------------------------------------------------


def test_kafka_topics_tool_creates_lists_describes_and_deletes(txlog_server):
    server = ["--bootstrap-server", txlog_server.bootstrap]
    run_tool(
        TOPICS_TOOL, *server, "--create", "--topic", "tool-made", "--partitions", "2", "--config", "retention.ms=6000"
    )
    assert _described(txlog_server, "tool-made")["configs"] == {"retention.ms": 6000}
    assert "tool-made" in run_tool(TOPICS_TOOL, *server, "--list").stdout.split()

    described = run_tool(TOPICS_TOOL, *server, "--describe", "--topic", "tool-made").stdout
    assert "PartitionCount: 2" in described and "retention.ms=6000" in described, described

    refused = run_tool(TOPICS_TOOL, *server, "--create", "--topic", "tool-made", check=False)
    assert refused.returncode != 0 and "already exists" in refused.stdout + refused.stderr

    run_tool(TOPICS_TOOL, *server, "--delete", "--topic", "tool-made")
    assert _described(txlog_server, "tool-made") is None


def test_kafka_configs_tool_describes_and_alters_topic_configs(txlog_server):
    server = ["--bootstrap-server", txlog_server.bootstrap]
    txlog("topics", "create", "cfg-tool", "--config", "segment.bytes=1048576", data_dir=txlog_server.data_dir)
    entity = ["--entity-type", "topics", "--entity-name", "cfg-tool"]

    described = run_tool(CONFIGS_TOOL, *server, *entity, "--describe").stdout
    assert "segment.bytes=1048576" in described, described

    run_tool(CONFIGS_TOOL, *server, *entity, "--alter", "--add-config", "retention.ms=4000")
    run_tool(CONFIGS_TOOL, *server, *entity, "--alter", "--delete-config", "segment.bytes")
    assert _described(txlog_server, "cfg-tool")["configs"] == {"retention.ms": 4000}

    described = run_tool(CONFIGS_TOOL, *server, *entity, "--describe").stdout
    assert "retention.ms=4000" in described and "segment.bytes" not in described, described

    refused = run_tool(CONFIGS_TOOL, *server, *entity, "--alter", "--add-config", "compression.type=zstd", check=False)
    assert refused.returncode != 0 and "compression.type" in refused.stdout + refused.stderr


def test_kafka_topics_tool_manual_assignments_must_name_only_this_node(txlog_server):
    server = ["--bootstrap-server", txlog_server.bootstrap]
    # --replica-assignment lists partitions separated by commas, each partition's brokers by colons.
    run_tool(TOPICS_TOOL, *server, "--create", "--topic", "placed", "--replica-assignment", "1,1")
    assert _described(txlog_server, "placed")["partitionCount"] == 2
    for assignment in ("2", "1,2"):  # (a repeated broker the tool itself refuses)
        refused = run_tool(
            TOPICS_TOOL, *server, "--create", "--topic", "misplaced", "--replica-assignment", assignment, check=False
        )
        assert refused.returncode != 0 and "InvalidReplicaAssignment" in refused.stdout + refused.stderr, assignment
    assert _described(txlog_server, "misplaced") is None
