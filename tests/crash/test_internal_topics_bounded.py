"""A long-running `txlog process` keeps `__consumer_offsets` and `__transaction_state` a few segments
long (issue 25): both are compacted, as Kafka's are, and cleaned by the process that writes them.

A real `txlog process` subprocess commits one transaction per input record (offsets and output in
each) for a few hundred records, while this process counts every internal partition's segments
again and again. The internal topics get their configs the way a user would give them (topic
configs: ordinary overrides, as kafka-configs alters a broker's): small segments,
`delete.retention.ms=0` so a COMMIT marker whose transaction has nothing left goes two cleanings
after its data (Kafka's rule: kept by the pass that still reads its data, stamped with its delete
horizon by the next, dropped by the one after) instead of a day later, and
`min.cleanable.dirty.ratio=0.01` so a roll cleans whatever the last stable offset lets it (with
the default 0.5 the count also depends on how big the kept part is). The bound follows from
those configs and Kafka's rules:

* the active segment: 1;
* sealed, not yet cleaned: 2. A roll during a transaction leaves that transaction's data in the
  segment just sealed, above the last stable offset, so that segment waits for the next roll;
  then, until the cleaning that roll starts has finished, it and the one just sealed wait;
* cleaned: 4. Each dirty segment is nearly segment.bytes, so the cleaner (Kafka's
  groupSegmentsBySize, on sizes before cleaning) cleans it in a group of its own: at most 2
  pieces from the last pass. Everything cleaned before is regrouped by the next pass and holds the
  live records and at most the markers of 2 dirty segments (kept one pass for their horizon): a
  COMMIT marker (a 78-byte batch) is smaller than the offset commit its transaction wrote (a
  61-byte header and a record of group, topic, partition, offset and timestamps), so that is less
  than segment.bytes plus the live records: at most 2 groups.

So at most 7 per partition at any moment, however long the run. The run writes at least twice
that many segments' worth (checked from the log end offsets), so without compaction the bound
could not hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from storage import Store
from storage.log_files import LOG_FILE_SUFFIX
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from txlog.coordinator.internal_topics import DEFAULT_PARTITIONS, INTERNAL_CONFIG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEGMENT_BYTES = 2048
RECORDS = 300
ACTIVE, WAITING_DIRTY, CLEANED = 1, 2, 4
BOUND = ACTIVE + WAITING_DIRTY + CLEANED
# what a transaction writes to __consumer_offsets, per offset, at least: an offset commit batch (a 61-byte
# header and its record) and a 78-byte COMMIT marker for two offsets; __transaction_state's records are bigger
MIN_BYTES_PER_OFFSET = 70
RUN_TIMEOUT_S = 900


def _segment_counts(root: str) -> dict[str, int]:
    counts = {}
    for topic in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        for p in range(DEFAULT_PARTITIONS):
            directory = os.path.join(root, f"{topic}-{p}")
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            counts[f"{topic}-{p}"] = sum(1 for n in names if n.endswith(LOG_FILE_SUFFIX))
    return counts


@pytest.fixture
def data_dir(tmp_path) -> str:
    path = str(tmp_path / "data")
    small = {"segment.bytes": SEGMENT_BYTES, "delete.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01}
    with Store.open(path) as store:
        for topic in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            store.create_topic(topic, DEFAULT_PARTITIONS, {**INTERNAL_CONFIG, **small}, internal=True)
        store.create_topic("in", 1)
        store.create_topic("out", 1)
        import txlog as api

        with api.Producer(store) as producer:
            for i in range(RECORDS):
                producer.send("in", key=b"k%d" % i, value=b"value-%d" % i, partition=0)
    return path


def test_a_long_txlog_process_keeps_the_internal_topics_within_a_fixed_number_of_segments(data_dir):
    seen: dict[str, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for name, count in _segment_counts(data_dir).items():
                seen[name] = max(seen.get(name, 0), count)
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "cli.main", "--data-dir", data_dir, "process"]
            + ["--input", "in", "--output", "out", "--group", "g", "--transactional-id", "copier"]
            + ["--transaction-size", "1", "--", "cat"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    finally:
        done.set()
        sampler.join()
    assert run.returncode == 0, run.stderr
    for name, count in _segment_counts(data_dir).items():
        seen[name] = max(seen.get(name, 0), count)

    with Store.open(data_dir, read_only=True) as store:
        written = {
            topic: max(store.partition(topic, p).log_end_offset for p in range(DEFAULT_PARTITIONS))
            for topic in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
        }
        out = store.partition("out", 0)
        assert out.last_stable_offset == out.log_end_offset == 2 * RECORDS  # a record and a marker each
    for topic, offsets in written.items():
        # uncompacted, the busiest partition would have needed many times the bound
        assert offsets * MIN_BYTES_PER_OFFSET > 2 * BOUND * SEGMENT_BYTES, (topic, offsets)
    assert max(seen.values()) <= BOUND, seen
    assert any(count > 1 for count in seen.values()), "segments should have rolled"

    # the compacted internal topics (offset gaps in their cleaned segments) are what verify expects
    verify = subprocess.run(
        [sys.executable, "-m", "cli.main", "--data-dir", data_dir, "verify"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
