"""No daemon: other ids' expired transactions are timed out by whoever uses the coordinator next."""

from __future__ import annotations

import time

import txlog
from txlog.coordinator.internal_topics import owner_partition
from txlog.coordinator.transaction_coordinator import SWEEP_INTERVAL_MS
from txlog.schemas.transaction_log import TxnState


def test_an_expired_transaction_of_another_coordinator_partition_is_aborted(store_path):
    """Two ids on different `__transaction_state` partitions writing one data partition:
    the live one's work must not leave the dead one's expired transaction pinning the LSO."""
    assert owner_partition("copier-0", 8) != owner_partition("copier-1", 8)
    admin = txlog.Admin(store_path)
    admin.create_topic("out", 1)
    clock = [int(time.time() * 1000)]
    dead = txlog.Producer(store_path, transactional_id="copier-0", transaction_timeout_ms=100, clock=lambda: clock[0])
    dead.init_transactions()
    dead.begin_transaction()
    dead.send("out", value=b"zombie")
    dead.flush()
    live = txlog.Producer(store_path, transactional_id="copier-1", clock=lambda: clock[0])
    live.init_transactions()
    log = admin.store.partition("out", 0)
    for i in range(3):
        clock[0] += SWEEP_INTERVAL_MS // 2
        live.begin_transaction()
        live.send("out", value=b"%d" % i)
        live.commit_transaction()
    assert log.last_stable_offset == log.log_end_offset
    assert admin.coordinator.describe("copier-0").state.state == TxnState.COMPLETE_ABORT
