"""`txlog inspect --offsets-decoder` on group-metadata records (key type 2), as Kafka >= 3.5 prints them.

OffsetsMessageParser prints `key: {"type":"2","data":{"group":G}} payload: {"version":"N","data":{...}}`
with the GroupMetadataValue's fields in schema order, each only from the version that has it;
for protocol type "consumer" every member's subscription and assignment are decoded
(ConsumerProtocolSubscription / ConsumerProtocolAssignment JSON), other protocol types keep
the bytes (Jackson prints them base64).
"""

from __future__ import annotations

import base64
import json
import os
import struct

from storage.log_files import filename_prefix
from storage.records import build_batch
from tests.cli.cli_helpers import assert_ok, txlog
from txlog.schemas.group_metadata import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataValue,
    MemberMetadata,
    encode_assignment,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_subscription,
)

SEG0 = filename_prefix(0)


def _string(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s)) + s.encode()


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def connect_value_v0() -> bytes:
    """GroupMetadataValue v0 written field by field from Kafka's schema: a Connect group, one member."""
    member = (
        _string("worker-1")
        + _string("connect-1")
        + _string("/10.0.0.7")
        + struct.pack(">i", 10000)
        + _bytes(b"\x00\x01sub")
        + _bytes(b"\x00\x01asg")
    )
    return (
        struct.pack(">h", 0)
        + _string("connect")
        + struct.pack(">i", 4)
        + _string("sessioned")
        + _string("worker-1")
        + struct.pack(">i", 1)
        + member
    )


def dump(tmp_path, records: list[tuple[bytes, bytes | None]]) -> list[str]:
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    path = os.path.join(directory, SEG0 + ".log")
    with open(path, "wb") as f:
        f.write(build_batch([(k, v, [], 7) for k, v in records]))
    proc = txlog("inspect", "--offsets-decoder", "--skip-record-metadata", path)
    assert_ok(proc)
    lines = proc.stdout.splitlines()[3:]  # after "Dumping", "Log starting offset" and the batch line
    assert all(line.startswith("| key: ") for line in lines), lines
    return [line[2:] for line in lines]


def test_consumer_group_members_are_decoded(tmp_path):
    sub = encode_subscription(
        ConsumerSubscription(("orders", "refunds"), None, (("orders", (0, 1)),), 5, "rack-a"), version=3
    )
    asg = encode_assignment(ConsumerAssignment((("orders", (0, 1)), ("refunds", (0,))), b"\x01\x02"), version=0)
    value = GroupMetadataValue(
        "consumer",
        5,
        "range",
        "m-1",
        1_700_000_000_000,
        (
            MemberMetadata("m-1", None, "client-1", "/127.0.0.1", 300000, 45000, sub, asg),
            MemberMetadata("m-2", "static-2", "client-2", "/127.0.0.2", 300000, 45000, b"\xff", b""),
        ),
    )
    lines = dump(
        tmp_path,
        [
            (encode_group_metadata_key("g1"), encode_group_metadata_value(value, version=3)),
            (encode_group_metadata_key("g1"), None),
        ],
    )
    key, payload = lines[0].split(" payload: ")
    assert key == 'key: {"type":"2","data":{"group":"g1"}}'
    assert json.loads(payload) == {
        "version": "3",
        "data": {
            "protocolType": "consumer",
            "generation": 5,
            "protocol": "range",
            "leader": "m-1",
            "currentStateTimestamp": 1_700_000_000_000,
            "members": [
                {
                    "memberId": "m-1",
                    "groupInstanceId": None,
                    "clientId": "client-1",
                    "clientHost": "/127.0.0.1",
                    "rebalanceTimeout": 300000,
                    "sessionTimeout": 45000,
                    "subscription": {
                        "topics": ["orders", "refunds"],
                        "userData": None,
                        "ownedPartitions": [{"topic": "orders", "partitions": [0, 1]}],
                        "generationId": 5,
                        "rackId": "rack-a",
                    },
                    "assignment": {
                        "assignedPartitions": [
                            {"topic": "orders", "partitions": [0, 1]},
                            {"topic": "refunds", "partitions": [0]},
                        ],
                        "userData": "AQI=",
                    },
                },
                # Bytes that are no subscription stay bytes, as Kafka swallows the decoding error.
                {
                    "memberId": "m-2",
                    "groupInstanceId": "static-2",
                    "clientId": "client-2",
                    "clientHost": "/127.0.0.2",
                    "rebalanceTimeout": 300000,
                    "sessionTimeout": 45000,
                    "subscription": "/w==",
                    "assignment": "",
                },
            ],
        },
    }
    assert payload.startswith(
        '{"version":"3","data":{"protocolType":"consumer","generation":5,"protocol":"range",'
        '"leader":"m-1","currentStateTimestamp":1700000000000,"members":[{"memberId":"m-1",'
        '"groupInstanceId":null,"clientId":"client-1"'
    )  # compact, schema order
    assert lines[1] == 'key: {"type":"2","data":{"group":"g1"}} payload: <DELETE>'


def test_other_protocol_types_keep_their_bytes_and_v0_has_no_later_fields(tmp_path):
    lines = dump(tmp_path, [(encode_group_metadata_key("connect-cluster"), connect_value_v0())])
    payload = lines[0].split(" payload: ")[1]
    sub, asg = base64.b64encode(b"\x00\x01sub").decode(), base64.b64encode(b"\x00\x01asg").decode()
    assert payload == (
        '{"version":"0","data":{"protocolType":"connect","generation":4,"protocol":"sessioned",'
        '"leader":"worker-1","members":[{"memberId":"worker-1","clientId":"connect-1",'
        '"clientHost":"/10.0.0.7","sessionTimeout":10000,'
        f'"subscription":"{sub}","assignment":"{asg}"}}]}}}}'
    )


def test_a_damaged_group_value_is_reported_in_the_line(tmp_path):
    lines = dump(tmp_path, [(encode_group_metadata_key("g"), connect_value_v0()[:-3])])
    assert lines[0].startswith("key: Error at offset 0, skipping. ")
