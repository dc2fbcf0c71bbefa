"""`txlog sql --engine duckdb`: the statements run in DuckDB, embedded in this process (cli/sql.py is the front).

No JVM and no server: DuckDB reads each view through Arrow, so the first answer costs the
imports (duckdb, pyarrow) and the reading of the topics the statement names, not a start-up.
Every view is registered before the first statement, but registering reads nothing: a topic
view is a `txlog.scan` (planned when made, so it is a snapshot; read again by each statement
that names it, through the Consumer's visibility rule) handed to DuckDB by `Scan.to_duckdb`,
which reads only the columns a statement uses and narrows the read by its filters on
partition, offset and timestamp; the analysis views are the Spark source's own planners and
readers (txlog/spark/batches_view.py, transactions_view.py, which need no Spark), planned when
made and read when a statement names them. A statement that names one topic reads that topic
only.

The connection's time zone is UTC, as the Spark engine's session's is, so that hour(), date
parts and casts of the `timestamp` columns agree between the two engines. A failing statement
is one `Error: ...` line, the first line of DuckDB's message; Ctrl-C interrupts the running
statement (the run exits 130, the shell goes on).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from cli.context import CommandError, open_store
from cli.output import status
from cli.sql_engine import (
    BATCHES_VIEW,
    INTERRUPTED,
    TRANSACTIONS_VIEW,
    ViewOptions,
    quoted,
    raised_in_python,
    viewed_topics,
)

if TYPE_CHECKING:  # DuckDB and Arrow are imported when the engine starts, not when the CLI does
    from types import FrameType

    import duckdb
    import pyarrow as pa

    from cli.interrupts import Handler

#: The topic views' columns, in the Spark engine's order (txlog/spark/schemas.py).
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HEADERS_COLUMNS = ("headers",)
TRANSACTION_COLUMNS = ("producerId", "producerEpoch", "sequence", "isTransactional")
#: The analysis views: name -> module of txlog.spark with SCHEMA, plan(options) and read(part, schema).
ANALYSIS_VIEWS = {BATCHES_VIEW: "batches", TRANSACTIONS_VIEW: "transactions"}
_EXTRA = "pip install 'txlog[analysis]'"


def topic_columns(views: ViewOptions) -> list[str]:
    """The columns of a topic view: Spark's Kafka-source columns, then the optional ones asked for."""
    columns = list(KAFKA_COLUMNS)
    if views.include_headers:
        columns += HEADERS_COLUMNS
    if views.include_transaction_columns:
        columns += TRANSACTION_COLUMNS
    return columns


# ---- the analysis views' Arrow schemas, from their Spark DDL -----------------------------------------

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[<>:,])")


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema pyspark's to_arrow_schema(timezone="UTC") gives for a DDL of the types the
    views use (string, binary, boolean, int, long, timestamp, array<>, struct<>), without Spark.

    The views keep their schemas as Spark DDL beside their readers (one place); this reads it."""
    import pyarrow as pa

    tokens = _tokens(ddl)
    fields = _fields(tokens, end=None)
    return pa.schema(fields)


def _tokens(ddl: str) -> list[str]:
    tokens, i = [], 0
    ddl = ddl.strip()
    while i < len(ddl):
        match = _TOKEN.match(ddl, i)
        if match is None:
            raise ValueError(f"cannot read the schema {ddl!r} at {ddl[i:]!r}")
        tokens.append(match.group(1))
        i = match.end()
    tokens.reverse()  # popped from the end
    return tokens


def _fields(tokens: list[str], end: str | None) -> list[pa.Field]:
    """`name type, name: type, ...` up to `end` (consumed) or the end of the tokens."""
    import pyarrow as pa

    fields = []
    while tokens and tokens[-1] != end:
        name = tokens.pop()
        if tokens and tokens[-1] == ":":
            tokens.pop()
        fields.append(pa.field(name, _type(tokens)))
        if tokens and tokens[-1] == ",":
            tokens.pop()
    if end is not None:
        tokens.pop()
    return fields


def _type(tokens: list[str]) -> pa.DataType:
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "binary": pa.binary(),
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    name = tokens.pop().lower()
    if name in simple:
        return simple[name]
    if name in ("array", "struct") and tokens.pop() == "<":
        if name == "struct":
            return pa.struct(_fields(tokens, end=">"))
        element = _type(tokens)
        tokens.pop()  # >
        return pa.list_(element)
    raise ValueError(f"type {name!r} is not one the views use")


# ---- views -----------------------------------------------------------------------------------------


class _PlannedView:
    """An analysis view as DuckDB reads it: an Arrow stream of a plan fixed when made, read anew
    each time a statement scans it (DuckDB asks for a stream per scan)."""

    def __init__(self, schema: pa.Schema, parts: Sequence[Any], read: Callable[[Any, pa.Schema], Iterator]):
        self.schema, self.parts, self.read = schema, parts, read

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        import pyarrow as pa

        batches = (batch for part in self.parts for batch in self.read(part, self.schema))
        return pa.RecordBatchReader.from_batches(self.schema, batches).__arrow_c_stream__(requested_schema)


def _analysis_view(path: str, view: str) -> _PlannedView:
    """The Spark source's plan of `view` over the whole store, and its reader."""
    import importlib

    from txlog.spark.options import SourceOptions

    module = importlib.import_module(f"txlog.spark.{view}_view")
    return _PlannedView(arrow_schema(module.SCHEMA), module.plan(SourceOptions(path=path, view=view)), module.read)


def _register_topic(con: duckdb.DuckDBPyConnection, path: str, topic: str, views: ViewOptions) -> None:
    """View `topic`: a `txlog.scan` planned now (the snapshot), through `Scan.to_duckdb`, so that
    DuckDB reads only the columns a statement uses and narrows the read by its filters on
    partition, offset and timestamp (txlog/scan/duckdb_source.py)."""
    import txlog

    scan = txlog.scan(path, topic, isolation_level=views.isolation, columns=topic_columns(views))
    scan.to_duckdb(con).create_view(topic, replace=True)


def _identifier(name: str) -> str:
    """A name as DuckDB's SQL quotes an identifier."""
    return '"' + name.replace('"', '""') + '"'


# ---- the engine ------------------------------------------------------------------------------------


class DuckDBEngine:
    """An in-memory DuckDB connection with the store's views registered, and statements run there."""

    def __init__(self, ctx: typer.Context, con: duckdb.DuckDBPyConnection, path: str, views: ViewOptions):
        self.ctx, self.con, self.path, self.views = ctx, con, path, views
        self.topics: list[str] = []  # those with a view
        self.names: list[str] = []  # as written in a query

    def register(self, topics: list[str], *, notes: bool = True) -> None:
        """Register (or replace) every view from the store as it is now; nothing is read yet."""

        def note(message: str) -> None:
            if notes:
                status(self.ctx, message)

        kept = viewed_topics(topics, note)
        for topic in self.topics:
            if topic not in kept:  # deleted since
                self.con.execute(f"DROP VIEW IF EXISTS {_identifier(topic)}")
        for topic in kept:
            _register_topic(self.con, self.path, topic, self.views)
        for name, view in ANALYSIS_VIEWS.items():
            self.con.register(name, _analysis_view(self.path, view))
        self.topics = kept
        self.names = [quoted(name) for name in [*kept, *ANALYSIS_VIEWS]]

    def refresh(self) -> None:
        """Register the views again from the store as it is now."""
        from storage.errors import KafkaError

        try:
            with open_store(self.ctx, read_only=True) as store:
                topics = store.list_topics()
            self.register(topics, notes=False)
        except (KafkaError, OSError) as exc:
            raise CommandError(f"cannot read the store again: {exc}") from None

    def execute(self, text: str, limit: int | None) -> pa.Table | None:
        """The statement's result (up to `limit` rows) as Arrow; None for a command without a result set."""
        import duckdb

        def run() -> pa.Table | None:
            if not _has_result(text):
                self.con.execute(text)
                return None
            relation = self.con.sql(text)
            return (relation if limit is None else relation.limit(limit)).to_arrow_table()

        with _InterruptOnSigint(self.con) as sigint:
            try:
                result = run()
            except (duckdb.Error, RuntimeError) as exc:
                if sigint.interrupted:
                    raise KeyboardInterrupt from None
                raise CommandError(duckdb_message(exc)) from None
        if sigint.interrupted:
            raise KeyboardInterrupt
        return result

    def created_views(self) -> list[str]:
        """The views and tables the user created, as written in a query."""
        ours = {name.lower() for name in [*self.topics, *ANALYSIS_VIEWS]}
        rows = self.con.execute(
            "SELECT DISTINCT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name"
        ).fetchall()
        return [quoted(name) for (name,) in rows if name.lower() not in ours]


#: What DuckDB's parser calls the statements that return rows (the others print OK).
_RESULT_TYPES = ("SELECT", "EXPLAIN", "PRAGMA", "CALL", "EXECUTE", "RELATION")


def _has_result(text: str) -> bool:
    """Whether the statement returns rows (a query) rather than doing something (CREATE, SET ...).

    A statement DuckDB cannot parse counts as a query: running it gives the parser's message."""
    import duckdb

    try:
        parsed = duckdb.extract_statements(text)
    except duckdb.Error:
        return True
    return not parsed or parsed[-1].type.name in _RESULT_TYPES


def duckdb_message(exc: BaseException) -> str:
    """One line for a DuckDB failure: the first line of its message ("Catalog Error: ..."), or the
    exception a view's reader raised ("CorruptRecordError: ...") when the failure was there."""
    raised = raised_in_python(str(exc))
    if raised is not None:
        return raised
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if first.startswith("Parser Error: ") and first.endswith('at or near "offset"'):
        return f"{first} (offset is a reserved word in DuckDB: write `offset`, in backticks, as Spark reads it too)"
    return first


class _InterruptOnSigint:
    """Ctrl-C while a statement runs interrupts DuckDB's query and lets the call come back.

    DuckDB checks Python's signals while it runs a query; this handler only notes the signal and
    asks the connection to stop (`interrupt()` is safe from any thread), so the query ends with
    DuckDB's "interrupted" failure, which the caller turns into KeyboardInterrupt. A reader of a
    view running Python code is stopped the same way: DuckDB stops asking it for batches.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con
        self.count = 0
        self._previous: Handler = None

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def __enter__(self) -> _InterruptOnSigint:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        with contextlib.suppress(Exception):  # a connection on its way down: nothing left to interrupt
            self.con.interrupt()


@contextmanager
def duckdb_engine(ctx: typer.Context, path: str, topics: list[str], views: ViewOptions) -> Iterator[DuckDBEngine]:
    """An in-memory DuckDB connection with the store's views registered, for the length of the run."""
    try:
        import duckdb
        import pyarrow  # noqa: F401  imported only to fail early when the analysis extra is missing
    except ImportError as exc:
        raise CommandError(f"txlog sql --engine duckdb needs DuckDB and pyarrow: {exc} ({_EXTRA})") from None
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")  # as the Spark engine's session
        engine = DuckDBEngine(ctx, con, path, views)
        engine.register(topics)
        yield engine
    except KeyboardInterrupt:
        raise CommandError(f"{INTERRUPTED}; the statement was cancelled", exit_code=130) from None
    finally:
        con.close()
