"""`txlog topics list`: partitions, size and end offsets in every --output format (run in-process)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil

import pytest

from cli.topics import human_size
from storage import Store
from tests.cli.cli_helpers import assert_ok, assert_usage_error, make_store, txlog
from tests.conftest import SHARED


@pytest.fixture
def data_dir(tmp_path) -> str:
    """`orders` (3 partitions, 300 records of ~100 bytes on partition 1, 5 on 2) and an empty `empty`."""
    path = str(tmp_path / "data")
    make_store(path, orders=3, empty=1)
    import txlog as client

    with client.Producer(path) as p:
        for _ in range(300):
            p.send("orders", value=b"x" * 100, partition=1)
        for _ in range(5):
            p.send("orders", value=b"y", partition=2)
    return path


def _truth(data_dir: str) -> dict[str, tuple[int, list[int]]]:
    """(bytes on disk, end offsets) per topic, read from the store directly."""
    with Store.open(data_dir, read_only=True) as store:
        out = {}
        for name in store.list_topics():
            logs = [store.partition(name, p) for p in range(store.partition_count(name))]
            out[name] = (sum(log.size_bytes for log in logs), [log.log_end_offset for log in logs])
        return out


def test_text_layout_keeps_the_name_first_and_adds_counts_sizes_and_end_offsets(data_dir):
    truth = _truth(data_dir)
    proc = txlog("topics", "list", data_dir=data_dir)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["Topic", "PartitionCount", "Size", "LogEndOffsets"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert list(rows) == ["empty", "orders"]
    size, ends = truth["orders"]
    assert 30_000 < size < 40_000  # 300 records of 100 bytes: KiB, not bytes
    assert rows["orders"] == ["3", *human_size(size).split(), "0,300,5"]
    assert rows["empty"] == ["1", "0", "B", "0"]
    assert human_size(size).endswith(" KiB")


def test_machine_formats_give_bytes_and_offset_lists(data_dir):
    truth = _truth(data_dir)
    doc = json.loads(txlog("topics", "list", "--output", "json", data_dir=data_dir).stdout)
    assert doc == [
        {"topic": "empty", "partitionCount": 1, "size": truth["empty"][0], "logEndOffsets": [0]},
        {"topic": "orders", "partitionCount": 3, "size": truth["orders"][0], "logEndOffsets": [0, 300, 5]},
    ]
    lines = txlog("topics", "list", "--output", "jsonl", data_dir=data_dir).stdout.splitlines()
    assert [json.loads(line) for line in lines] == doc
    rows = list(csv.reader(io.StringIO(txlog("topics", "list", "--output", "csv", data_dir=data_dir).stdout)))
    assert rows == [
        ["Topic", "PartitionCount", "Size", "LogEndOffsets"],
        ["empty", "1", str(truth["empty"][0]), "0"],
        ["orders", "3", str(truth["orders"][0]), "0,300,5"],
    ]


def test_table_format_and_exclude_internal(data_dir):
    # a group commit creates the internal topic __consumer_offsets
    assert_ok(txlog("consume", "-t", "orders", "--group", "g", "-c", "1", data_dir=data_dir))
    proc = txlog("topics", "list", "--output", "table", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout.splitlines()[0].split() == ["Topic", "PartitionCount", "Size", "LogEndOffsets"]
    assert "__consumer_offsets" in proc.stdout and "KiB" in proc.stdout
    proc = txlog("topics", "list", "--exclude-internal", "--output", "table", data_dir=data_dir)
    assert "__consumer_offsets" not in proc.stdout


def test_no_topics_prints_nothing_in_text_and_an_empty_array_in_json(tmp_path):
    path = str(tmp_path / "data")
    make_store(path)
    assert txlog("topics", "list", data_dir=path).stdout == ""
    assert json.loads(txlog("topics", "list", "--output", "json", data_dir=path).stdout) == []


def test_unknown_output_is_a_usage_error(data_dir):
    assert_usage_error(txlog("topics", "list", "--output", "xml", data_dir=data_dir))


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (20 * 1024 * 1024, "20.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (5 * 1024**5, "5120.0 TiB"),
    ],
)
def test_human_size(size, text):
    assert human_size(size) == text


KAFKA_DIR = os.path.join(SHARED, "fixtures", "kafka-dirs", "macsakini-gzip-mixed")


def test_a_real_kafka_log_dir_missing_a_partition(tmp_path):
    """A Kafka log dir holding test-1 but not test-0: PartitionCount 2, '-' (json null) for partition 0."""
    if not os.path.isdir(KAFKA_DIR):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    copy = tmp_path / "kafka"
    shutil.copytree(KAFKA_DIR, copy)
    os.rename(copy / "test-0", copy / "test-1")
    with Store.open(str(copy), read_only=True) as store:
        end = store.partition("test", 1).log_end_offset
        size = store.partition("test", 1).size_bytes
    assert end > 0
    proc = txlog("topics", "list", data_dir=copy)
    assert_ok(proc)
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[1:]}
    assert rows["test"] == ["2", *human_size(size).split(), f"-,{end}"]
    assert "partition 0 of topic 'test' is not in this log directory" in proc.stderr
    doc = json.loads(txlog("topics", "list", "--output", "json", data_dir=copy).stdout)
    assert [d for d in doc if d["topic"] == "test"] == [
        {"topic": "test", "partitionCount": 2, "size": size, "logEndOffsets": [None, end]}
    ]
