"""The command line a Kafka or kcat user expects (issue 12 items 8-10, the verify/inspect parts of 11),
run in-process (tests/cli/cli_helpers.py; a terminal needs a real process): global options after the
verb, one meaning per short flag, kcat's consume flags, one set of --output choices, JSON results of
the write verbs, help that reads cleanly, one-line usage errors, progress on stderr
(docs/cli-conventions.md §1a, §6).
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from cli.progress import REDRAW_EVERY_S
from tests.cli.cli_helpers import ROOT, CliRun, _env, assert_ok, txlog, txlog_process

# The one meaning of each short flag (docs/cli-conventions.md §1a), written out here independently of cli/flags.py.
SHORT_FLAGS = {
    "-t": {"--topic"},
    "-p": {"--partition"},
    "-g": {"--group"},
    "-c": {"--max-messages"},
    "-o": {"--offset"},
    "-f": {"--format"},
    "-e": {"--exit-at-end"},
    "-J": {"--json-envelope"},
    "-u": {"--unbuffered"},
    "-k": {"--key"},
    "-K": set(),
    "-H": {"--header"},
    "-Z": set(),
    "-z": {"--compression-codec"},
    "-i": {"--input-topic"},
    "-n": {"--transaction-size"},
    "-w": {"--workers"},
    "-X": set(),  # kcat's client setting key=value (mirror), no long form
    "-h": {"--help"},
}


def _describe(cmd, path: list[str], out: dict) -> None:
    """Every leaf command below `cmd`, with its visible options, short flags and epilog, as the built app has them."""
    subs = getattr(cmd, "commands", None)
    if subs is not None:
        for name, sub in subs.items():
            _describe(sub, path + [name], out)
        return
    params = [
        p for p in cmd.params if not getattr(p, "hidden", False) and getattr(p, "param_type_name", "") != "argument"
    ]
    out[" ".join(path)] = {
        "options": [{"opts": list(p.opts) + list(p.secondary_opts), "help": p.help or ""} for p in params]
        + [{"opts": ["-h", "--help"], "help": "help"}],
        "epilog": cmd.epilog or "",
    }


@pytest.fixture(scope="module")
def commands() -> dict:
    import typer

    from cli.main import app

    out: dict = {}
    _describe(typer.main.get_command(app), [], out)
    return out


@pytest.fixture
def store(tmp_path) -> str:
    """Topic `t` (2 partitions): p0 holds 1..6, p1 holds keyed records with a header."""
    d = str(tmp_path / "store")
    assert_ok(txlog("topics", "create", "t", "--partitions", "2", data_dir=d))
    assert_ok(txlog_input("1\n2\n3\n4\n5\n6\n", "produce", "-t", "t", "-p", "0", data_dir=d))
    assert_ok(txlog_input("k1:v1\nk2:v2\n", "produce", "-t", "t", "-p", "1", "-K", ":", "-H", "h=x", data_dir=d))
    return d


def txlog_input(stdin: str, *args: str, data_dir: str | None = None) -> CliRun:
    return txlog(*args, data_dir=data_dir, input=stdin)


def one_usage_error(proc: CliRun) -> str:
    """Exit 2 and exactly one stderr line, `Error: ...` (no usage block, no "Try ... for help")."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


# ---- item 8: global options after the verb --------------------------------------------------------


def test_global_options_after_the_verb(store, tmp_path):
    proc = txlog("consume", "-t", "t", "-p", "0", "--data-dir", store)
    assert_ok(proc)
    assert proc.stdout.split() == ["1", "2", "3", "4", "5", "6"]
    assert "Processed a total of 6 messages" in proc.stderr
    quiet = txlog("consume", "-t", "t", "-p", "0", "--data-dir", store, "-q")
    assert_ok(quiet)
    assert quiet.stderr == "" and quiet.stdout == proc.stdout
    nested = txlog("topics", "create", "u", "--data-dir", store, "--quiet")
    assert_ok(nested)
    assert nested.stderr == ""
    assert "u" in txlog("topics", "describe", "u", "--data-dir", store).stdout
    missing = txlog("consume", "-t", "t", "--data-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and str(tmp_path / "nowhere") in missing.stderr
    # after the verb wins over the root's value, as the later of two options does
    assert_ok(txlog("consume", "-t", "t", "--data-dir", store, data_dir=str(tmp_path / "nowhere")))
    assert "--data-dir" in one_usage_error(txlog("consume", "-t", "t", "--data-dir="))


# ---- item 8: one meaning per short flag --------------------------------------------------------------


def test_each_short_flag_means_one_thing_in_every_verb(commands):
    seen: dict[str, set[str]] = {}
    for path, info in commands.items():
        for option in info["options"]:
            shorts = [o for o in option["opts"] if len(o) == 2]
            longs = {o for o in option["opts"] if o.startswith("--")}
            for short in shorts:
                assert short in SHORT_FLAGS, f"{path}: {short} is not in the table of docs/cli-conventions.md §1a"
                seen.setdefault(short, set()).update(longs)
    for short, longs in seen.items():
        assert longs == SHORT_FLAGS[short], (short, longs)
    assert {"-o", "-f", "-c", "-p", "-t", "-e", "-J", "-u"} <= set(seen)


def test_old_spellings_keep_working(store):
    assert json.loads(txlog("verify", "-o", "json", data_dir=store).stdout) == []
    assert_ok(txlog("topics", "create", "old", "-p", "3", "-c", "retention.ms=5000", data_dir=store))
    doc = json.loads(txlog("topics", "describe", "old", "-o", "json", data_dir=store).stdout)
    assert doc["partitionCount"] == 3 and doc["configs"] == {"retention.ms": 5000}
    assert json.loads(txlog("groups", "list", "-o", "json", data_dir=store).stdout) == []
    help_text = txlog("verify", "--help").stdout
    assert "-o," not in help_text  # the old spelling works but is not offered


# ---- item 8: kcat's consume flags --------------------------------------------------------------------


def consume(store: str, *args: str) -> list[str]:
    proc = txlog("consume", "-t", "t", "-q", *args, data_dir=store)
    assert_ok(proc)
    return proc.stdout.splitlines()


def test_kcat_offsets(store):
    assert consume(store, "-p", "0", "-o", "beginning") == ["1", "2", "3", "4", "5", "6"]
    assert consume(store, "-p", "0", "-o", "end") == []
    assert consume(store, "-p", "0", "-o", "4") == ["5", "6"]
    assert consume(store, "-p", "0", "-o", "-2") == ["5", "6"]
    assert consume(store, "-p", "0", "-o", "s@0") == ["1", "2", "3", "4", "5", "6"]
    assert consume(store, "-p", "0", "-o", f"s@{int(time.time() * 1000) + 3_600_000}") == []
    assert consume(store, "-p", "0", "-o", "e@0") == []
    in_an_hour = int(time.time() * 1000) + 3_600_000
    assert consume(store, "-p", "0", "-o", "2", "-o", f"e@{in_an_hour}") == ["3", "4", "5", "6"]


def test_kcat_stored_offset_needs_a_group_and_starts_there(store):
    assert "-g/--group" in one_usage_error(txlog("consume", "-t", "t", "-o", "stored", data_dir=store))
    assert consume(store, "-p", "0", "-g", "g", "-c", "2") == ["1", "2"]
    assert consume(store, "-p", "0", "-g", "g", "-o", "stored") == ["3", "4", "5", "6"]


def test_kcat_e_and_offset_errors(store):
    proc = txlog("consume", "-t", "t", "-e", data_dir=store)
    assert_ok(proc)
    assert "% Reached end of topic t [0] at offset 6: exiting" in proc.stderr
    assert "% Reached end of topic t [1] at offset 2: exiting" in proc.stderr
    assert "--follow" in one_usage_error(txlog("consume", "-t", "t", "-e", "--follow", data_dir=store))
    assert "-o/--offset" in one_usage_error(txlog("consume", "-t", "t", "-o", "s@soon", data_dir=store))
    assert "-o/--offset" in one_usage_error(txlog("consume", "-t", "t", "-o", "middle", data_dir=store))


def test_kcat_json_envelope(store):
    lines = consume(store, "-p", "1", "-J")
    docs = [json.loads(line) for line in lines]
    assert [list(d) for d in docs] == [
        ["topic", "partition", "offset", "tstype", "ts", "broker", "headers", "key", "payload"]
    ] * 2
    assert docs[0]["headers"] == ["h", "x"] and docs[0]["key"] == "k1" and docs[0]["payload"] == "v1"
    assert docs[1]["offset"] == 1 and docs[1]["tstype"] == "create" and isinstance(docs[1]["ts"], int)
    assert lines[0].startswith('{"topic":"t","partition":1,"offset":0,')  # kcat's compact form
    assert "-J" in one_usage_error(txlog("consume", "-t", "t", "-J", "--output", "json", data_dir=store))


def test_unbuffered_and_iso_timestamps(store):
    assert consume(store, "-p", "0", "-u") == ["1", "2", "3", "4", "5", "6"]
    rows = [json.loads(line) for line in consume(store, "-p", "0", "--output", "jsonl", "--timestamp-format", "iso")]
    assert all(r["timestamp"].endswith("Z") and r["timestamp"][10] == "T" for r in rows)
    text = consume(store, "-p", "0", "-c", "1", "--property", "print.timestamp=true", "--timestamp-format", "iso")
    assert text[0].startswith("CreateTime:20") and text[0].endswith("Z\t1")


# ---- item 8: --output on every verb that prints rows, JSON from the write verbs -----------------------


@pytest.mark.parametrize(
    "verb",
    [
        ("consume", "-t", "t"),
        ("verify",),
        ("topics", "describe"),
        ("topics", "list"),
        ("transactions", "list"),
        ("groups", "list"),
    ],
)
@pytest.mark.parametrize("output", ["table", "json", "jsonl", "csv"])
def test_every_row_verb_offers_the_same_formats(store, verb, output):
    proc = txlog(*verb, "--output", output, data_dir=store)
    assert_ok(proc)
    if output == "json":
        assert isinstance(json.loads(proc.stdout), list)
    elif output == "jsonl":
        assert all(isinstance(json.loads(line), dict) for line in proc.stdout.splitlines())
    elif output == "csv":
        assert list(csv.reader(io.StringIO(proc.stdout)))[0]  # a header row at least


def test_write_verbs_print_json_results(store):
    created = json.loads(txlog("topics", "create", "w", "--partitions", "2", "--output", "json", data_dir=store).stdout)
    assert created == {"topic": "w", "created": True, "partitions": 2, "configs": {}}
    again = txlog("topics", "create", "w", "--if-not-exists", "--output", "json", data_dir=store)
    assert json.loads(again.stdout) == {"topic": "w", "created": False}
    # --no-commit leaves its producer to the process's exit: real processes
    produced = json.loads(
        txlog_process(
            "produce",
            "-t",
            "w",
            "-p",
            "1",
            "--transactional-id",
            "x",
            "--no-commit",
            "--output",
            "json",
            data_dir=store,
            input="a\nb\nc\n",
        ).stdout
    )
    assert produced == {
        "topic": "w",
        "records": 3,
        "partitions": [{"partition": 1, "firstOffset": 0, "lastOffset": 2}],
        "transactionalId": "x",
        "transaction": "open",
    }
    committed = json.loads(txlog("commit", "--transactional-id", "x", "--output", "json", data_dir=store).stdout)
    assert committed["transactionalId"] == "x" and committed["result"] == "committed"
    assert_ok(
        txlog_process("produce", "-t", "w", "--transactional-id", "x", "--no-commit", data_dir=store, input="d\n")
    )
    aborted = json.loads(txlog("abort", "--transactional-id", "x", "--output", "json", data_dir=store).stdout)
    assert aborted["result"] == "aborted" and aborted["producerId"] == committed["producerId"]


# ---- item 9: help --------------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [(), ("topics",), ("transactions",), ("groups",)])
def test_command_summaries_are_whole_on_one_line(group):
    proc = txlog(*group, "--help", env={"COLUMNS": "80"})
    listing = proc.stdout.split("Commands:\n", 1)[1].splitlines()
    assert listing and all(line.startswith("  ") and line[2] != " " for line in listing), listing  # none wrapped
    assert not [line for line in listing if line.rstrip().endswith("...")], listing


def test_every_option_is_described_and_every_verb_has_examples(commands):
    for path, info in commands.items():
        for option in info["options"]:
            assert option["help"].strip(), (path, option["opts"])
        examples = [line for line in info["epilog"].splitlines() if line.strip().startswith("txlog ")]
        if path not in ("process", "groups describe"):  # their docstrings end with the examples
            assert len(examples) >= 2, (path, info["epilog"])
    for verb in (("process",), ("groups", "describe")):
        assert txlog(*verb, "--help").stdout.count("  txlog ") >= 2


def test_help_and_validation_agree_on_topic_names(tmp_path):
    assert "'-' (not first)" in " ".join(txlog("topics", "create", "--help").stdout.split())
    proc = txlog("topics", "create", "--", "-lead", data_dir=str(tmp_path / "s"))
    assert proc.returncode != 0 and "cannot start with '-'" in proc.stderr


@pytest.mark.parametrize(
    "args, names",
    [
        (("consume", "--bogus"), "--bogus"),
        (("--bogus",), "--bogus"),
        (("consume", "-t", "t", "-p", "x"), "'--partition'"),
        (("abort", "-t", "t", "-p", "-3", "--start-offset", "1"), "must be 0 or more, not -3"),
        (("verify", "--output", "xml"), "'xml' is not one of"),
        (("consume",), "'--topic'"),
    ],
)
def test_usage_errors_are_one_line_naming_the_option(args, names, tmp_path):
    line = one_usage_error(txlog(*args, data_dir=str(tmp_path)))
    assert names in line and "Input should be" not in line and "Value error" not in line


# ---- item 10: progress ---------------------------------------------------------------------------------


def run_with_tty_stderr(
    args: list[str], stdin_data: bytes | list[bytes] | None = None, tty_stdin: bool = False, timeout: float = 120
) -> tuple[int, str]:
    """Run txlog with stderr (and optionally stdin) on a pseudo-terminal; (exit code, what stderr showed).

    A list of `stdin_data` chunks is written with a pause longer than a progress redraw between
    them, so a test of the progress line does not depend on how fast the machine reads a file.
    """
    master, slave = pty.openpty()
    stdin = slave if tty_stdin else subprocess.PIPE
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env=_env(),
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    if stdin_data is not None and not tty_stdin:
        chunks = stdin_data if isinstance(stdin_data, list) else [stdin_data]
        for i, piece in enumerate(chunks):
            if i:
                time.sleep(REDRAW_EVERY_S * 3)
            proc.stdin.write(piece)
            proc.stdin.flush()
        proc.stdin.close()
    elif tty_stdin:
        time.sleep(0.5)
        os.write(master, b"typed\n\x04")  # a line, then Ctrl-D
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=timeout)
    os.close(master)
    return code, seen.decode("utf-8", "replace")


def test_progress_lines_only_when_asked_off_a_terminal(store):
    plain = txlog("verify", "--progress", data_dir=store)
    assert_ok(plain)
    assert [line for line in plain.stderr.splitlines() if line.startswith("verify: ") and line.endswith("(done)")]
    silent = txlog("verify", data_dir=store)
    assert not [line for line in silent.stderr.splitlines() if line.startswith("verify: ")]
    assert txlog("verify", "--progress", "-q", data_dir=store).stderr == ""
    produced = txlog_input("".join(f"{i}\n" for i in range(2000)), "produce", "-t", "t", "--progress", data_dir=store)
    assert "produce: 2,000 lines" in produced.stderr and "(done)" in produced.stderr


def test_progress_on_a_terminal_is_redrawn_and_erased(store, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("".join(f"{i}\n" for i in range(150_000)))
    # three bursts on a pipe, a pause between them: the progress line is due however fast the machine
    bursts = ["".join(f"{i}\n" for i in range(start, start + 50_000)).encode() for start in (0, 50_000, 100_000)]
    code, shown = run_with_tty_stderr(["--data-dir", store, "produce", "-t", "t"], stdin_data=bursts)
    assert code == 0, shown
    assert "\rproduce: " in shown.replace("\x1b[K", "") and " lines, " in shown
    assert shown.rstrip().splitlines()[-1].split("\x1b[K")[-1].startswith("Produced 150000 records")
    code, quiet = run_with_tty_stderr(["--data-dir", store, "-q", "produce", "-t", "t", str(big)])
    assert code == 0 and quiet == ""


def test_produce_from_a_terminal_says_how_to_finish(store):
    code, shown = run_with_tty_stderr(["--data-dir", store, "produce", "-t", "t", "-p", "0"], tty_stdin=True)
    assert code == 0, shown
    assert "Ctrl-D to finish" in shown
    assert consume(store, "-p", "0", "-o", "-1") == ["typed"]


# ---- item 11: verify's root causes, inspect --verify-index-only's result ------------------------------


def test_verify_reports_one_row_per_root_cause(tmp_path):
    d = str(tmp_path / "s")
    assert_ok(txlog("topics", "create", "a", "--config", "segment.bytes=20000", data_dir=d))
    for _ in range(6):
        assert_ok(txlog_input("".join(f"{i}\n" for i in range(500)), "produce", "-t", "a", data_dir=d))
    part = os.path.join(d, "a-0")
    second = sorted(n for n in os.listdir(part) if n.endswith(".log"))[1]
    with open(os.path.join(part, second), "r+b") as f:  # flip a byte in the middle of the second segment
        size = f.seek(0, 2)
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    proc = txlog("verify", "--output", "json", data_dir=d)
    assert proc.returncode == 3, proc.stderr
    rows = json.loads(proc.stdout)
    damaged = [r for r in rows if r["file"] == second]
    assert len(damaged) == 1 and "CRC" in damaged[0]["finding"], rows
    stem = second[: -len(".log")]
    # nothing the damaged .log explains is a row of its own: its index files' findings are folded under it
    assert not [r for r in rows if r["file"] and r["file"].startswith(stem) and r["file"] != second], rows
    for c in damaged[0]["consequences"]:
        assert c["file"].startswith(stem) and c["finding"] in damaged[0]["finding"]


def test_inspect_verify_index_only_ends_with_a_result(store):
    proc = txlog("inspect", "--verify-index-only", os.path.join(store, "t-0"))
    assert_ok(proc)
    assert proc.stdout.splitlines()[-1] == "Verified 2 index files against their logs: every entry matches."
