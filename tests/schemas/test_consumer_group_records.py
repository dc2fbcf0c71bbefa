"""KIP-848's consumer-group records of `__consumer_offsets` (record types 3..8), from hand-built bytes.

The bytes follow Kafka 4.4's generated writers (group-coordinator's
common/message/ConsumerGroup*.json): i16 record type + non-flexible key, i16 version +
flexible value. Each hostile variant (cut short, lying counts, wrong tag sizes, unknown
versions) must be a CorruptRecordError that names the record, never another exception.
"""

from __future__ import annotations

import pytest

from storage.errors import CorruptRecordError
from txlog.coordinator.group_coordinator import GroupState, GroupType, describe_consumer_group_records
from txlog.schemas import consumer_group_records as cgr
from txlog.schemas.offset_log import decode_key
from txlog.schemas.schema_types import SchemaWriter, uuid_text
from txlog.topic_partition import TopicPartition

TOPIC_ID = bytes(range(16))
OTHER_ID = bytes(range(16, 32))


def _key(record_type: int, group: str, member: str | None = None) -> bytes:
    w = SchemaWriter()
    w.i16(record_type)
    w.string(group)
    if member is not None:
        w.string(member)
    return w.getvalue()


def _value(body) -> bytes:
    w = SchemaWriter()
    w.i16(0)
    body(w)
    return w.getvalue()


def _partitions(w: SchemaWriter, parts: list[tuple[bytes, list[int]]], epochs: bool = False) -> None:
    w.compact_array_count(len(parts))
    for topic_id, ids in parts:
        w.raw(topic_id)
        w.compact_array_count(len(ids))
        for p in ids:
            w.i32(p)
        if epochs:  # tag 0: AssignmentEpochs, one per partition
            payload = SchemaWriter()
            payload.compact_array_count(len(ids))
            for _ in ids:
                payload.i32(7)
            w.tagged_fields([(0, payload.getvalue())])
        else:
            w.tagged_fields([])


def group_metadata(epoch: int, metadata_hash: int | None = None) -> bytes:
    def body(w: SchemaWriter) -> None:
        w.i32(epoch)
        tags = []
        if metadata_hash is not None:
            h = SchemaWriter()
            h.i64(metadata_hash)
            tags.append((0, h.getvalue()))
        w.tagged_fields(tags)

    return _value(body)


def member_metadata(
    client_id: str = "rdkafka", assignor: str | None = None, classic: bool = False, protocol: bytes | None = b"\x00\x03"
) -> bytes:
    def body(w: SchemaWriter) -> None:
        w.compact_nullable_string(None)  # instance id
        w.compact_nullable_string(None)  # rack id
        w.compact_string(client_id)
        w.compact_string("/127.0.0.1")
        w.compact_array_count(1)
        w.compact_string("orders")
        w.compact_nullable_string(None)  # regex
        w.i32(300000)
        w.compact_nullable_string(assignor)
        # Kafka 4.4 writes tag 0 even when null: one byte, uvarint 0
        tag = SchemaWriter()
        if classic:
            tag.uvarint(1)
            tag.i32(45000)
            tag.compact_array_count(1)
            tag.compact_string("range")
            tag.compact_bytes(protocol)
            tag.tagged_fields([])
            tag.tagged_fields([])
        else:
            tag.uvarint(0)
        w.tagged_fields([(0, tag.getvalue())])

    return _value(body)


def target_metadata(epoch: int) -> bytes:
    def body(w: SchemaWriter) -> None:
        w.i32(epoch)
        ts = SchemaWriter()
        ts.i64(1_700_000_000_000)
        w.tagged_fields([(0, ts.getvalue())])

    return _value(body)


def target_member(parts: list[tuple[bytes, list[int]]]) -> bytes:
    def body(w: SchemaWriter) -> None:
        _partitions(w, parts)
        w.tagged_fields([])

    return _value(body)


def current_assignment(epoch: int, state: int, parts, pending=()) -> bytes:
    def body(w: SchemaWriter) -> None:
        w.i32(epoch)
        w.i32(epoch - 1)
        w.i8(state)
        _partitions(w, list(parts), epochs=True)
        _partitions(w, list(pending))
        w.tagged_fields([])

    return _value(body)


def partition_metadata() -> bytes:
    def body(w: SchemaWriter) -> None:
        w.compact_array_count(1)
        w.raw(TOPIC_ID)
        w.compact_string("orders")
        w.i32(2)
        w.compact_array_count(1)  # deprecated racks of partition 0
        w.i32(0)
        w.compact_array_count(1)
        w.compact_string("rack-a")
        w.tagged_fields([])
        w.tagged_fields([])
        w.tagged_fields([])

    return _value(body)


# ---- keys -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("record_type", [3, 4, 6])
def test_group_keyed_records_decode_their_group(record_type):
    key = decode_key(_key(record_type, "g-consumer"))
    assert key == cgr.ConsumerGroupRecordKey(record_type, "g-consumer")


@pytest.mark.parametrize("record_type", [5, 7, 8])
def test_member_keyed_records_decode_group_and_member(record_type):
    key = decode_key(_key(record_type, "g", "member-1"))
    assert key == cgr.ConsumerGroupRecordKey(record_type, "g", "member-1")


@pytest.mark.parametrize(
    "data, record",
    [
        (_key(5, "g"), "ConsumerGroupMemberMetadataKey"),  # no member id
        (_key(3, "g") + b"\x00", "ConsumerGroupMetadataKey"),  # trailing byte
        (b"\x00\x08\x00\x05ab", "ConsumerGroupCurrentMemberAssignmentKey"),  # group cut short
        (b"\x00\x07\xff\xff\x00\x01m", "ConsumerGroupTargetAssignmentMemberKey"),  # null group
        (b"\x00\x06", "ConsumerGroupTargetAssignmentMetadataKey"),  # nothing after the type
    ],
)
def test_hostile_keys_are_corrupt_records_naming_the_record(data, record):
    with pytest.raises(CorruptRecordError, match=record):
        decode_key(data)


# ---- values -----------------------------------------------------------------------------------------


def test_each_value_decodes_with_its_tagged_fields():
    assert cgr.decode_value(3, group_metadata(5, metadata_hash=-2)) == cgr.GroupMetadataValue(5, -2)
    assert cgr.decode_value(3, group_metadata(5)) == cgr.GroupMetadataValue(5, 0)
    assert cgr.decode_value(4, partition_metadata()) == cgr.PartitionMetadataValue(
        (cgr.TopicMetadata(TOPIC_ID, "orders", 2, (cgr.PartitionRacks(0, ("rack-a",)),)),)
    )
    member = cgr.decode_value(5, member_metadata(assignor="range"))
    assert member == cgr.MemberMetadataValue(None, None, "rdkafka", "/127.0.0.1", ("orders",), None, 300000, "range")
    classic = cgr.decode_value(5, member_metadata(classic=True))
    assert isinstance(classic, cgr.MemberMetadataValue)
    assert classic.classic == cgr.ClassicMemberMetadata(45000, (("range", b"\x00\x03"),))
    assert cgr.decode_value(6, target_metadata(4)) == cgr.TargetAssignmentMetadataValue(4, 1_700_000_000_000)
    assert cgr.decode_value(7, target_member([(TOPIC_ID, [0, 1])])) == cgr.TargetAssignmentMemberValue(
        (cgr.TopicPartitions(TOPIC_ID, (0, 1)),)
    )
    assert cgr.decode_value(8, current_assignment(4, 0, [(TOPIC_ID, [1])], [(OTHER_ID, [3])])) == (
        cgr.CurrentMemberAssignmentValue(
            4, 3, 0, (cgr.TopicPartitions(TOPIC_ID, (1,), (7,)),), (cgr.TopicPartitions(OTHER_ID, (3,)),)
        )
    )
    assert cgr.decode_value(8, None) is None  # a tombstone


def _cut_everywhere():
    values = {
        3: group_metadata(5, 9),
        4: partition_metadata(),
        5: member_metadata(assignor="uniform", classic=True),
        6: target_metadata(4),
        7: target_member([(TOPIC_ID, [0, 1])]),
        8: current_assignment(4, 0, [(TOPIC_ID, [0, 1])]),
    }
    for record_type, data in values.items():
        for size in range(len(data)):
            yield pytest.param(record_type, data[:size], id=f"type{record_type}-cut{size}")


@pytest.mark.parametrize("record_type, data", list(_cut_everywhere()))
def test_every_truncation_is_a_corrupt_record_naming_it(record_type, data):
    with pytest.raises(CorruptRecordError, match=cgr.RECORD_NAMES[record_type] + "Value"):
        cgr.decode_value(record_type, data)


@pytest.mark.parametrize(
    "record_type, data, reason",
    [
        (3, b"\x00\x01" + group_metadata(1)[2:], "unknown value version 1"),
        (3, b"\xff\xff" + group_metadata(1)[2:], "unknown value version -1"),
        (3, group_metadata(1) + b"\x00", "trailing"),
        # a known tag (the hash, an i64) whose declared size is 4
        (3, _value(lambda w: (w.i32(1), w.uvarint(1), w.uvarint(0), w.uvarint(4), w.i32(0))), "metadata hash"),
        # 2**31 partitions claimed with a handful of bytes left
        (7, _value(lambda w: (w.uvarint(2), w.raw(TOPIC_ID), w.uvarint(1 << 31))), "exceeds the remaining bytes"),
        # a null client id
        (5, _value(lambda w: (w.uvarint(0), w.uvarint(0), w.uvarint(0))), "null client id"),
        # a null where the schema has none: Kafka's readers refuse it, so it is not read as empty
        (4, _value(lambda w: (w.uvarint(0), w.uvarint(0))), "null topics"),
        (7, _value(lambda w: (w.uvarint(2), w.raw(TOPIC_ID), w.uvarint(0), w.uvarint(0))), "null partitions"),
        (
            8,
            _value(lambda w: (w.i32(1), w.i32(0), w.i8(0), w.uvarint(1), w.uvarint(0), w.uvarint(0))),
            "null partitions pending",
        ),
        (
            5,
            member_metadata(classic=True, protocol=None),
            "null protocol metadata",
        ),
        # invalid UTF-8 in the client host
        (
            5,
            _value(lambda w: (w.uvarint(0), w.uvarint(0), w.uvarint(2), w.raw(b"c"), w.uvarint(2), w.raw(b"\xff"))),
            "UTF-8",
        ),
    ],
)
def test_hostile_values_are_corrupt_records(record_type, data, reason):
    with pytest.raises(CorruptRecordError, match=reason):
        cgr.decode_value(record_type, data)


def test_tagged_fields_hold_what_kafkas_reader_holds_when_absent_or_null():
    """Absent: Kafka's reader keeps an empty struct or list; written as null: null. The printer tells them apart."""
    absent = cgr.decode_value(5, member_metadata()[:-4] + b"\x00")  # the tag section without tag 0
    assert isinstance(absent, cgr.MemberMetadataValue)
    assert (absent.classic, absent.version) == (cgr.ClassicMemberMetadata(), 0)
    null = cgr.decode_value(5, member_metadata())
    assert isinstance(null, cgr.MemberMetadataValue) and null.classic is None
    written_null = _value(
        lambda w: (
            w.i32(1),
            w.i32(0),
            w.i8(0),
            w.uvarint(2),
            w.raw(TOPIC_ID),
            w.uvarint(2),
            w.i32(0),
            w.tagged_fields([(0, b"\x00")]),  # AssignmentEpochs: the null array
            w.uvarint(1),
            w.tagged_fields([]),
        )
    )
    assert cgr.decode_value(8, written_null) == cgr.CurrentMemberAssignmentValue(
        1, 0, 0, (cgr.TopicPartitions(TOPIC_ID, (0,), None),), ()
    )


def test_a_tag_0_in_a_target_assignment_is_not_assignment_epochs():
    """Type 7's TopicPartition has no tagged field: its tag 0 is an unknown one, skipped."""
    data = _value(
        lambda w: (
            w.uvarint(2),
            w.raw(TOPIC_ID),
            w.uvarint(2),
            w.i32(0),
            w.tagged_fields([(0, b"\x02\x00\x00\x00\x07")]),
            w.tagged_fields([]),
        )
    )
    assert cgr.decode_value(7, data) == cgr.TargetAssignmentMemberValue((cgr.TopicPartitions(TOPIC_ID, (0,)),))


def test_unknown_tags_are_skipped():
    """A newer broker may add tagged fields; they are skipped, as Kafka's readers skip them."""
    data = _value(lambda w: (w.i32(3), w.tagged_fields([(0, (8).to_bytes(8, "big")), (9, b"\x01\x02")])))
    assert cgr.decode_value(3, data) == cgr.GroupMetadataValue(3, 8)


# ---- the description Kafka's ConsumerGroupDescribe gives -------------------------------------------


def _records(**overrides) -> dict[tuple[int, str], bytes]:
    records = {
        (3, ""): group_metadata(4),
        (6, ""): target_metadata(4),
        (5, "m1"): member_metadata(),
        (7, "m1"): target_member([(TOPIC_ID, [0, 1])]),
        (8, "m1"): current_assignment(4, 0, [(TOPIC_ID, [0, 1])]),
    }
    records.update(overrides)
    return {k: v for k, v in records.items() if v is not None}


NAMES = {uuid_text(TOPIC_ID): "orders"}


def test_a_reconciled_member_makes_a_stable_group_with_the_brokers_default_assignor():
    d = describe_consumer_group_records("g", _records(), NAMES)
    assert (d.state, d.group_type, d.group_epoch, d.assignment_epoch, d.assignor) == (
        GroupState.STABLE,
        GroupType.CONSUMER,
        4,
        4,
        "uniform",
    )
    [m] = d.members
    assert (m.member_id, m.client_id, m.client_host, m.member_epoch) == ("m1", "rdkafka", "/127.0.0.1", 4)
    assert m.assignment == m.target == (TopicPartition("orders", 0), TopicPartition("orders", 1))


def test_states_follow_kafkas_rules():
    ahead = _records()
    ahead[(3, "")] = group_metadata(5)  # the group epoch moved, no new target yet
    assert describe_consumer_group_records("g", ahead, NAMES).state == GroupState.ASSIGNING
    revoking = _records()
    revoking[(8, "m1")] = current_assignment(4, 1, [(TOPIC_ID, [0, 1])])  # UNREVOKED_PARTITIONS
    assert describe_consumer_group_records("g", revoking, NAMES).state == GroupState.RECONCILING
    behind = _records()
    behind[(8, "m1")] = current_assignment(3, 0, [(TOPIC_ID, [0])])
    assert describe_consumer_group_records("g", behind, NAMES).state == GroupState.RECONCILING
    empty = {(3, ""): group_metadata(6), (6, ""): target_metadata(6)}  # the member left: its records are gone
    d = describe_consumer_group_records("g", empty, NAMES)
    assert (d.state, d.members, d.assignor) == (GroupState.EMPTY, (), "uniform")


def test_the_assignor_is_the_one_members_ask_for_and_unknown_topic_ids_are_dropped():
    records = _records()
    records[(5, "m1")] = member_metadata(assignor="range")
    records[(7, "m1")] = target_member([(TOPIC_ID, [0]), (OTHER_ID, [5])])
    d = describe_consumer_group_records("g", records, NAMES)
    assert d.assignor == "range"
    assert d.members[0].target == (TopicPartition("orders", 0),)


def test_a_damaged_value_fails_the_description_naming_the_record():
    records = _records()
    records[(8, "m1")] = records[(8, "m1")][:-3]
    with pytest.raises(CorruptRecordError, match="ConsumerGroupCurrentMemberAssignmentValue"):
        describe_consumer_group_records("g", records, NAMES)
