"""The log loader at its own grain (storage/log_loader.py): which producer snapshot recovery starts from.

A snapshot is usable only at a batch boundary inside the log; one past a cut tail, one in
the middle of a batch, a corrupt one and one below the log start are skipped (and deleted by
a loader allowed to repair). Whatever snapshot it starts from, the replay ends in the same
producer state as a replay of the whole log.
"""

from __future__ import annotations

import os

import pytest

from storage import Store
from storage.config import TopicConfig
from storage.log_loader import LogLoader, segment_index_for
from storage.producer_snapshot import list_snapshots, write_snapshot
from storage.producer_state import ProducerStateManager
from storage.records import build_batch
from storage.txnindex_check import TxnIndexCheck

PID = 7
RECORDS_PER_BATCH = 3


@pytest.fixture
def pdir(store_path) -> str:
    """A partition of several segments written by one idempotent producer, closed cleanly."""
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 400, "retention.ms": -1})
    log = s.partition("t", 0)
    for i in range(8):
        recs = [(None, b"v%d-%d" % (i, j) + b"x" * 40, None, 1000 + i) for j in range(RECORDS_PER_BATCH)]
        log.append(build_batch(recs, producer_id=PID, producer_epoch=0, base_sequence=i * RECORDS_PER_BATCH))
    assert len(log.segments) >= 3
    s.close()
    return os.path.join(store_path, "t-0")


def open_loader(directory: str, *, repair: bool) -> LogLoader:
    loader = LogLoader(
        directory, TopicConfig(), [], ProducerStateManager(), TxnIndexCheck(), read_only=not repair, clock=lambda: 0
    )
    loader.load(repair=repair)
    return loader


def close(loader: LogLoader) -> None:
    for seg in loader.segments:
        seg.close()


def log_end(loader: LogLoader) -> int:
    return loader.segments[-1].next_offset


def snapshot_offsets(directory: str) -> list[int]:
    return [offset for offset, _ in list_snapshots(directory)]


def producer_view(state: ProducerStateManager) -> dict:
    """What a snapshot keeps per producer (Kafka's format holds only its last batch)."""
    return {pid: (e.epoch, e.last_seq, tuple(e.batches[-1])) for pid, e in state.producers.items()}


def test_a_clean_close_leaves_a_snapshot_at_the_end_and_nothing_to_replay(pdir):
    loader = open_loader(pdir, repair=False)
    end = log_end(loader)
    assert snapshot_offsets(pdir)[-1] == end
    last = len(loader.segments) - 1
    assert loader.restore_producer_state(repair=False) == (last, loader.segments[last].size)
    assert loader.state.end_offset == end
    close(loader)


@pytest.mark.parametrize("repair", [False, True])
def test_a_snapshot_past_the_log_end_is_skipped_and_deleted_only_by_a_repairing_loader(pdir, repair):
    """KAFKA-5747: a snapshot from beyond a cut tail would restore state for lost batches."""
    loader = open_loader(pdir, repair=False)
    end = log_end(loader)
    write_snapshot(pdir, end + RECORDS_PER_BATCH, [])
    assert loader.restore_producer_state(repair=repair)[0] == len(loader.segments) - 1
    assert loader.state.end_offset == end
    assert (end + RECORDS_PER_BATCH in snapshot_offsets(pdir)) is not repair
    close(loader)


def test_a_snapshot_inside_a_batch_is_skipped(pdir):
    loader = open_loader(pdir, repair=False)
    end = log_end(loader)
    os.remove(list_snapshots(pdir)[-1][1])
    inside = end - 1  # the last batch holds end-3 .. end-1
    write_snapshot(pdir, inside, [])
    assert loader.locate(inside) is None
    loader.restore_producer_state(repair=True)
    assert loader.state.end_offset < inside
    assert inside not in snapshot_offsets(pdir)
    close(loader)


def test_a_corrupt_snapshot_falls_back_to_the_one_before(pdir):
    loader = open_loader(pdir, repair=False)
    snaps = list_snapshots(pdir)
    assert len(snaps) >= 2
    (previous, _), (newest, newest_path) = snaps[-2], snaps[-1]
    with open(newest_path, "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    seg_idx, position = loader.restore_producer_state(repair=True)
    assert loader.state.end_offset == previous
    assert loader.segments[seg_idx].base_offset <= previous
    assert newest not in snapshot_offsets(pdir)
    close(loader)


def test_a_snapshot_below_the_log_start_is_not_used(pdir):
    loader = open_loader(pdir, repair=False)
    close(loader)
    first = min(n for n in os.listdir(pdir) if n.endswith(".log"))
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        path = os.path.join(pdir, first[:-4] + suffix)
        if os.path.exists(path):
            os.remove(path)  # as retention leaves it
    for _, path in list_snapshots(pdir):
        os.remove(path)
    write_snapshot(pdir, 0, [])
    loader = open_loader(pdir, repair=False)
    start = loader.segments[0].base_offset
    assert start > 0
    assert loader.restore_producer_state(repair=True) == (0, 0)  # no usable snapshot: replay it all
    assert loader.state.end_offset == start
    assert snapshot_offsets(pdir) == []
    close(loader)


def test_every_starting_snapshot_replays_to_the_same_state(pdir):
    """Recovery from any snapshot, or from none, ends in the state of a replay of the whole log."""
    snaps = list_snapshots(pdir)
    contents = {}
    for _, path in snaps:
        with open(path, "rb") as f:
            contents[path] = f.read()
    views = []
    for keep in [None] + [path for _, path in snaps]:
        for path, data in contents.items():
            if path == keep:
                with open(path, "wb") as f:
                    f.write(data)
            elif os.path.exists(path):
                os.remove(path)
        loader = open_loader(pdir, repair=False)
        views.append((loader.state.end_offset, producer_view(loader.state)))
        close(loader)
    assert len(views) == len(snaps) + 1
    assert all(v == views[0] for v in views), views
    assert views[0][1][PID][1] == 8 * RECORDS_PER_BATCH - 1


def test_segment_index_for_picks_the_floor_segment(pdir):
    loader = open_loader(pdir, repair=False)
    segs = loader.segments
    for i, seg in enumerate(segs):
        assert segment_index_for(segs, seg.base_offset) == i
        assert segment_index_for(segs, seg.next_offset - 1) == i
    assert segment_index_for(segs, -5) == 0
    assert segment_index_for(segs, 10**9) == len(segs) - 1
    close(loader)
