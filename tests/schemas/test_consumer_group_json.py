"""KIP-848 consumer-group records, printed as Kafka 4.4's `kafka-dump-log --offsets-decoder` printed
the same bytes (records a Kafka 4.4 broker wrote for a `group.protocol=consumer` member; the
whole-file comparison against the live tool is tests/kafka_rig/test_broker_data_dump.py)."""

from __future__ import annotations

import pytest

from txlog.schemas.message_parsers import offsets_parser

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
