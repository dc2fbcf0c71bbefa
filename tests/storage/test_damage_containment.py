"""docs/reliability-scenarios.md rule 17 and scenarios 64-66: damage is contained to the damaged batch.

Stores are written by the real Producer over several segments and closed cleanly; then one
batch's bytes are damaged on disk: a flipped byte in its records (bad CRC) or a bad magic
byte (bad framing), in a sealed segment or in the active one. Every offset outside the
damaged batch must stay readable by offset, through the partition's fetch and
txlog.Consumer; a fetch that meets the damage after reading records returns those records
and the next read that needs the damaged batch raises CorruptRecordError naming the file
and the byte; reading one record reads about one batch; `txlog verify` reports the damage.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import txlog
from storage import Store
from storage.errors import CorruptRecordError
from storage.file_records import FileRecords
from storage.log_files import LOG_FILE_SUFFIX, offset_of
from storage.records import MAGIC_OFFSET
from txlog.fetch import IsolationLevel, fetch
from txlog.topic_partition import TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = 240


def build_store(path: str) -> str:
    """One-record batches over several 4 KiB segments with a dense offset index."""
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"segment.bytes": 4096, "index.interval.bytes": 512, "retention.ms": -1})
    producer = txlog.Producer(path, linger_ms=60_000)  # each flush() sends exactly the one record sent
    for sent in range(RECORDS):
        producer.send("t", f"v{sent:05d}".encode() + b"-" * 40, partition=0)
        producer.flush()
    producer.close()
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    return build_store(str(tmp_path_factory.mktemp("contain") / "store"))


@pytest.fixture
def store(template, tmp_path) -> str:
    dest = str(tmp_path / "store")
    subprocess.run(["cp", "-a", template, dest], check=True)
    return dest


def segment_logs(store_path: str) -> list[str]:
    d = os.path.join(store_path, "t-0")
    bases = sorted(b for b in (offset_of(n, LOG_FILE_SUFFIX) for n in os.listdir(d)) if b is not None)
    return [os.path.join(d, f"{b:020d}{LOG_FILE_SUFFIX}") for b in bases]


def batches_of(path: str) -> list:
    with FileRecords.open(path) as records:
        return list(records.batches())


def damage(store_path: str, where: str, how: str):
    """Damage the middle batch of the second segment (sealed) or of the last one (active); returns the batch."""
    logs = segment_logs(store_path)
    assert len(logs) >= 4
    path = logs[1] if where == "sealed" else logs[-1]
    batches = batches_of(path)
    assert len(batches) >= 5
    victim = batches[len(batches) // 2]
    with open(path, "r+b") as f:
        if how == "crc":
            at = victim.position + victim.size - 3  # inside the last record's value
        else:
            at = victim.position + MAGIC_OFFSET  # bad framing: no batch starts here any more
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x5A]) if how == "crc" else b"\x07")
    return path, victim


def value_offset(value: bytes) -> int:
    return int(value[1:6])


WHERE = ("sealed", "active")
HOW = ("crc", "framing")


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", WHERE)
def test_scenario62_every_offset_outside_the_damaged_batch_stays_readable(store, where, how, read_only):
    path, victim = damage(store, where, how)
    s = Store.open(store, read_only=read_only)
    try:
        log = s.partition("t", 0)
        for offset in range(RECORDS):
            inside = victim.base_offset <= offset <= victim.last_offset
            if inside:
                with pytest.raises(CorruptRecordError) as err:
                    fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=1)
                assert err.value.path == path and err.value.position == victim.position
                continue
            got = fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=1).records
            assert [r.offset for r in got] == [offset]
            assert value_offset(got[0].value) == offset
    finally:
        s.close()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", WHERE)
def test_scenario63_records_before_the_damage_are_returned_then_the_read_raises(store, where, how):
    path, victim = damage(store, where, how)
    s = Store.open(store, read_only=True)
    try:
        log = s.partition("t", 0)
        start = max(0, victim.base_offset - 30)
        res = fetch(log, start, IsolationLevel.READ_COMMITTED, max_records=500)
        assert [r.offset for r in res.records] == list(range(start, victim.base_offset))
        assert res.next_offset == victim.base_offset
        with pytest.raises(CorruptRecordError) as err:
            fetch(log, res.next_offset, IsolationLevel.READ_COMMITTED)
        assert err.value.path == path and err.value.position == victim.position
        assert path in str(err.value) and f"byte {victim.position}" in str(err.value)
        after = fetch(log, victim.last_offset + 1, IsolationLevel.READ_COMMITTED, max_records=500)
        assert [r.offset for r in after.records] == list(range(victim.last_offset + 1, RECORDS))
    finally:
        s.close()


def test_scenario63_consumer_stops_at_the_damage_and_can_seek_past_it(store):
    path, victim = damage(store, "sealed", "crc")
    s = Store.open(store, read_only=True)
    consumer = txlog.Consumer(s, isolation_level="read_committed", enable_auto_commit=False)
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    with pytest.raises(CorruptRecordError):
        while True:
            batch = consumer.poll(max_records=50)
            assert batch
            got.extend(r.offset for r in batch)
    assert got == list(range(victim.base_offset))
    consumer.seek(tp, victim.last_offset + 1)
    rest = []
    while True:
        batch = consumer.poll(max_records=50)
        if not batch:
            break
        rest.extend(r.offset for r in batch)
    assert rest == list(range(victim.last_offset + 1, RECORDS))
    consumer.close(autocommit=False)
    s.close()


def test_scenario64_reading_one_record_reads_about_one_batch(store, monkeypatch):
    s = Store.open(store, read_only=True)
    try:
        log = s.partition("t", 0)
        read_bytes = []
        original = FileRecords.read

        def counting(self, position, length):
            data = original(self, position, length)
            read_bytes.append(len(data))
            return data

        monkeypatch.setattr(FileRecords, "read", counting)
        for offset in (0, 100, RECORDS - 1):
            read_bytes.clear()
            got = fetch(log, offset, IsolationLevel.READ_UNCOMMITTED, max_records=1, max_bytes=1)
            assert [r.offset for r in got.records] == [offset]
            # one batch here is < 300 bytes, the offset index at most ~512 bytes behind; a segment is 4 KiB
            assert sum(read_bytes) < 2048, read_bytes
    finally:
        s.close()


@pytest.mark.parametrize("how", HOW)
def test_scenario62_verify_names_the_file_and_byte(store, how):
    path, victim = damage(store, "sealed", how)
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "--data-dir", store, "verify"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert os.path.basename(path) in out and str(victim.position) in out, out


def test_scenario62_offsets_for_times_passes_over_a_damaged_batch(store, template):
    path, victim = damage(store, "sealed", "crc")
    target = victim.max_timestamp + 1  # answered by a batch after the damaged one
    expected = {}
    for where in (template, store):
        s = Store.open(where, read_only=True)
        try:
            expected[where] = s.partition("t", 0).offset_for_timestamp(target)
        finally:
            s.close()
    assert expected[template] is not None and expected[template] > victim.last_offset
    assert expected[store] == expected[template]
    s = Store.open(store, read_only=True)
    consumer = txlog.Consumer(s, isolation_level="read_committed", enable_auto_commit=False)
    tp = TopicPartition("t", 0)
    found = consumer.offsets_for_times({tp: target})[tp]
    assert found is not None and found[0] == expected[template]
    consumer.close(autocommit=False)
    s.close()


def test_scenario63_cli_consume_prints_the_records_before_the_damage_then_one_error_line(store):
    path, victim = damage(store, "sealed", "crc")
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "--data-dir", store, "consume", "-t", "t", "--output", "jsonl"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert len(proc.stdout.splitlines()) == victim.base_offset
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("Error: "), proc.stderr
    assert path in errors[0] and f"byte {victim.position}" in errors[0]
