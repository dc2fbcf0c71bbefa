"""Where replicas live: ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
AlterReplicaLogDirs, DescribeQuorum, as a cluster of one node answers them.

Every partition has one replica, on this node, which leads it, in the store directory, the one
log dir. So these APIs have nothing to change, and each answers what a Kafka broker answers
when there is nothing to do (docs/serve.md §7): every leader is already the preferred one
(ELECTION_NOT_NEEDED), no reassignment is ever in progress, a reassignment to this node alone
is already done, and a move to the store directory is a move to where the replica is. What a
one-node cluster cannot do (another broker, another directory) is refused with Kafka's code
for that request. Nothing here writes.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from storage.errors import KafkaError
from txlog.server.apis import api
from txlog.server.errors import NONE, error_code, error_message
from txlog.server.handlers.topics import _check_replicas
from txlog.server.request_context import RequestContext

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types (Kafka's ElectionType)
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def _unknown(ctx: RequestContext, topic: str, partition: int) -> str | None:
    """Kafka's message for a partition the store does not have, None when it has it."""
    store = ctx.broker.store
    if not store.has_topic(topic):
        return f"No such topic as {topic}"
    if partition not in store.partitions(topic):
        return f"No such partition as {topic}-{partition}"
    return None


# ---- ElectLeaders -------------------------------------------------------------------------------------


@api(43, 0, 2)
def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    """The leader of every partition is its one replica, the preferred one: no election is ever needed.

    As Kafka's controller: each named partition gets ELECTION_NOT_NEEDED (or
    UNKNOWN_TOPIC_OR_PARTITION); with no partitions named (null), every topic is listed with
    only the partitions whose election was needed, here none. An unknown election type is
    INVALID_REQUEST for the request.
    """
    election_type = getattr(request, "election_type", PREFERRED)  # v1+; v0 only asks for the preferred leader
    if election_type not in (PREFERRED, UNCLEAN):
        return _elect_refused(ctx, request, f"Unknown election type {election_type}")
    store = ctx.broker.store
    if request.topic_partitions is None:
        results = tuple(
            ctx.make("ReplicaElectionResult", topic=name, partition_result=()) for name in store.list_topics()
        )
    else:
        results = tuple(
            ctx.make(
                "ReplicaElectionResult",
                topic=t.topic,
                partition_result=tuple(_election(ctx, t.topic, p) for p in t.partitions),
            )
            for t in request.topic_partitions
        )
    return ctx.respond(throttle_time=0, error_code=NONE, replica_election_results=results)


def _election(ctx: RequestContext, topic: str, partition: int) -> Any:
    unknown = _unknown(ctx, topic, partition)
    code = ErrorCode.unknown_topic_or_partition if unknown else ErrorCode.election_not_needed
    return ctx.make(
        "PartitionResult",
        partition_id=partition,
        error_code=code,
        error_message=unknown or ELECTION_NOT_NEEDED_MESSAGE,
    )


def _elect_refused(ctx: RequestContext, request: Any, message: str) -> Any:
    code = ErrorCode.invalid_request
    results = tuple(
        ctx.make(
            "ReplicaElectionResult",
            topic=t.topic,
            partition_result=tuple(
                ctx.make("PartitionResult", partition_id=p, error_code=code, error_message=message)
                for p in t.partitions
            ),
        )
        for t in request.topic_partitions or ()
    )
    return ctx.respond(throttle_time=0, error_code=code, replica_election_results=results)


# ---- AlterPartitionReassignments, ListPartitionReassignments ------------------------------------------


@api(45, 0, 1)
def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    """A partition's replicas can only be this node alone, which they already are.

    Target [this node]: done at once (NONE), as Kafka answers a reassignment to the current
    replicas. Another broker, none or a repeated one: INVALID_REPLICA_ASSIGNMENT. A
    cancellation (null replicas): NO_REASSIGNMENT_IN_PROGRESS, since none ever is.
    """
    topics = tuple(
        ctx.make(
            "ReassignableTopicResponse",
            name=t.name,
            partitions=tuple(_reassign(ctx, t.name, p) for p in t.partitions),
        )
        for t in request.topics
    )
    return ctx.respond(
        throttle_time=0,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        error_code=NONE,
        error_message=None,
        responses=topics,
    )


def _reassign(ctx: RequestContext, topic: str, partition: Any) -> Any:
    index = partition.partition_index
    code: int = NONE
    message = _unknown(ctx, topic, index)
    if message is not None:
        code = ErrorCode.unknown_topic_or_partition
    elif partition.replicas is None:
        code, message = ErrorCode.no_reassignment_in_progress, f"No ongoing reassignment for {topic}-{index}."
    else:
        try:
            _check_replicas(ctx, list(partition.replicas))
        except KafkaError as exc:
            code, message = error_code(exc), error_message(exc)
    return ctx.make("ReassignablePartitionResponse", partition_index=index, error_code=code, error_message=message)


@api(46, 0, 0)
def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    """No reassignment is ever in progress: Kafka lists only ongoing ones, so the list is empty."""
    return ctx.respond(throttle_time=0, error_code=NONE, error_message=None, topics=())


# ---- AlterReplicaLogDirs ------------------------------------------------------------------------------


@api(34, 1, 2)
def alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """Moving a replica to the store directory is moving it where it is: NONE (Kafka's no-op).

    Any other path is not a log dir of this broker: LOG_DIR_NOT_FOUND. A partition the store
    does not have: REPLICA_NOT_AVAILABLE, as Kafka's ReplicaManager answers for a replica it
    does not host.
    """
    root = os.path.abspath(ctx.broker.store.root)
    results: dict[str, list[Any]] = {}
    for log_dir in request.dirs:
        known_dir = os.path.abspath(log_dir.path) == root
        for topic in log_dir.topics:
            for index in topic.partitions:
                code = ErrorCode.log_dir_not_found
                if known_dir:
                    missing = _unknown(ctx, topic.name, index) is not None
                    code = ErrorCode.replica_not_available if missing else ErrorCode.none
                results.setdefault(topic.name, []).append(
                    ctx.make("AlterReplicaLogDirPartitionResult", partition_index=index, error_code=code)
                )
    topics = tuple(
        ctx.make("AlterReplicaLogDirTopicResult", topic_name=name, partitions=tuple(partitions))
        for name, partitions in results.items()
    )
    return ctx.respond(throttle_time=0, results=topics)


# ---- DescribeQuorum -----------------------------------------------------------------------------------

METADATA_TOPIC = "__cluster_metadata"


@api(55, 0, 2)
def describe_quorum(ctx: RequestContext, request: Any) -> Any:
    """The KRaft quorum of `__cluster_metadata`, as a one-node cluster has it: this node alone.

    The node is the only voter, has led the quorum since it started (epoch 0) and has no
    metadata log: topics and configs live in the store's `txlog.json`, not in records, so the
    high watermark and the voter's log end offset are 0 and it was never fetched from (-1).
    Any other topic or partition is UNKNOWN_TOPIC_OR_PARTITION, as Kafka's controller answers.
    """
    node = ctx.broker.node_id
    topics = tuple(
        ctx.make(
            "TopicData",
            topic_name=topic.topic_name,
            partitions=tuple(
                _quorum_partition(ctx, topic.topic_name, p.partition_index, node) for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    nodes = (ctx.make("Node", node_id=node, listeners=_listeners(ctx)),) if ctx.version >= 2 else ()
    return ctx.respond(error_code=NONE, error_message=None, topics=topics, nodes=nodes)


def _quorum_partition(ctx: RequestContext, topic: str, partition: int, node: int) -> Any:
    if (topic, partition) != (METADATA_TOPIC, 0):
        return ctx.make(
            "PartitionData",
            partition_index=partition,
            error_code=ErrorCode.unknown_topic_or_partition,
            error_message=f"{topic}-{partition} is not the metadata partition {METADATA_TOPIC}-0",
            leader_id=-1,
            leader_epoch=-1,
            high_watermark=-1,
            current_voters=(),
            observers=(),
        )
    voter = ctx.make(
        "ReplicaState",
        replica_id=node,
        replica_directory_id=uuid.UUID(int=0),
        log_end_offset=0,
        last_fetch_timestamp=-1,
        last_caught_up_timestamp=-1,
    )
    return ctx.make(
        "PartitionData",
        partition_index=partition,
        error_code=NONE,
        error_message=None,
        leader_id=node,
        leader_epoch=0,
        high_watermark=0,
        current_voters=(voter,),
        observers=(),
    )


def _listeners(ctx: RequestContext) -> tuple[Any, ...]:
    endpoint = ctx.connection.listener
    return (ctx.make("Listener", name=ctx.connection.security_protocol, host=endpoint.host, port=endpoint.port),)
