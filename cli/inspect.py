"""`txlog inspect FILE...|DIR`: kafka-dump-log.sh for txlog stores and Kafka log directories.

The options and text lines are kafka-dump-log's (Kafka ≥ 3.5, docs/cli-conventions.md §2); the
lines themselves are made in `cli.dump_log`. `--output json|jsonl` gives the same content
as data. Files are only ever opened for reading, so a live store or a real Kafka data
directory is safe to inspect. Where kafka-dump-log only complains on stderr and exits 0
(index entries that do not match the log, a corrupt snapshot, trailing garbage), txlog
prints the same stderr lines and then exits 3, as every txlog check does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import USAGE, CommandError, settings
from cli.output import JsonArray, JsonObject, OutputFormat, error_line, output_option, write_json
from cli.quiet_gc import quiet_gc

VERIFICATION_FAILED = 3


# kafka-dump-log's text lines (the default), one JSON document per file, or JSON lines (one per item).
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    InspectOutputOption = OutputFormat
else:
    InspectOutputOption = output_option(
        OutputFormat.text, OutputFormat.json, OutputFormat.jsonl, help="text (kafka-dump-log lines), json, or jsonl."
    )


class _Lines:
    """stdout lines written in ~1 MiB pieces through the binary stream, not one `typer.echo` per line.

    `--print-data-log` prints a line per record: per-line echo was about half of its time.
    Use as a context manager, so what is gathered is written even when the dump stops on an error.
    """

    LIMIT = 1 << 20

    def __init__(self) -> None:
        sys.stdout.flush()  # anything printed as text before goes first
        self.out = sys.stdout.buffer
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, text: str | bytes) -> None:
        """One line (or several, newline-separated), without its final newline; bytes are UTF-8."""
        if isinstance(text, str):
            # surrogateescape: a path that is not UTF-8 prints as its own bytes
            text = text.encode("utf-8", errors="surrogateescape")
        self.parts.append(text)
        self.size += len(text)
        if self.size >= self.LIMIT:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.parts.append(b"")  # the newline after the last line
            self.out.write(b"\n".join(self.parts))
            self.parts, self.size = [], 0
        self.out.flush()

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.flush()


def _expand(paths: list[str]) -> list[str]:
    """Files as given; a directory becomes its segment files (recursively: a log dir holds partitions)."""
    from cli import dump_log  # not at import: `txlog --help` must not load storage

    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for directory, subdirs, names in os.walk(path):
                subdirs.sort()
                out += [os.path.join(directory, n) for n in sorted(names) if n.endswith(dump_log.KNOWN_SUFFIXES)]
        elif os.path.exists(path):
            out.append(path)
        else:
            raise CommandError(f"no such file or directory: {path}")
    return out


def _file_json(path: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """One file's items grouped: batches carry their records; index entries are `entries`."""
    suffix = os.path.splitext(path)[1].lstrip(".")
    doc: dict[str, Any] = {"file": path, "type": suffix}
    batches: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    messages: list[str] = []
    for item in items:
        kind = item["type"]
        body = {k: v for k, v in item.items() if k != "type"}
        if kind == "logStartOffset":
            doc["logStartOffset"] = item["offset"]
        elif kind == "snapshotId":
            doc["snapshotId"] = {"endOffset": item["endOffset"], "epoch": item["epoch"]}
        elif kind == "batch":
            batches.append(body)
        elif kind == "record":
            batches[-1].setdefault("records", []).append(body)
        elif kind == "sanityCheck":
            doc["sanityCheck"] = {"passed": item["passed"], **({"reason": item["reason"]} if "reason" in item else {})}
        elif kind == "message":
            messages.append(item["text"])
        else:
            entries.append(body)
    if suffix in ("log", "checkpoint"):  # a KRaft snapshot holds record batches too
        doc["batches"] = batches
    else:
        doc["entries"] = entries
    if messages:
        doc["messages"] = messages
    return doc


def _documents(targets: list[str], opts: Any, problems: Any) -> Iterator[dict[str, Any] | JsonObject]:
    """`--output json`: each file's document, made as it is written; a log's batches are read one at a time."""
    from cli import dump_log
    from storage.errors import KafkaError

    for path in targets:
        dumper = dump_log.dumper_for(path)
        if dumper is None:
            sys.stdout.buffer.flush()  # stdout before stderr, in the order they happened
            typer.echo(f"Ignoring unknown file {path}", err=True)
            continue
        try:
            items = dump_log.expanded(dumper(path, opts, problems), opts)
            if os.path.splitext(path)[1] not in (".log", ".checkpoint"):
                yield _file_json(path, list(items))  # index entries, producer states: bounded by the file
                continue
            head: list[dict[str, Any]] = []  # what precedes the first batch: the document's scalar fields
            first = None
            for item in items:
                if item["type"] == "batch":
                    first = item
                    break
                head.append(item)
        except dump_log.DumpError as exc:
            problems.other.append(str(exc))
            continue
        except KafkaError as exc:
            problems.other.append(f"{path}: {exc}")
            continue
        yield JsonObject(_log_document(path, head, first, items, problems))


def _log_document(
    path: str, head: list[dict[str, Any]], first: dict[str, Any] | None, items: Iterator[dict[str, Any]], problems: Any
) -> Iterator[tuple[str, object]]:
    """A log's (or KRaft snapshot's) document as `_file_json` lays it out, its batches written one by one.

    A batch that cannot be read ends the batches (the ones before it are in the document) and is
    reported as a problem, as in the text output.
    """
    doc = _file_json(path, head)
    messages = doc.pop("messages", [])
    doc.pop("batches", None)
    yield from doc.items()
    yield "batches", JsonArray(_batches(path, first, items, messages, problems))
    if messages:
        yield "messages", messages


def _batches(
    path: str, first: dict[str, Any] | None, items: Iterator[dict[str, Any]], messages: list[str], problems: Any
) -> Iterator[dict[str, Any]]:
    """Each batch with its records (one batch held at a time); messages met on the way are collected."""
    from cli import dump_log
    from storage.errors import KafkaError

    if first is None:
        return
    batch = {k: v for k, v in first.items() if k != "type"}
    try:
        for item in items:
            kind = item["type"]
            body = {k: v for k, v in item.items() if k != "type"}
            if kind == "record":
                batch.setdefault("records", []).append(body)
            elif kind == "batch":
                yield batch
                batch = body
            elif kind == "message":
                messages.append(item["text"])
    except dump_log.DumpError as exc:
        problems.other.append(str(exc))
    except KafkaError as exc:
        problems.other.append(f"{path}: {exc}")
    yield batch


def inspect(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="FILE...|DIR",
            show_default=False,
            help="Segment files (.log .index .timeindex .snapshot .txnindex, KRaft .checkpoint) or directories "
            "(a partition, a store, a Kafka log dir). Default: --data-dir.",
        ),
    ] = None,
    files: Annotated[
        str | None,
        typer.Option(
            "--files",
            metavar="F1,F2",
            help="kafka-dump-log's comma-separated file list (added to FILE...).",
        ),
    ] = None,
    print_data_log: Annotated[
        bool, typer.Option("--print-data-log", help="Print keys and payloads (implies --deep-iteration).")
    ] = False,
    deep_iteration: Annotated[
        bool, typer.Option("--deep-iteration", help="Print a '|' line per record, not just per batch.")
    ] = False,
    skip_record_metadata: Annotated[
        bool,
        typer.Option(
            "--skip-record-metadata",
            help="Leave offset, timestamp, sizes, sequence and header keys out of record lines.",
        ),
    ] = False,
    max_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-bytes",
            min=0,
            show_default=False,
            help="Read only the first N bytes of each .log [default: the whole file].",
        ),
    ] = None,
    max_message_size: Annotated[
        int | None,
        typer.Option(
            "--max-message-size",
            min=1,
            show_default=False,
            help="Bytes read at each .index position when checking it against the log [default: 5242880, as "
            "kafka-dump-log].",
        ),
    ] = None,
    transaction_log_decoder: Annotated[
        bool,
        typer.Option(
            "--transaction-log-decoder", help="Decode __transaction_state records (implies --print-data-log)."
        ),
    ] = False,
    offsets_decoder: Annotated[
        bool,
        typer.Option("--offsets-decoder", help="Decode __consumer_offsets records as JSON (implies --print-data-log)."),
    ] = False,
    cluster_metadata_decoder: Annotated[
        bool,
        typer.Option(
            "--cluster-metadata-decoder",
            help="Decode KRaft metadata records (__cluster_metadata .log, .checkpoint) as JSON "
            "(implies --print-data-log).",
        ),
    ] = False,
    index_sanity_check: Annotated[
        bool,
        typer.Option(
            "--index-sanity-check", help="Only run the broker-startup sanity check of .index/.timeindex files."
        ),
    ] = False,
    verify_index_only: Annotated[
        bool,
        typer.Option(
            "--verify-index-only",
            help="Check .index/.timeindex entries against the log without printing them.",
        ),
    ] = False,
    output: InspectOutputOption = OutputFormat.text,
) -> None:
    """Dump log, index and snapshot files (kafka-dump-log.sh).

    Segment, index, time-index, producer-snapshot and transaction-index files, with
    kafka-dump-log's options and lines. Read-only. Exits 3 when a check finds a problem (an
    index entry that does not match the log, a corrupt snapshot, bytes that are not a batch, a
    failed sanity check); --verify-index-only ends with a one-line result.
    """
    if transaction_log_decoder + offsets_decoder + cluster_metadata_decoder > 1:
        raise CommandError(
            "give at most one of --transaction-log-decoder, --offsets-decoder and --cluster-metadata-decoder",
            exit_code=USAGE,
        )
    given = list(paths or []) + [f for f in (files or "").split(",") if f]
    if not given:
        root = settings(ctx).data_dir
        if not os.path.isdir(root):
            raise CommandError(f"no store at {os.path.abspath(root)} (give FILE...|DIR or --data-dir)")
        given = [root]
    targets = _expand(given)
    from cli import dump_log  # here, not at import: `txlog --help` must not load storage
    from txlog.schemas import message_parsers

    parser = None
    if transaction_log_decoder:
        parser = message_parsers.transaction_log_parser
    elif offsets_decoder:
        parser = message_parsers.offsets_parser
    elif cluster_metadata_decoder:
        parser = message_parsers.cluster_metadata_parser
    print_data = print_data_log or parser is not None
    opts = dump_log.Options(
        print_data=print_data,
        deep=deep_iteration or print_data,
        skip_metadata=skip_record_metadata,
        sanity_only=index_sanity_check,
        verify_only=verify_index_only,
        parser=parser,
    )
    if max_bytes is not None:
        opts.max_bytes = max_bytes
    if max_message_size is not None:
        opts.max_message_size = max_message_size
    from storage.errors import KafkaError

    problems = dump_log.Problems()
    if output is OutputFormat.json:  # written as it is read: a store's documents are never held whole
        with quiet_gc():
            sys.stdout.flush()
            write_json(JsonArray(_documents(targets, opts, problems)), sys.stdout.buffer)
            sys.stdout.buffer.flush()
    else:
        with _Lines() as lines, quiet_gc():
            for path in targets:
                dumper = dump_log.dumper_for(path)
                if output is OutputFormat.text:
                    lines.add(f"Dumping {path}")
                if dumper is None:
                    lines.flush()  # stdout before stderr, in the order they happened
                    typer.echo(f"Ignoring unknown file {path}", err=True)
                    continue
                try:
                    items = dumper(path, opts, problems)
                    if output is OutputFormat.text:
                        for item in items:
                            text = dump_log.text_of(item, opts)
                            if text is not None:
                                lines.add(text)
                    else:
                        for item in dump_log.expanded(items, opts):
                            lines.add(json.dumps({"file": path, **item}))
                except dump_log.DumpError as exc:
                    problems.other.append(str(exc))
                except KafkaError as exc:  # a batch whose records cannot be decoded: report it, go on
                    problems.other.append(f"{path}: {exc}")

    for line in problems.other + problems.summary_lines():
        typer.echo(line, err=True)
    if verify_index_only and not problems and output is OutputFormat.text:
        typer.echo(_index_result(targets))
    if problems:
        error_line("inspect found problems (see above)")
        raise typer.Exit(VERIFICATION_FAILED)


def _index_result(targets: list[str]) -> str:
    """The line `--verify-index-only` ends with when every entry held (kafka-dump-log prints nothing
    then; a failure ends with the stderr block and the `Error:` line instead)."""
    n = sum(1 for t in targets if t.endswith((".index", ".timeindex")))
    return f"Verified {n} index file{'s' * (n != 1)} against their logs: every entry matches."
