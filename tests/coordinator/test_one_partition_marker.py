"""A one-partition transaction's marker is appended with its fdatasync: one lock round (issue 26).

The marker used to be appended without fdatasync and then synced by a second call, each taking
the partition's writer lock and catching up. Now a one-partition commit takes its data
partition's lock twice: its data's sync before PREPARE_COMMIT, then the marker with its sync.
A marker found already there (a roll-forward's repeat, which writes nothing) is still synced:
the writer that appended it may have died before its sync (the coordinator's `_mark`).
"""

from __future__ import annotations

import fcntl
import os

from storage import Store
from storage.errors import KafkaStorageError
from storage.high_watermark import HighWatermarkFile
from storage.partition_log import LOCK_FILE
from tests.coordinator.direct_txn import DirectTxn
from txlog.transport import Transport

TOPIC = "data"
TXN_ID = "tx-marker"
NOW_MS = 1_700_000_000_000


def test_a_one_partition_commit_locks_its_data_partition_twice(store_path, monkeypatch):
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        txn = DirectTxn(Transport(store, clock=lambda: NOW_MS), TXN_ID, TOPIC)
        txn.run((0,), commit=True)
        lock_path = os.path.join(store.partition_dir(TOPIC, 0), LOCK_FILE)
        taken: list[int] = []
        real = fcntl.flock

        def flock(fd, operation):
            if operation & fcntl.LOCK_EX and os.readlink(f"/proc/self/fd/{fd}") == lock_path:
                taken.append(fd)
            return real(fd, operation)

        txn.register(0)
        txn.send(0, b"v")
        monkeypatch.setattr(fcntl, "flock", flock)
        txn.commit()
        monkeypatch.setattr(fcntl, "flock", real)
        assert len(taken) == 2, taken
        log = store.partition(TOPIC, 0)
        assert log.high_watermark == log.log_end_offset == 4  # v, marker, v, marker: all durable
    finally:
        store.close()


class _DiesAfterTheMarkerWrite(Transport):
    """The marker is appended unsynced, then the writer 'dies' (its fdatasync never happens)."""

    def write_txn_markers(self, topic, partition, *args, sync=True, **kwargs):
        super().write_txn_markers(topic, partition, *args, sync=False, **kwargs)
        raise KafkaStorageError("died before the marker's fdatasync")


def test_a_marker_left_unsynced_is_synced_by_the_roll_forward(store_path):
    """The next process's view is open before the marker is written (opening a view would sync its tail)."""
    dead = Store.open(store_path)  # never closed before the check: a close would sync what it wrote
    again = None
    try:
        dead.create_topic(TOPIC, 1)
        again = Store.open(store_path)  # the next process, its views open already
        survivor = Transport(again, clock=lambda: NOW_MS)
        DirectTxn(survivor, "other-id", TOPIC).run((0,), commit=True)
        txn = DirectTxn(_DiesAfterTheMarkerWrite(dead, clock=lambda: NOW_MS), TXN_ID, TOPIC)
        txn.register(0)
        txn.send(0, b"v")
        txn.commit()  # decided (PREPARE_COMMIT durable), its marker in the file, not synced: left to roll forward
        published = HighWatermarkFile(dead.partition_dir(TOPIC, 0), writable=False)
        assert published.read() == 3  # the data; the marker at 3 is not durable (a reader's look would sync it)
        survivor.init_producer_id(TXN_ID)  # rolls the decision forward
        assert again.partition(TOPIC, 0).log_end_offset == 4  # the marker was there: not written again
        assert published.read() == 4  # and the roll-forward made it durable
    finally:
        if again is not None:
            again.close()
        dead.close()
