"""End-to-end tests of the `txlog` command line: its output and exit codes.

Every command runs `cli.main:app` in this process as `python -m cli.main --data-dir <tmp> ...`
would (tests/cli/cli_helpers.py: `txlog`); what only a real process shows -- import cost, shell
completion -- runs as one (`python`, `_complete`). Exit codes and streams follow
docs/cli-conventions.md: 0 ok, 1 error, 2 usage, 130 interrupted; data on stdout; every expected
failure is one `Error: ...` line on stderr and never a traceback.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.cli.cli_helpers import (
    _complete,
    assert_ok,
    assert_one_error,
    assert_usage_error,
    make_store,
    python,
    topic_names,
    tree,
    txlog,
)


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


# ---- global options -----------------------------------------------------------------------------------


def test_version_prints_the_package_version_and_nothing_else():
    from txlog import __version__

    proc = txlog("--version")
    assert_ok(proc)
    assert proc.stdout == f"txlog {__version__}\n"
    assert proc.stderr == ""


def test_help_lists_the_verbs():
    proc = txlog("--help")
    assert_ok(proc)
    assert "topics" in proc.stdout and "demo" in proc.stdout and "--data-dir" in proc.stdout


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "sys.argv = ['txlog', '--help']\n"
        "import cli.main\n"
        "try:\n"
        "    cli.main.app(prog_name='txlog')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pyspark', 'pyarrow', 'storage', 'txlog', 'tabulate', 'rich', 'crc32c', 'cramjam'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr


def test_no_arguments_prints_help_and_exits_2():
    proc = txlog()
    assert proc.returncode == 2
    assert "Usage:" in proc.stdout + proc.stderr


def test_data_dir_from_environment(tmp_path):
    store = str(tmp_path / "env-store")
    assert_ok(txlog("topics", "create", "t", env={"TXLOG_DATA_DIR": store}))
    assert os.path.isdir(os.path.join(store, "t-0"))
    assert topic_names(txlog("topics", "list", env={"TXLOG_DATA_DIR": store})) == ["t"]


def test_empty_data_dir_is_a_usage_error(tmp_path):
    assert_usage_error(txlog("--data-dir", "", "topics", "list"))


# ---- topics round trip ----------------------------------------------------------------------------------


def test_topics_round_trip(data_dir):
    proc = txlog(
        "topics",
        "create",
        "t",
        "--partitions",
        "3",
        "--config",
        "segment.bytes=1000",
        "-c",
        "retention.ms=5000",
        data_dir=data_dir,
    )
    assert_ok(proc)
    assert proc.stdout == ""
    assert proc.stderr == "Created topic t.\n"
    for p in range(3):
        assert os.path.isdir(os.path.join(data_dir, f"t-{p}"))

    proc = txlog("topics", "list", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "Topic  PartitionCount  Size  LogEndOffsets",
        "t      3               0 B   0,0,0",
    ]

    proc = txlog("topics", "describe", "t", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        (
            "Topic: t\tTopicId: <none>\tPartitionCount: 3\tReplicationFactor: 1\t"
            "Configs: retention.ms=5000,segment.bytes=1000"
        ),
        "\tTopic: t\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: t\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: t\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]
    assert proc.stderr == ""

    proc = txlog("topics", "describe", "t", "--output", "json", data_dir=data_dir)
    assert_ok(proc)
    doc = json.loads(proc.stdout)
    assert doc["topic"] == "t" and doc["topicId"] is None
    assert doc["partitionCount"] == 3 and doc["replicationFactor"] == 1
    assert doc["configs"] == {"retention.ms": 5000, "segment.bytes": 1000}
    assert doc["partitions"][2] == {
        "partition": 2,
        "leader": 0,
        "replicas": [0],
        "isr": [0],
        "logStartOffset": 0,
        "logEndOffset": 0,
        "lastStableOffset": 0,
        "size": 0,
        "segments": 1,
    }

    proc = txlog("topics", "describe", "t", "-o", "table", data_dir=data_dir)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [
        "Topic",
        "Partition",
        "LogStartOffset",
        "LogEndOffset",
        "LastStableOffset",
        "Size",
        "Segments",
    ]
    assert [line.split() for line in lines[2:]] == [["t", str(p), "0", "0", "0", "0", "1"] for p in range(3)]

    proc = txlog(
        "topics",
        "alter",
        "t",
        "--partitions",
        "4",
        "--config",
        "segment.bytes=2000",
        "--delete-config",
        "retention.ms",
        data_dir=data_dir,
    )
    assert_ok(proc)
    assert proc.stdout == ""
    assert proc.stderr == "Topic t now has 4 partitions.\nCompleted updating config for topic t.\n"
    proc = txlog("topics", "describe", "t", data_dir=data_dir)
    assert proc.stdout.splitlines() == [
        "Topic: t\tTopicId: <none>\tPartitionCount: 4\tReplicationFactor: 1\tConfigs: segment.bytes=2000",
        *[f"\tTopic: t\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(4)],
    ]

    proc = txlog("topics", "delete", "t", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stderr == "Deleted topic t.\n"
    assert txlog("topics", "list", data_dir=data_dir).stdout == ""  # no topics: not even a header
    assert not [n for n in os.listdir(data_dir) if n.startswith("t-")]


def test_describe_all_and_internal_topics(data_dir):
    assert_ok(txlog("topics", "create", "b", data_dir=data_dir))
    assert_ok(txlog("topics", "create", "a", "-p", "2", data_dir=data_dir))
    from storage import Store

    with Store.open(data_dir) as s:
        s.create_topic("__consumer_offsets", 1, internal=True)

    assert topic_names(txlog("topics", "list", data_dir=data_dir)) == ["__consumer_offsets", "a", "b"]
    assert topic_names(txlog("topics", "list", "--exclude-internal", data_dir=data_dir)) == ["a", "b"]

    proc = txlog("topics", "describe", "--exclude-internal", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "Topic: a\tTopicId: <none>\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: a\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: a\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "Topic: b\tTopicId: <none>\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: b\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]
    proc = txlog("topics", "describe", "-o", "json", data_dir=data_dir)
    assert [d["topic"] for d in json.loads(proc.stdout)] == ["__consumer_offsets", "a", "b"]


def test_describe_reports_offsets_of_written_data(data_dir):
    assert_ok(txlog("topics", "create", "t", "-p", "2", data_dir=data_dir))
    from storage import Store
    from storage.records import build_batch

    with Store.open(data_dir) as s:
        log = s.partition("t", 1)
        log.append(build_batch([(b"k", b"v", [], 1000)] * 5))
        log.append(
            build_batch(
                [(None, b"w", [], 1001)],
                producer_id=s.allocate_producer_id(),
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
        )
    doc = json.loads(txlog("topics", "describe", "t", "-o", "json", data_dir=data_dir).stdout)
    p1 = doc["partitions"][1]
    assert (p1["logStartOffset"], p1["logEndOffset"], p1["lastStableOffset"], p1["segments"]) == (0, 6, 5, 1)
    assert p1["size"] > 0
    assert doc["partitions"][0]["logEndOffset"] == 0


def test_quiet_silences_status_lines(data_dir):
    proc = txlog("-q", "topics", "create", "t", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stdout == "" and proc.stderr == ""
    proc = txlog("--quiet", "topics", "delete", "t", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stderr == ""


def test_if_not_exists_and_if_exists(data_dir):
    assert_ok(txlog("topics", "create", "t", data_dir=data_dir))
    assert "already exists" in assert_one_error(txlog("topics", "create", "t", data_dir=data_dir))
    proc = txlog("topics", "create", "t", "--if-not-exists", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stderr == ""
    assert_ok(txlog("topics", "delete", "t", data_dir=data_dir))
    assert_ok(txlog("topics", "delete", "t", "--if-exists", data_dir=data_dir))


def test_read_commands_do_not_create_a_store(tmp_path):
    missing = tmp_path / "nothing-here"
    assert "no store at" in assert_one_error(txlog("topics", "list", data_dir=missing))  # not an empty list
    assert "no store at" in assert_one_error(txlog("topics", "describe", "t", data_dir=missing))
    assert_one_error(txlog("topics", "delete", "t", data_dir=missing))
    assert_one_error(txlog("topics", "alter", "t", "-p", "2", data_dir=missing))
    assert not missing.exists()


# ---- bad input: usage errors vs. errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "create", "t", "--config", "segment.bytes"],
        ["topics", "create", "t", "--config", "=5"],
        ["topics", "alter", "t", "--config", "noequals"],
        ["topics", "create", "t", "--partitions", "x"],
        ["topics", "create", "t", "--no-such-option"],
        ["topics", "describe", "t", "--output", "xml"],
    ],
)
def test_usage_errors_exit_2(data_dir, args):
    make_store(data_dir, t=1)
    before = tree(data_dir)
    assert_usage_error(txlog(*args, data_dir=data_dir))
    assert tree(data_dir) == before


def test_alter_with_nothing_to_do_is_a_usage_error(data_dir):
    make_store(data_dir, t=1)
    assert "nothing to alter" in assert_one_error(txlog("topics", "alter", "t", data_dir=data_dir), code=2)


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["topics", "create", "u", "--config", "no.such.config=1"], "unknown topic config"),
        (["topics", "create", "u", "--config", "segment.bytes=abc"], "not an integer"),
        (["topics", "create", "u", "--config", "segment.bytes=1"], "outside"),
        (["topics", "alter", "t", "--delete-config", "no.such.config"], "unknown topic config"),
        (["topics", "alter", "t", "--partitions", "3", "--config", "segment.bytes=1"], "outside"),
        (["topics", "alter", "t", "--partitions", "2"], "must be larger"),
        (["topics", "alter", "t", "--partitions", "1", "--config", "segment.bytes=5000"], "must be larger"),
    ],
)
def test_rejected_changes_change_nothing(data_dir, args, phrase):
    make_store(data_dir, t=2)
    before = tree(data_dir)
    assert phrase in assert_one_error(txlog(*args, data_dir=data_dir))
    assert tree(data_dir) == before


def test_scenario_56_unknown_topic_and_bad_partition_counts(data_dir):
    assert_ok(txlog("topics", "create", "t", "-p", "3", data_dir=data_dir))
    before = tree(data_dir)
    for args in (
        ["topics", "describe", "nosuch"],
        ["topics", "delete", "nosuch"],
        ["topics", "alter", "nosuch", "--partitions", "5"],
        ["topics", "alter", "nosuch", "--config", "retention.ms=1000"],
    ):
        message = assert_one_error(txlog(*args, data_dir=data_dir))
        assert "nosuch" in message and "does not exist" in message
    assert tree(data_dir) == before

    message = assert_one_error(txlog("topics", "create", "u", "--partitions", "0", data_dir=data_dir))
    assert "partition count" in message
    assert_one_error(txlog("topics", "create", "u", "--partitions", "-1", data_dir=data_dir))
    assert_usage_error(txlog("topics", "create", "u", "--partitions", "x", data_dir=data_dir))
    assert_one_error(txlog("topics", "alter", "t", "--partitions", "0", data_dir=data_dir))
    assert tree(data_dir) == before
    assert topic_names(txlog("topics", "list", data_dir=data_dir)) == ["t"]


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/b",
        "..",
        ".",
        "",
        "a" * 250,
        "../../escaped",
        "/tmp/absolute",
        "x y",
        "caf\u00e9",
        "__internal",
        "-x",
    ],
    ids=[
        "dotdot-x",
        "slash",
        "dotdot",
        "dot",
        "empty",
        "250-chars",
        "dotdot-dotdot",
        "absolute",
        "space",
        "non-ascii",
        "internal-prefix",
        "leading-dash",
    ],
)
def test_scenario_57_hostile_topic_names(tmp_path, name):
    data_dir = tmp_path / "data"
    make_store(data_dir, ok=1)
    before = tree(tmp_path)
    message = assert_one_error(txlog("topics", "create", "--", name, data_dir=data_dir))
    assert "topic name" in message
    assert tree(tmp_path) == before  # nothing created, inside the data directory or beside it


def test_scenario_57_hostile_names_on_a_fresh_store_create_nothing(tmp_path):
    for name in ("../x", "a/b", ""):
        assert_one_error(txlog("topics", "create", "--", name, data_dir=tmp_path / "data"))
    assert os.listdir(tmp_path) == []


def test_leading_dash_without_double_dash_is_a_usage_error(data_dir):
    assert_usage_error(txlog("topics", "create", "-x", data_dir=data_dir))
    assert not os.path.exists(data_dir)


def test_249_character_name_is_accepted(data_dir):
    assert_ok(txlog("topics", "create", "a" * 249, data_dir=data_dir))
    assert topic_names(txlog("topics", "list", data_dir=data_dir)) == ["a" * 249]


# ---- storage and OS errors end as one line ------------------------------------------------------------------


def test_damaged_store_metadata_is_one_error_line(data_dir):
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, "txlog.json"), "w") as f:
        f.write("{not json")
    for args in (["topics", "list"], ["topics", "describe"], ["topics", "create", "t"]):
        assert "txlog.json" in assert_one_error(txlog(*args, data_dir=data_dir))


def test_data_dir_that_is_a_file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("x")
    assert_one_error(txlog("topics", "create", "t", data_dir=path))


def test_non_empty_foreign_directory_is_refused(tmp_path):
    (tmp_path / "holiday.jpg").write_bytes(b"\xff\xd8")
    assert "not a txlog store" in assert_one_error(txlog("topics", "create", "t", data_dir=tmp_path))
    assert os.listdir(tmp_path) == ["holiday.jpg"]


def test_keyboard_interrupt_exits_130(data_dir, monkeypatch):
    import cli.topics

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.topics, "open_store", interrupted)
    proc = txlog("topics", "create", "t", data_dir=data_dir)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr


# ---- shell completion ---------------------------------------------------------------------------------------


def test_topic_names_are_completed_from_the_store(data_dir):
    for name in ("alpha", "beta", "albatross"):
        assert_ok(txlog("topics", "create", name, data_dir=data_dir))
    proc = _complete(f"txlog --data-dir {data_dir} topics describe al", 5)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["albatross", "alpha"]
    proc = _complete("txlog topics delete ", 3, env={"TXLOG_DATA_DIR": data_dir})
    assert sorted(proc.stdout.split()) == ["albatross", "alpha", "beta"]


def test_completion_never_fails_loudly(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "txlog.json").write_text("{nope")
    for root in (broken, tmp_path / "missing"):
        proc = _complete(f"txlog --data-dir {root} topics describe ", 5)
        assert proc.returncode == 0
        assert proc.stdout.strip() == "" and proc.stderr == ""
    assert not (tmp_path / "missing").exists()


# ---- demo ---------------------------------------------------------------------------------------------------

DEMO_PHRASES = (
    "1. Idempotent producer",
    "retry batch 2 (ack lost)",
    "duplicate: nothing written",
    "rejected: OutOfOrderSequenceError",
    "rejected: InvalidProducerEpochError",
    "killed with SIGKILL",
    "100 garbage bytes",
    "each at its acknowledged offset",
    "nothing written",
    "ABORT",
    "COMMIT",
    "lastStableOffset",
    "Look further:",
    "txlog-demo-0",
    "topics describe txlog-demo",
    "5. Delivery semantics under the same injected faults",
    "6. Transactions: read_uncommitted sees everything",
    "7. A zombie is fenced",
    "8. kill -9 in the middle of a commit",
    "ProducerFencedError",
)
DEMO_TOPICS = ["__transaction_state", "txlog-demo", "txlog-demo-delivery", "txlog-demo-txn"]


def test_demo_twice_in_a_row(data_dir):
    for _ in range(2):
        proc = txlog("demo", data_dir=data_dir)
        assert_ok(proc)
        assert proc.stderr == ""
        for phrase in DEMO_PHRASES:
            assert phrase in proc.stdout, phrase
        last = proc.stdout.splitlines()[-1]
        assert last.startswith("txlog demo: all ") and "checks passed" in last
        markers = [line.split() for line in proc.stdout.splitlines() if line.split()[1:2] in (["ABORT"], ["COMMIT"])]
        assert [m[1:3] for m in markers] == [["ABORT", "78"], ["COMMIT", "78"]]
    assert topic_names(txlog("topics", "list", data_dir=data_dir)) == DEMO_TOPICS
    doc = json.loads(txlog("topics", "describe", "txlog-demo", "-o", "json", data_dir=data_dir).stdout)
    part = doc["partitions"][0]
    assert part["logEndOffset"] > 0 and part["lastStableOffset"] == part["logEndOffset"]
    names = os.listdir(os.path.join(data_dir, "txlog-demo-0"))
    assert "00000000000000000000.log" in names and "00000000000000000000.txnindex" in names


def test_demo_quiet_prints_only_the_summary(data_dir):
    proc = txlog("-q", "demo", data_dir=data_dir)
    assert_ok(proc)
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("txlog demo: all ")


def test_demo_keeps_other_topics(data_dir):
    assert_ok(txlog("topics", "create", "mine", "-p", "2", data_dir=data_dir))
    assert_ok(txlog("-q", "demo", data_dir=data_dir))
    assert topic_names(txlog("topics", "list", data_dir=data_dir)) == sorted([*DEMO_TOPICS, "mine"])


def test_demo_on_a_kafka_data_directory_is_refused(tmp_path):
    kafka_dir = tmp_path / "kafka"
    (kafka_dir / "orders-0").mkdir(parents=True)
    (kafka_dir / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    assert "cannot be written" in assert_one_error(txlog("demo", data_dir=kafka_dir))


def test_produce_codec_choices_are_kafkas_compression_types():
    """`txlog produce -z` lists its codecs without importing storage (help stays fast); they must
    stay the library's compression.type values."""
    from cli.produce import CODECS
    from storage.compression import Compression

    assert Compression.kafka_names() == CODECS
