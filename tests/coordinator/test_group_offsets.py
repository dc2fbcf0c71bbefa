"""Groups' committed offsets over __consumer_offsets.

docs/DESIGN.md §7; docs/reliability-scenarios.md scenarios 10, 11, 18.

Transactional offset commits are written here as the Producer will write them: the
(key, value) pairs of `encode_commit` in a transactional batch of the producer on the
group's partition, resolved by a COMMIT/ABORT marker on that partition.
"""

from __future__ import annotations

import os
import struct

import pytest

from storage import Store
from storage.records import ControlType, TimestampType, build_batch
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from tests.txlog.test_fetch import fast_disk  # noqa: F401  (autouse fixture: no fsync)
from txlog.coordinator.group_offsets import SNAPSHOT_NAME, GroupOffsets, OffsetMetadataTooLargeError, _PartitionState
from txlog.coordinator.internal_topics import owner_partition
from txlog.errors import GroupIdNotFoundError, InvalidGroupIdError, UnstableOffsetCommitError
from txlog.fetch import IllegalArgumentError
from txlog.schemas.offset_log import OffsetKey, OffsetValue, decode_key, decode_offset_value
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

IN0, IN1 = TopicPartition("in", 0), TopicPartition("in", 1)
TS = 1_700_000_000_000


class TxnOffsets:
    """Writes transactional offset commits of one producer into a group's partition (what the Producer does)."""

    def __init__(self, store: Store, groups: GroupOffsets, group: str, pid: int):
        self.groups, self.group, self.pid = groups, group, pid
        self.log = store.partition(CONSUMER_OFFSETS_TOPIC, groups.partition_for(group))
        self.epoch, self.seq = 0, 0

    def send(self, offsets: dict[TopicPartition, int]) -> None:
        records = [
            (*self.groups.encode_commit(self.group, tp, OffsetAndMetadata(o), TS), [], TS) for tp, o in offsets.items()
        ]
        self.log.append(
            build_batch(
                records, producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq, is_transactional=True
            )
        )
        self.seq += len(records)

    def end(self, control: ControlType) -> None:
        self.log.append_marker(control, self.pid, self.epoch + 1)
        self.epoch, self.seq = self.epoch + 1, 0


@pytest.fixture
def groups(store) -> GroupOffsets:
    return GroupOffsets(store, clock=lambda: TS)


def offsets_log(store, groups, group="g"):
    return store.partition(CONSUMER_OFFSETS_TOPIC, groups.partition_for(group))


# ---- plain commits ---------------------------------------------------------------------------------


def test_plain_commit_is_visible_at_once(groups):
    assert groups.committed("g") == {}
    groups.commit("g", {IN0: 10, IN1: OffsetAndMetadata(4, "meta", 3)})
    assert groups.committed("g") == {IN0: OffsetAndMetadata(10), IN1: OffsetAndMetadata(4, "meta", 3)}
    assert groups.committed("g", [IN1, TopicPartition("other", 0)]) == {IN1: OffsetAndMetadata(4, "meta", 3)}
    groups.commit("g", {IN0: 12})
    assert groups.committed("g", [IN0]) == {IN0: OffsetAndMetadata(12)}
    assert groups.committed("other-group") == {}
    assert groups.describe("g")[IN0].commit_timestamp == TS


def test_plain_commit_writes_what_kafka_writes(store, groups):
    groups.commit("g", {IN0: 7})
    log = offsets_log(store, groups)
    (batch,) = log.read(0)
    assert batch.producer_id == -1 and not batch.is_transactional
    assert batch.timestamp_type == TimestampType.CREATE_TIME and batch.compression == 0
    (record,) = batch.records()
    assert record.key[:2] == struct.pack(">h", 1) and record.value[:2] == struct.pack(">h", 3)
    assert decode_key(record.key) == OffsetKey("g", "in", 0)
    assert decode_offset_value(record.value) == OffsetValue(7, "", TS, -1)
    assert record.timestamp == TS


def test_invalid_input_writes_nothing(store, groups):
    groups.commit("g", {IN0: 1})
    log = offsets_log(store, groups)
    end = log.log_end_offset
    with pytest.raises(InvalidGroupIdError):
        groups.commit("", {IN0: 1})
    with pytest.raises(IllegalArgumentError):
        groups.commit("g", {IN1: 5, IN0: -1})
    with pytest.raises(IllegalArgumentError):
        groups.commit("g", {TopicPartition("in", -2): 5})
    with pytest.raises(IllegalArgumentError):
        groups.commit("g", {IN0: "5"})
    with pytest.raises(OffsetMetadataTooLargeError):
        groups.commit("g", {IN0: OffsetAndMetadata(5, "x" * 5000)})
    assert log.log_end_offset == end
    assert groups.committed("g") == {IN0: OffsetAndMetadata(1)}


def test_delete_offsets_writes_tombstones(store, groups):
    groups.commit("g", {IN0: 1, IN1: 2})
    groups.delete_offsets("g", [IN0, TopicPartition("never", 0)])
    assert groups.committed("g") == {IN1: OffsetAndMetadata(2)}
    records = [r for b in offsets_log(store, groups).read(0) for r in b.records()]
    assert records[-1].value is None and decode_key(records[-1].key) == OffsetKey("g", "in", 0)
    assert groups.list_groups() == ["g"]
    groups.delete_offsets("g", [IN1])
    assert groups.list_groups() == []
    with pytest.raises(GroupIdNotFoundError):
        groups.delete_offsets("g", [IN1])


def test_list_groups_spans_partitions(groups):
    names = [f"group-{i}" for i in range(12)]
    for n in names:
        groups.commit(n, {IN0: 1})
    assert len({groups.partition_for(n) for n in names}) > 1
    assert groups.list_groups() == sorted(names)


def test_group_and_other_records_in_the_topic_are_ignored(store, groups):
    groups.commit("g", {IN0: 3})
    log = offsets_log(store, groups)
    group_metadata_key = struct.pack(">h", 2) + struct.pack(">h", 1) + b"g"
    consumer_group_key = struct.pack(">h", 5) + b"\x00\x01g" + b"\x00\x01m"  # KIP-848 member metadata
    share_group_key = struct.pack(">h", 10) + b"\x00\x01g"  # a newer kind txlog does not describe
    log.append(
        build_batch(
            [
                (group_metadata_key, b"\x00\x03whatever", [], TS),
                (consumer_group_key, b"opaque", [], TS),  # values are decoded when described, not replayed
                (share_group_key, b"opaque", [], TS),
            ]
        )
    )
    assert groups.committed("g") == {IN0: OffsetAndMetadata(3)}
    assert GroupOffsets(store).committed("g") == {IN0: OffsetAndMetadata(3)}


# ---- transactional commits (docs/reliability-scenarios.md scenarios 10, 11, 18) -------------------------


def test_transactional_commit_is_pending_until_its_commit_marker(store, groups):
    groups.commit("g", {IN0: 5})
    txn = TxnOffsets(store, groups, "g", pid=42)
    txn.send({IN0: 10})
    assert groups.committed("g") == {IN0: OffsetAndMetadata(5)}
    assert groups.pending("g") == {IN0: (42, OffsetAndMetadata(10))}
    with pytest.raises(UnstableOffsetCommitError) as err:
        groups.committed("g", [IN0], require_stable=True)
    assert err.value.retriable and err.value.code == 88
    with pytest.raises(UnstableOffsetCommitError):
        groups.committed("g", require_stable=True)  # all partitions of the group
    assert groups.committed("g", [IN1], require_stable=True) == {}  # other partitions stay readable
    txn.end(ControlType.COMMIT)
    assert groups.committed("g", [IN0], require_stable=True) == {IN0: OffsetAndMetadata(10)}
    assert groups.pending("g") == {}


def test_transactional_commit_is_dropped_on_abort(store, groups):
    groups.commit("g", {IN0: 5})
    txn = TxnOffsets(store, groups, "g", pid=42)
    txn.send({IN0: 10, IN1: 3})
    txn.end(ControlType.ABORT)
    assert groups.committed("g", require_stable=True) == {IN0: OffsetAndMetadata(5)}
    assert groups.pending("g") == {}
    txn.send({IN0: 11})  # the producer's next transaction commits
    txn.end(ControlType.COMMIT)
    assert groups.committed("g", require_stable=True) == {IN0: OffsetAndMetadata(11)}


def test_a_group_only_in_an_open_transaction_is_listed(store, groups):
    TxnOffsets(store, groups, "txn-only", pid=3).send({IN0: 1})
    assert groups.list_groups() == ["txn-only"]
    assert groups.committed("txn-only") == {}


def test_plain_commit_after_the_transactional_write_wins(store, groups):
    """Kafka's olderThan rule: the commit appended later stays, whichever commits last."""
    txn = TxnOffsets(store, groups, "g", pid=42)
    txn.send({IN0: 10, IN1: 10})
    groups.commit("g", {IN0: 20})
    txn.end(ControlType.COMMIT)
    assert groups.committed("g") == {IN0: OffsetAndMetadata(20), IN1: OffsetAndMetadata(10)}
    assert GroupOffsets(store).committed("g") == {IN0: OffsetAndMetadata(20), IN1: OffsetAndMetadata(10)}


def test_two_producers_pending_on_one_group(store, groups):
    a = TxnOffsets(store, groups, "g", pid=1)
    b = TxnOffsets(store, groups, "g", pid=2)
    a.send({IN0: 4})
    b.send({IN1: 6})
    a.end(ControlType.ABORT)
    with pytest.raises(UnstableOffsetCommitError):
        groups.committed("g", [IN1], require_stable=True)
    assert groups.committed("g", [IN0], require_stable=True) == {}
    b.end(ControlType.COMMIT)
    assert groups.committed("g", require_stable=True) == {IN1: OffsetAndMetadata(6)}


# ---- processes and snapshots -----------------------------------------------------------------------


def test_two_store_objects_see_each_others_commits(store_path):
    with Store.open(store_path) as s1, Store.open(store_path) as s2:
        g1, g2 = GroupOffsets(s1), GroupOffsets(s2)
        g1.commit("g", {IN0: 1})
        assert g2.committed("g") == {IN0: OffsetAndMetadata(1)}
        g2.commit("g", {IN0: 2, IN1: 1})
        assert g1.committed("g") == {IN0: OffsetAndMetadata(2), IN1: OffsetAndMetadata(1)}
        TxnOffsets(s2, g2, "g", pid=9).send({IN0: 3})
        with pytest.raises(UnstableOffsetCommitError):
            g1.committed("g", require_stable=True)


def _build_history(store: Store, groups: GroupOffsets) -> TxnOffsets:
    """Plain commits of several groups, an aborted and a committed txn, and a txn left open."""
    for i in range(30):
        groups.commit("g", {IN0: i, TopicPartition("t", i % 3): i * 2})
        groups.commit(f"h{i % 4}", {IN1: i})
    done = TxnOffsets(store, groups, "g", pid=7)
    done.send({IN1: 100})
    done.end(ControlType.ABORT)
    done.send({IN1: 101})
    done.end(ControlType.COMMIT)
    groups.delete_offsets("g", [TopicPartition("t", 2)])
    still_open = TxnOffsets(store, groups, "g", pid=8)
    still_open.send({IN0: 500})
    return still_open


def _everything(groups: GroupOffsets) -> dict:
    return {g: (groups.describe(g), groups.pending(g)) for g in groups.list_groups()}


def _count_applies(monkeypatch) -> list[int]:
    applied = []
    real = _PartitionState.apply

    def spy(self, batch):
        applied.append(batch.base_offset)
        return real(self, batch)

    monkeypatch.setattr(_PartitionState, "apply", spy)
    return applied


def test_snapshot_and_reopen_give_the_same_state(store_path, monkeypatch):
    with Store.open(store_path) as s:
        groups = GroupOffsets(s, snapshot_every=10)
        still_open = _build_history(s, groups)
        before = _everything(groups)
        part = groups.partition_for("g")
        snapshot = os.path.join(s.root, f"{CONSUMER_OFFSETS_TOPIC}-{part}", SNAPSHOT_NAME + ".json")
        assert os.path.exists(snapshot)
        total = offsets_log(s, groups).log_end_offset
    applied = _count_applies(monkeypatch)
    with Store.open(store_path) as s:
        groups = GroupOffsets(s)
        assert _everything(groups) == before
        assert 0 < len([o for o in applied if o < total]) < total // 2  # replay started at the snapshot
        still_open.log = offsets_log(s, groups)
        still_open.end(ControlType.COMMIT)  # pending state survived the snapshot
        assert groups.committed("g", [IN0], require_stable=True) == {IN0: OffsetAndMetadata(500)}


def test_corrupted_snapshot_is_ignored(store_path, monkeypatch):
    with Store.open(store_path) as s:
        groups = GroupOffsets(s, snapshot_every=10)
        _build_history(s, groups)
        before = _everything(groups)
        part = groups.partition_for("g")
    snapshot = os.path.join(store_path, f"{CONSUMER_OFFSETS_TOPIC}-{part}", SNAPSHOT_NAME + ".json")
    with open(snapshot, "r+b") as f:
        data = bytearray(f.read())
        at = data.index(b'"g"')
        data[at + 1 : at + 2] = b"x"  # still valid JSON, wrong content: the CRC must catch it
        f.seek(0)
        f.write(data)
    applied = _count_applies(monkeypatch)
    with Store.open(store_path, read_only=True) as s:
        assert _everything(GroupOffsets(s)) == before
        assert min(applied) == 0  # replayed from the log start
    with open(snapshot, "wb") as f:
        f.write(b"{not json")
    with Store.open(store_path) as s:
        assert _everything(GroupOffsets(s)) == before


def test_read_only_store(store_path):
    with Store.open(store_path) as s:
        s.create_topic("in", 2)
    with Store.open(store_path, read_only=True) as ro:
        groups = GroupOffsets(ro)
        assert groups.committed("g") == {} and groups.list_groups() == []
        assert not ro.has_topic(CONSUMER_OFFSETS_TOPIC)
    with Store.open(store_path) as s:
        GroupOffsets(s).commit("g", {IN0: 4})
    with Store.open(store_path, read_only=True) as ro:
        assert GroupOffsets(ro).committed("g") == {IN0: OffsetAndMetadata(4)}


def test_partition_for_creates_the_topic_and_uses_kafkas_hash(groups, store):
    assert not store.has_topic(CONSUMER_OFFSETS_TOPIC)
    p = groups.partition_for("group-1")
    count = store.partition_count(CONSUMER_OFFSETS_TOPIC)
    assert p == owner_partition("group-1", count)
    with pytest.raises(InvalidGroupIdError):
        groups.partition_for("")
