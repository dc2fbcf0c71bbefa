"""Consumer groups: membership, assignment, rebalancing, static members and commit fencing.

In-process tests through the public Consumer / Producer / Admin API (several consumers
of one group in one process behave as several processes do: each has its own session
lock and member id), plus one real process killed with SIGKILL to show that a dead
member is noticed at once, not after its session timeout. The multi-process chaos runs
are in tests/crash/test_group_workers.py.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time

import pytest

import txlog
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from txlog import TopicPartition as TP
from txlog.coordinator.assignors import MemberSpec, range_, uniform
from txlog.coordinator.internal_topics import owner_partition
from txlog.errors import (
    FencedInstanceIdError,
    GroupNotEmptyError,
    IllegalStateError,
    StaleMemberEpochError,
    TransactionAbortableError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)
from txlog.schemas.group_metadata import (
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_group_metadata_value,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

FAST = dict(heartbeat_interval_ms=50, session_timeout_ms=1500)


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "store")
    with txlog.Admin(p) as admin:
        admin.create_topic("in", 4)
        admin.create_topic("other", 2)
        producer = txlog.Producer(admin.store)
        for i in range(40):
            producer.send("in", value=b"%d" % i, partition=i % 4)
        producer.flush()
        producer.close()
    return p


class Recorder:
    """A rebalance listener that keeps every call, in order."""

    def __init__(self):
        self.calls: list[tuple[str, list[TP]]] = []

    def on_partitions_revoked(self, partitions):
        self.calls.append(("revoked", sorted(partitions)))

    def on_partitions_assigned(self, partitions):
        self.calls.append(("assigned", sorted(partitions)))

    def on_partitions_lost(self, partitions):
        self.calls.append(("lost", sorted(partitions)))


def member(path, listener=None, topics=("in",), **config):
    c = txlog.Consumer(path, group_id="g", enable_auto_commit=False, **{**FAST, **config})
    c.subscribe(list(topics), listener=listener)
    return c


def settle(*consumers, rounds=60):
    """Poll every consumer until the group is stable (every partition owned once, epochs current)."""
    for _ in range(rounds):
        for c in consumers:
            c.poll(timeout_ms=0)
        time.sleep(0.02)
        metas = [c.group_metadata() for c in consumers]
        owned = [tp for c in consumers for tp in c.assignment()]
        if (
            len({m.generation_id for m in metas}) == 1
            and len(owned) == len(set(owned))
            and all(m.generation_id > 0 for m in metas)
            and _stable(consumers[0])
        ):
            return
    raise AssertionError("the group did not settle")


def _stable(c) -> bool:
    with txlog.Admin(c._store) as admin:
        view = admin.describe_consumer_group_members("g")
    return view is not None and view.state == "Stable"


def tps(*numbers, topic="in"):
    return {TP(topic, n) for n in numbers}


# ---- assignment and rebalancing ----------------------------------------------------------------------


def test_two_members_split_the_partitions_and_the_first_revokes_before_the_second_gets_them(path):
    l1, l2 = Recorder(), Recorder()
    c1 = member(path, l1)
    c1.poll(timeout_ms=0)
    assert c1.assignment() == tps(0, 1, 2, 3)
    c2 = member(path, l2)
    settle(c1, c2)
    assert c1.assignment() | c2.assignment() == tps(0, 1, 2, 3)
    assert len(c1.assignment()) == len(c2.assignment()) == 2
    # Kafka's order: c1 gave partitions back (revoked) before c2 was given them (assigned).
    assert l1.calls[0] == ("assigned", sorted(tps(0, 1, 2, 3)))
    assert l1.calls[1][0] == "revoked" and set(l1.calls[1][1]) == c2.assignment()
    assert ("assigned", sorted(c2.assignment())) in l2.calls
    assert not any(name == "lost" for name, _ in l1.calls + l2.calls)
    # Records go only to the owner: together they read each record once.
    for c in (c1, c2):
        c.seek_to_beginning()
    got = [r.value for c in (c1, c2) for _ in range(3) for r in c.poll(timeout_ms=20)]
    assert sorted(got) == sorted(b"%d" % i for i in range(40))
    c1.close()
    c2.close()


def test_a_member_that_leaves_hands_its_partitions_to_the_rest_sticky(path):
    consumers = [member(path) for _ in range(3)]
    settle(*consumers)
    before = {id(c): c.assignment() for c in consumers}
    leaving = consumers.pop()
    leaving.close()
    settle(*consumers)
    for c in consumers:  # sticky: those who stay keep what they had
        assert before[id(c)] <= c.assignment()
    assert set().union(*(c.assignment() for c in consumers)) == tps(0, 1, 2, 3)
    for c in consumers:
        c.close()
    with txlog.Admin(path) as admin:
        assert admin.list_consumer_group_states() == {"g": "Empty"}


def test_plain_commits_are_fenced_by_member_and_epoch(path):
    c1 = member(path)
    c1.poll(timeout_ms=0)
    c1.poll(timeout_ms=0)
    c1.commit({TP("in", 0): 3})
    old = c1.group_metadata()
    c2 = member(path)
    settle(c1, c2)
    assert c1.group_metadata().generation_id > old.generation_id
    with pytest.raises(StaleMemberEpochError):  # an OffsetCommit carrying the old epoch
        c1._transport.offset_commit("g", {TP("in", 0): 9}, old.member())
    # a consumer outside the group may not commit while it has members
    with pytest.raises(UnknownMemberIdError), txlog.Consumer(path, group_id="g") as outsider:
        outsider.assign([TP("in", 0)])
        outsider.commit({TP("in", 0): 9})
    c1.close()
    c2.close()
    with txlog.Admin(path) as admin:
        assert admin.list_consumer_group_offsets("g")[TP("in", 0)].offset == 3


def test_a_stale_transactional_commit_is_refused_and_its_output_never_visible(path):
    with txlog.Admin(path) as admin:
        admin.create_topic("out", 1)
    c1 = member(path)
    c1.poll(timeout_ms=0)
    stale = c1.group_metadata()
    c2 = member(path)
    settle(c1, c2)  # the group moved on: c1's epoch is newer than `stale`
    p = txlog.Producer(path, transactional_id="t1")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value=b"zombie")
    with pytest.raises(StaleMemberEpochError):
        p.send_offsets_to_transaction({TP("in", 0): 10}, stale)
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()
    # The current metadata is accepted.
    p.begin_transaction()
    p.send("out", value=b"ok")
    owned = sorted(c1.assignment())[0]
    p.send_offsets_to_transaction({owned: 5}, c1.group_metadata())
    p.commit_transaction()
    p.close()
    reader = txlog.Consumer(path, isolation_level="read_committed")
    reader.assign([TP("out", 0)])
    assert [r.value for r in reader.poll(timeout_ms=50)] == [b"ok"]
    assert c1.committed(owned).offset == 5
    for c in (reader, c1, c2):
        c.close()


def test_a_dead_process_loses_its_partitions_at_once_not_after_the_session_timeout(path):
    code = (
        "import sys, time, txlog\n"
        "c = txlog.Consumer(sys.argv[1], group_id='g', heartbeat_interval_ms=50, session_timeout_ms=60000)\n"
        "c.subscribe(['in'])\n"
        "c.poll(timeout_ms=0)\n"
        "print('JOINED', len(c.assignment()), flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["JOINED", "4"]
        survivor = member(path, session_timeout_ms=60000)
        survivor.poll(timeout_ms=0)
        assert survivor.assignment() == set()  # the child owns everything and is alive
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        started = time.monotonic()
        while survivor.assignment() != tps(0, 1, 2, 3):
            survivor.poll(timeout_ms=10)
            assert time.monotonic() - started < 5, "the dead member's partitions never moved"
        assert time.monotonic() - started < 5  # far below its 60 s session timeout
        survivor.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_paused_member_is_expired_by_its_session_timeout(path):
    c1 = member(path, session_timeout_ms=300, heartbeat_interval_ms=30)
    c1.poll(timeout_ms=0)
    c1._membership._stop_session(remove=False)  # as SIGSTOP would: the lock is dropped below, the beats stop
    c2 = member(path)
    deadline = time.monotonic() + 5
    while c2.assignment() != tps(0, 1, 2, 3):
        c2.poll(timeout_ms=10)
        assert time.monotonic() < deadline
    lost = Recorder()
    c1._listener = lost
    c1._membership._start_session()
    c1._membership.beat_soon()
    c1.poll(timeout_ms=0)  # it comes back: the group does not know it any more
    assert lost.calls == [("lost", sorted(tps(0, 1, 2, 3)))]
    c1.close()
    c2.close()


def test_listener_order_through_a_rebalance_and_a_close(path):
    events = []

    class Log:
        def __init__(self, name):
            self.name = name

        def on_partitions_revoked(self, ps):
            events.append((self.name, "revoked", len(ps)))

        def on_partitions_assigned(self, ps):
            events.append((self.name, "assigned", len(ps)))

    a = member(path, Log("a"))
    a.poll(timeout_ms=0)
    b = member(path, Log("b"))
    settle(a, b)
    b.close()
    settle(a)
    a.close()
    assert events[0] == ("a", "assigned", 4)
    a_revoked = events.index(("a", "revoked", 2))
    b_assigned = events.index(("b", "assigned", 2))
    assert a_revoked < b_assigned
    b_revoked = events.index(("b", "revoked", 2))  # close() revokes before leaving
    assert events[b_revoked + 1 :] == [("a", "assigned", 2), ("a", "revoked", 4)]


def test_static_member_restart_within_the_session_timeout_keeps_its_assignment(path):
    a = member(path, group_instance_id="worker-a", session_timeout_ms=5000)
    b = member(path, group_instance_id="worker-b", session_timeout_ms=5000)
    settle(a, b)
    a_parts, epoch = a.assignment(), b.group_metadata().generation_id
    a_meta = a.group_metadata()
    with pytest.raises(UnreleasedInstanceIdError):  # the live holder still runs
        twin = member(path, group_instance_id="worker-a")
        twin.poll(timeout_ms=0)
    twin.close()
    a.close()  # a static member's close keeps its place
    back = member(path, group_instance_id="worker-a", session_timeout_ms=5000)
    back.poll(timeout_ms=0)
    assert back.assignment() == a_parts
    b.poll(timeout_ms=0)
    assert b.group_metadata().generation_id == epoch  # no rebalance happened
    with pytest.raises(FencedInstanceIdError):  # the old instance's member id is fenced
        back._transport.offset_commit("g", {TP("in", 0): 1}, a_meta.member())
    back.close()
    b.close()


def test_assign_only_consumers_are_unaffected_and_cannot_mix_with_subscribe(path):
    c = txlog.Consumer(path, group_id="solo", enable_auto_commit=False)
    c.assign([TP("in", 1)])
    assert len(c.poll(timeout_ms=50)) == 10
    c.commit()
    assert c.committed(TP("in", 1)).offset == 10
    assert c.group_metadata().generation_id == -1 and c.group_metadata().member_id == ""
    with pytest.raises(IllegalStateError):
        c.subscribe(["in"])
    c.close()
    s = member(path)
    with pytest.raises(IllegalStateError):
        s.assign([TP("in", 0)])
    s.close()


def test_heartbeats_do_not_grow_the_log(path):
    c = member(path)
    settle(c)
    with Store.open(path, read_only=True) as store:
        log = store.partition(CONSUMER_OFFSETS_TOPIC, owner_partition("g", 8))
        end = log.log_end_offset
    for _ in range(20):
        c.poll(timeout_ms=20)  # many heartbeat intervals (50 ms) pass
    with Store.open(path, read_only=True) as store:
        assert store.partition(CONSUMER_OFFSETS_TOPIC, owner_partition("g", 8)).log_end_offset == end
    c.close()


def test_reset_offsets_is_refused_while_the_group_has_live_members(path):
    c = member(path)
    settle(c)
    with txlog.Admin(path) as admin, pytest.raises(GroupNotEmptyError, match="inactive"):
        admin.alter_consumer_group_offsets("g", {TP("in", 0): 0})
    c.close()
    with txlog.Admin(path) as admin:
        admin.alter_consumer_group_offsets("g", {TP("in", 0): 0})


def test_a_subscription_change_rebalances(path):
    a = member(path, topics=("in", "other"))
    b = member(path, topics=("in",))
    settle(a, b)
    assert {tp.topic for tp in b.assignment()} == {"in"}
    assert tps(0, 1, topic="other") <= a.assignment()
    epoch = a.group_metadata().generation_id
    b.subscribe(["in", "other"])
    settle(a, b)
    assert a.group_metadata().generation_id > epoch
    assert {tp.topic for tp in b.assignment()} == {"in", "other"} or len(b.assignment()) == 3
    assert a.assignment() | b.assignment() == tps(0, 1, 2, 3) | tps(0, 1, topic="other")
    a.close()
    b.close()


# ---- the assignors --------------------------------------------------------------------------------


def test_uniform_is_balanced_and_sticky():
    members = {m: MemberSpec(frozenset({"t"}), frozenset()) for m in "abc"}
    first = uniform(members, {"t": 8})
    assert sorted(len(v) for v in first.values()) == [2, 3, 3]
    assert set().union(*first.values()) == {TP("t", p) for p in range(8)}
    members = {m: MemberSpec(frozenset({"t"}), frozenset(first[m])) for m in "ab"}
    members["d"] = MemberSpec(frozenset({"t"}), frozenset())
    second = uniform(members, {"t": 8})
    assert sorted(len(v) for v in second.values()) == [2, 3, 3]
    moved = sum(len(first[m] - second[m]) for m in "ab")
    assert moved <= 3  # only what balance requires (c's partitions and at most one more) moves


def test_range_gives_contiguous_blocks_then_keeps_them():
    members = {m: MemberSpec(frozenset({"t", "u"}), frozenset()) for m in "ab"}
    first = range_(members, {"t": 5, "u": 2})
    assert first["a"] == {TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0)}
    assert first["b"] == {TP("t", 3), TP("t", 4), TP("u", 1)}
    members = {
        "b": MemberSpec(frozenset({"t", "u"}), frozenset(first["b"])),
        "c": MemberSpec(frozenset({"t", "u"}), frozenset()),
    }
    second = range_(members, {"t": 5, "u": 2})
    assert first["b"] <= second["b"]


# ---- the records: Kafka's schemas -------------------------------------------------------------------


def _kafka_python_group_value():
    """GroupMetadataValue v3 declared with kafka-python's schema types (GroupMetadataValue.json)."""
    try:  # kafka-python 2.x
        from kafka.protocol.types import Array, Bytes, Int16, Int32, Int64, Schema, String
    except ImportError:  # kafka-python 3.x moved the hand-written types
        from kafka.protocol.old.types import Array, Bytes, Int16, Int32, Int64, Schema, String

    member_schema = Schema(
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
        ("client_id", String("utf-8")),
        ("client_host", String("utf-8")),
        ("rebalance_timeout", Int32),
        ("session_timeout", Int32),
        ("subscription", Bytes),
        ("assignment", Bytes),
    )
    return Schema(
        ("version", Int16),
        ("protocol_type", String("utf-8")),
        ("generation", Int32),
        ("protocol", String("utf-8")),
        ("leader", String("utf-8")),
        ("current_state_timestamp", Int64),
        ("members", Array(member_schema)),
    )


def _kafka_python_consumer_protocol():
    """kafka-python's own consumer-protocol types (its generated ConsumerProtocol* messages)."""
    pytest.importorskip("kafka.protocol.consumer.metadata")
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    return ConsumerProtocolSubscription, ConsumerProtocolAssignment


def test_group_records_parse_with_kafka_schemas(path):
    import io

    a = member(path)
    b = member(path, group_instance_id="static-b")
    settle(a, b)
    with Store.open(path, read_only=True) as store:
        log = store.partition(CONSUMER_OFFSETS_TOPIC, owner_partition("g", 8))
        records = [r for batch in log.read(0, 1 << 20) for r in batch.records()]
    group_records = [r for r in records if struct.unpack_from(">h", r.key)[0] == 2]
    assert group_records, "the group coordinator wrote no GroupMetadata record"
    value_schema = _kafka_python_group_value()
    subscription_type, assignment_type = _kafka_python_consumer_protocol()
    last = group_records[-1]
    assert last.key == struct.pack(">hh", 2, 1) + b"g"
    version, protocol_type, generation, protocol, leader, ts, members = value_schema.decode(io.BytesIO(last.value))
    assert (version, protocol_type, protocol) == (3, "consumer", "uniform")
    assert generation == a.group_metadata().generation_id
    assert sorted(m[0] for m in members) == sorted([a.group_metadata().member_id, b.group_metadata().member_id])
    by_id = {m[0]: m for m in members}
    static = by_id[b.group_metadata().member_id]
    assert static[1] == "static-b" and static[5] == FAST["session_timeout_ms"]
    sub = subscription_type.decode(static[6])
    assert sub.version == 3 and sub.topics == ["in"] and sub.generation_id == b.group_metadata().generation_id
    owned = {TP(tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions}
    assigned = assignment_type.decode(static[7])
    assert owned == {TP(tp.topic, p) for tp in assigned.assigned_partitions for p in tp.partitions} == b.assignment()
    # Our decoder reads the same bytes to the same values.
    _, ours = decode_group_metadata_value(last.value)
    assert ours.generation == generation and len(ours.members) == 2
    a.close()
    b.close()


def test_consumer_protocol_round_trips_and_reads_older_and_newer_versions():
    sub = ConsumerSubscription(("a", "b"), b"u", (("a", (0, 2)),), 7, "rack-1")
    for version in range(4):
        got_version, got = decode_subscription(encode_subscription(sub, version))
        assert got_version == version and got.topics == ("a", "b") and got.user_data == b"u"
        assert got.owned_partitions == (sub.owned_partitions if version >= 1 else ())
        assert got.generation_id == (7 if version >= 2 else -1)
    newer = struct.pack(">h", 9) + encode_subscription(sub, 3)[2:] + b"future field"
    assert decode_subscription(newer)[1] == sub  # a newer version reads with the newest layout known
    assignment = ConsumerAssignment((("a", (1,)), ("b", (0, 3))), None)
    assert decode_assignment(encode_assignment(assignment, 0))[1] == assignment


def test_kafka_python_reads_every_version_of_our_consumer_protocol():
    subscription_type, assignment_type = _kafka_python_consumer_protocol()
    sub = ConsumerSubscription(("x", "y"), b"d", (("x", (0, 1)),), 5, "r")
    for version in range(4):
        theirs = subscription_type.decode(encode_subscription(sub, version))
        assert (theirs.version, theirs.topics, theirs.user_data) == (version, ["x", "y"], b"d")
        if version >= 2:
            assert theirs.generation_id == 5
    theirs = assignment_type.decode(encode_assignment(ConsumerAssignment((("x", (0, 1)),), None), 0))
    assert [(tp.topic, tp.partitions) for tp in theirs.assigned_partitions] == [("x", [0, 1])]
