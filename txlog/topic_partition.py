"""The names clients use for a partition and a committed position, as in Kafka's clients."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A group's committed position: the offset of the *next* record to read, plus free text."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
