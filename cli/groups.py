"""`txlog groups ...`: list, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).

Kafka's modes (`--list`, `--describe`, ...) are verbs here; options and column names are
Kafka's. txlog groups have committed offsets but no live members, so CONSUMER-ID, HOST and
CLIENT-ID are always `-`. LOG-END-OFFSET and LAG are measured against the last stable
offset, as a read_committed consumer sees the log.

`list` and `describe` open the store read-only; `reset-offsets` writes only with
`--execute` (the default is Kafka's dry run, which prints the plan and opens read-only);
`delete-offsets` writes.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.context import USAGE, CommandError, open_store, store_exists
from cli.formats import OUTPUT_HELP, RowFormat, emit
from cli.output import status

app = typer.Typer(
    help="List, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).",
    no_args_is_help=True,
)

OutputOption = Annotated[RowFormat, typer.Option("--output", "-o", case_sensitive=False, help=OUTPUT_HELP)]
GroupOption = Annotated[str, typer.Option("--group", metavar="GROUP", help="The consumer group.", show_default=False)]
TopicsOption = Annotated[list[str] | None, typer.Option(
    "--topic", metavar="TOPIC[:P,P...]", help="A topic, optionally with partitions, e.g. orders:0,2 (repeatable).",
    show_default=False,
)]

DESCRIBE_COLUMNS = (
    ("GROUP", "group"), ("TOPIC", "topic"), ("PARTITION", "partition"), ("CURRENT-OFFSET", "currentOffset"),
    ("LOG-END-OFFSET", "logEndOffset"), ("LAG", "lag"), ("CONSUMER-ID", "consumerId"), ("HOST", "host"),
    ("CLIENT-ID", "clientId"),
)
RESET_COLUMNS = (("GROUP", "group"), ("TOPIC", "topic"), ("PARTITION", "partition"), ("NEW-OFFSET", "newOffset"))
DELETE_COLUMNS = (("TOPIC", "topic"), ("PARTITION", "partition"), ("STATUS", "status"))
LIST_COLUMNS = (("GROUP", "group"),)


def _admin(store: Any) -> Any:
    from txlog.admin import Admin

    return Admin(store)


def _no_group(group: str) -> CommandError:
    return CommandError(f"consumer group '{group}' does not exist")


def _parse_topics(values: list[str]) -> list[tuple[str, list[int] | None]]:
    """`t` or `t:0,1,2` (kafka-consumer-groups' --topic syntax); None means every partition."""
    out = []
    for value in values:
        name, sep, parts = value.partition(":")
        if not name:
            raise typer.BadParameter(f"'{value}' has no topic name", param_hint="'--topic'")
        if not sep:
            out.append((name, None))
            continue
        try:
            numbers = sorted({int(p) for p in parts.split(",")})
        except ValueError:
            raise typer.BadParameter(f"'{value}' is not TOPIC or TOPIC:P,P,...", param_hint="'--topic'") from None
        if any(p < 0 for p in numbers):
            raise typer.BadParameter(f"'{value}' has a negative partition", param_hint="'--topic'")
        out.append((name, numbers))
    return out


# ---- list -------------------------------------------------------------------------------------------

@app.command("list")
def list_(ctx: typer.Context, output: OutputOption = RowFormat.text) -> None:
    """Every group with committed (or pending transactional) offsets, one per line."""
    names: list[str] = []
    if store_exists(ctx):
        with open_store(ctx, read_only=True) as store:
            names = _admin(store).list_consumer_groups()
    emit([{"group": n} for n in names], LIST_COLUMNS, output, text=lambda _h, rows: [r[0] for r in rows])


# ---- describe ---------------------------------------------------------------------------------------

@app.command("describe")
def describe(
    ctx: typer.Context,
    group: Annotated[list[str] | None, typer.Option(
        "--group", metavar="GROUP", help="A group to describe (repeatable).", show_default=False,
    )] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Describe every group.")] = False,
    output: OutputOption = RowFormat.text,
) -> None:
    """Committed offset, log end and lag per partition of each group."""
    if bool(group) == all_groups:
        raise CommandError("give --group GROUP (repeatable) or --all-groups", exit_code=USAGE)
    with open_store(ctx, read_only=True) as store:
        admin = _admin(store)
        known = admin.list_consumer_groups()
        names = known if all_groups else list(dict.fromkeys(group or []))
        for name in names:
            if name not in known:
                raise _no_group(name)
        described = {name: admin.describe_consumer_group(name) for name in names}
    by_group = {name: [_describe_row(r) for r in rows] for name, rows in described.items()}
    if output is not RowFormat.text:
        emit([row for rows in by_group.values() for row in rows], DESCRIBE_COLUMNS, output, text=_offsets_text,
             missing="-")
        return
    for name, rows in by_group.items():
        status(ctx, f"Consumer group '{name}' has no active members.")
        emit(rows, DESCRIBE_COLUMNS, output, text=_offsets_text, missing="-")


def _describe_row(r: Any) -> dict[str, Any]:
    return {
        "group": r.group, "topic": r.topic, "partition": r.partition, "currentOffset": r.current_offset,
        "logEndOffset": r.log_end_offset if r.log_end_offset >= 0 else None,
        "lag": r.lag if r.lag >= 0 else None, "consumerId": None, "host": None, "clientId": None,
        "metadata": r.metadata, "commitTimestamp": r.commit_timestamp,
        "pendingProducerId": r.pending_producer_id if r.pending_producer_id >= 0 else None,
    }


def _offsets_text(headers: list[str], rows: list[list[str]]) -> list[str]:
    """kafka-consumer-groups --describe: a blank line, then `%-Ns` columns; group, topic,
    consumer-id and host are max(15, len) wide, PARTITION 10, the offsets and LAG 15."""
    def width(i: int) -> int:
        return max([15, len(headers[i])] + [len(r[i]) for r in rows])

    widths = [width(0), width(1), 10, 15, 15, 15, width(6), width(7)]
    lines = [""]
    for row in [headers, *rows]:
        lines.append(" ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " " + row[8])
    return lines


def _fixed_text(widths: list[int]) -> Any:
    def render(headers: list[str], rows: list[list[str]]) -> list[str]:
        return [""] + [" ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [headers, *rows]]
    return render


# ---- reset-offsets ----------------------------------------------------------------------------------

@app.command("reset-offsets")
def reset_offsets(
    ctx: typer.Context,
    group: GroupOption,
    topic: TopicsOption = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every topic the group has offsets for.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the log start offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the end (the last stable offset).")] = False,
    to_offset: Annotated[int | None, typer.Option(
        "--to-offset", metavar="N", help="Reset to offset N (clamped to the log's range).", show_default=False,
    )] = None,
    shift_by: Annotated[int | None, typer.Option(
        "--shift-by", metavar="N", help="Move the committed offset by N (may be negative; clamped).",
        show_default=False,
    )] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Write the new offsets (default: dry run).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print the plan (the default).")] = False,
    output: OutputOption = RowFormat.text,
) -> None:
    """Plan (and with --execute, write) new committed offsets: GROUP TOPIC PARTITION NEW-OFFSET."""
    specs = [to_earliest, to_latest, to_offset is not None, shift_by is not None]
    if sum(specs) != 1:
        raise CommandError("give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by",
                           exit_code=USAGE)
    if execute and dry_run:
        raise CommandError("--execute and --dry-run exclude each other", exit_code=USAGE)
    if bool(topic) == all_topics:
        raise CommandError("give --topic (repeatable) or --all-topics", exit_code=USAGE)
    wanted = _parse_topics(topic or [])
    from txlog.internal_topics import INTERNAL_TOPICS
    from txlog.topic_partition import TopicPartition

    for name, _ in wanted:
        if name in INTERNAL_TOPICS:
            raise CommandError(f"cannot reset offsets of internal topic {name}")
    with open_store(ctx, read_only=not execute) as store:
        admin = _admin(store)
        committed = admin.list_consumer_group_offsets(group)
        if all_topics:
            if not committed:
                raise CommandError(f"consumer group '{group}' has no committed offsets (name the topics with --topic)")
            tps = sorted(committed)
        else:
            tps = []
            for name, parts in wanted:
                count = store.partition_count(name)
                for p in parts if parts is not None else range(count):
                    if p >= count:
                        raise CommandError(f"topic '{name}' has no partition {p}")
                    tps.append(TopicPartition(name, p))
            tps = sorted(set(tps))
        ends = admin.list_offsets(tps)
        plan = {}
        for tp in tps:
            start, end = store.partition(tp.topic, tp.partition).log_start_offset, ends[tp]
            if to_earliest:
                target = start
            elif to_latest:
                target = end
            elif to_offset is not None:
                target = to_offset
            else:
                current = committed.get(tp)
                if current is None:
                    raise CommandError(f"group '{group}' has no committed offset for {tp.topic}-{tp.partition} "
                                       "to shift from")
                target = current.offset + shift_by
            plan[tp] = min(max(target, start), end)
        if execute:
            admin.alter_consumer_group_offsets(group, plan)
    rows = [{"group": group, "topic": tp.topic, "partition": tp.partition, "newOffset": off}
            for tp, off in plan.items()]
    emit(rows, RESET_COLUMNS, output, text=_fixed_text([30, 30, 10, 15]))
    if execute:
        status(ctx, f"Reset the offsets of group '{group}' for {len(plan)} partition(s).")
    else:
        status(ctx, "Dry run: nothing was written; add --execute to apply these offsets.")


# ---- delete-offsets ---------------------------------------------------------------------------------

@app.command("delete-offsets")
def delete_offsets(
    ctx: typer.Context,
    group: GroupOption,
    topic: Annotated[list[str], typer.Option(
        "--topic", metavar="TOPIC[:P,P...]", help="A topic, optionally with partitions (repeatable).",
        show_default=False,
    )],
    output: OutputOption = RowFormat.text,
) -> None:
    """Delete the group's committed offsets of some topics or partitions: TOPIC PARTITION STATUS."""
    wanted = _parse_topics(topic)
    from txlog.topic_partition import TopicPartition

    with open_store(ctx) as store:
        admin = _admin(store)
        if group not in admin.list_consumer_groups():
            raise _no_group(group)
        committed = set(admin.list_consumer_group_offsets(group))
        tps = []
        for name, parts in wanted:
            have = sorted(tp for tp in committed if tp.topic == name)
            if parts is None:
                if not have:
                    raise CommandError(f"group '{group}' has no committed offsets for topic '{name}'")
                tps.extend(have)
            else:
                for p in parts:
                    if TopicPartition(name, p) not in committed:
                        raise CommandError(f"group '{group}' has no committed offset for {name}-{p}")
                    tps.append(TopicPartition(name, p))
        tps = sorted(set(tps))
        admin.delete_consumer_group_offsets(group, tps)
    rows = [{"topic": tp.topic, "partition": tp.partition, "status": "Successful"} for tp in tps]
    emit(rows, DELETE_COLUMNS, output, text=_fixed_text([30, 15, 15]))
