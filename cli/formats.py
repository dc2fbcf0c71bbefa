"""Rows out in Kafka's text layout or a modern format: `--output text|table|json|jsonl|csv`.

Shared by `transactions` and `groups`. A command builds its rows as dicts whose keys are
the JSON names, plus the list of (Kafka column name, key) pairs; `emit` prints them.
`text` is the Kafka tool's own layout, given by the command as a function of the cells.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import typer

from cli.output import print_json, print_table


class RowFormat(str, Enum):
    text = "text"
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


OUTPUT_HELP = "text (the Kafka tool's layout), table, json, jsonl or csv."

Columns = Sequence[tuple[str, str]]  # (header as Kafka prints it, JSON key)


def cells(rows: Sequence[dict[str, Any]], columns: Columns, missing: str) -> list[list[str]]:
    """Every value as text; None prints as `missing` (Kafka: "None" or "-")."""
    return [[_cell(row.get(key), missing) for _, key in columns] for row in rows]


def _cell(value: Any, missing: str) -> str:
    if value is None:
        return missing
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)  # Kafka joins topic-partitions as t-0,t-1
    return str(value)


def emit(rows: Sequence[dict[str, Any]], columns: Columns, output: RowFormat, *,
         text: Callable[[list[str], list[list[str]]], list[str]] | None = None, missing: str = "None",
         single: bool = False) -> None:
    """Print rows; with `single`, json prints the one row as an object rather than an array.

    `text` lays out RowFormat.text; a verb without a text layout passes none and never asks for it.
    """
    headers = [h for h, _ in columns]
    if output is RowFormat.json:
        print_json(rows[0] if single and rows else list(rows))
    elif output is RowFormat.jsonl:
        for row in rows:
            typer.echo(json.dumps(row, separators=(",", ":")))
    elif output is RowFormat.csv:
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(cells(rows, columns, ""))
        typer.echo(buf.getvalue(), nl=False)
    elif output is RowFormat.table:
        print_table(cells(rows, columns, missing), headers)
    else:
        if text is None:
            raise ValueError("this output has no text layout")
        for line in text(headers, cells(rows, columns, missing)):
            typer.echo(line)


def pretty_print_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: left-aligned cells padded to the column width,
    each followed by a TAB (the last one too); the header row first."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return ["".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)) for row in [headers, *rows]]
