"""DeleteRecords at the storage level: `PartitionLog.delete_records` moves the log start (Kafka's
UnifiedLog.maybeIncrementLogStartOffset), persisted before any segment goes (docs/reliability-scenarios.md rule 8)."""

from __future__ import annotations

import os
import time

import pytest

from storage import Store
from storage.checkpoint import LOG_START_CHECKPOINT
from storage.errors import OffsetOutOfRangeError
from storage.log_files import log_file
from storage.records import build_batch

NOW = int(time.time() * 1000)


def fill(log, count: int, *, timestamp: int = NOW) -> None:
    """`count` one-record batches, offsets 0..count-1 when the log starts empty; record i has timestamp + i."""
    for i in range(count):
        log.append(build_batch([(None, b"v%02d" % i + b"x" * 40, [], timestamp + i)]))


@pytest.fixture
def store(tmp_path):
    s = Store.open(str(tmp_path / "s"))
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    yield s
    s.close()


def test_the_log_start_moves_inside_a_segment_and_reads_below_it_are_out_of_range(store):
    log = store.partition("t", 0)
    fill(log, 12)
    bases = [seg.base_offset for seg in log.segments]
    inside = bases[1] + 1  # not a segment boundary: the segment holding it stays
    assert log.delete_records(inside) == inside
    assert log.log_start_offset == inside
    assert [seg.base_offset for seg in log.segments] == bases[1:]  # the whole segment below went
    assert not os.path.exists(log_file(log.directory, bases[0]))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(inside - 1)
    assert log.read(inside)[0].last_offset >= inside
    assert log.bounds()[0] == inside and log.visible_bounds()[0] == inside


def test_a_lower_offset_changes_nothing_and_one_past_the_high_watermark_is_refused(store):
    log = store.partition("t", 0)
    fill(log, 5)
    assert log.delete_records(3) == 3
    assert log.delete_records(1) == 3  # the log start never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(log.high_watermark + 1)
    assert log.delete_records(log.high_watermark) == 5  # everything: an empty log starting at 5
    assert log.read(5) == []


def test_other_views_and_a_reopened_store_see_the_moved_log_start(store, tmp_path):
    log = store.partition("t", 0)
    fill(log, 6)
    other = Store.open(str(tmp_path / "s"), read_only=True)
    try:
        assert other.partition("t", 0).log_start_offset == 0
        inside = log.segments[1].base_offset + 1  # not a segment boundary: only the checkpoint says it
        log.delete_records(inside)
        assert other.partition("t", 0).log_start_offset == inside  # picked up from the checkpoint file
        with pytest.raises(OffsetOutOfRangeError):
            other.partition("t", 0).read(inside - 1)
    finally:
        other.close()
    store.close()
    again = Store.open(str(tmp_path / "s"))
    try:
        assert again.partition("t", 0).log_start_offset == inside
    finally:
        again.close()


def test_a_time_lookup_never_answers_below_the_log_start(store):
    log = store.partition("t", 0)
    fill(log, 6, timestamp=1_000)
    log.delete_records(3)
    assert log.offset_for_timestamp(1_000) == 3  # record 0 has the time, but lies below the log start
    assert log.offset_for_timestamp(1_004) == 4


def test_a_damaged_checkpoint_leaves_a_view_at_the_log_start_it_knew(store):
    log = store.partition("t", 0)
    fill(log, 4)
    log.delete_records(2)
    with open(os.path.join(log.directory, LOG_START_CHECKPOINT), "w") as f:
        f.write("0\n1\nnot-a-number\n")
    assert log.log_start_offset == 2
    assert log.delete_records(3) == 3  # and the next move rewrites the file
