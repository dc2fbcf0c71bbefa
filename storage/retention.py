"""Time- and size-based retention, and the log start DeleteRecords moves: which sealed segments go, and their deletion.

Kafka deletes whole segments only, oldest first, and never the active one. A segment goes
when its newest record is older than retention.ms, or when the log without it is still at
least retention.bytes; the first segment that qualifies for neither stops the walk, so the
log start only ever moves forward over a contiguous prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.config import TopicConfig
from storage.durable import unlink_durably
from storage.producer_state import ProducerStateManager
from storage.producer_state_snapshots import snapshots_before, take_snapshot
from storage.segment import LogSegment


def segments_past_retention(segments: Sequence[LogSegment], config: TopicConfig, now: int) -> list[LogSegment]:
    """The leading sealed segments retention deletes at clock `now` (ms), oldest first.

    The time rule asks the segment's batch headers too, not only its time index: data is
    deleted on this answer, and a time index cut short by a crash would make it too eager.
    """
    # The total only where retention.bytes asks for it: a roll runs this, and must not walk every segment.
    total = sum(s.size for s in segments) if config.retention_bytes >= 0 else 0
    doomed: list[LogSegment] = []
    for seg in segments[:-1]:
        expired = (
            config.retention_ms >= 0
            and now - seg.largest_timestamp() > config.retention_ms
            and now - seg.scan_max_timestamp() > config.retention_ms
        )
        oversize = config.retention_bytes >= 0 and total - seg.size >= config.retention_bytes
        if not (expired or oversize):
            break
        doomed.append(seg)
        total -= seg.size
    return doomed


def segments_below(segments: Sequence[LogSegment], log_start: int) -> list[LogSegment]:
    """The leading sealed segments holding only offsets below `log_start` (moved there by DeleteRecords)."""
    doomed: list[LogSegment] = []
    for seg, following in zip(segments[:-1], segments[1:], strict=True):
        if following.base_offset > log_start:
            break
        doomed.append(seg)
    return doomed


def delete_segments(directory: str, doomed: Sequence[LogSegment], new_start: int, state: ProducerStateManager) -> None:
    """Delete `doomed` (the segments below `new_start`) and the snapshots below it; caller holds the lock.

    A snapshot at the log end is taken first, so producer state outlives the deleted data
    (KIP-360). Each segment's `.log` goes before its indexes, so a crash midway leaves only
    orphan indexes, which the next open removes.
    """
    take_snapshot(directory, state)
    paths: list[str] = []
    for seg in doomed:
        paths.extend(seg.delete_files())
        seg.close()
    paths.extend(snapshots_before(directory, new_start))
    unlink_durably(paths, directory)
