"""KIP-848's consumer-group records of `__consumer_offsets` (docs/kafka-formats.md §4.2).

A broker (Kafka 3.7+) stores a group that runs the consumer rebalance protocol
(`group.protocol=consumer`) not in one GroupMetadata record but in a family of records,
each keyed by its record type (the key's i16 prefix) and the group, some also by a member:

====  =====================================  ==================  =====================================
type  record                                 key                 value (flexible, version 0)
====  =====================================  ==================  =====================================
3     ConsumerGroupMetadata                  group               group epoch (+ tagged metadata hash)
4     ConsumerGroupPartitionMetadata         group               subscribed topics' ids, names, counts
5     ConsumerGroupMemberMetadata            group, member       instance, rack, client, subscription,
                                                                 server assignor (+ tagged classic
                                                                 member metadata)
6     ConsumerGroupTargetAssignmentMetadata  group               assignment epoch (+ tagged timestamp)
7     ConsumerGroupTargetAssignmentMember    group, member       the member's target partitions
8     ConsumerGroupCurrentMemberAssignment   group, member       member epoch, state, owned partitions,
                                                                 partitions pending revocation
====  =====================================  ==================  =====================================

Keys are non-flexible (i16 strings); values carry an i16 version (0 is the only one) and
are flexible: compact strings and arrays and a tagged-field section after every struct.
Partitions are named by topic id (a Uuid), not by topic name. The group's last value of
each key is its state; a tombstone (null value) removes that key's part: a member leaves
with tombstones of its records 8, 7 and 5, a deleted group also loses 6, 4 and 3.

txlog never writes these (its own groups live in the classic record, see
`txlog.coordinator.group_coordinator`); it decodes them to describe a broker's groups.
Every byte is untrusted: a malformation is CorruptRecordError naming the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from txlog.schemas.schema_types import SchemaReader

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

# Kafka's record names (the generated classes' names without Key/Value), by record type.
RECORD_NAMES = {
    GROUP_METADATA: "ConsumerGroupMetadata",
    PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_MEMBER_KEYED = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
VALUE_VERSIONS = (0,)

# Kafka's MemberState byte (org.apache.kafka.coordinator.group.modern.MemberState).
MEMBER_STATE_STABLE = 0
MEMBER_STATE_NAMES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}

TopicIdPartitions = tuple[tuple[bytes, tuple[int, ...]], ...]  # ((16-byte topic id, (partition, ...)), ...)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    """The key of record types 3..8: the group, and for 5, 7 and 8 the member."""

    record_type: int
    group: str
    member_id: str | None = None

    @property
    def record_name(self) -> str:
        return RECORD_NAMES[self.record_type]


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """Type 3: the group epoch, bumped by every membership or subscription change."""

    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: bytes
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    """Type 4: the subscribed topics as the group last saw them (their racks are dropped)."""

    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that joined with the classic protocol (a consumer group taking in classic members)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """Type 5: who the member is and what it subscribes to."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    """Type 6: the epoch of the group's current target assignment."""

    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    """Type 7: the partitions the assignor gave the member."""

    partitions: TopicIdPartitions


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    """Type 8: the member's epoch, reconciliation state and the partitions it holds now."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicIdPartitions
    pending_revocation: TopicIdPartitions


ConsumerGroupValue = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)


# ---- keys -----------------------------------------------------------------------------------------


def decode_key(data: bytes) -> ConsumerGroupRecordKey:
    """A type 3..8 key: the i16 type, then non-flexible (i16-length) strings; errors name the record."""
    record_type = int.from_bytes(data[:2], "big", signed=True) if len(data) >= 2 else -1
    if record_type not in RECORD_NAMES:
        raise ValueError(f"record type {record_type} is not a consumer group record")
    r = SchemaReader(data, f"{RECORD_NAMES[record_type]}Key")
    r.i16("record type")
    group = _required(r, "group id")
    member = _required(r, "member id") if record_type in _MEMBER_KEYED else None
    r.expect_end()
    return ConsumerGroupRecordKey(record_type, group, member)


def _required(r: SchemaReader, what: str) -> str:
    start = r.position
    value = r.string(what)
    if value is None:
        raise r.corrupt(f"null {what}", start)
    return value


# ---- values ---------------------------------------------------------------------------------------


def decode_value(record_type: int, data: bytes | None) -> ConsumerGroupValue | None:
    """The value of a type 3..8 record; None for a tombstone."""
    if data is None:
        return None
    decode = _DECODERS.get(record_type)
    if decode is None:
        raise ValueError(f"record type {record_type} is not a consumer group record")
    r = SchemaReader(data, f"{RECORD_NAMES[record_type]}Value")
    r.value_version(VALUE_VERSIONS)
    value = decode(r)
    r.expect_end()
    return value


def _group_metadata(r: SchemaReader) -> GroupMetadataValue:
    epoch = r.i32("epoch")
    found = {"hash": 0}

    def metadata_hash(tr: SchemaReader) -> None:
        found["hash"] = tr.i64("metadata hash")

    r.tagged_fields({0: metadata_hash})
    return GroupMetadataValue(epoch, found["hash"])


def _partition_metadata(r: SchemaReader) -> PartitionMetadataValue:
    # The smallest topic: a 16-byte id, an empty name, an i32 and an empty array, then its tags.
    count = r.compact_array_count(23, "topics") or 0
    topics = []
    for _ in range(count):
        topic_id = r.uuid("topic id")
        name = _required_compact(r, "topic name")
        partitions = r.i32("number of partitions")
        for _ in range(r.compact_array_count(6, "partition metadata") or 0):
            r.i32("partition")
            for _ in range(r.compact_array_count(1, "racks") or 0):
                _required_compact(r, "rack")
            r.tagged_fields()
        r.tagged_fields()
        topics.append(TopicMetadata(topic_id, name, partitions))
    r.tagged_fields()
    return PartitionMetadataValue(tuple(topics))


def _member_metadata(r: SchemaReader) -> MemberMetadataValue:
    instance_id = r.compact_string("instance id")
    rack_id = r.compact_string("rack id")
    client_id = _required_compact(r, "client id")
    client_host = _required_compact(r, "client host")
    count = r.compact_array_count(1, "subscribed topic names") or 0
    topics = tuple(_required_compact(r, "subscribed topic name") for _ in range(count))
    regex = r.compact_string("subscribed topic regex")
    rebalance_timeout = r.i32("rebalance timeout")
    assignor = r.compact_string("server assignor")
    found: dict[str, ClassicMemberMetadata | None] = {"classic": None}

    def classic(tr: SchemaReader) -> None:
        found["classic"] = _classic_member_metadata(tr)

    r.tagged_fields({0: classic})
    return MemberMetadataValue(
        instance_id, rack_id, client_id, client_host, topics, regex, rebalance_timeout, assignor, found["classic"]
    )


def _classic_member_metadata(r: SchemaReader) -> ClassicMemberMetadata | None:
    """A nullable struct: Kafka's generated code writes 0 for null, then any positive for present."""
    if r.uvarint() == 0:
        return None
    session_timeout = r.i32("session timeout")
    protocols = []
    for _ in range(r.compact_array_count(3, "supported protocols") or 0):
        name = _required_compact(r, "protocol name")
        metadata = r.compact_bytes("protocol metadata") or b""
        r.tagged_fields()
        protocols.append((name, metadata))
    r.tagged_fields()
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _target_assignment_metadata(r: SchemaReader) -> TargetAssignmentMetadataValue:
    epoch = r.i32("assignment epoch")
    found = {"timestamp": 0}

    def timestamp(tr: SchemaReader) -> None:
        found["timestamp"] = tr.i64("assignment timestamp")

    r.tagged_fields({0: timestamp})
    return TargetAssignmentMetadataValue(epoch, found["timestamp"])


def _target_assignment_member(r: SchemaReader) -> TargetAssignmentMemberValue:
    partitions = _topic_id_partitions(r, "topic partitions")
    r.tagged_fields()
    return TargetAssignmentMemberValue(partitions)


def _current_member_assignment(r: SchemaReader) -> CurrentMemberAssignmentValue:
    epoch = r.i32("member epoch")
    previous = r.i32("previous member epoch")
    state = r.i8("state")
    assigned = _topic_id_partitions(r, "assigned partitions")
    pending = _topic_id_partitions(r, "partitions pending revocation")
    r.tagged_fields()
    return CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)


def _topic_id_partitions(r: SchemaReader, what: str) -> TopicIdPartitions:
    """[]{TopicId uuid, Partitions []int32, tags}; a tag 0 (AssignmentEpochs, []int32) is read and dropped."""
    out = []
    for _ in range(r.compact_array_count(18, what) or 0):
        topic_id = r.uuid("topic id")
        partitions = tuple(r.i32("partition") for _ in range(r.compact_array_count(4, "partitions") or 0))
        r.tagged_fields({0: _assignment_epochs})
        out.append((topic_id, partitions))
    return tuple(out)


def _assignment_epochs(r: SchemaReader) -> None:
    for _ in range(r.compact_array_count(4, "assignment epochs") or 0):
        r.i32("assignment epoch")


def _required_compact(r: SchemaReader, what: str) -> str:
    start = r.position
    value = r.compact_string(what)
    if value is None:
        raise r.corrupt(f"null {what}", start)
    return value


_DECODERS: dict[int, Callable[[SchemaReader], ConsumerGroupValue]] = {
    GROUP_METADATA: _group_metadata,
    PARTITION_METADATA: _partition_metadata,
    MEMBER_METADATA: _member_metadata,
    TARGET_ASSIGNMENT_METADATA: _target_assignment_metadata,
    TARGET_ASSIGNMENT_MEMBER: _target_assignment_member,
    CURRENT_MEMBER_ASSIGNMENT: _current_member_assignment,
}
