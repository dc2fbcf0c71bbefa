"""KIP-848 consumer-group records of `__consumer_offsets` (record types 3 to 8), as JSON for `--offsets-decoder`.

A Kafka 4 broker keeps a consumer group of the new protocol (`group.protocol=consumer`) as
these records beside the offset commits. txlog does not run such groups; it only shows what a
broker wrote, as Kafka's DumpLogSegments shows it: the key as
`{"type":"5","data":{"groupId":…,"memberId":…}}`, the value as `{"version":"0","data":{…}}` with
the fields in schema order and a tagged field only when it differs from its default. Keys are
non-flexible (i16 string lengths); every value schema is flexible from version 0 (compact
lengths, a tag section per struct). The layouts are those of Kafka 4.4's
ConsumerGroup*Key/Value schemas (the group coordinator's `generated` package).
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from txlog.schemas.cluster_metadata import json_string
from txlog.schemas.schema_types import SchemaReader, uuid_text

#: record type -> (schema name, whether the key has a member id after the group id)
RECORD_TYPES: dict[int, tuple[str, bool]] = {
    3: ("ConsumerGroupMetadata", False),
    4: ("ConsumerGroupPartitionMetadata", False),
    5: ("ConsumerGroupMemberMetadata", True),
    6: ("ConsumerGroupTargetAssignmentMetadata", False),
    7: ("ConsumerGroupTargetAssignmentMember", True),
    8: ("ConsumerGroupCurrentMemberAssignment", True),
}
VALUE_VERSIONS = (0,)


def key_json(record_type: int, key: bytes) -> str:
    """`{"type":"N","data":{"groupId":…[,"memberId":…]}}` of a key whose first i16 is `record_type`."""
    name, has_member = RECORD_TYPES[record_type]
    r = SchemaReader(key, f"{name} key")
    r.i16("record type")
    parts = [f'"groupId":{_string(r.string("group id"))}']
    if has_member:
        parts.append(f'"memberId":{_string(r.string("member id"))}')
    r.expect_end()
    return f'{{"type":"{record_type}","data":{{{",".join(parts)}}}}}'


def value_json(record_type: int, value: bytes) -> str:
    """`{"version":"0","data":{…}}` of a value of this record type."""
    name, _ = RECORD_TYPES[record_type]
    r = SchemaReader(value, f"{name} value")
    version = r.value_version(VALUE_VERSIONS)
    data = _VALUE_READERS[record_type](r)
    r.expect_end()
    return f'{{"version":"{version}","data":{data}}}'


# ---- field readers --------------------------------------------------------------------------------


def _string(value: str | None) -> str:
    return "null" if value is None else json_string(value)


def _compact_string(r: SchemaReader, what: str) -> str:
    return _string(r.compact_string(what))


def _array(r: SchemaReader, read: Callable[[SchemaReader], str], what: str, min_size: int = 1) -> str:
    count = r.compact_array_count(min_size, what)
    if count is None:
        return "null"
    return "[" + ",".join(read(r) for _ in range(count)) + "]"


def _int32s(r: SchemaReader, what: str) -> str:
    return _array(r, lambda r: str(r.i32(what)), what, 4)


TaggedReaders = dict[int, tuple[str, Callable[[SchemaReader], str | None]]]


def _struct(fields: list[str], tags: TaggedReaders, r: SchemaReader) -> str:
    """Close a struct: read its tag section and add the tagged fields that are present and not default.

    `tags` maps tag -> (JSON name, reader); a reader returns the field's JSON, or None for its default.
    """
    shown: dict[int, str] = {}

    def reader(tag: int) -> Callable[[SchemaReader], None]:
        def read(r: SchemaReader) -> None:
            text = tags[tag][1](r)
            if text is not None:
                shown[tag] = text

        return read

    r.tagged_fields({tag: reader(tag) for tag in tags})
    fields = fields + [f'"{tags[tag][0]}":{shown[tag]}' for tag in sorted(shown)]
    return "{" + ",".join(fields) + "}"


def _non_default_i64(default: int) -> Callable[[SchemaReader], str | None]:
    def read(r: SchemaReader) -> str | None:
        value = r.i64("tagged int64")
        return None if value == default else str(value)

    return read


def _group_metadata(r: SchemaReader) -> str:
    return _struct([f'"epoch":{r.i32("epoch")}'], {0: ("metadataHash", _non_default_i64(0))}, r)


def _partition_metadata(r: SchemaReader) -> str:
    def partition(r: SchemaReader) -> str:
        racks = _array(r, lambda r: _compact_string(r, "rack"), "racks")
        fields = [f'"partition":{r.i32("partition")}', f'"racks":{racks}']
        return _struct(fields, {}, r)

    def topic(r: SchemaReader) -> str:
        fields = [
            f'"topicId":"{uuid_text(r.uuid("topic id"))}"',
            f'"topicName":{_compact_string(r, "topic name")}',
            f'"numPartitions":{r.i32("partition count")}',
            f'"partitionMetadata":{_array(r, partition, "partition metadata")}',
        ]
        return _struct(fields, {}, r)

    return _struct([f'"topics":{_array(r, topic, "topics", 18)}'], {}, r)


def _classic_member_metadata(r: SchemaReader) -> str | None:
    """The tagged ClassicMemberMetadata: Kafka writes a null one as a 0 marker, which it prints as null."""
    if r.i8("classic member metadata marker") <= 0:
        return "null"

    def protocol(r: SchemaReader) -> str:
        name = _compact_string(r, "protocol name")
        metadata = r.compact_bytes("protocol metadata")
        shown = "null" if metadata is None else json_string(base64_text(metadata))
        return _struct([f'"name":{name}', f'"metadata":{shown}'], {}, r)

    fields = [
        f'"sessionTimeoutMs":{r.i32("session timeout")}',
        f'"supportedProtocols":{_array(r, protocol, "supported protocols")}',
    ]
    return _struct(fields, {}, r)


def base64_text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")  # Jackson's BinaryNode: standard, padded


def _member_metadata(r: SchemaReader) -> str:
    fields = [
        f'"instanceId":{_compact_string(r, "instance id")}',
        f'"rackId":{_compact_string(r, "rack id")}',
        f'"clientId":{_compact_string(r, "client id")}',
        f'"clientHost":{_compact_string(r, "client host")}',
        f'"subscribedTopicNames":{_array(r, lambda r: _compact_string(r, "topic"), "subscribed topics")}',
        f'"subscribedTopicRegex":{_compact_string(r, "subscribed topic regex")}',
        f'"rebalanceTimeoutMs":{r.i32("rebalance timeout")}',
        f'"serverAssignor":{_compact_string(r, "server assignor")}',
    ]
    return _struct(fields, {0: ("classicMemberMetadata", _classic_member_metadata)}, r)


def _target_assignment_metadata(r: SchemaReader) -> str:
    fields = [f'"assignmentEpoch":{r.i32("assignment epoch")}']
    return _struct(fields, {0: ("assignmentTimestamp", _non_default_i64(0))}, r)


def _topic_partitions(r: SchemaReader) -> str:
    fields = [f'"topicId":"{uuid_text(r.uuid("topic id"))}"', f'"partitions":{_int32s(r, "partition")}']

    def epochs(r: SchemaReader) -> str | None:
        text = _int32s(r, "assignment epoch")
        return None if text == "[]" else text  # the default is the empty list

    return _struct(fields, {0: ("assignmentEpochs", epochs)}, r)


def _target_assignment_member(r: SchemaReader) -> str:
    return _struct([f'"topicPartitions":{_array(r, _topic_partitions, "topic partitions", 18)}'], {}, r)


def _current_member_assignment(r: SchemaReader) -> str:
    fields = [
        f'"memberEpoch":{r.i32("member epoch")}',
        f'"previousMemberEpoch":{r.i32("previous member epoch")}',
        f'"state":{r.i8("state")}',
        f'"assignedPartitions":{_array(r, _topic_partitions, "assigned partitions", 18)}',
        f'"partitionsPendingRevocation":{_array(r, _topic_partitions, "partitions pending revocation", 18)}',
    ]
    return _struct(fields, {}, r)


_VALUE_READERS: dict[int, Callable[[SchemaReader], str]] = {
    3: _group_metadata,
    4: _partition_metadata,
    5: _member_metadata,
    6: _target_assignment_metadata,
    7: _target_assignment_member,
    8: _current_member_assignment,
}


def parse(record_type: int, key: bytes, value: bytes | None) -> tuple[str, str]:
    """The key and payload strings of one record (a tombstone's payload is `<DELETE>`).

    Raises CorruptRecordError when the bytes do not fit the schema.
    """
    return key_json(record_type, key), "<DELETE>" if value is None else value_json(record_type, value)
