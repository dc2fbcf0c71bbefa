"""Cross-checks of the RecordBatch codec against kafka-python 3.0.12 (the test oracle).

Batches go both ways: txlog writes, kafka-python reads (and validates the
CRC); kafka-python writes, txlog reads. The spec's hand-checked 98-byte batch
(docs/kafka-formats.md §7) pins the exact bytes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.file_records import FileRecords
from storage.records import (
    Compression,
    ControlType,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
)

kafka_record = pytest.importorskip("kafka.record")
default_records = pytest.importorskip("kafka.record.default_records")
MemoryRecords = kafka_record.MemoryRecords
DefaultRecordBatchBuilder = default_records.DefaultRecordBatchBuilder

TS = 1_700_000_000_000

SPEC_BATCH = bytes.fromhex("""
0000000000000000 00000056 00000000 02 e73a732c 0010 00000002 0000018bcfe56800 0000018bcfe56802
00000000000003e8 0005 00000000 00000003
1c 00 00 00 04 6b30 04 7630 02 02 68 02 78
14 00 02 02 04 6b31 04 7631 00
14 00 04 04 04 6b32 04 7632 00
""")  # fromhex skips whitespace, so the batch keeps its field-per-group layout
SPEC_RECORDS = [(b"k0", b"v0", [("h", b"x")], TS), (b"k1", b"v1", [], TS + 1), (b"k2", b"v2", [], TS + 2)]

SAMPLE = [
    (b"key-0", b"value-0", [("h1", b"a"), ("h2", None)], TS),
    (None, b"tombstone-less", [], TS + 3),
    (b"key-2", None, [("ü", b"")], TS - 2),
    (b"", b"", [], TS + 1000),
] + [(b"k%d" % i, b"payload %d " % i * 10, [], TS + i) for i in range(4, 120)]


def _codec_available(codec: Compression) -> bool:
    from kafka import codec as kcodec

    return {
        Compression.NONE: True,
        Compression.GZIP: kcodec.has_gzip(),
        Compression.SNAPPY: kcodec.has_snappy(),
        Compression.LZ4: kcodec.has_lz4(),
        Compression.ZSTD: kcodec.has_zstd(),
    }[codec]


CODECS = [
    pytest.param(c, id=c.name, marks=pytest.mark.skipif(not _codec_available(c), reason=f"kafka-python lacks {c.name}"))
    for c in Compression
]


def kafka_python_read(buf: bytes):
    """(batch, records) of the single batch in `buf`, as kafka-python sees them; the CRC must hold."""
    memory = MemoryRecords(buf)
    batch = memory.next_batch()
    assert batch is not None and memory.next_batch() is None
    assert batch.validate_crc()  # kafka-python only validates before iterating
    return batch, list(batch)


def kafka_python_build(
    inputs, *, codec=Compression.NONE, transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for offset, (key, value, headers, ts) in enumerate(inputs):
        assert builder.append(offset, timestamp=ts, key=key, value=value, headers=list(headers or [])) is not None
    return bytes(builder.build())


# --- the spec's bytes ------------------------------------------------------------------------------


def test_build_batch_reproduces_the_spec_batch_byte_for_byte() -> None:
    buf = build_batch(
        SPEC_RECORDS,
        producer_id=1000,
        producer_epoch=5,
        base_sequence=0,
        is_transactional=True,
        partition_leader_epoch=0,
    )
    assert buf == SPEC_BATCH and len(buf) == 98


def test_the_oracle_agrees_with_the_spec() -> None:
    oracle = kafka_python_build(SPEC_RECORDS, transactional=True, producer_id=1000, producer_epoch=5, base_sequence=0)
    assert oracle == SPEC_BATCH


# --- txlog writes, kafka-python reads ----------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "producer",
    [(-1, -1, -1, False), (4242, 7, 2_000_000_000, True), (1, 0, 0, False)],
    ids=["plain", "transactional", "idempotent"],
)
def test_kafka_python_reads_txlog_batches(codec: Compression, producer) -> None:
    pid, epoch, base_sequence, transactional = producer
    buf = build_batch(
        SAMPLE,
        base_offset=1234,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        compression=codec,
        partition_leader_epoch=3,
    )
    batch, records = kafka_python_read(buf)
    assert (batch.base_offset, batch.leader_epoch, batch.magic) == (1234, 3, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, base_sequence)
    assert batch.is_transactional == transactional and not batch.is_control_batch
    assert batch.compression_type == codec and batch.timestamp_type == 0
    assert (batch.last_offset_delta, batch.records_count) == (len(SAMPLE) - 1, len(SAMPLE))
    assert (batch.first_timestamp, batch.max_timestamp) == (TS, TS + 1000)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]
    assert got == [(1234 + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(SAMPLE)]


def test_kafka_python_reads_log_append_time() -> None:
    buf = build_batch(SAMPLE[:3], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 99)
    batch, records = kafka_python_read(buf)
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in records] == [TS + 99] * 3


@pytest.mark.parametrize("control_type", list(ControlType))
def test_kafka_python_reads_txlog_control_batches(control_type: ControlType) -> None:
    buf = build_control_batch(
        control_type, producer_id=1000, producer_epoch=5, coordinator_epoch=7, timestamp=TS + 10, base_offset=3
    )
    batch, records = kafka_python_read(buf)
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_offset) == (1000, 5, 3)
    (marker,) = records
    assert (marker.version, marker.type, marker.offset, marker.timestamp) == (0, int(control_type), 3, TS + 10)
    assert marker.abort == (control_type is ControlType.ABORT)
    assert marker.commit == (control_type is ControlType.COMMIT)


# --- kafka-python writes, txlog reads -------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "producer", [(-1, -1, -1, False), (77, 2, 2_147_483_600, True)], ids=["plain", "transactional-wrapping"]
)
def test_txlog_reads_kafka_python_batches(codec: Compression, producer) -> None:
    pid, epoch, base_sequence, transactional = producer
    buf = kafka_python_build(
        SAMPLE,
        codec=codec,
        transactional=transactional,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_sequence,
    )
    (batch,) = list(FileRecords.in_memory(buf).batches())
    oracle, oracle_records = kafka_python_read(buf)
    assert batch.crc == oracle.crc and batch.compression is codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, base_sequence)
    assert batch.is_transactional == transactional and batch.last_sequence == (
        -1 if base_sequence < 0 else (base_sequence + len(SAMPLE) - 1) % (1 << 31)
    )
    assert (batch.base_timestamp, batch.max_timestamp) == (oracle.first_timestamp, oracle.max_timestamp)
    batch.validate_framing()
    ours = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    theirs = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in oracle_records]
    assert ours == theirs
    if base_sequence >= 0:
        sequences = [r.sequence for r in batch.records()]
        assert sequences[0] == base_sequence and sequences[-1] == batch.last_sequence
        assert 0 in sequences  # the batch wraps past INT32_MAX


def test_uncompressed_bytes_are_identical_to_the_oracle() -> None:
    """Same inputs, same bytes (modulo the leader epoch each writer defaults to)."""
    ours = build_batch(
        SAMPLE, producer_id=9, producer_epoch=1, base_sequence=5, is_transactional=True, partition_leader_epoch=0
    )
    assert ours == kafka_python_build(SAMPLE, transactional=True, producer_id=9, producer_epoch=1, base_sequence=5)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=70),
            st.none() | st.binary(max_size=300),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
            st.integers(0, 1 << 45),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_identical_bytes_property(inputs) -> None:
    assert build_batch(inputs, partition_leader_epoch=0) == kafka_python_build(inputs)
    parsed = RecordBatch.parse(kafka_python_build(inputs)).records()
    assert [(r.key, r.value, r.headers, r.timestamp) for r in parsed] == [(k, v, list(h), ts) for k, v, h, ts in inputs]


def test_the_oracle_notices_a_bad_crc() -> None:
    """Guards the interop tests above: kafka-python's CRC check is not vacuous."""
    damaged = bytearray(build_batch(SAMPLE[:3]))
    damaged[-2] ^= 0x10
    batch = MemoryRecords(bytes(damaged)).next_batch()
    assert not batch.validate_crc()
