"""Retention at its own grain: which sealed segments go (storage/retention.py), and their deletion.

The decision is tested on stand-in segments (size and the two timestamp sources retention
reads); the deletion on real segment and snapshot files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from storage.config import TopicConfig
from storage.producer_snapshot import list_snapshots, write_snapshot
from storage.producer_state import ProducerStateManager
from storage.retention import delete_segments, segments_past_retention
from storage.segment import LogSegment

NOW = 1_000_000


@dataclass(eq=False)
class Seg:
    """What retention reads of a segment: its size and newest timestamp (time index, batch headers)."""

    name: str
    size: int = 100
    indexed_ts: int = NOW  # newest timestamp by the time index
    header_ts: int = NOW  # newest timestamp by the batch headers

    def largest_timestamp(self) -> int:
        return self.indexed_ts

    def scan_max_timestamp(self) -> int:
        return self.header_ts


def names(segments) -> list[str]:
    return [s.name for s in segments]


def old(name: str, age: int = 5_000) -> Seg:
    return Seg(name, indexed_ts=NOW - age, header_ts=NOW - age)


def test_nothing_goes_when_both_limits_are_off():
    segs = [old("a", 10**9), old("b", 10**9), Seg("active")]
    assert segments_past_retention(segs, TopicConfig(retention_ms=-1, retention_bytes=-1), NOW) == []


def test_expired_sealed_segments_go_but_never_the_active_one():
    segs = [old("a"), old("b"), old("active")]
    assert names(segments_past_retention(segs, TopicConfig(retention_ms=1_000), NOW)) == ["a", "b"]


def test_the_first_segment_to_keep_stops_the_walk():
    """Deletion is a contiguous prefix: an old segment after a young one stays."""
    segs = [old("a"), Seg("young"), old("c"), Seg("active")]
    assert names(segments_past_retention(segs, TopicConfig(retention_ms=1_000), NOW)) == ["a"]


def test_a_segment_exactly_retention_ms_old_stays():
    segs = [old("a", age=1_000), Seg("active")]
    assert segments_past_retention(segs, TopicConfig(retention_ms=1_000), NOW) == []


def test_a_time_index_cut_short_does_not_delete_young_data():
    """The time index says old, the batch headers say young: the headers win, the data stays."""
    segs = [Seg("a", indexed_ts=NOW - 5_000, header_ts=NOW), Seg("active")]
    assert segments_past_retention(segs, TopicConfig(retention_ms=1_000), NOW) == []


def test_size_retention_deletes_while_the_rest_still_reaches_the_limit():
    segs = [Seg("a", 100), Seg("b", 100), Seg("c", 100), Seg("active", 50)]
    # total 350: without a 250 >= 200, without b 150 < 200 -> only a goes.
    assert names(segments_past_retention(segs, TopicConfig(retention_ms=-1, retention_bytes=200), NOW)) == ["a"]
    # a limit of 150: a (250 >= 150) and b (150 >= 150) go, c would leave 50.
    assert names(segments_past_retention(segs, TopicConfig(retention_ms=-1, retention_bytes=150), NOW)) == ["a", "b"]


def test_size_retention_never_deletes_the_active_segment():
    segs = [Seg("a", 100), Seg("active", 10_000)]
    assert names(segments_past_retention(segs, TopicConfig(retention_ms=-1, retention_bytes=0), NOW)) == ["a"]


def test_delete_segments_snapshots_first_and_removes_files_and_older_snapshots(tmp_path):
    d = str(tmp_path)
    # Empty segments have no `.txnindex` file (the usual case): deletion must not mind.
    segments = [LogSegment.create(d, base) for base in (0, 10, 20)]
    for offset in (0, 10, 20):
        write_snapshot(d, offset, [])
    state = ProducerStateManager()
    state.reset(25)
    delete_segments(d, segments[:2], 20, state)
    left = sorted(os.listdir(d))
    assert not any(n.startswith(("00000000000000000000.", "00000000000000000010.")) for n in left), left
    assert "00000000000000000020.log" in left
    # The snapshot at the log end (taken first) and the one at the new log start remain.
    assert [o for o, _ in list_snapshots(d)] == [20, 25]
    segments[2].close()
