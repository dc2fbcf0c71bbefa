"""Readers on a disk that refuses writes, and clients closing on one (docs/reliability-scenarios.md scenario 70).

Real disks, no monkeypatching: each test mounts its own small tmpfs (we run as root in CI and
the sandbox; a machine that may not mount skips with the reason), fills it until the kernel
answers ENOSPC, or remounts it read-only (EROFS; chmod would not stop root). A producer is
SIGKILLed mid-run first where the scenario needs recovery at the next open: without a clean
close there is no snapshot at the log end, so a writable open must write one (and a
txnindex-count checkpoint), which is exactly what a full or read-only disk refuses.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

import txlog
from storage.errors import KafkaStorageError, ReadOnlyStoreError
from storage.store import Store
from tests.cli.cli_helpers import log_bytes
from txlog.topic_partition import TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "t"
PARTITIONS = 2
ACKED = 400  # records acknowledged (acks=all, flushed, every future done) before the kill

# Sends numbered records: the first ACKED are flushed and reported acknowledged, then it keeps
# sending (the sender writing, nothing flushed) until killed.
_CRASHING_PRODUCER = """
import sys
import txlog
from tests.cli.cli_helpers import log_bytes
p = txlog.Producer(sys.argv[1], linger_ms=0)
n = 0
while True:
    futures = [p.send("t", value=b"%d" % (n + i)) for i in range(50)]
    n += 50
    if n <= int(sys.argv[2]):
        p.flush()
        for f in futures:
            f.get()
        print("ACK", n, flush=True)
"""


@pytest.fixture
def disk(tmp_path) -> Iterator[str]:
    """A fresh 4 MiB tmpfs of our own, unmounted at the end."""
    mount_point = str(tmp_path / "disk")
    os.mkdir(mount_point)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount_point], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on this machine: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], check=False)


def _make_store(disk: str) -> str:
    path = os.path.join(disk, "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, PARTITIONS)
    return path


def _crash_a_producer(store: str) -> set[bytes]:
    """Run a producer, SIGKILL it while it writes past ACKED; the values it saw acknowledged."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_PRODUCER, store, str(ACKED)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    try:
        acked = 0
        for line in proc.stdout:
            acked = int(line.split()[1])
            if acked >= ACKED:
                break
        assert acked == ACKED, "the producer died before its records were acknowledged"
        # It is writing unflushed batches now; let a few reach the log before the kill.
        _wait_for_log_growth(store)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return {b"%d" % i for i in range(ACKED)}


def _wait_for_log_growth(store: str) -> None:
    """Until the logs hold more than the acknowledged records (a condition, not a timed assertion)."""
    first = log_bytes(store, TOPIC)
    while log_bytes(store, TOPIC) <= first:
        os.sched_yield()


def _fill(disk: str) -> None:
    """Write a filler file until the kernel says ENOSPC, down to the last byte."""
    with open(os.path.join(disk, "filler"), "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    with pytest.raises(OSError) as refused, open(os.path.join(disk, "probe"), "wb") as probe:
        probe.write(b"x" * 4096)
    assert refused.value.errno == errno.ENOSPC


def _free(disk: str) -> None:
    os.unlink(os.path.join(disk, "filler"))


def _remount_read_only(disk: str) -> None:
    subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
    with pytest.raises(OSError) as refused:
        open(os.path.join(disk, "probe"), "wb").close()
    assert refused.value.errno == errno.EROFS


def _refuse_writes(disk: str, how: str) -> None:
    if how == "full":
        _fill(disk)
    else:
        _remount_read_only(disk)


def _read_everything(consumer: txlog.Consumer) -> list[bytes]:
    values: list[bytes] = []
    while records := consumer.poll(timeout_ms=0, max_records=10_000):
        values.extend(r.value for r in records)
    return values


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_scenario70_consumer_reads_after_a_crash_on_a_disk_that_refuses_writes(disk, how, caplog):
    store = _make_store(disk)
    acked = _crash_a_producer(store)
    _refuse_writes(disk, how)

    consumer = txlog.Consumer(store, group_id="g")  # writable by default, auto-commit on
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    values = _read_everything(consumer)
    assert acked <= set(values), "an acknowledged record is missing"
    assert len(values) == len(set(values)), "a record was read twice"
    consumer.close()  # never raises
    if how == "full":  # its auto-commit was refused: logged, as Kafka's close logs it
        assert "auto-commit of group 'g' failed" in caplog.text
    else:  # opened read-only, as `txlog consume` opens it: there is no auto-commit to try
        assert "auto-commit" not in caplog.text


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_scenario70_close_after_a_clean_run_on_a_disk_that_refuses_writes(disk, how):
    store = _make_store(disk)
    with txlog.Producer(store) as producer:
        for i in range(200):
            producer.send(TOPIC, value=b"%d" % i)
    _refuse_writes(disk, how)

    consumer = txlog.Consumer(store, enable_auto_commit=False)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    assert sorted(_read_everything(consumer)) == sorted(b"%d" % i for i in range(200))
    consumer.close()  # nothing of its own to write: never raises
    with txlog.Admin(store) as admin:  # the read views of a client opened writable
        assert sum(p.log_end_offset for p in admin.describe_topic(TOPIC).partitions) == 200
        assert admin.list_consumer_groups() == [] and admin.describe_consumer_group("g") == []
        assert admin.list_transactions() == []  # a sweep with nothing to write writes nothing
    with txlog.Admin(store, read_only=True) as admin:
        assert admin.list_transactions() == []


def test_scenario70_commits_fail_typed_when_the_disk_refuses_them(disk):
    store = _make_store(disk)
    with txlog.Producer(store) as producer:
        producer.send(TOPIC, value=b"x", partition=0)
    tp = TopicPartition(TOPIC, 0)

    _fill(disk)
    consumer = txlog.Consumer(store, group_id="g", enable_auto_commit=False)
    consumer.assign([tp])
    assert [r.value for r in consumer.poll(timeout_ms=0)] == [b"x"]
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        consumer.commit()
    consumer.close()

    _free(disk)
    _remount_read_only(disk)
    consumer = txlog.Consumer(store, group_id="g", enable_auto_commit=False)
    consumer.assign([tp])
    assert [r.value for r in consumer.poll(timeout_ms=0)] == [b"x"]
    with pytest.raises(ReadOnlyStoreError, match="read-only file system"):
        consumer.commit()
    consumer.close()


def test_scenario70_a_producer_on_a_full_disk_after_a_crash_fails_its_sends_then_recovers(disk):
    store = _make_store(disk)
    acked = _crash_a_producer(store)
    _fill(disk)

    with pytest.raises(KafkaStorageError, match="No space left on device"):
        txlog.Producer(store)  # an idempotent producer's first act is a write: its producer id
    producer = txlog.Producer(store, linger_ms=0, enable_idempotence=False)
    future = producer.send(TOPIC, value=b"late", partition=0)
    with pytest.raises(KafkaStorageError, match="refused recovery's writes"):
        future.get()  # its partition could not be recovered: a read-only view, which refuses the append
    producer.close()  # logs, never raises

    _free(disk)  # space again: the next open recovers the files and takes writes
    with txlog.Producer(store) as producer:
        assert producer.send(TOPIC, value=b"later", partition=0).get().offset >= 0
    consumer = txlog.Consumer(store)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    values = _read_everything(consumer)
    consumer.close()
    assert acked <= set(values) and b"later" in values and b"late" not in values


def test_scenario70_producer_close_on_a_full_disk_fails_pending_sends_and_logs(disk, caplog):
    store = _make_store(disk)
    producer = txlog.Producer(store, linger_ms=60_000, batch_size=1 << 20)
    acknowledged = producer.send(TOPIC, value=b"before", partition=0)
    producer.flush()
    assert acknowledged.get().offset == 0
    pending = [producer.send(TOPIC, value=b"x" * 1000, partition=1) for _ in range(100)]
    _fill(disk)

    with caplog.at_level(logging.WARNING):
        producer.close()  # the flush inside close is refused: not raised...
    for future in pending:  # ...but no pending record is dropped silently: each future fails
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            future.get()
    assert "No space left on device" in caplog.text  # and the close says so


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_scenario70_a_group_member_on_a_disk_that_refuses_writes(disk, how):
    """Membership is a write: on a full disk joining fails typed; a read-only store has no membership
    to join (as `txlog consume`), so the subscription reads every partition."""
    store = _make_store(disk)
    with txlog.Producer(store) as producer:
        for i in range(50):
            producer.send(TOPIC, value=b"%d" % i)
    _refuse_writes(disk, how)

    consumer = txlog.Consumer(store, group_id="g")
    consumer.subscribe([TOPIC])
    if how == "full":
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            consumer.poll(timeout_ms=0)
    else:
        assert sorted(_read_everything(consumer)) == sorted(b"%d" % i for i in range(50))
    consumer.close()
