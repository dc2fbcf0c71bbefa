"""The classic group APIs against the real Kafka 4.4 broker (tests/kafka_rig): the same requests, the same answers.

One script of requests covers the classic state machine's errors, offset commit fencing, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and LeaveGroup; each step records the answer as a client
reads it. The broker's answers are the oracle: txlog serve must answer every step alike.
"""

from __future__ import annotations

import datetime
import os
import time

from kio.schema.errors import ErrorCode

from storage.store import Store
from tests.kafka_rig.broker import KafkaBroker
from tests.server import test_group_protocol as steps
from tests.server.serve_process import ServeProcess
from tests.server.wire_client import WireClient, message

COORDINATOR_STARTING = {"not_coordinator", "coordinator_load_in_progress", "coordinator_not_available"}


def _wait_for_coordinator(client: WireClient) -> None:
    """A fresh broker creates __consumer_offsets on the first FindCoordinator and loads it a moment later."""
    deadline = time.monotonic() + steps.DEADLINE_S
    while True:
        client.call("find_coordinator", 3, key="probe", key_type=0)
        if steps._heartbeat(client, "probe", 1, "x").name not in COORDINATOR_STARTING:
            return
        assert time.monotonic() < deadline, "the group coordinator never became available"
        time.sleep(0.2)


def _offsets(answer) -> list:
    return [
        (
            g.group_id,
            g.error_code.name,
            [
                (t.name, [(p.partition_index, p.committed_offset, p.error_code.name) for p in t.partitions])
                for t in g.topics
            ],
        )
        for g in answer.groups
    ]


def _fetch(client: WireClient, group: str, topics: tuple[str, ...], require_stable: bool) -> list:
    m = message("offset_fetch", 8)
    wanted = tuple(m.OffsetFetchRequestTopics(name=t, partition_indexes=(0,)) for t in topics)
    answer = client.call(
        "offset_fetch",
        8,
        groups=(m.OffsetFetchRequestGroup(group_id=group, topics=wanted),),
        require_stable=require_stable,
    )
    return _offsets(answer)


def _described(client: WireClient, *groups: str) -> list:
    answer = client.call("describe_groups", 5, groups=groups, include_authorized_operations=False)
    return [
        (g.group_id, g.error_code.name, g.group_state, g.protocol_type, g.protocol_data, len(g.members))
        for g in answer.groups
    ]


def _leave(client: WireClient, member: str) -> tuple:
    identity = message("leave_group", 3).MemberIdentity(member_id=member, group_instance_id=None)
    answer = client.call("leave_group", 3, group_id="g", members=(identity,))
    return answer.error_code.name, [m.error_code.name for m in answer.members]


def _join_with(client: WireClient, session_ms: int, protocol_type: str) -> str:
    protocol = message("join_group", 5).JoinGroupRequestProtocol(name="range", metadata=b"")
    return client.call(
        "join_group",
        5,
        group_id="g",
        session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=steps.REBALANCE,
        member_id="",
        group_instance_id=None,
        protocol_type=protocol_type,
        protocols=(protocol,),
    ).error_code.name


def _script(bootstrap: str) -> list:
    out: list = []
    with WireClient(bootstrap) as c, WireClient(bootstrap) as d:
        _wait_for_coordinator(c)
        first = steps._join(c, "g")
        out.append(("join without a member id", first.error_code.name))
        j = steps._join(c, "g", first.member_id)
        out.append(("join", j.error_code.name, j.generation_id, j.protocol_name))
        out.append(("heartbeat before sync", steps._heartbeat(c, "g", j.generation_id, j.member_id).name))
        out.append(("commit while completing", steps._commit(c, "g", j.generation_id, j.member_id, "t", 3).name))
        s = steps._sync(c, "g", j.generation_id, j.member_id, [(j.member_id, b"x")])
        out.append(("sync", s.error_code.name, s.assignment))
        out.append(("heartbeat, wrong generation", steps._heartbeat(c, "g", j.generation_id + 1, j.member_id).name))
        out.append(("heartbeat, unknown member", steps._heartbeat(c, "g", j.generation_id, "zz").name))
        out.append(("heartbeat, unknown group", steps._heartbeat(c, "nogroup", 1, "zz").name))
        out.append(("sync, wrong generation", steps._sync(c, "g", j.generation_id + 1, j.member_id).error_code.name))
        out.append(("commit without member", steps._commit(c, "g", -1, "", "t", 3).name))
        out.append(("commit, wrong generation", steps._commit(c, "g", j.generation_id + 1, j.member_id, "t", 3).name))
        out.append(("commit, unknown member", steps._commit(c, "g", j.generation_id, "zz", "t", 3).name))
        out.append(("commit, unknown topic", steps._commit(c, "g", j.generation_id, j.member_id, "nope", 3).name))
        out.append(("commit, unknown group", steps._commit(c, "nogroup2", 3, "zz", "t", 3).name))
        out.append(("fetch, unknown group", _fetch(c, "nogroup3", ("t",), False)))
        out.append(("fetch", _fetch(c, "g", ("t", "nope"), True)))
        out.append(("join, unknown member", steps._join(d, "g", "zz").error_code.name))
        out.append(("join, session too short", _join_with(d, 100, "consumer")))
        out.append(("join, other protocol type", _join_with(d, 6000, "connect")))
        listed = c.call("list_groups", 4, states_filter=())
        out.append(("list", [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups]))
        out.append(("describe", _described(c, "g", "nogroup9")))
        deleted = c.call("delete_groups", 2, groups_names=("g", "nogroup9"))
        out.append(("delete", [(r.group_id, r.error_code.name) for r in deleted.results]))
        out.append(("leave", _leave(c, j.member_id)))
        out.append(("leave again", _leave(c, j.member_id)))
        out.append(("describe after leaving", _described(c, "g")))
        deleted = c.call("delete_groups", 2, groups_names=("g",))
        out.append(("delete after leaving", [(r.group_id, r.error_code.name) for r in deleted.results]))
    return out


def test_classic_group_answers_match_the_real_broker(tmp_path):
    broker = KafkaBroker(str(tmp_path / "kafka"), props={"group.min.session.timeout.ms": "500"}).start()
    try:
        broker.create_topic("t", 1, {})
        expected = _script(broker.bootstrap)
    finally:
        broker.stop()
    os.makedirs(tmp_path / "txlog")
    server = ServeProcess(
        str(tmp_path / "txlog" / "store"),
        args=["--config", "group.initial.rebalance.delay.ms=0", "--config", "group.min.session.timeout.ms=500"],
    ).start()
    try:
        Store.open(server.data_dir).create_topic("t", 1)
        assert _script(server.bootstrap) == expected
        assert expected[0] == ("join without a member id", ErrorCode.member_id_required.name)  # the script ran
    finally:
        server.kill()
