"""A broker's KIP-848 group records replayed from `__consumer_offsets` and described (record types 3..8).

The records are appended as a broker writes them (tests/schemas/test_consumer_group_records.py
builds the bytes); the group must then list as a Consumer group with its state, epochs,
assignor and members, lose a member to its tombstones, vanish with the group's, survive a
state snapshot, and be refused to txlog's own coordinator.
"""

from __future__ import annotations

import pytest

from storage.records import build_batch
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from tests.schemas.test_consumer_group_records import (
    _key,
    current_assignment,
    group_metadata,
    member_metadata,
    target_member,
    target_metadata,
)
from tests.txlog.test_fetch import fast_disk  # noqa: F401  (autouse fixture: no fsync)
from txlog.coordinator.group_coordinator import GroupCoordinator, GroupListing, GroupState, GroupType
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.errors import GroupIdNotFoundError
from txlog.requests import JOIN_EPOCH, HeartbeatRequest

TS = 1_700_000_000_000
TOPIC_ID = bytes(range(16))


def _append(store, groups: GroupOffsets, records: list[tuple[bytes, bytes | None]]) -> None:
    log = store.partition(CONSUMER_OFFSETS_TOPIC, groups.partition_for("g"))
    log.append(build_batch([(k, v, [], TS) for k, v in records]))


def _joined(member: str, epoch: int) -> list[tuple[bytes, bytes | None]]:
    """What a broker writes when `member` joins and reconciles at `epoch` (no topic ids resolve in a txlog store)."""
    return [
        (_key(5, "g", member), member_metadata(client_id=f"client-{member}")),
        (_key(3, "g"), group_metadata(epoch)),
        (_key(7, "g", member), target_member([(TOPIC_ID, [0])])),
        (_key(6, "g"), target_metadata(epoch)),
        (_key(8, "g", member), current_assignment(epoch, 0, [(TOPIC_ID, [0])])),
    ]


def _left(member: str, epoch: int) -> list[tuple[bytes, bytes | None]]:
    """A member's leaving: tombstones of its current assignment, target and metadata, and a new group epoch."""
    return [
        (_key(8, "g", member), None),
        (_key(7, "g", member), None),
        (_key(5, "g", member), None),
        (_key(3, "g"), group_metadata(epoch)),
        (_key(6, "g"), target_metadata(epoch)),
    ]


@pytest.fixture
def groups(store) -> GroupOffsets:
    return GroupOffsets(store, snapshot_every=3)


def test_members_join_leave_and_the_group_is_deleted(store, groups):
    coordinator = GroupCoordinator(store, groups)
    _append(store, groups, _joined("m1", 1) + _joined("m2", 2))
    d = coordinator.describe("g")
    assert d is not None and (d.group_type, d.state, d.group_epoch, d.assignment_epoch, d.assignor) == (
        GroupType.CONSUMER,
        GroupState.RECONCILING,  # m1 is still at epoch 1 of the target's 2
        2,
        2,
        "uniform",
    )
    assert [(m.member_id, m.client_id, m.member_epoch) for m in d.members] == [
        ("m1", "client-m1", 1),
        ("m2", "client-m2", 2),
    ]
    _append(store, groups, _left("m1", 3))
    d = GroupCoordinator(store, GroupOffsets(store)).describe("g")  # a fresh process: replay (and snapshot) agree
    assert d is not None and [m.member_id for m in d.members] == ["m2"]
    assert d.state is GroupState.RECONCILING  # m2 at epoch 2, target at 3
    _append(store, groups, [(_key(8, "g", "m2"), current_assignment(3, 0, [(TOPIC_ID, [0])]))])
    assert coordinator.list_group_listings()["g"] == GroupListing(GroupState.STABLE, GroupType.CONSUMER)
    _append(store, groups, _left("m2", 4))
    assert coordinator.list_group_listings()["g"] == GroupListing(GroupState.EMPTY, GroupType.CONSUMER)
    _append(store, groups, [(_key(6, "g"), None), (_key(3, "g"), None)])  # the group is deleted
    assert coordinator.describe("g") is None and "g" not in coordinator.list_groups()


def test_txlog_refuses_to_run_a_group_a_broker_stores_in_kip848_records(store, groups):
    _append(store, groups, _joined("m1", 1))
    coordinator = GroupCoordinator(store, groups)
    request = HeartbeatRequest("g", "txlog-member", JOIN_EPOCH, topics=("orders",))
    with pytest.raises(GroupIdNotFoundError, match="not a classic group"):
        coordinator.heartbeat(request)
    with pytest.raises(GroupIdNotFoundError, match="not a classic group"):
        coordinator.commit_offsets("g", {}, None)
    assert groups.group_metadata("g") is None  # nothing was written
