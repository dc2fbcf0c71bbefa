"""The options of `spark.read.format("txlog")`, checked once on the driver.

Names and meanings are those of Spark's Kafka source (`subscribe`, `startingOffsets`,
`startingTimestamp`, `failOnDataLoss`, ...) so a job written against Kafka runs here with
only the format and path changed. Everything is parsed into one frozen value before
planning, so a bad option fails the query at analysis time with a message naming the
option, never inside a task. An option this reader does not know is refused, not ignored
(a misspelled `startingOffset` would otherwise read everything); see `_check_names` for the
few that are accepted without effect and why (docs/spark.md "Options").

Pure Python: the planner and its tests do not need Spark.
"""

from __future__ import annotations

import difflib
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
    NO_MATCH_ERROR,
    NO_MATCH_LATEST,
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

#: startingTimestamp (one epoch-ms value for every partition) or startingOffsetsByTimestamp's
#: {topic: {partition: timestamp}}.
TimestampSpec = int | dict[str, dict[int, int]]

#: Spark's default maxTriggerDelay (KafkaSourceProvider.DEFAULT_MAX_TRIGGER_DELAY): 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

#: Every option the reader takes, spelled as Spark's Kafka source spells them (compared ignoring
#: case, as Spark compares them). `path` is what Spark puts there from load(path).
OPTIONS = (
    "path",
    "view",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "isolation.level",
    "kafka.isolation.level",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxBytesPerPartition",
    "includeHeaders",
    "includeTransactionColumns",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
)

#: Spark Kafka source options that tune its network consumer (group ids, offset-fetch retries,
#: poll timeouts): accepted so a Kafka job runs unchanged, and without effect, as there is no
#: consumer and no broker to retry against: the reader reads the segment files.
CONSUMER_ONLY_OPTIONS = (
    "groupIdPrefix",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "kafkaConsumer.pollTimeoutMs",
)

#: `kafka.` consumer settings Spark's Kafka source itself refuses, with its reasons.
REFUSED_KAFKA_OPTIONS = {
    "kafka.auto.offset.reset": "set startingOffsets to 'earliest' or 'latest' instead",
    "kafka.key.deserializer": "keys are bytes; deserialize them with DataFrame operations",
    "kafka.value.deserializer": "values are bytes; deserialize them with DataFrame operations",
    "kafka.enable.auto.commit": "progress lives in Spark's checkpoint, not in a consumer group",
    "kafka.interceptor.classes": "interceptors could change records, so they are not supported",
}


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
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    #: startingTimestamp / startingOffsetsByTimestamp (they take precedence over startingOffsets)
    starting_timestamps: TimestampSpec | None = None
    ending_timestamps: TimestampSpec | None = None
    #: startingOffsetsByTimestampStrategy: what a starting timestamp no record matches does
    starting_no_match: str = NO_MATCH_ERROR
    #: the names of the options the timestamps came from, for errors
    starting_timestamp_name: str = "startingTimestamp"
    ending_timestamp_name: str = "endingTimestamp"

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
            starting_timestamp=_flat_timestamps(self.starting_timestamps),
            ending_timestamp=_flat_timestamps(self.ending_timestamps),
            starting_no_match=self.starting_no_match,
            fail_on_data_loss=self.fail_on_data_loss,
            min_pieces=self.min_partitions,
            max_records_per_piece=self.max_records_per_partition,
            max_bytes_per_piece=self.max_bytes_per_partition,
            every_partition=True,
            starting_name="startingOffsets",
            ending_name="endingOffsets",
            starting_timestamp_name=self.starting_timestamp_name,
            ending_timestamp_name=self.ending_timestamp_name,
            data_loss_hint="; set failOnDataLoss=false to read from there instead",
        )


def flat_offsets(spec: OffsetSpec) -> str | dict[TopicPartitionKey, int]:
    """Spark's {topic: {partition: offset}} as the planner's {(topic, partition): offset}."""
    if isinstance(spec, str):
        return spec
    return {(topic, p): offset for topic, parts in spec.items() for p, offset in parts.items()}


def _flat_timestamps(spec: TimestampSpec | None) -> int | dict[TopicPartitionKey, int] | None:
    if spec is None or isinstance(spec, int):
        return spec
    return {(topic, p): ts for topic, parts in spec.items() for p, ts in parts.items()}


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
    _check_names([str(k) for k, v in options.items() if v is not None])
    path = opts.get("path")
    if not path:
        raise IllegalArgumentError("the txlog source needs a store path: .load('/path/to/store')")
    view = opts.get("view", "records").lower()
    if view not in VIEWS:
        raise IllegalArgumentError(f"option 'view' must be one of {', '.join(VIEWS)}, not {view!r}")
    subscribe, pattern, assign = _topic_selection(opts, required=view == "records")
    if streaming:
        _refuse_ends_in_a_stream(opts)
    starting = _offset_spec(opts, "startingoffsets", "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "endingoffsets", "endingOffsets", "latest")
    starting_ts, starting_ts_name = _timestamps(opts, "startingTimestamp", "startingOffsetsByTimestamp")
    ending_ts, ending_ts_name = _timestamps(opts, "endingTimestamp", "endingOffsetsByTimestamp")
    if streaming is False:
        # Spark's precedence: a timestamp option takes the offsets' place, so only an offset spec
        # that is used is checked against the batch rules
        _check_batch_bounds(starting if starting_ts is None else "earliest", ending if ending_ts is None else "latest")
    _check_timestamp_pair(starting_ts, ending_ts)
    max_per_trigger = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_per_trigger = _positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if min_per_trigger is not None and max_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise IllegalArgumentError(
            f"option 'minOffsetsPerTrigger' ({min_per_trigger}) is higher than 'maxOffsetsPerTrigger' "
            f"({max_per_trigger})"
        )
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
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        starting_timestamps=starting_ts,
        ending_timestamps=ending_ts,
        starting_no_match=_no_match_strategy(opts),
        starting_timestamp_name=starting_ts_name,
        ending_timestamp_name=ending_ts_name,
    )


_KNOWN = {name.lower(): name for name in OPTIONS + CONSUMER_ONLY_OPTIONS}


def _check_names(names: list[str]) -> None:
    """Refuse an option this reader does not know, naming it (and the option it is close to).

    `kafka.`-prefixed options configure Spark's Kafka consumer, which has no counterpart here:
    `kafka.isolation.level` is honoured, those Spark's Kafka source refuses are refused with
    its reasons, and the rest (bootstrap servers, security, fetch tuning) are accepted without
    effect, so a Kafka job runs unchanged; a near-miss of `kafka.isolation.level` is refused,
    as a misspelled isolation level would silently read uncommitted-or-not data.
    """
    for name in names:
        key = name.lower()
        if key in _KNOWN:
            continue
        if key in REFUSED_KAFKA_OPTIONS:
            raise IllegalArgumentError(f"option '{name}' is not supported: {REFUSED_KAFKA_OPTIONS[key]}")
        close = difflib.get_close_matches(key, _KNOWN, n=1, cutoff=0.8)
        if key.startswith("kafka.") and not close:
            continue
        hint = f"; did you mean '{_KNOWN[close[0]]}'?" if close else ""
        raise IllegalArgumentError(f"unknown option '{name}' for the txlog reader{hint}")


def _refuse_ends_in_a_stream(opts: dict[str, str]) -> None:
    """A stream has no end: Spark's Kafka source refuses these with the same words."""
    if "endingoffsets" in opts:
        raise IllegalArgumentError("option 'endingOffsets': ending offset not valid in streaming queries")
    for key, name in (("endingtimestamp", "endingTimestamp"), ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")):
        if key in opts:
            raise IllegalArgumentError(f"option '{name}': ending timestamp not valid in streaming queries")


def _timestamps(opts: dict[str, str], global_name: str, by_partition_name: str) -> tuple[TimestampSpec | None, str]:
    """The timestamp side of one end, by Spark's precedence: the global timestamp, then the per-partition JSON.

    Returns the spec (None when neither is given) and the name of the option it came from.
    """
    if global_name.lower() in opts:
        text = str(opts[global_name.lower()]).strip()
        if not re.fullmatch(r"-?[0-9]+", text) or int(text) < 0:
            raise IllegalArgumentError(
                f"option '{global_name}' must be a timestamp in epoch milliseconds ≥ 0, not {text!r}"
            )
        return int(text), global_name
    if by_partition_name.lower() in opts:
        return _timestamp_json(str(opts[by_partition_name.lower()]), by_partition_name), by_partition_name
    return None, global_name


def _timestamp_json(text: str, name: str) -> dict[str, dict[int, int]]:
    """{"topicA":{"0":1700000000000,"1":-2}}: a timestamp per partition; -2 / -1 ask for earliest / latest
    (Kafka's ListOffsets reads those timestamps so, and Spark hands them on to it)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    ok = isinstance(value, dict) and bool(value) and all(isinstance(parts, dict) for parts in value.values())
    spec: dict[str, dict[int, int]] = {}
    for topic, parts in value.items() if ok else ():
        for partition, ts in parts.items():
            if not str(partition).isdigit() or isinstance(ts, bool) or not isinstance(ts, int) or ts < EARLIEST:
                ok = False
                break
            spec.setdefault(str(topic), {})[int(partition)] = ts
    if not ok:
        raise IllegalArgumentError(
            f'option \'{name}\' must be JSON like {{"topicA":{{"0":1700000000000}}}} (epoch ms per partition), '
            f"not {text.strip()!r}"
        )
    return spec


def _check_timestamp_pair(starting: TimestampSpec | None, ending: TimestampSpec | None) -> None:
    """Spark's checkOffsetLimitValidity for two per-partition timestamp maps: same partitions, start ≤ end."""
    if not isinstance(starting, dict) or not isinstance(ending, dict):
        return
    start, end = _flat_timestamps(starting), _flat_timestamps(ending)
    assert isinstance(start, dict) and isinstance(end, dict)
    if set(start) != set(end):
        raise IllegalArgumentError(
            "options 'startingOffsetsByTimestamp' and 'endingOffsetsByTimestamp' must name the same partitions"
        )
    for tp, ts in sorted(start.items()):
        if ts >= 0 and end[tp] >= 0 and ts > end[tp]:
            raise IllegalArgumentError(
                f"option 'startingOffsetsByTimestamp': the timestamp {ts} of {tp[0]}-{tp[1]} is after its "
                f"ending timestamp {end[tp]}"
            )


def _no_match_strategy(opts: dict[str, str]) -> str:
    text = str(opts.get("startingoffsetsbytimestampstrategy", NO_MATCH_ERROR)).strip().lower()
    if text not in (NO_MATCH_ERROR, NO_MATCH_LATEST):
        raise IllegalArgumentError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not "
            f"{opts['startingoffsetsbytimestampstrategy']!r}"
        )
    return text


#: Spark's time-string suffixes (JavaUtils.timeStringAs): a bare number is milliseconds.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: dict[str, str], key: str, name: str, default: int) -> int:
    if key not in opts:
        return default
    text = str(opts[key]).strip().lower()
    found = re.fullmatch(r"([0-9]+)\s*([a-z]*)", text)
    if found is None or found.group(2) not in (*_TIME_UNITS_MS, ""):
        raise IllegalArgumentError(
            f"option '{name}' must be a duration such as 30s, 5m or 100ms (a bare number is ms), not {opts[key]!r}"
        )
    return int(int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2), 1))


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
