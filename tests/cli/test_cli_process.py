"""`txlog process`: exactly-once consume-transform-produce through a shell command.

The app runs in-process (tests/cli/cli_helpers.py), and as a real process where a signal or
kill -9 hits it; the input is seeded and the result read back with the Python API, in read_committed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.cli.cli_helpers import ROOT, _env, assert_one_error, assert_usage_error, txlog

TXN_ID = "copier"
GROUP = "g"


def _argv(data_dir: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "--data-dir", data_dir, *args]


def _process_args(*cmd: str, size: int = 10, group: str = GROUP, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (
        "process",
        "--input",
        "in",
        "--output",
        "out",
        "--group",
        group,
        "--transactional-id",
        TXN_ID,
        "--transaction-size",
        str(size),
        *extra,
        "--",
        *cmd,
    )


def seed(
    data_dir: str, records: list[tuple[bytes | None, bytes | None]], *, partitions: int = 2, out_partitions: int = 2
) -> None:
    """Create `in` and `out` if needed and append `records` (key, value) to `in`."""
    import txlog as api
    from storage import Store

    with Store.open(data_dir) as store:
        if not store.has_topic("in"):
            store.create_topic("in", partitions)
        if not store.has_topic("out"):
            store.create_topic("out", out_partitions)
        producer = api.Producer(store)
        for key, value in records:
            producer.send("in", value=value, key=key)
        producer.flush()
        producer.close()


def committed_view(data_dir: str, topic: str = "out") -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of `topic` visible in read_committed, partition by partition."""
    from storage import Store
    from txlog.fetch import IsolationLevel, fetch

    out = []
    with Store.open(data_dir, read_only=True) as store:
        for p in range(store.partition_count(topic)):
            log = store.partition(topic, p)
            pos = log.log_start_offset
            while pos < log.last_stable_offset:
                r = fetch(log, pos, IsolationLevel.READ_COMMITTED, max_records=10_000)
                out.extend((x.key, x.value) for x in r.records)
                if r.next_offset == pos:
                    break
                pos = r.next_offset
    return out


def group_offsets(data_dir: str, group: str = GROUP) -> dict[int, int]:
    from storage import Store
    from txlog.coordinator.group_offsets import GroupOffsets

    with Store.open(data_dir, read_only=True) as store:
        return {tp.partition: om.offset for tp, om in GroupOffsets(store).committed(group).items()}


def input_end_offsets(data_dir: str) -> dict[int, int]:
    from storage import Store

    with Store.open(data_dir, read_only=True) as store:
        return {p: store.partition("in", p).log_end_offset for p in range(store.partition_count("in"))}


def assert_nothing_open(data_dir: str) -> None:
    """No open transaction: the coordinator's state is final and every `out` partition's LSO is its end."""
    import txlog as api
    from storage import Store
    from txlog.schemas.transaction_log import TxnState

    with Store.open(data_dir, read_only=True) as store:
        description = api.Admin(store).describe_transaction(TXN_ID)
        if description is not None:
            assert description.state.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT), (
                description
            )
        for p in range(store.partition_count("out")):
            log = store.partition("out", p)
            assert log.last_stable_offset == log.log_end_offset, (p, log.last_stable_offset, log.log_end_offset)


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(interval)


def line_count(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


def _values(n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"value-%d" % i) for i in range(start, start + n)]


# ---- the happy path --------------------------------------------------------------------------------------


def test_process_upper_cases_each_record_once_keeping_keys(data_dir):
    records = _values(25)
    seed(data_dir, records)
    proc = txlog(*_process_args("tr", "a-z", "A-Z"), data_dir=data_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # data goes to the output topic, not to stdout
    assert "Traceback" not in proc.stderr
    assert "25 records in, 25 out" in proc.stderr
    expected = sorted((k, v.upper()) for k, v in records)
    assert sorted(committed_view(data_dir)) == expected
    assert group_offsets(data_dir) == input_end_offsets(data_dir)
    assert_nothing_open(data_dir)

    # a second run has nothing to do; new input is picked up from the committed offsets
    assert txlog("-q", *_process_args("tr", "a-z", "A-Z"), data_dir=data_dir).returncode == 0
    more = _values(7, start=25)
    seed(data_dir, more)
    proc = txlog("-q", *_process_args("tr", "a-z", "A-Z"), data_dir=data_dir)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == ""
    assert sorted(committed_view(data_dir)) == sorted((k, v.upper()) for k, v in records + more)
    assert group_offsets(data_dir) == input_end_offsets(data_dir)


def test_cmd_changing_the_line_count_gives_null_keys(data_dir):
    seed(data_dir, _values(12), partitions=1, out_partitions=1)
    count = "import sys; print(sum(1 for _ in sys.stdin))"
    proc = txlog("-q", *_process_args(sys.executable, "-c", count, size=5), data_dir=data_dir)
    assert proc.returncode == 0, proc.stderr
    assert committed_view(data_dir) == [(None, b"5"), (None, b"5"), (None, b"2")]


def test_options_may_come_before_cmd_without_double_dash(data_dir):
    seed(data_dir, [(None, b"abc"), (None, None)], partitions=1, out_partitions=1)
    proc = txlog(
        "-q",
        "process",
        "--input",
        "in",
        "--output",
        "out",
        "--group",
        GROUP,
        "--transactional-id",
        TXN_ID,
        sys.executable,
        "-c",
        "import sys; sys.stdout.write(sys.stdin.read()[::-1])",
        data_dir=data_dir,
    )
    assert proc.returncode == 0, proc.stderr
    # input "abc\n\n" (a null value is an empty line) reversed: "\n\ncba" -> lines "", "", "cba" (3 lines)
    assert committed_view(data_dir) == [(None, b""), (None, b""), (None, b"cba")]


# ---- failures -------------------------------------------------------------------------------------------


def test_failing_cmd_aborts_and_commits_no_offsets(data_dir):
    seed(data_dir, _values(20))
    assert txlog("-q", *_process_args("tr", "a-z", "A-Z"), data_dir=data_dir).returncode == 0
    before_view, before_offsets = committed_view(data_dir), group_offsets(data_dir)
    seed(data_dir, _values(10, start=20))

    proc = txlog("-q", *_process_args("sh", "-c", "cat >/dev/null; exit 3"), data_dir=data_dir)
    assert assert_one_error(proc) == "CMD exited 3; transaction aborted, input offsets not committed"
    assert committed_view(data_dir) == before_view
    assert group_offsets(data_dir) == before_offsets
    assert_nothing_open(data_dir)

    # without -q the progress line may come first, but the last line is the error
    proc = txlog(*_process_args("sh", "-c", "echo partial; exit 3"), data_dir=data_dir)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("Error: CMD exited 3")
    assert committed_view(data_dir) == before_view

    # the next run retries from the committed offsets
    assert txlog("-q", *_process_args("tr", "a-z", "A-Z"), data_dir=data_dir).returncode == 0
    assert sorted(committed_view(data_dir)) == sorted((k, v.upper()) for k, v in _values(30))
    assert group_offsets(data_dir) == input_end_offsets(data_dir)


@pytest.mark.parametrize(
    "args",
    [
        ("process", "--input", "in", "--output", "out", "--group", "g", "--transactional-id", "t"),  # no CMD
        ("process", "--input", "in", "--output", "in", "--group", "g", "--transactional-id", "t", "--", "cat"),
        ("process", "--input", "in", "--output", "out", "--transactional-id", "t", "--", "cat"),  # no group
        (
            "process",
            "--input",
            "in",
            "--output",
            "out",
            "--group",
            "g",
            "--transactional-id",
            "t",
            "--transaction-size",
            "0",
            "--",
            "cat",
        ),
    ],
)
def test_usage_errors_exit_2(data_dir, args):
    seed(data_dir, [])
    proc = txlog(*args, data_dir=data_dir)
    if proc.stderr.startswith("Error: "):
        assert_one_error(proc, 2)
    else:
        assert_usage_error(proc)


@pytest.mark.parametrize(
    "args, phrase",
    [
        (("--output", "nope", "--", "cat"), "'nope'"),
        (("--output", "out", "--", "no-such-command-txlog"), "CMD not found: no-such-command-txlog"),
    ],
)
def test_expected_errors_are_one_line(data_dir, args, phrase):
    seed(data_dir, _values(3))
    proc = txlog("process", "--input", "in", "--group", "g", "--transactional-id", "t", *args, data_dir=data_dir)
    assert phrase in assert_one_error(proc)


def test_missing_store_is_one_error_line(tmp_path):
    proc = txlog(*_process_args("cat"), data_dir=str(tmp_path / "absent"))
    assert "no store" in assert_one_error(proc)
    assert not os.path.exists(tmp_path / "absent")


# ---- signals ----------------------------------------------------------------------------------------------


def test_sigterm_during_cmd_aborts_and_exits_130(data_dir, tmp_path):
    seed(data_dir, _values(10))
    calls = str(tmp_path / "calls")
    cmd = ("sh", "-c", f"echo x >> {calls}; sleep 30; cat")
    proc = subprocess.Popen(
        _argv(data_dir, "-q", *_process_args(*cmd)),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: line_count(calls) >= 1)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - began < 5  # CMD was terminated, not waited for
    assert proc.returncode == 130, (proc.returncode, err)
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: interrupted (SIGTERM)"), err
    assert committed_view(data_dir) == []
    assert group_offsets(data_dir) == {}
    assert_nothing_open(data_dir)


def test_follow_picks_up_new_input_until_ctrl_c(data_dir):
    seed(data_dir, _values(5))
    proc = subprocess.Popen(
        _argv(data_dir, *_process_args("tr", "a-z", "A-Z", extra=("--follow",))),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(committed_view(data_dir)) == 5)
        seed(data_dir, _values(6, start=5))
        wait_for(lambda: len(committed_view(data_dir)) == 11)
        assert proc.poll() is None  # still following
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1].startswith("Error: interrupted (SIGINT)")
    assert sorted(committed_view(data_dir)) == sorted((k, v.upper()) for k, v in _values(11))
    assert group_offsets(data_dir) == input_end_offsets(data_dir)
    assert_nothing_open(data_dir)


# ---- kill -9 at random moments ------------------------------------------------------------------------------


def test_kill_9_at_random_moments_still_gives_exactly_once(data_dir, tmp_path):
    records = _values(300)
    seed(data_dir, records, partitions=1)  # one input partition: every round reads exactly 10 records
    calls = str(tmp_path / "calls")  # one line per CMD run, so kills can be aimed at a running CMD
    cmd = ("sh", "-c", f"echo x >> {calls}; sleep 0.03; tr a-z A-Z")
    rnd = random.Random(int(os.environ.get("TXLOG_PROCESS_SEED", "60")))
    kills = 0
    runs = 0
    deadline = time.monotonic() + 25
    while True:
        runs += 1
        assert time.monotonic() < deadline, f"not done after {runs} runs"
        proc = subprocess.Popen(
            _argv(data_dir, "-q", *_process_args(*cmd, size=10)),
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if kills < 6:
            if kills % 2 == 0:  # aim: while CMD runs, i.e. inside an open transaction
                seen = line_count(calls)
                try:
                    wait_for(
                        lambda seen=seen, proc=proc: line_count(calls) > seen or proc.poll() is not None,
                        timeout=10,
                        interval=0.002,
                    )
                except AssertionError:
                    pass
                time.sleep(rnd.uniform(0, 0.025))
            else:  # anywhere: start-up, init_transactions, between rounds, during a commit
                time.sleep(rnd.uniform(0.05, 0.6))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            out, err = proc.communicate(timeout=10)
            if proc.returncode == -signal.SIGKILL:
                continue
        else:
            out, err = proc.communicate(timeout=180)  # a hang guard, not a speed check: a loaded machine is slow
        assert proc.returncode == 0, (proc.returncode, err)
        assert b"Traceback" not in err
        break

    assert kills >= 3, kills
    view = committed_view(data_dir)
    duplicates = [kv for kv, n in Counter(view).items() if n > 1]
    assert duplicates == []
    assert sorted(view) == sorted((k, v.upper()) for k, v in records)
    assert group_offsets(data_dir) == input_end_offsets(data_dir)
    assert_nothing_open(data_dir)
    # 30 transactions committed; more CMD runs than that means some batch was redone after a kill
    assert line_count(calls) > 30
