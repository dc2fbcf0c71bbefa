"""`txlog sql "SELECT ..."`: Spark SQL over the store, one temporary view per topic.

A local Spark session (`--master`, default local[2]) reads the store through the `txlog`
data source (`txlog.spark`). Every topic of the store, internal ones included, is a view
named exactly as the topic, with Spark's Kafka-source columns (key, value, topic, partition,
offset, timestamp, timestampType; `--include-headers` and `--include-transaction-columns` add
theirs), read read_committed unless `--isolation-level read_uncommitted`. A name that is not
a plain SQL identifier (`orders-eu`, `app.events`) is used with backticks: `` `orders-eu` ``.
Two analysis views cover every topic: `txlog_batches` (one row per record batch) and
`txlog_transactions` (the decoded `__transaction_state` history). Spark's view names are
case-insensitive, so of two topics differing only in case the first in sorted order (`Orders`
before `orders`) keeps the name, an analysis view keeps its name over a topic, and a topic left
without a view is named in a note on stderr.

The whole result is printed (`--limit N` caps it) as a table, csv, json or jsonl. Binary
cells (keys, values, header values) print as their UTF-8 text when they are valid UTF-8 and
as 0x-prefixed hex otherwise (`--binary-format auto`, with a note on stderr when that
happened); `--binary-format base64|hex` writes every binary cell that way (SQL's `hex()`,
`base64()` and `CAST(value AS STRING)` work too). Timestamps print as ISO-8601 UTC
(`2024-05-01T12:00:00.000Z`); arrays, maps and structs as JSON in table and csv cells;
decimals as strings in json. json objects need distinct keys, so a repeated column name
gets a suffix there (`key`, `key_2`).

Spark's own output (the JVM's start-up banner and log, Python worker errors) would bury the
result, so the JVM's stdout and stderr go to a temporary file, or to `--spark-log FILE`. A
failing query is one `Error: ...` line: the first line of Spark's message (exit 1); Ctrl-C
cancels the running Spark jobs and exits 130.
pyspark is imported only when the verb runs: `txlog --help` does not load it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import IO, Annotated, Any

import typer

from cli.consume import IsolationChoice
from cli.context import USAGE, CommandError, open_store, settings
from cli.output import OutputFormat, emit, output_option, status

BATCHES_VIEW = "txlog_batches"
TRANSACTIONS_VIEW = "txlog_transactions"
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRACEBACK = "Traceback (most recent call last):"


OutputOption = output_option(OutputFormat.table, OutputFormat.csv, OutputFormat.json, OutputFormat.jsonl,
                             help="table, csv, json or jsonl.")


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

    def json_value(self, value: Any) -> Any:
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
            if value and all(isinstance(item, tuple) and len(item) == 2 for item in value) \
                    and all(isinstance(k, str) for k, _ in value):
                return {k: self.json_value(v) for k, v in value}  # an Arrow map: [(key, value), ...]
            return [self.json_value(item) for item in value]
        return str(value)

    def text(self, value: Any, missing: str) -> str:
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


def _iso_timestamp(value: Any) -> str:
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


def _print_result(table: Any, output: OutputFormat, binary: BinaryFormat) -> bool:
    """Print an Arrow table; True when auto mode had to print some binary cell as hex."""
    names = list(table.column_names)
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows_by_index = list(zip(*columns)) if columns else []
    cells = _Cells(binary)
    if output in (OutputFormat.json, OutputFormat.jsonl):
        keys = _unique(names)
        rows = [{k: cells.json_value(v) for k, v in zip(keys, row)} for row in rows_by_index]
        emit(rows, [(k, k) for k in keys], output)
    elif names:
        missing = "null" if output is OutputFormat.table else ""
        rows = [{str(i): cells.text(v, missing) for i, v in enumerate(row)} for row in rows_by_index]
        emit(rows, [(name, str(i)) for i, name in enumerate(names)], output, missing=missing)
    return cells.hexed


# ---- Spark --------------------------------------------------------------------------------------

@contextmanager
def _jvm_output(log: IO[bytes]) -> Iterator[None]:
    """While Spark starts, fds 1 and 2 point at `log`: the JVM (and every process it starts)
    inherits them for good, so its banner and log never reach the terminal. Ours are restored."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield
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
        tail = text[text.rindex(_TRACEBACK):].splitlines()
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


def _session(master: str, log: IO[bytes], warehouse: str) -> tuple[Any, bool]:
    """The SparkSession (created here, with the JVM's output sent to `log`) and whether we created it."""
    from pyspark import SparkContext

    from txlog.spark import local_session

    created = SparkContext._active_spark_context is None
    conf = {"spark.sql.warehouse.dir": warehouse}  # CREATE TABLE must not leave ./spark-warehouse behind
    try:
        if created:
            with _jvm_output(log):
                spark = local_session(master, app_name="txlog sql", extra_conf=conf)
        else:
            spark = local_session(master, app_name="txlog sql")
    except Exception as exc:  # noqa: BLE001  any failure to start is one Error line
        detail = _last_line(log) if created else None
        message = f"Spark did not start: {spark_message(exc)}"
        raise CommandError(message + (f" ({detail})" if detail and detail not in message else "")) from None
    return spark, created


@contextmanager
def _noting_sigint() -> Iterator[list[int]]:
    """Ctrl-C goes on to pyspark's handler (which cancels the running jobs and raises
    KeyboardInterrupt), but is noted first: a job that then fails was interrupted, not wrong."""
    import signal
    import threading

    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = signal.getsignal(signal.SIGINT)

    def handle(signum: int, frame: Any) -> None:
        noted.append(signum)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handle)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop(spark: Any) -> None:
    import contextlib

    with contextlib.suppress(Exception):  # a JVM that already died must not hide the error that killed it
        spark.stop()


def _drop_views(spark: Any, names: list[str]) -> None:
    import contextlib

    for name in names:
        with contextlib.suppress(Exception):
            spark.catalog.dropTempView(name)


def _register(ctx: typer.Context, spark: Any, path: str, topics: list[str], *, isolation: str,
              include_headers: bool, include_transaction_columns: bool) -> list[str]:
    """Register the topic views and the analysis views; the names registered, as written in a query."""
    from txlog.spark import FORMAT, batches_view, transactions_view
    from txlog.spark.schemas import record_schema

    schema = record_schema(include_headers=include_headers, include_transaction_columns=include_transaction_columns)
    taken: dict[str, str] = {BATCHES_VIEW: "the analysis view", TRANSACTIONS_VIEW: "the analysis view"}
    registered = []
    for topic in topics:
        holder = taken.get(topic.lower())
        if holder is not None:
            status(ctx, f"Note: topic '{topic}' has no view: {holder} has that name "
                        "(Spark's view names are case-insensitive).")
            continue
        taken[topic.lower()] = f"topic '{topic}'"
        df = (spark.read.format(FORMAT).schema(schema)  # the record schema is known: no round trip to Python
              .option("subscribe", topic)
              .option("isolation.level", isolation)
              .option("includeHeaders", str(include_headers).lower())
              .option("includeTransactionColumns", str(include_transaction_columns).lower())
              .load(path))
        df.createOrReplaceTempView(_backticked(topic))
        registered.append(quoted(topic))
    for name, view, module in ((BATCHES_VIEW, "batches", batches_view),
                               (TRANSACTIONS_VIEW, "transactions", transactions_view)):
        df = spark.read.format(FORMAT).schema(module.SCHEMA).option("view", view).load(path)
        df.createOrReplaceTempView(name)
        registered.append(name)
    return registered


def _query_text(query: str) -> str:
    if query == "-":
        query = sys.stdin.read()
    if not query.strip():
        raise CommandError("the query is empty", exit_code=USAGE)
    return query


# ---- the command --------------------------------------------------------------------------------

def sql(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(
        metavar="QUERY", help="A Spark SQL statement, e.g. \"SELECT * FROM orders\"; '-' reads it from stdin.",
        show_default=False,
    )],
    output: OutputOption = OutputFormat.table,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=0, metavar="N", help="Print at most N rows (default: all).", show_default=False,
    )] = None,
    isolation_level: Annotated[IsolationChoice, typer.Option(
        "--isolation-level", case_sensitive=False,
        help="For the topic views: read_committed hides open and aborted transactions.",
    )] = IsolationChoice.read_committed,
    include_headers: Annotated[bool, typer.Option(
        "--include-headers", help="Topic views get a `headers` column (array of key, value).",
    )] = False,
    include_transaction_columns: Annotated[bool, typer.Option(
        "--include-transaction-columns",
        help="Topic views get producerId, producerEpoch, sequence and isTransactional.",
    )] = False,
    binary_format: Annotated[BinaryFormat, typer.Option(
        "--binary-format", case_sensitive=False,
        help="How binary cells print: auto (UTF-8 text when valid, else 0x-prefixed hex), base64 or hex.",
    )] = BinaryFormat.auto,
    master: Annotated[str, typer.Option(
        "--master", metavar="MASTER", help="Spark master URL.",
    )] = "local[2]",
    spark_log: Annotated[str | None, typer.Option(
        "--spark-log", metavar="FILE", help="Append Spark's own output (JVM log, worker errors) to FILE "
        "(default: discarded).", show_default=False,
    )] = None,
) -> None:
    """Run a Spark SQL query over the store: one view per topic, plus txlog_batches and txlog_transactions.

    Topic views read read_committed by default; a topic whose name is not a plain identifier
    is written with backticks (SELECT * FROM `orders-eu`). The views in use are listed on stderr.
    """
    query = _query_text(query)
    with open_store(ctx, read_only=True) as store:
        topics = store.list_topics()
    path = os.path.abspath(settings(ctx).data_dir)
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"txlog sql needs Spark: {exc} (pip install 'txlog[spark]')") from None

    with tempfile.TemporaryDirectory(prefix="txlog-sql-") as scratch:
        log: IO[bytes]
        if spark_log is not None:
            log = open(spark_log, "a+b")  # noqa: SIM115  closed below; the JVM keeps its own copy of the fd
        else:
            log = tempfile.TemporaryFile(prefix="txlog-spark-", suffix=".log")  # noqa: SIM115
        try:
            status(ctx, f"Starting Spark ({master})...")
            _quiet_pyspark_loggers()
            spark, created = _session(master, log, os.path.join(scratch, "warehouse"))
            try:
                _run(ctx, spark, path, topics, query, output=output, limit=limit, isolation=isolation_level.value,
                     include_headers=include_headers, include_transaction_columns=include_transaction_columns,
                     binary=binary_format)
            finally:
                if created:
                    _stop(spark)
                else:  # someone else's session (txlog sql run in process): leave it as it was
                    _drop_views(spark, [*topics, BATCHES_VIEW, TRANSACTIONS_VIEW])
        except KeyboardInterrupt:
            raise typer.Exit(130) from None  # pyspark's SIGINT handler has cancelled the running jobs
        finally:
            log.close()


def _run(ctx: typer.Context, spark: Any, path: str, topics: list[str], query: str, *, output: OutputFormat,
         limit: int | None, isolation: str, include_headers: bool, include_transaction_columns: bool,
         binary: BinaryFormat) -> None:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    with _noting_sigint() as interrupted:
        try:
            views = _register(ctx, spark, path, topics, isolation=isolation, include_headers=include_headers,
                              include_transaction_columns=include_transaction_columns)
            status(ctx, f"Registered views: {', '.join(views)}")
            status(ctx, "Running query...")
            df = spark.sql(query)
            if limit is not None:
                df = df.limit(limit)
            table = df.toArrow()
        except (PySparkException, Py4JError) as exc:
            if interrupted:
                raise typer.Exit(130) from None  # the job failed because Ctrl-C cancelled it
            raise CommandError(spark_message(exc)) from None
    hexed = _print_result(table, output, binary)
    if hexed:
        status(ctx, "Note: some binary values are not UTF-8 and were shown as 0x-prefixed hex; "
                    "use --binary-format base64 or hex (or SQL's hex(), base64()) for the exact bytes.")
    rows = table.num_rows
    status(ctx, f"{rows} row{'s' * (rows != 1)}")
