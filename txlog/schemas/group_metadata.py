"""Kafka's classic group record of `__consumer_offsets` and the consumer protocol inside it.

A group's membership is stored as one GroupMetadata record (key version 2, value
GroupMetadataValue v0..v4): the generation, the assignor, the leader and every member
with its opaque subscription and assignment bytes. For protocol type "consumer"
those bytes are the consumer protocol's ConsumerProtocolSubscription (topics, owned
partitions, the generation they were owned in) and ConsumerProtocolAssignment (the
partitions the member is given). Both are version-prefixed, non-flexible structs; a
newer version than we know is read with the newest layout we know and its extra
fields are ignored, which is the consumer protocol's own compatibility rule.

One codec serves every reader: the group coordinator (txlog writes its groups in this
format, see `txlog.coordinator.group_coordinator`), `txlog inspect --offsets-decoder` and the group
listings, so a group txlog writes reads in Kafka's tools and a Kafka group reads here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from txlog.schemas.schema_types import SchemaReader, SchemaWriter

GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSIONS = (0, 1, 2, 3, 4)
_FLEXIBLE_VERSION = 4
WRITE_VALUE_VERSION = 3  # what Kafka writes for classic groups (KIP-345's groupInstanceId is v3)
SUBSCRIPTION_VERSION = 3  # newest layout known; v2 added GenerationId, v3 RackId
ASSIGNMENT_VERSION = 3  # v1..v3 keep v0's layout
CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # ((topic, (partition, ...)), ...)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    assigned_partitions: TopicPartitions
    user_data: bytes | None = None


# ---- GroupMetadata key and value ------------------------------------------------------------------


def encode_group_metadata_key(group: str) -> bytes:
    w = SchemaWriter()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def encode_group_metadata_value(value: GroupMetadataValue, version: int = WRITE_VALUE_VERSION) -> bytes:
    """Version-prefixed GroupMetadataValue; fields a version lacks are dropped (Kafka marks them ignorable)."""
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise ValueError(f"group metadata value version must be 0..4, not {version}")
    flexible = version >= _FLEXIBLE_VERSION
    w = SchemaWriter()
    w.i16(version)
    _put_string(w, value.protocol_type, flexible)
    w.i32(value.generation)
    _put_nullable_string(w, value.protocol, flexible)
    _put_nullable_string(w, value.leader, flexible)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    if flexible:
        w.compact_array_count(len(value.members))
    else:
        w.array_count(len(value.members))
    for m in value.members:
        _put_member(w, m, version)
    if flexible:
        w.tagged_fields([])
    return w.getvalue()


def _put_member(w: SchemaWriter, m: MemberMetadata, version: int) -> None:
    flexible = version >= _FLEXIBLE_VERSION
    _put_string(w, m.member_id, flexible)
    if version >= 3:
        _put_nullable_string(w, m.group_instance_id, flexible)
    _put_string(w, m.client_id, flexible)
    _put_string(w, m.client_host, flexible)
    if version >= 1:
        w.i32(m.rebalance_timeout)
    w.i32(m.session_timeout)
    if flexible:
        w.compact_bytes(m.subscription)
        w.compact_bytes(m.assignment)
        w.tagged_fields([])
    else:
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)


@overload
def decode_group_metadata_value(data: bytes) -> tuple[int, GroupMetadataValue]: ...
@overload
def decode_group_metadata_value(data: None) -> None: ...
@overload
def decode_group_metadata_value(data: bytes | None) -> tuple[int, GroupMetadataValue] | None: ...


def decode_group_metadata_value(data: bytes | None) -> tuple[int, GroupMetadataValue] | None:
    """(version, value) of a GroupMetadataValue; None for a tombstone (the group was deleted)."""
    if data is None:
        return None
    r = SchemaReader(data, "group metadata value")
    version = r.value_version(GROUP_METADATA_VALUE_VERSIONS)
    flexible = version >= _FLEXIBLE_VERSION
    protocol_type = _required(r, "protocol type", flexible)
    generation = r.i32("generation")
    protocol = _get_string(r, "protocol", flexible)
    leader = _get_string(r, "leader", flexible)
    timestamp = r.i64("current state timestamp") if version >= 2 else -1
    # The smallest member: four empty strings, two i32s and two empty byte arrays.
    count = r.compact_array_count(12, "members") if flexible else r.array_count(20, "members")
    members = tuple(_get_member(r, version) for _ in range(count or 0))
    if flexible:
        r.tagged_fields()
    r.expect_end()
    return version, GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


def _get_member(r: SchemaReader, version: int) -> MemberMetadata:
    flexible = version >= _FLEXIBLE_VERSION
    member_id = _required(r, "member id", flexible)
    instance_id = _get_string(r, "group instance id", flexible) if version >= 3 else None
    client_id = _required(r, "client id", flexible)
    client_host = _required(r, "client host", flexible)
    rebalance_timeout = r.i32("rebalance timeout") if version >= 1 else -1
    session_timeout = r.i32("session timeout")
    read_bytes = r.compact_bytes if flexible else r.bytes_
    subscription = read_bytes("subscription") or b""
    assignment = read_bytes("assignment") or b""
    if flexible:
        r.tagged_fields()
    return MemberMetadata(
        member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout, subscription, assignment
    )


# ---- the consumer protocol ------------------------------------------------------------------------


def encode_subscription(sub: ConsumerSubscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    if not 0 <= version <= SUBSCRIPTION_VERSION:
        raise ValueError(f"subscription version must be 0..{SUBSCRIPTION_VERSION}, not {version}")
    w = SchemaWriter()
    w.i16(version)
    w.array_count(len(sub.topics))
    for topic in sub.topics:
        w.string(topic)
    w.bytes_(sub.user_data)
    if version >= 1:
        _put_topic_partitions(w, sub.owned_partitions)
    if version >= 2:
        w.i32(sub.generation_id)
    if version >= 3:
        w.nullable_string(sub.rack_id)
    return w.getvalue()


def decode_subscription(data: bytes) -> tuple[int, ConsumerSubscription]:
    """(version, subscription); a version newer than we know is read with the newest layout we know."""
    r, version = _protocol_reader(data, "consumer protocol subscription")
    count = r.array_count(2, "topics") or 0
    topics = tuple(_required(r, "topic", False) for _ in range(count))
    user_data = r.bytes_("user data")
    owned: TopicPartitions = ()
    generation, rack = -1, None
    if version >= 1:
        owned = _get_topic_partitions(r)
    if version >= 2:
        generation = r.i32("generation id")
    if version >= 3:
        rack = r.string("rack id")
    _protocol_end(r, version, SUBSCRIPTION_VERSION)
    return version, ConsumerSubscription(topics, user_data, owned, generation, rack)


def encode_assignment(assignment: ConsumerAssignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    if not 0 <= version <= ASSIGNMENT_VERSION:
        raise ValueError(f"assignment version must be 0..{ASSIGNMENT_VERSION}, not {version}")
    w = SchemaWriter()
    w.i16(version)
    _put_topic_partitions(w, assignment.assigned_partitions)
    w.bytes_(assignment.user_data)
    return w.getvalue()


def decode_assignment(data: bytes) -> tuple[int, ConsumerAssignment]:
    r, version = _protocol_reader(data, "consumer protocol assignment")
    assigned = _get_topic_partitions(r)
    user_data = r.bytes_("user data")
    _protocol_end(r, version, ASSIGNMENT_VERSION)
    return version, ConsumerAssignment(assigned, user_data)


def _protocol_reader(data: bytes, what: str) -> tuple[SchemaReader, int]:
    """A reader past the consumer protocol's i16 version prefix; any version >= 0 is read."""
    r = SchemaReader(data, what)
    version = r.i16("version")
    if version < 0:
        raise r.corrupt(f"unknown version {version}", 0)
    return r, version


def _protocol_end(r: SchemaReader, version: int, newest: int) -> None:
    """Trailing bytes are an error in a version we know; a newer one may carry fields we do not."""
    if version <= newest:
        r.expect_end()


def topic_partitions(pairs) -> TopicPartitions:
    """The protocol's grouped form of (topic, partition) pairs: topics sorted, partitions sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, []).append(partition)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(grouped.items()))


def flatten(grouped: TopicPartitions) -> list[tuple[str, int]]:
    """(topic, partition) pairs of the grouped form, in the order stored."""
    return [(topic, p) for topic, parts in grouped for p in parts]


# ---- primitives shared by both encodings ----------------------------------------------------------


def _put_topic_partitions(w: SchemaWriter, grouped: TopicPartitions) -> None:
    w.array_count(len(grouped))
    for topic, partitions in grouped:
        w.string(topic)
        w.array_count(len(partitions))
        for p in partitions:
            w.i32(p)


def _get_topic_partitions(r: SchemaReader) -> TopicPartitions:
    count = r.array_count(6, "topic partitions") or 0
    out = []
    for _ in range(count):
        topic = _required(r, "topic", False)
        n = r.array_count(4, "partitions") or 0
        out.append((topic, tuple(r.i32("partition") for _ in range(n))))
    return tuple(out)


def _put_string(w: SchemaWriter, value: str, flexible: bool) -> None:
    if flexible:
        w.compact_string(value)
    else:
        w.string(value)


def _put_nullable_string(w: SchemaWriter, value: str | None, flexible: bool) -> None:
    if flexible:
        w.compact_nullable_string(value)
    else:
        w.nullable_string(value)


def _get_string(r: SchemaReader, what: str, flexible: bool) -> str | None:
    return r.compact_string(what) if flexible else r.string(what)


def _required(r: SchemaReader, what: str, flexible: bool) -> str:
    start = r.position
    value = _get_string(r, what, flexible)
    if value is None:
        raise r.corrupt(f"null {what}", start)
    return value
