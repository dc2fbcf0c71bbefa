"""Acceptance tests of the transaction coordinator and the transactional producer, in one process.

Scenarios of docs/reliability-scenarios.md covered here: 8, 10, 11, 15, 16, 17, 18, 20, 21, 22,
24, 26 (ambiguous commit after a failed fsync), 27, 49, 51, 52, plus exactly-once delivery
through `txlog.tools.fault_injection.FaultPlan` (lost acks, late duplicates) with the 5-batch dedup.
The real-process ones (23, 25, 26, 28-35, 38) are in test_transaction_crash.py.

Every test goes through the public interfaces (Producer, Consumer, fetch,
TransactionCoordinator, GroupOffsets) and ends with `check_store`, which re-derives the
truth independently: kafka-python parses every batch of every partition (control batches
78 bytes), RC/RU/LSO are recomputed from raw batches and compared with `fetch`, every
`__transaction_state` record is decoded with `txlog.schemas.transaction_log` and its state machine
checked, markers agree with the PREPARE_* decisions (one per partition per end).

"Crashing" in-process means a fault plan's crash (`txlog.tools.fault_injection.Crashed`, a
BaseException nobody catches) at a named request of the producer's transport, and abandoning
the store objects without closing them.
"""

from __future__ import annotations

import errno
import os
import random
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage import Store
from storage.records import RecordBatch, build_batch
from tests.crash.txn_crash_worker import (
    TXN_TOPIC,
    all_batches,
    check_store,
    clone_store,
    fetch_all,
    kafka_python_batches,
    make_store,
    model,
    txn_histories,
    txn_log_records,
)
from txlog.clients.consumer import Consumer
from txlog.clients.producer import Producer
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.coordinator.internal_topics import owner_partition
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.errors import (
    ConcurrentTransactionsError,
    CorruptRecordError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionOutcomeUnknownError,
    UnstableOffsetCommitError,
)
from txlog.schemas.transaction_log import TxnLogValue, TxnState, encode_key, encode_value
from txlog.tools.fault_injection import (
    Action,
    Crashed,
    Fault,
    FaultInjectingTransport,
    FaultPlan,
    Step,
    StepFault,
)
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport

FENCED = (ProducerFencedError, InvalidProducerEpochError)
IN0 = TopicPartition("in", 0)
NEVER = 10**9  # linger: batches go out on flush/commit only


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    """Topics t (3 partitions), in (1) and both internal topics, created once and copied per test."""
    root = str(tmp_path_factory.mktemp("template") / "store")
    make_store(root, {"t": 3, "in": 1})
    return root


@pytest.fixture
def store(store_path, template):
    clone_store(template, store_path)
    s = Store.open(store_path)
    yield s
    s.close()


def producer(store, tid="x", **kw) -> Producer:
    kw.setdefault("linger_ms", NEVER)
    return Producer(store, transactional_id=tid, **kw)


def rc(store, topic="t", p=0) -> list[bytes]:
    return [v for _, v in fetch_all(store.partition(topic, p), "read_committed")]


def ru(store, topic="t", p=0) -> list[bytes]:
    return [v for _, v in fetch_all(store.partition(topic, p), "read_uncommitted")]


def markers(store, topic="t", p=0) -> list[tuple[int, int, str, int]]:
    return model(all_batches(store.partition(topic, p)))["markers"]


def state_of(store, tid="x") -> TxnLogValue | None:
    d = TransactionCoordinator(store).describe(tid)
    return None if d is None else d.state


def log_files(root) -> dict[str, int]:
    """Every .log file of the store and its size: 'no bytes written' means this does not change."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n.endswith(".log"):
                out[os.path.join(dirpath, n)] = os.path.getsize(os.path.join(dirpath, n))
    return out


def txn_segment(store_path, store, tid) -> str:
    index = owner_partition(tid, store.partition_count(TXN_TOPIC))
    d = os.path.join(store_path, f"{TXN_TOPIC}-{index}")
    return os.path.join(d, sorted(n for n in os.listdir(d) if n.endswith(".log"))[-1])


def segment_batches(path) -> list[tuple[int, RecordBatch]]:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        b = RecordBatch.parse(data, pos)
        out.append((pos, b))
        pos += b.size
    return out


def fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def enospc_on(monkeypatch, match) -> dict:
    """os.write to a .log file whose path satisfies `match` writes half its bytes, then ENOSPC.

    The same injection as test_reliability.py's for docs/reliability-scenarios.md scenario 50,
    restricted to chosen partitions.
    """
    real_write = os.write
    state = {"on": True, "hits": 0}

    def fake_write(fd, data):
        path = fd_path(fd)
        if state["on"] and path.endswith(".log") and match(path):
            view = memoryview(data)
            real_write(fd, view[: len(view) // 2])
            state["hits"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fake_write)
    return state


def faulty(store, plan: FaultPlan) -> FaultInjectingTransport:
    """The store's transport wrapped in `plan`, for a client's `transport=`."""
    return FaultInjectingTransport(Transport(store), plan)


def crash_at_marker(n: int = 1) -> FaultPlan:
    """The process dies just before the coordinator writes marker number `n` of the producer's
    life (the first marker of a commit: right after its PREPARE_COMMIT is durable)."""
    return FaultPlan(steps=[StepFault(Step.WRITE_TXN_MARKERS, Action.CRASH_BEFORE, n)])


# =====================================================================================================
# B. transactions, isolation, fencing
# =====================================================================================================


def test_scenario10_commit_across_partitions_with_offsets(store, store_path):
    """10: a,b -> P0, c -> P1 and offsets {in-0: 10} for g; visible in RC only after the markers."""
    groups = GroupOffsets(store)
    groups.commit("g", {IN0: 3})
    seen = []  # what RC showed each time the coordinator was about to write a marker

    class Watching(Transport):
        def write_txn_markers(self, topic, partition, *args, **kwargs):
            seen.append((topic, partition, rc(store, p=0), rc(store, p=1)))
            return super().write_txn_markers(topic, partition, *args, **kwargs)

    p = producer(store, transport=Watching(store))
    p.init_transactions()
    p.begin_transaction()
    futures = [p.send("t", b"a", partition=0), p.send("t", b"b", partition=0), p.send("t", b"c", partition=1)]
    p.send_offsets_to_transaction({IN0: 10}, "g")
    assert [f.get().offset for f in futures] == [0, 1, 0]
    assert (ru(store, p=0), ru(store, p=1)) == ([b"a", b"b"], [b"c"])
    assert (rc(store, p=0), rc(store, p=1)) == ([], [])
    assert store.partition("t", 0).last_stable_offset == 0 and store.partition("t", 1).last_stable_offset == 0
    assert groups.committed("g")[IN0].offset == 3
    with pytest.raises(UnstableOffsetCommitError):
        groups.committed("g", [IN0], require_stable=True)

    p.commit_transaction()
    # markers go out in partition order: the offsets partition first, then P0, then P1; each
    # partition's data became RC-visible when its own marker landed (the coordinator syncs the
    # markers together after writing them all, but a reader finding P0's tail unsynced with no
    # writer at work syncs it itself: PartitionLog.high_watermark)
    assert [s[:2] for s in seen] == [("__consumer_offsets", owner_partition("g", 8)), ("t", 0), ("t", 1)]
    assert seen[1][2:] == ([], []) and seen[2][2:] == ([b"a", b"b"], [])
    assert (rc(store, p=0), rc(store, p=1)) == ([b"a", b"b"], [b"c"])
    for part, end in ((0, 3), (1, 2)):
        log = store.partition("t", part)
        assert log.log_end_offset == end and log.last_stable_offset == end  # the marker takes one offset
        assert [(m[2], m[3]) for m in markers(store, p=part)] == [("COMMIT", end - 1)]
    assert groups.committed("g", [IN0], require_stable=True)[IN0].offset == 10
    assert state_of(store).state == TxnState.COMPLETE_COMMIT
    p.close()
    check_store(store_path)


def test_scenario11_abort(store, store_path):
    """11: the same transaction aborted: RC never shows it, AbortedTxn(pid, 0, 2), offsets unchanged."""
    groups = GroupOffsets(store)
    groups.commit("g", {IN0: 3})
    p = producer(store)
    p.init_transactions()
    p.begin_transaction()
    for value, part in ((b"a", 0), (b"b", 0), (b"c", 1)):
        p.send("t", value, partition=part)
    p.send_offsets_to_transaction({IN0: 10}, "g")
    pid = p.producer_id
    p.abort_transaction()
    assert (ru(store, p=0), ru(store, p=1)) == ([b"a", b"b"], [b"c"])
    assert (rc(store, p=0), rc(store, p=1)) == ([], [])
    for part, end in ((0, 3), (1, 2)):
        log = store.partition("t", part)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, end)] == [
            (pid, 0, end - 1)
        ]
        assert log.last_stable_offset == end  # past the marker
    assert groups.committed("g", [IN0], require_stable=True)[IN0].offset == 3
    assert groups.pending("g") == {}
    # the next transaction of the same producer is visible; the aborted one stays hidden
    p.begin_transaction()
    p.send("t", b"d", partition=0)
    p.commit_transaction()
    assert rc(store, p=0) == [b"d"] and ru(store, p=0) == [b"a", b"b", b"d"]
    p.close()
    check_store(store_path)


@pytest.mark.parametrize("commit", [False, True])
def test_scenario15_partition_holding_only_a_marker(store, store_path, commit):
    """15: a partition added to a transaction that writes nothing to it gets only the marker."""
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id("x")
    coordinator.add_partitions("x", ids.producer_id, ids.epoch, [("t", 0)])
    coordinator.end_transaction("x", ids.producer_id, ids.epoch, commit=commit)
    log = store.partition("t", 0)
    (b,) = all_batches(log)
    assert b.is_control and b.size == 78 and b.base_offset == 0
    assert b.control_marker().is_commit == commit
    assert fetch_all(log, "read_committed") == [] and fetch_all(log, "read_uncommitted") == []
    assert log.last_stable_offset == 1 and log.log_end_offset == 1
    assert log.aborted_transactions(0, 1) == []  # an abort without data is not an aborted range
    ((kb, records),) = kafka_python_batches(log.directory)
    assert kb.is_control_batch and records[0].type == int(commit)
    check_store(store_path)


@pytest.mark.parametrize("op", ["commit", "send", "send_offsets"])
def test_scenario16_fencing_on_commit_send_and_offsets(store, store_path, op):
    """16: B inits A's transactional id (aborting A's txn); A's commit/send/send_offsets are fenced."""
    groups = GroupOffsets(store)
    groups.commit("g", {IN0: 3})
    a = producer(store, "X")
    a.init_transactions()
    a.begin_transaction()
    a.send("t", b"a0", partition=0)
    a.send("t", b"a1", partition=1)
    a.flush()
    b = producer(store, "X")
    b.init_transactions()  # fences A and aborts its transaction
    b.begin_transaction()
    b.send("t", b"b0", partition=0)
    b.commit_transaction()
    before = log_files(store_path)
    if op == "commit":
        with pytest.raises(FENCED):
            a.commit_transaction()
    elif op == "send":
        registered = a.send("t", b"a2", partition=0)  # a partition A had registered
        unregistered = a.send("t", b"a3", partition=2)  # and one it had not
        a.flush()
        assert isinstance(registered.exception(), FENCED)
        assert isinstance(unregistered.exception(), FENCED)
        with pytest.raises(FENCED):
            a.commit_transaction()
    else:
        with pytest.raises(FENCED):
            a.send_offsets_to_transaction({IN0: 99}, "g")
    assert log_files(store_path) == before  # the fenced instance wrote nothing
    with pytest.raises(FENCED):
        a.abort_transaction()  # fencing is fatal for the instance
    assert (rc(store, p=0), rc(store, p=1), rc(store, p=2)) == ([b"b0"], [], [])
    assert (ru(store, p=0), ru(store, p=1)) == ([b"a0", b"b0"], [b"a1"])
    assert store.partition("t", 0).aborted_transactions(0, 10)[0].first_offset == 0
    assert groups.committed("g", require_stable=True)[IN0].offset == 3 and groups.pending("g") == {}
    current = state_of(store, "X")
    assert (current.producer_id, current.producer_epoch) == (b.producer_id, b.producer_epoch)
    a.close()
    b.close()
    check_store(store_path)


def test_scenario16_closing_a_fenced_instance_does_not_raise(store, store_path):
    """16: a zombie that was never told it is fenced closes cleanly (its txn was aborted by B)."""
    a = producer(store)
    a.init_transactions()
    a.begin_transaction()
    a.send("t", b"zombie", partition=0)
    a.flush()
    b = producer(store)
    b.init_transactions()
    a.close()  # would abort: fenced, and that is not the closer's problem
    assert rc(store) == [] and [m[2] for m in markers(store)] == ["ABORT"]
    b.close()
    check_store(store_path)


def test_scenario38_append_racing_the_fence_is_told_it_is_fenced(store, store_path):
    """38 (the race two processes hit): A's first write to a partition it registered lands while B's
    init is fencing A (PREPARE_ABORT written, that partition's marker not yet). The verification
    must answer "fenced", not "not registered": A is a zombie, not an abortable transaction."""
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id("x")
    pid, epoch = ids.producer_id, ids.epoch
    coordinator.add_partitions("x", pid, epoch, [("t", 0), ("t", 1)])
    raced = []

    class Racing(Transport):  # A's append lands while B's init writes its first fencing marker
        def write_txn_markers(self, *args, **kwargs):
            if not raced:
                data = build_batch(
                    [(None, b"zombie", None, now_ms())],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=0,
                    is_transactional=True,
                )
                with pytest.raises(ProducerFencedError):
                    store.partition("t", 1).append(
                        data, verify_txn=lambda p_, e_: coordinator.verify("x", p_, e_, "t", 1)
                    )
                raced.append(True)
            return super().write_txn_markers(*args, **kwargs)

    b = producer(store, transport=Racing(store))
    b.init_transactions()
    assert raced and ru(store, p=1) == []
    b.close()
    check_store(store_path)


def test_scenario17_write_to_an_unregistered_partition(store, store_path):
    """17: a transactional append to P2, never registered for (pid, epoch), is refused; nothing appended."""
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id("x")
    pid, epoch = ids.producer_id, ids.epoch
    coordinator.add_partitions("x", pid, epoch, [("t", 0)])

    def append(part, seq=0, e=epoch):
        data = build_batch(
            [(None, b"z%d" % part, None, now_ms())],
            producer_id=pid,
            producer_epoch=e,
            base_sequence=seq,
            is_transactional=True,
        )
        return store.partition("t", part).append(
            data, verify_txn=lambda p_, e_: coordinator.verify("x", p_, e_, "t", part)
        )

    before = log_files(store_path)
    with pytest.raises(InvalidTxnStateError):
        append(2)
    assert log_files(store_path) == before
    log2 = store.partition("t", 2)
    assert log2.log_end_offset == 0 and log2.last_stable_offset == 0 and log2.open_transactions() == {}
    with pytest.raises((InvalidTxnStateError, InvalidProducerEpochError)):
        append(0, e=epoch + 1)  # registered partition, but not for that epoch
    assert append(0).base_offset == 0  # the registered partition accepts it
    coordinator.end_transaction("x", pid, epoch, commit=True)
    with pytest.raises(FENCED + (InvalidTxnStateError,)):
        append(2, seq=0)  # the old epoch after the transaction ended
    assert log2.log_end_offset == 0
    assert rc(store, p=0) == [b"z0"]
    check_store(store_path)


@pytest.mark.parametrize("commit", [True, False])
def test_scenario18_pending_offsets_block_a_stable_fetch(store, store_path, commit):
    """18: while T1 holds pending offsets for (g, in-0) a require-stable read gets UNSTABLE_OFFSET_COMMIT."""
    groups = GroupOffsets(store)
    groups.commit("g", {IN0: 3})
    t1 = producer(store, "t1")
    t1.init_transactions()
    t1.begin_transaction()
    t1.send_offsets_to_transaction({IN0: 10}, "g")
    with pytest.raises(UnstableOffsetCommitError) as info:
        groups.committed("g", [IN0], require_stable=True)
    assert info.value.retriable
    assert groups.committed("g", [IN0])[IN0].offset == 3  # a plain read sees the previous value
    consumer = Consumer(store, group_id="g", enable_auto_commit=False)  # read_committed by default
    consumer.assign([IN0])
    with pytest.raises(UnstableOffsetCommitError):
        consumer.position(IN0)
    (t1.commit_transaction if commit else t1.abort_transaction)()
    expected = 10 if commit else 3
    assert groups.committed("g", [IN0], require_stable=True)[IN0].offset == expected
    assert consumer.position(IN0) == expected
    consumer.close()
    t1.close()
    check_store(store_path)


def test_scenario20_state_machine_misuse(store, store_path):
    """20: commit without begin, begin twice, send after commit, init twice: refused, nothing written."""
    p = producer(store)
    with pytest.raises(IllegalStateError):
        p.begin_transaction()  # before init
    with pytest.raises(IllegalStateError):
        p.send("t", b"early", partition=0)
    p.init_transactions()
    coordinator = TransactionCoordinator(store)
    before, state = log_files(store_path), state_of(store)
    with pytest.raises(IllegalStateError):
        p.commit_transaction()  # without begin
    with pytest.raises(IllegalStateError):
        p.abort_transaction()
    with pytest.raises(IllegalStateError):
        p.send("t", b"no-txn", partition=0)
    with pytest.raises(IllegalStateError):
        p.init_transactions()  # twice
    p.begin_transaction()
    with pytest.raises(IllegalStateError):
        p.begin_transaction()  # twice
    with pytest.raises(InvalidTxnStateError):  # the coordinator refuses a commit with no transaction too
        coordinator.end_transaction("x", p.producer_id, p.producer_epoch, commit=True)
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.end_transaction("nosuch", p.producer_id, p.producer_epoch, commit=True)
    assert log_files(store_path) == before and state_of(store) == state
    p.send("t", b"ok", partition=0)
    p.commit_transaction()
    before, state = log_files(store_path), state_of(store)
    with pytest.raises(IllegalStateError):
        p.send("t", b"after-commit", partition=0)  # send after commit without begin
    with pytest.raises(IllegalStateError):
        p.commit_transaction()
    with pytest.raises(InvalidTxnStateError):  # a retried commit with the new epoch is not a retry
        coordinator.end_transaction("x", p.producer_id, p.producer_epoch, commit=True)
    with pytest.raises(InvalidTxnStateError):  # the old epoch asking for the other outcome
        coordinator.end_transaction("x", p.producer_id, p.producer_epoch - 1, commit=False)
    assert log_files(store_path) == before and state_of(store) == state
    assert rc(store) == [b"ok"] and ru(store) == [b"ok"]
    p.close()
    check_store(store_path)


def test_scenario21_abort_does_not_rewind_the_consumer(store, store_path):
    """21: consume 100 in a txn and abort: the bare consumer stays at 100; the loop seeks back."""
    store.create_topic("out", partitions=1)
    seed = Producer(store, linger_ms=NEVER)
    for i in range(100):
        seed.send("in", b"%d" % i, partition=0)
    seed.close()
    consumer = Consumer(store, group_id="g", enable_auto_commit=False)
    consumer.assign([IN0])
    p = producer(store, "copier")
    p.init_transactions()

    def copy_all() -> int:
        p.begin_transaction()
        got = []
        while len(got) < 100:
            batch = consumer.poll(timeout_ms=100)
            assert batch, "the input ran dry"
            got.extend(batch)
        for r in got:
            p.send("out", r.value, partition=0)
        p.send_offsets_to_transaction({IN0: got[-1].offset + 1}, "g")
        return len(got)

    assert copy_all() == 100
    p.abort_transaction()
    assert consumer.position(IN0) == 100  # KAFKA-17582: the abort does not move the consumer
    assert consumer.poll(timeout_ms=0) == []
    assert consumer.committed(IN0) is None
    consumer.seek(IN0, 0)  # the transform loop: back to the committed offset (none: the beginning)
    assert copy_all() == 100
    p.commit_transaction()
    assert rc(store, "out") == [b"%d" % i for i in range(100)]
    assert len(ru(store, "out")) == 200
    assert consumer.committed(IN0).offset == 100
    consumer.close()
    p.close()
    check_store(store_path)


# =====================================================================================================
# C. timeouts and late actors
# =====================================================================================================


def test_scenario22_expiry_fences_the_producer(store, store_path):
    """22: timeout 100 ms, write "1", wait 600 ms, write "2": fenced; RU "1", RC nothing, epoch bumped.

    Two producers wait together: `own` notices the expiry on its next write (and aborts it itself);
    `swept` finds it already aborted by another process's sweep.
    """
    own_tid = "own"
    swept_tid = next(f"swept{i}" for i in range(1000) if owner_partition(f"swept{i}", 8) != owner_partition(own_tid, 8))
    producers = {}
    for part, tid in enumerate((own_tid, swept_tid)):
        p = producer(store, tid, transaction_timeout_ms=100)
        p.init_transactions()
        p.begin_transaction()
        first = p.send("t", b"1", partition=part)
        p.flush()
        assert first.get().offset == 0
        producers[tid] = (p, part, p.producer_epoch)
    time.sleep(0.6)
    for tid, (p, part, epoch) in producers.items():
        if tid == swept_tid:
            with Store.open(store_path) as other:
                TransactionCoordinator(other).sweep_all()
        second = p.send("t", b"2", partition=part)
        p.flush()
        with pytest.raises(FENCED):
            second.get()
        with pytest.raises(FENCED):
            p.commit_transaction()
        assert ru(store, p=part) == [b"1"] and rc(store, p=part) == []
        assert [(m[1], m[2]) for m in markers(store, p=part)] == [(epoch + 2, "ABORT")]
        current = state_of(store, tid)
        assert current.state == TxnState.COMPLETE_ABORT and current.producer_epoch == epoch + 2
        p.close()
    check_store(store_path)


def test_scenario24_commit_racing_expiry(store_path, template, big):
    """24: commit issued at the instant a sweep aborts the expired txn: one outcome everywhere.

    Two store handles in two threads (flock serialises them as it would two processes); the
    commit is timed around the deadline with jitter so both winners occur.
    """
    rounds = 60 if big else 8
    rng = random.Random(int(os.environ.get("TXLOG_TXN_SEED") or random.randrange(1 << 30)))
    clone_store(template, store_path)
    mine, theirs = Store.open(store_path), Store.open(store_path)
    sweeper = TransactionCoordinator(theirs)
    outcomes = {"COMMIT": 0, "ABORT": 0}
    timeout = 40
    for i in range(rounds):
        tid = f"race{i}"
        p = producer(mine, tid, transaction_timeout_ms=timeout)
        p.init_transactions()
        pid, epoch = p.producer_id, p.producer_epoch
        p.begin_transaction()
        parts = rng.sample(range(3), rng.randint(1, 3))
        for part in parts:
            p.send("t", f"{tid}:{part}".encode(), partition=part)
        p.flush()
        deadline = state_of(mine, tid).start_ms + timeout
        stop = threading.Event()

        def sweep(stop: threading.Event) -> None:
            while not stop.is_set():
                sweeper.sweep_all()

        thread = threading.Thread(target=sweep, args=(stop,))
        thread.start()
        time.sleep(max(0.0, (deadline - now_ms() + rng.uniform(-8, 8)) / 1000))
        try:
            p.commit_transaction()
            result = "COMMIT"
        except (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError, ConcurrentTransactionsError):
            result = "ABORT"
        time.sleep(0.01)
        stop.set()
        thread.join()
        outcomes[result] += 1
        for part in parts:  # one marker for this end on every partition, all the same outcome
            ends = [m for m in markers(mine, p=part) if m[0] == pid and m[1] > epoch]
            assert [m[2] for m in ends] == [result], (tid, part, ends)
            assert (f"{tid}:{part}".encode() in rc(mine, p=part)) == (result == "COMMIT")
        ends = [
            v.state
            for v in txn_histories(mine)[tid]
            if v.state
            in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        ]
        kind = TxnState.PREPARE_COMMIT if result == "COMMIT" else TxnState.PREPARE_ABORT
        assert ends == [kind, kind + 2], (tid, ends)
        p.close()
    mine.close()
    theirs.close()
    check_store(store_path)
    assert sum(outcomes.values()) == rounds
    if big:  # the race is real: both winners occur (about 40/60 here)
        assert outcomes["COMMIT"] and outcomes["ABORT"], outcomes


def test_scenario26_ambiguous_commit_converges_to_the_txn_log(store, store_path, monkeypatch):
    """26: fsync of PREPARE_COMMIT fails: the caller is told the outcome is unknown (not "failed"),
    an abort afterwards cannot undo the decision, and rerunning commit in a fresh process
    completes what the txn log decided."""
    p = producer(store)
    p.init_transactions()
    pid, epoch = p.producer_id, p.producer_epoch
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    p.send("t", b"b", partition=1)
    p.flush()
    real_fdatasync = os.fdatasync

    def fdatasync(fd):
        if f"/{TXN_TOPIC}-" in fd_path(fd):
            raise OSError(errno.EIO, "Input/output error")
        return real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with pytest.raises(TransactionOutcomeUnknownError):
        p.commit_transaction()
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError):  # no automatic abort gets through: the handle refuses writes
        p.abort_transaction()
    assert rc(store, p=0) == [] and store.partition("t", 0).last_stable_offset == 0
    fresh = Store.open(store_path)
    coordinator = TransactionCoordinator(fresh)
    assert coordinator.describe("x").state.state == TxnState.PREPARE_COMMIT  # the record did reach the file
    with pytest.raises(InvalidTxnStateError):
        coordinator.end_transaction("x", pid, epoch, commit=False)  # the other outcome: refused
    ids = coordinator.end_transaction("x", None, None, commit=True)  # the operator's rerun converges
    assert (ids.producer_id, ids.epoch) == (pid, epoch + 1)
    assert coordinator.end_transaction("x", pid, epoch, commit=True) == ids  # the client's rerun too
    assert rc(fresh, p=0) == [b"a"] and rc(fresh, p=1) == [b"b"]
    fresh.close()
    check_store(store_path)


@pytest.mark.parametrize(
    "timeout,tid,error",
    [
        (900_001, "x", InvalidTransactionTimeoutError),
        (0, "x", InvalidTransactionTimeoutError),
        (-1, "x", InvalidTransactionTimeoutError),
        (10**12, "x", InvalidTransactionTimeoutError),
        (60_000, "", InvalidRequestError),
    ],
)
def test_scenario27_timeout_bounds_and_empty_id(store, store_path, timeout, tid, error):
    """27: timeout above 900000 or <= 0, empty transactional id: refused at init, nothing persisted."""
    before = log_files(store_path)
    p = Producer(store, transactional_id=tid, transaction_timeout_ms=timeout)
    with pytest.raises(error):
        p.init_transactions()
    with pytest.raises(error):
        TransactionCoordinator(store).init_producer_id(tid, timeout)
    assert log_files(store_path) == before
    assert txn_log_records(store) == []
    for ok in (1, 900_000):  # the bounds themselves are fine
        q = producer(store, f"ok{ok}", transaction_timeout_ms=ok)
        q.init_transactions()
        assert state_of(store, f"ok{ok}").timeout_ms == ok
        q.close()
    check_store(store_path)


# =====================================================================================================
# A.8 epoch exhaustion
# =====================================================================================================


def force_state(store, tid: str, value: TxnLogValue) -> None:
    """Write a coordinator record for `tid` with the storage API, as a long history would have left it."""
    coordinator = TransactionCoordinator(store)
    index = coordinator.partition_for(tid)  # creates __transaction_state if needed
    data = build_batch([(encode_key(tid), encode_value(value), None, now_ms())])
    store.partition(TXN_TOPIC, index).append(data)


def forced(pid: int, epoch: int, state=TxnState.EMPTY) -> TxnLogValue:
    return TxnLogValue(
        producer_id=pid,
        producer_epoch=epoch,
        timeout_ms=60_000,
        state=state,
        partitions=(),
        last_update_ms=now_ms(),
        start_ms=-1,
    )


def assert_no_wrapped_epoch(store_path) -> None:
    """Every epoch ever persisted, in the txn log and in every batch, is within 0..32767."""
    s = Store.open(store_path)
    try:
        for _, _, _, v in txn_log_records(s):  # also decodes every record
            assert v is None or 0 <= v.producer_epoch <= 32767
        for topic in s.list_topics():
            for part in range(s.partition_count(topic)):
                for b in all_batches(s.partition(topic, part)):
                    assert b.producer_epoch == -1 or 0 <= b.producer_epoch <= 32767, (topic, part, b)
    finally:
        s.close()


def test_scenario8_epoch_exhaustion_fence_twice(store, store_path):
    """8: the id's record is forced to epoch 32765 (written with the storage API + encode_key/value);
    A inits to 32766 and writes, B's init fences A at the exhausted epoch, C's init fences B.

    No negative or wrapped epoch is ever persisted, the id rotates to a new producer id, the
    old one is fenced, and every record is written once.
    """
    old_pid = store.allocate_producer_id()
    force_state(store, "x", forced(old_pid, 32765))
    a = producer(store)
    a.init_transactions()
    assert (a.producer_id, a.producer_epoch) == (old_pid, 32766)
    a.begin_transaction()
    a.send("t", b"a", partition=0)
    a.flush()
    b = producer(store)
    b.init_transactions()  # fence #1, at the exhausted epoch: the markers carry 32767
    assert b.producer_id != old_pid and 0 <= b.producer_epoch < 32766
    assert [(m[0], m[1], m[2]) for m in markers(store)] == [(old_pid, 32767, "ABORT")]
    with pytest.raises(FENCED):
        a.commit_transaction()
    b.begin_transaction()
    b.send("t", b"b", partition=0)
    b.flush()
    c = producer(store)
    c.init_transactions()  # fence #2
    assert c.producer_id == b.producer_id and c.producer_epoch > b.producer_epoch
    with pytest.raises(FENCED):
        b.commit_transaction()
    stale = a.producer_id, a.producer_epoch
    with pytest.raises(FENCED):  # the old producer id stays fenced at the coordinator
        TransactionCoordinator(store).add_partitions("x", *stale, [("t", 1)])
    c.begin_transaction()
    c.send("t", b"c", partition=0)
    c.commit_transaction()
    assert ru(store) == [b"a", b"b", b"c"] and rc(store) == [b"c"]
    for q in (a, b, c):
        q.close()
    assert_no_wrapped_epoch(store_path)
    check_store(store_path)


def test_scenario8_init_at_the_exhausted_epoch_rotates_to_epoch_zero(store, store_path):
    """8: an id idle at epoch 32766: init hands out a new producer id with epoch 0."""
    old_pid = store.allocate_producer_id()
    force_state(store, "x", forced(old_pid, 32766, TxnState.COMPLETE_COMMIT))
    p = producer(store)
    p.init_transactions()
    assert p.producer_id != old_pid and p.producer_epoch == 0
    assert state_of(store).previous_producer_id == old_pid
    with pytest.raises(FENCED):
        TransactionCoordinator(store).add_partitions("x", old_pid, 32766, [("t", 0)])
    p.begin_transaction()
    p.send("t", b"new", partition=0)
    p.commit_transaction()
    assert rc(store) == [b"new"]
    p.close()
    assert_no_wrapped_epoch(store_path)
    check_store(store_path)


def test_scenario8_end_at_the_exhausted_epoch_rotates_the_producer(store, store_path):
    """8 (KIP-890 TV2): a commit at epoch 32766 writes markers with 32767 and hands the same
    producer a new id with epoch 0; a retry of that commit is recognised; the next txn works."""
    old_pid = store.allocate_producer_id()
    force_state(store, "x", forced(old_pid, 32765))
    p = producer(store)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"one", partition=0)
    p.commit_transaction()
    assert p.producer_id != old_pid and p.producer_epoch == 0
    assert [(m[0], m[1], m[2]) for m in markers(store)] == [(old_pid, 32767, "COMMIT")]
    retry = TransactionCoordinator(store).end_transaction("x", old_pid, 32766, commit=True)
    assert (retry.producer_id, retry.epoch) == (p.producer_id, 0)
    p.begin_transaction()
    p.send("t", b"two", partition=0)
    p.commit_transaction()
    assert rc(store) == [b"one", b"two"]
    p.close()
    assert_no_wrapped_epoch(store_path)
    check_store(store_path)


def test_scenario8_timeout_fence_at_the_exhausted_epoch_still_fences(store, store_path):
    """8 + 22: a transaction at epoch 32766 times out and is aborted by a sweep (epoch overflow ->
    new producer id). The timed-out producer must be fenced like at any other epoch, not taken
    for a retry of a completed end and handed the new producer id."""
    old_pid = store.allocate_producer_id()
    force_state(store, "x", forced(old_pid, 32765))
    p = producer(store, transaction_timeout_ms=50)
    p.init_transactions()
    assert p.producer_epoch == 32766
    p.begin_transaction()
    p.send("t", b"late", partition=0)
    p.flush()
    time.sleep(0.15)
    TransactionCoordinator(store).sweep_all()
    assert [(m[1], m[2]) for m in markers(store)] == [(32767, "ABORT")]
    coordinator = TransactionCoordinator(store)
    with pytest.raises(FENCED):
        coordinator.end_transaction("x", old_pid, 32766, commit=False)
    with pytest.raises(FENCED):
        coordinator.end_transaction("x", old_pid, 32766, commit=True)
    with pytest.raises(FENCED):
        p.abort_transaction()
    assert rc(store) == []
    p.close()
    assert_no_wrapped_epoch(store_path)
    check_store(store_path)


# =====================================================================================================
# F. coordinator log damage and full disks
# =====================================================================================================


def test_scenario49a_torn_tail_of_the_coordinator_log(store, store_path):
    """49a: PREPARE_COMMIT torn (cut inside the last batch): the tail is cut, the txn is Ongoing
    again, and the next init aborts it; RC never shows the data."""
    p = producer(store, transport=faulty(store, crash_at_marker(1)))
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    p.send("t", b"b", partition=2)
    p.flush()
    with pytest.raises(Crashed):
        p.commit_transaction()
    path = txn_segment(store_path, store, "x")
    pos, last = segment_batches(path)[-1]
    assert last.records()[0].value is not None
    cut = pos + random.randint(1, last.size - 1)
    with open(path, "r+b") as f:
        f.truncate(cut)
    fresh = Store.open(store_path)
    assert TransactionCoordinator(fresh).describe("x").state.state == TxnState.ONGOING
    assert os.path.getsize(path) == pos  # the writable open cut the torn tail
    assert fresh.partition("t", 0).last_stable_offset == 0 and rc(fresh, p=0) == []
    q = producer(fresh)
    q.init_transactions()  # aborts the transaction that was never decided
    assert [m[2] for m in markers(fresh, p=0)] == ["ABORT"] and [m[2] for m in markers(fresh, p=2)] == ["ABORT"]
    assert rc(fresh, p=0) == [] and ru(fresh, p=0) == [b"a"]
    q.close()
    fresh.close()
    check_store(store_path)


def test_scenario49b_bit_flip_inside_the_coordinator_log(store, store_path):
    """49b: a flipped bit in a record before a PREPARE_COMMIT: the coordinator refuses to start
    (never forgets the decision), data partitions stay readable with the LSO pinned."""
    p = producer(store, transport=faulty(store, crash_at_marker(3)))  # the two commits before write one marker each
    p.init_transactions()
    for value in (b"one", b"two"):
        p.begin_transaction()
        p.send("t", value, partition=0)
        p.commit_transaction()
    p.begin_transaction()
    p.send("t", b"three", partition=0)
    p.flush()
    with pytest.raises(Crashed):
        p.commit_transaction()
    path = txn_segment(store_path, store, "x")
    batches = segment_batches(path)
    assert batches[-1][1].records()[0].value[16] == TxnState.PREPARE_COMMIT  # version, pid, epoch, timeout, status
    pos, victim = batches[len(batches) // 2]
    with open(path, "r+b") as f:
        f.seek(pos + 61 + 3)
        byte = f.read(1)[0]
        f.seek(pos + 61 + 3)
        f.write(bytes([byte ^ 0x10]))
    size = os.path.getsize(path)
    fresh = Store.open(store_path)
    coordinator = TransactionCoordinator(fresh)
    for op in (
        coordinator.sweep_all,
        lambda: coordinator.init_producer_id("x"),
        lambda: coordinator.end_transaction("x", None, None, commit=False),
    ):
        with pytest.raises((CorruptRecordError, KafkaStorageError)):
            op()
    with pytest.raises((CorruptRecordError, KafkaStorageError)):
        producer(fresh).init_transactions()
    assert os.path.getsize(path) == size  # nothing was cut: the PREPARE_COMMIT is still there
    log = fresh.partition("t", 0)
    assert rc(fresh, p=0) == [b"one", b"two"] and ru(fresh, p=0) == [b"one", b"two", b"three"]
    assert log.last_stable_offset == 4 and log.log_end_offset == 5
    fresh.close()


def test_scenario51_disk_full_writing_prepare_commit(store, store_path, monkeypatch):
    """51: ENOSPC while writing PREPARE_COMMIT: the commit fails (not ambiguous), the partial bytes
    are cut, the txn stays Ongoing, and a retried commit succeeds once space is back."""
    p = producer(store)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    p.send("t", b"b", partition=1)
    p.flush()
    path = txn_segment(store_path, store, "x")
    size = os.path.getsize(path)
    fault = enospc_on(monkeypatch, lambda path: f"/{TXN_TOPIC}-" in path)
    with pytest.raises(KafkaStorageError) as info:
        p.commit_transaction()
    assert not isinstance(info.value, TransactionOutcomeUnknownError)
    assert fault["hits"] == 1
    monkeypatch.undo()
    assert os.path.getsize(path) == size  # nothing torn
    kafka_python_batches(os.path.dirname(path))
    assert state_of(store).state == TxnState.ONGOING
    with Store.open(store_path, read_only=True) as reader:
        assert state_of(reader).state == TxnState.ONGOING
    assert rc(store, p=0) == [] and markers(store, p=0) == []
    p.commit_transaction()  # space is back: the same commit goes through
    assert rc(store, p=0) == [b"a"] and rc(store, p=1) == [b"b"]
    p.close()
    check_store(store_path)


def test_scenario51_disk_full_then_abort(store, store_path, monkeypatch):
    """51: after a commit refused for ENOSPC, aborting instead also works (the txn was still Ongoing)."""
    p = producer(store)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"a", partition=0)
    p.flush()
    enospc_on(monkeypatch, lambda path: f"/{TXN_TOPIC}-" in path)
    with pytest.raises(KafkaStorageError):
        p.commit_transaction()
    monkeypatch.undo()
    p.abort_transaction()
    assert rc(store) == [] and [m[2] for m in markers(store)] == ["ABORT"]
    p.close()
    check_store(store_path)


@pytest.mark.parametrize("commit", [True, False])
def test_scenario52_disk_full_writing_markers(store, store_path, monkeypatch, commit):
    """52: ENOSPC on P2's marker after PREPARE_*: the end is decided (the call succeeds), P2 stays
    pinned, sweeps and a concurrent init never turn it around, and it completes once space is back."""
    p = producer(store)
    p.init_transactions()
    pid, epoch = p.producer_id, p.producer_epoch
    p.begin_transaction()
    for part in range(3):
        p.send("t", b"v%d" % part, partition=part)
    p.flush()
    kind = "COMMIT" if commit else "ABORT"
    fault = enospc_on(monkeypatch, lambda path: f"{os.sep}t-2{os.sep}" in path)
    (p.commit_transaction if commit else p.abort_transaction)()  # decided: no error
    assert fault["hits"] >= 1
    assert (p.producer_id, p.producer_epoch) == (pid, epoch + 1)
    decided = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert state_of(store).state == decided
    assert [m[2] for m in markers(store, p=0)] == [kind] and markers(store, p=2) == []
    assert store.partition("t", 2).last_stable_offset == 0 and rc(store, p=2) == []
    assert rc(store, p=0) == ([b"v0"] if commit else [])
    TransactionCoordinator(store).sweep_all()  # retries, fails again, keeps the decision
    TransactionCoordinator(store, clock=lambda: now_ms() + 3_600_000).sweep_all()  # long past the timeout
    with pytest.raises(ConcurrentTransactionsError):
        TransactionCoordinator(store).init_producer_id("x")
    assert state_of(store).state == decided and markers(store, p=2) == []
    kafka_python_batches(store.partition("t", 2).directory)  # the partial marker was cut
    monkeypatch.undo()
    with Store.open(store_path) as other:
        TransactionCoordinator(other).sweep_all()  # space is back
    done = state_of(store)
    assert done.state == decided + 2 and done.producer_epoch == epoch + 1
    for part in range(3):
        assert [m[2] for m in markers(store, p=part)] == [kind]
        assert rc(store, p=part) == ([b"v%d" % part] if commit else [])
    p.begin_transaction()  # the producer goes on with the epoch it was handed
    p.send("t", b"next", partition=2)
    p.commit_transaction()
    assert rc(store, p=2)[-1] == b"next"
    p.close()
    check_store(store_path)


# =====================================================================================================
# idempotence and retries through the transport
# =====================================================================================================


def test_exactly_once_through_lost_acks_and_late_duplicates(store, store_path):
    """Lost acknowledgements and late duplicate deliveries on every produce request (data and
    offsets) of transactional and idempotent producers: each record and each offset commit is in
    the log once, at the offset its future reported (the 5-batch dedup window)."""
    plan = FaultPlan(rate=0.4, kinds=(Fault.LOSE_ACK, Fault.DUPLICATE, Fault.LOSE_REQUEST), seed=7)
    p = producer(store, transport=faulty(store, plan), batch_size=200)
    p.init_transactions()
    sent: dict[bytes, object] = {}
    committed: list[bytes] = []
    for txn in range(12):
        p.begin_transaction()
        values = [b"t%d-%d" % (txn, i) for i in range(15)]
        for i, v in enumerate(values):
            sent[v] = p.send("t", v, partition=i % 3)
        p.send_offsets_to_transaction({IN0: txn + 1}, "g")
        if txn % 4 == 3:
            p.abort_transaction()
        else:
            p.commit_transaction()
            committed.extend(values)
    assert plan.injected[Fault.LOSE_ACK] and plan.injected[Fault.DUPLICATE]
    idem_plan = FaultPlan(rate=0.4, kinds=(Fault.LOSE_ACK, Fault.DUPLICATE), seed=8)
    q = Producer(store, transport=faulty(store, idem_plan), batch_size=100, linger_ms=NEVER)
    plain = {b"i%d" % i: q.send("in", b"i%d" % i, partition=0) for i in range(60)}
    q.flush()
    all_ru: list[tuple[int, int, bytes]] = []
    for part in range(3):
        all_ru.extend((part, o, v) for o, v in fetch_all(store.partition("t", part), "read_uncommitted"))
    assert sorted(v for _, _, v in all_ru) == sorted(sent)  # every record once
    for part, offset, v in all_ru:
        md = sent[v].get()
        assert (md.partition, md.offset) == (part, offset)
    rc_values = [v for part in range(3) for v in rc(store, p=part)]
    assert sorted(rc_values) == sorted(committed)
    got_plain = fetch_all(store.partition("in", 0), "read_committed")
    assert [v for _, v in got_plain] == list(plain)
    assert all(plain[v].get().offset == o for o, v in got_plain)
    groups = GroupOffsets(store)
    assert groups.committed("g", require_stable=True)[IN0].offset == 11  # txn 11 (index 10) committed last
    offsets_log = store.partition("__consumer_offsets", owner_partition("g", 8))
    records = [b for b in all_batches(offsets_log) if not b.is_control]
    assert len(records) == 12  # one offset commit per transaction, none duplicated
    p.close()
    q.close()
    check_store(store_path)


def test_every_transaction_state_record_decodes(store, store_path):
    """Every record of every `__transaction_state` partition decodes with txlog.schemas.transaction_log,
    after a mix of commits, aborts, fences, expiry and rotations across several ids."""
    force_state(store, "rot", forced(store.allocate_producer_id(), 32764))
    for i, tid in enumerate(["a", "b", "c", "rot", "my-txn-id", "😀emoji"]):
        p = producer(store, tid, transaction_timeout_ms=80 if i == 2 else 60_000)
        p.init_transactions()
        for n in range(3):
            p.begin_transaction()
            p.send("t", f"{tid}{n}".encode(), partition=n % 3)
            if n == 1:
                p.abort_transaction()
            else:
                p.commit_transaction()
        p.begin_transaction()
        p.send("t", f"{tid}-open".encode(), partition=0)
        p.flush()
        if i % 2:
            producer(store, tid).init_transactions()  # fence it
    TransactionCoordinator(store, clock=lambda: now_ms() + 120_000).sweep_all()
    records = txn_log_records(store)
    assert len(records) > 40 and {tid for _, _, tid, _ in records} >= {"a", "b", "c", "rot", "😀emoji"}
    result = check_store(store_path)
    assert set(result["_txn"]) >= {"a", "rot"}


# ---- expiring a transactional id on demand (txlog transactions expire) ----------------------------------


def test_expiring_an_open_transaction_aborts_it_then_forgets_the_id(store):
    p = producer(store, "doomed")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"1", partition=0)
    p.flush()
    pid, epoch = p.producer_id, p.producer_epoch
    coordinator = TransactionCoordinator(store)
    expired = coordinator.expire_transactional_id("doomed")
    assert expired is not None and (expired.producer_id, expired.state) == (pid, TxnState.COMPLETE_ABORT)
    assert state_of(store, "doomed") is None
    assert [(m[2]) for m in markers(store, p=0)] == ["ABORT"] and rc(store, p=0) == []
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.add_partitions("doomed", pid, epoch + 2, [("t", 1)])  # even at the epoch the abort bumped to
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.end_transaction("doomed", pid, epoch, commit=True)
    assert coordinator.init_producer_id("doomed").producer_id != pid  # a new id: nothing was remembered
    p.store.close()


def test_expiring_an_idle_transactional_id_fails_its_producers_next_transaction(store):
    p = producer(store, "idle")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"1", partition=0)
    p.commit_transaction()
    expired = TransactionCoordinator(store).expire_transactional_id("idle")
    assert expired is not None and expired.state == TxnState.COMPLETE_COMMIT
    p.begin_transaction()
    p.send("t", b"2", partition=0)
    with pytest.raises(TransactionAbortableError, match="unknown \\(expired\\?\\)"):  # the client's word for it
        p.commit_transaction()
    assert rc(store, p=0) == [b"1"]
    assert TransactionCoordinator(store).expire_transactional_id("never-seen") is None
