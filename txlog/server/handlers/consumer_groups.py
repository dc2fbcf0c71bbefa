"""KIP-848's consumer group protocol over the wire: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

A wire member joins the same groups txlog's embedded consumers run: each heartbeat is the
transport's `consumer_group_heartbeat`, under the group's lock, so wire and embedded
members of one group share its partitions. Liveness is txlog's member session file
(`txlog.member_session`): the server holds one for each wire member and beats it on every
heartbeat, so other processes expire a silent wire member after
`group.consumer.session.timeout.ms`, and all of them at once if the server dies (its locks
go with it), as they expire an embedded member whose process died.

KIP-848 names topics by id: assignments go out as topic ids and owned partitions come in
as ids, translated by `txlog.server.topic_ids` (the ids Metadata answers).
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from storage.errors import KafkaError
from txlog.coordinator.group_coordinator import GroupDescription
from txlog.errors import FencedInstanceIdError, FencedMemberEpochError, UnknownMemberIdError
from txlog.member_session import MemberSession
from txlog.requests import DEFAULT_MAX_POLL_INTERVAL_MS, JOIN_EPOCH, LEAVE_EPOCH, HeartbeatRequest, HeartbeatResponse
from txlog.server import topic_ids
from txlog.server.apis import api
from txlog.server.broker import Broker
from txlog.server.errors import error_code, error_message
from txlog.server.handlers.groups import AUTHORIZED_OPERATIONS_OMITTED, classic_groups, consumer_group
from txlog.server.request_context import RequestContext
from txlog.topic_partition import TopicPartition

MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1's MemberType: the member speaks KIP-848's protocol


class _Refused(Exception):
    """A request refused before it reaches the coordinator, with Kafka's code and message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _WireMember:
    """What the server keeps for one wire member between heartbeats (store thread only)."""

    session: MemberSession | None
    regex: re.Pattern[str] | None = None
    rebalance_timeout_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    last_beat_ms: int = 0


@dataclass
class _WireMembers:
    members: dict[tuple[str, str], _WireMember] = field(default_factory=dict)


_MEMBERS: dict[int, _WireMembers] = {}


def _wire_members(broker: Broker) -> _WireMembers:
    return _MEMBERS.setdefault(id(broker), _WireMembers())


# ---- ConsumerGroupHeartbeat ---------------------------------------------------------------------------


@api(68, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if classic_groups(ctx.broker).live(request.group_id) is not None:
        return _heartbeat_error(ctx, ErrorCode.group_id_not_found, f"Group {request.group_id} is not a consumer group.")
    try:
        response = await ctx.run(_heartbeat, ctx, request)
    except _Refused as exc:
        return _heartbeat_error(ctx, exc.code, str(exc))
    except KafkaError as exc:
        return _heartbeat_error(ctx, error_code(exc), error_message(exc))
    assignment = None
    if response.member_epoch >= 0:
        assignment = ctx.make("Assignment", topic_partitions=_by_topic_id(ctx, "TopicPartitions", response.assignment))
    return ctx.respond(
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval=ctx.broker.config_int("group.consumer.heartbeat.interval.ms"),
        assignment=assignment,
    )


def _heartbeat_error(ctx: RequestContext, code: int, message: str) -> Any:
    return ctx.respond(
        throttle_time=0,
        error_code=code,
        error_message=message,
        member_id=None,
        member_epoch=0,
        heartbeat_interval=0,
        assignment=None,
    )


def _heartbeat(ctx: RequestContext, request: Any) -> HeartbeatResponse:
    """One heartbeat on the store thread: the member's session beats, then the coordinator runs."""
    broker = ctx.broker
    if not request.group_id:
        raise _Refused(ErrorCode.invalid_request, "GroupId can't be empty.")
    member_id = request.member_id or _new_member_id()
    key = (request.group_id, member_id)
    now = time.time_ns() // 1_000_000
    _forget_silent(broker, now)
    wire = _wire_members(broker).members
    member = wire.get(key)
    if request.member_epoch < 0:
        return _leave(broker, request, member_id, member)
    regex = getattr(request, "subscribed_topic_regex", None)
    if request.member_epoch == JOIN_EPOCH and request.subscribed_topic_names is None and regex is None:
        raise _Refused(
            ErrorCode.invalid_request, "SubscribedTopicNames or SubscribedTopicRegex must be set in the first request."
        )
    if member is None:
        member = _WireMember(_open_session(broker, request.group_id, member_id))
        wire[key] = member
    if regex is not None:
        member.regex = _compile(regex) if regex else None
    elif request.subscribed_topic_names is not None:
        member.regex = None
    rebalance_ms = int(request.rebalance_timeout.total_seconds() * 1000)
    if rebalance_ms >= 0:
        member.rebalance_timeout_ms = rebalance_ms
    member.last_beat_ms = now
    if member.session is not None:
        member.session.beat(now, polled=True)
    heartbeat = HeartbeatRequest(
        request.group_id,
        member_id,
        request.member_epoch,
        request.instance_id,
        _topics(broker, request, member),
        _owned(ctx, request.topic_partitions),
        request.server_assignor,
        broker.config_int("group.consumer.session.timeout.ms"),
        member.rebalance_timeout_ms,
        ctx.header.client_id or "",
        "/" + ctx.connection.peer.rsplit(":", 1)[0],
    )
    try:
        return broker.transport.consumer_group_heartbeat(heartbeat)
    except (UnknownMemberIdError, FencedMemberEpochError, FencedInstanceIdError):
        _forget(broker, key, remove=True)  # the member must rejoin as a new one
        raise


def _leave(broker: Broker, request: Any, member_id: str, member: _WireMember | None) -> HeartbeatResponse:
    heartbeat = HeartbeatRequest(request.group_id, member_id, request.member_epoch, request.instance_id)
    try:
        return broker.transport.consumer_group_heartbeat(heartbeat)
    finally:
        # a static member's leave (-2) keeps its place until its session times out: keep the file, drop the lock
        _forget(broker, (request.group_id, member_id), remove=request.member_epoch == LEAVE_EPOCH)


def _forget_silent(broker: Broker, now: int) -> None:
    """Let go of the sessions of wire members silent past their session timeout (clients that vanished
    without leaving): the coordinator has expired them already, and their files would stay open."""
    limit = broker.config_int("group.consumer.session.timeout.ms")
    for key, member in list(_wire_members(broker).members.items()):
        if member.last_beat_ms and now - member.last_beat_ms > limit:
            _forget(broker, key, remove=True)


def _open_session(broker: Broker, group_id: str, member_id: str) -> MemberSession | None:
    try:
        return MemberSession(broker.store.root, group_id, member_id)
    except OSError:
        return None  # held by someone else (another process claims this member id): it keeps it alive


def _forget(broker: Broker, key: tuple[str, str], *, remove: bool) -> None:
    member = _wire_members(broker).members.pop(key, None)
    if member is not None and member.session is not None:
        member.session.close(remove=remove)


def _new_member_id() -> str:
    """A member id as Kafka makes one (Uuid.randomUuid().toString(): 22 characters of URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _compile(regex: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise _Refused(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
        ) from None


def _topics(broker: Broker, request: Any, member: _WireMember) -> tuple[str, ...] | None:
    """The member's subscription: its names, or the topics its regex matches now (re-read at every beat)."""
    if member.regex is not None:
        return tuple(t for t in broker.store.list_topics(include_internal=False) if member.regex.fullmatch(t))
    if request.subscribed_topic_names is None:
        return None
    return tuple(request.subscribed_topic_names)


def _owned(ctx: RequestContext, topic_partitions: Any) -> frozenset[TopicPartition] | None:
    if topic_partitions is None:
        return None
    names = topic_ids.topic_names(ctx.broker.store, ctx.broker.cluster_id)
    return frozenset(
        TopicPartition(names[t.topic_id], p) for t in topic_partitions if t.topic_id in names for p in t.partitions
    )


def _by_topic_id(ctx: RequestContext, class_name: str, partitions: Any) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tuple(
        ctx.make(
            class_name,
            topic_id=topic_ids.topic_id(ctx.broker.store, ctx.broker.cluster_id, topic),
            topic_name=topic,
            partitions=tuple(ps),
        )
        for topic, ps in by_topic.items()
    )


# ---- ConsumerGroupDescribe ----------------------------------------------------------------------------


@api(69, 0, 1)
async def consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    described = []
    for group_id in request.group_ids:
        if classic_groups(ctx.broker).live(group_id) is not None:
            described.append(
                _describe_error(
                    ctx, group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                )
            )
            continue
        try:
            description = await ctx.run(_described, ctx, group_id)
        except KafkaError as exc:
            described.append(_describe_error(ctx, group_id, error_code(exc), error_message(exc)))
            continue
        if description is None:
            described.append(
                _describe_error(ctx, group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            )
        else:
            described.append(description)
    return ctx.respond(throttle_time=0, groups=tuple(described))


def _described(ctx: RequestContext, group_id: str) -> Any:
    """The group's description, or None when no consumer group of this id exists. Store thread."""
    description = consumer_group(ctx.broker, group_id)
    if description is None:
        return None
    return _group_answer(ctx, description)


def _group_answer(ctx: RequestContext, d: GroupDescription) -> Any:
    members = tuple(
        ctx.make(
            "Member",
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=None,
            member_epoch=m.member_epoch if m.member_epoch is not None else 0,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.topics,
            subscribed_topic_regex=None,
            assignment=ctx.make("Assignment", topic_partitions=_by_topic_id(ctx, "TopicPartitions", m.assignment)),
            target_assignment=ctx.make("Assignment", topic_partitions=_by_topic_id(ctx, "TopicPartitions", m.target)),
            member_type=MEMBER_TYPE_CONSUMER,
        )
        for m in d.members
    )
    epoch = d.group_epoch if d.group_epoch is not None else 0
    return ctx.make(
        "DescribedGroup",
        error_code=ErrorCode.none,
        error_message=None,
        group_id=d.group_id,
        group_state=d.state.value,
        group_epoch=epoch,
        assignment_epoch=d.assignment_epoch if d.assignment_epoch is not None else epoch,
        assignor_name=d.assignor or "uniform",
        members=members,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _describe_error(ctx: RequestContext, group_id: str, code: int, message: str) -> Any:
    return ctx.make(
        "DescribedGroup",
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="Dead",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=(),
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
