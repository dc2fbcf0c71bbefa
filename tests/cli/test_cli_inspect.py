"""`txlog inspect`: kafka-dump-log's exact lines (Kafka >= 3.5) for a store built with fixed timestamps.

Every expected line below is written out literally, in Kafka's format (docs/cli-conventions.md §2b):
the CRCs and sizes are those of the bytes Kafka itself would write for the same batches.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from storage.log_files import segment_filename, snapshot_filename
from tests.cli.cli_helpers import Ran, txlog

T0 = 1700000000000


def ok_lines(proc: Ran) -> list[str]:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == ""
    return proc.stdout.splitlines()


def build(root: str) -> None:
    """orders-0: a plain batch, an aborted txn (pid 7), a committed txn (pid 8); internal-0: coordinator records."""
    from storage import Store
    from storage.records import ControlType, build_batch
    from txlog.schemas.offset_log import (
        OffsetKey,
        OffsetValue,
        encode_offset_key,
        encode_offset_value,
    )
    from txlog.schemas.transaction_log import TxnLogValue, TxnState, encode_key, encode_value

    store = Store.open(root)
    try:
        store.create_topic("orders", 1, {"index.interval.bytes": 0})  # index every batch after the first
        log = store.partition("orders", 0)
        log.append(build_batch([(b"k1", b"hello", [("h1", b"x"), ("h2", None)], T0), (None, b"world", None, T0 + 5)]))
        log.append(
            build_batch(
                [(b"a", b"aborted", None, T0 + 10)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
        )
        log.append_marker(ControlType.ABORT, 7, 0, coordinator_epoch=0, timestamp=T0 + 20)
        log.append(
            build_batch(
                [(None, b"c1", None, T0 + 30), (None, b"c2", None, T0 + 31)],
                producer_id=8,
                producer_epoch=1,
                base_sequence=0,
                is_transactional=True,
            )
        )
        log.append_marker(ControlType.COMMIT, 8, 1, coordinator_epoch=3, timestamp=T0 + 40)
        store.create_topic("internal", 1)
        log = store.partition("internal", 0)
        value = TxnLogValue(
            producer_id=5,
            producer_epoch=2,
            timeout_ms=60000,
            state=TxnState.ONGOING,
            partitions=(("orders", 0), ("orders", 1)),
            last_update_ms=T0 + 50,
            start_ms=T0 + 45,
        )
        log.append(
            build_batch(
                [(encode_key("tx-1"), encode_value(value), None, T0 + 50), (encode_key("tx-2"), None, None, T0 + 51)]
            )
        )
        log.append(
            build_batch(
                [
                    (
                        encode_offset_key(OffsetKey("g1", "orders", 0)),
                        encode_offset_value(OffsetValue(42, "", T0 + 60, 1)),
                        None,
                        T0 + 60,
                    ),
                    (encode_offset_key(OffsetKey("g1", "orders", 1)), None, None, T0 + 61),
                ]
            )
        )
    finally:
        store.close()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("inspect") / "store")
    build(root)
    return root


def seg(store_dir: str, topic: str, suffix: str, base: int = 0) -> str:
    return os.path.join(store_dir, f"{topic}-0", segment_filename(base, suffix))


B0 = (
    "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
    "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 0 CreateTime: 1700000000005 size: 96 magic: 2 compresscodec: none crc: 2554458834 isvalid: true"
)
B2 = (
    "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 0 lastSequence: 0 producerId: 7 producerEpoch: 0 "
    "partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 96 CreateTime: 1700000000010 size: 76 magic: 2 compresscodec: none crc: 2822438010 isvalid: true"
)
B3 = (
    "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 producerEpoch: 0 "
    "partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty "
    "position: 172 CreateTime: 1700000000020 size: 78 magic: 2 compresscodec: none crc: 2046167063 isvalid: true"
)
B4 = (
    "baseOffset: 4 lastOffset: 5 count: 2 baseSequence: 0 lastSequence: 1 producerId: 8 producerEpoch: 1 "
    "partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 250 CreateTime: 1700000000031 size: 79 magic: 2 compresscodec: none crc: 2131165459 isvalid: true"
)
B6 = (
    "baseOffset: 6 lastOffset: 6 count: 1 baseSequence: -1 lastSequence: -1 producerId: 8 producerEpoch: 1 "
    "partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty "
    "position: 329 CreateTime: 1700000000040 size: 78 magic: 2 compresscodec: none crc: 1443809995 isvalid: true"
)

R0 = "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 5 sequence: -1 headerKeys: [h1,h2]"
R1 = "| offset: 1 CreateTime: 1700000000005 keySize: -1 valueSize: 5 sequence: -1 headerKeys: []"
R2 = "| offset: 2 CreateTime: 1700000000010 keySize: 1 valueSize: 7 sequence: 0 headerKeys: []"
R3 = (
    "| offset: 3 CreateTime: 1700000000020 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
    "endTxnMarker: ABORT coordinatorEpoch: 0"
)
R4 = "| offset: 4 CreateTime: 1700000000030 keySize: -1 valueSize: 2 sequence: 0 headerKeys: []"
R5 = "| offset: 5 CreateTime: 1700000000031 keySize: -1 valueSize: 2 sequence: 1 headerKeys: []"
R6 = (
    "| offset: 6 CreateTime: 1700000000040 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
    "endTxnMarker: COMMIT coordinatorEpoch: 3"
)


# ---- .log -----------------------------------------------------------------------------------------


def test_log_batch_lines_only(store_dir):
    path = seg(store_dir, "orders", ".log")
    assert ok_lines(txlog("inspect", path)) == [f"Dumping {path}", "Log starting offset: 0", B0, B2, B3, B4, B6]


def test_log_deep_iteration_without_data(store_dir):
    path = seg(store_dir, "orders", ".log")
    assert ok_lines(txlog("inspect", path, "--deep-iteration")) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        B0,
        R0,
        R1,
        B2,
        R2,
        B3,
        R3,
        B4,
        R4,
        R5,
        B6,
        R6,
    ]


def test_log_print_data_log(store_dir):
    path = seg(store_dir, "orders", ".log")
    assert ok_lines(txlog("inspect", "--print-data-log", path)) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        B0,
        R0 + " key: k1 payload: hello",
        R1 + " payload: world",
        B2,
        R2 + " key: a payload: aborted",
        B3,
        R3,
        B4,
        R4 + " payload: c1",
        R5 + " payload: c2",
        B6,
        R6,
    ]


def test_log_skip_record_metadata_quirks(store_dir):
    """Kafka's quirks: a null key leaves ` payload: v` with no '|'; a control record prints an empty line."""
    path = seg(store_dir, "orders", ".log")
    assert ok_lines(txlog("inspect", "--print-data-log", "--skip-record-metadata", path)) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        B0,
        "| key: k1 payload: hello",
        " payload: world",
        B2,
        "| key: a payload: aborted",
        B3,
        "",
        B4,
        " payload: c1",
        " payload: c2",
        B6,
        "",
    ]


def test_log_max_bytes_stops_at_last_whole_batch(store_dir):
    path = seg(store_dir, "orders", ".log")
    # 250 bytes hold the first three batches; the trailing-bytes check is skipped with --max-bytes.
    assert ok_lines(txlog("inspect", "--max-bytes", "260", path)) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        B0,
        B2,
        B3,
    ]


# ---- .index, .timeindex, .txnindex, .snapshot ----------------------------------------------------


def test_index_timeindex_txnindex_and_snapshot_dump_lines(store_dir):
    index, timeindex = seg(store_dir, "orders", ".index"), seg(store_dir, "orders", ".timeindex")
    txnindex, snapshot = seg(store_dir, "orders", ".txnindex"), seg(store_dir, "orders", ".snapshot", 7)
    assert ok_lines(txlog("inspect", index, timeindex, txnindex, snapshot)) == [
        f"Dumping {index}",
        "offset: 2 position: 96",
        "offset: 3 position: 172",
        "offset: 5 position: 250",
        "offset: 6 position: 329",
        f"Dumping {timeindex}",
        "timestamp: 1700000000010 offset: 2",
        "timestamp: 1700000000020 offset: 3",
        "timestamp: 1700000000031 offset: 5",
        "timestamp: 1700000000040 offset: 6",
        f"Dumping {txnindex}",
        "version: 0 producerId: 7 firstOffset: 2 lastOffset: 3 lastStableOffset: 4",
        f"Dumping {snapshot}",
        (
            "producerId: 7 producerEpoch: 0 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 1700000000020 firstSequence: 0 lastSequence: 0 lastOffset: 2 offsetDelta: 0 "
            "timestamp: 1700000000020"
        ),
        (
            "producerId: 8 producerEpoch: 1 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 1700000000040 firstSequence: 0 lastSequence: 1 lastOffset: 5 offsetDelta: 1 "
            "timestamp: 1700000000040"
        ),
    ]


def test_snapshot_open_transaction_and_no_batch(tmp_path):
    from storage.producer_snapshot import SnapshotEntry, write_snapshot

    path = write_snapshot(
        str(tmp_path),
        12,
        [SnapshotEntry(1004, 0, 371, 371, 1, T0, -1, 5), SnapshotEntry(3, 2, -1, -1, 0, T0 + 1, 4, -1)],
    )
    assert ok_lines(txlog("inspect", path)) == [
        f"Dumping {path}",
        (
            "producerId: 3 producerEpoch: 2 coordinatorEpoch: 4 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 1700000000001"
        ),
        (
            "producerId: 1004 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[5] "
            "lastTimestamp: 1700000000000 firstSequence: 370 lastSequence: 371 lastOffset: 371 offsetDelta: 1 "
            "timestamp: 1700000000000"
        ),
    ]


def test_empty_index_and_unknown_file(store_dir):
    index = seg(store_dir, "internal", ".index")  # two batches: the first is never indexed, the second is small
    other = os.path.join(store_dir, "orders-0", "leader-epoch-checkpoint")
    proc = txlog("inspect", index, other)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"Dumping {index}", f"{index} is empty.", f"Dumping {other}"]
    assert proc.stderr.splitlines() == [f"Ignoring unknown file {other}"]


# ---- decoders -------------------------------------------------------------------------------------

I0 = (
    "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
    "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 0 CreateTime: 1700000000051 size: 148 magic: 2 compresscodec: none crc: 1425873168 isvalid: true"
)
I2 = (
    "baseOffset: 2 lastOffset: 3 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
    "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 148 CreateTime: 1700000000061 size: 135 magic: 2 compresscodec: none crc: 1308927012 isvalid: true"
)


def test_transaction_log_decoder(store_dir):
    path = seg(store_dir, "internal", ".log")
    assert ok_lines(txlog("inspect", "--transaction-log-decoder", "--max-bytes", "148", path)) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        I0,
        (
            "| offset: 0 CreateTime: 1700000000050 keySize: 8 valueSize: 56 sequence: -1 headerKeys: [] "
            'key: {"type":"0","data":{"transactionalId":"tx-1"}} payload: {"version":"1","data":{"producerId":5,'
            '"producerEpoch":2,"transactionTimeoutMs":60000,"transactionStatus":"Ongoing","transactionPartitions":'
            '[{"topic":"orders","partitionIds":[0,1]}],"transactionLastUpdateTimestampMs":1700000000050,'
            '"transactionStartTimestampMs":1700000000045,"clientTransactionVersion":2}}'
        ),
        (
            "| offset: 1 CreateTime: 1700000000051 keySize: 8 valueSize: -1 sequence: -1 headerKeys: [] "
            'key: {"type":"0","data":{"transactionalId":"tx-2"}} payload: <DELETE>'
        ),
    ]


def test_offsets_decoder_prints_commits_as_kafka_json(store_dir):
    path = seg(store_dir, "internal", ".log")
    lines = ok_lines(txlog("inspect", "--offsets-decoder", path))
    assert lines[:3] == [f"Dumping {path}", "Log starting offset: 0", I0]
    assert lines[-3:] == [
        I2,
        (
            "| offset: 2 CreateTime: 1700000000060 keySize: 18 valueSize: 24 sequence: -1 headerKeys: [] "
            'key: {"type":"1","data":{"group":"g1","topic":"orders","partition":0}} '
            'payload: {"version":"3","data":{"offset":42,"leaderEpoch":1,"metadata":"",'
            '"commitTimestamp":1700000000060}}'
        ),
        (
            "| offset: 3 CreateTime: 1700000000061 keySize: 18 valueSize: -1 sequence: -1 headerKeys: [] "
            'key: {"type":"1","data":{"group":"g1","topic":"orders","partition":1}} payload: <DELETE>'
        ),
    ]


def test_two_decoders_is_a_usage_error(store_dir):
    proc = txlog("inspect", "--offsets-decoder", "--transaction-log-decoder", seg(store_dir, "internal", ".log"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("Error: ")


# ---- verification ---------------------------------------------------------------------------------


def test_verify_index_only_and_sanity_check_pass(store_dir):
    index, timeindex = seg(store_dir, "orders", ".index"), seg(store_dir, "orders", ".timeindex")
    assert ok_lines(txlog("inspect", "--verify-index-only", index, timeindex)) == [
        f"Dumping {index}",
        f"Dumping {timeindex}",
        "Verified 2 index files against their logs: every entry matches.",
    ]  # txlog's one-line result
    assert ok_lines(txlog("inspect", "--index-sanity-check", index, timeindex)) == [
        f"Dumping {index}",
        f"{index} passed sanity check.",
        f"Dumping {timeindex}",
        f"{timeindex} passed sanity check.",
    ]


def _copy_partition(store_dir: str, tmp_path) -> str:
    import shutil

    dst = tmp_path / "orders-0"
    shutil.copytree(os.path.join(store_dir, "orders-0"), dst)
    return str(dst)


def test_corrupt_index_exits_3(store_dir, tmp_path):
    part = _copy_partition(store_dir, tmp_path)
    index = os.path.join(part, segment_filename(0, ".index"))
    with open(index, "r+b") as f:  # entry 1 (offset 3) now points at batch 4-5
        f.seek(8 + 4)
        f.write((250).to_bytes(4, "big"))
    proc = txlog("inspect", "--verify-index-only", index)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert proc.stdout.splitlines() == [f"Dumping {index}"]
    assert proc.stderr.splitlines() == [
        f"Mismatches in :{os.path.abspath(index)}",
        "  Index offset: 3, log offset: 5",
        "Error: inspect found problems (see above)",
    ]
    # Without --verify-index-only the (corrupt) entries are still printed, as Kafka does.
    proc = txlog("inspect", index)
    assert proc.returncode == 3
    assert proc.stdout.splitlines()[2] == "offset: 3 position: 250"


def test_corrupt_time_index_and_failed_sanity_check_exit_3(store_dir, tmp_path):
    part = _copy_partition(store_dir, tmp_path)
    timeindex = os.path.join(part, segment_filename(0, ".timeindex"))
    with open(timeindex, "r+b") as f:
        f.seek(12)
        f.write((T0 + 99).to_bytes(8, "big"))  # entry for offset 3 now claims 1700000000099
    proc = txlog("inspect", "--verify-index-only", timeindex)
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [
        f"Found timestamp mismatch in :{os.path.abspath(timeindex)}",
        "  Index timestamp: 1700000000099, log timestamp: 1700000000020",
        f"Found out of order timestamp in :{os.path.abspath(timeindex)}",
        "  Index timestamp: 1700000000031, Previously indexed timestamp: 1700000000099",
        "Error: inspect found problems (see above)",
    ]
    index = os.path.join(part, segment_filename(0, ".index"))
    with open(index, "ab") as f:
        f.write(b"\x00\x00\x00")  # no longer a multiple of 8
    proc = txlog("inspect", "--index-sanity-check", index)
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == [f"Dumping {index}"]
    assert proc.stderr.splitlines()[0] == (
        f"{index} failed sanity check: Index file {os.path.abspath(index)} is corrupt, found 35 bytes which is "
        "neither positive nor a multiple of 8"
    )


def test_corrupt_snapshot_exits_3(store_dir, tmp_path):
    part = _copy_partition(store_dir, tmp_path)
    snapshot = os.path.join(part, snapshot_filename(7))
    with open(snapshot, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 0xFF]))
    proc = txlog("inspect", snapshot)
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == [f"Dumping {snapshot}"]
    assert proc.stderr.splitlines()[0].startswith("Snapshot is corrupt (CRC is no longer valid). Stored crc: ")


def test_trailing_garbage_is_reported_and_exits_3(store_dir, tmp_path):
    part = _copy_partition(store_dir, tmp_path)
    log = os.path.join(part, segment_filename(0, ".log"))
    with open(log, "ab") as f:
        f.write(b"\x00" * 10)
    proc = txlog("inspect", log)
    assert proc.returncode == 3
    assert proc.stdout.splitlines()[-2:] == [B6, f"Found 10 invalid bytes at the end of {segment_filename(0, '.log')}"]


# ---- directories, real Kafka files, JSON ----------------------------------------------------------


def test_directory_and_default_data_dir(store_dir):
    lines = ok_lines(txlog("inspect", data_dir=store_dir))
    dumped = [line[len("Dumping ") :] for line in lines if line.startswith("Dumping ")]
    assert dumped == [seg(store_dir, "internal", s) for s in (".index", ".log", ".timeindex")] + [
        seg(store_dir, "internal", ".snapshot", 4)
    ] + [seg(store_dir, "orders", s) for s in (".index", ".log", ".timeindex", ".txnindex")] + [
        seg(store_dir, "orders", ".snapshot", 7)
    ]


def _digest(root: str) -> dict[str, str]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[p] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_real_kafka_dir_read_only(kafka_real_copy):
    before = _digest(kafka_real_copy)
    path = os.path.join(kafka_real_copy, "__cluster_metadata-0", segment_filename(0, ".log"))
    assert ok_lines(txlog("inspect", "--deep-iteration", kafka_real_copy)) == [
        f"Dumping {path}",
        "Log starting offset: 0",
        (
            "baseOffset: 1 lastOffset: 1 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
            "partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
            "position: 0 CreateTime: 1726045943832 size: 91 magic: 2 compresscodec: none crc: 2959689084 isvalid: true"
        ),
        "| offset: 1 CreateTime: 1726045943832 keySize: -1 valueSize: 23 sequence: -1 headerKeys: []",
        (
            "baseOffset: 2 lastOffset: 3 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
            "partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
            "position: 91 CreateTime: 1726045957397 size: 167 magic: 2 compresscodec: none crc: 204248102 isvalid: true"
        ),
        "| offset: 2 CreateTime: 1726045957397 keySize: -1 valueSize: 25 sequence: -1 headerKeys: []",
        "| offset: 3 CreateTime: 1726045957397 keySize: -1 valueSize: 65 sequence: -1 headerKeys: []",
    ]
    assert _digest(kafka_real_copy) == before  # nothing written, nothing created


def test_json_and_jsonl(store_dir):
    path = seg(store_dir, "orders", ".log")
    doc = json.loads(ok_lines_text(txlog("inspect", "--deep-iteration", "--output", "json", path)))
    assert [d["file"] for d in doc] == [path]
    batches = doc[0]["batches"]
    assert [b["baseOffset"] for b in batches] == [0, 2, 3, 4, 6]
    assert batches[2]["isControl"] is True and batches[2]["size"] == 78
    assert batches[2]["records"] == [
        {
            "offset": 3,
            "timestampType": "CreateTime",
            "timestamp": T0 + 20,
            "keySize": 4,
            "valueSize": 6,
            "sequence": -1,
            "headerKeys": [],
            "controlType": "ABORT",
            "controlTypeId": 0,
            "coordinatorEpoch": 0,
        }
    ]
    lines = ok_lines(txlog("inspect", "--output", "jsonl", seg(store_dir, "orders", ".txnindex")))
    assert [json.loads(line) for line in lines] == [
        {
            "file": seg(store_dir, "orders", ".txnindex"),
            "type": "abortedTxn",
            "version": 0,
            "producerId": 7,
            "firstOffset": 2,
            "lastOffset": 3,
            "lastStableOffset": 4,
        }
    ]


def ok_lines_text(proc: Ran) -> str:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def test_missing_file_is_an_error(tmp_path):
    proc = txlog("inspect", str(tmp_path / "nope.log"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"Error: no such file or directory: {tmp_path / 'nope.log'}"]
