"""A scan as a Polars LazyFrame: an IO plugin source that reads only what the query needs.

Polars calls the source with the columns the query uses, its predicate (a Polars Expr)
and a row limit, once per collect, in its in-memory and streaming engines alike. The
source then:

* builds only those columns (the scan's projection);
* narrows the plan by the predicate's conjuncts on topic, partition, offset and
  timestamp (txlog.scan.pushdown: sound narrowing only, never a lost row);
* applies the whole predicate to every frame it yields - the plugin protocol makes the
  source responsible for it once the predicate is accepted - and stops after the limit.

The predicate is read through its JSON serialisation (`Expr.meta.serialize`): conjuncts
are split at `&`, a conjunct of topic and partition alone is evaluated on the plan's
pairs, and a comparison of offset or timestamp with a literal gives a bound. The
literal is evaluated by Polars itself (`pl.select`), so its encoding in the JSON never
matters; any shape not recognised narrows nothing.
"""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from txlog.scan.pushdown import (
    PARTITION_COLUMNS,
    Narrowing,
    Scan,
    limited_batches,
    narrow,
    needed_columns,
    offset_bounds,
    plan_partitions,
    timestamp_floor_ms,
)

if TYPE_CHECKING:
    import polars as pl

#: Polars' names of the comparisons that bound a column, as pushdown's operators.
_OPERATORS = {"Eq": "=", "Gt": ">", "GtEq": ">=", "Lt": "<", "LtEq": "<="}
#: The same comparison seen from the other side (`5 < col` is `col > 5`).
_FLIPPED = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
#: `is_between(lo, hi, closed=...)`: the operators of its two bounds.
_BETWEEN = {"both": (">=", "<="), "left": (">=", "<"), "right": (">", "<="), "none": (">", "<")}


def to_polars(scan: Scan) -> pl.LazyFrame:
    """A LazyFrame over `scan`, with projection, predicate and limit pushed into its plan."""
    import polars as pl
    from polars.io.plugins import register_io_source

    schema = pl.from_arrow(scan.schema.empty_table()).schema  # type: ignore[union-attr]

    def source(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        return _frames(scan, with_columns, predicate, n_rows)

    return register_io_source(source, schema=schema, explain_name="txlog")


def _frames(
    scan: Scan, with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None
) -> Iterator[pl.DataFrame]:
    """The frames Polars asked for: projected, filtered by `predicate`, at most `n_rows` rows."""
    import polars as pl

    narrowing = Narrowing() if predicate is None else predicate_narrowing(scan, predicate)
    output = scan.schema.names if with_columns is None else with_columns
    filtered_by = [] if predicate is None else predicate.meta.root_names()
    narrowed = narrow(scan, narrowing, needed_columns(scan, output, filtered_by))
    # a limit after a filter counts the rows that pass it: only an unfiltered one bounds the read
    batches = narrowed.to_batches() if predicate is not None or n_rows is None else limited_batches(narrowed, n_rows)
    left = n_rows
    for batch in batches:
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        if predicate is not None:
            frame = frame.filter(predicate)
        frame = frame.select(output)
        if left is not None:
            frame = frame.head(left)
            left -= frame.height
        if frame.height:
            yield frame
        if left == 0:
            return


def predicate_narrowing(scan: Scan, predicate: pl.Expr) -> Narrowing:
    """What the conjuncts of `predicate` on topic, partition, offset and timestamp narrow."""
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - a predicate Polars cannot serialise narrows nothing (it is still applied)
        return Narrowing()
    narrowing = Narrowing()
    for conjunct in _conjuncts(tree):
        narrowing = _narrow_by(scan, narrowing, conjunct)
    return narrowing


def _conjuncts(node: Any) -> list[Any]:
    """The terms of a chain of `&` (iteratively: a long chain must not hit the recursion limit)."""
    out, pending = [], [node]
    while pending:
        current = pending.pop()
        binary = current.get("BinaryExpr") if isinstance(current, dict) else None
        if binary is not None and binary.get("op") == "And":
            pending.extend((binary["right"], binary["left"]))
        else:
            out.append(current)
    return out


def _narrow_by(scan: Scan, narrowing: Narrowing, conjunct: Any) -> Narrowing:
    """`narrowing` further narrowed by one conjunct, unchanged when it is not understood."""
    try:
        expr = _expr(conjunct)
        names = set(expr.meta.root_names())
        if names and names <= PARTITION_COLUMNS:
            return narrowing.with_partitions(_kept_partitions(scan, expr))
        if names == {"offset"}:
            for op, value in _bounds(conjunct, "offset"):
                if isinstance(value, int) and not isinstance(value, bool):
                    narrowing = narrowing.with_offsets(*offset_bounds(op, value))
        elif names == {"timestamp"}:
            for op, value in _bounds(conjunct, "timestamp"):
                floor = _timestamp_floor(op, value)
                if floor is not None:
                    narrowing = narrowing.with_min_timestamp(floor)
    except Exception:  # noqa: BLE001 - not understood (another Polars' JSON, say): no narrowing, never wrong rows
        return narrowing
    return narrowing


def _expr(node: Any) -> pl.Expr:
    import polars as pl

    return pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")


def _kept_partitions(scan: Scan, expr: pl.Expr) -> list[tuple[str, int]]:
    """The plan's (topic, partition) pairs a conjunct of those columns alone keeps: judged by Polars itself."""
    import polars as pl

    pairs = plan_partitions(scan)
    probe = pl.DataFrame(
        {"topic": [t for t, _ in pairs], "partition": [p for _, p in pairs]},
        schema={"topic": pl.String, "partition": pl.Int32},
    )
    kept = probe.filter(expr)
    return list(zip(kept["topic"].to_list(), kept["partition"].to_list(), strict=True))


def _bounds(node: Any, column: str) -> list[tuple[str, Any]]:
    """(operator, value) of `column <op> literal` or `column.is_between(lo, hi)`; [] for anything else."""
    binary = node.get("BinaryExpr")
    if binary is not None:
        op = _OPERATORS.get(binary.get("op"))
        left, right = binary.get("left"), binary.get("right")
        if op is None:
            return []
        if left == {"Column": column} and _is_literal(right):
            return [(op, _literal(right))]
        if right == {"Column": column} and _is_literal(left):
            return [(_FLIPPED[op], _literal(left))]
        return []
    function = node.get("Function")
    if function is not None:
        between = function.get("function", {}).get("Boolean", {})
        inputs = function.get("input", [])
        if isinstance(between, dict) and "IsBetween" in between and len(inputs) == 3:
            closed = str(between["IsBetween"].get("closed", "")).lower()
            if inputs[0] == {"Column": column} and closed in _BETWEEN and all(map(_is_literal, inputs[1:])):
                low_op, high_op = _BETWEEN[closed]
                return [(low_op, _literal(inputs[1])), (high_op, _literal(inputs[2]))]
    return []


def _is_literal(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"Literal"}


def _literal(node: Any) -> Any:
    """A literal's value, as Polars evaluates it."""
    import polars as pl

    return pl.select(_expr(node)).item()


def _timestamp_floor(op: str, value: Any) -> int | None:
    """The epoch-ms lower bound of `timestamp <op> value`; only an aware datetime is an instant."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    micros = (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(microseconds=1)
    return timestamp_floor_ms(op, micros)
