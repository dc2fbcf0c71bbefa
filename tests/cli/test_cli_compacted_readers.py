"""Every reader on a partition cleaned by `Store.compact` (issue 25): offset gaps are normal there.

One store, one compacted topic: keyed records from an idempotent producer, committed and aborted
transactions, tombstones, segments rolled, then cleaned. What each reader returns is checked
against the model of what compaction must leave: the read_committed view from before the
cleaning, thinned to the last record of each key (aborted records were already out of it; the
tombstones stay, delete.retention.ms being a day). `verify` finds nothing wrong, and still
reports offsets missing from the active segment, and from a topic that is not compacted.
"""

from __future__ import annotations

import json
import os

import pytest

import txlog as client
from storage import Store
from storage.log_files import log_file
from tests.cli.cli_helpers import assert_ok, txlog
from txlog.topic_partition import TopicPartition

TOPIC = "prices"
# no cleaning by the writer itself (a ratio of 1 is never exceeded): the test decides when
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 1}
Row = tuple[int, bytes | None, bytes | None]


def _view(store: Store, isolation: str) -> list[Row]:
    consumer = client.Consumer(store, isolation_level=isolation)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    end = consumer.end_offsets([tp])[tp]
    rows: list[Row] = []
    idle = 0
    while consumer.position(tp) < end:
        records = consumer.poll(max_records=100)
        rows += [(r.offset, r.key, r.value) for r in records]
        idle = 0 if records else idle + 1
        assert idle < 100, f"the consumer stopped at {consumer.position(tp)}, before the end {end}"
    consumer.close()
    return rows


def _write(store: Store) -> None:
    plain = client.Producer(store, enable_idempotence=True)
    txn = client.Producer(store, transactional_id="writer")
    txn.init_transactions()
    for round_ in range(12):
        for k in range(6):
            value = None if (round_ % 5 == 4 and k % 2 == 0) else f"r{round_}-k{k}".encode()
            plain.send(TOPIC, key=f"k{k}".encode(), value=value, partition=0)
        plain.flush()
        txn.begin_transaction()
        for k in (round_ % 6, (round_ + 3) % 6):
            txn.send(TOPIC, key=f"k{k}".encode(), value=f"txn{round_}-k{k}".encode(), partition=0)
        txn.flush()
        txn.commit_transaction() if round_ % 3 else txn.abort_transaction()
    plain.close()
    txn.close()


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory) -> tuple[str, list[Row]]:
    """The store, and the model of what every reader must now return."""
    path = str(tmp_path_factory.mktemp("compacted") / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1, CONFIGS)
        _write(store)
        store.partition(TOPIC, 0).roll()
        before = _view(store, "read_committed")
        assert len(store.partition(TOPIC, 0).segments) > 3
        (stats,) = store.compact(TOPIC)
        assert stats.records_retained < stats.records_read
    latest: dict[bytes | None, Row] = {}
    for row in before:
        latest[row[1]] = row
    return path, sorted(latest.values())


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_the_consumer_reads_the_latest_record_of_each_key(cleaned, isolation):
    path, model = cleaned
    with Store.open(path, read_only=True) as store:
        assert _view(store, isolation) == model
    offsets = [offset for offset, _, _ in model]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets))), "the cleaning should leave gaps"


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_consume_prints_the_latest_record_of_each_key(cleaned, isolation):
    path, model = cleaned
    run = txlog("consume", "-t", TOPIC, "-o", "beginning", "-e", "-J", "--isolation-level", isolation, data_dir=path)
    assert_ok(run)
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["payload"]) for r in rows] == [
        (o, k.decode(), None if v is None else v.decode()) for o, k, v in model
    ]


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_scan_reads_the_latest_record_of_each_key(cleaned, isolation):
    path, model = cleaned
    table = client.scan(path, TOPIC, isolation_level=isolation, columns=["offset", "key", "value"]).to_arrow()
    assert list(zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True)) == model


def test_verify_finds_nothing_wrong_with_a_cleaned_partition(cleaned):
    path, _ = cleaned
    run = txlog("verify", "-t", TOPIC, "--output", "json", data_dir=path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout) == []


def test_inspect_prints_the_cleaned_segments_records_and_no_error(cleaned):
    path, model = cleaned
    with Store.open(path, read_only=True) as store:
        directory = store.partition_dir(TOPIC, 0)
        files = [log_file(directory, s.base_offset) for s in store.partition(TOPIC, 0).segments]
    run = txlog("inspect", "--deep-iteration", "--print-data-log", "--files", ",".join(files), data_dir=path)
    assert_ok(run)
    printed = [int(line.split()[2]) for line in run.stdout.splitlines() if line.startswith("| offset: ")]
    assert [o for o, _, _ in model] == [o for o in printed if o in {m[0] for m in model}]


def _cut_a_batch(directory: str, base: int) -> int:
    """Take the second batch out of the segment's bytes (as lost data would): returns its first offset."""
    from storage.file_records import FileRecords

    path = log_file(directory, base)
    with FileRecords.open(path) as records:
        batches = list(records.batches())
    second = batches[1]
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: second.position] + data[second.position + second.size :])
    return second.base_offset


def _offsets_missing(path: str, topic: str) -> list[dict]:
    run = txlog("verify", "-t", topic, "--output", "json", data_dir=path)
    assert run.returncode == 3, run.stdout + run.stderr
    return [f for f in json.loads(run.stdout) if "are missing" in f["finding"]]


def test_verify_still_reports_offsets_missing_from_the_active_segment_of_a_compacted_topic(tmp_path):
    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1, CONFIGS)
        producer = client.Producer(store, enable_idempotence=False, acks=1)
        for k in range(3):
            producer.send(TOPIC, key=b"k%d" % k, value=b"v", partition=0)
            producer.flush()
        producer.close()
        directory, active = store.partition_dir(TOPIC, 0), store.partition(TOPIC, 0).segments[-1].base_offset
    lost = _cut_a_batch(directory, active)
    (missing,) = _offsets_missing(path, TOPIC)
    assert missing["offset"] == lost


def test_verify_still_reports_offsets_missing_from_a_topic_that_is_not_compacted(tmp_path):
    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.create_topic("orders", 1, {"segment.bytes": 2048})
        producer = client.Producer(store, enable_idempotence=False, acks=1)
        for k in range(60):
            producer.send("orders", key=b"k%d" % k, value=b"v" * 40, partition=0)
            producer.flush()
        producer.close()
        log = store.partition("orders", 0)
        directory, sealed = store.partition_dir("orders", 0), log.segments[0].base_offset
        assert len(log.segments) > 1
    lost = _cut_a_batch(directory, sealed)
    assert any(f["offset"] == lost for f in _offsets_missing(path, "orders"))


def test_the_partition_directory_is_what_the_tests_above_read(cleaned):
    path, _ = cleaned
    names = os.listdir(os.path.join(path, f"{TOPIC}-0"))
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names), names
