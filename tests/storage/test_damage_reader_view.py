"""docs/reliability-scenarios.md scenario 65: a lock-free writable view's log end never goes backwards (the race
behind a rare tests/txlog/test_multiprocess.py::test_reader_while_writers_append[writable] failure).

A view that is not holding the writer lock catches up, then gives a segment its first full
index check. If a writer appends (and adds an offset-index entry) between the two, the
index points past what the view has seen. The check must not take that for damage and
rebuild the indexes from bytes the view never replayed: that moved the segment's end past
the view's producer state, and the next catch-up, meeting a write in flight, put the end
back where the state was (log_end_offset 214, then read(214) out of range at 213).
The interleaving is forced here by running the writer's append inside the reader's check.
"""

from __future__ import annotations

import os
import time

from storage import Store
from storage.log_files import LOG_FILE_SUFFIX, offset_of
from storage.records import build_batch
from storage.segment import LogSegment


def _batch(i: int, size: int = 300) -> bytes:
    return build_batch([(None, f"{i}".encode() + b"x" * size, None, int(time.time() * 1000))])


def _active_log(directory: str) -> str:
    base = max(b for b in (offset_of(n, LOG_FILE_SUFFIX) for n in os.listdir(directory)) if b is not None)
    return os.path.join(directory, f"{base:020d}{LOG_FILE_SUFFIX}")


def test_scenario65_writer_appending_during_a_readers_index_check_does_not_move_its_log_end_back(tmp_path, monkeypatch):
    path = str(tmp_path / "store")
    writer_store = Store.open(path)
    writer_store.create_topic("t", 1, config={"segment.bytes": 4096, "index.interval.bytes": 256})
    writer = writer_store.partition("t", 0)
    for i in range(30):  # several rolls: the active segment is one the reader opens by catching up
        writer.append(_batch(i))
    reader_store = Store.open(path)  # writable, but reading takes no lock
    reader = reader_store.partition("t", 0)
    for i in range(30, 45):
        writer.append(_batch(i))
    assert reader.log_end_offset == writer.log_end_offset  # caught up: the new segments are opened, unchecked

    original = LogSegment.full_index_check
    appended = []

    def check_after_a_writer_appends(seg):
        if not appended:  # the writer wins the race between the reader's catch-up and its check
            appended.append(writer.append(_batch(99, size=600)))
        return original(seg)

    monkeypatch.setattr(LogSegment, "full_index_check", check_after_a_writer_appends)
    last = reader.log_end_offset
    reader.read(last - 1)  # the first lookup in the newest segment runs its full check
    monkeypatch.setattr(LogSegment, "full_index_check", original)
    assert appended
    leo = reader.log_end_offset
    assert leo >= last
    with open(_active_log(reader.directory), "ab") as f:  # a write in flight: half a batch
        f.write(_batch(100)[:40])
    after = reader.log_end_offset
    assert after >= leo, f"log end went backwards: {leo} -> {after}"
    assert reader.read(after) == []
    assert [b.base_offset for b in reader.read(leo - 1)] == [leo - 1]
    reader_store.close()
    writer_store.close()
