"""Progress of long operations on stderr: `produce` of a big file, `verify`, `process`.

On a terminal: one line redrawn in place (elapsed time and counts), at most a few times a
second, erased when the operation ends so the verb's own summary line stands alone. When
stderr is not a terminal nothing is printed unless the user asked with `--progress`: then
plain lines, one every PLAIN_EVERY_S seconds and one at the end, for logs. `-q` silences both.

No progress-bar library: a bar needs a total, which a stream on stdin or a store scan does
not have up front, and the few lines here cost no start-up time (`txlog --help` imports
nothing heavy; tests/cli/test_cli.py checks it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Generic, Self, TextIO, TypeVar

import typer

from cli.context import settings

REDRAW_EVERY_S = 0.2
PLAIN_EVERY_S = 5.0

ProgressOption = Annotated[
    bool,
    typer.Option(
        "--progress",
        help="Print progress lines on stderr even when it is not a terminal (on a terminal progress "
        "is shown anyway; -q hides it).",
    ),
]


C = TypeVar("C")  # what `update` is given and `describe` puts in words


class Progress(Generic[C]):
    """`update(counts)` as work is done; `close()` once at the end (also on an error: it erases the line).

    `describe(counts)` turns the counts into the middle of the line, e.g. "1,200 records".
    `redraw=False` (several processes sharing one terminal) prints plain lines on a terminal too.
    """

    def __init__(
        self,
        ctx: typer.Context,
        label: str,
        describe: Callable[[C], str],
        *,
        asked: bool = False,
        redraw: bool = True,
        stream: TextIO | None = None,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.describe = describe
        self.started = time.monotonic()
        self.last = self.started
        self.counts: C | None = None
        self.drawn = False  # a terminal line is on screen and must be erased
        quiet = settings(ctx).quiet
        tty = _isatty(self.stream)
        self.terminal = not quiet and tty and redraw
        self.plain = not quiet and not self.terminal and (asked or tty)

    @property
    def active(self) -> bool:
        return self.terminal or self.plain

    def update(self, counts: C) -> None:
        self.counts = counts
        if not self.active:
            return
        now = time.monotonic()
        if now - self.last < (REDRAW_EVERY_S if self.terminal else PLAIN_EVERY_S):
            return
        self.last = now
        self._show(now, counts)

    def close(self) -> None:
        """Erase the terminal line; with --progress off a terminal, print the final plain line."""
        if self.terminal and self.drawn:
            self._write("\r\x1b[K")
        elif self.plain and self.counts is not None:
            self._show(time.monotonic(), self.counts, final=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _show(self, now: float, counts: C, *, final: bool = False) -> None:
        line = f"{self.label}: {self.describe(counts)}, {_elapsed(now - self.started)}"
        if self.terminal:
            self._write(f"\r\x1b[K{line}")
            self.drawn = True
        else:
            self._write(f"{line}{' (done)' if final else ''}\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not end the operation
            self.terminal = self.plain = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def count(n: int, unit: str, plural: str | None = None) -> str:
    """`1,234 records`, `1 record`, `2 batches` (plural given)."""
    return f"{n:,} {unit if n == 1 else (plural or unit + 's')}"
