"""The producer's fdatasyncs over several partitions run at once (issue 26, docs/DESIGN.md "Durability").

An acks=all round of the sender makes every partition's durable append (write and fdatasync, under
that partition's lock) at once and only then settles the futures; a transactional producer's flush()
syncs its partitions together.
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
