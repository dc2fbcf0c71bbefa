"""Everything a verb prints: the `--output` option, the one row writer, status and error lines.

Data goes to stdout; status and narration meant for a person go to stderr unless the
command's whole purpose is that narration (`demo`). `-q` silences status lines.

Every verb that prints rows offers a subset of one `OutputFormat` through `output_option`
and prints through `RowWriter` (or `emit`, its one-shot form). A verb builds its rows as
dicts whose keys are the JSON names, plus the list of (Kafka column name, key) pairs;
`text` is the Kafka tool's own layout, given by the verb as a function of the cells, so
each verb keeps its Kafka text layout while table, json, jsonl and csv are the same for all.
tabulate is imported when a table is printed, not when the CLI starts.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Literal, TypeAlias

import typer

from cli.context import settings

TABLE_FORMAT = "simple"

Columns = Sequence[tuple[str, str]]  # (header as Kafka prints it, JSON key)
#: A value json.dumps prints as it is.
JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
TextLayout = Callable[[list[str], list[list[str]]], list[str]]  # (headers, cells) -> lines


class OutputFormat(str, Enum):
    """`--output`: the Kafka tool's text layout, a table, or a machine format."""

    text = "text"
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


ROW_FORMATS = (OutputFormat.text, OutputFormat.table, OutputFormat.json, OutputFormat.jsonl, OutputFormat.csv)
ROW_STREAMED = (OutputFormat.jsonl, OutputFormat.csv, OutputFormat.json)  # what RowWriter prints as rows come
ROW_FORMATS_HELP = "text (the Kafka tool's layout), table, json, jsonl or csv."


def _as_format(value: str | OutputFormat | None) -> OutputFormat | None:
    return None if value is None else OutputFormat(value)


def output_option(*choices: OutputFormat, help: str) -> object:
    """The `--output` option of a verb offering `choices`, listed in its help in the order given.

    A verb offers only the formats it can print (a usage error names them); the value it
    receives is always an `OutputFormat`. No short flag: `-o` is kcat's offset (consume);
    the verbs that used to take `-o FORMAT` still do, as a hidden old spelling (cli.flags).
    """
    names = ("--output",)
    allowed = Literal[tuple(c.value for c in choices)]  # type: ignore[valid-type]  # choices known at run time
    return Annotated[allowed, typer.Option(*names, case_sensitive=False, help=help, callback=_as_format)]


# The write verbs (produce, commit, abort, topics create): a status line for people, or the result for scripts.
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    ResultOutputOption = OutputFormat
else:
    ResultOutputOption = output_option(
        OutputFormat.text,
        OutputFormat.json,
        help="text (a status line on stderr) or json (the result as one JSON object on stdout, for scripts).",
    )


def print_result(output: OutputFormat, result: dict[str, Any]) -> None:
    """A write verb's result on stdout when `--output json` asked for it (the status line goes to stderr anyway)."""
    if output is OutputFormat.json:
        print_json(result)


# ---- rows -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rendering:
    """What differs between a verb's report rows and a topic's records, kept as each printed before.

    Records are data: JSON keeps their text as UTF-8 and they go to stdout as bytes, never
    through click (which would strip escape sequences from a piped value). Report rows are
    ASCII JSON, compact in jsonl.
    """

    ascii_json: bool = True
    jsonl_separators: tuple[str, str] = (",", ":")
    raw_stdout: bool = False


REPORT = Rendering()
RECORDS = Rendering(ascii_json=False, jsonl_separators=(", ", ": "), raw_stdout=True)


def cells(rows: Sequence[dict[str, Any]], columns: Columns, missing: str) -> list[list[str]]:
    """Every value as text; None prints as `missing` (Kafka: "None" or "-")."""
    return [[_cell(row.get(key), missing) for _, key in columns] for row in rows]


def _cell(value: object, missing: str) -> str:
    if value is None:
        return missing
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)  # Kafka joins topic-partitions as t-0,t-1
    return str(value)


class RowWriter:
    """Rows out in one format: `write` as rows arrive, `close` once at the end.

    jsonl, csv and json stream (each `write` prints its rows, so memory stays flat however many
    rows come and `--follow` shows them at once; json is the array json.dumps(rows, indent=2)
    prints, written element by element, and closed by `close`); table and text need every row
    first (column widths) and print at close. With `single`, json prints the one row as an
    object rather than an array. `text` lays out OutputFormat.text; a verb without a text layout
    passes none and never offers text.
    """

    def __init__(
        self,
        columns: Columns,
        output: OutputFormat,
        *,
        text: TextLayout | None = None,
        missing: str = "None",
        single: bool = False,
        rendering: Rendering = REPORT,
    ):
        if output is OutputFormat.text and text is None:
            raise ValueError("this output has no text layout")
        self.columns = columns
        self.output = output
        self.text = text
        self.missing = missing
        self.single = single
        self.rendering = rendering
        self.rows: list[dict[str, Any]] = []  # held for the formats printed at close (table, text, single json)
        self.header_written = False
        self.array_open = False  # json: "[" is written, rows follow as they come
        self.spilled: SpilledTable | None = None  # a table's rows on disk, once there are many
        self.rendered: RenderedTable | None = None  # a table's rows rendered natively (write_rendered)

    @property
    def headers(self) -> list[str]:
        return [h for h, _ in self.columns]

    @property
    def streams(self) -> bool:
        """Whether `write` prints at once (a `--follow` reader sees rows as they come)."""
        return self.output in (OutputFormat.jsonl, OutputFormat.csv) or (
            self.output is OutputFormat.json and not self.single
        )

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        if self.output is OutputFormat.jsonl:
            self._print("".join(self._json(row, None, self.rendering.jsonl_separators) + "\n" for row in rows))
        elif self.output is OutputFormat.csv:
            self._print(self._csv(list(rows)))
        elif self.output is OutputFormat.json and not self.single:
            self._print("".join(self._array_element(row) for row in rows))
        else:
            self.rows.extend(rows)
            if self.output is OutputFormat.table and len(self.rows) >= SpilledTable.CHUNK:
                self._spill()

    def write_rendered(self, data: bytes) -> None:
        """Rows this writer would print for jsonl, csv, json or table, already rendered as UTF-8
        bytes (made natively: storage.console_format.row_formatter), taken as they come. Records
        only (they go to stdout as bytes). csv's header row is printed first, once, as `write`
        prints it; json's rows are array elements each led by `,`, the first one's turned into
        `[`; a table's are its cells, laid out at close (RenderedTable)."""
        if self.output is OutputFormat.text or self.single or not self.rendering.raw_stdout:
            raise ValueError("rendered rows are jsonl, csv, json or table records")
        if self.output is OutputFormat.table:
            if self.rendered is None:
                self.rendered = RenderedTable(self.headers)
            self.rendered.add(data)
            return
        if self.output is OutputFormat.csv and not self.header_written:
            self._print(self._csv([]))
        if not data:
            return
        if self.output is OutputFormat.json and not self.array_open:
            self.array_open = True
            sys.stdout.buffer.write(b"[")
            sys.stdout.buffer.write(memoryview(data)[1:])  # the first element's lead `,` is the array's `[`
            return
        sys.stdout.buffer.write(data)

    def _spill(self) -> None:
        """Move the held rows of a table to disk, so that a long table costs no memory (see SpilledTable)."""
        if self.spilled is None:
            self.spilled = SpilledTable(self.headers)
        self.spilled.add(cells(self.rows, self.columns, self.missing))
        self.rows = []

    def _array_element(self, row: dict[str, Any]) -> str:
        """One row of the json array as json.dumps(rows, indent=2) lays it out, after "[" or ","."""
        lead = ",\n  " if self.array_open else "[\n  "
        self.array_open = True
        return lead + self._json(row, 2, None).replace("\n", "\n  ")  # a JSON string never holds a raw newline

    def close(self) -> None:
        output = self.output
        if output is OutputFormat.json and not self.single:
            self._print("\n]\n" if self.array_open else "[]\n")
        elif output is OutputFormat.json:
            value = self.rows[0] if self.rows else self.rows
            self._print(self._json(value, 2, None) + "\n")
        elif output is OutputFormat.csv and not self.header_written:
            self._print(self._csv([]))
        elif output is OutputFormat.table and self.rendered is not None:
            for data in self.rendered.render():
                self._print_bytes(data)
        elif output is OutputFormat.table and self.spilled is not None:
            if self.rows:
                self._spill()
            for text in self.spilled.render():
                self._print(text)
        elif output is OutputFormat.table:
            self._print(render_table(cells(self.rows, self.columns, self.missing), self.headers) + "\n")
        elif output is OutputFormat.text:
            assert self.text is not None
            self._print(
                "".join(line + "\n" for line in self.text(self.headers, cells(self.rows, self.columns, self.missing)))
            )
        self.flush()

    def flush(self) -> None:
        (sys.stdout.buffer if self.rendering.raw_stdout else sys.stdout).flush()

    def _json(self, value: object, indent: int | None, separators: tuple[str, str] | None) -> str:
        return json.dumps(value, indent=indent, separators=separators, ensure_ascii=self.rendering.ascii_json)

    def _csv(self, rows: list[dict[str, Any]]) -> str:
        """RFC 4180 rows (the header row first, once); None is an empty field."""
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if not self.header_written:
            writer.writerow(self.headers)
            self.header_written = True
        writer.writerows(cells(rows, self.columns, ""))
        return buf.getvalue()

    def _print_bytes(self, data: bytes) -> None:
        if self.rendering.raw_stdout:
            sys.stdout.buffer.write(data)
        else:
            typer.echo(data.decode("utf-8"), nl=False)

    def _print(self, text: str) -> None:
        if not text:
            return
        if self.rendering.raw_stdout:
            sys.stdout.buffer.write(text.encode("utf-8"))
        else:
            typer.echo(text, nl=False)


def emit(
    rows: Sequence[dict[str, Any]],
    columns: Columns,
    output: OutputFormat,
    *,
    text: TextLayout | None = None,
    missing: str = "None",
    single: bool = False,
) -> None:
    """Print a verb's rows at once (RowWriter's one-shot form)."""
    writer = RowWriter(columns, output, text=text, missing=missing, single=single)
    writer.write(rows)
    writer.close()


def pretty_print_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: left-aligned cells padded to the column width,
    each followed by a TAB (the last one too); the header row first."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return ["".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True)) for row in [headers, *rows]]


def render_table(rows: Iterable[Sequence[object]], headers: Sequence[str], *, tablefmt: str = TABLE_FORMAT) -> str:
    from tabulate import tabulate

    return tabulate(list(rows), headers=list(headers), tablefmt=tablefmt, disable_numparse=True)


class SpilledTable:
    """A table too long to hold: its cells go to a temporary file in chunks, and it is printed
    chunk by chunk with the widths of the whole table, byte for byte what `render_table` prints.

    tabulate sizes a column to its widest cell or to its header plus MIN_PADDING; each chunk's
    widths are read off the dashes under its header, and at the end every chunk is laid out
    with its headers padded to the table's widths (minus that padding), so each chunk's rows
    come out as in the whole table; the header and dashes are printed once.
    """

    CHUNK = 5000  # rows per tabulate call
    MIN_PADDING = 2  # tabulate's MIN_PADDING for the "simple" format's headers

    def __init__(self, headers: list[str]):
        import tempfile

        self.headers = headers
        self.widths = [0] * len(headers)
        self.multiline = False  # tabulate lays every row out differently once any cell holds \n or \r
        self.file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115

    def add(self, rows: list[list[str]]) -> None:
        for i, width in enumerate(self._widths(render_table(rows, self.headers))):
            self.widths[i] = max(self.widths[i], width)
        for row in rows:
            self.multiline = self.multiline or any("\n" in cell or "\r" in cell for cell in row)
            self.file.write(json.dumps(row) + "\n")

    def render(self) -> Iterator[str]:
        """The table's text in pieces (the last ends with a newline); the file is closed after."""
        headers = [h.ljust(w - self.MIN_PADDING) for h, w in zip(self.headers, self.widths, strict=True)]
        yield render_table([], headers) + "\n"  # the header line and the dashes
        # A chunk is laid out in the whole table's mode: a header ending in a newline puts tabulate in
        # multiline mode (and adds one blank header line, skipped with the header and dashes).
        if self.multiline:
            headers[-1] += "\n"
        skip = 3 if self.multiline else 2
        self.file.seek(0)
        try:
            while chunk := [json.loads(line) for line in itertools.islice(self.file, self.CHUNK)]:
                lines = render_table(chunk, headers).split("\n")[skip:]
                if lines:  # a multiline table shows a row of empty cells as no line at all
                    yield "\n".join(lines) + "\n"
        finally:
            self.file.close()

    @staticmethod
    def _widths(table: str) -> list[int]:
        """Column widths: the lengths of the dash runs on the table's second line."""
        import re

        return [len(run) for run in re.findall("-+", table.split("\n", 2)[1])]


class RenderedTable:
    """A table whose rows came rendered as cells (storage.console_format: each cell a u32 length
    and its UTF-8 text, rows back to back), printed at the end byte for byte as `render_table`
    prints the same cells: laid out natively where every cell is printable ASCII (tabulate's
    "simple" layout: widths from the widest cell or the header plus MIN_PADDING, spaces stripped
    at both ends of a cell and of a line), else through tabulate (SpilledTable past CHUNK rows).

    The rows are held in memory up to HELD bytes, then on a temporary file, so a long table
    costs no memory; they are read twice at the end (widths, then lines) in READ-sized pieces.
    """

    HELD = 8 << 20
    READ = 1 << 20

    def __init__(self, headers: list[str]):
        self.headers = headers
        self.parts: list[bytes] = []
        self.held = 0
        self.file: BinaryIO | None = None

    def add(self, data: bytes) -> None:
        if self.file is not None:
            self.file.write(data)
            return
        self.parts.append(data)
        self.held += len(data)
        if self.held > self.HELD:
            import tempfile

            self.file = tempfile.TemporaryFile()  # noqa: SIM115  # closed by render
            self.file.writelines(self.parts)
            self.parts, self.held = [], 0

    def render(self) -> Iterator[bytes]:
        """The table's text in pieces (the last ends with a newline); the file is closed after."""
        from storage.console_format import table_lines, table_widths_of

        try:
            widths = [len(h) + SpilledTable.MIN_PADDING for h in self.headers]
            simple = True
            for rows in self._rows():
                widths, _, fits = table_widths_of(rows, widths)
                simple = simple and fits
            if not simple:
                yield from self._render_with_tabulate()
                return
            yield self._header_lines(widths)
            for rows in self._rows():
                yield table_lines(rows, widths)[0]
        finally:
            if self.file is not None:
                self.file.close()

    def _header_lines(self, widths: list[int]) -> bytes:
        """The header line (trailing spaces stripped) and the dashes, as tabulate prints them."""
        header = "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True)).rstrip()
        dashes = "  ".join("-" * w for w in widths)
        return f"{header}\n{dashes}\n".encode()

    def _rows(self) -> Iterator[bytes]:
        """The rows, in pieces of whole rows."""
        if self.file is None:
            yield from self.parts  # each is a poll's rows
            return
        from storage.console_format import table_widths_of

        self.file.seek(0)
        carry = b""
        nothing = [0] * len(self.headers)
        while chunk := self.file.read(self.READ):
            data = carry + chunk if carry else chunk
            _, read, _ = table_widths_of(data, nothing)  # where its whole rows end
            carry = data[read:]
            yield data[:read]
        if carry:
            raise AssertionError("a table's file ends inside a row")

    def _render_with_tabulate(self) -> Iterator[bytes]:
        """The table as render_table lays it out, its rows CHUNK at a time (SpilledTable past one chunk)."""
        from storage.console_format import table_cells

        rows = itertools.chain.from_iterable(table_cells(piece, len(self.headers)) for piece in self._rows())
        first = list(itertools.islice(rows, SpilledTable.CHUNK))
        following = list(itertools.islice(rows, SpilledTable.CHUNK))
        if not following:
            yield (render_table(first, self.headers) + "\n").encode("utf-8")
            return
        spilled = SpilledTable(self.headers)
        spilled.add(first)
        while following:
            spilled.add(following)
            following = list(itertools.islice(rows, SpilledTable.CHUNK))
        for text in spilled.render():
            yield text.encode("utf-8")


def print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2))


# ---- JSON written as it is made ---------------------------------------------------------------------


class JsonArray:
    """An array whose elements are made while it is written (`write_json`): never held whole."""

    def __init__(self, items: Iterable[object]):
        self.items = items


class JsonObject:
    """An object whose (key, value) pairs are made while it is written, in order: a pair may be
    yielded after an earlier value (a JsonArray) was written out, e.g. what was learned reading it."""

    def __init__(self, pairs: Iterable[tuple[str, object]]):
        self.pairs = pairs


def json_pieces(value: object, *, ensure_ascii: bool = True, level: int = 0) -> Iterator[str]:
    """The text json.dumps(value, indent=2) gives, in pieces, with JsonArray / JsonObject made lazily.

    The same bytes as json.dumps of the materialized value: a plain value is dumped whole and
    re-indented to its depth (a JSON string never holds a raw newline, so that is exact).
    """
    if isinstance(value, JsonArray):
        pairs: Iterable[tuple[str | None, object]] = ((None, item) for item in value.items)
        brackets = "[]"
    elif isinstance(value, JsonObject):
        pairs, brackets = value.pairs, "{}"
    else:
        yield json.dumps(value, indent=2, ensure_ascii=ensure_ascii).replace("\n", "\n" + "  " * level)
        return
    inner = "  " * (level + 1)
    first = True
    for key, item in pairs:
        yield (brackets[0] + "\n" if first else ",\n") + inner
        if key is not None:
            yield json.dumps(key, ensure_ascii=ensure_ascii) + ": "
        yield from json_pieces(item, ensure_ascii=ensure_ascii, level=level + 1)
        first = False
    yield brackets if first else "\n" + "  " * level + brackets[1]


def write_json(value: object, out: BinaryIO, *, ensure_ascii: bool = True, chunk: int = 1 << 20) -> None:
    """`value` as print_json prints it (indent 2, a newline after), written to `out` in ~`chunk` pieces."""
    parts: list[str] = []
    size = 0
    for piece in json_pieces(value, ensure_ascii=ensure_ascii):
        parts.append(piece)
        size += len(piece)
        if size >= chunk:
            out.write("".join(parts).encode("utf-8", errors="surrogateescape"))
            parts, size = [], 0
    parts.append("\n")
    out.write("".join(parts).encode("utf-8", errors="surrogateescape"))


# ---- lines for the person at the terminal -----------------------------------------------------------


def status(ctx: typer.Context, message: str) -> None:
    """A line for the person at the terminal (stderr), silenced by -q."""
    if not settings(ctx).quiet:
        typer.echo(message, err=True)


def absent_note(topic: str, absent: list[int]) -> str:
    """The status line naming partitions a Kafka log dir does not hold (a broker of a larger cluster)."""
    return (
        f"partition{'s' * (len(absent) != 1)} {', '.join(map(str, absent))} of topic '{topic}' "
        f"{'are' if len(absent) != 1 else 'is'} not in this log directory (another broker holds "
        f"{'them' if len(absent) != 1 else 'it'})"
    )


def error_line(message: str) -> None:
    """The one line every expected failure ends with."""
    typer.echo(f"Error: {message}", err=True)
