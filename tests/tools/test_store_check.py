"""The store check as a library (txlog.tools.store_check over storage.file_check): typed findings, no CLI."""

from __future__ import annotations

import os
from pathlib import Path

import txlog
from storage.file_check import Finding, Location, Severity
from storage.log_files import INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX, segment_file
from storage.topic_name import TRANSACTION_STATE_TOPIC
from txlog.tools.store_check import check_store

TP = txlog.TopicPartition


def _fill(store, *, abort: bool = False, leave_open: str | None = None) -> None:
    """Two committed records; with `abort` an aborted transaction; with `leave_open` an open one."""
    store.create_topic("t", 1)
    p = txlog.Producer(store)
    for value in (b"a", b"b"):
        p.send("t", value=value, partition=0)
        p.flush()  # a batch each
    p.close()
    if abort:
        q = txlog.Producer(store, transactional_id="aborter")
        q.init_transactions()
        q.begin_transaction()
        q.send("t", value=b"x", partition=0)
        q.flush()
        q.abort_transaction()
        q.close()
    if leave_open is not None:
        q = txlog.Producer(store, transactional_id=leave_open, transaction_timeout_ms=100)
        q.init_transactions()
        q.begin_transaction()
        q.send("t", value=b"open", partition=0)
        q.flush()  # the process "dies" here: the transaction stays Ongoing


def _check(store, **kwargs):
    report = check_store(store, **kwargs)
    assert all(isinstance(f, Finding) for f in report.findings)
    return report


def test_a_healthy_store_has_no_findings(store):
    _fill(store, abort=True)
    report = _check(store)
    assert report.findings == []
    assert report.partitions >= 1 and report.batches >= 4  # 2 data batches + aborted data + ABORT marker


def test_a_flipped_byte_in_a_sealed_position_is_an_error_at_its_offset(store):
    _fill(store)
    path = segment_file(store.partition_dir("t", 0), 0, LOG_FILE_SUFFIX)
    data = bytearray(Path(path).read_bytes())
    data[62] ^= 0xFF  # inside the first batch's records: its CRC no longer matches, valid batches follow
    with open(path, "wb") as f:
        f.write(data)
    report = _check(store, topic="t")
    crc = [f for f in report.findings if "invalid CRC" in f.message]
    assert len(crc) == 1
    assert crc[0].severity is Severity.ERROR
    assert crc[0].location == Location("t", 0, os.path.basename(path), 0)
    assert "valid batches follow it" in crc[0].message


def test_garbage_after_the_last_batch_of_the_active_segment_is_a_torn_tail_warning(store):
    _fill(store)
    path = segment_file(store.partition_dir("t", 0), 0, LOG_FILE_SUFFIX)
    with open(path, "ab") as f:
        f.write(b"\x00" * 20)
    report = _check(store, topic="t")
    assert [f.severity for f in report.findings] == [Severity.WARNING]
    assert "unflushed/torn tail" in report.findings[0].message


def test_a_missing_txnindex_entry_is_exposed_aborted_data(store):
    _fill(store, abort=True)
    store.close()
    path = segment_file(os.path.join(store.root, "t-0"), 0, TXN_INDEX_FILE_SUFFIX)
    os.remove(path)
    with txlog.Admin(store.root, read_only=True) as admin:
        report = _check(admin.store, topic="t")
    missing = [f for f in report.findings if "has no .txnindex entry" in f.message]
    assert len(missing) == 1 and missing[0].severity is Severity.ERROR
    assert missing[0].location.file == os.path.basename(path)
    assert "read_committed readers would see the aborted data" in missing[0].message


def test_an_index_of_the_wrong_length_fails_the_brokers_sanity_check(store):
    _fill(store)
    path = segment_file(store.partition_dir("t", 0), 0, INDEX_FILE_SUFFIX)
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    report = _check(store, topic="t")
    sanity = [f for f in report.findings if "sanity check" in f.message]
    assert len(sanity) == 1 and sanity[0].location.file == os.path.basename(path)
    assert "found 3 bytes which is neither positive nor a multiple of 8" in sanity[0].message


def test_an_open_transaction_past_its_timeout_is_expired_once_per_partition(store):
    _fill(store, leave_open="slow")
    store_path = store.root
    with txlog.Admin(store_path, read_only=True) as admin:
        later = admin.describe_transaction("slow").state.start_ms + 10_000
        report = _check(admin.store, now=later)
    expired = [f for f in report.findings if f.message.startswith("expired:")]
    assert len(expired) == 1  # the partition reports it; the coordinator does not repeat it
    assert expired[0].location.topic == "t" and expired[0].location.partition == 0
    assert "past its timeout of 100 ms" in expired[0].message


def test_an_open_transaction_no_coordinator_owns_is_hanging(store):
    _fill(store, leave_open="ghost")
    root = store.root
    store.close()
    # A coordinator that never heard of the transaction: its log is gone (a copied partition, say).
    import shutil

    for name in os.listdir(root):
        if name.startswith(TRANSACTION_STATE_TOPIC):
            shutil.rmtree(os.path.join(root, name))
            os.makedirs(os.path.join(root, name))
    with txlog.Admin(root, read_only=True) as admin:
        report = _check(admin.store, topic="t")
    hanging = [f for f in report.findings if f.message.startswith("hanging:")]
    assert len(hanging) == 1 and hanging[0].severity is Severity.ERROR
    assert hanging[0].location.topic == "t"


def _prepared_two_phase_commit(store) -> None:
    """A KIP-939 transaction written and prepared by an instance that went away without ending it."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, transactional_id="xa", transaction_two_phase_commit_enable=True)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"in doubt", partition=0)
    p.prepare_transaction()
    p.close()


def test_a_two_phase_commit_transaction_is_a_warning_only_past_the_longest_timeout(store):
    _prepared_two_phase_commit(store)
    start = txlog.Admin(store.root, read_only=True).describe_transaction("xa").state.start_ms
    with txlog.Admin(store.root, read_only=True) as admin:
        soon = _check(admin.store, now=start + 899_000)
        late = _check(admin.store, now=start + 901_000)
    assert soon.findings == []  # waiting for its transaction manager is what such a transaction does
    (warning,) = late.findings  # never "expired": Kafka does not time it out
    assert warning.severity is Severity.WARNING
    assert warning.location.topic == TRANSACTION_STATE_TOPIC
    assert "'xa'" in warning.message and "two-phase-commit" in warning.message
    assert "txlog commit|abort --transactional-id xa" in warning.message
