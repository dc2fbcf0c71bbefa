"""Admin.plan_offset_reset: kafka-consumer-groups --reset-offsets planning as a library call."""

from __future__ import annotations

import pytest

import txlog
from txlog.admin import OffsetReset
from txlog.errors import GroupNotEmptyError, NoOffsetForPartitionError

TP = txlog.TopicPartition


@pytest.fixture
def admin(store):
    """Topic t: partition 0 holds 5 committed records then an open transaction (LSO 5, log end 6);
    partition 1 is empty. Group g committed offset 2 on t-0."""
    store.create_topic("t", 2)
    p = txlog.Producer(store)
    for i in range(5):
        p.send("t", value=b"%d" % i, partition=0)
    p.close()
    q = txlog.Producer(store, transactional_id="open")
    q.init_transactions()
    q.begin_transaction()
    q.send("t", value=b"pending", partition=0)
    q.flush()
    a = txlog.Admin(store)
    a.alter_consumer_group_offsets("g", {TP("t", 0): 2})
    return a


def test_each_scope_lands_inside_the_readable_range(admin):
    t0, t1 = TP("t", 0), TP("t", 1)
    assert admin.plan_offset_reset("g", [t0, t1], OffsetReset.to_earliest()) == {t0: 0, t1: 0}
    assert admin.plan_offset_reset("g", [t0, t1], OffsetReset.to_latest()) == {t0: 5, t1: 0}  # the LSO, not 6
    assert admin.plan_offset_reset("g", [t0], OffsetReset.to_offset(3)) == {t0: 3}
    assert admin.plan_offset_reset("g", [t0], OffsetReset.to_offset(99)) == {t0: 5}  # clamped
    assert admin.plan_offset_reset("g", [t0], OffsetReset.shift_by(-1)) == {t0: 1}
    assert admin.plan_offset_reset("g", [t0], OffsetReset.shift_by(-10)) == {t0: 0}  # clamped at the start


def test_planning_writes_nothing(admin):
    before = admin.list_consumer_group_offsets("g")
    admin.plan_offset_reset("g", [TP("t", 0)], OffsetReset.to_latest())
    assert admin.list_consumer_group_offsets("g") == before


def test_a_plan_is_what_alter_writes(admin):
    plan = admin.plan_offset_reset("g", [TP("t", 0)], OffsetReset.shift_by(2))
    admin.alter_consumer_group_offsets("g", plan)
    assert admin.list_consumer_group_offsets("g")[TP("t", 0)].offset == 4


def test_shifting_needs_a_committed_offset(admin):
    with pytest.raises(NoOffsetForPartitionError, match="no committed offset for t-1"):
        admin.plan_offset_reset("g", [TP("t", 1)], OffsetReset.shift_by(1))


def test_a_group_with_live_members_is_refused(admin):
    c = txlog.Consumer(admin.store, group_id="live", enable_auto_commit=False)
    c.subscribe(["t"])
    c.poll(timeout_ms=0)
    try:
        with pytest.raises(GroupNotEmptyError, match=r"inactive.*Stable|inactive.*Reconciling"):
            admin.plan_offset_reset("live", [TP("t", 0)], OffsetReset.to_earliest())
    finally:
        c.close()
