"""Arrow column builders shared by the source's readers.

Spark's TimestampType travels as Arrow `timestamp[us, tz=UTC]` (what
`pyspark.sql.pandas.types.to_arrow_schema` maps it to), while Kafka's timestamps are
epoch milliseconds: converted here, in one vectorised step per column.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")


def timestamp_array(epoch_ms: Iterable[int | None]) -> pa.Array:
    """Kafka epoch-millisecond timestamps (None for null) as Spark timestamps."""
    millis = pa.array(epoch_ms, pa.int64())
    return pc.multiply(millis, 1000).cast(SPARK_TIMESTAMP)
