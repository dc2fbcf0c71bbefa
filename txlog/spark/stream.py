"""`spark.readStream.format("txlog")`: a micro-batch source with Kafka's offsets and exactly-once restarts.

Offsets are Spark's Kafka JSON, {"topic": {"partition": next offset}}, so a checkpoint
reads like one written by the Kafka source. Each micro-batch reads [previous end, new
end) of every partition; "latest" is the last stable offset under read_committed, so
a micro-batch never holds part of an undecided transaction and its rows cannot change
afterwards. That, with Spark's offset log, is what makes a restart exactly-once: a
batch re-planned after a crash covers the same offsets, its ends fixed in the
checkpoint, and the same `.txnindex` entries decide the same rows.

Partitions that appear while the query runs (new topics matching the pattern, added
partitions) are read from their earliest offset, as the Kafka source does.

Trigger limits follow Spark's Kafka source (KafkaMicroBatchStream): `maxOffsetsPerTrigger`
caps a micro-batch, shared across partitions by backlog; `minOffsetsPerTrigger` skips a
trigger (the end offered is the start, so Spark runs no batch) until that many offsets are
new or `maxTriggerDelay` has passed since the last batch; the first trigger of a run always
fires, as there. Under Trigger.AvailableNow the minimum is not applied: skipping would end
the query with data left behind, as Spark takes an unchanged offset for "nothing more".
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from txlog.fetch import LogBounds, latest_offset
from txlog.scan.planning import (
    TopicPartitionKey,
    open_store,
    partition_bounds,
    plan_ranges,
    starting_offsets,
)
from txlog.scan.range_reader import read_range
from txlog.spark.options import SourceOptions
from txlog.spark.worker_errors import one_line_errors

Offsets = dict[TopicPartitionKey, int]


def to_json_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Kafka's JSON shape: {"topic": {"0": 23}} (Spark stores the dict as that JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json_offsets(value: dict) -> Offsets:
    return {(topic, int(p)): int(offset) for topic, parts in value.items() for p, offset in parts.items()}


class TxlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Planning (offsets, partitions) runs on the driver; `read` on executors, as in batch queries."""

    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._available_now: Offsets | None = None
        self._seen_latest: Offsets | None = None  # what the last latestOffset saw, for reportLatestOffset
        # epoch ms of the last micro-batch let through by minOffsetsPerTrigger; 0 lets the first one through
        self._last_trigger_ms = 0

    def initialOffset(self) -> dict:
        """Where a new query starts (startingTimestamp, startingOffsetsByTimestamp, else startingOffsets,
        'latest' by default: Spark's precedence); a restart uses its checkpoint."""
        with one_line_errors():
            store = open_store(self.options.path)
            try:
                bounds = partition_bounds(store, self.options.select_partitions(store))
                return to_json_offsets(starting_offsets(store, bounds, self.options.read_request()))
            finally:
                store.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark hands this back to latestOffset (ReadAllAvailable instead under Trigger.Once).

        PySpark's limits cannot carry maxTriggerDelay nor combine a minimum with a maximum, so
        the minimum and its delay are read from the options in latestOffset.
        """
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is visible now, then stop."""
        self._available_now = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: the visible end of every partition, within `limit`."""
        with one_line_errors():
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        bounds = self._bounds()
        self._seen_latest = {tp: latest_offset(b, self.options.isolation) for tp, b in bounds.items()}
        latest = self._seen_latest if self._available_now is None else self._available_now
        for tp, offset in latest.items():
            begin.setdefault(tp, bounds[tp].log_start_offset if tp in bounds else offset)
        end = {tp: max(begin[tp], offset) for tp, offset in latest.items()}
        if isinstance(limit, ReadAllAvailable):  # Spark's rule: it outranks every other limit
            return to_json_offsets(end)
        if self._delay_batch(begin, end, limit):
            return to_json_offsets({tp: begin[tp] for tp in end})
        return to_json_offsets(_limited(begin, end, limit))

    def reportLatestOffset(self) -> dict:
        """Spark asks right after latestOffset, for progress reports: that call's look, not another."""
        return to_json_offsets(self._seen_latest if self._seen_latest is not None else self._latest())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        with one_line_errors():
            store = open_store(self.options.path)
            try:
                bounds = partition_bounds(store, list(finish))
                begin = {tp: begin.get(tp, b.log_start_offset) for tp, b in bounds.items()}
                ranges = plan_ranges(store, self.options.read_request(), bounds, begin, finish)
            finally:
                store.close()
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with one_line_errors():
            yield from read_range(partition.value, self.arrow_schema, fail_on_data_loss=self.options.fail_on_data_loss)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the store."""

    # ---- helpers ------------------------------------------------------------------------------

    def _delay_batch(self, begin: Offsets, end: Offsets, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: skip this trigger while fewer offsets are new and maxTriggerDelay has not passed."""
        minimum = limit.min_rows if isinstance(limit, ReadMinRows) else self.options.min_offsets_per_trigger
        if minimum is None or self._available_now is not None:
            return False
        now = int(time.time() * 1000)
        if now - self._last_trigger_ms < self.options.max_trigger_delay_ms and _new_offsets(begin, end) < minimum:
            return True
        self._last_trigger_ms = now
        return False

    def _bounds(self) -> dict[TopicPartitionKey, LogBounds]:
        store = open_store(self.options.path)
        try:
            return partition_bounds(store, self.options.select_partitions(store))
        finally:
            store.close()

    def _latest(self) -> Offsets:
        return {tp: latest_offset(b, self.options.isolation) for tp, b in self._bounds().items()}


class RefusedStreamReader(DataSourceStreamReader):
    """The reader of a stream whose options were refused: the query's first call raises the error.

    Spark asks for the initial offset (a new query) or the latest (a restart) first; either
    fails the query with the option's one-line error.
    """

    def __init__(self, error: Exception):
        self.error = error

    def _fail(self) -> dict:
        with one_line_errors():
            raise self.error

    def initialOffset(self) -> dict:
        return self._fail()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        return self._fail()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._fail()
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._fail()
        return iter(())

    def commit(self, end: dict) -> None:
        """Nothing was read."""


def _new_offsets(begin: Offsets, end: Offsets) -> int:
    return sum(end[tp] - begin[tp] for tp in end)


def _limited(begin: Offsets, end: Offsets, limit: ReadLimit) -> Offsets:
    """Cap the micro-batch at `limit`, sharing a row budget across partitions by backlog (as Kafka's source)."""
    backlog = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(backlog.values())
    if not isinstance(limit, ReadMaxRows) or total <= limit.max_rows:
        return end
    out = {}
    for tp, size in backlog.items():
        share = limit.max_rows * size / total
        step = math.floor(share) if share >= 1 else math.ceil(share)
        out[tp] = min(end[tp], begin[tp] + step)
    return out
