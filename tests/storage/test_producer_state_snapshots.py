"""The snapshot policy at its own grain (storage/producer_state_snapshots.py).

When a snapshot is written, which ones are kept (one per segment base, plus the newest at a
clean close), which go with retention or a cut tail, and the producer state a segment's
`.txnindex` rebuild starts from.
"""

from __future__ import annotations

import os

from storage import Store
from storage.producer_snapshot import list_snapshots, write_snapshot
from storage.producer_state import ProducerStateManager
from storage.producer_state_snapshots import (
    clean_snapshots,
    delete_snapshots_after,
    snapshots_before,
    state_at_segment_start,
    take_snapshot,
)
from storage.records import build_batch
from storage.segment import LogSegment

PID = 7


def offsets(directory: str) -> list[int]:
    return [offset for offset, _ in list_snapshots(directory)]


def test_take_snapshot_writes_at_the_end_offset_once(tmp_path):
    d = str(tmp_path)
    state = ProducerStateManager()
    state.replay_data(PID, 0, 0, 2, 0, 2, 1000, False)
    state.end_offset = 3
    take_snapshot(d, state)
    path = list_snapshots(d)[-1][1]
    mtime = os.stat(path).st_mtime_ns
    take_snapshot(d, state)  # the newest already holds offset 3: nothing is rewritten
    assert offsets(d) == [3] and os.stat(path).st_mtime_ns == mtime
    state.end_offset = 5
    take_snapshot(d, state)
    assert offsets(d) == [3, 5]


def test_clean_snapshots_keeps_segment_bases_and_optionally_the_newest(tmp_path):
    d = str(tmp_path)
    for offset in (0, 4, 10, 12, 20, 23):
        write_snapshot(d, offset, [])
    clean_snapshots(d, [10, 20], keep_latest=True)
    assert offsets(d) == [10, 20, 23]
    clean_snapshots(d, [10, 20], keep_latest=False)
    assert offsets(d) == [10, 20]


def test_retention_and_a_cut_tail_select_by_offset(tmp_path):
    d = str(tmp_path)
    for offset in (0, 10, 20, 30):
        write_snapshot(d, offset, [])
    assert [os.path.basename(p) for p in snapshots_before(d, 20)] == [
        "00000000000000000000.snapshot",
        "00000000000000000010.snapshot",
    ]
    delete_snapshots_after(d, 20)
    assert offsets(d) == [0, 10, 20]


def build_log(store_path: str) -> str:
    """Three segments of one idempotent producer: batches of 2 records, a roll every 2 batches."""
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"retention.ms": -1})
    log = s.partition("t", 0)
    for i in range(6):
        log.append(build_batch([(None, b"v", None, None)] * 2, producer_id=PID, producer_epoch=0, base_sequence=2 * i))
        if i % 2 == 1:
            log.roll()
    s.close()
    return os.path.join(store_path, "t-0")


def open_segments(directory: str) -> list[LogSegment]:
    bases = sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))
    segments = [LogSegment(directory, base, writable=False) for base in bases]
    for seg in segments:
        for position, batch in seg.iter_batches(0):
            seg.note_batch(batch, position)
    return segments


def test_state_at_segment_start_from_the_snapshot_at_its_base(store_path):
    d = build_log(store_path)
    segments = open_segments(d)
    assert [s.base_offset for s in segments] == [0, 4, 8, 12]
    state = state_at_segment_start(d, segments, 2)
    assert state.end_offset == 8
    assert state.get(PID).last_seq == 7  # sequences 0..7 went into offsets 0..7
    for seg in segments:
        seg.close()


def test_state_at_segment_start_replays_past_a_corrupt_or_missing_snapshot(store_path):
    d = build_log(store_path)
    segments = open_segments(d)
    expected = state_at_segment_start(d, segments, 3)
    by_offset = dict(list_snapshots(d))
    with open(by_offset[12], "r+b") as f:
        f.seek(8)
        f.write(b"\x00\xff")
    from_older = state_at_segment_start(d, segments, 3)  # falls back to the snapshot at 8, then replays
    for path in by_offset.values():
        os.remove(path)
    from_start = state_at_segment_start(d, segments, 3)  # no snapshot: a replay from the log start
    for state in (from_older, from_start):
        assert state.end_offset == expected.end_offset == 12
        assert state.get(PID).last_seq == expected.get(PID).last_seq == 11
    for seg in segments:
        seg.close()
