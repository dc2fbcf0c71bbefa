"""Store.create_topic writes its partitions' files first, makes them durable in one sync round, and names
the topic only once all are durable (docs/reliability-scenarios.md scenario 87).

With one fsync per file, parallelism is shown with a barrier that each partition's first fsync must
meet: a serial loop never brings two partitions' fsyncs to it at once, so the barrier breaks (its
timeout only bounds a hang; parallel fsyncs meet at once however slow the machine is). Where syncfs
is allowed, the round is one syncfs(2) and no partition file or directory is fsynced on its own.
"""

from __future__ import annotations

import errno
import os
import threading

import pytest

from storage import Store, durable
from storage.errors import KafkaStorageError

PARTITIONS = 4


def _partition_of(fd: int) -> int | None:
    """The partition of topic "t" whose directory (or a file in it) `fd` is, else None."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    for part in (os.path.basename(path), os.path.basename(os.path.dirname(path))):
        if part.startswith("t-") and part[2:].isdigit():
            return int(part[2:])
    return None


SYNCFS = -1  # `fsync_log`'s entry for a syncfs (storage.durable.syncfs), which syncs every file at once


@pytest.fixture
def fsync_log(monkeypatch):
    """(partition or None) per os.fsync/os.fdatasync, SYNCFS per syncfs, in order; `hook[0](partition)` runs
    first (a syncfs's failure, injected, is EIO from its hook)."""
    log: list[int | None] = []
    hook = [lambda partition: None]
    real_fsync, real_fdatasync, real_syncfs = os.fsync, os.fdatasync, durable.syncfs

    def wrap(real, partition_of=_partition_of):
        def call(fd):
            partition = partition_of(fd)
            log.append(partition)
            hook[0](partition)
            real(fd)

        return call

    monkeypatch.setattr(os, "fsync", wrap(real_fsync))
    monkeypatch.setattr(os, "fdatasync", wrap(real_fdatasync))
    monkeypatch.setattr(durable, "syncfs", wrap(real_syncfs, lambda fd: SYNCFS))
    return log, hook


def test_a_new_topic_is_one_syncfs_before_its_metadata(store_path, fsync_log, monkeypatch):
    """With syncfs allowed (`auto`, nothing else dirty), the PARTITIONS partitions' files and directories
    are made durable by one syncfs, none on its own; then the store directory and the metadata."""
    if not durable.syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here")
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "auto")
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0)
    log, _ = fsync_log
    store = Store.open(store_path)
    log.clear()
    store.create_topic("t", PARTITIONS)
    assert log[0] == SYNCFS and log.count(SYNCFS) == 1
    assert all(p is None for p in log[1:]) and len(log) > 1  # the store directory and the metadata after it
    store.close()
    again = Store.open(store_path)
    assert [again.partition("t", p).log_end_offset for p in range(PARTITIONS)] == [0] * PARTITIONS
    again.close()


def test_the_partitions_of_a_new_topic_are_made_durable_at_once(store_path, fsync_log, monkeypatch):
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "fdatasync")
    log, hook = fsync_log
    store = Store.open(store_path)
    barrier = threading.Barrier(PARTITIONS, timeout=120)
    first_seen: set[int] = set()

    def meet(partition: int | None) -> None:
        if partition is not None and partition not in first_seen:
            first_seen.add(partition)
            barrier.wait()  # every partition's first fsync in flight together

    hook[0] = meet
    store.create_topic("t", PARTITIONS)
    assert not barrier.broken and first_seen == set(range(PARTITIONS))
    # every partition's fsyncs came before the metadata's (which names the topic)
    last_partition_fsync = max(i for i, p in enumerate(log) if p is not None)
    assert all(p is None for p in log[last_partition_fsync + 1 :]) and len(log) > last_partition_fsync + 1
    store.close()
    again = Store.open(store_path)
    assert again.partition_count("t") == PARTITIONS
    assert [again.partition("t", p).log_end_offset for p in range(PARTITIONS)] == [0] * PARTITIONS
    again.close()


def test_a_failed_partition_fsync_creates_no_topic_and_a_retry_does(store_path, fsync_log, sync_method):
    """A lost page of partition 2 fails the syncfs too (syncfs method): the per-file fsyncs that follow
    find it, after every other partition's fsyncs ran; no topic is named."""
    log, hook = fsync_log
    store = Store.open(store_path)

    def fail_one(partition: int | None) -> None:
        if partition in (2, SYNCFS):
            raise OSError(errno.EIO, "Input/output error")

    hook[0] = fail_one
    with pytest.raises(KafkaStorageError):
        store.create_topic("t", PARTITIONS)
    assert not store.has_topic("t")
    assert log.count(SYNCFS) == (1 if sync_method == "syncfs" else 0)
    assert {p for p in log if p is not None} - {SYNCFS} == set(range(PARTITIONS))  # the others ran to their end first
    hook[0] = lambda partition: None
    store.create_topic("t", PARTITIONS)  # leftover directories are replaced
    assert store.partition_count("t") == PARTITIONS
    store.close()
