"""PartitionLog through the public API: append, read, roll, retention, lookups, markers, LSO.

Interop: batches built by kafka-python's DefaultRecordBatchBuilder (the independent
oracle) go in through `PartitionLog.append` and come back with the same fields; every
byte the store writes (data and control batches) is parsed back by kafka-python's
`MemoryRecords` with a valid CRC; and a segment written by real Kafka software opens
read-only and reads back its three records.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
import tracemalloc

import pytest
from crc32c import crc32c
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from storage import Store
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ReadOnlyStoreError,
    UnknownTopicOrPartitionError,
)
from storage.log_files import filename_prefix
from storage.records import (
    BatchBuilder,
    Compression,
    ControlType,
    RecordBatch,
    build_batch,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# ---- helpers ------------------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(
    values, *, pid=-1, epoch=-1, seq=-1, txn=False, ts=None, keys=None, headers=None, compression=Compression.NONE
) -> bytes:
    """A client batch of `values` (bytes); timestamps ts, ts+1, ..."""
    ts = now_ms() if ts is None else ts
    recs = []
    for i, v in enumerate(values):
        key = keys[i] if keys is not None else None
        hdrs = headers[i] if headers is not None else None
        recs.append((key, v, hdrs, ts + i))
    return build_batch(
        recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn, compression=compression
    )


def read_all(log, start=None, max_offset=None) -> list[RecordBatch]:
    start = log.log_start_offset if start is None else start
    return log.read(start, max_bytes=1 << 40, max_offset=max_offset)


def data_records(log, start=None, max_offset=None) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in read_all(log, start, max_offset) if not b.is_control for r in b.records()]


def partition_dir(store_path: str, topic: str = "t", p: int = 0) -> str:
    return os.path.join(store_path, f"{topic}-{p}")


def log_files(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


def kafka_python_parse(directory: str):
    """Every batch of every segment file, parsed by kafka-python; asserts each CRC is valid."""
    out = []
    for path in log_files(directory):
        with open(path, "rb") as f:
            data = f.read()
        mem = MemoryRecords(data)
        consumed = 0
        while True:
            b = mem.next_batch()
            if b is None:
                break
            assert b.validate_crc(), f"kafka-python finds a bad CRC in {path} at byte {consumed}"
            consumed += b.size_in_bytes
            out.append((b, list(b)))
        assert consumed == len(data), f"{path}: kafka-python parsed {consumed} of {len(data)} bytes"
    return out


def tree_digest(root: str) -> dict[str, tuple]:
    """Relative path -> (kind, sha256 or None, mode) of everything under `root`."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            full = os.path.join(dirpath, d)
            out[os.path.relpath(full, root)] = ("dir", None, os.stat(full).st_mode)
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            st = os.stat(full)
            out[os.path.relpath(full, root)] = ("file", digest, st.st_mode, st.st_mtime_ns)
    return out


# ---- empty log, plain append and read -------------------------------------------------------------


def test_new_partition_is_empty(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    assert (log.log_start_offset, log.log_end_offset, log.last_stable_offset) == (0, 0, 0)
    assert log.read(0) == []
    assert log.producer_states() == {}
    assert log.open_transactions() == {}
    assert log.offset_for_timestamp(0) is None


def test_append_assigns_dense_offsets_and_reads_back_fields(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = 1_700_000_000_000
    r1 = log.append(
        batch(
            [b"a", b"b", b"c"],
            ts=ts,
            keys=[b"k0", None, b"k2"],
            headers=[[("h", b"x")], None, [("h1", None), ("h2", b"")]],
        )
    )
    assert (r1.base_offset, r1.last_offset, r1.duplicate) == (0, 2, False)
    assert len(r1.batches) == 1
    r2 = log.append(batch([b"d"], ts=ts + 10))
    assert (r2.base_offset, r2.last_offset, r2.duplicate) == (3, 3, False)
    assert log.log_end_offset == 4 and log.last_stable_offset == 4

    batches = read_all(log)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 2), (3, 3)]
    recs = batches[0].records()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        (0, ts, b"k0", b"a"),
        (1, ts + 1, None, b"b"),
        (2, ts + 2, b"k2", b"c"),
    ]
    assert recs[0].headers == [("h", b"x")]
    assert recs[1].headers == []
    assert recs[2].headers == [("h1", None), ("h2", b"")]
    assert batches[0].max_timestamp == ts + 2
    assert batches[0].producer_id == -1 and not batches[0].is_transactional and not batches[0].is_control


def test_multi_batch_append_returns_each_batch(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    data = batch([b"a", b"b"]) + batch([b"c"]) + batch([b"d", b"e", b"f"])
    res = log.append(data)
    assert (res.base_offset, res.last_offset, res.duplicate) == (0, 5, False)
    assert [(b.base_offset, b.last_offset, b.duplicate) for b in res.batches] == [
        (0, 1, False),
        (2, 2, False),
        (3, 5, False),
    ]
    assert data_records(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]


def test_malformed_or_empty_input_is_rejected_and_nothing_written(store, store_path):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    log.append(batch([b"x"]))
    good = batch([b"y"])
    before = os.path.getsize(log_files(partition_dir(store_path))[0])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    for data in (good[:40], good[:-1], bytes(bad_crc), good + good[:30]):
        with pytest.raises(CorruptRecordError):
            log.append(data)
    assert os.path.getsize(log_files(partition_dir(store_path))[0]) == before
    assert log.log_end_offset == 1
    assert data_records(log) == [(0, b"x")]


def test_read_positions_limits_and_range(store):
    store.create_topic("t", partitions=1, config={"index.interval.bytes": 0})
    log = store.partition("t", 0)
    for i in range(20):
        log.append(batch([f"v{i}a".encode(), f"v{i}b".encode()]))
    assert log.log_end_offset == 40
    # a start inside a batch returns that batch first; every start offset works via the index
    for off in range(40):
        first = log.read(off)[0]
        assert first.base_offset <= off <= first.last_offset
    # max_bytes: at least one batch even if it is larger than max_bytes
    one = log.read(10, max_bytes=1)
    assert len(one) == 1 and one[0].base_offset == 10
    size = one[0].size
    assert len(log.read(10, max_bytes=size * 3)) == 3
    # max_offset (exclusive) caps the read: no batch starting at or past it
    capped = log.read(0, max_bytes=1 << 30, max_offset=11)
    assert capped[-1].base_offset < 11 and capped[-1].base_offset == 10
    assert log.read(0, max_offset=0) == []
    # reading at the log end is empty; past it or below the start is out of range
    assert log.read(40) == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(41)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)


def test_invalid_batch_shapes_are_rejected(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = now_ms()
    # recordsCount must equal lastOffsetDelta + 1 (docs/kafka-formats.md §1.3)
    b = bytearray(batch([b"a", b"b"], ts=ts))
    struct.pack_into(">i", b, 57, 3)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with pytest.raises(InvalidRecordError):
        log.append(bytes(b))
    # a producer id needs a non-negative epoch and sequence; a transactional batch needs a producer id
    for kwargs in ({"pid": 4, "epoch": 0, "seq": -1}, {"pid": 4, "epoch": -1, "seq": 0}, {"txn": True}):
        with pytest.raises(InvalidRecordError):
            log.append(batch([b"x"], **kwargs))
    assert log.log_end_offset == 0 and log.producer_states() == {}


def test_a_request_is_all_or_nothing(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    first = batch([b"a"], pid=9, epoch=0, seq=0)
    with pytest.raises(OutOfOrderSequenceError):  # the second batch of the request is refused
        log.append(first + batch([b"c"], pid=9, epoch=0, seq=5))
    assert log.log_end_offset == 0 and log.producer_states() == {}
    assert log.append(first).base_offset == 0  # so the first one's sequence was not consumed
    res = log.append(first + batch([b"b"], pid=9, epoch=0, seq=1))  # a retry plus a new batch
    assert [(r.base_offset, r.duplicate) for r in res.batches] == [(0, True), (1, False)]
    assert not res.duplicate
    assert data_records(log) == [(0, b"a"), (1, b"b")]


def test_leader_rewrites_an_understated_max_timestamp(store, store_path):
    """docs/kafka-formats.md §1.2: the leader always sets maxTimestamp to the true maximum (CREATE_TIME)."""
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = now_ms() - 60_000
    b = bytearray(build_batch([(None, b"early", None, ts), (None, b"late", None, ts + 5000)]))
    struct.pack_into(">q", b, 35, ts)  # the client claims maxTimestamp = first record's
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    log.append(bytes(b))
    stored = log.read(0)[0]
    assert stored.max_timestamp == ts + 5000
    assert log.offset_for_timestamp(ts + 10) == 1
    ((kb, _),) = kafka_python_parse(partition_dir(store_path))
    assert kb.max_timestamp == ts + 5000


def test_two_handles_and_a_reader_share_one_partition(store_path):
    a = Store.open(store_path)
    a.create_topic("t", partitions=1)
    b = Store.open(store_path)
    ro = Store.open(store_path, read_only=True)
    la, lb, lr = a.partition("t", 0), b.partition("t", 0), ro.partition("t", 0)
    sent = [batch([b"v%d" % i], pid=3, epoch=0, seq=i) for i in range(10)]
    for i, data in enumerate(sent):
        assert (la if i % 2 else lb).append(data).base_offset == i
    for i, data in enumerate(sent[5:], start=5):  # a retry through the other handle is a duplicate
        r = (lb if i % 2 else la).append(data)
        assert r.duplicate and r.base_offset == i
    assert lr.log_end_offset == 10
    assert data_records(lr) == [(i, b"v%d" % i) for i in range(10)]
    la.append(batch([b"late"]))
    assert lr.log_end_offset == 11 and data_records(lr, start=10) == [(10, b"late")]
    assert lb.log_end_offset == 11
    for s in (ro, b, a):
        s.close()


# ---- roll, reopen, retention, lookup ------------------------------------------------------------------


def test_small_segments_roll_and_survive_reopen(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 250, "retention.ms": -1})
    log = s.partition("t", 0)
    size = len(batch([b"x" * 20]))
    for i in range(12):
        log.append(batch([f"{i:02d}".encode() + b"x" * 18]))
    per_segment = 250 // size
    bases = [seg.base_offset for seg in log.segments]
    assert bases == list(range(0, 12, per_segment))
    for path in log_files(partition_dir(store_path)):
        assert os.path.getsize(path) <= 250
    expected = [(i, f"{i:02d}".encode() + b"x" * 18) for i in range(12)]
    assert data_records(log) == expected
    # reading from the middle of a later segment
    assert data_records(log, start=7)[0][0] == 7
    s.close()
    s2 = Store.open(store_path)
    log2 = s2.partition("t", 0)
    assert [seg.base_offset for seg in log2.segments] == bases
    assert data_records(log2) == expected
    assert log2.log_end_offset == 12
    r = log2.append(batch([b"more"]))
    assert r.base_offset == 12
    s2.close()


def test_explicit_roll(store):
    store.create_topic("t", partitions=1, config={"retention.ms": -1})
    log = store.partition("t", 0)
    log.roll()  # empty active segment: no-op
    assert [s.base_offset for s in log.segments] == [0]
    log.append(batch([b"a", b"b"]))
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.roll()  # the new active segment is empty again: no-op
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(batch([b"c"]))
    assert data_records(log) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_retention_bytes_deletes_oldest_sealed_segments(store, store_path):
    store.create_topic("t", partitions=1, config={"segment.bytes": 200, "retention.ms": -1})
    log = store.partition("t", 0)
    for i in range(10):
        log.append(batch([b"%02d" % i + b"y" * 40]))
    segs_before = [(s.base_offset, s.size) for s in log.segments]
    assert len(segs_before) >= 4
    total = sum(sz for _, sz in segs_before)
    limit = total // 2
    store.alter_topic_config("t", {"retention.bytes": limit})
    deleted = log.enforce_retention()
    assert deleted > 0
    after = [(s.base_offset, s.size) for s in log.segments]
    assert after == segs_before[deleted:]
    # Kafka's rule: delete the oldest while what would remain is still >= retention.bytes
    assert sum(sz for _, sz in after) >= limit
    assert sum(sz for _, sz in after) - after[0][1] < limit or len(after) == 1
    assert log.log_start_offset == after[0][0]
    names = os.listdir(partition_dir(store_path))
    for base, _ in segs_before[:deleted]:
        assert not any(n.startswith(filename_prefix(base) + ".") for n in names), names
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    assert [o for o, _ in data_records(log)] == list(range(after[0][0], 10))


def test_retention_ms_uses_clock_and_keeps_active_segment(store_path):
    clock = [1_000_000_000]
    s = Store.open(store_path, clock=lambda: clock[0])
    s.create_topic("t", partitions=1, config={"segment.bytes": 200, "retention.ms": 10_000})
    log = s.partition("t", 0)
    for i in range(6):
        log.append(batch([b"%02d" % i + b"z" * 40], ts=clock[0]))
    n_segments = len(log.segments)
    assert n_segments >= 3
    assert log.enforce_retention() == 0  # nothing old yet
    clock[0] += 10_001
    assert log.enforce_retention() == n_segments - 1  # every sealed segment, never the active one
    assert len(log.segments) == 1
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.log_end_offset == 6
    s.close()


def test_offset_for_timestamp(store):
    store.create_topic("t", partitions=1, config={"segment.bytes": 300, "index.interval.bytes": 0, "retention.ms": -1})
    log = store.partition("t", 0)
    base = now_ms() - 100_000
    for i in range(10):
        log.append(batch([b"a", b"b"], ts=base + 100 * i))  # records at base+100i, base+100i+1
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(base - 5) == 0
    assert log.offset_for_timestamp(base) == 0
    assert log.offset_for_timestamp(base + 1) == 1
    assert log.offset_for_timestamp(base + 2) == 2
    assert log.offset_for_timestamp(base + 450) == 10
    assert log.offset_for_timestamp(base + 901) == 19
    assert log.offset_for_timestamp(base + 902) is None


# ---- markers and the last stable offset ----------------------------------------------------------------


def test_markers_are_78_byte_control_batches_and_move_the_lso(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    log.append(batch([b"plain"]))
    log.append(batch([b"t1", b"t2"], pid=9, epoch=0, seq=0, txn=True))
    assert log.open_transactions() == {9: 1}
    assert log.last_stable_offset == 1
    res = log.append_marker(ControlType.COMMIT, 9, 1, coordinator_epoch=3)
    assert (res.base_offset, res.last_offset, res.duplicate) == (3, 3, False)
    assert log.open_transactions() == {}
    assert log.last_stable_offset == 4 == log.log_end_offset
    control = read_all(log)[-1]
    assert control.is_control and control.is_transactional and control.size == 78
    assert control.producer_id == 9 and control.producer_epoch == 1 and control.base_sequence == -1
    marker = control.control_marker()
    assert marker.is_commit and marker.coordinator_epoch == 3
    # a marker for a producer with no open transaction (e.g. partition only in the txn) is one record
    res2 = log.append_marker(ControlType.ABORT, 11, 0)
    assert res2.base_offset == 4 and log.log_end_offset == 5 and log.last_stable_offset == 5
    assert data_records(log) == [(0, b"plain"), (1, b"t1"), (2, b"t2")]


def test_lso_is_first_offset_of_earliest_open_transaction(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    log.append(batch([b"p0"]))  # 0
    log.append(batch([b"a0", b"a1"], pid=1, epoch=0, seq=0, txn=True))  # 1-2
    log.append(batch([b"b0"], pid=2, epoch=0, seq=0, txn=True))  # 3
    log.append(batch([b"a2"], pid=1, epoch=0, seq=2, txn=True))  # 4
    assert log.open_transactions() == {1: 1, 2: 3}
    assert log.last_stable_offset == 1
    assert [b.base_offset for b in log.read(0, max_offset=log.last_stable_offset)] == [0]
    log.append_marker(ControlType.COMMIT, 1, 1)  # 5
    assert log.last_stable_offset == 3
    log.append_marker(ControlType.ABORT, 2, 1)  # 6
    assert log.last_stable_offset == 7 == log.log_end_offset
    assert log.producer_states()[1]["current_txn_start_offset"] == -1


def test_idempotent_state_is_reported(store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = now_ms()
    log.append(batch([b"a", b"b", b"c"], pid=42, epoch=2, seq=0, ts=ts))
    st = log.producer_states()[42]
    assert st["producer_epoch"] == 2
    assert st["last_sequence"] == 2
    assert st["last_offset"] == 2
    assert st["last_timestamp"] == ts + 2
    assert st["current_txn_start_offset"] == -1


# ---- kafka-python interop ------------------------------------------------------------------------------


def kp_build(records, *, codec=0, txn=False, pid=-1, epoch=-1, seq=-1) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=txn,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(b.build())


def sample_records(n: int, ts: int):
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else f"key-{i}".encode()
        value = None if i == 4 else (f"value-{i}-".encode() * (20 + i))  # compressible
        headers = [("trace", f"{i}".encode()), ("empty", b"")] if i % 2 else []
        out.append((ts + i * 7, key, value, headers))
    return out


def assert_same_records(ours, expected, base_offset):
    assert len(ours) == len(expected)
    for i, (r, (ts, key, value, headers)) in enumerate(zip(ours, expected, strict=True)):
        assert r.offset == base_offset + i
        assert r.timestamp == ts
        assert r.key == key
        assert r.value == value
        assert [(k, v) for k, v in r.headers] == [(k, v) for k, v in headers]


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS))
@pytest.mark.parametrize("txn", [False, True], ids=["plain", "transactional"])
def test_kafka_python_batches_append_and_read_back(store, store_path, codec, txn):
    from kafka import codec as kafka_codec

    available = {
        "none": True,
        "gzip": kafka_codec.has_gzip(),
        "snappy": kafka_codec.has_snappy(),
        "lz4": kafka_codec.has_lz4(),
        "zstd": kafka_codec.has_zstd(),
    }
    if not available[codec]:
        pytest.skip(f"kafka-python cannot build {codec} here (pip install python-snappy lz4 zstandard)")
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = now_ms()
    log.append(batch([b"first"]))  # so assigned offsets differ from the client's 0
    pid, epoch = (77, 3) if txn else (-1, -1)
    recs1 = sample_records(6, ts)
    recs2 = sample_records(3, ts + 100)
    wire1 = kp_build(recs1, codec=CODECS[codec], txn=txn, pid=pid, epoch=epoch, seq=0 if txn else -1)
    wire2 = kp_build(recs2, codec=CODECS[codec], txn=txn, pid=pid, epoch=epoch, seq=6 if txn else -1)
    for wire in (wire1, wire2):  # kafka-python sends uncompressed when compression does not pay
        assert wire[22] & 0x07 == CODECS[codec]
    r1 = log.append(wire1)
    r2 = log.append(wire2)
    assert (r1.base_offset, r1.last_offset) == (1, 6)
    assert (r2.base_offset, r2.last_offset) == (7, 9)
    if txn:
        assert log.last_stable_offset == 1
        log.append_marker(ControlType.COMMIT, pid, epoch + 1, coordinator_epoch=5)
        assert log.last_stable_offset == log.log_end_offset == 11

    got = read_all(log)
    b1, b2 = got[1], got[2]
    for b, wire, recs, base in ((b1, wire1, recs1, 1), (b2, wire2, recs2, 7)):
        assert b.base_offset == base
        assert b.compression == Compression(CODECS[codec])
        assert b.is_transactional == txn and not b.is_control
        assert (b.producer_id, b.producer_epoch) == (pid, epoch)
        assert b.base_sequence == ((0 if base == 1 else 6) if txn else -1)
        assert b.records_count == len(recs)
        assert b.max_timestamp == max(r[0] for r in recs)
        # everything the CRC covers is exactly what the client sent
        assert b.buffer[16:] == wire[16:]
        assert_same_records(b.records(), recs, base)

    # the oracle reads the files the store wrote
    parsed = kafka_python_parse(partition_dir(store_path))
    assert len(parsed) == (4 if txn else 3)
    for (kb, krecs), recs, base in ((parsed[1], recs1, 1), (parsed[2], recs2, 7)):
        assert kb.base_offset == base
        assert kb.compression_type == CODECS[codec]
        assert kb.is_transactional == txn
        assert kb.producer_id == pid and kb.producer_epoch == epoch
        assert len(krecs) == len(recs)
        for i, (kr, (ts_, key, value, headers)) in enumerate(zip(krecs, recs, strict=True)):
            assert (kr.offset, kr.timestamp, kr.key, kr.value) == (base + i, ts_, key, value)
            assert list(kr.headers) == list(headers)
    if txn:
        kb, krecs = parsed[3]
        assert kb.is_control_batch and kb.producer_id == pid and kb.producer_epoch == epoch + 1
        assert len(krecs) == 1 and krecs[0].commit and krecs[0].offset == 10
        assert struct.unpack(">hi", krecs[0].value) == (0, 5)


def test_every_batch_the_store_writes_parses_with_kafka_python(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 400, "retention.ms": -1})
    log = s.partition("t", 0)
    ts = now_ms()
    builder = BatchBuilder(
        max_bytes=1 << 16,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        compression=Compression.GZIP,
    )
    for i in range(5):
        builder.append(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], ts + i)
    log.append(builder.build())
    log.append_marker(ControlType.ABORT, 5, 1, coordinator_epoch=2)
    for i in range(8):
        log.append(batch([b"plain-%d" % i] * 3, ts=ts + 10 + i))
    log.append(batch([b"i0", b"i1"], pid=6, epoch=0, seq=0, compression=Compression.ZSTD))
    log.append(batch([b"t0"], pid=7, epoch=4, seq=0, txn=True, compression=Compression.LZ4))
    log.append_marker(ControlType.COMMIT, 7, 5, coordinator_epoch=2)
    log.append(batch([b"s0"], compression=Compression.SNAPPY))
    s.close()

    ours = []
    s2 = Store.open(store_path, read_only=True)
    log2 = s2.partition("t", 0)
    for b in read_all(log2):
        ours.append((b, b.records()))
    s2.close()
    parsed = kafka_python_parse(partition_dir(store_path))
    assert len(log_files(partition_dir(store_path))) > 1
    assert len(parsed) == len(ours) == 14
    for (kb, krecs), (b, recs) in zip(parsed, ours, strict=True):
        assert kb.base_offset == b.base_offset
        assert kb.last_offset_delta == b.last_offset_delta
        assert kb.crc == b.crc
        assert kb.is_control_batch == b.is_control
        assert kb.is_transactional == b.is_transactional
        assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
        )
        assert kb.compression_type == b.compression
        assert kb.max_timestamp == b.max_timestamp
        if b.is_control:
            assert kb.size_in_bytes == 78
            m = b.control_marker()
            assert len(krecs) == 1
            assert krecs[0].type == int(m.control_type)
            assert struct.unpack(">hi", krecs[0].value) == (0, m.coordinator_epoch)
        else:
            assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in krecs] == [
                (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs
            ]


# ---- a segment written by real Kafka software ---------------------------------------------------------


KAFKA_REAL = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))),
    "shared",
    "fixtures",
    "kafka-real",
)


def test_real_kafka_segment_opens_read_only(kafka_real_copy):
    original_before = tree_digest(KAFKA_REAL)
    copy_before = tree_digest(kafka_real_copy)
    s = Store.open(kafka_real_copy)
    try:
        assert s.read_only
        assert s.list_topics() == ["__cluster_metadata"]
        log = s.partition("__cluster_metadata", 0)
        batches = log.read(0)
        assert len(batches) == 2
        recs = [r for b in batches for r in b.records()]
        assert [r.offset for r in recs] == [1, 2, 3]
        assert log.log_end_offset == 4
        assert not any(b.is_control or b.has_producer_id for b in batches)
        # the oracle agrees on the same bytes
        kp = kafka_python_parse(os.path.join(kafka_real_copy, "__cluster_metadata-0"))
        assert [r.offset for _, krecs in kp for r in krecs] == [1, 2, 3]
        assert [r.value for _, krecs in kp for r in krecs] == [r.value for r in recs]

        with pytest.raises(ReadOnlyStoreError):
            log.append(batch([b"nope"]))
        with pytest.raises(ReadOnlyStoreError):
            log.append_marker(ControlType.ABORT, 1, 0)
        with pytest.raises(ReadOnlyStoreError):
            log.roll()
        with pytest.raises(ReadOnlyStoreError):
            log.enforce_retention()
        with pytest.raises(ReadOnlyStoreError):
            s.create_topic("newtopic")
        with pytest.raises(ReadOnlyStoreError):
            s.delete_topic("__cluster_metadata")
        with pytest.raises(ReadOnlyStoreError):
            s.alter_topic_config("__cluster_metadata", {"retention.ms": 1})
        with pytest.raises(ReadOnlyStoreError):
            s.create_partitions("__cluster_metadata", 2)
        with pytest.raises(ReadOnlyStoreError):
            s.allocate_producer_id()
        with pytest.raises(UnknownTopicOrPartitionError):
            s.partition("__cluster_metadata", 1)
    finally:
        s.close()
    assert tree_digest(KAFKA_REAL) == original_before
    # opening, reading and refusing writes left the copy untouched as well
    assert tree_digest(kafka_real_copy) == copy_before


def test_read_only_open_of_a_txlog_store_refuses_writes(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1)
    s.partition("t", 0).append(batch([b"a"]))
    s.close()
    ro = Store.open(store_path, read_only=True)
    try:
        log = ro.partition("t", 0)
        assert data_records(log) == [(0, b"a")]
        with pytest.raises(ReadOnlyStoreError):
            log.append(batch([b"b"]))
        with pytest.raises(ReadOnlyStoreError):
            ro.create_topic("u")
    finally:
        ro.close()
    s = Store.open(store_path)
    assert data_records(s.partition("t", 0)) == [(0, b"a")]
    s.close()


def test_segment_ms_rolls_on_the_incoming_batch_timestamp(store, store_path):
    """Kafka rolls when the incoming batch is more than segment.ms newer than the active
    segment's first batch (docs/kafka-formats.md §3.2); the clock of the appender does not matter."""
    store.create_topic("t", partitions=1, config={"segment.ms": 1000, "retention.ms": -1})
    log = store.partition("t", 0)
    t0 = now_ms() - 10_000
    log.append(batch([b"a"], ts=t0))
    log.append(batch([b"b"], ts=t0 + 1000))  # exactly segment.ms later: same segment
    assert [s.base_offset for s in log.segments] == [0]
    log.append(batch([b"c"], ts=t0 + 1001))  # past it: a new segment starts at offset 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(batch([b"d"], ts=t0 + 1500))  # measured from the new segment's first batch
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert data_records(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    snapshots = sorted(n for n in os.listdir(partition_dir(store_path)) if n.endswith(".snapshot"))
    assert "00000000000000000002.snapshot" in snapshots  # producer state snapshotted at the roll


def test_max_timestamp_offset_is_the_first_record_with_the_largest_timestamp(store_path):
    """ListOffsets MAX_TIMESTAMP's lookup (Kafka's UnifiedLog): across segments, and inside a batch."""
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    log = s.partition("t", 0)
    assert log.max_timestamp_offset() is None
    for ts in (5_000, 9_000, 7_000, 8_000):
        log.append(build_batch([(None, b"x" * 60, [], ts)]))  # offsets 0-3, over more than one segment
    log.append(build_batch([(None, b"a", [], 9_500), (None, b"b", [], 9_900), (None, b"c", [], 9_900)]))  # 4-6
    log.append(build_batch([(None, b"later", [], 1_000)]))  # 7: newer offset, older time
    assert len(log.segments) > 1
    assert log.max_timestamp_offset() == (5, 9_900)
    s.close()


def test_a_group_append_rewrites_each_batch_in_place_an_understated_one_too(store, store_path):
    """Offsets, leader epoch and (for the batch in the middle, which understates it) maxTimestamp and
    CRC are rewritten in one copy of the request: every batch reads back valid, as kafka-python sees it."""
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    ts = now_ms() - 60_000
    liar = bytearray(build_batch([(None, b"early", None, ts), (None, b"late", None, ts + 5000)]))
    struct.pack_into(">q", liar, 35, ts)  # the client claims maxTimestamp = first record's
    struct.pack_into(">I", liar, 17, crc32c(bytes(liar[21:])))
    res = log.append(batch([b"a", b"b"], ts=ts) + bytes(liar) + batch([b"c"], ts=ts + 1))
    assert [(b.base_offset, b.last_offset) for b in res.batches] == [(0, 1), (2, 3), (4, 4)]
    stored = read_all(log)
    assert [b.base_offset for b in stored] == [0, 2, 4] and all(b.is_valid() for b in stored)
    assert stored[1].max_timestamp == ts + 5000
    parsed = kafka_python_parse(partition_dir(store_path))
    assert [(kb.base_offset, kb.max_timestamp) for kb, _ in parsed] == [(0, ts + 1), (2, ts + 5000), (4, ts + 1)]


def test_a_group_append_copies_its_bytes_once(store):
    """The batches of an append are copied into one buffer and rewritten there: a copy per batch
    joined into another copy held twice the request's size at once (and copied it three times)."""
    store.create_topic("t", partitions=1, config={"max.message.bytes": 1 << 20})
    log = store.partition("t", 0)
    log.append(batch([b"warm"]))  # the partition's files and caches exist before measuring
    data = b"".join(batch([os.urandom(1000) for _ in range(60)], pid=3, epoch=0, seq=60 * i) for i in range(64))
    tracemalloc.start()
    try:
        log.append(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) < peak < 1.5 * len(data)
