"""`txlog transactions|commit|abort|groups` in-process (tests/cli/cli_helpers.py), on state made with the Python API."""

from __future__ import annotations

import csv
import io
import json

import pytest

import txlog as api
from storage.records import build_batch
from tests.cli.cli_helpers import (
    assert_ok,
    assert_one_error,
    assert_usage_error,
    tree,
    txlog,
)

TP = api.TopicPartition


def _committed_values(path, topic, partition=0):
    from txlog.fetch import IsolationLevel, fetch

    with api.Admin(path, read_only=True) as admin:
        log = admin.store.partition(topic, partition)
        return [r.value for r in fetch(log, log.log_start_offset, IsolationLevel.READ_COMMITTED).records]


def _open_transaction(path, transactional_id="X", topic="t"):
    """A transactional producer that "dies" mid-transaction: data flushed, nothing ended."""
    p = api.Producer(path, transactional_id=transactional_id)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, value=b"x")
    p.flush()
    p.store.close()  # the process dies: no p.close(), so nothing aborts the transaction
    return p.producer_id


def _hanging_transaction(path, topic="h"):
    """Transactional data written behind the coordinator's back; returns (producer id, start offset)."""
    from storage import Store

    with Store.open(path) as store:
        log = store.partition(topic, 0)
        log.append(build_batch([(None, b"plain", None, None)]))
        pid = store.allocate_producer_id()
        result = log.append(
            build_batch(
                [(None, b"hang", None, None)], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
            )
        )
        return pid, result.base_offset


def _table(stdout: str) -> list[list[str]]:
    """kafka-transactions' layout: every cell padded and followed by a TAB, header first."""
    lines = stdout.splitlines()
    assert all(line.endswith("\t") for line in lines), stdout
    return [[cell.strip() for cell in line[:-1].split("\t")] for line in lines]


@pytest.fixture
def store_dir(tmp_path) -> str:
    path = str(tmp_path / "data")
    with api.Admin(path) as admin:
        admin.create_topic("t", 1)
        admin.create_topic("h", 1)
    return path


# ---- transactions list / describe / commit --------------------------------------------------------------


def test_open_transaction_listed_described_then_committed(store_dir):
    pid = _open_transaction(store_dir)

    proc = txlog("transactions", "list", data_dir=store_dir)
    assert_ok(proc)
    assert _table(proc.stdout) == [
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState", "TwoPhaseCommit"],
        ["X", "0", str(pid), "Ongoing", "False"],
    ]

    proc = txlog("transactions", "describe", "--transactional-id", "X", data_dir=store_dir)
    assert_ok(proc)
    header, row = _table(proc.stdout)
    assert header == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
        "TwoPhaseCommit",
        "PreparedTxnState",
    ]
    d = dict(zip(header, row, strict=True))
    assert (d["TransactionalId"], d["ProducerId"], d["TransactionState"], d["TopicPartitions"]) == (
        "X",
        str(pid),
        "Ongoing",
        "t-0",
    )
    assert int(d["CurrentTransactionStartTimeMs"]) > 0 and int(d["TransactionDurationMs"]) >= 0

    proc = txlog("transactions", "describe", "--transactional-id", "X", "-o", "json", data_dir=store_dir)
    assert_ok(proc)
    doc = json.loads(proc.stdout)
    assert doc["transactionState"] == "Ongoing" and doc["topicPartitions"] == ["t-0"]
    assert _committed_values(store_dir, "t") == []

    proc = txlog("commit", "--transactional-id", "X", data_dir=store_dir)
    assert_ok(proc)
    assert proc.stdout == "" and "Committed" in proc.stderr
    assert _committed_values(store_dir, "t") == [b"x"]

    proc = txlog("transactions", "describe", "--transactional-id", "X", "-o", "json", data_dir=store_dir)
    doc = json.loads(proc.stdout)
    assert doc["transactionState"] == "CompleteCommit"
    # the last transaction's start stays, as Kafka's DescribeTransactions returns it (checked
    # against a real broker in tests/kafka_rig/test_admin_differential.py)
    assert doc["currentTransactionStartTimeMs"] > 0 and doc["topicPartitions"] == []

    # a second commit, or an abort of the decided transaction: an error, not a silent success
    assert "no open transaction" in assert_one_error(txlog("commit", "--transactional-id", "X", data_dir=store_dir))
    assert_one_error(txlog("abort", "--transactional-id", "X", data_dir=store_dir))
    assert _committed_values(store_dir, "t") == [b"x"]


def test_abort_by_transactional_id(store_dir):
    _open_transaction(store_dir, "Y")
    proc = txlog("-q", "abort", "--transactional-id", "Y", data_dir=store_dir)
    assert_ok(proc)
    assert proc.stdout == proc.stderr == ""
    assert _committed_values(store_dir, "t") == []
    proc = txlog("transactions", "list", "--state", "CompleteAbort", "-o", "jsonl", data_dir=store_dir)
    assert_ok(proc)
    assert [json.loads(line)["transactionalId"] for line in proc.stdout.splitlines()] == ["Y"]


def test_expire_aborts_the_open_transaction_and_forgets_the_id(store_dir):
    pid = _open_transaction(store_dir, "Z")
    proc = txlog("transactions", "expire", "--transactional-id", "Z", "--output", "json", data_dir=store_dir)
    assert_ok(proc)
    result = json.loads(proc.stdout)
    assert (result["result"], result["producerId"], result["lastState"]) == ("expired", pid, "CompleteAbort")
    assert _committed_values(store_dir, "t") == []
    assert "not found" in assert_one_error(
        txlog("transactions", "describe", "--transactional-id", "Z", data_dir=store_dir)
    )
    before = tree(store_dir)
    msg = assert_one_error(txlog("transactions", "expire", "--transactional-id", "Z", data_dir=store_dir))
    assert msg == "cannot expire: transactional id 'Z' is unknown"
    assert tree(store_dir) == before


def test_commit_unknown_id_is_an_error_and_creates_nothing(store_dir):
    before = tree(store_dir)
    msg = assert_one_error(txlog("commit", "--transactional-id", "nobody", data_dir=store_dir))
    assert "unknown" in msg and "nobody" in msg
    assert tree(store_dir) == before


def test_list_filters_and_formats(store_dir):
    _open_transaction(store_dir, "a")
    p = api.Producer(store_dir, transactional_id="b")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"b")
    p.commit_transaction()
    p.close()

    proc = txlog("transactions", "list", "--state", "ongoing", "-o", "csv", data_dir=store_dir)
    assert_ok(proc)
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState", "TwoPhaseCommit"]
    assert [r[0] for r in rows[1:]] == ["a"]

    proc = txlog("transactions", "list", "-o", "json", data_dir=store_dir)
    assert [(d["transactionalId"], d["transactionState"]) for d in json.loads(proc.stdout)] == [
        ("a", "Ongoing"),
        ("b", "CompleteCommit"),
    ]

    proc = txlog("transactions", "list", "--duration-filter", "3600000", "-o", "json", data_dir=store_dir)
    assert json.loads(proc.stdout) == []

    proc = txlog("transactions", "list", "-o", "table", data_dir=store_dir)
    assert proc.stdout.splitlines()[0].split() == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
        "TwoPhaseCommit",
    ]

    assert_usage_error(txlog("transactions", "list", "--state", "Sleeping", data_dir=store_dir))


def test_no_sweep_opens_read_only(store_dir):
    _open_transaction(store_dir)
    before = tree(store_dir)
    for args in (("list",), ("describe", "--transactional-id", "X"), ("find-hanging",)):
        assert_ok(txlog("transactions", *args, "--no-sweep", data_dir=store_dir))
    assert_ok(txlog("transactions", "describe-producers", "--topic", "t", "--partition", "0", data_dir=store_dir))
    assert tree(store_dir) == before


def test_describe_unknown_id_and_missing_store(store_dir, tmp_path):
    assert "not found" in assert_one_error(
        txlog("transactions", "describe", "--transactional-id", "zz", data_dir=store_dir)
    )
    assert "no store" in assert_one_error(
        txlog("transactions", "describe", "--transactional-id", "zz", data_dir=tmp_path / "absent")
    )


def test_ambiguous_commit_exits_4(store_dir, monkeypatch):
    """docs/reliability-scenarios.md scenario 26: an outcome that may or may not be durable is reported, distinctly."""
    from txlog.clients.admin import Admin
    from txlog.errors import TransactionOutcomeUnknownError

    _open_transaction(store_dir)

    def end_transaction(self, transactional_id, commit):
        raise TransactionOutcomeUnknownError("the fsync of the decision failed")

    with monkeypatch.context() as patch:
        patch.setattr(Admin, "end_transaction", end_transaction)
        proc = txlog("commit", "--transactional-id", "X", data_dir=store_dir)
    msg = assert_one_error(proc, code=4)
    assert "ambiguous" in msg and "txlog commit --transactional-id X" in msg
    # nothing was aborted behind the caller's back: the transaction is still open and can be committed
    assert_ok(txlog("commit", "--transactional-id", "X", data_dir=store_dir))
    assert _committed_values(store_dir, "t") == [b"x"]


# ---- hanging transactions -------------------------------------------------------------------------------


def test_find_hanging_then_abort_by_start_offset(store_dir):
    pid, start = _hanging_transaction(store_dir)

    proc = txlog("transactions", "find-hanging", "--topic", "h", data_dir=store_dir)
    assert_ok(proc)
    header, *rows = _table(proc.stdout)
    assert header == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    assert [r[:4] + [r[5]] for r in rows] == [["h", "0", str(pid), "0", str(start)]]

    proc = txlog("transactions", "describe-producers", "--topic", "h", "--partition", "0", data_dir=store_dir)
    assert_ok(proc)
    header, *rows = _table(proc.stdout)
    assert header == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    mine = [dict(zip(header, r, strict=True)) for r in rows if r[0] == str(pid)]
    assert len(mine) == 1
    assert (mine[0]["ProducerEpoch"], mine[0]["LastSequence"], mine[0]["CurrentTransactionStartOffset"]) == (
        "0",
        "0",
        str(start),
    )

    # the wrong offset is refused; nothing written
    assert "offset 0" in assert_one_error(
        txlog("abort", "--topic", "h", "--partition", "0", "--start-offset", "0", data_dir=store_dir)
    )

    proc = txlog("abort", "--topic", "h", "--partition", "0", "--start-offset", str(start), data_dir=store_dir)
    assert_ok(proc)
    assert proc.stdout == ""
    assert _committed_values(store_dir, "h") == [b"plain"]

    proc = txlog("transactions", "find-hanging", "-o", "json", data_dir=store_dir)
    assert_ok(proc)
    assert json.loads(proc.stdout) == []
    proc = txlog(
        "transactions", "describe-producers", "--topic", "h", "--partition", "0", "-o", "json", data_dir=store_dir
    )
    [doc] = [d for d in json.loads(proc.stdout) if d["producerId"] == pid]
    assert doc["currentTransactionStartOffset"] is None

    # aborting again: nothing open there any more
    assert_one_error(
        txlog(
            "transactions",
            "abort",
            "--topic",
            "h",
            "--partition",
            "0",
            "--start-offset",
            str(start),
            data_dir=store_dir,
        )
    )


def test_live_transaction_is_not_aborted_as_hanging(store_dir):
    _open_transaction(store_dir)
    proc = txlog("transactions", "find-hanging", "-o", "json", data_dir=store_dir)
    assert json.loads(proc.stdout) == []
    msg = assert_one_error(
        txlog("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "0", data_dir=store_dir)
    )
    assert "'X'" in msg


def test_abort_needs_one_form(store_dir):
    assert_one_error(txlog("abort", data_dir=store_dir), code=2)
    assert_one_error(txlog("abort", "--transactional-id", "X", "--topic", "t", data_dir=store_dir), code=2)
    assert_one_error(txlog("abort", "--topic", "t", "--partition", "0", data_dir=store_dir), code=2)
    assert_one_error(txlog("transactions", "find-hanging", "--partition", "0", data_dir=store_dir), code=2)
    assert_one_error(txlog("transactions", "find-hanging", "--broker-id", "7", data_dir=store_dir))
    assert_ok(txlog("transactions", "find-hanging", "--broker-id", "0", data_dir=store_dir))


# ---- consumer groups ------------------------------------------------------------------------------------


@pytest.fixture
def group_store(tmp_path) -> str:
    """Topic t (2 partitions, 5 records each); group g committed 3 on t-0 and 5 on t-1."""
    path = str(tmp_path / "groups")
    with api.Admin(path) as admin:
        admin.create_topic("t", 2)
        p = api.Producer(admin.store)
        for i in range(10):
            p.send("t", value=b"%d" % i, partition=i % 2)
        p.flush()
        admin.alter_consumer_group_offsets("g", {TP("t", 0): 3, TP("t", 1): 5})
    return path


def test_groups_list_and_describe(group_store):
    proc = txlog("groups", "list", data_dir=group_store)
    assert_ok(proc)
    assert proc.stdout == "g\n"
    proc = txlog("groups", "list", "-o", "json", data_dir=group_store)
    assert json.loads(proc.stdout) == [{"group": "g", "state": "Empty"}]  # offsets but no members
    proc = txlog("groups", "list", "--state", data_dir=group_store)
    assert [line.split() for line in proc.stdout.splitlines()] == [["GROUP", "STATE"], ["g", "Empty"]]

    proc = txlog("groups", "describe", "--group", "g", data_dir=group_store)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0] == ""  # Kafka's output starts with a blank line
    assert lines[1].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert [line.split() for line in lines[2:]] == [
        ["g", "t", "0", "3", "5", "2", "-", "-", "-"],
        ["g", "t", "1", "5", "5", "0", "-", "-", "-"],
    ]
    assert proc.stderr == "Consumer group 'g' has no active members.\n"

    proc = txlog("groups", "describe", "--all-groups", "-o", "csv", data_dir=group_store)
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[1] == ["g", "t", "0", "3", "5", "2", "", "", ""]

    assert "does not exist" in assert_one_error(txlog("groups", "describe", "--group", "nope", data_dir=group_store))
    assert_one_error(txlog("groups", "describe", data_dir=group_store), code=2)


def test_groups_reset_offsets_dry_run_then_execute(group_store):
    before = tree(group_store)
    proc = txlog("groups", "reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", data_dir=group_store)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0] == "" and lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [line.split() for line in lines[2:]] == [["g", "t", "0", "0"], ["g", "t", "1", "0"]]
    assert "Dry run" in proc.stderr
    assert tree(group_store) == before  # a dry run writes nothing

    proc = txlog(
        "groups",
        "reset-offsets",
        "--group",
        "g",
        "--topic",
        "t:1",
        "--shift-by",
        "-2",
        "-o",
        "json",
        data_dir=group_store,
    )
    assert json.loads(proc.stdout) == [{"group": "g", "topic": "t", "partition": 1, "newOffset": 3}]

    proc = txlog(
        "groups",
        "reset-offsets",
        "--group",
        "g",
        "--topic",
        "t:0",
        "--to-offset",
        "99",
        "--execute",
        data_dir=group_store,
    )
    assert_ok(proc)
    assert [line.split() for line in proc.stdout.splitlines()[2:]] == [["g", "t", "0", "5"]]  # clamped to the end
    proc = txlog("groups", "describe", "--group", "g", "-o", "json", data_dir=group_store)
    assert [(r["partition"], r["currentOffset"], r["lag"]) for r in json.loads(proc.stdout)] == [(0, 5, 0), (1, 5, 0)]

    assert_one_error(txlog("groups", "reset-offsets", "--group", "g", "--topic", "t", data_dir=group_store), code=2)
    assert_one_error(
        txlog(
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--to-latest",
            "--to-earliest",
            data_dir=group_store,
        ),
        code=2,
    )
    assert_one_error(
        txlog("groups", "reset-offsets", "--group", "g", "--topic", "t:7", "--to-latest", data_dir=group_store)
    )
    assert_one_error(
        txlog("groups", "reset-offsets", "--group", "g", "--topic", "nosuch", "--to-latest", data_dir=group_store)
    )


def test_groups_delete_offsets(group_store):
    proc = txlog("groups", "delete-offsets", "--group", "g", "--topic", "t:1", data_dir=group_store)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["TOPIC", "PARTITION", "STATUS"]
    assert [line.split() for line in lines[2:]] == [["t", "1", "Successful"]]
    with api.Admin(group_store, read_only=True) as admin:
        assert list(admin.list_consumer_group_offsets("g")) == [TP("t", 0)]
    assert_one_error(txlog("groups", "delete-offsets", "--group", "g", "--topic", "t:1", data_dir=group_store))
    assert_one_error(txlog("groups", "delete-offsets", "--group", "nope", "--topic", "t", data_dir=group_store))
