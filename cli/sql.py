"""`txlog sql "SELECT ..."`: SQL over the store, one view per topic, in DuckDB or in Spark.

`--engine duckdb` (the default) runs the statements in an embedded DuckDB (cli/sql_duckdb.py):
no JVM, so the first answer comes within a second or two; `--engine spark` runs them in a local
Spark session (cli/sql_spark.py), 20-40 s to start, for Spark SQL's dialect and functions and
to try what a cluster job will run. This module is what the two share: the options, what to
run, the run of a script or of the interactive shell, and the printing of each result.

An engine is started once per run: the `;`-separated statements of QUERY, of `-f FILE` or of
piped stdin run in turn in it, and with none of those on a terminal the run is an interactive
shell (cli/sql_shell.py splits statements and reads the shell's lines; this module runs them).
Every topic of the store, internal ones included, is a view named exactly as the topic, with
Spark's Kafka-source columns (key, value, topic, partition, offset, timestamp,
timestampType; `--include-headers` and `--include-transaction-columns` add theirs), read
read_committed unless `--isolation-level read_uncommitted`. A name that is not a plain SQL
identifier (`orders-eu`, `app.events`) is used with backticks: `` `orders-eu` `` (both
engines read them). Two analysis views cover every topic: `txlog_batches` (one row per record
batch) and `txlog_transactions` (the decoded `__transaction_state` history). View names are
case-insensitive in both engines, so of two topics differing only in case the first in sorted
order (`Orders` before `orders`) keeps the name, an analysis view keeps its name over a topic,
and a topic left without a view is named in a note on stderr (`viewed_topics`).

Each whole result is printed (`--limit N` caps it) as a table, csv, json or jsonl. Binary
cells (keys, values, header values) print as their UTF-8 text when they are valid UTF-8 and
as 0x-prefixed hex otherwise (`--binary-format auto`, with a note on stderr when that
happened); `--binary-format base64|hex` writes every binary cell that way (SQL's `hex()`,
`base64()` and casts to a string work too). Timestamps print as ISO-8601 UTC
(`2024-05-01T12:00:00.000Z`); arrays, maps and structs as JSON in table and csv cells;
decimals as strings in json. json objects need distinct keys, so a repeated column name
gets a suffix there (`key`, `key_2`). A failing statement is one `Error: ...` line, the first
line of the engine's message (exit 1, or the shell goes on); Ctrl-C cancels the running
statement and exits 130 (the shell goes on). Neither engine, nor Arrow, is imported before
the verb runs: `txlog --help` loads none of them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec

import typer

from cli.consume import IsolationChoice
from cli.context import USAGE, CommandError, open_store, settings
from cli.output import JsonValue, OutputFormat, emit, error_line, output_option, status
from cli.sql_engine import INTERRUPTED, Engine, ViewOptions, python_sigint, quoted
from cli.sql_shell import ShellActions, Statement, run_shell, script_statements

if TYPE_CHECKING:  # the engines and Arrow are imported when the verb runs, not when the CLI starts
    import datetime

    import pyarrow as pa

P = ParamSpec("P")


if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    OutputOption = OutputFormat
else:
    OutputOption = output_option(
        OutputFormat.table, OutputFormat.csv, OutputFormat.json, OutputFormat.jsonl, help="table, csv, json or jsonl."
    )


class EngineChoice(str, Enum):
    """Where the statements run: DuckDB embedded in this process, or a local Spark session."""

    duckdb = "duckdb"
    spark = "spark"


class BinaryFormat(str, Enum):
    """How binary cells print: auto (UTF-8 text when valid, else 0x-hex), base64 or hex."""

    auto = "auto"
    base64 = "base64"
    hex = "hex"


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


# ---- what to run: decided before an engine starts -------------------------------------------------------


def _script(query: str | None, file: Path | None, *, backslash_escapes: bool) -> list[Statement] | None:
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
    statements = script_statements(text, backslash_escapes=backslash_escapes)
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


# ---- the run: one engine, every statement in it ---------------------------------------------------


class _Session:
    """One engine for the whole run, and how a statement's result is printed."""

    def __init__(
        self,
        ctx: typer.Context,
        engine: Engine,
        *,
        output: OutputFormat,
        limit: int | None,
        binary: BinaryFormat,
        interactive: bool,
    ):
        self.ctx, self.engine = ctx, engine
        self.interactive = interactive  # the shell: Ctrl-C cancels the statement, never the session
        self.output, self.limit, self.binary = output, limit, binary
        self._printed = False  # a result is on stdout: the next one is set apart

    def run(self, statement: Statement) -> None:
        """Run one statement and print its result; CommandError (one line) if the engine refuses it."""
        started = time.monotonic()
        if self.interactive:
            self.engine.refresh()
        table = self.engine.execute(statement.text, self.limit)
        if table is None:  # a command (CREATE VIEW, SET x=y ...): no result set
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
        """The registered views, then those the user created, one per line."""
        if self.interactive:
            self.engine.refresh()
        for name in [*self.engine.names, *self.engine.created_views()]:
            typer.echo(name)

    def schema(self, view: str) -> None:
        name = view if view.startswith("`") else quoted(view)
        self.run(Statement(f"DESCRIBE {name}", 1))

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

    Python's own handler is put back before every read: an engine call's handler (or pyspark's)
    left installed would only note the signal, and the shell would sit at its prompt.
    """
    python_sigint()
    return input(prompt)


def _run_shell(ctx: typer.Context, session: _Session, *, backslash_escapes: bool) -> None:
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
        backslash_escapes=backslash_escapes,
    )


def _spark_options_need_spark(ctx: typer.Context, engine: EngineChoice) -> None:
    """--master and --spark-log given with the DuckDB engine would be ignored: say so instead."""
    if engine is EngineChoice.spark:
        return
    for name, flag in (("master", "--master"), ("spark_log", "--spark-log")):
        source = ctx.get_parameter_source(name)  # by name: typer may bring its own click's enum
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise CommandError(f"{flag} is for --engine spark (the engine is {engine.value})", exit_code=USAGE)


# ---- the command --------------------------------------------------------------------------------


def sql(
    ctx: typer.Context,
    query: Annotated[
        str | None,
        typer.Argument(
            metavar="QUERY",
            help="SQL statements separated by ';', e.g. \"SELECT * FROM orders\"; '-' reads "
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
    engine: Annotated[
        EngineChoice,
        typer.Option(
            "--engine",
            case_sensitive=False,
            help="Where the statements run: duckdb (embedded, answers at once; DuckDB's SQL) or spark "
            "(a local Spark session, 20-40 s to start; Spark SQL).",
        ),
    ] = EngineChoice.duckdb,
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
            help="Spark master URL (--engine spark).",
        ),
    ] = "local[2]",
    spark_log: Annotated[
        str | None,
        typer.Option(
            "--spark-log",
            metavar="FILE",
            help="Append Spark's own output (JVM log, worker errors) to FILE (--engine spark; default: discarded).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """SQL over the store, in embedded DuckDB or in Spark: statements, a file, or an interactive shell.

    One view per topic, plus txlog_batches and txlog_transactions, the same in both engines.
    Topic views read read_committed by default; a topic whose name is not a plain identifier is
    written with backticks (SELECT * FROM `orders-eu`). The views in use are listed on stderr.
    --engine duckdb (the default) answers at once; --engine spark starts a local Spark session
    first (20-40 s). In DuckDB, offset is a reserved word: write `offset` (in backticks, which
    Spark reads too). Several statements run in one engine, each result printed in turn, all
    seeing the store as it was when the run began; the first failing one ends the run (exit 1).
    The shell reads the store again before each statement.
    """
    _spark_options_need_spark(ctx, engine)
    backslash_escapes = engine is EngineChoice.spark  # how the engine's parser reads '\'' (cli/sql_shell.py)
    statements = _script(query, file, backslash_escapes=backslash_escapes)
    with open_store(ctx, read_only=True) as store:
        topics = store.list_topics()
    path = os.path.abspath(settings(ctx).data_dir)
    views = ViewOptions(isolation_level.value, include_headers, include_transaction_columns)
    interactive = statements is None
    opened: AbstractContextManager[Engine]
    if engine is EngineChoice.spark:
        from cli.sql_spark import spark_engine

        opened = spark_engine(ctx, path, topics, views, interactive=interactive, master=master, spark_log=spark_log)
    else:
        from cli.sql_duckdb import duckdb_engine

        opened = duckdb_engine(ctx, path, topics, views)
    with opened as running:
        status(ctx, f"Registered views: {', '.join(running.names)}")
        session = _Session(ctx, running, output=output, limit=limit, binary=binary_format, interactive=interactive)
        if statements is None:
            _run_shell(ctx, session, backslash_escapes=backslash_escapes)
        else:
            _run_script(ctx, session, statements)
