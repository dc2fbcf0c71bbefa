"""A writer's durable append proves what it must with as few system calls as the proofs allow (issue 26).

Each durable append used to fstat its `.log` twice (the catch-up's size look, then the deletion
check after the write) and its `.index` once (where the last indexed batch starts). The catch-up's
look now answers both questions about the `.log` (PartitionLog._check_not_deleted), and the
segment remembers where its own last append left the index (LogSegment._indexed_position). These
tests count the fstats of a quiet append made by the Python path (a one-batch durable append's
native quiet path, PartitionLog._quiet_append, makes its looks natively; the Python path is its
reference and serves every other append), and check that what the shortcuts stand for still holds:
the `.index` is the one Kafka's rule makes from the log, also when another writer (a second Store on
the directory, as another process) appended between two of this writer's appends; a deletion of the
store between two appends still fails the next one (scenario 71).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage import Store
from storage.errors import KafkaStorageError
from storage.partition_log import PartitionLog
from storage.records import build_batch

TOPIC = "t"
INTERVAL = 300  # index.interval.bytes: an entry every few batches


def one(value: bytes) -> bytes:
    return build_batch([(None, value, (), int(time.time() * 1000))])


@contextmanager
def fstats(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The file name suffix of every descriptor fstat'ed in the block."""
    seen: list[str] = []
    real = os.fstat

    def fstat(fd: int):
        seen.append(os.path.splitext(os.readlink(f"/proc/self/fd/{fd}"))[1])
        return real(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "fstat", real)


def quiet_writer(store: Store):
    """A writer whose directory key vouches (its mtime long past) and whose view is caught up."""
    store.create_topic(TOPIC, 1, {"index.interval.bytes": INTERVAL})
    log = store.partition(TOPIC, 0)
    log.append(one(b"a"))
    past = time.time_ns() - 10_000_000_000
    os.utime(store.partition_dir(TOPIC, 0), ns=(past, past))
    log.append(one(b"b"))
    log.append(one(b"c"))
    return log


def kafka_index(store: Store) -> bytes:
    """The `.index` Kafka's rule makes from the log (LogSegment.append): an entry for each batch starting
    more than index.interval.bytes after the last indexed one, at its last offset and position."""
    directory = store.partition_dir(TOPIC, 0)
    with open(os.path.join(directory, "00000000000000000000.log"), "rb") as f:
        data = f.read()
    out, position, indexed = [], 0, 0
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        last_delta = struct.unpack_from(">i", data, position + 23)[0]
        if position - indexed > INTERVAL:
            out.append(struct.pack(">ii", base + last_delta, position))
            indexed = position
        position += 12 + length
    return b"".join(out)


def index_file(store: Store) -> bytes:
    with open(os.path.join(store.partition_dir(TOPIC, 0), "00000000000000000000.index"), "rb") as f:
        return f.read()


def test_a_quiet_durable_append_fstats_its_log_once_and_no_index(store_path, monkeypatch):
    monkeypatch.setattr(PartitionLog, "_quiet_append", lambda *_: None)  # the Python path
    store = Store.open(store_path)
    try:
        log = quiet_writer(store)
        entries_before = len(index_file(store)) // 8
        looked_at_index = 0
        for i in range(12):  # entries fall due on some of these: only those appends look at the `.index`
            with fstats(monkeypatch) as seen:
                log.append(one(b"x%02d" % i))
            assert seen.count(".log") == 1, f"append {i}: {seen}"
            # the index files only when an entry is due (its order is checked against the file then)
            assert set(seen) <= {".log", ".index", ".timeindex"}, f"append {i}: {seen}"
            assert ".timeindex" not in seen or ".index" in seen, f"append {i}: {seen}"
            looked_at_index += ".index" in seen
        assert log.log_end_offset == 15
        assert index_file(store) == kafka_index(store)
        assert 0 < looked_at_index <= len(index_file(store)) // 8 - entries_before
    finally:
        store.close()


@pytest.mark.parametrize("path", ["python", "native"])
@pytest.mark.parametrize("other_appends", [1, 3])
def test_the_index_follows_kafka_rule_when_another_writer_appends_in_between(
    store_path, other_appends, path, monkeypatch
):
    """The remembered index position is not used after another writer's append: the file says."""
    if path == "python":
        monkeypatch.setattr(PartitionLog, "_quiet_append", lambda *_: None)
    store, other = Store.open(store_path), None
    try:
        log = quiet_writer(store)
        other = Store.open(store_path)
        theirs = other.partition(TOPIC, 0)
        for i in range(15):
            log.append(one(b"mine-%02d" % i))
            if i % 2:
                for j in range(other_appends):
                    theirs.append(one(b"theirs-%02d-%d" % (i, j)))
        log.append(one(b"last"))
        assert len(index_file(store)) >= 3 * 8
        assert index_file(store) == kafka_index(store)
    finally:
        if other is not None:
            other.close()
        store.close()


@pytest.mark.parametrize("path", ["python", "native"])
def test_the_next_append_after_the_store_is_deleted_fails(store_path, path, monkeypatch):
    """The catch-up's look proves the `.log` linked; a deletion after it is seen by the next append's look."""
    if path == "python":
        monkeypatch.setattr(PartitionLog, "_quiet_append", lambda *_: None)
    store = Store.open(store_path)
    try:
        log = quiet_writer(store)
        shutil.rmtree(store_path)
        with pytest.raises(KafkaStorageError, match="deleted while open"):
            log.append(one(b"lost"))
        with pytest.raises(KafkaStorageError):
            log.append(one(b"refused"))
    finally:
        try:
            store.close()
        except KafkaStorageError:
            pass
