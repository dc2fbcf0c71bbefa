"""The driver's half of a read: which offsets of which partitions, cut into input partitions.

Everything that depends on the log's state is decided here, once, when the query is
planned: each range's end (the last stable offset under read_committed, the log end
otherwise), the aborted transactions a read_committed reader must skip inside it, and
the byte extents of the segment files that hold it. Executors then need nothing but
the files: a range read twice (a retried task, a restarted stream, a `txlog.scan` read
again) yields the same rows, because every input that could change was fixed in the plan.

One planner for every reader that is not a Consumer: `txlog.scan` and the Spark source
both describe what to read as a `ReadRequest` (Spark's options map onto it in
txlog/spark/options.py). Pure Python, no Spark and no Arrow here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from storage.extent import SegmentExtent
from storage.partition_log import PartitionLog
from storage.store import Store
from storage.transaction_index import AbortedTxn
from txlog.errors import IllegalArgumentError
from txlog.fetch import IsolationLevel, LogBounds, latest_offset

TopicPartitionKey = tuple[str, int]

#: Offsets a spec may use for "the earliest offset" and "the latest offset" (as Kafka's ListOffsets).
EARLIEST = -2
LATEST = -1

#: "earliest", "latest", or {(topic, partition): offset} with EARLIEST/LATEST allowed.
OffsetSpec = str | dict[TopicPartitionKey, int]

#: One timestamp (epoch ms) for every partition, or {(topic, partition): timestamp}; in a dict,
#: EARLIEST/LATEST ask for those offsets, as they do in Kafka's ListOffsets.
TimestampSpec = int | dict[TopicPartitionKey, int]

#: What a starting timestamp no record matches resolves to: the latest offset, or an error
#: (Spark's startingOffsetsByTimestampStrategy "latest" / "error").
NO_MATCH_LATEST = "latest"
NO_MATCH_ERROR = "error"

#: Input pieces are cut at segment boundaries once a range has this many bytes
#: (Spark's own default for files, spark.sql.files.maxPartitionBytes).
DEFAULT_MAX_BYTES_PER_PIECE = 128 << 20


@dataclass(frozen=True)
class ReadRequest:
    """What to read of the selected partitions, whoever asks (Spark's options, `txlog.scan`'s arguments).

    A starting or ending timestamp (epoch ms; one for all partitions or one per partition)
    resolves per partition to the first offset whose record timestamp is at or after it
    (Kafka's ListOffsets rule), and takes the place of the offsets on that side.
    `every_partition` is Spark's rule for offset dicts: they must name each selected
    partition; otherwise a partition left out reads from earliest / to latest.
    """

    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec = "latest"
    starting_timestamp: TimestampSpec | None = None
    ending_timestamp: TimestampSpec | None = None
    #: A starting timestamp without a matching record: NO_MATCH_LATEST or NO_MATCH_ERROR (an end always takes latest).
    starting_no_match: str = NO_MATCH_LATEST
    fail_on_data_loss: bool = True
    min_pieces: int | None = None
    max_records_per_piece: int | None = None
    max_bytes_per_piece: int = DEFAULT_MAX_BYTES_PER_PIECE
    every_partition: bool = False
    #: How the offset specs are named in errors (Spark's option names, or scan's arguments).
    starting_name: str = "starting_offsets"
    ending_name: str = "ending_offsets"
    starting_timestamp_name: str = "starting_timestamp"
    ending_timestamp_name: str = "ending_timestamp"
    #: What the reader can do about deleted offsets, appended to the error saying so.
    data_loss_hint: str = ""

    @property
    def committed_only(self) -> bool:
        return self.isolation is IsolationLevel.READ_COMMITTED


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition, with all an executor needs to read them."""

    topic: str
    partition: int
    start: int
    end: int
    committed_only: bool
    aborted: tuple[AbortedTxn, ...]  # those overlapping [start, end); empty for read_uncommitted
    extents: tuple[SegmentExtent, ...]

    @property
    def size(self) -> int:
        return self.end - self.start


def open_store(path: str) -> Store:
    """The store (or real Kafka data directory) at `path`, read-only: a reader never writes."""
    return Store.open(path, read_only=True)


def select_partitions(
    store: Store,
    *,
    topics: Iterable[str] | None = None,
    pattern: str | None = None,
    assign: dict[str, tuple[int, ...]] | None = None,
    internal: bool = True,
) -> list[TopicPartitionKey]:
    """The topic-partitions named by at most one of `topics`, `pattern` or `assign`, in (topic, partition) order.

    A topic named by `topics` or `assign` must exist (an error beats an empty result for
    a typo); a pattern matches user topics only, as Kafka's does. With no selection every
    topic is read, the internal ones (`__transaction_state`...) too unless `internal` is False
    (Spark's views read them; `txlog.scan(topics=None)` means the user's topics).
    """
    if assign is not None:
        out: list[TopicPartitionKey] = []
        for topic, parts in assign.items():
            count = _partition_count(store, topic)
            missing = [p for p in parts if p >= count]
            if missing:
                raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {missing[0]}")
            for p in parts:
                if p not in store.partitions(topic):
                    store.partition(topic, p)  # raises: a Kafka log dir without it, saying which it holds
            out.extend((topic, p) for p in parts)
        return sorted(out)
    if topics is not None:
        names = sorted(set(topics))
        for topic in names:
            _partition_count(store, topic)
    elif pattern is not None:
        compiled = re.compile(pattern)
        names = [t for t in store.list_topics(include_internal=False) if compiled.fullmatch(t)]
    else:
        names = store.list_topics(include_internal=internal)
    # A Kafka log dir may hold only some partitions of a topic: those present are the readable ones.
    return [(topic, p) for topic in names for p in store.partitions(topic)]


def _partition_count(store: Store, topic: str) -> int:
    if not store.has_topic(topic):
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist in {store.root}")
    return store.partition_count(topic)


def partition_bounds(store: Store, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, LogBounds]:
    """One `bounds()` look per partition: every range end of a plan comes from the same look."""
    return {(topic, p): LogBounds.of(store.partition(topic, p)) for topic, p in partitions}


def resolve_offsets(
    spec: OffsetSpec,
    bounds: dict[TopicPartitionKey, LogBounds],
    *,
    isolation: IsolationLevel,
    option: str,
    every_partition: bool = True,
    default: int = EARLIEST,
) -> dict[TopicPartitionKey, int]:
    """Turn 'earliest' / 'latest' / {(topic, partition): offset} into one offset per selected partition.

    A dict may name only selected partitions. With `every_partition` it must name each of
    them (Spark's Kafka rule: a forgotten partition would otherwise be read from a silently
    chosen offset); without, a partition it leaves out takes `default` (EARLIEST for a start,
    LATEST for an end). `option` names the side in errors.
    """
    if isinstance(spec, str):
        return {tp: _sentinel(EARLIEST if spec == "earliest" else LATEST, b, isolation) for tp, b in bounds.items()}
    extra = sorted(set(spec) - set(bounds))
    missing = sorted(set(bounds) - set(spec)) if every_partition else []
    if extra or missing:
        what = f"names {_tp(extra[0])}, which is not subscribed" if extra else f"lacks {_tp(missing[0])}"
        rule = "must give an offset for every subscribed partition" if every_partition else "may name only read ones"
        raise IllegalArgumentError(f"option '{option}' {rule}; it {what}")
    return {tp: _sentinel(spec.get(tp, default), b, isolation) for tp, b in bounds.items()}


def resolve_timestamp(
    store: Store,
    bounds: dict[TopicPartitionKey, LogBounds],
    timestamp: TimestampSpec,
    *,
    isolation: IsolationLevel,
    option: str = "timestamp",
    no_match: str = NO_MATCH_LATEST,
) -> dict[TopicPartitionKey, int]:
    """Per partition, the first offset whose record timestamp is ≥ its timestamp (Kafka's ListOffsets).

    As Kafka's ListOffsets, an offset the isolation level cannot see yet (at or past the LSO
    under read_committed) is no match. A partition with no match resolves to its latest
    offset (a start there reads nothing, an end there everything visible), or, with
    `no_match` NO_MATCH_ERROR, fails (Spark's startingOffsetsByTimestampStrategy "error").
    A dict must name exactly the selected partitions; `option` names it in errors.
    """
    per_partition = _per_partition(timestamp, bounds, option)
    out = {}
    for tp, b in bounds.items():
        target = per_partition[tp]
        if target in (EARLIEST, LATEST):
            out[tp] = _sentinel(target, b, isolation)
            continue
        latest = latest_offset(b, isolation)
        found = store.partition(*tp).offset_for_timestamp(target)
        if found is None or found >= latest:
            if no_match == NO_MATCH_ERROR:
                raise IllegalArgumentError(
                    f"option '{option}': no offset matched from request of topic-partition {_tp(tp)} and timestamp "
                    f"{target} (set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead)"
                )
            out[tp] = latest
        else:
            out[tp] = max(found, b.log_start_offset)
    return out


def _per_partition(
    timestamp: TimestampSpec, bounds: dict[TopicPartitionKey, LogBounds], option: str
) -> dict[TopicPartitionKey, int]:
    """One timestamp per selected partition; a dict must name each of them and no other (Spark's rule)."""
    if isinstance(timestamp, int):
        return dict.fromkeys(bounds, timestamp)
    extra = sorted(set(timestamp) - set(bounds))
    missing = sorted(set(bounds) - set(timestamp))
    if extra or missing:
        what = f"names {_tp(extra[0])}, which is not subscribed" if extra else f"lacks {_tp(missing[0])}"
        raise IllegalArgumentError(f"option '{option}' must give a timestamp for every subscribed partition; it {what}")
    return dict(timestamp)


def _sentinel(offset: int, bounds: LogBounds, isolation: IsolationLevel) -> int:
    if offset == EARLIEST:
        return bounds.log_start_offset
    if offset == LATEST:
        return latest_offset(bounds, isolation)
    return offset


def _tp(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}-{tp[1]}"


def plan_read(store: Store, partitions: Iterable[TopicPartitionKey], request: ReadRequest) -> list[OffsetRange]:
    """The ranges of a batch read: the request's start to end of every selected partition, fixed now."""
    bounds = partition_bounds(store, partitions)
    starts = starting_offsets(store, bounds, request)
    ends = _side(
        store,
        bounds,
        request,
        request.ending_offsets,
        request.ending_timestamp,
        request.ending_name,
        LATEST,
        timestamp_name=request.ending_timestamp_name,
    )
    return plan_ranges(store, request, bounds, starts, ends)


def starting_offsets(
    store: Store, bounds: dict[TopicPartitionKey, LogBounds], request: ReadRequest
) -> dict[TopicPartitionKey, int]:
    """Where the request starts in each partition (a batch read's start, a stream's first offsets)."""
    return _side(
        store,
        bounds,
        request,
        request.starting_offsets,
        request.starting_timestamp,
        request.starting_name,
        EARLIEST,
        timestamp_name=request.starting_timestamp_name,
        no_match=request.starting_no_match,
    )


def _side(
    store: Store,
    bounds: dict[TopicPartitionKey, LogBounds],
    request: ReadRequest,
    spec: OffsetSpec,
    timestamp: TimestampSpec | None,
    option: str,
    default: int,
    *,
    timestamp_name: str,
    no_match: str = NO_MATCH_LATEST,
) -> dict[TopicPartitionKey, int]:
    """One end of every range: from a timestamp when one is given, else from the offset spec."""
    if timestamp is not None:
        return resolve_timestamp(
            store, bounds, timestamp, isolation=request.isolation, option=timestamp_name, no_match=no_match
        )
    return resolve_offsets(
        spec,
        bounds,
        isolation=request.isolation,
        option=option,
        every_partition=request.every_partition,
        default=default,
    )


#: (partition, start, end, its extents when a segment cut already found them, else None)
_Span = tuple[TopicPartitionKey, int, int, "tuple[SegmentExtent, ...] | None"]


def plan_ranges(
    store: Store,
    request: ReadRequest,
    bounds: dict[TopicPartitionKey, LogBounds],
    starts: dict[TopicPartitionKey, int],
    ends: dict[TopicPartitionKey, int],
) -> list[OffsetRange]:
    """Cut [starts, ends) of each partition into input partitions and fix what each needs."""
    spans: list[_Span] = []
    for tp, b in bounds.items():
        start, end = _checked_span(tp, b, starts[tp], ends[tp], request)
        if end > start:
            spans.extend(
                (tp, s, e, extents)
                for s, e, extents in _segment_pieces(store.partition(*tp), start, end, request.max_bytes_per_piece)
            )
    if request.max_records_per_piece:
        limit = request.max_records_per_piece
        spans = [piece for span in spans for piece in _split(span, -(-(span[2] - span[1]) // limit))]
    if request.min_pieces and len(spans) < request.min_pieces:
        spans = _spread(spans, request.min_pieces)
    return [offset_range(store.partition(*tp), s, e, request.committed_only, extents) for tp, s, e, extents in spans]


def _checked_span(tp: TopicPartitionKey, b: LogBounds, start: int, end: int, request: ReadRequest) -> tuple[int, int]:
    """Clamp a requested span to what exists and is visible; deleted data is an error if asked.

    An end past what the isolation level may see is fixed at that limit now (the LSO
    under read_committed): the plan must not depend on transactions still open.
    """
    end = min(end, latest_offset(b, request.isolation))
    if start > b.log_end_offset:  # Kafka's fetch rule: past the log end is out of range, not empty
        raise OffsetOutOfRangeError(
            f"the starting offset {start} of {_tp(tp)} is past its log end {b.log_end_offset} "
            f"(the log holds offsets {b.log_start_offset}..{b.log_end_offset - 1})"
        )
    if start < b.log_start_offset:
        if request.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"offsets {start}..{b.log_start_offset - 1} of {_tp(tp)} were deleted (the log now starts at "
                f"{b.log_start_offset}){request.data_loss_hint}"
            )
        start = b.log_start_offset
        end = max(end, start)
    if start > end:
        raise IllegalArgumentError(
            f"the starting offset {start} of {_tp(tp)} is after its ending offset {end} "
            f"(log {b.log_start_offset}..{b.log_end_offset}, last stable offset {b.last_stable_offset})"
        )
    return start, end


def _segment_pieces(
    log: PartitionLog, start: int, end: int, max_bytes: int
) -> list[tuple[int, int, tuple[SegmentExtent, ...]]]:
    """Cut [start, end) at segment boundaries, keeping pieces under `max_bytes` where a boundary allows.

    A piece cut at a segment boundary holds whole extents of the span, so each piece
    comes with its own: no second index lookup for them.
    """
    pieces: list[list[SegmentExtent]] = []
    piece: list[SegmentExtent] = []
    used = 0
    for extent in log.extents(start, end):
        size = extent.end_position - extent.start_position
        if piece and used + size > max_bytes and start < extent.base_offset < end:
            pieces.append(piece)
            piece, used = [], 0
        piece.append(extent)
        used += size
    pieces.append(piece)
    edges = [start, *(p[0].base_offset for p in pieces[1:]), end]
    return [(s, e, tuple(p)) for (s, e), p in zip(pairwise(edges), pieces, strict=True)]


def _split(span: _Span, parts: int) -> list[_Span]:
    """Equal offset pieces of a span; a piece cut inside a segment finds its extents later."""
    tp, start, end, _ = span
    pieces = _equal_pieces(start, end, parts)
    return [span] if len(pieces) == 1 else [(tp, s, e, None) for s, e in pieces]


def _equal_pieces(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, end - start))
    edges = [start + (end - start) * i // parts for i in range(parts + 1)]
    return list(pairwise(edges))


def _spread(spans: list, min_partitions: int) -> list:
    """Split spans in proportion to their sizes until there are about `min_partitions` (as Spark's Kafka source)."""
    total = sum(e - s for _, s, e, _ in spans)
    if total == 0:
        return spans
    return [
        piece for span in spans for piece in _split(span, max(1, round((span[2] - span[1]) / total * min_partitions)))
    ]


def offset_range(
    log: PartitionLog,
    start: int,
    end: int,
    committed_only: bool,
    extents: tuple[SegmentExtent, ...] | None = None,
) -> OffsetRange:
    """[start, end) of `log` with what reading it needs: its aborted transactions and extents, fixed now."""
    aborted = tuple(log.aborted_transactions(start, end)) if committed_only else ()
    if extents is None:
        extents = tuple(log.extents(start, end))
    return OffsetRange(log.topic, log.partition, start, end, committed_only, aborted, extents)
