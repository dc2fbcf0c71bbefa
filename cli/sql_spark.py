"""`txlog sql --engine spark`: the statements run in a local Spark session (cli/sql.py is the front).

A local Spark session (`--master`, default local[2]) reads the store through `txlog.spark.read`
(topics by the JVM reader, the analysis views by the `txlog` data source). It takes 20-40 s to
start, so a run starts it once and every statement of the run (or of the shell) runs in it.

Spark's own output (the JVM's start-up banner and log, Python worker errors) would bury the
result, so the JVM's stdout and stderr go to a temporary file, or to `--spark-log FILE`. A
failing statement is one `Error: ...` line: the first line of Spark's message; Ctrl-C cancels
the running Spark jobs (the run exits 130, the shell goes on). pyspark is imported only when
this engine is chosen: `txlog --help` does not load it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, TypeVar

import typer

from cli.context import CommandError, open_store, require_java
from cli.output import status
from cli.sql_engine import (
    BATCHES_VIEW,
    INTERRUPTED,
    TRANSACTIONS_VIEW,
    ViewOptions,
    backticked,
    python_sigint,
    quoted,
    raised_in_python,
    viewed_topics,
)

if TYPE_CHECKING:  # Spark and Arrow are imported when a statement runs, not when the CLI starts
    from types import FrameType

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from cli.interrupts import Handler

T = TypeVar("T")


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
    raised = raised_in_python(text)  # a failure inside a Python worker (the data source)
    if raised is not None:
        return raised
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
    views: ViewOptions,
) -> list[str]:
    """Register the topic views and the analysis views; the names registered, as written in a query.

    txlog.spark.read makes each: a topic's records by the JVM reader when the session has its jar
    (planned now, so the view is a snapshot), the analysis views by the Python source."""
    from txlog.spark import read

    registered = []
    for topic in viewed_topics(topics, note):
        df = read(
            spark,
            path,
            subscribe=topic,
            includeHeaders=views.include_headers,
            includeTransactionColumns=views.include_transaction_columns,
            **{"isolation.level": views.isolation},
        )
        df.createOrReplaceTempView(backticked(topic))
        registered.append(quoted(topic))
    for name, view in ((BATCHES_VIEW, "batches"), (TRANSACTIONS_VIEW, "transactions")):
        df = read(spark, path, view=view)
        df.createOrReplaceTempView(name)
        registered.append(name)
    return registered


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


class SparkEngine:
    """The views of the store's topics and the analysis views in a Spark session, and statements run there.

    A view is planned when it is made (the JVM reader fixes its offsets and LSO at load()), so
    it is a snapshot: a script's statements all see the store as it was when the run began, and
    the shell makes the views again before each statement (`refresh`), so that each sees the
    store as it is then, new topics included.
    """

    def __init__(self, ctx: typer.Context, spark: SparkSession, path: str, views: ViewOptions, *, interactive: bool):
        self.ctx, self.spark, self.path, self.views = ctx, spark, path, views
        self.interactive = interactive  # the shell: Ctrl-C cancels the statement, never the session
        self.topics: list[str] = []
        self.names: list[str] = []  # as written in a query

    def register(self, topics: list[str], *, notes: bool = True, impatient: bool = True) -> None:
        def note(message: str) -> None:
            if notes:
                status(self.ctx, message)

        # deleted since: dropped first, as Spark's view names ignore case (dropping `orders`
        # after registering would take the new view of a remaining `Orders` with it)
        _drop_views(self.spark, [t for t in self.topics if t not in topics])
        names = _spark_call(
            self.spark,
            impatient=impatient,
            action=lambda: _register(note, self.spark, self.path, topics, self.views),
        )
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

    def execute(self, text: str, limit: int | None) -> pa.Table | None:
        """The statement's result (up to `limit` rows) as Arrow; None for a command without a result set."""

        def collected() -> pa.Table:
            frame = self.spark.sql(text)
            return (frame if limit is None else frame.limit(limit)).toArrow()

        table = _spark_call(self.spark, collected, impatient=not self.interactive)
        return None if table.num_columns == 0 else table  # CREATE VIEW, SET x=y, CACHE TABLE ...

    def created_views(self) -> list[str]:
        """The temporary views the user created, as written in a query."""
        ours = {name.lower() for name in [*self.topics, BATCHES_VIEW, TRANSACTIONS_VIEW]}
        listed = _spark_call(self.spark, self.spark.catalog.listTables, impatient=not self.interactive)
        return sorted(quoted(t.name) for t in listed if t.isTemporary and t.name.lower() not in ours)


@contextmanager
def spark_engine(
    ctx: typer.Context,
    path: str,
    topics: list[str],
    views: ViewOptions,
    *,
    interactive: bool,
    master: str,
    spark_log: str | None,
) -> Iterator[SparkEngine]:
    """A Spark session with the store's views registered, for the length of the run."""
    try:
        import pyarrow  # noqa: F401  imported only to fail early when the spark extra is missing
        import pyspark  # noqa: F401  (idem)
    except ImportError as exc:
        raise CommandError(f"txlog sql --engine spark needs Spark: {exc} (pip install 'txlog[spark]')") from None

    with tempfile.TemporaryDirectory(prefix="txlog-sql-") as scratch:
        log: IO[bytes]
        if spark_log is not None:
            log = open(spark_log, "a+b")  # noqa: SIM115  closed below; the JVM keeps its own copy of the fd
        else:
            log = tempfile.TemporaryFile(prefix="txlog-spark-", suffix=".log")  # noqa: SIM115  closed below
        try:
            _quiet_pyspark_loggers()
            spark, created = _session(ctx, master, log, os.path.join(scratch, "warehouse"))
            python_sigint()  # pyspark's handler calls the JVM from inside the handler; see _CancelOnSigint
            engine = SparkEngine(ctx, spark, path, views, interactive=interactive)
            try:
                engine.register(topics)
                yield engine
            finally:
                if created:
                    _stop(spark)
                else:  # someone else's session (txlog sql run in process): leave it as it was
                    _drop_views(spark, [*topics, BATCHES_VIEW, TRANSACTIONS_VIEW, *engine.topics])
        except KeyboardInterrupt:  # pyspark's SIGINT handler has cancelled the running jobs
            raise CommandError(f"{INTERRUPTED}; Spark's running jobs were cancelled", exit_code=130) from None
        finally:
            log.close()
