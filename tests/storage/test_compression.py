"""Compression codecs: round trips, the exact framings Kafka's Java reader needs, and typed failures."""

from __future__ import annotations

import gzip
import io
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.compression import Compression, compress, decompress
from storage.errors import CorruptRecordError, KafkaError, UnsupportedCompressionTypeError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]

SAMPLES = {
    "empty": b"",
    "one byte": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random": os.urandom(3000),
    # several codec blocks (snappy 32 KiB, lz4 64 KiB), part incompressible
    "large mixed": os.urandom(70_000) + b"abc" * 40_000,
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_each_codec_round_trips_every_sample(codec: Compression, name: str) -> None:
    data = SAMPLES[name]
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_accepts_memoryview_and_int_codes(codec: Compression) -> None:
    data = SAMPLES["text"]
    packed = compress(int(codec), memoryview(data))
    assert decompress(int(codec), memoryview(packed)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
def test_round_trip_property(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_enum_values_are_the_attribute_codes() -> None:
    assert [(c.name, int(c)) for c in Compression] == [("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]


@pytest.mark.parametrize("code", [5, 6, 7, 8, -1])
def test_unknown_codes_are_unsupported(code: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(code, b"data")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(code, b"data")


# --- gzip --------------------------------------------------------------------------


def test_gzip_writes_a_standard_gzip_stream() -> None:
    packed = compress(Compression.GZIP, SAMPLES["text"])
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == SAMPLES["text"]


def test_gzip_reads_several_members_like_java() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, packed) == b"first second"


# --- snappy ----------------------------------------------------------------------------


def test_snappy_writes_xerial_framing() -> None:
    data = SAMPLES["large mixed"]
    packed = compress(Compression.SNAPPY, data)
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    # walk the [i32 length + raw block] frames ourselves: each holds <= 32 KiB of input
    pos, out = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length]))
        assert len(block) <= 32 * 1024
        out.append(block)
        pos += 4 + length
    assert pos == len(packed)
    assert b"".join(out) == data


def test_snappy_reads_a_bare_raw_block() -> None:
    data = SAMPLES["text"]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_snappy_reads_concatenated_xerial_streams() -> None:
    packed = compress(Compression.SNAPPY, b"first ") + compress(Compression.SNAPPY, b"second")
    assert decompress(Compression.SNAPPY, packed) == b"first second"


@pytest.mark.parametrize("cut", [10, 18, 25])
def test_snappy_truncated_xerial_stream_is_corrupt(cut: int) -> None:
    packed = compress(Compression.SNAPPY, SAMPLES["text"])
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, packed[:cut])


def test_snappy_negative_block_length_is_corrupt() -> None:
    packed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", -5) + b"abc"
    with pytest.raises(CorruptRecordError, match="overruns"):
        decompress(Compression.SNAPPY, packed)


# --- lz4 ------------------------------------------------------------------------------------


def test_lz4_frame_has_independent_blocks_and_valid_header_checksum() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    packed = compress(Compression.LZ4, SAMPLES["large mixed"])
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # frame format version
    assert flg & 0x20, "Kafka's KafkaLZ4BlockInputStream rejects linked blocks"
    assert not flg & 0x08, "no content size, like Kafka's writer"
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size
    # python-lz4 verifies the header checksum byte; a wrong one fails here
    assert lz4_frame.decompress(packed) == SAMPLES["large mixed"]


def test_lz4_stores_incompressible_blocks_raw() -> None:
    data = os.urandom(1000)
    packed = compress(Compression.LZ4, data)
    (size,) = struct.unpack_from("<I", packed, 7)
    assert size == 0x80000000 | len(data)
    assert packed[11 : 11 + len(data)] == data
    assert packed[-4:] == b"\x00\x00\x00\x00"


def test_lz4_reads_frames_from_other_writers() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    data = SAMPLES["large mixed"]
    linked = lz4_frame.compress(data, block_linked=True, content_checksum=True, store_size=True)
    assert decompress(Compression.LZ4, linked) == data


# --- zstd -------------------------------------------------------------------------------------


def test_zstd_writes_a_standard_frame() -> None:
    zstandard = pytest.importorskip("zstandard")
    packed = compress(Compression.ZSTD, SAMPLES["text"])
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == SAMPLES["text"]


def test_zstd_reads_streamed_frame_without_content_size() -> None:
    zstandard = pytest.importorskip("zstandard")
    sink = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(sink, closefd=False) as writer:
        writer.write(SAMPLES["large mixed"])
    assert decompress(Compression.ZSTD, sink.getvalue()) == SAMPLES["large mixed"]


# --- corruption ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated"])
def test_corrupt_input_raises_corrupt_record_error(codec: Compression, damage: str) -> None:
    packed = compress(codec, SAMPLES["large mixed"])
    bad = {"empty": b"", "garbage": b"\x00garbage\xff" * 3, "truncated": packed[: len(packed) // 2]}[damage]
    with pytest.raises(CorruptRecordError):
        decompress(codec, bad)


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_kafka_errors(codec: Compression, data: bytes) -> None:
    try:
        decompress(codec, data)
    except KafkaError:
        pass


def test_snappy_block_claiming_an_impossible_size_is_rejected_before_allocating() -> None:
    # a 7-byte block whose length varint claims 32 MiB: no snappy data expands that much
    with pytest.raises(CorruptRecordError, match="claims"):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\x0fabc")
