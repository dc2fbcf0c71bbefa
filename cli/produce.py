"""`txlog produce`: one record per input line, as kafka-console-producer.sh and kcat -P do.

Keys and headers are parsed as Kafka's console producer parses them (`--property
parse.key=true`, `key.separator`, `parse.headers`, `headers.delimiter`,
`headers.separator`, `headers.key.separator`, `null.marker`, `ignore.error`), plus
kcat's `-K delim`, `-k key`, `-H name=value` and `-Z`. Records are sent in batches; when
the input goes quiet (a pipe or a terminal with nothing more to read yet) what is
buffered is sent at once, so `tail -f log | txlog produce` is live.

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
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer

from cli.context import USAGE, CommandError, complete_topic_names, open_store
from cli.interrupts import Interrupts
from cli.output import status
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
PENDING_FUTURES = 10_000  # flush (and tally offsets) at least this often


class _LineError(Exception):
    """A line the parser cannot take; becomes `Error: line N: ...`."""


class _LineParser:
    """One input line (bytes, without its newline) to (key, value, headers)."""

    def __init__(self, props: dict[str, str], value_format: ValueFormat, fixed_key: str | None,
                 key_delimiter: str | None, fixed_headers: list[str] | None, empty_is_null: bool):
        parse_key = parse_bool(props["parse.key"], "parse.key")
        key_separator = unescape(props["key.separator"])
        if key_delimiter is not None:
            parse_key, key_separator = True, unescape(key_delimiter)
        if parse_key and fixed_key is not None:
            raise CommandError("-k/--key gives every record the same key; it cannot be combined with "
                               "parsing keys from the input (parse.key, -K)", exit_code=USAGE)
        self.parse_key = parse_key
        self.parse_headers = parse_bool(props["parse.headers"], "parse.headers")
        self.ignore_error = parse_bool(props["ignore.error"], "ignore.error")
        separators = {"key.separator": key_separator,
                      "headers.delimiter": unescape(props["headers.delimiter"]),
                      "headers.separator": unescape(props["headers.separator"]),
                      "headers.key.separator": unescape(props["headers.key.separator"])}
        for name, sep in separators.items():
            if not sep:
                raise CommandError(f"{name} must not be empty", exit_code=USAGE)
        enc = {name: sep.encode("utf-8") for name, sep in separators.items()}
        self.key_sep = enc["key.separator"]
        self.headers_delim = enc["headers.delimiter"]
        self.headers_sep = enc["headers.separator"]
        self.header_key_sep = enc["headers.key.separator"]
        marker = unescape(props["null.marker"])
        self.null_marker = marker.encode("utf-8") if marker else None
        self.value_format = value_format
        self.empty_is_null = empty_is_null
        self.fixed_key = None if fixed_key is None else decode_value(fixed_key.encode("utf-8"), value_format,
                                                                     "the -k key")
        self.fixed_headers: list[tuple[str, bytes | None]] = []
        for item in fixed_headers or []:
            name, sep, value = item.partition("=")
            if not name:
                raise CommandError(f"-H '{item}' is not NAME=VALUE (or NAME for a null header)", exit_code=USAGE)
            self.fixed_headers.append((name, value.encode("utf-8") if sep else None))

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


def _read_lines(fd: int, on_idle: Callable[[], None]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) from a file descriptor; calls `on_idle` before a read that would block."""
    pending = b""
    number = 0
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
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            number += 1
            yield number, line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield number + 1, pending[:-1] if pending.endswith(b"\r") else pending


class _Tally:
    """Records sent per partition and their offset ranges, from the send futures."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.count = 0
        self.ranges: dict[int, list[int]] = {}
        self.unknown: set[int] = set()  # partitions written with acks=0: no offsets come back

    def settle(self) -> None:
        for future in self.pending:
            meta = future.get()  # the batch was sent by the flush before: raises its error, if any
            self.count += 1
            if meta.offset < 0:
                self.unknown.add(meta.partition)
                continue
            r = self.ranges.setdefault(meta.partition, [meta.offset, meta.offset])
            r[0], r[1] = min(r[0], meta.offset), max(r[1], meta.offset)
        self.pending.clear()

    def summary(self, topic: str) -> str:
        parts = [f"partition {p} offsets {lo}-{hi}" for p, (lo, hi) in sorted(self.ranges.items())]
        parts += [f"partition {p} offsets unknown (acks=0)" for p in sorted(self.unknown - set(self.ranges))]
        noun = "record" if self.count == 1 else "records"
        where = f": {', '.join(parts)}" if parts else ""
        return f"Produced {self.count} {noun} to {topic}{where}."


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM while producing."""


class _Signals(Interrupts):
    """SIGINT and SIGTERM end the run, but only between records: while blocked reading input they
    raise at once; in the middle of a send or a flush they are noted and raised after it."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = False

    def _handle(self, signum: int, frame: Any) -> None:
        super()._handle(signum, frame)
        if self.reading:
            raise _Interrupted()

    def check(self) -> None:
        if self.received:
            raise _Interrupted()


def produce(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(
        metavar="[FILE|-]", help="Input, one record per line (default '-': stdin).", show_default=False,
    )] = "-",
    topic: Annotated[str, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="Topic to write to.", autocompletion=complete_topic_names,
        show_default=False,
    )] = ...,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", help="Write every record to this partition (default: by key, else sticky).",
        show_default=False,
    )] = None,
    prop: Annotated[list[str] | None, typer.Option(
        "--property", metavar="NAME=VALUE",
        help="Kafka console-producer line parsing (repeatable): parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error.",
    )] = None,
    key_delimiter: Annotated[str | None, typer.Option(
        "-K", metavar="DELIM", help="kcat: each line is KEY<DELIM>VALUE.", show_default=False,
    )] = None,
    key: Annotated[str | None, typer.Option(
        "--key", "-k", metavar="KEY", help="kcat: the same key for every record.", show_default=False,
    )] = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", "-H", metavar="NAME=VALUE", help="kcat: a header on every record (repeatable; NAME alone: null).",
    )] = None,
    empty_is_null: Annotated[bool, typer.Option(
        "-Z", help="kcat: an empty value is sent as null (a tombstone).",
    )] = False,
    value_format: Annotated[ValueFormat, typer.Option(
        "--value-format", case_sensitive=False, help=VALUE_FORMAT_HELP,
    )] = ValueFormat.utf8,
    compression: Annotated[str, typer.Option(
        "--compression-codec", "-z", metavar="|".join(CODECS), help="Compression of the written batches.",
    )] = "none",
    acks: Annotated[str, typer.Option("--acks", metavar="|".join(ACKS), help="Acknowledgements to wait for.")] = "all",
    no_idempotence: Annotated[bool, typer.Option(
        "--no-idempotence", help="Send without producer id and sequence numbers.",
    )] = False,
    transactional_id: Annotated[str | None, typer.Option(
        "--transactional-id", metavar="ID",
        help="All input is one transaction: committed at end of input, aborted on Ctrl-C or SIGTERM.",
        show_default=False,
    )] = None,
    no_commit: Annotated[bool, typer.Option(
        "--no-commit", help="With --transactional-id: leave the transaction open for 'txlog commit'/'txlog abort'.",
    )] = False,
    transaction_timeout_ms: Annotated[int, typer.Option(
        "--transaction-timeout-ms", metavar="MS",
        help="transaction.timeout.ms: an open transaction older than this is aborted by the next sweep.",
    )] = 60_000,
) -> None:
    """Write records from a file or stdin, one per line (kafka-console-producer, kcat -P)."""
    check_partition(partition)
    if compression not in CODECS:
        raise CommandError(f"--compression-codec must be one of {', '.join(CODECS)}, not {compression!r}",
                           exit_code=USAGE)
    if acks not in ACKS:
        raise CommandError(f"--acks must be one of {', '.join(ACKS)}, not {acks!r}", exit_code=USAGE)
    if transactional_id is not None and no_idempotence:
        raise CommandError("--transactional-id needs idempotence; drop --no-idempotence", exit_code=USAGE)
    if no_commit and transactional_id is None:
        raise CommandError("--no-commit needs --transactional-id", exit_code=USAGE)
    if transactional_id == "":
        raise CommandError("--transactional-id must not be empty", exit_code=USAGE)
    props = parse_properties(prop, PRODUCER_PROPERTIES)
    parser = _LineParser(props, value_format, key, key_delimiter, header, empty_is_null)

    # The input and the topic are checked before anything is written (no producer id, no transaction state).
    infile = None
    if source != "-":
        infile = open(source, "rb")  # noqa: SIM115  closed below; an OSError is one Error: line
    try:
        with open_store(ctx) as store:
            check_topic(store, topic, partition)
            _run(ctx, store, parser, infile.fileno() if infile else sys.stdin.buffer.fileno(), topic, partition,
                 compression=compression, acks=acks, idempotent=not no_idempotence,
                 transactional_id=transactional_id, no_commit=no_commit,
                 transaction_timeout_ms=transaction_timeout_ms)
    finally:
        if infile is not None:
            infile.close()


def _run(ctx: typer.Context, store: Any, parser: _LineParser, fd: int, topic: str, partition: int | None, *,
         compression: str, acks: str, idempotent: bool, transactional_id: str | None, no_commit: bool,
         transaction_timeout_ms: int) -> None:
    from txlog.producer import Producer

    producer = Producer(store, transactional_id=transactional_id, enable_idempotence=idempotent,
                        acks=acks, compression_type=None if compression == "none" else compression,
                        transaction_timeout_ms=transaction_timeout_ms)
    tally = _Tally()
    leave_open = False
    with _Signals() as signals:
        try:
            if transactional_id is not None:
                producer.init_transactions()
                producer.begin_transaction()

            def on_idle() -> None:
                if tally.pending:
                    signals.reading = False
                    producer.flush()
                    tally.settle()
                    signals.check()
                    signals.reading = True

            signals.check()
            signals.reading = True
            for number, line in _read_lines(fd, on_idle):
                signals.reading = False
                try:
                    k, v, headers = parser.parse(line)
                except _LineError as exc:
                    raise CommandError(_line_error(number, exc, tally, transactional_id)) from None
                tally.pending.append(producer.send(topic, value=v, key=k, partition=partition, headers=headers))
                if len(tally.pending) >= PENDING_FUTURES:
                    producer.flush()
                    tally.settle()
                signals.check()
                signals.reading = True
            signals.reading = False
            producer.flush()
            tally.settle()
            signals.check()
            if transactional_id is not None and no_commit:
                leave_open = True
            elif transactional_id is not None:
                producer.commit_transaction()
        except (KeyboardInterrupt, _Interrupted):
            signals.reading = False
            _finish_quietly(producer)
            if transactional_id is None:  # close() sent what was buffered
                try:
                    tally.settle()
                except Exception:  # noqa: BLE001
                    pass
            message = tally.summary(topic).replace("Produced", "Interrupted after producing", 1)
            if transactional_id is not None:
                message += f" Transaction '{transactional_id}' aborted."
            status(ctx, message)
            raise typer.Exit(130) from None
        except BaseException:
            signals.reading = False
            _finish_quietly(producer)
            raise
        if not leave_open:
            producer.close()

    status(ctx, tally.summary(topic))
    if transactional_id is not None and not leave_open:
        status(ctx, f"Transaction '{transactional_id}' committed.")
    elif leave_open:
        status(ctx, f"Transaction '{transactional_id}' left open (producer id {producer.producer_id}, epoch "
                    f"{producer.producer_epoch}); end it with 'txlog commit --transactional-id {transactional_id}' or "
                    f"'txlog abort --transactional-id {transactional_id}' within "
                    f"{transaction_timeout_ms} ms, or it is aborted as timed out.")


def _finish_quietly(producer: Any) -> None:
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


def _line_error(number: int, exc: _LineError, tally: _Tally, transactional_id: str | None) -> str:
    sent = tally.count + len(tally.pending)
    if transactional_id is not None:
        after = f"the transaction '{transactional_id}' is aborted"
    elif sent:
        after = f"the {sent} record{'s' if sent != 1 else ''} before it {'were' if sent != 1 else 'was'} written"
    else:
        after = "nothing was written"
    return f"line {number}: {exc}; {after}"
