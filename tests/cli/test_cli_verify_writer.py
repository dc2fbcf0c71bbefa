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

import pytest
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


def index_entries(path: str, topic: str = "t", partition: int = 0) -> list[tuple[int, int, int, int]]:
    """(entry offset, position, base and last offset of the batch at that position) of every `.index` entry."""
    d = os.path.join(path, f"{topic}-{partition}")
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".index"):
            continue
        base = int(name.split(".")[0])
        with OffsetIndex(os.path.join(d, name), base, writable=False) as index:
            entries = index.stored_entries()
        with FileRecords.open(os.path.join(d, name[: -len(".index")] + ".log")) as records:
            for offset, position in entries:
                header = records.header_at(position)
                assert header is not None
                out.append((offset, position, header.base_offset, header.last_offset))
    return out


def test_a_group_committed_store_verifies_clean(tmp_path):
    """`seq 1 20000 | txlog produce -t t; txlog verify` exited 3 with index findings."""
    path = str(tmp_path / "store")
    assert_ok(run_txlog("topics", "create", "t", data_dir=path))
    lines = "".join(f"{i}\n" for i in range(1, 20001))
    assert_ok(run_txlog("produce", "-t", "t", input=lines, data_dir=path))
    code, rows = verify(path)
    assert (code, rows) == (0, [])
    index = os.path.join(path, "t-0", filename_prefix(0) + ".index")
    proc = run_txlog("inspect", "--files", index, "--verify-index-only")
    assert_ok(proc)
    assert "every entry matches" in proc.stdout, proc.stdout


def group_appends(path: str, groups: int, per_group: int = 3, partition: int = 0) -> None:
    """What the sender's group commit appends, made certain: appends of several batches of one
    idempotent producer with consecutive sequences (whether the sender groups depends on timing)."""
    with Store.open(path) as store:
        pid = store.allocate_producer_id()
        seq = 0
        for g in range(groups):
            batches = []
            for b in range(per_group):
                records = [(None, b"g%03d-b%d-r%d" % (g, b, r) * 4, None, None) for r in range(4)]
                batches.append(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq))
                seq += len(records)
            store.partition("t", partition).append(b"".join(batches))


def test_the_writer_indexes_a_group_commit_batch_by_batch_as_kafka_does(tmp_path):
    """Kafka 4.4's LogSegment.append: each indexed batch of an append gets its own last offset at its own
    position, so kafka-dump-log's first-batch check holds too (txlog indexed the append's last offset)."""
    path = str(tmp_path / "store")
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"index.interval.bytes": 200})
    group_appends(path, groups=20)
    entries = index_entries(path)
    assert len(entries) > 10
    assert all(offset == last for offset, _, _, last in entries), entries


def test_verify_accepts_the_older_layout_of_an_append_and_refuses_a_wrong_entry(tmp_path):
    """Kafka 3.x (and txlog before) indexed an append of several batches as its largest offset at its first
    batch: readers find every offset through it, so verify accepts it. An offset inside a batch, or one no
    batch from that position ends at before the next entry, is damage."""
    path = str(tmp_path / "store")
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"index.interval.bytes": 1 << 20})  # the writer indexes nothing
    group_appends(path, groups=4)
    log = os.path.join(path, "t-0", filename_prefix(0) + ".log")
    with FileRecords.open(log) as records:
        batches = list(records.batches())
    index = log[: -len(".log")] + ".index"

    def write_index(entries: list[tuple[int, int]]) -> None:
        with open(index, "wb") as f:
            for offset, position in entries:
                f.write(struct.pack(">ii", offset, position))

    appends = [batches[i : i + 3] for i in range(0, len(batches), 3)]
    write_index([(a[-1].last_offset, a[0].position) for a in appends[1:]])  # the older layout
    assert verify(path) == (0, [])
    inspected = run_txlog("inspect", "--files", index, "--verify-index-only")
    assert_ok(inspected)
    inside = batches[4]
    write_index([(inside.base_offset, inside.position)])  # not a batch's last offset
    code, rows = verify(path)
    assert code == 3 and [r["offset"] for r in rows] == [inside.base_offset], rows
    first, second = appends[1], appends[2]
    # An entry whose append would run past the next entry's position: no writer indexes inside an append.
    write_index([(first[-1].last_offset, first[0].position), (second[-1].last_offset, first[1].position)])
    code, rows = verify(path)
    assert code == 3 and [r["offset"] for r in rows] == [first[-1].last_offset], rows


@pytest.mark.parametrize("count", [1000, -1])
def test_verify_finds_a_batch_readers_refuse(tmp_path, count):
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
        struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, count)
        struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[CRC_COVERED_START:])))
        f.seek(victim.position)
        f.write(data)
    code, rows = verify(path)
    assert code == 3
    assert [(r["severity"], r["file"], r["offset"]) for r in rows] == [("error", os.path.basename(log), 3)]
    assert f"byte {victim.position}" in rows[0]["finding"]
    assert ("1000 records" if count > 0 else "negative record count") in rows[0]["finding"]


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
