"""What an engine's filter and limit say about which records a scan need not read at all.

Polars and DuckDB hand a scan a predicate in their own form (a Polars Expr, a DuckDB
predicate tree); each engine's module turns the conjuncts it understands into a
`Narrowing`, and `narrow` applies it to the plan. A narrowing is only ever *sound*: it
may keep records the predicate rejects (the engine's predicate is still applied to every
row produced, so those are dropped there), but never drops one the predicate keeps.
That is why a conjunct that is not understood simply narrows nothing, and why only the
lower bound of a timestamp filter narrows: Kafka timestamps need not grow with offsets,
so a record after the first one at or past a time may still be older than it, but every
record before that first one is older (the time index's rule, as ListOffsets by time).

Offsets and timestamps narrow the plan's ranges; topic and partition conjuncts are
judged exactly, by evaluating them on the plan's (topic, partition) pairs, so any
expression of those two columns alone (`==`, `IN`, `OR`, a string function...) prunes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

TopicPartitionKey = tuple[str, int]

if TYPE_CHECKING:
    import pyarrow as pa

    from txlog.scan.planning import OffsetRange


class Scan(Protocol):
    """What the engines use of `txlog.scan.api.Scan` (named here, not imported: api imports the engines)."""

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def ranges(self) -> tuple[OffsetRange, ...]: ...

    def narrowed(
        self,
        *,
        columns: Sequence[str] | None = None,
        partitions: Iterable[TopicPartitionKey] | None = None,
        offsets: tuple[int | None, int | None] | None = None,
        timestamps: tuple[int | None, int | None] | None = None,
        limit: int | None = None,
    ) -> Scan: ...

    def to_batches(self) -> Iterator[pa.RecordBatch]: ...

    def to_reader(self) -> pa.RecordBatchReader: ...

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any: ...


#: Columns a partition-level conjunct may name: each is constant within a planned range.
PARTITION_COLUMNS = frozenset({"topic", "partition"})


@dataclass(frozen=True)
class Narrowing:
    """The records a filter can keep, as far as it narrows a plan (None: no bound)."""

    partitions: frozenset[TopicPartitionKey] | None = None
    min_offset: int | None = None  # inclusive, in every partition
    end_offset: int | None = None  # exclusive, in every partition
    min_timestamp: int | None = None  # epoch ms, inclusive

    def with_partitions(self, kept: Iterable[TopicPartitionKey]) -> Narrowing:
        """Keep only `kept` of the partitions kept so far."""
        kept = frozenset(kept)
        return replace(self, partitions=kept if self.partitions is None else self.partitions & kept)

    def with_offsets(self, start: int | None, end: int | None) -> Narrowing:
        """Keep offsets in [start, end) too (None: unbounded on that side)."""
        return replace(
            self,
            min_offset=_tighter(self.min_offset, start, max),
            end_offset=_tighter(self.end_offset, end, min),
        )

    def with_min_timestamp(self, epoch_ms: int) -> Narrowing:
        """Keep records at or after `epoch_ms` too: only a lower bound narrows (see the module docstring)."""
        return replace(self, min_timestamp=_tighter(self.min_timestamp, epoch_ms, max))


def _tighter(current: int | None, new: int | None, pick) -> int | None:
    if new is None:
        return current
    return new if current is None else pick(current, new)


def offset_bounds(op: str, value: int) -> tuple[int | None, int | None]:
    """[start, end) of the offsets `offset <op> value` keeps; ops are = > >= < <=."""
    return {
        "=": (value, value + 1),
        ">": (value + 1, None),
        ">=": (value, None),
        "<": (None, value),
        "<=": (None, value + 1),
    }[op]


def timestamp_floor_ms(op: str, epoch_us: int) -> int | None:
    """The epoch-ms lower bound `timestamp <op> epoch_us` implies, None for an upper bound.

    Floored: a bound a little below the exact one is still sound (it keeps more).
    """
    return epoch_us // 1000 if op in ("=", ">", ">=") else None


def narrow(scan: Scan, narrowing: Narrowing, columns: Iterable[str]) -> Scan:
    """`scan` over the smaller plan `narrowing` allows, building only `columns`."""
    pairs = narrowing.partitions
    offsets = None
    if narrowing.min_offset is not None or narrowing.end_offset is not None:
        offsets = (narrowing.min_offset, narrowing.end_offset)
    return scan.narrowed(
        columns=list(columns),
        partitions=None if pairs is None else sorted(pairs),
        offsets=offsets,
        timestamps=None if narrowing.min_timestamp is None else (narrowing.min_timestamp, None),
    )


def plan_partitions(scan: Scan) -> list[TopicPartitionKey]:
    """The (topic, partition) pairs a scan's plan covers, in order, each once."""
    return sorted({(r.topic, r.partition) for r in scan.ranges})


def needed_columns(scan: Scan, *groups: Iterable[str]) -> list[str]:
    """The scan's columns named in any of `groups`, in the scan's order; never none.

    An engine that needs no column (a row count) still needs the rows: `offset`, the
    cheapest column to build, carries them (or the scan's first column if it has none).
    """
    wanted = {name for group in groups for name in group}
    names = [name for name in scan.schema.names if name in wanted]
    if names:
        return names
    return ["offset"] if "offset" in scan.schema.names else scan.schema.names[:1]


def limited_batches(scan: Scan, limit: int) -> Iterator[pa.RecordBatch]:
    """The first `limit` rows of `scan`, read so that a small limit reads little.

    A range is decoded an Arrow batch (tens of thousands of rows) at a time, so a limit
    applied to the batches would still read that much; here each partition is read in
    windows of offsets, the first as wide as the rows still wanted, each next twice as
    wide (aborted and control records take offsets without giving rows).
    """
    left = limit
    for r in scan.ranges:
        start, window = r.start, max(left, 1)
        while left > 0 and start < r.end:
            end = min(r.end, start + window)
            piece = scan.narrowed(partitions=[(r.topic, r.partition)], offsets=(start, end), limit=left)
            for batch in piece.to_batches():
                left -= batch.num_rows
                yield batch
            start, window = end, window * 2
        if left <= 0:
            return
