"""When producer-state snapshots are taken, kept and removed: the file half of Kafka's ProducerStateManager.

`producer_state.py` is the idempotence state machine and touches no file; `producer_snapshot.py`
is the `.snapshot` format. The policy between them and the log's segments lives here:

* a snapshot is taken at the log end when a segment rolls (at the new base), before retention
  deletes data (KIP-360: producer state outlives the deleted batches), at a clean close (the
  next open scans nothing), after recovery scanned a tail, and by a writer whenever the active
  segment grew SNAPSHOT_INTERVAL_BYTES since the last one (so recovery after a kill -9 replays
  at most that much, however large the segment: Kafka snapshots only at roll and shutdown, and
  rescans the whole segment holding its recovery point);
* one snapshot per segment base is kept, so a segment's `.txnindex` can be rebuilt from the
  state at its start without replaying the whole log, plus the newest (a clean close's, or the
  active segment's latest);
* snapshots below the log start go with retention; ones past a cut torn tail are removed
  (KAFKA-5747: they would restore state for batches that are gone).

Kept apart from the state machine so that the machine stays a pure, file-free object that
throwaway replays (a `.txnindex` rebuild, the integrity check) can use on their own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from storage.errors import CorruptSnapshotError
from storage.log_files import producer_snapshot_file
from storage.producer_snapshot import delete_snapshot, list_snapshots, read_snapshot, write_snapshot
from storage.producer_state import ProducerStateManager
from storage.segment import LogSegment

#: Bytes of the active segment between a writer's snapshots: bounds a crash recovery's replay.
#: A snapshot costs two small fsynced files, next to the thousands of fsyncs of this much data.
SNAPSHOT_INTERVAL_BYTES = 16 << 20


def take_snapshot(directory: str, state: ProducerStateManager) -> None:
    """Write the state at its end offset, unless a snapshot already holds that offset.

    One stat, not a listing: a roll takes one, and its cost must not grow with the snapshots
    kept (one per segment). None past the end offset can be there to make this one stale:
    those go with the tail they covered (`delete_snapshots_after`).
    """
    offset = state.end_offset
    if os.path.exists(producer_snapshot_file(directory, offset)):
        return
    write_snapshot(directory, offset, state.snapshot_entries())


def clean_snapshots(directory: str, segment_bases: Iterable[int], *, keep_latest: bool) -> None:
    """Keep one snapshot per segment base (the start of that segment's rebuild) and, if asked, the newest."""
    bases = set(segment_bases)
    snaps = list_snapshots(directory)
    for i, (offset, path) in enumerate(snaps):
        newest = i == len(snaps) - 1
        if offset in bases or (keep_latest and newest):
            continue
        delete_snapshot(path)


def snapshots_before(directory: str, offset: int) -> list[str]:
    """Paths of the snapshots below `offset`: what retention deletes with the segments below a new log start."""
    return [path for snap_offset, path in list_snapshots(directory) if snap_offset < offset]


def delete_snapshots_after(directory: str, offset: int) -> None:
    """Remove snapshots past `offset`, where a torn tail was cut: their state covers batches that are gone."""
    for snap_offset, path in list_snapshots(directory):
        if snap_offset > offset:
            delete_snapshot(path)


def state_at_segment_start(directory: str, segments: Sequence[LogSegment], i: int) -> ProducerStateManager:
    """Producer state as of `segments[i]`'s base, which rebuilding that segment's `.txnindex` starts from.

    The newest readable snapshot between the log start and that base (normally the one taken
    when the segment was rolled in), then a replay of the earlier segments' batches past it;
    without one, a replay from the log start. The snapshot is loaded at `now_ms=0`, so no
    producer expires: the rebuild derives the entries from the log, whatever the clock says.
    """
    seg = segments[i]
    state = ProducerStateManager()
    start = segments[0].base_offset
    for offset, path in reversed(list_snapshots(directory)):
        if start <= offset <= seg.base_offset:
            try:
                state.load(read_snapshot(path), offset, now_ms=0)
            except CorruptSnapshotError:
                continue
            break
    else:
        state.reset(start)
    for earlier in segments[:i]:
        if earlier.next_offset <= state.end_offset:
            continue
        for _, batch in earlier.iter_batches(0):
            if batch.base_offset >= state.end_offset:
                state.replay_batch(batch)
    return state
