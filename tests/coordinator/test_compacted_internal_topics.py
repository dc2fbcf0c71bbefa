"""The internal topics are compacted as Kafka's are, and the coordinators' replayed state stays right
across cleaning (issue 25; docs/DESIGN.md §7, "Coordinator state and compaction").

A snapshot (or a process's in-memory state) covering offsets below N, extended with the log from N
on, is only the right state if nothing from N on has been dropped that the state still holds: a
tombstone cleaned away after delete.retention.ms would bring the deleted key back. These tests
make exactly that happen with the real cleaner (`Store.compact`) and check the key stays deleted.
"""

from __future__ import annotations

import os
import shutil

import pytest

from storage import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.txlog.test_fetch import fast_disk  # noqa: F401  (autouse fixture: no fsync)
from txlog.clients.producer import Producer
from txlog.coordinator.group_offsets import SNAPSHOT_NAME, GroupOffsets
from txlog.coordinator.internal_topics import INTERNAL_CONFIG
from txlog.schemas.offset_log import OffsetKey, decode_key
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

IN0, IN1, FILLER = TopicPartition("in", 0), TopicPartition("in", 1), TopicPartition("filler", 0)
OLD_INTERNAL_CONFIG = {"segment.bytes": 104857600, "retention.ms": -1, "retention.bytes": -1}  # before issue 25


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


def test_both_internal_topics_are_created_with_kafkas_compact_policy(store_path):
    with Store.open(store_path) as store:
        store.create_topic("out", 1)
        producer = Producer(store, transactional_id="app")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", value=b"v", partition=0)
        producer.send_offsets_to_transaction({IN0: 1}, "g")
        producer.commit_transaction()
        producer.close()
        for topic in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            assert store.topic_overrides(topic) == {
                "cleanup.policy": "compact",
                "segment.bytes": 104857600,  # offsets.topic.segment.bytes, transaction.state.log.segment.bytes
                "retention.ms": -1,
                "retention.bytes": -1,
            }
            assert store.topic_config(topic).compact and not store.topic_config(topic).delete
    assert INTERNAL_CONFIG["cleanup.policy"] == "compact"


def test_internal_topics_of_an_older_store_get_the_policy_but_a_users_policy_stays(store_path):
    with Store.open(store_path) as store:  # as a txlog from before compaction made them
        store.create_topic(CONSUMER_OFFSETS_TOPIC, 8, OLD_INTERNAL_CONFIG, internal=True)
        store.create_topic(
            TRANSACTION_STATE_TOPIC, 8, {**OLD_INTERNAL_CONFIG, "cleanup.policy": "delete"}, internal=True
        )
    with Store.open(store_path, read_only=True) as store:
        GroupOffsets(store).list_groups()  # a read-only open changes nothing
        assert "cleanup.policy" not in store.topic_overrides(CONSUMER_OFFSETS_TOPIC)
    with Store.open(store_path) as store:
        GroupOffsets(store).commit("g", {IN0: 3})
        producer = Producer(store, transactional_id="app")
        producer.init_transactions()
        producer.close()
        assert store.topic_overrides(CONSUMER_OFFSETS_TOPIC) == {**OLD_INTERNAL_CONFIG, "cleanup.policy": "compact"}
        assert store.topic_overrides(TRANSACTION_STATE_TOPIC)["cleanup.policy"] == "delete"  # set by a user: kept


# ---- snapshots and in-memory state across cleaning ----------------------------------------------------------


def _offsets_log(store: Store, groups: GroupOffsets):
    return store.partition(CONSUMER_OFFSETS_TOPIC, groups.partition_for("g"))


def _keys_in_log(log) -> list[OffsetKey]:
    """Every offset-commit key physically left in the partition (tombstones included)."""
    found = []
    for batch in log.read(log.log_start_offset, 1 << 24):
        if batch.is_control:
            continue
        for record in batch.records():
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                found.append(key)
    return found


def _clean_twice(store: Store, groups: GroupOffsets) -> None:
    """Two cleanings, each after new data and a roll (the roll may clean by itself; `compact` cleans what
    is left): the first keeps the tombstone and stamps its delete horizon (now + delete.retention.ms =
    now), the second, past it, drops it. Then the tombstone is checked to be gone."""
    log = _offsets_log(store, groups)
    for round_ in range(2):
        groups.commit("g", {FILLER: round_})  # the same partition, another key
        log.roll()
        store.compact(CONSUMER_OFFSETS_TOPIC, log.partition)
    left = [k for k in _keys_in_log(log) if k.group == "g" and TopicPartition(k.topic, k.partition) == IN0]
    assert left == [], "the tombstone should be gone: the test would prove nothing"


def _compacted_offsets_topic(store: Store) -> GroupOffsets:
    groups = GroupOffsets(store, snapshot_every=1)
    groups.commit("g", {IN0: 5, IN1: 7})
    store.alter_topic_config(CONSUMER_OFFSETS_TOPIC, {"delete.retention.ms": 0})
    assert groups.committed("g") == {IN0: OffsetAndMetadata(5), IN1: OffsetAndMetadata(7)}  # replayed: a snapshot
    return groups


def test_a_deleted_offset_stays_deleted_when_its_tombstone_is_cleaned_away_after_the_snapshot(store_path):
    with Store.open(store_path) as store:
        groups = _compacted_offsets_topic(store)
        snapshot = os.path.join(_offsets_log(store, groups).directory, SNAPSHOT_NAME + ".json")
        assert os.path.exists(snapshot)
        shutil.copy(snapshot, snapshot + ".saved")  # the snapshot as it was before the deletion
        groups.delete_offsets("g", [IN0])
        assert groups.committed("g") == {IN1: OffsetAndMetadata(7)}
    with Store.open(store_path) as store:
        _clean_twice(store, GroupOffsets(store, snapshot_every=10**9))
    os.replace(snapshot + ".saved", snapshot)  # a snapshot taken at N < the tombstone's offset
    with Store.open(store_path) as store:
        assert GroupOffsets(store).committed("g", [IN0, IN1]) == {IN1: OffsetAndMetadata(7)}
    with Store.open(store_path, read_only=True) as store:
        assert GroupOffsets(store).committed("g", [IN0, IN1]) == {IN1: OffsetAndMetadata(7)}


def test_a_process_that_had_not_caught_up_does_not_bring_a_cleaned_tombstones_key_back(store_path):
    with Store.open(store_path) as store:
        stale = _compacted_offsets_topic(store)  # replayed to N
        with Store.open(store_path) as other:  # another process deletes, then the cleaner runs twice
            groups = GroupOffsets(other, snapshot_every=10**9)
            groups.delete_offsets("g", [IN0])
            _clean_twice(other, groups)
        assert stale.committed("g", [IN0, IN1]) == {IN1: OffsetAndMetadata(7)}


def test_a_snapshot_the_cleaner_has_not_passed_is_still_used(store_path, monkeypatch):
    """The rule costs nothing while the cleaner stays below the snapshot: it is loaded, not replayed."""
    from txlog.coordinator.group_offsets import _PartitionState

    with Store.open(store_path) as store:
        groups = _compacted_offsets_topic(store)
        for i in range(20):
            groups.commit("g", {IN1: 100 + i})
        groups.committed("g")  # replayed to the end: the snapshot covers it all
        end = _offsets_log(store, groups).log_end_offset
    applied: list[int] = []
    real = _PartitionState.apply
    monkeypatch.setattr(
        _PartitionState, "apply", lambda self, batch: (applied.append(batch.base_offset), real(self, batch))[1]
    )
    with Store.open(store_path) as store:
        assert GroupOffsets(store).committed("g") == {IN0: OffsetAndMetadata(5), IN1: OffsetAndMetadata(119)}
        assert applied == [] or min(applied) >= end - 1
