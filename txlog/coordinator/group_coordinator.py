"""The consumer group coordinator: membership, epochs, assignment and commit fencing, with no daemon.

The model is KIP-848's (Kafka's "consumer" rebalance protocol), run by whichever process
next touches the group, under the lock of the group's `__consumer_offsets` partition:

* a membership or subscription change (join, leave, expiry) or a change of the
  subscribed topics' partitions bumps the **group epoch** and the assignor computes a
  new target assignment for every member (sticky: members keep what they can);
* each member has a **member epoch**, moved only by that member's own heartbeat. A
  member whose target drops partitions it owns keeps its epoch until it has revoked
  them (its next heartbeat says what it still owns); only then does it move to the
  group epoch. A partition goes to its new owner only once no other member owns it:
  after its owner revoked it, left, or was expired;
* offset commits, plain and transactional, carry the member id and member epoch and
  are checked under the same lock: an unknown or expired member, or an old epoch, is
  refused (UnknownMemberId, StaleMemberEpoch, FencedInstanceId), so a member that was
  paused past its session and replaced can never move the group's offsets.

Liveness lives outside the log (`txlog.member_session`): a held lock proves a live
process, a dead one is expired at once, a stalled one after `session.timeout.ms` (or
`max.poll.interval.ms` without a poll). Heartbeats that change nothing write nothing.

Persistence uses Kafka's classic GroupMetadata record (see `txlog.schemas.group_metadata` for
why and how KIP-848's state is carried in its consumer-protocol fields): the group
epoch is the record's generation, each member's subscription carries its topics, the
partitions it owns and its member epoch (the subscription's generationId), and its
assignment is its target. One record holds the whole group, so one append moves the
group from one consistent state to the next.

Describing also reads what a Kafka broker wrote (a Kafka log directory, read-only): its
classic groups from the same record, and its consumer-protocol groups from KIP-848's own
record family (`txlog.schemas.consumer_group_records`), described as Kafka's
ConsumerGroupDescribe does (`describe_consumer_group_records`). In a Kafka log directory
the members a record names are the broker's last word: there are no txlog member
sessions there, so they are shown, not expired.

txlog never runs a group that has broker-written KIP-848 records: joining, committing
to or resetting such a group is refused with GroupIdNotFoundError ("not a classic
group", Kafka's own answer to a classic request for a consumer group). Taking it over as
Empty would write a classic record beside the broker's records, and a broker that later
loaded the partition would meet one group in two incompatible forms; refusing keeps
both the broker's state and txlog's unambiguous.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NoReturn

import txlog.member_session as member_session
from storage.errors import CorruptRecordError, InconsistentTopicIdError
from storage.store import Store
from txlog.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, MemberSpec
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from txlog.requests import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberRef,
    Partitions,
)
from txlog.schemas import consumer_group_records as cgr
from txlog.schemas.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataValue,
    MemberMetadata,
    decode_assignment,
    decode_group_metadata_value,
    decode_subscription,
    encode_assignment,
    encode_group_metadata_value,
    encode_subscription,
    flatten,
    topic_partitions,
)
from txlog.schemas.schema_types import uuid_text
from txlog.topic_partition import TopicPartition


class GroupState(StrEnum):
    """Kafka's states of a consumer group (ConsumerGroup.ConsumerGroupState).

    Each value is Kafka's own name, so the enum is the one table of them; a state
    compares equal to its name.
    """

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"
    UNKNOWN = "Unknown"  # what the tools print for a group whose record cannot be read

    @property
    def kafka_name(self) -> str:
        """The name kafka-consumer-groups.sh prints (Empty, Stable, ...)."""
        return self.value


@dataclass
class Member:
    """One member as the coordinator keeps it (one MemberMetadata of the group record)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    epoch: int
    owned: Partitions = frozenset()  # what the member holds now (incl. partitions it has yet to revoke)
    target: Partitions = frozenset()  # what the assignor wants it to hold

    @property
    def revoking(self) -> Partitions:
        return self.owned - self.target

    def stable(self, generation: int) -> bool:
        return self.epoch == generation and self.owned == self.target


@dataclass
class Group:
    """A consumer group as replayed from its last GroupMetadata record."""

    group_id: str
    generation: int = 0
    # None: a Kafka broker's classic group record without a protocol (an Empty group); the first
    # member to join gives it the default, since from then on this coordinator runs it
    assignor: str | None = DEFAULT_ASSIGNOR
    members: dict[str, Member] = field(default_factory=dict)
    state_timestamp: int = -1
    rebalance: bool = False  # set by a change that needs a new target assignment and group epoch
    assigned: bool = False  # the assignor has run on this state (partition counts are read then)

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if all(m.stable(self.generation) for m in self.members.values()):
            return GroupState.STABLE
        return GroupState.RECONCILING

    def owner_of(self, tp: TopicPartition, *, other_than: str) -> str | None:
        for m in self.members.values():
            if m.member_id != other_than and tp in m.owned:
                return m.member_id
        return None

    def by_instance(self, instance_id: str) -> Member | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def fingerprint(self) -> tuple:
        """Everything the record stores but the timestamp: equal means nothing to write."""
        members = tuple(
            sorted(
                (
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.topics,
                    m.epoch,
                    tuple(sorted(m.owned)),
                    tuple(sorted(m.target)),
                )
                for m in self.members.values()
            )
        )
        return self.generation, self.assignor, members


def group_from_record(group_id: str, data: bytes | None) -> Group:
    """Decode a group record (ours or one a Kafka broker wrote) into the coordinator's model."""
    decoded = decode_group_metadata_value(data) if data is not None else None
    if decoded is None:
        return Group(group_id)
    _, value = decoded
    group = Group(group_id, value.generation, value.protocol, {}, value.current_state_timestamp)
    if value.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return group  # e.g. a Kafka Connect group: its members' bytes are not the consumer protocol
    for m in value.members:
        _, sub = decode_subscription(m.subscription) if m.subscription else (0, ConsumerSubscription(()))
        _, assignment = decode_assignment(m.assignment) if m.assignment else (0, ConsumerAssignment(()))
        group.members[m.member_id] = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout,
            m.rebalance_timeout,
            tuple(sorted(sub.topics)),
            sub.generation_id,
            _frozen(flatten(sub.owned_partitions)),
            _frozen(flatten(assignment.assigned_partitions)),
        )
    return group


def group_to_record(group: Group, now: int) -> GroupMetadataValue:
    members = tuple(
        MemberMetadata(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            encode_subscription(ConsumerSubscription(m.topics, None, topic_partitions(m.owned), m.epoch)),
            encode_assignment(ConsumerAssignment(topic_partitions(m.target))),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    leader = members[0].member_id if members else None
    return GroupMetadataValue(CONSUMER_PROTOCOL_TYPE, group.generation, group.assignor, leader, now, members)


def _frozen(pairs: Iterable[tuple[str, int]]) -> Partitions:
    return frozenset(TopicPartition(t, p) for t, p in pairs)


class GroupType(StrEnum):
    """Kafka's group types (org.apache.kafka.common.GroupType), as `--list --type` prints them.

    CLASSIC is a group stored in the classic GroupMetadata record: a broker's classic-protocol
    group and every group txlog runs (see the module docstring); CONSUMER is a broker's
    KIP-848 group, stored in the consumer-group records.
    """

    CLASSIC = "Classic"
    CONSUMER = "Consumer"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int | None  # None for a broker's classic member, which has no epoch
    assignment: tuple[TopicPartition, ...]  # owned now
    target: tuple[TopicPartition, ...]  # empty where there is no target (a broker's classic member)
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    group_epoch: int | None  # None for a broker's classic group: Kafka reports no epochs for those
    assignor: str | None  # None for a Kafka classic group recorded Empty, which has no protocol
    members: tuple[MemberDescription, ...]
    group_type: GroupType = GroupType.CLASSIC
    assignment_epoch: int | None = None  # the target assignment's epoch; txlog's groups: the group epoch


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group of `groups list`: its state and type."""

    state: GroupState
    group_type: GroupType


class GroupCoordinator:
    """Runs the coordinator's side of every group operation in the calling process."""

    def __init__(self, store: Store, offsets: GroupOffsets | None = None, *, clock: Callable[[], int] | None = None):
        self._store = store
        self._offsets = offsets or GroupOffsets(store, clock=clock)
        self._clock = clock or _wall_ms
        self._host = socket.gethostname()

    @property
    def offsets(self) -> GroupOffsets:
        return self._offsets

    # ---- the critical section ---------------------------------------------------------------------

    @contextmanager
    def _session(self, group_id: str, requester: str | None) -> Iterator[Group]:
        """Lock the group, load it, do the pending coordinator work, write the result if it changed.

        The body may raise (a refused request); the coordinator's own work (expiring
        dead members, a new target) is written all the same, before the error leaves.
        """
        with self._offsets.locked(group_id):
            if self._offsets.consumer_group_records(group_id):
                raise GroupIdNotFoundError(
                    f"Group {group_id} is not a classic group: a Kafka broker stores it in KIP-848's consumer-group "
                    f"records, and txlog runs groups only in the classic record"
                )
            group = group_from_record(group_id, self._offsets.group_metadata(group_id))
            before = group.fingerprint()
            self._expire(group, requester)
            try:
                yield group
            finally:
                if group.rebalance or not group.assigned:
                    self._assign(group)
                if group.fingerprint() != before:
                    value = group_to_record(group, self._clock())
                    self._offsets.append_group_metadata(group_id, encode_group_metadata_value(value))

    def _expire(self, group: Group, requester: str | None, *, tidy: bool = True) -> None:
        """Remove members whose process died (dynamic ones at once) or whose session or poll timed out.

        `tidy` also deletes the session files of dead members (not on a read-only look).
        """
        now = self._clock()
        for member in list(group.members.values()):
            if member.member_id == requester:
                continue  # the request itself proves the member alive
            view = member_session.look(self._store.root, group.group_id, member.member_id)
            if _expired(member, view, now):
                del group.members[member.member_id]
                group.rebalance = True
                if tidy and not view.alive:
                    member_session.remove(self._store.root, group.group_id, member.member_id)

    def _assign(self, group: Group) -> None:
        """Recompute the target assignment; a new one (or a membership change) is a new group epoch."""
        assignor = ASSIGNORS.get(group.assignor or DEFAULT_ASSIGNOR)
        if assignor is None:
            assignor = ASSIGNORS[DEFAULT_ASSIGNOR]
        topics = {t for m in group.members.values() for t in m.topics}
        counts = {t: self._store.partition_count(t) for t in topics if self._store.has_topic(t)}
        specs = {mid: MemberSpec(frozenset(m.topics), m.target) for mid, m in group.members.items()}
        targets = assignor(specs, counts)
        changed = any(frozenset(targets[mid]) != m.target for mid, m in group.members.items())
        if changed or group.rebalance:
            group.generation += 1
            for mid, m in group.members.items():
                m.target = frozenset(targets[mid])
            group.rebalance = False
        group.assigned = True

    # ---- heartbeat: join, stay, leave --------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat: join (epoch 0), acknowledge and reconcile (epoch > 0), or leave (< 0)."""
        if request.assignor is not None and request.assignor not in ASSIGNORS:
            raise UnsupportedAssignorError(
                f"assignor {request.assignor!r} is not one of {', '.join(sorted(ASSIGNORS))}"
            )
        with self._session(request.group_id, request.member_id) as group:
            if request.member_epoch < 0:
                self._leave(group, request)
                return HeartbeatResponse(request.member_id, request.member_epoch, frozenset(), False)
            member = self._join(group, request) if request.member_epoch == JOIN_EPOCH else self._known(group, request)
            self._update(group, member, request)
            self._assign(group)
            return self._reconcile(group, member)

    def _leave(self, group: Group, request: HeartbeatRequest) -> None:
        member = group.members.get(request.member_id)
        if member is None:
            return
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            return  # kept with its partitions until its session times out: a restart gets them back
        del group.members[member.member_id]
        group.rebalance = True

    def _join(self, group: Group, request: HeartbeatRequest) -> Member:
        existing = group.members.pop(request.member_id, None)
        if existing is not None:
            group.rebalance = True  # a fenced member rejoining: it lost what it had
        member = Member(
            request.member_id,
            request.instance_id,
            request.client_id,
            request.client_host or self._host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            (),
            JOIN_EPOCH,
        )
        if request.instance_id is not None:
            previous = group.by_instance(request.instance_id)
            if previous is not None:
                view = member_session.look(self._store.root, group.group_id, previous.member_id)
                if view.alive and not _expired(previous, view, self._clock()):
                    raise UnreleasedInstanceIdError(
                        f"static member '{request.instance_id}' of group '{group.group_id}' is still held by "
                        f"a live member ({previous.member_id})"
                    )
                # A static member's restart takes over its predecessor's place, partitions and epoch:
                # no rebalance, and the predecessor's member id is fenced from now on.
                del group.members[previous.member_id]
                member_session.remove(self._store.root, group.group_id, previous.member_id)
                member = replace(
                    member, topics=previous.topics, epoch=previous.epoch, owned=previous.owned, target=previous.target
                )
                group.members[member.member_id] = member
                return member
        group.members[member.member_id] = member
        group.rebalance = True
        return member

    def _known(self, group: Group, request: HeartbeatRequest) -> Member:
        member = _member_at(
            group, MemberRef(request.member_id, request.member_epoch, request.instance_id), FencedMemberEpochError
        )
        if request.owned is not None:
            member.owned = member.owned & request.owned  # a member only ever gives partitions back
        return member

    def _update(self, group: Group, member: Member, request: HeartbeatRequest) -> None:
        if request.topics is not None:
            topics = tuple(sorted(set(request.topics)))
            if topics != member.topics:
                member.topics = topics
                group.rebalance = True
        if group.assignor is None:
            group.assignor = DEFAULT_ASSIGNOR
        if request.assignor is not None and request.assignor != group.assignor:
            group.assignor = request.assignor
            group.rebalance = True
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms

    def _reconcile(self, group: Group, member: Member) -> HeartbeatResponse:
        """KIP-848's reconciliation for the member that asked: revoke first, then advance and take."""
        if member.revoking:
            return HeartbeatResponse(member.member_id, member.epoch, member.owned & member.target, True)
        free = {tp for tp in member.target - member.owned if group.owner_of(tp, other_than=member.member_id) is None}
        member.owned = member.owned | free
        member.epoch = group.generation
        return HeartbeatResponse(member.member_id, member.epoch, member.owned, member.owned != member.target)

    # ---- commits -----------------------------------------------------------------------------------

    @contextmanager
    def commit_fence(self, group_id: str, member: MemberRef | None) -> Iterator[None]:
        """Hold the group while an offset commit is checked and appended (plain or transactional).

        `member` None is a commit from outside group management (assign(), an admin
        tool, a group id alone): Kafka accepts those only while the group has no members.
        """
        with self._session(group_id, member.member_id if member else None) as group:
            _check_commit(group, member)
            yield

    def commit_offsets(self, group_id: str, offsets, member: MemberRef | None) -> None:
        """A plain offset commit, fenced by membership (OffsetCommit with member id and epoch)."""
        with self.commit_fence(group_id, member):
            self._offsets.commit(group_id, offsets)

    # ---- looking ------------------------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group as the coordinator sees it, None if it has no membership record.

        On a writable store this is a coordinator pass (expired members are removed and
        the result written, as any process touching the group does); on a read-only one
        expired members are only left out of the answer. In a Kafka log directory the
        broker's records are described as they are (see the module docstring).
        """
        consumer = self._offsets.consumer_group_records(group_id)
        if consumer:
            return describe_consumer_group_records(group_id, consumer, self._topic_names())
        record = self._offsets.group_metadata(group_id)
        if record is None:
            return None
        if self._store.kafka_layout:
            return _broker_classic_description(group_id, record)
        if self._store.read_only:
            group = group_from_record(group_id, record)
            self._expire(group, None, tidy=False)
        else:
            with self._session(group_id, None) as group:
                pass
        return _description(group)

    def list_groups(self) -> dict[str, GroupState]:
        """Every group known to `__consumer_offsets` with its state (see `list_group_listings`)."""
        return {name: listing.state for name, listing in self.list_group_listings().items()}

    def list_group_listings(self) -> dict[str, GroupListing]:
        """Every group known to `__consumer_offsets` with its state and type; listing writes nothing,
        so expired members are only left out of the state, not removed."""
        records = self._offsets.all_group_metadata()
        out = {}
        for name in self._offsets.list_groups():
            consumer = self._offsets.consumer_group_records(name)
            try:
                if consumer:
                    state = describe_consumer_group_records(name, consumer, {}).state
                    out[name] = GroupListing(state, GroupType.CONSUMER)
                    continue
                if self._store.kafka_layout:
                    state = _broker_classic_description(name, records.get(name)).state
                    out[name] = GroupListing(state, GroupType.CLASSIC)
                    continue
                group = group_from_record(name, records.get(name))
            except CorruptRecordError:
                # a damaged record (a foreign log dir): `describe` names the damage
                out[name] = GroupListing(GroupState.UNKNOWN, GroupType.CONSUMER if consumer else GroupType.CLASSIC)
                continue
            self._expire(group, None, tidy=False)
            out[name] = GroupListing(group.state, GroupType.CLASSIC)
        return out

    def _topic_names(self) -> dict[str, str]:
        """Topic id (Kafka's Uuid text) -> name, for the topics of a Kafka log directory that record one.

        A topic whose partitions disagree on their id is left out (its partitions then show as
        unknown topic ids, which a describe drops, as Kafka drops ids its metadata lacks).
        """
        names = {}
        for topic in self._store.list_topics():
            try:
                topic_id = self._store.topic_id(topic)
            except InconsistentTopicIdError:
                continue
            if topic_id is not None:
                names[topic_id] = topic
        return names


def _description(group: Group) -> GroupDescription:
    members = tuple(
        MemberDescription(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.epoch,
            tuple(sorted(m.owned)),
            tuple(sorted(m.target)),
            m.topics,
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    return GroupDescription(
        group.group_id, group.state, group.generation, group.assignor, members, GroupType.CLASSIC, group.generation
    )


def _broker_classic_description(group_id: str, record: bytes | None) -> GroupDescription:
    """A broker's classic group as Kafka's DescribeGroups reports it after loading the record.

    A broker writes the record when a rebalance completes (members, Stable) or the group
    empties, and loads a record with members as Stable; each member's assignment is its
    consumer-protocol assignment. Classic groups have no epochs and no target assignment.
    """
    decoded = decode_group_metadata_value(record) if record is not None else None
    if decoded is None:
        return GroupDescription(group_id, GroupState.EMPTY, None, None, ())
    _, value = decoded
    members = []
    for m in sorted(value.members, key=lambda m: m.member_id):
        assigned: Iterable[tuple[str, int]] = ()
        topics: tuple[str, ...] = ()
        if value.protocol_type == CONSUMER_PROTOCOL_TYPE:
            if m.assignment:
                assigned = flatten(decode_assignment(m.assignment)[1].assigned_partitions)
            if m.subscription:
                topics = tuple(sorted(decode_subscription(m.subscription)[1].topics))
        owned = tuple(sorted(_frozen(assigned)))
        members.append(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, None, owned, (), topics)
        )
    state = GroupState.STABLE if members else GroupState.EMPTY
    return GroupDescription(group_id, state, None, value.protocol, tuple(members))


# The assignor a broker names for a consumer-protocol group whose members name none
# (group.consumer.assignors' first entry, Kafka's default).
BROKER_DEFAULT_ASSIGNOR = "uniform"


def describe_consumer_group_records(
    group_id: str, records: dict[tuple[int, str], bytes], topic_names: dict[str, str]
) -> GroupDescription:
    """A broker's KIP-848 group, from its records, as Kafka's ConsumerGroupDescribe reports it.

    `records` maps (record type, member id or "") to the last value (GroupOffsets'
    `consumer_group_records`), `topic_names` topic ids (Uuid text) to names: partitions of
    an id not in it are dropped, as the broker drops ids its metadata does not know. The
    state follows ConsumerGroup.maybeUpdateGroupState: Empty without members, Assigning
    while the group epoch is ahead of the target assignment's, Reconciling while a member
    is not stable at the assignment epoch, else Stable. The assignor is the one most
    members ask for (ties: the first by name), else the broker's default.
    """
    group_epoch, assignment_epoch = 0, 0
    metadata: dict[str, cgr.MemberMetadataValue] = {}
    current: dict[str, cgr.CurrentMemberAssignmentValue] = {}
    targets: dict[str, cgr.TargetAssignmentMemberValue] = {}
    for (record_type, member), data in records.items():
        value = cgr.decode_value(record_type, data)
        if isinstance(value, cgr.GroupMetadataValue):
            group_epoch = value.epoch
        elif isinstance(value, cgr.TargetAssignmentMetadataValue):
            assignment_epoch = value.assignment_epoch
        elif isinstance(value, cgr.MemberMetadataValue):
            metadata[member] = value
        elif isinstance(value, cgr.CurrentMemberAssignmentValue):
            current[member] = value
        elif isinstance(value, cgr.TargetAssignmentMemberValue):
            targets[member] = value
    members = []
    reconciled = True
    for member_id in sorted(set(metadata) | set(current)):  # either record makes a member, as in Kafka's replay
        meta = metadata.get(member_id)
        now = current.get(member_id)
        epoch = now.member_epoch if now else 0
        state = now.state if now else cgr.MEMBER_STATE_STABLE
        reconciled = reconciled and state == cgr.MEMBER_STATE_STABLE and epoch == assignment_epoch
        target = targets.get(member_id)
        members.append(
            MemberDescription(
                member_id,
                meta.instance_id if meta else None,
                meta.client_id if meta else "",
                meta.client_host if meta else "",
                epoch,
                _named(now.assigned if now else (), topic_names),
                _named(target.partitions if target else (), topic_names),
                tuple(sorted(meta.subscribed_topics)) if meta else (),
            )
        )
    if not members:
        state_ = GroupState.EMPTY
    elif group_epoch > assignment_epoch:
        state_ = GroupState.ASSIGNING
    else:
        state_ = GroupState.STABLE if reconciled else GroupState.RECONCILING
    asked = [m.server_assignor for m in metadata.values() if m.server_assignor is not None]
    assignor = min(set(asked), key=lambda a: (-asked.count(a), a)) if asked else BROKER_DEFAULT_ASSIGNOR
    return GroupDescription(
        group_id, state_, group_epoch, assignor, tuple(members), GroupType.CONSUMER, assignment_epoch
    )


def _named(partitions: cgr.TopicIdPartitions, topic_names: dict[str, str]) -> tuple[TopicPartition, ...]:
    found: list[TopicPartition] = []
    for topic in partitions:
        name = topic_names.get(uuid_text(topic.topic_id))
        if name is not None:
            found.extend(TopicPartition(name, p) for p in topic.partitions)
    return tuple(sorted(found))


def _expired(member: Member, view: member_session.SessionView, now: int) -> bool:
    if not view.exists:
        return True  # no session at all: a member of a copied store, or one whose process is long gone
    if not view.alive and member.instance_id is None:
        return True  # the process died: a dynamic member is gone at once
    if now - view.heartbeat_ms > member.session_timeout_ms:
        return True
    return view.alive and now - view.poll_ms > member.rebalance_timeout_ms


def _refuse_unknown(group: Group, member_id: str, instance_id: str | None) -> NoReturn:
    if instance_id is not None and group.by_instance(instance_id) is not None:
        raise FencedInstanceIdError(
            f"static member '{instance_id}' of group '{group.group_id}' was taken over by another instance"
        )
    raise UnknownMemberIdError(f"member {member_id} is not (or no longer) in group '{group.group_id}'")


def _check_commit(group: Group, member: MemberRef | None) -> None:
    """KIP-848's offset-commit validation, done under the group's lock."""
    if member is None or not member.member_id:
        if group.members:
            raise UnknownMemberIdError(
                f"group '{group.group_id}' has {len(group.members)} live member(s); only a member "
                f"may commit its offsets (pass the consumer's group_metadata())"
            )
        return
    _member_at(group, member, StaleMemberEpochError)


def _member_at(group: Group, ref: MemberRef, mismatch: type[Exception]) -> Member:
    """The member `ref` names, at the epoch it names: a heartbeat's (FencedMemberEpoch) or a commit's
    (StaleMemberEpoch) check; an unknown member is UnknownMemberId (FencedInstanceId if replaced)."""
    member = group.members.get(ref.member_id)
    if member is None:
        _refuse_unknown(group, ref.member_id, ref.instance_id)
    if ref.member_epoch != member.epoch:
        raise mismatch(
            f"member {ref.member_id} of group '{group.group_id}' is at epoch {member.epoch}, not {ref.member_epoch}"
        )
    return member


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000
