"""The producer's pipeline: the sender thread, group commit, linger, flush, callbacks, bounds, acks.

A transport that holds its Produce requests until released (`HeldTransport`) stands in for a
slow disk, so the tests can put several batches in the accumulator before the sender runs.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import txlog
from storage.high_watermark import HighWatermarkFile
from storage.records import Compression
from txlog.clients import producer as producer_module
from txlog.clients import record_accumulator
from txlog.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    KafkaTimeoutError,
    ProducerFencedError,
    RecordTooLargeError,
)
from txlog.fetch import IsolationLevel, fetch
from txlog.transport import Transport


class HeldTransport(Transport):
    """Counts Produce calls and, while `hold` is clear, keeps them waiting (a slow write)."""

    def __init__(self, store):
        super().__init__(store)
        self.hold = threading.Event()
        self.hold.set()
        self.calls: list[tuple[str, int, int]] = []  # (topic, partition, bytes) per Produce
        self.entered = threading.Event()
        self.rounds: list[int] = []  # appends per produce_requests call

    def produce(self, topic, partition, data, transactional_id=None, **kwargs):
        self.entered.set()
        assert self.hold.wait(30)
        self.calls.append((topic, partition, len(data)))
        return super().produce(topic, partition, data, transactional_id, **kwargs)

    def produce_requests(self, topic, partition, requests, **kwargs):
        """Several acks=all appends to one partition, one fdatasync: held as one; `rounds` notes each."""
        self.entered.set()
        assert self.hold.wait(30)
        self.calls.extend((topic, partition, len(data)) for data in requests)
        self.rounds.append(len(requests))
        return super().produce_requests(topic, partition, requests, **kwargs)

    def produce_durably(self, requests, **kwargs):
        """A wide acks=all round: one Produce request over several partitions, held as one."""
        self.entered.set()
        assert self.hold.wait(30)
        self.calls.extend((topic, partition, len(data)) for topic, partition, data in requests)
        return super().produce_durably(requests, **kwargs)


def _values(store, topic, partition=0, isolation=IsolationLevel.READ_UNCOMMITTED):
    log = store.partition(topic, partition)
    return [r.value for r in fetch(log, log.log_start_offset, isolation, max_records=100_000).records]


def _held_producer(store, **config):
    transport = HeldTransport(store)
    transport.hold.clear()
    return txlog.Producer(store, transport=transport, **config), transport


def test_sealed_batches_of_a_partition_go_in_one_append_up_to_max_request_size(store, monkeypatch):
    store.create_topic("t", 1)
    store.partition("t", 0)  # opened (and its recovery synced) before counting
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    p, transport = _held_producer(
        store, batch_size=1024, linger_ms=60_000, max_request_size=4000, max_in_flight_requests_per_connection=1
    )
    first = p.send("t", value=b"x" * 900)
    second = p.send("t", value=b"y" * 900)  # seals the first batch: the sender takes it and waits
    assert transport.entered.wait(30)
    futures = [p.send("t", value=b"%d" % i + b"z" * 900) for i in range(12)]  # 12 more full batches
    transport.hold.set()
    p.flush()
    # 14 batches: the first alone (taken before the others existed), then as many as fit in
    # max_request_size (4 batches of ~970 bytes) per append
    assert [c[2] // 900 for c in transport.calls] == [1, 4, 4, 4, 1]
    assert len(syncs) == len(transport.calls)  # one fdatasync per append
    assert first.get().offset == 0 and second.get().offset == 1
    assert [f.get().offset for f in futures] == list(range(2, 14))
    assert _values(store, "t")[2:4] == [b"0" + b"z" * 900, b"1" + b"z" * 900]


def test_a_round_makes_up_to_max_in_flight_appends_to_its_one_partition_with_one_fdatasync(store, monkeypatch):
    """acks=all outside a transaction: the sender takes up to max_in_flight_requests_per_connection
    groups of one partition in a round, appends them one after the other (each up to
    max_request_size) and makes them durable with ONE fdatasync; offsets, values and futures are
    those of one append per group (the same test with in-flight 1 above)."""
    store.create_topic("t", 1)
    store.partition("t", 0)
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    p, transport = _held_producer(
        store, batch_size=1024, linger_ms=60_000, max_request_size=4000, max_in_flight_requests_per_connection=3
    )
    first = p.send("t", value=b"x" * 900)
    second = p.send("t", value=b"y" * 900)
    assert transport.entered.wait(30)
    futures = [p.send("t", value=b"%d" % i + b"z" * 900) for i in range(12)]
    transport.hold.set()
    p.flush()
    # the first batch alone; then 3 appends of 4 batches in one round, one fdatasync; the last alone
    assert [c[2] // 900 for c in transport.calls] == [1, 4, 4, 4, 1]
    assert transport.rounds == [3]
    assert len(syncs) == 3
    assert first.get().offset == 0 and second.get().offset == 1
    assert [f.get().offset for f in futures] == list(range(2, 14))
    assert _values(store, "t") == [b"x" * 900, b"y" * 900] + [b"%d" % i + b"z" * 900 for i in range(12)]
    assert HighWatermarkFile(store.partition_dir("t", 0), writable=False).read() == 14


def test_callbacks_run_in_record_order_on_the_sender_thread(store):
    store.create_topic("t", 2)
    p = txlog.Producer(store, batch_size=512, linger_ms=1)
    seen: list[tuple[int, int, int]] = []
    threads = set()

    def note(i):
        def callback(metadata, error):
            assert error is None
            threads.add(threading.current_thread().name)
            seen.append((metadata.partition, metadata.offset, i))

        return callback

    for i in range(300):
        p.send("t", value=b"v" * 40, partition=i % 2).add_callback(note(i))
    p.flush()
    assert len(seen) == 300 and threads == {f"txlog-producer-sender | {p.client_id}"}
    for part in (0, 1):
        mine = [(offset, i) for partition, offset, i in seen if partition == part]
        assert mine == sorted(mine) and [o for o, _ in mine] == list(range(150))


def test_a_lingering_batch_goes_without_another_send(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=50)
    sent = threading.Event()
    p.send("t", value=b"alone").add_callback(lambda m, e: sent.set())
    assert sent.wait(30)  # no flush, no second send: linger alone sent it
    assert _values(store, "t") == [b"alone"]
    q = txlog.Producer(store, linger_ms=60_000)
    waiting = q.send("t", value=b"later")
    time.sleep(0.3)
    assert not waiting.done()  # a long linger holds the batch ...
    assert waiting.get(timeout=30).offset == 1  # ... until somebody wants the result
    p.close()
    q.close()


def test_flush_waits_for_every_batch_and_times_out_on_a_stuck_sender(store):
    store.create_topic("t", 3)
    p, transport = _held_producer(store, linger_ms=60_000)
    futures = [p.send("t", value=b"%d" % i, partition=i % 3) for i in range(9)]
    with pytest.raises(KafkaTimeoutError):
        p.flush(timeout=0.2)
    assert not any(f.done() for f in futures)
    transport.hold.set()
    p.flush()
    assert all(f.done() and f.exception() is None for f in futures)
    assert [_values(store, "t", part) for part in range(3)] == [
        [b"0", b"3", b"6"],
        [b"1", b"4", b"7"],
        [b"2", b"5", b"8"],
    ]


def test_an_oversized_batch_in_a_group_fails_alone(store):
    store.create_topic("t", 1, {"max.message.bytes": 1000})
    p, transport = _held_producer(store, linger_ms=60_000, batch_size=600)
    blocker = p.send("t", value=b"a" * 550)
    p.send("t", value=b"b" * 550)  # seals the first: the sender holds it
    assert transport.entered.wait(30)
    big = p.send("t", value=b"x" * 2000)
    after = p.send("t", value=b"c" * 10)
    transport.hold.set()
    p.flush()
    with pytest.raises(RecordTooLargeError):
        big.get()
    assert blocker.get().offset == 0 and after.get().offset == 2
    assert _values(store, "t") == [b"a" * 550, b"b" * 550, b"c" * 10]


def test_send_blocks_on_a_full_buffer_then_times_out(store):
    store.create_topic("t", 1)
    p, transport = _held_producer(store, batch_size=1024, buffer_memory=3 * 1024, max_block_ms=200, linger_ms=0)
    for _ in range(3):
        p.send("t", value=b"x" * 1000)  # three batches fill the buffer
    with pytest.raises(KafkaTimeoutError):
        p.send("t", value=b"x" * 1000)
    transport.hold.set()
    p.flush()
    assert p.send("t", value=b"room again").get(timeout=30).offset == 3


def test_batches_past_delivery_timeout_expire(store):
    store.create_topic("t", 2)
    p, transport = _held_producer(store, linger_ms=0, delivery_timeout_ms=200)
    held = p.send("t", value=b"first", partition=0)
    assert transport.entered.wait(30)
    late = p.send("t", value=b"second", partition=1)
    time.sleep(0.5)
    transport.hold.set()
    p.flush()
    assert held.get().offset == 0
    with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms"):
        late.get()
    assert _values(store, "t", 1) == []


def test_close_drains_the_accumulator(store):
    store.create_topic("t", 2)
    p = txlog.Producer(store, linger_ms=60_000)
    futures = [p.send("t", value=b"%d" % i, partition=i % 2) for i in range(50)]
    p.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(_values(store, "t", 0)) + len(_values(store, "t", 1)) == 50
    with pytest.raises(IllegalStateError):
        p.send("t", value=b"x")


def test_a_callback_cannot_wait_for_its_own_producer(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store)
    errors = []

    def callback(metadata, error):
        try:
            p.flush()
        except IllegalStateError as exc:
            errors.append(exc)

    p.send("t", value=b"x").add_callback(callback)
    p.flush()
    assert len(errors) == 1 and "callback" in str(errors[0])


def test_a_fenced_producer_fails_its_futures_and_its_next_call(store):
    store.create_topic("t", 1)
    old = txlog.Producer(store, transactional_id="z")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", value=b"before").get()
    new = txlog.Producer(store, transactional_id="z")
    new.init_transactions()  # fences `old` and aborts its transaction
    doomed = old.send("t", value=b"zombie")
    old.flush()
    assert isinstance(doomed.exception(), ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        old.send("t", value=b"again")
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == []


@pytest.mark.parametrize("acks, offset", [("all", 0), (1, 0), (0, -1)])
def test_acks_decide_what_the_future_reports(store, acks, offset):
    store.create_topic("t", 1)
    p = txlog.Producer(store, acks=acks)
    assert p.send("t", value=b"v").get(timeout=30).offset == offset
    p.close()
    assert _values(store, "t") == [b"v"]  # every acks level ends durable and visible after close


def test_configuration_follows_kafka(store):
    store.create_topic("t", 1)
    assert not txlog.Producer(store, acks=1).idempotent  # idempotence left unset: off with acks=1
    for bad in (
        dict(acks=1, enable_idempotence=True),
        dict(acks=0, transactional_id="t"),
        dict(max_in_flight_requests_per_connection=6),
        dict(max_in_flight_requests_per_connection=0),
        dict(linger_ms=10, delivery_timeout_ms=5),
        dict(buffer_memory=-1),
        dict(max_block_ms="x"),
    ):
        with pytest.raises(InvalidConfigurationError):
            txlog.Producer(store, **bad)
    assert txlog.Producer(store, enable_idempotence=False, max_in_flight_requests_per_connection=10)


def test_transactional_data_is_written_unsynced_and_made_durable_by_flush(store):
    """In a transaction the sender writes without fdatasync (the high watermark file stays behind);
    flush() syncs, as Kafka's acknowledged records are below the high watermark."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="hw", linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    written = p.send("t", value=b"open")
    assert written.get(timeout=30).offset == 0  # in the log file ...
    hw_file = HighWatermarkFile(store.partition_dir("t", 0), writable=False)
    assert hw_file.read() == 0  # ... not yet published as durable
    p.flush()
    assert hw_file.read() == 1 and _values(store, "t") == [b"open"]
    p.send("t", value=b"more").get(timeout=30)
    p.commit_transaction()
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == [b"open", b"more"]
    hw_file.close()


def test_produce_many_places_records_as_send_does(store):
    store.create_topic("t", 4)
    keys = [b"key-%d" % i for i in range(500)]
    values = [b"value-%d" % i for i in range(500)]
    by_send = txlog.Producer(store)
    expected = {}
    for k, v in zip(keys, values, strict=True):
        expected.setdefault(by_send.send("t", value=v, key=k).get(timeout=30).partition, []).append(v)
    by_send.close()
    store.create_topic("u", 4)
    p = txlog.Producer(store, batch_size=1024)
    future = p.produce_many("u", values, keys, headers=[{"i": b"%d" % i} for i in range(500)])
    assert future.get(timeout=30) == 500
    for part in range(4):
        assert _values(store, "u", part) == expected.get(part, [])
    assert sum(records for _, _, records, _ in future.batches()) == 500
    record = fetch(store.partition("u", 0), 0, IsolationLevel.READ_UNCOMMITTED, max_records=1).records[0]
    assert record.headers == [("i", values.index(record.value).__str__().encode())]


def test_produce_many_keeps_order_after_sends_and_commits_in_a_transaction(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="bulk", linger_ms=60_000, compression_type="lz4")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"first")
    bulk = p.produce_many("t", [b"%d" % i for i in range(3000)], timestamps=list(range(1000, 4000)))
    p.send("t", value=b"last")
    p.commit_transaction()
    assert bulk.done() and bulk.exception() is None
    got = _values(store, "t", isolation=IsolationLevel.READ_COMMITTED)
    assert got == [b"first", *[b"%d" % i for i in range(3000)], b"last"]
    batches = [b for b in store.partition("t", 0).read(0, 1 << 30) if not b.is_control]
    assert all(b.compression == Compression.LZ4 and b.is_transactional for b in batches)
    assert [b.base_sequence for b in batches] == sorted(b.base_sequence for b in batches)


def test_a_read_committed_reader_never_syncs_an_open_transaction_for_the_writer(store, monkeypatch):
    """Readers sync a lagging tail themselves only when they would read it: read_committed stops at
    the LSO, below the open transaction's unsynced data; read_uncommitted would read it, so syncs it."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="rc", linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"open").get(timeout=30)
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == [] and syncs == []
    assert _values(store, "t") == [b"open"] and len(syncs) == 1
    p.abort_transaction()


def test_an_idle_sender_stops_and_the_next_send_starts_another(store, monkeypatch):
    """A producer nobody closed must not keep a thread (and itself) alive forever."""
    monkeypatch.setattr(record_accumulator, "SENDER_IDLE_S", 0.1)
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=0, client_id="idle-test")

    def senders():
        return [t for t in threading.enumerate() if t.name == "txlog-producer-sender | idle-test"]

    p.send("t", value=b"one").get(timeout=30)
    [first] = senders()
    first.join(30)
    assert not first.is_alive() and senders() == []
    assert p.send("t", value=b"two").get(timeout=30).offset == 1
    assert len(senders()) == 1 and senders()[0] is not first
    p.close()
    assert senders() == [] and _values(store, "t") == [b"one", b"two"]


def test_produce_many_of_more_rows_than_one_chunk_keeps_every_record_in_order(store, monkeypatch):
    monkeypatch.setattr(producer_module, "BULK_CHUNK_RECORDS", 100)
    store.create_topic("t", 3)
    keys = [None if i % 7 == 0 else b"k%d" % (i % 50) for i in range(1000)]
    values = [b"v%d" % i for i in range(1000)]
    p = txlog.Producer(store, batch_size=512)
    assert p.produce_many("t", values, keys).get(timeout=30) == 1000
    got = [v for part in range(3) for v in _values(store, "t", part)]
    assert sorted(got) == sorted(values)
    for part in range(3):  # each partition's records keep the call's order
        mine = _values(store, "t", part)
        assert mine == sorted(mine, key=lambda v: int(v[1:]))


def test_group_commit_keeps_segments_within_segment_bytes(tmp_path):
    """A group commit never appends more than segment.bytes at once, so segments stay within it
    (the log rolls before an append, never inside one), with the default 1 MiB max.request.size."""
    path = str(tmp_path / "store")
    segment_bytes = 100_000
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"segment.bytes": segment_bytes})
    with txlog.Producer(path, linger_ms=1000) as p:  # a long linger: many sealed batches wait for one round
        for i in range(20_000):
            p.send("t", value=b"%08d" % i, partition=0)
        p.flush()
    part = os.path.join(path, "t-0")
    sizes = [os.path.getsize(os.path.join(part, n)) for n in sorted(os.listdir(part)) if n.endswith(".log")]
    assert len(sizes) > 2 and max(sizes) <= segment_bytes, sizes
    with txlog.Consumer(path, auto_offset_reset="earliest") as c:
        c.assign([txlog.TopicPartition("t", 0)])
        values = [r.value for _ in range(100) for r in c.poll(timeout_ms=10, max_records=5000)]
    assert values == [b"%08d" % i for i in range(20_000)]


def test_produce_many_beyond_buffer_memory_waits_for_the_sender_it_started(tmp_path):
    """Batches of one produce_many call that outgrow buffer.memory wait for the sender to free
    it; the sender starts with the first batch (before, it started after the loop, so the second
    batch waited max_block_ms for a sender that did not exist, and `txlog produce` of a 40 MB line
    after a short one hung)."""
    path = str(tmp_path / "store")
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1)
    values = [bytes([65 + i]) * 60_000 for i in range(3)]  # one ~60 KB batch each, 100 KB of buffer
    outcome: list[object] = []

    def produce() -> None:  # in a thread: the bug was a hang (a wait for a sender that never ran)
        try:
            with txlog.Producer(path, batch_size=70_000, buffer_memory=100_000, max_block_ms=10_000) as p:
                outcome.append(p.produce_many("t", values, partition=0).get(timeout=60))
        except Exception as exc:  # noqa: BLE001  reported by the assertion below
            outcome.append(exc)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "produce_many hung"
    assert outcome == [3]
    with txlog.Consumer(path, auto_offset_reset="earliest") as c:
        c.assign([txlog.TopicPartition("t", 0)])
        got = [r.value for _ in range(20) for r in c.poll(timeout_ms=10)]
    assert got == values
