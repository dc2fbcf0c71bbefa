"""Internal-topic payloads as kafka-dump-log's message parsers print them.

`--transaction-log-decoder` (TransactionLogMessageParser), `--offsets-decoder`
(OffsetsMessageParser, with GroupMetadata values and the consumer protocol's subscriptions
and assignments decoded) and `--cluster-metadata-decoder` (ClusterMetadataLogMessageParser):
each turns one record of `__transaction_state`, `__consumer_offsets` or the KRaft metadata log
into the key and payload strings Kafka's DumpLogSegments prints. They live beside the schemas
they decode so that every reader of these records (`txlog inspect` today, a consumer of the
internal topics tomorrow) prints them one way. A record that does not decode becomes Kafka's
`Error at offset N, skipping. ...` text, never an exception: one damaged record must not hide
the rest of a file.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from txlog.schemas.group_metadata import TopicPartitions


class ParsedRecord(Protocol):
    """What a parser reads of a record: its offset, key and value."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def transaction_log_parser(record: ParsedRecord) -> tuple[str | None, str | None]:
    """`--transaction-log-decoder`: TransactionLogMessageParser's key and payload strings."""
    from txlog.schemas.transaction_log import decode_key, decode_value

    if record.key is None:
        return None, None
    version = struct.unpack_from(">h", record.key)[0] if len(record.key) >= 2 else -1
    if version != 0:
        return f"unknown::version={version}", None
    try:
        txn_id = decode_key(record.key)
        value = decode_value(record.value)
    except Exception as exc:  # noqa: BLE001  a bad record is reported in the line, as Kafka does
        return f"Error at offset {record.offset}, skipping. {exc}", None
    key = f"transaction_metadata::transactionalId={txn_id}"
    if value is None:
        return key, "<DELETE>"
    partitions = ",".join(f"{t}-{p}" for t, p in value.partitions)
    return key, (
        f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
        f"state={value.state.kafka_name},partitions=[{partitions}],"
        f"txnLastUpdateTimestamp={value.last_update_ms},txnTimeoutMs={value.timeout_ms}"
    )


def compact_json(value: object) -> str:
    """JSON as Jackson writes it in kafka-dump-log lines: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def offsets_parser(record: ParsedRecord) -> tuple[str | None, str | None]:
    """`--offsets-decoder`: `{"type":"1","data":{…}}` keys and `{"version":"3","data":{…}}` payloads."""
    from txlog.schemas.offset_log import (
        GroupMetadataKey,
        OffsetKey,
        decode_key,
        decode_offset_value,
    )

    if record.key is None:
        return f"Error at offset {record.offset}, skipping. the record has no key", None
    try:
        key = decode_key(record.key)
        key_version = struct.unpack_from(">h", record.key)[0]
        if isinstance(key, OffsetKey):
            key_json = compact_json(
                {"type": str(key_version), "data": {"group": key.group, "topic": key.topic, "partition": key.partition}}
            )
            if record.value is None:
                return key_json, "<DELETE>"
            value = decode_offset_value(record.value)
            version = struct.unpack_from(">h", record.value)[0]
            data: dict[str, Any] = {"offset": value.offset}
            if version >= 3:
                data["leaderEpoch"] = value.leader_epoch
            data["metadata"] = value.metadata
            data["commitTimestamp"] = value.commit_timestamp
            if version == 1:
                data["expireTimestamp"] = value.expire_timestamp
            return key_json, compact_json({"version": str(version), "data": data})
        if isinstance(key, GroupMetadataKey):
            key_json = compact_json({"type": str(key_version), "data": {"group": key.group}})
            if record.value is None:
                return key_json, "<DELETE>"
            return key_json, compact_json(group_metadata_json(record.value))
        return f"Unknown record type {key_version} at offset {record.offset}, skipping.", None
    except Exception as exc:  # noqa: BLE001  a record that does not decode is reported in its line, as Kafka does
        return f"Error at offset {record.offset}, skipping. {exc}", None


def cluster_metadata_parser(record: ParsedRecord) -> tuple[str | None, str | None]:
    """`--cluster-metadata-decoder`: ClusterMetadataLogMessageParser's payload; metadata records have no key.

    A record that does not decode prints Kafka's `Error at <offset>, skipping. <reason>` as
    its payload, so one damaged record never hides the rest of the file.
    """
    from storage.errors import CorruptRecordError
    from txlog.schemas.cluster_metadata import decode_metadata_record, metadata_record_json

    try:
        return None, metadata_record_json(decode_metadata_record(record.value))
    except CorruptRecordError as exc:
        return None, f"Error at {record.offset}, skipping. {exc}"


def _base64(data: bytes | None) -> str | None:
    """Jackson's BinaryNode text: standard base64 with padding (null stays null)."""
    return None if data is None else base64.b64encode(data).decode("ascii")


def _partitions_json(grouped: TopicPartitions) -> list[dict[str, Any]]:
    return [{"topic": topic, "partitions": list(ids)} for topic, ids in grouped]


def subscription_json(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolSubscriptionJsonConverter.write: the fields the decoded version has."""
    from txlog.schemas.group_metadata import decode_subscription

    version, sub = decode_subscription(data)
    out: dict[str, Any] = {"topics": list(sub.topics), "userData": _base64(sub.user_data)}
    if version >= 1:
        out["ownedPartitions"] = _partitions_json(sub.owned_partitions)
    if version >= 2:
        out["generationId"] = sub.generation_id
    if version >= 3:
        out["rackId"] = sub.rack_id
    return out


def assignment_json(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolAssignmentJsonConverter.write."""
    from txlog.schemas.group_metadata import decode_assignment

    _, assignment = decode_assignment(data)
    return {
        "assignedPartitions": _partitions_json(assignment.assigned_partitions),
        "userData": _base64(assignment.user_data),
    }


def _decoded_or_bytes(decode: Callable[[bytes], dict[str, Any]], data: bytes) -> dict[str, Any] | str | None:
    """Kafka swallows a member's undecodable subscription or assignment and keeps the bytes."""
    from storage.errors import KafkaError

    try:
        return decode(data)
    except (KafkaError, ValueError):
        return _base64(data)


def group_metadata_json(data: bytes) -> dict[str, Any]:
    """`{"version":"N","data":{...}}` of a GroupMetadataValue, as OffsetsMessageParser prints it.

    Fields appear in the schema's order and only from the version that has them; for
    protocol type "consumer" each member's subscription and assignment are decoded,
    otherwise (and when they do not decode) they stay base64 bytes.
    """
    from txlog.schemas.group_metadata import CONSUMER_PROTOCOL_TYPE, decode_group_metadata_value

    version, value = decode_group_metadata_value(data)
    consumer = value.protocol_type == CONSUMER_PROTOCOL_TYPE
    body: dict[str, Any] = {
        "protocolType": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
    }
    if version >= 2:
        body["currentStateTimestamp"] = value.current_state_timestamp
    members = []
    for m in value.members:
        member: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member.update(clientId=m.client_id, clientHost=m.client_host)
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout
        member["sessionTimeout"] = m.session_timeout
        member["subscription"] = (
            _decoded_or_bytes(subscription_json, m.subscription) if consumer else _base64(m.subscription)
        )
        member["assignment"] = _decoded_or_bytes(assignment_json, m.assignment) if consumer else _base64(m.assignment)
        members.append(member)
    body["members"] = members
    return {"version": str(version), "data": body}
