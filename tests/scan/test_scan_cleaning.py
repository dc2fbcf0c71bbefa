"""A scan planned before a cleaning (compaction) swapped its segments reads the cleaned partition.

The plan fixes byte extents of segment files; a cleaning replaces a group of segments by one new
file under the first one's name. The read must notice (the extent names the file it was planned
on) and read the same offsets from the partition as it is now: what a Consumer reads of it.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

import txlog
from storage.errors import FileReplacedError, KafkaStorageError
from storage.extent import SegmentExtent, open_extent
from tests.scan.test_scan_consumer import ALL_COLUMNS, RC, RU, consumer_tuples, scan_tuples
from tests.spark.spark_stores import compacted_store, no_fsync


@pytest.fixture
def compacted(tmp_path) -> str:
    with no_fsync():
        return compacted_store(str(tmp_path / "compacted"))


def clean(path: str) -> None:
    with txlog.Store.open(path) as store:
        assert store.compact("c", 0), "the cleaning cleaned nothing"


def replaced(extent: SegmentExtent) -> bool:
    """Whether the file the extent was planned on is gone from its name (removed, or another file there)."""
    try:
        st = os.stat(extent.log_path)
    except FileNotFoundError:
        return True
    return (st.st_dev, st.st_ino) != (extent.device, extent.inode)


def in_range(rows: list[tuple], start: int, end: int) -> list[tuple]:
    return [r for r in rows if start <= r[2] < end]


@pytest.mark.parametrize("isolation", [RC, RU])
@pytest.mark.parametrize("offsets", [None, (7, 41)])
def test_a_scan_planned_before_a_cleaning_reads_the_cleaned_partition(compacted, isolation, offsets):
    bounds = (
        {}
        if offsets is None
        else {"starting_offsets": {("c", 0): offsets[0]}, "ending_offsets": {("c", 0): offsets[1]}}
    )
    s = txlog.scan(compacted, "c", isolation_level=isolation, columns=ALL_COLUMNS, **bounds)
    planned = [e for r in s.ranges for e in r.extents]
    before = scan_tuples(s.to_arrow())
    assert len(planned) > 3, "the plan spans several segments"
    clean(compacted)
    assert all(replaced(e) for e in planned[:-1]), "the cleaning replaced every sealed segment the plan read"
    start, end = s.ranges[0].start, s.ranges[-1].end
    expected = in_range(consumer_tuples(compacted, isolation, [("c", 0)]), start, end)
    assert len(expected) < len(before), "the cleaning removed records of the range"
    assert scan_tuples(s.to_arrow()) == expected


def test_a_partition_deleted_after_the_plan_is_one_error_naming_the_file(compacted):
    s = txlog.scan(compacted, "c", columns=ALL_COLUMNS)
    first = s.ranges[0].extents[0]
    clean(compacted)
    with txlog.Admin(compacted) as admin:
        admin.delete_topic("c")
    with pytest.raises(KafkaStorageError, match=f"{first.log_path}.*rerun the query"):
        s.to_arrow()


def test_a_file_with_the_planned_inode_but_other_bytes_is_not_the_planned_file(compacted):
    """The replaced file is unlinked after the swap, so a later cleaning's file may get its inode:
    the header of the batch the extent starts at tells them apart."""
    with txlog.Store.open(compacted, read_only=True) as store:
        extent = store.partition("c", 0).extents(3, 20)[0]
    assert extent.first_base_offset >= 0
    assert list(open_extent(extent))
    for other in (replace(extent, first_crc=extent.first_crc ^ 1), replace(extent, first_base_offset=99)):
        with pytest.raises(FileReplacedError, match=f"{other.log_path} was replaced"):
            open_extent(other)
    with pytest.raises(FileReplacedError):
        open_extent(replace(extent, inode=extent.inode + 1))
