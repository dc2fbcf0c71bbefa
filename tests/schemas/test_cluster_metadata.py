"""KRaft snapshot files (`<endOffset>-<epoch>.checkpoint`, `bootstrap.checkpoint`) in `txlog inspect`.

kafka-dump-log dumps them like a `.log`, after a `Snapshot end offset: N, epoch: E` (or
`KRaft bootstrap snapshot`) line, and prints the snapshot's control records as JSON:
`SnapshotHeader {"version":0,"lastContainedLogTimestamp":T}`, `SnapshotFooter {"version":0}`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
from crc32c import crc32c

from storage.records import build_batch
from tests.cli.cli_helpers import assert_ok, txlog

KAFKA_DIRS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "..",
    "shared",
    "fixtures",
    "kafka-dirs",
)
CONTROL = 0x20


def control_batch(base_offset: int, control_type: int, value: bytes, ts: int) -> bytes:
    """A KRaft control batch: a v2 batch with the control attribute, key = (version 0, type)."""
    out = bytearray(build_batch([(struct.pack(">hh", 0, control_type), value, [], ts)], base_offset=base_offset))
    struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | CONTROL)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def snapshot_bytes() -> bytes:
    header = struct.pack(">hq", 0, 1_700_000_000_123) + b"\x00"  # version, lastContainedLogTimestamp, no tags
    return (
        control_batch(0, 3, header, 5)
        + build_batch([(None, b"\x01\x0c\x00\x11metadata.version\x00\x0e\x00", [], 6)], base_offset=1)
        + control_batch(2, 4, struct.pack(">h", 0) + b"\x00", 7)
    )


def test_snapshot_file_prints_its_id_and_control_records(tmp_path):
    path = tmp_path / "__cluster_metadata-0" / "00000000000000000042-0000000003.checkpoint"
    path.parent.mkdir()
    path.write_bytes(snapshot_bytes())
    proc = txlog("inspect", "--deep-iteration", str(path))
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Snapshot end offset: 42, epoch: 3"]
    records = [line for line in lines if line.startswith("| ")]
    assert records == [
        "| offset: 0 CreateTime: 5 keySize: 4 valueSize: 11 sequence: -1 headerKeys: [] "
        'SnapshotHeader {"version":0,"lastContainedLogTimestamp":1700000000123}',
        "| offset: 1 CreateTime: 6 keySize: -1 valueSize: 23 sequence: -1 headerKeys: []",
        '| offset: 2 CreateTime: 7 keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] SnapshotFooter {"version":0}',
    ]
    doc = json.loads(txlog("inspect", "-o", "json", str(path)).stdout)[0]
    assert doc["snapshotId"] == {"endOffset": 42, "epoch": 3} and len(doc["batches"]) == 3


def test_a_damaged_snapshot_header_is_a_problem_not_a_traceback(tmp_path):
    path = tmp_path / "00000000000000000042-0000000003.checkpoint"
    path.write_bytes(control_batch(0, 3, b"\x00\x00\x01", 5))  # the timestamp is cut short
    proc = txlog("inspect", "--deep-iteration", str(path))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "SnapshotHeader control record at offset 0" in proc.stderr


def test_bad_snapshot_name_is_reported(tmp_path):
    path = tmp_path / "metadata.checkpoint"
    path.write_bytes(snapshot_bytes())
    proc = txlog("inspect", str(path))
    assert proc.returncode == 3 and "not a KRaft snapshot name" in proc.stderr


def test_real_kraft_snapshots_and_bootstrap_file(tmp_path):
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    root = tmp_path / "kraft"
    shutil.copytree(os.path.join(KAFKA_DIRS, "ravi-kraft-metadata"), root)
    proc = txlog(
        "inspect",
        "--deep-iteration",
        str(root / "bootstrap.checkpoint"),
        str(root / "__cluster_metadata-0" / "00000000000000007260-0000000001.checkpoint"),
    )
    assert_ok(proc)
    assert "Ignoring unknown file" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "KRaft bootstrap snapshot"
    assert "Snapshot end offset: 7260, epoch: 1" in lines
    assert sum('SnapshotHeader {"version":0,"lastContainedLogTimestamp":' in line for line in lines) == 2
    assert sum(line.endswith('SnapshotFooter {"version":0}') for line in lines) == 2


# Records a Kafka 4.4 broker wrote (its registration, then its first registration change), with
# the payloads its kafka-dump-log --cluster-metadata-decoder printed for them.
KAFKA_44_RECORDS = [
    (
        "010004000000010055dffabb8fe94090b58e6b5317bb9a4c0000000000000012020a504c41494e544558540a3132372e302e"
        "302e31d53b000000080e73686172652e76657273696f6e00000002000e6b726166742e76657273696f6e00000001000e6772"
        "6f75702e76657273696f6e00000001001073747265616d732e76657273696f6e0000000100147472616e73616374696f6e2e"
        "76657273696f6e000000020021656c696769626c652e6c65616465722e7265706c696361732e76657273696f6e0000000100"
        "116d657461646174612e76657273696f6e000700210000010001001102659dfb1cbd084ca0a14779d02a663bec",
        (
            '{"type":"REGISTER_BROKER_RECORD","version":4,"data":{"brokerId":1,"isMigratingZkBroker":false,"i'
            'ncarnationId":"Vd_6u4_pQJC1jmtTF7uaTA","brokerEpoch":18,"endPoints":[{"name":"PLAINTEXT","host":'
            '"127.0.0.1","port":54587,"securityProtocol":0}],"features":[{"name":"share.version","minSupporte'
            'dVersion":0,"maxSupportedVersion":2},{"name":"kraft.version","minSupportedVersion":0,"maxSupport'
            'edVersion":1},{"name":"group.version","minSupportedVersion":0,"maxSupportedVersion":1},{"name":"'
            'streams.version","minSupportedVersion":0,"maxSupportedVersion":1},{"name":"transaction.version",'
            '"minSupportedVersion":0,"maxSupportedVersion":2},{"name":"eligible.leader.replicas.version","min'
            'SupportedVersion":0,"maxSupportedVersion":1},{"name":"metadata.version","minSupportedVersion":7,'
            '"maxSupportedVersion":33}],"rack":null,"fenced":true,"inControlledShutdown":false,"logDirs":["ZZ'
            '37HL0ITKChR3nQKmY77A"]}}'
        ),
    ),
    (
        "01110300000001000000000000001201030101",
        (
            '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":3,"data":{"brokerId":1,"brokerEpoch":18,"c'
            'ordonedLogDirs":[]}}'
        ),
    ),
]


@pytest.mark.parametrize(("value", "payload"), KAFKA_44_RECORDS)
def test_kafka_4_4_registration_records_decode(value, payload):
    """RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3 add the tagged cordonedLogDirs."""
    from txlog.schemas.cluster_metadata import decode_metadata_record, metadata_record_json

    assert metadata_record_json(decode_metadata_record(bytes.fromhex(value))) == payload
