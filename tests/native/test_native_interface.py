"""The contract between storage and its extension: the header object, the one error mapping, the doors.

storage._native is private to storage; these tests pin what storage relies on: a RecordBatch *is*
the native BatchHeader (fields read-only, decoders take the batch itself), every CodecError
becomes a CorruptRecordError through storage.codec_errors alone, and murmur2 reaches txlog
through storage.murmur2.
"""

from __future__ import annotations

import pytest

from storage import _native
from storage.codec_errors import CodecError, corrupt_record_error
from storage.compression import Compression, decompress
from storage.errors import CorruptRecordError
from storage.murmur2 import murmur2_partitions
from storage.records import (
    HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    TimestampType,
    build_batch,
    stamp_batch,
)

TS = 1_700_000_000_000
FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
)


def test_a_batch_is_its_checked_header() -> None:
    buf = build_batch(
        [(b"k", b"v", [], TS), (None, b"w", [], TS + 3)],
        base_offset=2**40,
        producer_id=9,
        producer_epoch=2,
        base_sequence=2**31 - 1,
        is_transactional=True,
        compression=Compression.ZSTD,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        partition_leader_epoch=4,
        log_append_time=TS + 9,
    )
    header = _native.BatchHeader(b"\0" * 5 + buf, 5)
    batch = RecordBatch.parse(buf)
    assert isinstance(batch, _native.BatchHeader)
    expected = BatchHeader.parse(buf)  # the frame walks' header, unpacked by struct: an independent oracle
    assert (
        [getattr(header, f) for f in FIELDS]
        == [getattr(batch, f) for f in FIELDS]
        == [getattr(expected, f) for f in FIELDS]
    )
    assert repr(header).startswith(f"BatchHeader(base_offset={2**40}, ")
    # the header a decoder takes carries every rule: region, codec, LOG_APPEND_TIME, sequences
    assert _native.decode_records(buf, 0, header) == [
        (2**40, TS + 9, b"k", b"v", [], 2**31 - 1),
        (2**40 + 1, TS + 9, None, b"w", [], 0),
    ]
    assert _native.decode_records(buf, 0, batch) == batch.record_tuples()


@pytest.mark.parametrize("field", FIELDS)
def test_header_fields_are_read_only(field: str) -> None:
    batch = RecordBatch.parse(build_batch([(b"k", b"v", [], TS)]))
    with pytest.raises(AttributeError):
        setattr(batch, field, 0)


def test_a_header_that_does_not_parse_is_a_codec_error() -> None:
    buf = bytearray(build_batch([(b"k", b"v", [], TS)]))
    with pytest.raises(CodecError) as info:
        _native.BatchHeader(buf, 1)
    assert info.value.args[0] == "corrupt"
    buf[-1] ^= 1
    _native.BatchHeader(buf, 0, False)  # the CRC is only checked when asked
    with pytest.raises(CodecError, match="CRC mismatch"):
        _native.BatchHeader(buf, 0)


def test_every_codec_error_kind_becomes_one_corrupt_record_error() -> None:
    def made(args: tuple, **where) -> CorruptRecordError:
        return corrupt_record_error(CodecError(*args), **where)

    region = {"context": "batch with base offset 7", "records_count": 3, "path": "p.log", "position": 100}
    assert str(made(("truncated", "truncated", None), **region)) == (
        "batch with base offset 7: records region ends inside a record (expected 3 records) in p.log at byte 100"
    )
    assert str(made(("corrupt", "negative key length -2", 5), **region)) == (
        "batch with base offset 7: negative key length -2 at byte 5 of the records region in p.log at byte 100"
    )
    header_error = made(("corrupt", "unsupported magic 1 (only 2 is supported)", 40), path="p.log", position=40)
    assert (str(header_error), header_error.path, header_error.position) == (
        "unsupported magic 1 (only 2 is supported) in p.log at byte 40",
        "p.log",
        40,
    )
    assert str(made(("decompress", "cannot decompress gzip data: bad", None))) == "cannot decompress gzip data: bad"


def test_callers_see_only_corrupt_record_errors() -> None:
    buf = bytearray(build_batch([(b"k", b"v", [], TS)] * 2))
    buf[HEADER_SIZE] = 0x7E  # the first record's length (63) overruns the region
    batch = RecordBatch.parse(bytes(buf), verify_crc=False, path="s.log", origin=10)
    for decode in (batch.records, batch.validate_framing):
        with pytest.raises(CorruptRecordError) as info:
            decode()
        assert (info.value.path, info.value.position) == ("s.log", 10)
    with pytest.raises(CorruptRecordError, match="in s.log at byte 11"):
        RecordBatch.parse(bytes(buf), 1, verify_crc=False, path="s.log", origin=10)
    with pytest.raises(CorruptRecordError, match="cannot decompress zstd data"):
        decompress(Compression.ZSTD, b"not zstd")
    with pytest.raises(CorruptRecordError, match="cannot stamp the batch: unsupported magic"):
        stamp_batch(bytearray(HEADER_SIZE), 1, 0, 0)


def test_murmur2_reaches_txlog_through_its_storage_door() -> None:
    # Kafka's partitioner tests: key -> partition among 1000 (kafka-python's test_partitioner.py)
    keys = [b"", b"a", b"ab", b"abc", "123456789", memoryview(b"\x00 "), None]
    assert murmur2_partitions(keys, 1000) == [681, 524, 434, 107, 566, 742, -1]
    assert murmur2_partitions is _native.murmur2_partitions
