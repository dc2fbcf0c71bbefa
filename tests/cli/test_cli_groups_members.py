"""`txlog groups` with live members, and `txlog process --workers`: kafka-consumer-groups' views.

A live member is a real consumer in this test process (its session lock and heartbeat
thread are real); while it lives the CLI runs as a separate `txlog` process and sees it as any
other process would. `process --workers` forks, so it runs as a process too; the rest runs
in-process (tests/cli/cli_helpers.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import txlog as api
from tests.cli.cli_helpers import ROOT, _env, assert_ok, assert_one_error, txlog, txlog_process
from txlog import TopicPartition as TP


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "store")
    with api.Admin(path) as admin:
        admin.create_topic("in", 4)
        admin.create_topic("out", 2)
        p = api.Producer(admin.store)
        for i in range(20):
            p.send("in", value=b"v%d" % i, key=b"k%d" % i, partition=i % 4)
        p.flush()
        p.close()
    return path


def _live_member(path, instance=None):
    c = api.Consumer(
        path,
        group_id="g",
        enable_auto_commit=False,
        heartbeat_interval_ms=50,
        group_instance_id=instance,
        client_id="cli-test",
    )
    c.subscribe(["in"])
    c.poll(timeout_ms=0)
    assert c.assignment() == {TP("in", p) for p in range(4)}
    c.commit({TP("in", 0): 2})
    return c


def test_describe_members_state_and_offsets_of_a_live_group(store):
    c = _live_member(store, instance="static-1")
    try:
        member_id = c.group_metadata().member_id
        proc = txlog_process("groups", "describe", "--group", "g", "--members", data_dir=store)
        assert_ok(proc)
        lines = proc.stdout.splitlines()
        assert lines[0] == "" and lines[1].split() == [
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
        ]
        row = lines[2].split()
        assert row[0] == "g" and row[1] == member_id and row[2] == "static-1" and row[4:] == ["cli-test", "4"]

        proc = txlog_process(
            "groups", "describe", "--group", "g", "--members", "--verbose", "-o", "json", data_dir=store
        )
        [m] = json.loads(proc.stdout)
        assert m["currentAssignment"] == m["targetAssignment"] == "in:0,1,2,3"  # Kafka 4.4's getAssignmentString
        assert m["currentEpoch"] == m["targetEpoch"] == c.group_metadata().generation_id

        proc = txlog_process("groups", "describe", "--group", "g", "--state", data_dir=store)
        assert_ok(proc)
        lines = proc.stdout.splitlines()
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert lines[2].split()[0] == "g" and lines[2].split()[2:] == ["uniform", "Stable", "1"]

        proc = txlog_process("groups", "describe", "--group", "g", "-o", "json", data_dir=store)
        rows = json.loads(proc.stdout)
        assert [(r["partition"], r["currentOffset"], r["consumerId"]) for r in rows] == [
            (0, 2, member_id),
            (1, None, member_id),
            (2, None, member_id),
            (3, None, member_id),
        ]

        proc = txlog_process("groups", "list", "--state", data_dir=store)
        assert proc.stdout.splitlines()[1].split() == ["g", "Stable"]
        assert json.loads(txlog_process("groups", "list", "-o", "json", data_dir=store).stdout) == [
            {"group": "g", "state": "Stable"}
        ]

        message = assert_one_error(
            txlog_process(
                "groups", "reset-offsets", "--group", "g", "--topic", "in", "--to-earliest", "--execute", data_dir=store
            )
        )
        assert "inactive" in message and "Stable" in message
    finally:
        c.close()
    # A dynamic member's close leaves the group: it is Empty, with no members to show.
    d = api.Consumer(store, group_id="g2", enable_auto_commit=False, heartbeat_interval_ms=50)
    d.subscribe(["in"])
    d.poll(timeout_ms=0)
    d.close()
    proc = txlog("groups", "describe", "--group", "g2", "--state", data_dir=store)
    assert proc.stdout.splitlines()[2].split()[2:] == ["uniform", "Empty", "0"]
    proc = txlog("groups", "describe", "--group", "g2", "--members", data_dir=store)
    # as kafka-consumer-groups: the header alone on stdout, the note on stderr
    assert proc.stdout.splitlines()[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert len(proc.stdout.splitlines()) == 2 and "has no active members" in proc.stderr


def test_process_workers_split_the_input_and_emit_each_record_once(store):
    proc = txlog_process(
        "process",
        "-i",
        "in",
        "-o",
        "out",
        "-g",
        "up",
        "--transactional-id",
        "up",
        "--workers",
        "3",
        "--heartbeat-interval-ms",
        "100",
        "-n",
        "3",
        "--",
        "tr",
        "a-z",
        "A-Z",
        data_dir=store,
        timeout=120,
    )
    assert_ok(proc)
    assert proc.stderr.count("Processed") == 3  # one summary per worker
    assert "[worker 0]" in proc.stderr and "[worker 2]" in proc.stderr
    reader = api.Consumer(store, isolation_level="read_committed")
    reader.assign([TP("out", 0), TP("out", 1)])
    values = [r.value for _ in range(5) for r in reader.poll(timeout_ms=20)]
    reader.close()
    assert sorted(values) == sorted(b"V%d" % i for i in range(20))
    with api.Admin(store) as admin:
        assert {tp.partition: om.offset for tp, om in admin.list_consumer_group_offsets("up").items()} == {
            0: 5,
            1: 5,
            2: 5,
            3: 5,
        }
        assert admin.list_consumer_group_states()["up"] == "Empty"  # every worker left when it was done


def test_process_rejects_a_static_id_for_several_workers(store):
    assert_one_error(
        txlog(
            "process",
            "-i",
            "in",
            "-o",
            "out",
            "-g",
            "up",
            "--transactional-id",
            "up",
            "--workers",
            "2",
            "--group-instance-id",
            "a",
            "--",
            "cat",
            data_dir=store,
        ),
        code=2,
    )


def test_a_damaged_group_record_lists_as_unknown_and_describes_as_one_error(store):
    from txlog.coordinator.group_offsets import GroupOffsets

    with api.Admin(store) as admin:
        offsets = GroupOffsets(admin.store)
        with offsets.locked("bad"):
            offsets.append_group_metadata("bad", b"\x00\x03\x00\x08consumer\x00")  # cut inside the generation
    proc = txlog("groups", "list", "--state", data_dir=store)
    assert_ok(proc)
    assert ["bad", "Unknown"] in [line.split() for line in proc.stdout.splitlines()]
    assert "truncated generation" in assert_one_error(
        txlog("groups", "describe", "--group", "bad", "--members", data_dir=store)
    )


def _children(pid: int) -> set[int]:
    """The live child processes of `pid` (Linux's /proc task children lists)."""
    found: set[int] = set()
    task_dir = f"/proc/{pid}/task"
    for task in os.listdir(task_dir) if os.path.isdir(task_dir) else ():
        try:
            with open(f"{task_dir}/{task}/children") as f:
                found |= {int(p) for p in f.read().split()}
        except FileNotFoundError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
def test_process_workers_die_with_a_supervisor_killed_with_sigkill(store):
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", store, "process", "-i", "in", "-o", "out", "-g", "pd",
         "--transactional-id", "pd", "--workers", "2", "--follow", "--", "cat"],
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers := _children(supervisor.pid)) < 2:
            assert supervisor.poll() is None and time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=30)
        deadline = time.monotonic() + 60  # a worker stops as on Ctrl-C: abort, leave the group
        while any(_alive(w) for w in workers):
            assert time.monotonic() < deadline, f"workers {workers} outlived their supervisor"
            time.sleep(0.05)
    finally:  # a failed run leaves no process behind
        for pid in (supervisor.pid, *workers):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        supervisor.wait()
