"""Admin.plan_offset_reset: kafka-consumer-groups --reset-offsets planning as a library call."""

from __future__ import annotations

import pytest

import txlog
from txlog.clients.admin import OffsetReset
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


# ---- by time, to current, from a plan (kafka-consumer-groups --to-datetime, --by-duration, --to-current,
# ---- --from-file)


@pytest.fixture
def timed(store):
    """t-0: records stamped 1000, 2000, ... 5000 at offsets 0-4, then an open transaction (LSO 5);
    t-1 empty. Group g committed 1 on t-0. The Admin's clock reads 6000."""
    store.create_topic("t", 2)
    with txlog.Producer(store) as p:
        for i in range(5):
            p.send("t", value=b"%d" % i, partition=0, timestamp_ms=(i + 1) * 1000)
    q = txlog.Producer(store, transactional_id="open")
    q.init_transactions()
    q.begin_transaction()
    q.send("t", value=b"pending", partition=0, timestamp_ms=5500)
    q.flush()
    a = txlog.Admin(store, clock=lambda: 6000)
    a.alter_consumer_group_offsets("g", {TP("t", 0): 1})
    return a


def test_to_datetime_takes_the_first_record_at_or_after_the_time(timed):
    t0, t1 = TP("t", 0), TP("t", 1)
    assert timed.plan_offset_reset("g", [t0], OffsetReset.to_datetime(0)) == {t0: 0}
    assert timed.plan_offset_reset("g", [t0], OffsetReset.to_datetime(2000)) == {t0: 1}  # at: included
    assert timed.plan_offset_reset("g", [t0], OffsetReset.to_datetime(2500)) == {t0: 2}
    # nothing that recent below the LSO (the pending record at 5500 is not readable): the end, as Kafka
    assert timed.plan_offset_reset("g", [t0, t1], OffsetReset.to_datetime(5200)) == {t0: 5, t1: 0}


def test_by_duration_looks_back_from_the_admins_clock(timed):
    t0 = TP("t", 0)
    assert timed.plan_offset_reset("g", [t0], OffsetReset.by_duration(3500)) == {t0: 2}  # 6000 - 3500 = 2500
    assert timed.plan_offset_reset("g", [t0], OffsetReset.by_duration(60_000)) == {t0: 0}
    assert timed.plan_offset_reset("g", [t0], OffsetReset.by_duration(0)) == {t0: 5}


def test_to_current_keeps_the_committed_offset_and_takes_the_end_without_one(timed):
    t0, t1 = TP("t", 0), TP("t", 1)
    assert timed.plan_offset_reset("g", [t0, t1], OffsetReset.to_current()) == {t0: 1, t1: 0}


def test_from_offsets_plans_each_partition_to_its_own_offset_clamped(timed):
    t0, t1 = TP("t", 0), TP("t", 1)
    reset = OffsetReset.from_offsets({t1: 0, t0: 3})
    assert reset.partitions == [t0, t1]
    assert timed.plan_offset_reset("g", reset.partitions, reset) == {t0: 3, t1: 0}
    reset = OffsetReset.from_offsets({t0: 99})
    assert timed.plan_offset_reset("g", reset.partitions, reset) == {t0: 5}  # clamped to the LSO


def test_from_offsets_refuses_a_partition_it_does_not_name(timed):
    from txlog.errors import IllegalArgumentError

    reset = OffsetReset.from_offsets({TP("t", 0): 3})
    with pytest.raises(IllegalArgumentError, match="no offset for t-1"):
        timed.plan_offset_reset("g", [TP("t", 1)], reset)
