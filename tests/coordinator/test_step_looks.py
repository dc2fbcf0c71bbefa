"""A coordinator step looks at its `__transaction_state` partition's files once: one stat (issue 26).

Every step (AddPartitionsToTxn, EndTxn) runs inside the partition's `exclusive` section: the writer
lock taken and the view caught up on entry, after which nobody else can write to it. The replay
of the coordinator's state and the step's own appends then need no look of their own at the
directory or at the log's size: the replay asks for the log start only when the cleaner has passed
what it applied, and the log end and an append inside the section take the entry's catch-up as
the file (`PartitionLog.exclusive`). Counted here through the transport, as a producer reaches it;
the steps' outcome is checked too, and another store's step in between is still seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage import Store
from storage.topic_name import TRANSACTION_STATE_TOPIC
from tests.coordinator.direct_txn import DirectTxn
from txlog.errors import ProducerFencedError
from txlog.fetch import IsolationLevel, fetch
from txlog.transport import Transport

TOPIC = "data"
TXN_ID = "tx-looks"
NOW_MS = 1_700_000_000_000  # a fixed clock: no timeout or periodic sweep adds looks to a count


@contextmanager
def directory_stats(monkeypatch: pytest.MonkeyPatch, store: Store) -> Iterator[list[str]]:
    """Every os.stat of a `__transaction_state` partition directory, or of a file in it, made in the block."""
    seen: list[str] = []
    real = os.stat
    prefix = os.path.join(store.root, TRANSACTION_STATE_TOPIC + "-")

    def stat(path, *args, **kwargs):
        if isinstance(path, str) and path.startswith(prefix):
            seen.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "stat", real)


@pytest.fixture
def setup(store_path):
    store = Store.open(store_path)
    store.create_topic(TOPIC, 1)
    transport = Transport(store, clock=lambda: NOW_MS)
    txn = DirectTxn(transport, TXN_ID, TOPIC)
    txn.run((0,), commit=True)  # everything opened and caught up once
    # A directory key is trusted only once its mtime is past the stamping clock's tick (storage/file_stamp.py):
    # until then each look compares the segments again, as it must. Moved into the past, then caught up.
    past = time.time_ns() - 10_000_000_000
    for name in os.listdir(store.root):
        if name.startswith(TRANSACTION_STATE_TOPIC + "-"):
            os.utime(os.path.join(store.root, name), ns=(past, past))
    txn.run((0,), commit=True)
    yield store, transport, txn
    store.close()


def test_each_step_of_a_transaction_stats_the_coordinator_partition_once(setup, monkeypatch):
    store, _, txn = setup
    for round_ in range(3):
        with directory_stats(monkeypatch, store) as registered:
            txn.register(0)
        txn.send(0, b"v%d" % round_)
        with directory_stats(monkeypatch, store) as ended:
            txn.commit()
        assert len(registered) == 1, registered
        assert len(ended) == 1, ended
    committed = fetch(store.partition(TOPIC, 0), 0, IsolationLevel.READ_COMMITTED).records
    assert [r.value for r in committed] == [b"v", b"v", b"v0", b"v1", b"v2"]


def test_a_step_of_another_store_in_between_is_seen(setup, store_path):
    """The looks skipped are inside the lock only: what another process wrote before is still found."""
    store, _, txn = setup
    other = Store.open(store_path)
    try:
        DirectTxn(Transport(other, clock=lambda: NOW_MS), TXN_ID, TOPIC)  # a new instance fences ours
        with pytest.raises(ProducerFencedError):
            txn.register(0)
    finally:
        other.close()
