"""`txlog inspect --cluster-metadata-decoder`: KRaft metadata records printed as kafka-dump-log prints them.

Each record value is an ApiMessageAndVersion frame (uvarint frame version 1, uvarint record
type, uvarint version) followed by the record's flexible-version fields. The hand-built
records below are assembled field by field from Kafka's schemas with helpers written here
(not the decoder's), and the expected payloads are written out literally:
`{"type":"TOPIC_RECORD","version":0,"data":{...}}` with lower-camel-case field names, Uuids in
URL-safe unpadded base64, doubles as Java prints them, and tagged fields only when they are
not their default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from collections import Counter

import pytest

from storage.records import build_batch
from tests.cli.cli_helpers import assert_ok, txlog

FIXTURES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared", "fixtures"
)
RAVI = os.path.join(FIXTURES, "kafka-dirs", "ravi-kraft-metadata")
REAL = os.path.join(FIXTURES, "kafka-real")
T = 1_700_000_000_000
U1 = bytes(range(16))  # Uuid 000102..0f
U1_TEXT = "AAECAwQFBgcICQoLDA0ODw"
U2 = b"\xff" * 16  # every byte 0xff: its base64 uses the URL-safe '_' characters
U2_TEXT = "_____________________w"


# ---- byte builders, independent of the decoder ----------------------------------------------------


def uv(n: int) -> bytes:
    """Unsigned varint: 7 bits a byte, least significant group first, high bit = more follows."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame(api_key: int, version: int) -> bytes:
    return uv(1) + uv(api_key) + uv(version)


def cstr(s: str | None) -> bytes:
    if s is None:
        return uv(0)
    b = s.encode("utf-8")
    return uv(len(b) + 1) + b


def cbytes(b: bytes) -> bytes:
    return uv(len(b) + 1) + b


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def carr_i32(xs: list[int]) -> bytes:
    return uv(len(xs) + 1) + b"".join(i32(x) for x in xs)


def carr_uuid(xs: list[bytes]) -> bytes:
    return uv(len(xs) + 1) + b"".join(xs)


def tags(*pairs: tuple[int, bytes]) -> bytes:
    return uv(len(pairs)) + b"".join(uv(tag) + uv(len(payload)) + payload for tag, payload in pairs)


NO_TAGS = tags()

# (value bytes, the payload kafka-dump-log prints for it)
RECORDS: list[tuple[bytes, str]] = [
    (
        frame(2, 0) + cstr("orders") + U1 + NO_TAGS,
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"' + U1_TEXT + '"}}',
    ),
    (
        frame(3, 2)
        + i32(3)
        + U1
        + carr_i32([1, 2, 3])
        + carr_i32([1, 2])
        + carr_i32([])
        + carr_i32([3])
        + i32(1)
        + i32(7)
        + i32(9)
        + carr_uuid([U2])
        + tags((0, i8(1)), (1, carr_i32([3]))),
        '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":3,"topicId":"' + U1_TEXT + '","replicas":[1,2,3],'
        '"isr":[1,2],"removingReplicas":[],"addingReplicas":[3],"leader":1,"leaderRecoveryState":1,"leaderEpoch":7,'
        '"partitionEpoch":9,"directories":["' + U2_TEXT + '"],"eligibleLeaderReplicas":[3]}}',
    ),
    (
        frame(3, 0)
        + i32(0)
        + U1
        + carr_i32([1])
        + carr_i32([1])
        + carr_i32([])
        + carr_i32([])
        + i32(1)
        + i32(0)
        + i32(0)
        + NO_TAGS,
        '{"type":"PARTITION_RECORD","version":0,"data":{"partitionId":0,"topicId":"' + U1_TEXT + '","replicas":[1],'
        '"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":0,"partitionEpoch":0}}',
    ),
    # tag 30 is no field of the schema: skipped, as Kafka keeps unknown tags aside unprinted
    (
        frame(5, 0) + i32(0) + U1 + tags((0, carr_i32([1])), (1, i32(2)), (30, b"zz")),
        '{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"partitionId":0,"topicId":"'
        + U1_TEXT
        + '","isr":[1],"leader":2}}',
    ),
    (
        frame(5, 1) + i32(4) + U1 + tags((1, i32(-1)), (5, i8(0)), (8, carr_uuid([U1, U2]))),
        '{"type":"PARTITION_CHANGE_RECORD","version":1,"data":{"partitionId":4,"topicId":"' + U1_TEXT + '","leader":-1,'
        '"leaderRecoveryState":0,"directories":["' + U1_TEXT + '","' + U2_TEXT + '"]}}',
    ),
    (
        frame(0, 3)
        + i32(5)
        + i8(0)
        + U1
        + i64(42)
        + uv(2)
        + cstr("PLAINTEXT")
        + cstr("h1")
        + struct.pack(">H", 65535)
        + i16(0)
        + NO_TAGS
        + uv(2)
        + cstr("metadata.version")
        + i16(1)
        + i16(20)
        + NO_TAGS
        + cstr("r1")
        + i8(0)
        + i8(1)
        + tags((0, carr_uuid([U2]))),
        '{"type":"REGISTER_BROKER_RECORD","version":3,"data":{"brokerId":5,"isMigratingZkBroker":false,'
        '"incarnationId":"' + U1_TEXT + '","brokerEpoch":42,"endPoints":[{"name":"PLAINTEXT","host":"h1","port":65535,'
        '"securityProtocol":0}],"features":[{"name":"metadata.version","minSupportedVersion":1,'
        '"maxSupportedVersion":20}],"rack":"r1","fenced":false,"inControlledShutdown":true,"logDirs":["'
        + U2_TEXT
        + '"]}}',
    ),
    (
        frame(0, 0) + i32(1) + U1 + i64(1) + uv(1) + uv(1) + cstr(None) + i8(1) + NO_TAGS,
        '{"type":"REGISTER_BROKER_RECORD","version":0,"data":{"brokerId":1,"incarnationId":"' + U1_TEXT + '",'
        '"brokerEpoch":1,"endPoints":[],"features":[],"rack":null,"fenced":true}}',
    ),
    (
        frame(1, 0) + i32(2) + i64(10) + NO_TAGS,
        '{"type":"UNREGISTER_BROKER_RECORD","version":0,"data":{"brokerId":2,"brokerEpoch":10}}',
    ),
    (frame(7, 0) + i32(2) + i64(11) + NO_TAGS, '{"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":2,"epoch":11}}'),
    (
        frame(8, 0) + i32(2) + i64(12) + NO_TAGS,
        '{"type":"UNFENCE_BROKER_RECORD","version":0,"data":{"id":2,"epoch":12}}',
    ),
    # Fenced (tag 0) is non-default and printed; InControlledShutdown (tag 1) = 0 is its default and is not
    (
        frame(17, 1) + i32(1) + i64(6) + tags((0, i8(1)), (1, i8(0))),
        '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":1,"data":{"brokerId":1,"brokerEpoch":6,"fenced":1}}',
    ),
    (
        frame(12, 0) + cstr("metadata.version") + i16(20) + NO_TAGS,
        '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":20}}',
    ),
    (
        frame(15, 0) + i32(1) + i64(-1) + i64(5000) + NO_TAGS,
        '{"type":"PRODUCER_IDS_RECORD","version":0,"data":{"brokerId":1,"brokerEpoch":-1,"nextProducerId":5000}}',
    ),
    (
        frame(4, 0) + i8(2) + cstr('t\x1f"x') + cstr("cleanup.policy") + cstr(None) + NO_TAGS,
        '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":2,"resourceName":"t\\u001F\\"x",'
        '"name":"cleanup.policy","value":null}}',
    ),
    (frame(9, 0) + U2 + NO_TAGS, '{"type":"REMOVE_TOPIC_RECORD","version":0,"data":{"topicId":"' + U2_TEXT + '"}}'),
    (frame(20, 0) + NO_TAGS, '{"type":"NO_OP_RECORD","version":0,"data":{}}'),
    (
        frame(14, 0)
        + uv(2)
        + cstr("user")
        + cstr(None)
        + NO_TAGS
        + cstr("producer_byte_rate")
        + struct.pack(">d", 1.5e7)
        + i8(1)
        + NO_TAGS,
        '{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"user","entityName":null}],'
        '"key":"producer_byte_rate","value":1.5E7,"remove":true}}',
    ),
    (
        frame(14, 0)
        + uv(2)
        + cstr("client-id")
        + cstr("c1")
        + NO_TAGS
        + cstr("request_percentage")
        + struct.pack(">d", 1048576.0)
        + i8(0)
        + NO_TAGS,
        '{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"client-id","entityName":"c1"}],'
        '"key":"request_percentage","value":1048576.0,"remove":false}}',
    ),
    (
        frame(11, 0) + cstr("alice") + i8(1) + cbytes(b"\x00\x01") + cbytes(b"abc") + cbytes(b"") + i32(4096) + NO_TAGS,
        '{"type":"USER_SCRAM_CREDENTIAL_RECORD","version":0,"data":{"name":"alice","mechanism":1,"salt":"AAE=",'
        '"storedKey":"YWJj","serverKey":"","iterations":4096}}',
    ),
    (frame(21, 0) + i8(0) + NO_TAGS, '{"type":"ZK_MIGRATION_STATE_RECORD","version":0,"data":{"zkMigrationState":0}}'),
    (
        frame(23, 0) + tags((0, cstr("Bootstrap records"))),
        '{"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":"Bootstrap records"}}',
    ),
    (frame(24, 0) + NO_TAGS, '{"type":"END_TRANSACTION_RECORD","version":0,"data":{}}'),
    (frame(25, 0) + NO_TAGS, '{"type":"ABORT_TRANSACTION_RECORD","version":0,"data":{}}'),
]

# Damaged values: each prints one `Error at <offset>, skipping. <reason>` payload and the dump goes on.
DAMAGED: list[tuple[bytes, str]] = [
    (frame(99, 0) + NO_TAGS, "Unknown metadata id 99 (unknown record type 99)"),
    (frame(2, 5) + NO_TAGS, "Failed to deserialize record with type 2: Can't read version 5 of TopicRecord"),
    (
        frame(2, 0) + cstr("orders") + U1[:10],
        "Failed to deserialize record with type 2 (TopicRecord v0): truncated topicId at byte 10",
    ),
    (b"\xff\xff\xff\xff\xff\xff", "Error while reading frame version: unsigned varint longer than 5 bytes at byte 0"),
    (
        frame(3, 0) + i32(0) + U1 + b"\xff\xff\xff",
        "Failed to deserialize record with type 3 (PartitionRecord v0): truncated unsigned varint at byte 23",
    ),
    (frame(20, 0) + NO_TAGS + b"\x07\x07", "Found 2 byte(s) of garbage after 20"),
    (
        frame(2, 0) + cstr(None) + U1 + NO_TAGS,
        "Failed to deserialize record with type 2 (TopicRecord v0): non-nullable field name was serialized as null "
        "at byte 3",
    ),
    (
        frame(17, 0) + i32(1) + i64(6) + tags((1, i8(1))),
        "Failed to deserialize record with type 17 (BrokerRegistrationChangeRecord v0): Tag 1 is not valid for "
        "version 0 at byte 18",
    ),
    (
        uv(0) + uv(2) + uv(0),
        "Could not deserialize metadata record with frame version 0. Note that upgrades from "
        "the preview release of KRaft in 2.8 to newer versions are not supported.",
    ),
]


def write_log(tmp_path, values: list[bytes]) -> str:
    """One batch holding `values` as key-less records at offsets 0.., all at time T."""
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir(exist_ok=True)
    path = directory / "00000000000000000000.log"
    path.write_bytes(build_batch([(None, v, [], T) for v in values], base_offset=0))
    return str(path)


def record_line(offset: int, value: bytes, payload: str) -> str:
    return (
        f"| offset: {offset} CreateTime: {T} keySize: -1 valueSize: {len(value)} sequence: -1 headerKeys: [] "
        f"payload: {payload}"
    )


def payloads(stdout: str) -> list[str]:
    return [line.split(" payload: ", 1)[1] for line in stdout.splitlines() if " payload: " in line]


# ---- hand-built records ----------------------------------------------------------------------------


def test_hand_built_records_print_kafkas_exact_lines(tmp_path):
    path = write_log(tmp_path, [v for v, _ in RECORDS])
    proc = txlog("inspect", "--cluster-metadata-decoder", path)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[3:] == [record_line(i, v, p) for i, (v, p) in enumerate(RECORDS)]
    for p in payloads(proc.stdout):
        json.loads(p)  # Kafka's text is JSON too


def test_damaged_records_give_one_error_line_each_and_the_dump_goes_on(tmp_path):
    good, good_payload = RECORDS[0]
    values = [v for v, _ in DAMAGED] + [good]
    proc = txlog("inspect", "--cluster-metadata-decoder", write_log(tmp_path, values))
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr  # as kafka-dump-log: the error is the record's payload
    expected = [f"Error at {i}, skipping. {reason}" for i, (_, reason) in enumerate(DAMAGED)] + [good_payload]
    assert payloads(proc.stdout) == expected


def test_record_without_value_is_an_error_payload(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    path = directory / "00000000000000000000.log"
    path.write_bytes(build_batch([(None, None, [], T)], base_offset=0))
    proc = txlog("inspect", "--cluster-metadata-decoder", str(path))
    assert_ok(proc)
    assert payloads(proc.stdout) == ["Error at 0, skipping. the record has no value"]


def test_json_output_carries_the_payload(tmp_path):
    value, payload = RECORDS[0]
    doc = json.loads(txlog("inspect", "--cluster-metadata-decoder", "-o", "json", write_log(tmp_path, [value])).stdout)
    record = doc[0]["batches"][0]["records"][0]
    assert record["payload"] == payload and record["key"] is None


def test_only_one_decoder_at_a_time(tmp_path):
    path = write_log(tmp_path, [RECORDS[0][0]])
    proc = txlog("inspect", "--cluster-metadata-decoder", "--offsets-decoder", path)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.startswith("Error: ")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e7, "1.0E7"),
        (9999999.0, "9999999.0"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (123456789.0, "1.23456789E8"),
        (-2.5, "-2.5"),
        (100.0, "100.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
    ],
)
def test_doubles_print_as_java_does(value, text):
    from txlog.schemas.cluster_metadata import java_double

    assert java_double(value) == text


# ---- real KRaft directories -------------------------------------------------------------------------


def _copy(src: str, tmp_path, name: str):
    if not os.path.isdir(src):
        pytest.skip(f"{src} is not beside the repository")
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _types(stdout: str) -> Counter:
    return Counter((json.loads(p)["type"], json.loads(p)["version"]) for p in payloads(stdout))


def _record_count(stdout: str) -> int:
    """Data records, counted from the batch lines (`count: N` of every non-control batch)."""
    batches = re.findall(r"^baseOffset: \d+ lastOffset: \d+ count: (\d+) .* isControl: false ", stdout, re.M)
    return sum(int(n) for n in batches)


def test_real_metadata_log_decodes_every_record(tmp_path):
    root = _copy(RAVI, tmp_path, "ravi")
    log = root / "__cluster_metadata-0" / "00000000000000000000.log"
    proc = txlog("inspect", "--cluster-metadata-decoder", str(log))
    assert_ok(proc)
    found = payloads(proc.stdout)
    assert len(found) == _record_count(proc.stdout) > 29_000
    assert not [p for p in found if not p.startswith("{")]  # no error payloads at all
    # The types this log holds (every one of them in Kafka's schema set, so none prints as unknown).
    assert _types(proc.stdout) == Counter(
        {
            ("NO_OP_RECORD", 0): 29672,
            ("PARTITION_CHANGE_RECORD", 0): 318,
            ("PARTITION_RECORD", 0): 53,
            ("BROKER_REGISTRATION_CHANGE_RECORD", 0): 7,
            ("BROKER_REGISTRATION_CHANGE_RECORD", 1): 2,
            ("REGISTER_BROKER_RECORD", 2): 3,
            ("CONFIG_RECORD", 0): 3,
            ("TOPIC_RECORD", 0): 2,
            ("FEATURE_LEVEL_RECORD", 0): 1,
            ("ZK_MIGRATION_STATE_RECORD", 0): 1,
            ("BEGIN_TRANSACTION_RECORD", 0): 1,
            ("END_TRANSACTION_RECORD", 0): 1,
        }
    )
    data = [json.loads(p) for p in found]

    # Topic names and ids agree with the topics' own partition.metadata files.
    topics = {d["data"]["name"]: d["data"]["topicId"] for d in data if d["type"] == "TOPIC_RECORD"}
    for partition in ("order_created-0", "order_created-1"):
        meta = (root / partition / "partition.metadata").read_text()
        assert f"topic_id: {topics['order_created']}" in meta
    partitions = Counter(d["data"]["topicId"] for d in data if d["type"] == "PARTITION_RECORD")
    # order_created has 3 partitions (the fixture kept the directories of 0 and 1);
    # __consumer_offsets has Kafka's default offsets.topic.num.partitions, 50.
    assert partitions == {topics["order_created"]: 3, topics["__consumer_offsets"]: 50}
    ids = {
        d["data"]["partitionId"]
        for d in data
        if d["type"] == "PARTITION_RECORD" and d["data"]["topicId"] == topics["order_created"]
    }
    assert ids == {0, 1, 2}

    # The only broker is the node of meta.properties.
    node_id = int(re.search(r"^node\.id=(\d+)$", (root / "meta.properties").read_text(), re.M)[1])
    assert {d["data"]["brokerId"] for d in data if d["type"] == "REGISTER_BROKER_RECORD"} == {node_id}


def test_real_snapshots_and_bootstrap_decode(tmp_path):
    root = _copy(RAVI, tmp_path, "ravi")
    meta = root / "__cluster_metadata-0"
    files = [
        root / "bootstrap.checkpoint",
        meta / "00000000000000007260-0000000001.checkpoint",
        meta / "00000000000000024828-0000000003.checkpoint",
    ]
    proc = txlog("inspect", "--cluster-metadata-decoder", *map(str, files))
    assert_ok(proc)
    found = payloads(proc.stdout)
    assert len(found) == _record_count(proc.stdout) == 1 + 2 * 61
    assert all(p.startswith('{"type":') for p in found)
    assert found[0] == (
        '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":14}}'
    )
    assert sum('SnapshotHeader {"version":0' in line for line in proc.stdout.splitlines()) == 3
    assert _types(proc.stdout)[("PARTITION_RECORD", 0)] == 2 * 53


def test_other_real_metadata_log(tmp_path):
    root = _copy(REAL, tmp_path, "real")
    log = root / "__cluster_metadata-0" / "00000000000000000000.log"
    proc = txlog("inspect", "--cluster-metadata-decoder", str(log))
    assert_ok(proc)
    assert payloads(proc.stdout) == [
        '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":20}}',
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"pear","topicId":"caWaUYloT4uTfkgwxx7Hmg"}}',
        '{"type":"PARTITION_RECORD","version":1,"data":{"partitionId":0,"topicId":"caWaUYloT4uTfkgwxx7Hmg",'
        '"replicas":[1],"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":0,'
        '"partitionEpoch":0,"directories":["EAAAAAAAQACAAAAAAAAAAQ"]}}',
    ]


def test_every_cut_or_flipped_real_record_is_a_clean_error(tmp_path):
    """Each distinct real value, cut short at every length or with a byte flipped, never escapes the decoder."""
    if not os.path.isdir(RAVI):
        pytest.skip(f"{RAVI} is not beside the repository")
    from storage.file_records import FileRecords
    from txlog.schemas.cluster_metadata import (
        MetadataRecordError,
        decode_metadata_record,
    )

    path = os.path.join(RAVI, "__cluster_metadata-0", "00000000000000000000.log")
    with FileRecords.open(path) as records:
        values = {r.value for b in records.batches(verify_crc=False) if not b.is_control for r in b.records()}
    assert len(values) > 50
    for value in values:
        decode_metadata_record(value)
        for cut in range(len(value)):  # the last byte is always the tag count: every prefix is incomplete
            with pytest.raises(MetadataRecordError):
                decode_metadata_record(value[:cut])
        for i in range(len(value)):
            for bad in (0x00, 0xFF, 0x80):
                flipped = value[:i] + bytes([bad]) + value[i + 1 :]
                try:
                    decode_metadata_record(flipped)
                except MetadataRecordError:
                    pass
