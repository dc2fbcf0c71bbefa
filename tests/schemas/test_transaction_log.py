"""`__transaction_state` key/value schemas (docs/kafka-formats.md §4.1).

Three independent checks pin the bytes: golden byte strings assembled by hand from
the spec, kafka-python's schema types (the oracle) decoding what we write and
writing what we decode, and property-based round trips.
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from txlog.schemas.transaction_log import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

try:  # kafka-python 2.x
    from kafka.protocol.types import (
        Array,
        CompactArray,
        CompactString,
        Int8,
        Int16,
        Int32,
        Int64,
        Schema,
        String,
        TaggedFields,
    )
except ImportError:  # kafka-python 3.x moved the hand-written types
    from kafka.protocol.old.types import (
        Array,
        CompactArray,
        CompactString,
        Int8,
        Int16,
        Int32,
        Int64,
        Schema,
        String,
        TaggedFields,
    )

TS = 1_700_000_000_000

# --- kafka-python oracle: TransactionLogValue.json spelled with kafka-python's types ---

ORACLE_KEY = Schema(("version", Int16), ("transactional_id", String("utf-8")))

ORACLE_VALUE_V0 = Schema(
    ("version", Int16),
    ("producer_id", Int64),
    ("producer_epoch", Int16),
    ("timeout_ms", Int32),
    ("status", Int8),
    ("partitions", Array(("topic", String("utf-8")), ("partition_ids", Array(Int32)))),
    ("last_update_ms", Int64),
    ("start_ms", Int64),
)

ORACLE_VALUE_V1 = Schema(
    ("version", Int16),
    ("producer_id", Int64),
    ("producer_epoch", Int16),
    ("timeout_ms", Int32),
    ("status", Int8),
    (
        "partitions",
        CompactArray(
            ("topic", CompactString("utf-8")),
            ("partition_ids", CompactArray(Int32)),
            ("tags", TaggedFields),
        ),
    ),
    ("last_update_ms", Int64),
    ("start_ms", Int64),
    ("tags", TaggedFields),
)

# tag -> (attribute, kafka-python type, default on the wire per TransactionLogValue.json)
ORACLE_TAGS = {
    0: ("previous_producer_id", Int64, -1),
    1: ("next_producer_id", Int64, -1),
    2: ("client_transaction_version", Int16, 0),
    3: ("next_producer_epoch", Int16, -1),
}


def oracle_decode_value(data: bytes) -> TxnLogValue:
    """kafka-python's reading of our bytes, as a TxnLogValue; asserts it used every byte."""
    buf = io.BytesIO(data)
    version = Int16.decode(io.BytesIO(data[:2]))
    schema = ORACLE_VALUE_V1 if version == 1 else ORACLE_VALUE_V0
    # not strict: kafka-python's decode drops an empty trailing tagged-fields value ("tags" then absent)
    fields = dict(zip(schema.names, schema.decode(buf), strict=False))
    assert buf.read() == b"", "kafka-python left bytes unread"
    tags = {attr: default for attr, _, default in ORACLE_TAGS.values()}
    for tag, raw in fields.get("tags", {}).items():
        attr, typ, _ = ORACLE_TAGS[tag]
        tags[attr] = typ.decode(io.BytesIO(raw))
    pairs = []
    for element in fields["partitions"] or []:
        topic, ids = element[0], element[1]
        if version == 1:
            assert len(element) == 2, "nested struct carried tags"  # kafka-python drops empty tags
        pairs.extend((topic, p) for p in ids)
    return TxnLogValue(
        producer_id=fields["producer_id"],
        producer_epoch=fields["producer_epoch"],
        timeout_ms=fields["timeout_ms"],
        state=TxnState(fields["status"]),
        partitions=tuple(sorted(pairs)),
        last_update_ms=fields["last_update_ms"],
        start_ms=fields["start_ms"],
        **tags,
    )


def oracle_partitions_is_null(data: bytes) -> bool:
    version = Int16.decode(io.BytesIO(data[:2]))
    schema = ORACLE_VALUE_V1 if version == 1 else ORACLE_VALUE_V0
    # not strict: kafka-python drops an empty trailing tagged-fields value
    return dict(zip(schema.names, schema.decode(io.BytesIO(data)), strict=False))["partitions"] is None


def oracle_encode_value(value: TxnLogValue, version: int, reverse: bool = False) -> bytes:
    """kafka-python writing `value`; `reverse` writes topics and ids out of order, as a HashSet may."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in value.partitions:
        by_topic.setdefault(topic, []).append(partition)
    topics = sorted(by_topic, reverse=reverse)
    if version == 1:
        elements = [(t, sorted(by_topic[t], reverse=reverse), {}) for t in topics]
    else:
        elements = [(t, sorted(by_topic[t], reverse=reverse)) for t in topics]
    partitions = None if value.state == TxnState.EMPTY else elements
    head = [
        version,
        value.producer_id,
        value.producer_epoch,
        value.timeout_ms,
        int(value.state),
        partitions,
        value.last_update_ms,
        value.start_ms,
    ]
    if version == 0:
        return ORACLE_VALUE_V0.encode(head)
    tags = {}
    for tag in sorted(ORACLE_TAGS):
        attr, typ, default = ORACLE_TAGS[tag]
        if getattr(value, attr) != default:
            tags[tag] = typ.encode(getattr(value, attr))
    return ORACLE_VALUE_V1.encode([*head, tags])


# --- golden bytes, assembled by hand from docs/kafka-formats.md §4.1 -----------------

GOLDEN_KEY = bytes.fromhex(
    "0000"  # key version 0
    "0009"  # i16 string length 9
    "6d792d74786e2d6964"  # "my-txn-id"
)

GOLDEN_ONGOING = TxnLogValue(
    producer_id=42,
    producer_epoch=3,
    timeout_ms=60_000,
    state=TxnState.ONGOING,
    partitions=(("__consumer_offsets", 3), ("out", 0), ("out", 2)),
    last_update_ms=TS,
    start_ms=TS - 1000,
    client_transaction_version=2,
)
GOLDEN_ONGOING_V1 = bytes.fromhex(
    "0001"  # value version 1 (flexible)
    "000000000000002a"  # ProducerId 42
    "0003"  # ProducerEpoch 3
    "0000ea60"  # TransactionTimeoutMs 60000
    "01"  # TransactionStatus Ongoing
    "03"  # compact array: 2 topics + 1
    "13"
    "5f5f636f6e73756d65725f6f666673657473"  # compact string len 18+1, "__consumer_offsets"
    "02"
    "00000003"  #   PartitionIds: 1 + 1, [3]
    "00"  #   element tag section: no tags
    "04"
    "6f7574"  # compact string len 3+1, "out"
    "03"
    "00000000"
    "00000002"  #   PartitionIds: 2 + 1, [0, 2]
    "00"  #   element tag section: no tags
    "0000018bcfe56800"  # TransactionLastUpdateTimestampMs
    "0000018bcfe56418"  # TransactionStartTimestampMs (1000 ms earlier)
    "01"  # top-level tag section: 1 tag
    "02"
    "02"
    "0002"  #   tag 2 (ClientTransactionVersion), size 2, i16 2
)
GOLDEN_ONGOING_V0 = bytes.fromhex(
    "0000"  # value version 0 (non-flexible)
    "000000000000002a"
    "0003"
    "0000ea60"
    "01"
    "00000002"  # i32 array count: 2 topics
    "0012"
    "5f5f636f6e73756d65725f6f666673657473"  # i16 len 18, "__consumer_offsets"
    "00000001"
    "00000003"  #   i32 count 1, [3]
    "0003"
    "6f7574"  # i16 len 3, "out"
    "00000002"
    "00000000"
    "00000002"  #   i32 count 2, [0, 2]
    "0000018bcfe56800"
    "0000018bcfe56418"
)

GOLDEN_EMPTY = TxnLogValue(
    producer_id=7,
    producer_epoch=0,
    timeout_ms=60_000,
    state=TxnState.EMPTY,
    partitions=(),
    last_update_ms=TS,
    start_ms=-1,
    client_transaction_version=0,
)
GOLDEN_EMPTY_V0 = bytes.fromhex(
    "0000"
    "0000000000000007"
    "0000"
    "0000ea60"
    "00"  # TransactionStatus Empty
    "ffffffff"  # null array (i32 -1), not an empty one
    "0000018bcfe56800"
    "ffffffffffffffff"  # start -1: no transaction
)
GOLDEN_EMPTY_V1 = bytes.fromhex(
    "0001"
    "0000000000000007"
    "0000"
    "0000ea60"
    "00"  # TransactionStatus Empty
    "00"  # null compact array (uvarint 0)
    "0000018bcfe56800"
    "ffffffffffffffff"
    "00"  # no tags: ClientTransactionVersion 0 is its default
)

GOLDEN_ALL_TAGS = TxnLogValue(
    producer_id=5,
    producer_epoch=32767,
    timeout_ms=1,
    state=TxnState.COMPLETE_COMMIT,
    partitions=(),
    last_update_ms=1,
    start_ms=2,
    previous_producer_id=4,
    next_producer_id=6,
    client_transaction_version=2,
    next_producer_epoch=0,
)
GOLDEN_ALL_TAGS_V1 = bytes.fromhex(
    "0001"
    "0000000000000005"
    "7fff"
    "00000001"
    "04"  # CompleteCommit
    "01"  # empty, non-null compact array (0 + 1)
    "0000000000000001"
    "0000000000000002"
    "04"  # 4 tags, ascending
    "00"
    "08"
    "0000000000000004"  # tag 0 PreviousProducerId, size 8
    "01"
    "08"
    "0000000000000006"  # tag 1 NextProducerId, size 8
    "02"
    "02"
    "0002"  # tag 2 ClientTransactionVersion, size 2
    "03"
    "02"
    "0000"  # tag 3 NextProducerEpoch 0 (default is -1), size 2
)

GOLDENS = [
    pytest.param(GOLDEN_ONGOING, 1, GOLDEN_ONGOING_V1, id="ongoing-v1"),
    pytest.param(replace(GOLDEN_ONGOING, client_transaction_version=0), 0, GOLDEN_ONGOING_V0, id="ongoing-v0"),
    pytest.param(GOLDEN_EMPTY, 0, GOLDEN_EMPTY_V0, id="empty-v0"),
    pytest.param(GOLDEN_EMPTY, 1, GOLDEN_EMPTY_V1, id="empty-v1"),
    pytest.param(GOLDEN_ALL_TAGS, 1, GOLDEN_ALL_TAGS_V1, id="all-tags-v1"),
]


@pytest.mark.parametrize("value, version, expected", GOLDENS)
def test_golden_bytes(value, version, expected):
    assert encode_value(value, version) == expected
    assert decode_value(expected) == value


@pytest.mark.parametrize("value, version, expected", GOLDENS)
def test_goldens_agree_with_oracle(value, version, expected):
    assert oracle_decode_value(expected) == value
    assert oracle_encode_value(value, version) == expected


def test_golden_key():
    assert encode_key("my-txn-id") == GOLDEN_KEY
    assert decode_key(GOLDEN_KEY) == "my-txn-id"


# --- keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("tid", ["my-txn-id", "", "трансакция-😀", "ü" * 1000, "x" * 32767])
def test_key_round_trip_and_oracle(tid):
    data = encode_key(tid)
    assert decode_key(data) == tid
    assert ORACLE_KEY.decode(io.BytesIO(data)) == (0, tid)
    assert decode_key(ORACLE_KEY.encode((0, tid))) == tid


def test_key_too_long_is_a_caller_error():
    with pytest.raises(ValueError):
        encode_key("x" * 32768)


def test_key_rejects_other_versions_null_id_and_trailing_bytes():
    for bad in (
        b"\x00\x01" + GOLDEN_KEY[2:],
        b"\xff\xff" + GOLDEN_KEY[2:],
        b"\x00\x00\xff\xff",
        GOLDEN_KEY + b"\x00",
        b"\x00\x00\x00\x01\xff",
        None,
    ):
        with pytest.raises(CorruptRecordError):
            decode_key(bad)


@pytest.mark.parametrize("cut", range(len(GOLDEN_KEY)))
def test_truncated_key(cut):
    with pytest.raises(CorruptRecordError):
        decode_key(GOLDEN_KEY[:cut])


# --- values: semantics that the goldens do not cover --------------------------------


def _value(**overrides) -> TxnLogValue:
    base = {
        "producer_id": 1000,
        "producer_epoch": 1,
        "timeout_ms": 900_000,
        "state": TxnState.ONGOING,
        "partitions": (("a", 1),),
        "last_update_ms": TS,
        "start_ms": TS - 5,
    }
    base.update(overrides)
    return TxnLogValue(**base)


def test_dataclass_defaults_follow_the_interface():
    v = _value()
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version, v.next_producer_epoch) == (
        -1,
        -1,
        2,
        -1,
    )
    assert encode_value(v) == encode_value(v, 1)  # v1 is the default version


@pytest.mark.parametrize("version", [0, 1])
def test_empty_state_writes_a_null_array_and_other_states_an_array(version):
    header = 2 + 8 + 2 + 4 + 1
    tv = {"client_transaction_version": 0}
    empty = encode_value(_value(state=TxnState.EMPTY, partitions=(), **tv), version)
    ongoing_none = encode_value(_value(partitions=(), **tv), version)
    if version == 0:
        assert empty[header : header + 4] == b"\xff\xff\xff\xff"
        assert ongoing_none[header : header + 4] == b"\x00\x00\x00\x00"
    else:
        assert empty[header] == 0x00
        assert ongoing_none[header] == 0x01
    assert oracle_partitions_is_null(empty)
    assert not oracle_partitions_is_null(ongoing_none)
    assert decode_value(empty).partitions == ()
    assert decode_value(ongoing_none).partitions == ()


def test_empty_state_with_partitions_is_a_caller_error():
    with pytest.raises(ValueError):
        encode_value(_value(state=TxnState.EMPTY, partitions=(("a", 0),)))


def test_null_array_with_a_non_empty_state_decodes_as_no_partitions():
    data = bytearray(encode_value(_value(state=TxnState.EMPTY, partitions=())))
    data[16] = TxnState.PREPARE_ABORT
    assert decode_value(bytes(data)).partitions == ()


def test_a_null_value_decodes_as_a_tombstone():
    assert decode_value(None) is None


def test_missing_tags_read_as_kafka_wire_defaults():
    # A v0 record, or a v1 record from a TV0 client, has no ClientTransactionVersion:
    # Kafka reads its schema default 0, whatever the dataclass default is.
    for version in (0, 1):
        v = decode_value(encode_value(_value(client_transaction_version=0), version))
        assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version, v.next_producer_epoch) == (
            -1,
            -1,
            0,
            -1,
        )


def test_default_valued_tags_are_omitted():
    data = encode_value(_value(client_transaction_version=0))
    assert data[-1] == 0x00  # empty top-level tag section
    data = encode_value(_value())  # client_transaction_version 2 is not the wire default
    assert data.endswith(bytes.fromhex("01 02 02 0002"))


@pytest.mark.parametrize(
    "tag_field", ["previous_producer_id", "next_producer_id", "client_transaction_version", "next_producer_epoch"]
)
def test_each_tag_alone_round_trips(tag_field):
    v = _value(**{"client_transaction_version": 0, tag_field: 3})
    data = encode_value(v, 1)
    assert decode_value(data) == v
    assert oracle_decode_value(data) == v
    assert decode_value(oracle_encode_value(v, 1)) == v


def test_v0_refuses_values_that_need_tags():
    with pytest.raises(ValueError):
        encode_value(_value(), 0)  # client_transaction_version 2 cannot be written in v0
    with pytest.raises(ValueError):
        encode_value(_value(client_transaction_version=0, next_producer_id=9), 0)


def test_bad_encode_arguments_are_caller_errors():
    with pytest.raises(ValueError):
        encode_value(_value(), 2)
    with pytest.raises(ValueError):
        encode_value(_value(producer_epoch=1 << 15))
    with pytest.raises(ValueError):
        encode_value(_value(partitions=(("a", 1 << 31),)))
    with pytest.raises(ValueError):
        encode_value(_value(next_producer_epoch=1 << 15))
    with pytest.raises(ValueError):
        encode_value(_value(state=8))


def test_partitions_are_grouped_and_sorted_whatever_the_input_order():
    unordered = _value(partitions=(("b", 2), ("a", 9), ("b", 0), ("a", 1)))
    ordered = _value(partitions=(("a", 1), ("a", 9), ("b", 0), ("b", 2)))
    assert encode_value(unordered) == encode_value(ordered)
    assert decode_value(encode_value(unordered)) == ordered


@pytest.mark.parametrize("version", [0, 1])
def test_reads_kafka_writing_topics_and_ids_in_hash_order(version):
    v = _value(partitions=(("a", 1), ("a", 9), ("b", 0), ("b", 2), ("ü-topic", 5)), client_transaction_version=0)
    assert decode_value(oracle_encode_value(v, version, reverse=True)) == v


def test_multi_topic_non_ascii_partition_set():
    pairs = tuple(sorted({("日本語", 0), ("日本語", 7), ("emoji-😀", 2147483647), ("z", 0), ("", 3)}))
    v = _value(partitions=pairs)
    assert decode_value(encode_value(v)) == v
    assert oracle_decode_value(encode_value(v)) == v


@pytest.mark.parametrize("state", list(TxnState))
@pytest.mark.parametrize("version", [0, 1])
def test_every_state_round_trips(state, version):
    partitions = () if state == TxnState.EMPTY else (("t", 0),)
    v = _value(state=state, partitions=partitions, client_transaction_version=0)
    assert decode_value(encode_value(v, version)) == v
    assert oracle_decode_value(encode_value(v, version)).state == state


def test_unknown_tags_are_skipped_at_both_levels():
    data = bytes.fromhex(
        "0001"
        "000000000000002a"
        "0003"
        "0000ea60"
        "01"
        "02"  # 1 topic
        "02"
        "74"  # "t"
        "02"
        "00000004"  # [4]
        "01"
        "09"
        "03"
        "aabbcc"  # element tags: unknown tag 9, size 3
        "0000000000000001"
        "0000000000000002"
        "03"  # 3 tags
        "02"
        "02"
        "0001"  # ClientTransactionVersion 1
        "05"
        "00"  # unknown tag 5, empty
        "2a"
        "04"
        "deadbeef"  # unknown tag 42, size 4
    )
    v = decode_value(data)
    assert v.partitions == (("t", 4),)
    assert v.client_transaction_version == 1
    assert (v.last_update_ms, v.start_ms) == (1, 2)


# --- malformed input ------------------------------------------------------------------

ALL_ENCODINGS = [
    pytest.param(GOLDEN_ONGOING_V1, id="ongoing-v1"),
    pytest.param(GOLDEN_ONGOING_V0, id="ongoing-v0"),
    pytest.param(GOLDEN_EMPTY_V0, id="empty-v0"),
    pytest.param(GOLDEN_EMPTY_V1, id="empty-v1"),
    pytest.param(GOLDEN_ALL_TAGS_V1, id="all-tags-v1"),
]


@pytest.mark.parametrize("data", ALL_ENCODINGS)
def test_truncated_at_every_byte(data):
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_value(data[:cut])


@pytest.mark.parametrize("data", ALL_ENCODINGS)
def test_bytes_after_a_value_are_corruption(data):
    for extra in (b"\x00", b"\xff" * 9):
        with pytest.raises(CorruptRecordError):
            decode_value(data + extra)


@pytest.mark.parametrize("version", [b"\x00\x02", b"\xff\xff", b"\x7f\xff"])
def test_unknown_value_version(version):
    with pytest.raises(CorruptRecordError, match="version"):
        decode_value(version + GOLDEN_ONGOING_V1[2:])


def _patched(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new) :]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(_patched(GOLDEN_ONGOING_V1, 16, b"\x08"), id="unknown-status-8"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 16, b"\xff"), id="negative-status"),
        pytest.param(_patched(GOLDEN_ONGOING_V0, 17, b"\xff\xff\xff\xfe"), id="array-count-minus-2"),
        pytest.param(_patched(GOLDEN_ONGOING_V0, 17, b"\x7f\xff\xff\xff"), id="huge-array-count"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 17, b"\xff\xff\xff\xff\x0f"), id="huge-compact-count"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 17, b"\xff\xff\xff\xff\xff"), id="uvarint-too-long"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 18, b"\x00"), id="null-topic-v1"),
        pytest.param(_patched(GOLDEN_ONGOING_V0, 21, b"\xff\xff"), id="null-topic-v0"),
        pytest.param(_patched(GOLDEN_ONGOING_V0, 21, b"\xff\xfe"), id="negative-string-length"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 19, b"\xff\xfe"), id="invalid-utf8"),
        pytest.param(_patched(GOLDEN_ONGOING_V1, 37, b"\x00"), id="null-partition-ids-v1"),
        pytest.param(_patched(GOLDEN_ONGOING_V0, 41, b"\xff\xff\xff\xff"), id="null-partition-ids-v0"),
        pytest.param(GOLDEN_ONGOING_V1[:-5] + bytes.fromhex("01 02 04 00000002"), id="tag2-wrong-size"),
        pytest.param(GOLDEN_ONGOING_V1[:-5] + bytes.fromhex("01 00 02 0002"), id="tag0-short"),
    ],
)
def test_malformed_values(bad):
    with pytest.raises(CorruptRecordError):
        decode_value(bad)


def test_patch_offsets_above_point_where_intended():
    # Guards the byte positions used by test_malformed_values.
    assert GOLDEN_ONGOING_V1[16] == 0x01 and GOLDEN_ONGOING_V1[17] == 0x03
    assert GOLDEN_ONGOING_V1[18] == 0x13 and GOLDEN_ONGOING_V1[37] == 0x02
    assert GOLDEN_ONGOING_V0[17:21] == b"\x00\x00\x00\x02" and GOLDEN_ONGOING_V0[21:23] == b"\x00\x12"
    assert GOLDEN_ONGOING_V0[41:45] == b"\x00\x00\x00\x01"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_only_ever_raise_corrupt_record(data):
    for blob in (data, b"\x00\x00" + data, b"\x00\x01" + data):
        try:
            decode_value(blob)
        except CorruptRecordError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_key_bytes_only_ever_raise_corrupt_record(data):
    for blob in (data, b"\x00\x00" + data):
        try:
            decode_key(blob)
        except CorruptRecordError:
            pass


# --- property-based round trips against the oracle ----------------------------------

I16 = st.integers(-(1 << 15), (1 << 15) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
TOPICS = st.text(max_size=12)


@st.composite
def txn_values(draw, version: int) -> TxnLogValue:
    state = draw(st.sampled_from(list(TxnState)))
    pairs = () if state == TxnState.EMPTY else tuple(sorted(draw(st.lists(st.tuples(TOPICS, I32), max_size=8))))
    if version == 1:
        # Each tag is either at its wire default (omitted) or any value of its type.
        tags = {
            "previous_producer_id": draw(st.just(-1) | I64),
            "next_producer_id": draw(st.just(-1) | I64),
            "client_transaction_version": draw(st.sampled_from([0, 1, 2]) | I16),
            "next_producer_epoch": draw(st.just(-1) | I16),
        }
    else:
        tags = {"client_transaction_version": 0}  # v0 can only hold the wire defaults
    return TxnLogValue(
        producer_id=draw(I64),
        producer_epoch=draw(I16),
        timeout_ms=draw(I32),
        state=state,
        partitions=pairs,
        last_update_ms=draw(I64),
        start_ms=draw(I64),
        **tags,
    )


@settings(max_examples=300, deadline=None)
@given(st.one_of(txn_values(0).map(lambda v: (v, 0)), txn_values(1).map(lambda v: (v, 1))))
def test_property_round_trip_and_oracle(case):
    value, version = case
    data = encode_value(value, version)
    assert struct.unpack(">h", data[:2])[0] == version
    assert decode_value(data) == value
    assert oracle_decode_value(data) == value
    assert decode_value(oracle_encode_value(value, version, reverse=True)) == value
    assert oracle_encode_value(value, version) == data
