"""`txlog groups reset-offsets` --to-datetime, --by-duration, --to-current, --from-file and --export,
as kafka-consumer-groups has them, run in-process (tests/cli/cli_helpers.py)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

import txlog as api
from tests.cli.cli_helpers import assert_ok, assert_one_error, assert_usage_error, tree, txlog, txlog_process

TP = api.TopicPartition
HOUR = 3_600_000


@pytest.fixture
def now_ms() -> int:
    """The test's "now": taken when the test starts, not when the module was collected (a slow
    suite can reach this module many minutes later, and --by-duration counts back from the clock)."""
    return int(time.time() * 1000)


@pytest.fixture
def store(tmp_path, now_ms) -> str:
    """Topic t (2 partitions): t-0 holds records stamped 5, 4, 3, 2 and 1 hours ago (offsets 0-4),
    t-1 three records stamped 10 hours ago. Group g committed 1 on t-0 and nothing on t-1."""
    path = str(tmp_path / "groups")
    with api.Admin(path) as admin:
        admin.create_topic("t", 2)
        with api.Producer(admin.store) as p:
            for i in range(5):
                p.send("t", value=b"%d" % i, partition=0, timestamp_ms=now_ms - (5 - i) * HOUR)
            for _ in range(3):
                p.send("t", value=b"old", partition=1, timestamp_ms=now_ms - 10 * HOUR)
        admin.alter_consumer_group_offsets("g", {TP("t", 0): 1})
    return path


def plan(proc) -> dict[tuple[str, int], int]:
    assert_ok(proc)
    return {(r["topic"], r["partition"]): r["newOffset"] for r in json.loads(proc.stdout)}


def committed(path: str) -> dict[tuple[str, int], int]:
    with api.Admin(path, read_only=True) as admin:
        return {(tp.topic, tp.partition): o.offset for tp, o in admin.list_consumer_group_offsets("g").items()}


def iso(ms: int, zone: str = "Z") -> str:
    """Kafka's 'YYYY-MM-DDTHH:mm:SS.sss' in UTC with a zone suffix."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    return text + zone


def test_to_datetime_finds_the_first_record_at_or_after_the_time(store, now_ms):
    before = tree(store)
    at = now_ms - 3 * HOUR - 60_000  # just before the record of offset 2
    proc = txlog(
        "groups",
        "reset-offsets",
        "-g",
        "g",
        "--topic",
        "t",
        "--to-datetime",
        iso(at),
        "--output",
        "json",
        data_dir=store,
    )
    assert plan(proc) == {("t", 0): 2, ("t", 1): 3}  # t-1 has nothing that recent: its end, as Kafka
    assert "Dry run" in proc.stderr
    assert tree(store) == before


def test_to_datetime_without_a_zone_is_local_time(store, now_ms):
    # New York local time, read in TZ=America/New_York: read as UTC it would be 4-5 hours off (offset 0)
    at = now_ms - 3 * HOUR - 60_000
    local = datetime.fromtimestamp(at / 1000, tz=ZoneInfo("America/New_York")).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    # a process: the C library reads TZ when it starts
    proc = txlog_process(
        "groups",
        "reset-offsets",
        "-g",
        "g",
        "--topic",
        "t:0",
        "--to-datetime",
        local,
        "--output",
        "json",
        data_dir=store,
        env={"TZ": "America/New_York"},
    )
    assert plan(proc) == {("t", 0): 2}


def test_by_duration_looks_back_from_now(store):
    proc = txlog(
        "groups",
        "reset-offsets",
        "-g",
        "g",
        "--topic",
        "t:0",
        "--by-duration",
        "PT2H30M",
        "--output",
        "json",
        data_dir=store,
    )
    assert plan(proc) == {("t", 0): 3}  # 2.5 hours ago: the record stamped 2 hours ago
    proc = txlog(
        "groups",
        "reset-offsets",
        "-g",
        "g",
        "--topic",
        "t:0",
        "--by-duration",
        "P1D",
        "--output",
        "json",
        data_dir=store,
    )
    assert plan(proc) == {("t", 0): 0}


def test_to_current_keeps_committed_offsets_and_takes_the_end_elsewhere(store):
    proc = txlog(
        "groups", "reset-offsets", "-g", "g", "--topic", "t", "--to-current", "--output", "json", data_dir=store
    )
    assert plan(proc) == {("t", 0): 1, ("t", 1): 3}


def test_export_then_from_file_round_trip(store, tmp_path):
    proc = txlog(
        "groups", "reset-offsets", "-g", "g", "--topic", "t", "--by-duration", "PT3H30M", "--export", data_dir=store
    )
    assert_ok(proc)
    assert proc.stdout == "t,0,2\nt,1,3\n"  # Kafka's CSV: no header, one partition a line
    csv_file = tmp_path / "plan.csv"
    csv_file.write_text(proc.stdout)

    before = tree(store)
    proc = txlog("groups", "reset-offsets", "-g", "g", "--from-file", str(csv_file), data_dir=store)
    assert_ok(proc)
    assert [line.split() for line in proc.stdout.splitlines()[2:]] == [["g", "t", "0", "2"], ["g", "t", "1", "3"]]
    assert tree(store) == before  # still a dry run

    proc = txlog(
        "groups", "reset-offsets", "-g", "g", "--from-file", str(csv_file), "--execute", "--export", data_dir=store
    )
    assert_ok(proc)
    assert proc.stdout == "t,0,2\nt,1,3\n"
    assert committed(store) == {("t", 0): 2, ("t", 1): 3}


def test_from_file_accepts_the_group_column_and_clamps(store, tmp_path):
    csv_file = tmp_path / "plan.csv"
    csv_file.write_text("g,t,1,1\n\ng,t,0,99\n")
    proc = txlog("groups", "reset-offsets", "-g", "g", "--from-file", str(csv_file), "--output", "json", data_dir=store)
    assert plan(proc) == {("t", 0): 5, ("t", 1): 1}


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("t,0\n", "line 1"),
        ("t,0,1\nt,zero,1\n", "line 2"),
        ("t,0,-1\n", "line 1"),
        ("other,t,0,1\n", "group 'other'"),
        ("\n\n", "holds no"),
        ("t,0,1\nt,0,2\n", "given twice"),
        ("t,0,1,2,3\n", "line 1"),
        ("bad/name,0,1\n", "line 1"),
    ],
)
def test_a_bad_plan_file_is_one_usage_error_and_writes_nothing(store, tmp_path, content, phrase):
    csv_file = tmp_path / "plan.csv"
    csv_file.write_text(content)
    before = tree(store)
    message = assert_one_error(
        txlog("groups", "reset-offsets", "-g", "g", "--from-file", str(csv_file), "--execute", data_dir=store), code=2
    )
    assert phrase in message
    assert tree(store) == before


def test_a_plan_file_naming_a_missing_partition_is_refused(store, tmp_path):
    csv_file = tmp_path / "plan.csv"
    csv_file.write_text("t,7,0\n")
    assert "no partition 7" in assert_one_error(
        txlog("groups", "reset-offsets", "-g", "g", "--from-file", str(csv_file), "--execute", data_dir=store)
    )
    assert committed(store) == {("t", 0): 1}


def test_a_missing_plan_file_is_one_error(store, tmp_path):
    assert_one_error(
        txlog("groups", "reset-offsets", "-g", "g", "--from-file", str(tmp_path / "nope.csv"), data_dir=store)
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--topic", "t", "--to-datetime", "2026-01-01"],  # no 'T'
        ["--topic", "t", "--to-datetime", "yesterdayT10"],
        ["--topic", "t", "--by-duration", "1H"],
        ["--topic", "t", "--by-duration", "PT"],
        ["--topic", "t", "--to-current", "--to-earliest"],  # two scenarios
        ["--topic", "t", "--from-file", "x.csv"],  # the file names its partitions
        ["--to-current"],  # no scope
    ],
)
def test_usage_errors(store, args):
    before = tree(store)
    assert_usage_error(txlog("groups", "reset-offsets", "-g", "g", *args, data_dir=store))
    assert tree(store) == before


def test_help_lists_the_kafka_options():
    proc = txlog("groups", "reset-offsets", "--help", env={"COLUMNS": "200"})
    assert_ok(proc)
    for option in ("--to-datetime", "--by-duration", "--to-current", "--from-file", "--export"):
        assert option in proc.stdout
