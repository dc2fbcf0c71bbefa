"""Stores and a read counter for the Polars and DuckDB tests (tests/scan/test_polars.py, test_duckdb.py).

`spread_store` is built for pushdown: one topic, three partitions of many small segments,
a record per batch, timestamps that grow with offsets, so a filter on partition, offset
or timestamp that reaches the plan reads a small fraction of the `.log` bytes.
`LogReads` counts those bytes where every segment read happens (os.pread, as
storage.file_records reads), so a test sees what was read, not what was planned.
"""

from __future__ import annotations

import os
import shutil

import pytest

import txlog
from tests.spark.spark_stores import no_fsync

SPREAD_TOPIC = "spread"
SPREAD_PARTITIONS = 3
SPREAD_RECORDS = 240  # per partition
#: CreateTime of record i of each partition: BASE_MS + i seconds (kept: the topic has no time retention).
BASE_MS = 1_700_000_000_000


def spread_store(path: str) -> str:
    """Build the pushdown store at `path`; returns the path."""
    with no_fsync():
        with txlog.Admin(path) as admin:
            admin.create_topic(SPREAD_TOPIC, SPREAD_PARTITIONS, {"segment.bytes": 16384, "retention.ms": -1})
        # batch_size=1: a batch per record, so offsets and timestamps map to bytes finely
        producer = txlog.Producer(path, enable_idempotence=False, batch_size=1)
        for i in range(SPREAD_RECORDS):
            for p in range(SPREAD_PARTITIONS):
                producer.send(
                    SPREAD_TOPIC,
                    f"value-{p}-{i}".encode() * 40,
                    key=f"k{i}".encode(),
                    partition=p,
                    timestamp_ms=BASE_MS + i * 1000,
                )
        producer.flush()
        producer.close()
    return path


class LogReads:
    """Bytes read from `.log` files through os.pread while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        real = os.pread

        def counting(fd: int, n: int, pos: int) -> bytes:
            data = real(fd, n, pos)
            try:
                if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
                    self.bytes += len(data)
            except OSError:
                pass
            return data

        monkeypatch.setattr(os, "pread", counting)

    def take(self) -> int:
        """The bytes counted since the last take."""
        n, self.bytes = self.bytes, 0
        return n


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKA_DIRS = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "kafka-dirs")
REAL_DIRS = ("macsakini-gzip-mixed", "lanxuage-gzip", "ravi-kraft-metadata")


def real_broker_dir(tmp_path, name: str) -> str:
    """A copy of one real broker's data directory (the fixture is read-only); skips without the fixtures."""
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    root = str(tmp_path / name)
    shutil.copytree(os.path.join(KAFKA_DIRS, name), root)
    return root
