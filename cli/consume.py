"""`txlog consume`: print a topic's records, as kafka-console-consumer.sh and kcat -C do.

read_committed by default (txlog's default, as librdkafka's); starts at the group's
committed offset, else at the earliest (`--offset` / `--from-beginning` override both);
exits at the end -- the last stable offset under read_committed -- unless `--follow`.
Output is Kafka's formatter (`--property print.key=true`, ...), kcat's `-f` format, kcat's
`-J` JSON envelope, or `--output jsonl|json|csv|table`. kcat's flags mean what they mean in
kcat (`-o beginning|end|stored|N|-N|s@ts|e@ts`, `-e`, `-u`, `-c`; docs/cli-conventions.md §5).
With `--group` (and no `--partition`) the command is a member of the group, as
kafka-console-consumer with `--group`: the group splits the topic's partitions between its
members and moves them when one joins or leaves; each member prints only its partitions and
commits the offsets of what it printed after each printed batch, so a partition's next owner
starts just after it. It leaves the group when it exits (end of its partitions, `-c`, Ctrl-C,
SIGTERM). With `--group` and `--partition` it reads that partition without joining (the group
only keeps its offsets), committing when it ends and after each batch under `--follow`.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC
from enum import Enum
from operator import itemgetter
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from cli.context import USAGE, CommandError, complete_group_ids, complete_topic_names, open_store
from cli.interrupts import Interrupts
from cli.output import RECORDS, OutputFormat, RowWriter, absent_note, output_option, status
from cli.quiet_gc import quiet_gc
from cli.record_format import (
    VALUE_FORMAT_HELP,
    ValueFormat,
    check_partition,
    check_topic,
    encode_value,
    header_text,
    parse_bool,
    parse_properties,
    unescape,
    value_text,
)

if TYPE_CHECKING:  # the CLI imports txlog only when a command runs
    from cli.console_lines import LinesTransport
    from storage.console_format import ConsoleFormatter, RowFormatter
    from storage.store import Store
    from txlog.clients.consumer import Consumer
    from txlog.consumer_record import ConsumerRecord
    from txlog.topic_partition import TopicPartition

FORMATTER_PROPERTIES = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.offset": "false",
    "print.partition": "false",
    "print.headers": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}
FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
FOLLOW_POLL_MS = 100  # how long one poll waits under --follow; signals are looked at between polls
# A poll (and a write) ends at its bytes: one read of POLL_BYTES of batches (the Consumer's
# fetch_max_bytes, over all partitions), every batch of it printed. Each poll costs a look at the
# log's bounds and files (at Kafka's 500 records that was half of consume's CPU once decoding went
# native), and a poll ended by a record count inside its read dropped the rest of the read, which
# the next poll read and CRC-checked again (~40% of every read at 5000 records of 100 bytes and
# Kafka's 1 MiB per partition); 1 MiB is where the 1 MiB preads of storage/file_records.py do best
# (tests/benchmarks/bench_consume_inspect.py).
POLL_BYTES = 1 << 20
POLL_RECORDS = 1 << 17  # only bounds the poll's list of one item per record (tiny records)


# `--output`: Kafka's formatter (text, the default) or structured records; no `-o` (kcat's -o is the offset).
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    ConsumeOutputOption = OutputFormat
else:
    ConsumeOutputOption = output_option(
        OutputFormat.text,
        OutputFormat.jsonl,
        OutputFormat.json,
        OutputFormat.csv,
        OutputFormat.table,
        help="text (Kafka's formatter), jsonl, json, csv or table.",
    )


class TimestampFormat(str, Enum):
    """--timestamp-format: epoch milliseconds (Kafka's) or ISO 8601 UTC text."""

    ms = "ms"
    iso = "iso"


class IsolationChoice(str, Enum):
    read_committed = "read_committed"
    read_uncommitted = "read_uncommitted"


# ---- writers ------------------------------------------------------------------------------------------


class _Writer:
    """Turns records into output; `write` per polled batch, `close` once at the end."""

    iso_timestamps = False  # --timestamp-format iso: timestamps as ISO 8601 UTC text, not epoch ms
    lines = False  # polls return cli.console_lines.Line tuples made by `line_transport`'s fetches

    def line_transport(self, store: Store, topic: str, stop_at: int | None = None) -> LinesTransport | None:
        """A Transport for the Consumer that makes what `write` prints of `topic` without ConsumerRecords
        (stopping each partition at the timestamp `stop_at`, e@MS: cli/console_lines.py), or None."""
        return None

    def __init__(self, value_format: ValueFormat, *, iso_timestamps: bool = False):
        self.value_format = value_format
        self.iso_timestamps = iso_timestamps
        self.out = sys.stdout.buffer
        self.replaced = False  # some key or value was not UTF-8 and was shown with U+FFFD

    def write(self, records: list[ConsumerRecord]) -> None:
        raise NotImplementedError

    @property
    def streams(self) -> bool:
        """Whether each `write` prints at once (so `--follow` flushes after every batch)."""
        return True

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.flush()

    def text(self, data: bytes | None) -> str | None:
        shown, replaced = value_text(data, self.value_format)
        self.replaced = self.replaced or replaced
        return shown

    def ts(self, ms: int) -> int | str:
        return iso_timestamp(ms) if self.iso_timestamps else ms

    def obj(self, r: ConsumerRecord) -> dict[str, Any]:
        return {
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": self.ts(r.timestamp),
            "key": self.text(r.key),
            "value": self.text(r.value),
            "headers": [[name, header_text(value)] for name, value in r.headers],
        }


class _KafkaFormatter(_Writer):
    """kafka-console-consumer's DefaultMessageFormatter, driven by the print.* properties."""

    def __init__(self, value_format: ValueFormat, props: dict[str, str], *, iso_timestamps: bool = False):
        super().__init__(value_format, iso_timestamps=iso_timestamps)
        flags = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value")
        self.flags = [parse_bool(props[name], name) for name in flags]
        self.sep = unescape(props["key.separator"]).encode("utf-8")
        self.line_sep = unescape(props["line.separator"]).encode("utf-8")
        self.headers_sep = unescape(props["headers.separator"]).encode("utf-8")
        self.null = props["null.literal"].encode("utf-8")
        from storage.records import TimestampType  # here: `txlog --help` must not load storage
        from txlog.consumer_record import ConsumerRecord

        self.timestamp_kinds = tuple(kind.kafka_name for kind in TimestampType)
        self.value_of = itemgetter(ConsumerRecord._fields.index("value"))
        self.native = self._native_formatter()

    def _native_formatter(self) -> ConsoleFormatter:
        """The same lines in native code: one call and one buffer per poll, no per-record objects."""
        from storage.console_format import ConsoleFormatter

        flags = self.flags
        return ConsoleFormatter(
            flags=(flags[0], flags[1], flags[2], flags[3], flags[4], flags[5]),
            key_separator=self.sep,
            line_separator=self.line_sep,
            headers_separator=self.headers_sep,
            null_literal=self.null,
            value_format=self.value_format.value,
            timestamp_kinds=self.timestamp_kinds,
            iso_timestamps=self.iso_timestamps,
        )

    def line_transport(self, store: Store, topic: str, stop_at: int | None = None) -> LinesTransport | None:
        """A Transport whose fetches make this formatter's lines straight from the batches (see
        cli/console_lines.py)."""
        from cli.console_lines import LinesTransport

        self.lines = True
        return LinesTransport(store, self.native, stop_at)

    def write(self, records: list[ConsumerRecord]) -> None:
        if self.lines:  # the poll returned cli.console_lines.Line tuples, formatted already
            from cli.console_lines import chunks

            self.out.writelines(chunks(records))  # type: ignore[arg-type]  # Lines, not ConsumerRecords
            return
        self.out.write(self.native.format(records))

    def write_reference(self, records: list[ConsumerRecord]) -> None:
        """The formatter in Python: the reference the native one is tested against (tests/cli)."""
        show_ts, show_p, show_o, show_h, show_k, show_v = self.flags
        if not (show_ts or show_p or show_o or show_h or show_k) and show_v:
            self._write_values(records)
            return
        lines: list[bytes] = []
        for r in records:
            fields: list[bytes] = []
            if show_ts:
                fields.append(f"{self.timestamp_kinds[r.timestamp_type]}:{self.ts(r.timestamp)}".encode())
            if show_p:
                fields.append(f"Partition:{r.partition}".encode())
            if show_o:
                fields.append(f"Offset:{r.offset}".encode())
            if show_h:
                fields.append(
                    self.headers_sep.join(
                        name.encode("utf-8") + b":" + (self.null if value is None else value)
                        for name, value in r.headers
                    )
                    if r.headers
                    else b"NO_HEADERS"
                )
            if show_k:
                fields.append(self.null if r.key is None else encode_value(r.key, self.value_format))
            if show_v:
                fields.append(self.null if r.value is None else encode_value(r.value, self.value_format))
            lines.append(self.sep.join(fields))
        lines.append(b"")  # the line separator after the last record too
        self.out.write(self.line_sep.join(lines))

    def _write_values(self, records: list[ConsumerRecord]) -> None:
        """The default (print.value only): the batch's values joined in one write, no per-record list."""
        null, fmt = self.null, self.value_format
        values = list(map(self.value_of, records))  # by index: a NamedTuple attribute costs 5x more
        if fmt is not ValueFormat.utf8:
            values = [None if v is None else encode_value(v, fmt) for v in values]
        if None in values:
            values = [null if v is None else v for v in values]
        values.append(b"")
        self.out.write(self.line_sep.join(values))


class _KcatFormatter(_Writer):
    """kcat's -f: %t %p %o %k %K %s %S %R %h %T %%, and \\n \\r \\t \\\\ \\xHH escapes; no newline added."""

    TOKENS = "tpokKsSRhT%"

    def __init__(self, value_format: ValueFormat, fmt: str):
        super().__init__(value_format)
        self.parts: list[str | bytes] = []  # bytes: literal text; str: a token letter
        literal = bytearray()
        i = 0
        while i < len(fmt):
            c = fmt[i]
            if c == "%" and i + 1 < len(fmt):
                token = fmt[i + 1]
                if token not in self.TOKENS:
                    raise CommandError(f"Unsupported formatter: %{token}", exit_code=USAGE)
                if token == "%":
                    literal += b"%"
                else:
                    if literal:
                        self.parts.append(bytes(literal))
                        literal.clear()
                    self.parts.append(token)
                i += 2
            elif c == "\\" and i + 1 < len(fmt):
                nxt = fmt[i + 1]
                simple = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\"}
                if nxt in simple:
                    literal += simple[nxt]
                    i += 2
                elif nxt == "x" and i + 3 < len(fmt) and _is_hex(fmt[i + 2 : i + 4]):
                    literal.append(int(fmt[i + 2 : i + 4], 16))
                    i += 4
                else:
                    literal += c.encode("utf-8")
                    i += 1
            else:
                literal += c.encode("utf-8")
                i += 1
        if literal:
            self.parts.append(bytes(literal))

    def line_transport(self, store: Store, topic: str, stop_at: int | None = None) -> LinesTransport | None:
        """A Transport whose fetches make this format's text natively (storage.console_format
        row_formatter's "kcat", given the parts parsed here); `write_reference` is the reference."""
        self.native, transport = _native_rows(self, "kcat", store, topic, stop_at, kcat_parts=self.parts)
        return transport

    def write(self, records: list[ConsumerRecord]) -> None:
        if self.lines:  # the poll returned cli.console_lines.Line tuples, formatted already
            from cli.console_lines import chunks

            self.out.writelines(chunks(records))  # type: ignore[arg-type]  # Lines, not ConsumerRecords
            return
        self.write_reference(records)

    def write_reference(self, records: list[ConsumerRecord]) -> None:
        """The same text from ConsumerRecords: the native text's reference (tests/cli)."""
        fmt = self.value_format
        buf = bytearray()  # the whole batch: one write
        for r in records:
            for part in self.parts:
                if isinstance(part, bytes):
                    buf += part
                elif part == "t":
                    buf += r.topic.encode("utf-8")
                elif part == "p":
                    buf += str(r.partition).encode()
                elif part == "o":
                    buf += str(r.offset).encode()
                elif part == "T":
                    buf += str(r.timestamp).encode()
                elif part == "k":
                    buf += b"" if r.key is None else encode_value(r.key, fmt)
                elif part == "K":
                    buf += str(-1 if r.key is None else len(r.key)).encode()
                elif part == "s":
                    buf += b"" if r.value is None else encode_value(r.value, fmt)
                elif part == "S":
                    buf += str(-1 if r.value is None else len(r.value)).encode()
                elif part == "R":
                    buf += (-1 if r.value is None else len(r.value)).to_bytes(4, "big", signed=True)
                elif part == "h":
                    buf += b",".join(
                        name.encode("utf-8") + b"=" + (b"NULL" if value is None else value) for name, value in r.headers
                    )
        self.out.write(buf)


class _KcatJson(_Writer):
    """kcat's -J envelope, one object per line, keys in kcat's order (docs/cli-conventions.md §5):
    headers a flat array of alternating names and values; `tstype`/`ts` left out without a timestamp.

    The lines are made natively in the fetch (`line_transport`: storage.console_format.row_formatter's
    "kcat_json"); the Python lines below are the reference (tests/cli)."""

    TSTYPES = ("create", "logappend")
    native: RowFormatter | None = None  # the native lines, once line_transport made them

    def __init__(self, value_format: ValueFormat, *, iso_timestamps: bool = False):
        super().__init__(value_format, iso_timestamps=iso_timestamps)
        from txlog.server.broker import NODE_ID  # here: only -J needs it

        # kcat names the broker it read from: the store's only one, as `txlog serve` numbers it
        # by default, so that kcat through the server and consume on the store print alike.
        self.broker = NODE_ID

    def line_transport(self, store: Store, topic: str, stop_at: int | None = None) -> LinesTransport | None:
        self.native, transport = _native_rows(self, "kcat_json", store, topic, stop_at, broker=self.broker)
        return transport

    def write(self, records: list[ConsumerRecord]) -> None:
        if self.lines:  # the poll returned cli.console_lines.Line tuples: the lines made already
            from cli.console_lines import chunks

            assert self.native is not None
            self.out.writelines(chunks(records))  # type: ignore[arg-type]  # Lines, not ConsumerRecords
            self.replaced = self.native.replaced
            return
        lines = []
        for r in records:
            doc: dict[str, Any] = {"topic": r.topic, "partition": r.partition, "offset": r.offset}
            if r.timestamp >= 0:
                doc["tstype"] = self.TSTYPES[r.timestamp_type] if 0 <= r.timestamp_type < 2 else "unknown"
                doc["ts"] = self.ts(r.timestamp)
            doc["broker"] = self.broker
            doc["headers"] = [item for name, value in r.headers for item in (name, header_text(value))]
            doc["key"] = self.text(r.key)
            doc["payload"] = self.text(r.value)
            lines.append(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.out.write("".join(lines).encode("utf-8"))


def _native_rows(
    writer: _Writer,
    output: Literal["jsonl", "json", "csv", "table", "kcat_json", "kcat"],
    store: Store,
    topic: str,
    stop_at: int | None,
    kcat_parts: list[str | bytes] | None = None,
    broker: int = 0,
) -> tuple[RowFormatter, LinesTransport]:
    """The native formatter of `writer`'s rows and the Transport whose fetches make them, each partition
    stopped at the timestamp `stop_at` if given (cli/console_lines.py)."""
    from cli.console_lines import LinesTransport
    from storage.console_format import row_formatter

    native = row_formatter(
        output,
        topic,
        writer.value_format.value,
        iso_timestamps=writer.iso_timestamps,
        kcat_parts=kcat_parts,
        broker=broker,
    )
    writer.lines = True
    return native, LinesTransport(store, native, stop_at)


def iso_timestamp(ms: int) -> int | str:
    """Epoch milliseconds as ISO 8601 UTC (`2026-01-02T03:04:05.678Z`), exact to the millisecond.

    A timestamp ISO text cannot show stays epoch ms: a missing one (-1, or any negative) and one
    past 9999-12-31T23:59:59.999Z (datetime's last year; a record's timestamp is any 64-bit
    number). The reference of the native formatters' ISO text (storage/native/src/format.rs
    `push_timestamp`).
    """
    if not 0 <= ms <= ISO_MAX_MS:
        return ms
    from datetime import datetime, timedelta

    # Whole milliseconds added to the epoch: ms / 1000 as a float loses the last digit past ~2106.
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


ISO_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in text)


# The outputs whose rows storage.console_format.row_formatter makes (all of `_Rows`'), by their names there.
NATIVE_ROWS: dict[OutputFormat, Literal["jsonl", "json", "csv", "table"]] = {
    OutputFormat.jsonl: "jsonl",
    OutputFormat.json: "json",
    OutputFormat.csv: "csv",
    OutputFormat.table: "table",
}


class _Rows(_Writer):
    """`--output jsonl|json|csv|table`: records as rows of the one row writer (cli.output)."""

    def __init__(self, value_format: ValueFormat, output: OutputFormat, *, iso_timestamps: bool = False):
        super().__init__(value_format, iso_timestamps=iso_timestamps)
        table = output is OutputFormat.table
        # A table names its columns capitalized; json, jsonl and csv use the field names.
        columns = [(f.capitalize() if table else f, f) for f in FIELDS]
        self.writer = RowWriter(columns, output, missing="null" if table else "", rendering=RECORDS)
        self.output = output
        self.native: RowFormatter | None = None  # the native rows, once line_transport made them

    def line_transport(self, store: Store, topic: str, stop_at: int | None = None) -> LinesTransport | None:
        """A Transport whose fetches make the rows natively straight from the batches
        (storage.console_format.row_formatter; cli/console_lines.py). The Python rows below
        (`_row`) are the reference."""
        # (the text output is _KafkaFormatter's)
        self.native, transport = _native_rows(self, NATIVE_ROWS[self.output], store, topic, stop_at)
        return transport

    def write(self, records: list[ConsumerRecord]) -> None:
        if self.lines:  # the poll returned cli.console_lines.Line tuples: rows made already
            from cli.console_lines import joined

            assert self.native is not None
            self.writer.write_rendered(joined(records))  # type: ignore[arg-type]  # Lines, not ConsumerRecords
            self.replaced = self.native.replaced
            return
        self.writer.write(self._row(r) for r in records)

    def _row(self, r: ConsumerRecord) -> dict[str, Any]:
        o = self.obj(r)
        if self.output is OutputFormat.csv:  # one field: the headers as a JSON array, or empty
            o["headers"] = json.dumps(o["headers"], ensure_ascii=False) if o["headers"] else ""
        elif self.output is OutputFormat.table:
            o["headers"] = ",".join(f"{n}={'NULL' if v is None else v}" for n, v in o["headers"])
        return o

    @property
    def streams(self) -> bool:
        return self.writer.streams

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        super().close()


def _writer(
    output: OutputFormat,
    fmt: str | None,
    props: dict[str, str],
    value_format: ValueFormat,
    *,
    kcat_json: bool = False,
    iso_timestamps: bool = False,
) -> _Writer:
    if kcat_json:
        return _KcatJson(value_format, iso_timestamps=iso_timestamps)
    if fmt is not None:
        return _KcatFormatter(value_format, fmt)  # kcat's %T stays ms
    if output is OutputFormat.text:
        return _KafkaFormatter(value_format, props, iso_timestamps=iso_timestamps)
    return _Rows(value_format, output, iso_timestamps=iso_timestamps)


# ---- where to start -----------------------------------------------------------------------------------

OFFSET_SPEC = "beginning|end|stored|N|-N|s@MS|e@MS"
# "earliest", "latest", "stored", N, ("time", ms); None: group/earliest
Start = Literal["earliest", "latest", "stored"] | int | tuple[str, int] | None


def _parse_offsets(values: list[str] | None) -> tuple[Start, int | None]:
    """kcat's -o values (a start, and/or e@MS to stop at): (where to start, the stop timestamp or None).

    earliest|beginning|smallest, latest|end|largest, stored (the group's offset), N (absolute),
    -N (N back from the end), s@MS (the first record at or after MS), e@MS (stop before MS).
    """
    start: Start = None
    stop: int | None = None
    values = values or []
    for value in values:
        lowered = value.strip().lower()
        if lowered.startswith("e@"):
            if stop is not None:
                raise CommandError("-o/--offset e@MS is given twice", exit_code=USAGE)
            stop = _timestamp_arg(value, lowered[2:])
            continue
        if start is not None:
            raise CommandError(
                f"-o/--offset gives two start positions ({values[0]!r} and {value!r}); give one, plus e@MS to stop",
                exit_code=USAGE,
            )
        start = _start(value, lowered)
    return start, stop


def _start(value: str, lowered: str) -> Start:
    if lowered in ("earliest", "beginning", "smallest"):
        return "earliest"
    if lowered in ("latest", "end", "largest"):
        return "latest"
    if lowered == "stored":
        return "stored"
    if lowered.startswith("s@"):
        return ("time", _timestamp_arg(value, lowered[2:]))
    try:
        return int(lowered)
    except ValueError:
        raise CommandError(f"-o/--offset must be {OFFSET_SPEC}, not {value!r}", exit_code=USAGE) from None


def _timestamp_arg(value: str, digits: str) -> int:
    if not digits.isdigit():
        raise CommandError(f"-o/--offset {value!r}: s@ and e@ take a timestamp in ms since the epoch", exit_code=USAGE)
    return int(digits)


def _position(consumer: Consumer, tps: list[TopicPartition], where: Start) -> None:
    if where is None or where == "stored":
        return  # the group's committed offset, else auto_offset_reset=earliest
    if where == "earliest":
        consumer.seek_to_beginning(*tps)
        return
    if where == "latest":
        consumer.seek_to_end(*tps)
        return
    if isinstance(where, tuple):  # s@MS: Kafka's ListOffsets; no record that late starts at the end
        found = consumer.offsets_for_times({tp: where[1] for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            if hit is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, hit[0])
        return
    for tp in tps:
        consumer.seek_clamped(tp, where)  # -N: N back from the end (kcat's OFFSET_TAIL)


# ---- the command --------------------------------------------------------------------------------------


def consume(
    ctx: typer.Context,
    topic: Annotated[
        str,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Topic to read.",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = ...,  # type: ignore[assignment]  # typer's mark of a required option, not a value
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition",
            "-p",
            help="Read only this partition (default: all).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            metavar="GROUP",
            help="Read as a member of this group (the group splits the partitions between its members), "
            "starting at its committed offsets and committing what was printed.",
            autocompletion=complete_group_ids,
            show_default=False,
        ),
    ] = None,
    isolation_level: Annotated[
        IsolationChoice,
        typer.Option(
            "--isolation-level",
            case_sensitive=False,
            help="read_committed hides open and aborted transactions.",
        ),
    ] = IsolationChoice.read_committed,
    offset: Annotated[
        list[str] | None,
        typer.Option(
            "--offset",
            "-o",
            metavar=OFFSET_SPEC,
            help="Where to start, as kcat's -o (over the group's offset): beginning (earliest), end (latest), "
            "stored (the group's offset), offset N, N back from the end (-N), the first record at or after a "
            "timestamp in ms (s@MS); e@MS (may be given as well) stops before the first record at or after MS.",
            show_default=False,
        ),
    ] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Same as -o beginning.")] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep waiting for new records instead of exiting at the end (kcat without -e).",
        ),
    ] = False,
    exit_at_end: Annotated[
        bool,
        typer.Option(
            "--exit-at-end",
            "-e",
            help="Exit at the end of every partition (the default; kcat's -e), saying so on stderr as kcat does.",
        ),
    ] = False,
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max-messages",
            "-c",
            metavar="N",
            help="Exit after printing N records.",
            show_default=False,
        ),
    ] = None,
    timeout_ms: Annotated[
        int | None,
        typer.Option(
            "--timeout-ms",
            metavar="MS",
            help="Exit when no record came for this long (also waits this long at the end).",
            show_default=False,
        ),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            metavar="NAME=VALUE",
            help="Kafka formatter (repeatable): print.timestamp, print.key, print.offset, print.partition, "
            "print.headers, print.value, key.separator, line.separator, headers.separator, null.literal.",
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            metavar="FMT",
            help="kcat format, e.g. '%t %p %o %k %s %h %T\\n'.",
            show_default=False,
        ),
    ] = None,
    kcat_json: Annotated[
        bool,
        typer.Option(
            "--json-envelope",
            "-J",
            help="kcat's -J: one JSON object per record (topic, partition, offset, tstype, "
            "ts, broker, headers, key, payload).",
        ),
    ] = False,
    output: ConsumeOutputOption = OutputFormat.text,
    value_format: Annotated[
        ValueFormat,
        typer.Option(
            "--value-format",
            case_sensitive=False,
            help=VALUE_FORMAT_HELP,
        ),
    ] = ValueFormat.utf8,
    timestamp_format: Annotated[
        TimestampFormat,
        typer.Option(
            "--timestamp-format",
            case_sensitive=False,
            help="How timestamps print: ms (since the epoch, as Kafka) or iso (ISO 8601, UTC; a timestamp ISO "
            "cannot show, none (-1) or one past year 9999, stays ms). kcat's -f %T stays ms.",
        ),
    ] = TimestampFormat.ms,
    unbuffered: Annotated[
        bool,
        typer.Option(
            "--unbuffered",
            "-u",
            help="Write each polled batch to stdout at once (kcat's -u), even when piped.",
        ),
    ] = False,
) -> None:
    """Print records of a topic (kafka-console-consumer, kcat -C).

    Starts at the group's committed offset, else at the earliest; exits at the end (the last
    stable offset under read_committed) unless --follow.
    """
    check_partition(partition)
    if from_beginning and offset:
        raise CommandError("give -o/--offset or --from-beginning, not both", exit_code=USAGE)
    if exit_at_end and follow:
        raise CommandError("give -e/--exit-at-end or --follow, not both", exit_code=USAGE)
    if kcat_json and (fmt is not None or output is not OutputFormat.text or prop):
        raise CommandError(
            "-J/--json-envelope cannot be combined with -f/--format, --output or --property", exit_code=USAGE
        )
    if fmt is not None and (output is not OutputFormat.text or prop):
        raise CommandError("-f/--format cannot be combined with --output or --property", exit_code=USAGE)
    if prop and output is not OutputFormat.text:
        raise CommandError(
            "--property sets Kafka's text formatter; it cannot be combined with --output", exit_code=USAGE
        )
    if max_messages is not None and max_messages < 1:
        raise CommandError(f"--max-messages must be 1 or more, not {max_messages}", exit_code=USAGE)
    if timeout_ms is not None and timeout_ms < 0:
        raise CommandError(f"--timeout-ms must be 0 or more, not {timeout_ms}", exit_code=USAGE)
    if group == "":
        raise CommandError("--group must not be empty", exit_code=USAGE)
    where, stop_at = ("earliest", None) if from_beginning else _parse_offsets(offset)
    if where == "stored" and group is None:
        raise CommandError("-o stored starts at the group's committed offset: give -g/--group", exit_code=USAGE)
    props = parse_properties(prop, FORMATTER_PROPERTIES)
    writer = _writer(
        output, fmt, props, value_format, kcat_json=kcat_json, iso_timestamps=timestamp_format is TimestampFormat.iso
    )

    from txlog.clients.consumer import Consumer
    from txlog.topic_partition import TopicPartition

    # Without a group nothing is written: the store opens read-only (safe beside writers, works on Kafka dirs).
    with open_store(ctx, read_only=group is None) as store:
        count = check_topic(store, topic, partition, reading=True)
        lines = writer.line_transport(store, topic, stop_at)
        if group is not None and store.read_only:
            raise CommandError(
                "this store is read-only (a Kafka data directory): group offsets cannot be committed; drop --group"
            )
        consumer = Consumer(
            store,
            group_id=group,
            isolation_level=isolation_level.value,
            auto_offset_reset="earliest",
            enable_auto_commit=False,  # the loop commits what it printed, after printing it
            transport=lines,  # lines made in the fetch, each partition stopped at e@MS there
            fetch_max_bytes=POLL_BYTES,  # a poll's bytes, over all its partitions
        )
        tps = [TopicPartition(topic, p) for p in ([partition] if partition is not None else store.partitions(topic))]
        if partition is None and len(tps) < count:
            status(ctx, absent_note(topic, store.absent_partitions(topic)))
        member = group is not None and partition is None
        try:
            if member:  # the group decides the partitions; -o applies to each as it is assigned (kcat -G)
                consumer.subscribe([topic], listener=_StartAt(consumer, where))
            else:
                consumer.assign(tps)
                _position(consumer, tps, where)
            printed, interrupted = _loop(
                consumer,
                writer,
                group,
                follow=follow,
                max_messages=max_messages,
                timeout_ms=timeout_ms,
                stop_at=stop_at,
                lines=lines,
                unbuffered=unbuffered,
                member=member,
            )
            writer.close()
            if exit_at_end and not interrupted and (max_messages is None or printed < max_messages):
                for tp in sorted(consumer.assignment()):  # kcat -e's own stderr line
                    status(
                        ctx,
                        f"% Reached end of topic {tp.topic} [{tp.partition}] at offset {consumer.position(tp)}: "
                        "exiting",
                    )
            if group is not None:
                _commit(consumer)  # positions: just past what was printed (and any markers skipped after it)
        finally:
            consumer.close(autocommit=False)  # a member leaves the group: its partitions go to the others
    if writer.replaced:
        status(
            ctx,
            "Note: some keys or values are not UTF-8 and were shown with U+FFFD; "
            "use --value-format base64 or hex for binary data.",
        )
    status(ctx, f"Processed a total of {printed} messages")
    if interrupted:
        raise typer.Exit(130)


def _loop(
    consumer: Consumer,
    writer: _Writer,
    group: str | None,
    *,
    follow: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    stop_at: int | None = None,
    lines: LinesTransport | None = None,
    unbuffered: bool = False,
    member: bool = False,
) -> tuple[int, bool]:
    """Poll and print until the end (or forever with --follow); (records printed, interrupted).

    A group member's end is the end of the partitions the group gave it, once it has them all:
    while it is joining, or a partition is on its way from another member, an empty poll is
    not the end. It commits after each printed batch (flushed first), so a rebalance hands a
    partition on just past what was printed.
    """
    printed = 0
    last_record = time.monotonic()
    with Interrupts() as stop, quiet_gc():
        while not stop.received:
            room = POLL_RECORDS if max_messages is None else min(POLL_RECORDS, max_messages - printed)
            waiting = follow or timeout_ms is not None or not consumer.assignment_settled()
            records = consumer.poll(timeout_ms=FOLLOW_POLL_MS if waiting else 0, max_records=room)
            if stop_at is not None:
                records = _before(consumer, records, stop_at) if lines is None else _reached(consumer, lines, records)
                if not consumer.assignment() - consumer.paused() and not records:
                    break  # every partition reached e@MS
            if records:
                writer.write(records)
                printed += len(records)
                last_record = time.monotonic()
                if unbuffered:
                    writer.flush()
                if member or (follow and writer.streams):
                    writer.flush()
                    if group is not None:
                        _commit(consumer)
                if max_messages is not None and printed >= max_messages:
                    break
                continue
            if timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
                break
            if not waiting:
                break
        return printed, stop.received


def _commit(consumer: Consumer) -> None:
    """Commit the positions of what was printed; a member the group has moved on from commits
    nothing (the partitions may be another member's now) and learns its new assignment."""
    from txlog.errors import FencedMemberEpochError, StaleMemberEpochError, UnknownMemberIdError

    try:
        consumer.commit()
    except (UnknownMemberIdError, StaleMemberEpochError, FencedMemberEpochError):
        consumer.enforce_rebalance()


class _StartAt:
    """The rebalance listener of a group member: puts each partition the group assigns at -o's
    start (kcat -G applies -o on assignment); without -o, it starts at the group's committed offset."""

    def __init__(self, consumer: Consumer, where: Start):
        self.consumer = consumer
        self.where = where

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        if partitions:
            _position(self.consumer, sorted(partitions), self.where)


def _before(consumer: Consumer, records: list[ConsumerRecord], stop_at: int) -> list[ConsumerRecord]:
    """kcat's e@MS over ConsumerRecords (the reference of the lines' stop, `_reached`): keep records
    older than MS; a partition that reached MS stops at that record (`_stop_at`)."""
    kept = []
    reached: set[tuple[str, int]] = set()
    for r in records:
        key = (r.topic, r.partition)
        if key in reached:
            continue
        if r.timestamp >= stop_at:
            reached.add(key)
            _stop_at(consumer, key, r.offset)
            continue
        kept.append(r)
    return kept


def _reached(consumer: Consumer, lines: LinesTransport, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
    """kcat's e@MS where the fetch made the lines: they end before each partition's first record at or
    past MS already, and the partitions whose fetches found one stop there (`_stop_at`)."""
    reached, lines.reached = lines.reached, {}
    for key, offset in reached.items():
        _stop_at(consumer, key, offset)
    return records


def _stop_at(consumer: Consumer, key: tuple[str, int], offset: int) -> None:
    """A partition that reached e@MS at the record at `offset`: rewound to it (a --group commits up to
    it, not past it) and paused."""
    tp = next(tp for tp in consumer.assignment() if (tp.topic, tp.partition) == key)
    consumer.seek(tp, offset)
    consumer.pause(tp)
