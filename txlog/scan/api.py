"""`scan(...)` and `Scan`: a planned read of a store's records, handed out as Arrow.

The plan is made once, when `scan()` returns, by the planner the Spark source uses
(txlog/scan/planning.py): each partition's range ends at the last stable offset under
read_committed (the log end, within the high watermark, otherwise), and carries the aborted
transactions and the segment extents reading it needs. Reading a `Scan` (once, twice,
through any of its outputs) goes through txlog/scan/range_reader.py, whose visibility rule
is the Consumer's (`txlog.fetch.visible_batches` and `AbortedFilter`), so it shows the rows a
Consumer with the same isolation level and offsets would, however the log grows meanwhile.

Engines that push work down (Polars' IO plugin, DuckDB's filters) ask for a smaller read
with `Scan.narrowed(...)`: fewer columns, partitions, offsets or timestamps, a row limit.
It returns a new Scan over a smaller plan, so what is pruned is never read from disk.

pyarrow is imported when a scan is made, not when this module is: `import txlog` stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from storage.store import Store
from txlog.errors import IllegalArgumentError
from txlog.fetch import IsolationLevel
from txlog.scan.optional import optional_module
from txlog.scan.planning import (
    OffsetRange,
    OffsetSpec,
    ReadRequest,
    TopicPartitionKey,
    offset_range,
    open_store,
    plan_read,
    select_partitions,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: A scan reads each partition as one range: it has no executors to spread pieces over.
_ONE_PIECE = 1 << 62

#: (lowest, highest) with None for "unbounded": lowest inclusive, highest exclusive.
Bounds = tuple[int | None, int | None]


def scan(
    store: str | os.PathLike[str] | Store,
    topics: str | Sequence[str] | None = None,
    *,
    isolation_level: str | IsolationLevel = "read_committed",
    starting_offsets: str | Mapping[TopicPartitionKey, int] = "earliest",
    ending_offsets: str | Mapping[TopicPartitionKey, int] = "latest",
    starting_timestamp: int | None = None,
    ending_timestamp: int | None = None,
    columns: Sequence[str] | None = None,
) -> Scan:
    """Plan a read of `topics` (every user topic when None) of the store or Kafka data directory `store`.

    Offsets are "earliest", "latest" or {(topic, partition): offset}; a partition a dict leaves
    out reads from earliest / to latest. A timestamp (epoch ms) takes the place of that side's
    offsets: per partition, the first offset whose record timestamp is at or after it (Kafka's
    ListOffsets). `columns` picks and orders the record view's columns (docs/analysis.md §1).
    """
    isolation = _isolation(isolation_level)
    names = _columns(columns)
    start_ts = _timestamp(starting_timestamp, "starting_timestamp")
    end_ts = _timestamp(ending_timestamp, "ending_timestamp")
    if start_ts is not None and end_ts is not None and end_ts < start_ts:
        raise IllegalArgumentError(f"ending_timestamp {end_ts} is before starting_timestamp {start_ts}")
    request = ReadRequest(
        isolation=isolation,
        starting_offsets=_offset_spec(starting_offsets, "starting_offsets"),
        ending_offsets=_offset_spec(ending_offsets, "ending_offsets"),
        starting_timestamp=start_ts,
        ending_timestamp=end_ts,
        max_bytes_per_piece=_ONE_PIECE,
    )
    with _opened(store) as opened:
        partitions = select_partitions(opened, topics=_topics(topics), internal=False)
        ranges = plan_read(opened, partitions, request)
    return Scan(store, tuple(ranges), names, isolation)


class Scan:
    """A fixed plan of offset ranges and columns; every output reads the same rows from it.

    Reading streams batch by batch (`to_batches`, `to_reader`, `__arrow_c_stream__`): memory
    stays bounded by one Arrow batch whatever the log's size. Only `to_arrow` and the
    conversions built on it hold the whole result.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        ranges: tuple[OffsetRange, ...],
        columns: tuple[str, ...],
        isolation: IsolationLevel,
        *,
        time_filter: Bounds | None = None,
        limit: int | None = None,
    ):
        self._store = store
        self._ranges = ranges
        self._columns = columns
        self._isolation = isolation
        self._time_filter = time_filter
        self._limit = limit

    def __repr__(self) -> str:
        return (
            f"Scan({len(self._ranges)} ranges, {sum(r.size for r in self._ranges)} offsets, "
            f"columns={list(self._columns)}, isolation_level={self._isolation.value!r})"
        )

    # ---- what the plan is ----------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every batch this scan yields (the record view's types, docs/analysis.md §1)."""
        from txlog.scan.arrow_columns import RECORD_SCHEMA

        return optional_module("pyarrow", "txlog.scan").schema([RECORD_SCHEMA.field(c) for c in self._columns])

    @property
    def ranges(self) -> tuple[OffsetRange, ...]:
        """The planned ranges, one per partition read: `.topic`, `.partition`, `.start`, `.end` (exclusive)."""
        return self._ranges

    @property
    def columns(self) -> tuple[str, ...]:
        return self._columns

    @property
    def isolation_level(self) -> IsolationLevel:
        return self._isolation

    @property
    def limit(self) -> int | None:
        return self._limit

    @property
    def planned_bytes(self) -> int:
        """Bytes of segment files the plan reads: what narrowing a scan makes smaller."""
        return sum(e.end_position - e.start_position for r in self._ranges for e in r.extents)

    # ---- reading -------------------------------------------------------------------------------

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as Arrow record batches, partition after partition, in offset order within each."""
        optional_module("pyarrow", "txlog.scan")
        from txlog.scan.range_reader import read_range

        schema = self.schema
        read_schema = self._read_schema(schema)
        remaining = self._limit
        for r in self._ranges:
            if remaining == 0:
                return
            for batch in read_range(r, read_schema):
                batch = self._filtered(batch, schema)
                if remaining is not None:
                    batch = batch.slice(0, remaining)
                    remaining -= batch.num_rows
                if batch.num_rows:
                    yield batch
                if remaining == 0:
                    return

    def to_reader(self) -> pa.RecordBatchReader:
        """A pyarrow RecordBatchReader over `to_batches()`: read lazily, once."""
        pa = optional_module("pyarrow", "txlog.scan")
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule stream interface: any Arrow consumer (Polars, DuckDB, pyarrow...) can read a Scan."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> pa.Table:
        """Every row, as one pyarrow Table."""
        pa = optional_module("pyarrow", "txlog.scan")
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def to_pandas(self) -> Any:
        """Every row, as a pandas DataFrame."""
        optional_module("pandas", "Scan.to_pandas")
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """A Polars LazyFrame over the rows; its projection, filters and limit narrow the read (docs/analysis.md §2)."""
        optional_module("polars", "Scan.to_polars")
        from txlog.scan.polars_source import to_polars

        return to_polars(self)

    def to_duckdb(self, connection: Any = None) -> Any:
        """A DuckDB relation over the rows, on `connection` (DuckDB's default connection when None)."""
        optional_module("duckdb", "Scan.to_duckdb")
        from txlog.scan.duckdb_source import to_duckdb

        return to_duckdb(self, connection)

    # ---- pushdown ------------------------------------------------------------------------------

    def narrowed(
        self,
        *,
        columns: Sequence[str] | None = None,
        partitions: Iterable[TopicPartitionKey] | None = None,
        offsets: Bounds | None = None,
        timestamps: Bounds | None = None,
        limit: int | None = None,
    ) -> Scan:
        """A scan of a subset of this one's rows, planned smaller so the rest is never read.

        `columns` (a subset of this scan's, in the order given) builds only those; `partitions`
        keeps the ranges of those (topic, partition) pairs; `offsets` (lowest, highest) keeps
        lowest <= offset < highest; `timestamps` (lowest, highest), epoch ms, keeps rows with
        lowest <= timestamp < highest: the read starts at the first offset at or after `lowest`
        (Kafka's ListOffsets, so earlier segments are skipped) and both bounds filter rows, as
        timestamps need not grow with offsets; `limit` stops after that many rows. Each
        narrowing only ever removes rows, so a narrowed scan's rows are a subset of this one's.
        """
        names = self._columns if columns is None else _columns(columns, within=self._columns)
        ranges = self._ranges
        if partitions is not None:
            keep = {(str(t), int(p)) for t, p in partitions}
            ranges = tuple(r for r in ranges if (r.topic, r.partition) in keep)
        if offsets is not None or timestamps is not None:
            ranges = self._clamped(ranges, _bounds(offsets, "offsets"), _bounds(timestamps, "timestamps"))
        time_filter = _intersect(self._time_filter, _bounds(timestamps, "timestamps")) if timestamps else None
        return Scan(
            self._store,
            ranges,
            names,
            self._isolation,
            time_filter=time_filter or self._time_filter,
            limit=_min_limit(self._limit, _limit(limit)),
        )

    def _clamped(self, ranges: tuple[OffsetRange, ...], offsets: Bounds, timestamps: Bounds) -> tuple[OffsetRange, ...]:
        """The ranges cut to the offset bounds and to the first offset at the lowest timestamp, re-planned."""
        out = []
        with _opened(self._store) as store:
            for r in ranges:
                log = store.partition(r.topic, r.partition)
                start, end = r.start, r.end
                if offsets[0] is not None:
                    start = max(start, offsets[0])
                if offsets[1] is not None:
                    end = min(end, offsets[1])
                if timestamps[0] is not None and start < end:
                    found = log.offset_for_timestamp(timestamps[0])
                    start = max(start, end if found is None else found)
                if (start, end) == (r.start, r.end):
                    out.append(r)
                elif end > start:
                    out.append(offset_range(log, start, end, r.committed_only))
        return tuple(out)

    def _read_schema(self, schema: pa.Schema) -> pa.Schema:
        """The columns to decode: the scan's, plus `timestamp` when a time filter needs it."""
        if self._time_filter is None or "timestamp" in schema.names:
            return schema
        from txlog.scan.arrow_columns import RECORD_SCHEMA

        return schema.append(RECORD_SCHEMA.field("timestamp"))

    def _filtered(self, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        """`batch` without the rows outside the time filter, in the scan's columns."""
        if self._time_filter is None:
            return batch
        pc = optional_module("pyarrow.compute", "txlog.scan")
        millis = pc.cast(batch.column("timestamp"), "int64")
        low, high = self._time_filter
        mask = None
        if low is not None:
            mask = pc.greater_equal(millis, low * 1000)
        if high is not None:
            below = pc.less(millis, high * 1000)
            mask = below if mask is None else pc.and_(mask, below)
        if mask is not None:
            batch = batch.filter(mask)
        return batch.select(schema.names)


# ---- argument checks ---------------------------------------------------------------------------


@contextmanager
def _opened(store: str | os.PathLike[str] | Store) -> Iterator[Store]:
    """The store to plan with: the caller's open one, or the path opened read-only for the while."""
    if isinstance(store, Store):
        yield store
        return
    if not isinstance(store, str | os.PathLike):
        raise IllegalArgumentError(f"store must be a path or a storage.Store, not {type(store).__name__}")
    opened = open_store(os.fspath(store))
    try:
        yield opened
    finally:
        opened.close()


def _isolation(value: str | IsolationLevel) -> IsolationLevel:
    try:
        return IsolationLevel.parse(value)
    except IllegalArgumentError:
        choices = " or ".join(level.value for level in IsolationLevel)
        raise IllegalArgumentError(f"isolation_level must be {choices}, not {value!r}") from None


def _columns(columns: Sequence[str] | None, *, within: Sequence[str] | None = None) -> tuple[str, ...]:
    """The requested record-view columns, checked: known names, each once."""
    from txlog.scan.arrow_columns import DEFAULT_COLUMNS, RECORD_SCHEMA

    if columns is None:
        return DEFAULT_COLUMNS
    if isinstance(columns, str):
        raise IllegalArgumentError(f"columns must be a list of names, not the string {columns!r}")
    names = tuple(columns)
    known = tuple(within) if within is not None else tuple(RECORD_SCHEMA.names)
    unknown = [c for c in names if c not in known]
    if unknown:
        what = "this scan" if within is not None else "the txlog record view"
        raise IllegalArgumentError(f"{what} has no column {unknown[0]!r} (its columns: {', '.join(known)})")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise IllegalArgumentError(f"column {repeated[0]!r} is named twice")
    return names


def _topics(topics: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if topics is None:
        return None
    names = (topics,) if isinstance(topics, str) else tuple(topics)
    bad = [t for t in names if not isinstance(t, str) or not t]
    if bad or not names:
        raise IllegalArgumentError(f"topics must be a topic name or a list of them, not {topics!r}")
    return names


def _offset_spec(value: str | Mapping[TopicPartitionKey, int], name: str) -> OffsetSpec:
    if isinstance(value, str):
        if value in ("earliest", "latest"):
            return value
    elif isinstance(value, Mapping):
        spec: dict[TopicPartitionKey, int] = {}
        for key, offset in value.items():
            if not (
                isinstance(key, tuple)
                and len(key) == 2
                and isinstance(key[0], str)
                and _is_int(key[1])
                and key[1] >= 0
                and _is_int(offset)
                and offset >= 0
            ):
                raise IllegalArgumentError(
                    f"{name} maps (topic, partition) to an offset >= 0; {key!r}: {offset!r} is not that"
                )
            spec[(key[0], int(key[1]))] = int(offset)
        return spec
    raise IllegalArgumentError(f"{name} must be 'earliest', 'latest' or {{(topic, partition): offset}}, not {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _timestamp(value: int | None, name: str) -> int | None:
    if value is not None and not _is_int(value):
        raise IllegalArgumentError(f"{name} must be epoch milliseconds (an int), not {value!r}")
    return value


def _bounds(value: Bounds | None, name: str) -> Bounds:
    if value is None:
        return (None, None)
    if not isinstance(value, tuple | list) or len(value) != 2 or not all(v is None or _is_int(v) for v in value):
        raise IllegalArgumentError(f"{name} must be (lowest, highest) with ints or None, not {value!r}")
    return (value[0], value[1])


def _intersect(a: Bounds | None, b: Bounds) -> Bounds:
    if a is None:
        return b
    lows = [v for v in (a[0], b[0]) if v is not None]
    highs = [v for v in (a[1], b[1]) if v is not None]
    return (max(lows) if lows else None, min(highs) if highs else None)


def _limit(value: int | None) -> int | None:
    if value is not None and (not _is_int(value) or value < 0):
        raise IllegalArgumentError(f"limit must be an int >= 0, not {value!r}")
    return value


def _min_limit(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
