"""The fault-injecting transport: a fault at each named request gives its documented outcome.

Faults are injected by wrapping the client-to-log seam (`txlog.transport.Transport`) in a
`FaultInjectingTransport` with a declarative `FaultPlan` (which request, which call of it,
what happens); nothing in the log is patched. Each test names the request, the fault, and
what the store must look like afterwards, and ends with the store checker.
"""

from __future__ import annotations

import inspect
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage import Store
from tests.crash.txn_crash_worker import all_batches, check_store, clone_store, fetch_all, make_store, model
from txlog.clients.consumer import Consumer
from txlog.clients.producer import Producer
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.errors import RequestTimedOutError, UnstableOffsetCommitError
from txlog.schemas.transaction_log import TxnState
from txlog.tools.fault_injection import (
    Action,
    Crashed,
    FaultInjectingTransport,
    FaultPlan,
    Step,
    StepFault,
)
from txlog.tools.transform_loop import TransformLoop
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
NEVER = 10**9  # linger: batches go out on flush/commit only


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("template") / "store")
    make_store(root, {"t": 2, "in": 1, "out": 1})
    return root


@pytest.fixture
def store(store_path, template):
    clone_store(template, store_path)
    s = Store.open(store_path)
    yield s
    s.close()


def faulty(store, *faults: StepFault) -> FaultInjectingTransport:
    return FaultInjectingTransport(Transport(store), FaultPlan(steps=faults))


def producer(store, transport, tid="x", **kw) -> Producer:
    return Producer(store, transactional_id=tid, linger_ms=NEVER, transport=transport, **kw)


def rc(store, tp=T0) -> list[bytes]:
    return [v for _, v in fetch_all(store.partition(*tp), "read_committed")]


def markers(store, tp=T0) -> list[str]:
    return [m[2] for m in model(all_batches(store.partition(*tp)))["markers"]]


def state_of(store, tid="x") -> TxnState:
    return TransactionCoordinator(store).describe(tid).state.state


def open_transaction(store, transport, tid="x") -> Producer:
    p = producer(store, transport, tid)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    p.send("t", b"b", partition=1)
    return p


# ---- the wrapper itself ---------------------------------------------------------------------------------


def test_the_wrapper_overrides_every_request_of_the_transport():
    """A request the wrapper forgot would be served behind its back, unfaulted: there is none."""
    requests = {name for name, fn in inspect.getmembers(Transport, inspect.isfunction) if not name.startswith("_")}
    missing = sorted(n for n in requests if getattr(FaultInjectingTransport, n) is getattr(Transport, n))
    assert missing == []


def test_step_faults_are_declarative_and_checked():
    fault = StepFault("WriteTxnMarkers", "kill-after", 2)
    assert (fault.step, fault.action, fault.occurrence) == (Step.WRITE_TXN_MARKERS, Action.KILL_AFTER, 2)
    with pytest.raises(ValueError):
        StepFault(Step.END_TXN, Action.CRASH_BEFORE, 0)
    with pytest.raises(ValueError):
        StepFault("NoSuchRequest", Action.CRASH_BEFORE)


def test_a_crashed_transport_serves_nothing_more(store, store_path):
    transport = faulty(store, StepFault(Step.ADD_PARTITIONS_TO_TXN, Action.CRASH_AFTER))
    p = producer(store, transport)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    with pytest.raises(Crashed):
        p.flush()
    assert transport.crashed and transport.plan.fired == [StepFault(Step.ADD_PARTITIONS_TO_TXN, Action.CRASH_AFTER)]
    with pytest.raises(Crashed):  # a dead process sends nothing more
        p.flush()
    assert store.partition("t", 0).log_end_offset == 0
    # crash after AddPartitionsToTxn: registered, no data; the next instance aborts it
    with producer(store, Transport(store)) as q:
        q.init_transactions()
    assert markers(store) == ["ABORT"] and state_of(store) == TxnState.EMPTY
    check_store(store_path)


# ---- crashes inside EndTxn: the decision is the commit point ----------------------------------------------


def test_crash_after_prepare_commit_rolls_forward_on_the_next_sweep(store, store_path):
    """Crash before the first WriteTxnMarkers = right after PREPARE_COMMIT is durable."""
    transport = faulty(store, StepFault(Step.WRITE_TXN_MARKERS, Action.CRASH_BEFORE))
    p = open_transaction(store, transport)
    with pytest.raises(Crashed):
        p.commit_transaction()
    assert state_of(store) == TxnState.PREPARE_COMMIT
    assert (rc(store, T0), rc(store, T1)) == ([], []) and markers(store, T0) == markers(store, T1) == []
    Transport(store).abort_expired_transactions()  # the next sweep, by anybody
    assert state_of(store) == TxnState.COMPLETE_COMMIT
    assert (rc(store, T0), rc(store, T1)) == ([b"a"], [b"b"])
    check_store(store_path)


def test_crash_after_the_first_marker_is_completed_by_the_next_coordinator_call(store, store_path):
    """The demo's fault: one partition marked, the other not; a new instance's init completes the commit."""
    transport = faulty(store, StepFault(Step.WRITE_TXN_MARKERS, Action.CRASH_AFTER, 1))
    p = open_transaction(store, transport)
    with pytest.raises(Crashed):
        p.commit_transaction()
    assert state_of(store) == TxnState.PREPARE_COMMIT
    assert (rc(store, T0), rc(store, T1)) == ([b"a"], [])  # markers go out in partition order
    with producer(store, Transport(store)) as q:
        q.init_transactions()
    assert state_of(store) == TxnState.EMPTY
    assert (rc(store, T0), rc(store, T1)) == ([b"a"], [b"b"]) and markers(store, T1) == ["COMMIT"]
    check_store(store_path)


def test_crash_before_end_txn_leaves_it_open_until_its_timeout(store, store_path):
    transport = faulty(store, StepFault(Step.END_TXN, Action.CRASH_BEFORE))
    p = open_transaction(store, transport)
    with pytest.raises(Crashed):
        p.commit_transaction()
    assert state_of(store) == TxnState.ONGOING and store.partition("t", 0).last_stable_offset == 0
    Transport(store).abort_expired_transactions()  # not expired yet: nothing happens
    assert state_of(store) == TxnState.ONGOING
    later = Transport(store, clock=lambda: int(time.time() * 1000) + 120_000)
    later.abort_expired_transactions()
    assert state_of(store) == TxnState.COMPLETE_ABORT
    assert (rc(store, T0), rc(store, T1)) == ([], []) and markers(store, T0) == markers(store, T1) == ["ABORT"]
    check_store(store_path)


def test_lost_end_txn_answer_is_recognised_on_retry(store, store_path):
    """LOSE_ACK on EndTxn: the commit happened, the client does not know; its retry is answered (KIP-890)."""
    transport = faulty(store, StepFault(Step.END_TXN, Action.LOSE_ACK))
    p = open_transaction(store, transport)
    epoch = p.producer_epoch
    with pytest.raises(RequestTimedOutError):
        p.commit_transaction()
    assert state_of(store) == TxnState.COMPLETE_COMMIT
    p.commit_transaction()  # the retry
    assert p.producer_epoch == epoch + 1 and markers(store, T0) == ["COMMIT"]
    p.begin_transaction()
    p.send("t", b"c", partition=0)
    p.commit_transaction()
    assert rc(store, T0) == [b"a", b"c"] and rc(store, T1) == [b"b"]
    p.close()
    check_store(store_path)


def test_lost_end_txn_request_is_retried_as_the_first_attempt(store, store_path):
    transport = faulty(store, StepFault(Step.END_TXN, Action.LOSE_REQUEST))
    p = open_transaction(store, transport)
    with pytest.raises(RequestTimedOutError):
        p.commit_transaction()
    assert state_of(store) == TxnState.ONGOING
    p.commit_transaction()
    assert (rc(store, T0), rc(store, T1)) == ([b"a"], [b"b"])
    p.close()
    check_store(store_path)


# ---- the consumer's requests ----------------------------------------------------------------------------


def test_lost_fetch_leaves_the_position_where_it_was(store, store_path):
    with Producer(store) as plain:
        for i in range(3):
            plain.send("t", b"%d" % i, partition=0)
    with Consumer(store, transport=faulty(store, StepFault(Step.FETCH, Action.LOSE_REQUEST))) as c:
        c.assign([T0])
        with pytest.raises(RequestTimedOutError):
            c.poll()
        assert c.position(T0) == 0
        assert [r.value for r in c.poll()] == [b"0", b"1", b"2"]


def test_lost_offset_commit_answer_still_committed(store, store_path):
    transport = faulty(store, StepFault(Step.OFFSET_COMMIT, Action.LOSE_ACK))
    with Consumer(store, group_id="g", enable_auto_commit=False, transport=transport) as c:
        c.assign([T0])
        with pytest.raises(RequestTimedOutError):
            c.commit({T0: 5})
        assert c.committed(T0) == OffsetAndMetadata(5)
    check_store(store_path)


def test_a_blocked_poll_sweeps_through_the_transport(store, store_path):
    """Poll's write is the named sweep request, and only when blocked behind an open transaction."""
    dead = open_transaction(store, Transport(store))
    dead.flush()
    with Producer(store) as plain:
        plain.send("t", b"after", partition=0)
    clock = [int(time.time() * 1000)]
    transport = FaultInjectingTransport(Transport(store, clock=lambda: clock[0]), FaultPlan())
    with Consumer(store, transport=transport, clock=lambda: clock[0]) as c:
        c.assign([T0])
        assert c.poll() == []  # blocked at the LSO: swept once, nothing expired yet
        assert transport.plan.calls.get(Step.ABORT_EXPIRED_TRANSACTIONS) == 1
        assert c.poll() == []  # within the sweep interval: no second sweep
        assert transport.plan.calls.get(Step.ABORT_EXPIRED_TRANSACTIONS) == 1
        clock[0] += 120_000
        assert [r.value for r in c.poll(timeout_ms=2000)] == [b"after"]  # swept (aborted), then read
    assert transport.plan.calls[Step.ABORT_EXPIRED_TRANSACTIONS] == 2
    assert state_of(store) == TxnState.COMPLETE_ABORT
    check_store(store_path)


# ---- the transform loop shares one transport --------------------------------------------------------------


def test_transform_loop_round_with_a_lost_end_txn_is_aborted_and_redone(store, store_path):
    with Producer(store) as plain:
        for i in range(10):
            plain.send("in", b"%d" % i)
    transport = faulty(store, StepFault(Step.END_TXN, Action.LOSE_REQUEST, 2))
    with TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="copy",
        transform=lambda rs: [r.value for r in rs],
        transaction_size=4,
        partitions=[0],
        transport=transport,
    ) as loop:
        stats = loop.run()
    assert stats.transactions_aborted == 1 and stats.records_out == 10
    assert rc(store, TopicPartition("out", 0)) == [b"%d" % i for i in range(10)]
    assert transport.plan.fired == [StepFault(Step.END_TXN, Action.LOSE_REQUEST, 2)]
    check_store(store_path)


# ---- the other requests ----------------------------------------------------------------------------------


def test_crash_after_txn_offset_commit_leaves_the_offsets_pending_until_the_abort(store, store_path):
    """The offsets' batch is in `__consumer_offsets` but undecided: readers requiring stable offsets wait;
    the next instance's init aborts the transaction and the old committed offset stands."""
    Transport(store).offset_commit("g", {TopicPartition("in", 0): 3}, None)
    transport = faulty(store, StepFault(Step.TXN_OFFSET_COMMIT, Action.CRASH_AFTER))
    p = open_transaction(store, transport)
    with pytest.raises(Crashed):
        p.send_offsets_to_transaction({TopicPartition("in", 0): 10}, "g")
    with Consumer(store, group_id="g", enable_auto_commit=False) as c:
        with pytest.raises(UnstableOffsetCommitError):
            c.committed(TopicPartition("in", 0))
        with producer(store, Transport(store)) as q:
            q.init_transactions()
        assert c.committed(TopicPartition("in", 0)) == OffsetAndMetadata(3)
    assert rc(store, T0) == [] and markers(store, T0) == ["ABORT"]
    check_store(store_path)


def test_crash_after_init_producer_id_fences_nothing_but_itself(store, store_path):
    transport = faulty(store, StepFault(Step.INIT_PRODUCER_ID, Action.CRASH_AFTER))
    with pytest.raises(Crashed):
        producer(store, transport).init_transactions()
    assert state_of(store) == TxnState.EMPTY  # the epoch was handed out, nothing else happened
    with producer(store, Transport(store)) as q:
        q.init_transactions()
        assert q.producer_epoch == 1
    check_store(store_path)


def test_lost_produce_request_is_retried_and_written_once(store, store_path):
    transport = faulty(store, StepFault(Step.PRODUCE, Action.LOSE_REQUEST), StepFault(Step.PRODUCE, Action.LOSE_ACK, 2))
    with Producer(store, linger_ms=NEVER, transport=transport) as p:
        future = p.send("t", b"once", partition=0)
        p.flush()
        assert future.get().offset == 0
    assert [v for _, v in fetch_all(store.partition("t", 0), "read_uncommitted")] == [b"once"]
    assert transport.plan.calls[Step.PRODUCE] == 3  # lost, acknowledgement lost, answered as a duplicate


def test_lost_heartbeat_fails_the_poll_and_the_next_poll_joins(store, store_path):
    transport = faulty(store, StepFault(Step.CONSUMER_GROUP_HEARTBEAT, Action.LOSE_REQUEST))
    with Consumer(store, group_id="g", transport=transport) as c:
        c.subscribe(["t"])
        with pytest.raises(RequestTimedOutError):
            c.poll()
        c.poll()
        assert c.assignment() == {T0, T1} and c.group_metadata().generation_id > 0
