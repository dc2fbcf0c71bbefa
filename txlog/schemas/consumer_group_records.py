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
`txlog.coordinator.group_coordinator`); it decodes them to describe a broker's groups and,
through `txlog.schemas.consumer_group_json`, to print them as `kafka-dump-log
--offsets-decoder` does. This is the one reader of these bytes, so the values keep every
field Kafka's generated classes keep (the deprecated partition racks, the tagged fields,
the version), and a tagged field holds what Kafka's reader leaves in it when the tag is
absent, since the printer shows a tagged field by comparing it with that. Every byte is
untrusted: a malformation is CorruptRecordError naming the record, and so is a null where
the schema has no null (Kafka's readers refuse those too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

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

_T = TypeVar("_T")
_S = TypeVar("_S", str, bytes)


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
    metadata_hash: int = 0  # tag 0
    _: KW_ONLY
    version: int = 0


@dataclass(frozen=True, slots=True)
class PartitionRacks:
    """A partition's racks in type 4 (deprecated since Kafka 4.0, still written as an empty list)."""

    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: bytes
    name: str
    partitions: int
    partition_racks: tuple[PartitionRacks, ...]


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    """Type 4: the subscribed topics as the group last saw them."""

    topics: tuple[TopicMetadata, ...]
    _: KW_ONLY
    version: int = 0


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that joined with the classic protocol (a consumer group taking in classic members).

    `protocols` are (name, metadata) pairs. The defaults are the empty struct Kafka's reader
    holds when the tag is absent.
    """

    session_timeout_ms: int = 0
    protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """Type 5: who the member is and what it subscribes to.

    `classic` (tag 0) is None when written as null (Kafka 4.4 writes that for every member
    of the consumer protocol) and the empty ClassicMemberMetadata when the tag is absent.
    """

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None
    _: KW_ONLY
    version: int = 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    """Type 6: the epoch of the group's current target assignment."""

    assignment_epoch: int
    assignment_timestamp: int = 0  # tag 0
    _: KW_ONLY
    version: int = 0


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """Partitions of one topic id, in types 7 and 8.

    `assignment_epochs` (tag 0, one per partition) exists in type 8 only (type 7 leaves it
    empty): empty when the tag is absent, as Kafka's reader leaves it, None when written as null.
    """

    topic_id: bytes
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = ()


TopicIdPartitions = tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    """Type 7: the partitions the assignor gave the member."""

    partitions: TopicIdPartitions
    _: KW_ONLY
    version: int = 0


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    """Type 8: the member's epoch, reconciliation state and the partitions it holds now."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicIdPartitions
    pending_revocation: TopicIdPartitions
    _: KW_ONLY
    version: int = 0


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
    group = _not_null(r, "group id", SchemaReader.string)
    member = _not_null(r, "member id", SchemaReader.string) if record_type in _MEMBER_KEYED else None
    r.expect_end()
    return ConsumerGroupRecordKey(record_type, group, member)


# ---- values ---------------------------------------------------------------------------------------


def decode_value(record_type: int, data: bytes | None) -> ConsumerGroupValue | None:
    """The value of a type 3..8 record; None for a tombstone."""
    if data is None:
        return None
    decode = _DECODERS.get(record_type)
    if decode is None:
        raise ValueError(f"record type {record_type} is not a consumer group record")
    r = SchemaReader(data, f"{RECORD_NAMES[record_type]}Value")
    version = r.value_version(VALUE_VERSIONS)
    value = decode(r, version)
    r.expect_end()
    return value


def _group_metadata(r: SchemaReader, version: int) -> GroupMetadataValue:
    epoch = r.i32("epoch")
    found = {"hash": 0}

    def metadata_hash(tr: SchemaReader) -> None:
        found["hash"] = tr.i64("metadata hash")

    r.tagged_fields({0: metadata_hash})
    return GroupMetadataValue(epoch, found["hash"], version=version)


def _partition_metadata(r: SchemaReader, version: int) -> PartitionMetadataValue:
    # The smallest topic: a 16-byte id, an empty name, an i32 and an empty array, then its tags.
    topics = _array(r, 23, "topics", _topic_metadata)
    r.tagged_fields()
    return PartitionMetadataValue(topics, version=version)


def _topic_metadata(r: SchemaReader) -> TopicMetadata:
    topic_id = r.uuid("topic id")
    name = _required(r, "topic name")
    partitions = r.i32("number of partitions")
    racks = _array(r, 6, "partition metadata", _partition_racks)
    r.tagged_fields()
    return TopicMetadata(topic_id, name, partitions, racks)


def _partition_racks(r: SchemaReader) -> PartitionRacks:
    partition = r.i32("partition")
    racks = _array(r, 1, "racks", lambda r: _required(r, "rack"))
    r.tagged_fields()
    return PartitionRacks(partition, racks)


def _member_metadata(r: SchemaReader, version: int) -> MemberMetadataValue:
    instance_id = r.compact_string("instance id")
    rack_id = r.compact_string("rack id")
    client_id = _required(r, "client id")
    client_host = _required(r, "client host")
    topics = _array(r, 1, "subscribed topic names", lambda r: _required(r, "subscribed topic name"))
    regex = r.compact_string("subscribed topic regex")
    rebalance_timeout = r.i32("rebalance timeout")
    assignor = r.compact_string("server assignor")
    found: dict[str, ClassicMemberMetadata | None] = {"classic": ClassicMemberMetadata()}

    def classic(tr: SchemaReader) -> None:
        found["classic"] = _classic_member_metadata(tr)

    r.tagged_fields({0: classic})
    return MemberMetadataValue(
        instance_id,
        rack_id,
        client_id,
        client_host,
        topics,
        regex,
        rebalance_timeout,
        assignor,
        found["classic"],
        version=version,
    )


def _classic_member_metadata(r: SchemaReader) -> ClassicMemberMetadata | None:
    """A nullable struct: Kafka's generated code writes uvarint 0 for null, reads any positive as present."""
    if r.uvarint() == 0:
        return None
    session_timeout = r.i32("session timeout")
    protocols = _array(r, 3, "supported protocols", _classic_protocol)
    r.tagged_fields()
    return ClassicMemberMetadata(session_timeout, protocols)


def _classic_protocol(r: SchemaReader) -> tuple[str, bytes]:
    name = _required(r, "protocol name")
    metadata = _not_null(r, "protocol metadata", SchemaReader.compact_bytes)
    r.tagged_fields()
    return name, metadata


def _target_assignment_metadata(r: SchemaReader, version: int) -> TargetAssignmentMetadataValue:
    epoch = r.i32("assignment epoch")
    found = {"timestamp": 0}

    def timestamp(tr: SchemaReader) -> None:
        found["timestamp"] = tr.i64("assignment timestamp")

    r.tagged_fields({0: timestamp})
    return TargetAssignmentMetadataValue(epoch, found["timestamp"], version=version)


def _target_assignment_member(r: SchemaReader, version: int) -> TargetAssignmentMemberValue:
    partitions = _array(r, 18, "topic partitions", _topic_partitions(epochs=False))
    r.tagged_fields()
    return TargetAssignmentMemberValue(partitions, version=version)


def _current_member_assignment(r: SchemaReader, version: int) -> CurrentMemberAssignmentValue:
    epoch = r.i32("member epoch")
    previous = r.i32("previous member epoch")
    state = r.i8("state")
    assigned = _array(r, 18, "assigned partitions", _topic_partitions(epochs=True))
    pending = _array(r, 18, "partitions pending revocation", _topic_partitions(epochs=True))
    r.tagged_fields()
    return CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending, version=version)


def _topic_partitions(epochs: bool) -> Callable[[SchemaReader], TopicPartitions]:
    """{TopicId uuid, Partitions []int32, tags}; with `epochs`, tag 0 is AssignmentEpochs (nullable []int32)."""

    def read(r: SchemaReader) -> TopicPartitions:
        topic_id = r.uuid("topic id")
        partitions = _array(r, 4, "partitions", lambda r: r.i32("partition"))
        found: dict[str, tuple[int, ...] | None] = {"epochs": ()}

        def assignment_epochs(tr: SchemaReader) -> None:
            count = tr.compact_array_count(4, "assignment epochs")
            found["epochs"] = None if count is None else tuple(tr.i32("assignment epoch") for _ in range(count))

        r.tagged_fields({0: assignment_epochs} if epochs else None)
        return TopicPartitions(topic_id, partitions, found["epochs"])

    return read


def _array(r: SchemaReader, min_size: int, what: str, element: Callable[[SchemaReader], _T]) -> tuple[_T, ...]:
    """A non-nullable compact array: its count checked against the bytes left, then its elements."""
    start = r.position
    count = r.compact_array_count(min_size, what)
    if count is None:
        raise r.corrupt(f"null {what}", start)
    return tuple(element(r) for _ in range(count))


def _required(r: SchemaReader, what: str) -> str:
    """A compact string the schema does not make nullable."""
    return _not_null(r, what, SchemaReader.compact_string)


def _not_null(r: SchemaReader, what: str, read: Callable[[SchemaReader, str], _S | None]) -> _S:
    """A string or bytes field the schema does not make nullable: Kafka's reader refuses a null there."""
    start = r.position
    value = read(r, what)
    if value is None:
        raise r.corrupt(f"null {what}", start)
    return value


_DECODERS: dict[int, Callable[[SchemaReader, int], ConsumerGroupValue]] = {
    GROUP_METADATA: _group_metadata,
    PARTITION_METADATA: _partition_metadata,
    MEMBER_METADATA: _member_metadata,
    TARGET_ASSIGNMENT_METADATA: _target_assignment_metadata,
    TARGET_ASSIGNMENT_MEMBER: _target_assignment_member,
    CURRENT_MEMBER_ASSIGNMENT: _current_member_assignment,
}
