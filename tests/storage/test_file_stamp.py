"""Files a view rereads only when their stat changed (storage/file_stamp.py, docs/reliability-scenarios.md 88).

ext4 gives a freed inode number to the next file made: a checkpoint replaced (by rename) twice in one
tick of the clock that stamps mtimes may have its first version's inode, mtime and size again. A view
whose key was taken in that tick must read the file again, not take the new version for the old one.
"""

from __future__ import annotations

import os

from storage import Store
from storage.checkpoint import LOG_START_CHECKPOINT
from storage.file_stamp import change_key, stamp_clock_ns
from storage.records import build_batch


def test_a_key_taken_in_its_files_tick_is_not_kept(tmp_path) -> None:
    path = str(tmp_path / "f")
    with open(path, "w") as f:
        f.write("x")
    ahead = stamp_clock_ns() + 60_000_000_000
    os.utime(path, ns=(ahead, ahead))
    assert change_key(path) is None
    os.utime(path, ns=(ahead - 120_000_000_000, ahead - 120_000_000_000))
    st = os.stat(path)
    assert change_key(path) == (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def test_scenario88_a_log_start_checkpoint_back_under_its_first_inode_mtime_and_size_is_read_again(
    store, store_path, inode_reuse
) -> None:
    """A reader's view kept the log start of the checkpoint's first version after DeleteRecords moved it on."""
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    for i in range(80):
        log.append(build_batch([(None, b"v%d" % i, None, 1_700_000_000_000)]))
    log.delete_records(10)
    checkpoint = os.path.join(log.directory, LOG_START_CHECKPOINT)
    inode_reuse.stamp_ahead(checkpoint)
    with Store.open(store_path, read_only=True) as reader:
        reader_log = reader.partition("t", 0)
        assert reader_log.log_start_offset == 10
        # More two-digit starts (the checkpoint keeps its size) than the 64 rewrites the fixture tries before
        # it skips: running out first ended the test in StopIteration on a file system slow to reuse inodes.
        starts = iter(range(11, 80))
        inode_reuse.rewrite_until_reused(checkpoint, lambda: log.delete_records(next(starts)))
        assert reader_log.log_start_offset == log.log_start_offset > 10
