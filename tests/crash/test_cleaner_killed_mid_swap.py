"""A real cleaner process SIGKILLed right after `delete_replaced`, before its `.log.swap` took its name
(docs/reliability-scenarios.md scenario 76): the group's records are then only in the `.swap`.

Consumers, in other processes or opened before the crash, and `txlog consume` on a read-only copy of
the store, read every record of the cleaned log exactly once: a read-only reader reads the `.swap` in
place of the deleted segments and writes nothing; a reader of a writable store finds the cleaner's
lock free and completes the swap (storage/log_loader.py `segment_listing`, storage/partition_log.py
`_complete_dead_swap`).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

import txlog
from storage import Store
from tests.crash.cleaner_crash_worker import AFTER, BEFORE, ROOT, TOPIC, dirty_log, kill_cleaner_after
from txlog import TopicPartition

SWAP = "00000000000000000000.log.swap"
TP = TopicPartition(TOPIC, 0)


def _poll_all(consumer: txlog.Consumer) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    while records := consumer.poll(timeout_ms=0, max_records=10_000):
        out.extend((r.offset, r.key, r.value) for r in records)
    return out


@pytest.mark.parametrize("read_only", [False, True])
def test_a_consumer_that_polled_before_the_crash_misses_nothing_after_it(store_path, read_only):
    directory = dirty_log(store_path)
    store = Store.open(store_path, read_only=read_only)
    consumer = txlog.Consumer(store, enable_auto_commit=False)
    consumer.assign([TP])
    first = consumer.poll(timeout_ms=0, max_records=5)
    assert [(r.offset, r.key, r.value) for r in first] == BEFORE[:5]
    kill_cleaner_after(store_path, "delete_replaced")
    assert SWAP in os.listdir(directory)
    # Its position (5) is inside the group the cleaner deleted: no reset to the log end's segment,
    # the records the cleaning kept from there on, each once.
    assert _poll_all(consumer) == [r for r in AFTER if r[0] >= 5]
    consumer.seek(TP, 0)
    assert _poll_all(consumer) == AFTER
    consumer.close()
    store.close()
    names = os.listdir(directory)
    if read_only:
        assert SWAP in names  # read in place, nothing written
    else:
        assert [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))] == []


def _make_read_only(path: str) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            os.chmod(full, stat.S_IMODE(os.lstat(full).st_mode) & ~0o222)
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)


def _consume(store: str) -> subprocess.CompletedProcess:
    """`txlog consume` of the whole topic from a store it may not write (chmod; for root, whom chmod
    does not stop, a read-only bind mount in a private mount namespace as well)."""
    args = [sys.executable, "-m", "cli.main", "--data-dir", store, "consume", "-t", TOPIC, "-f", "%o %k %s\\n"]
    env = {k: v for k, v in os.environ.items() if k != "TXLOG_DATA_DIR"}
    env["PYTHONPATH"] = ROOT
    if os.geteuid() != 0:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if not shutil.which("unshare"):
        pytest.skip("needs unshare for a read-only mount (chmod does not stop root)")
    quoted = " ".join(f"'{a}'" for a in args)
    script = f"mount --bind {store} {store} && mount -o remount,bind,ro {store} || exit 99\n{quoted}"
    proc = subprocess.run(
        ["unshare", "-m", "bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 99:
        pytest.skip(f"no read-only bind mount here: {proc.stderr}")
    return proc


def test_txlog_consume_reads_a_read_only_copy_of_the_crashed_store(store_path, tmp_path):
    dirty_log(store_path)
    kill_cleaner_after(store_path, "delete_replaced")
    copy = str(tmp_path / "copy")
    shutil.copytree(store_path, copy)
    _make_read_only(copy)
    files = sorted(os.listdir(os.path.join(copy, f"{TOPIC}-0")))
    assert SWAP in files
    try:
        proc = _consume(copy)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [f"{o} {k.decode()} {v.decode()}" for o, k, v in AFTER]
        assert sorted(os.listdir(os.path.join(copy, f"{TOPIC}-0"))) == files
    finally:
        for dirpath, _, _ in os.walk(copy):
            os.chmod(dirpath, 0o755)  # let the tmp directory be removed
