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
