"""Kafka log directories as real brokers leave them (issue 16), through `txlog` run in-process.

Each test builds the small layout it needs by hand (Kafka's file names, a `meta.properties`,
no `txlog.json`) or copies a real broker's directory from ../shared/fixtures/kafka-dirs to tmp:
transaction-log values whose partitions are not sorted, time indexes that point inside a
batch, a broker holding only some partitions, `partition.metadata` topic ids, the root's
offset checkpoints, and a `.txnindex` entry missing beside its ABORT marker.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

import txlog as api
from storage.log_files import filename_prefix
from storage.records import build_batch
from tests.cli.cli_helpers import assert_ok, assert_one_error, tree, txlog
from txlog.schemas.transaction_log import TxnLogValue, TxnState, decode_value

KAFKA_DIRS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "..",
    "shared",
    "fixtures",
    "kafka-dirs",
)
SEG0 = filename_prefix(0)


def kafka_dir(root, partitions: dict[str, bytes]) -> str:
    """A broker's log dir: `meta.properties` and one segment per `<topic>-<p>` given (its bytes)."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "meta.properties"), "w") as f:
        f.write("version=1\nnode.id=1\ncluster.id=test\n")
    for name, data in partitions.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        with open(os.path.join(root, name, SEG0 + ".log"), "wb") as f:
            f.write(data)
    return str(root)


def records(*values: bytes, ts: int = 1_700_000_000_000) -> list[tuple]:
    return [(None, v, [], ts + i) for i, v in enumerate(values)]


def write_checkpoint(root: str, name: str, entries: list[tuple[str, int, int]]) -> None:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for t, p, o in entries]
    with open(os.path.join(root, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def verify_rows(root: str) -> tuple[int, list[dict], str]:
    proc = txlog("verify", "--output", "json", data_dir=root)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


# ---- item 2: the transaction log decoder keeps the stored partition order -------------------------


def _txn_value_v0(partitions: list[tuple[str, list[int]]]) -> bytes:
    """TransactionLogValue v0 written field by field from Kafka's schema, topics in the given order."""
    out = struct.pack(">hqhib", 0, 4001, 3, 60000, 1)  # version, producerId, epoch, timeoutMs, Ongoing
    out += struct.pack(">i", len(partitions))
    for topic, ids in partitions:
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ids))
        out += b"".join(struct.pack(">i", p) for p in ids)
    return out + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)


def test_transaction_log_decoder_prints_partitions_in_stored_order(tmp_path):
    key = struct.pack(">h", 0) + struct.pack(">h", 5) + b"app-7"
    value = _txn_value_v0([("zeta", [2, 0]), ("alpha", [1])])
    root = kafka_dir(tmp_path / "kafka", {"__transaction_state-0": build_batch([(key, value, [], 1)])})
    proc = txlog("inspect", "--transaction-log-decoder", os.path.join(root, "__transaction_state-0", SEG0 + ".log"))
    assert_ok(proc)
    assert (
        "| offset: 0 CreateTime: 1 keySize: 9 valueSize: 70 sequence: -1 headerKeys: [] "
        'key: {"type":"0","data":{"transactionalId":"app-7"}} payload: {"version":"0","data":{"producerId":4001,'
        '"producerEpoch":3,"transactionTimeoutMs":60000,"transactionStatus":"Ongoing","transactionPartitions":'
        '[{"topic":"zeta","partitionIds":[2,0]},{"topic":"alpha","partitionIds":[1]}],'
        '"transactionLastUpdateTimestampMs":1700000000500,"transactionStartTimestampMs":1700000000000}}'
    ) in proc.stdout.splitlines()
    # The order is kept, but it is no part of the state: equal states compare equal whatever it is.
    decoded = decode_value(value)
    assert decoded.partitions == (("zeta", 2), ("zeta", 0), ("alpha", 1))
    reordered = TxnLogValue(
        4001,
        3,
        60000,
        TxnState.ONGOING,
        (("alpha", 1), ("zeta", 0), ("zeta", 2)),
        1_700_000_000_500,
        1_700_000_000_000,
        client_transaction_version=0,
    )
    assert decoded == reordered and hash(decoded) == hash(reordered)
    assert decoded != TxnLogValue(
        4001,
        3,
        60000,
        TxnState.ONGOING,
        (("alpha", 1),),
        1_700_000_000_500,
        1_700_000_000_000,
        client_transaction_version=0,
    )


# ---- item 3: a time index may point inside a batch ------------------------------------------------


def _time_index(root: str, entries: list[tuple[int, int]]) -> None:
    with open(os.path.join(root, "t-0", SEG0 + ".timeindex"), "wb") as f:
        f.write(b"".join(struct.pack(">qi", ts, off) for ts, off in entries))


@pytest.fixture
def timed(tmp_path) -> str:
    """Two 3-record batches whose largest timestamps sit in the middle (offsets 1 and 4)."""
    first = build_batch([(None, b"a", [], 100), (None, b"b", [], 300), (None, b"c", [], 200)])
    second = build_batch([(None, b"d", [], 400), (None, b"e", [], 500), (None, b"f", [], 450)], base_offset=3)
    return kafka_dir(tmp_path / "kafka", {"t-0": first + second})


def test_verify_accepts_time_index_entries_inside_a_batch(timed):
    _time_index(timed, [(300, 1), (500, 4)])  # what Kafka 3.6 writes: the record with the max timestamp
    code, rows, _ = verify_rows(timed)
    assert (code, rows) == (0, [])
    _time_index(timed, [(300, 2), (500, 5)])  # the older layout, each batch's last offset
    assert verify_rows(timed)[:2] == (0, [])


def test_verify_still_finds_wrong_time_index_entries(timed):
    _time_index(timed, [(301, 1), (500, 4), (600, 9)])
    code, rows, _ = verify_rows(timed)
    assert code == 3
    findings = [(r["offset"], r["finding"]) for r in rows]
    assert (
        1,
        "time index timestamp 301 for offset 1, but the batch holding it (offsets 0..2) has max timestamp 300",
    ) in findings
    assert (9, "time index entry (600, offset 9) names an offset no batch of the segment holds") in findings
    assert len(findings) == 2
    _time_index(timed, [(500, 4), (300, 1)])
    code, rows, _ = verify_rows(timed)
    assert code == 3 and any("is not after the previous 500" in r["finding"] for r in rows)


# ---- item 4: a broker holding only some partitions ----------------------------------------------


@pytest.fixture
def partial(tmp_path) -> str:
    """A txlog store turned into a broker's log dir that lacks `in-1` and `__transaction_state-0`."""
    src = str(tmp_path / "store")
    admin = api.Admin(src)
    admin.create_topic("in", 3)
    p = api.Producer(src, transactional_id="app-1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.send("in", value=b"v%d" % i, partition=i % 3)
    p.commit_transaction()
    p.close()
    root = str(tmp_path / "kafka")
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("txlog.json", "producer-ids.*", "txlog-store.lock"))
    for name in ("in-1", "__transaction_state-0"):
        shutil.rmtree(os.path.join(root, name))
    with open(os.path.join(root, "meta.properties"), "w") as f:
        f.write("version=1\n")
    return root


def test_partial_partition_set_describes_and_verifies_what_is_there(partial):
    before = tree(partial)
    proc = txlog("topics", "describe", "in", data_dir=partial)
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "Topic: in\tTopicId: <none>\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: in\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: in\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]
    assert "partition 1 of topic 'in' is not in this log directory" in proc.stderr
    doc = json.loads(txlog("topics", "describe", "in", "-o", "json", data_dir=partial).stdout)
    assert doc["absentPartitions"] == [1] and [p["partition"] for p in doc["partitions"]] == [0, 2]
    code, rows, stderr = verify_rows(partial)
    assert (code, rows) == (0, [])
    assert "partition 1 of topic 'in' is not in this log directory" in stderr
    assert "partition 0 of topic '__transaction_state' is not in this log directory" in stderr
    assert tree(partial) == before


def test_partial_partition_set_reads_present_partitions_and_refuses_absent_ones(partial):
    proc = txlog("consume", "-t", "in", data_dir=partial)
    assert_ok(proc)
    assert sorted(proc.stdout.split()) == ["v0", "v2", "v3", "v5"]
    message = assert_one_error(txlog("consume", "-t", "in", "-p", "1", data_dir=partial))
    assert "partition 1 of topic 'in' is not in this Kafka log directory" in message
    assert "partitions here: 0, 2" in message
    listed = txlog("transactions", "list", data_dir=partial)
    assert_ok(listed)
    assert "app-1" in listed.stdout
    described = txlog("transactions", "describe", "--transactional-id", "app-1", data_dir=partial)
    assert_ok(described)
    assert "CompleteCommit" in described.stdout


# ---- item 7: the topic id from partition.metadata --------------------------------------------------


def _partition_metadata(root: str, name: str, text: str) -> None:
    with open(os.path.join(root, name, "partition.metadata"), "w") as f:
        f.write(text)


def test_topic_id_comes_from_partition_metadata(tmp_path):
    root = kafka_dir(tmp_path / "kafka", {"t-0": build_batch(records(b"x")), "t-1": b""})
    for name in ("t-0", "t-1"):
        _partition_metadata(root, name, "version: 0\ntopic_id: q78Hxe0QSZyFQ2Zdyc-gIA")
    proc = txlog("topics", "describe", "t", data_dir=root)
    assert_ok(proc)
    assert proc.stdout.splitlines()[0] == (
        "Topic: t\tTopicId: q78Hxe0QSZyFQ2Zdyc-gIA\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: "
    )
    assert (
        json.loads(txlog("topics", "describe", "t", "-o", "json", data_dir=root).stdout)["topicId"]
        == "q78Hxe0QSZyFQ2Zdyc-gIA"
    )
    _partition_metadata(root, "t-1", "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    assert "record different topic ids" in assert_one_error(txlog("topics", "describe", "t", data_dir=root))
    _partition_metadata(root, "t-1", "version: 0\ntopic_id: not-a-uuid\n")
    message = assert_one_error(txlog("topics", "describe", "t", data_dir=root))
    assert "t-1/partition.metadata" in message and "22-character base64 UUID" in message


# ---- item 9: the root's checkpoints, and a .txnindex entry Kafka will rebuild ------------------------


def test_verify_reports_a_log_ending_before_its_checkpointed_offsets(tmp_path):
    root = kafka_dir(tmp_path / "kafka", {"t-0": build_batch(records(b"a", b"b", b"c"))})
    write_checkpoint(root, "recovery-point-offset-checkpoint", [("t", 0, 3), ("gone", 0, 99)])
    write_checkpoint(root, "replication-offset-checkpoint", [("t", 0, 3)])
    write_checkpoint(root, "log-start-offset-checkpoint", [("t", 0, 0)])
    assert verify_rows(root)[:2] == (0, [])  # the log ends exactly where the broker said
    write_checkpoint(root, "replication-offset-checkpoint", [("t", 0, 7)])
    write_checkpoint(root, "recovery-point-offset-checkpoint", [("t", 0, 5)])
    code, rows, _ = verify_rows(root)
    assert code == 3
    assert [(r["offset"], r["finding"]) for r in rows] == [
        (
            3,
            "the log ends at offset 3, before the recovery point (flushed to disk) 5 that "
            "recovery-point-offset-checkpoint records: the log directory was copied while the broker was "
            "writing, or data was lost",
        ),
        (
            3,
            "the log ends at offset 3, before the high watermark (acknowledged, visible to consumers) 7 that "
            "replication-offset-checkpoint records: the log directory was copied while the broker was "
            "writing, or data was lost",
        ),
    ]
    with open(os.path.join(root, "log-start-offset-checkpoint"), "w") as f:
        f.write("0\n2\nt 0 0\n")  # says two entries, holds one
    code, rows, _ = verify_rows(root)
    assert any(
        r["file"] == "log-start-offset-checkpoint" and "expected 2 entries, found 1" in r["finding"] for r in rows
    )


@pytest.fixture
def aborted(tmp_path) -> str:
    """A broker log dir whose partition holds an aborted transaction, its `.txnindex` entry deleted."""
    src = str(tmp_path / "store")
    api.Admin(src).create_topic("t", 1)
    p = api.Producer(src, transactional_id="A")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"doomed")
    p.flush()
    p.abort_transaction()
    p.close()
    root = str(tmp_path / "kafka")
    shutil.copytree(os.path.join(src, "t-0"), os.path.join(root, "t-0"))
    index = os.path.join(root, "t-0", SEG0 + ".txnindex")
    assert os.path.getsize(index) == 34
    os.remove(index)
    with open(os.path.join(root, "meta.properties"), "w") as f:
        f.write("version=1\n")
    return root


def test_missing_txnindex_entry_is_a_repair_where_kafka_rebuilds_the_index(aborted):
    write_checkpoint(aborted, "recovery-point-offset-checkpoint", [("t", 0, 0)])
    code, rows, _ = verify_rows(aborted)
    assert code == 3 and [r["severity"] for r in rows] == ["warning"]
    assert rows[0]["finding"].endswith(
        "has no .txnindex entry; the index is rebuilt from the markers when Kafka "
        "next starts (no clean shutdown, segment past the recovery point 0): a "
        "repair, not exposed data"
    )


def test_missing_txnindex_entry_after_a_clean_shutdown_exposes_aborted_data(aborted):
    write_checkpoint(aborted, "recovery-point-offset-checkpoint", [("t", 0, 2)])
    open(os.path.join(aborted, ".kafka_cleanshutdown"), "w").close()
    code, rows, _ = verify_rows(aborted)
    assert code == 3 and [r["severity"] for r in rows] == ["error"]
    assert (
        "Kafka rebuilds nothing before a read: its read_committed readers would see the aborted data"
        in rows[0]["finding"]
    )


# ---- the real brokers' directories ----------------------------------------------------------------


@pytest.fixture
def real_dirs(tmp_path) -> str:
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    dst = tmp_path / "kafka-dirs"
    shutil.copytree(KAFKA_DIRS, dst)
    return str(dst)


@pytest.mark.parametrize("name", ["ravi-kraft-metadata", "macsakini-gzip-mixed", "lanxuage-gzip"])
def test_real_broker_dirs_verify_clean_and_unchanged(real_dirs, name):
    root = os.path.join(real_dirs, name)
    before = tree(root)
    code, rows, _ = verify_rows(root)
    assert (code, rows) == (0, [])
    assert tree(root) == before


def test_real_kraft_dir_shows_its_topic_id(real_dirs):
    proc = txlog("topics", "describe", "order_created", data_dir=os.path.join(real_dirs, "ravi-kraft-metadata"))
    assert_ok(proc)
    assert proc.stdout.startswith("Topic: order_created\tTopicId: q78Hxe0QSZyFQ2Zdyc-gIA\tPartitionCount: 2\t")
