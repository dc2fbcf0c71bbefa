"""`txlog topics ...`: create, list, describe, alter and delete topics, as kafka-topics.sh does.

`describe` prints kafka-topics' text layout by default (overrides only in `Configs:`;
one "broker", 0, leads every partition; the TopicId is the one a Kafka log dir's
`partition.metadata` records, `<none>` for txlog's own topics); `--output table|json`
adds the log's offsets, size and segment count per partition. A Kafka log dir holding
only some partitions of a topic describes those, and says on stderr which are absent.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.context import (
    USAGE,
    CommandError,
    complete_topic_names,
    open_store,
    store_exists,
)
from cli.output import OutputFormat, absent_note, emit, output_option, status

app = typer.Typer(
    help="Create, list, describe, alter and delete topics (kafka-topics.sh).",
    no_args_is_help=True,
)

_CONFIG_HELP = "A topic config override KEY=VALUE (repeatable), e.g. segment.bytes=1048576."

ConfigOption = Annotated[
    list[str] | None, typer.Option("--config", "-c", metavar="KEY=VALUE", help=_CONFIG_HELP)
]
TopicArgument = Annotated[
    str, typer.Argument(metavar="NAME", help="Topic name.", autocompletion=complete_topic_names, show_default=False)
]
ExcludeInternal = Annotated[
    bool, typer.Option("--exclude-internal", help="Leave out internal topics (__...).")
]
DescribeOutputOption = output_option(OutputFormat.text, OutputFormat.table, OutputFormat.json,
                                     help="text (kafka-topics layout), table, or json.")
TABLE_COLUMNS = (("Topic", "topic"), ("Partition", "partition"), ("LogStartOffset", "logStartOffset"),
                 ("LogEndOffset", "logEndOffset"), ("LastStableOffset", "lastStableOffset"), ("Size", "size"),
                 ("Segments", "segments"))


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
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="Topic name (put '--' before a name that starts with '-').", show_default=False,
    )],
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="Number of partitions.")] = 1,
    config: ConfigOption = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="Succeed quietly if the topic exists.")] = False,
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
            return
    status(ctx, f"Created topic {name}.")


# ---- list -------------------------------------------------------------------------------------------

@app.command("list")
def list_(
    ctx: typer.Context,
    exclude_internal: ExcludeInternal = False,
) -> None:
    """Print every topic name, one per line."""
    if not store_exists(ctx):
        return  # no store yet: no topics
    with open_store(ctx, read_only=True) as store:
        names = store.list_topics(include_internal=not exclude_internal)
    for name in names:
        typer.echo(name)


# ---- describe ---------------------------------------------------------------------------------------

@app.command("describe")
def describe(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(
        metavar="NAME", help="Topic to describe (default: all topics).", autocompletion=complete_topic_names,
        show_default=False,
    )] = None,
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
    if output is OutputFormat.table:  # a row per partition; json and text have one document per topic
        emit([{"topic": d.name, **row} for d in descriptions for row in _topic_json(d)["partitions"]], TABLE_COLUMNS,
             output)
    else:
        emit([_topic_json(d) for d in descriptions], (), output, single=name is not None,
             text=lambda _headers, _cells: [line for d in descriptions for line in describe_lines(d)])


def format_configs(overrides: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def describe_lines(d: Any) -> list[str]:
    """kafka-topics --describe: a topic line, then one tab-indented line per (readable) partition."""
    count = len(d.partitions) + len(d.absent)
    lines = [
        (f"Topic: {d.name}\tTopicId: {d.topic_id or '<none>'}\tPartitionCount: {count}\tReplicationFactor: 1\t"
         f"Configs: {format_configs(d.overrides)}")
    ]
    for p in d.partitions:
        lines.append(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: 0\tReplicas: 0\tIsr: 0")
    return lines


def _topic_json(d: Any) -> dict[str, Any]:
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
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed quietly if the topic does not exist.")] = False,
) -> None:
    """Delete a topic and its files."""
    from storage.errors import UnknownTopicOrPartitionError

    if if_exists and not store_exists(ctx):
        return
    with open_store(ctx) as store:
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
    partitions: Annotated[int | None, typer.Option(
        "--partitions", "-p", help="New (larger) partition count.", show_default=False,
    )] = None,
    config: ConfigOption = None,
    delete_config: Annotated[list[str] | None, typer.Option(
        "--delete-config", metavar="KEY", help="A config override to remove (repeatable).",
    )] = None,
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
