"""Shared output helpers: tables, JSON, status lines and the `--output` choice.

Data goes to stdout; status and narration meant for a person go to stderr unless the
command's whole purpose is that narration (`demo`). `-q` silences status lines.
tabulate is imported when a table is printed, not when the CLI starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any

import typer

from cli.context import settings

TABLE_FORMAT = "simple"


class OutputFormat(str, Enum):
    """`--output`: Kafka's text layout (the default), a table, or JSON."""

    text = "text"
    table = "table"
    json = "json"


def render_table(rows: Iterable[Sequence[Any]], headers: Sequence[str], *, tablefmt: str = TABLE_FORMAT) -> str:
    from tabulate import tabulate

    return tabulate(list(rows), headers=list(headers), tablefmt=tablefmt, disable_numparse=True)


def print_table(rows: Iterable[Sequence[Any]], headers: Sequence[str], *, tablefmt: str = TABLE_FORMAT) -> None:
    typer.echo(render_table(rows, headers, tablefmt=tablefmt))


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def status(ctx: typer.Context, message: str) -> None:
    """A line for the person at the terminal (stderr), silenced by -q."""
    if not settings(ctx).quiet:
        typer.echo(message, err=True)


def absent_note(topic: str, absent: list[int]) -> str:
    """The status line naming partitions a Kafka log dir does not hold (a broker of a larger cluster)."""
    return (f"partition{'s' * (len(absent) != 1)} {', '.join(map(str, absent))} of topic '{topic}' "
            f"{'are' if len(absent) != 1 else 'is'} not in this log directory (another broker holds "
            f"{'them' if len(absent) != 1 else 'it'})")


def error_line(message: str) -> None:
    """The one line every expected failure ends with."""
    typer.echo(f"Error: {message}", err=True)
