"""The text side of `txlog sql`: splitting input into statements, and the interactive shell.

Nothing here imports an engine: the statements of a `-f` file or a query argument are split
(and an empty input refused) before DuckDB or Spark starts, so a usage mistake costs nothing.

Statements end with `;` outside string literals ('...', "..."), quoted identifiers
(`...`) and comments (`-- ...` to the end of the line, `/* ... */`, which nest in Spark
SQL); a backslash escapes the next character inside a string literal where the engine's
parser reads it so (Spark's; DuckDB's literals are standard SQL's, where only '' escapes).
A last statement without `;` still runs, as the `spark-sql -e` and `psql -c` users expect.
The shell (sqlite3's and psql's habits) reads lines until a statement is complete, keeps a
readline history in ~/.txlog_sql_history, and takes dot commands (`.tables`, `.schema VIEW`,
`.help`, `.quit`) at the start of a statement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

HISTORY_FILE = "~/.txlog_sql_history"
HISTORY_LENGTH = 1000
PROMPT = "txlog> "
CONTINUATION = "   ...> "
SHELL_HELP = """\
Statements end with ';' and may span lines. Ctrl-C cancels the running statement (or the
line being typed); Ctrl-D or .quit leaves.
  .tables          the views: one per topic, txlog_batches, txlog_transactions, and any you created
  .schema VIEW     the columns of a view (DESCRIBE VIEW)
  .help            this text
  .quit, .exit     leave the shell"""


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement without its ';', and the 1-based line of the input it starts on."""

    text: str
    line: int


class _Scanner:
    """Walks SQL text once, tracking whether each character is code, a literal or a comment."""

    def __init__(self, text: str, backslash_escapes: bool):
        self.text = text
        self.backslash_escapes = backslash_escapes
        self.statements: list[Statement] = []
        self._start = 0  # where the current statement's text begins
        self._first: int | None = None  # index of its first character that is not blank or comment
        self._open = False  # the text ends inside a literal or a block comment

    def run(self) -> str:
        """Split; returns the text after the last ';' (an unfinished statement, or only blanks)."""
        text, i, n = self.text, 0, len(self.text)
        while i < n:
            ch = text[i]
            if ch in "'\"`":
                self._mark(i)
                i = self._skip_quoted(i, ch)
            elif text.startswith("--", i):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
            elif text.startswith("/*", i):
                i = self._skip_block_comment(i)
            elif ch == ";":
                self._end(i)
                i += 1
            else:
                if not ch.isspace():
                    self._mark(i)
                i += 1
        return text[self._start :] if self._first is not None or self._open else ""

    def _mark(self, i: int) -> None:
        if self._first is None:
            self._first = i

    def _end(self, i: int) -> None:
        if self._first is not None:  # `;;` or a comment alone is no statement
            body = self.text[self._start : i].strip()
            self.statements.append(Statement(body, self.text.count("\n", 0, self._first) + 1))
        self._start, self._first = i + 1, None

    def _skip_quoted(self, i: int, quote: str) -> int:
        """Past the closing quote (or to the end: the statement is unfinished)."""
        text, n = self.text, len(self.text)
        i += 1
        while i < n:
            ch = text[i]
            if ch == "\\" and quote != "`" and self.backslash_escapes:
                i += 2
                continue
            if ch == quote:
                return i + 1
            i += 1
        self._open = True
        return n

    def _skip_block_comment(self, i: int) -> int:
        text, n, depth = self.text, len(self.text), 0
        while i < n:
            if text.startswith("/*", i):
                depth += 1
                i += 2
            elif text.startswith("*/", i):
                depth -= 1
                i += 2
                if depth == 0:
                    return i
            else:
                i += 1
        self._open = True
        return n


def split_statements(text: str, *, backslash_escapes: bool = True) -> tuple[list[Statement], str]:
    """The statements ended by ';' in `text`, and the unfinished rest ('' if only blanks/comments)."""
    scanner = _Scanner(text, backslash_escapes)
    rest = scanner.run()
    return scanner.statements, rest


def script_statements(text: str, *, backslash_escapes: bool = True) -> list[Statement]:
    """Every statement of a script or query argument; the last one needs no ';'."""
    scanner = _Scanner(text + "\n;", backslash_escapes)  # the newline ends a trailing `--` comment
    scanner.run()
    return scanner.statements


# ---- the interactive shell ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShellActions:
    """What the shell asks of the engine's side: run a statement, list views, describe one.

    Each returns normally after printing its result or its one `Error:` line; Ctrl-C while one
    runs raises KeyboardInterrupt after the engine has cancelled the statement.
    """

    run: Callable[[Statement], None]
    tables: Callable[[], None]
    schema: Callable[[str], None]
    error: Callable[[str], None]
    interrupted: Callable[[], None]


class _History:
    """readline's history, read at start and written back at exit; nothing when readline is missing."""

    def __init__(self, path: str):
        self.path = os.path.expanduser(path)
        try:
            import readline
        except ImportError:  # e.g. Windows without pyreadline: the shell works, without history
            self.readline = None
            return
        self.readline = readline
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(self.path)
        except OSError:
            pass  # none yet, or unreadable: that must not keep the shell from starting

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.readline.write_history_file(self.path)
        except OSError:
            pass  # a read-only home: the session still worked


def run_shell(
    actions: ShellActions,
    *,
    read_line: Callable[[str], str] = input,
    history_file: str = HISTORY_FILE,
    backslash_escapes: bool = True,
) -> None:
    """Read statements until Ctrl-D or `.quit`; run each as soon as its ';' is typed."""
    history = _History(history_file)
    buffer = ""
    try:
        while True:
            try:
                line = read_line(CONTINUATION if buffer else PROMPT)
            except EOFError:
                _newline()
                return
            except KeyboardInterrupt:  # Ctrl-C at the prompt: drop what was typed, keep the shell
                _newline()
                buffer = ""
                continue
            if not buffer and line.strip().startswith("."):
                if _dot_command(line.strip(), actions):
                    return
                continue
            buffer += line + "\n"
            statements, buffer = split_statements(buffer, backslash_escapes=backslash_escapes)
            for statement in statements:
                try:
                    actions.run(statement)
                except KeyboardInterrupt:
                    actions.interrupted()
                    break  # the rest of a line of several statements is dropped too
    finally:
        history.save()


def _newline() -> None:
    sys.stdout.write("\n")
    sys.stdout.flush()


def _dot_command(line: str, actions: ShellActions) -> bool:
    """Run a dot command; True when it asks to leave."""
    name, _, argument = line.partition(" ")
    argument = argument.strip().rstrip(";").strip()
    if name in (".quit", ".exit", ".q"):
        return True
    try:
        if name == ".help":
            print(SHELL_HELP)
        elif name == ".tables":
            actions.tables()
        elif name == ".schema":
            if argument:
                actions.schema(argument)
            else:
                actions.error(".schema needs a view name, e.g. .schema orders")
        else:
            actions.error(f"unknown command '{name}'; .help lists the commands")
    except KeyboardInterrupt:
        actions.interrupted()
    return False
