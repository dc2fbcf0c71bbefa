"""The classic group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and the admin view of every group
(ListGroups, DescribeGroups, DeleteGroups).

A group id names one of three things here, and the server keeps them apart as Kafka 4 does:

* a **classic group**: run by the wire's classic protocol in this server's memory
  (`txlog.server.classic_group_coordinator`);
* a **consumer group**: KIP-848's protocol, run by txlog's group coordinator on its
  `__consumer_offsets` record (embedded consumers, ConsumerGroupHeartbeat over the wire);
* a group with **offsets only** (committed by an admin or by consumers using assign()),
  which Kafka lists as an Empty classic group.

A classic JoinGroup for an id that has live consumer-group members is refused with
INCONSISTENT_GROUP_PROTOCOL (Kafka's answer when it cannot mix a classic member into the
group; txlog cannot, its embedded members would never see the classic one), and the
KIP-848 handlers refuse ids with live classic members with GROUP_ID_NOT_FOUND
(txlog/server/handlers/consumer_groups.py).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage.errors import KafkaError
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from txlog.coordinator.group_coordinator import GroupDescription, GroupType, group_from_record
from txlog.errors import GroupIdNotFoundError
from txlog.server.apis import api
from txlog.server.broker import Broker
from txlog.server.classic_group_coordinator import ClassicGroup, ClassicGroupCoordinator, JoinRequest
from txlog.server.errors import error_code, error_message
from txlog.server.request_context import RequestContext

CONSUMER_PROTOCOL_TYPE = "consumer"
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

_COORDINATORS: dict[int, ClassicGroupCoordinator] = {}


def classic_groups(broker: Broker) -> ClassicGroupCoordinator:
    """The server's classic groups (one coordinator per Broker, made on first use, on the event loop)."""
    coordinator = _COORDINATORS.get(id(broker))
    if coordinator is None:
        coordinator = ClassicGroupCoordinator(
            initial_delay_ms=broker.config_int("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=broker.config_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=broker.config_int("group.max.session.timeout.ms"),
        )
        _COORDINATORS[id(broker)] = coordinator
    return coordinator


def consumer_group(broker: Broker, group_id: str) -> GroupDescription | None:
    """The KIP-848 group txlog's coordinator runs under this id (None: no membership record). Store thread."""
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC):
        return None  # nothing ever joined or committed; a look does not create the topic
    return broker.transport.group_coordinator.describe(group_id)


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]  # Kafka shows the client's address with a leading '/'


# ---- JoinGroup ----------------------------------------------------------------------------------------


@api(11, 0, 9)
async def join_group(ctx: RequestContext, request: Any) -> Any:
    if not request.group_id:
        return _join_error(ctx, ErrorCode.invalid_group_id, request.member_id)
    try:
        rival = await ctx.run(consumer_group, ctx.broker, request.group_id)
    except KafkaError as exc:
        return _join_error(ctx, error_code(exc), request.member_id)
    if rival is not None and rival.members:
        return _join_error(ctx, ErrorCode.inconsistent_group_protocol, request.member_id)
    session = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)  # v1+; before that the session timeout bounds it
    join = JoinRequest(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.protocol_type,
        tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session,
        int(rebalance.total_seconds() * 1000) if rebalance is not None else session,
        ctx.header.client_id or "",
        _client_host(ctx),
        ctx.version >= 4,
    )
    result = await classic_groups(ctx.broker).join(join)
    members = tuple(
        ctx.make("JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=meta)
        for m, i, meta in result.members
    )
    return ctx.respond(
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=_protocol_name(ctx, result.protocol_name, nullable_from=7),
        leader=result.leader,
        skip_assignment=False,
        member_id=result.member_id,
        members=members,
    )


def _join_error(ctx: RequestContext, code: int, member_id: str) -> Any:
    return ctx.respond(
        throttle_time=0,
        error_code=code,
        generation_id=-1,
        protocol_type=None,
        protocol_name=_protocol_name(ctx, None, nullable_from=7),
        leader="",
        skip_assignment=False,
        member_id=member_id,
        members=(),
    )


def _protocol_name(ctx: RequestContext, name: str | None, *, nullable_from: int) -> str | None:
    """Older versions carry the protocol name as a non-nullable string: "" stands for none there."""
    if name is None and ctx.version < nullable_from:
        return ""
    return name


# ---- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------------


@api(14, 0, 5)
async def sync_group(ctx: RequestContext, request: Any) -> Any:
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    result = await classic_groups(ctx.broker).sync(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        assignments,
    )
    return ctx.respond(
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@api(12, 0, 4)
async def heartbeat(ctx: RequestContext, request: Any) -> Any:
    code = classic_groups(ctx.broker).heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), request.generation_id
    )
    return ctx.respond(throttle_time=0, error_code=code)


@api(13, 0, 5)
async def leave_group(ctx: RequestContext, request: Any) -> Any:
    coordinator = classic_groups(ctx.broker)
    if ctx.version < 3:
        (code,) = coordinator.leave(request.group_id, [(request.member_id, None)])
        return ctx.respond(throttle_time=0, error_code=code)
    wanted = [(m.member_id, m.group_instance_id) for m in request.members]
    codes = coordinator.leave(request.group_id, wanted)
    members = tuple(
        ctx.make("MemberResponse", member_id=member_id, group_instance_id=instance_id, error_code=code)
        for (member_id, instance_id), code in zip(wanted, codes, strict=True)
    )
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, members=members)


# ---- ListGroups ---------------------------------------------------------------------------------------


@api(16, 0, 5)
async def list_groups(ctx: RequestContext, request: Any) -> Any:
    classic = classic_groups(ctx.broker)
    listed: dict[str, tuple[str, str, str]] = {
        g.group_id: (g.protocol_type or "", g.state.value, GroupType.CLASSIC.value.lower())
        for g in classic.groups.values()
    }
    try:
        for name, row in (await ctx.run(_stored_groups, ctx.broker)).items():
            listed.setdefault(name, row)
    except KafkaError as exc:
        return ctx.respond(throttle_time=0, error_code=error_code(exc), groups=())
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = tuple(
        ctx.make("ListedGroup", group_id=name, protocol_type=ptype, group_state=state, group_type=gtype)
        for name, (ptype, state, gtype) in sorted(listed.items())
        if (not states or state.lower() in states) and (not types or gtype in types)
    )
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, groups=groups)


def _stored_groups(broker: Broker) -> dict[str, tuple[str, str, str]]:
    """(protocol type, state, type) of every group `__consumer_offsets` knows. Store thread."""
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC):
        return {}
    coordinator = broker.transport.group_coordinator
    with_record = set(coordinator.offsets.all_group_metadata())
    out = {}
    for name, listing in coordinator.list_group_listings().items():
        if listing.group_type is GroupType.CONSUMER or name in with_record:
            out[name] = (CONSUMER_PROTOCOL_TYPE, listing.state.value, "consumer")
        else:
            out[name] = ("", "Empty", "classic")  # offsets only: Kafka's Empty classic group
    return out


# ---- DescribeGroups -----------------------------------------------------------------------------------


@api(15, 0, 6)
async def describe_groups(ctx: RequestContext, request: Any) -> Any:
    described = []
    for group_id in request.groups:
        group = classic_groups(ctx.broker).groups.get(group_id)
        if group is not None:
            described.append(_described_classic(ctx, group))
            continue
        try:
            rival = await ctx.run(consumer_group, ctx.broker, group_id)
        except KafkaError as exc:
            described.append(_described(ctx, group_id, "Dead", error_code(exc), error_message(exc)))
            continue
        if rival is not None and (rival.group_type is GroupType.CONSUMER or rival.members):
            message = f"Group {group_id} is not a classic group."
            described.append(_described(ctx, group_id, "Dead", ErrorCode.group_id_not_found, message))
        elif rival is not None:
            described.append(_described(ctx, group_id, "Empty", ErrorCode.none, None, CONSUMER_PROTOCOL_TYPE))
        else:
            # Kafka answers an unknown group as Dead (no error), or Empty when it has offsets
            known = await ctx.run(_has_offsets, ctx.broker, group_id)
            described.append(_described(ctx, group_id, "Empty" if known else "Dead", ErrorCode.none, None))
    return ctx.respond(throttle_time=0, groups=tuple(described))


def _has_offsets(broker: Broker, group_id: str) -> bool:
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC) or not group_id:
        return False
    return group_id in broker.transport.group_offsets.list_groups()


def _described_classic(ctx: RequestContext, group: ClassicGroup) -> Any:
    members = tuple(
        ctx.make(
            "DescribedGroupMember",
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata(group.protocol_name),
            member_assignment=m.assignment,
        )
        for m in group.members.values()
    )
    return _described(
        ctx,
        group.group_id,
        group.state.value,
        ErrorCode.none,
        None,
        group.protocol_type or "",
        group.protocol_name,
        members,
    )


def _described(
    ctx: RequestContext,
    group_id: str,
    state: str,
    code: int,
    message: str | None,
    protocol_type: str = "",
    protocol: str | None = None,
    members: tuple[Any, ...] = (),
) -> Any:
    return ctx.make(
        "DescribedGroup",
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state=state,
        protocol_type=protocol_type,
        protocol_data=protocol or "",
        members=members,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


# ---- DeleteGroups -------------------------------------------------------------------------------------


@api(42, 0, 2)
async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    results = []
    for group_id in request.groups_names:
        classic: int | None = classic_groups(ctx.broker).delete(group_id)
        code: int | None = classic
        if classic is None or classic == ErrorCode.none:
            try:
                code = await ctx.run(_delete_stored_group, ctx.broker, group_id)
            except KafkaError as exc:
                code = error_code(exc)
            if classic == ErrorCode.none and code == ErrorCode.group_id_not_found:
                code = ErrorCode.none  # an Empty classic group with no offsets: its membership was all there was
        results.append(ctx.make("DeletableGroupResult", group_id=group_id, error_code=code))
    return ctx.respond(throttle_time=0, results=tuple(results))


def _delete_stored_group(broker: Broker, group_id: str) -> int:
    """Tombstone the group's offsets and membership record; NON_EMPTY_GROUP while it has live members."""
    if not group_id:
        return ErrorCode.invalid_group_id
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC):
        return ErrorCode.group_id_not_found
    coordinator = broker.transport.group_coordinator
    offsets = coordinator.offsets
    if group_id not in offsets.list_groups():
        return ErrorCode.group_id_not_found
    description = coordinator.describe(group_id)  # expires dead members first
    if description is not None and (description.members or description.group_type is GroupType.CONSUMER):
        if description.members:
            return ErrorCode.non_empty_group
        if description.group_type is GroupType.CONSUMER:  # a broker's KIP-848 records: not txlog's to delete
            raise GroupIdNotFoundError(f"Group {group_id} is not a group txlog can delete")
    committed = offsets.committed(group_id)
    if committed:
        offsets.delete_offsets(group_id, committed)
    with offsets.locked(group_id):
        record = offsets.group_metadata(group_id)
        if record is not None:
            if group_from_record(group_id, record).members:
                return ErrorCode.non_empty_group  # a member joined meanwhile
            offsets.append_group_metadata(group_id, None)
    return ErrorCode.none
