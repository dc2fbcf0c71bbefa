"""The public Producer: batching, partitioning, futures, idempotence and its error paths."""

from __future__ import annotations

import threading

import mmh3
import pytest
from kafka.record.default_records import DefaultRecordBatch

import txlog
from storage.records import Compression
from txlog.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRecordError,
    InvalidRequestError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from txlog.fetch import IsolationLevel, fetch


def _values(store, topic, partition=0, isolation=IsolationLevel.READ_UNCOMMITTED):
    log = store.partition(topic, partition)
    return [r.value for r in fetch(log, log.log_start_offset, isolation, max_records=100_000).records]


def test_send_batches_per_partition_and_futures_resolve_to_offsets(store):
    store.create_topic("t", 2)
    p = txlog.Producer(store, linger_ms=10_000)
    futures = [p.send("t", value=b"v%d" % i, partition=i % 2) for i in range(10)]
    assert not any(f.done() for f in futures)  # lingering in the open batches
    p.flush()
    metas = [f.get() for f in futures]
    assert [(m.partition, m.offset) for m in metas] == [(i % 2, i // 2) for i in range(10)]
    # one batch per partition: every record was sent in one durable append
    for part in (0, 1):
        batches = store.partition("t", part).read(0)
        assert len(batches) == 1 and batches[0].records_count == 5
        assert batches[0].producer_id == p.producer_id and batches[0].base_sequence == 0


def test_future_get_sends_its_batch(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=10_000)
    f = p.send("t", value=b"x")
    assert f.get().offset == 0
    seen = []
    p.send("t", value=b"y").add_callback(lambda m, e: seen.append((m.offset, e)))
    p.flush()
    assert seen == [(1, None)]


def test_full_batch_is_sent_without_flush(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, batch_size=1024, linger_ms=10_000)
    futures = [p.send("t", value=b"x" * 50) for _ in range(100)]
    sent = threading.Event()
    futures[0].add_callback(lambda m, e: sent.set())
    assert sent.wait(30)  # the sender took the full batch without a flush (linger is 10 s)
    assert store.partition("t", 0).log_end_offset > 0
    assert not futures[-1].done()  # the last, open batch lingers
    p.flush()
    assert len(_values(store, "t")) == 100
    assert all(b.size <= 1024 + 100 for b in store.partition("t", 0).read(0, 1 << 30))


def test_keys_pick_partitions_with_mmh3_when_named(store):
    store.create_topic("t", 5)
    p = txlog.Producer(store, partitioner="murmur3")  # the default is Kafka's murmur2: test_partitioner.py
    for i in range(20):
        key = b"key-%d" % i
        assert p.send("t", key=key, value=b"v").get().partition == mmh3.hash(key, signed=False) % 5


def test_null_keys_stick_to_a_partition_per_batch(store):
    store.create_topic("t", 3)
    p = txlog.Producer(store, linger_ms=10_000)
    parts = [p.send("t", value=b"v").get().partition for _ in range(5)]
    assert parts == [0, 1, 2, 0, 1]  # each get() sends the batch, moving the sticky partition on
    for _ in range(4):
        p.send("t", value=b"w")
    p.flush()
    assert sorted(b.records_count for b in store.partition("t", 2).read(0)) == [1, 4]


def test_headers_keys_and_compression_round_trip_with_kafka_python(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, compression_type="zstd")
    p.send("t", value="é".encode(), key=b"k", headers={"a": b"1", "b": None})
    p.send("t", value=None, key="str-key")
    p.flush()
    batch = store.partition("t", 0).read(0)[0]
    assert batch.compression == Compression.ZSTD
    oracle = DefaultRecordBatch(batch.buffer)
    got = [(r.key, r.value, r.headers) for r in oracle]
    assert got == [(b"k", "é".encode(), [("a", b"1"), ("b", None)]), (b"str-key", None, [])]


def test_bad_arguments_are_rejected_before_anything_is_written(store):
    store.create_topic("t", 2)
    p = txlog.Producer(store)
    with pytest.raises(UnknownTopicOrPartitionError):
        p.send("nosuch", value=b"x")
    for bad in (-1, 2, "x", True):
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("t", value=b"x", partition=bad)
    with pytest.raises(InvalidRequestError):
        p.send("__transaction_state", value=b"x")
    with pytest.raises(TypeError):
        p.send("t", value=12)
    with pytest.raises(InvalidConfigurationError):
        txlog.Producer(store, transactional_id="x", enable_idempotence=False)
    with pytest.raises(InvalidConfigurationError):
        txlog.Producer(store, compression_type="brotli")
    p.flush()
    assert store.partition("t", 0).log_end_offset == 0 == store.partition("t", 1).log_end_offset


def test_a_compacted_topic_refuses_the_producers_keyless_record(store):
    """The producer's appends are `trusted` (its own encoder built the bytes: no CRC check), but the
    keys are the application's: the compacted topic's key rule (storage/partition_log.py) still
    applies, so `trusted` can never be what skips it."""
    store.create_topic("c", 1, {"cleanup.policy": "compact"})
    p = txlog.Producer(store, linger_ms=10_000)
    keyless = p.send("c", value=b"v")
    p.flush()
    with pytest.raises(InvalidRecordError, match="without key"):
        keyless.get()
    assert p.send("c", key=b"k", value=b"v").get().offset == 0
    assert _values(store, "c") == [b"v"]


def test_oversized_record_fails_alone_and_does_not_consume_a_sequence(store):
    """docs/reliability-scenarios.md scenario 58 through the producer.

    RECORD_TOO_LARGE, and the next batch reuses the sequence.
    """
    store.create_topic("t", 1, {"max.message.bytes": 1000})
    p = txlog.Producer(store, linger_ms=10_000)
    big = p.send("t", value=b"x" * 2000)
    p.flush()
    with pytest.raises(RecordTooLargeError):
        big.get()
    ok = p.send("t", value=b"small")
    assert ok.get().offset == 0
    assert store.partition("t", 0).read(0)[0].base_sequence == 0


def test_oversized_record_in_a_transaction_makes_it_abortable(store):
    store.create_topic("t", 1, {"max.message.bytes": 1000})
    p = txlog.Producer(store, transactional_id="big")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"ok")
    p.flush()
    p.send("t", value=b"x" * 2000)
    p.flush()
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    with pytest.raises(TransactionAbortableError):
        p.send("t", value=b"more")
    p.abort_transaction()
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == []
    p.begin_transaction()
    p.send("t", value=b"next")
    p.commit_transaction()
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == [b"next"]


def test_close_aborts_an_unfinished_transaction(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="closer")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"never")
    p.flush()
    p.close()
    log = store.partition("t", 0)
    assert log.last_stable_offset == log.log_end_offset == 2
    assert _values(store, "t", isolation=IsolationLevel.READ_COMMITTED) == []
    with pytest.raises(IllegalStateError):
        p.send("t", value=b"x")


def test_epoch_advances_at_every_transaction_end_and_sequences_restart(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="tv2")
    p.init_transactions()
    epochs = []
    for i in range(3):
        p.begin_transaction()
        p.send("t", value=b"%d" % i)
        p.commit_transaction()
        epochs.append(p.producer_epoch)
    assert epochs == [1, 2, 3]
    data = [b for b in store.partition("t", 0).read(0, 1 << 20) if not b.is_control]
    markers = [b for b in store.partition("t", 0).read(0, 1 << 20) if b.is_control]
    assert [(b.producer_epoch, b.base_sequence) for b in data] == [(0, 0), (1, 0), (2, 0)]
    assert [b.producer_epoch for b in markers] == [1, 2, 3]
    assert all(b.size == 78 for b in markers)


def test_empty_transaction_commit_writes_nothing(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="empty")
    p.init_transactions()
    p.begin_transaction()
    p.commit_transaction()
    assert store.partition("t", 0).log_end_offset == 0
