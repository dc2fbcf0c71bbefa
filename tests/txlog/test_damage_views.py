"""Issue 23, item 1: no view silently stops short at damage (docs/reliability-scenarios.md rule 7, scenario 66).

A young segment (a few small batches, so no offset-index entry at all) gets one damaged
batch with valid batches after it: a flipped byte (bad CRC) or a batch whose CRC is valid but
whose records cannot be decoded (an impossible record count, an impossible key length). Every
view, read-only or writable, must return the whole batches before the damage, then fail with
CorruptRecordError naming the file and byte; none may report a shorter log, lower end offsets,
a wrong lag or a wrong transaction state.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import txlog
from storage import Store
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.file_records import FileRecords
from storage.log_files import filename_prefix
from storage.records import CRC_COVERED_START, CRC_OFFSET, RECORDS_COUNT_OFFSET, RECORDS_OFFSET, crc32c
from tests.cli.cli_helpers import txlog as run_txlog
from txlog.fetch import IsolationLevel, fetch
from txlog.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
RECORDS = 40
PER_BATCH = 2
VICTIM = 10  # the batch damaged: offsets 20-21, with nine batches after it


def segment_path(store: str, topic: str = "t", partition: int = 0) -> str:
    return os.path.join(store, f"{topic}-{partition}", filename_prefix(0) + ".log")


def batches_of(path: str) -> list:
    with FileRecords.open(path) as records:
        return list(records.batches())


@pytest.fixture
def store(tmp_path) -> str:
    return write_store(str(tmp_path / "store"))


def write_store(path: str) -> str:
    """40 records in 20 batches of 2, one young segment: its offset index has no entry yet."""
    with txlog.Admin(path) as admin:
        admin.create_topic("t", 1, {"retention.ms": -1})
    producer = txlog.Producer(path, linger_ms=60_000)
    for i in range(RECORDS):
        producer.send("t", f"v{i:03d}".encode(), partition=0)
        if i % PER_BATCH == PER_BATCH - 1:
            producer.flush()
    producer.close()
    assert os.path.getsize(segment_path(path)[: -len(".log")] + ".index") == 0
    return path


def drop_snapshots(store: str) -> None:
    """What a crash leaves: no producer-state snapshot at the log end, so the next open replays the log."""
    d = os.path.dirname(segment_path(store))
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))


@pytest.fixture(params=["clean", "crashed"])
def shutdown(request) -> str:
    """After a clean close a snapshot covers the log; after a crash the open replays it, damage and all."""
    return request.param


def flip_crc(store: str, victim: int = VICTIM):
    """Flip a byte inside a batch's last record: its CRC no longer matches."""
    path = segment_path(store)
    batch = batches_of(path)[victim]
    with open(path, "r+b") as f:
        at = batch.position + batch.size - 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x5A]))
    return path, batch


def craft(store: str, victim: int, how: str):
    """Make a batch undecodable with a valid CRC: an impossible record count or key length."""
    path = segment_path(store)
    batch = batches_of(path)[victim]
    with open(path, "r+b") as f:
        f.seek(batch.position)
        data = bytearray(f.read(batch.size))
        if how in ("count", "negative"):
            struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 1000 if how == "count" else -1)
        else:
            # first record: length varint (1 byte: records are short), attributes, timestamp delta 0,
            # offset delta 0, then the key length (-1, no key): 50 instead runs past the record
            assert data[RECORDS_OFFSET + 4] == 0x01
            data[RECORDS_OFFSET + 4] = 0x64
        struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[CRC_COVERED_START:])))
        f.seek(batch.position)
        f.write(data)
    return path, batch


def values(records) -> list[int]:
    return [int(r.value[1:]) for r in records]


# ---- the partition's views (storage + fetch) ----------------------------------------------------------


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
def test_a_bad_crc_before_valid_batches_is_no_end_of_the_log(store, read_only, shutdown):
    path, victim = flip_crc(store)
    if shutdown == "crashed":
        drop_snapshots(store)
    with Store.open(store, read_only=read_only) as s:
        log = s.partition("t", 0)
        assert log.log_end_offset == RECORDS
        assert log.last_stable_offset == RECORDS
        got = fetch(log, 0, IsolationLevel.READ_COMMITTED, max_records=500)
        assert [r.offset for r in got.records] == list(range(victim.base_offset))
        with pytest.raises(CorruptRecordError) as err:
            fetch(log, got.next_offset, IsolationLevel.READ_COMMITTED)
        assert (err.value.path, err.value.position) == (path, victim.position)
        after = fetch(log, victim.last_offset + 1, IsolationLevel.READ_UNCOMMITTED, max_records=500)
        assert [r.offset for r in after.records] == list(range(victim.last_offset + 1, RECORDS))


def test_a_writable_view_that_replayed_the_damage_refuses_writes_and_changes_no_byte(store):
    path, victim = flip_crc(store)
    drop_snapshots(store)
    before = Path(path).read_bytes()
    with Store.open(store) as s:
        log = s.partition("t", 0)
        with pytest.raises(CorruptRecordError) as err:
            log.roll()
        assert (err.value.path, err.value.position) == (path, victim.position)
    assert Path(path).read_bytes() == before


def test_a_torn_tail_of_the_last_segment_is_still_invisible_not_damage(store):
    """The distinction kept: bad bytes with nothing valid after them are a write that never completed."""
    path = segment_path(store)
    last = batches_of(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(last.position + last.size - 5)
    with Store.open(store, read_only=True) as s:
        log = s.partition("t", 0)
        assert log.log_end_offset == last.base_offset
        got = fetch(log, 0, IsolationLevel.READ_UNCOMMITTED, max_records=500)
        assert [r.offset for r in got.records] == list(range(last.base_offset))


# ---- the Consumer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
def test_consumer_end_offsets_and_poll_at_a_bad_crc(store, read_only, shutdown):
    path, victim = flip_crc(store)
    if shutdown == "crashed":
        drop_snapshots(store)
    s = Store.open(store, read_only=read_only)
    consumer = txlog.Consumer(s, enable_auto_commit=False)
    try:
        assert consumer.end_offsets([TP]) == {TP: RECORDS}
        consumer.assign([TP])
        consumer.seek_to_beginning(TP)
        got = []
        with pytest.raises(CorruptRecordError) as err:
            while True:
                batch = consumer.poll(max_records=500)
                assert batch, "poll returned nothing before reaching the damage"
                got.extend(batch)
        assert values(got) == list(range(victim.base_offset))
        assert (err.value.path, err.value.position) == (path, victim.position)
        assert consumer.position(TP) == victim.base_offset
    finally:
        consumer.close(autocommit=False)
        s.close()


@pytest.mark.parametrize("how", ["count", "key", "negative"])
def test_poll_returns_the_records_before_an_undecodable_batch_then_raises(store, how):
    path, victim = craft(store, 3, how)
    with Store.open(store, read_only=True) as s:
        consumer = txlog.Consumer(s, enable_auto_commit=False)
        consumer.assign([TP])
        consumer.seek_to_beginning(TP)
        assert values(consumer.poll(max_records=500)) == list(range(victim.base_offset))
        for _ in range(2):  # and on every later poll, not only the first
            if how == "negative":  # Kafka's InvalidRecordException ("Found invalid record count")
                with pytest.raises(InvalidRecordError, match=f"byte {victim.position}"):
                    consumer.poll(max_records=500)
                continue
            with pytest.raises(CorruptRecordError) as err:
                consumer.poll(max_records=500)
            assert (err.value.path, err.value.position) == (path, victim.position)
        consumer.seek(TP, victim.last_offset + 1)
        assert values(consumer.poll(max_records=500)) == list(range(victim.last_offset + 1, RECORDS))
        consumer.close(autocommit=False)


# ---- the CLI --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["crc", "count", "key"])
def test_txlog_consume_prints_the_records_before_the_damage_then_fails(store, damage, shutdown):
    path, victim = flip_crc(store) if damage == "crc" else craft(store, VICTIM, damage)
    if shutdown == "crashed":
        drop_snapshots(store)
    proc = run_txlog("consume", "-t", "t", "--from-beginning", data_dir=store)
    assert proc.stdout.split() == [f"v{i:03d}" for i in range(victim.base_offset)]
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert path in proc.stderr and f"byte {victim.position}" in proc.stderr, proc.stderr
    assert "Reached end" not in proc.stderr


# ---- views built from the internal topics: group offsets and transaction states --------------------


def internal_segment(store: str, topic: str) -> str:
    d = [n for n in os.listdir(store) if n.startswith(topic + "-")]
    logs = [segment_path(store, topic, int(n.rsplit("-", 1)[1])) for n in d]
    (path,) = [p for p in logs if os.path.exists(p) and os.path.getsize(p) > 0]
    return path


def flip_batch(path: str, index: int):
    batch = batches_of(path)[index]
    with open(path, "r+b") as f:
        at = batch.position + batch.size - 1
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x5A]))
    return batch


def assert_fails_at(proc, path: str, batch) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    assert path in proc.stderr and f"byte {batch.position}" in proc.stderr, proc.stderr


def test_groups_describe_fails_at_damage_in_the_offsets_log(store, shutdown):
    s = Store.open(store)
    consumer = txlog.Consumer(s, group_id="G", enable_auto_commit=False)
    consumer.assign([TP])
    for offset in (10, 20, RECORDS):
        consumer.commit({TP: txlog.OffsetAndMetadata(offset)})
    consumer.close(autocommit=False)
    s.close()
    path = internal_segment(store, "__consumer_offsets")
    victim = flip_batch(path, 1)  # the commit of 20, with the commit of 40 after it
    if shutdown == "crashed":
        for name in os.listdir(os.path.dirname(path)):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(os.path.dirname(path), name))
    proc = run_txlog("groups", "describe", "--group", "G", "--output", "json", data_dir=store)
    assert_fails_at(proc, path, victim)


def test_transactions_list_fails_at_damage_in_the_transaction_log(store, shutdown):
    producer = txlog.Producer(store, transactional_id="T")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"x", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("t", b"y", partition=0)
    producer.flush()  # Ongoing, left open
    path = internal_segment(store, "__transaction_state")
    victim = flip_batch(path, 1)
    if shutdown == "crashed":
        for name in os.listdir(os.path.dirname(path)):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(os.path.dirname(path), name))
    try:
        proc = run_txlog("transactions", "list", "--no-sweep", "--output", "json", data_dir=store)
        assert_fails_at(proc, path, victim)
        proc = run_txlog("transactions", "describe", "--transactional-id", "T", "--no-sweep", data_dir=store)
        assert_fails_at(proc, path, victim)
    finally:
        producer.close()


# ---- a transaction whose end lies in the damage ---------------------------------------------------------


def test_a_transaction_ending_in_the_damage_is_not_reported_open(store):
    """The replay passed over a COMMIT marker: the view cannot tell whether its transaction ended,
    so read_committed readers and transaction views fail at the damage instead of waiting on an
    LSO the damage left behind, or reporting the transaction open."""
    producer = txlog.Producer(store, transactional_id="T")
    producer.init_transactions()
    for value in (b"a", b"b"):
        producer.begin_transaction()
        producer.send("t", value, partition=0)
        producer.commit_transaction()
    producer.close()
    plain = txlog.Producer(store)
    plain.send("t", b"c", partition=0)
    plain.close()
    path = segment_path(store)
    batches = batches_of(path)
    markers = [b for b in batches if b.is_control]
    assert len(markers) == 2
    victim = markers[1]  # the COMMIT of "b", with "c" after it
    with open(path, "r+b") as f:
        at = victim.position + victim.size - 1
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x5A]))
    drop_snapshots(store)
    with Store.open(store, read_only=True) as s:
        log = s.partition("t", 0)
        assert log.log_end_offset == batches[-1].last_offset + 1
        for view in (lambda: log.open_transactions(), lambda: log.last_stable_offset, log.producer_states):
            with pytest.raises(CorruptRecordError) as err:
                view()
            assert (err.value.path, err.value.position) == (path, victim.position)
        consumer = txlog.Consumer(s, enable_auto_commit=False)  # read_committed
        consumer.assign([TP])
        consumer.seek(TP, RECORDS)
        assert [r.value for r in consumer.poll(max_records=500)] == [b"a"]
        with pytest.raises(CorruptRecordError) as err:
            consumer.poll(max_records=500)
        assert (err.value.path, err.value.position) == (path, victim.position)
        consumer.close(autocommit=False)
    proc = run_txlog("transactions", "find-hanging", "--topic", "t", data_dir=store)
    assert "Traceback" not in proc.stderr
