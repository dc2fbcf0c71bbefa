"""`txlog sql "SELECT ..."`: Spark SQL over the store, one temporary view per topic.

A local Spark session (`--master`, default local[2]) reads the store through `txlog.spark.read`
(topics by the JVM reader, the analysis views by the `txlog` data source). It takes 20-40 s to
start, so a run starts it once: the
`;`-separated statements of QUERY, of `-f FILE` or of piped stdin run in turn in that one
session, and with none of those on a terminal the run is an interactive shell
(cli/sql_shell.py splits statements and reads the shell's lines; this module runs them).
Every topic of the store, internal ones included, is a view named exactly as the topic, with
Spark's Kafka-source columns (key, value, topic, partition, offset, timestamp,
timestampType; `--include-headers` and `--include-transaction-columns` add theirs), read
read_committed unless `--isolation-level read_uncommitted`. A name that is not a plain SQL
identifier (`orders-eu`, `app.events`) is used with backticks: `` `orders-eu` ``.
Two analysis views cover every topic: `txlog_batches` (one row per record batch) and
`txlog_transactions` (the decoded `__transaction_state` history). Spark's view names are
case-insensitive, so of two topics differing only in case the first in sorted order (`Orders`
before `orders`) keeps the name, an analysis view keeps its name over a topic, and a topic left
without a view is named in a note on stderr.

Each whole result is printed (`--limit N` caps it) as a table, csv, json or jsonl. Binary
cells (keys, values, header values) print as their UTF-8 text when they are valid UTF-8 and
as 0x-prefixed hex otherwise (`--binary-format auto`, with a note on stderr when that
happened); `--binary-format base64|hex` writes every binary cell that way (SQL's `hex()`,
`base64()` and `CAST(value AS STRING)` work too). Timestamps print as ISO-8601 UTC
(`2024-05-01T12:00:00.000Z`); arrays, maps and structs as JSON in table and csv cells;
decimals as strings in json. json objects need distinct keys, so a repeated column name
gets a suffix there (`key`, `key_2`).

Spark's own output (the JVM's start-up banner and log, Python worker errors) would bury the
result, so the JVM's stdout and stderr go to a temporary file, or to `--spark-log FILE`. A
failing statement is one `Error: ...` line: the first line of Spark's message (exit 1, or the
shell goes on); Ctrl-C cancels the running Spark jobs and exits 130 (the shell goes on).
pyspark is imported only when the verb runs: `txlog --help` does not load it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from cli.consume import IsolationChoice
from cli.context import USAGE, CommandError, open_store, require_java, settings
from cli.output import JsonValue, OutputFormat, emit, error_line, output_option, status
from cli.sql_shell import ShellActions, Statement, run_shell, script_statements

if TYPE_CHECKING:  # Spark and Arrow are imported when a statement runs, not when the CLI starts
    import datetime
    from types import FrameType

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from cli.interrupts import Handler

T = TypeVar("T")
P = ParamSpec("P")

BATCHES_VIEW = "txlog_batches"
TRANSACTIONS_VIEW = "txlog_transactions"
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRACEBACK = "Traceback (most recent call last):"
INTERRUPTED = "interrupted (SIGINT)"  # as `process` says it: Ctrl-C is the one signal handled here


if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    OutputOption = OutputFormat
else:
    OutputOption = output_option(
        OutputFormat.table, OutputFormat.csv, OutputFormat.json, OutputFormat.jsonl, help="table, csv, json or jsonl."
    )


class BinaryFormat(str, Enum):
    """How binary cells print: auto (UTF-8 text when valid, else 0x-hex), base64 or hex."""

    auto = "auto"
    base64 = "base64"
    hex = "hex"


# ---- names --------------------------------------------------------------------------------------


def quoted(name: str) -> str:
    """A view name as it is written in a query: backticks unless it is a plain identifier."""
    return name if _PLAIN_IDENTIFIER.fullmatch(name) else _backticked(name)


def _backticked(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ---- cells --------------------------------------------------------------------------------------


class _Cells:
    """Arrow values (as to_pylist gives them) to JSON-ready values and to table/csv text."""

    def __init__(self, binary: BinaryFormat):
        self.binary = binary
        self.hexed = False  # auto mode printed some binary cell as hex

    def json_value(self, value: object) -> JsonValue:
        import datetime
        import decimal
        import math

        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            if math.isnan(value):
                return "NaN"
            if math.isinf(value):
                return "Infinity" if value > 0 else "-Infinity"
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self._binary(bytes(value))
        if isinstance(value, datetime.datetime):
            return _iso_timestamp(value)
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return str(value)
        if isinstance(value, decimal.Decimal):
            return str(value)
        if isinstance(value, dict):
            return {str(k): self.json_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if (
                value
                and all(isinstance(item, tuple) and len(item) == 2 for item in value)
                and all(isinstance(k, str) for k, _ in value)
            ):
                return {k: self.json_value(v) for k, v in value}  # an Arrow map: [(key, value), ...]
            return [self.json_value(item) for item in value]
        return str(value)

    def text(self, value: object, missing: str) -> str:
        import json

        shown = self.json_value(value)
        if shown is None:
            return missing
        if isinstance(shown, bool):
            return "true" if shown else "false"
        if isinstance(shown, (dict, list)):
            return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
        return str(shown)

    def _binary(self, data: bytes) -> str:
        import base64

        if self.binary is BinaryFormat.base64:
            return base64.b64encode(data).decode("ascii")
        if self.binary is BinaryFormat.hex:
            return data.hex()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.hexed = True
            return "0x" + data.hex()


def _iso_timestamp(value: datetime.datetime) -> str:
    """ISO-8601 in UTC with a Z; milliseconds (Kafka's precision) unless there are microseconds."""
    import datetime

    if value.tzinfo is None:  # TIMESTAMP_NTZ: no zone to convert from or to name
        return value.isoformat(timespec="milliseconds" if value.microsecond % 1000 == 0 else "microseconds")
    value = value.astimezone(datetime.UTC)
    spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
    return value.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _unique(names: list[str]) -> list[str]:
    """Column names as json keys: a repeated name gets _2, _3, ..."""
    seen: set[str] = set()
    out = []
    for name in names:
        key, n = name, 1
        while key in seen:
            n += 1
            key = f"{name}_{n}"
        seen.add(key)
        out.append(key)
    return out


def _print_result(table: pa.Table, output: OutputFormat, binary: BinaryFormat) -> bool:
    """Print an Arrow table; True when auto mode had to print some binary cell as hex."""
    names = list(table.column_names)
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows_by_index = list(zip(*columns, strict=True)) if columns else []
    cells = _Cells(binary)
    if output in (OutputFormat.json, OutputFormat.jsonl):
        keys = _unique(names)
        rows = [{k: cells.json_value(v) for k, v in zip(keys, row, strict=True)} for row in rows_by_index]
        emit(rows, [(k, k) for k in keys], output)
    elif names:
        missing = "null" if output is OutputFormat.table else ""
        rows = [{str(i): cells.text(v, missing) for i, v in enumerate(row)} for row in rows_by_index]
        emit(rows, [(name, str(i)) for i, name in enumerate(names)], output, missing=missing)
    return cells.hexed


# ---- Spark --------------------------------------------------------------------------------------


@contextmanager
def _jvm_output(log: IO[bytes]) -> Iterator[int]:
    """While Spark starts, fds 1 and 2 point at `log`: the JVM (and every process it starts)
    inherits them for good, so its banner and log never reach the terminal. Ours are restored.
    Yields a descriptor of the real stderr, for the start-up ticker."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield saved[1]
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _last_line(log: IO[bytes]) -> str | None:
    try:
        log.flush()
        log.seek(0)
        lines = [line.strip() for line in log.read().decode("utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    lines = [line for line in lines if line]
    return lines[-1] if lines else None


def spark_message(exc: BaseException) -> str:
    """One line for a Spark failure: the error's first line, or a Python traceback's last one."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if _TRACEBACK in text:
        # A failure inside a Python worker (the data source): the exception is the traceback's last line.
        tail = text[text.rindex(_TRACEBACK) :].splitlines()
        for line in reversed(tail):
            if line.strip() and not line.startswith((" ", "\t")):
                name, sep, message = line.strip().partition(": ")
                return f"{name.rsplit('.', 1)[-1]}{sep}{message}"  # storage.errors.X: ... -> X: ...
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        lines = lines[1:]  # a py4j error: the Java exception follows
        lines[0] = lines[0].lstrip(": ").strip()
    first = lines[0]
    if first.endswith(":"):  # a wrapper ("SparkException: Exception thrown in awaitResult:"): add its cause
        cause = next((line for line in lines[1:] if not line.startswith("at ")), None)
        if cause is not None:
            return f"{first} {cause.removeprefix('Caused by: ')}"
    return first


def _quiet_pyspark_loggers() -> None:
    """pyspark logs every analysis error to stderr as JSON, stack and all, before raising it."""
    import logging

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).disabled = True


def _session(ctx: typer.Context, master: str, log: IO[bytes], warehouse: str) -> tuple[SparkSession, bool]:
    """The SparkSession (created here, with the JVM's output sent to `log`) and whether we created it.

    'Starting Spark (...)...' goes to stderr first; on a terminal the seconds are counted below it."""
    from pyspark import SparkContext

    from txlog.spark import local_session

    created = SparkContext._active_spark_context is None
    if created:
        require_java()  # "install Java 17 or 21", not pyspark's "gateway exited"
    status(ctx, f"Starting Spark ({master})...")
    started = time.monotonic()
    conf = {"spark.sql.warehouse.dir": warehouse}  # CREATE TABLE must not leave ./spark-warehouse behind
    try:
        if created:
            with _jvm_output(log) as stderr_fd, _StartupProgress(ctx, "Starting Spark", stderr_fd) as progress:
                spark = local_session(master, app_name="txlog sql", extra_conf=conf)
            if progress.progress.terminal:
                status(ctx, f"Spark started in {time.monotonic() - started:.1f} s")
        else:
            spark = local_session(master, app_name="txlog sql")
    except Exception as exc:  # noqa: BLE001  any failure to start is one Error line
        detail = _last_line(log) if created else None
        message = f"Spark did not start: {spark_message(exc)}"
        raise CommandError(message + (f" ({detail})" if detail and detail not in message else "")) from None
    return spark, created


def _python_sigint() -> None:
    """Python's own Ctrl-C (KeyboardInterrupt) between Spark calls, e.g. at the shell's prompt."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _CancelOnSigint:
    """Ctrl-C while a Spark call runs cancels Spark's jobs and lets the call come back.

    pyspark's own handler calls the JVM from inside the signal handler, on the connection the
    interrupted call is still reading (py4j: "reentrant call"), then raises out of that read,
    leaving the connection with an answer nobody read -- a shell that went on using it could
    read one statement's answer for the next. Here the handler only notes the signal and
    cancels from a thread of its own (py4j gives each thread its own connection), again every
    half second until the call comes back: a Ctrl-C while Spark is still planning comes before
    the job it must cancel. The call ends with a "cancelled" failure and `interrupted` turns
    that into KeyboardInterrupt. When `impatient`, a second Ctrl-C raises at once (the run is
    ending anyway).
    """

    CANCEL_EVERY_S = 0.5

    def __init__(self, spark: SparkSession, *, impatient: bool):
        import threading

        self.spark, self.impatient = spark, impatient
        self.count = 0
        self._previous: Handler = None
        self._returned = threading.Event()
        self._canceller: threading.Thread | None = None

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def __enter__(self) -> _CancelOnSigint:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        self._returned.set()
        if self._canceller is not None:  # a cancel still in flight must not meet the next statement's job
            self._canceller.join(timeout=10)
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        import threading

        self.count += 1
        if self.count == 1:
            self._canceller = threading.Thread(target=self._cancel, name="txlog-sql-cancel", daemon=True)
            self._canceller.start()
        elif self.impatient:
            raise KeyboardInterrupt

    def _cancel(self) -> None:
        while not self._returned.is_set():
            with contextlib.suppress(Exception):  # a JVM on its way down: nothing left to cancel
                self.spark.sparkContext.cancelAllJobs()
            self._returned.wait(self.CANCEL_EVERY_S)


def _stop(spark: SparkSession) -> None:
    with contextlib.suppress(Exception):  # a JVM that already died must not hide the error that killed it
        spark.stop()


def _drop_views(spark: SparkSession, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(Exception):
            spark.catalog.dropTempView(name)


def _register(
    note: Callable[[str], None],
    spark: SparkSession,
    path: str,
    topics: list[str],
    *,
    isolation: str,
    include_headers: bool,
    include_transaction_columns: bool,
) -> list[str]:
    """Register the topic views and the analysis views; the names registered, as written in a query.

    txlog.spark.read makes each: a topic's records by the JVM reader when the session has its jar
    (planned now, so the view is a snapshot), the analysis views by the Python source."""
    from txlog.spark import read

    taken: dict[str, str] = {BATCHES_VIEW: "the analysis view", TRANSACTIONS_VIEW: "the analysis view"}
    registered = []
    for topic in topics:
        holder = taken.get(topic.lower())
        if holder is not None:
            note(
                f"Note: topic '{topic}' has no view: {holder} has that name (Spark's view names are case-insensitive)."
            )
            continue
        taken[topic.lower()] = f"topic '{topic}'"
        df = read(
            spark,
            path,
            subscribe=topic,
            includeHeaders=include_headers,
            includeTransactionColumns=include_transaction_columns,
            **{"isolation.level": isolation},
        )
        df.createOrReplaceTempView(_backticked(topic))
        registered.append(quoted(topic))
    for name, view in ((BATCHES_VIEW, "batches"), (TRANSACTIONS_VIEW, "transactions")):
        df = read(spark, path, view=view)
        df.createOrReplaceTempView(name)
        registered.append(name)
    return registered


# ---- what to run: decided before Spark starts -------------------------------------------------------


def _script(query: str | None, file: Path | None) -> list[Statement] | None:
    """The statements to run, or None for the interactive shell; usage mistakes fail here, cheaply."""
    if query is not None and file is not None:
        raise CommandError("give a QUERY or --file, not both", exit_code=USAGE)
    if file is not None:
        text = _read_text(file)
    elif query == "-" or (query is None and not sys.stdin.isatty()):
        text = sys.stdin.read()
    elif query is None:
        return None  # a terminal and nothing to run: the shell
    else:
        text = query
    statements = script_statements(text)
    if not statements:
        raise CommandError("the query is empty", exit_code=USAGE)
    return statements


def _read_text(file: Path) -> str:
    if str(file) == "-":
        return sys.stdin.read()
    try:
        return file.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise CommandError(f"cannot read --file {file}: {exc.strerror}", exit_code=USAGE) from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{file} is not UTF-8 text (byte {exc.start})", exit_code=USAGE) from None


# ---- the session: started once, every statement runs in it -----------------------------------------


class _StartupProgress:
    """The elapsed time on a terminal's stderr while Spark starts (cli/progress.py draws the line).

    It needs a thread (the main thread is inside pyspark until the JVM is up) and a descriptor
    of its own for the terminal, because fds 1 and 2 point at the Spark log for as long as the
    JVM starts (`_jvm_output`).
    """

    def __init__(self, ctx: typer.Context, label: str, fd: int):
        import threading

        from cli.progress import Progress

        self._stream = os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace")
        self.progress: Progress[int] = Progress(ctx, label, lambda _: "the JVM is starting", stream=self._stream)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="txlog-sql-progress", daemon=True)

    def __enter__(self) -> _StartupProgress:
        if self.progress.terminal:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._done.set()
            self._thread.join()
        self.progress.close()  # erases the line
        self._stream.close()

    def _tick(self) -> None:
        while not self._done.wait(0.25):
            self.progress.update(0)


def _spark_call(spark: SparkSession, action: Callable[[], T], *, impatient: bool) -> T:
    """Run `action` against Spark: its errors become one line (CommandError), and Ctrl-C a
    KeyboardInterrupt once the running jobs are cancelled and the call has come back."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    with _CancelOnSigint(spark, impatient=impatient) as sigint:
        try:
            result = action()
        except Exception as exc:
            if sigint.interrupted:
                raise KeyboardInterrupt from None  # it failed because Ctrl-C cancelled it
            if isinstance(exc, (PySparkException, Py4JError)):
                raise CommandError(spark_message(exc)) from None
            raise
    if sigint.interrupted:
        raise KeyboardInterrupt  # Ctrl-C came too late to cancel anything: the statement is still interrupted
    return result


class _Views:
    """The views of the store's topics and the analysis views, as registered in the session.

    A view is planned when it is made (the JVM reader fixes its offsets and LSO at load()), so
    it is a snapshot: a script's statements all see the store as it was when the run began, and
    the shell makes the views again before each statement, so that each sees the store as it is
    then, new topics included.
    """

    def __init__(
        self,
        ctx: typer.Context,
        spark: SparkSession,
        path: str,
        *,
        isolation: str,
        include_headers: bool,
        include_transaction_columns: bool,
    ):
        self.ctx, self.spark, self.path = ctx, spark, path
        self.isolation, self.include_headers = isolation, include_headers
        self.include_transaction_columns = include_transaction_columns
        self.topics: list[str] = []
        self.names: list[str] = []  # as written in a query

    def register(self, topics: list[str], *, notes: bool = True, impatient: bool = True) -> None:
        def note(message: str) -> None:
            if notes:
                status(self.ctx, message)

        names = _spark_call(
            self.spark,
            impatient=impatient,
            action=lambda: _register(
                note,
                self.spark,
                self.path,
                topics,
                isolation=self.isolation,
                include_headers=self.include_headers,
                include_transaction_columns=self.include_transaction_columns,
            ),
        )
        _drop_views(self.spark, [t for t in self.topics if t not in topics])  # deleted since
        self.topics, self.names = topics, names

    def refresh(self) -> None:
        """Make the views again from the store as it is now."""
        from storage.errors import KafkaError

        try:
            with open_store(self.ctx, read_only=True) as store:
                topics = store.list_topics()
        except (KafkaError, OSError) as exc:
            raise CommandError(f"cannot read the store again: {exc}") from None
        self.register(topics, notes=False, impatient=False)  # the shell's session must survive Ctrl-C


class _Session:
    """One Spark session for the whole run: its views, and how a statement's result is printed."""

    def __init__(
        self,
        ctx: typer.Context,
        spark: SparkSession,
        views: _Views,
        *,
        output: OutputFormat,
        limit: int | None,
        binary: BinaryFormat,
        interactive: bool,
    ):
        self.ctx, self.spark, self.views = ctx, spark, views
        self.interactive = interactive  # the shell: Ctrl-C cancels the statement, never the session
        self.output, self.limit, self.binary = output, limit, binary
        self._printed = False  # a result is on stdout: the next one is set apart

    def run(self, statement: Statement) -> None:
        """Run one statement and print its result; CommandError (one line) if Spark refuses it."""
        started = time.monotonic()
        if self.interactive:
            self.views.refresh()
        table = self._collect(lambda: self.spark.sql(statement.text))
        if table.num_columns == 0:  # a command (CREATE VIEW, SET x=y, CACHE TABLE ...): no result set
            status(self.ctx, f"OK ({time.monotonic() - started:.2f} s)")
            return
        self._separate()
        if _print_result(table, self.output, self.binary):
            status(
                self.ctx,
                "Note: some binary values are not UTF-8 and were shown as 0x-prefixed hex; "
                "use --binary-format base64 or hex (or SQL's hex(), base64()) for the exact bytes.",
            )
        rows = table.num_rows
        status(self.ctx, f"{rows} row{'s' * (rows != 1)} ({time.monotonic() - started:.2f} s)")

    def tables(self) -> None:
        """The registered views, then the temporary views the user created, one per line."""
        if self.interactive:
            self.views.refresh()
        ours = {name.lower() for name in [*self.views.topics, BATCHES_VIEW, TRANSACTIONS_VIEW]}
        listed = _spark_call(self.spark, self.spark.catalog.listTables, impatient=not self.interactive)
        created = [quoted(t.name) for t in listed if t.isTemporary and t.name.lower() not in ours]
        for name in [*self.views.names, *sorted(created)]:
            typer.echo(name)

    def schema(self, view: str) -> None:
        name = view if view.startswith("`") else quoted(view)
        self.run(Statement(f"DESCRIBE {name}", 1))

    def _collect(self, query: Callable[[], DataFrame]) -> pa.Table:
        """`query`'s DataFrame, run (up to --limit rows), as an Arrow table."""

        def collected() -> pa.Table:
            frame = query()
            return (frame if self.limit is None else frame.limit(self.limit)).toArrow()

        return _spark_call(self.spark, collected, impatient=not self.interactive)

    def _separate(self) -> None:
        """A blank line between two results of a script in table and csv (json and jsonl need none;
        in the shell the prompt sets them apart)."""
        if self._printed and not self.interactive and self.output in (OutputFormat.table, OutputFormat.csv):
            typer.echo("")
        self._printed = True


def _run_script(ctx: typer.Context, session: _Session, statements: list[Statement]) -> None:
    """Each statement in turn; the first failure ends the run, naming the statement when there are several."""
    for number, statement in enumerate(statements, 1):
        several = len(statements) > 1
        status(
            ctx,
            f"Running statement {number} of {len(statements)} (line {statement.line})..."
            if several
            else "Running query...",
        )
        try:
            session.run(statement)
        except CommandError as exc:
            if several:
                raise CommandError(f"statement {number} (line {statement.line}): {exc}") from None
            raise


def _read_line(prompt: str) -> str:
    """One line at the prompt, where Ctrl-C must raise KeyboardInterrupt (it drops the line).

    Python's own handler is put back before every read: a Spark call's handler (or pyspark's)
    left installed would only note the signal, and the shell would sit at its prompt.
    """
    _python_sigint()
    return input(prompt)


def _run_shell(ctx: typer.Context, session: _Session) -> None:
    def reported(action: Callable[P, None]) -> Callable[P, None]:
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            try:
                action(*args, **kwargs)
            except CommandError as exc:
                error_line(str(exc))

        return run

    status(ctx, "Statements end with ';'; .tables lists the views, .help the commands, Ctrl-D leaves.")
    run_shell(
        ShellActions(
            run=reported(session.run),
            tables=reported(session.tables),
            schema=reported(session.schema),
            error=error_line,
            interrupted=lambda: error_line(f"{INTERRUPTED}; the statement was cancelled"),
        ),
        read_line=_read_line,
    )


# ---- the command --------------------------------------------------------------------------------


def sql(
    ctx: typer.Context,
    query: Annotated[
        str | None,
        typer.Argument(
            metavar="QUERY",
            help="Spark SQL statements separated by ';', e.g. \"SELECT * FROM orders\"; '-' reads "
            "them from stdin. Without QUERY or --file: an interactive shell on a terminal, else stdin.",
            show_default=False,
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            metavar="FILE",  # -f too (spark-sql's), hidden: -f is kcat's format elsewhere (cli/flags.py)
            help="Run the ';'-separated statements of FILE ('-' for stdin).",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = OutputFormat.table,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            metavar="N",
            help="Print at most N rows of each result (default: all).",
            show_default=False,
        ),
    ] = None,
    isolation_level: Annotated[
        IsolationChoice,
        typer.Option(
            "--isolation-level",
            case_sensitive=False,
            help="For the topic views: read_committed hides open and aborted transactions.",
        ),
    ] = IsolationChoice.read_committed,
    include_headers: Annotated[
        bool,
        typer.Option(
            "--include-headers",
            help="Topic views get a `headers` column (array of key, value).",
        ),
    ] = False,
    include_transaction_columns: Annotated[
        bool,
        typer.Option(
            "--include-transaction-columns",
            help="Topic views get producerId, producerEpoch, sequence and isTransactional.",
        ),
    ] = False,
    binary_format: Annotated[
        BinaryFormat,
        typer.Option(
            "--binary-format",
            case_sensitive=False,
            help="How binary cells print: auto (UTF-8 text when valid, else 0x-prefixed hex), base64 or hex.",
        ),
    ] = BinaryFormat.auto,
    master: Annotated[
        str,
        typer.Option(
            "--master",
            metavar="MASTER",
            help="Spark master URL.",
        ),
    ] = "local[2]",
    spark_log: Annotated[
        str | None,
        typer.Option(
            "--spark-log",
            metavar="FILE",
            help="Append Spark's own output (JVM log, worker errors) to FILE (default: discarded).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Spark SQL over the store (one Spark start-up per run): statements, a file, or an interactive shell.

    One view per topic, plus txlog_batches and txlog_transactions. Topic views read
    read_committed by default; a topic whose name is not a plain identifier is written with
    backticks (SELECT * FROM `orders-eu`). The views in use are listed on stderr.
    Several statements run in one session, each result printed in turn, all seeing the store as
    it was when the run began; the first failing one ends the run (exit 1). The shell reads the
    store again before each statement.
    """
    statements = _script(query, file)
    with open_store(ctx, read_only=True) as store:
        topics = store.list_topics()
    path = os.path.abspath(settings(ctx).data_dir)
    try:
        import pyarrow  # noqa: F401  imported only to fail early when the spark extra is missing
        import pyspark  # noqa: F401  (idem)
    except ImportError as exc:
        raise CommandError(f"txlog sql needs Spark: {exc} (pip install 'txlog[spark]')") from None

    with tempfile.TemporaryDirectory(prefix="txlog-sql-") as scratch:
        log: IO[bytes]
        if spark_log is not None:
            log = open(spark_log, "a+b")  # noqa: SIM115  closed below; the JVM keeps its own copy of the fd
        else:
            log = tempfile.TemporaryFile(prefix="txlog-spark-", suffix=".log")  # noqa: SIM115  closed below
        try:
            _quiet_pyspark_loggers()
            spark, created = _session(ctx, master, log, os.path.join(scratch, "warehouse"))
            _python_sigint()  # pyspark's handler calls the JVM from inside the handler; see _CancelOnSigint
            try:
                views = _Views(
                    ctx,
                    spark,
                    path,
                    isolation=isolation_level.value,
                    include_headers=include_headers,
                    include_transaction_columns=include_transaction_columns,
                )
                views.register(topics)
                status(ctx, f"Registered views: {', '.join(views.names)}")
                session = _Session(
                    ctx, spark, views, output=output, limit=limit, binary=binary_format, interactive=statements is None
                )
                if statements is None:
                    _run_shell(ctx, session)
                else:
                    _run_script(ctx, session, statements)
            finally:
                if created:
                    _stop(spark)
                else:  # someone else's session (txlog sql run in process): leave it as it was
                    _drop_views(spark, [*topics, BATCHES_VIEW, TRANSACTIONS_VIEW, *views.topics])
        except KeyboardInterrupt:  # pyspark's SIGINT handler has cancelled the running jobs
            raise CommandError(f"{INTERRUPTED}; Spark's running jobs were cancelled", exit_code=130) from None
        finally:
            log.close()
