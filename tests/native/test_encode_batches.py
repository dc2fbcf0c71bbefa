"""The producer's bulk path: storage.records.encode_batches / stamp_batch and
txlog.clients.partitioner.partition_many (native code in storage/native/src/encoder.rs).

Oracles: kafka-python's DefaultRecordBatch decodes every batch independently (CRC, records,
header fields); storage.records.BatchBuilder, fed the same records one append at a time,
decides where batches split - encode_batches must split at the same records and, since
both end in the same encoder and compressor, produce the same bytes. partition_many must
place every key where the per-key partitioner places it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from storage.records import (
    CRC_OFFSET,
    HEADER_SIZE,
    BatchBuilder,
    Compression,
    EncodedBatch,
    RecordBatch,
    encode_batches,
    stamp_batch,
)
from txlog.clients.partitioner import NO_PARTITION, named_partitioner, partition_many

default_records = pytest.importorskip("kafka.record.default_records")
kafka_codec = pytest.importorskip("kafka.codec")
DefaultRecordBatch = default_records.DefaultRecordBatch

NOW = 1_700_000_000_000
#: The codecs kafka-python (the oracle) can inflate here.
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


def kafka_python_records(batch: EncodedBatch) -> list[tuple]:
    """(timestamp, key, value, headers) of every record, as kafka-python reads the batch."""
    decoded = DefaultRecordBatch(bytes(batch.data))
    assert decoded.validate_crc()
    assert decoded.records_count == batch.record_count
    assert decoded.max_timestamp == batch.max_timestamp
    records = list(decoded)
    assert [r.offset for r in records] == list(range(batch.record_count))
    return [(r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in records]


def builder_batches(values, keys, headers, timestamps, *, max_bytes, compression, is_transactional) -> list[bytes]:
    """The batches BatchBuilder makes from the same records, appended one by one as a producer does."""
    out = []
    builder = None
    for i, value in enumerate(values):
        args = (keys[i], value, headers[i], timestamps[i])
        if builder is not None and builder.append(*args):
            continue
        if builder is not None:
            out.append(builder.build())
        builder = BatchBuilder(max_bytes=max_bytes, compression=compression, is_transactional=is_transactional)
        assert builder.append(*args)  # the first record of a batch is always accepted
    if builder is not None:
        out.append(builder.build())
    return out


def as_bytes(item):
    return item.encode("utf-8") if isinstance(item, str) else item


# ---- encode_batches against both oracles ---------------------------------------------------------------

payload = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=20)))
record = st.tuples(
    payload,
    payload,
    st.one_of(st.none(), st.lists(header, max_size=3)),
    st.one_of(st.none(), st.integers(min_value=NOW - 5_000, max_value=NOW + 5_000)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record, min_size=1, max_size=60),
    codec=st.sampled_from(CODECS),
    max_bytes=st.integers(min_value=0, max_value=6_000),
    is_transactional=st.booleans(),
    columns=st.sets(st.sampled_from(["keys", "headers", "timestamps"])),
)
def test_batches_decode_and_split_as_batch_builder(records, codec, max_bytes, is_transactional, columns):
    keys, values, headers, timestamps = (list(column) for column in zip(*records, strict=True))
    keys = keys if "keys" in columns else [None] * len(values)
    headers = headers if "headers" in columns else [None] * len(values)
    timestamps = timestamps if "timestamps" in columns else [None] * len(values)
    batches = encode_batches(
        values,
        keys if "keys" in columns else None,
        headers if "headers" in columns else None,
        timestamps if "timestamps" in columns else None,
        max_bytes=max_bytes,
        compression=codec,
        is_transactional=is_transactional,
        now_ms=NOW,
    )

    resolved = [NOW if ts is None else ts for ts in timestamps]
    expected = [(ts, k, v, list(h or [])) for ts, k, v, h in zip(resolved, keys, values, headers, strict=True)]
    assert [r for b in batches for r in kafka_python_records(b)] == expected
    built = builder_batches(
        values, keys, headers, resolved, max_bytes=max_bytes, compression=codec, is_transactional=is_transactional
    )
    assert [bytes(b.data) for b in batches] == built
    for b in batches:
        parsed = RecordBatch.parse(b.data)
        assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (-1, -1, -1)
        assert parsed.is_transactional == is_transactional and parsed.compression == codec
        assert parsed.base_timestamp == resolved[sum(x.record_count for x in batches[: batches.index(b)])]


def record_of(size_hint: int) -> bytes:
    return b"v" * size_hint


def test_a_batch_fills_up_to_max_bytes_exactly_and_not_a_byte_more():
    values = [record_of(100)] * 3
    whole = encode_batches(values, max_bytes=1 << 20, now_ms=NOW)
    assert len(whole) == 1
    exact = len(whole[0].data)
    assert [b.record_count for b in encode_batches(values, max_bytes=exact, now_ms=NOW)] == [3]
    assert [b.record_count for b in encode_batches(values, max_bytes=exact - 1, now_ms=NOW)] == [2, 1]


def test_an_oversized_record_makes_a_batch_of_its_own():
    values = [b"a", b"b" * 5_000, b"c"]
    batches = encode_batches(values, max_bytes=1_000, now_ms=NOW)
    assert [b.record_count for b in batches] == [1, 1, 1]
    assert len(batches[1].data) > 1_000


def test_200_small_records_split_into_16k_batches_as_the_builder_does():
    values = [b"%0100d" % i for i in range(2_000)]
    keys = [b"%010d" % i for i in range(2_000)]
    batches = encode_batches(values, keys, max_bytes=16_384, now_ms=NOW)
    assert len(batches) > 10 and all(len(b.data) <= 16_384 for b in batches)
    assert [bytes(b.data) for b in batches] == builder_batches(
        values,
        keys,
        [None] * 2_000,
        [NOW] * 2_000,
        max_bytes=16_384,
        compression=Compression.NONE,
        is_transactional=False,
    )


def test_timestamps_may_run_backwards_and_max_timestamp_is_the_largest():
    batches = encode_batches([b"a", b"b", b"c"], timestamps=[NOW, NOW - 10, NOW + 7], max_bytes=1 << 20)
    assert batches[0].max_timestamp == NOW + 7
    assert [r[0] for r in kafka_python_records(batches[0])] == [NOW, NOW - 10, NOW + 7]


def test_no_timestamps_means_now():
    (batch,) = encode_batches([b"a", b"b"], max_bytes=100)
    assert batch.max_timestamp == RecordBatch.parse(batch.data).base_timestamp > NOW


def test_items_may_be_any_bytes_like_or_str():
    values = [b"b", bytearray(b"ba"), memoryview(b"xmvx")[1:3], "h\u00e9", None]
    keys = ["k", None, bytearray(b"kb"), memoryview(b"km"), b"kk"]
    (batch,) = encode_batches(
        values, keys, [[("n\u00e9", b"v"), (b"raw", None)], None, [], None, None], max_bytes=1 << 20, now_ms=NOW
    )
    assert kafka_python_records(batch) == [
        (NOW, b"k", b"b", [("n\u00e9", b"v"), ("raw", None)]),
        (NOW, None, b"ba", []),
        (NOW, b"kb", b"mv", []),
        (NOW, b"km", "h\u00e9".encode(), []),
        (NOW, b"kk", None, []),
    ]


@pytest.mark.parametrize(
    ("values", "keys", "message"),
    [
        ([b"a", b"b", 3], None, "value at index 2"),
        ([b"a", b"b"], [b"k", 1.5], "key at index 1"),
    ],
)
def test_an_item_of_another_type_is_a_type_error_naming_its_index(values, keys, message):
    with pytest.raises(TypeError, match=message):
        encode_batches(values, keys, max_bytes=100, now_ms=NOW)


def test_a_timestamp_that_is_not_an_int_names_its_index():
    with pytest.raises(TypeError, match="timestamp at index 1"):
        encode_batches([b"a", b"b"], timestamps=[NOW, "soon"], max_bytes=100)


@pytest.mark.parametrize("column", ["keys", "values"])
def test_a_single_str_or_bytes_is_not_taken_for_a_column(column):
    with pytest.raises(TypeError, match=f"{column} must be a sequence"):
        encode_batches(**{"values": [b"a", b"b"], column: "ab"}, max_bytes=100, now_ms=NOW)


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        encode_batches([b"a", b"b"], [b"k"], max_bytes=100, now_ms=NOW)
    with pytest.raises(ValueError, match="differ in length"):
        encode_batches([b"a"], timestamps=[NOW, NOW], max_bytes=100)


def test_no_values_make_no_batches():
    assert encode_batches([], max_bytes=100) == []


def test_an_unknown_compression_is_refused():
    from storage.errors import UnsupportedCompressionTypeError

    with pytest.raises(UnsupportedCompressionTypeError):
        encode_batches([b"a"], max_bytes=100, compression=5)


def test_a_large_call_encoded_without_the_gil_is_the_same():
    # past 256 KiB the native encoder releases the GIL; the bytes must not change
    values = [b"%01000d" % i for i in range(400)]
    for codec in (Compression.NONE, Compression.GZIP):
        batches = encode_batches(values, max_bytes=16_384, compression=codec, now_ms=NOW)
        assert [bytes(b.data) for b in batches] == builder_batches(
            values, [None] * 400, [None] * 400, [NOW] * 400, max_bytes=16_384, compression=codec, is_transactional=False
        )


# ---- stamp_batch --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_stamped_batch_passes_its_crc_check_and_carries_the_ids(codec):
    (batch,) = encode_batches(
        [b"a", None, b"c"], [b"k", b"k", None], max_bytes=1 << 20, compression=codec, is_transactional=True, now_ms=NOW
    )
    before = kafka_python_records(batch)
    stamp_batch(batch.data, 4242, 7, 2_147_483_000)
    parsed = RecordBatch.parse(batch.data)  # verifies the CRC
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (4242, 7, 2_147_483_000)
    assert [r.sequence for r in parsed.records()] == [2_147_483_000, 2_147_483_001, 2_147_483_002]
    decoded = DefaultRecordBatch(bytes(batch.data))
    assert decoded.validate_crc() and decoded.is_transactional
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (4242, 7, 2_147_483_000)
    assert kafka_python_records(batch) == before


def test_a_batch_can_be_stamped_again_after_an_epoch_bump():
    (batch,) = encode_batches([b"a"], max_bytes=100, now_ms=NOW)
    stamp_batch(batch.data, 9, 0, 5)
    stamp_batch(batch.data, 9, 1, 0)
    parsed = RecordBatch.parse(batch.data)
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (9, 1, 0)


def test_batches_side_by_side_in_one_buffer_are_stamped_through_memoryviews():
    first, second = encode_batches([b"a" * 50, b"b" * 50], max_bytes=120, now_ms=NOW)
    joined = first.data + second.data
    view = memoryview(joined)
    stamp_batch(view[: len(first.data)], 5, 1, 0)
    stamp_batch(view[len(first.data) :], 5, 1, 1)
    view.release()
    batches = [RecordBatch.parse(joined), RecordBatch.parse(joined, len(first.data))]
    assert [(b.producer_id, b.base_sequence) for b in batches] == [(5, 0), (5, 1)]


def test_stamping_a_damaged_batch_leaves_its_crc_wrong():
    # the CRC is updated for the change, not recomputed: damage stays detectable
    (batch,) = encode_batches([b"abc"], max_bytes=100, now_ms=NOW)
    batch.data[-1] ^= 0xFF
    stamp_batch(batch.data, 1, 0, 0)
    with pytest.raises(CorruptRecordError, match="CRC"):
        RecordBatch.parse(batch.data)
    assert not DefaultRecordBatch(bytes(batch.data)).validate_crc()


def test_stamping_needs_exactly_one_batch_in_a_writable_buffer():
    (batch,) = encode_batches([b"abc"], max_bytes=100, now_ms=NOW)
    with pytest.raises(TypeError, match="writable"):
        stamp_batch(bytes(batch.data), 1, 0, 0)
    with pytest.raises(ValueError, match="one whole batch"):
        stamp_batch(batch.data + b"\x00", 1, 0, 0)
    with pytest.raises(CorruptRecordError):
        stamp_batch(bytearray(batch.data[: HEADER_SIZE - 1]), 1, 0, 0)
    wrong_magic = bytearray(batch.data)
    wrong_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        stamp_batch(wrong_magic, 1, 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        stamp_batch(batch.data, 1, 1 << 15, 0)


def test_stamping_rewrites_only_the_producer_fields_and_the_crc():
    (batch,) = encode_batches([b"abc", b"de"], max_bytes=100, now_ms=NOW)
    before = bytes(batch.data)
    stamp_batch(batch.data, 1, 2, 3)
    changed = {i for i, (a, b) in enumerate(zip(before, batch.data, strict=True)) if a != b}
    assert changed <= set(range(CRC_OFFSET, CRC_OFFSET + 4)) | set(range(43, 57))


# ---- partition_many ----------------------------------------------------------------------------------

key = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=12))


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(key, max_size=30),
    count=st.integers(min_value=1, max_value=5_000),
    name=st.sampled_from(["murmur2", "murmur3"]),
)
def test_partition_many_places_every_key_as_the_per_key_partitioner(keys, count, name):
    one = named_partitioner(name)
    expected = [NO_PARTITION if k is None else one(as_bytes(k), count) for k in keys]
    assert partition_many(keys, count, name) == expected


def test_partition_many_takes_any_bytes_like_key():
    keys = [bytearray(b"abc"), memoryview(b"xabcx")[1:4], "abc", b"abc"]
    assert len(set(partition_many(keys, 1000))) == 1
    assert partition_many([b"abc"], 1000) == [107]  # Kafka's own placement among 1000 (kafka-python's test)


def test_partition_many_refuses_bad_keys_and_counts():
    with pytest.raises(TypeError, match="key at index 1"):
        partition_many([b"a", 5], 3)
    with pytest.raises(TypeError, match="key at index 0"):
        partition_many([5], 3, "murmur3")
    with pytest.raises(ValueError):
        partition_many([b"a"], 0)
    with pytest.raises(ValueError):
        partition_many([b"a"], 3, "crc32")
    with pytest.raises(TypeError, match="keys must be a sequence"):
        partition_many(b"ab", 3)


# ---- buffers: the producer's BufferPool hands settled batches' bytearrays back to the encoder ------


def _plain(count: int, size: int) -> list[bytes]:
    return [bytes([i % 251]) * size for i in range(count)]


def test_free_buffers_are_reused_and_the_bytes_are_those_of_new_ones():
    values = _plain(300, 100)
    fresh = encode_batches(values, max_bytes=4096, now_ms=NOW)
    spares = [bytearray(b"\xff" * 5000) for _ in range(3)]  # only the list refers to them
    ids = [id(b) for b in spares]
    reused = encode_batches(values, max_bytes=4096, now_ms=NOW, buffers=spares)
    assert [bytes(b.data) for b in reused] == [bytes(b.data) for b in fresh]  # old contents fully overwritten
    assert [id(b.data) for b in reused[:3]] == ids[::-1]  # taken from the end, each kept alive by its batch
    assert spares == [] and len(reused) > 3  # the rest were allocated


@given(held=st.lists(st.booleans(), min_size=1, max_size=12), count=st.integers(1, 200))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_buffer_anything_else_refers_to_is_never_written(held, count):
    """Property: whatever mix of free and still-referenced buffers is offered, every buffer
    still referenced elsewhere keeps its bytes (it is dropped from the list, not reused)."""
    offered = [bytearray(b"\xee" * 3000) for _ in held]
    outside = [buffer for buffer, keep in zip(offered, held, strict=True) if keep]  # references a reader still holds
    snapshots = [bytes(b) for b in outside]
    spares = list(offered)
    del offered
    out = encode_batches(_plain(count, 50), max_bytes=2048, now_ms=NOW, buffers=spares)
    assert [bytes(b) for b in outside] == snapshots
    assert not any(batch.data is b for batch in out for b in outside)
    values = _plain(count, 50)
    assert [bytes(b.data) for b in out] == [bytes(b.data) for b in encode_batches(values, max_bytes=2048, now_ms=NOW)]


def test_compressed_batches_leave_the_buffers_alone():
    spares = [bytearray(100)]
    out = encode_batches(_plain(50, 20), max_bytes=4096, now_ms=NOW, compression=Compression.GZIP, buffers=spares)
    assert len(spares) == 1 and all(batch.data is not spares[0] for batch in out)
