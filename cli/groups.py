"""`txlog groups ...`: list, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).

Kafka's modes (`--list`, `--describe`, ...) are verbs here; options and column names are
Kafka's. `describe` has Kafka's three views: offsets (the default: per partition, with the
member that owns it), `--members` and `--state`. LOG-END-OFFSET is the high watermark and LAG
is measured against it, as kafka-consumer-groups.sh does: an open transaction's records count,
and a read_committed consumer's lag stays above 0 until that transaction ends. There is no
broker, so COORDINATOR names the `__consumer_offsets` partition that holds the group.

`list` and `describe` open the store read-only (members whose session expired are left
out, not removed); `reset-offsets` writes only with `--execute` (the default is Kafka's dry
run, which prints the plan and opens read-only) and refuses a group with live members, as
Kafka does; `delete-offsets` writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import USAGE, CommandError, complete_group_ids, open_store
from cli.output import ROW_FORMATS, ROW_FORMATS_HELP, OutputFormat, TextLayout, emit, output_option, status

if TYPE_CHECKING:  # the CLI imports storage and txlog only when a command runs
    from storage.store import Store
    from txlog.clients.admin import Admin, GroupOffsetRow
    from txlog.coordinator.group_coordinator import GroupDescription
    from txlog.topic_partition import TopicPartition

app = typer.Typer(
    help="List, describe, reset and delete consumer group offsets (kafka-consumer-groups.sh).",
    short_help="List, describe, reset and delete consumer group offsets.",
    no_args_is_help=True,
)

if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    OutputOption = OutputFormat
else:
    OutputOption = output_option(*ROW_FORMATS, help=ROW_FORMATS_HELP)
GroupOption = Annotated[
    str,
    typer.Option(
        "--group",
        "-g",
        metavar="GROUP",
        help="The consumer group.",
        show_default=False,
        autocompletion=complete_group_ids,
    ),
]
TopicsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--topic",
        metavar="TOPIC[:P,P...]",
        help="A topic, optionally with partitions, e.g. orders:0,2 (repeatable).",
        show_default=False,
    ),
]

DESCRIBE_COLUMNS = (
    ("GROUP", "group"),
    ("TOPIC", "topic"),
    ("PARTITION", "partition"),
    ("CURRENT-OFFSET", "currentOffset"),
    ("LOG-END-OFFSET", "logEndOffset"),
    ("LAG", "lag"),
    ("CONSUMER-ID", "consumerId"),
    ("HOST", "host"),
    ("CLIENT-ID", "clientId"),
)
RESET_COLUMNS = (("GROUP", "group"), ("TOPIC", "topic"), ("PARTITION", "partition"), ("NEW-OFFSET", "newOffset"))
DELETE_COLUMNS = (("TOPIC", "topic"), ("PARTITION", "partition"), ("STATUS", "status"))
LIST_COLUMNS = (("GROUP", "group"), ("STATE", "state"))
LIST_TYPE_COLUMNS = (("GROUP", "group"), ("TYPE", "type"), ("STATE", "state"))
MEMBERS_COLUMNS = (
    ("GROUP", "group"),
    ("CONSUMER-ID", "consumerId"),
    ("GROUP-INSTANCE-ID", "groupInstanceId"),
    ("HOST", "host"),
    ("CLIENT-ID", "clientId"),
    ("#PARTITIONS", "partitions"),
)
MEMBERS_VERBOSE_COLUMNS = MEMBERS_COLUMNS + (
    ("CURRENT-EPOCH", "currentEpoch"),
    ("CURRENT-ASSIGNMENT", "currentAssignment"),
    ("TARGET-EPOCH", "targetEpoch"),
    ("TARGET-ASSIGNMENT", "targetAssignment"),
)
STATE_COLUMNS = (
    ("GROUP", "group"),
    ("COORDINATOR (ID)", "coordinator"),
    ("ASSIGNMENT-STRATEGY", "assignmentStrategy"),
    ("STATE", "state"),
    ("#MEMBERS", "members"),
)
STATE_VERBOSE_COLUMNS = STATE_COLUMNS[:4] + (
    ("GROUP-EPOCH", "groupEpoch"),
    ("TARGET-ASSIGNMENT-EPOCH", "targetEpoch"),
    ("#MEMBERS", "members"),
)


def _admin(store: Store) -> Admin:
    from txlog.clients.admin import Admin

    return Admin(store)


def _no_group(group: str) -> CommandError:
    return CommandError(f"consumer group '{group}' does not exist")


def _parse_topics(values: list[str]) -> list[tuple[str, list[int] | None]]:
    """`t` or `t:0,1,2` (kafka-consumer-groups' --topic syntax); None means every partition."""
    out: list[tuple[str, list[int] | None]] = []
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
    type_: Annotated[
        bool, typer.Option("--type", help="Show each group's type, Classic or Consumer (Kafka's --list --type).")
    ] = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Every group with committed offsets or members, one per line (with --state/--type: GROUP [TYPE] [STATE])."""
    with open_store(ctx, read_only=True) as store:  # no store: 'no store at ...', not an empty list
        listings = _admin(store).list_consumer_group_listings()
    rows = [{"group": n, "type": g.group_type.value, "state": g.state.kafka_name} for n, g in listings.items()]
    columns = LIST_TYPE_COLUMNS if type_ else LIST_COLUMNS
    if not type_:
        rows = [{k: v for k, v in row.items() if k != "type"} for row in rows]
    shown = {name for name, wanted in (("TYPE", type_), ("STATE", state)) if wanted}
    text = (lambda h, r: _list_text(h, r, shown)) if state or type_ else (lambda _h, rows: [r[0] for r in rows])
    emit(rows, columns, output, text=text)


def _list_text(headers: list[str], rows: list[list[str]], shown: set[str]) -> list[str]:
    """kafka-consumer-groups --list --type/--state (printGroupInfo): GROUP as `%-Ns`, N the longest
    id (at least 15) plus 10, then each shown column as ` %-20s`; no blank line first."""
    width = max([15] + [len(r[0]) for r in rows]) + 10
    keep = [i for i, h in enumerate(headers) if i and h in shown]

    def line(cells: list[str]) -> str:
        return cells[0].ljust(width) + "".join(" " + cells[i].ljust(20) for i in keep)

    return [line(headers)] + [line(r) for r in rows]


# ---- describe ---------------------------------------------------------------------------------------


@app.command("describe")
def describe(
    ctx: typer.Context,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            "-g",
            metavar="GROUP",
            help="A group to describe (repeatable).",
            show_default=False,
            autocompletion=complete_group_ids,
        ),
    ] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Describe every group.")] = False,
    members: Annotated[
        bool, typer.Option("--members", help="One row per member: id, host, client, partitions.")
    ] = False,
    state: Annotated[bool, typer.Option("--state", help="One row per group: assignor, state, member count.")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="With --members: epochs and assignments; with --state: the group epochs.",
        ),
    ] = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Per partition (default), per member (--members) or per group (--state), as kafka-consumer-groups.

    \b
    Examples:
      txlog groups describe --group upper
      txlog groups describe --group upper --members --verbose
      txlog groups describe --all-groups --state --output json
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
        emit(rows, STATE_VERBOSE_COLUMNS if verbose else STATE_COLUMNS, output, text=_state_text, missing="-")
    else:
        _print_offsets(ctx, described, output)


def _print_offsets(ctx: typer.Context, described: dict[str, list[GroupOffsetRow]], output: OutputFormat) -> None:
    by_group = {name: [_describe_row(r) for r in rows] for name, rows in described.items()}
    if output is not OutputFormat.text:
        emit(
            [row for rows in by_group.values() for row in rows],
            DESCRIBE_COLUMNS,
            output,
            text=_offsets_text,
            missing="-",
        )
        return
    for name, rows in by_group.items():
        if not any(r["consumerId"] for r in rows):
            status(ctx, f"Consumer group '{name}' has no active members.")
        emit(rows, DESCRIBE_COLUMNS, output, text=_offsets_text, missing="-")


def _print_members(
    ctx: typer.Context, views: dict[str, GroupDescription | None], verbose: bool, output: OutputFormat
) -> None:
    columns = MEMBERS_VERBOSE_COLUMNS if verbose else MEMBERS_COLUMNS
    rows = []
    for name, view in views.items():
        if view is None or not view.members:
            if output is OutputFormat.text:
                status(ctx, f"Consumer group '{name}' has no active members.")
            continue
        for m in view.members:
            rows.append(
                {
                    "group": name,
                    "consumerId": m.member_id,
                    "groupInstanceId": m.instance_id,
                    "host": m.client_host,
                    "clientId": m.client_id,
                    "partitions": len(m.assignment),
                    "currentEpoch": m.member_epoch,
                    "currentAssignment": _assignment_text(m.assignment),
                    "targetEpoch": view.assignment_epoch,
                    "targetAssignment": _assignment_text(m.target),
                }
            )
    if output is not OutputFormat.text:
        emit(rows, columns, output, text=_auto_text, missing="-")
        return
    # Kafka prints each group's table on its own, with its header even when it has no members.
    for name in views:
        mine = [r for r in rows if r["group"] == name]
        emit(mine, columns, output, text=partial(_members_text, mine, verbose), missing="-")


def _members_text(
    rows: list[dict[str, Any]], verbose: bool, _headers: object = None, _cells: object = None
) -> list[str]:
    """kafka-consumer-groups --describe --members [--verbose] (printMembers) for one group: a blank
    line, then `%-Ns` columns GROUP, CONSUMER-ID, [GROUP-INSTANCE-ID, only when a member has one],
    HOST and CLIENT-ID as wide as their widest cell (at least 15; 17 for the instance id) and
    #PARTITIONS `%-15s `; --verbose adds CURRENT-EPOCH `%-15s`, CURRENT-ASSIGNMENT (at least 20),
    TARGET-EPOCH `%-15s` and TARGET-ASSIGNMENT (at least 20). Cells are padded, the last one too."""

    def text(value: object) -> str:
        return "-" if value is None else str(value)

    instance = any(r["groupInstanceId"] for r in rows)
    keys = ["group", "consumerId", "groupInstanceId", "host", "clientId"]
    headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID"]
    minimum = [15, 15, 17, 15, 15]
    if not instance:
        del keys[2], headers[2], minimum[2]
    widths = [max([w] + [len(r[k] or "") for r in rows]) for k, w in zip(keys, minimum, strict=True)]

    def line(cells: list[str], extra: list[str]) -> str:
        out = "".join(c.ljust(w) + " " for c, w in zip(cells, widths, strict=True)) + extra[0].ljust(15) + " "
        if verbose:
            current = max([20] + [len(r["currentAssignment"]) for r in rows])
            target = max([20] + [len(r["targetAssignment"]) for r in rows])
            out += " ".join(c.ljust(w) for c, w in zip(extra[1:], [15, current, 15, target], strict=True))
        return out

    lines = [
        "",
        line(headers, ["#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]),
    ]
    for r in rows:
        extra = [str(r["partitions"]), text(r["currentEpoch"]), r["currentAssignment"]]
        extra += [text(r["targetEpoch"]), r["targetAssignment"]]
        lines.append(line([r[k] or "" for k in keys], extra))
    return lines


def _state_row(name: str, view: GroupDescription | None, coordinator: int) -> dict[str, Any]:
    from storage.topic_name import CONSUMER_OFFSETS_TOPIC
    from txlog.coordinator.group_coordinator import GroupState

    return {
        "group": name,
        "coordinator": f"{CONSUMER_OFFSETS_TOPIC}-{coordinator}",
        "assignmentStrategy": (view.assignor or None) if view else None,
        "state": (view.state if view else GroupState.EMPTY).kafka_name,
        "members": len(view.members) if view else 0,
        "groupEpoch": view.group_epoch if view else None,
        "targetEpoch": view.assignment_epoch if view else None,
    }


def _state_text(headers: list[str], rows: list[list[str]]) -> list[str]:
    """kafka-consumer-groups --describe --state [--verbose] (printStates): per group, a blank line,
    the header and its row; GROUP is max(15, len) wide, COORDINATOR (ID) max(25, len), ASSIGNMENT-
    STRATEGY and STATE 20, GROUP-EPOCH 15 and TARGET-ASSIGNMENT-EPOCH 25; #MEMBERS is last, unpadded."""
    fixed = {"ASSIGNMENT-STRATEGY": 20, "STATE": 20, "GROUP-EPOCH": 15, "TARGET-ASSIGNMENT-EPOCH": 25}
    lines = []
    for row in rows:
        widths = [max(15, len(row[0])), max(25, len(row[1]))] + [fixed[h] for h in headers[2:-1]]

        lines += ["", _padded(headers, widths), _padded(row, widths)]
    return lines


def _padded(cells: list[str], widths: list[int]) -> str:
    """Java's `%-Ns` for every cell but the last, which `%s` prints as it is."""
    return " ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True)) + " " + cells[-1]


def _assignment_text(partitions: Iterable[TopicPartition]) -> str:
    """Kafka's `topic:0,1;other:2` form (getAssignmentString: each topic's partitions sorted, the
    topic strings sorted); `-` for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()))


def _auto_text(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A blank line, then columns as wide as their widest cell (at least 15)."""
    widths = [max([15, len(headers[i])] + [len(r[i]) for r in rows]) for i in range(len(headers))]
    lines = [""]
    for row in [headers, *rows]:
        lines.append(" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _describe_row(r: GroupOffsetRow) -> dict[str, Any]:
    return {
        "group": r.group,
        "topic": r.topic,
        "partition": r.partition,
        "currentOffset": r.current_offset if r.current_offset >= 0 else None,
        "logEndOffset": r.log_end_offset if r.log_end_offset >= 0 else None,
        "lag": r.lag if r.lag >= 0 else None,
        "consumerId": r.consumer_id,
        "host": r.host,
        "clientId": r.client_id,
        "metadata": r.metadata,
        "commitTimestamp": r.commit_timestamp,
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
        lines.append(" ".join(cell.ljust(w) for cell, w in zip(row[:8], widths, strict=True)) + " " + row[8])
    return lines


def _fixed_text(widths: list[int]) -> TextLayout:
    def render(headers: list[str], rows: list[list[str]]) -> list[str]:
        return [""] + [" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [headers, *rows]]

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
    to_offset: Annotated[
        int | None,
        typer.Option(
            "--to-offset",
            metavar="N",
            help="Reset to offset N (clamped to the log's range).",
            show_default=False,
        ),
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option(
            "--shift-by",
            metavar="N",
            help="Move the committed offset by N (may be negative; clamped).",
            show_default=False,
        ),
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option(
            "--to-datetime",
            metavar="YYYY-MM-DDTHH:mm:SS.sss",
            help="Reset to the first record at or after this time (local time unless it ends in Z or +hh:mm; "
            "the end if no record is that recent).",
            show_default=False,
        ),
    ] = None,
    by_duration: Annotated[
        str | None,
        typer.Option(
            "--by-duration",
            metavar="PnDTnHnMnS",
            help="Reset to the first record at or after now minus this ISO-8601 duration, e.g. PT30M, P1DT12H.",
            show_default=False,
        ),
    ] = None,
    to_current: Annotated[
        bool,
        typer.Option(
            "--to-current",
            help="Reset to the committed offset as it is (the end where there is none).",
        ),
    ] = False,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from-file",
            metavar="CSV",
            help="Reset each partition to the offset a CSV file gives: lines 'topic,partition,offset' "
            "(what --export prints); the file names the partitions.",
            show_default=False,
        ),
    ] = None,
    export: Annotated[
        bool,
        typer.Option(
            "--export",
            help="Print the plan as CSV 'topic,partition,offset' lines, for --from-file.",
        ),
    ] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Write the new offsets (default: dry run).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print the plan (the default).")] = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Plan (and with --execute, write) new committed offsets: GROUP TOPIC PARTITION NEW-OFFSET."""
    specs = {
        "--to-earliest": to_earliest,
        "--to-latest": to_latest,
        "--to-offset": to_offset is not None,
        "--shift-by": shift_by is not None,
        "--to-datetime": to_datetime is not None,
        "--by-duration": by_duration is not None,
        "--to-current": to_current,
        "--from-file": from_file is not None,
    }
    if sum(specs.values()) != 1:
        raise CommandError(f"give exactly one of {', '.join(specs)}", exit_code=USAGE)
    if execute and dry_run:
        raise CommandError("--execute and --dry-run exclude each other", exit_code=USAGE)
    if from_file is not None:
        if topic or all_topics:
            raise CommandError("--from-file names its partitions: drop --topic/--all-topics", exit_code=USAGE)
    elif bool(topic) == all_topics:
        raise CommandError("give --topic (repeatable) or --all-topics", exit_code=USAGE)
    from storage.topic_name import INTERNAL_TOPICS
    from txlog.clients.admin import OffsetReset

    if from_file is not None:
        file_offsets = _read_reset_plan(from_file, group)
        reset = OffsetReset.from_offsets(file_offsets)
        wanted: list[tuple[str, list[int] | None]] = _by_topic(file_offsets)
    else:
        wanted = _parse_topics(topic or [])
        reset = (
            OffsetReset.to_earliest()
            if to_earliest
            else OffsetReset.to_latest()
            if to_latest
            else OffsetReset.to_offset(to_offset)
            if to_offset is not None
            else OffsetReset.shift_by(shift_by)
            if shift_by is not None
            else OffsetReset.to_datetime(parse_datetime(to_datetime))
            if to_datetime is not None
            else OffsetReset.by_duration(parse_duration(by_duration))
            if by_duration is not None
            else OffsetReset.to_current()
        )
    for name, _ in wanted:
        if name in INTERNAL_TOPICS:
            raise CommandError(f"cannot reset offsets of internal topic {name}")
    with open_store(ctx, read_only=not execute) as store:
        admin = _admin(store)
        plan = admin.plan_offset_reset(group, _reset_partitions(store, admin, group, wanted, all_topics), reset)
        if execute:
            admin.alter_consumer_group_offsets(group, plan)
    if export:  # kafka-consumer-groups --export: the CSV --from-file reads, no header
        typer.echo("".join(f"{tp.topic},{tp.partition},{off}\n" for tp, off in plan.items()), nl=False)
    else:
        rows = [
            {"group": group, "topic": tp.topic, "partition": tp.partition, "newOffset": off} for tp, off in plan.items()
        ]
        emit(rows, RESET_COLUMNS, output, text=_fixed_text([30, 30, 10, 15]))
    if execute:
        status(ctx, f"Reset the offsets of group '{group}' for {len(plan)} partition{'s' * (len(plan) != 1)}.")
    else:
        status(ctx, "Dry run: nothing was written; add --execute to apply these offsets.")


def parse_datetime(text: str) -> int:
    """kafka-consumer-groups' --to-datetime ('YYYY-MM-DDTHH:mm:SS.sss', fraction optional) in epoch ms.

    As Kafka's Utils.getDateTime: a time without a zone (Z, +hh:mm, -hh:mm) is local time.
    """
    from datetime import datetime

    if "T" not in text:
        raise typer.BadParameter(f"'{text}' is not YYYY-MM-DDTHH:mm:SS.sss (no 'T')", param_hint="'--to-datetime'")
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"'{text}' is not YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]", param_hint="'--to-datetime'"
        ) from None
    if value.tzinfo is None:
        value = value.astimezone()  # local time, as Kafka reads a time without a zone
    return int(value.timestamp() * 1000)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
    r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS, each part optional,
    signs allowed), in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None or text.upper().endswith("T") or not any(match.group(i) for i in (2, 3, 4, 5)):
        raise typer.BadParameter(
            f"'{text}' is not an ISO-8601 duration PnDTnHnMnS (e.g. PT30M, P1DT12H)", param_hint="'--by-duration'"
        )
    sign, days, hours, minutes, seconds, fraction = match.groups()
    seconds_ms = int(seconds or 0) * 1000
    if fraction:
        millis = int((fraction + "000")[:3])
        seconds_ms += -millis if (seconds or "").startswith("-") else millis
    total = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + seconds_ms
    return -total if sign == "-" else total


def _read_reset_plan(path: str, group: str) -> dict[TopicPartition, int]:
    """kafka-consumer-groups --from-file: 'topic,partition,offset' lines (or 'group,topic,partition,offset'
    with this group); blank lines skipped. Any other line is one usage error naming file and line."""
    from storage.errors import InvalidTopicError
    from storage.topic_name import validate_topic_name
    from txlog.topic_partition import TopicPartition

    with open(path, "rb") as f:
        data = f.read()
    offsets: dict[TopicPartition, int] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            if fields[0] != group:
                raise CommandError(
                    f"{path}, line {number}: the plan is for group '{fields[0]}', not '{group}'", exit_code=USAGE
                )
            fields = fields[1:]
        try:
            name, partition, offset = fields[0], int(fields[1]), int(fields[2])
            if len(fields) != 3 or partition < 0 or offset < 0:
                raise ValueError
            validate_topic_name(name, allow_internal=True)  # internal topics are refused below, by name
        except (ValueError, IndexError, InvalidTopicError):
            raise CommandError(
                f"{path}, line {number}: expected 'topic,partition,offset', got {line[:80]!r}", exit_code=USAGE
            ) from None
        tp = TopicPartition(name, partition)
        if tp in offsets and offsets[tp] != offset:
            raise CommandError(f"{path}, line {number}: {name}-{partition} is given twice", exit_code=USAGE)
        offsets[tp] = offset
    if not offsets:
        raise CommandError(f"{path} holds no 'topic,partition,offset' line", exit_code=USAGE)
    return offsets


def _by_topic(offsets: dict[TopicPartition, int]) -> list[tuple[str, list[int] | None]]:
    """The plan's partitions as _parse_topics gives them: (topic, [partitions])."""
    topics: dict[str, list[int]] = {}
    for tp in offsets:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [(name, sorted(parts)) for name, parts in sorted(topics.items())]


def _reset_partitions(
    store: Store, admin: Admin, group: str, wanted: list[tuple[str, list[int] | None]], all_topics: bool
) -> Iterator[TopicPartition]:
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
    topic: Annotated[
        list[str],
        typer.Option(
            "--topic",
            metavar="TOPIC[:P,P...]",
            help="A topic, optionally with partitions (repeatable).",
            show_default=False,
        ),
    ],
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
