"""`__consumer_offsets` offset-commit key/value schemas (docs/kafka-formats.md §4.2).

Checked three ways: hand-assembled golden bytes, kafka-python's schema types as an
independent oracle in both directions, and property-based round trips.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from txlog.schemas.offset_log import (
    GroupMetadataKey,
    OffsetKey,
    OffsetValue,
    OtherKey,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)

try:  # kafka-python 2.x
    from kafka.protocol.types import (
        CompactString,
        Int16,
        Int32,
        Int64,
        Schema,
        String,
        TaggedFields,
    )
except ImportError:  # kafka-python 3.x moved the hand-written types
    from kafka.protocol.old.types import (
        CompactString,
        Int16,
        Int32,
        Int64,
        Schema,
        String,
        TaggedFields,
    )

TS = 1_700_000_000_000

# --- kafka-python oracle: OffsetCommitKey/Value.json spelled with kafka-python's types ---

ORACLE_OFFSET_KEY = Schema(
    ("version", Int16), ("group", String("utf-8")), ("topic", String("utf-8")), ("partition", Int32)
)
ORACLE_GROUP_METADATA_KEY = Schema(("version", Int16), ("group", String("utf-8")))

_V0 = (("offset", Int64), ("metadata", String("utf-8")), ("commit_timestamp", Int64))
ORACLE_VALUES = {
    0: Schema(("version", Int16), *_V0),
    1: Schema(("version", Int16), *_V0, ("expire_timestamp", Int64)),
    2: Schema(("version", Int16), *_V0),
    3: Schema(
        ("version", Int16),
        ("offset", Int64),
        ("leader_epoch", Int32),
        ("metadata", String("utf-8")),
        ("commit_timestamp", Int64),
    ),
    4: Schema(
        ("version", Int16),
        ("offset", Int64),
        ("leader_epoch", Int32),
        ("metadata", CompactString("utf-8")),
        ("commit_timestamp", Int64),
        ("tags", TaggedFields),
    ),
}


def oracle_decode_value(data: bytes) -> OffsetValue:
    """kafka-python's reading of our bytes; fields a version lacks take Kafka's defaults."""
    version = Int16.decode(io.BytesIO(data[:2]))
    buf = io.BytesIO(data)
    schema = ORACLE_VALUES[version]
    # not strict: kafka-python's decode drops an empty trailing tagged-fields value ("tags" then absent)
    fields = dict(zip(schema.names, schema.decode(buf), strict=False))
    assert buf.read() == b"", "kafka-python left bytes unread"
    assert fields.get("tags", {}) == {}
    return OffsetValue(
        offset=fields["offset"],
        metadata=fields["metadata"],
        commit_timestamp=fields["commit_timestamp"],
        leader_epoch=fields.get("leader_epoch", -1),
        expire_timestamp=fields.get("expire_timestamp", -1),
    )


def oracle_encode_value(value: OffsetValue, version: int) -> bytes:
    schema = ORACLE_VALUES[version]
    by_name = {
        "version": version,
        "offset": value.offset,
        "leader_epoch": value.leader_epoch,
        "metadata": value.metadata,
        "commit_timestamp": value.commit_timestamp,
        "expire_timestamp": value.expire_timestamp,
        "tags": {},
    }
    return schema.encode([by_name[name] for name in schema.names])


def as_version(value: OffsetValue, version: int) -> OffsetValue:
    """What survives a write at `version`: absent fields fall back to their defaults."""
    return OffsetValue(
        offset=value.offset,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        leader_epoch=value.leader_epoch if version >= 3 else -1,
        expire_timestamp=value.expire_timestamp if version == 1 else -1,
    )


# --- golden bytes, assembled by hand from docs/kafka-formats.md §4.2 ----------------

GOLDEN_KEY = OffsetKey("g", "t", 7)
GOLDEN_KEY_V1 = bytes.fromhex(
    "0001"  # key type 1: offset commit (what current brokers write)
    "0001"
    "67"  # i16 len 1, "g"
    "0001"
    "74"  # i16 len 1, "t"
    "00000007"  # partition 7
)

GOLDEN_VALUE = OffsetValue(offset=42, metadata="m", commit_timestamp=TS, leader_epoch=5, expire_timestamp=TS + 1)
GOLDEN_VALUES = {
    0: bytes.fromhex(
        "0000"
        "000000000000002a"  # version 0, offset 42
        "0001"
        "6d"  # metadata "m" (i16 length)
        "0000018bcfe56800"  # commit timestamp
    ),
    1: bytes.fromhex(
        "0001000000000000002a00016d0000018bcfe568000000018bcfe56801"  # expire timestamp (only v1 has it)
    ),
    2: bytes.fromhex(
        "0002000000000000002a00016d0000018bcfe56800"  # same layout as v0
    ),
    3: bytes.fromhex(
        "0003"
        "000000000000002a"
        "00000005"  # leader epoch 5, before the metadata
        "0001"
        "6d"
        "0000018bcfe56800"
    ),
    4: bytes.fromhex(
        "0004"
        "000000000000002a"
        "00000005"
        "02"
        "6d"  # compact string: uvarint(1 + 1), "m"
        "0000018bcfe56800"
        "00"  # empty tag section
    ),
}


@pytest.mark.parametrize("version", range(5))
def test_golden_values(version):
    expected = GOLDEN_VALUES[version]
    assert encode_offset_value(GOLDEN_VALUE, version) == expected
    assert decode_offset_value(expected) == as_version(GOLDEN_VALUE, version)
    assert oracle_decode_value(expected) == as_version(GOLDEN_VALUE, version)
    assert oracle_encode_value(GOLDEN_VALUE, version) == expected


def test_golden_key():
    assert encode_offset_key(GOLDEN_KEY) == GOLDEN_KEY_V1
    assert encode_offset_key(GOLDEN_KEY, 0) == b"\x00\x00" + GOLDEN_KEY_V1[2:]
    assert decode_key(GOLDEN_KEY_V1) == GOLDEN_KEY
    assert decode_key(b"\x00\x00" + GOLDEN_KEY_V1[2:]) == GOLDEN_KEY


def test_default_value_version_is_3():
    assert encode_offset_value(GOLDEN_VALUE) == GOLDEN_VALUES[3]


# --- keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        OffsetKey("group-1", "orders", 0),
        OffsetKey("", "", -1),
        OffsetKey("gruppe-ü-😀", "トピック", 2147483647),
        OffsetKey("g" * 32767, "t", 1),
    ],
)
@pytest.mark.parametrize("version", [0, 1])
def test_offset_key_round_trip_and_oracle(key, version):
    data = encode_offset_key(key, version)
    assert decode_key(data) == key
    assert ORACLE_OFFSET_KEY.decode(io.BytesIO(data)) == (version, key.group, key.topic, key.partition)
    assert decode_key(ORACLE_OFFSET_KEY.encode((version, key.group, key.topic, key.partition))) == key


def test_group_metadata_key_is_recognised():
    data = bytes.fromhex("0002000767726f75702d31")  # type 2, "group-1"
    assert decode_key(data) == GroupMetadataKey("group-1")
    assert decode_key(ORACLE_GROUP_METADATA_KEY.encode((2, "grüppe"))) == GroupMetadataKey("grüppe")


@pytest.mark.parametrize("version", [9, 10, 16, 32767])
def test_newer_record_types_are_recognised_not_decoded(version):
    """Share, streams and regex records (types 9+) are skipped (3..8: test_consumer_group_records.py)."""
    body = b"\x00\x05group\xde\xad\xbe\xef"  # whatever the newer schema holds
    assert decode_key(version.to_bytes(2, "big") + body) == OtherKey(version)
    assert decode_key(version.to_bytes(2, "big")) == OtherKey(version)


def test_bad_key_arguments_are_caller_errors():
    for version in (2, 3, -1):
        with pytest.raises(ValueError):
            encode_offset_key(GOLDEN_KEY, version)
    with pytest.raises(ValueError):
        encode_offset_key(OffsetKey("g", "t", 1 << 31))
    with pytest.raises(ValueError):
        encode_offset_key(OffsetKey("g" * 32768, "t", 0))


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"\xff\xff" + GOLDEN_KEY_V1[2:], id="negative-version"),
        pytest.param(b"\x80\x00", id="min-version"),
        pytest.param(GOLDEN_KEY_V1 + b"\x00", id="trailing-byte"),
        pytest.param(bytes.fromhex("0002 0001 67 00"), id="group-metadata-trailing"),
        pytest.param(bytes.fromhex("0001 ffff 0001 74 00000007"), id="null-group"),
        pytest.param(bytes.fromhex("0001 0001 67 ffff 00000007"), id="null-topic"),
        pytest.param(bytes.fromhex("0002 ffff"), id="null-group-metadata-group"),
        pytest.param(bytes.fromhex("0001 0002 c328 0001 74 00000007"), id="invalid-utf8"),
        pytest.param(None, id="null-key"),
    ],
)
def test_malformed_keys(bad):
    with pytest.raises(CorruptRecordError):
        decode_key(bad)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(GOLDEN_KEY_V1, id="offset-key"),
        pytest.param(bytes.fromhex("0002 0007 67726f75702d31"), id="group-metadata-key"),
    ],
)
def test_truncated_keys(data):
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_key(data[:cut])


def test_truncated_other_key_header():
    for cut in (0, 1):
        with pytest.raises(CorruptRecordError):
            decode_key(b"\x00\x03"[:cut])


# --- values ---------------------------------------------------------------------------


def test_a_null_value_decodes_as_a_tombstone():
    assert decode_offset_value(None) is None


@pytest.mark.parametrize("version", range(5))
def test_defaults_and_non_ascii_metadata(version):
    for value in (OffsetValue(0), OffsetValue(-1, "", -1), OffsetValue(2**63 - 1, "ünïcødé-😀", TS, 2**31 - 1, TS)):
        data = encode_offset_value(value, version)
        assert decode_offset_value(data) == as_version(value, version)
        assert oracle_decode_value(data) == as_version(value, version)


@pytest.mark.parametrize("version", range(4))
def test_null_metadata_reads_as_empty(version):
    data = oracle_encode_value(OffsetValue(1), version)  # metadata "" -> i16 length 0
    meta_at = 14 if version == 3 else 10
    assert data[meta_at : meta_at + 2] == b"\x00\x00"
    null = data[:meta_at] + b"\xff\xff" + data[meta_at + 2 :]
    assert decode_offset_value(null) == as_version(OffsetValue(1), version)


def test_null_compact_metadata_reads_as_empty():
    data = bytes.fromhex("00040000000000000001ffffffff00ffffffffffffffff00")
    assert decode_offset_value(data) == OffsetValue(1)


def test_v4_skips_unknown_tags():
    data = GOLDEN_VALUES[4][:-1] + bytes.fromhex("020101ff0702abcd")
    assert decode_offset_value(data) == as_version(GOLDEN_VALUE, 4)


def test_v4_reads_the_tagged_topic_id():
    """Kafka 4.4 writes tag 0, the topic's id; the offsets decoder prints it as Kafka's Uuid text."""
    from txlog.schemas.message_parsers import offsets_parser
    from txlog.schemas.offset_log import OffsetKey, encode_offset_key

    topic_id = bytes(range(1, 17))
    data = GOLDEN_VALUES[4][:-1] + bytes.fromhex("010010") + topic_id
    value = decode_offset_value(data)
    assert value.topic_id == "AQIDBAUGBwgJCgsMDQ4PEA"

    class Record:
        offset, key, value = 0, encode_offset_key(OffsetKey("g", "t", 0)), data

    _, payload = offsets_parser(Record())
    assert payload is not None and payload.endswith(',"topicId":"AQIDBAUGBwgJCgsMDQ4PEA"}}')


def test_fields_a_version_lacks_are_dropped():
    v = OffsetValue(5, "x", TS, leader_epoch=9, expire_timestamp=TS + 10)
    assert decode_offset_value(encode_offset_value(v, 0)) == OffsetValue(5, "x", TS)
    assert decode_offset_value(encode_offset_value(v, 1)) == OffsetValue(5, "x", TS, expire_timestamp=TS + 10)
    assert decode_offset_value(encode_offset_value(v, 3)) == OffsetValue(5, "x", TS, leader_epoch=9)
    assert decode_offset_value(encode_offset_value(v, 4)) == OffsetValue(5, "x", TS, leader_epoch=9)


def test_bad_value_arguments_are_caller_errors():
    for version in (-1, 5):
        with pytest.raises(ValueError):
            encode_offset_value(GOLDEN_VALUE, version)
    with pytest.raises(ValueError):
        encode_offset_value(OffsetValue(1 << 63))
    with pytest.raises(ValueError):
        encode_offset_value(OffsetValue(1, leader_epoch=1 << 31))
    with pytest.raises(ValueError):
        encode_offset_value(OffsetValue(1, "m" * 32768), 3)


@pytest.mark.parametrize("version", range(5))
def test_truncated_values_at_every_byte(version):
    data = GOLDEN_VALUES[version]
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_offset_value(data[:cut])


@pytest.mark.parametrize("version", range(5))
def test_bytes_after_a_value_are_corruption(version):
    with pytest.raises(CorruptRecordError):
        decode_offset_value(GOLDEN_VALUES[version] + b"\x00")


@pytest.mark.parametrize("version", [b"\x00\x05", b"\xff\xff", b"\x7f\xff"])
def test_unknown_value_version(version):
    with pytest.raises(CorruptRecordError, match="version"):
        decode_offset_value(version + GOLDEN_VALUES[3][2:])


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(bytes.fromhex("0003 000000000000002a 00000005 fffe 0000018bcfe56800"), id="negative-length"),
        pytest.param(bytes.fromhex("0003 000000000000002a 00000005 0002 fffe 0000018bcfe56800"), id="invalid-utf8"),
        pytest.param(
            bytes.fromhex("0004 000000000000002a 00000005 ffffffffff 0000018bcfe56800 00"), id="uvarint-too-long"
        ),
        pytest.param(GOLDEN_VALUES[4][:-1] + bytes.fromhex("05 0102"), id="tag-count-exceeds-bytes"),
    ],
)
def test_malformed_values(bad):
    with pytest.raises(CorruptRecordError):
        decode_offset_value(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_bytes_only_ever_raise_corrupt_record(data):
    for prefix in (b"", b"\x00\x00", b"\x00\x01", b"\x00\x03", b"\x00\x04"):
        try:
            decode_offset_value(prefix + data)
        except CorruptRecordError:
            pass
    for prefix in (b"", b"\x00\x01", b"\x00\x02"):
        try:
            decode_key(prefix + data)
        except CorruptRecordError:
            pass


# --- property-based round trips against the oracle ----------------------------------

I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)

offset_values = st.builds(
    OffsetValue,
    offset=I64,
    metadata=st.text(max_size=30),
    commit_timestamp=I64,
    leader_epoch=I32,
    expire_timestamp=I64,
)


@settings(max_examples=300, deadline=None)
@given(offset_values, st.integers(0, 4))
def test_property_value_round_trip_and_oracle(value, version):
    data = encode_offset_value(value, version)
    expected = as_version(value, version)
    assert decode_offset_value(data) == expected
    assert oracle_decode_value(data) == expected
    assert oracle_encode_value(value, version) == data
    assert decode_offset_value(oracle_encode_value(value, version)) == expected


@settings(max_examples=200, deadline=None)
@given(st.builds(OffsetKey, group=st.text(max_size=20), topic=st.text(max_size=20), partition=I32), st.integers(0, 1))
def test_property_key_round_trip_and_oracle(key, version):
    data = encode_offset_key(key, version)
    assert decode_key(data) == key
    assert ORACLE_OFFSET_KEY.decode(io.BytesIO(data)) == (version, key.group, key.topic, key.partition)
