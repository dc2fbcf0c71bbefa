"""docs/reliability-scenarios.md rule 16 and scenario 61: the `.txnindex` is a cache, never the only truth.

A store is written by the real Producer (committed and aborted transactions over several
segments), closed cleanly, and one segment's `.txnindex` is then damaged on disk: deleted,
emptied, cut mid-entry, or one whole entry dropped, in a sealed segment or in the active one.
After a clean close the next open replays nothing, so the ABORT markers are not read at
open; yet no read_committed path may show a record of an aborted transaction: the
partition's fetch (writable and read-only views), txlog.Consumer, `txlog consume`, and the
Spark planner. `txlog verify` reports the damage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import txlog
from storage import Store
from storage.log_files import LOG_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX, offset_of
from txlog.fetch import IsolationLevel, fetch
from txlog.topic_partition import TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRY = 34  # bytes per .txnindex entry (docs/kafka-formats.md §3.5)
ROUNDS = 12


def build_store(path: str, crash_copy: str | None = None) -> str:
    """Transactions alternating commit/abort over several segments; the last one aborted (active segment).

    With `crash_copy`, the files are also copied there before the producer closes: what a
    kill -9 leaves (every append was fsynced; no clean-close snapshot).
    """
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"segment.bytes": 1500, "retention.ms": -1})
    producer = txlog.Producer(path, transactional_id="tx")
    producer.init_transactions()
    for r in range(ROUNDS):
        commit = r % 2 == 0 and r != ROUNDS - 1
        producer.begin_transaction()
        for i in range(3):
            producer.send("t", f"{'c' if commit else 'a'}-{r}-{i}".encode() + b"." * 60, partition=0)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    if crash_copy is not None:
        subprocess.run(["cp", "-a", path, crash_copy], check=True)
    producer.close()
    return path


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("txncache")
    build_store(str(root / "clean"), crash_copy=str(root / "crash"))
    return {"clean": str(root / "clean"), "crash": str(root / "crash")}


@pytest.fixture(scope="module")
def template(templates) -> str:
    return templates["clean"]


@pytest.fixture
def store(template, tmp_path) -> str:
    dest = str(tmp_path / "store")
    subprocess.run(["cp", "-a", template, dest], check=True)
    return dest


@pytest.fixture
def crashed_store(templates, tmp_path) -> str:
    dest = str(tmp_path / "crashed")
    subprocess.run(["cp", "-a", templates["crash"], dest], check=True)
    return dest


def partition_dir(store_path: str) -> str:
    return os.path.join(store_path, "t-0")


def txn_indexes(store_path: str) -> list[str]:
    """The partition's non-empty `.txnindex` files, by segment base."""
    d = partition_dir(store_path)
    bases = sorted(b for b in (offset_of(n, LOG_FILE_SUFFIX) for n in os.listdir(d)) if b is not None)
    out = []
    for base in bases:
        path = os.path.join(d, f"{base:020d}{TXN_INDEX_FILE_SUFFIX}")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            out.append(path)
    return out


def active_txn_index(store_path: str) -> str:
    d = partition_dir(store_path)
    base = max(b for b in (offset_of(n, LOG_FILE_SUFFIX) for n in os.listdir(d)) if b is not None)
    return os.path.join(d, f"{base:020d}{TXN_INDEX_FILE_SUFFIX}")


def damage(path: str, how: str) -> None:
    data = Path(path).read_bytes()
    if how == "deleted":
        os.remove(path)
        return
    if how == "emptied":
        data = b""
    elif how == "truncated":
        data = data[: ENTRY // 2]
    elif how == "entry_dropped":
        data = data[ENTRY:]
    with open(path, "wb") as f:
        f.write(data)


def fetch_all(store_path: str, *, read_only: bool) -> list[str]:
    s = Store.open(store_path, read_only=read_only)
    try:
        log = s.partition("t", 0)
        out, offset = [], log.log_start_offset
        while True:
            res = fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=7)
            if res.next_offset == offset:
                return out
            out.extend(r.value.decode().split(".")[0] for r in res.records)
            offset = res.next_offset
    finally:
        s.close()


def consumer_values(store_path: str, *, read_only: bool) -> list[str]:
    s = Store.open(store_path, read_only=read_only)
    consumer = txlog.Consumer(s, isolation_level="read_committed", enable_auto_commit=False)
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out = []
    while True:
        batch = consumer.poll(max_records=5)
        if not batch:
            break
        out.extend(r.value.decode().split(".")[0] for r in batch)
    consumer.close(autocommit=False)
    s.close()
    return out


def cli(store_path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "--data-dir", store_path, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def cli_values(store_path: str) -> list[str]:
    proc = cli(store_path, "consume", "-t", "t", "--output", "jsonl", "--isolation-level", "read_committed")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line)["value"].split(".")[0] for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def expected(template, tmp_path_factory) -> list[str]:
    dest = str(tmp_path_factory.mktemp("expected") / "store")
    subprocess.run(["cp", "-a", template, dest], check=True)
    values = fetch_all(dest, read_only=True)
    assert values and all(not v.startswith("a-") for v in values)
    assert len(values) == 3 * sum(1 for r in range(ROUNDS) if r % 2 == 0 and r != ROUNDS - 1)
    return values


def test_store_has_aborts_in_sealed_and_active_segments(template):
    assert len(txn_indexes(template)) >= 3
    assert os.path.getsize(active_txn_index(template)) >= ENTRY


HOW = ("deleted", "emptied", "truncated", "entry_dropped")
WHERE = ("sealed", "active")


def damaged_file(store_path: str, where: str) -> str:
    return txn_indexes(store_path)[1] if where == "sealed" else active_txn_index(store_path)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_scenario61_damaged_txnindex_after_clean_close_never_shows_aborted_fetch(
    store, expected, how, where, read_only
):
    damage(damaged_file(store, where), how)
    assert fetch_all(store, read_only=read_only) == expected
    # and again: a writable view rebuilt the file; a read-only one left it alone and replays again
    assert fetch_all(store, read_only=True) == expected


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_scenario61_damaged_txnindex_after_a_crash_never_shows_aborted_fetch(
    crashed_store, expected, how, where, read_only
):
    damage(damaged_file(crashed_store, where), how)
    assert fetch_all(crashed_store, read_only=read_only) == expected
    assert fetch_all(crashed_store, read_only=True) == expected


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("how", ("deleted", "entry_dropped"))
def test_scenario61_damaged_txnindex_never_shows_aborted_consumer(store, expected, how, where):
    damage(damaged_file(store, where), how)
    assert consumer_values(store, read_only=True) == expected
    assert consumer_values(store, read_only=False) == expected


def test_scenario61_every_txnindex_deleted_cli_consume(store, expected):
    for path in txn_indexes(store):
        os.remove(path)
    assert cli_values(store) == expected


def test_scenario61_rebuilt_index_is_the_original(store):
    path = damaged_file(store, "sealed")
    original = Path(path).read_bytes()
    damage(path, "entry_dropped")
    fetch_all(store, read_only=False)
    assert Path(path).read_bytes() == original


def test_scenario61_spark_plan_hands_executors_every_abort(store):
    """The Spark planner hands each executor the aborted transactions of its range (txlog/scan/planning.py)."""
    from txlog.spark.options import parse_options, plan_batch

    for path in txn_indexes(store):
        os.remove(path)
    ranges = plan_batch(
        parse_options(
            {"path": store, "subscribe": "t", "startingOffsets": "earliest", "isolation.level": "read_committed"}
        )
    )
    planned = {txn for r in ranges for txn in r.aborted}
    assert len(planned) == sum(1 for r in range(ROUNDS) if not (r % 2 == 0 and r != ROUNDS - 1))


@pytest.mark.parametrize("how", ("deleted", "entry_dropped"))
def test_scenario61_verify_reports_lost_txnindex_entries(store, how):
    damage(damaged_file(store, "sealed"), how)
    proc = cli(store, "verify")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert ".txnindex" in proc.stdout + proc.stderr
