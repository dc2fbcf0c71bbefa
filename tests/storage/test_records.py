"""RecordBatch v2 codec: sequences, varints, round trips, framing, and malformed bytes.

Kafka-python cross-checks live in test_records_interop.py; this module checks
the codec against the spec (docs/kafka-formats.md §1, §2) and against itself.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from storage.file_records import FileRecords
from storage.records import (
    CONTROL_BATCH_SIZE,
    CRC_COVERED_START,
    HEADER_SIZE,
    MAGIC,
    BatchBuilder,
    Compression,
    ControlType,
    EndTransactionMarker,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
)
from storage.sequence import INT32_MAX, dec_seq, inc_seq
from storage.varint import (
    ONE_BYTE_ZIGZAG,
    TWO_BYTE_ZIGZAG,
    VARINT_TABLE,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

REAL_SEGMENT = Path("/work/shared/fixtures/kafka-real/__cluster_metadata-0/00000000000000000000.log")
TS = 1_700_000_000_000
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Header fields by name: (offset, struct format), for crafting batches in tests.
FIELDS = {
    "base_offset": (0, ">q"),
    "batch_length": (8, ">i"),
    "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"),
    "crc": (17, ">I"),
    "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"),
    "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"),
    "base_sequence": (53, ">i"),
    "records_count": (57, ">i"),
}


def craft(batch: bytes, region: bytes | None = None, **fields: int) -> bytes:
    """Rewrite header fields and/or the records region, then fix batchLength and the CRC.

    This is how the malformed-record tests get past the CRC check, so that the
    record decoder itself has to notice the damage.
    """
    out = bytearray(batch[:HEADER_SIZE] + (batch[HEADER_SIZE:] if region is None else region))
    struct.pack_into(">i", out, 8, len(out) - 12)
    for name, value in fields.items():
        offset, fmt = FIELDS[name]
        struct.pack_into(fmt, out, offset, value)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def decoded(buf: bytes) -> list[Record]:
    return RecordBatch.parse(buf).records()


def expected_records(inputs, *, base_offset=0, base_sequence=-1, log_append_time=None):
    """What a reader must see for `inputs` = [(key, value, headers, ts)] (docs/kafka-formats.md §1.1, §1.3)."""
    out = []
    for i, (key, value, headers, ts) in enumerate(inputs):
        seq = -1 if base_sequence < 0 else inc_seq(base_sequence, i)
        out.append(
            Record(
                base_offset + i,
                ts if log_append_time is None else log_append_time,
                key,
                value,
                list(headers or []),
                seq,
            )
        )
    return out


def simple_batch(count: int = 3, **kwargs) -> bytes:
    return build_batch([(b"k%d" % i, b"value-%d" % i, None, TS + i) for i in range(count)], **kwargs)


# --- sequence arithmetic (docs/kafka-formats.md §1.1, §6 items 2-4) ------------------------


@pytest.mark.parametrize(
    ("seq", "delta", "expected"),
    [
        (0, 0, 0),
        (5, 3, 8),
        (INT32_MAX - 1, 1, INT32_MAX),
        (INT32_MAX, 1, 0),
        (INT32_MAX, 2, 1),
        (INT32_MAX - 10, 20, 9),
        (INT32_MAX, INT32_MAX, INT32_MAX - 1),
        (0, INT32_MAX, INT32_MAX),
    ],
)
def test_inc_seq(seq: int, delta: int, expected: int) -> None:
    assert inc_seq(seq, delta) == expected


@pytest.mark.parametrize(
    ("seq", "delta", "expected"),
    [
        (8, 3, 5),
        (1, 1, 0),
        (0, 1, INT32_MAX),
        (1, 2, INT32_MAX),
        (9, 20, INT32_MAX - 10),
        (7, 0, 7),
    ],
)
def test_dec_seq(seq: int, delta: int, expected: int) -> None:
    assert dec_seq(seq, delta) == expected


def test_sequence_wrap_rules_of_the_kafka_tests() -> None:
    # testProducerSequenceWrapAround: after a batch ending at INT_MAX the next batch starts at 0
    assert inc_seq(INT32_MAX, 1) == 0
    # testProducerSequenceInvalidWrapAround: 1 is not the successor of INT_MAX
    assert inc_seq(INT32_MAX, 1) != 1
    # testProducerSequenceWithWrapAroundBatchRecord: one batch spanning INT_MAX-10 .. 9
    batch = RecordBatch.parse(simple_batch(21, producer_id=1, producer_epoch=0, base_sequence=INT32_MAX - 10))
    assert (batch.base_sequence, batch.last_sequence) == (INT32_MAX - 10, 9)
    seqs = [r.sequence for r in batch.records()]
    assert seqs[:11] == list(range(INT32_MAX - 10, INT32_MAX + 1)) and seqs[11:] == list(range(10))


@given(st.integers(0, INT32_MAX), st.integers(0, INT32_MAX))
def test_dec_seq_undoes_inc_seq(seq: int, delta: int) -> None:
    advanced = inc_seq(seq, delta)
    assert 0 <= advanced <= INT32_MAX
    assert dec_seq(advanced, delta) == seq


# --- varints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "hexed"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (INT32_MAX, "feffffff0f"),
        (-(1 << 31), "ffffffff0f"),
    ],
)
def test_varint_known_encodings(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed), 0) == (value, len(hexed) // 2)


def test_varlong_extremes() -> None:
    assert encode_varlong(INT64_MAX).hex() == "feffffffffffffffff01"
    assert encode_varlong(INT64_MIN).hex() == "ffffffffffffffffff01"
    assert decode_varlong(encode_varlong(INT64_MIN), 0) == (INT64_MIN, 10)


@given(st.integers(-(1 << 31), INT32_MAX), st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(prefix + encoded + b"\x00", len(prefix)) == (value, len(prefix) + len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@given(st.integers(0, 0xFFFFFFFF))
def test_unsigned_varint_round_trip(value: int) -> None:
    assert decode_unsigned_varint(encode_unsigned_varint(value), 0) == (value, len(encode_unsigned_varint(value)))


@pytest.mark.parametrize(
    ("fn", "value"),
    [
        (encode_varint, 1 << 31),
        (encode_varint, -(1 << 31) - 1),
        (encode_varlong, 1 << 63),
        (encode_unsigned_varint, -1),
        (encode_unsigned_varint, 1 << 32),
    ],
)
def test_encoding_out_of_range_is_a_value_error(fn, value: int) -> None:
    with pytest.raises(ValueError):
        fn(value)


def test_overlong_and_truncated_varints_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        decode_varint(b"\x00\x80\x80", 1)
    assert info.value.position == 1


def test_five_byte_varint_keeps_only_32_bits_like_java() -> None:
    # Java shifts the 5th byte's extra bits out of the int; decoding must agree with it
    assert decode_varint(b"\xff\xff\xff\xff\x7f", 0) == decode_varint(b"\xff\xff\xff\xff\x0f", 0)


def test_fast_tables_agree_with_the_general_functions() -> None:
    assert all(VARINT_TABLE[n] == encode_varint(n) for n in range(len(VARINT_TABLE)))
    for first in range(256):
        one = ONE_BYTE_ZIGZAG[first]
        assert one == (decode_varint(bytes([first]), 0)[0] if first < 0x80 else None)
        if first < 0x80:
            continue
        for second in range(256):
            two = TWO_BYTE_ZIGZAG[first][second]
            assert two == (decode_varint(bytes([first, second]), 0)[0] if second < 0x80 else None)


# --- round trips ----------------------------------------------------------------------------------


def test_header_fields_of_a_built_batch() -> None:
    buf = simple_batch(
        3,
        base_offset=40,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    batch = RecordBatch.parse(buf)
    assert (batch.base_offset, batch.last_offset_delta, batch.last_offset, batch.next_offset) == (40, 2, 42, 43)
    assert (batch.records_count, batch.size, batch.batch_length) == (3, len(buf), len(buf) - 12)
    assert (batch.magic, batch.partition_leader_epoch) == (MAGIC, 9)
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (77, 3, 10, 12)
    assert batch.is_transactional and not batch.is_control and batch.has_producer_id
    assert batch.attributes == 0x10 and batch.compression is Compression.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.crc == crc32c(buf[21:]) and batch.position == 0
    assert bytes(batch.buffer) == buf


def test_idempotence_defaults_are_the_no_producer_values() -> None:
    batch = RecordBatch.parse(simple_batch(2))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert (batch.partition_leader_epoch, batch.base_offset) == (-1, 0)  # like the Java producer
    assert not batch.has_producer_id and batch.last_sequence == -1
    assert [r.sequence for r in batch.records()] == [-1, -1]


@pytest.mark.parametrize(
    "inputs",
    [
        [(None, None, None, TS)],
        [(b"", b"", [], TS)],
        [(None, b"v", None, TS), (b"k", None, None, TS + 1), (b"", b"", None, TS + 2)],
        [(b"k" * 100, b"v" * 9000, None, TS)],  # lengths beyond the 2-byte varint table
        [(b"key", b"\x00" * (1 << 20), None, TS), (b"\xff" * (1 << 20), b"small", None, TS)],  # >= 1 MiB
    ],
    ids=["all-null", "empty", "mixed-null", "9000-byte", "1MiB"],
)
def test_round_trip_keys_and_values(inputs) -> None:
    assert decoded(build_batch(inputs)) == expected_records(inputs)


def test_round_trip_headers() -> None:
    inputs = [
        (b"k", b"v", [("h", b"x"), ("ключ-ü-🔑", b"\x00\xff"), ("null", None), ("", b"")], TS),
        (b"k", b"v", [], TS),
        (b"k", b"v", [("big", b"x" * 10_000)] * 3, TS),
        (b"k", b"v", None, TS),
    ]
    records = decoded(build_batch(inputs))
    assert records == expected_records(inputs)
    assert records[0].headers[1] == ("ключ-ü-🔑", b"\x00\xff") and records[0].headers[2] == ("null", None)


@pytest.mark.parametrize(
    "timestamps",
    [
        [TS, TS - 5, TS + 5],  # negative delta
        [0, 1 << 62, -(1 << 62)],  # huge deltas both ways
        [-1, -1],  # NO_TIMESTAMP
        [TS + i * 1000 for i in range(300)],  # every timestamp distinct, deltas above 1 byte
        [TS + i * 100_000 for i in range(300)],  # deltas beyond the varint table
    ],
)
def test_round_trip_timestamps(timestamps: list[int]) -> None:
    inputs = [(b"k", b"v", None, ts) for ts in timestamps]
    batch = RecordBatch.parse(build_batch(inputs))
    assert (batch.base_timestamp, batch.max_timestamp) == (timestamps[0], max(timestamps))
    assert batch.records() == expected_records(inputs)


def test_missing_timestamps_mean_now() -> None:
    before = time.time_ns() // 1_000_000
    records = decoded(build_batch([(b"a", b"1", None, None), (b"b", b"2", None, TS)]))
    after = time.time_ns() // 1_000_000
    assert before <= records[0].timestamp <= after and records[1].timestamp == TS
    assert before <= decoded(build_batch([(b"a", b"1", None, None)]))[0].timestamp <= time.time_ns() // 1_000_000


def test_log_append_time_reports_max_timestamp_for_every_record() -> None:
    inputs = [(b"a", b"1", None, TS), (b"b", b"2", None, TS + 7)]
    batch = RecordBatch.parse(build_batch(inputs, timestamp_type=TimestampType.LOG_APPEND_TIME))
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.attributes & 0x08
    assert [r.timestamp for r in batch.records()] == [TS + 7, TS + 7]
    stamped = RecordBatch.parse(
        build_batch(inputs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 1000)
    )
    assert stamped.max_timestamp == TS + 1000
    assert stamped.records() == expected_records(inputs, log_append_time=TS + 1000)


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_round_trip_each_compression(codec: Compression) -> None:
    inputs = [(b"key-%d" % i, b"value %d " % i * 20, [("h", b"%d" % i)], TS + i) for i in range(200)]
    buf = build_batch(inputs, compression=codec, producer_id=5, producer_epoch=1, base_sequence=100)
    batch = RecordBatch.parse(buf)
    assert batch.compression is codec and batch.attributes & 0x07 == codec
    assert batch.records() == expected_records(inputs, base_sequence=100)
    if codec is not Compression.NONE:
        assert len(buf) < len(build_batch(inputs))


def test_more_records_than_the_offset_delta_table() -> None:
    inputs = [(None, b"%d" % i, None, TS) for i in range(len(VARINT_TABLE) + 500)]
    batch = RecordBatch.parse(build_batch(inputs))
    assert batch.last_offset_delta == len(inputs) - 1
    batch.validate_framing()
    assert batch.records() == expected_records(inputs)


def test_iteration_yields_the_records() -> None:
    batch = RecordBatch.parse(simple_batch(4))
    assert list(batch) == batch.records()


def test_build_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        simple_batch(1, producer_epoch=1 << 15)


headers_strategy = st.none() | st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)
payload_strategy = st.none() | st.binary(max_size=40) | st.binary(min_size=60, max_size=200)
record_strategy = st.tuples(payload_strategy, payload_strategy, headers_strategy, st.integers(-(1 << 40), 1 << 40))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inputs=st.lists(record_strategy, min_size=1, max_size=80),
    base_offset=st.integers(0, 1 << 60),
    producer=st.one_of(
        st.just((-1, -1, -1)),
        st.tuples(st.integers(0, INT64_MAX), st.integers(0, 32767), st.integers(0, INT32_MAX)),
        st.tuples(st.integers(0, 1000), st.integers(0, 5), st.integers(INT32_MAX - 100, INT32_MAX)),
    ),
    codec=st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4]),
    transactional=st.booleans(),
)
def test_round_trip_property(inputs, base_offset, producer, codec, transactional) -> None:
    pid, epoch, base_sequence = producer
    buf = build_batch(
        inputs,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        compression=codec,
        is_transactional=transactional,
    )
    batch = RecordBatch.parse(buf)
    assert batch.size == len(buf) and batch.records_count == len(inputs)
    expected_last = -1 if base_sequence < 0 else inc_seq(base_sequence, len(inputs) - 1)
    assert batch.last_sequence == expected_last and batch.is_transactional == transactional
    assert batch.max_timestamp == max(ts for *_, ts in inputs)
    assert batch.records() == expected_records(inputs, base_offset=base_offset, base_sequence=base_sequence)
    batch.validate_framing()


# --- BatchBuilder -------------------------------------------------------------------------------------


def test_batch_builder_fills_up_to_max_bytes() -> None:
    builder = BatchBuilder(max_bytes=1024, producer_id=4, producer_epoch=2, base_sequence=7)
    appended = []
    while builder.append(b"key", b"v" * 100, [("h", None)], TS + len(appended)):
        appended.append((b"key", b"v" * 100, [("h", None)], TS + len(appended)))
        assert builder.record_count == len(appended)
    size_before = builder.estimated_size
    assert not builder.append(b"key", b"v" * 100, None, TS)  # refused: nothing changes
    assert (builder.record_count, builder.estimated_size) == (len(appended), size_before)
    buf = builder.build()
    assert len(buf) == size_before <= 1024 and len(buf) + 118 > 1024
    assert buf == build_batch(appended, producer_id=4, producer_epoch=2, base_sequence=7)


@given(st.lists(record_strategy, min_size=1, max_size=30))
def test_batch_builder_estimate_is_exact_when_uncompressed(inputs) -> None:
    builder = BatchBuilder(max_bytes=1 << 30)
    for key, value, headers, ts in inputs:
        assert builder.append(key, value, headers, ts)
    assert builder.estimated_size == len(builder.build())


def test_batch_builder_accepts_an_oversized_first_record() -> None:
    builder = BatchBuilder(max_bytes=100, compression=Compression.GZIP)
    assert builder.append(b"k", b"x" * 500)
    assert not builder.append(b"k", b"y")
    records = decoded(builder.build())
    assert len(records) == 1 and records[0].value == b"x" * 500
    assert abs(records[0].timestamp - time.time_ns() // 1_000_000) < 60_000


# --- control batches (docs/kafka-formats.md §2) ---------------------------------------------------------

SPEC_ABORT_MARKER = bytes.fromhex(
    "0000000000000003 00000042 00000000 02 84e4ec5d 0030 00000000 0000018bcfe5680a 0000018bcfe5680a"
    " 00000000000003e8 0005 ffffffff 00000001 20 00 00 00 08 00000000 0c 0000 00000007 00".replace(" ", "")
)


def test_control_batch_reproduces_the_spec_abort_marker() -> None:
    marker = build_control_batch(
        ControlType.ABORT,
        producer_id=1000,
        producer_epoch=5,
        coordinator_epoch=7,
        timestamp=1700000000010,
        base_offset=3,
        partition_leader_epoch=0,
    )
    assert marker == SPEC_ABORT_MARKER and len(marker) == CONTROL_BATCH_SIZE


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batch_round_trip(control_type: ControlType) -> None:
    buf = build_control_batch(
        control_type, producer_id=12, producer_epoch=3, coordinator_epoch=44, timestamp=TS, base_offset=500
    )
    batch = RecordBatch.parse(buf)
    assert len(buf) == CONTROL_BATCH_SIZE and batch.partition_leader_epoch == -1
    assert batch.is_control and batch.is_transactional and batch.attributes == 0x30
    assert (batch.base_sequence, batch.records_count, batch.last_offset) == (-1, 1, 500)
    marker = batch.control_marker()
    assert marker == EndTransactionMarker(control_type, 44)
    assert marker.is_commit == (control_type is ControlType.COMMIT)
    assert marker.is_abort == (control_type is ControlType.ABORT)
    batch.validate_framing()


def control_with(key: bytes | None, value: bytes | None) -> RecordBatch:
    """A control batch whose single record has the given key and value."""
    buf = build_batch([(key, value, None, TS)], producer_id=1, producer_epoch=0, is_transactional=True)
    return RecordBatch.parse(craft(buf, attributes=0x30))


def test_control_marker_versions_above_zero_are_still_parsed() -> None:
    marker = control_with(struct.pack(">hh", 3, 1) + b"future", struct.pack(">hi", 2, 9) + b"extra").control_marker()
    assert marker == (ControlType.COMMIT, 9)


@pytest.mark.parametrize("type_id", [2, 3, 4, 5, 6])
def test_kraft_control_types_do_not_crash(type_id: int) -> None:
    marker = control_with(struct.pack(">hh", 0, type_id), b"\x00\x01").control_marker()
    assert int(marker.control_type) == type_id and not marker.is_commit and not marker.is_abort


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1)),  # key < 4 bytes
        (None, struct.pack(">hi", 0, 1)),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1)),  # negative key version
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x01"),  # value < 6 bytes
        (struct.pack(">hh", 0, 0), None),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1)),  # negative value version
    ],
)
def test_malformed_control_records_are_corrupt(key, value) -> None:
    batch = control_with(key, value)
    with pytest.raises(CorruptRecordError) as info:
        batch.control_marker()
    assert info.value.position == 0


def test_control_marker_needs_a_control_batch() -> None:
    with pytest.raises(InvalidRecordError):
        RecordBatch.parse(simple_batch(1)).control_marker()
    emptied = craft(SPEC_ABORT_MARKER, region=b"", records_count=0)
    with pytest.raises(InvalidRecordError):
        RecordBatch.parse(emptied).control_marker()


# --- with_offset ---------------------------------------------------------------------------------------


def test_with_offset_patches_offset_and_epoch_but_not_the_crc() -> None:
    buf = simple_batch(3, partition_leader_epoch=-1)
    batch = RecordBatch.parse(buf)
    moved = batch.with_offset(1000, 17)
    assert moved[17:] == buf[17:] and len(moved) == len(buf)
    again = RecordBatch.parse(moved)
    assert (again.base_offset, again.partition_leader_epoch, again.crc) == (1000, 17, batch.crc)
    assert [r.offset for r in again.records()] == [1000, 1001, 1002]
    kept = RecordBatch.parse(batch.with_offset(5))
    assert (kept.base_offset, kept.partition_leader_epoch) == (5, -1)


# --- walking buffers ---------------------------------------------------------------------------------------


def two_batches() -> tuple[bytes, bytes]:
    first = simple_batch(2, base_offset=0)
    second = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, timestamp=TS, base_offset=2)
    return first, second


@pytest.mark.parametrize("index", range(21, 78))
def test_flipped_byte_under_the_crc_is_corrupt_at_the_batch_position(index: int) -> None:
    first, second = two_batches()
    damaged = bytearray(first + second)
    damaged[len(first) + index] ^= 0x41
    walker = FileRecords.in_memory(bytes(damaged), "p.log").batches()
    assert next(walker).base_offset == 0
    with pytest.raises(CorruptRecordError) as info:
        next(walker)
    assert (info.value.position, info.value.path) == (len(first), "p.log")
    assert "CRC" in str(info.value)


def test_fields_outside_the_crc_do_not_break_it() -> None:
    buf = bytearray(simple_batch(2))
    buf[0:8] = b"\x00\x00\x00\x00\x00\x01\x02\x03"
    buf[12:16] = b"\x7f\x00\x00\x01"
    assert RecordBatch.parse(bytes(buf)).base_offset == 0x010203


def test_verify_crc_can_be_skipped() -> None:
    damaged = bytearray(simple_batch(2))
    damaged[-1] ^= 1
    assert RecordBatch.parse(bytes(damaged), verify_crc=False).records_count == 2
    assert len(list(FileRecords.in_memory(bytes(damaged)).batches(verify_crc=False))) == 1


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_bad_magic_is_corrupt(magic: int) -> None:
    first, second = two_batches()
    log = first + craft(second, magic=magic)
    with pytest.raises(CorruptRecordError, match="magic") as info:
        list(FileRecords.in_memory(log, "m.log").batches())
    assert (info.value.position, info.value.path) == (len(first), "m.log")
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch.parse(log, len(first))


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_batch_length_below_minimum_is_corrupt(length: int) -> None:
    buf = bytearray(simple_batch(1))
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordError, match="minimum"):
        list(FileRecords.in_memory(bytes(buf)).batches())
    with pytest.raises(CorruptRecordError):
        FileRecords.in_memory(bytes(buf)).header_at(0)
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(bytes(buf))


def test_parse_needs_a_whole_batch() -> None:
    buf = simple_batch(2)
    with pytest.raises(CorruptRecordError, match="61 bytes"):
        RecordBatch.parse(buf[:60])
    with pytest.raises(CorruptRecordError, match="available"):
        RecordBatch.parse(buf[:-1])
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(buf, -1)


def test_real_kafka_segment() -> None:
    data = REAL_SEGMENT.read_bytes()
    batches = list(FileRecords.in_memory(data, str(REAL_SEGMENT)).batches())
    assert len(batches) == 2 and sum(b.size for b in batches) == len(data)
    for batch in batches:
        assert batch.crc == crc32c(data[batch.position + CRC_COVERED_START : batch.position + batch.size])
        batch.validate_framing()
    records = [r for b in batches for r in b.records()]
    assert [r.offset for r in records] == [1, 2, 3]
    assert [(b.base_offset, b.last_offset) for b in batches] == [(1, 1), (2, 3)]


# --- malformed records behind a valid CRC ----------------------------------------------------------------------


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


GOOD_BODY = b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"  # attrs, tsDelta, offDelta, key, value, 0 headers


@pytest.mark.parametrize(
    ("region", "count", "message"),
    [
        (encode_varint(len(GOOD_BODY) + 1) + GOOD_BODY + b"\x00", 1, "size mismatch"),  # length says more
        (encode_varint(len(GOOD_BODY) - 1) + GOOD_BODY, 1, "size mismatch"),  # length says less
        (record(GOOD_BODY) + record(GOOD_BODY), 1, "remain"),  # bytes left over after records_count
        (record(GOOD_BODY), 2, "ends inside"),  # fewer bytes than records
        (record(b"\x00\x00\x00\x02k\x02v\x01"), 1, "negative header count"),
        (record(b"\x00\x00\x00\x02k\x02v\x7e"), 1, "header count"),  # 63 headers, 0 bytes left
        (record(b"\x00\x00\x00\x02k\x02v\x02\x03\x02v"), 1, "negative header key length"),
        (record(b"\x00\x00\x00\x02k\x02v\x02\x02h\x05"), 1, "negative header value length"),
        (record(b"\x00\x00\x00\x03\x02v\x00"), 1, "negative key length"),
        (record(b"\x00\x00\x00\x02k\x05\x00"), 1, "negative value length"),
        (record(b"\x00\x00\x80\x80\x80\x80\x80\x00\x02k\x02v\x00"), 1, "longer than 5"),
        (record(b"\x00\x00\x00\x02k\x02v\x00")[:-3], 1, "ends inside"),
        (b"\xff", 1, "ends inside"),
        (b"", 1, "ends inside"),
        (record(b"\x00\x00\x00\x64k\x02v\x00"), 1, None),  # key length runs past the record
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_records_are_corrupt(region: bytes, count: int, message: str | None) -> None:
    buf = craft(simple_batch(1, base_offset=70), region=region, records_count=count, last_offset_delta=count - 1)
    log = b"\x00" * 5 + buf
    batch = RecordBatch.parse(log, 5, path="bad.log")
    with pytest.raises(CorruptRecordError, match=message) as info:
        batch.records()
    assert (info.value.position, info.value.path) == (5, "bad.log")


def test_negative_record_count_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="negative record count"):
        decoded(craft(simple_batch(1), records_count=-1))


def test_invalid_utf8_header_key_is_read_like_java() -> None:
    body = b"\x00\x00\x00\x02k\x02v\x02" + b"\x04\xff\xfe" + b"\x02x"
    records = decoded(craft(simple_batch(1), region=record(body)))
    assert records[0].headers == [("\ufffd\ufffd", b"x")]


def test_emptied_batch_has_no_records() -> None:
    emptied = RecordBatch.parse(craft(simple_batch(3, compression=Compression.GZIP), region=b"", records_count=0))
    assert emptied.records() == [] and emptied.last_offset == 2


def test_corrupt_compressed_payload_is_corrupt() -> None:
    buf = craft(simple_batch(3, compression=Compression.GZIP), region=b"\x1f\x8bnot really gzip")
    with pytest.raises(CorruptRecordError, match="gzip") as info:
        decoded(buf)
    assert info.value.position == 0


@pytest.mark.parametrize("code", [5, 6, 7])
def test_unknown_compression_code_is_unsupported(code: int) -> None:
    batch = RecordBatch.parse(craft(simple_batch(1), attributes=code))
    with pytest.raises(UnsupportedCompressionTypeError):
        batch.records()
    with pytest.raises(UnsupportedCompressionTypeError):
        batch.compression  # noqa: B018
    with pytest.raises(UnsupportedCompressionTypeError):
        batch.validate_framing()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    region=st.binary(max_size=120),
    count=st.integers(-2, 12),
    attributes=st.integers(0, 0x7F),
    valid_prefix=st.booleans(),
)
def test_arbitrary_record_bytes_only_raise_kafka_errors(region, count, attributes, valid_prefix) -> None:
    if valid_prefix:  # start from real records so decoding gets deep before failing
        region = simple_batch(3)[HEADER_SIZE:] + region
    batch = RecordBatch.parse(
        craft(simple_batch(1), region=region, records_count=count, attributes=attributes, last_offset_delta=count - 1)
    )
    for check in (batch.records, batch.validate_framing, batch.control_marker):
        try:
            check()
        except KafkaError:
            pass


# --- validate_framing ----------------------------------------------------------------------------------------------


def test_validate_framing_accepts_built_batches() -> None:
    for codec in Compression:
        RecordBatch.parse(simple_batch(50, compression=codec)).validate_framing()


@pytest.mark.parametrize(("count", "last_offset_delta"), [(0, -1), (3, 3), (2, 2), (-1, -2)])
def test_validate_framing_checks_counts(count: int, last_offset_delta: int) -> None:
    buf = craft(simple_batch(3), records_count=count, last_offset_delta=last_offset_delta)
    with pytest.raises(InvalidRecordError):
        RecordBatch.parse(buf).validate_framing()


@pytest.mark.parametrize(
    ("region", "count"),
    [
        (record(GOOD_BODY) + record(GOOD_BODY), 1),  # one record too many
        (record(GOOD_BODY), 2),  # one too few
        (record(GOOD_BODY) + b"\x00", 1),  # trailing byte
        (encode_varint(len(GOOD_BODY) + 5) + GOOD_BODY, 1),  # length overruns the batch
        (record(b"\x00\x00\x00\x00\x00"), 1),  # body below the 6-byte minimum
        (b"\x80\x80\x80\x80\x80\x01" + GOOD_BODY, 1),  # overlong length varint
    ],
)
def test_validate_framing_rejects_bad_tiling(region: bytes, count: int) -> None:
    buf = craft(simple_batch(1), region=region, records_count=count, last_offset_delta=count - 1)
    with pytest.raises(CorruptRecordError) as info:
        RecordBatch.parse(b"\x00" * 3 + buf, 3).validate_framing()
    assert info.value.position == 3


def test_validate_framing_inflates_compressed_batches_to_check_their_size() -> None:
    # the append path inflates a compressed stream (into nothing) to hold it to the inflation
    # limit, so a stream that does not inflate is refused there too, as Kafka's LogValidator does
    buf = craft(simple_batch(2, compression=Compression.ZSTD), region=b"not zstd at all")
    with pytest.raises(CorruptRecordError, match="cannot decompress zstd"):
        RecordBatch.parse(buf).validate_framing()
    with pytest.raises(CorruptRecordError):
        decoded(buf)


def test_validate_framing_of_trusted_bytes_skips_codecs_that_cannot_pass_the_limit() -> None:
    # bytes this process's encoder built: a small gzip stream cannot inflate past 64 MiB, so it
    # is not inflated (header rules only); zstd has no largest ratio and is always inflated
    gzip_buf = craft(simple_batch(2, compression=Compression.GZIP), region=b"not gzip at all")
    RecordBatch.parse(gzip_buf).validate_framing(trusted=True)
    zstd_buf = craft(simple_batch(2, compression=Compression.ZSTD), region=b"not zstd at all")
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(zstd_buf).validate_framing(trusted=True)


def test_validate_framing_does_not_read_into_the_next_batch() -> None:
    # the last record's length claims the next batch's bytes: must not tile
    first = craft(simple_batch(1), region=encode_varint(len(GOOD_BODY) + 20) + GOOD_BODY)
    log = first + simple_batch(2)
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(log).validate_framing()


@settings(max_examples=200, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=40), st.integers(1, 4))
def test_validate_framing_returns_the_true_max_timestamp(inputs, repeat) -> None:
    """Against the full decoder, for runs of equal records (the fast path) and mixed ones."""
    buf = build_batch(inputs * repeat)
    batch = RecordBatch.parse(buf)
    assert batch.validate_framing() == max(r.timestamp for r in batch.records())


@pytest.mark.parametrize(
    "deltas",
    [
        [0] * 500,  # one run, 1-byte deltas
        list(range(0, 5000, 10)),  # one run, multi-byte deltas
        [0, -5, -9, -1],  # negative deltas after the first
        [-3, -7, -2],  # every delta negative
        [0, 63, 64, 8191, 8192, 1 << 33],  # varint size boundaries
    ],
)
def test_validate_framing_max_timestamp_over_delta_shapes(deltas) -> None:
    base = 1_700_000_000_000
    buf = build_batch([(b"k", b"v" * 100, None, base + d) for d in deltas])
    assert RecordBatch.parse(buf).validate_framing() == base + max(deltas)


def test_validate_framing_sees_a_single_odd_record_in_a_run() -> None:
    """A run of equal records broken by one longer record must still be counted exactly."""
    equal = [(b"k", b"v" * 100, None, TS)] * 300
    records = equal + [(b"k", b"v" * 101, None, TS + 9)] + equal
    batch = RecordBatch.parse(build_batch(records))
    assert batch.validate_framing() == TS + 9
    shortened = craft(build_batch(records), records_count=600, last_offset_delta=599)
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(shortened).validate_framing()


@given(st.lists(record_strategy, min_size=1, max_size=40))
def test_validate_framing_property(inputs) -> None:
    buf = build_batch(inputs)
    RecordBatch.parse(buf).validate_framing()
    assume(len(buf) > HEADER_SIZE + 1)
    with pytest.raises(KafkaError):  # dropping the last byte can never still tile
        RecordBatch.parse(craft(buf, region=buf[HEADER_SIZE:-1])).validate_framing()
