"""`txlog topics ...`: create, list, describe, alter and delete topics, as kafka-topics.sh does.

`list` keeps kafka-topics --list's first column (the name) and adds, in --describe's
vocabulary, PartitionCount, the Size on disk and each partition's LogEndOffset.
`describe` prints kafka-topics' text layout by default (overrides only in `Configs:`;
one "broker", 0, leads every partition; the TopicId is the one a Kafka log dir's
`partition.metadata` records, `<none>` for txlog's own topics); `--output table|json`
adds the log's offsets, size and segment count per partition. A Kafka log dir holding
only some partitions of a topic describes those, and says on stderr which are absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import (
    USAGE,
    CommandError,
    complete_topic_names,
    open_store,
)
from cli.output import (
    ROW_FORMATS,
    ROW_FORMATS_HELP,
    OutputFormat,
    ResultOutputOption,
    absent_note,
    emit,
    output_option,
    print_result,
    status,
)
from cli.progress import Progress, ProgressOption

if TYPE_CHECKING:  # the CLI imports storage only when a command runs
    from storage.store import TopicDescription

app = typer.Typer(
    help="Create, list, describe, alter and delete topics (kafka-topics.sh).",
    short_help="Create, list, describe, alter, delete topics (kafka-topics).",
    no_args_is_help=True,
)

_CONFIG_HELP = "A topic config override KEY=VALUE (repeatable), e.g. segment.bytes=1048576."

ConfigOption = Annotated[list[str] | None, typer.Option("--config", metavar="KEY=VALUE", help=_CONFIG_HELP)]
TopicArgument = Annotated[
    str, typer.Argument(metavar="NAME", help="Topic name.", autocompletion=complete_topic_names, show_default=False)
]
ExcludeInternal = Annotated[bool, typer.Option("--exclude-internal", help="Leave out internal topics (__...).")]
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    DescribeOutputOption = OutputFormat
else:
    DescribeOutputOption = output_option(
        *ROW_FORMATS,
        help="text (kafka-topics layout), table or csv (a row per partition), json or jsonl (a document per topic).",
    )
TABLE_COLUMNS = (
    ("Topic", "topic"),
    ("Partition", "partition"),
    ("LogStartOffset", "logStartOffset"),
    ("LogEndOffset", "logEndOffset"),
    ("LastStableOffset", "lastStableOffset"),
    ("Size", "size"),
    ("Segments", "segments"),
)


def _parse_configs(values: list[str] | None, option: str) -> dict[str, str]:
    """KEY=VALUE pairs from repeated options; a value without '=' is a usage error."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"'{item}' is not KEY=VALUE", param_hint=f"'{option}'")
        out[key] = value.strip()
    return out


# ---- create -----------------------------------------------------------------------------------------


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="Topic name: ASCII letters, digits, '.', '_' and '-' (not first), at most 249 characters; "
            "'__' starts internal names only.",
            show_default=False,
        ),
    ],
    partitions: Annotated[int, typer.Option("--partitions", help="Number of partitions.")] = 1,
    config: ConfigOption = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed quietly if the topic exists.")
    ] = False,
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Create a topic (its partition directories exist before it is listed)."""
    overrides = _parse_configs(config, "--config")
    from storage.config import validate_overrides
    from storage.errors import TopicAlreadyExistsError
    from storage.topic_name import validate_topic_name

    # Bad input is refused before the store (or its directory) is even opened.
    validate_topic_name(name)
    validate_overrides(overrides)
    with open_store(ctx, create=True) as store:
        try:
            store.create_topic(name, partitions, overrides)
        except TopicAlreadyExistsError:
            if not if_not_exists:
                raise
            print_result(output, {"topic": name, "created": False})
            return
    status(ctx, f"Created topic {name}.")
    print_result(
        output, {"topic": name, "created": True, "partitions": partitions, "configs": dict(sorted(overrides.items()))}
    )


# ---- list -------------------------------------------------------------------------------------------

LIST_COLUMNS = (
    ("Topic", "topic"),
    ("PartitionCount", "partitionCount"),
    ("Size", "size"),
    ("LogEndOffsets", "logEndOffsets"),
)
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    ListOutputOption = OutputFormat
else:
    ListOutputOption = output_option(*ROW_FORMATS, help=ROW_FORMATS_HELP)


@app.command("list")
def list_(
    ctx: typer.Context,
    exclude_internal: ExcludeInternal = False,
    output: ListOutputOption = OutputFormat.text,
) -> None:
    """Every topic with its partition count, size on disk and each partition's log end offset.

    Size is in human units (KiB, MiB: powers of 1024) in text and table, in bytes in json,
    jsonl and csv. LogEndOffsets lists the partitions' end offsets in partition order ('-' for
    a partition a Kafka log dir lacks). The topic name is always the first column.
    """
    with open_store(ctx, read_only=True) as store:  # no store: 'no store at ...', not an empty list
        descriptions = [store.describe_topic(n) for n in store.list_topics(include_internal=not exclude_internal)]
    for d in descriptions:
        if d.absent:
            status(ctx, absent_note(d.name, d.absent))
    human = output in (OutputFormat.text, OutputFormat.table)
    emit([_list_row(d, human) for d in descriptions], LIST_COLUMNS, output, missing="-", text=_list_text)


def _list_row(d: TopicDescription, human: bool) -> dict[str, Any]:
    """One topic: its size summed over the readable partitions, end offsets by partition number."""
    size = sum(p.size_bytes for p in d.partitions)
    ends: list[int | None] = [None] * (len(d.partitions) + len(d.absent))
    for p in d.partitions:
        ends[p.partition] = p.log_end_offset
    return {
        "topic": d.name,
        "partitionCount": len(ends),
        "size": human_size(size) if human else size,
        "logEndOffsets": ["-" if e is None else e for e in ends] if human else ends,
    }


def _list_text(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; nothing at all when there are no topics
    (as kafka-topics --list prints nothing)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]


def human_size(size: int) -> str:
    """Bytes in powers of 1024, one decimal: 0 B, 512 B, 1.5 KiB, 20.0 MiB."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


# ---- describe ---------------------------------------------------------------------------------------


@app.command("describe")
def describe(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="Topic to describe (default: all topics).",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = None,
    output: DescribeOutputOption = OutputFormat.text,
    exclude_internal: ExcludeInternal = False,
) -> None:
    """Describe one topic or all of them: partitions, config overrides, offsets."""
    # Read-only, like kafka-topics: no locks taken, nothing written, safe beside running writers.
    with open_store(ctx, read_only=True) as store:
        names = [name] if name is not None else store.list_topics(include_internal=not exclude_internal)
        descriptions = [store.describe_topic(n) for n in names]
    for d in descriptions:
        if d.absent:
            status(ctx, absent_note(d.name, d.absent))
    if output in (OutputFormat.table, OutputFormat.csv):  # a row per partition; the others: a document per topic
        emit(
            [{"topic": d.name, **row} for d in descriptions for row in _topic_json(d)["partitions"]],
            TABLE_COLUMNS,
            output,
        )
    else:
        emit(
            [_topic_json(d) for d in descriptions],
            (),
            output,
            single=name is not None,
            text=lambda _headers, _cells: [line for d in descriptions for line in describe_lines(d)],
        )


def format_configs(overrides: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def describe_lines(d: TopicDescription) -> list[str]:
    """kafka-topics --describe: a topic line, then one tab-indented line per (readable) partition."""
    count = len(d.partitions) + len(d.absent)
    lines = [
        (
            f"Topic: {d.name}\tTopicId: {d.topic_id or '<none>'}\tPartitionCount: {count}\tReplicationFactor: 1\t"
            f"Configs: {format_configs(d.overrides)}"
        )
    ]
    for p in d.partitions:
        lines.append(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: 0\tReplicas: 0\tIsr: 0")
    return lines


def _topic_json(d: TopicDescription) -> dict[str, Any]:
    return {
        "topic": d.name,
        "topicId": d.topic_id,
        "partitionCount": len(d.partitions) + len(d.absent),
        "absentPartitions": list(d.absent),
        "replicationFactor": 1,
        "configs": dict(sorted(d.overrides.items())),
        "partitions": [
            {
                "partition": p.partition,
                "leader": 0,
                "replicas": [0],
                "isr": [0],
                "logStartOffset": p.log_start_offset,
                "logEndOffset": p.log_end_offset,
                "lastStableOffset": p.last_stable_offset,
                "size": p.size_bytes,
                "segments": p.segments,
            }
            for p in d.partitions
        ],
    }


# ---- delete -----------------------------------------------------------------------------------------


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: TopicArgument,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed quietly if the topic does not exist.")
    ] = False,
) -> None:
    """Delete a topic and its files."""
    from storage.errors import UnknownTopicOrPartitionError

    with open_store(ctx) as store:  # --if-exists is about the topic: a missing store is still 'no store at'
        try:
            store.delete_topic(name)
        except UnknownTopicOrPartitionError:
            if not if_exists:
                raise
            return
    status(ctx, f"Deleted topic {name}.")


# ---- alter ------------------------------------------------------------------------------------------


@app.command("alter")
def alter(
    ctx: typer.Context,
    name: TopicArgument,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions",
            help="New (larger) partition count.",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    delete_config: Annotated[
        list[str] | None,
        typer.Option(
            "--delete-config",
            metavar="KEY",
            help="A config override to remove (repeatable).",
        ),
    ] = None,
) -> None:
    """Add partitions and/or set or remove config overrides."""
    overrides = _parse_configs(config, "--config")
    removed = list(delete_config or [])
    if partitions is None and not overrides and not removed:
        raise CommandError("nothing to alter: give --partitions, --config or --delete-config", exit_code=USAGE)
    from storage.config import CONFIG_NAMES, validate_overrides
    from storage.errors import InvalidConfigurationError

    # Everything that can be refused is checked before the first change is made.
    validate_overrides(overrides)
    for key in removed:
        if key not in CONFIG_NAMES:
            raise InvalidConfigurationError(f"unknown topic config '{key}' (known: {', '.join(CONFIG_NAMES)})")
    with open_store(ctx) as store:
        if partitions is not None:
            store.create_partitions(name, partitions)
            status(ctx, f"Topic {name} now has {partitions} partitions.")
        if overrides or removed:
            store.alter_topic_config(name, overrides, removed)
            status(ctx, f"Completed updating config for topic {name}.")


# ---- compact ----------------------------------------------------------------------------------------

COMPACT_COLUMNS = (
    ("Topic", "topic"),
    ("Partition", "partition"),
    ("FirstDirtyOffset", "firstDirtyOffset"),
    ("CleanedUpTo", "cleanedUpTo"),
    ("BytesBefore", "bytesBefore"),
    ("BytesAfter", "bytesAfter"),
    ("RecordsBefore", "recordsBefore"),
    ("RecordsAfter", "recordsAfter"),
    ("SegmentsBefore", "segmentsBefore"),
    ("SegmentsAfter", "segmentsAfter"),
    ("Passes", "passes"),
)
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    CompactOutputOption = OutputFormat
else:
    CompactOutputOption = output_option(
        *ROW_FORMATS, help="text (a line per partition), table, json, jsonl or csv (a row per cleaned partition)."
    )


@app.command("compact")
def compact(
    ctx: typer.Context,
    name: TopicArgument,
    partition: Annotated[
        int | None,
        typer.Option("--partition", "-p", help="Only this partition (default: every partition).", show_default=False),
    ] = None,
    output: CompactOutputOption = OutputFormat.text,
    progress: ProgressOption = False,
) -> None:
    """Compact a topic now: keep the latest record of each key, as Kafka's log cleaner does.

    The topic's cleanup.policy must include `compact`. Everything cleanable is cleaned, whatever
    min.cleanable.dirty.ratio says: the sealed segments below the last stable offset and older
    than min.compaction.lag.ms (the active segment never). Records of aborted transactions go,
    tombstones and transaction markers stay until delete.retention.ms after the cleaning that
    first kept them, offsets are never changed. Kafka has no such verb (its cleaner threads
    decide when); txlog also cleans by itself after a segment rolls, when the dirty ratio says so.
    A line per partition says what was read and kept and the offsets cleaned, [first dirty, end).
    """
    with open_store(ctx) as store:
        store.topic_config(name)  # an unknown topic is one error line before anything is done
        wanted = [partition] if partition is not None else store.partitions(name)
        rows = []
        for p in wanted:
            with Progress(ctx, f"compact {name}-{p}", _bytes_done, asked=progress) as shown:
                stats = store.compact(name, p, progress=lambda done, total: shown.update((done, total)))
            rows += [_compact_row(s) for s in stats] or [{"topic": name, "partition": p}]
    emit(rows, COMPACT_COLUMNS, output, missing="-", text=lambda _h, _c: [_compact_line(r) for r in rows])


def _bytes_done(counts: tuple[int, int]) -> str:
    done, total = counts
    return f"{human_size(done)} of {human_size(total)}"


def _compact_row(stats: Any) -> dict[str, Any]:
    """One partition's CleanerStats in the verb's column names."""
    return {
        "topic": stats.topic,
        "partition": stats.partition,
        "firstDirtyOffset": stats.first_dirty_offset,
        "cleanedUpTo": stats.cleaned_up_to,
        "bytesBefore": stats.bytes_read,
        "bytesAfter": stats.bytes_written,
        "recordsBefore": stats.records_read,
        "recordsAfter": stats.records_retained,
        "segmentsBefore": stats.segments_before,
        "segmentsAfter": stats.segments_after,
        "passes": stats.passes,
    }


def _compact_line(row: dict[str, Any]) -> str:
    """`orders-0: 1.2 MiB -> 96.0 KiB, 10,000 -> 800 records, offsets [0, 10000) cleaned, 3 -> 1 segments`."""
    where = f"{row['topic']}-{row['partition']}"
    if "cleanedUpTo" not in row:
        return f"{where}: nothing to clean (only the active segment, or nothing below the last stable offset)"
    return (
        f"{where}: {human_size(row['bytesBefore'])} -> {human_size(row['bytesAfter'])}, "
        f"{row['recordsBefore']:,} -> {row['recordsAfter']:,} records, "
        f"offsets [{row['firstDirtyOffset']}, {row['cleanedUpTo']}) cleaned, "
        f"{row['segmentsBefore']} -> {row['segmentsAfter']} segments"
    )
