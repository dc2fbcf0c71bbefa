"""A scan planned before a cleaning (compaction) swapped its segments reads the cleaned partition.

The plan fixes byte extents of segment files; a cleaning replaces a group of segments by one new
file under the first one's name. The read must notice (the extent names the file it was planned
on) and read the same offsets from the partition as it is now: what a Consumer reads of it.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pyarrow as pa
import pytest

import txlog
from storage.errors import FileReplacedError, KafkaStorageError
from storage.extent import SegmentExtent, open_extent
from tests.scan.test_scan_consumer import ALL_COLUMNS, RC, RU, consumer_tuples, scan_tuples
from tests.spark.spark_stores import clean_compacted, compacted_store, no_fsync


@pytest.fixture
def compacted(tmp_path) -> str:
    with no_fsync():
        return compacted_store(str(tmp_path / "compacted"))


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
@pytest.mark.parametrize("merge", [False, True])
def test_a_scan_planned_before_a_cleaning_reads_the_cleaned_partition(compacted, isolation, offsets, merge):
    bounds = (
        {}
        if offsets is None
        else {"starting_offsets": {("c", 0): offsets[0]}, "ending_offsets": {("c", 0): offsets[1]}}
    )
    s = txlog.scan(compacted, "c", isolation_level=isolation, columns=ALL_COLUMNS, **bounds)
    planned = [e for r in s.ranges for e in r.extents]
    before = scan_tuples(s.to_arrow())
    assert len(planned) > 3, "the plan spans several segments"
    clean_compacted(compacted, merge=merge)
    assert all(replaced(e) for e in planned[:-1]), "the cleaning replaced every sealed segment the plan read"
    start, end = s.ranges[0].start, s.ranges[-1].end
    expected = in_range(consumer_tuples(compacted, isolation, [("c", 0)]), start, end)
    assert len(expected) < len(before), "the cleaning removed records of the range"
    assert scan_tuples(s.to_arrow()) == expected


def test_a_partition_deleted_after_the_plan_is_one_error_naming_the_file(compacted):
    s = txlog.scan(compacted, "c", columns=ALL_COLUMNS)
    first = s.ranges[0].extents[0]
    clean_compacted(compacted, merge=True)
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


def test_a_file_with_the_planned_inode_number_and_first_batch_is_not_the_planned_file(compacted, tmp_path):
    """ext4 gives the replaced file's inode number to the next file made, and a cleaned group often keeps
    its first batch as it was, where it was: the extent took such a file for the planned one and read
    its bytes by the planned positions (here a batch then zeros: corruption reported, not a replan).
    The inode's generation tells the two apart (docs/reliability-scenarios.md scenario 88)."""
    from storage.file_records import FileRecords

    with txlog.Store.open(compacted, read_only=True) as store:
        extent = store.partition("c", 0).extents(3, 20)[0]
    if extent.generation is None:
        pytest.skip("this file system keeps no inode generation")
    path = extent.log_path
    with FileRecords.open(path) as records:
        first = records.header_at(extent.start_position)
    assert first is not None and first.position + first.size < extent.end_position, "the extent holds two batches"
    with open(path, "rb") as f:
        data = f.read()
    other = data[: first.position + first.size] + bytes(len(data) - first.position - first.size)
    inode = os.stat(path).st_ino
    os.unlink(path)
    for i in range(64):  # files kept aside until the next one made gets the freed number
        with open(path, "wb") as f:
            f.write(other)
        if os.stat(path).st_ino == inode:
            break
        os.rename(path, str(tmp_path / f"aside{i}"))
    else:
        pytest.skip("this file system gave the freed inode number to none of 64 new files")
    with pytest.raises(FileReplacedError, match=f"{path} was replaced"):
        list(open_extent(extent))


@pytest.mark.parametrize("isolation", [RC, RU])
def test_a_file_replaced_in_the_middle_of_its_read_is_read_on_from_the_cleaned_partition(
    compacted, isolation, monkeypatch
):
    """A reader's descriptor evicted mid-extent is reopened by name (storage/descriptor_cache.py),
    which refuses the cleaned file there: the offsets not read yet are planned again and read."""
    import storage.file_records as file_records
    import txlog.scan.range_reader as range_reader
    from storage.descriptor_cache import CACHE

    monkeypatch.setattr(range_reader, "ROWS_PER_ARROW_BATCH", 1)
    monkeypatch.setattr(file_records, "SCAN_CHUNK", 64)  # a read per batch: none is read ahead of the cleaning
    s = txlog.scan(compacted, "c", isolation_level=isolation, columns=ALL_COLUMNS)
    reader = s.to_reader()
    first = reader.read_next_batch()  # one batch of the first segment read; its file is open, idle
    limit = CACHE.limit
    CACHE.set_limit(1)  # the cleaning's own opens evict the reader's descriptor
    try:
        clean_compacted(compacted, merge=True)
        assert replaced(s.ranges[0].extents[0])
        rest = reader.read_all()
    finally:
        CACHE.set_limit(limit)
    read_before = scan_tuples(pa.Table.from_batches([first]))
    got = scan_tuples(pa.concat_tables([pa.Table.from_batches([first]), rest]))
    # what was read before the cleaning, then the cleaned partition's records after it, each once
    after = in_range(consumer_tuples(compacted, isolation, [("c", 0)]), read_before[-1][2] + 1, s.ranges[0].end)
    assert after and got == read_before + after
