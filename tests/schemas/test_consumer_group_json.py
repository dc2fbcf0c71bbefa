"""KIP-848 consumer-group records, printed as Kafka 4.4's `kafka-dump-log --offsets-decoder` printed
the same bytes (records a Kafka 4.4 broker wrote for a `group.protocol=consumer` member; the
whole-file comparison against the live tool is tests/kafka_rig/test_broker_data_dump.py)."""

from __future__ import annotations

import pytest

from tests.schemas import test_consumer_group_records as cgr_bytes
from txlog.schemas.message_parsers import offsets_parser
from txlog.schemas.schema_types import SchemaWriter

GROUP = "00116a6176612d6b69703834382d67726f7570"  # i16 length + "java-kip848-group"
MEMBER = "0016375a335931334c795270616d6e5f5867304657386767"  # i16 length + "7Z3Y13LyRpamn_Xg0FW8gg"
GROUP_JSON = '"groupId":"java-kip848-group"'
MEMBER_JSON = GROUP_JSON + ',"memberId":"7Z3Y13LyRpamn_Xg0FW8gg"'


class Record:
    def __init__(self, key: str, value: str | None) -> None:
        self.offset, self.key, self.value = 0, bytes.fromhex(key), None if value is None else bytes.fromhex(value)


def test_member_metadata_with_a_null_classic_member_metadata():
    value = (
        "000000001d636f6e73756d65722d6a6176612d6b69703834382d67726f75702d310b2f3132372e302e302e3102096a617661"
        "2d74786e01000493e00001000100"
    )
    assert offsets_parser(Record("0005" + GROUP + MEMBER, value)) == (
        '{"type":"5","data":{' + MEMBER_JSON + "}}",
        '{"version":"0","data":{"instanceId":null,"rackId":null,"clientId":"consumer-java-kip848-group-1",'
        '"clientHost":"/127.0.0.1","subscribedTopicNames":["java-txn"],"subscribedTopicRegex":"",'
        '"rebalanceTimeoutMs":300000,"serverAssignor":null,"classicMemberMetadata":null}}',
    )


def test_current_member_assignment_with_assignment_epochs():
    value = "000000000002000000000002e1675d2178c5493499bdc3a5a78e563a0300000000000000010100090300000002000000020100"
    assert offsets_parser(Record("0008" + GROUP + MEMBER, value)) == (
        '{"type":"8","data":{' + MEMBER_JSON + "}}",
        '{"version":"0","data":{"memberEpoch":2,"previousMemberEpoch":0,"state":0,"assignedPartitions":'
        '[{"topicId":"4WddIXjFSTSZvcOlp45WOg","partitions":[0,1],"assignmentEpochs":[2,2]}],'
        '"partitionsPendingRevocation":[]}}',
    )


@pytest.mark.parametrize(
    ("key", "value", "payload"),
    [
        ("0003", "000000000002010008a5042c191698a856", '{"epoch":2,"metadataHash":-6556066671279691690}'),
        ("0003", "00000000000300", '{"epoch":3}'),  # the tagged hash only when written
        ("0006", "000000000002010008000001a218425d9d", '{"assignmentEpoch":2,"assignmentTimestamp":1795703332253}'),
    ],
)
def test_group_level_records_and_their_tagged_fields(key, value, payload):
    assert offsets_parser(Record(key + GROUP, value)) == (
        '{"type":"' + key[-1] + '","data":{' + GROUP_JSON + "}}",
        '{"version":"0","data":' + payload + "}",
    )


def test_a_tombstone_is_delete():
    assert offsets_parser(Record("0007" + GROUP + MEMBER, None)) == (
        '{"type":"7","data":{' + MEMBER_JSON + "}}",
        "<DELETE>",
    )


@pytest.mark.parametrize("value", ["0001000000", "0000000000030001", "00000000"])
def test_a_value_that_does_not_fit_is_reported_in_the_line(value):
    key, payload = offsets_parser(Record("0003" + GROUP, value))
    assert key is not None and key.startswith("Error at offset 0, skipping. ") and payload is None


# ---- hand-built bytes (tests/schemas/test_consumer_group_records.py writes them as Kafka's writers do) ----

TOPIC = '"topicId":"AAECAwQFBgcICQoLDA0ODw"'  # Uuid text of bytes 0..15


def _payload(record_type: int, value: bytes) -> str | None:
    member = "" if record_type in (3, 4, 6) else MEMBER
    return offsets_parser(Record(f"000{record_type}" + GROUP + member, value.hex()))[1]


def test_partition_metadata_prints_the_deprecated_racks():
    assert _payload(4, cgr_bytes.partition_metadata()) == (
        '{"version":"0","data":{"topics":[{' + TOPIC + ',"topicName":"orders","numPartitions":2,'
        '"partitionMetadata":[{"partition":0,"racks":["rack-a"]}]}]}}'
    )


def test_classic_member_metadata_is_printed_when_present_and_left_out_when_its_tag_is():
    classic = _payload(5, cgr_bytes.member_metadata(assignor="range", classic=True))
    assert classic is not None and classic.endswith(
        '"serverAssignor":"range","classicMemberMetadata":'
        '{"sessionTimeoutMs":45000,"supportedProtocols":[{"name":"range","metadata":"AAM="}]}}}'
    )
    absent = _payload(5, cgr_bytes.member_metadata()[:-4] + b"\x00")  # a tag section without tag 0
    assert absent is not None and absent.endswith('"serverAssignor":null}}')


def _assignment(tag: bytes) -> bytes:
    """One topic with partition 0 and `tag` as its tag 0, for type 7 or 8 (8's member fields come first)."""
    w = SchemaWriter()
    w.compact_array_count(1)
    w.raw(bytes(range(16)))
    w.compact_array_count(1)
    w.i32(0)
    w.tagged_fields([(0, tag)])
    return w.getvalue()


def test_assignment_epochs_written_as_null_are_printed_and_type_7_has_none():
    current = b"\x00\x00" + (1).to_bytes(4, "big") + bytes(5) + _assignment(b"\x00") + b"\x01\x00"
    assert _payload(8, current) == (
        '{"version":"0","data":{"memberEpoch":1,"previousMemberEpoch":0,"state":0,"assignedPartitions":'
        "[{" + TOPIC + ',"partitions":[0],"assignmentEpochs":null}],"partitionsPendingRevocation":[]}}'
    )
    target = b"\x00\x00" + _assignment(b"\x02\x00\x00\x00\x07") + b"\x00"  # tag 0 unknown to type 7's struct
    assert _payload(7, target) == '{"version":"0","data":{"topicPartitions":[{' + TOPIC + ',"partitions":[0]}]}}'


@pytest.mark.parametrize(
    ("record_type", "value", "reason"),
    [
        (5, "0000" + "0000" + "00", "ConsumerGroupMemberMetadataValue: null client id"),
        (4, "0000" + "00" + "00", "ConsumerGroupPartitionMetadataValue: null topics"),
    ],
)
def test_a_null_where_the_schema_has_none_is_an_error_naming_the_record(record_type, value, reason):
    key, payload = offsets_parser(Record(f"000{record_type}" + GROUP + ("" if record_type == 4 else MEMBER), value))
    assert key is not None and reason in key and payload is None
