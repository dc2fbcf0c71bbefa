"""An active segment's damaged offset index after kill -9 (docs/reliability-scenarios.md scenario 81).

Opening a partition checks its indexes in constant time only and finds the snapshot's place in
the active segment by bisecting the offset index in place (issue 26: opening a 1 GiB active
segment must not parse its index). Damage in the middle of that index is then left to the full
check before the first lookup or the first write. A real writer process appends idempotent
batches past SNAPSHOT_INTERVAL_BYTES into one segment (so it snapshots inside it) and is killed
with SIGKILL; the second half of its `.index` is then reversed (out of order, every length and
the last entry still plausible), so the bisection meets damaged entries. After a reopen, reads
must return what an undamaged copy returns, the retried last batch must be answered with its
offsets (the producer state came from the snapshot in the segment), an append must land at the
log end, and `txlog verify`'s check must find nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

from storage import Store
from storage.file_check import Severity
from storage.producer_snapshot import list_snapshots
from storage.producer_state_snapshots import SNAPSHOT_INTERVAL_BYTES
from storage.records import build_batch
from txlog.tools.store_check import check_store

TOPIC = "t"
BATCH_VALUES = 60  # ~60 KiB per batch, one append (and fdatasync) per batch: one index entry each
VALUE = b"v" * 1000

_WRITER = """
import json, sys, time
from storage import Store
from storage.records import build_batch
store = Store.open(sys.argv[1])
store.create_topic("t", 1, config={"segment.bytes": 256 * 1024 * 1024})
log = store.partition("t", 0)
pid = store.allocate_producer_id()
target, seq, last = int(sys.argv[2]), 0, None
BATCH_VALUES = int(sys.argv[3])
while log.segments[-1].size < target:
    batch = build_batch([(None, b"v" * 1000, (), int(time.time() * 1000))] * BATCH_VALUES, producer_id=pid,
                        producer_epoch=0, base_sequence=seq)
    last = log.append(batch)
    seq += BATCH_VALUES
print(json.dumps({"pid": pid, "seq": seq, "last": [last.base_offset, last.last_offset],
                  "end": log.log_end_offset}), flush=True)
time.sleep(3600)
"""


def _now() -> int:
    return int(time.time() * 1000)  # producers whose last batch is older than a day are expired at open


def _crashed_writer(root: str, target: int) -> dict:
    """Run the writer until its active segment holds `target` bytes, then SIGKILL it; what it reported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, root, str(target), str(BATCH_VALUES)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert line, "the writer died before reporting"
    return json.loads(line)


def _reverse_second_half(index_path: str) -> None:
    """Reverse the order of the second half of the index's 8-byte entries: a damage only the full check sees."""
    with open(index_path, "r+b") as f:
        data = f.read()
        entries = [data[i : i + 8] for i in range(0, len(data), 8)]
        half = len(entries) // 2
        damaged = entries[:half] + entries[half:][::-1]
        assert damaged[-1] != entries[-1]
        # Keep the last entry where it was: the constant-time check at open must not see anything.
        damaged[-1], damaged[half] = entries[-1], damaged[-1]
        f.seek(0)
        f.write(b"".join(damaged))
    rels = [struct.unpack(">ii", e)[0] for e in damaged]
    assert rels != sorted(rels)


def _errors(store: Store) -> list:
    """What `txlog verify` calls errors in the topic."""
    return [f for f in check_store(store, TOPIC).findings if f.severity is Severity.ERROR]


def _reads(root: str, offsets: list[int]) -> list[list[tuple[int, int]]]:
    """(base offset, CRC) of the batches a read from each offset returns, through a lock-free reader."""
    with Store.open_for_reading(root) as store:
        log = store.partition(TOPIC, 0)
        return [[(b.base_offset, b.crc) for b in log.read(offset, 200_000)] for offset in offsets]


def test_damaged_active_index_after_kill_is_found_at_first_lookup_and_first_write(tmp_path):
    root = str(tmp_path / "store")
    info = _crashed_writer(root, SNAPSHOT_INTERVAL_BYTES + 4 * 1024 * 1024)
    directory = os.path.join(root, f"{TOPIC}-0")
    snapshots = [offset for offset, _ in list_snapshots(directory)]
    assert any(0 < offset < info["end"] for offset in snapshots), snapshots  # one inside the active segment

    pristine = str(tmp_path / "pristine")
    shutil.copytree(root, pristine)
    end = info["end"]
    offsets = [0, end // 3, end // 2, (3 * end) // 4, end - 2 * BATCH_VALUES, end - 1]
    expected = _reads(pristine, offsets)
    _reverse_second_half(os.path.join(directory, f"{0:020d}.index"))

    store = Store.open(root)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == end
        assert [[(b.base_offset, b.crc) for b in log.read(o, 200_000)] for o in offsets] == expected
        retry = build_batch(
            [(None, VALUE, (), _now())] * BATCH_VALUES,
            producer_id=info["pid"],
            producer_epoch=0,
            base_sequence=info["seq"] - BATCH_VALUES,
        )
        again = log.append(retry)
        assert again.duplicate and [again.base_offset, again.last_offset] == info["last"]
        following = build_batch(
            [(None, VALUE, (), _now())] * BATCH_VALUES,
            producer_id=info["pid"],
            producer_epoch=0,
            base_sequence=info["seq"],
        )
        new = log.append(following)
        assert not new.duplicate and new.base_offset == end
    finally:
        store.close()
    with Store.open(root) as store:
        assert not _errors(store)
        log = store.partition(TOPIC, 0)
        assert log.read(end, 200_000)[0].base_offset == end


def test_a_writer_reopening_a_damaged_active_index_appends_before_any_read(tmp_path):
    """No read runs the full check first: the writer's first append must (it cannot append after damage)."""
    root = str(tmp_path / "store")
    info = _crashed_writer(root, SNAPSHOT_INTERVAL_BYTES + 2 * 1024 * 1024)
    directory = os.path.join(root, f"{TOPIC}-0")
    _reverse_second_half(os.path.join(directory, f"{0:020d}.index"))
    with Store.open(root) as store:
        log = store.partition(TOPIC, 0)
        following = build_batch(
            [(None, VALUE, (), _now())] * BATCH_VALUES,
            producer_id=info["pid"],
            producer_epoch=0,
            base_sequence=info["seq"],
        )
        assert log.append(following).base_offset == info["end"]
    with Store.open(root) as store:
        assert not _errors(store)


def test_an_index_entry_pointing_inside_a_batch_where_recovery_bisects_is_not_trusted(tmp_path):
    """The entry the bisection finds for the snapshot's offset points inside the snapshot's batch.

    Ordered and in bounds, it passes every check of the file; only the batch found at its position
    tells. Trusted, recovery would resume after the damage it met there and skip that batch, whose
    retry (one of the producer's last five) must be answered with its offsets.
    """
    root = str(tmp_path / "store")
    info = _crashed_writer(root, SNAPSHOT_INTERVAL_BYTES + 3 * BATCH_VALUES * 1024)
    directory = os.path.join(root, f"{TOPIC}-0")
    inside = [offset for offset, _ in list_snapshots(directory) if 0 < offset < info["end"]]
    assert inside and info["end"] - inside[-1] <= 4 * BATCH_VALUES  # the snapshot's batch is among the last five
    snapshot = inside[-1]
    index_path = os.path.join(directory, f"{0:020d}.index")
    with open(index_path, "r+b") as f:
        entries = [list(struct.unpack(">ii", chunk)) for chunk in iter(lambda: f.read(8), b"")]
        i = next(i for i, (rel, _) in enumerate(entries) if rel == snapshot - 1)  # the batch before the snapshot's
        entries[i][1] = entries[i + 1][1] + 100  # inside the snapshot's batch, still before the next entry
        f.seek(0)
        f.write(b"".join(struct.pack(">ii", *entry) for entry in entries))
    with Store.open(root) as store:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == info["end"]
        retry = build_batch(
            [(None, VALUE, (), _now())] * BATCH_VALUES,
            producer_id=info["pid"],
            producer_epoch=0,
            base_sequence=snapshot,  # one producer from offset 0: its sequences are the offsets
        )
        again = log.append(retry)
        assert again.duplicate and (again.base_offset, again.last_offset) == (snapshot, snapshot + BATCH_VALUES - 1)
        assert [b.base_offset for b in log.read(snapshot, 1)] == [snapshot]
