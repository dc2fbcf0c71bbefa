"""`txlog produce` and `txlog consume` end to end, in-process (tests/cli/cli_helpers.py); SIGTERM in a real process."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import txlog as txlog_api
from tests.cli.cli_helpers import (
    ROOT,
    CliRun,
    _env,
    assert_ok,
    assert_one_error,
    assert_usage_error,
    make_store,
    tree,
    txlog,
    txlog_process,
)


def run(
    *args: str, data_dir: str, stdin: str | bytes | None = None, timeout: float = 60, process: bool = False
) -> CliRun:
    """`txlog --data-dir DIR ARGS` with `stdin` (empty if None); streams decoded leniently (values may be binary).
    `process`: a real process, for a command that leaves its producer to the process's exit (--no-commit)."""
    launch = txlog_process if process else txlog
    proc = launch(*args, data_dir=data_dir, input=stdin if stdin is not None else b"", timeout=timeout, text=False)
    return CliRun(
        list(proc.args), proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    )


def offsets(data_dir: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, log end offset), read without a subprocess."""
    from storage import Store

    with Store.open(data_dir, read_only=True) as store:
        log = store.partition(topic, partition)
        return log.last_stable_offset, log.log_end_offset


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


def jsonl(proc: CliRun) -> list[dict]:
    assert_ok(proc)
    return [json.loads(line) for line in proc.stdout.splitlines()]


# ---- round trips ----------------------------------------------------------------------------------------


def test_round_trip_keys_headers_and_null_marker(data_dir):
    make_store(data_dir, t=1)
    lines = "h1:a,h2:NULL\tk1\tv1\nNULL\tk2\tNULL\nh3:c\tNULL\tv3\n"
    proc = run(
        "produce",
        "-t",
        "t",
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "null.marker=NULL",
        data_dir=data_dir,
        stdin=lines,
    )
    assert_ok(proc)
    assert proc.stdout == ""
    assert proc.stderr == "Produced 3 records to t: partition 0 offsets 0-2.\n"

    recs = jsonl(run("consume", "-t", "t", "--output", "jsonl", data_dir=data_dir))
    assert [(r["key"], r["value"], r["headers"]) for r in recs] == [
        ("k1", "v1", [["h1", "a"], ["h2", None]]),
        ("k2", None, []),
        (None, "v3", [["h3", "c"]]),
    ]
    assert [(r["topic"], r["partition"], r["offset"]) for r in recs] == [("t", 0, 0), ("t", 0, 1), ("t", 0, 2)]
    assert all(isinstance(r["timestamp"], int) and r["timestamp"] > 0 for r in recs)

    proc = run(
        "consume",
        "-t",
        "t",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.offset=true",
        data_dir=data_dir,
    )
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "Offset:0\th1:a,h2:null\tk1\tv1",
        "Offset:1\tNO_HEADERS\tk2\tnull",
        "Offset:2\th3:c\tnull\tv3",
    ]
    assert proc.stderr == "Processed a total of 3 messages\n"


def test_kcat_key_delimiter_fixed_key_and_headers(data_dir):
    make_store(data_dir, t=1)
    assert_ok(run("produce", "-t", "t", "-K", ":", "-H", "a=1", "-H", "n", data_dir=data_dir, stdin="k:v\n"))
    assert_ok(run("produce", "-t", "t", "-k", "fixed", "-Z", data_dir=data_dir, stdin="x\n\n"))
    recs = jsonl(run("consume", "-t", "t", "--output", "jsonl", data_dir=data_dir))
    assert [(r["key"], r["value"], r["headers"]) for r in recs] == [
        ("k", "v", [["a", "1"], ["n", None]]),
        ("fixed", "x", []),
        ("fixed", None, []),
    ]


@pytest.mark.parametrize(
    "fmt, encode",
    [
        ("base64", lambda b: base64.b64encode(b).decode()),
        ("hex", lambda b: b.hex()),
    ],
)
def test_binary_values_round_trip(data_dir, fmt, encode):
    make_store(data_dir, t=1)
    values = [bytes(range(256)), b"\x00\xff\n\r\t", b""]
    key = b"\xfe\x01"
    text = "".join(f"{encode(key)}\t{encode(v)}\n" for v in values)
    assert_ok(run("produce", "-t", "t", "--value-format", fmt, "-K", "\\t", data_dir=data_dir, stdin=text))
    recs = jsonl(run("consume", "-t", "t", "--output", "jsonl", "--value-format", fmt, data_dir=data_dir))
    assert [(r["key"], r["value"]) for r in recs] == [(encode(key), encode(v)) for v in values]
    # and back in again: consume's text output is produce's input
    proc = run("consume", "-t", "t", "--value-format", fmt, "--property", "print.key=true", data_dir=data_dir)
    assert_ok(proc)
    make_store(data_dir, u=1)
    assert_ok(
        run(
            "produce",
            "-t",
            "u",
            "--value-format",
            fmt,
            "--property",
            "parse.key=true",
            data_dir=data_dir,
            stdin=proc.stdout,
        )
    )
    again = jsonl(run("consume", "-t", "u", "--output", "jsonl", "--value-format", fmt, data_dir=data_dir))
    assert [(r["key"], r["value"]) for r in again] == [(r["key"], r["value"]) for r in recs]


def test_bad_base64_line_is_one_error(data_dir):
    make_store(data_dir, t=1)
    message = assert_one_error(
        run("produce", "-t", "t", "--value-format", "base64", data_dir=data_dir, stdin="aGk=\n!!!\n")
    )
    assert message.startswith("line 2: the value is not valid base64")
    assert "1 record before it was written" in message


def test_produce_from_file_and_partition(data_dir, tmp_path):
    make_store(data_dir, t=3)
    src = tmp_path / "in.txt"
    src.write_text("a\nb\nc")  # no newline at the end: the last line still counts
    proc = run(
        "produce", "-t", "t", "-p", "2", "--compression-codec", "gzip", "--acks", "1", os.fspath(src), data_dir=data_dir
    )
    assert_ok(proc)
    assert proc.stderr == "Produced 3 records to t: partition 2 offsets 0-2.\n"
    proc = run("consume", "-t", "t", "-p", "2", data_dir=data_dir)
    assert proc.stdout == "a\nb\nc\n"
    assert run("consume", "-t", "t", "-p", "0", data_dir=data_dir).stdout == ""
    assert_ok(run("-q", "produce", "-t", "t", "--no-idempotence", "--acks", "0", data_dir=data_dir, stdin="x\n"))


# ---- output formats -------------------------------------------------------------------------------------


def test_consume_output_json_csv_table_kcat_format_and_properties(data_dir):
    make_store(data_dir, t=1)
    assert_ok(run("produce", "-t", "t", "-K", "=", "-H", "h=1", data_dir=data_dir, stdin='k=a,b\nk2="q"\n'))

    doc = json.loads(run("consume", "-t", "t", "--output", "json", data_dir=data_dir).stdout)
    assert [list(d) for d in doc] == [["topic", "partition", "offset", "timestamp", "key", "value", "headers"]] * 2
    assert [(d["key"], d["value"], d["headers"]) for d in doc] == [
        ("k", "a,b", [["h", "1"]]),
        ("k2", '"q"', [["h", "1"]]),
    ]

    rows = list(csv.reader(io.StringIO(run("consume", "-t", "t", "--output", "csv", data_dir=data_dir).stdout)))
    assert rows[0] == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert [r[:3] + r[4:6] for r in rows[1:]] == [["t", "0", "0", "k", "a,b"], ["t", "0", "1", "k2", '"q"']]
    assert json.loads(rows[1][6]) == [["h", "1"]]

    lines = run("consume", "-t", "t", "--output", "table", data_dir=data_dir).stdout.splitlines()
    assert lines[0].split() == ["Topic", "Partition", "Offset", "Timestamp", "Key", "Value", "Headers"]
    assert lines[2].split()[:3] == ["t", "0", "0"] and lines[2].split()[4:] == ["k", "a,b", "h=1"]

    ts = doc[0]["timestamp"]
    proc = run("consume", "-t", "t", "-f", "%t %p %o %k %s %h %T %K %S %%\\n", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout.splitlines()[0] == f"t 0 0 k a,b h=1 {ts} 1 3 %"

    proc = run(
        "consume",
        "-t",
        "t",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.partition=true",
        "--property",
        "key.separator=|",
        "--property",
        "print.key=true",
        data_dir=data_dir,
    )
    assert proc.stdout.splitlines()[0] == f"CreateTime:{ts}|Partition:0|k|a,b"

    assert "Unsupported formatter: %x" in assert_one_error(
        run("consume", "-t", "t", "-f", "%x", data_dir=data_dir), code=2
    )
    assert_usage_error(run("consume", "-t", "t", "--output", "xml", data_dir=data_dir))
    assert_usage_error(run("consume", "-t", "t", "--property", "print.nothing=true", data_dir=data_dir))
    assert_one_error(run("consume", "-t", "t", "-f", "%s", "--output", "json", data_dir=data_dir), code=2)


def test_offsets_and_max_messages(data_dir):
    make_store(data_dir, t=1)
    assert_ok(run("produce", "-t", "t", data_dir=data_dir, stdin="".join(f"v{i}\n" for i in range(10))))
    assert run("consume", "-t", "t", "--offset", "7", data_dir=data_dir).stdout == "v7\nv8\nv9\n"
    assert run("consume", "-t", "t", "--offset", "-2", data_dir=data_dir).stdout == "v8\nv9\n"
    assert run("consume", "-t", "t", "--offset", "latest", data_dir=data_dir).stdout == ""
    assert run("consume", "-t", "t", "--max-messages", "3", data_dir=data_dir).stdout == "v0\nv1\nv2\n"
    assert run("consume", "-t", "t", "--offset", "99", data_dir=data_dir).stdout == ""
    assert_one_error(run("consume", "-t", "t", "--offset", "soon", data_dir=data_dir), code=2)
    assert_one_error(run("consume", "-t", "t", "--offset", "1", "--from-beginning", data_dir=data_dir), code=2)


# ---- groups ---------------------------------------------------------------------------------------------


def test_group_offsets_are_committed_for_what_was_printed(data_dir):
    make_store(data_dir, t=2)
    assert_ok(run("produce", "-t", "t", "-K", ":", data_dir=data_dir, stdin="".join(f"k{i}:v{i}\n" for i in range(6))))
    first = run("consume", "-t", "t", "--group", "g", "--max-messages", "2", data_dir=data_dir)
    assert_ok(first)
    assert len(first.stdout.splitlines()) == 2
    rest = run("consume", "-t", "t", "--group", "g", data_dir=data_dir)
    assert_ok(rest)
    assert sorted(first.stdout.splitlines() + rest.stdout.splitlines()) == sorted(f"v{i}" for i in range(6))
    again = run("consume", "-t", "t", "--group", "g", data_dir=data_dir)
    assert_ok(again)
    assert again.stdout == "" and again.stderr == "Processed a total of 0 messages\n"
    assert_ok(run("produce", "-t", "t", "-p", "1", data_dir=data_dir, stdin="new\n"))
    assert run("consume", "-t", "t", "--group", "g", data_dir=data_dir).stdout == "new\n"
    # --from-beginning overrides the group's offset; another group starts at the earliest
    assert len(run("consume", "-t", "t", "-g", "g", "--from-beginning", data_dir=data_dir).stdout.splitlines()) == 7
    assert len(run("consume", "-t", "t", "-g", "other", data_dir=data_dir).stdout.splitlines()) == 7


# ---- transactions ---------------------------------------------------------------------------------------


def test_transaction_spanning_shell_commands(data_dir):
    make_store(data_dir, t=1)
    proc = run(
        "produce", "-t", "t", "--transactional-id", "X", "--no-commit", data_dir=data_dir, stdin="a\nb\n", process=True
    )
    assert_ok(proc)
    assert "Produced 2 records to t: partition 0 offsets 0-1." in proc.stderr
    assert "left open" in proc.stderr
    assert offsets(data_dir, "t") == (0, 2)

    assert run("consume", "-t", "t", data_dir=data_dir).stdout == ""
    assert run("consume", "-t", "t", "--isolation-level", "read_uncommitted", data_dir=data_dir).stdout == "a\nb\n"

    assert_ok(run("commit", "--transactional-id", "X", data_dir=data_dir))
    assert run("consume", "-t", "t", data_dir=data_dir).stdout == "a\nb\n"
    assert offsets(data_dir, "t") == (3, 3)
    again = run("commit", "--transactional-id", "X", data_dir=data_dir)  # already decided: an error
    assert again.returncode == 1 and again.stderr.startswith("Error: ")


def test_scenario58_oversized_record_through_the_cli(data_dir):
    """RECORD_TOO_LARGE: nothing appended, the sequence is not consumed; at the limit it is accepted."""
    assert_ok(run("topics", "create", "big", "--config", "max.message.bytes=200", data_dir=data_dir))
    too_big = run("produce", "-t", "big", data_dir=data_dir, stdin="x" * 300 + "\n")
    assert too_big.returncode == 1
    assert [ln for ln in too_big.stderr.splitlines() if ln.startswith("Error:")] == [
        "Error: line 1: its record needs a batch of 370 bytes, more than max.message.bytes=200 of topic 'big'; "
        "nothing was written; raise the limit with 'txlog topics alter big --config max.message.bytes=370'"
    ]
    assert offsets(data_dir, "big") == (0, 0)
    # 61-byte header + a 139-byte record (1-byte length, 136 bytes of body) = exactly 200 bytes
    at_limit = "y" * 130
    assert_ok(run("produce", "-t", "big", data_dir=data_dir, stdin=at_limit + "\n"))
    assert run("consume", "-t", "big", data_dir=data_dir).stdout == at_limit + "\n"
    from storage import Store

    with_limit = Store.open(data_dir, read_only=True)
    assert [b.size for b in with_limit.partition("big", 0).read(0)] == [200]
    with_limit.close()
    inside_txn = run(
        "produce", "-t", "big", "--transactional-id", "T58", data_dir=data_dir, stdin="ok\n" + "z" * 300 + "\n"
    )
    assert inside_txn.returncode == 1
    assert run("consume", "-t", "big", data_dir=data_dir).stdout == at_limit + "\n"  # none of it committed


def test_transactional_produce_commits_at_end_of_input(data_dir):
    make_store(data_dir, t=1)
    proc = run("produce", "-t", "t", "--transactional-id", "Y", data_dir=data_dir, stdin="a\nb\n")
    assert_ok(proc)
    assert proc.stderr.splitlines() == [
        "Produced 2 records to t: partition 0 offsets 0-1.",
        "Transaction 'Y' committed.",
    ]
    assert run("consume", "-t", "t", data_dir=data_dir).stdout == "a\nb\n"
    assert offsets(data_dir, "t") == (3, 3)


def test_bad_line_aborts_the_transaction(data_dir):
    make_store(data_dir, t=1)
    message = assert_one_error(
        run(
            "produce",
            "-t",
            "t",
            "--transactional-id",
            "Z",
            "-K",
            ":",
            data_dir=data_dir,
            stdin="k:a\n" * 20000 + "no-separator\n",
        )
    )
    assert message == "line 20001: no key separator found; transaction 'Z' aborted: nothing from this input is visible"
    lso, leo = offsets(data_dir, "t")
    assert lso == leo > 0
    assert run("consume", "-t", "t", data_dir=data_dir).stdout == ""


def test_sigterm_during_transactional_produce_aborts(data_dir):
    make_store(data_dir, t=1)
    cmd = [sys.executable, "-m", "cli.main", "--data-dir", data_dir, "produce", "-t", "t", "--transactional-id", "S"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        proc.stdin.write(b"a\nb\nc\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the idle input sent the batch: the transaction is open in the log
            if os.path.exists(os.path.join(data_dir, "t-0")) and offsets(data_dir, "t")[1] == 3:
                break
            time.sleep(0.05)
        assert offsets(data_dir, "t") == (0, 3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert b"transaction 'S' aborted; the 3 records it wrote to t stay in the log as aborted records" in err
    lso, leo = offsets(data_dir, "t")
    assert lso == leo == 4  # three records and the abort marker
    assert run("consume", "-t", "t", data_dir=data_dir).stdout == ""
    # read_uncommitted still shows the aborted records, as Kafka's does
    assert run("consume", "-t", "t", "--isolation-level", "read_uncommitted", data_dir=data_dir).stdout == "a\nb\nc\n"


# ---- bad input: nothing created -------------------------------------------------------------------------


def test_scenario_56_through_produce_and_consume(data_dir):
    make_store(data_dir, t=3)
    before = tree(data_dir)
    for verb in ("produce", "consume"):
        message = assert_one_error(run(verb, "-t", "nosuch", data_dir=data_dir, stdin="x\n"))
        assert "nosuch" in message and "does not exist" in message
        message = assert_one_error(
            run(verb, "-t", "nosuch", "--transactional-id", "T", data_dir=data_dir, stdin="x\n")
            if verb == "produce"
            else run(verb, "-t", "nosuch", "--group", "g", data_dir=data_dir)
        )
        assert "does not exist" in message
        assert "no partition 3" in assert_one_error(run(verb, "-t", "t", "-p", "3", data_dir=data_dir, stdin="x\n"))
        assert "no partition 3" in assert_one_error(
            run(verb, "-t", "t", "-p", "3", "-g", "g", data_dir=data_dir)
            if verb == "consume"
            else run(verb, "-t", "t", "-p", "3", "--transactional-id", "T", data_dir=data_dir, stdin="x\n")
        )
        assert "--partition" in assert_one_error(
            run(verb, "-t", "t", "-p", "-1", data_dir=data_dir, stdin="x\n"), code=2
        )
        assert_usage_error(run(verb, "-t", "t", "-p", "x", data_dir=data_dir, stdin="x\n"))
    assert tree(data_dir) == before


def test_missing_store_is_not_created(tmp_path):
    missing = tmp_path / "none"
    assert "no store at" in assert_one_error(run("produce", "-t", "t", data_dir=missing, stdin="x\n"))
    assert "no store at" in assert_one_error(run("consume", "-t", "t", data_dir=missing))
    assert not missing.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--no-commit"],
        ["--transactional-id", "X", "--no-idempotence"],
        ["--acks", "2"],
        ["--compression-codec", "brotli"],
        ["-k", "a", "-K", ":"],
        ["--property", "parse.key"],
        ["--property", "no.such=1"],
    ],
)
def test_produce_usage_errors_write_nothing(data_dir, args):
    make_store(data_dir, t=1)
    before = tree(data_dir)
    proc = run("produce", "-t", "t", *args, data_dir=data_dir, stdin="x\n")
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.splitlines()[-1].startswith("Error: ")
    assert tree(data_dir) == before


@pytest.mark.parametrize(
    ("topic", "decoded_by"),
    [("__consumer_offsets", "--offsets-decoder"), ("__transaction_state", "--transaction-log-decoder")],
)
def test_consume_of_an_internal_topic_says_where_its_records_are_shown_decoded(data_dir, topic, decoded_by):
    txlog_api.Admin(data_dir).create_topic("in", 1)
    with txlog_api.Producer(data_dir, transactional_id="tx") as p:  # makes both internal topics
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({txlog_api.TopicPartition("in", 0): 1}, "g")
        p.commit_transaction()
    message = assert_one_error(txlog("consume", "-t", topic, "-e", data_dir=data_dir))
    assert f"topic '{topic}' is internal" in message and decoded_by in message
    before = tree(data_dir)
    message = assert_one_error(txlog("produce", "-t", topic, data_dir=data_dir, input="x\n"))
    assert message == f"topic '{topic}' is internal"  # nothing to suggest to a writer
    assert tree(data_dir) == before
