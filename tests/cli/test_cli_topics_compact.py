"""`txlog topics compact` and the compaction configs through `topics create/alter/describe` (issue 25).

Run in-process on real stores. What a user sees is checked: the summary line per partition, that
only the latest record per key is then read back, the one-line errors of an unknown topic and of a
topic whose cleanup.policy has no `compact`, progress lines with --progress, and the new configs
(a LIST and a DOUBLE among integers) accepted, refused and described as Kafka's tools do.
"""

from __future__ import annotations

import json

import pytest

import txlog as client
from storage import Store
from tests.cli.cli_helpers import assert_ok, assert_one_error, txlog

# a ratio of 1 is never exceeded: the writer's own cleaning after a roll leaves the work to the verb
COMPACT = [
    "--config",
    "cleanup.policy=compact",
    "--config",
    "segment.bytes=4096",
    "--config",
    "min.cleanable.dirty.ratio=1",
]


def _write_history(data_dir: str, topic: str, partitions: int = 1) -> None:
    """Every key of 10 written 20 times per partition, then a roll, so all of it is cleanable."""
    with client.Producer(data_dir) as p:
        for round_ in range(20):
            for k in range(10):
                for partition in range(partitions):
                    p.send(topic, key=f"k{k}".encode(), value=f"v{round_}-{k}".encode(), partition=partition)
    with Store.open(data_dir) as store:
        for partition in range(partitions):
            store.partition(topic, partition).roll()


def _latest(data_dir: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    with Store.open(data_dir, read_only=True) as store:
        log = store.partition(topic, partition)
        return [
            (offset, record.key, record.value)
            for batch in log.read(log.log_start_offset, 1 << 24)
            for offset, record in ((r.offset, r) for r in batch.records())
        ]


@pytest.fixture
def data_dir(tmp_path) -> str:
    path = str(tmp_path / "data")
    assert_ok(txlog("topics", "create", "prices", "--partitions", "2", *COMPACT, data_dir=path))
    _write_history(path, "prices", partitions=2)
    return path


def test_compact_keeps_the_latest_record_per_key_and_says_what_it_did(data_dir):
    run = txlog("topics", "compact", "prices", data_dir=data_dir)
    assert_ok(run)
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["prices-0", "prices-1"]
    assert "200 -> 10 records, offsets [0, 200) cleaned" in lines[0], lines[0]
    kept = _latest(data_dir, "prices")
    assert [(offset, key, value) for offset, key, value in kept] == [
        (190 + k, f"k{k}".encode(), f"v19-{k}".encode()) for k in range(10)
    ]


def test_compact_one_partition_as_json(data_dir):
    run = txlog("topics", "compact", "prices", "--partition", "1", "--output", "json", data_dir=data_dir)
    assert_ok(run)
    (row,) = json.loads(run.stdout)
    assert (row["topic"], row["partition"], row["firstDirtyOffset"], row["cleanedUpTo"]) == ("prices", 1, 0, 200)
    assert (row["recordsBefore"], row["recordsAfter"]) == (200, 10)
    assert row["bytesAfter"] < row["bytesBefore"]
    assert len(_latest(data_dir, "prices", 1)) == 10
    assert len(_latest(data_dir, "prices", 0)) == 200  # the other partition was left alone


def test_compact_again_has_nothing_new_to_clean_and_changes_nothing(data_dir):
    assert_ok(txlog("topics", "compact", "prices", data_dir=data_dir))
    before = _latest(data_dir, "prices")
    again = txlog("topics", "compact", "prices", "--partition", "0", "--output", "json", data_dir=data_dir)
    assert_ok(again)
    assert _latest(data_dir, "prices") == before


def test_compact_shows_progress_lines_when_asked(data_dir):
    run = txlog("topics", "compact", "prices", "--partition", "0", "--progress", data_dir=data_dir)
    assert_ok(run)
    assert "compact prices-0: " in run.stderr and "(done)" in run.stderr, run.stderr


def test_compact_of_an_unknown_topic_is_one_error_line(data_dir):
    message = assert_one_error(txlog("topics", "compact", "nope", data_dir=data_dir))
    assert "nope" in message and "does not exist" in message


def test_compact_of_a_topic_without_compact_in_its_policy_is_one_error_line(data_dir):
    assert_ok(txlog("topics", "create", "orders", data_dir=data_dir))
    message = assert_one_error(txlog("topics", "compact", "orders", data_dir=data_dir))
    assert "cleanup.policy=delete" in message, message


def test_compact_of_an_unknown_partition_is_one_error_line(data_dir):
    assert_one_error(txlog("topics", "compact", "prices", "--partition", "7", data_dir=data_dir))


def test_compaction_configs_are_created_altered_and_described_with_their_types(tmp_path):
    path = str(tmp_path / "data")
    configs = ["--config", "cleanup.policy=delete, compact", "--config", "min.cleanable.dirty.ratio=0.01"]
    assert_ok(txlog("topics", "create", "latest", *configs, "--config", "delete.retention.ms=0", data_dir=path))
    described = txlog("topics", "describe", "latest", data_dir=path)
    assert_ok(described)
    assert "Configs: cleanup.policy=compact,delete,delete.retention.ms=0,min.cleanable.dirty.ratio=0.01" in (
        described.stdout
    ), described.stdout
    assert_ok(
        txlog(
            "topics",
            "alter",
            "latest",
            "--config",
            "min.cleanable.dirty.ratio=1",
            "--config",
            "max.compaction.lag.ms=60000",
            "--delete-config",
            "delete.retention.ms",
            data_dir=path,
        )
    )
    configs_json = json.loads(txlog("topics", "describe", "latest", "--output", "json", data_dir=path).stdout)[
        "configs"
    ]
    assert configs_json == {
        "cleanup.policy": "compact,delete",
        "max.compaction.lag.ms": 60000,
        "min.cleanable.dirty.ratio": 1.0,
    }


@pytest.mark.parametrize(
    "config",
    [
        "cleanup.policy=shred",
        "min.cleanable.dirty.ratio=1.5",
        "min.cleanable.dirty.ratio=half",
        "delete.retention.ms=-1",
        "min.compaction.lag.ms=0.5",
    ],
)
def test_bad_compaction_configs_are_refused_with_one_error_line(tmp_path, config):
    path = str(tmp_path / "data")
    assert_one_error(txlog("topics", "create", "t", "--config", config, data_dir=path))
    assert_ok(txlog("topics", "create", "t", data_dir=path))
    assert_one_error(txlog("topics", "alter", "t", "--config", config, data_dir=path))


def test_min_lag_above_max_lag_is_refused(tmp_path):
    path = str(tmp_path / "data")
    lags = ["--config", "min.compaction.lag.ms=5000", "--config", "max.compaction.lag.ms=1000"]
    assert "min.compaction.lag.ms" in assert_one_error(txlog("topics", "create", "t", *lags, data_dir=path))
