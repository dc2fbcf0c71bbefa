"""`txlog export`: committed records only, exactly once across runs, each format readable by its own library and DuckDB.

The oracle is txlog.Consumer under read_committed: after every export the table holds exactly
the rows it reads (same offsets, keys, values, headers, timestamps), none twice, no record of an
aborted or still-open transaction.
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from tests.cli.cli_helpers import ROOT, assert_ok, assert_one_error, txlog
from tests.export.export_helpers import (
    FORMATS,
    committed_rows,
    export_cli,
    make_store,
    plain,
    read_with_duckdb,
    read_with_library,
    rows_of,
    table_version,
    transaction,
)
from txlog import Producer

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")
pytest.importorskip("duckdb")

TOPICS = ("orders", "payments")
KAFKA_DIRS = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "kafka-dirs")


def _first_history(store: str) -> Producer:
    """Committed, aborted and plain records with headers and nulls; returns a producer whose transaction is open."""
    make_store(store, orders=3, payments=1)
    transaction(
        store,
        "loader",
        [("orders", i % 3, f"c{i}".encode(), f"v{i}".encode(), [("h", b"x")] if i % 2 else None) for i in range(30)],
        commit=True,
    )
    aborted = [("orders", i % 3, f"a{i}".encode(), b"aborted", None) for i in range(9)]
    transaction(store, "loader", aborted, commit=False)
    plain(store, [("payments", 0, None, None, [("empty", None), ("n", b"1")]), ("payments", 0, b"k", b"", None)])
    open_txn = Producer(store, transactional_id="slow")
    open_txn.init_transactions()
    open_txn.begin_transaction()
    for i in range(6):
        open_txn.send("orders", value=b"late", key=f"o{i}".encode(), partition=i % 3)
    open_txn.send("payments", value=b"late", key=b"o-pay", partition=0)
    open_txn.flush()
    return open_txn


def _more_history(store: str, open_txn: Producer) -> None:
    transaction(store, "loader", [("orders", i % 3, f"d{i}".encode(), b"more", None) for i in range(12)], commit=True)
    aborted = [("payments", 0, f"a-pay{i}".encode(), b"aborted", None) for i in range(3)]
    transaction(store, "loader", aborted, commit=False)
    open_txn.commit_transaction()
    open_txn.close()


def _export(store: str, fmt: str, path: str, *topics: str):
    return export_cli(store, fmt, path, *(topics or TOPICS))


def _check_table(store: str, fmt: str, path: str) -> None:
    expected = committed_rows(store, TOPICS)
    for rows in (rows_of(read_with_library(fmt, path)), rows_of(read_with_duckdb(fmt, path))):
        assert rows == expected  # sorted, duplicates kept: a row twice or an extra row shows
        keys = {r[3] for r in rows}
        assert not any(k is not None and k.startswith(b"a") for k in keys)  # no aborted record


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_writes_committed_records_once_across_runs(tmp_path, fmt):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    open_txn = _first_history(store)

    first = _export(store, fmt, path)
    assert_ok(first)
    _check_table(store, fmt, path)
    assert not any(r[3] and r[3].startswith(b"o") for r in rows_of(read_with_library(fmt, path)))  # open: not yet
    assert first.stderr.startswith("Exported 32 records to ")
    assert "orders 30 records" in first.stderr and "payments 2 records" in first.stderr

    _more_history(store, open_txn)
    second = _export(store, fmt, path)
    assert_ok(second)
    _check_table(store, fmt, path)
    assert {r[3] for r in rows_of(read_with_library(fmt, path))} >= {b"o0", b"o-pay", b"d11"}
    assert "Exported 19 records" in second.stderr

    version = table_version(fmt, path)
    third = _export(store, fmt, path)
    assert_ok(third)
    assert "Exported 0 records" in third.stderr
    assert table_version(fmt, path) == version  # nothing new: no commit at all
    _check_table(store, fmt, path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_topics_exported_in_different_runs_each_resume_where_they_ended(tmp_path, fmt):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=2, payments=1)
    plain(store, [("orders", i % 2, f"k{i}".encode(), b"v", None) for i in range(10)])
    plain(store, [("payments", 0, b"p", b"v", None)])
    assert_ok(_export(store, fmt, path, "orders"))
    plain(store, [("orders", 1, b"k-late", b"v", None), ("payments", 0, b"p2", b"v", None)])
    assert_ok(_export(store, fmt, path, "orders", "payments"))
    assert rows_of(read_with_library(fmt, path)) == committed_rows(store, TOPICS)
    plain(store, [("orders", 0, b"k-later", b"v", None), ("payments", 0, b"p3", b"v", None)])
    assert_ok(_export(store, fmt, path, "orders"))  # payments' recorded offset must survive a run without it
    assert_ok(_export(store, fmt, path, "payments"))
    assert rows_of(read_with_library(fmt, path)) == committed_rows(store, TOPICS)


def test_the_table_records_each_partitions_next_offset(tmp_path):
    """Delta: one SetTransaction per partition; Iceberg: one summary property; Parquet: the file names."""
    from deltalake import DeltaTable

    from tests.export.export_helpers import iceberg_table

    store = str(tmp_path / "store")
    make_store(store, orders=2)
    transaction(store, "t", [("orders", 0, b"k", b"v", None)] * 3, commit=True)  # offsets 0-2, marker at 3
    transaction(store, "t", [("orders", 1, b"a", b"v", None)], commit=False)  # offset 0, marker at 1
    for fmt in FORMATS:
        assert_ok(_export(store, fmt, str(tmp_path / fmt), "orders"))
    delta = DeltaTable(str(tmp_path / "delta"))
    assert (delta.transaction_version("txlog:orders:0"), delta.transaction_version("txlog:orders:1")) == (4, 2)
    summary = iceberg_table(str(tmp_path / "iceberg")).current_snapshot().summary
    assert summary["txlog.next-offsets"] == '{"orders":{"0":4,"1":2}}'
    names = sorted(os.listdir(tmp_path / "parquet" / "orders-0"))
    assert names == [f"{0:020d}-{4:020d}.parquet"]
    assert not os.path.exists(tmp_path / "parquet" / "orders-1")  # only an aborted record: no file


# ---- what a user can get wrong: one Error line each ------------------------------------------------------


def test_an_unknown_topic_is_one_error_line_and_writes_nothing(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, orders=1)
    message = assert_one_error(_export(store, "delta", str(tmp_path / "table"), "ordres"))
    assert message.startswith("topic 'ordres' does not exist")
    assert not os.path.exists(tmp_path / "table")


@pytest.mark.parametrize(("first", "then"), [("delta", "parquet"), ("parquet", "iceberg"), ("iceberg", "delta")])
def test_a_table_of_another_format_is_refused(tmp_path, first, then):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=1)
    plain(store, [("orders", 0, b"k", b"v", None)])
    assert_ok(_export(store, first, path, "orders"))
    message = assert_one_error(_export(store, then, path, "orders"))
    assert f"holds a {first.capitalize()} table" in message and f"--format {first}" in message


def test_a_directory_that_is_no_export_is_refused(tmp_path):
    store, path = str(tmp_path / "store"), tmp_path / "table"
    make_store(store, orders=1)
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    message = assert_one_error(_export(store, "parquet", str(path), "orders"))
    assert "is not empty" in message
    assert sorted(os.listdir(path)) == ["notes.txt"]


def test_a_topic_created_again_is_refused_not_guessed(tmp_path):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=1)
    plain(store, [("orders", 0, b"k", b"v", None)] * 5)
    assert_ok(_export(store, "delta", path, "orders"))
    from storage import Store

    with Store.open(store) as s:
        s.delete_topic("orders")
        s.create_topic("orders", 1)
    plain(store, [("orders", 0, b"k", b"v", None)])
    message = assert_one_error(_export(store, "delta", path, "orders"))
    assert "records offset 5 as the next of orders-0" in message and "last stable offset is 1" in message


def test_a_missing_library_names_the_pip_extra(tmp_path):
    from tests.cli.cli_helpers import ROOT, txlog_process

    store = str(tmp_path / "store")
    make_store(store, orders=1)
    blocker = tmp_path / "blocker" / "deltalake"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named deltalake')\n")
    env = {"PYTHONPATH": f"{tmp_path / 'blocker'}{os.pathsep}{ROOT}"}
    proc = txlog_process("export", "--format", "delta", "--to", str(tmp_path / "t"), "orders", data_dir=store, env=env)
    message = assert_one_error(proc)
    assert "needs deltalake" in message and "pip install 'txlog[analysis]'" in message


def test_records_deleted_before_their_export_are_skipped_and_named(tmp_path):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=1)
    plain(store, [("orders", 0, f"k{i}".encode(), b"v", None) for i in range(5)])
    assert_ok(_export(store, "parquet", path, "orders"))
    plain(store, [("orders", 0, f"k{i}".encode(), b"v", None) for i in range(5, 10)])
    from storage import Store

    with Store.open(store) as s:
        s.partition("orders", 0).delete_records(8)  # as retention or DeleteRecords would
    second = _export(store, "parquet", path, "orders")
    assert_ok(second)
    assert "deleted from the store before they were exported: orders-0 5..7" in second.stderr
    assert [r[2] for r in rows_of(read_with_library("parquet", path))] == [0, 1, 2, 3, 4, 8, 9]


@pytest.mark.parametrize("name", ["macsakini-gzip-mixed", "lanxuage-gzip", "ravi-kraft-metadata"])
def test_a_real_broker_directory_exports_as_the_consumer_reads_it(tmp_path, name):
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    store = str(tmp_path / name)
    shutil.copytree(os.path.join(KAFKA_DIRS, name), store)
    from storage import Store

    with Store.open(store, read_only=True) as s:
        topics = s.list_topics(include_internal=False)
    for fmt in ("parquet", "delta"):
        assert_ok(export_cli(store, fmt, str(tmp_path / fmt), *topics))
        rows = rows_of(read_with_library(fmt, str(tmp_path / fmt)))
        assert rows and rows == committed_rows(store, topics)


def test_progress_lines_when_asked_off_a_terminal(tmp_path):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=1)
    plain(store, [("orders", 0, b"k", b"v", None)] * 7)
    proc = txlog("export", "--format", "parquet", "--to", path, "orders", "--progress", data_dir=store)
    assert_ok(proc)
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("export: 7 records, ") and lines[0].endswith(" (done)")
    assert lines[1].startswith("Exported 7 records to ")
    quiet = txlog("export", "--format", "parquet", "--to", path, "orders", "--progress", "-q", data_dir=store)
    assert_ok(quiet)
    assert quiet.stderr == ""


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_damaged_segment_is_one_error_line_and_commits_nothing(tmp_path, fmt):
    """The writers pull batches through Arrow's C stream, which would turn the store's typed error into
    their own generic one: the user still reads the store's message (file and byte), and nothing is written."""
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, orders=1)
    for i in range(3):  # three appends: three batches, the damaged one followed by a valid one
        plain(store, [("orders", 0, f"k{i}".encode(), b"v" * 50, None)])
    segment = os.path.join(store, "orders-0", f"{0:020d}.log")
    with open(segment, "r+b") as f:
        first = 12 + int.from_bytes(f.read(12)[8:12], "big")  # batch length + the offset and length fields
        f.seek(first + 70)  # inside the second batch's record
        byte = f.read(1)
        f.seek(first + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    message = assert_one_error(_export(store, fmt, path, "orders"))
    assert "CRC" in message and "00000000000000000000.log" in message, message
    assert table_version(fmt, path) in (None, [])
    if fmt == "parquet":
        assert glob.glob(os.path.join(path, "*", "*")) + glob.glob(os.path.join(path, "*", ".*")) == []
