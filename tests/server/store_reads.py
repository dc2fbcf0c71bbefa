"""What a store holds, read with txlog's embedded Consumer on the server's data directory.

Tests of the write path check their data this way, independent of the server's Fetch.
"""

from __future__ import annotations

from txlog.clients.consumer import Consumer
from txlog.topic_partition import TopicPartition


def read_values(data_dir: str, tp: TopicPartition, isolation: str) -> list[bytes | None]:
    """Every record value of `tp` visible under `isolation`, in offset order."""
    with Consumer(data_dir, isolation_level=isolation, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        values: list[bytes | None] = []
        while True:
            records = consumer.poll()
            if not records:
                return values
            values.extend(r.value for r in records)
