"""Topics and their configs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs.

Every change goes through the store's own topic functions (`Store.create_topic`,
`delete_topic`, `create_partitions`, `alter_topic_config`), so a topic made over the wire is
the topic `txlog topics create` makes, checked by the same rules (names, partition counts,
config names and ranges: storage/config.py), and `validate_only` is the store's `dry_run`.
What this module adds is what only a broker says: the one-node cluster's replication rules,
config sources and synonyms as DescribeConfigs reports them, and one error per topic or
resource, never per request (docs/serve.md §7).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from storage.config import (
    CONFIG_NAMES,
    ConfigType,
    ConfigValue,
    TopicConfig,
    config_type,
    format_config_value,
    validate_overrides,
)
from storage.errors import InvalidConfigurationError, InvalidRequestError, KafkaError
from storage.topic_name import INTERNAL_TOPICS
from txlog.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError
from txlog.server.apis import api
from txlog.server.broker import DEFAULT_CONFIGS, REPLICATION_FACTOR_CAP, Broker
from txlog.server.errors import NONE, error_code, error_message
from txlog.server.handlers.cluster import ZERO_UUID, _topic_uuid
from txlog.server.request_context import RequestContext

UNKNOWN_TOPIC_ID = 100

# DescribeConfigs resource types (Kafka's ConfigResource.Type).
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 16, 32
# The types ListConfigResources v1 lists (Kafka's supported set); this server has configs of the first two only.
LISTABLE_RESOURCES = (TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE)
UNSUPPORTED_VERSION = 35
# Config sources (DescribeConfigsResponse.json) and the types a client shows (ConfigEntry.ConfigType).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7
# The store's config types as DescribeConfigs numbers them.
CONFIG_TYPES = {
    ConfigType.INT: TYPE_INT,
    ConfigType.LONG: TYPE_LONG,
    ConfigType.DOUBLE: TYPE_DOUBLE,
    ConfigType.LIST: TYPE_LIST,
}
# The listener configs a broker reports: where it listens and what it tells clients (the same here).
LISTENER_CONFIGS = ("advertised.listeners", "listeners")
# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATION_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# The broker config a topic config defaults from, as Kafka lists it among the synonyms
# (LogConfig's synonym table). segment.ms and retention.ms are absent because Kafka's own
# broker synonyms (log.roll.ms, log.retention.ms) are unset by default, so it lists none;
# max.producer.ids is txlog's own.
BROKER_SYNONYMS = {
    "segment.bytes": "log.segment.bytes",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "producer.id.expiration.ms": "producer.id.expiration.ms",
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
}


def _per_item(fn: Callable[[], Any]) -> tuple[int, str | None, Any]:
    """(error code, message, fn's result) of one topic's or resource's work: its error stays its own."""
    try:
        return NONE, None, fn()
    except KafkaError as exc:
        return error_code(exc), error_message(exc), None


def _duplicates(names: Iterable[str | None]) -> set[str]:
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        if name is not None:
            (twice if name in seen else seen).add(name)
    return twice


# ---- CreateTopics -------------------------------------------------------------------------------------


@api(19, 2, 7)
def create_topics(ctx: RequestContext, request: Any) -> Any:
    duplicated = _duplicates(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        code: int
        message: str | None
        if topic.name in duplicated:
            code, message, made = InvalidRequestError.code, "Duplicate topic name.", None
        else:
            code, message, made = _per_item(partial(_create_topic, ctx, topic, request.validate_only))
        results.append(_created(ctx, topic.name, code, message, made))
    return ctx.respond(throttle_time=0, topics=tuple(results))


def _create_topic(ctx: RequestContext, topic: Any, validate_only: bool) -> tuple[int, dict[str, ConfigValue]]:
    """Create (or, validating only, check) one topic; returns its partition count and overrides."""
    if topic.assignments:
        partitions = _assigned_partition_count(ctx, topic)
    else:
        _check_replication_factor(topic.replication_factor, ctx.broker.config_bool(REPLICATION_FACTOR_CAP))
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = ctx.broker.config_int("num.partitions")
    configs = {c.name: c.value for c in topic.configs}
    _check_config_values(configs)
    ctx.broker.store.create_topic(topic.name, partitions, configs, dry_run=validate_only)
    if topic.replication_factor > 1 and not validate_only:
        ctx.log(
            f"topic {topic.name} created with replication factor 1, not the {topic.replication_factor} asked for "
            f"({REPLICATION_FACTOR_CAP}=true): txlog serve is one node"
        )
    return partitions, validate_overrides(configs)


def _check_replication_factor(factor: int, capped: bool) -> None:
    """One node holds one replica: 1 or -1 (the default, 1) are the factors it can give; a larger
    one only when the operator asked for it to be capped at 1 (REPLICATION_FACTOR_CAP)."""
    if factor < -1 or factor == 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0, or -1 to use the default value.")
    if factor > 1 and not capped:
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {factor} time(s): "
            f"txlog serve is a cluster of one node, so the replication factor is 1 "
            f"(unless started with --config {REPLICATION_FACTOR_CAP}=true)."
        )


def _assigned_partition_count(ctx: RequestContext, topic: Any) -> int:
    """A manual assignment is honoured when it places partitions 0..n-1 each on this node alone."""
    if topic.replication_factor != -1 or topic.num_partitions != -1:
        field = "replication factor" if topic.replication_factor != -1 else "numPartitions"
        raise InvalidRequestError(f"A manual partition assignment was specified, but {field} was not set to -1.")
    indexes = [a.partition_index for a in topic.assignments]
    for assignment in topic.assignments:
        _check_replicas(ctx, list(assignment.broker_ids))
    if sorted(indexes) != list(range(len(indexes))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    return len(indexes)


def _check_replicas(ctx: RequestContext, broker_ids: list[int]) -> None:
    node = ctx.broker.node_id
    if not broker_ids:
        raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
    for broker_id in broker_ids:
        if broker_id != node:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered "
                f"(txlog serve is the one node {node})."
            )
    if len(broker_ids) > 1:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes the broker {node} more than once."
        )


def _check_config_values(configs: dict[str, str | None]) -> None:
    """A config set to null is no value (Kafka refuses it the same way); the store checks the rest."""
    for name, value in configs.items():
        if value is None:
            raise InvalidConfigurationError(f"Null value not supported for topic config: {name}")


def _created(
    ctx: RequestContext, name: str, code: int, message: str | None, made: tuple[int, dict[str, ConfigValue]] | None
) -> Any:
    """One CreateTopics result; from v5 a created (or validated) topic's carries its partitions and configs."""
    if code != NONE or made is None:
        return ctx.make(
            "CreatableTopicResult",
            name=name,
            topic_id=ZERO_UUID,
            error_code=code,
            error_message=message,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
    partitions, overrides = made
    store = ctx.broker.store
    configs = _creation_configs(ctx, overrides) if ctx.version >= 5 else None
    return ctx.make(
        "CreatableTopicResult",
        name=name,
        topic_id=_topic_uuid(ctx, name) if store.has_topic(name) else ZERO_UUID,
        error_code=NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=1,
        configs=configs,
    )


def _creation_configs(ctx: RequestContext, overrides: dict[str, ConfigValue]) -> tuple[Any, ...]:
    """The new topic's configs as DescribeConfigs would list them (CreateTopics v5+, KIP-525)."""
    return tuple(
        ctx.make(
            "CreatableTopicConfigs",
            name=entry.name,
            value=entry.value,
            read_only=False,
            config_source=entry.source,
            is_sensitive=False,
        )
        for entry in _topic_entries(overrides, None)
    )


# ---- DeleteTopics -------------------------------------------------------------------------------------


@api(20, 1, 6)
def delete_topics(ctx: RequestContext, request: Any) -> Any:
    # v0-v5 name topics in `topic_names`; v6 lists {name, topic_id} pairs with either one set.
    if hasattr(request, "topic_names"):
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    duplicated = _duplicates(name for name, _ in wanted)
    results = tuple(_delete_one(ctx, name, topic_id, name in duplicated) for name, topic_id in wanted)
    return ctx.respond(throttle_time=0, responses=results)


def _delete_one(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, duplicated: bool) -> Any:
    """One DeleteTopics result: a topic named by name or (v6) by id, not both (Kafka's ControllerApis rules)."""
    if duplicated:
        return _deleted(ctx, name, topic_id, InvalidRequestError.code, "Duplicate topic name.")
    if name is not None and topic_id not in (None, ZERO_UUID):
        return _deleted(
            ctx, name, topic_id, InvalidRequestError.code, "You may not specify both topic name and topic id."
        )
    if name is None:
        name = _name_of(ctx, topic_id)
        if name is None:
            return _deleted(ctx, None, topic_id, UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}")
    code, message, _ = _per_item(partial(_delete_topic, ctx, name))
    return _deleted(ctx, name, topic_id, code, message)


def _name_of(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    """The topic with this id (a Kafka-written topic's recorded one, a txlog topic's derived one: topic_ids.py)."""
    if topic_id in (None, ZERO_UUID):
        return None
    return next((n for n in ctx.broker.store.list_topics() if _topic_uuid(ctx, n) == topic_id), None)


def _delete_topic(ctx: RequestContext, name: str) -> None:
    _refuse_internal(name, "deleted")
    ctx.broker.store.delete_topic(name)


def _refuse_internal(name: str, what: str) -> None:
    """The coordinators keep their state in the internal topics and find a key's partition by the
    topic's partition count: deleting or growing one would lose or misplace that state."""
    if name in INTERNAL_TOPICS:
        raise InvalidRequestError(f"The internal topic {name} holds txlog's coordinator state and cannot be {what}.")


def _deleted(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, code: int, message: str | None) -> Any:
    return ctx.make(
        "DeletableTopicResult", name=name, topic_id=topic_id or ZERO_UUID, error_code=code, error_message=message
    )


# ---- CreatePartitions ---------------------------------------------------------------------------------


@api(37, 0, 3)
def create_partitions(ctx: RequestContext, request: Any) -> Any:
    duplicated = _duplicates(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        code: int
        message: str | None
        if topic.name in duplicated:
            code, message = InvalidRequestError.code, "Duplicate topic name."
        else:
            code, message, _ = _per_item(partial(_grow, ctx, topic, request.validate_only))
        results.append(ctx.make("CreatePartitionsTopicResult", name=topic.name, error_code=code, error_message=message))
    return ctx.respond(throttle_time=0, results=tuple(results))


def _grow(ctx: RequestContext, topic: Any, validate_only: bool) -> None:
    _refuse_internal(topic.name, "given more partitions")
    store = ctx.broker.store
    if topic.assignments is not None:
        added = topic.count - store.partition_count(topic.name)
        if len(topic.assignments) != added:
            raise InvalidReplicaAssignmentError(
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(topic.assignments)} assignment(s) were specified."
            )
        for assignment in topic.assignments:
            _check_replicas(ctx, list(assignment.broker_ids))
    store.create_partitions(topic.name, topic.count, dry_run=validate_only)


# ---- DescribeConfigs ----------------------------------------------------------------------------------


class _Entry:
    """One config as DescribeConfigs reports it, with the synonyms Kafka lists most specific first."""

    __slots__ = ("name", "value", "source", "config_type", "read_only", "synonyms")

    def __init__(self, name: str, value: str, source: int, config_type: int, read_only: bool, synonyms: list) -> None:
        self.name, self.value, self.source = name, value, source
        self.config_type, self.read_only, self.synonyms = config_type, read_only, synonyms


def _topic_entries(overrides: dict[str, ConfigValue], keys: Iterable[str] | None) -> list[_Entry]:
    """Every topic config the store knows (or those of `keys`): the override, else the default."""
    effective = TopicConfig.from_overrides(overrides).to_dict()
    defaults = TopicConfig().to_dict()
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in CONFIG_NAMES:
        if wanted is not None and name not in wanted:
            continue
        synonyms = []
        if name in overrides:
            synonyms.append((name, format_config_value(overrides[name]), DYNAMIC_TOPIC_CONFIG))
        if name in BROKER_SYNONYMS:
            synonyms.append((BROKER_SYNONYMS[name], format_config_value(defaults[name]), DEFAULT_CONFIG))
        source = DYNAMIC_TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG
        kind = CONFIG_TYPES[config_type(name)]
        entries.append(_Entry(name, format_config_value(effective[name]), source, kind, False, synonyms))
    return entries


def _broker_entries(broker: Broker, keys: Iterable[str] | None) -> list[_Entry]:
    """The broker configs `txlog serve` reads: read-only, set by `--config` (static) or Kafka's default;
    and its listeners, which `--listen` sets (static; Kafka lists both listener configs as LIST)."""
    wanted = set(keys) if keys is not None else None
    entries = []
    listeners = ",".join(broker.listeners)
    for name in LISTENER_CONFIGS:
        if wanted is None or name in wanted:
            synonyms = [(name, listeners, STATIC_BROKER_CONFIG)]
            entries.append(_Entry(name, listeners, STATIC_BROKER_CONFIG, TYPE_LIST, True, synonyms))
    for name, value in sorted(broker.configs.items()):
        if wanted is not None and name not in wanted:
            continue
        default = DEFAULT_CONFIGS.get(name)
        source = DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG
        synonyms = [(name, value, source)]
        if source == STATIC_BROKER_CONFIG and default is not None:
            synonyms.append((name, default, DEFAULT_CONFIG))
        entries.append(_Entry(name, value, source, _broker_config_type(value), True, synonyms))
    return entries


def _broker_config_type(value: str) -> int:
    if value.lower() in ("true", "false"):
        return TYPE_BOOLEAN
    return TYPE_INT if value.lstrip("-").isdigit() else TYPE_STRING


@api(32, 1, 4)
def describe_configs(ctx: RequestContext, request: Any) -> Any:
    results = []
    for resource in request.resources:
        code, message, entries = _per_item(partial(_describe, ctx, resource))
        configs = tuple(_config_result(ctx, e, request.include_synonyms) for e in entries or ())
        results.append(
            ctx.make(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return ctx.respond(throttle_time=0, results=tuple(results))


def _describe(ctx: RequestContext, resource: Any) -> list[_Entry]:
    keys = resource.configuration_keys
    if resource.resource_type == TOPIC_RESOURCE:
        return _topic_entries(ctx.broker.store.topic_overrides(resource.resource_name), keys)
    if resource.resource_type == BROKER_RESOURCE:
        _check_broker_name(ctx, resource.resource_name)
        return _broker_entries(ctx.broker, keys)
    raise InvalidRequestError(f"txlog serve has no configs of resource type {resource.resource_type}")


def _check_broker_name(ctx: RequestContext, name: str) -> None:
    """A broker resource names this node ("" is the cluster-wide default, the same configs here)."""
    if name not in ("", str(ctx.broker.node_id)):
        raise InvalidRequestError(f"Unexpected broker id, expected {ctx.broker.node_id} but received {name}")


def _config_result(ctx: RequestContext, entry: _Entry, include_synonyms: bool) -> Any:
    synonyms = tuple(
        ctx.make("DescribeConfigsSynonym", name=name, value=value, source=source)
        for name, value, source in (entry.synonyms if include_synonyms else ())
    )
    return ctx.make(
        "DescribeConfigsResourceResult",
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=entry.config_type,
        documentation=None,
    )


# ---- ListConfigResources ------------------------------------------------------------------------------


@api(74, 0, 1)
def list_config_resources(ctx: RequestContext, request: Any) -> Any:
    """The resources that have configs here (KIP-1142): every topic and this broker.

    v0 asks for client-metrics subscriptions only, and v1 may ask for broker loggers, client
    metrics or groups: txlog serve has configs of none of those, so they list nothing. No
    types (v1) means every type Kafka supports; another type is UNSUPPORTED_VERSION.
    """
    types = set(getattr(request, "resource_types", ()) or ()) or set(LISTABLE_RESOURCES)
    if ctx.version == 0:
        types = {CLIENT_METRICS_RESOURCE}
    if not types <= set(LISTABLE_RESOURCES):
        return ctx.respond(throttle_time=0, error_code=UNSUPPORTED_VERSION, config_resources=())
    listed: list[tuple[str, int]] = []
    if TOPIC_RESOURCE in types:
        listed += [(name, TOPIC_RESOURCE) for name in sorted(ctx.broker.store.list_topics())]
    if BROKER_RESOURCE in types:
        listed.append((str(ctx.broker.node_id), BROKER_RESOURCE))
    resources = tuple(
        ctx.make("ConfigResource", resource_name=name, resource_type=resource_type) for name, resource_type in listed
    )
    return ctx.respond(throttle_time=0, error_code=NONE, config_resources=resources)


# ---- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------------


@api(33, 0, 2)
def alter_configs(ctx: RequestContext, request: Any) -> Any:
    """The non-incremental form: the resource's overrides become exactly the configs sent."""

    def alter(resource: Any) -> None:
        configs = {c.name: c.value for c in resource.configs}
        _check_config_values(configs)
        _alter(ctx, resource, configs, (), replace=True, validate_only=request.validate_only)

    return _alter_response(ctx, request, alter)


@api(44, 0, 1)
def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    def alter(resource: Any) -> None:
        current: dict[str, Any] = {}
        if resource.resource_type == TOPIC_RESOURCE and ctx.broker.store.has_topic(resource.resource_name):
            overrides = ctx.broker.store.topic_overrides(resource.resource_name)
            current = {k: format_config_value(v) for k, v in TopicConfig.from_overrides(overrides).to_dict().items()}
        sets, deletes = _operations(resource.configs, current)
        _alter(ctx, resource, sets, deletes, replace=False, validate_only=request.validate_only)

    return _alter_response(ctx, request, alter)


def _operations(configs: Iterable[Any], current: Mapping[str, Any]) -> tuple[dict[str, str | None], list[str]]:
    """SET and DELETE, and APPEND/SUBTRACT on a LIST config (cleanup.policy) against its value in force
    (`current`: the override, else the default, as Kafka's ConfigAdminManager takes it)."""
    configs = list(configs)
    duplicated = _duplicates(c.name for c in configs)
    if duplicated:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(sorted(duplicated))}")
    sets: dict[str, str | None] = {}
    deletes = []
    for config in configs:
        if config.config_operation == SET:
            sets[config.name] = config.value
        elif config.config_operation == DELETE:
            # Kafka accepts deleting a name it does not know (nothing to delete), and so does this.
            if config.name in CONFIG_NAMES:
                deletes.append(config.name)
        elif config.config_operation in (APPEND, SUBTRACT):
            if config.name not in CONFIG_NAMES:
                validate_overrides({config.name: 0})  # raises the store's unknown-name error
            operation = OPERATION_NAMES[config.config_operation]
            if config_type(config.name) is not ConfigType.LIST:
                raise InvalidConfigurationError(f"Can't {operation} to key {config.name} because its type is not LIST.")
            # A name appears once per request (duplicates are refused above): the base is the value in force.
            sets[config.name] = _list_operation(
                str(current.get(config.name, "")), config.value, config.config_operation
            )
        else:
            raise InvalidRequestError(f"Unknown config operation {config.config_operation} for {config.name}")
    _check_config_values(sets)
    return sets, deletes


def _list_operation(value: str, items: str | None, operation: int) -> str:
    """APPEND adds the items a LIST lacks, SUBTRACT removes the ones it has (Kafka keeps the list's order)."""
    listed = [v for v in value.split(",") if v]
    given = [v.strip() for v in (items or "").split(",") if v.strip()]
    if operation == APPEND:
        return ",".join(listed + [v for v in given if v not in listed])
    return ",".join(v for v in listed if v not in given)


def _alter(
    ctx: RequestContext,
    resource: Any,
    sets: dict[str, str | None],
    deletes: Iterable[str],
    *,
    replace: bool,
    validate_only: bool,
) -> None:
    if resource.resource_type == BROKER_RESOURCE:
        _check_broker_name(ctx, resource.resource_name)
        raise InvalidRequestError(
            "The broker configs of txlog serve are fixed when it starts (txlog serve --config KEY=VALUE); "
            "they cannot be altered."
        )
    if resource.resource_type != TOPIC_RESOURCE:
        raise InvalidRequestError(f"txlog serve has no configs of resource type {resource.resource_type}")
    ctx.broker.store.alter_topic_config(
        resource.resource_name, sets, tuple(deletes), replace=replace, dry_run=validate_only
    )


def _alter_response(ctx: RequestContext, request: Any, alter: Callable[[Any], None]) -> Any:
    responses = []
    for resource in request.resources:
        code, message, _ = _per_item(partial(alter, resource))
        responses.append(
            ctx.make(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return ctx.respond(throttle_time=0, responses=tuple(responses))


# ---- DescribeLogDirs ----------------------------------------------------------------------------------


@api(35, 1, 5)
def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """The store is the one log directory; each partition's size is its segments' bytes, lag 0.
    v5's `is_cordoned` (KIP-1066) stays false: new partitions may always be placed in it."""
    store = ctx.broker.store
    if request.topics is None:
        wanted = [(name, store.partitions(name)) for name in store.list_topics()]
    else:
        wanted = [
            (t.topic, [p for p in t.partitions if p in set(store.partitions(t.topic))])
            for t in request.topics
            if store.has_topic(t.topic)
        ]
    topics = tuple(
        ctx.make(
            "DescribeLogDirsTopic",
            name=name,
            partitions=tuple(
                ctx.make(
                    "DescribeLogDirsPartition",
                    partition_index=p,
                    partition_size=store.partition(name, p).size_bytes,
                    offset_lag=0,
                    is_future_key=False,
                )
                for p in partitions
            ),
        )
        for name, partitions in wanted
    )
    space = os.statvfs(store.root)
    result = ctx.make(
        "DescribeLogDirsResult",
        error_code=NONE,
        log_dir=os.path.abspath(store.root),
        topics=topics,
        total_bytes=space.f_blocks * space.f_frsize,
        usable_bytes=space.f_bavail * space.f_frsize,
        is_cordoned=False,
    )
    return ctx.respond(throttle_time=0, error_code=NONE, results=(result,))
