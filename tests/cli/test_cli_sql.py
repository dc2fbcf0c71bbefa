"""`txlog sql`: Spark SQL over a store, end to end through real subprocesses.

Each run starts its own JVM (tens of seconds on a loaded two-core machine), so the Spark runs
are few (five) and each checks several things: a `--file` script of several statements run
with one start-up (per-partition counts against what txlog.Consumer reads, `;` inside literals
and comments, a misspelled table ending the run with the statement named), statements on piped
stdin in csv with read_uncommitted and the analysis views, json of a topic with '-' in its name
(binary, header and timestamp rendering), the interactive shell on a pseudo-terminal (start-up
progress, multi-line statements, dot commands, errors and Ctrl-C that keep the shell, a topic
created after start, history), and Ctrl-C ending a running statement with exit 130. Argument
mistakes are checked to fail before Spark starts; the statement splitter, the shell's loop, and
the rendering and error-message helpers are also tested in process, without Spark.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

import txlog as api
from cli.sql import BinaryFormat, _Cells, _iso_timestamp, _unique, quoted
from cli.sql_shell import Statement, script_statements, split_statements
from cli.sql_spark import spark_message
from tests.cli.cli_helpers import ROOT, _env, assert_ok, assert_one_error, txlog_process
from tests.spark.spark_stores import mixed_store
from txlog.topic_partition import TopicPartition

SPARK_TIMEOUT = 600  # a JVM per run; slow on a loaded two-core machine
COUNT_QUERY = "SELECT partition, count(*) AS n FROM orders GROUP BY partition ORDER BY partition"
DASHED = "orders-eu"  # not a plain SQL identifier: queried as `orders-eu`
NOT_UTF8 = b"\xff\xfebin"


def _dashed_topic(path: str) -> None:
    """Two partitions of UTF-8 and binary keys and values, headers, nulls, and transactions."""
    with api.Admin(path) as admin:
        admin.create_topic(DASHED, 2)
    plain = api.Producer(path)
    plain.send(DASHED, "héllo".encode(), key=b"k1", partition=0, headers=[("h", b"v"), ("empty", None)])
    plain.send(DASHED, NOT_UTF8, key=b"\x00\x01", partition=0, timestamp_ms=1_700_000_000_123)
    plain.send(DASHED, None, key=None, partition=1)
    plain.flush()
    txn = api.Producer(path, transactional_id="eu-writer")
    txn.init_transactions()
    for commit in (True, False):
        txn.begin_transaction()
        txn.send(DASHED, b"committed" if commit else b"aborted", key=b"t", partition=1)
        txn.flush()
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.close()
    plain.send(DASHED, b"after", partition=1)
    plain.close()


def _group_commit(path: str) -> None:
    """A consumer group's committed offset, so that the store has __consumer_offsets too."""
    consumer = api.Consumer(path, group_id="readers", enable_auto_commit=False)
    consumer.assign([TopicPartition("audit", 0)])
    consumer.poll(max_records=10)
    consumer.commit()
    consumer.close(autocommit=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sql") / "store")
    mixed_store(path, records=30)
    _dashed_topic(path)
    _group_commit(path)
    return path


def consumer_rows(path: str, topic: str, isolation: str) -> list:
    """What txlog.Consumer reads from every partition of `topic`, in (partition, offset) order.

    The store is opened read-only: a writable consumer runs the coordinator's sweep, which would
    abort the fixture's open transaction once it is older than its timeout and change the answer.
    """
    from storage import Store

    with Store.open(path, read_only=True) as s:
        consumer = api.Consumer(s, isolation_level=isolation, enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in range(s.partition_count(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        rows = []
        while batch := consumer.poll(max_records=1000):
            rows.extend(batch)
        consumer.close(autocommit=False)
    return sorted(rows, key=lambda r: (r.partition, r.offset))


def _partition_counts(path: str, isolation: str) -> dict[int, int]:
    rows = consumer_rows(path, "orders", isolation)
    return dict(sorted(Counter(r.partition for r in rows).items()))


def _sql(store: str, *args: str, quiet: bool = False, stdin: str = "", engine: str = "duckdb"):
    """`txlog sql --engine ENGINE ARGS` with `stdin` piped in (not a terminal: a script, never the shell)."""
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "--data-dir",
        store,
        *(["-q"] if quiet else []),
        "sql",
        "--engine",
        engine,
        *args,
    ]
    return subprocess.run(
        cmd, check=False, cwd=ROOT, env=_env(), capture_output=True, text=True, input=stdin, timeout=SPARK_TIMEOUT
    )


def _no_jvm_noise(stderr: str) -> None:
    for noise in ("WARN", "log4j", "WARNING: Using incubator", "Exception", "\tat "):
        assert noise not in stderr, stderr


# ---- end to end, one JVM per test ----------------------------------------------------------------

SCRIPT = f"""-- a comment; with a semicolon
SELECT 1 AS one;
{COUNT_QUERY};
CREATE TEMPORARY VIEW semi AS SELECT 'a;b' AS s, "c;d" AS t /* ; */ ;
SELECT * FROM semi;;
SELECT * FROM odrers
"""


def _counts(lines: list[str]) -> dict[int, int]:
    return {int(p): int(n) for p, n in (line.split() for line in lines)}


def test_a_script_runs_every_statement_in_one_spark_session_and_stops_at_the_first_failure(store, tmp_path):
    script = tmp_path / "report.sql"
    script.write_text(SCRIPT)
    proc = _sql(store, "-f", str(script), engine="spark")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr

    one, counts, semi = proc.stdout.split("\n\n")  # table results, a blank line apart; the view's OK prints nothing
    assert one.split() == ["one", "-----", "1"]
    lines = counts.splitlines()
    assert lines[0].split() == ["partition", "n"] and set(lines[1]) <= {"-", " "}
    expected = _partition_counts(store, "read_committed")
    assert _counts(lines[2:]) == expected
    assert expected != _partition_counts(store, "read_uncommitted")  # the store has open and aborted data
    assert semi.split() == ["s", "t", "---", "---", "a;b", "c;d"]  # ';' inside literals and comments kept

    err = proc.stderr.splitlines()
    assert err.count("Starting Spark (local[2])...") == 1 and err[0] == "Starting Spark (local[2])..."
    views = next(line for line in err if line.startswith("Registered views: "))
    assert views.removeprefix("Registered views: ").split(", ") == [
        "__consumer_offsets",
        "__transaction_state",
        "audit",
        "orders",
        f"`{DASHED}`",
        "txlog_batches",
        "txlog_transactions",
    ]
    running = [line for line in err if line.startswith("Running statement ")]
    assert running == [
        "Running statement 1 of 5 (line 2)...",
        "Running statement 2 of 5 (line 3)...",
        "Running statement 3 of 5 (line 4)...",
        "Running statement 4 of 5 (line 5)...",
        "Running statement 5 of 5 (line 6)...",
    ]
    assert [line.split(" (")[0] for line in err if line.endswith(" s)")] == ["1 row", "3 rows", "OK", "1 row"]
    assert err[-1].startswith("Error: statement 5 (line 6): [TABLE_OR_VIEW_NOT_FOUND]") and "odrers" in err[-1]
    assert "Starting Spark" not in proc.stdout and "Registered views" not in proc.stdout
    _no_jvm_noise(proc.stderr)


DUCKDB_SCRIPT = f"""-- a comment; with a semicolon
SELECT 1 AS one;
{COUNT_QUERY};
CREATE TEMPORARY VIEW literals AS SELECT 'a;b' AS s, 'c' AS "c;d" /* ; */ ;
SELECT * FROM literals;;
SELECT * FROM odrers
"""


def test_a_script_runs_every_statement_in_embedded_duckdb_and_stops_at_the_first_failure(store, tmp_path):
    script = tmp_path / "report.sql"
    script.write_text(DUCKDB_SCRIPT)
    proc = _sql(store, "-f", str(script))  # the default engine
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr

    one, counts, semi = proc.stdout.split("\n\n")
    assert one.split() == ["one", "-----", "1"]
    lines = counts.splitlines()
    assert lines[0].split() == ["partition", "n"] and set(lines[1]) <= {"-", " "}
    assert _counts(lines[2:]) == _partition_counts(store, "read_committed")
    assert semi.split() == ["s", "c;d", "---", "-----", "a;b", "c"]  # ';' inside literals and comments kept

    err = proc.stderr.splitlines()
    assert "Starting Spark" not in proc.stderr
    assert err[0].removeprefix("Registered views: ").split(", ") == [
        "__consumer_offsets",
        "__transaction_state",
        "audit",
        "orders",
        f"`{DASHED}`",
        "txlog_batches",
        "txlog_transactions",
    ]
    assert [line.split(" (")[0] for line in err if line.endswith(" s)")] == ["1 row", "3 rows", "OK", "1 row"]
    assert err[-1].startswith("Error: statement 5 (line 6): Catalog Error: Table with name odrers does not exist")
    assert proc.stdout.count("Registered views") == 0


def test_a_damaged_log_is_one_error_line_naming_the_python_error(store, tmp_path):
    """A view's reader failing inside DuckDB (a CRC mismatch): the exception, not DuckDB's traceback."""
    import shutil

    damaged = tmp_path / "store"
    shutil.copytree(store, damaged)
    log = damaged / "orders-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[200:210] = b"\xff" * 10  # inside the first batch's records: its CRC no longer matches
    log.write_bytes(bytes(data))
    proc = _sql(str(damaged), "SELECT count(*) FROM audit; SELECT count(*) FROM orders")
    message = proc.stderr.splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert message.startswith("Error: statement 2 (line 1): CorruptRecordError: CRC mismatch"), message
    audit = len(consumer_rows(store, "audit", "read_committed"))
    assert proc.stdout.split() == ["count_star()", "--------------", str(audit)]  # only orders is damaged


ANALYSIS_QUERY = """
    SELECT 'batches' AS what, topic AS name, count(*) AS n FROM txlog_batches GROUP BY topic
    UNION ALL
    SELECT 'aborts', topic, count_if(isControl AND controlType = 'ABORT') FROM txlog_batches GROUP BY topic
    UNION ALL
    SELECT 'state', transactionalId || '=' || max_by(state, logOffset), count(*) FROM txlog_transactions
    GROUP BY transactionalId
"""


def _batches(path: str):
    from storage import Store

    with Store.open(path, read_only=True) as s:
        for topic in s.list_topics():
            for p in range(s.partition_count(topic)):
                log = s.partition(topic, p)
                offset = log.log_start_offset
                while offset < log.log_end_offset:
                    batches = log.read(offset, 1 << 24)
                    if not batches:
                        break
                    for batch in batches:
                        yield topic, batch
                    offset = batches[-1].next_offset


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_statements_on_stdin_csv_read_uncommitted_and_the_analysis_views(store, engine):
    """Piped stdin is a script; -q leaves stderr empty; two csv results, a blank line apart."""
    proc = _sql(
        store,
        "--output",
        "csv",
        "--isolation-level",
        "read_uncommitted",
        quiet=True,
        stdin=f"{COUNT_QUERY};\n{ANALYSIS_QUERY};\n",
        engine=engine,
    )
    assert_ok(proc)
    assert proc.stderr == ""
    counts, analysis = (list(csv.reader(io.StringIO(block))) for block in proc.stdout.split("\n\n"))
    assert counts[0] == ["partition", "n"]
    assert {int(p): int(n) for p, n in counts[1:]} == _partition_counts(store, "read_uncommitted")

    assert analysis[0] == ["what", "name", "n"]
    got = {(what, name): int(n) for what, name, n in analysis[1:] if what != "state"}
    batches, aborts = Counter(), Counter()
    for topic, batch in _batches(store):
        batches[topic] += 1
        aborts[topic] += batch.is_control and batch.control_marker().is_abort
    expected = {("batches", t): n for t, n in batches.items()} | {("aborts", t): n for t, n in aborts.items()}
    assert got == expected
    assert aborts[DASHED] == 1 and aborts["orders"] > 0

    with api.Admin(store, read_only=True) as admin:
        states = {f"{d.transactional_id}={d.state.state.kafka_name}" for d in admin.list_transactions()}
    assert {name for what, name, _ in analysis[1:] if what == "state"} == states
    assert "opener=Ongoing" in states and "eu-writer=CompleteAbort" in states


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_json_of_a_dashed_topic_matches_the_consumer(store, engine):
    query = (
        f"SELECT partition, `offset`, key, value, timestamp, headers, producerId, isTransactional "
        f"FROM `{DASHED}` ORDER BY partition, `offset`"  # offset is reserved in DuckDB: backticks in both engines
    )
    proc = _sql(store, query, "--output", "json", "--include-headers", "--include-transaction-columns", engine=engine)
    assert_ok(proc)
    got = json.loads(proc.stdout)
    records = consumer_rows(store, DASHED, "read_committed")

    def shown(data):
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + data.hex()

    def iso(ms):
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    assert got == [
        {
            "partition": r.partition,
            "offset": r.offset,
            "key": shown(r.key),
            "value": shown(r.value),
            "timestamp": iso(r.timestamp),  # no headers: null, as Spark's Kafka source
            "headers": [{"key": k, "value": shown(v)} for k, v in r.headers] or None,
            "producerId": r.producer_id,
            "isTransactional": r.is_transactional,
        }
        for r in records
    ]
    assert b"aborted" not in [r.value for r in records] and len(got) == 5  # read_committed by default
    assert {"value": "0x" + NOT_UTF8.hex(), "timestamp": "2023-11-14T22:13:20.123Z"}.items() <= got[1].items()
    assert "some binary values are not UTF-8" in proc.stderr  # the note about the 0x cells
    assert "Running query..." in proc.stderr.splitlines()  # one statement: no "1 of 1"


#: Minutes of work, that only Ctrl-C ends, in each engine's dialect.
LONG_QUERY = {
    "spark": "SELECT count(*) FROM range(0, 1000000000000, 1, 2)",
    "duckdb": "SELECT count(*) FROM range(0, 1000000000000) AS t(x) WHERE x % 7 = 3",
}
#: How each engine reports a syntax error (the first line of its message) and types an int column.
SYNTAX_ERROR = {"spark": "Error: [PARSE_SYNTAX_ERROR]", "duckdb": "Error: Parser Error: syntax error"}
INT_TYPE = {"spark": "int", "duckdb": "INTEGER"}
#: The one line a run ends with after Ctrl-C.
CANCELLED = {
    "spark": "Error: interrupted (SIGINT); Spark's running jobs were cancelled",
    "duckdb": "Error: interrupted (SIGINT); the statement was cancelled",
}


class _Terminal:
    """`txlog sql` on a pseudo-terminal (its controlling terminal: ^C is SIGINT, ^D is end of input)."""

    def __init__(self, store: str, home: str, engine: str):
        import pty

        env = _env({"HOME": home, "TERM": "dumb"})
        argv = [sys.executable, "-m", "cli.main", "--data-dir", store, "sql", "--engine", engine]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become txlog at once
            try:
                os.chdir(ROOT)
                os.execve(sys.executable, argv, env)
            finally:
                os._exit(127)
        self.output = b""
        self._seen = 0

    def expect(self, text: str, timeout: float = SPARK_TIMEOUT) -> str:
        """Read until `text` appears after what was expected before; the output in between."""
        import select

        deadline = time.monotonic() + timeout
        while (found := self.output.find(text.encode(), self._seen)) < 0:
            assert time.monotonic() < deadline, f"no {text!r} in {self.output[self._seen :]!r}"
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    data = b""
                assert data, f"txlog ended before {text!r}: {self.output[self._seen :]!r}"
                self.output += data
        between = self.output[self._seen : found].decode(errors="replace")
        self._seen = found + len(text)
        return between.replace("\r\n", "\n")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def interrupt(self) -> None:
        """What Ctrl-C does: SIGINT to the shell's process. Sent directly, not as a ^C byte: in runs
        under a backgrounded pytest a ^C written to this pseudo-terminal sometimes never became a
        SIGINT (the shell sat at its prompt), while the signal itself always arrives."""
        os.kill(self.pid, signal.SIGINT)

    def exit_code(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                os.read(self.fd, 65536)  # keep the terminal drained while Spark stops
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            assert time.monotonic() < deadline, "txlog sql did not exit"
            time.sleep(0.2)


PROMPT = "txlog> "


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_the_interactive_shell(store, tmp_path, engine):
    """One engine start-up serves every statement; errors and Ctrl-C keep the shell; Ctrl-D leaves;
    each statement sees the store as it is when it runs."""
    import shutil

    store = str(shutil.copytree(store, tmp_path / "store"))  # this test writes to it
    term = _Terminal(store, str(tmp_path), engine)
    startup = term.expect(PROMPT)
    if engine == "spark":
        assert startup.startswith("Starting Spark (local[2])...\n"), startup
        assert re.search(r"\r\x1b\[KStarting Spark: the JVM is starting, \d+\.\d s", startup), startup  # in place
        assert re.search(r"\r\x1b\[KSpark started in \d+\.\d s\n", startup), startup  # the line erased, the total
    else:
        assert startup.startswith("Registered views: "), startup  # nothing to start
    assert "Registered views: " in startup and ".tables" in startup

    term.send("SELECT partition, count(*) AS n\n")
    term.expect("...> ")  # the statement goes on until its ';'
    term.send("FROM orders GROUP BY partition ORDER BY partition;\n")
    lines = term.expect(PROMPT).splitlines()
    header = lines.index("partition    n")
    assert _counts(lines[header + 2 : header + 2 + 3]) == _partition_counts(store, "read_committed")
    assert re.fullmatch(r"3 rows \(\d+\.\d\d s\)", lines[-1]), lines

    term.send("SELEC 1;\n")  # a syntax error: one line, and the shell goes on
    errors = [line for line in term.expect(PROMPT).splitlines() if "Error" in line or "Traceback" in line]
    assert len(errors) == 1 and errors[0].startswith(SYNTAX_ERROR[engine]), errors

    term.send("CREATE TEMPORARY VIEW mine AS SELECT 2 AS two;\n")
    assert re.search(r"^OK \(\d+\.\d\d s\)$", term.expect(PROMPT), re.MULTILINE)
    term.send(".tables\n")
    assert term.expect(PROMPT).split()[1:] == [
        "__consumer_offsets",
        "__transaction_state",
        "audit",
        "orders",
        f"`{DASHED}`",
        "txlog_batches",
        "txlog_transactions",
        "mine",
    ]
    with api.Admin(store) as admin:  # a topic and records that came after the shell started
        admin.create_topic("late", 1)
    with api.Producer(store) as producer:
        producer.send("late", b"one")
        producer.send("late", b"two")
    term.send("SELECT count(*) AS n FROM late;\n")
    assert re.search(r"^n\n-+\n2\n1 row ", term.expect(PROMPT), re.MULTILINE)
    term.send(f".schema {DASHED}\n")
    schema = term.expect(PROMPT)
    assert re.search(rf"^timestampType\s+{INT_TYPE[engine]}\b", schema, re.MULTILINE), schema
    term.send(".nope\n")
    assert "Error: unknown command '.nope'; .help lists the commands" in term.expect(PROMPT)

    term.send("SELECT 'never run'")
    term.expect("'never run'")  # readline has the line (it echoes)
    # CPython's readline notices a signal only when it interrupts its select(): one that lands
    # between echoing and re-entering select() waits for the next key. Give it time to block.
    time.sleep(1.0)
    term.interrupt()  # Ctrl-C while typing drops the line
    try:
        dropped = term.expect(PROMPT, timeout=15)
    except AssertionError:  # the race above on a starved machine: a second Ctrl-C, as a user would press
        term.interrupt()
        dropped = term.expect(PROMPT)
    assert "never run" not in dropped.replace("SELECT 'never run'", "")
    term.send(LONG_QUERY[engine] + ";\n")
    term.expect(LONG_QUERY[engine])
    time.sleep(5)  # the job is running
    term.interrupt()
    cancelled = term.expect(PROMPT)
    assert "Error: interrupted (SIGINT); the statement was cancelled" in cancelled and "Traceback" not in cancelled

    term.send("SELECT two * 21 AS answer FROM mine;\n")  # the session is intact after the cancel
    assert re.search(r"^answer\n-+\n42\n1 row ", term.expect(PROMPT), re.MULTILINE)
    term.send("\x04")
    rest = term.expect("\n", timeout=60)
    assert term.exit_code() == 0, rest

    history = (tmp_path / ".txlog_sql_history").read_text().splitlines()
    assert history[0] == "SELECT partition, count(*) AS n" and ".tables" in history
    assert history[-1] == "SELECT two * 21 AS answer FROM mine;"
    assert term.output.count(b"Registered views: ") == 1
    assert b"Traceback" not in term.output and b"WARN" not in term.output


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_ctrl_c_cancels_the_running_statement_and_exits_130(store, engine):
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", store, "sql", "--engine", engine, LONG_QUERY[engine]],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        while (line := proc.stderr.readline()) and line.strip() != "Running query...":
            lines.append(line)
        assert line, lines
        time.sleep(5)  # the job is running
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=SPARK_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert out == "" and err.splitlines() == [CANCELLED[engine]]


# ---- before Spark: argument mistakes cost nothing ----------------------------------------------------


def test_argument_mistakes_are_reported_before_spark_starts(store, tmp_path):
    for args, message in (
        (["-f", str(tmp_path / "missing.sql")], "cannot read --file"),
        (["-f", str(tmp_path)], "cannot read --file"),
        (["SELECT 1", "-f", "-"], "give a QUERY or --file, not both"),
        ([" ; -- nothing but a comment\n"], "the query is empty"),
    ):
        proc = _sql(store, *args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Starting Spark" not in proc.stderr and "Traceback" not in proc.stderr
    proc = _sql(store, "-f", "-", stdin="")
    assert proc.returncode == 2 and "Error: the query is empty" in proc.stderr
    proc = _sql(store, "SELECT 1", "--output", "yaml")
    assert proc.returncode == 2 and "Starting Spark" not in proc.stderr
    for flag, value in (("--master", "local[4]"), ("--spark-log", str(tmp_path / "spark.log"))):
        proc = _sql(store, "SELECT 1", flag, value)  # the default engine, DuckDB, would ignore it
        assert proc.returncode == 2 and f"Error: {flag} is for --engine spark" in proc.stderr, proc.stderr


def test_a_missing_store_is_one_error_line(tmp_path):
    proc = txlog_process("sql", "SELECT 1", data_dir=tmp_path / "nope")  # sql runs Spark: never in-process
    message = assert_one_error(proc, 1)
    assert "no store at" in message


# ---- in process: names, cells, messages ------------------------------------------------------------


def test_view_names_as_written_in_a_query():
    assert quoted("orders") == "orders"
    assert quoted("__transaction_state") == "__transaction_state"
    assert quoted("orders-eu") == "`orders-eu`"
    assert quoted("app.events") == "`app.events`"
    assert quoted("1st") == "`1st`"


def test_cells_render_binary_timestamps_and_nested_values():
    cells = _Cells(BinaryFormat.auto)
    assert cells.json_value(b"abc") == "abc" and not cells.hexed
    assert cells.json_value(b"\xff\x00") == "0xff00" and cells.hexed
    assert _Cells(BinaryFormat.base64).json_value(b"\xff\x00") == base64.b64encode(b"\xff\x00").decode()
    assert _Cells(BinaryFormat.hex).json_value(b"abc") == "616263"
    utc = datetime.UTC
    assert cells.json_value(datetime.datetime(2024, 5, 1, 12, 0, tzinfo=utc)) == "2024-05-01T12:00:00.000Z"
    assert _iso_timestamp(datetime.datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=utc)) == "2024-05-01T12:00:00.000001Z"
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert _iso_timestamp(datetime.datetime(2024, 5, 1, 14, 0, tzinfo=plus2)) == "2024-05-01T12:00:00.000Z"
    assert cells.json_value([("a", b"x"), ("b", None)]) == {"a": "x", "b": None}  # an Arrow map
    assert cells.json_value([{"key": "h", "value": b"v"}]) == [{"key": "h", "value": "v"}]
    assert cells.json_value(math.nan) == "NaN" and cells.json_value(-math.inf) == "-Infinity"
    assert cells.text(None, "null") == "null" and cells.text(True, "") == "true"
    assert cells.text([{"key": "h", "value": None}], "") == '[{"key":"h","value":null}]'
    assert _unique(["key", "key", "key_2", "n"]) == ["key", "key_2", "key_2_2", "n"]


def test_spark_messages_are_one_line():
    class Fake(Exception):
        pass

    first = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)"
    assert spark_message(Fake(f"\n{first}\n\n== SQL ==\nSELEC 1\n^^^\n")) == first
    wrapped = (
        "An error occurred while calling o42.collectToPython.\n: org.apache.spark.SparkException: "
        "Exception thrown in awaitResult:\n\tat org.apache.spark.util.X(X.scala:1)\n"
        "Caused by: java.io.IOException: disk full\n\tat y"
    )
    assert spark_message(Fake(wrapped)) == (
        "org.apache.spark.SparkException: Exception thrown in awaitResult: java.io.IOException: disk full"
    )
    worker = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    raise X\nstorage.errors.CorruptRecordError: CRC mismatch at byte 172\n'
        " SQLSTATE: 38000"
    )
    assert spark_message(Fake(worker)) == "CorruptRecordError: CRC mismatch at byte 172"
    assert spark_message(Fake("")) == "Fake"


def test_statements_split_at_semicolons_outside_literals_and_comments():
    text = "SELECT 'a;b', \"c;d\", `e;f` -- g;h\nFROM t /* i; /* nested; */ j; */ ;\n\n  SELECT 'it\\'s;' ;; SELECT 3"
    statements, rest = split_statements(text)
    assert statements == [
        Statement("SELECT 'a;b', \"c;d\", `e;f` -- g;h\nFROM t /* i; /* nested; */ j; */", 1),
        Statement("SELECT 'it\\'s;'", 4),
    ]
    assert rest.strip() == "SELECT 3"  # the shell waits for its ';'
    assert script_statements(text)[-1] == Statement("SELECT 3", 4)  # a script's last one needs none
    assert script_statements("SELECT 1 -- no newline, no ';'") == [Statement("SELECT 1 -- no newline, no ';'", 1)]
    assert split_statements("SELECT '1;\n") == ([], "SELECT '1;\n")  # an open literal: more lines to come
    assert split_statements("/* open ; comment\n") == ([], "/* open ; comment\n")
    assert split_statements("-- only a comment;\n  ;\n") == ([], "")
    assert script_statements("  ; /* */ -- \n") == []
    # DuckDB's literals are standard SQL's: a backslash is a character, '' the one escape
    standard = "SELECT 'C:\\'; SELECT 'it''s;'"
    assert script_statements(standard, backslash_escapes=False) == [
        Statement("SELECT 'C:\\'", 1),
        Statement("SELECT 'it''s;'", 1),
    ]
    assert len(script_statements(standard)) == 1  # as Spark reads it, the first literal is still open


def test_the_shell_loop_without_spark(tmp_path, capsys):
    """run_shell's reading: continuation lines, dot commands, Ctrl-C at the prompt and during a statement."""
    from cli.sql_shell import CONTINUATION, ShellActions, run_shell
    from cli.sql_shell import PROMPT as SHELL_PROMPT

    typed = iter(
        [
            "SELECT 1,",
            "2; SELECT 'x;",
            "y'; SELECT 3",
            KeyboardInterrupt,
            ".tables",
            ".schema orders",
            ".schema",
            ".bogus",
            "SELECT slow;",
            "SELECT 4; -- done",
            ".quit",
            "never read",
        ]
    )
    prompts, done = [], []

    def read_line(prompt: str) -> str:
        prompts.append(prompt)
        line = next(typed)
        if line is KeyboardInterrupt:
            raise KeyboardInterrupt
        return line

    def run(statement: Statement) -> None:
        if statement.text == "SELECT slow":
            raise KeyboardInterrupt
        done.append(statement.text)

    run_shell(
        ShellActions(
            run=run,
            tables=lambda: done.append(".tables"),
            schema=lambda v: done.append(f"schema {v}"),
            error=lambda m: done.append(f"error {m}"),
            interrupted=lambda: done.append("interrupted"),
        ),
        read_line=read_line,
        history_file=str(tmp_path / "history"),
    )
    assert done == [
        "SELECT 1,\n2",
        "SELECT 'x;\ny'",
        ".tables",
        "schema orders",
        "error .schema needs a view name, e.g. .schema orders",
        "error unknown command '.bogus'; .help lists the commands",
        "interrupted",
        "SELECT 4",
    ]
    assert prompts[:4] == [SHELL_PROMPT, CONTINUATION, CONTINUATION, CONTINUATION]  # "SELECT 3" waits for its ';'
    assert prompts[4] == SHELL_PROMPT  # Ctrl-C dropped it
    assert next(typed) == "never read"  # .quit left
