"""Issue 23, item 2: `txlog verify` agrees with the writer and finds what readers refuse.

A healthy store is silent however it was written: every producer path (send + flush,
produce_many, transactions committed and aborted, idempotent, the sender's group commit with
several batches in one append, `txlog produce`), with segments rolling and several
partitions. The offset index of an append of several batches holds its largest offset at its
first batch (Kafka's LogSegment.append), which kafka-dump-log's check of the first batch alone
calls a mismatch. A batch every reader refuses (valid CRC, records that cannot be decoded) is
a finding.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import txlog
from storage import Store
from storage.file_records import FileRecords
from storage.log_files import filename_prefix
from storage.offset_index import OffsetIndex
from storage.records import CRC_COVERED_START, CRC_OFFSET, RECORDS_COUNT_OFFSET, build_batch, crc32c
from tests.cli.cli_helpers import assert_ok
from tests.cli.cli_helpers import txlog as run_txlog


def verify(path: str) -> tuple[int, list[dict]]:
    proc = run_txlog("verify", "--output", "json", data_dir=path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def appends_of_several_batches(path: str, topic: str = "t", partition: int = 0) -> int:
    """Index entries whose position's first batch ends before the entry's offset: appends of several batches."""
    d = os.path.join(path, f"{topic}-{partition}")
    found = 0
    for name in os.listdir(d):
        if not name.endswith(".index"):
            continue
        base = int(name.split(".")[0])
        with OffsetIndex(os.path.join(d, name), base, writable=False) as index:
            entries = index.stored_entries()
        with FileRecords.open(os.path.join(d, name[: -len(".index")] + ".log")) as records:
            for offset, position in entries:
                header = records.header_at(position)
                found += header is not None and header.last_offset < offset
    return found


def test_a_group_committed_store_verifies_clean(tmp_path):
    """`seq 1 20000 | txlog produce -t t; txlog verify` exited 3 with index findings."""
    path = str(tmp_path / "store")
    assert_ok(run_txlog("topics", "create", "t", data_dir=path))
    lines = "".join(f"{i}\n" for i in range(1, 20001))
    assert_ok(run_txlog("produce", "-t", "t", input=lines, data_dir=path))
    assert appends_of_several_batches(path) > 0, "the sender's group commit wrote no append of several batches"
    code, rows = verify(path)
    assert (code, rows) == (0, [])
    index = os.path.join(path, "t-0", filename_prefix(0) + ".index")
    proc = run_txlog("inspect", "--files", index, "--verify-index-only")
    assert_ok(proc)
    assert "every entry matches" in proc.stdout, proc.stdout


def test_verify_finds_a_batch_readers_refuse(tmp_path):
    """A valid CRC over an impossible record count: every reader raises there, so verify reports it."""
    path = str(tmp_path / "store")
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1)
    producer = txlog.Producer(path, linger_ms=60_000)
    for i in range(6):
        producer.send("t", b"v%d" % i, partition=0)
        producer.flush()
    producer.close()
    log = os.path.join(path, "t-0", filename_prefix(0) + ".log")
    with FileRecords.open(log) as records:
        victim = list(records.batches())[3]
    with open(log, "r+b") as f:
        f.seek(victim.position)
        data = bytearray(f.read(victim.size))
        struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 1000)
        struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[CRC_COVERED_START:])))
        f.seek(victim.position)
        f.write(data)
    code, rows = verify(path)
    assert code == 3
    assert [(r["severity"], r["file"], r["offset"]) for r in rows] == [("error", os.path.basename(log), 3)]
    assert f"byte {victim.position}" in rows[0]["finding"] and "1000 records" in rows[0]["finding"]


# ---- every producer path, as a property ------------------------------------------------------------

PATHS = (
    "send_flush",
    "produce_many",
    "group_commit",
    "group_append",
    "txn_commit",
    "txn_abort",
    "idempotent",
    "cli_produce",
)


def _group_append(path: str, values: list[bytes], partitions: int) -> None:
    """What the sender's group commit appends, made certain: appends of several batches of one
    idempotent producer with consecutive sequences (whether the sender groups depends on timing)."""
    with Store.open(path) as store:
        pid = store.allocate_producer_id()
        for p in range(partitions):
            mine = values[p::partitions]
            chunks = [mine[i : i + 4] for i in range(0, len(mine), 4)]
            batches, seq = [], 0
            for chunk in chunks:
                records = [(None, v, None, None) for v in chunk]
                batches.append(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq))
                seq += len(chunk)
            for i in range(0, len(batches), 3):  # appends of three batches: the second one on gets indexed
                store.partition("t", p).append(b"".join(batches[i : i + 3]))


def _write(path: str, how: str, n: int, partitions: int, step: int) -> None:
    values = [b"%s-%d-%d" % (how.encode(), step, i) * 3 for i in range(n)]
    if how == "group_append":
        _group_append(path, values, partitions)
        return
    if how == "cli_produce":
        lines = "".join(v.decode() + "\n" for v in values)
        assert_ok(run_txlog("produce", "-t", "t", input=lines, data_dir=path))
        return
    settings_for = {
        "send_flush": {"linger_ms": 60_000},
        "produce_many": {},
        "group_commit": {"batch_size": 256, "linger_ms": 0},
        "txn_commit": {"transactional_id": "tx"},
        "txn_abort": {"transactional_id": "tx"},
        "idempotent": {"enable_idempotence": True},
    }
    producer = txlog.Producer(path, **settings_for[how])
    try:
        if how.startswith("txn"):
            producer.init_transactions()
            producer.begin_transaction()
        if how == "produce_many":
            producer.produce_many("t", values).get()
        else:
            for i, value in enumerate(values):
                producer.send("t", value, partition=i % partitions)
                if how == "send_flush" and i % 3 == 2:
                    producer.flush()
        if how == "txn_commit":
            producer.commit_transaction()
        elif how == "txn_abort":
            producer.abort_transaction()
        else:
            producer.flush()
    finally:
        producer.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(steps=[("group_append", 120)], partitions=1, segment_bytes=1 << 20, index_interval=64)
@given(
    steps=st.lists(st.tuples(st.sampled_from(PATHS), st.integers(1, 120)), min_size=1, max_size=4),
    partitions=st.integers(1, 3),
    segment_bytes=st.sampled_from([1024, 4096, 1 << 20]),
    index_interval=st.sampled_from([64, 512, 4096]),
)
def test_every_producer_path_passes_verify(steps, partitions, segment_bytes, index_interval):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store")
        with txlog.Admin(path) as admin:
            admin.create_topic(
                "t", partitions, {"segment.bytes": segment_bytes, "index.interval.bytes": index_interval}
            )
        for step, (how, n) in enumerate(steps):
            _write(path, how, n, partitions, step)
        code, rows = verify(path)
        assert (code, rows) == (0, []), rows
