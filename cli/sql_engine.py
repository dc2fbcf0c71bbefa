"""What the two engines of `txlog sql` share with its front (cli/sql.py): the views' names and
options, the Engine protocol, one-line messages and Ctrl-C.

Its own module so that the engines (cli/sql_duckdb.py, cli/sql_spark.py), which the front
imports when the verb runs, need not import the front back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # Arrow is imported when the verb runs, not when the CLI starts
    import pyarrow as pa

BATCHES_VIEW = "txlog_batches"
TRANSACTIONS_VIEW = "txlog_transactions"
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRACEBACK = "Traceback (most recent call last):"
INTERRUPTED = "interrupted (SIGINT)"  # as `process` says it: Ctrl-C is the one signal handled here


# ---- names --------------------------------------------------------------------------------------


def quoted(name: str) -> str:
    """A view name as it is written in a query: backticks unless it is a plain identifier."""
    return name if _PLAIN_IDENTIFIER.fullmatch(name) else backticked(name)


def backticked(name: str) -> str:
    """A name in backticks, as Spark SQL and DuckDB both read a quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


def viewed_topics(topics: list[str], note: Callable[[str], None]) -> list[str]:
    """The topics that get a view, in order; each one left out is named through `note`.

    Both engines' view names are case-insensitive: the analysis views keep their names, then the
    first topic of each name in `topics`' (sorted) order."""
    taken: dict[str, str] = {BATCHES_VIEW: "the analysis view", TRANSACTIONS_VIEW: "the analysis view"}
    kept = []
    for topic in topics:
        holder = taken.get(topic.lower())
        if holder is not None:
            note(f"Note: topic '{topic}' has no view: {holder} has that name (view names are case-insensitive).")
            continue
        taken[topic.lower()] = f"topic '{topic}'"
        kept.append(topic)
    return kept


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """How the topic views read: the same in both engines."""

    isolation: str  # read_committed | read_uncommitted
    include_headers: bool
    include_transaction_columns: bool


# ---- running ------------------------------------------------------------------------------------


class Engine(Protocol):
    """What the run asks of an engine (cli/sql_duckdb.py, cli/sql_spark.py).

    Its views are a snapshot of the store taken when they were registered; `refresh` takes a new
    one (the shell does before each statement). A call that fails raises CommandError with the
    engine's one-line message; Ctrl-C during a call cancels it and raises KeyboardInterrupt.
    """

    names: list[str]  # the registered views, as written in a query

    def execute(self, text: str, limit: int | None) -> pa.Table | None:
        """The statement's result (up to `limit` rows), or None for a command without a result set."""
        ...

    def refresh(self) -> None: ...

    def created_views(self) -> list[str]:
        """The views (and tables) the user created, as written in a query."""
        ...


def raised_in_python(text: str) -> str | None:
    """The exception a Python traceback in an engine's message ends with, as one line, or None.

    Both engines read the views through Python code (Spark's Python workers, DuckDB's Arrow
    streams) and put the whole traceback in their message; the user needs its last line."""
    if _TRACEBACK not in text:
        return None
    for line in reversed(text[text.rindex(_TRACEBACK) :].splitlines()):
        if line.strip() and not line.startswith((" ", "\t")):
            name, sep, message = line.strip().partition(": ")
            return f"{name.rsplit('.', 1)[-1]}{sep}{message}"  # storage.errors.X: ... -> X: ...
    return None


def python_sigint() -> None:
    """Python's own Ctrl-C (KeyboardInterrupt) between an engine's calls, e.g. at the shell's prompt."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
