"""The group APIs request by request: the classic state machine's errors, KIP-447 fencing of
TxnOffsetCommit, and the line between classic and KIP-848 groups. Real clients are in test_groups.py."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from storage.store import Store
from tests.server.serve_process import ServeProcess
from tests.server.wire_client import WireClient, message
from txlog.transport import Transport

SESSION = datetime.timedelta(milliseconds=1000)
REBALANCE = datetime.timedelta(milliseconds=5000)
DEADLINE_S = 120.0


@pytest.fixture
def server(tmp_path):
    server = ServeProcess(
        str(tmp_path / "store"),
        args=["--config", "group.initial.rebalance.delay.ms=0", "--config", "group.min.session.timeout.ms=500"],
    ).start()
    yield server
    server.kill()


def _join(client: WireClient, group: str, member_id: str = "", instance_id: str | None = None, version: int = 5):
    m = message("join_group", version)
    return client.call(
        "join_group",
        version,
        group_id=group,
        session_timeout=SESSION,
        rebalance_timeout=REBALANCE,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"meta-" + group.encode()),),
    )


def _sync(client: WireClient, group: str, generation: int, member_id: str, assignments=(), instance_id=None):
    m = message("sync_group", 3)
    return client.call(
        "sync_group",
        3,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        assignments=tuple(m.SyncGroupRequestAssignment(member_id=k, assignment=v) for k, v in assignments),
    )


def _heartbeat(client: WireClient, group: str, generation: int, member_id: str, instance_id=None) -> ErrorCode:
    return client.call(
        "heartbeat", 3, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id
    ).error_code


def _stable_member(client: WireClient, group: str, instance_id: str | None = None) -> tuple[str, int]:
    """Join (v5: member id required first, unless static) and sync as the only member: (member id, generation)."""
    first = _join(client, group, instance_id=instance_id)
    if instance_id is None:
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        first = _join(client, group, first.member_id)
    assert first.error_code == ErrorCode.none and first.leader == first.member_id
    assert [m.metadata for m in first.members] == [b"meta-" + group.encode()]
    synced = _sync(client, group, first.generation_id, first.member_id, [(first.member_id, b"all")], instance_id)
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"all")
    return first.member_id, first.generation_id


def test_a_classic_member_is_fenced_by_generation_and_member_id_and_expires_without_heartbeats(server):
    with WireClient(server.bootstrap) as client:
        member, generation = _stable_member(client, "g")
        assert _heartbeat(client, "g", generation, member) == ErrorCode.none
        assert _heartbeat(client, "g", generation + 1, member) == ErrorCode.illegal_generation
        assert _heartbeat(client, "g", generation, "someone-else") == ErrorCode.unknown_member_id
        assert _sync(client, "g", generation - 1, member).error_code == ErrorCode.illegal_generation
        # silence past the session timeout (1 s) removes the member
        deadline = time.monotonic() + DEADLINE_S
        while _heartbeat(client, "g", generation, member) == ErrorCode.none and time.monotonic() < deadline:
            time.sleep(2.0)
        assert _heartbeat(client, "g", generation, member) == ErrorCode.unknown_member_id


def test_a_second_member_makes_the_first_rebalance_and_both_get_the_leaders_assignment(server):
    with WireClient(server.bootstrap) as a, WireClient(server.bootstrap) as b:
        first, generation = _stable_member(a, "g")
        required = _join(b, "g")
        assert required.error_code == ErrorCode.member_id_required
        # b's JoinGroup waits until a rejoins: send it from a thread, and let a notice the rebalance
        answers = {}
        joiner = threading.Thread(target=lambda: answers.setdefault("b", _join(b, "g", required.member_id)))
        joiner.start()
        deadline = time.monotonic() + DEADLINE_S
        while _heartbeat(a, "g", generation, first) != ErrorCode.rebalance_in_progress:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        rejoined = _join(a, "g", first)
        joiner.join(DEADLINE_S)
        second = answers["b"]
        assert rejoined.generation_id == second.generation_id == generation + 1
        assert rejoined.leader == first and len(rejoined.members) == 2 and second.members == ()
        syncs = {}
        follower = threading.Thread(
            target=lambda: syncs.setdefault("b", _sync(b, "g", second.generation_id, second.member_id))
        )
        follower.start()
        plan = [(first, b"p0"), (second.member_id, b"p1")]
        assert _sync(a, "g", rejoined.generation_id, first, plan).assignment == b"p0"
        follower.join(DEADLINE_S)
        assert (syncs["b"].error_code, syncs["b"].assignment) == (ErrorCode.none, b"p1")


def test_a_restarted_static_member_takes_over_and_its_old_member_id_is_fenced(server):
    with WireClient(server.bootstrap) as old, WireClient(server.bootstrap) as new:
        member, generation = _stable_member(old, "g", instance_id="i-1")
        again = _join(new, "g", instance_id="i-1")  # no MEMBER_ID_REQUIRED for a static member
        assert again.error_code == ErrorCode.none and again.member_id != member
        assert _heartbeat(old, "g", generation, member, "i-1") == ErrorCode.fenced_instance_id
        leave = old.call(
            "leave_group",
            3,
            group_id="g",
            members=(message("leave_group", 3).MemberIdentity(member_id=member, group_instance_id="i-1"),),
        )
        assert [m.error_code for m in leave.members] == [ErrorCode.fenced_instance_id]


def _commit(client: WireClient, group: str, generation: int, member_id: str, topic: str, offset: int) -> ErrorCode:
    m = message("offset_commit", 8)
    answer = client.call(
        "offset_commit",
        8,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=(
            m.OffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    m.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="x"
                    ),
                ),
            ),
        ),
    )
    return answer.topics[0].partitions[0].error_code


def _fetch(client: WireClient, group: str, topic: str, require_stable: bool = False):
    m = message("offset_fetch", 8)
    answer = client.call(
        "offset_fetch",
        8,
        groups=(
            m.OffsetFetchRequestGroup(
                group_id=group, topics=(m.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)
            ),
        ),
        require_stable=require_stable,
    )
    partition = answer.groups[0].topics[0].partitions[0]
    return partition.error_code, partition.committed_offset


def test_offset_commits_are_fenced_by_generation_and_survive_a_server_restart(server):
    Store.open(server.data_dir).create_topic("t", 1)
    with WireClient(server.bootstrap) as client:
        member, generation = _stable_member(client, "g")
        assert _commit(client, "g", generation + 1, member, "t", 5) == ErrorCode.illegal_generation
        assert _commit(client, "g", generation, "intruder", "t", 5) == ErrorCode.unknown_member_id
        assert _commit(client, "g", -1, "", "t", 5) == ErrorCode.unknown_member_id  # an admin's, with members
        assert _commit(client, "g", generation, member, "no-such-topic", 5) == ErrorCode.unknown_topic_or_partition
        assert _commit(client, "g", generation, member, "t", 7) == ErrorCode.none
        assert _fetch(client, "g", "t") == (ErrorCode.none, 7)
    server.restart()
    with WireClient(server.bootstrap) as client:
        assert _fetch(client, "g", "t") == (ErrorCode.none, 7)
        # the membership was in memory: the member learns it must rejoin, as after a coordinator failover
        assert _heartbeat(client, "g", generation, member) == ErrorCode.unknown_member_id
        assert _commit(client, "g", generation, member, "t", 8) == ErrorCode.illegal_generation  # Kafka's, v8
        assert _commit(client, "g", -1, "", "t", 9) == ErrorCode.none  # the group is empty now: an admin commit
        assert _fetch(client, "g", "t") == (ErrorCode.none, 9)


def _txn_commit(client: WireClient, group: str, pid: int, epoch: int, generation: int, member: str, offset: int):
    m = message("txn_offset_commit", 3)
    answer = client.call(
        "txn_offset_commit",
        3,
        transactional_id="tx",
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
        topics=(
            m.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    m.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
                    ),
                ),
            ),
        ),
    )
    return answer.topics[0].partitions[0].error_code


def test_txn_offset_commit_is_pending_until_the_transaction_commits_and_fenced_by_generation(server):
    store = Store.open(server.data_dir)
    store.create_topic("t", 1)
    transport = Transport(store)  # the transaction's coordinator side, as an embedded producer reaches it
    ids = transport.init_producer_id("tx")
    transport.add_offsets_to_txn("tx", ids.producer_id, ids.epoch, "g")
    with WireClient(server.bootstrap) as client:
        member, generation = _stable_member(client, "g")
        assert _txn_commit(client, "g", ids.producer_id, ids.epoch, generation + 1, member, 3) == (
            ErrorCode.illegal_generation
        )
        assert _txn_commit(client, "g", ids.producer_id, ids.epoch, generation, "ghost", 3) == (
            ErrorCode.unknown_member_id
        )
        assert _txn_commit(client, "g", ids.producer_id, ids.epoch, generation, member, 3) == ErrorCode.none
        assert _txn_commit(client, "g", ids.producer_id, ids.epoch, generation, member, 4) == ErrorCode.none
        assert _fetch(client, "g", "t", require_stable=True)[0] == ErrorCode.unstable_offset_commit
        assert _fetch(client, "g", "t") == (ErrorCode.none, -1)  # not committed yet
        transport.end_txn("tx", ids.producer_id, ids.epoch, commit=True)
        assert _fetch(client, "g", "t", require_stable=True) == (ErrorCode.none, 4)
        # an older epoch of the producer is fenced by the transaction coordinator
        next_ids = transport.init_producer_id("tx")
        assert next_ids.epoch > ids.epoch
        assert _txn_commit(client, "g", ids.producer_id, ids.epoch, generation, member, 5) != ErrorCode.none
    store.close()


def test_classic_and_kip848_members_do_not_share_a_group_id(server):
    Store.open(server.data_dir).create_topic("t", 2)
    with WireClient(server.bootstrap) as client:
        m = message("consumer_group_heartbeat", 0)
        joined = client.call(
            "consumer_group_heartbeat",
            0,
            group_id="new-style",
            member_id="",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=REBALANCE,
            subscribed_topic_names=("t",),
            server_assignor=None,
            topic_partitions=(),
        )
        assert joined.error_code == ErrorCode.none and joined.member_epoch > 0
        assert sum(len(t.partitions) for t in joined.assignment.topic_partitions) == 2
        topic_id = joined.assignment.topic_partitions[0].topic_id
        refused = _join(client, "new-style")
        assert refused.error_code == ErrorCode.inconsistent_group_protocol
        _stable_member(client, "old-style")
        other = client.call(
            "consumer_group_heartbeat",
            0,
            group_id="old-style",
            member_id="",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=REBALANCE,
            subscribed_topic_names=("t",),
            server_assignor=None,
            topic_partitions=(m.TopicPartitions(topic_id=topic_id, partitions=()),),
        )
        assert other.error_code == ErrorCode.group_id_not_found


def _consumer_heartbeat(client: WireClient, group: str, member_id: str, epoch: int, topics=("t",), owned=()):
    m = message("consumer_group_heartbeat", 0)
    return client.call(
        "consumer_group_heartbeat",
        0,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=REBALANCE,
        subscribed_topic_names=topics,
        server_assignor=None,
        topic_partitions=tuple(m.TopicPartitions(topic_id=t, partitions=ps) for t, ps in owned),
    )


def test_a_silent_kip848_wire_member_is_expired_and_its_partitions_move(tmp_path):
    server = ServeProcess(str(tmp_path / "store"), args=["--config", "group.consumer.session.timeout.ms=1500"]).start()
    try:
        Store.open(server.data_dir).create_topic("t", 2)
        with WireClient(server.bootstrap) as a, WireClient(server.bootstrap) as b:
            first = _consumer_heartbeat(a, "g", "", 0)
            second = _consumer_heartbeat(b, "g", "", 0)
            assert first.error_code == second.error_code == ErrorCode.none
            # b beats on alone; a falls silent past the session timeout, and b ends up with both partitions
            deadline = time.monotonic() + DEADLINE_S
            owned: tuple = ()
            epoch = second.member_epoch
            while True:
                beat = _consumer_heartbeat(b, "g", second.member_id, epoch, owned=owned)
                assert beat.error_code == ErrorCode.none
                epoch = beat.member_epoch
                owned = tuple((t.topic_id, t.partitions) for t in beat.assignment.topic_partitions)
                if sum(len(ps) for _, ps in owned) == 2:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.5)
            late = _consumer_heartbeat(a, "g", first.member_id, first.member_epoch)
            assert late.error_code == ErrorCode.unknown_member_id
    finally:
        server.kill()


def test_a_classic_group_left_empty_is_described_and_deleted_as_kafka_does(server):
    with WireClient(server.bootstrap) as client:
        member, _ = _stable_member(client, "g")
        leave = client.call(
            "leave_group",
            3,
            group_id="g",
            members=(message("leave_group", 3).MemberIdentity(member_id=member, group_instance_id=None),),
        )
        assert [m.error_code for m in leave.members] == [ErrorCode.none]
        time.sleep(0.5)  # past a few deadline checks: an Empty group is kept, not forgotten
        [described] = client.call("describe_groups", 5, groups=("g",), include_authorized_operations=False).groups
        assert (described.group_state, described.protocol_type, described.members) == ("Empty", "consumer", ())
        [deleted] = client.call("delete_groups", 2, groups_names=("g",)).results
        assert deleted.error_code == ErrorCode.none
        [described] = client.call("describe_groups", 5, groups=("g",), include_authorized_operations=False).groups
        assert described.group_state == "Dead"
