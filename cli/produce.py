"""`txlog produce`: one record per input line, as kafka-console-producer.sh and kcat -P do.

Keys and headers are parsed as Kafka's console producer parses them (`--property
parse.key=true`, `key.separator`, `parse.headers`, `headers.delimiter`,
`headers.separator`, `headers.key.separator`, `null.marker`, `ignore.error`), plus
kcat's `-K delim`, `-k key`, `-H name=value` and `-Z`. Records are sent in batches; when
the input goes quiet (a pipe or a terminal with nothing more to read yet) what is
buffered is sent at once, so `tail -f log | txlog produce` is live.

A line that cannot be written -- it does not parse, or its record is larger than the topic's
`max.message.bytes` (found before it is sent: `_SizeGuard`) -- stops the run there: the lines
before it are written, nothing after it, and the error names the line (in a transaction, the
transaction is aborted). With `ignore.error=true` each such line is skipped with one stderr line
instead, and counted in the summary (docs/cli-conventions.md §6).

With `--transactional-id`, all input is one transaction, as kcat's: the end of input
commits it, Ctrl-C or SIGTERM aborts it (exit 130). `--no-commit` leaves it open for a
later `txlog commit`/`txlog abort`: the producer is flushed but never closed (closing a
producer aborts its unfinished transaction), and only the store is closed.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import USAGE, CommandError, complete_topic_names, complete_transactional_ids, open_store
from cli.interrupts import Interrupts
from cli.output import OutputFormat, ResultOutputOption, print_result, status
from cli.progress import Progress, ProgressOption, count
from cli.record_format import (
    VALUE_FORMAT_HELP,
    ValueFormat,
    check_partition,
    check_topic,
    decode_value,
    parse_bool,
    parse_properties,
    unescape,
)

if TYPE_CHECKING:  # the CLI imports storage and txlog only when a command runs
    from types import FrameType

    from storage.store import Store
    from txlog.clients.future_record_metadata import FutureProduceMany
    from txlog.clients.producer import Producer
    from txlog.schemas.transaction_log import TxnLogValue

PRODUCER_PROPERTIES = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": "",
    "ignore.error": "false",
}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "-1", "0", "1")
READ_SIZE = 1 << 16
PENDING_FUTURES = 10  # chunks in flight: flush (and tally offsets) at least this often
CHUNK_RECORDS = 10_000  # lines per produce_many call
CHUNK_BYTES = 4 << 20  # ... or fewer, once their keys and values reach this size


class _LineError(Exception):
    """A line that cannot be written; becomes `Error: line N: ...`, or a skipped line with ignore.error=true."""

    def __init__(self, message: str, needed: int = 0, *, too_long: bool = False):
        super().__init__(message)
        self.needed = needed  # the max.message.bytes that would take the line's record; 0: size is not the problem
        self.too_long = too_long  # a line too long to be read whole: the limit it needs is not known

    @property
    def has_hint(self) -> bool:
        return bool(self.needed) or self.too_long

    def hint(self, topic: str) -> str:
        if self.too_long:
            alter = f"txlog topics alter {topic} --config max.message.bytes=N"
            return f"to write it, raise the limit above its size with '{alter}'"
        return f"raise the limit with 'txlog topics alter {topic} --config max.message.bytes={self.needed}'"


def _arg_bytes(text: str) -> bytes:
    """A byte-valued option (-k, -H values, -K, separators) as the bytes typed: an argument that is not
    UTF-8 reaches Python as surrogate escapes (PEP 383), which give back the original bytes, as kcat takes them."""
    return text.encode("utf-8", "surrogateescape")


def _header_name(name: str, item: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = _arg_bytes(item).decode("utf-8", "backslashreplace")
        raise CommandError(f"-H '{shown}': a header name must be UTF-8 text", exit_code=USAGE) from None
    return name


class _LineParser:
    """One input line (bytes, without its newline) to (key, value, headers)."""

    def __init__(
        self,
        props: dict[str, str],
        value_format: ValueFormat,
        fixed_key: str | None,
        key_delimiter: str | None,
        fixed_headers: list[str] | None,
        empty_is_null: bool,
    ):
        parse_key = parse_bool(props["parse.key"], "parse.key")
        key_separator = unescape(props["key.separator"])
        if key_delimiter is not None:
            parse_key, key_separator = True, unescape(key_delimiter)
        if parse_key and fixed_key is not None:
            raise CommandError(
                "-k/--key gives every record the same key; it cannot be combined with "
                "parsing keys from the input (parse.key, -K)",
                exit_code=USAGE,
            )
        self.parse_key = parse_key
        self.parse_headers = parse_bool(props["parse.headers"], "parse.headers")
        self.ignore_error = parse_bool(props["ignore.error"], "ignore.error")
        separators = {
            "key.separator": key_separator,
            "headers.delimiter": unescape(props["headers.delimiter"]),
            "headers.separator": unescape(props["headers.separator"]),
            "headers.key.separator": unescape(props["headers.key.separator"]),
        }
        for name, sep in separators.items():
            if not sep:
                raise CommandError(f"{name} must not be empty", exit_code=USAGE)
        enc = {name: _arg_bytes(sep) for name, sep in separators.items()}
        self.key_sep = enc["key.separator"]
        self.headers_delim = enc["headers.delimiter"]
        self.headers_sep = enc["headers.separator"]
        self.header_key_sep = enc["headers.key.separator"]
        marker = unescape(props["null.marker"])
        self.null_marker = _arg_bytes(marker) if marker else None
        self.value_format = value_format
        self.empty_is_null = empty_is_null
        self.fixed_key = None if fixed_key is None else decode_value(_arg_bytes(fixed_key), value_format, "the -k key")
        self.fixed_headers: list[tuple[str, bytes | None]] = []
        for item in fixed_headers or []:
            name, sep, value = item.partition("=")
            if not name:
                raise CommandError(f"-H '{item}' is not NAME=VALUE (or NAME for a null header)", exit_code=USAGE)
            self.fixed_headers.append((_header_name(name, item), _arg_bytes(value) if sep else None))
        # What -k and -H add to every record beyond the line's own bytes (for _SizeGuard).
        self.fixed_size = len(self.fixed_key or b"") + sum(
            len(n.encode("utf-8")) + len(v or b"") + 10 for n, v in self.fixed_headers
        )

    def parse(self, line: bytes) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        rest = line
        headers = list(self.fixed_headers)
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delim)
            if not sep:
                raise _LineError("no headers delimiter found")
            rest = tail
            if head != self.null_marker:
                headers.extend(self._headers(head))
        key = self.fixed_key
        if self.parse_key:
            key_text, sep, tail = rest.partition(self.key_sep)
            if sep:
                key, rest = self._field(key_text, "key"), tail
            elif not self.ignore_error:
                raise _LineError("no key separator found")
        value = self._field(rest, "value")
        if value == b"" and self.empty_is_null:
            value = None
        return key, value, headers

    def _field(self, text: bytes, what: str) -> bytes | None:
        if self.null_marker is not None and text == self.null_marker:
            return None
        try:
            return decode_value(text, self.value_format, f"the {what}")
        except ValueError as exc:
            raise _LineError(str(exc)) from None

    def _headers(self, text: bytes) -> Iterator[tuple[str, bytes | None]]:
        for item in text.split(self.headers_sep):
            if not item:
                continue
            name, sep, value = item.partition(self.header_key_sep)
            try:
                name_text = name.decode("utf-8")
            except UnicodeDecodeError:
                raise _LineError("a header name is not UTF-8") from None
            if not name_text:
                raise _LineError(f"header '{item.decode('utf-8', 'replace')}' has no name")
            yield name_text, (None if not sep or value == self.null_marker else value)


def _read_lines(fd: int, on_idle: Callable[[], None], max_line: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) from a file descriptor; calls `on_idle` before a read that would block.

    A line longer than `max_line` bytes comes as None as soon as that much of it is read, never
    held whole (a 40 MB line costs no more memory than a short one); if the caller reads on, the
    rest of it is read and dropped.
    """
    pending = bytearray()  # grows in place: `bytes +=` copied a long line once per 64 KiB read (quadratic)
    number = 0
    dropping = False  # inside a line already given as too long: its bytes up to the newline are dropped
    while True:
        try:
            idle = not select.select([fd], [], [], 0)[0]
        except (OSError, ValueError):  # not selectable: never idle
            idle = False
        if idle:
            on_idle()
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            break
        if dropping:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            chunk, dropping = chunk[end + 1 :], False
        pending += chunk
        if b"\n" in chunk:
            *complete, rest = bytes(pending).split(b"\n")
            pending = bytearray(rest)
            for line in complete:
                number += 1
                line = line[:-1] if line.endswith(b"\r") else line
                yield number, (line if len(line) <= max_line else None)
        if len(pending) > max_line:  # no newline within max_line bytes: the line is too long, stop reading it
            pending.clear()
            dropping = True
            number += 1
            yield number, None
    if pending:
        last = bytes(pending)
        last = last[:-1] if last.endswith(b"\r") else last
        yield number + 1, (last if len(last) <= max_line else None)


class _Chunk:
    """Parsed lines collected column by column, for one `Producer.produce_many` call.

    The producer encodes a chunk's batches natively; a record per `send` cost more than
    reading and parsing its line.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        """Empty the chunk for the next `produce_many` call."""
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []
        self.any_headers = False
        self.size = 0

    def add(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.headers.append(headers)
        self.any_headers = self.any_headers or bool(headers)
        self.size += (len(value) if value else 0) + (len(key) if key else 0)

    def full(self) -> bool:
        return len(self.values) >= CHUNK_RECORDS or self.size >= CHUNK_BYTES

    def send(self, producer: Producer, topic: str, partition: int | None, tally: _Tally) -> None:
        """Hand the chunk to the producer (its future goes to the tally) and start a new one."""
        if self.values:
            keys = self.keys if any(k is not None for k in self.keys) else None
            tally.sent += len(self.values)
            tally.pending.append(
                producer.produce_many(
                    topic, self.values, keys, partition=partition, headers=self.headers if self.any_headers else None
                )
            )
        self._clear()


class _Tally:
    """Records sent per partition and their offset ranges, from the produce_many futures."""

    def __init__(self) -> None:
        self.pending: list[FutureProduceMany] = []
        self.count = 0
        self.sent = 0  # records handed to the producer, acknowledged or not
        self.spans: dict[int, list[list[int]]] = {}  # the acknowledged offsets exactly, as [first, last] runs
        self.unknown: set[int] = set()  # partitions written with acks=0: no offsets come back

    def settle(self) -> None:
        while self.pending:  # one at a time: after a failure, what is left is what settle_written may count
            future = self.pending[0]
            future.get()  # the batches were sent by the flush before: raises the first error, if any
            self._count(future.batches())
            self.pending.pop(0)

    def _count(self, batches: list[tuple[int, int, int, BaseException | None]]) -> None:
        for partition, base, records, _ in batches:
            self.count += records
            if base < 0:
                self.unknown.add(partition)
                continue
            self._add_span(partition, base, base + records - 1)

    def _add_span(self, partition: int, first: int, last: int) -> None:
        spans = self.spans.setdefault(partition, [])
        spans.append([first, last])
        spans.sort()
        merged = [spans[0]]
        for lo, hi in spans[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.spans[partition] = merged

    def written(self) -> str:
        """Where the acknowledged records are, exactly: per partition, its runs of offsets."""
        parts = [
            f"partition {p} offsets {' and '.join(f'{lo}-{hi}' for lo, hi in runs)}"
            for p, runs in sorted(self.spans.items())
        ]
        parts += [f"partition {p} offsets unknown (acks=0)" for p in sorted(self.unknown - set(self.spans))]
        return ", ".join(parts)

    def ranges(self) -> dict[int, tuple[int, int]]:
        """Per partition, its first and last acknowledged offset (the ends of its runs)."""
        return {p: (runs[0][0], runs[-1][1]) for p, runs in self.spans.items()}

    def summary(self, topic: str) -> str:
        parts = [f"partition {p} offsets {lo}-{hi}" for p, (lo, hi) in sorted(self.ranges().items())]
        parts += [f"partition {p} offsets unknown (acks=0)" for p in sorted(self.unknown - set(self.spans))]
        noun = "record" if self.count == 1 else "records"
        where = f": {', '.join(parts)}" if parts else ""
        return f"Produced {self.count} {noun} to {topic}{where}."

    def settle_written(self) -> None:
        """Count what reached the log, never raising: after an interruption or a failure, a batch that
        was not appended is not counted (its future holds the error, or never resolved)."""
        for future in self.pending:
            self._count([b for b in future.batches_done() if b[3] is None])
        self.pending.clear()


class _SizeGuard:
    """Finds the line whose record no batch can hold (larger than the topic's max.message.bytes) before it
    is sent, so that produce stops at it, or skips it, instead of failing a batch later -- which, in a
    transaction, would doom every record. The cheap test (line length) only lets lines near the limit
    through to the exact one: the record alone in a batch, built as the producer builds it."""

    SLACK = 1024  # more than a batch header (61 bytes) and a record's varints can add to its bytes

    def __init__(self, store: Store, topic: str, compression: str, transactional: bool, fixed_size: int):
        from storage.config import TopicConfig

        self.topic = topic
        self.limit = TopicConfig.from_overrides(store.topic_overrides(topic)).max_message_bytes
        self.compression = compression
        self.transactional = transactional
        self.threshold = self.limit - self.SLACK - fixed_size
        # The longest line a record within the limit can come from: hex spells each byte with two
        # characters (base64 with 4/3, utf8 with one). A longer line is refused unread (_read_lines).
        self.max_line = 2 * self.limit + self.SLACK

    def too_long(self) -> _LineError:
        """The error of a line longer than `max_line`: its record cannot fit, whatever its codec."""
        return _LineError(
            f"longer than {self.max_line} bytes, more than any record within max.message.bytes={self.limit} of "
            f"topic '{self.topic}' can take (it is not read into memory)",
            too_long=True,
        )

    def check(
        self, line_size: int, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]
    ) -> None:
        if line_size < self.threshold:
            return
        size = self.batch_size(key, value, headers)
        if size > self.limit:
            raise _LineError(
                f"its record needs a batch of {size} bytes, more than max.message.bytes={self.limit} "
                f"of topic '{self.topic}'",
                needed=size,
            )

    def batch_size(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> int:
        from storage.compression import Compression
        from storage.records import BatchBuilder

        codec = Compression[self.compression.upper()]
        builder = BatchBuilder(max_bytes=self.limit, compression=codec, is_transactional=self.transactional)
        builder.append(key, value, headers or None, 0)
        if codec is Compression.NONE:
            return builder.estimated_size
        return len(builder.build(producer_id=0, producer_epoch=0, base_sequence=0))


class _Skipped:
    """Lines skipped under ignore.error=true: one stderr line each, and a count in the summary."""

    def __init__(self) -> None:
        self.count = 0
        self.largest: _LineError | None = None  # the oversized line needing the highest limit

    def skip(self, number: int, exc: _LineError) -> None:
        self.count += 1
        if exc.needed and (self.largest is None or exc.needed > self.largest.needed):
            self.largest = exc
        typer.echo(f"Skipped line {number}: {exc} (ignore.error=true)", err=True)

    def summary(self, topic: str) -> str:
        if not self.count:
            return ""
        hint = f"; {self.largest.hint(topic)}" if self.largest else ""
        return f" Skipped {self.count} line{'' if self.count == 1 else 's'} (ignore.error=true){hint}."


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM while producing."""


class _Signals(Interrupts):
    """SIGINT and SIGTERM end the run, but only between records: while blocked reading input they
    raise at once; in the middle of a send or a flush they are noted and raised after it."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        super()._handle(signum, frame)
        if self.reading:
            raise _Interrupted()

    def check(self) -> None:
        if self.received:
            raise _Interrupted()


def produce(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            metavar="[FILE|-]",
            help="Input, one record per line (default '-': stdin).",
            show_default=False,
        ),
    ] = "-",
    topic: Annotated[
        str,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Topic to write to.",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = ...,  # type: ignore[assignment]  # typer's mark of a required option, not a value
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition",
            "-p",
            help="Write every record to this partition (default: by key, else sticky).",
            show_default=False,
        ),
    ] = None,
    partitioner: Annotated[
        str | None,
        typer.Option(
            "--partitioner",
            metavar="murmur2|murmur3",
            show_default=False,
            help="How a key picks its partition: murmur2 (the default) is Kafka's, where the Java producer and "
            "kcat's murmur2_random put it; murmur3 is txlog's earlier rule. Keyless records stick to a partition "
            "per batch.",
        ),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            metavar="NAME=VALUE",
            help="Kafka console-producer line parsing (repeatable): parse.key, key.separator, parse.headers, "
            "headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error.",
        ),
    ] = None,
    key_delimiter: Annotated[
        str | None,
        typer.Option(
            "-K",
            metavar="DELIM",
            help="kcat: each line is KEY<DELIM>VALUE.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            "-k",
            metavar="KEY",
            help="kcat: the same key for every record.",
            show_default=False,
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            metavar="NAME=VALUE",
            help="kcat: a header on every record (repeatable; NAME alone: null).",
        ),
    ] = None,
    empty_is_null: Annotated[
        bool,
        typer.Option(
            "-Z",
            help="kcat: an empty value is sent as null (a tombstone).",
        ),
    ] = False,
    value_format: Annotated[
        ValueFormat,
        typer.Option(
            "--value-format",
            case_sensitive=False,
            help=VALUE_FORMAT_HELP,
        ),
    ] = ValueFormat.utf8,
    compression: Annotated[
        str,
        typer.Option(
            "--compression-codec",
            "-z",
            metavar="|".join(CODECS),
            help="Compression of the written batches.",
        ),
    ] = "none",
    acks: Annotated[
        str,
        typer.Option(
            "--acks",
            metavar="|".join(ACKS),
            help="What a record's acknowledgement waits for: all = written "
            "and fdatasynced (survives power loss), 1 = written, 0 = nothing (offsets unknown); 0 and 1 turn "
            "idempotence off.",
        ),
    ] = "all",
    no_idempotence: Annotated[
        bool,
        typer.Option(
            "--no-idempotence",
            help="Send without producer id and sequence numbers.",
        ),
    ] = False,
    transactional_id: Annotated[
        str | None,
        typer.Option(
            "--transactional-id",
            metavar="ID",
            autocompletion=complete_transactional_ids,
            help="All input is one transaction: committed at end of input, aborted on Ctrl-C or SIGTERM.",
            show_default=False,
        ),
    ] = None,
    no_commit: Annotated[
        bool,
        typer.Option(
            "--no-commit",
            help="With --transactional-id: leave the transaction open for 'txlog commit'/'txlog abort'.",
        ),
    ] = False,
    transaction_timeout_ms: Annotated[
        int,
        typer.Option(
            "--transaction-timeout-ms",
            metavar="MS",
            help="transaction.timeout.ms: an open transaction older than this is aborted by the next sweep.",
        ),
    ] = 60_000,
    output: ResultOutputOption = OutputFormat.text,
    progress: ProgressOption = False,
) -> None:
    """Write records, one per line (kafka-console-producer, kcat -P).

    Reads FILE, or stdin when FILE is '-' or left out; a terminal ends the input with Ctrl-D.
    """
    check_partition(partition)
    if compression not in CODECS:
        raise CommandError(
            f"--compression-codec must be one of {', '.join(CODECS)}, not {compression!r}", exit_code=USAGE
        )
    if acks not in ACKS:
        raise CommandError(f"--acks must be one of {', '.join(ACKS)}, not {acks!r}", exit_code=USAGE)
    if transactional_id is not None and no_idempotence:
        raise CommandError("--transactional-id needs idempotence; drop --no-idempotence", exit_code=USAGE)
    if no_commit and transactional_id is None:
        raise CommandError("--no-commit needs --transactional-id", exit_code=USAGE)
    if transactional_id == "":
        raise CommandError("--transactional-id must not be empty", exit_code=USAGE)
    _check_partitioner(partitioner)
    props = parse_properties(prop, PRODUCER_PROPERTIES)
    parser = _LineParser(props, value_format, key, key_delimiter, header, empty_is_null)

    # The input and the topic are checked before anything is written (no producer id, no transaction state).
    infile = None
    if source == "-" and sys.stdin.isatty():
        status(ctx, "Reading records from the terminal, one per line; Ctrl-D to finish (Ctrl-C aborts).")
    if source != "-":
        infile = open(source, "rb")  # noqa: SIM115  closed below; an OSError is one Error: line
    try:
        with open_store(ctx) as store:
            check_topic(store, topic, partition)
            _run(
                ctx,
                store,
                parser,
                infile.fileno() if infile else sys.stdin.buffer.fileno(),
                topic,
                partition,
                compression=compression,
                acks=acks,
                idempotent=not no_idempotence,
                transactional_id=transactional_id,
                no_commit=no_commit,
                transaction_timeout_ms=transaction_timeout_ms,
                partitioner=partitioner,
                output=output,
                progress=progress,
            )
    finally:
        if infile is not None:
            infile.close()


def _check_partitioner(name: str | None) -> None:
    """A usage error for a name txlog.clients.partitioner does not know (imported here: `--help` stays light)."""
    from txlog.clients.partitioner import PARTITIONER_NAMES

    if name is not None and name not in PARTITIONER_NAMES:
        raise CommandError(
            f"--partitioner must be one of {', '.join(PARTITIONER_NAMES)}, not {name!r}", exit_code=USAGE
        )


def _run(
    ctx: typer.Context,
    store: Store,
    parser: _LineParser,
    fd: int,
    topic: str,
    partition: int | None,
    *,
    compression: str,
    acks: str,
    idempotent: bool,
    transactional_id: str | None,
    no_commit: bool,
    transaction_timeout_ms: int,
    partitioner: str | None,
    output: OutputFormat = OutputFormat.text,
    progress: bool = False,
) -> None:
    from txlog.clients.producer import Producer

    producer = Producer(
        store,
        transactional_id=transactional_id,
        enable_idempotence=None if idempotent else False,
        acks=acks,
        compression_type=None if compression == "none" else compression,
        transaction_timeout_ms=transaction_timeout_ms,
        partitioner=partitioner,
    )
    tally = _Tally()
    guard = _SizeGuard(store, topic, compression, transactional_id is not None, parser.fixed_size)
    skipped = _Skipped()
    leave_open = False
    shown: Progress[int] = Progress(ctx, "produce", lambda n: count(n, "line"), asked=progress)  # lines read
    chunk = _Chunk()
    with _Signals() as signals, shown:
        try:
            if transactional_id is not None:
                open_before = _open_transaction(store, transactional_id)
                producer.init_transactions()
                note = _fenced_note(open_before, producer, transactional_id)
                if note:
                    status(ctx, note)
                producer.begin_transaction()

            def on_idle() -> None:  # the input would block: what was read so far goes out now
                if chunk.values or tally.pending:
                    signals.reading = False
                    chunk.send(producer, topic, partition, tally)
                    producer.flush()
                    tally.settle()
                    signals.check()
                    signals.reading = True

            signals.check()
            signals.reading = True
            for number, line in _read_lines(fd, on_idle, guard.max_line):
                signals.reading = False
                try:
                    if line is None:
                        raise guard.too_long()
                    k, v, headers = parser.parse(line)
                    guard.check(len(line), k, v, headers)
                except _LineError as exc:
                    if not parser.ignore_error:
                        chunk.send(producer, topic, partition, tally)
                        _stop_at(number, exc, producer, tally, topic, transactional_id)
                    skipped.skip(number, exc)
                else:
                    chunk.add(k, v, headers)
                    if chunk.full():
                        chunk.send(producer, topic, partition, tally)
                if len(tally.pending) >= PENDING_FUTURES:
                    producer.flush()
                    tally.settle()
                shown.update(number)
                signals.check()
                signals.reading = True
            signals.reading = False
            chunk.send(producer, topic, partition, tally)
            producer.flush()
            tally.settle()
            signals.check()
            if transactional_id is not None and no_commit:
                leave_open = True
            elif transactional_id is not None:
                producer.commit_transaction()
        except (KeyboardInterrupt, _Interrupted):
            signals.reading = False
            if transactional_id is None:  # lines read before the signal are written, as they always were
                _send_quietly(chunk, producer, topic, partition, tally)
            _finish_quietly(producer)
            tally.settle_written()  # close() sent what was buffered (and aborted it, in a transaction)
            status(ctx, _interrupted_message(tally, topic, transactional_id))
            raise typer.Exit(130) from None
        except BaseException as exc:
            signals.reading = False
            _finish_quietly(producer)
            if transactional_id is not None and _is_fenced(exc):
                raise CommandError(_fenced_message(transactional_id)) from None
            # a line's own error (_stop_at) already says what was written; a failure before the first
            # send (a bad id, a store that cannot be opened) has nothing to account for
            if not isinstance(exc, CommandError) and tally.sent:
                tally.settle_written()
                typer.echo(_failure_report(store, tally, topic, transactional_id), err=True)
            raise
        if not leave_open:
            producer.close()

    status(ctx, tally.summary(topic) + skipped.summary(topic))
    print_result(output, _result(tally, topic, transactional_id, "open" if leave_open else "committed"))
    if transactional_id is not None and not leave_open:
        status(ctx, f"Transaction '{transactional_id}' committed.")
    elif leave_open:
        status(
            ctx,
            f"Transaction '{transactional_id}' left open (producer id {producer.producer_id}, epoch "
            f"{producer.producer_epoch}); end it with 'txlog commit --transactional-id {transactional_id}' or "
            f"'txlog abort --transactional-id {transactional_id}' within "
            f"{transaction_timeout_ms} ms, or it is aborted as timed out.",
        )


def _result(tally: _Tally, topic: str, transactional_id: str | None, transaction: str) -> dict[str, Any]:
    """`--output json`: what was written, for scripts (offset ranges per partition; null with acks=0)."""
    partitions: list[dict[str, int | None]] = [
        {"partition": p, "firstOffset": lo, "lastOffset": hi} for p, (lo, hi) in sorted(tally.ranges().items())
    ]
    partitions += [
        {"partition": p, "firstOffset": None, "lastOffset": None} for p in sorted(tally.unknown - set(tally.spans))
    ]
    return {
        "topic": topic,
        "records": tally.count,
        "partitions": partitions,
        "transactionalId": transactional_id,
        "transaction": transaction if transactional_id is not None else None,
    }


def _send_quietly(chunk: _Chunk, producer: Producer, topic: str, partition: int | None, tally: _Tally) -> None:
    """Hand the lines already read to the producer on the way out; a failure is reported by the close."""
    try:
        chunk.send(producer, topic, partition, tally)
    except Exception:  # noqa: BLE001  the interruption is what gets reported
        pass


def _finish_quietly(producer: Producer) -> None:
    """Close the producer (aborting an open transaction) with SIGINT/SIGTERM held off; never raise over
    the error that brought us here."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        producer.close()
    except Exception:  # noqa: BLE001  the original error is the one to report
        pass
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def _stop_at(
    number: int, exc: _LineError, producer: Producer, tally: _Tally, topic: str, transactional_id: str | None
) -> None:
    """Stop at a line that cannot be written: the lines before it are sent first (so the count in the
    message is what is in the log), nothing after it; in a transaction the caller's abort follows."""
    if transactional_id is None:
        producer.flush()
        tally.settle()
    raise CommandError(_line_error(number, exc, tally, topic, transactional_id))


def _line_error(number: int, exc: _LineError, tally: _Tally, topic: str, transactional_id: str | None) -> str:
    sent = tally.count + sum(future.records for future in tally.pending)
    if transactional_id is not None:
        after = f"transaction '{transactional_id}' aborted: nothing from this input is visible"
    elif sent:
        after = f"the {_records(sent)} before it {'were' if sent != 1 else 'was'} written, nothing after it"
    else:
        after = "nothing was written"
    hint = f"; {exc.hint(topic)}" if exc.has_hint else ""
    return f"line {number}: {exc}; {after}{hint}"


def _records(n: int) -> str:
    return f"{n} record{'' if n == 1 else 's'}"


def _interrupted_message(tally: _Tally, topic: str, transactional_id: str | None) -> str:
    """What an interrupted run left in the log, counted from the acknowledged sends (never estimated)."""
    if transactional_id is None:
        return tally.summary(topic).replace("Produced", "Interrupted after producing", 1)
    if not tally.count:
        return f"Interrupted: transaction '{transactional_id}' aborted; nothing from this input is visible."
    return (
        f"Interrupted: transaction '{transactional_id}' aborted; the {_records(tally.count)} it wrote to "
        f"{topic} stay in the log as aborted records, invisible to read_committed readers."
    )


def _failure_report(store: Store, tally: _Tally, topic: str, transactional_id: str | None) -> str:
    """The line before the Error line of a produce that failed part-way: exactly what is in the log.

    Records go to partitions by key (or in sticky runs) and the sender pipelines them, so the
    acknowledged records are not the first lines of the input: they are named by partition and
    offsets. A transaction's outcome is read back from the coordinator, not assumed.
    """
    if transactional_id is not None:
        return _transaction_report(store, tally, topic, transactional_id)
    if not tally.count:
        return f"Nothing was written to {topic}: none of the {_records(tally.sent)} sent was acknowledged."
    missed = tally.sent - tally.count
    return (
        f"Written before the failure: {tally.count} of the {_records(tally.sent)} sent, to {topic} "
        f"{tally.written()}; the other {missed} were not acknowledged (records go to partitions by key, "
        f"so these are not the first lines of the input)."
    )


def _transaction_report(store: Store, tally: _Tally, topic: str, transactional_id: str) -> str:
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.schemas.transaction_log import TxnState

    try:
        found = TransactionCoordinator(store).describe(transactional_id)
    except Exception:  # noqa: BLE001  the failure being reported may be the store's: say what is known
        found = None
    state = found.state.state if found is not None else None
    if state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) and tally.count:
        return (
            f"Transaction '{transactional_id}' was committed before the failure: its {_records(tally.count)} in "
            f"{topic} are visible ({tally.written()})."
        )
    if not tally.count and state is not TxnState.ONGOING:
        return f"Transaction '{transactional_id}': nothing from this input was written."
    aborted = f"the {_records(tally.count)} it wrote stay in the log as aborted records" if tally.count else ""
    if state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.EMPTY):
        return f"Transaction '{transactional_id}' aborted: nothing from this input is visible" + (
            f"; {aborted}." if aborted else "."
        )
    return (
        f"Transaction '{transactional_id}' could not be aborted here: nothing from this input is visible to "
        f"read_committed readers; 'txlog abort --transactional-id {transactional_id}' ends it, or its "
        f"transaction timeout does."
    )


def _open_transaction(store: Store, transactional_id: str) -> tuple[TxnLogValue, int] | None:
    """The id's Ongoing transaction, if it has one, and the time it was looked at (ms)."""
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.schemas.transaction_log import TxnState

    found = TransactionCoordinator(store).describe(transactional_id)
    if found is None or found.state.state != TxnState.ONGOING:
        return None
    return found.state, time.time_ns() // 1_000_000


def _fenced_note(open_before: tuple[TxnLogValue, int] | None, producer: Producer, transactional_id: str) -> str:
    """The note that this producer's InitProducerId aborted an earlier instance's open transaction.

    Kafka's fencing, and correct, but silent otherwise. The epochs tell it for sure: a fence
    bumps the open transaction's epoch twice (its abort) and the init once more, so the new
    producer has the same producer id at exactly epoch + 3; a commit or abort of that
    transaction in between, or another instance starting first, gives another epoch.
    """
    if open_before is None:
        return ""
    txn, looked_ms = open_before
    if (producer.producer_id, producer.producer_epoch) != (txn.producer_id, txn.producer_epoch + 3):
        return ""
    count = len(txn.partitions)
    note = (
        f"note: transactional id {transactional_id} had an open transaction (producer id {txn.producer_id}, "
        f"epoch {txn.producer_epoch}, {count} partition{'s' * (count != 1)}); starting this producer aborted it"
    )
    if looked_ms > txn.start_ms + txn.timeout_ms:
        note += f" (it was past its transaction timeout, transaction.timeout.ms={txn.timeout_ms})"
    return note


def _is_fenced(exc: BaseException) -> bool:
    from storage.errors import InvalidProducerEpochError, ProducerFencedError

    return isinstance(exc, (ProducerFencedError, InvalidProducerEpochError))


def _fenced_message(transactional_id: str) -> str:
    return (
        f"transactional id '{transactional_id}' was fenced by a newer instance of it (another producer "
        f"initialized the same transactional id); this producer's transaction was aborted and nothing "
        f"from this input is visible"
    )
