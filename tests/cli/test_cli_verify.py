"""`txlog verify` (run in-process): a clean store verifies clean, each kind of damage is found."""

from __future__ import annotations

import csv
import io
import json
import os
import struct
import time

import pytest

import txlog as api
from storage import Store
from storage.log_files import filename_prefix
from storage.records import build_batch
from tests.cli.cli_helpers import assert_ok, assert_one_error, tree, txlog

SEG0 = filename_prefix(0)


@pytest.fixture
def clean(tmp_path) -> str:
    """Topic `t` over three segments, with committed and aborted transactions (aborts with data)."""
    path = str(tmp_path / "store")
    with Store.open(path) as s:
        s.create_topic("t", 1, {"segment.bytes": 2048, "index.interval.bytes": 100})
    p = api.Producer(path, transactional_id="A")
    p.init_transactions()
    for i in range(8):
        p.begin_transaction()
        for j in range(5):
            p.send("t", value=b"v%d-%d" % (i, j) * 10)
            p.flush()  # one batch per record, so the indexes get entries and segments roll
        if i % 2:
            p.abort_transaction()
        else:
            p.commit_transaction()
    p.close()
    return path


def _segment(path: str, suffix: str, base: str = SEG0) -> str:
    return os.path.join(path, "t-0", base + suffix)


def _findings(path: str, *args: str) -> tuple[int, list[dict], str]:
    proc = txlog("verify", "--output", "json", *args, data_dir=path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _has(rows: list[dict], severity: str, phrase: str, file: str | None = None) -> bool:
    return any(
        r["severity"] == severity and phrase in r["finding"] and (file is None or r["file"] == file) for r in rows
    )


def test_clean_store_verifies_and_writes_nothing(clean):
    assert os.path.exists(_segment(clean, ".txnindex"))  # the aborts are really in the log
    before = tree(clean)
    proc = txlog("verify", data_dir=clean)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SEVERITY", "TOPIC", "PARTITION", "FILE", "OFFSET", "FINDING"]
    assert len(lines) == 2  # header and rule, no rows
    assert proc.stderr.startswith("checked ") and proc.stderr.rstrip().endswith(": 0 findings")
    assert tree(clean) == before


def test_output_formats_and_topic_filter(clean):
    proc = txlog("verify", "--topic", "t", "--output", "json", data_dir=clean)
    assert_ok(proc)
    assert json.loads(proc.stdout) == []
    assert proc.stderr == "checked 1 partition, 48 batches: 0 findings\n"
    proc = txlog("-q", "verify", "--output", "csv", data_dir=clean)
    assert_ok(proc)
    assert proc.stdout == "SEVERITY,TOPIC,PARTITION,FILE,OFFSET,FINDING\n" and proc.stderr == ""
    assert_ok(txlog("verify", "--output", "jsonl", data_dir=clean))


def test_flipped_byte_in_a_sealed_segment_is_a_crc_error(clean):
    with open(_segment(clean, ".log"), "r+b") as f:
        f.seek(108 + 70)  # inside the second batch's records
        byte = f.read(1)
        f.seek(108 + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    code, rows, _ = _findings(clean)
    assert code == 3
    assert _has(rows, "error", "batch at byte 108 has an invalid CRC in a sealed segment", SEG0 + ".log"), rows
    assert next(r for r in rows if "invalid CRC" in r["finding"])["offset"] == 1
    proc = txlog("verify", "--output", "csv", data_dir=clean)
    assert proc.returncode == 3
    table = list(csv.reader(io.StringIO(proc.stdout)))
    assert table[0] == ["SEVERITY", "TOPIC", "PARTITION", "FILE", "OFFSET", "FINDING"] and len(table) >= 2


def test_corrupt_index_entry(clean):
    path = _segment(clean, ".index")
    with open(path, "r+b") as f:
        f.write(struct.pack(">i", 2))  # first entry: offset 2 at the position of the batch ending at 1
    code, rows, _ = _findings(clean)
    assert code == 3
    assert _has(rows, "error", "index entry for offset 2 points at a batch ending at 1", SEG0 + ".index"), rows


def test_rewritten_txnindex_last_offset(clean):
    path = _segment(clean, ".txnindex")
    with open(path, "r+b") as f:
        data = f.read(34)
        _, pid, first, last, _lso = struct.unpack(">hqqqq", data)
        f.seek(18)
        f.write(struct.pack(">q", last - 1))
    code, rows, _ = _findings(clean)
    assert code == 3
    assert _has(rows, "error", f"last {last - 1}) does not name an ABORT marker", SEG0 + ".txnindex"), rows
    assert _has(
        rows, "error", f"ABORT marker of producer {pid} at {last} (transaction from {first}) has no .txnindex entry"
    ), rows


def test_transaction_open_past_its_timeout_is_expired(clean):
    p = api.Producer(clean, transactional_id="slow", transaction_timeout_ms=100)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"late")
    p.flush()
    p.store.close()  # the producer dies: nothing ends the transaction
    time.sleep(0.3)
    code, rows, _ = _findings(clean)
    assert code == 3
    expired = [r for r in rows if r["finding"].startswith("expired: transaction 'slow'")]
    assert len(expired) == 1 and expired[0]["topic"] == "t" and expired[0]["partition"] == 0, rows
    assert "past its timeout of 100 ms" in expired[0]["finding"]
    assert len(rows) == 1, rows  # reported once, at the partition, not again at the coordinator


def test_transactional_batch_behind_the_coordinators_back_is_hanging(clean):
    with Store.open(clean) as store:
        log = store.partition("t", 0)
        result = log.append(
            build_batch(
                [(None, b"hang", None, None)],
                producer_id=store.allocate_producer_id(),
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
        )
    code, rows, _ = _findings(clean)
    assert code == 3
    hanging = [r for r in rows if r["finding"].startswith("hanging:")]
    assert len(hanging) == 1 and hanging[0]["offset"] == result.base_offset, rows


def test_torn_tail_of_the_active_segment_is_a_warning(clean):
    active = max(n for n in os.listdir(os.path.join(clean, "t-0")) if n.endswith(".log"))
    with open(os.path.join(clean, "t-0", active), "ab") as f:
        f.write(b"\x00" * 8 + struct.pack(">i", 500) + b"\x00" * 30)  # a batch header whose body never landed
    code, rows, err = _findings(clean)
    assert code == 3  # any finding, warnings too
    assert len(rows) == 1 and rows[0]["severity"] == "warning" and "unflushed/torn tail" in rows[0]["finding"], rows
    summary, error = err.splitlines()
    assert summary.startswith("checked 9 partitions, ") and summary.endswith(" batches: 1 finding")
    assert error == "Error: verify found 1 problem (see the table)"
    assert txlog("-q", "verify", data_dir=clean).stderr == error + "\n"


def test_bad_batch_followed_by_valid_data_in_the_active_segment_is_an_error(clean):
    active = max(n for n in os.listdir(os.path.join(clean, "t-0")) if n.endswith(".log"))
    with open(os.path.join(clean, "t-0", active), "r+b") as f:
        f.seek(70)  # inside the first batch; more batches follow
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    code, rows, _ = _findings(clean)
    assert code == 3
    assert _has(rows, "error", "batch at byte 0 has an invalid CRC; valid batches follow it", active), rows


def test_real_kafka_dir_verifies_read_only(kafka_real_copy):
    before = tree(kafka_real_copy)
    proc = txlog("verify", data_dir=kafka_real_copy)
    assert_ok(proc)
    assert "checked 1 partition" in proc.stderr
    assert tree(kafka_real_copy) == before


def test_missing_store_unknown_topic_and_text_output_are_refused(tmp_path, clean):
    assert "no store at" in assert_one_error(txlog("verify", data_dir=tmp_path / "none"))
    assert "topic 'nope' does not exist" in assert_one_error(txlog("verify", "--topic", "nope", data_dir=clean))
    proc = txlog("verify", "--output", "text", data_dir=clean)
    assert proc.returncode == 2
