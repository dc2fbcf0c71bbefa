"""The public Consumer (docs/DESIGN.md §6, §7; docs/reliability-scenarios.md scenarios 18, 21, 39).

Data logs are written with `LogWriter` (tests/txlog/test_fetch.py) and transactional offset
commits with `TxnOffsets` (tests/coordinator/test_group_offsets.py): the storage-level writes a
Producer and the coordinator will make.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from storage import Store
from storage.records import ControlType, build_batch
from tests.coordinator.test_group_offsets import TxnOffsets
from tests.txlog.test_fetch import LogWriter, fast_disk  # noqa: F401  (autouse fixture)
from txlog.clients.consumer import Consumer, NoOffsetForPartitionError
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.errors import (
    IllegalStateError,
    InvalidGroupIdError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnstableOffsetCommitError,
)
from txlog.fetch import IllegalArgumentError, IsolationLevel, fetch
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def topic(store):
    store.create_topic("t", 2)
    return store


def writer(store, tp=T0) -> LogWriter:
    return LogWriter(store.partition(*tp))


def values(records) -> list[bytes]:
    return [r.value for r in records]


def drain(consumer: Consumer, **kw) -> list:
    out = []
    while batch := consumer.poll(**kw):
        out.extend(batch)
    return out


# ---- reading ---------------------------------------------------------------------------------------


def test_read_committed_by_default_and_read_uncommitted_on_request(topic):
    w = writer(topic)
    w.plain(2)
    w.txn(1, 2)
    with Consumer(topic) as rc, Consumer(topic, isolation_level="read_uncommitted") as ru:
        rc.assign([T0])
        ru.assign([T0])
        assert values(drain(rc)) == [b"v0", b"v1"]
        assert values(drain(ru)) == [b"v0", b"v1", b"v2", b"v3"]
        assert rc.position(T0) == 2 and ru.position(T0) == 4
        w.commit(1)
        assert values(rc.poll()) == [b"v2", b"v3"] and rc.position(T0) == 5
        assert ru.poll() == [] and ru.position(T0) == 5  # past the marker


def test_poll_round_robins_partitions_and_honours_max_records(topic):
    writer(topic, T0).plain(6)
    writer(topic, T1).plain(6)
    with Consumer(topic, max_poll_records=4) as c:
        c.subscribe(["t"])
        assert c.assignment() == {T0, T1}
        first = c.poll()
        second = c.poll()
        assert len(first) == 4 and len(second) == 4
        assert {r.partition for r in first + second} == {0, 1}
        rest = drain(c, max_records=1)
        assert len(rest) == 4
        assert sorted((r.partition, r.offset) for r in first + second + rest) == [
            (p, o) for p in (0, 1) for o in range(6)
        ]


def test_poll_waits_for_data_up_to_the_timeout(topic):
    w = writer(topic)
    with Consumer(topic) as c:
        c.assign([T0])
        t = time.monotonic()
        assert c.poll(timeout_ms=100) == []
        assert time.monotonic() - t >= 0.09
        threading.Timer(0.05, lambda: w.plain(1)).start()
        assert values(c.poll(timeout_ms=3000)) == [b"v0"]


def test_subscribe_follows_new_partitions_and_topics(topic):
    with Consumer(topic) as c:
        c.subscribe(["t", "later"])
        assert c.assignment() == {T0, T1}
        topic.create_topic("later", 1)
        writer(topic, TopicPartition("later", 0)).plain(1)
        topic.create_partitions("t", 3)
        writer(topic, TopicPartition("t", 2)).plain(1)
        got = drain(c)
        assert sorted((r.topic, r.partition) for r in got) == [("later", 0), ("t", 2)]
        assert c.assignment() == {T0, T1, TopicPartition("t", 2), TopicPartition("later", 0)}
        assert c.subscription() == {"t", "later"}


def test_subscribe_pattern(topic):
    topic.create_topic("orders-eu", 1)
    topic.create_topic("orders-us", 1)
    with Consumer(topic) as c:
        c.subscribe(pattern=r"orders-.*")
        assert c.assignment() == {TopicPartition("orders-eu", 0), TopicPartition("orders-us", 0)}
        with pytest.raises(IllegalStateError):
            c.assign([T0])
        c.unsubscribe()
        c.assign([T0])
        with pytest.raises(IllegalStateError):
            c.subscribe(["t"])


def test_pause_and_resume(topic):
    writer(topic, T0).plain(2)
    writer(topic, T1).plain(2)
    with Consumer(topic) as c:
        c.assign([T0, T1])
        c.pause(T0)
        assert {r.partition for r in drain(c)} == {1}
        assert c.paused() == {T0}
        c.resume(T0)
        assert [r.offset for r in drain(c)] == [0, 1]


def test_abort_elsewhere_never_rewinds_the_consumer(topic):
    """docs/reliability-scenarios.md scenario 21: the consumer keeps its position.

    Only a seek to the committed offset re-reads.
    """
    w = writer(topic)
    w.plain(100)
    with Consumer(topic, group_id="g", enable_auto_commit=False) as c:
        c.assign([T0])
        c.commit({T0: 0})
        assert len(drain(c)) == 100
        txn = TxnOffsets(topic, c._transport.group_offsets, "g", pid=77)
        txn.send({T0: 100})  # the transform loop's offsets for its output txn ...
        txn.end(ControlType.ABORT)  # ... which is aborted
        assert c.position(T0) == 100 and c.poll() == []
        assert c.committed(T0) == OffsetAndMetadata(0)
        c.seek(T0, c.committed(T0).offset)  # what the transform loop must do
        assert len(drain(c)) == 100
    with Consumer(topic, group_id="g") as fresh:
        fresh.assign([T0])
        assert fresh.position(T0) == 0


# ---- positions and offsets ------------------------------------------------------------------------------


def test_seek_position_and_end_offsets_under_both_isolations(topic):
    w = writer(topic)
    w.plain(3)
    w.txn(5, 2)  # 3-4 open
    w.plain(1)  # 5
    for iso, end in (("read_committed", 3), ("read_uncommitted", 6)):
        with Consumer(topic, isolation_level=iso) as c:
            c.assign([T0])
            assert c.end_offsets([T0]) == {T0: end}
            assert c.beginning_offsets([T0]) == {T0: 0}
            c.seek_to_end()
            assert c.position(T0) == end
            c.seek(T0, 1)
            assert c.position(T0) == 1
            assert [r.offset for r in drain(c)] == list(range(1, end))
            c.seek_to_beginning(T0)
            assert c.position(T0) == 0
            c.seek(T0, 5)
            assert [r.offset for r in c.poll()] == ([] if iso == "read_committed" else [5])
    w.commit(5)
    with Consumer(topic, auto_offset_reset="latest") as c:
        c.assign([T0])
        assert c.end_offsets([T0]) == {T0: 7} and c.position(T0) == 7


def test_seek_to_end_is_resolved_when_used(topic):
    w = writer(topic)
    with Consumer(topic) as c:
        c.assign([T0])
        c.seek_to_end(T0)
        w.plain(2)
        assert c.position(T0) == 2


def test_auto_offset_reset_policies(topic):
    w = writer(topic)
    w.plain(3)
    with Consumer(topic, auto_offset_reset="latest") as c:
        c.assign([T0])
        assert c.poll() == []
        w.plain(1)
        assert [r.offset for r in c.poll()] == [3]
    with Consumer(topic, group_id="g", auto_offset_reset="none") as c:
        c.assign([T0])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll()
        with pytest.raises(NoOffsetForPartitionError):
            c.position(T0)
        c.commit({T0: 2})
        assert [r.offset for r in c.poll()] == [2, 3]
        c.seek(T0, 99)
        with pytest.raises(OffsetOutOfRangeError):
            c.poll()
    with Consumer(topic, auto_offset_reset="earliest") as c:
        c.assign([T0])
        c.seek(T0, 99)  # beyond the end: reset per policy on the next fetch
        assert [r.offset for r in c.poll()] == [0, 1, 2, 3]


def test_committed_offset_out_of_range_is_reset(topic):
    writer(topic).plain(2)
    GroupOffsets(topic).commit("g", {T0: 50})
    with Consumer(topic, group_id="g") as c:
        c.assign([T0])
        assert [r.offset for r in c.poll()] == [0, 1]


def test_position_below_log_start_after_retention_is_reset(store):
    store.create_topic("r", 1, {"segment.bytes": 200, "retention.bytes": 250})
    w = writer(store, TopicPartition("r", 0))
    tp = TopicPartition("r", 0)
    w.plain(1)
    with Consumer(store, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 0)
        for _ in range(8):
            w.plain(1)
        store.partition("r", 0).enforce_retention()
        start = store.partition("r", 0).log_start_offset
        assert start > 0
        got = [r.offset for r in drain(c)]
        assert got == list(range(start, 9))


def test_offsets_for_times(topic):
    log = topic.partition("t", 0)
    for i, ts in enumerate((100, 200, 300)):
        log.append(build_batch([(None, b"x%d" % i, [], ts)]))
    log.append(
        build_batch([(None, b"open", [], 400)], producer_id=4, producer_epoch=0, base_sequence=0, is_transactional=True)
    )
    with Consumer(topic) as c, Consumer(topic, isolation_level="read_uncommitted") as ru:
        assert c.offsets_for_times({T0: 150, T1: 0}) == {T0: (1, 200), T1: None}
        assert c.offsets_for_times({T0: 301}) == {T0: None}  # only the open txn's record is later
        assert ru.offsets_for_times({T0: 301}) == {T0: (3, 400)}
        with pytest.raises(IllegalArgumentError):
            c.offsets_for_times({T0: -5})


def test_topics_and_partitions(topic):
    GroupOffsets(topic).commit("g", {T0: 1})  # creates the internal topic
    with Consumer(topic) as c:
        assert c.topics() == {"t"}
        assert c.partitions_for_topic("t") == {0, 1} and c.partitions_for_topic("nope") is None


# ---- groups ---------------------------------------------------------------------------------------------


def test_reopened_consumer_resumes_from_the_groups_committed_offset(store_path):
    with Store.open(store_path) as s:
        s.create_topic("t", 1)
        writer(s).plain(10)
    with Consumer(store_path, group_id="g", enable_auto_commit=False, max_poll_records=4) as c:
        c.assign([T0])
        assert len(c.poll()) == 4
        c.commit()
        assert c.committed(T0) == OffsetAndMetadata(4)
        assert c.committed([T0, T1]) == {T0: OffsetAndMetadata(4), T1: None}
        c.poll()  # read on, but do not commit
    with Consumer(store_path, group_id="g") as c:
        c.subscribe(["t"])
        assert [r.offset for r in drain(c)] == list(range(4, 10))
    with Consumer(store_path, group_id="g") as c:  # the close above auto-committed
        c.assign([T0])
        assert c.position(T0) == 10


def test_auto_commit_on_interval(topic):
    now = [0]
    w = writer(topic)
    w.plain(3)
    groups = GroupOffsets(topic)
    with Consumer(topic, group_id="g", auto_commit_interval_ms=1000, clock=lambda: now[0]) as c:
        c.assign([T0])
        c.poll(max_records=2)
        c.poll(max_records=1)
        assert groups.committed("g") == {}  # interval not passed yet
        now[0] = 1000
        c.poll()  # commits what earlier polls returned, before fetching
        assert groups.committed("g") == {T0: OffsetAndMetadata(3)}
        end = topic.partition("__consumer_offsets", groups.partition_for("g")).log_end_offset
        now[0] = 5000
        c.poll()
        assert topic.partition("__consumer_offsets", groups.partition_for("g")).log_end_offset == end  # unchanged
        c.close(autocommit=False)


def test_unstable_committed_offset_blocks_only_that_partition(topic):
    """docs/reliability-scenarios.md scenario 18 through the consumer: wait for the transaction holding the offset
    to end."""
    writer(topic, T0).plain(5)
    writer(topic, T1).plain(2)
    groups = GroupOffsets(topic)
    groups.commit("g", {T0: 1})
    txn = TxnOffsets(topic, groups, "g", pid=3)
    txn.send({T0: 3})
    with Consumer(topic, group_id="g", enable_auto_commit=False) as c:
        c.assign([T0, T1])
        got = c.poll(timeout_ms=50)
        assert {r.partition for r in got} == {1}  # T0 is not fetched while unstable
        assert c.poll(timeout_ms=30) == []
        with pytest.raises(UnstableOffsetCommitError):
            c.position(T0)
        with pytest.raises(UnstableOffsetCommitError):
            c.committed(T0)
        threading.Timer(0.05, lambda: txn.end(ControlType.COMMIT)).start()
        assert [r.offset for r in c.poll(timeout_ms=3000)] == [3, 4]
    with Consumer(topic, group_id="g", isolation_level="read_uncommitted") as ru:
        ru.assign([T0])
        assert ru.position(T0) == 3


def test_read_uncommitted_does_not_wait_for_pending_offsets(topic):
    writer(topic).plain(5)
    groups = GroupOffsets(topic)
    groups.commit("g", {T0: 1})
    TxnOffsets(topic, groups, "g", pid=3).send({T0: 3})
    with Consumer(topic, group_id="g", isolation_level="read_uncommitted", enable_auto_commit=False) as c:
        c.assign([T0])
        assert c.committed(T0) == OffsetAndMetadata(1)
        assert [r.offset for r in c.poll()] == [1, 2, 3, 4]


# ---- errors and life cycle ------------------------------------------------------------------------------


def test_configuration_and_usage_errors(topic):
    with pytest.raises(IllegalArgumentError):
        Consumer(topic, isolation_level="snapshot")
    with pytest.raises(ValueError):
        Consumer(topic, auto_offset_reset="smallest")
    with pytest.raises(IllegalArgumentError):
        Consumer(topic, max_poll_records=0)
    with pytest.raises(InvalidGroupIdError):
        Consumer(topic, group_id="")
    c = Consumer(topic)
    with pytest.raises(IllegalStateError):
        c.poll()  # neither subscribed nor assigned
    c.assign([T0])
    with pytest.raises(InvalidGroupIdError):
        c.commit()
    with pytest.raises(InvalidGroupIdError):
        c.committed(T0)
    with pytest.raises(IllegalStateError):
        c.seek(T1, 0)
    with pytest.raises(IllegalArgumentError):
        c.seek(T0, -1)
    c.close()
    with pytest.raises(IllegalStateError):
        c.poll()
    assert topic.list_topics()  # a store passed in stays open


def test_a_path_opens_and_closes_its_own_store(store_path):
    with Store.open(store_path) as s:
        s.create_topic("t", 1)
        writer(s).plain(1)
    c = Consumer(store_path)
    c.assign([T0])
    assert len(c.poll()) == 1
    store = c._store
    c.close()
    c.close()  # idempotent
    with pytest.raises(KafkaStorageError):  # "store is closed"
        store.partition("t", 0)


def test_iterating_a_consumer_yields_its_records_in_offset_order(topic):
    writer(topic).plain(3)
    with Consumer(topic) as c:
        c.assign([T0])
        assert [r.offset for r in c] == [0, 1, 2]


# ---- docs/reliability-scenarios.md scenario 39: a reader polling while a writer appends, commits and aborts ---

WRITER = textwrap.dedent("""
    import random, sys
    sys.path.insert(0, sys.argv[2])
    from storage import Store
    from storage.records import ControlType, build_batch
    rnd = random.Random(int(sys.argv[3]))
    store = Store.open(sys.argv[1])
    log = store.partition("t", 0)
    epochs, seqs, fate, n = {}, {}, {}, 0
    for step in range(int(sys.argv[4])):
        pid = rnd.choice((1, 2, 3, None))
        if pid is None:
            log.append(build_batch([(None, b"P%d" % (n + i), [], None) for i in range(2)]))
            n += 2
            continue
        if pid in fate and rnd.random() < 0.35:
            control = ControlType.COMMIT if fate.pop(pid) == b"C" else ControlType.ABORT
            log.append_marker(control, pid, epochs[pid] + 1)
            epochs[pid] += 1
            seqs[pid] = 0
            continue
        outcome = fate.setdefault(pid, rnd.choice((b"C", b"A")))
        epoch, seq = epochs.setdefault(pid, 0), seqs.get(pid, 0)
        size = rnd.randint(1, 3)
        log.append(build_batch([(None, outcome + b"%d" % (n + i), [], None) for i in range(size)],
                               producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True))
        seqs[pid] = seq + size
        n += size
    for pid, outcome in fate.items():
        log.append_marker(ControlType.COMMIT if outcome == b"C" else ControlType.ABORT, pid, epochs[pid] + 1)
    store.close()
    print("DONE", flush=True)
""")


def test_scenario_39_reader_during_writer(topic):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, topic.root, ROOT, "39", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    log = topic.partition("t", 0)
    seen, positions, raw_position = [], [0], 0
    with Consumer(topic, max_poll_records=7) as c:
        c.assign([T0])
        while True:
            done = proc.poll() is not None
            records = c.poll(timeout_ms=5)
            lso = log.last_stable_offset  # the LSO only grows: it was no larger while poll ran
            for r in records:
                assert r.offset < lso, "read_committed returned an offset at or past the LSO"
                assert not r.value.startswith(b"A"), "aborted record returned"
            raw = fetch(log, raw_position, IsolationLevel.READ_COMMITTED, max_records=5)
            assert all(r.offset < raw.last_stable_offset and not r.value.startswith(b"A") for r in raw.records)
            assert raw.next_offset >= raw_position
            raw_position = raw.next_offset
            seen.extend(records)
            positions.append(c.position(T0))
            assert positions[-1] >= positions[-2], "position moved backwards"
            if done and not records:
                break
    out, err = proc.communicate()
    assert proc.returncode == 0 and b"DONE" in out, err.decode()
    offsets = [r.offset for r in seen]
    assert offsets == sorted(set(offsets)), "records repeated or out of order"
    with Consumer(topic, isolation_level="read_uncommitted") as all_data:
        all_data.assign([T0])
        expected = [r.value for r in drain(all_data) if not r.value.startswith(b"A")]
    assert [r.value for r in seen] == expected and len(expected) > 50
    assert positions[-1] == log.log_end_offset == log.last_stable_offset


def test_read_only_store_resumes_from_committed_offsets_without_auto_commit(store_path):
    with Store.open(store_path) as s:
        s.create_topic("t", 1)
        writer(s).plain(4)
        GroupOffsets(s).commit("g", {T0: 2})
    with Store.open(store_path, read_only=True) as ro, Consumer(ro, group_id="g") as c:
        c.assign([T0])
        assert [r.offset for r in drain(c)] == [2, 3]
    # closing did not try to auto-commit to the read-only store
    with Store.open(store_path) as s:
        assert GroupOffsets(s).committed("g") == {T0: OffsetAndMetadata(2)}


def test_errors_do_not_lose_records_already_fetched(topic):
    writer(topic, T0).plain(3)
    writer(topic, T1).plain(3)
    with Consumer(topic, group_id="g", auto_offset_reset="none", enable_auto_commit=False) as c:
        c.assign([T0, T1])
        c.commit({T0: 0})
        with pytest.raises(NoOffsetForPartitionError):
            c.poll()  # T1 has no offset: raised before T0 moves
        assert c.position(T0) == 0
        c.seek(T1, 99)  # out of range, policy 'none'
        got = c.poll()
        assert [r.offset for r in got] == [0, 1, 2]  # T0's records are returned first ...
        with pytest.raises(OffsetOutOfRangeError):
            c.poll()  # ... and the error comes with the next poll
        assert c.position(T0) == 3


def test_blocked_reader_aborts_an_expired_transaction_of_a_dead_producer(store_path):
    """docs/reliability-scenarios.md scenario 23: no daemon, so a writable read_committed reader stuck at the LSO
    runs the coordinator's timeout sweep; a read-only reader only sees the LSO pinned."""
    import time

    import txlog

    admin = txlog.Admin(store_path)
    admin.create_topic("t", 1)
    p = txlog.Producer(store_path, transactional_id="dead", transaction_timeout_ms=100)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"never")
    p.flush()
    p.store.close()  # the process dies without ending its transaction: nothing closes the producer
    plain = txlog.Producer(admin.store)
    plain.send("t", value=b"after")
    plain.flush()
    time.sleep(0.2)
    readonly = txlog.Consumer(txlog.Store.open(store_path, read_only=True))
    readonly.assign([txlog.TopicPartition("t", 0)])
    assert readonly.poll(timeout_ms=50) == []
    assert admin.store.partition("t", 0).last_stable_offset == 0
    reader = txlog.Consumer(store_path)
    reader.assign([txlog.TopicPartition("t", 0)])
    assert [r.value for r in reader.poll(timeout_ms=200)] == [b"after"]
    assert admin.describe_transaction("dead").state.state.name == "COMPLETE_ABORT"
    reader.close()
    admin.close()
