"""storage.records.BatchBuilder, the producer's per-record path (native: storage/native/src/batch_builder.rs).

Oracles:
* `OldBatchBuilder` below is the pure-Python BatchBuilder this native class replaced, kept
  here only as the reference: fed the same appends it must make the same accept/refuse
  decisions with the same `estimated_size`, and its build (the old path: Python columns
  into `_native.encode_batch`) must give the same bytes for every codec and option.
* kafka-python's DefaultRecordBatch decodes every built batch independently (CRC, header
  fields, records), and storage.records_reference (the pure-Python encoder) rebuilds every
  uncompressed batch byte for byte.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage._native as _native
from storage import records_reference
from storage.errors import UnsupportedCompressionTypeError
from storage.records import (
    HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchBuilder,
    Compression,
    RecordBatch,
    TimestampType,
    _build_from_columns,
)
from storage.varint import size_of_varint, size_of_varlong

default_records = pytest.importorskip("kafka.record.default_records")
kafka_codec = pytest.importorskip("kafka.codec")

NOW = 1_700_000_000_000
#: The codecs kafka-python (the decoding oracle) can inflate here.
CODECS = [Compression.NONE] + [
    codec
    for codec, present in (
        (Compression.GZIP, kafka_codec.has_gzip()),
        (Compression.SNAPPY, kafka_codec.has_snappy()),
        (Compression.LZ4, kafka_codec.has_lz4()),
        (Compression.ZSTD, kafka_codec.has_zstd()),
    )
    if present
]


# ---- the replaced pure-Python builder, verbatim in behaviour: the reference ------------------------

_VARINT_SIZE = bytes((n.bit_length() + 7) // 7 for n in range(1 << 16))


def _record_size(offset_delta: int, timestamp_delta: int, key, value, headers) -> int:
    body = 1 + size_of_varlong(timestamp_delta) + size_of_varint(offset_delta)
    body += 1 if key is None else size_of_varint(len(key)) + len(key)
    body += 1 if value is None else size_of_varint(len(value)) + len(value)
    if headers:
        body += size_of_varint(len(headers))
        for name, header_value in headers:
            raw = len(name.encode("utf-8")) if isinstance(name, str) else len(name)
            body += size_of_varint(raw) + raw
            body += 1 if header_value is None else size_of_varint(len(header_value)) + len(header_value)
    else:
        body += 1
    return size_of_varint(body) + body


class OldBatchBuilder:
    """The Python BatchBuilder before it became native (keys/values as bytes-likes: the old
    builder sized a str by its characters and could not build one)."""

    def __init__(
        self,
        *,
        max_bytes=16384,
        base_offset=0,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        is_transactional=False,
        compression=Compression.NONE,
        timestamp_type=TimestampType.CREATE_TIME,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        log_append_time=None,
    ):
        self.max_bytes = max_bytes
        self._options = dict(
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
            compression=compression,
            timestamp_type=timestamp_type,
            partition_leader_epoch=partition_leader_epoch,
            log_append_time=log_append_time,
        )
        self._keys, self._values, self._headers, self._timestamps = [], [], [], []
        self.estimated_size = HEADER_SIZE
        self._base_timestamp = 0

    @property
    def record_count(self) -> int:
        return len(self._keys)

    def append(self, key, value, headers=None, timestamp=None) -> bool:
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        count = len(self._keys)
        if not count:
            self._base_timestamp = timestamp
        delta = timestamp - self._base_timestamp
        size = 0
        if not headers and delta >= 0:
            sizes = _VARINT_SIZE
            try:
                k, v = len(key), len(value)
                body = 2 + sizes[delta] + sizes[count] + sizes[k] + k + sizes[v] + v
                size = sizes[body] + body
            except (TypeError, IndexError):
                size = 0
        if not size:
            size = _record_size(count, delta, key, value, headers)
        if count and self.estimated_size + size > self.max_bytes:
            return False
        self._keys.append(key)
        self._values.append(value)
        self._headers.append(headers)
        self._timestamps.append(timestamp)
        self.estimated_size += size
        return True

    def build(self, **overrides) -> bytes:
        if not self._keys:
            raise ValueError("a batch needs at least one record")
        return _build_from_columns(
            self._keys, self._values, self._headers, self._timestamps, **{**self._options, **overrides}
        )


# ---- helpers ------------------------------------------------------------------------------------------


def as_bytes(item):
    """What the encoder writes for a key, value or header item."""
    if isinstance(item, str):
        return item.encode("utf-8")
    return None if item is None else bytes(item)


def kafka_python_records(data: bytes) -> tuple:
    """(header fields, [(offset, timestamp, key, value, headers)]) as kafka-python reads the batch."""
    batch = default_records.DefaultRecordBatch(data)
    assert batch.validate_crc()
    fields = (
        batch.base_offset,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.is_transactional,
        batch.compression_type,
        batch.timestamp_type,
        batch.max_timestamp,
    )
    return fields, [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]


def expected_records(appended: list[tuple], base_offset: int, log_append_max: int | None) -> list[tuple]:
    return [
        (
            base_offset + i,
            ts if log_append_max is None else log_append_max,
            as_bytes(key),
            as_bytes(value),
            [(as_bytes(n).decode("utf-8"), as_bytes(v)) for n, v in (headers or [])],
        )
        for i, (key, value, headers, ts) in enumerate(appended)
    ]


# ---- strategies ------------------------------------------------------------------------------------------

raw = st.binary(max_size=300)
payload = st.one_of(st.none(), raw, raw.map(bytearray), raw.map(memoryview), st.text(max_size=40))
# names as str or as their UTF-8 (kafka-python, the oracle, decodes names strictly)
header = st.tuples(
    st.one_of(st.text(max_size=6), st.text(max_size=6).map(str.encode)), st.one_of(st.none(), st.binary(max_size=20))
)
timestamp = st.one_of(
    st.integers(min_value=NOW - 5_000, max_value=NOW + 5_000),
    st.integers(min_value=NOW - (1 << 40), max_value=NOW + (1 << 40)),
)
record = st.tuples(payload, payload, st.one_of(st.none(), st.lists(header, max_size=3)), timestamp)
max_bytes = st.one_of(st.integers(min_value=-10, max_value=3_000), st.just(1 << 70))
overrides = st.fixed_dictionaries(
    {},
    optional={
        "base_offset": st.integers(min_value=0, max_value=1 << 40),
        "producer_id": st.integers(min_value=-1, max_value=(1 << 63) - 1),
        "producer_epoch": st.integers(min_value=-1, max_value=(1 << 15) - 1),
        "base_sequence": st.integers(min_value=-1, max_value=(1 << 31) - 1),
        "is_transactional": st.booleans(),
        "partition_leader_epoch": st.integers(min_value=-1, max_value=(1 << 31) - 1),
        "timestamp_type": st.sampled_from(TimestampType),
        "log_append_time": st.one_of(st.none(), st.integers(min_value=0, max_value=NOW)),
    },
)


def oracle_args(key, value, headers, ts) -> tuple:
    """The old builder got bytes-likes only; it sized a str by characters, so give it the UTF-8."""
    return (
        as_bytes(key) if isinstance(key, str) else key,
        as_bytes(value) if isinstance(value, str) else value,
        headers,
        ts,
    )


# ---- the native builder against the old one -------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record, min_size=1, max_size=40),
    limit=max_bytes,
    codec=st.sampled_from(CODECS),
    transactional=st.booleans(),
    build_overrides=overrides,
)
def test_decisions_sizes_and_bytes_match_the_old_builder(records, limit, codec, transactional, build_overrides):
    options = dict(max_bytes=limit, compression=codec, is_transactional=transactional)
    batches = []  # (native builder, old builder, records appended)
    for rec in records:
        if batches:
            new, old, appended = batches[-1]
            accepted = new.append(*rec)
            assert accepted == old.append(*oracle_args(*rec))
            assert (new.record_count, new.estimated_size) == (old.record_count, old.estimated_size)
            if accepted:
                appended.append(rec)
                continue
        new, old = BatchBuilder(**options), OldBatchBuilder(**options)
        assert new.append(*rec) and old.append(*oracle_args(*rec))  # a first record is always accepted
        assert new.estimated_size == old.estimated_size
        batches.append((new, old, [rec]))
    for new, old, appended in batches:
        data = new.build(**build_overrides)
        assert data == old.build(**build_overrides)
        assert data == new.build(**build_overrides)  # building changes nothing
        if codec == Compression.NONE:
            assert len(data) == new.estimated_size
        options_now = {
            **dict(
                base_offset=0,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                is_transactional=transactional,
                timestamp_type=0,
                log_append_time=None,
            ),
            **build_overrides,
        }
        timestamps = [ts for _, _, _, ts in appended]
        log_append = bool(options_now["timestamp_type"])
        max_ts = (
            options_now["log_append_time"]
            if log_append and options_now["log_append_time"] is not None
            else max(timestamps)
        )
        fields, decoded = kafka_python_records(data)
        assert fields == (
            options_now["base_offset"],
            options_now["producer_id"],
            options_now["producer_epoch"],
            options_now["base_sequence"],
            bool(options_now["is_transactional"]),
            int(codec),
            int(log_append),
            max_ts,
        )
        assert decoded == expected_records(appended, options_now["base_offset"], max_ts if log_append else None)
        assert new.max_timestamp == max(timestamps)
        assert [new.timestamp_at(i) for i in range(len(appended))] == timestamps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record, min_size=1, max_size=30),
    base_offset=st.integers(min_value=0, max_value=1 << 40),
    producer_id=st.integers(min_value=-1, max_value=1 << 50),
    sequence=st.integers(min_value=-1, max_value=1 << 30),
)
def test_uncompressed_batches_are_the_reference_encoders_bytes(records, base_offset, producer_id, sequence):
    builder = BatchBuilder(
        max_bytes=1 << 30, base_offset=base_offset, producer_id=producer_id, producer_epoch=3, base_sequence=sequence
    )
    for i, rec in enumerate(records):
        assert builder.try_append(*rec) == i
    columns = [(as_bytes(k), as_bytes(v), h, ts) for k, v, h, ts in records]
    keys, values, headers, timestamps = zip(*columns, strict=True)
    assert builder.build() == records_reference.build_batch_from_columns(
        keys,
        values,
        headers,
        timestamps,
        base_offset=base_offset,
        partition_leader_epoch=-1,
        attributes=0,
        base_timestamp=timestamps[0],
        max_timestamp=max(timestamps),
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=sequence,
    )
    # and the reader's view: the builder's sizes are what a reader decodes
    for i, rec in enumerate(RecordBatch.parse(builder.build()).records()):
        key, value = as_bytes(records[i][0]), as_bytes(records[i][1])
        assert builder.key_size_at(i) == (-1 if key is None else len(key)) == (-1 if rec.key is None else len(rec.key))
        assert builder.value_size_at(i) == (-1 if value is None else len(value))


# ---- try_append / close / accessors ----------------------------------------------------------------------


def test_try_append_returns_indexes_then_minus_one_when_full_or_closed():
    builder = BatchBuilder(max_bytes=HEADER_SIZE + 3 * 20)
    indexes = [builder.try_append(b"k", b"v" * 10, None, NOW + i) for i in range(5)]
    assert indexes[:3] == [0, 1, 2] and indexes[3:] == [-1, -1]
    assert builder.record_count == 3 and builder.estimated_size <= builder.max_bytes
    full = builder.build()
    assert not builder.closed
    builder.close()
    builder.close()  # idempotent
    assert builder.closed
    assert builder.try_append(b"", b"", None, NOW) == -1  # even a record that fits
    assert builder.append(b"", b"", None, NOW) is False
    assert builder.record_count == 3 and builder.build() == full  # closed still builds, unchanged


def test_metadata_at_is_the_three_accessors_in_one_call():
    """What the producer's RecordMetadata reads (txlog/clients/future_record_metadata.py)."""
    builder = BatchBuilder()
    builder.append("ké", None, None, NOW + 7)
    builder.append(None, b"abcd", None, NOW - 3)
    for i in (0, 1, -1, -2):
        assert builder.metadata_at(i) == (builder.timestamp_at(i), builder.key_size_at(i), builder.value_size_at(i))
    assert builder.metadata_at(0) == (NOW + 7, 3, -1) and builder.metadata_at(1) == (NOW - 3, -1, 4)
    for bad in (2, -3):
        with pytest.raises(IndexError):
            builder.metadata_at(bad)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_stamp_build_is_build_with_the_producer_stamp(codec):
    """The producer's positional stamp (ProducerBatch.build) gives build(**stamp)'s bytes, and
    like build leaves the builder's own options alone."""
    builder = BatchBuilder(compression=codec, is_transactional=True, base_offset=5)
    builder.append(b"k", b"v" * 300, None, NOW)
    builder.append(None, b"w", None, NOW + 1)
    stamped = builder.stamp_build(1 << 40, 7, (1 << 31) - 1)
    assert stamped == builder.build(producer_id=1 << 40, producer_epoch=7, base_sequence=(1 << 31) - 1)
    batch = RecordBatch.parse(stamped)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1 << 40, 7, (1 << 31) - 1)
    assert batch.is_transactional and batch.base_offset == 5
    unstamped = RecordBatch.parse(builder.build())
    assert (unstamped.producer_id, unstamped.producer_epoch, unstamped.base_sequence) == (
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_SEQUENCE,
    )


def test_a_closed_empty_builder_refuses_its_first_record():
    builder = BatchBuilder(max_bytes=1 << 20)
    builder.close()
    assert builder.try_append(b"k", b"v") == -1 and builder.record_count == 0
    with pytest.raises(ValueError, match="at least one record"):
        builder.build()


def test_appends_after_a_build_are_in_the_next_build():
    builder = BatchBuilder()
    builder.append(b"a", b"1", None, NOW)
    first = builder.build()
    builder.append(b"b", b"2", None, NOW + 1)
    values = [r.value for r in RecordBatch.parse(builder.build()).records()]
    assert values == [b"1", b"2"] and len(RecordBatch.parse(first).records()) == 1


def test_an_oversized_first_record_makes_its_own_batch():
    builder = BatchBuilder(max_bytes=10, compression=Compression.GZIP)
    assert builder.try_append(b"k", b"x" * 500) == 0
    assert builder.try_append(b"k", b"y") == -1
    assert builder.estimated_size > builder.max_bytes
    assert [r.value for r in RecordBatch.parse(builder.build()).records()] == [b"x" * 500]


def test_accessors_per_record():
    builder = BatchBuilder()
    builder.append("ké", None, [("h", b"1")], NOW + 7)
    builder.append(None, bytearray(b"abc"), None, NOW - 3)  # a negative delta
    builder.append(memoryview(b"0123456789")[2:5], "", [], NOW)
    assert [builder.timestamp_at(i) for i in range(3)] == [NOW + 7, NOW - 3, NOW]
    assert [builder.key_size_at(i) for i in range(3)] == [3, -1, 3]  # "ké" is 3 UTF-8 bytes
    assert [builder.value_size_at(i) for i in range(3)] == [-1, 3, 0]
    assert builder.timestamp_at(-1) == NOW and builder.key_size_at(-3) == 3
    assert builder.max_timestamp == NOW + 7
    for bad in (3, -4):
        with pytest.raises(IndexError):
            builder.timestamp_at(bad)
    records = RecordBatch.parse(builder.build()).records()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("ké".encode(), None, NOW + 7),
        (None, b"abc", NOW - 3),
        (b"234", b"", NOW),
    ]
    assert BatchBuilder().max_timestamp is None


def test_a_missing_timestamp_is_now():
    builder = BatchBuilder()
    before = time.time_ns() // 1_000_000
    builder.append(b"k", b"v")
    builder.try_append(b"k", b"v", None, None)
    after = time.time_ns() // 1_000_000
    assert all(before <= builder.timestamp_at(i) <= after for i in range(2))


def test_options_and_the_default_limit():
    builder = BatchBuilder(
        max_bytes=1 << 70,
        producer_id=9,
        producer_epoch=2,
        base_sequence=5,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=NOW + 99,
        base_offset=40,
    )
    assert builder.max_bytes == (1 << 63) - 1  # "no limit" past int64 stays no limit
    assert BatchBuilder().max_bytes == 16384
    builder.append(b"k", b"v", None, NOW)
    batch = RecordBatch.parse(builder.build())
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (40, 9, 2, 5)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == NOW + 99
    assert RecordBatch.parse(builder.build(base_sequence=77, producer_epoch=3)).base_sequence == 77


# ---- bad input: typed errors, and nothing changes --------------------------------------------------------


@pytest.mark.parametrize(
    "args, error",
    [
        ((1, b"v"), TypeError),
        ((b"k", [1, 2]), TypeError),
        ((b"k", b"v", [(None, b"x")]), TypeError),
        ((b"k", b"v", [("h", 5)]), TypeError),
        ((b"k", b"v", [("h",)]), ValueError),
        ((b"k", b"v", 5), TypeError),
        ((b"k", b"v", None, 1.5), TypeError),
        ((b"k", b"v", None, "now"), TypeError),
        ((b"k", b"v", None, 1 << 63), ValueError),
        ((memoryview(b"abcdef")[::2], b"v"), TypeError),  # not contiguous
    ],
)
def test_bad_records_raise_and_change_nothing(args, error):
    builder = BatchBuilder()
    builder.append(b"k", b"v", [("h", b"1")], NOW)
    before = (builder.record_count, builder.estimated_size, builder.build())
    with pytest.raises(error):
        builder.try_append(*args)
    with pytest.raises(error):
        builder.append(*args)
    assert (builder.record_count, builder.estimated_size, builder.build()) == before


def test_a_timestamp_delta_past_int64_raises_and_changes_nothing():
    builder = BatchBuilder()
    builder.append(b"k", b"v", None, (1 << 63) - 1)
    with pytest.raises(ValueError):
        builder.append(b"k", b"v", None, -(1 << 63))
    assert builder.record_count == 1


def test_header_pairs_may_be_any_two_item_iterables():
    builder = BatchBuilder()
    builder.append(b"k", b"v", (["a", b"1"], (b"b", None), iter(("c", bytearray(b"3")))), NOW)
    (record,) = RecordBatch.parse(builder.build()).records()
    assert record.headers == [("a", b"1"), ("b", None), ("c", b"3")]


def test_unknown_compression_and_out_of_range_fields_are_typed():
    with pytest.raises(UnsupportedCompressionTypeError):
        BatchBuilder(compression=7)
    builder = BatchBuilder()
    builder.append(b"k", b"v", None, NOW)
    with pytest.raises(UnsupportedCompressionTypeError):
        builder.build(compression=5)
    with pytest.raises(ValueError, match="out of range"):
        builder.build(producer_epoch=1 << 15)
    with pytest.raises(ValueError, match="out of range"):
        BatchBuilder(base_sequence=1 << 31)
    with pytest.raises(UnsupportedCompressionTypeError):
        BatchBuilder(compression="gzip")
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_bytes'"):
        builder.build(max_bytes=10)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        BatchBuilder(batch_size=10)
    with pytest.raises(TypeError):
        BatchBuilder(16384)  # keywords only, as before


def test_batch_builder_is_the_native_class():
    builder = BatchBuilder()
    assert BatchBuilder is _native.RecordBatchBuilder  # no Python layer on the per-record path
    assert not hasattr(builder, "__dict__")
    with pytest.raises(AttributeError):
        builder.max_bytes = 5  # read-only, as the producer only reads it


@settings(max_examples=20, deadline=None)
@given(codec=st.sampled_from(CODECS))
def test_a_large_compressed_batch_builds_the_same_twice(codec):
    # past the size at which compression runs without the GIL (from a copy of the records)
    builder = BatchBuilder(max_bytes=1 << 30, compression=codec)
    for i in range(3_000):
        builder.append(b"key-%d" % i, b"value-%d" % i * 12, None, NOW + i)
    assert builder.estimated_size > 256 * 1024
    data = builder.build()
    assert data == builder.build()
    assert len(kafka_python_records(data)[1]) == 3_000
