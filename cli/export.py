"""`txlog export --format parquet|delta|iceberg --to PATH TOPIC...`: committed records into a lake table.

Always read_committed, up to each partition's last stable offset at the moment of the export;
resumable and exactly once, the table recording in its own commit where the next run starts
(txlog/export/, docs/analysis.md §3). The store is opened read-only. Progress on a terminal
(cli/progress.py), then one summary line on stderr; nothing goes to stdout.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from cli.context import CommandError, complete_topic_names, open_store
from cli.output import status
from cli.progress import Progress, ProgressOption, count

if TYPE_CHECKING:  # the CLI imports txlog only when a command runs
    from txlog.export.ranges import ExportResult


class TableFormat(str, Enum):
    parquet = "parquet"
    delta = "delta"
    iceberg = "iceberg"


def export(
    ctx: typer.Context,
    topics: Annotated[
        list[str],
        typer.Argument(
            metavar="TOPIC",
            autocompletion=complete_topic_names,
            help="The topics to export (every partition of each).",
            show_default=False,
        ),
    ],
    fmt: Annotated[
        TableFormat,
        typer.Option(
            "--format",
            case_sensitive=False,
            help="parquet (one file per partition and run), delta (Delta Lake) or iceberg (with a SQLite "
            "catalog inside PATH).",
            show_default=False,
        ),
    ],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="PATH",
            help="The table's directory: new or empty the first time, the same table on every later run.",
            show_default=False,
        ),
    ],
    progress: ProgressOption = False,
) -> None:
    """Export committed records to a Parquet, Delta or Iceberg table, exactly once.

    Reads each partition from where the table's last export ended up to its last stable offset
    (aborted and open transactions are never exported), and commits the rows together with the
    new end offsets in the table's own metadata: run it again to add what was committed since.
    """
    from txlog.export import export as run_export

    shown: Progress[int] = Progress(ctx, "export", lambda rows: count(rows, "record"), asked=progress)
    with open_store(ctx, read_only=True) as store, shown:
        try:
            result = run_export(store, topics, to, fmt.value, on_rows=shown.update)
        except ImportError as exc:
            if "pip install" not in str(exc):
                raise
            raise CommandError(str(exc)) from None  # an optional library is missing: the extra is named
    status(ctx, summary(result))


def summary(result: ExportResult) -> str:
    """One line: how many records went where, and each partition's exported offsets."""
    topics = sorted({tp[0] for tp in result.spans})
    parts = []
    for topic in topics:
        spans = sorted((p, span) for (t, p), span in result.spans.items() if t == topic)
        offsets = ", ".join(f"{p}: {start}..{end}" if end > start else f"{p}: {end}" for p, (start, end) in spans)
        parts.append(f"{topic} {count(result.rows.get(topic, 0), 'record')} [{offsets}]")
    line = f"Exported {count(result.total, 'record')} to {result.path} ({result.fmt}): {'; '.join(parts)}"
    if result.deleted:
        gone = ", ".join(f"{t}-{p} {a}..{b - 1}" for (t, p), (a, b) in sorted(result.deleted.items()))
        line += f" (deleted from the store before they were exported: {gone})"
    return line
