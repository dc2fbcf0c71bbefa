"""KIP-848 consumer-group records of `__consumer_offsets` (record types 3 to 8), as JSON for `--offsets-decoder`.

A Kafka 4 broker keeps a consumer group of the new protocol (`group.protocol=consumer`) as
these records beside the offset commits. txlog does not run such groups; it only shows what a
broker wrote, as Kafka's DumpLogSegments shows it: the key as
`{"type":"5","data":{"groupId":…,"memberId":…}}`, the value as `{"version":"0","data":{…}}`.
This module only prints: the bytes are decoded (and judged) by
`txlog.schemas.consumer_group_records`, the one reader of these records. What is Kafka's here
is the printing of its generated JsonConverters (Kafka 4.4's ConsumerGroup*ValueJsonConverter):
the JSON names, the fields in schema order, bytes as padded base64, and a tagged field shown
only when it differs from what Kafka's reader holds for an absent tag.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

from txlog.schemas import consumer_group_records as cgr
from txlog.schemas.cluster_metadata import json_string
from txlog.schemas.schema_types import uuid_text


def key_json(key: cgr.ConsumerGroupRecordKey) -> str:
    """`{"type":"N","data":{"groupId":…[,"memberId":…]}}`."""
    fields = [("groupId", json_string(key.group))]
    if key.member_id is not None:
        fields.append(("memberId", json_string(key.member_id)))
    return f'{{"type":"{key.record_type}","data":{_object(fields)}}}'


def value_json(value: cgr.ConsumerGroupValue) -> str:
    """`{"version":"0","data":{…}}` of a decoded value."""
    data = _VALUE_PRINTERS[type(value)](value)
    return f'{{"version":"{value.version}","data":{data}}}'


# ---- JSON pieces ----------------------------------------------------------------------------------


def _object(fields: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'"{name}":{text}' for name, text in fields) + "}"


def _nullable(text: str | None) -> str:
    return "null" if text is None else json_string(text)


def _list(items: Iterable[Any], show: Callable[[Any], str] = str) -> str:
    return "[" + ",".join(show(item) for item in items) + "]"


def _base64(data: bytes) -> str:
    return json_string(base64.b64encode(data).decode("ascii"))  # Jackson's BinaryNode: standard, padded


# ---- the values -----------------------------------------------------------------------------------


def _tagged_i64(name: str, value: int) -> list[tuple[str, str]]:
    """A tagged int64 field whose default is 0: printed only when it is not 0."""
    return [] if value == 0 else [(name, str(value))]


def _group_metadata(v: cgr.GroupMetadataValue) -> str:
    return _object([("epoch", str(v.epoch)), *_tagged_i64("metadataHash", v.metadata_hash)])


def _partition_metadata(v: cgr.PartitionMetadataValue) -> str:
    return _object([("topics", _list(v.topics, _topic_metadata))])


def _topic_metadata(t: cgr.TopicMetadata) -> str:
    return _object(
        [
            ("topicId", json_string(uuid_text(t.topic_id))),
            ("topicName", json_string(t.name)),
            ("numPartitions", str(t.partitions)),
            ("partitionMetadata", _list(t.partition_racks, _partition_racks)),
        ]
    )


def _partition_racks(p: cgr.PartitionRacks) -> str:
    return _object([("partition", str(p.partition)), ("racks", _list(p.racks, json_string))])


def _member_metadata(v: cgr.MemberMetadataValue) -> str:
    fields = [
        ("instanceId", _nullable(v.instance_id)),
        ("rackId", _nullable(v.rack_id)),
        ("clientId", json_string(v.client_id)),
        ("clientHost", json_string(v.client_host)),
        ("subscribedTopicNames", _list(v.subscribed_topics, json_string)),
        ("subscribedTopicRegex", _nullable(v.subscribed_regex)),
        ("rebalanceTimeoutMs", str(v.rebalance_timeout_ms)),
        ("serverAssignor", _nullable(v.server_assignor)),
    ]
    # Kafka's converter compares with the empty struct, so a null one (what Kafka 4.4 writes
    # for a consumer-protocol member) is printed as null and an absent tag is not printed.
    if v.classic is None:
        fields.append(("classicMemberMetadata", "null"))
    elif v.classic != cgr.ClassicMemberMetadata():
        fields.append(("classicMemberMetadata", _classic_member_metadata(v.classic)))
    return _object(fields)


def _classic_member_metadata(c: cgr.ClassicMemberMetadata) -> str:
    protocols = _list(c.protocols, lambda p: _object([("name", json_string(p[0])), ("metadata", _base64(p[1]))]))
    return _object([("sessionTimeoutMs", str(c.session_timeout_ms)), ("supportedProtocols", protocols)])


def _target_assignment_metadata(v: cgr.TargetAssignmentMetadataValue) -> str:
    return _object(
        [("assignmentEpoch", str(v.assignment_epoch)), *_tagged_i64("assignmentTimestamp", v.assignment_timestamp)]
    )


def _target_assignment_member(v: cgr.TargetAssignmentMemberValue) -> str:
    return _object([("topicPartitions", _list(v.partitions, _topic_partitions))])


def _current_member_assignment(v: cgr.CurrentMemberAssignmentValue) -> str:
    return _object(
        [
            ("memberEpoch", str(v.member_epoch)),
            ("previousMemberEpoch", str(v.previous_member_epoch)),
            ("state", str(v.state)),
            ("assignedPartitions", _list(v.assigned, _topic_partitions)),
            ("partitionsPendingRevocation", _list(v.pending_revocation, _topic_partitions)),
        ]
    )


def _topic_partitions(t: cgr.TopicPartitions) -> str:
    fields = [("topicId", json_string(uuid_text(t.topic_id))), ("partitions", _list(t.partitions))]
    # Shown unless empty (Kafka's reader starts the field as an empty list): null is printed.
    if t.assignment_epochs is None:
        fields.append(("assignmentEpochs", "null"))
    elif t.assignment_epochs:
        fields.append(("assignmentEpochs", _list(t.assignment_epochs)))
    return _object(fields)


_VALUE_PRINTERS: dict[type, Callable[[Any], str]] = {
    cgr.GroupMetadataValue: _group_metadata,
    cgr.PartitionMetadataValue: _partition_metadata,
    cgr.MemberMetadataValue: _member_metadata,
    cgr.TargetAssignmentMetadataValue: _target_assignment_metadata,
    cgr.TargetAssignmentMemberValue: _target_assignment_member,
    cgr.CurrentMemberAssignmentValue: _current_member_assignment,
}


def parse(key: cgr.ConsumerGroupRecordKey, value: bytes | None) -> tuple[str, str]:
    """The key and payload strings of one record (a tombstone's payload is `<DELETE>`).

    Raises CorruptRecordError when the value does not fit its schema.
    """
    decoded = cgr.decode_value(key.record_type, value)
    return key_json(key), "<DELETE>" if decoded is None else value_json(decoded)
