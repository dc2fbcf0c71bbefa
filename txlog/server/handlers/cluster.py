"""The cluster a client discovers: ApiVersions, Metadata, FindCoordinator, DescribeCluster.

A txlog server is a cluster of one node (`node.id`, 1 unless `--config` sets it): it leads
every partition, with itself as the only replica and in-sync replica at leader epoch 0, and it
coordinates every group and transactional id. Metadata answers with the address of the listener the client connected
to, so a client reaching the server through any listener is sent back to that one.
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from storage.errors import InvalidTopicError, KafkaError, TopicAlreadyExistsError
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, validate_topic_name
from txlog.server import topic_ids, wire
from txlog.server.apis import Api, api
from txlog.server.errors import error_code
from txlog.server.request_context import RequestContext

NONE = 0
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's "not requested" value of the authorized-operations fields
ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

# Kafka's finalized features that change what a client does (KIP-584): transaction.version 2 is
# KIP-890's protocol (the epoch bumps at every EndTxn, partitions join on Produce), group.version
# 1 is KIP-848's ConsumerGroupHeartbeat. Clients that know neither keep working as before.
FEATURES = {"transaction.version": (0, 2), "group.version": (0, 1)}
FINALIZED_FEATURES_EPOCH = 1

GROUP_KEY, TRANSACTION_KEY = 0, 1


# ---- ApiVersions --------------------------------------------------------------------------------------


def api_version_entries(response_module: types.ModuleType, apis: Mapping[int, Api]) -> tuple[Any, ...]:
    """The served APIs with their version ranges, as ApiVersions lists them (also its v0 error answer)."""
    entry = response_module.ApiVersion
    return tuple(
        wire.make(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in sorted(apis.values(), key=lambda a: a.key)
    )


@api(18, 0, 4, before_auth=True)
def api_versions(ctx: RequestContext, request: Any) -> Any:
    from txlog.server.apis import APIS

    module = ctx.message.response_module
    if ctx.version < 3:  # features arrived in v3 (KIP-584)
        return ctx.respond(error_code=NONE, api_keys=api_version_entries(module, APIS), throttle_time=0)
    supported = [
        ctx.make("SupportedFeatureKey", name=name, min_version=low, max_version=high)
        for name, (low, high) in FEATURES.items()
        if ctx.version >= 4 or low > 0  # v0-v3 omit features whose minimum is 0 (ApiVersionsResponse.json)
    ]
    finalized = [
        ctx.make("FinalizedFeatureKey", name=name, min_version_level=high, max_version_level=high)
        for name, (_, high) in FEATURES.items()
    ]
    return ctx.respond(
        error_code=NONE,
        api_keys=api_version_entries(module, APIS),
        throttle_time=0,
        supported_features=tuple(supported),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=tuple(finalized),
        zk_migration_ready=False,
    )


# ---- Metadata -----------------------------------------------------------------------------------------


@api(3, 0, 13)
def metadata(ctx: RequestContext, request: Any) -> Any:
    store = ctx.broker.store
    endpoint = ctx.connection.listener
    if request.topics is None or (ctx.version == 0 and not request.topics):
        wanted = [(name, None) for name in store.list_topics()]
        auto_create = False
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
        auto_create = getattr(request, "allow_auto_topic_creation", True) and ctx.broker.config_bool(
            "auto.create.topics.enable"
        )
    topics = tuple(_topic_metadata(ctx, name, topic_id, auto_create) for name, topic_id in wanted)
    broker = ctx.make(
        "MetadataResponseBroker", node_id=ctx.broker.node_id, host=endpoint.host, port=endpoint.port, rack=None
    )
    return ctx.respond(
        throttle_time=0,
        brokers=(broker,),
        cluster_id=ctx.broker.cluster_id,
        controller_id=ctx.broker.node_id,
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=NONE,
    )


def _topic_metadata(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, auto_create: bool) -> Any:
    store = ctx.broker.store
    if name is None:
        found = next((n for n in store.list_topics() if _topic_uuid(ctx, n) == topic_id), None)
        if found is None:
            return _topic_error(ctx, None, UNKNOWN_TOPIC_ID, topic_id)
        name = found
    if not store.has_topic(name) and auto_create and name not in INTERNAL_TOPICS:
        try:
            store.create_topic(name, ctx.broker.config_int("num.partitions"))
        except TopicAlreadyExistsError:
            pass  # another process created it meanwhile
        except InvalidTopicError:
            return _topic_error(ctx, name, INVALID_TOPIC_EXCEPTION)
        except KafkaError as exc:
            return _topic_error(ctx, name, error_code(exc))
    if not store.has_topic(name):
        return _topic_error(ctx, name, UNKNOWN_TOPIC_OR_PARTITION)
    partitions = tuple(_one_replica(ctx, "MetadataResponsePartition", p) for p in store.partitions(name))
    return ctx.make(
        "MetadataResponseTopic",
        error_code=NONE,
        name=name,
        topic_id=_topic_uuid(ctx, name),
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _topic_error(ctx: RequestContext, name: str | None, code: int, topic_id: uuid.UUID | None = None) -> Any:
    if name is None and ctx.version < 12:
        name = ""  # v10 and v11 requests may name a topic by id alone, but their answers cannot carry a null name
    return ctx.make(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id or ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _topic_uuid(ctx: RequestContext, name: str) -> uuid.UUID:
    """The topic's id: its partition.metadata's, or the one txlog derives (`txlog.server.topic_ids`)."""
    return topic_ids.topic_id(ctx.broker.store, ctx.broker.cluster_id, name)


# ---- DescribeTopicPartitions ----------------------------------------------------------------------------


@api(75, 0, 0)
def describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    """Metadata's topics, paged (KIP-966): topics by name from the cursor, at most
    `response_partition_limit` partitions (capped by `max.request.partition.size.limit`), and a
    cursor to the next partition when the limit stops the answer early (Kafka's KRaftMetadataCache)."""
    cursor = request.cursor
    named = [t.name for t in request.topics]
    first = cursor.topic_name if cursor is not None else ""
    if cursor is not None and ((named and cursor.topic_name not in named) or cursor.partition_index < 0):
        return ctx.respond(
            throttle_time=0,
            topics=tuple(_described_topic(ctx, name, INVALID_REQUEST) for name in named),
            next_cursor=None,
        )
    names = sorted({n for n in (named or ctx.broker.store.list_topics()) if n >= first})
    remaining = min(request.response_partition_limit, ctx.broker.config_int("max.request.partition.size.limit"))
    topics: list[Any] = []
    next_cursor = None
    for name in names:
        if remaining <= 0:  # the previous topic filled the page: the next one starts the next page
            next_cursor = ctx.make("Cursor", topic_name=name, partition_index=0)
            break
        if not ctx.broker.store.has_topic(name):
            if named:  # a listing of every topic leaves out what vanished meanwhile
                topics.append(_described_topic(ctx, name, _missing_topic_code(name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions = [p for p in ctx.broker.store.partitions(name) if p >= start]
        page = partitions[:remaining]
        if len(partitions) > len(page):
            next_cursor = ctx.make("Cursor", topic_name=name, partition_index=partitions[len(page)])
        topics.append(_described_topic(ctx, name, NONE, page))
        remaining -= len(page)
        if next_cursor is not None:
            break
    return ctx.respond(throttle_time=0, topics=tuple(topics), next_cursor=next_cursor)


def _missing_topic_code(name: str) -> int:
    try:
        validate_topic_name(name, allow_internal=True)
    except InvalidTopicError:
        return INVALID_TOPIC_EXCEPTION
    return UNKNOWN_TOPIC_OR_PARTITION


def _one_replica(ctx: RequestContext, class_name: str, partition: int) -> Any:
    """A partition as Metadata and DescribeTopicPartitions show it: its one replica, on this node, leads.

    Its leader epoch stays 0: no election ever happens, as OffsetForLeaderEpoch in docs/serve.md says.
    """
    node = ctx.broker.node_id
    return ctx.make(
        class_name,
        error_code=NONE,
        partition_index=partition,
        leader_id=node,
        leader_epoch=0,
        replica_nodes=(node,),
        isr_nodes=(node,),
        eligible_leader_replicas=(),
        last_known_elr=(),
        offline_replicas=(),
    )


def _described_topic(ctx: RequestContext, name: str, code: int, partitions: Sequence[int] = ()) -> Any:
    return ctx.make(
        "DescribeTopicPartitionsResponseTopic",
        error_code=code,
        name=name,
        topic_id=_topic_uuid(ctx, name) if code == NONE else ZERO_UUID,
        is_internal=name in INTERNAL_TOPICS,
        partitions=tuple(_one_replica(ctx, "DescribeTopicPartitionsResponsePartition", p) for p in partitions),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


# ---- FindCoordinator ----------------------------------------------------------------------------------


@api(10, 0, 6)
def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 4:
        coordinators = tuple(
            ctx.make("Coordinator", key=key, **_coordinator(ctx, request.key_type, key))
            for key in request.coordinator_keys
        )
        return ctx.respond(throttle_time=0, coordinators=coordinators)
    key_type = getattr(request, "key_type", GROUP_KEY)
    return ctx.respond(throttle_time=0, **_coordinator(ctx, key_type, request.key))


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    """This node for a group or transactional id; INVALID_REQUEST for an empty key or another key type."""
    endpoint = ctx.connection.listener
    if key_type not in (GROUP_KEY, TRANSACTION_KEY) or not key:
        what = "an empty key" if key_type in (GROUP_KEY, TRANSACTION_KEY) else f"key type {key_type}"
        return dict(
            error_code=INVALID_REQUEST, error_message=f"no coordinator for {what}", node_id=-1, host="", port=-1
        )
    return dict(error_code=NONE, error_message=None, node_id=ctx.broker.node_id, host=endpoint.host, port=endpoint.port)


# ---- DescribeCluster ----------------------------------------------------------------------------------


@api(60, 0, 2)
def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    endpoint = ctx.connection.listener
    broker = ctx.make(
        "DescribeClusterBroker",
        broker_id=ctx.broker.node_id,
        host=endpoint.host,
        port=endpoint.port,
        rack=None,
        is_fenced=False,
    )
    return ctx.respond(
        throttle_time=0,
        error_code=NONE,
        error_message=None,
        endpoint_type=getattr(request, "endpoint_type", 1),
        cluster_id=ctx.broker.cluster_id,
        controller_id=ctx.broker.node_id,
        brokers=(broker,),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
