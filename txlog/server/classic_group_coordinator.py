"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), held in the server's memory.

The classic protocol is spoken only over the wire (txlog's embedded consumers run KIP-848,
`txlog.coordinator.group_coordinator`), so its state lives in the one process that speaks it:
this object, on the server's event loop. Nothing here touches the store; committed offsets
go to `__consumer_offsets` through the transport (txlog/server/handlers/offsets.py), fenced
by `check_commit`.

The state machine is Kafka's classic one (`ClassicGroupState`):

* Empty -> PreparingRebalance when a member joins. Every known member must send JoinGroup
  again; the rebalance completes when all have (or when the longest rebalance timeout of the
  members has passed: the ones that did not rejoin are removed). A group that was Empty first
  waits `group.initial.rebalance.delay.ms`, extended while new members keep arriving (at most
  up to the rebalance timeout), so a fleet starting together forms one generation.
* Completing the join bumps the generation, picks the protocol every member supports (the one
  most members prefer) and answers each waiting JoinGroup; the leader's answer lists the
  members and their metadata. The group is then CompletingRebalance until the leader's
  SyncGroup brings the assignment, which every member's SyncGroup receives: Stable.
* A member that does not heartbeat within its session timeout is removed, as is one that
  leaves; either starts a new rebalance. Heartbeats during a rebalance are answered
  REBALANCE_IN_PROGRESS so members rejoin.
* Static members (group.instance.id, KIP-345) keep their place across restarts: a join with
  a known instance id replaces the old member id, which is fenced from then on
  (FENCED_INSTANCE_ID).
* JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with a new id (KIP-394);
  the id is pending until that member joins with it, or its session timeout passes.

A server restart loses this state: members get UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION on
their next request and rejoin, as after a broker's coordinator failover (docs/serve.md §6).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from kio.schema.errors import ErrorCode

TICK_S = 0.1  # how often session and rebalance deadlines are checked


class ClassicGroupState(StrEnum):
    """Kafka's states of a classic group, by the names DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata): the leader's only
    message: str | None = None


@dataclass
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat: float
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member ids given out by MEMBER_ID_REQUIRED -> deadline
    rebalance_deadline: float = 0.0
    delay_until: float = 0.0  # the initial rebalance delay of a group that was Empty
    delay_limit: float = 0.0

    def by_instance(self, instance_id: str | None) -> ClassicMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Another member holds `instance_id` now: the caller is a replaced static member."""
        holder = self.by_instance(instance_id)
        return holder is not None and holder.member_id != member_id

    def member_error(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID for a request naming a member the group lacks."""
        if self.fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)


class ClassicGroupCoordinator:
    """Every classic group of one server; call only from the server's event loop."""

    def __init__(
        self,
        *,
        initial_delay_ms: int,
        min_session_timeout_ms: int,
        max_session_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.initial_delay_s = initial_delay_ms / 1000
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self._ticker: asyncio.Task[None] | None = None

    # ---- JoinGroup ----------------------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        """JoinGroup: answered once the rebalance the join takes part in completes (or at once on an error)."""
        self._start_ticker()
        refused = self._check_join(request)
        if refused is not None:
            return refused
        group = self.groups.setdefault(request.group_id, ClassicGroup(request.group_id))
        if request.member_id:
            outcome = self._join_known(group, request)
        else:
            outcome = self._join_new(group, request)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _check_join(self, request: JoinRequest) -> JoinResult | None:
        if not (self.min_session_timeout_ms <= request.session_timeout_ms <= self.max_session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, request.member_id)
        group = self.groups.get(request.group_id)
        if not request.protocols or not request.protocol_type:
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        if group is not None and group.members:
            names = {name for name, _ in request.protocols}
            shared = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
            if request.protocol_type != group.protocol_type or not names & shared:
                return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        return None

    def _join_new(self, group: ClassicGroup, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = f"{request.client_id}-{uuid.uuid4()}"
        if request.instance_id is not None:
            previous = group.by_instance(request.instance_id)
            if previous is not None:
                return self._replace_static(group, previous, member_id, request)
        elif request.require_known_member_id:
            group.pending[member_id] = self._clock() + request.session_timeout_ms / 1000
            return JoinResult(ErrorCode.member_id_required, member_id)
        return self._add_member(group, member_id, request)

    def _join_known(self, group: ClassicGroup, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if request.member_id in group.pending:
            del group.pending[request.member_id]
            return self._add_member(group, request.member_id, request)
        error = group.member_error(request.member_id, request.instance_id)
        if error is not None:
            return JoinResult(error, request.member_id)
        member = group.members[request.member_id]
        changed = member.protocols != request.protocols
        self._refresh(member, request)
        if group.state is ClassicGroupState.PREPARING_REBALANCE:
            return self._await_join(group, member)
        if group.state is ClassicGroupState.COMPLETING_REBALANCE and not changed:
            return self._join_answer(group, member)
        if group.state is ClassicGroupState.STABLE and not changed and member.member_id != group.leader:
            return self._join_answer(group, member)
        waiter = self._await_join(group, member)
        self._prepare_rebalance(group)
        return waiter

    def _add_member(self, group: ClassicGroup, member_id: str, request: JoinRequest) -> asyncio.Future[JoinResult]:
        member = ClassicMember(
            member_id,
            request.instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocols,
            self._clock(),
        )
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        waiter = self._await_join(group, member)
        if group.state is ClassicGroupState.PREPARING_REBALANCE:
            self._extend_initial_delay(group, member)
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return waiter

    def _replace_static(
        self, group: ClassicGroup, previous: ClassicMember, member_id: str, request: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member restarted: it takes its predecessor's place; the old member id is fenced."""
        del group.members[previous.member_id]
        _answer(previous.join_waiter, JoinResult(ErrorCode.fenced_instance_id, previous.member_id))
        _answer(previous.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        was_leader = group.leader == previous.member_id
        member = ClassicMember(
            member_id,
            request.instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocols,
            self._clock(),
            previous.assignment,
        )
        group.members[member_id] = member
        if was_leader:
            group.leader = member_id
        unchanged = previous.protocols == request.protocols
        if group.state is ClassicGroupState.STABLE and unchanged and not was_leader:
            return self._join_answer(group, member)  # no rebalance: it keeps its assignment (KIP-345)
        waiter = self._await_join(group, member)
        if group.state is ClassicGroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return waiter

    def _refresh(self, member: ClassicMember, request: JoinRequest) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        member.last_heartbeat = self._clock()

    def _await_join(self, group: ClassicGroup, member: ClassicMember) -> asyncio.Future[JoinResult]:
        # A second JoinGroup from the same member replaces the first, which is answered as a broker answers it.
        _answer(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        if group.state is ClassicGroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        return waiter

    def _join_answer(self, group: ClassicGroup, member: ClassicMember) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader:
            members = tuple(
                (m.member_id, m.instance_id, m.metadata(group.protocol_name)) for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            members,
        )

    # ---- the rebalance -----------------------------------------------------------------------------

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        now = self._clock()
        if group.state is ClassicGroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                _answer(m.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
                m.sync_waiter = None
        longest = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline = now + longest / 1000
        if group.state is ClassicGroupState.EMPTY and self.initial_delay_s > 0:
            group.delay_until = now + self.initial_delay_s
            group.delay_limit = now + longest / 1000
        else:
            group.delay_until = group.delay_limit = 0.0
        group.state = ClassicGroupState.PREPARING_REBALANCE
        self._maybe_complete_join(group)

    def _extend_initial_delay(self, group: ClassicGroup, member: ClassicMember) -> None:
        """A new member during the initial delay pushes it back (never past the rebalance timeout)."""
        if group.delay_until > self._clock():
            group.delay_until = min(self._clock() + self.initial_delay_s, group.delay_limit)
        group.rebalance_deadline = max(group.rebalance_deadline, self._clock() + member.rebalance_timeout_ms / 1000)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        if group.state is not ClassicGroupState.PREPARING_REBALANCE:
            return
        now = self._clock()
        if now < group.delay_until:
            return
        everyone = not group.pending and all(m.join_waiter is not None for m in group.members.values())
        if everyone or now >= group.rebalance_deadline:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        for member in list(group.members.values()):
            if member.join_waiter is None:  # did not rejoin within the rebalance timeout
                del group.members[member.member_id]
        group.pending.clear()
        group.generation += 1
        if not group.members:
            group.state = ClassicGroupState.EMPTY
            group.protocol_name = group.leader = None
            return
        group.protocol_name = _select_protocol(group.members.values())
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = ClassicGroupState.COMPLETING_REBALANCE
        now = self._clock()
        for member in group.members.values():
            member.last_heartbeat = now
            waiter, member.join_waiter = member.join_waiter, None
            _answer(waiter, self._join_answer(group, member))

    # ---- SyncGroup ---------------------------------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup: the leader brings the assignment; every member waits for its share."""
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        error = group.member_error(member_id, instance_id)
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and generation != group.generation:
            error = ErrorCode.illegal_generation
        if error is None and group.state is ClassicGroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return SyncResult(error)
        member = group.members[member_id]
        member.last_heartbeat = self._clock()
        if group.state is ClassicGroupState.STABLE:
            return self._sync_answer(group, member)
        _answer(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = asyncio.get_running_loop().create_future()
        waiter = member.sync_waiter
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = ClassicGroupState.STABLE
            for m in group.members.values():
                sync_waiter, m.sync_waiter = m.sync_waiter, None
                _answer(sync_waiter, self._sync_answer(group, m))
        return await waiter

    @staticmethod
    def _sync_answer(group: ClassicGroup, member: ClassicMember) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name)

    # ---- Heartbeat, LeaveGroup ---------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation:
            return ErrorCode.illegal_generation
        group.members[member_id].last_heartbeat = self._clock()
        if group.state is ClassicGroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup for each (member id, instance id): a static member may leave by instance id alone."""
        group = self.groups.get(group_id)
        errors = []
        for member_id, instance_id in members:
            if group is None:
                errors.append(ErrorCode.unknown_member_id)
                continue
            holder = group.by_instance(instance_id)
            if instance_id is not None and holder is None:
                errors.append(ErrorCode.unknown_member_id)
            elif holder is not None and member_id and holder.member_id != member_id:
                errors.append(ErrorCode.fenced_instance_id)
            elif holder is None and member_id not in group.members:
                errors.append(ErrorCode.unknown_member_id)
            else:
                self._remove(group, holder.member_id if holder else member_id)
                errors.append(ErrorCode.none)
        return errors

    def _remove(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        _answer(member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member_id))
        _answer(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
        if group.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)

    # ---- offsets and the admin view ----------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int, *, transactional: bool
    ) -> ErrorCode | None:
        """Kafka's classic offset-commit validation; None if the server runs no classic group of this id.

        A commit without a generation (-1) is an admin's or a manual assign()'s: allowed
        while the group is Empty. A transactional one (KIP-447) checks only what it names.
        """
        group = self.groups.get(group_id)
        if group is None or (not group.members and group.state is ClassicGroupState.EMPTY and generation < 0):
            return None
        if transactional:
            if member_id and group.member_error(member_id, instance_id) is not None:
                return group.member_error(member_id, instance_id)
            if generation >= 0 and generation != group.generation:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if group.state is ClassicGroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        error = group.member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation:
            return ErrorCode.illegal_generation
        group.members[member_id].last_heartbeat = self._clock()
        return ErrorCode.none

    def live(self, group_id: str) -> ClassicGroup | None:
        """The classic group of this id with members (None when it has none: its id is free)."""
        group = self.groups.get(group_id)
        return group if group is not None and group.members else None

    def delete(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups' membership side: NON_EMPTY_GROUP while it has members; None if there is none."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members or group.state is not ClassicGroupState.EMPTY:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    # ---- deadlines ---------------------------------------------------------------------------------

    def _start_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        """Expire pending member ids and silent members; complete rebalances whose time is up.

        A group left Empty stays (its generation and protocol type, as a broker keeps them) until
        DeleteGroups removes it or the server stops."""
        now = self._clock()
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if now >= deadline:
                    del group.pending[member_id]
            for member in list(group.members.values()):
                # a member waiting for its JoinGroup answer is not expected to heartbeat meanwhile
                silent = now - member.last_heartbeat > member.session_timeout_ms / 1000
                if member.join_waiter is None and silent and member.member_id in group.members:
                    self._remove(group, member.member_id)
            self._maybe_complete_join(group)


def _select_protocol(members: Iterable[ClassicMember]) -> str:
    """The protocol every member supports that most members list first among those (Kafka's vote)."""
    listed = list(members)
    shared = set.intersection(*({name for name, _ in m.protocols} for m in listed))
    votes = Counter(next(name for name, _ in m.protocols if name in shared) for m in listed)
    best = max(votes.values())
    # ties: the first in the first member's preference order, so the choice is stable
    return next(name for name, _ in listed[0].protocols if votes.get(name) == best)


def _answer(waiter: asyncio.Future | None, result: object) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(result)
