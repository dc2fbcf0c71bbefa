"""The driver's half of a read: which offsets of which partitions, cut into input partitions.

Everything that depends on the log's state is decided here, once, when the query is
planned: each range's end (the last stable offset under read_committed, the log end
otherwise), the aborted transactions a read_committed reader must skip inside it, and
the byte extents of the segment files that hold it. Executors then need nothing but
the files: a range read twice (a retried task, a restarted stream) yields the same
rows, because every input that could change was fixed in the plan.

Pure Python: no Spark here, so planning is testable (and reusable) on its own.
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
from txlog.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions

TopicPartitionKey = tuple[str, int]


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


def select_partitions(store: Store, options: SourceOptions) -> list[TopicPartitionKey]:
    """The topic-partitions the options subscribe to, in (topic, partition) order.

    A topic named by `subscribe` or `assign` must exist (an error beats an empty
    result for a typo); a pattern matches user topics only, as Kafka's does. Views
    read every topic when no selection is given.
    """
    if options.assign is not None:
        out: list[TopicPartitionKey] = []
        for topic, parts in options.assign.items():
            count = _partition_count(store, topic)
            missing = [p for p in parts if p >= count]
            if missing:
                raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {missing[0]}")
            for p in parts:
                if p not in store.partitions(topic):
                    store.partition(topic, p)  # raises: a Kafka log dir without it, saying which it holds
            out.extend((topic, p) for p in parts)
        return sorted(out)
    if options.subscribe is not None:
        topics = sorted(set(options.subscribe))
        for topic in topics:
            _partition_count(store, topic)
    elif options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        topics = [t for t in store.list_topics(include_internal=False) if pattern.fullmatch(t)]
    else:
        topics = store.list_topics()
    # A Kafka log dir may hold only some partitions of a topic: those present are the readable ones.
    return [(topic, p) for topic in topics for p in store.partitions(topic)]


def _partition_count(store: Store, topic: str) -> int:
    if not store.has_topic(topic):
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist in {store.root}")
    return store.partition_count(topic)


def partition_bounds(store: Store, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, LogBounds]:
    """One `bounds()` look per partition: every range end of a plan comes from the same look."""
    return {(topic, p): LogBounds.of(store.partition(topic, p)) for topic, p in partitions}


def resolve_offsets(
    spec: OffsetSpec, bounds: dict[TopicPartitionKey, LogBounds], *, isolation: IsolationLevel, option: str
) -> dict[TopicPartitionKey, int]:
    """Turn 'earliest' / 'latest' / per-partition JSON into one offset per partition.

    JSON must name every selected partition and nothing else (Spark's Kafka rule: a
    forgotten partition would otherwise be read from a silently chosen offset).
    """
    if isinstance(spec, str):
        return {tp: _sentinel(EARLIEST if spec == "earliest" else LATEST, b, isolation) for tp, b in bounds.items()}
    given = {(topic, p): offset for topic, parts in spec.items() for p, offset in parts.items()}
    if set(given) != set(bounds):
        extra = sorted(set(given) - set(bounds))
        missing = sorted(set(bounds) - set(given))
        what = f"names {_tp(extra[0])}, which is not subscribed" if extra else f"lacks {_tp(missing[0])}"
        raise IllegalArgumentError(f"option '{option}' must give an offset for every subscribed partition; it {what}")
    return {tp: _sentinel(offset, bounds[tp], isolation) for tp, offset in given.items()}


def _sentinel(offset: int, bounds: LogBounds, isolation: IsolationLevel) -> int:
    if offset == EARLIEST:
        return bounds.log_start_offset
    if offset == LATEST:
        return latest_offset(bounds, isolation)
    return offset


def _tp(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}-{tp[1]}"


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The input partitions of a batch query: startingOffsets to endingOffsets of every selected partition."""
    store = open_store(options.path)
    try:
        bounds = partition_bounds(store, select_partitions(store, options))
        starts = resolve_offsets(
            options.starting_offsets, bounds, isolation=options.isolation, option="startingOffsets"
        )
        ends = resolve_offsets(options.ending_offsets, bounds, isolation=options.isolation, option="endingOffsets")
        return plan_ranges(store, options, bounds, starts, ends)
    finally:
        store.close()


#: (partition, start, end, its extents when a segment cut already found them, else None)
_Span = tuple[TopicPartitionKey, int, int, "tuple[SegmentExtent, ...] | None"]


def plan_ranges(
    store: Store,
    options: SourceOptions,
    bounds: dict[TopicPartitionKey, LogBounds],
    starts: dict[TopicPartitionKey, int],
    ends: dict[TopicPartitionKey, int],
) -> list[OffsetRange]:
    """Cut [starts, ends) of each partition into input partitions and fix what each needs."""
    spans: list[_Span] = []
    for tp, b in bounds.items():
        start, end = _checked_span(tp, b, starts[tp], ends[tp], options)
        if end > start:
            spans.extend(
                (tp, s, e, extents)
                for s, e, extents in _segment_pieces(store.partition(*tp), start, end, options.max_bytes_per_partition)
            )
    if options.max_records_per_partition:
        limit = options.max_records_per_partition
        spans = [piece for span in spans for piece in _split(span, -(-(span[2] - span[1]) // limit))]
    if options.min_partitions and len(spans) < options.min_partitions:
        spans = _spread(spans, options.min_partitions)
    return [_range(store.partition(*tp), s, e, options.committed_only, extents) for tp, s, e, extents in spans]


def _checked_span(tp: TopicPartitionKey, b: LogBounds, start: int, end: int, options: SourceOptions) -> tuple[int, int]:
    """Clamp a requested span to what exists and is visible; deleted data is an error if asked.

    An end past what the isolation level may see is fixed at that limit now (the LSO
    under read_committed): the plan must not depend on transactions still open.
    """
    end = min(end, latest_offset(b, options.isolation))
    if start < b.log_start_offset:
        if options.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"offsets {start}..{b.log_start_offset - 1} of {_tp(tp)} were deleted (the log now starts at "
                f"{b.log_start_offset}); set failOnDataLoss=false to read from there instead"
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


def _range(
    log: PartitionLog, start: int, end: int, committed_only: bool, extents: tuple[SegmentExtent, ...] | None
) -> OffsetRange:
    aborted = tuple(log.aborted_transactions(start, end)) if committed_only else ()
    if extents is None:
        extents = tuple(log.extents(start, end))
    return OffsetRange(log.topic, log.partition, start, end, committed_only, aborted, extents)
