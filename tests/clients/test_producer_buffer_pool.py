"""produce_many's buffer pool (Kafka's BufferPool, txlog/clients/record_accumulator.py): settled
batches' bytearrays are encoded into again, never one that something still reads, and the free
ones stay within buffer_memory."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import txlog
from txlog.fetch import IsolationLevel, fetch
from txlog.transport import Transport


class KeepingTransport(Transport):
    """Keeps every Produce request's buffer and a copy of its bytes, as a request still in
    flight somewhere would: the pool must never encode into one of them again. The copy is taken
    once the append returned: the log stamps the offsets into this process's own (trusted)
    bytearray in place, rather than copy it (PartitionLog.append)."""

    def __init__(self, store):
        super().__init__(store)
        self.kept: list[tuple[bytes | bytearray, bytes]] = []
        self.lock = threading.Lock()

    def _keep(self, requests):
        with self.lock:
            self.kept.extend((data, bytes(data)) for data in requests)

    def produce(self, topic, partition, data, transactional_id=None, **kwargs):
        try:
            return super().produce(topic, partition, data, transactional_id, **kwargs)
        finally:
            self._keep([data])

    def produce_requests(self, topic, partition, requests, **kwargs):
        try:
            return super().produce_requests(topic, partition, requests, **kwargs)
        finally:
            self._keep(requests)

    def produce_durably(self, requests, **kwargs):
        try:
            return super().produce_durably(requests, **kwargs)
        finally:
            self._keep([data for _, _, data in requests])


def _values(store, topic, partition):
    log = store.partition(topic, partition)
    out: list[bytes] = []
    while len(out) < log.log_end_offset:
        out.extend(r.value for r in fetch(log, len(out), IsolationLevel.READ_UNCOMMITTED, max_records=10_000).records)
    return out


def test_buffers_still_referenced_are_never_encoded_into_and_every_record_lands_intact(store):
    """Stress: rounds of produce_many on two partitions (batches of varying sizes, one batch per
    append so the request is the batch's own bytearray) with sends in between; a transport that
    keeps every request makes each buffer 'in use' forever. None may change afterwards."""
    store.create_topic("t", 2)
    transport = KeepingTransport(store)
    p = txlog.Producer(store, transport=transport, batch_size=4096, max_request_size=4096, linger_ms=0)
    expected: dict[int, list[bytes]] = {0: [], 1: []}
    for round_ in range(6):
        for part in (0, 1):
            values = [b"%d-%d-%d-" % (round_, part, i) + b"x" * (i % 300) for i in range(3000)]
            p.produce_many("t", values, partition=part)
            expected[part].extend(values)
            p.send("t", b"single-%d" % round_, partition=part)
            expected[part].append(b"single-%d" % round_)
        p.flush()
    p.close()
    assert len(transport.kept) > 100
    assert all(bytes(data) == copy for data, copy in transport.kept)
    for part in (0, 1):
        assert _values(store, "t", part) == expected[part]


def test_settled_buffers_are_reused_and_bytes_in_the_log_are_unchanged(store):
    """A producer's second call encodes into the first call's buffers: its peak of traced memory
    is lower by about the data's size (4 MB of batches not allocated again); the log holds
    exactly what was sent."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, batch_size=16384)
    values = [b"%06d" % i + b"v" * 1018 for i in range(4000)]
    peaks = []
    for _ in range(2):
        p.flush()
        gc.collect()
        tracemalloc.start()
        try:
            p.produce_many("t", values).get(timeout=60)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    p.close()
    assert _values(store, "t", 0) == values + values
    cold, warm = peaks
    assert warm < cold - 2_000_000, peaks


def test_free_buffers_stay_within_buffer_memory(store):
    """After every batch settled, what the pool keeps is at most buffer_memory."""
    store.create_topic("t", 1)
    limit = 200_000
    p = txlog.Producer(store, batch_size=16384, buffer_memory=limit)
    values = [b"v" * 1000] * 4000  # 4 MB: twenty times the limit
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        p.produce_many("t", values).get(timeout=60)
        p.flush()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    p.close()
    assert after - before <= limit + 100_000, after - before  # the pool, plus the futures' small change
