"""A transaction's commit sends its records on the calling thread (issue 26): `flush()` and
`commit_transaction()` run the sender's rounds themselves when a blocking get() could
(RecordAccumulator._take_for_caller), and leave them to the sender thread otherwise.

What must hold whichever thread sends: the partitions are registered before the data, a failed
append fails the commit as it always did and leaves the transaction abortable, a commit waits
for a send another thread has in flight, and callbacks run on the sender thread, in record
order, before the commit returns.
"""

from __future__ import annotations

import threading
import time

import pytest

import txlog
from storage.errors import KafkaStorageError
from txlog.clients.sender import THREAD_PREFIX as SENDER
from txlog.errors import TransactionAbortableError
from txlog.fetch import IsolationLevel, fetch
from txlog.tools.fault_injection import Action, Crashed, FaultInjectingTransport, FaultPlan, Step, StepFault
from txlog.transport import Transport


class NotingTransport(Transport):
    """Notes which thread makes each request; holds the first Produce while `hold` is clear, and
    refuses every Produce while `refuse` is set."""

    def __init__(self, store):
        super().__init__(store)
        self.calls: list[tuple[str, str]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.refuse = False

    def add_partitions_to_txn(self, *args, **kwargs):
        self.calls.append(("register", threading.current_thread().name))
        return super().add_partitions_to_txn(*args, **kwargs)

    def produce(self, topic, partition, data, transactional_id=None, **kwargs):
        self.calls.append(("produce", threading.current_thread().name))
        first = not self.entered.is_set()
        self.entered.set()
        if first:
            assert self.hold.wait(30)
        if self.refuse:
            raise KafkaStorageError("the disk refused the write")
        return super().produce(topic, partition, data, transactional_id, **kwargs)


def _committed(store, topic: str, partition: int) -> list[bytes]:
    log = store.partition(topic, partition)
    return [r.value for r in fetch(log, 0, IsolationLevel.READ_COMMITTED, max_records=1000).records]


def _producer(store, transport: Transport) -> txlog.Producer:
    p = txlog.Producer(store, transactional_id="tx", transport=transport, linger_ms=60_000)
    p.init_transactions()
    return p


def test_a_commit_registers_and_sends_its_records_on_the_calling_thread(store):
    store.create_topic("t", 2)
    transport = NotingTransport(store)
    p = _producer(store, transport)
    for round_ in range(3):
        p.begin_transaction()
        p.send("t", b"a%d" % round_, partition=0)
        p.send("t", b"b%d" % round_, partition=1)
        p.commit_transaction()
    me = threading.current_thread().name
    # every transaction's registration and data, on this thread: no hand-off to the sender
    assert transport.calls and all(thread == me for _, thread in transport.calls), transport.calls
    assert transport.calls[0][0] == "register"  # the registration goes before the first data
    assert _committed(store, "t", 0) == [b"a0", b"a1", b"a2"]
    assert _committed(store, "t", 1) == [b"b0", b"b1", b"b2"]
    p.close()


def test_a_commit_whose_append_fails_raises_as_before_and_leaves_the_transaction_abortable(store):
    store.create_topic("t", 1)
    transport = NotingTransport(store)
    p = _producer(store, transport)
    p.begin_transaction()
    p.send("t", b"kept", partition=0)
    p.commit_transaction()
    transport.refuse = True
    p.begin_transaction()
    future = p.send("t", b"lost", partition=0)
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    assert isinstance(future.exception(), KafkaStorageError)  # the record's own outcome
    assert transport.calls[-1] == ("produce", threading.current_thread().name)
    with pytest.raises(TransactionAbortableError):  # still abortable, nothing else
        p.commit_transaction()
    p.abort_transaction()
    transport.refuse = False
    p.begin_transaction()
    p.send("t", b"after", partition=0)
    p.commit_transaction()
    assert _committed(store, "t", 0) == [b"kept", b"after"]
    p.close()


def test_a_commit_waits_for_a_send_another_thread_has_in_flight(store):
    """Another thread's get() is inside its Produce (a round in progress): the commit must not
    run a round of its own meanwhile, nor decide before that record is written; both records are
    committed, in the order they were sent."""
    store.create_topic("t", 1)
    transport = NotingTransport(store)
    p = _producer(store, transport)
    transport.entered.clear()
    transport.hold.clear()
    release = threading.Timer(30, transport.hold.set)  # never a hung test
    release.start()
    try:
        p.begin_transaction()
        other = threading.Thread(target=lambda: p.send("t", b"first", partition=0).get())
        other.start()
        assert transport.entered.wait(30)
        p.send("t", b"second", partition=0)
        committing = threading.Thread(target=p.commit_transaction)
        committing.start()
        committing.join(0.3)
        assert committing.is_alive()  # it waits for the held write
        transport.hold.set()
        committing.join(30)
        other.join(30)
        assert not committing.is_alive() and not other.is_alive()
    finally:
        transport.hold.set()
        release.cancel()
    assert _committed(store, "t", 0) == [b"first", b"second"]
    p.close()


def test_callbacks_of_the_transaction_run_on_the_sender_thread_in_order_before_the_commit_returns(store):
    """A batch with a callback is left to the sender thread (Kafka's rule: callbacks run on the
    I/O thread), as a get() leaves it; the commit still waits for every callback."""
    store.create_topic("t", 2)
    transport = NotingTransport(store)
    p = _producer(store, transport)
    seen: list[tuple[int, int, bool]] = []
    p.begin_transaction()
    for i in range(6):
        p.send("t", b"v%d" % i, partition=i % 2).add_callback(
            lambda m, e, i=i: seen.append((i, m.offset, threading.current_thread().name.startswith(SENDER)))
        )
    p.commit_transaction()
    assert [i for i, _, _ in seen if i % 2 == 0] == [0, 2, 4]  # record order within each partition
    assert [i for i, _, _ in seen if i % 2 == 1] == [1, 3, 5]
    assert sorted(seen) == [(i, i // 2, True) for i in range(6)]
    assert _committed(store, "t", 0) == [b"v0", b"v2", b"v4"]
    p.close()


@pytest.mark.parametrize("linger_ms", [50, 0])
def test_a_batch_opened_after_a_callers_round_still_goes_at_its_linger(store, linger_ms):
    """The sender woke during a round run by the caller (its linger deadline passed meanwhile) and
    sleeps until that round ends; the round ends with nothing left, so nothing wakes it then. A
    batch opened afterwards must still be sent about a linger later, by the sender, with nobody
    asking for it (no get(), no flush): not after the sender's 5 s idle sleep. (With linger_ms=0
    the sender may take `a` itself before the get() does: then the case is the ordinary one.)"""
    store.create_topic("t", 1)
    transport = NotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=linger_ms)
    transport.hold.clear()
    threading.Timer(0.3, transport.hold.set).start()  # longer than a linger: the sender wakes meanwhile
    assert p.send("t", b"a").get().offset == 0  # the caller's round, held in its Produce for 0.3 s
    later = p.send("t", b"b")
    deadline = time.monotonic() + 3  # well inside SENDER_IDLE_S, well past linger_ms
    while not later.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert later.done() and later.get().offset == 1
    assert transport.calls[-1] == ("produce", f"{SENDER}{p.client_id}")
    p.close()


@pytest.mark.parametrize("step", [Step.ADD_PARTITIONS_TO_TXN, Step.PRODUCE])
def test_a_simulated_crash_in_the_commits_own_round_kills_the_producer_and_the_commit_raises_it(store, step):
    """A fault plan's Crashed (a BaseException) inside the round the commit runs itself is the
    producer's death, as on the sender thread: the commit raises it, no EndTxn follows (nothing
    of the transaction becomes visible), and every later call raises it too."""
    store.create_topic("t", 1)
    plan = FaultPlan()
    transport = FaultInjectingTransport(Transport(store), plan)
    p = txlog.Producer(store, transactional_id="tx", transport=transport, linger_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    future = p.send("t", b"v", partition=0)
    plan.arm(StepFault(step, Action.CRASH_AFTER))
    with pytest.raises(Crashed):
        p.commit_transaction()
    assert isinstance(future.exception(), Crashed)
    with pytest.raises(Crashed):
        p.send("t", b"after", partition=0)
    assert _committed(store, "t", 0) == []
