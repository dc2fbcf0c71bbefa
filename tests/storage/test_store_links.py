"""No write leaves the store: a file or partition directory of a store that is a symbolic link (issue 23, item 3).

Each test plants a link in place of one file of a real store, pointing at a copy of that
file's own bytes outside the store (the most dangerous case: following the link would look
like a healthy store and carry on writing through it), then produces, consumes, commits and
recovers. The outside file must come out byte for byte unchanged, and a write must fail with
one KafkaStorageError that names the link (storage/safe_open.py).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Callable

import pytest

import txlog
from storage import Store
from storage.errors import KafkaError, KafkaStorageError
from storage.log_files import HIGH_WATERMARK_FILE
from txlog.topic_partition import TopicPartition

SEGMENT_BYTES = 1500


def _build_store(path: str) -> None:
    """Several segments, committed and aborted transactions (the last aborted: the active segment has a
    `.txnindex`), a plain idempotent append, closed cleanly (snapshots and checkpoints written)."""
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": -1})
    with txlog.Producer(path) as plain:
        plain.send("t", b"plain", partition=0).get()
    producer = txlog.Producer(path, transactional_id="tx")
    producer.init_transactions()
    for r in range(8):
        producer.begin_transaction()
        for i in range(3):
            producer.send("t", f"{r}-{i}".encode() + b"." * 60, partition=0)
        producer.flush()
        producer.commit_transaction() if r % 2 == 0 else producer.abort_transaction()
    producer.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("links") / "store")
    _build_store(path)
    return path


def _partition(root: str) -> str:
    return os.path.join(root, "t-0")


def _newest(root: str, suffix: str) -> str:
    found = sorted(glob.glob(os.path.join(_partition(root), "*" + suffix)))
    assert found, f"the template store has no {suffix} file"
    return found[-1]


# What to replace by a link: a file kind -> its path in a store.
KINDS: dict[str, Callable[[str], str]] = {
    "high-watermark": lambda root: os.path.join(_partition(root), HIGH_WATERMARK_FILE),
    "active .log": lambda root: _newest(root, ".log"),
    "first .log": lambda root: sorted(glob.glob(os.path.join(_partition(root), "*.log")))[0],
    ".index": lambda root: _newest(root, ".index"),
    ".timeindex": lambda root: _newest(root, ".timeindex"),
    ".txnindex": lambda root: _newest(root, ".txnindex"),
    ".snapshot": lambda root: _newest(root, ".snapshot"),
    "leader-epoch-checkpoint": lambda root: os.path.join(_partition(root), "leader-epoch-checkpoint"),
    "txnindex-count-checkpoint": lambda root: os.path.join(_partition(root), "txnindex-count-checkpoint"),
    "partition lock": lambda root: os.path.join(_partition(root), "txlog.lock"),
    "store meta file": lambda root: os.path.join(root, "txlog.json"),
    "store lock": lambda root: os.path.join(root, "txlog-store.lock"),
    "producer ids": lambda root: os.path.join(root, "producer-ids.json"),
    "producer ids lock": lambda root: os.path.join(root, "producer-ids.lock"),
    "partition directory": _partition,
}


def _plant_link(root: str, target: str, outside_dir: str) -> str:
    """Move `target` out of the store and leave a link to it in its place; returns where it went."""
    outside = os.path.join(outside_dir, os.path.basename(target))
    shutil.move(target, outside)
    os.symlink(outside, target)
    return outside


def _contents(path: str) -> dict[str, bytes]:
    """Every file's bytes under `path` (a file, or a directory's tree) by relative name."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {"": f.read()}
    out = {}
    for dirpath, _, names in os.walk(path):
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def _recover(root: str) -> None:
    with Store.open(root) as store:
        store.partition("t", 0).log_end_offset  # noqa: B018  opening it is the recovery


def _produce(root: str) -> None:
    with txlog.Producer(root) as producer:
        producer.send("t", b"new", partition=0).get()


def _consume(root: str) -> None:
    consumer = txlog.Consumer(root, isolation_level="read_committed", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition("t", 0)])
        while consumer.poll(max_records=1000):
            pass
    finally:
        consumer.close()


def _commit(root: str) -> None:
    producer = txlog.Producer(root, transactional_id="tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"committed", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()


def _read_only(root: str) -> None:
    with Store.open(root, read_only=True) as store:
        log = store.partition("t", 0)
        log.read(log.log_start_offset)
        log.aborted_transactions(log.log_start_offset, log.log_end_offset)


OPERATIONS: dict[str, Callable[[str], None]] = {
    "recover": _recover,
    "produce": _produce,
    "consume": _consume,
    "commit": _commit,
    "read-only": _read_only,
}


def _outcome(operation: Callable[[str], None], root: str) -> KafkaError | None:
    try:
        operation(root)
    except KafkaError as exc:
        return exc
    return None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_scenario67_a_linked_store_file_is_refused_and_its_target_never_changes(template, tmp_path, kind) -> None:
    root = str(tmp_path / "store")
    subprocess.run(["cp", "-a", template, root], check=True)
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    link = KINDS[kind](root)
    outside = _plant_link(root, link, str(outside_dir))
    before = _contents(outside)

    outcomes = {name: _outcome(op, root) for name, op in OPERATIONS.items()}

    assert _contents(outside) == before, f"{kind}: a write went through the link"
    for name, error in outcomes.items():
        if error is not None:  # whatever failed, failed because of the link, and says so
            # (a transaction's commit reports it as the reason it cannot commit)
            assert isinstance(error, KafkaStorageError) or name == "commit", f"{name}: {error!r}"
            assert "is a symbolic link" in str(error) and link in str(error), f"{name}: {error}"
    # A writer opening the partition (or the store) meets every one of these files: it refuses.
    assert outcomes["recover"] is not None or outcomes["produce"] is not None, f"{kind}: no writer noticed the link"


def test_scenario67_a_link_planted_while_the_partition_is_open_is_not_written_through(template, tmp_path) -> None:
    """A long-lived writer whose idle descriptors were closed reopens by path: a link there is refused."""
    from storage.descriptor_cache import CACHE

    root = str(tmp_path / "store")
    subprocess.run(["cp", "-a", template, root], check=True)
    limit = CACHE.limit
    store = Store.open(root)
    log = store.partition("t", 0)
    hw = os.path.join(_partition(root), HIGH_WATERMARK_FILE)
    CACHE.set_limit(1)  # every idle descriptor closes now
    try:
        outside = _plant_link(root, hw, str(tmp_path))
        before = _contents(outside)
        with pytest.raises(KafkaStorageError, match="is a symbolic link"):
            log.high_watermark  # noqa: B018  a read of the HW file reopens it
        with pytest.raises(KafkaStorageError, match="is a symbolic link"):
            _produce_to(log)
        assert _contents(outside) == before
        os.unlink(hw)
        shutil.move(outside, hw)  # the same file again (a rename keeps its inode): the view carries on
        _produce_to(log)
    finally:
        CACHE.set_limit(limit)
        store.close()


def _produce_to(log) -> None:
    from storage.records import build_batch

    log.append(build_batch([(None, b"direct", [], 0)]))


def test_an_atomic_replace_keeps_its_temporary_file_in_the_directory(tmp_path) -> None:
    from storage.durable import atomic_write

    with pytest.raises(ValueError, match="beside"):
        atomic_write(str(tmp_path / "file"), b"data", tmp_suffix="/../../elsewhere")
    assert not (tmp_path / "file").exists()
