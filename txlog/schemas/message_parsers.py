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
    from txlog.schemas.schema_types import SchemaReader


class ParsedRecord(Protocol):
    """What a parser reads of a record: its offset, key and value."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def transaction_log_parser(record: ParsedRecord) -> tuple[str | None, str | None]:
    """`--transaction-log-decoder`: Kafka 4's TransactionLogMessageParser key and payload strings.

    `key: {"type":"0","data":{"transactionalId":"app-1"}}` and `payload: {"version":"1","data":{...}}`
    with the value's fields as Kafka's generated JSON converter lays them out and the status by
    its name (docs/kafka-formats.md §9). Kafka 3.x printed a text form instead.
    """
    from storage.errors import CorruptRecordError
    from txlog.schemas.cluster_metadata import json_string
    from txlog.schemas.transaction_log import KEY_VERSION, decode_key

    if record.key is None:
        return None, None
    record_type = struct.unpack_from(">h", record.key)[0] if len(record.key) >= 2 else -1
    if record_type != KEY_VERSION:  # the coordinator serde reads a key's version as its record type
        return f"Unknown record type {record_type} at offset {record.offset}, skipping.", None
    try:
        key = f'{{"type":"{record_type}","data":{{"transactionalId":{json_string(decode_key(record.key))}}}}}'
        if record.value is None:
            return key, "<DELETE>"
        return key, transaction_value_json(record.value)
    except CorruptRecordError as exc:  # a bad record is reported in the line, as Kafka does
        return f"Error at offset {record.offset}, skipping. {exc}", None


# TransactionLogValue v1's tagged fields: tag -> (JSON name, reader format, default)
_TXN_TAGS: dict[int, tuple[str, str, int]] = {
    0: ("previousProducerId", ">q", -1),
    1: ("nextProducerId", ">q", -1),
    2: ("clientTransactionVersion", ">h", 0),
    3: ("nextProducerEpoch", ">h", -1),
}


def transaction_value_json(data: bytes) -> str:
    """`{"version":"N","data":{...}}` of a TransactionLogValue, read from its bytes.

    Read here rather than from `transaction_log.decode_value` because the dump shows what the
    bytes say: a null partition list (Kafka writes one for Empty) prints `null`, not `[]`, the
    per-topic grouping is kept as stored, and a status byte Kafka has no state for prints as
    its number in quotes. Field order is the schema's declaration order, tagged fields (v1+)
    only when not their default.
    """
    from txlog.schemas.cluster_metadata import json_string
    from txlog.schemas.schema_types import SchemaReader
    from txlog.schemas.transaction_log import VALUE_VERSIONS, TxnState

    r = SchemaReader(data, "transaction log value")
    version = r.value_version(VALUE_VERSIONS)
    flexible = version >= 1
    producer_id, producer_epoch = r.i64("producer id"), r.i16("producer epoch")
    timeout_ms, status = r.i32("transaction timeout"), r.i8("transaction status")
    count = r.compact_array_count(3, "transaction partitions") if flexible else r.array_count(6, "partitions")
    partitions = None if count is None else [_txn_topic_json(r, flexible, json_string) for _ in range(count)]
    last_update_ms, start_ms = r.i64("last update timestamp"), r.i64("start timestamp")
    tags: dict[str, int] = {name: default for name, _, default in _TXN_TAGS.values()}
    if flexible:
        r.tagged_fields({tag: _tag_into(tags, name, fmt) for tag, (name, fmt, _) in _TXN_TAGS.items()})
    r.expect_end()
    shown = {name: tags[name] for name, _, default in _TXN_TAGS.values() if tags[name] != default}
    try:
        status_name = TxnState(status).kafka_name
    except ValueError:  # Kafka's TransactionState.fromId throws; the parser then prints the number
        status_name = str(status)
    parts = [f'"producerId":{producer_id}']
    parts += [f'"{name}":{shown[name]}' for name in ("previousProducerId", "nextProducerId") if name in shown]
    parts.append(f'"producerEpoch":{producer_epoch}')
    if "nextProducerEpoch" in shown:
        parts.append(f'"nextProducerEpoch":{shown["nextProducerEpoch"]}')
    parts += [
        f'"transactionTimeoutMs":{timeout_ms}',
        f'"transactionStatus":{json_string(status_name)}',
        f'"transactionPartitions":{"null" if partitions is None else "[" + ",".join(partitions) + "]"}',
        f'"transactionLastUpdateTimestampMs":{last_update_ms}',
        f'"transactionStartTimestampMs":{start_ms}',
    ]
    if "clientTransactionVersion" in shown:
        parts.append(f'"clientTransactionVersion":{shown["clientTransactionVersion"]}')
    return f'{{"version":"{version}","data":{{{",".join(parts)}}}}}'


def _txn_topic_json(r: SchemaReader, flexible: bool, json_string: Callable[[str], str]) -> str:
    """One `{"topic":…,"partitionIds":[…]}` element of a value's partition list."""
    start = r.position
    topic = r.compact_string("topic") if flexible else r.string("topic")
    if topic is None:
        raise r.corrupt("null topic in transaction partitions", start)
    start = r.position
    count = r.compact_array_count(4, "partition ids") if flexible else r.array_count(4, "partition ids")
    if count is None:
        raise r.corrupt("null partition id array", start)
    ids = ",".join(str(r.i32("partition id")) for _ in range(count))
    if flexible:
        r.tagged_fields()
    return f'{{"topic":{json_string(topic)},"partitionIds":[{ids}]}}'


def _tag_into(tags: dict[str, int], name: str, fmt: str) -> Callable[[SchemaReader], None]:
    def read(r: SchemaReader) -> None:
        tags[name] = r.i64(name) if fmt == ">q" else r.i16(name)

    return read


def compact_json(value: object) -> str:
    """JSON as Jackson writes it in kafka-dump-log lines: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def offsets_parser(record: ParsedRecord) -> tuple[str | None, str | None]:
    """`--offsets-decoder`: `{"type":"1","data":{…}}` keys and `{"version":"3","data":{…}}` payloads."""
    from txlog.schemas import consumer_group_json
    from txlog.schemas.cluster_metadata import ZERO_UUID
    from txlog.schemas.consumer_group_records import ConsumerGroupRecordKey
    from txlog.schemas.offset_log import (
        GroupMetadataKey,
        OffsetKey,
        decode_key,
        decode_offset_value,
    )

    if record.key is None:
        return f"Error at offset {record.offset}, skipping. the record has no key", None
    try:
        key_version = struct.unpack_from(">h", record.key)[0] if len(record.key) >= 2 else -1
        key = decode_key(record.key)
        if isinstance(key, ConsumerGroupRecordKey):  # KIP-848 group records (types 3..8)
            return consumer_group_json.parse(key, record.value)
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
            if value.topic_id is not None and value.topic_id != ZERO_UUID:  # tagged: shown unless its default
                data["topicId"] = value.topic_id
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
