"""The native codec (storage._native, behind storage.records) against two independent oracles.

* storage/records_reference.py + storage/compression_reference.py: the pure-Python codec
  txlog ran before, kept as the readable reference. On every batch, valid or damaged, the
  native reader must return the same records or fail with the same error type.
* kafka-python's kafka.record: its reader must see the records the native encoder wrote,
  and the native reader must see the records kafka-python's encoder wrote.

Batches are random (seeded, so a failure reproduces) and then mutated: bytes flipped,
cut short, lengths rewritten, the CRC fixed up afterwards so decoding gets past it. The
default run is about 20,000 batches in a few seconds; TXLOG_FUZZ_BATCHES scales it.
"""

from __future__ import annotations

import os
import random
import struct

import pytest

from storage import _native
from storage import compression as _native_compression
from storage import compression_reference as ref_compression
from storage import records_reference as ref
from storage.compression import Compression, compress, decompress
from storage.errors import CorruptRecordError, InvalidRecordError, KafkaError, UnsupportedCompressionTypeError
from storage.records import (
    CONTROL_MASK,
    CRC_COVERED_START,
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
    crc32c,
)
from storage.varint import decode_varint

kafka_record = pytest.importorskip("kafka.record")
default_records = pytest.importorskip("kafka.record.default_records")
kafka_errors = pytest.importorskip("kafka.errors")

BATCHES = int(os.environ.get("TXLOG_FUZZ_BATCHES", "20000"))
TS = 1_700_000_000_000


# --- random batches -------------------------------------------------------------------------


def random_bytes(rng: random.Random, most: int) -> bytes:
    return rng.randbytes(rng.choice((0, 1, 3, rng.randint(0, most))))


def random_records(rng: random.Random) -> list[tuple]:
    """(key, value, headers, timestamp) rows, with the shapes that take different decoder paths:
    null keys/values, 1- and 2-byte varints, headers with null values, non-ASCII names."""
    n = rng.choice((1, 1, 2, 5, rng.randint(1, 40), rng.randint(60, 200)))
    big = rng.random() < 0.1
    rows = []
    for i in range(n):
        key = None if rng.random() < 0.2 else random_bytes(rng, 300 if big else 20)
        value = None if rng.random() < 0.1 else random_bytes(rng, 9000 if big else 80)
        headers = []
        if rng.random() < 0.3:
            headers = [
                (rng.choice(("h", "trace-id", "ü", "")), None if rng.random() < 0.3 else random_bytes(rng, 10))
                for _ in range(rng.randint(1, 3))
            ]
        timestamp = TS + rng.choice((0, i, rng.randint(-5000, 5000), rng.randint(-(1 << 40), 1 << 40)))
        rows.append((key, value, headers, timestamp))
    return rows


def random_batch(rng: random.Random) -> bytes:
    codec = rng.choice(list(Compression))
    sequence = rng.choice((-1, 0, 5, 2**31 - 3))
    return build_batch(
        random_records(rng),
        base_offset=rng.choice((0, 7, 2**40, 2**63 - 300)),
        producer_id=rng.choice((-1, 1000)),
        producer_epoch=rng.choice((-1, 3)),
        base_sequence=sequence,
        is_transactional=rng.random() < 0.3,
        compression=codec,
        timestamp_type=rng.choice(list(TimestampType)),
    )


def with_crc(buf: bytearray) -> bytes:
    """`buf` with its stored CRC made right again, so the reader gets past it to the records."""
    if len(buf) >= HEADER_SIZE:
        struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[CRC_COVERED_START:])))
    return bytes(buf)


def mutate(rng: random.Random, batch: bytes) -> bytes:
    """One kind of damage: bytes flipped inside the records region (or anywhere), a length
    varint or the record count rewritten, the batch cut short or grown."""
    buf = bytearray(batch)
    kind = rng.randrange(6)
    if kind == 0:  # flip a few record bytes
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(HEADER_SIZE, len(buf)) if len(buf) > HEADER_SIZE else rng.randrange(len(buf))
            buf[at] ^= 1 << rng.randrange(8)
    elif kind == 1:  # a random byte anywhere after the CRC (attributes, counts, deltas...)
        at = rng.randrange(CRC_COVERED_START, len(buf))
        buf[at] = rng.randrange(256)
    elif kind == 2:  # records count off by a little
        struct.pack_into(">i", buf, 57, struct.unpack_from(">i", buf, 57)[0] + rng.choice((-2, -1, 1, 2, 1 << 20)))
    elif kind == 3:  # records region cut short (batchLength kept consistent)
        cut = rng.randrange(HEADER_SIZE, len(buf))
        del buf[cut:]
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    elif kind == 4:  # junk appended inside the batch
        buf += rng.randbytes(rng.randint(1, 9))
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    else:  # varint continuation bits set in a run of bytes
        if len(buf) > HEADER_SIZE:
            at = rng.randrange(HEADER_SIZE, len(buf))
            for i in range(at, min(len(buf), at + rng.randint(1, 11))):
                buf[i] |= 0x80
    return with_crc(buf) if rng.random() < 0.9 else bytes(buf)


# --- the three readers ------------------------------------------------------------------------


def native_read(buf: bytes):
    """('ok', records) or ('error', error class) of the native reader, as the log reads a batch."""
    try:
        batch = RecordBatch.parse(buf)
        if batch.size != len(buf):
            return "error", CorruptRecordError
        return "ok", batch.record_tuples()
    except KafkaError as exc:
        return "error", type(exc)


def reference_read(buf: bytes):
    try:
        return "ok", ref.decode_batch(buf)
    except KafkaError as exc:
        return "error", type(exc)


def kafka_python_read(buf: bytes) -> list[tuple]:
    """Records of kafka-python's reader in txlog's tuple shape (sequence is not exposed there)."""
    memory = kafka_record.MemoryRecords(buf)
    batch = memory.next_batch()
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]


def kafka_python_agrees(buf: bytes, rows: list[tuple]) -> bool:
    """kafka-python reads the records we read. It differs from Java (and txlog) in two known
    ways, both on damaged bytes only: it refuses a header key that is not UTF-8 (Java reads it
    with U+FFFD in place of the bad bytes), and it reads a record's attributes int8 as a
    varint, so an attributes byte >= 0x80 shifts every field after it; and it does not mask a
    5-byte offset delta (10-byte timestamp delta) to 32 (64) bits as Java's shifts do, which
    `java_width` undoes. A batch a mutation made a control batch is left out: kafka-python
    parses its record as a marker."""
    batch = RecordBatch.parse(buf)
    if batch.is_control or high_attributes_byte(buf):
        return True
    base_ts = batch.max_timestamp if batch.timestamp_type else batch.base_timestamp
    try:
        theirs = [
            (batch.base_offset + java_width(o - batch.base_offset, 32), base_ts + java_width(ts - base_ts, 64), *rest)
            for o, ts, *rest in kafka_python_read(buf)
        ]
        return theirs == without_sequence(rows)
    except kafka_errors.CorruptRecordError as exc:
        return "UnicodeDecodeError" in str(exc) and any("\ufffd" in name for row in rows for name, _ in row[4])


def java_width(value: int, bits: int) -> int:
    """The ZigZag value Java decodes from the varint kafka-python decoded as `value`: the raw
    groups masked to `bits` bits before the ZigZag step, as Java's int/long shifts do."""
    raw = (2 * value if value >= 0 else -2 * value - 1) & ((1 << bits) - 1)
    return (raw >> 1) ^ -(raw & 1)


def high_attributes_byte(buf: bytes) -> bool:
    """Whether some record of the (valid) batch in `buf` has an attributes byte >= 0x80."""
    batch = RecordBatch.parse(buf)
    region = decompress(batch.compression, buf[HEADER_SIZE:])
    pos = 0
    while pos < len(region):
        length, pos = decode_varint(region, pos)
        if region[pos] >= 0x80:
            return True
        pos += length
    return False


def without_sequence(rows: list[tuple]) -> list[tuple]:
    return [row[:5] for row in rows]


# --- tests --------------------------------------------------------------------------------------


def test_random_and_mutated_batches_decode_like_the_reference() -> None:
    rng = random.Random(1313)
    outcomes = {"ok": 0, "error": 0}
    for i in range(BATCHES):
        if i % 8 == 0:
            batch = random_batch(rng)
        buf = batch if i % 8 == 1 else mutate(rng, batch)
        native, reference = native_read(buf), reference_read(buf)
        if native[0] == "ok" or reference[0] == "ok":
            assert native == reference, f"case {i}: {buf.hex()}"
            # a damaged batch the readers accept is still a batch: kafka-python must agree on it
            assert kafka_python_agrees(buf, native[1]), f"case {i}: {buf.hex()}"
        else:  # both refuse, with the same kind of error
            assert native[1] is reference[1] or {native[1], reference[1]} <= {CorruptRecordError}, (
                f"case {i}: native {native[1].__name__}, reference {reference[1].__name__}: {buf.hex()}"
            )
        outcomes[native[0]] += 1
    # the mutations must reach both outcomes, or the test proves little
    assert outcomes["ok"] > BATCHES // 10 and outcomes["error"] > BATCHES // 4, outcomes


def test_native_batches_are_the_reference_bytes_and_kafka_python_reads_them() -> None:
    rng = random.Random(2026)
    for _ in range(max(200, BATCHES // 20)):
        rows = random_records(rng)
        fields = dict(
            base_offset=rng.choice((0, 99)),
            partition_leader_epoch=rng.choice((-1, 4)),
            attributes=rng.choice((0, TRANSACTIONAL_MASK, TIMESTAMP_TYPE_MASK)),
            base_timestamp=rows[0][3],
            max_timestamp=max(r[3] for r in rows),
            producer_id=rng.choice((-1, 5)),
            producer_epoch=rng.choice((-1, 2)),
            base_sequence=rng.choice((-1, 0, 2**31 - 2)),
        )
        columns = [list(c) for c in zip(*rows, strict=True)]
        native = _native.encode_batch(*columns, **fields)
        assert native == ref.build_batch_from_columns(*columns, **fields)
        expected = [
            (
                i + fields["base_offset"],
                rows[i][3] if not fields["attributes"] & TIMESTAMP_TYPE_MASK else fields["max_timestamp"],
                k,
                v,
                h,
            )
            for i, (k, v, h, _) in enumerate(rows)
        ]
        assert kafka_python_read(native) == expected


def retain_both(buf: bytes, keep: bytes, horizon: int | None):
    """('ok', bytes) or ('error', error class) of the native re-encoding and of the reference's."""
    outcomes = []
    for retain in (
        lambda: RecordBatch.parse(buf, verify_crc=False).retained(keep, horizon),
        lambda: ref.retain_records(buf, keep, horizon),
    ):
        try:
            outcomes.append(("ok", retain()))
        except KafkaError as exc:
            outcomes.append(("error", type(exc)))
    return outcomes


def header_without_length_and_crc(buf: bytes) -> tuple:
    fields = struct.unpack_from(">qiibIhiqqqhii", buf)
    return fields[:1] + fields[2:4] + fields[5:]


def test_retained_batches_are_the_reference_bytes_and_kafka_python_reads_them() -> None:
    """The cleaner's re-encoding (RecordBatch.retained) against the reference's retain_records:
    the same bytes uncompressed, the same header and records compressed; kafka-python reads
    the kept records at their original offsets."""
    rng = random.Random(2511)
    for i in range(max(300, BATCHES // 20)):
        buf = random_batch(rng)
        count = RecordBatch.parse(buf).records_count
        keep = bytes(rng.choice((0, 1, 1, 7)) if rng.random() < 0.9 else 0 for _ in range(count))
        horizon = rng.choice((None, None, TS + 86_400_000, 0))
        (native_kind, native), (ref_kind, reference) = retain_both(buf, keep, horizon)
        assert native_kind == ref_kind == "ok", f"case {i}: {native} {reference}"
        if not RecordBatch.parse(buf).compression:
            assert native == reference, f"case {i}: {buf.hex()} {keep.hex()} {horizon}"
        assert header_without_length_and_crc(native) == header_without_length_and_crc(reference)
        assert ref.decode_batch(native) == ref.decode_batch(reference)
        expected = [row[:5] for row, k in zip(ref.decode_batch(buf), keep, strict=True) if k]
        if expected:
            assert kafka_python_read(native) == [
                (o, ts, k, v, h) for o, ts, k, v, h in (row[:5] for row in ref.decode_batch(native))
            ]
            assert [row[0] for row in ref.decode_batch(native)] == [row[0] for row in expected]
            assert RecordBatch.parse(native).last_offset == RecordBatch.parse(buf).last_offset
        else:
            assert len(native) == HEADER_SIZE and RecordBatch.parse(native).records() == []


def test_retaining_from_damaged_batches_fails_like_the_reference() -> None:
    rng = random.Random(2512)
    outcomes = {"ok": 0, "error": 0}
    for i in range(max(400, BATCHES // 10)):
        if i % 8 == 0:
            batch = random_batch(rng)
        buf = mutate(rng, batch)
        try:
            count = RecordBatch.parse(buf, verify_crc=False).records_count
        except KafkaError:
            continue  # not even a header: nothing for the cleaner to filter
        if not 0 <= count <= 1 << 16:
            continue
        keep = bytes(rng.choice((0, 1)) for _ in range(count))
        native, reference = retain_both(buf, keep, rng.choice((None, TS)))
        if native[0] == "ok" or reference[0] == "ok":
            if not struct.unpack_from(">h", buf, 21)[0] & 0x07:
                assert native == reference, f"case {i}: {buf.hex()} {keep.hex()}"
            else:
                assert native[0] == reference[0] == "ok", f"case {i}: {native} {reference}: {buf.hex()}"
                assert ref.decode_batch(native[1]) == ref.decode_batch(reference[1]), f"case {i}"
        else:
            assert native[1] is reference[1] or {native[1], reference[1]} <= {CorruptRecordError}, (
                f"case {i}: native {native[1].__name__}, reference {reference[1].__name__}: {buf.hex()}"
            )
        outcomes[native[0]] += 1
    assert outcomes["ok"] > 20 and outcomes["error"] > 20, outcomes


def test_a_keep_mask_of_the_wrong_length_is_a_value_error() -> None:
    batch = RecordBatch.parse(build_batch([(b"k", b"v", None, TS)] * 3))
    for keep in (b"", b"\x01\x01", b"\x01" * 4):
        with pytest.raises(ValueError, match="keep mask"):
            batch.retained(keep)


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name)
def test_compressed_batches_cross_read_with_kafka_python(codec: Compression) -> None:
    rng = random.Random(int(codec))
    builder_cls = default_records.DefaultRecordBatchBuilder
    for _ in range(40):
        rows = random_records(rng)
        ours = build_batch(rows, compression=codec, base_offset=3)
        theirs_reading_ours = kafka_python_read(ours)
        assert theirs_reading_ours == without_sequence(RecordBatch.parse(ours).record_tuples())
        builder = builder_cls(
            magic=2,
            compression_type=int(codec),
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 24,
        )
        for offset, (key, value, headers, ts) in enumerate(rows):
            builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
        theirs = bytes(builder.build())
        assert without_sequence(RecordBatch.parse(theirs).record_tuples()) == kafka_python_read(theirs)
        region = ours[HEADER_SIZE:]
        assert decompress(codec, region) == ref_compression.decompress(codec, region)
        assert ref_compression.decompress(codec, region) == ref_compression.decompress(
            codec, ref_compression.compress(codec, decompress(codec, region))
        )


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name)
def test_damaged_compressed_streams_fail_alike(codec: Compression) -> None:
    rng = random.Random(100 + int(codec))
    stream = compress(codec, rng.randbytes(5000) + bytes(5000))
    agree = 0
    for _ in range(400):
        bad = bytearray(stream)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        bad = bytes(bad[: rng.randrange(len(bad) + 1)]) if rng.random() < 0.3 else bytes(bad)
        try:
            native = decompress(codec, bad)
        except CorruptRecordError:
            native = None
        try:
            reference = ref_compression.decompress(codec, bad)
        except CorruptRecordError:
            reference = None
        if native is not None and reference is not None:
            assert native == reference
        agree += (native is None) == (reference is None)
    # LZ4 frames and zstd carry optional checksums the libraries treat differently: both
    # must still refuse nearly everything damaged the same way
    assert agree >= 360, agree


@pytest.mark.parametrize("size", [0, 1, 1 << 20, (1 << 20) + 1, 3 << 20, 40 << 20, 1 << 40])
def test_the_reference_states_the_same_inflation_limit(size: int) -> None:
    assert ref_compression.inflation_limit(size) == _native.inflation_limit(size)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD], ids=lambda c: c.name)
def test_a_bomb_is_refused_alike(codec: Compression) -> None:
    # a region of a few KiB that inflates to 65 MiB: one MiB past the limit of its size
    from tests.storage.bombs import MIB, bomb

    region = bomb(codec, 65 * MIB)[HEADER_SIZE:]
    for codec_module in (ref_compression, _native_compression):
        with pytest.raises(CorruptRecordError, match=f"{codec.kafka_name} records region of {len(region)} bytes"):
            codec_module.decompress(codec, region)
    with pytest.raises(_native.CodecError) as info:
        _native.inflated_size(codec, region)
    assert info.value.args[0] == "too_large"


def test_consumer_records_and_named_records_match_record_tuples() -> None:
    from txlog.consumer_record import ConsumerRecord

    rows = [(b"k%d" % i, b"v" * i, [("h", b"x")] if i % 3 == 0 else [], TS + i) for i in range(50)]
    buf = build_batch(
        rows,
        base_offset=100,
        producer_id=9,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
        compression=Compression.ZSTD,
    )
    batch = RecordBatch.parse(buf)
    plain = batch.record_tuples()
    named = batch.records()
    assert [type(r) for r in named] == [Record] * 50 and [tuple(r) for r in named] == plain
    taken = batch.consumer_records(ConsumerRecord, "t", 4, 110, 120)
    assert all(type(r) is ConsumerRecord for r in taken)
    assert taken == [
        ConsumerRecord("t", 4, o, ts, TimestampType.CREATE_TIME, k, v, h, 9, 2, s, True)
        for o, ts, k, v, h, s in plain[10:20]
    ]


def test_control_batch_is_the_reference_bytes() -> None:
    buf = build_control_batch(
        ControlType.ABORT, producer_id=5, producer_epoch=1, coordinator_epoch=3, timestamp=TS, base_offset=40
    )
    key, value = struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3)
    assert buf == ref.build_batch_from_columns(
        [key],
        [value],
        [None],
        [TS],
        base_offset=40,
        partition_leader_epoch=-1,
        attributes=TRANSACTIONAL_MASK | CONTROL_MASK,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=5,
        producer_epoch=1,
        base_sequence=-1,
    )
    assert RecordBatch.parse(buf).control_marker().is_abort


def test_framing_walk_matches_the_reference() -> None:
    rng = random.Random(77)
    for i in range(3000):
        batch = build_batch(random_records(rng))
        region = mutate(rng, batch)[HEADER_SIZE:] if i % 2 else batch[HEADER_SIZE:]
        try:
            native = _native.walk_records(region, 0, len(region))
        except _native.CodecError:
            native = None
        try:
            reference = ref.walk_records(region)
        except CorruptRecordError:
            reference = None
        assert native == reference, region.hex()


def test_errors_name_the_file_and_the_batch_position() -> None:
    buf = bytearray(build_batch([(b"k", b"v", [], TS)] * 3))
    buf[HEADER_SIZE + 4] = 0x7F  # the first record's key length becomes -64
    log = b"\x00" * 9 + with_crc(buf)
    batch = RecordBatch.parse(log, 9, path="seg.log", origin=1000)
    with pytest.raises(CorruptRecordError, match="negative key length -64 at byte 5 of the records region") as info:
        batch.records()
    assert (info.value.path, info.value.position) == ("seg.log", 1009)


def test_decoders_accept_any_buffer_and_refuse_a_region_outside_it() -> None:
    buf = build_batch([(b"k", b"v", [], TS)])
    for view in (buf, bytearray(buf), memoryview(buf)):
        batch = RecordBatch.parse(view)
        assert batch.records()[0].key == b"k"
    header = _native.BatchHeader(buf, 0)
    short = buf[:-1]  # a header handed with a buffer that does not hold its whole batch
    for decode in (
        lambda: _native.decode_records(short, 0, header),
        lambda: _native.decode_consumer_records(
            short, 0, header, cls=Record, topic="t", partition=0, timestamp_type=0, start_offset=0, end_offset=1
        ),
        lambda: _native.ColumnBuilder().add(short, 0, header),
    ):
        with pytest.raises(ValueError, match="outside"):
            decode()


def test_unknown_codes_and_counts_keep_their_error_types() -> None:
    buf = bytearray(build_batch([(b"k", b"v", [], TS)]))
    buf[22] |= 5
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatch.parse(with_crc(buf)).records()
    buf = bytearray(build_batch([(b"k", b"v", [], TS)]))
    struct.pack_into(">i", buf, 57, -1)
    with pytest.raises(InvalidRecordError):
        RecordBatch.parse(with_crc(buf)).records()


def test_arrow_columns_hold_the_decoded_records() -> None:
    pa = pytest.importorskip("pyarrow")
    from storage.arrow_records import COLUMNS, RecordColumns

    rng = random.Random(5)
    batches = [RecordBatch.parse(random_batch(rng)) for _ in range(30)]
    columns = RecordColumns()
    assert columns.add_all(batches, 0, 1 << 62) == sum(
        1 for b in batches for r in b.record_tuples() if 0 <= r[0] < 1 << 62
    )
    table = columns.table()
    assert table.column_names == list(COLUMNS) and isinstance(table, pa.Table)
    expected = [
        (
            o,
            ts,
            b.timestamp_type.kafka_name,
            k,
            v,
            [{"key": n, "value": hv} for n, hv in h],
            b.producer_id,
            b.producer_epoch,
            s,
            b.is_transactional,
            int(b.timestamp_type),
        )
        for b in batches
        for o, ts, k, v, h, s in b.record_tuples()
        if 0 <= o < 1 << 62
    ]
    assert [tuple(row.values()) for row in table.to_pylist()] == expected
    assert RecordColumns().table(["value"]).num_rows == 0


def test_a_corrupt_batch_adds_no_columns() -> None:
    from storage.arrow_records import RecordColumns

    good = RecordBatch.parse(build_batch([(b"k", b"v", [("h", b"1")], TS)] * 3))
    buf = bytearray(build_batch([(b"k", b"v", [("h", b"1")], TS)] * 3))
    buf[-2] = 0x7E  # the last record's header value length (63) overruns the batch
    columns = RecordColumns()
    columns.add(good)
    with pytest.raises(CorruptRecordError):
        columns.add(RecordBatch.parse(with_crc(buf)))
    columns.add(good)
    table = columns.table(["offset", "headers", "is_transactional"])
    assert table.num_rows == 6 and table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}]] * 6


def test_bulk_add_builds_the_columns_one_by_one_adds_build() -> None:
    """add_all (one native call, without the GIL past DETACH_BYTES) gives what add gives batch by
    batch, for batches of several buffers and codecs, with offset bounds cutting edge batches."""
    pytest.importorskip("pyarrow")
    from storage.arrow_records import COLUMNS, RecordColumns

    rng = random.Random(8)
    batches = [RecordBatch.parse(random_batch(rng)) for _ in range(40)]
    big = [(os.urandom(8), os.urandom(3000), [("h", b"1")], TS + i) for i in range(200)]
    batches += [RecordBatch.parse(build_batch(big, base_offset=1000 + 200 * i)) for i in range(3)]  # > 256 KiB
    offsets = [o for b in batches for o, *_ in b.record_tuples()]
    start, end = sorted(offsets)[3], sorted(offsets)[-3]
    one_by_one, bulk = RecordColumns(), RecordColumns()
    for batch in batches:
        one_by_one.add(batch, start, end)
    assert bulk.add_all(batches, start, end) == one_by_one.rows > 0
    assert bulk.table().equals(one_by_one.table())
    picked = RecordColumns(["value", "producer_id"])
    picked.add_all(batches, start, end)
    names = ["value", "producer_id"]
    assert picked.table(names).equals(one_by_one_table(batches, start, end, names))
    with pytest.raises(ValueError, match="'key' was not built"):
        picked.table(["key"])
    with pytest.raises(ValueError, match="unknown record column 'kye'"):
        RecordColumns(["kye"])
    assert set(COLUMNS) >= {"value", "producer_id"}


def one_by_one_table(batches: list[RecordBatch], start: int, end: int, names: list[str]):
    from storage.arrow_records import RecordColumns

    columns = RecordColumns()
    for batch in batches:
        columns.add(batch, start, end)
    return columns.table(names)


def test_bulk_add_names_the_corrupt_batch_and_keeps_the_ones_before() -> None:
    pytest.importorskip("pyarrow")
    from storage.arrow_records import RecordColumns

    rows = [(b"k", b"v", [("h", b"1")], TS)] * 3
    good = RecordBatch.parse(build_batch(rows))
    buf = bytearray(build_batch(rows, base_offset=3))
    buf[-2] = 0x7E  # the last record's header value length (63) overruns the batch
    bad = RecordBatch.parse(with_crc(buf), path="/x/00.log", origin=4242)
    after = RecordBatch.parse(build_batch(rows, base_offset=6))
    columns = RecordColumns(["offset", "is_transactional"])
    with pytest.raises(CorruptRecordError) as caught:
        columns.add_all([good, bad, after])
    assert caught.value.position == 4242 and "base offset 3" in str(caught.value)
    table = columns.table(["offset", "is_transactional"])
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("is_transactional").to_pylist() == [False] * 3


def test_finish_hands_the_buffers_over_and_empties_the_builder() -> None:
    pa = pytest.importorskip("pyarrow")
    builder = _native.ColumnBuilder(["value"])
    buf = build_batch([(b"k", b"value", None, TS)] * 2)
    builder.add_batches([(buf, 0, _native.BatchHeader(buf, 0))])
    cols = builder.finish()
    assert (cols["rows"], builder.rows, builder.batches) == (2, 0, 0)
    data = pa.py_buffer(cols["value_data"])
    assert data.to_pybytes() == bytes(cols["value_data"]) == b"valuevalue" and len(cols["value_data"]) == 10
    assert memoryview(cols["value_data"]).readonly
    assert len(cols["key_data"]) == 0 and bytes(cols["key_offsets"]) == bytes(4)  # not asked for: empty
    with pytest.raises(ValueError, match="unknown builder column"):
        _native.ColumnBuilder(["vaule"])


def test_encoder_takes_what_the_python_encoder_took() -> None:
    rows = [(bytearray(b"k"), memoryview(b"v"), [["h", b"1"], (b"raw", None)], TS)]
    batch = RecordBatch.parse(build_batch(rows))
    assert batch.record_tuples() == [(0, TS, b"k", b"v", [("h", b"1"), ("raw", None)], -1)]
    with pytest.raises(TypeError):
        build_batch([("not bytes", b"v", None, TS)])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", [("h", b"1", b"extra")], TS)])
    with pytest.raises(ValueError, match="out of range"):
        build_batch([(b"k", b"v", None, TS)], producer_epoch=1 << 20)


_BUILDER_COLUMNS = ["offset", "timestamp", "sequence", "batch_index", "key", "value", "headers"]


class AnyTuple(tuple):
    """A tuple subclass of no particular size: the native decoders fill any."""


def test_hostile_arguments_to_every_native_entry_point_raise_never_crash() -> None:
    """Whatever the arguments, each native function returns or raises a Python exception (a
    crash would take pytest down with it): garbage bytes, regions outside the buffer, counts
    and codes out of range, buffers of every kind."""
    rng = random.Random(31337)
    good = build_batch([(b"k", b"v", [("h", None)], TS)] * 4, compression=Compression.GZIP)
    headers = []  # of damaged batches with any record count, compression code and timestamp type
    while len(headers) < 200:
        buf = bytearray(mutate(rng, good))
        struct.pack_into(">i", buf, 57, rng.choice((0, 1, 4, -1, 2**31 - 1, -(2**31))))
        buf[22] = (buf[22] & ~0x0F) | rng.randint(0, 15)  # attributes bits 0-3: codec, timestamp type
        try:
            headers.append(_native.BatchHeader(buf, 0, False))
        except _native.CodecError:
            continue
    for _ in range(3000):
        data = rng.choice((rng.randbytes(rng.randint(0, 120)), good, mutate(rng, good)))
        data = rng.choice((data, bytearray(data), memoryview(data)))
        start, end = rng.randint(-3, 130), rng.randint(-3, 130)
        header = rng.choice(headers)  # a header with any buffer and any position: it may not fit
        spans = (  # add_batches' items: fitting or not, and things that are no span at all
            (data, start, header),
            (good, 0, _native.BatchHeader(good, 0)),
            (data, -1, header),
            (data, start),
            [data, start, header],
            (data, start, "not a header"),
            ("not bytes", 0, header),
            None,
        )
        codec = rng.randint(0, 8)
        calls = (  # (function, arguments, keyword arguments): one is called with this iteration's values
            (_native.BatchHeader, (data, rng.randint(-1, 100), rng.random() < 0.5), {}),
            (_native.decode_records, (data, start, header, Record), {}),
            (
                _native.decode_consumer_records,
                (data, start, header),
                {
                    "cls": AnyTuple,
                    "topic": "t",
                    "partition": 0,
                    "timestamp_type": 0,
                    "start_offset": rng.choice((0, -(2**63))),
                    "end_offset": rng.choice((2, 2**63 - 1)),
                },
            ),
            (_native.walk_records, (data, start, end), {}),
            (_native.decompress, (codec, data), {}),
            (_native.ColumnBuilder().add, (data, start, header), {"start_offset": 0, "end_offset": 3}),
            (
                _native.ColumnBuilder(rng.sample(_BUILDER_COLUMNS, rng.randint(0, 7))).add_batches,
                ([rng.choice(spans) for _ in range(rng.randint(0, 5))],),
                {"start_offset": 0, "end_offset": rng.choice((3, 2**63 - 1))},
            ),
            (_native.crc32c, (data, rng.randint(0, 2**32 - 1)), {}),
            (
                _native.retain_records,
                (
                    data,
                    start,
                    rng.choice((b"", b"\x01" * 4, rng.randbytes(rng.randint(0, 6)), bytearray(b"\x00\x01" * 2), "no")),
                    rng.choice((None, 0, -1, 2**63 - 1, 2**64)),
                ),
                {},
            ),
        )
        function, args, kwargs = rng.choice(calls)
        try:
            function(*args, **kwargs)
        except (ValueError, OverflowError, TypeError):
            pass  # CodecError is a ValueError
