"""The producer's cheap paths (issue 26): every spelling of `send` takes the fast path, and a
blocking get() sends its own batch without a hand-off to the sender thread.

What must hold whichever path a record takes: the bytes in the log are the ones the general
(converting) path writes, a partition is checked before it is used, callbacks run on the sender
thread in record order, and a partition's batches reach the log in the order they were sealed.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import txlog
from storage import Store
from storage.file_records import FileRecords
from txlog.clients.record_accumulator import RecordAccumulator
from txlog.clients.sender import THREAD_PREFIX as SENDER
from txlog.errors import KafkaTimeoutError, UnknownTopicOrPartitionError
from txlog.fetch import IsolationLevel, fetch
from txlog.transport import Transport

TS = 1_700_000_000_000


class _Int(int):
    """An int that is not exactly `int`: `send` takes its general path (conversion, partition check)."""


class ThreadNotingTransport(Transport):
    """Notes the thread of every Produce and, while `hold` is clear, keeps it waiting."""

    def __init__(self, store):
        super().__init__(store)
        self.threads: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def produce(self, topic, partition, data, transactional_id=None, **kwargs):
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.hold.wait(30)
        return super().produce(topic, partition, data, transactional_id, **kwargs)

    def produce_durably(self, requests, **kwargs):  # a wide acks=all round: one request, noted as one
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.hold.wait(30)
        return super().produce_durably(requests, **kwargs)


def _log_bytes(store: Store, topic: str, partition: int) -> bytes:
    out = b""
    for segment in store.partition(topic, partition).segments:
        with FileRecords.open(segment.log_path) as records:
            out += records.read(0, records.size())
    return out


def _produce(root: str, fast: bool) -> bytes:
    """The same 300 records, headers and timestamps to partition 1, spelled for the fast or the general path."""
    with Store.open(root) as store:
        store.create_topic("t", 3)
        p = txlog.Producer(store, batch_size=2048, linger_ms=60_000)
        for i in range(300):
            pairs = [("n", b"%d" % i), ("empty", None)] if i % 3 else []
            if fast:
                headers, partition, ts = pairs, 1, TS + i
            else:  # a tuple, bytearray values and int subclasses: converted and checked as always
                headers = tuple((k, None if v is None else bytearray(v)) for k, v in pairs)
                partition, ts = _Int(1), _Int(TS + i)
            p.send("t", b"v%d" % i, key=b"k%d" % (i % 7), partition=partition, headers=headers, timestamp_ms=ts)
        p.flush()
        p.close()
        return _log_bytes(store, "t", 1)


def test_explicit_partition_headers_and_timestamps_write_the_bytes_of_the_general_path(tmp_path):
    fast, general = _produce(str(tmp_path / "fast"), True), _produce(str(tmp_path / "general"), False)
    assert len(fast) > 300 * 20
    assert fast == general


def test_headers_passed_as_they_are_are_read_at_send(store):
    """The fast path hands the caller's list to the batch: changing it after send changes nothing."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=60_000)
    headers = [("a", b"1")]
    p.send("t", b"v", headers=headers)
    headers[0] = ("a", b"changed")
    headers.append(("b", b"2"))
    p.flush()
    p.close()
    log = store.partition("t", 0)
    (record,) = fetch(log, 0, IsolationLevel.READ_UNCOMMITTED, max_records=10).records
    assert list(record.headers) == [("a", b"1")]


def test_a_partition_used_before_is_still_checked_for_every_spelling(store):
    """The fast lookup of known partitions must not let True (== 1) or an out-of-range number through."""
    store.create_topic("t", 2)
    p = txlog.Producer(store)
    p.send("t", b"v", partition=1).get()
    with pytest.raises(UnknownTopicOrPartitionError):
        p.send("t", b"v", partition=True)
    with pytest.raises(UnknownTopicOrPartitionError):
        p.send("t", b"v", partition=2)
    p.close()


def test_a_blocking_get_sends_its_batch_on_the_calling_thread(store):
    store.create_topic("t", 1)
    transport = ThreadNotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    for i in range(5):
        assert p.send("t", b"v%d" % i).get().offset == i
    assert transport.threads == ["MainThread"] * 5  # no hand-off to the sender and back
    p.close()


def test_a_get_with_a_timeout_leaves_the_round_to_the_sender_and_gives_up_in_time(store):
    """A round cannot be abandoned halfway, so get(timeout) never runs one: with the write held
    it raises KafkaTimeoutError instead of waiting for the write."""
    store.create_topic("t", 1)
    transport = ThreadNotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    transport.hold.clear()
    release = threading.Timer(30, transport.hold.set)  # never a hung test, even if get() waited
    release.start()
    try:
        future = p.send("t", b"v")
        with pytest.raises(KafkaTimeoutError):
            future.get(timeout=0.2)
        assert transport.hold.is_set() is False
    finally:
        transport.hold.set()
        release.cancel()
    assert future.get().offset == 0
    assert transport.threads == [f"txlog-producer-sender | {p.client_id}"]
    p.close()


def test_a_batch_with_a_callback_is_sent_by_the_sender_thread_even_on_get(store):
    store.create_topic("t", 1)
    transport = ThreadNotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    threads = []
    future = p.send("t", b"v").add_callback(lambda m, e: threads.append(threading.current_thread().name))
    future.get()
    sender = f"txlog-producer-sender | {p.client_id}"
    assert threads == [sender] and transport.threads == [sender]
    p.close()


def test_a_get_while_another_round_is_in_progress_waits_for_it_and_keeps_the_order(store):
    """Rounds never overlap: a get() on another thread is sending (held in its Produce), so this
    get() waits for it rather than sending a later batch of the same partition first."""
    store.create_topic("t", 1)
    transport = ThreadNotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    transport.hold.clear()
    first = p.send("t", b"first")
    other = threading.Thread(target=first.get, name="other-getter")
    other.start()
    assert transport.entered.wait(30)
    second = p.send("t", b"second")
    waiter = threading.Thread(target=second.get, name="second-getter")
    waiter.start()
    waiter.join(0.2)
    assert transport.threads == ["other-getter"]  # the second get() did not start a round of its own
    transport.hold.set()
    other.join(30)
    waiter.join(30)
    assert (first.get(timeout=1).offset, second.get(timeout=1).offset) == (0, 1)
    p.close()


def test_threads_sending_and_getting_at_once_keep_each_partitions_order(store):
    """Stress: four threads send to two partitions, some records with callbacks, some waited for
    with get() (which may send rounds on those threads); every record lands once, and each
    thread's records of a partition keep their send order."""
    store.create_topic("t", 2)
    p = txlog.Producer(store, batch_size=1024, linger_ms=1)
    results: dict[int, list] = {}

    def work(n: int) -> None:
        futures = []
        for i in range(400):
            f = p.send("t", b"%d:%d" % (n, i), partition=i % 2)
            if i % 5 == 0:
                f.add_callback(lambda m, e: None)
            if i % 7 == n:
                f.get()  # no timeout: this thread may run the round itself
            futures.append((i % 2, f))
        results[n] = [(part, f.get(timeout=30).offset) for part, f in futures]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    p.close()
    every = [(part, off) for rows in results.values() for part, off in rows]
    assert len(results) == 4 and len(set(every)) == 1600
    for part in (0, 1):
        assert sorted(off for q, off in every if q == part) == list(range(800))
        for rows in results.values():
            mine = [off for q, off in rows if q == part]
            assert mine == sorted(mine)


# ---- the direct path of a lone durable get() (issue 26) ------------------------------------------------


class _TakeCounter:
    """Counts the accumulator's general hand-outs to a get()'s thread (`_take_for_caller`): the direct
    path of a lone batch never reaches them, the general path of every other get() does."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = RecordAccumulator._take_for_caller

        def counted(accumulator, tp):
            self.calls += 1
            return real(accumulator, tp)

        monkeypatch.setattr(RecordAccumulator, "_take_for_caller", counted)


def test_a_lone_durable_get_takes_the_direct_path_and_anything_else_the_general_one(store, monkeypatch):
    store.create_topic("t", 2)
    takes = _TakeCounter(monkeypatch)
    transport = ThreadNotingTransport(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    assert [p.send("t", b"v%d" % i, partition=0).get().offset for i in range(5)] == [0, 1, 2, 3, 4]
    assert takes.calls == 0 and transport.threads == ["MainThread"] * 5
    # Another partition's batch waits sealed (a full batch): the general path takes it along.
    p.send("t", b"x" * 9000, partition=1)
    p.send("t", b"x" * 9000, partition=1)  # does not fit: the first batch is sealed
    assert p.send("t", b"v5", partition=0).get().offset == 5
    assert takes.calls == 1 and len(transport.threads) == 6  # one round: both partitions in one sync round
    p.close()


def _on_sender_thread() -> bool:
    """Whether a callback runs on the producer's sender thread (where the pipeline settles)."""
    return threading.current_thread().name.startswith(SENDER)


def _direct_or_pipeline(root: str, direct: bool) -> tuple[dict[str, bytes], list, list]:
    """The same one-record sends, each durable before the next: `get()` after each (the direct path),
    or `flush()` after each and `get()` once settled (the general path: `_take_for_caller`). Every fourth
    record has a callback (on both sides: such a get() leaves its batch to the sender)."""
    with Store.open(root) as store:
        store.create_topic("t", 2)
        p = txlog.Producer(store)
        answers, called = [], []
        for i in range(40):
            pairs = [("n", b"%d" % i)] if i % 3 else None
            future = p.send("t", b"v%d" % i, key=b"k%d" % (i % 5), partition=i % 2, headers=pairs, timestamp_ms=TS + i)
            if i % 4 == 0:
                future.add_callback(lambda m, e, i=i: called.append((i, m.offset, _on_sender_thread())))
            if not direct:
                p.flush()
            answers.append((future.get(), future.done(), future.exception()))
        p.close()
        files = {}
        for segment_dir in sorted((Path(root) / "t-0").parent.glob("t-*")):
            for f in sorted(segment_dir.iterdir()):
                files[f"{segment_dir.name}/{f.name}"] = f.read_bytes()
        return files, answers, called


def test_the_direct_path_writes_and_answers_what_the_pipeline_does(tmp_path, monkeypatch):
    takes = _TakeCounter(monkeypatch)
    direct = _direct_or_pipeline(str(tmp_path / "direct"), True)
    assert takes.calls == 10  # the get()s of the records with a callback only
    pipeline = _direct_or_pipeline(str(tmp_path / "pipeline"), False)
    assert any(name.endswith(".log") and len(data) > 20 * 60 for name, data in direct[0].items())
    assert [on_sender for _, _, on_sender in direct[2]] == [True] * 10
    assert direct == pipeline


class _DeliveryCounter(Transport):
    """A transport with requests of its own to deliver late (as a fault plan's): counts the calls."""

    def __init__(self, store):
        super().__init__(store)
        self.deliveries = 0

    def deliver_delayed(self) -> None:
        self.deliveries += 1


def test_a_transport_with_late_requests_gets_every_round_end_on_either_path(store):
    """The sender skips Transport's own no-op deliver_delayed (issue 26), never one a transport
    defines: a durable get()'s direct path and the sender thread's rounds each end with it."""
    store.create_topic("t", 2)
    transport = _DeliveryCounter(store)
    p = txlog.Producer(store, transport=transport, linger_ms=60_000)
    assert [p.send("t", b"v%d" % i, partition=0).get().offset for i in range(3)] == [0, 1, 2]
    assert transport.deliveries == 3  # one direct round each
    p.send("t", b"w", partition=1)
    p.flush()  # a general round (not the direct path)
    assert transport.deliveries == 4
    p.close()


def test_record_metadata_reads_each_records_timestamp_and_sizes(store):
    """RecordMetadata's last three fields, read from the batch's builder (metadata_at), for a
    lone durable get and for records of one batch settled by callbacks, by record index."""
    store.create_topic("t", 1)
    p = txlog.Producer(store)
    got = p.send("t", b"vvv", b"kk", timestamp_ms=TS + 1).get()
    assert tuple(got) == ("t", 0, 0, TS + 1, 2, 3)
    p.close()
    p = txlog.Producer(store, linger_ms=60_000)
    seen = []
    futures = [
        p.send("t", value, key, timestamp_ms=TS + i).add_callback(lambda m, e: seen.append(tuple(m)))
        for i, (key, value) in enumerate([(None, b"v" * 5), (b"k" * 7, None), (b"", b"")])
    ]
    p.flush()
    expected = [("t", 0, 1, TS, -1, 5), ("t", 0, 2, TS + 1, 7, -1), ("t", 0, 3, TS + 2, 0, 0)]
    assert [tuple(f.get()) for f in futures] == expected == seen
    p.close()
