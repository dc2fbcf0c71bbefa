"""What a consumer's poll returns for each record, and what a producer's send resolves to."""

from __future__ import annotations

from typing import NamedTuple

from storage.records import TimestampType


class ConsumerRecord(NamedTuple):
    """One data record (control records are never returned), with the batch fields it came in."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    producer_id: int = -1
    producer_epoch: int = -1
    sequence: int = -1
    is_transactional: bool = False


class RecordMetadata(NamedTuple):
    """Where a sent record landed, once its batch was acknowledged."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1
