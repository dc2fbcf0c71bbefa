"""A scan as a DuckDB relation that DuckDB pushes its projection and filters into.

DuckDB's Python scan of an Arrow object (duckdb 2.0) talks to a *source*: it asks
`accepts(predicate)` for each conjunct of the query's filter, then `stream(columns,
filters)` for each pass over the data, with the column indexes it reads and the
predicates the source accepted, as a small tree (`duckdb._sources.nodes`: comparisons,
IN, IS NULL, AND, OR, NOT of a column and constants). A pyarrow Dataset gets the same
calls, but its scanner only sees a pyarrow expression; our own source sees the tree and
so can turn it into a narrower txlog plan:

* projection: only the columns the query reads (or filters on) are built;
* filters on topic and partition prune partitions (judged exactly on the plan's pairs),
  on offset they bound every range, a lower bound on timestamp starts each partition at
  the first offset at or after it (txlog.scan.pushdown says why only the lower bound);
* every accepted predicate is then applied to the rows produced, by pyarrow compute
  with the translation DuckDB itself uses for Datasets (`duckdb._sources.to_arrow`),
  so a filter on any column (a value, a header) is still exact;
* a LIMIT is not offered to a source: DuckDB stops pulling, and since the scan reads
  lazily the rest is never read.

`duckdb._sources` is DuckDB's own, underscored module: if it is missing (another DuckDB
line), the scan is handed over as a plain Arrow stream, correct but without pushdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from txlog.scan.pushdown import (
    PARTITION_COLUMNS,
    Narrowing,
    Scan,
    narrow,
    needed_columns,
    offset_bounds,
    plan_partitions,
    timestamp_floor_ms,
)

if TYPE_CHECKING:
    import duckdb

#: DuckDB's type name of a constant compared with the timestamp column: microseconds since the epoch.
_ZONED_TIMESTAMP = "TIMESTAMP WITH TIME ZONE"
_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"})


def to_duckdb(scan: Scan, connection: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyRelation:
    """A relation over `scan` on `connection` (DuckDB's default connection when None)."""
    import duckdb

    con = connection if connection is not None else duckdb.default_connection()
    source_class = _source_class()
    return con.from_arrow(scan if source_class is None else source_class(scan))


_SOURCE_CLASS: Any = None


def _source_class() -> Any:
    """The pushdown source class, defined once over DuckDB's source base; None without one."""
    global _SOURCE_CLASS
    if _SOURCE_CLASS is None:
        try:
            from duckdb._sources import ArrowScanSource
            from duckdb._sources.nodes import Untranslatable
            from duckdb._sources.to_arrow import to_arrow
        except ImportError:
            return None
        _SOURCE_CLASS = _define_source(ArrowScanSource, to_arrow, Untranslatable)
    return _SOURCE_CLASS


def _define_source(base: type, to_arrow: Any, untranslatable: type[Exception]) -> type:
    class ScanSource(base):
        """The DuckDB source over one Scan: a fixed plan, so a fixed schema, read afresh per stream."""

        schema_is_stable = True

        def __init__(self, scan: Scan) -> None:
            super().__init__(scan)
            self.scan = scan

        def __arrow_c_schema__(self) -> object:
            return self.scan.schema.__arrow_c_schema__()

        def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
            return self.scan.__arrow_c_stream__(requested_schema)

        def accepts(self, predicate: Any) -> bool:
            """Any predicate pyarrow evaluates as DuckDB would: the stream applies it to every row."""
            try:
                to_arrow(predicate, self.scan.schema)
            except untranslatable:
                return False
            return True

        def stream(self, columns: Sequence[int] | None, filters: Sequence[Any]) -> tuple[object, bool]:
            return _stream(self.scan, columns, filters, to_arrow), True

    return ScanSource


def _stream(scan: Scan, columns: Sequence[int] | None, filters: Sequence[Any], to_arrow: Any) -> object:
    """An Arrow stream of `columns` of the rows of `scan` that pass every one of `filters`."""
    import pyarrow.dataset as ds

    names = scan.schema.names
    output = names if columns is None else [names[i] for i in columns]
    conjuncts = [term for node in filters for term in _conjuncts(node)]
    narrowing = Narrowing()
    for term in conjuncts:
        narrowing = _narrow_by(scan, narrowing, term, to_arrow)
    filtered_by = {name for node in filters for name in _columns_of(node)}
    narrowed = narrow(scan, narrowing, needed_columns(scan, output, filtered_by))
    mask = None
    for node in filters:
        term = to_arrow(node, narrowed.schema)
        mask = term if mask is None else mask & term
    scanner = ds.Scanner.from_batches(narrowed.to_reader(), columns=list(output), filter=mask)
    return scanner.to_reader().__arrow_c_stream__()


def _conjuncts(node: Any) -> list[Any]:
    out, pending = [], [node]
    while pending:
        current = pending.pop()
        if type(current).__name__ == "Binary" and current.op == "AND":
            pending.extend((current.right, current.left))
        else:
            out.append(current)
    return out


def _columns_of(node: Any) -> set[str]:
    """The top-level columns a predicate tree names."""
    out, pending = set(), [node]
    while pending:
        current = pending.pop()
        parts = getattr(current, "parts", None)
        if type(current).__name__ == "Col" and parts:
            out.add(parts[0])
        for attr in ("left", "right", "operand"):
            child = getattr(current, attr, None)
            if child is not None:
                pending.append(child)
        pending.extend(getattr(current, "values", None) or ())
    return out


def _narrow_by(scan: Scan, narrowing: Narrowing, term: Any, to_arrow: Any) -> Narrowing:
    """`narrowing` further narrowed by one conjunct, unchanged when it is not understood."""
    names = _columns_of(term)
    if names and names <= PARTITION_COLUMNS:
        return narrowing.with_partitions(_kept_partitions(scan, term, to_arrow))
    bound = _comparison(term)
    if bound is None:
        return narrowing
    column, op, value, kind = bound
    if column == "offset" and kind in _INTEGER_TYPES:
        return narrowing.with_offsets(*offset_bounds(op, value))
    if column == "timestamp" and kind == _ZONED_TIMESTAMP and isinstance(value, int):
        floor = timestamp_floor_ms(op, value)
        return narrowing if floor is None else narrowing.with_min_timestamp(floor)
    return narrowing


def _comparison(term: Any) -> tuple[str, str, Any, str] | None:
    """(column, operator, constant, its DuckDB type) of `column <op> constant`, else None."""
    if type(term).__name__ != "Binary" or term.op not in ("=", ">", ">=", "<", "<="):
        return None
    left, right = term.left, term.right
    if type(left).__name__ != "Col" or type(right).__name__ != "Lit" or len(left.parts) != 1:
        return None
    return left.parts[0], term.op, right.value, right.type


def _kept_partitions(scan: Scan, term: Any, to_arrow: Any) -> list[tuple[str, int]]:
    """The plan's (topic, partition) pairs a conjunct of those columns alone keeps, judged by pyarrow."""
    import pyarrow as pa

    pairs = plan_partitions(scan)
    probe = pa.table(
        {"topic": [t for t, _ in pairs], "partition": [p for _, p in pairs]},
        schema=pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.int32())]),
    )
    kept = probe.filter(to_arrow(term, scan.schema))
    return list(zip(kept["topic"].to_pylist(), kept["partition"].to_pylist(), strict=True))
