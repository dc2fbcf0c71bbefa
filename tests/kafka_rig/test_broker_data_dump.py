"""Issue 21, item 2: `txlog inspect` prints what Kafka's kafka-dump-log prints for every file a
real broker wrote, `txlog verify` finds nothing, and no txlog command changes a byte.

The data set (tests/kafka_rig/broker_data.py) holds TV2 (Java client 4.4) and TV1 (librdkafka)
transactions, committed and aborted (ABORT markers, `.txnindex`), every codec, headers, null keys
and values, idempotent producers, KIP-848 and classic group commits, transactional offset
commits, a compacted topic after the cleaner ran, and the KRaft metadata log. Every txlog
command runs once, in the module fixture, between two snapshots of the copy's files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.kafka_rig.broker_data import BrokerDataset
from tests.kafka_rig.dump_compare import (
    ALLOWED,
    REPO,
    Run,
    kafka_dump,
    tree_state,
    txlog_inspect,
    unexplained,
    used_entries,
)

INDEXES = (".index", ".timeindex")
KRAFT_TIMEINDEX = os.path.join("__cluster_metadata-0", "00000000000000000000.timeindex")


OPTION_SETS = {
    "deep-iteration": ["--deep-iteration", "--print-data-log"],
    "transaction-log-decoder": ["--transaction-log-decoder"],
    "offsets-decoder": ["--offsets-decoder"],
    "cluster-metadata-decoder": ["--cluster-metadata-decoder"],
    "verify-index-only": ["--verify-index-only"],
    "index-sanity-check": ["--index-sanity-check"],
}


def _files_for(name: str, dataset: BrokerDataset) -> list[str]:
    files = dataset.files()
    if name == "transaction-log-decoder":
        return [f for f in files if "__transaction_state-" in f and f.endswith(".log")]
    if name == "offsets-decoder":
        return [f for f in files if "__consumer_offsets-" in f and f.endswith(".log")]
    if name == "cluster-metadata-decoder":
        return [f for f in files if "__cluster_metadata-" in f and f.endswith((".log", ".checkpoint"))]
    if name == "verify-index-only":
        return [f for f in files if f.endswith(INDEXES)]
    if name == "index-sanity-check":
        # the KRaft log's time index fails it in both tools (test_kraft_time_index_fails_the_sanity_check_in_both)
        # and Kafka stops at the exception, so it is checked on its own
        return [f for f in files if f.endswith(INDEXES) and not f.endswith(KRAFT_TIMEINDEX)]
    return files


def _txlog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import app; app()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )


@pytest.fixture(scope="module")
def runs(broker_dataset: BrokerDataset) -> dict:
    """Every tool run over the copy, with the copy's state before and after the txlog commands."""
    out: dict = {"kafka": {}, "txlog": {}}
    for name, options in OPTION_SETS.items():
        out["kafka"][name] = kafka_dump(options, _files_for(name, broker_dataset))
    kraft_timeindex = os.path.join(broker_dataset.log_dir, KRAFT_TIMEINDEX)
    out["kafka"]["kraft-sanity"] = kafka_dump(["--index-sanity-check"], [kraft_timeindex])
    out["before"] = tree_state(broker_dataset.log_dir)
    for name, options in OPTION_SETS.items():
        out["txlog"][name] = txlog_inspect(options, _files_for(name, broker_dataset))
    out["txlog"]["kraft-sanity"] = txlog_inspect(["--index-sanity-check"], [kraft_timeindex])
    out["verify"] = _txlog("--data-dir", broker_dataset.log_dir, "verify", "--output", "json")
    out["inspect-dir"] = _txlog("inspect", broker_dataset.log_dir)
    out["after"] = tree_state(broker_dataset.log_dir)
    return out


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_inspect_prints_what_kafka_dump_log_prints(runs: dict, name: str) -> None:
    kafka: Run = runs["kafka"][name]
    txlog: Run = runs["txlog"][name]
    assert kafka.returncode == 0, kafka.stderr
    assert txlog.returncode == 0, txlog.stderr
    assert txlog.stderr == ""
    txlog_lines = txlog.stdout
    if name == "verify-index-only":
        # txlog ends with a result line where Kafka prints nothing (docs/cli-conventions.md §2)
        assert re.fullmatch(r"Verified \d+ index files against their logs: every entry matches\.", txlog_lines[-1])
        txlog_lines = txlog_lines[:-1]
    allowed = ALLOWED.get(name, [])
    assert unexplained(kafka.stdout, txlog_lines, allowed) == []
    # an entry no line needs any more is stale: take it out of the list and the docs
    assert used_entries(kafka.stdout, txlog_lines, allowed) == {a.name for a in allowed}


def test_kafka_only_complains_of_offset_gaps_that_txlog_does_not_report(runs: dict) -> None:
    """Kafka 4.4 reports a v2 record whose offset is not the previous one + 1 on stderr, starting
    from -1 in each file, so every segment not starting at 0 and every compacted one is listed;
    txlog does not treat gaps in v2 logs as problems (docs/kafka-formats.md §10)."""
    stderr = runs["kafka"]["deep-iteration"].stderr.splitlines()
    assert stderr, "the compacted topic has gaps: Kafka should list them"
    for line in stderr:
        assert re.fullmatch(r"Non-consecutive offsets in .*\.log|  -?\d+ is followed by \d+", line), line
    assert any("compacted-0" in line for line in stderr)


def test_kraft_time_index_fails_the_sanity_check_in_both(runs: dict) -> None:
    """The KRaft metadata log's active time index is left preallocated at shutdown, which
    Kafka's own sanity check rejects: txlog says the same words (and exits 3)."""
    kafka, txlog = runs["kafka"]["kraft-sanity"], runs["txlog"]["kraft-sanity"]
    reason = "has non-zero size but the last timestamp is 0 which is less than the first timestamp"
    assert kafka.returncode == 1 and reason in kafka.stderr
    assert txlog.returncode == 3 and reason in txlog.stderr


def test_verify_finds_nothing_but_the_kraft_time_index(runs: dict) -> None:
    """`txlog verify` over the broker's log directory: the one finding is the preallocated
    KRaft time index above (reported to the verify owners; see docs/kafka-formats.md §10)."""
    result = runs["verify"]
    findings = json.loads(result.stdout)
    assert [(f["topic"], f["file"]) for f in findings] == [("__cluster_metadata", "00000000000000000000.timeindex")]
    assert "fails the broker's sanity check" in findings[0]["finding"]


def test_inspect_of_the_whole_directory_reads_every_file(runs: dict, broker_dataset: BrokerDataset) -> None:
    result = runs["inspect-dir"]
    assert result.returncode == 0, result.stderr
    dumped = [line.removeprefix("Dumping ") for line in result.stdout.splitlines() if line.startswith("Dumping ")]
    assert dumped == broker_dataset.files()


def test_no_txlog_command_changed_the_copy(runs: dict) -> None:
    assert runs["after"] == runs["before"]


def test_the_data_set_has_every_kind_of_record(runs: dict) -> None:
    """The data set is what the comparisons claim to cover (a writer that silently did less would
    make them pass vacuously)."""
    deep = "\n".join(runs["kafka"]["deep-iteration"].stdout)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"compresscodec: {codec}" in deep
    assert "endTxnMarker: ABORT" in deep and "endTxnMarker: COMMIT" in deep
    assert re.search(r"headerKeys: \[h0,empty,nullvalue\]", deep)
    assert re.search(r"keySize: -1 valueSize: \d+", deep) and re.search(r"valueSize: -1", deep)
    assert re.search(r"^version: 0 producerId: \d+ firstOffset: \d+", deep, re.M), "no .txnindex entries"
    compacted = deep[deep.index("compacted-0") : deep.index("java-ctp-out-0")]
    assert "valueSize: -1" in compacted, "tombstones kept by the cleaner"
    assert "deleteHorizonMs: OptionalLong[" in compacted, "the cleaner stamps a delete horizon on tombstone batches"
    offsets = "\n".join(runs["kafka"]["offsets-decoder"].stdout)
    assert '"type":"8"' in offsets and "java-kip848-group" in offsets  # KIP-848 records
    assert '"group":"kafka-python-classic-group"' in offsets and '"group":"rdkafka-classic-group"' in offsets
    txn = "\n".join(runs["kafka"]["transaction-log-decoder"].stdout)
    assert '"clientTransactionVersion":2' in txn  # TV2 from the Java client
    assert '"transactionalId":"rdkafka-txn-zstd"' in txn


def test_the_brokers_consumers_were_recorded(broker_dataset: BrokerDataset) -> None:
    """What the broker's read_committed and read_uncommitted consumers returned is next to the data
    for other tests: aborted records only in the second, and every committed one in both."""
    rows = {}
    for level in ("read_committed", "read_uncommitted"):
        with open(broker_dataset.consumed_file(level)) as f:
            rows[level] = [json.loads(line) for line in f]
    values = {level: {bytes.fromhex(r["value"]) for r in rs if r["value"]} for level, rs in rows.items()}
    aborted = {v for v in values["read_uncommitted"] if b"-aborted-" in v}
    assert aborted and not any(b"-aborted-" in v for v in values["read_committed"])
    assert values["read_committed"] <= values["read_uncommitted"]
    assert {r["topic"] for r in rows["read_committed"]} >= {"java-txn", "rdkafka-txn", "compacted"}
