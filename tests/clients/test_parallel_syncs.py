"""The producer's fdatasyncs over several partitions run at once (issue 26, docs/DESIGN.md "Durability").

An acks=all round of the sender appends every partition under one hold and makes them durable in one
sync round (their fdatasyncs at once, or one syncfs for a wide round: docs/reliability-scenarios.md
scenario 86), publishes the HWs and only then settles the futures; a failed sync fails its own
partition's futures alone. A transactional producer's flush() syncs its partitions together.
Parallelism is shown with a barrier that each data partition's fdatasync must meet: a serial loop
never brings two syncs to it at once, so the barrier breaks (its timeout only bounds a hang; it
is no timing assertion: parallel syncs meet at once however slow the machine is).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

import pytest

import txlog
from storage.errors import KafkaStorageError
from storage.high_watermark import HighWatermarkFile
from txlog.fetch import IsolationLevel, fetch

TOPIC = "t"
BARRIER_TIMEOUT_S = 120


def _partition_of(fd: int) -> int | None:
    """The partition of TOPIC whose file `fd` is, else None."""
    try:
        directory = os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
    except OSError:
        return None
    prefix = TOPIC + "-"
    return int(directory[len(prefix) :]) if directory.startswith(prefix) else None


def _on_data_fdatasync(monkeypatch, before: Callable[[int], None]) -> list[int]:
    """Run `before(partition)` ahead of every fdatasync of TOPIC's files; returns the partitions hit."""
    hits: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        partition = _partition_of(fd)
        if partition is not None:
            hits.append(partition)
            before(partition)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return hits


def _values(store, partition: int) -> list[bytes]:
    log = store.partition(TOPIC, partition)
    return [r.value for r in fetch(log, 0, IsolationLevel.READ_UNCOMMITTED, max_records=1000).records]


def _ready(store, partitions: int) -> None:
    store.create_topic(TOPIC, partitions)
    for p in range(partitions):
        store.partition(TOPIC, p)  # opened (and its recovery synced) before anything is counted


def test_an_acks_all_round_syncs_its_partitions_at_once_then_acknowledges(store, monkeypatch):
    _ready(store, 3)
    barrier = threading.Barrier(3, timeout=BARRIER_TIMEOUT_S)
    hits = _on_data_fdatasync(monkeypatch, lambda _: barrier.wait())
    durable_at_ack: list[bool] = []

    def note(metadata, error):
        assert error is None
        hw = HighWatermarkFile(store.partition_dir(TOPIC, metadata.partition), writable=False)
        try:
            durable_at_ack.append(hw.read() > metadata.offset)  # acknowledged means fdatasynced
        finally:
            hw.close()

    p = txlog.Producer(store, acks="all", linger_ms=60_000)  # nothing is sent before flush: one round
    futures = [p.send(TOPIC, value=b"v%d" % i, partition=i % 3) for i in range(9)]
    for f in futures:
        f.add_callback(note)
    p.flush()
    assert not barrier.broken
    assert [f.get().offset for f in futures] == [0] * 3 + [1] * 3 + [2] * 3
    assert sorted(hits) == [0, 1, 2]  # one fdatasync per partition, all three in flight together
    assert durable_at_ack == [True] * 9
    assert [_values(store, part) for part in range(3)] == [
        [b"v0", b"v3", b"v6"],
        [b"v1", b"v4", b"v7"],
        [b"v2", b"v5", b"v8"],
    ]
    p.close()


def test_a_failed_sync_fails_only_its_own_partitions_futures(store, monkeypatch):
    _ready(store, 2)
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S)

    def before(partition: int) -> None:
        barrier.wait()  # both syncs in flight before one of them fails
        if partition == 0:
            raise OSError(errno.EIO, "Input/output error")

    _on_data_fdatasync(monkeypatch, before)
    p = txlog.Producer(store, acks="all", linger_ms=60_000)
    failing = p.send(TOPIC, value=b"lost", partition=0)
    kept = p.send(TOPIC, value=b"kept", partition=1)
    p.flush()
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError):
        failing.get()
    assert kept.get().offset == 0 and _values(store, 1) == [b"kept"]
    with pytest.raises(KafkaStorageError):  # the failed partition refuses writes (fsyncgate)
        p.send(TOPIC, value=b"again", partition=0).get()
    assert p.send(TOPIC, value=b"more", partition=1).get().offset == 1  # the other goes on
    p.close()


def test_a_transactional_flush_syncs_its_partitions_at_once(store, monkeypatch):
    _ready(store, 2)
    p = txlog.Producer(store, transactional_id="flush-together", linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    futures = [p.send(TOPIC, value=b"x", partition=part) for part in (0, 1)]
    for f in futures:
        f.get(timeout=30)  # written, without fdatasync
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    hits = _on_data_fdatasync(monkeypatch, lambda _: barrier.wait())
    p.flush()
    assert not barrier.broken and sorted(hits) == [0, 1]
    monkeypatch.undo()
    p.commit_transaction()
    p.close()


# ---- a wide acks=all round: one sync round (scenario 86) -----------------------------------------------------

WIDE = 8  # partitions of a wide round: at least storage.durable.SYNCFS_MIN_FILES


class _Syncs:
    """What `_watch_syncs` saw at each sync of a data file, or syncfs, of the round."""

    def __init__(self) -> None:
        self.fdatasyncs: list[int] = []  # the partition of each data fdatasync
        self.syncfs = 0
        self.hws_seen: list[list[int | None]] = []  # every partition's HW on disk as each sync began
        self.acks_seen: list[int] = []  # how many futures were done as each sync began


def _hw_on_disk(store, partition: int) -> int | None:
    hw = HighWatermarkFile(store.partition_dir(TOPIC, partition), writable=False)
    try:
        return hw.read()
    finally:
        hw.close()


def _watch_syncs(store, monkeypatch, futures: list, fail: int | None = None) -> _Syncs:
    """Record each data fdatasync and each syncfs (`storage.durable.syncfs`, looked up per call) with what
    was published when it began; `fail`: that partition's fdatasync, and any syncfs, raise EIO (a lost
    page of that partition's file fails the syncfs too: the kernel reports it through the superblock)."""
    from storage import durable

    seen = _Syncs()

    def look() -> None:
        seen.hws_seen.append([_hw_on_disk(store, p) for p in range(WIDE)])
        seen.acks_seen.append(sum(f.done() for f in futures))

    def before(partition: int) -> None:
        look()
        if partition == fail:
            raise OSError(errno.EIO, "Input/output error")

    seen.fdatasyncs = _on_data_fdatasync(monkeypatch, before)
    real_syncfs = durable.syncfs

    def syncfs(fd: int) -> None:
        seen.syncfs += 1
        look()
        if fail is not None:
            raise OSError(errno.EIO, "Input/output error")
        real_syncfs(fd)

    monkeypatch.setattr(durable, "syncfs", syncfs)
    return seen


def _wide_round(store, monkeypatch, fail: int | None = None) -> tuple[list, _Syncs]:
    """One acks=all round of one record to each of WIDE partitions; its futures and what the syncs saw."""
    _ready(store, WIDE)
    futures: list = []
    seen = _watch_syncs(store, monkeypatch, futures, fail)
    p = txlog.Producer(store, acks="all", linger_ms=60_000)  # nothing is sent before flush: one round
    futures.extend(p.send(TOPIC, value=b"v%d" % part, partition=part) for part in range(WIDE))
    p.flush()
    p.close()
    return futures, seen


def test_a_wide_acks_all_round_is_one_syncfs_and_no_fdatasync(store, monkeypatch):
    """With syncfs allowed (`auto`, nothing else dirty), the round's WIDE files are made durable by one
    syncfs(2), not one fdatasync each, before any HW moved or any future completed."""
    from storage import durable

    if not durable.syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here")
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "auto")
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0)
    futures, seen = _wide_round(store, monkeypatch)
    assert seen.syncfs == 1 and seen.fdatasyncs == []
    assert seen.hws_seen == [[0] * WIDE] and seen.acks_seen == [0]
    assert [f.get().offset for f in futures] == [0] * WIDE
    assert [_hw_on_disk(store, part) for part in range(WIDE)] == [1] * WIDE


def test_no_hw_moves_and_no_future_completes_before_every_sync_of_the_round_began(store, monkeypatch, sync_method):
    """Whichever way the round is made durable, each sync (one syncfs, or every partition's fdatasync) starts
    with every HW still at 0 and every future pending: the HWs are published, and the futures settled,
    only after the whole round is durable."""
    futures, seen = _wide_round(store, monkeypatch)
    syncs = 1 if sync_method == "syncfs" else WIDE
    assert len(seen.hws_seen) == syncs
    assert sorted(seen.fdatasyncs) == ([] if sync_method == "syncfs" else list(range(WIDE)))
    assert seen.hws_seen == [[0] * WIDE] * syncs and seen.acks_seen == [0] * syncs
    assert [f.get().offset for f in futures] == [0] * WIDE
    assert [_hw_on_disk(store, part) for part in range(WIDE)] == [1] * WIDE


def test_an_eio_on_one_partition_of_a_wide_round_fails_only_its_futures(store, monkeypatch, sync_method):
    """The failed syncfs (syncfs method) names no file: the per-file fdatasyncs that follow find partition 3,
    whose future fails alone; it publishes no HW and refuses later writes, the others go on."""
    futures, seen = _wide_round(store, monkeypatch, fail=3)
    monkeypatch.undo()
    assert seen.syncfs == (1 if sync_method == "syncfs" else 0)
    assert sorted(seen.fdatasyncs) == list(range(WIDE))
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        futures[3].get()
    assert [f.get().offset for n, f in enumerate(futures) if n != 3] == [0] * (WIDE - 1)
    assert [_hw_on_disk(store, part) for part in range(WIDE)] == [1, 1, 1, 0, 1, 1, 1, 1]
    p = txlog.Producer(store, acks="all", linger_ms=0)
    with pytest.raises(KafkaStorageError):  # the failed partition refuses writes (fsyncgate)
        p.send(TOPIC, value=b"again", partition=3).get()
    assert p.send(TOPIC, value=b"more", partition=4).get().offset == 1
    p.close()


def test_a_retried_batch_in_a_wide_round_is_answered_as_a_duplicate_beside_new_ones(store):
    """A partition of the round with nothing to sync (a retry of a durable batch: nothing written) is
    answered with its first offsets; the round's other partitions are appended and synced as always."""
    from storage.records import build_batch
    from txlog.transport import Transport

    _ready(store, WIDE)
    transport = Transport(store)
    pid = store.allocate_producer_id()

    def batch(seq: int) -> bytes:
        return build_batch([(None, b"s%d" % seq, None, None)], producer_id=pid, producer_epoch=0, base_sequence=seq)

    first = transport.produce_durably([(TOPIC, p, batch(0)) for p in range(WIDE)])
    assert [(r.base_offset, r.duplicate) for r in first] == [(0, False)] * WIDE
    again = transport.produce_durably([(TOPIC, 0, batch(0))] + [(TOPIC, p, batch(1)) for p in range(1, WIDE)])
    assert [(r.base_offset, r.duplicate) for r in again] == [(0, True)] + [(1, False)] * (WIDE - 1)
    assert [_hw_on_disk(store, p) for p in range(WIDE)] == [1] + [2] * (WIDE - 1)
