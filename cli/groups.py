"""`txlog groups ...`: list, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).

Kafka's modes (`--list`, `--describe`, ...) are verbs here; options and column names are
Kafka's. `describe` has Kafka's three views: offsets (the default: per partition, with the
member that owns it), `--members` and `--state`. LOG-END-OFFSET and LAG are measured
against the last stable offset, as a read_committed consumer sees the log. There is no
broker, so COORDINATOR names the `__consumer_offsets` partition that holds the group.

`list` and `describe` open the store read-only (members whose session expired are left
out, not removed); `reset-offsets` writes only with `--execute` (the default is Kafka's dry
run, which prints the plan and opens read-only) and refuses a group with live members, as
Kafka does; `delete-offsets` writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import typer

from cli.context import USAGE, CommandError, open_store, store_exists
from cli.output import ROW_FORMATS, ROW_FORMATS_HELP, OutputFormat, emit, output_option, status

app = typer.Typer(
    help="List, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).",
    no_args_is_help=True,
)

OutputOption = output_option(*ROW_FORMATS, help=ROW_FORMATS_HELP)
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
LIST_COLUMNS = (("GROUP", "group"), ("STATE", "state"))
MEMBERS_COLUMNS = (
    ("GROUP", "group"), ("CONSUMER-ID", "consumerId"), ("GROUP-INSTANCE-ID", "groupInstanceId"), ("HOST", "host"),
    ("CLIENT-ID", "clientId"), ("#PARTITIONS", "partitions"),
)
MEMBERS_VERBOSE_COLUMNS = MEMBERS_COLUMNS + (
    ("CURRENT-EPOCH", "currentEpoch"), ("CURRENT-ASSIGNMENT", "currentAssignment"),
    ("TARGET-EPOCH", "targetEpoch"), ("TARGET-ASSIGNMENT", "targetAssignment"),
)
STATE_COLUMNS = (
    ("GROUP", "group"), ("COORDINATOR (ID)", "coordinator"), ("ASSIGNMENT-STRATEGY", "assignmentStrategy"),
    ("STATE", "state"), ("#MEMBERS", "members"),
)
STATE_VERBOSE_COLUMNS = STATE_COLUMNS + (("GROUP-EPOCH", "groupEpoch"), ("TARGET-ASSIGNMENT-EPOCH", "targetEpoch"))


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
def list_(
    ctx: typer.Context,
    state: Annotated[bool, typer.Option("--state", help="Show each group's state (Kafka's --list --state).")] = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Every group with committed offsets or members, one per line (with --state: GROUP STATE)."""
    states: dict[str, Any] = {}
    if store_exists(ctx):
        with open_store(ctx, read_only=True) as store:
            states = _admin(store).list_consumer_group_states()
    rows = [{"group": n, "state": st.kafka_name} for n, st in states.items()]
    emit(rows, LIST_COLUMNS, output,
         text=(lambda h, r: _auto_text(h, r)[1:]) if state else (lambda _h, rows: [r[0] for r in rows]))


# ---- describe ---------------------------------------------------------------------------------------

@app.command("describe")
def describe(
    ctx: typer.Context,
    group: Annotated[list[str] | None, typer.Option(
        "--group", metavar="GROUP", help="A group to describe (repeatable).", show_default=False,
    )] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Describe every group.")] = False,
    members: Annotated[bool, typer.Option("--members", help="One row per member: id, host, client, partitions.")] = False,
    state: Annotated[bool, typer.Option("--state", help="One row per group: assignor, state, member count.")] = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", help="With --members: epochs and assignments; with --state: the group epochs.",
    )] = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Per partition (default), per member (--members) or per group (--state), as kafka-consumer-groups.

    \b
    Examples:
      txlog groups describe --group upper
      txlog groups describe --group upper --members --verbose
      txlog groups describe --all-groups --state -o json
    """
    if bool(group) == all_groups:
        raise CommandError("give --group GROUP (repeatable) or --all-groups", exit_code=USAGE)
    if members and state:
        raise CommandError("--members and --state exclude each other", exit_code=USAGE)
    with open_store(ctx, read_only=True) as store:
        admin = _admin(store)
        known = admin.list_consumer_groups()
        names = known if all_groups else list(dict.fromkeys(group or []))
        for name in names:
            if name not in known:
                raise _no_group(name)
        if members or state:
            views = {name: admin.describe_consumer_group_members(name) for name in names}
            coordinators = {name: admin.groups.partition_for(name) for name in names}
        else:
            described = {name: admin.describe_consumer_group(name) for name in names}
    if members:
        _print_members(ctx, views, verbose, output)
    elif state:
        rows = [_state_row(name, view, coordinators[name]) for name, view in views.items()]
        emit(rows, STATE_VERBOSE_COLUMNS if verbose else STATE_COLUMNS, output, text=_auto_text, missing="-")
    else:
        _print_offsets(ctx, described, output)


def _print_offsets(ctx: typer.Context, described: dict[str, list[Any]], output: OutputFormat) -> None:
    by_group = {name: [_describe_row(r) for r in rows] for name, rows in described.items()}
    if output is not OutputFormat.text:
        emit([row for rows in by_group.values() for row in rows], DESCRIBE_COLUMNS, output, text=_offsets_text,
             missing="-")
        return
    for name, rows in by_group.items():
        if not any(r["consumerId"] for r in rows):
            status(ctx, f"Consumer group '{name}' has no active members.")
        emit(rows, DESCRIBE_COLUMNS, output, text=_offsets_text, missing="-")


def _print_members(ctx: typer.Context, views: dict[str, Any], verbose: bool, output: OutputFormat) -> None:
    columns = MEMBERS_VERBOSE_COLUMNS if verbose else MEMBERS_COLUMNS
    rows = []
    for name, view in views.items():
        if view is None or not view.members:
            if output is OutputFormat.text:
                status(ctx, f"Consumer group '{name}' has no active members.")
            continue
        for m in view.members:
            rows.append({
                "group": name, "consumerId": m.member_id, "groupInstanceId": m.instance_id, "host": m.client_host,
                "clientId": m.client_id, "partitions": len(m.assignment), "currentEpoch": m.member_epoch,
                "currentAssignment": _assignment_text(m.assignment), "targetEpoch": view.group_epoch,
                "targetAssignment": _assignment_text(m.target),
            })
    if rows or output is not OutputFormat.text:
        emit(rows, columns, output, text=_auto_text, missing="-")


def _state_row(name: str, view: Any, coordinator: int) -> dict[str, Any]:
    from txlog.group_coordinator import GroupState
    from txlog.internal_topics import CONSUMER_OFFSETS_TOPIC

    return {
        "group": name, "coordinator": f"{CONSUMER_OFFSETS_TOPIC}-{coordinator}",
        "assignmentStrategy": view.assignor if view else None,
        "state": (view.state if view else GroupState.EMPTY).kafka_name,
        "members": len(view.members) if view else 0, "groupEpoch": view.group_epoch if view else None,
        "targetEpoch": view.group_epoch if view else None,
    }


def _assignment_text(partitions: Any) -> str:
    """Kafka's `topic(0,1);other(2)` form; `-` for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return ";".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))


def _auto_text(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Kafka's describe layouts: a blank line, then columns as wide as their widest cell (at least 15)."""
    widths = [max([15, len(headers[i])] + [len(r[i]) for r in rows]) for i in range(len(headers))]
    lines = [""]
    for row in [headers, *rows]:
        lines.append(" ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return lines


def _describe_row(r: Any) -> dict[str, Any]:
    return {
        "group": r.group, "topic": r.topic, "partition": r.partition,
        "currentOffset": r.current_offset if r.current_offset >= 0 else None,
        "logEndOffset": r.log_end_offset if r.log_end_offset >= 0 else None,
        "lag": r.lag if r.lag >= 0 else None, "consumerId": r.consumer_id, "host": r.host, "clientId": r.client_id,
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
    output: OutputOption = OutputFormat.text,
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
    from txlog.admin import OffsetReset
    from txlog.internal_topics import INTERNAL_TOPICS

    for name, _ in wanted:
        if name in INTERNAL_TOPICS:
            raise CommandError(f"cannot reset offsets of internal topic {name}")
    reset = (OffsetReset.to_earliest() if to_earliest else OffsetReset.to_latest() if to_latest
             else OffsetReset.to_offset(to_offset) if to_offset is not None else OffsetReset.shift_by(shift_by or 0))
    with open_store(ctx, read_only=not execute) as store:
        admin = _admin(store)
        plan = admin.plan_offset_reset(group, _reset_partitions(store, admin, group, wanted, all_topics), reset)
        if execute:
            admin.alter_consumer_group_offsets(group, plan)
    rows = [{"group": group, "topic": tp.topic, "partition": tp.partition, "newOffset": off}
            for tp, off in plan.items()]
    emit(rows, RESET_COLUMNS, output, text=_fixed_text([30, 30, 10, 15]))
    if execute:
        status(ctx, f"Reset the offsets of group '{group}' for {len(plan)} partition(s).")
    else:
        status(ctx, "Dry run: nothing was written; add --execute to apply these offsets.")


def _reset_partitions(store: Any, admin: Any, group: str, wanted: list[tuple[str, list[int] | None]],
                      all_topics: bool) -> Iterator[Any]:
    """The partitions --topic/--all-topics name, each checked to exist, sorted.

    A generator on purpose: Admin.plan_offset_reset refuses a live group before it asks for
    the partitions, so that error comes first, as Kafka's tool reports it.
    """
    from txlog.topic_partition import TopicPartition

    if all_topics:
        committed = admin.list_consumer_group_offsets(group)
        if not committed:
            raise CommandError(f"consumer group '{group}' has no committed offsets (name the topics with --topic)")
        yield from sorted(committed)
        return
    tps = []
    for name, parts in wanted:
        present = store.partitions(name)
        for p in parts if parts is not None else present:
            if p not in present:
                raise CommandError(f"topic '{name}' has no partition {p}")
            tps.append(TopicPartition(name, p))
    yield from sorted(set(tps))


# ---- delete-offsets ---------------------------------------------------------------------------------

@app.command("delete-offsets")
def delete_offsets(
    ctx: typer.Context,
    group: GroupOption,
    topic: Annotated[list[str], typer.Option(
        "--topic", metavar="TOPIC[:P,P...]", help="A topic, optionally with partitions (repeatable).",
        show_default=False,
    )],
    output: OutputOption = OutputFormat.text,
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
