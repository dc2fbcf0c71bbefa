"""Offset-commit key and value schemas of `__consumer_offsets` (docs/kafka-formats.md §4.2).

A group's committed offsets are the last value per (group, topic, partition) key in
this compacted log, so the codec decides what a restarted consumer resumes from.
The key's i16 prefix doubles as a record type: 0 and 1 are offset commits, 2 is
GroupMetadata, 3..8 are KIP-848's consumer-group records (decoded by
`txlog.schemas.consumer_group_records`) and higher ones are other newer group kinds
(share, streams, regex subscriptions). txlog only writes offset commits and
GroupMetadata but must classify every key it meets when it reads a real Kafka data
directory.

Value versions differ only in which optional fields exist; fields a version lacks
are dropped on write (Kafka marks them ignorable) and read back as their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from storage.errors import CorruptRecordError
from txlog.schemas.consumer_group_records import RECORD_NAMES, ConsumerGroupRecordKey
from txlog.schemas.consumer_group_records import decode_key as decode_consumer_group_key
from txlog.schemas.schema_types import SchemaReader, SchemaWriter, uuid_text

OFFSET_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
VALUE_VERSIONS = (0, 1, 2, 3, 4)
_FLEXIBLE_VALUE_VERSION = 4


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key version 2: a classic group's membership record, which txlog never writes."""

    group: str


@dataclass(frozen=True, slots=True)
class OtherKey:
    """Key types above the consumer-group records (share and streams groups, regex subscriptions):
    recognised so a reader can skip them."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1
    topic_id: str | None = None  # v4's tagged TopicId (Kafka 4.4 writes it), as Kafka's Uuid text


def encode_offset_key(key: OffsetKey, version: int = 1) -> bytes:
    """Key of an offset commit; current Kafka writes version 1 (0 has the same layout)."""
    if version not in OFFSET_KEY_VERSIONS:
        raise ValueError(f"offset commit key version must be 0 or 1, not {version}")
    w = SchemaWriter()
    w.i16(version)
    w.string(key.group)
    w.string(key.topic)
    w.i32(key.partition)
    return w.getvalue()


def _required_string(r: SchemaReader, what: str) -> str:
    start = r.position
    value = r.string(what)
    if value is None:
        raise r.corrupt(f"null {what}", start)
    return value


def decode_key(data: bytes | None) -> OffsetKey | GroupMetadataKey | ConsumerGroupRecordKey | OtherKey:
    """Classify a `__consumer_offsets` key by its type prefix, decoding the kinds txlog uses."""
    if data is None:
        raise CorruptRecordError("consumer offsets key: null key")
    r = SchemaReader(data, "consumer offsets key")
    version = r.i16("key version")
    if version < 0:
        raise r.corrupt(f"unknown key version {version}", 0)
    if version in RECORD_NAMES:
        return decode_consumer_group_key(data)
    if version > GROUP_METADATA_KEY_VERSION:
        # Other newer record types have their own schemas; their bodies are not ours to judge.
        return OtherKey(version)
    group = _required_string(r, "group")
    if version == GROUP_METADATA_KEY_VERSION:
        r.expect_end()
        return GroupMetadataKey(group)
    topic = _required_string(r, "topic")
    partition = r.i32("partition")
    r.expect_end()
    return OffsetKey(group, topic, partition)


def encode_offset_value(value: OffsetValue, version: int = 3) -> bytes:
    """Version-prefixed OffsetCommitValue; v3 is what current Kafka normally writes.

    v1 is the only version with an expire timestamp (Kafka writes it only for an
    explicit retention); v3+ carry the leader epoch; v4 is v3 made flexible.
    """
    if version not in VALUE_VERSIONS:
        raise ValueError(f"offset commit value version must be 0..4, not {version}")
    w = SchemaWriter()
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    if version >= _FLEXIBLE_VALUE_VERSION:
        w.compact_string(value.metadata)
    else:
        w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    if version >= _FLEXIBLE_VALUE_VERSION:
        w.tagged_fields([])
    return w.getvalue()


@overload
def decode_offset_value(data: bytes) -> OffsetValue: ...
@overload
def decode_offset_value(data: None) -> None: ...
@overload
def decode_offset_value(data: bytes | None) -> OffsetValue | None: ...


def decode_offset_value(data: bytes | None) -> OffsetValue | None:
    """An OffsetCommitValue v0..v4; None for a tombstone (the offset was deleted or expired)."""
    if data is None:
        return None
    r = SchemaReader(data, "offset commit value")
    version = r.value_version(VALUE_VERSIONS)
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    offset = r.i64("offset")
    leader_epoch = r.i32("leader epoch") if version >= 3 else -1
    # Kafka never writes a null metadata string; reading one as "" keeps a
    # hand-made or foreign record usable instead of failing the whole group load.
    metadata = (r.compact_string("metadata") if flexible else r.string("metadata")) or ""
    commit_timestamp = r.i64("commit timestamp")
    expire_timestamp = r.i64("expire timestamp") if version == 1 else -1
    topic_id: list[str] = []

    def read_topic_id(r: SchemaReader) -> None:
        topic_id.append(uuid_text(r.uuid("topic id")))

    if flexible:
        r.tagged_fields({0: read_topic_id})
    r.expect_end()
    return OffsetValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp, next(iter(topic_id), None))
