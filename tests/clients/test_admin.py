"""Admin: transactions, producers, hanging transactions and groups, computed from the store alone."""

from __future__ import annotations

import pytest

import txlog
from storage.records import build_batch
from txlog.errors import InvalidTxnStateError
from txlog.fetch import IsolationLevel, fetch
from txlog.schemas.transaction_log import TxnState

TP = txlog.TopicPartition


def _rc(store, topic, p=0):
    log = store.partition(topic, p)
    return [r.value for r in fetch(log, log.log_start_offset, IsolationLevel.READ_COMMITTED).records]


def test_transaction_spanning_two_handles_committed_by_the_operator(store_path):
    """produce --no-commit, then `commit --transactional-id`: another process ends the transaction."""
    admin = txlog.Admin(store_path)
    admin.create_topic("t", 1)
    p = txlog.Producer(store_path, transactional_id="shell")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"x")
    p.flush()
    p.store.close()  # the process exits without ending the transaction: nothing closes the producer
    d = admin.describe_transaction("shell")
    assert d.state.state == TxnState.ONGOING and d.state.partitions == (("t", 0),)
    assert _rc(admin.store, "t") == []
    admin.end_transaction("shell", commit=True)
    assert _rc(admin.store, "t") == [b"x"]
    assert admin.describe_transaction("shell").state.state == TxnState.COMPLETE_COMMIT
    with pytest.raises(InvalidTxnStateError):  # already decided: an error, not a silent success
        admin.end_transaction("shell", commit=False)
    with pytest.raises(txlog.errors.InvalidProducerIdMappingError):
        admin.end_transaction("unknown-id", commit=True)
    admin.close()


def test_list_and_filter_transactions(store):
    store.create_topic("t", 1)
    admin = txlog.Admin(store)
    for tid in ("a", "b"):
        p = txlog.Producer(store, transactional_id=tid)
        p.init_transactions()
        p.begin_transaction()
        p.send("t", value=tid.encode())
        p.flush()
        if tid == "a":
            p.commit_transaction()
    assert [d.transactional_id for d in admin.list_transactions()] == ["a", "b"]
    assert [d.transactional_id for d in admin.list_transactions(states=["ongoing"])] == ["b"]


def test_hanging_transaction_found_and_aborted_by_start_offset(store):
    """Transactional data no coordinator record covers (written behind the coordinator's back)."""
    store.create_topic("t", 1)
    admin = txlog.Admin(store)
    log = store.partition("t", 0)
    log.append(build_batch([(None, b"plain", None, None)]))
    pid = store.allocate_producer_id()
    log.append(
        build_batch(
            [(None, b"hang", None, None)], producer_id=pid, producer_epoch=3, base_sequence=0, is_transactional=True
        )
    )
    assert log.last_stable_offset == 1
    hanging = admin.find_hanging_transactions()
    assert [(h.topic, h.partition, h.producer_id, h.start_offset) for h in hanging] == [("t", 0, pid, 1)]
    with pytest.raises(InvalidTxnStateError):
        admin.abort_hanging_transaction(TP("t", 0), 0)
    assert admin.abort_hanging_transaction(TP("t", 0), 1) == 2
    assert log.last_stable_offset == log.log_end_offset == 3
    assert _rc(store, "t") == [b"plain"]
    assert admin.find_hanging_transactions() == []


def test_live_transaction_is_not_aborted_as_hanging(store):
    store.create_topic("t", 1)
    admin = txlog.Admin(store)
    p = txlog.Producer(store, transactional_id="live")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"x")
    p.flush()
    assert admin.find_hanging_transactions() == []
    with pytest.raises(InvalidTxnStateError):
        admin.abort_hanging_transaction(TP("t", 0), 0)
    p.commit_transaction()
    assert _rc(store, "t") == [b"x"]


def test_describe_producers_and_fence(store):
    store.create_topic("t", 1)
    admin = txlog.Admin(store)
    p = txlog.Producer(store, transactional_id="f")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"x")
    p.flush()
    [state] = admin.describe_producers(TP("t", 0))
    assert (state.producer_id, state.producer_epoch, state.current_transaction_start_offset) == (p.producer_id, 0, 0)
    fenced = admin.fence_producers(["f"])["f"]
    assert fenced.epoch > p.producer_epoch
    with pytest.raises(txlog.errors.ProducerFencedError):
        p.commit_transaction()
    assert _rc(store, "t") == []


def test_group_offsets_describe_reset_delete(store):
    store.create_topic("t", 2)
    admin = txlog.Admin(store)
    p = txlog.Producer(store)
    for i in range(10):
        p.send("t", value=b"%d" % i, partition=i % 2)
    p.flush()
    c = txlog.Consumer(store, group_id="g", enable_auto_commit=False)
    c.assign([TP("t", 0), TP("t", 1)])
    c.poll(max_records=7)
    c.commit()
    rows = admin.describe_consumer_group("g")
    assert sum(r.current_offset for r in rows) == 7 and sum(r.lag for r in rows) == 3
    assert admin.list_consumer_groups() == ["g"]
    admin.alter_consumer_group_offsets("g", {TP("t", 0): 1})
    assert admin.list_consumer_group_offsets("g")[TP("t", 0)].offset == 1
    admin.delete_consumer_group_offsets("g", [TP("t", 1)])
    assert list(admin.list_consumer_group_offsets("g")) == [TP("t", 0)]
    with pytest.raises(txlog.errors.UnknownTopicOrPartitionError):
        admin.alter_consumer_group_offsets("g", {TP("t", 5): 0})
