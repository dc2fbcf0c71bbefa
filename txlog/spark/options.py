"""The options of `spark.read.format("txlog")`, checked once on the driver.

Names and meanings are those of Spark's Kafka source (`subscribe`, `startingOffsets`,
`failOnDataLoss`, ...) so a job written against Kafka runs here with only the format
and path changed; `kafka.`-prefixed spellings of client settings are accepted too.
Everything is parsed into one frozen value before planning, so a bad option fails the
query at analysis time with a message naming the option, never inside a task.

Pure Python: the planner and its tests do not need Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from storage.store import Store
from txlog.errors import IllegalArgumentError
from txlog.fetch import IsolationLevel
from txlog.scan.planning import (
    DEFAULT_MAX_BYTES_PER_PIECE,
    EARLIEST,
    LATEST,
    OffsetRange,
    ReadRequest,
    TopicPartitionKey,
    open_store,
    plan_read,
    select_partitions,
)

#: The name the source is registered under: `spark.read.format(FORMAT)`.
FORMAT = "txlog"

VIEWS = ("records", "batches", "transactions")

#: Input partitions are cut at segment boundaries once a range has this many bytes.
DEFAULT_MAX_BYTES_PER_PARTITION = DEFAULT_MAX_BYTES_PER_PIECE

#: "earliest", "latest", or Spark's JSON {topic: {partition: offset}} with EARLIEST/LATEST allowed.
OffsetSpec = str | dict[str, dict[int, int]]


@dataclass(frozen=True)
class SourceOptions:
    """Every option the source understands, parsed and checked."""

    path: str
    view: str = "records"
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec = "latest"
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    fail_on_data_loss: bool = True
    include_headers: bool = False
    include_transaction_columns: bool = False
    max_offsets_per_trigger: int | None = None

    @property
    def committed_only(self) -> bool:
        return self.isolation is IsolationLevel.READ_COMMITTED

    @property
    def has_topic_selection(self) -> bool:
        return self.subscribe is not None or self.subscribe_pattern is not None or self.assign is not None

    def select_partitions(self, store: Store) -> list[TopicPartitionKey]:
        """The partitions `subscribe`, `subscribePattern` or `assign` name (every topic when none is given)."""
        return select_partitions(store, topics=self.subscribe, pattern=self.subscribe_pattern, assign=self.assign)

    def read_request(self) -> ReadRequest:
        """These options as the shared planner's request (txlog/scan/planning.py): one planner for Spark and scan."""
        return ReadRequest(
            isolation=self.isolation,
            starting_offsets=flat_offsets(self.starting_offsets),
            ending_offsets=flat_offsets(self.ending_offsets),
            fail_on_data_loss=self.fail_on_data_loss,
            min_pieces=self.min_partitions,
            max_records_per_piece=self.max_records_per_partition,
            max_bytes_per_piece=self.max_bytes_per_partition,
            every_partition=True,
            starting_name="startingOffsets",
            ending_name="endingOffsets",
            data_loss_hint="; set failOnDataLoss=false to read from there instead",
        )


def flat_offsets(spec: OffsetSpec) -> str | dict[TopicPartitionKey, int]:
    """Spark's {topic: {partition: offset}} as the planner's {(topic, partition): offset}."""
    if isinstance(spec, str):
        return spec
    return {(topic, p): offset for topic, parts in spec.items() for p, offset in parts.items()}


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The input partitions of a batch query: startingOffsets to endingOffsets of every selected partition."""
    store = open_store(options.path)
    try:
        return plan_read(store, options.select_partitions(store), options.read_request())
    finally:
        store.close()


def parse_options(options: Mapping[str, str], *, streaming: bool | None = False) -> SourceOptions:
    """Check and convert Spark's string options (keys compared case-insensitively, as Spark does).

    `streaming` None checks only what holds for both kinds of query (enough for the schema).
    """
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    path = opts.get("path")
    if not path:
        raise IllegalArgumentError("the txlog source needs a store path: .load('/path/to/store')")
    view = opts.get("view", "records").lower()
    if view not in VIEWS:
        raise IllegalArgumentError(f"option 'view' must be one of {', '.join(VIEWS)}, not {view!r}")
    subscribe, pattern, assign = _topic_selection(opts, required=view == "records")
    starting = _offset_spec(opts, "startingoffsets", "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "endingoffsets", "endingOffsets", "latest")
    if streaming and "endingoffsets" in opts:
        raise IllegalArgumentError("option 'endingOffsets' is for batch queries only; a stream has no end")
    if streaming is False:
        _check_batch_bounds(starting, ending)
    return SourceOptions(
        path=str(path),
        view=view,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        isolation=_isolation(opts),
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        max_bytes_per_partition=_positive_int(opts, "maxbytesperpartition", "maxBytesPerPartition")
        or DEFAULT_MAX_BYTES_PER_PARTITION,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        include_transaction_columns=_bool(opts, "includetransactioncolumns", "includeTransactionColumns", False),
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
    )


def _topic_selection(opts: dict[str, str], *, required: bool):
    """Exactly one of subscribe / subscribePattern / assign, as Spark's Kafka source demands."""
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) > 1 or (required and not given):
        raise IllegalArgumentError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given"
            + (f", not {len(given)}" if given else "")
        )
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise IllegalArgumentError("option 'subscribe' names no topic")
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise IllegalArgumentError(f"option 'subscribePattern' is not a valid pattern: {exc}") from None
    if "assign" in opts:
        assign = _assign(opts["assign"])
    return subscribe, pattern, assign


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    """{"topicA":[0,1],"topicB":[2]}: Spark's `assign` JSON."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (
        not isinstance(value, dict)
        or not value
        or not all(
            isinstance(parts, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            for parts in value.values()
        )
    ):
        raise IllegalArgumentError(f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, not {text!r}")
    return {str(topic): tuple(sorted(set(parts))) for topic, parts in value.items()}


def _offset_spec(opts: dict[str, str], key: str, name: str, default: str) -> OffsetSpec:
    text = opts.get(key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(parts, dict) for parts in value.values()):
        raise IllegalArgumentError(
            f"option '{name}' must be 'earliest', 'latest' or JSON like {{\"topicA\":{{\"0\":23,\"1\":-2}}}}, "
            f"not {text!r}"
        )
    spec: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        spec[str(topic)] = {}
        for partition, offset in parts.items():
            if (
                not str(partition).lstrip("-").isdigit()
                or int(partition) < 0
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or offset < EARLIEST
            ):
                raise IllegalArgumentError(
                    f"option '{name}': partition {partition!r} of {topic!r} needs an offset ≥ 0, "
                    f"-2 (earliest) or -1 (latest), not {offset!r}"
                )
            spec[str(topic)][int(partition)] = offset
    return spec


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """A batch query may not start at 'latest' nor end at 'earliest' (Spark's Kafka rule)."""
    if starting == "latest" or (isinstance(starting, dict) and _uses(starting, LATEST)):
        raise IllegalArgumentError("option 'startingOffsets' may not be 'latest' (-1) for a batch query")
    if ending == "earliest" or (isinstance(ending, dict) and _uses(ending, EARLIEST)):
        raise IllegalArgumentError("option 'endingOffsets' may not be 'earliest' (-2) for a batch query")


def _uses(spec: dict[str, dict[int, int]], sentinel: int) -> bool:
    return any(offset == sentinel for parts in spec.values() for offset in parts.values())


def _isolation(opts: dict[str, str]) -> IsolationLevel:
    plain, prefixed = opts.get("isolation.level"), opts.get("kafka.isolation.level")
    if plain is not None and prefixed is not None and plain != prefixed:
        raise IllegalArgumentError("options 'isolation.level' and 'kafka.isolation.level' disagree")
    name, value = ("kafka.isolation.level", prefixed) if plain is None else ("isolation.level", plain)
    if value is None:
        return IsolationLevel.READ_COMMITTED
    try:
        return IsolationLevel.parse(value.strip().lower())
    except IllegalArgumentError:
        choices = " or ".join(level.value for level in IsolationLevel)
        raise IllegalArgumentError(f"option '{name}' must be {choices}, not {value!r}") from None


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    text = str(opts[key]).strip()
    if not text.isdigit() or int(text) < 1:
        raise IllegalArgumentError(f"option '{name}' must be a positive integer, not {opts[key]!r}")
    return int(text)


def _bool(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    if key not in opts:
        return default
    text = str(opts[key]).strip().lower()
    if text not in ("true", "false"):
        raise IllegalArgumentError(f"option '{name}' must be true or false, not {opts[key]!r}")
    return text == "true"
